/**
 * Mixed precision (issue 15), training:
 *  - the CPU backend against the float64 reference at bf16 and fp16 (the reference rounds at the
 *    same casts): mnist_mlp, LeNet (convolutions) and a small GPT (fused attention), each train
 *    step started from the reference's state; losses within 1e-3 relative and parameters after the
 *    update within 1e-3 (relError): the two sides round the same f32-vs-f64-close values, and a value
 *    within f32 noise of a 16-bit rounding midpoint can round to neighbouring 16-bit numbers;
 *  - fp16 loss scaling end to end on the CPU: a spec whose gradients overflow f16 at the initial
 *    scale 2^16: the scale backs off step by step (skipped steps in metrics.jsonl) as
 *    torch.amp.GradScaler's rules (checked against torch in precision_numerics) give for these
 *    skips, then steps apply; --resume from a checkpoint in the middle is bitwise the
 *    uninterrupted run (the scaler state is in the checkpoint);
 *  - a loss that never becomes finite stops with a UserError naming the last good checkpoint,
 *    which is kept (no checkpoint is written while the loss is not finite).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { checkFile, checkSource } from '../compiler/check/index.js';
import { UserError } from '../compiler/errors.js';
import { numel, type Program, type StepScalars } from '../compiler/ir/graph.js';
import { LOSS_SCALE_STATE } from '../compiler/ir/optimizer_lowering.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import type { CheckedModel } from '../compiler/model.js';
import { makeRng, relError } from '../compiler/reference/fixtures.js';
import { readCheckpointFile } from '../runtime/checkpoint.js';
import { initialScaler, updateScaler } from '../runtime/loss_scaler.js';
import { createCpuSession } from '../runtime/native/native_session.js';
import { tensorToF32 } from '../runtime/safetensors.js';
import { train } from '../runtime/trainer.js';
import { gptModel } from '../bench/gpt_tiny.js';
import { runProgram, type Store } from './ir_helpers.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const spec = (name: string) => path.join(HERE, '..', 'specs', name);
const CACHE = process.env.MPSC_CACHE_DIR ?? path.join(os.tmpdir(), 'mpsc-test-cache');
const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-precision-'));

function batchOf(p: Program, rng: () => number, classes: number): { f64: Float64Array[]; native: (Float32Array | Int32Array)[] } {
  const f64: Float64Array[] = [], native: (Float32Array | Int32Array)[] = [];
  for (const id of p.inputs) {
    const v = p.graph.values[id];
    const n = numel(v.shape);
    const a = v.dtype === 'i32' ? Int32Array.from({ length: n }, () => Math.floor(rng() * classes) % classes) : Float32Array.from({ length: n }, () => rng());
    native.push(a);
    f64.push(Float64Array.from(a));
  }
  return { f64, native };
}

/** `steps` train steps (+ apply_update for fp16, at the scale 2^10) on the CPU and in the reference, each from the reference's state */
async function cpuVsReference(label: string, model: CheckedModel, batch: number, steps: number) {
  const programs = buildPrograms(model, { batch });
  const session = await createCpuSession(programs, { threads: 2, cacheDir: CACHE });
  try {
    const rng = makeRng(3);
    const store: Store = new Map();
    for (const pd of model.params) {
      const n = numel(pd.shape), b = 1 / Math.sqrt(pd.shape.length > 1 ? n / pd.shape[0] : n);
      store.set(pd.path, Float64Array.from({ length: n }, () => (pd.path.endsWith('.weight') && pd.shape.length === 1 ? 1 : Math.fround((2 * rng() - 1) * b))));
    }
    if (programs.apply_update) store.set(LOSS_SCALE_STATE, Float64Array.of(1024));
    const classes = model.numClasses ?? 10;
    for (let step = 0; step < steps; step++) {
      for (const name of session.tensorNames()) session.write(name, Float32Array.from(store.get(name) ?? new Float64Array(numel(session.tensorShape(name)))));
      const b = batchOf(programs.train_step, rng, classes);
      const scalars: StepScalars = { lr: model.optimizer.lr, t: step + 1, seed: 5, counter: step };
      const env = runProgram(programs.train_step, store, b.f64, scalars);
      const got = session.run('train_step', b.native, scalars);
      programs.train_step.outputs.forEach((o, k) => {
        const ref = env.get(o.value)![0];
        const tol = o.name === 'accuracy' ? 1 / batch + 1e-9 : 1e-3;
        expect(relError([got[k]], [ref]), `${label} step ${step} ${o.name}: ${got[k]} vs ${ref}`).toBeLessThan(tol);
      });
      if (programs.apply_update) {
        runProgram(programs.apply_update, store, [], scalars);
        session.run('apply_update', [], scalars);
      }
      for (const pd of model.params) {
        expect(relError(session.read(pd.path), store.get(pd.path)!), `${label} step ${step}: ${pd.path}`).toBeLessThan(1e-3);
      }
    }
  } finally {
    session.close();
  }
}

const withPrecision = (m: CheckedModel, precision: 'fp16' | 'bf16'): CheckedModel => ({ ...m, train: { ...m.train, precision } });

describe('CPU vs the reference at 16-bit precision', () => {
  it('mnist_mlp bf16 and fp16', async () => {
    const m = checkFile(spec('mnist_mlp.model'));
    await cpuVsReference('mlp bf16', withPrecision(m, 'bf16'), 8, 3);
    await cpuVsReference('mlp fp16', withPrecision(m, 'fp16'), 8, 3);
  }, 600_000);
  it('lenet bf16 (conv2d and its gradients)', async () => {
    await cpuVsReference('lenet bf16', withPrecision(checkFile(spec('lenet.model')), 'bf16'), 2, 2);
  }, 600_000);
  it('a GPT with fused attention, fp16', async () => {
    const gpt = { ...gptModel('gpt_toy', [13, 11, 16, 2, 2, 3, 1e-3]), optimizer: { kind: 'sgd' as const, lr: 0.1, momentum: 0.9, nesterov: false, weight_decay: 0 } };
    await cpuVsReference('gpt fp16', withPrecision(gpt, 'fp16'), 2, 2);
  }, 600_000);
});

// the loss is 1e4 x an mse: its gradient overflows f16 at scale 2^16 until the scale is small enough
const BACKOFF = (extra: string) => `model amp_backoff
input x: f32[N, 8]
input y: f32[N, 4]
network {
  p = x -> linear(4) as fc
  big = p * 100
}
loss mse(big, y)
optimizer adam(lr: 1e-3)
train { data: synthetic(train_size: 64, test_size: 16, seed: 1), batch: 8, precision: "fp16"${extra} }
`;

function trainLines(dir: string): { step: number; loss_scale: number; skipped: boolean; skipped_steps: number }[] {
  return fs.readFileSync(path.join(dir, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l)).filter((l) => l.split === 'train');
}

describe('fp16 dynamic loss scaling, end to end on the CPU', () => {
  it('backs off as GradScaler does for the skipped steps, then trains; --resume is bitwise', async () => {
    const dir = tmp();
    const m = checkSource(BACKOFF(', steps: 16, checkpoint_every: 8'), path.join(dir, 'a.model'));
    const full = await train(m, { device: 'cpu', runDir: path.join(dir, 'full'), logEvery: 1, keepCheckpoints: 5 });
    const lines = trainLines(path.join(dir, 'full'));
    expect(lines.map((l) => l.step)).toEqual(Array.from({ length: 16 }, (_, i) => i + 1));
    const skips = lines.map((l) => l.skipped);
    const firstApplied = skips.indexOf(false);
    expect(firstApplied).toBeGreaterThanOrEqual(3); // it had to back off several times
    expect(skips.slice(0, firstApplied).every((s) => s)).toBe(true);
    expect(skips.filter((s) => !s).length).toBeGreaterThan(4); // and then it trains
    // the scale each step ran with is GradScaler's for these skips
    let s = initialScaler();
    const expected = skips.map((skip) => {
      const used = s.scale;
      s = updateScaler(s, skip);
      return used;
    });
    expect(lines.map((l) => l.loss_scale)).toEqual(expected);
    expect(lines.at(-1)!.skipped_steps).toBe(skips.filter((x) => x).length);
    expect(full.test!.loss!).toBeLessThan((lines[0] as unknown as { loss: number }).loss);

    // resume from the step-8 checkpoint: the same end state, bit for bit
    const ck8 = path.join(dir, 'full', 'checkpoint-8.safetensors');
    const md = readCheckpointFile(ck8).metadata;
    expect(md.precision).toBe('fp16');
    let s8 = initialScaler();
    for (const skip of skips.slice(0, 8)) s8 = updateScaler(s8, skip);
    expect(Number(md.amp_scale)).toBe(s8.scale);
    expect(Number(md.amp_skipped_steps)).toBe(lines[7].skipped_steps);
    const resumed = await train(m, { device: 'cpu', runDir: path.join(dir, 'resumed'), resume: ck8, logEvery: 1 });
    const a = readCheckpointFile(full.checkpoint!), b = readCheckpointFile(resumed.checkpoint!);
    for (const [name, t] of a.tensors) {
      if (t.dtype !== 'F32') continue;
      expect(Buffer.from(tensorToF32(b.tensors.get(name)!).buffer).equals(Buffer.from(tensorToF32(t).buffer)), name).toBe(true);
    }
    expect(trainLines(path.join(dir, 'resumed')).map((l) => l.loss_scale)).toEqual(lines.slice(8).map((l) => l.loss_scale));
  }, 600_000);

  it('a loss that never becomes finite: UserError after 40 skipped steps, the last good checkpoint kept', async () => {
    const dir = tmp();
    // lr 1e30: the first applied update makes the weights infinite, every later loss is inf / NaN
    const m = checkSource(BACKOFF(', steps: 200, checkpoint_every: 1').replace('adam(lr: 1e-3)', 'sgd(lr: 1e30)'), path.join(dir, 'a.model'));
    const err = await train(m, { device: 'cpu', runDir: path.join(dir, 'run'), logEvery: 1, keepCheckpoints: 3 }).then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(UserError);
    const msg = (err as Error).message;
    expect(msg).toMatch(/precision fp16: the gradients were inf or NaN in 40 consecutive steps/);
    const kept = /The last good checkpoint is (\S+) \(step (\d+)\)/.exec(msg)!;
    expect(fs.existsSync(kept[1])).toBe(true);
    const lines = trainLines(path.join(dir, 'run'));
    const lastFinite = lines.filter((l) => Number.isFinite((l as { loss?: number }).loss)).at(-1)!;
    expect(Number(kept[2])).toBe(lastFinite.step);
    const newest = fs.readdirSync(path.join(dir, 'run')).filter((f) => f.startsWith('checkpoint-')).map((f) => Number(/\d+/.exec(f)![0]));
    expect(Math.max(...newest)).toBe(lastFinite.step);
  }, 600_000);
});
