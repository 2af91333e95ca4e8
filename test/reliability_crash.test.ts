/**
 * Crash safety (issue 7), end to end through `mpsc train --device cpu` as a child process:
 *  - SIGKILL at random moments (during start-up, between steps, and timed to land while a
 *    checkpoint is being written), at least 20 times, each followed by `--resume <folder>`,
 *    until training completes: the final checkpoint (parameters, optimizer state, position) is
 *    bitwise equal to an uninterrupted run's;
 *  - SIGINT writes a checkpoint at the current step and exits 130; resuming completes the run
 *    bitwise equal to the uninterrupted one;
 *  - SIGKILL while the atomic writer (the one mpsc train uses) is half way through a large file,
 *    5 times: only complete checkpoints are ever visible, and the folder resolves to the previous;
 *  - a corrupted (flipped byte) newest checkpoint and a truncated second-newest are detected;
 *    `--resume <folder>` says it skips them and continues from the previous one, bitwise equal
 *    again; `--resume <corrupt file>` exits 1 naming the file.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rng } from '../tools/fuzz/mutate.js';
import { checkpoints, differingTensors, runMpsc, startMpsc, tempFiles } from './fixtures/reliability/proc.js';

const STEPS = 300;
const SPEC = `model crash
input x: f32[N, 64]
input label: i32[N]
network {
  logits = x -> linear(512) as fc1 -> relu -> dropout(0.1) -> linear(128) as fc2 -> relu -> linear(4) as fc3
}
loss cross_entropy(logits, label)
metrics accuracy(logits, label)
optimizer adam(lr: 1e-3)
train { data: synthetic(train_size: 200, test_size: 20, seed: 3), steps: ${STEPS}, batch: 16, checkpoint_every: 4, eval_every: 100 }
`;

let dir: string;
let spec: string;
let env: Record<string, string>;
let reference: string;
/** native module folders the runs used (the generated code must not change during the test) */
const modules = new Set<string>();
const noteModule = (stderr: string) => {
  for (const m of stderr.matchAll(/(?:using cached CPU build|built CPU model into) (\S+)/g)) modules.add(m[1]);
};
const sameModule = () => (modules.size <= 1 ? '' : `the runs used ${modules.size} different native modules (the tree changed during the test?): ${[...modules].join(', ')}`);
const common = () => ['train', spec, '--device', 'cpu', '--threads', '2', '--log-every', '1', '--json'];

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-crash-'));
  spec = path.join(dir, 'crash.model');
  fs.writeFileSync(spec, SPEC);
  env = { MPSC_CACHE_DIR: process.env.MPSC_CACHE_DIR ?? path.join(dir, 'cache') };
  const r = await runMpsc([...common(), '--checkpoint-dir', path.join(dir, 'ref')], dir, env);
  expect(r.code, r.stderr).toBe(0);
  noteModule(r.stderr);
  reference = path.join(dir, 'ref', `checkpoint-${STEPS}.safetensors`);
  expect(fs.existsSync(reference)).toBe(true);
}, 600_000);
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

type Mode = 'startup' | 'after-step' | 'checkpoint-write';

/** run once and SIGKILL it according to `mode`; resolves with what happened */
async function killOnce(args: string[], ckdir: string, mode: Mode, r: ReturnType<typeof rng>): Promise<{ killed: boolean; code: number | null; midWrite: boolean; stderr: string }> {
  fs.mkdirSync(ckdir, { recursive: true });
  const tmpBefore = new Set(tempFiles(ckdir));
  const run = startMpsc(args, dir, env);
  let killed = false;
  const kill = () => {
    if (!killed && run.child.exitCode === null) {
      killed = true;
      run.child.kill('SIGKILL');
    }
  };
  let watcher: fs.FSWatcher | null = null;
  if (mode === 'startup') {
    setTimeout(kill, r.int(2500));
  } else if (mode === 'after-step') {
    const extra = 1 + r.int(10);
    let first = -1;
    run.onLine((l) => {
      const m = /^step (\d+)\//.exec(l);
      if (!m) return;
      const s = Number(m[1]);
      if (first < 0) first = s;
      if (s >= first + extra) kill();
    });
  } else {
    // kill as soon as the n-th temporary checkpoint file of this run appears (the write is in progress)
    const nth = 1 + r.int(3);
    let seen = 0;
    watcher = fs.watch(ckdir, (_ev, name) => {
      if (name && name.includes('.tmp-') && !tmpBefore.has(name)) {
        tmpBefore.add(name);
        if (++seen >= nth) kill();
      }
    });
  }
  const res = await run.done;
  watcher?.close();
  noteModule(res.stderr);
  const midWrite = tempFiles(ckdir).some((f) => !tmpBefore.has(f));
  return { killed: killed && res.signal === 'SIGKILL', code: res.code, midWrite, stderr: res.stderr };
}

describe('SIGKILL at random moments, then --resume: same final state as an uninterrupted run', () => {
  it('survives at least 20 kills (some during checkpoint writes) and ends bitwise equal', async () => {
    // Rounds: each round starts a fresh checkpoint folder, kills and resumes until training
    // completes, and must end bitwise equal to the uninterrupted run. A fast machine may finish
    // a round with fewer kills, so rounds repeat until at least 20 kills were survived in total.
    const r = rng(20261202);
    const modes: Mode[] = ['checkpoint-write', 'after-step', 'checkpoint-write', 'startup', 'after-step'];
    let kills = 0;
    let midWrite = 0;
    let resumes = 0;
    let cycle = 0;
    const log: string[] = [];
    for (let round = 0; round < 5 && kills < 20; round++) {
      const ckdir = path.join(dir, `killed-${round}`);
      let finished = false;
      let roundKills = 0;
      while (!finished && cycle < 120) {
        const resume = checkpoints(ckdir).length > 0;
        const args = [...common(), '--checkpoint-dir', ckdir, ...(resume ? ['--resume', ckdir] : [])];
        if (resume) resumes++;
        const mode: Mode | null = roundKills < 24 ? modes[cycle % modes.length] : null;
        cycle++;
        if (mode === null) {
          const res = await runMpsc(args, dir, env);
          noteModule(res.stderr);
          expect(res.code, res.stderr).toBe(0);
          finished = true;
          log.push(`round ${round}: ran to completion`);
          break;
        }
        const k = await killOnce(args, ckdir, mode, r);
        if (k.killed) {
          kills++;
          roundKills++;
          if (k.midWrite) midWrite++;
          log.push(`round ${round}: killed (${mode}${k.midWrite ? ', mid-write' : ''}); newest checkpoint now ${checkpoints(ckdir)[0]?.step ?? 'none'}`);
        } else {
          // it finished (or failed) before the kill landed
          expect(k.code, k.stderr).toBe(0);
          finished = true;
          log.push(`round ${round}: finished before the kill (${mode})`);
        }
      }
      expect(finished).toBe(true);
      const final = path.join(ckdir, `checkpoint-${STEPS}.safetensors`);
      expect(fs.existsSync(final)).toBe(true);
      expect(differingTensors(reference, final), sameModule()).toEqual([]);
    }
    console.log(`kill-and-resume: ${kills} SIGKILLs (${midWrite} while a checkpoint was being written), ${resumes} resumes\n  ${log.join('\n  ')}`);
    // (how many kills land inside the few milliseconds of a small checkpoint write varies from run
    // to run; the next test kills the same writer deterministically half way through a large file)
    expect(kills).toBeGreaterThanOrEqual(20);
  }, 1_200_000);
});

describe('SIGINT and damaged checkpoints', () => {
  it('Ctrl-C writes a checkpoint at the current step and exits 130; damaged newest checkpoints are skipped on resume', async () => {
    const ckdir = path.join(dir, 'sigint');
    const run = startMpsc([...common(), '--checkpoint-dir', ckdir], dir, env);
    let sent = false;
    run.onLine((l) => {
      const m = /^step (\d+)\//.exec(l);
      if (m && Number(m[1]) >= 30 && !sent) {
        sent = true;
        run.child.kill('SIGINT');
      }
    });
    const res = await run.done;
    noteModule(res.stderr);
    expect(sent).toBe(true);
    expect(res.code, res.stderr).toBe(130);
    const summary = JSON.parse(res.stdout.trim().split('\n').at(-1)!);
    expect(summary.interrupted).toBe(true);
    expect(summary.steps).toBeGreaterThanOrEqual(30);
    expect(summary.steps).toBeLessThan(STEPS);
    expect(summary.checkpoint).toBe(path.join(ckdir, `checkpoint-${summary.steps}.safetensors`));
    expect(fs.existsSync(summary.checkpoint)).toBe(true);
    expect(res.stderr).not.toMatch(/internal error|^\s+at /m);

    // damage the two newest checkpoints: flip a byte in the newest's data, truncate the second
    const list = checkpoints(ckdir);
    expect(list.length).toBeGreaterThanOrEqual(3);
    const [newest, second, third] = list;
    const buf = fs.readFileSync(newest.file);
    buf[buf.length - 5] ^= 0x40;
    fs.writeFileSync(newest.file, buf);
    fs.truncateSync(second.file, Math.floor(fs.statSync(second.file).size / 2));

    const direct = await runMpsc([...common(), '--checkpoint-dir', ckdir, '--resume', newest.file], dir, env);
    expect(direct.code).toBe(1);
    expect(direct.stderr).toContain(newest.file);
    expect(direct.stderr).toMatch(/corrupt/);
    const direct2 = await runMpsc([...common(), '--checkpoint-dir', ckdir, '--resume', second.file], dir, env);
    expect(direct2.code).toBe(1);
    expect(direct2.stderr).toContain(second.file);
    expect(direct2.stderr).not.toMatch(/internal error/);

    const resumed = await runMpsc([...common(), '--checkpoint-dir', ckdir, '--resume', ckdir], dir, env);
    noteModule(resumed.stderr);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stderr).toContain(`skipping ${newest.file}`);
    expect(resumed.stderr).toContain(`skipping ${second.file}`);
    expect(resumed.stderr).toContain(`resuming from ${third.file} at step ${third.step}`);
    expect(differingTensors(reference, path.join(ckdir, `checkpoint-${STEPS}.safetensors`)), sameModule()).toEqual([]);
  }, 600_000);
});

describe('SIGKILL while the atomic writer is half way through a file', () => {
  it('leaves only the previous complete checkpoint visible; resume picks it', async () => {
    const { spawn } = await import('node:child_process');
    const { resolveCheckpoint, readCheckpointFile } = await import('../runtime/checkpoint.js');
    const script = path.join(path.dirname(new URL(import.meta.url).pathname), 'fixtures/reliability/write_big_checkpoint.ts');
    const MB = 160;
    let midWrite = 0;
    for (let attempt = 0; attempt < 5; attempt++) {
      const d = fs.mkdtempSync(path.join(dir, 'atomic-'));
      const child = spawn(process.execPath, ['--import', 'tsx', script, d, String(MB)], { stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      child.stdout!.on('data', (x) => (out += x));
      const exited = new Promise<NodeJS.Signals | null>((res) => child.on('close', (_c, s) => res(s)));
      // poll for a partially written temporary file, then kill
      let partial = 0;
      while (child.exitCode === null) {
        const tmp = tempFiles(d)[0];
        // the writer may rename the file between the listing and the stat (it finished): size 0, poll again
        const size = tmp ? (fs.statSync(path.join(d, tmp), { throwIfNoEntry: false })?.size ?? 0) : 0;
        if (out.includes('ready') && size > 0 && size < MB * 1024 * 1024) {
          child.kill('SIGKILL');
          partial = size;
          break;
        }
        await new Promise((r) => setTimeout(r, 2));
      }
      const sig = await exited;
      if (sig === 'SIGKILL' && partial > 0) midWrite++;
      // whatever happened: checkpoint-2 is either absent or complete, and the folder resolves to a readable file
      const visible = checkpoints(d).map((c) => c.step);
      if (visible.includes(2)) expect(readCheckpointFile(path.join(d, 'checkpoint-2.safetensors')).tensors.get('w')!.shape).toEqual([(MB * 1024 * 1024) / 4]);
      else expect(resolveCheckpoint(d)).toBe(path.join(d, 'checkpoint-1.safetensors'));
      expect(visible).toContain(1);
    }
    console.log(`atomic writer: ${midWrite} of 5 SIGKILLs landed while a ${MB} MiB checkpoint was half written`);
    expect(midWrite).toBeGreaterThanOrEqual(3);
  }, 300_000);
});
