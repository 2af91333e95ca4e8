/**
 * Divergence (issue 7), end to end through `mpsc train --device cpu`: a huge learning rate
 * makes the loss NaN/Inf; training stops with a message naming the step and the last good
 * checkpoint, exits 1 (no stack trace), and that checkpoint is readable, finite and resumable
 * (resuming reproduces the same stop at the same step). `--nan-check off` runs to the end.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readCheckpointFile } from '../runtime/checkpoint.js';
import { tensorToF32 } from '../runtime/safetensors.js';
import { checkpoints, runMpsc } from './fixtures/reliability/proc.js';

const SPEC = `model diverge
input x: f32[N, 8]
input label: i32[N]
network {
  logits = x -> linear(16) as fc1 -> relu -> linear(3) as fc2
}
loss cross_entropy(logits, label)
metrics accuracy(logits, label)
optimizer sgd(lr: 1e30)
train { data: synthetic(train_size: 64, test_size: 16, seed: 1), steps: 20, batch: 8, checkpoint_every: 1 }
`;

let dir: string;
let spec: string;
let env: Record<string, string>;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-diverge-'));
  spec = path.join(dir, 'diverge.model');
  fs.writeFileSync(spec, SPEC);
  env = { MPSC_CACHE_DIR: process.env.MPSC_CACHE_DIR ?? path.join(dir, 'cache') };
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const train = (...extra: string[]) => runMpsc(['train', spec, '--device', 'cpu', '--log-every', '1', ...extra], dir, env);

describe('a NaN/Inf loss stops training', () => {
  it('names the step and the last good checkpoint, exits 1, keeps that checkpoint usable', async () => {
    const ck = path.join(dir, 'on');
    const r = await train('--checkpoint-dir', ck);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).not.toMatch(/internal error|^\s+at /m);
    const m = /the loss became (NaN|-?Infinity) at step (\d+)/.exec(r.stderr);
    expect(m, r.stderr).not.toBeNull();
    const bad = Number(m![2]);
    expect(bad).toBeGreaterThanOrEqual(2);
    expect(bad).toBeLessThan(20);
    const good = path.join(ck, `checkpoint-${bad - 1}.safetensors`);
    expect(r.stderr).toContain(`last good checkpoint is ${good}`);
    // nothing at or after the bad step was written, and the kept one is complete and finite
    expect(checkpoints(ck).every((c) => c.step < bad)).toBe(true);
    const st = readCheckpointFile(good);
    expect(st.metadata.step).toBe(String(bad - 1));
    for (const [name, t] of st.tensors) if (t.dtype === 'F32') expect(tensorToF32(t).every(Number.isFinite), name).toBe(true);

    // resuming from it is deterministic: the same stop at the same step
    const again = await train('--checkpoint-dir', ck, '--resume', good);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(`resuming from ${good} at step ${bad - 1}`);
    expect(again.stderr).toMatch(new RegExp(`the loss became (NaN|-?Infinity) at step ${bad}\\b`));
  }, 600_000);

  it('--nan-check off runs every step', async () => {
    const ck = path.join(dir, 'off');
    const r = await train('--checkpoint-dir', ck, '--nan-check', 'off', '--json');
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    expect(out.steps).toBe(20);
    expect(out.train_loss).toBeNull(); // NaN serialises as null: the loss did diverge
    expect(fs.existsSync(path.join(ck, 'checkpoint-20.safetensors'))).toBe(true);
  }, 600_000);
});
