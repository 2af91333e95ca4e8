/**
 * Build cache races (issue 7), through the real CLI with a fresh cache folder:
 *  - two `mpsc build` processes of the same spec at the same time both succeed with the same
 *    module, the cache ends with exactly one complete entry and no temporary folders, and a
 *    following `mpsc train` uses it without compiling;
 *  - a build killed (SIGKILL to its whole process group) in the middle of the C++ compile leaves
 *    no entry at a final path (only a temporary folder); the next `mpsc train` rebuilds and trains.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawn } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, runMpsc } from './fixtures/reliability/proc.js';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-cache-race-'));
afterAll(() => fs.rmSync(TMP, { recursive: true, force: true }));

// test_size a multiple of the batch: `mpsc build` and `mpsc train` then compile the same programs
const SPEC = (width: number) => `model race
input x: f32[N, 12]
input label: i32[N]
network {
  logits = x -> linear(${width}) as fc1 -> relu -> linear(3) as fc2
}
loss cross_entropy(logits, label)
metrics accuracy(logits, label)
optimizer adam(lr: 0.01)
train { data: synthetic(train_size: 64, test_size: 16), steps: 2, batch: 8 }
`;

function entries(cache: string): { complete: string[]; temps: string[] } {
  const all = fs.existsSync(cache) ? fs.readdirSync(cache) : [];
  const complete = all.filter((e) => /^[0-9a-f]{64}$/.test(e) && fs.readdirSync(path.join(cache, e)).some((f) => f.endsWith('.node')));
  return { complete, temps: all.filter((e) => e.startsWith('tmp-')) };
}

const envFor = (cache: string) => ({ MPSC_CACHE_DIR: cache, MPSC_CXXFLAGS: '-O1' });

describe('the native build cache under concurrency and kills', () => {
  it('two concurrent builds of one spec: one complete entry, both use it, train reuses it', async () => {
    const cache = path.join(TMP, 'cache-concurrent');
    const spec = path.join(TMP, 'race.model');
    fs.writeFileSync(spec, SPEC(24));
    const [a, b] = await Promise.all([
      runMpsc(['build', spec, '-o', path.join(TMP, 'out-a')], TMP, envFor(cache)),
      runMpsc(['build', spec, '-o', path.join(TMP, 'out-b')], TMP, envFor(cache)),
    ]);
    expect(a.code, a.stderr).toBe(0);
    expect(b.code, b.stderr).toBe(0);
    const mod = (s: string) => /module: (\S+\.node)/.exec(s)?.[1];
    expect(mod(a.stdout)).toBeDefined();
    expect(mod(a.stdout)).toBe(mod(b.stdout));
    const e = entries(cache);
    expect(e.complete).toHaveLength(1);
    expect(e.temps).toEqual([]);
    const t = await runMpsc(['train', spec, '--device', 'cpu', '--checkpoint-dir', path.join(TMP, 'ck-a')], TMP, envFor(cache));
    expect(t.code, t.stderr).toBe(0);
    expect(t.stderr).toContain('using cached CPU build');
    expect(t.stderr).not.toContain('compiling');
    expect(entries(cache).complete).toHaveLength(1);
  }, 600_000);

  it('a build killed mid-compile leaves nothing loadable at a final path; the next run rebuilds', async () => {
    const cache = path.join(TMP, 'cache-killed');
    const spec = path.join(TMP, 'race2.model');
    fs.writeFileSync(spec, SPEC(40));
    const child = spawn(process.execPath, [BIN, 'build', spec, '-o', path.join(TMP, 'out-k')], {
      cwd: TMP,
      detached: true, // its own process group: the kill takes cmake and the compilers with it
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...envFor(cache) },
    });
    let err = '';
    child.stderr!.on('data', (d) => (err += d));
    const closed = new Promise<NodeJS.Signals | null>((res) => child.on('close', (_c, s) => res(s)));
    // wait until the compiler is running on the generated sources (a build folder in the temp entry)
    const t0 = Date.now();
    let compiling = false;
    while (Date.now() - t0 < 120_000 && child.exitCode === null) {
      const tmp = entries(cache).temps[0];
      if (tmp && err.includes('compiling') && fs.existsSync(path.join(cache, tmp, 'build'))) {
        compiling = true;
        break;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(compiling, `the build never reached the compile step:\n${err}`).toBe(true);
    await new Promise((r) => setTimeout(r, 100 + Math.floor(Math.random() * 500)));
    process.kill(-child.pid!, 'SIGKILL');
    expect(await closed).toBe('SIGKILL');
    await new Promise((r) => setTimeout(r, 200));
    const after = entries(cache);
    expect(after.complete).toEqual([]);
    expect(after.temps.length).toBeGreaterThanOrEqual(1);

    const t = await runMpsc(['train', spec, '--device', 'cpu', '--checkpoint-dir', path.join(TMP, 'ck-k')], TMP, envFor(cache));
    expect(t.code, t.stderr).toBe(0);
    expect(t.stderr).toContain('compiling');
    expect(entries(cache).complete).toHaveLength(1);
  }, 600_000);
});
