import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { encodeSafetensors } from '../runtime/safetensors.js';

const ROOT = path.resolve(__dirname, '..');
const BIN = path.join(ROOT, 'bin', 'mpsc.js');
const TINY = path.join(ROOT, 'test', 'fixtures', 'train', 'tiny.model');
let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-cli-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function mpsc(...args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [BIN, ...args], { cwd: dir, encoding: 'utf8', timeout: 120_000, env: { ...process.env, CI: '1' } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}
function spec(name: string, text: string): string {
  const f = path.join(dir, name);
  fs.writeFileSync(f, text);
  return f;
}
const TINY_TEXT = fs.readFileSync(TINY, 'utf8');

/** `mpsc train TINY` for a million steps (plus `args`), sent `sig` once step 30 is logged; its exit code and signal, and its output */
async function signalAtStep30(args: string[], sig: NodeJS.Signals): Promise<{ exit: [number | null, string | null]; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [BIN, 'train', TINY, '--device', 'reference', '--steps', '1000000', '--log-every', '1', '--json', ...args], {
    cwd: dir,
    env: { ...process.env, CI: '1' },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  const exit = await new Promise<[number | null, string | null]>((resolve) => {
    let sent = false;
    child.stderr.on('data', (d) => {
      stderr += d;
      if (!sent && /step 30\//.test(stderr)) {
        sent = true;
        child.kill(sig);
      }
    });
    child.on('exit', (c, s) => resolve([c, s]));
  });
  return { exit, stdout, stderr };
}

describe('mpsc train / eval (child process)', () => {
  it('train --json prints the summary object; eval on the checkpoint agrees; --metrics writes JSON lines', () => {
    const ck = path.join(dir, 'ck');
    const metrics = path.join(dir, 'm.jsonl');
    const r = mpsc('train', TINY, '--device', 'reference', '--steps', '6', '--batch', '10', '--seed', '2', '--checkpoint-dir', ck, '--metrics', metrics, '--log-every', '2', '--json');
    expect(r.stderr).toContain('device: reference');
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout.trim());
    expect(out.steps).toBe(6);
    expect(out.device).toBe('reference');
    expect(typeof out.test_loss).toBe('number');
    expect(out.test_accuracy).toBeGreaterThanOrEqual(0);
    expect(out.test_accuracy).toBeLessThanOrEqual(1);
    expect(typeof out.seconds).toBe('number');
    expect(out.checkpoint).toBe(path.join(ck, 'checkpoint-6.safetensors'));
    expect(fs.existsSync(out.checkpoint)).toBe(true);
    const lines = fs.readFileSync(metrics, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.filter((l) => l.split === 'train').map((l) => l.step)).toEqual([1, 2, 4, 6]);
    expect(lines.at(-1)).toMatchObject({ step: 6, split: 'test' });
    const e = mpsc('eval', TINY, '--weights', out.checkpoint, '--device', 'reference', '--json');
    expect(e.code).toBe(0);
    const ev = JSON.parse(e.stdout.trim());
    expect(ev.samples).toBe(37);
    expect(ev.test_accuracy).toBeCloseTo(out.test_accuracy, 9);
    expect(ev.test_loss).toBeCloseTo(out.test_loss, 5);
    // human-readable summary
    const h = mpsc('train', TINY, '--device', 'reference', '--steps', '2', '--checkpoint-dir', path.join(dir, 'ck-h'));
    expect(h.code).toBe(0);
    expect(h.stdout).toMatch(/test loss \d+\.\d+ {2}accuracy \d+\.\d+%/);
    expect(h.stdout).toContain('checkpoint: ');
  });

  it('--init-from with wrong shapes: exit 1, the offending tensors listed', () => {
    const f = path.join(dir, 'wrong.safetensors');
    fs.writeFileSync(
      f,
      encodeSafetensors({
        'fc.weight': { shape: [3, 5], data: new Float32Array(15) },
        'fc.bias': { shape: [4], data: new Float32Array(4) },
      }),
    );
    const r = mpsc('train', TINY, '--device', 'reference', '--steps', '1', '--init-from', f, '--checkpoint-dir', path.join(dir, 'ck2'));
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('wrong.safetensors');
    expect(r.stderr).toContain('fc.weight: file has [3, 5], model needs [3, 6]');
    expect(r.stderr).toContain('fc.bias: file has [4], model needs [3]');
    expect(r.stderr).not.toContain('internal error');
  });

  it('bad input is exit 1 with a clear message: missing data file, bad IDX, label out of range, metal on Linux, bad options', () => {
    const csvSpec = (train: string) => spec('csv.model', TINY_TEXT.replace(/data: synthetic\([^)]*\)/, `data: csv(train: "${train}", label_column: 0)`));
    let r = mpsc('train', csvSpec('missing.csv'), '--device', 'reference', '--steps', '1');
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('missing.csv');
    fs.writeFileSync(path.join(dir, 'lab.csv'), '0,1,2,3,4,5,6\n7,1,2,3,4,5,6\n');
    r = mpsc('train', csvSpec('lab.csv'), '--device', 'reference', '--steps', '1', '--batch', '1');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/lab\.csv.*sample 1.*label 7.*\[0, 3\)/);
    // IDX with a wrong magic number
    const idx = path.join(dir, 'idx');
    fs.mkdirSync(idx);
    for (const f of ['train-images-idx3-ubyte', 'train-labels-idx1-ubyte', 't10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte']) {
      fs.writeFileSync(path.join(idx, f), new Uint8Array([0, 0, 8, 0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]));
    }
    const mnistSpec = spec('m.model', fs.readFileSync(path.join(ROOT, 'test', 'fixtures', 'train', 'mnist_mlp.model'), 'utf8').replace('mnist()', `mnist("${idx}")`));
    r = mpsc('train', mnistSpec, '--device', 'reference', '--steps', '1');
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('train-images-idx3-ubyte');
    expect(r.stderr).toContain('wrong magic number');
    if (process.platform !== 'darwin') {
      r = mpsc('train', TINY, '--device', 'metal', '--steps', '1');
      expect(r.code).toBe(1);
      expect(r.stderr).toContain('macOS on Apple silicon');
      expect(r.stderr).toContain('--device metal-emu');
    }
    r = mpsc('train', TINY, '--epochs', '1', '--steps', '2');
    expect(r.code).toBe(1);
    r = mpsc('train', TINY, '--batch', '0');
    expect(r.code).toBe(1);
    r = mpsc('eval', TINY, '--weights', path.join(dir, 'nope.safetensors'), '--device', 'reference');
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('nope.safetensors');
  });

  it('SIGINT writes a checkpoint and exits 130; --resume continues from it', async () => {
    const ck = path.join(dir, 'sig');
    const { exit, stdout } = await signalAtStep30(['--checkpoint-dir', ck], 'SIGINT');
    expect(exit[0]).toBe(130);
    const out = JSON.parse(stdout.trim());
    expect(out.interrupted).toBe(true);
    expect(out.steps).toBeGreaterThanOrEqual(30);
    expect(fs.existsSync(out.checkpoint)).toBe(true);
    const r = mpsc('train', TINY, '--device', 'reference', '--steps', String(out.steps + 3), '--resume', ck, '--json');
    expect(r.code).toBe(0);
    expect(r.stderr).toContain(`resuming from ${out.checkpoint} at step ${out.steps}`);
    expect(JSON.parse(r.stdout.trim()).steps).toBe(out.steps + 3);
  });

  it('SIGTERM (job schedulers, timeout, docker stop) stops like the first Ctrl-C: the step finishes, a checkpoint is written, exit 143; --resume continues', async () => {
    const runDir = path.join(dir, 'term');
    const { exit, stdout, stderr } = await signalAtStep30(['--run-dir', runDir], 'SIGTERM');
    expect(exit, stderr).toEqual([143, null]); // exited by itself (143 = 128 + SIGTERM), not killed
    expect(stderr).toContain('SIGTERM: finishing the current step and writing a checkpoint');
    const out = JSON.parse(stdout.trim());
    expect(out.interrupted).toBe(true);
    expect(out.checkpoint).toBe(path.join(runDir, `checkpoint-${out.steps}.safetensors`));
    expect(fs.existsSync(out.checkpoint)).toBe(true);
    expect(fs.readFileSync(path.join(runDir, 'train.log'), 'utf8')).toContain('SIGTERM: finishing the current step');
    const r = mpsc('train', TINY, '--device', 'reference', '--steps', String(out.steps + 2), '--resume', runDir, '--json');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`resuming from ${out.checkpoint} at step ${out.steps}`);
  });
});
