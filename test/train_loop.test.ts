import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { UserError } from '../compiler/errors.js';
import { initParams } from '../compiler/train/init.js';
import { checkFile } from '../compiler/check/index.js';
import { readCheckpointFile, saveTensors } from '../runtime/checkpoint.js';
import { tensorToF32 } from '../runtime/safetensors.js';
import { effectiveTrainConfig, evaluateWeights, train, type TrainOptions } from '../runtime/trainer.js';
import type { CheckedModel } from '../compiler/model.js';
import { tinyClassifier, type TinyOptions } from './fixtures/train/models.js';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-train-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const DEVICE = process.env.MPSC_TRAIN_TEST_DEVICE ?? 'reference';

function tiny(o: Partial<TinyOptions> = {}): CheckedModel {
  return tinyClassifier({ features: [6], classes: 3, data: { kind: 'synthetic', train_size: 100, test_size: 37, seed: 4 }, batch: 8, ...o });
}
function tensors(file: string): Map<string, Float32Array> {
  const st = readCheckpointFile(file);
  const out = new Map<string, Float32Array>();
  for (const [n, t] of st.tensors) if (t.dtype === 'F32') out.set(n, tensorToF32(t));
  return out;
}
async function run(m: CheckedModel, name: string, o: TrainOptions = {}) {
  return train(m, { device: DEVICE, checkpointDir: path.join(dir, name), ...o });
}
function expectBitwiseEqual(a: Map<string, Float32Array>, b: Map<string, Float32Array>): void {
  expect([...a.keys()].sort()).toEqual([...b.keys()].sort());
  for (const [n, v] of a) {
    const w = b.get(n)!;
    expect(new Uint8Array(w.buffer, w.byteOffset, w.byteLength), n).toEqual(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
  }
}
async function userError(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(UserError);
    return (e as Error).message;
  }
  throw new Error('expected a UserError');
}

describe(`training loop (${DEVICE})`, () => {
  it('learns the synthetic task and reports test metrics (weighted over eval + eval_tail)', async () => {
    const r = await run(tiny({ epochs: 8 }), 'learn');
    // 100 samples, batch 8, drop_last false -> 13 steps per epoch
    expect(r.steps).toBe(8 * 13);
    expect(r.test).not.toBeNull();
    expect(r.test!.samples).toBe(37);
    expect(r.test!.metrics.accuracy).toBeGreaterThan(0.8);
    expect(fs.existsSync(r.checkpoint!)).toBe(true);
    // the tail-weighted mean equals one single-batch evaluation of all 37 samples
    const m = tiny();
    const a = await evaluateWeights(m, { device: DEVICE, weights: r.checkpoint!, batch: 8 });
    const b = await evaluateWeights(m, { device: DEVICE, weights: r.checkpoint!, batch: 37 });
    expect(a.loss!).toBeCloseTo(r.test!.loss!, 6);
    expect(Math.abs(a.loss! - b.loss!)).toBeLessThan(1e-6);
    expect(a.metrics.accuracy).toBeCloseTo(b.metrics.accuracy, 9);
  });

  it('--resume with a checkpoint of a different spec, batch or seed is an error', async () => {
    const r = await run(tiny(), 'other', { steps: 2 });
    const msg = await userError(run(tiny({ sourceHash: 'b'.repeat(64) }), 'other2', { resume: r.checkpoint! }));
    expect(msg).toContain('different spec');
    expect(await userError(run(tiny(), 'other3', { resume: r.checkpoint!, batch: 4 }))).toContain('batch 8');
    expect(await userError(run(tiny(), 'other4', { resume: r.checkpoint!, seed: 99 }))).toContain('seed');
    expect(await userError(run(tiny(), 'other5', { resume: path.join(dir, 'nothing-here') }))).toContain('not found');
  });

  it('--save-init writes the initial parameters; --init-from loads them; wrong shapes list the tensors', async () => {
    const m = tiny();
    const initFile = path.join(dir, 'init.safetensors');
    await run(m, 'si', { steps: 1, saveInit: initFile, seed: 3 });
    const saved = tensors(initFile);
    expect([...saved.keys()].sort()).toEqual(['fc.bias', 'fc.weight']);
    expect(saved.get('fc.weight')).toEqual(initParams(m, 3).get('fc.weight'));
    // init-from gives the same run as that seed's own init
    const a = await run(m, 'if-a', { steps: 5, seed: 3 });
    const c = await run(m, 'if-c', { steps: 5, seed: 3, initFrom: initFile });
    expectBitwiseEqual(tensors(a.checkpoint!), tensors(c.checkpoint!));
    // a full checkpoint as --init-from: only the parameters are taken (not the optimizer state)
    const paramsOnly = path.join(dir, 'params-only.safetensors');
    const full = tensors(a.checkpoint!);
    expect(full.has('fc.weight.momentum_buffer')).toBe(true);
    saveTensors(paramsOnly, new Map(['fc.weight', 'fc.bias'].map((n) => [n, { shape: n === 'fc.bias' ? [3] : [3, 6], data: full.get(n)! }])));
    const fromFull = await run(m, 'if-full', { steps: 3, initFrom: a.checkpoint! });
    const fromParams = await run(m, 'if-params', { steps: 3, initFrom: paramsOnly });
    expectBitwiseEqual(tensors(fromFull.checkpoint!), tensors(fromParams.checkpoint!));
    // wrong shapes
    const wide = tiny({ features: [7] });
    const wideFile = path.join(dir, 'wide.safetensors');
    await run(wide, 'wide', { steps: 1, saveInit: wideFile });
    const msg = await userError(run(m, 'if-bad', { steps: 1, initFrom: wideFile }));
    expect(msg).toContain('wide.safetensors');
    expect(msg).toContain('fc.weight: file has [3, 7], model needs [3, 6]');
  });

  it('a NaN/Inf loss stops training naming the step (unless --nan-check off)', async () => {
    // a negative weight decay multiplies the weights by 1e100 every step: overflow within a few steps
    const m = tiny({ optimizer: { kind: 'sgd', lr: 1, momentum: 0, nesterov: false, weight_decay: -1e100 } });
    const msg = await userError(run(m, 'nan', { steps: 30 }));
    expect(msg).toMatch(/loss became (NaN|Infinity|-Infinity) at step \d+/);
    const r = await run(m, 'nan-off', { steps: 30, nanCheck: false });
    expect(r.steps).toBe(30);
  });

  it('--metrics writes one JSON line per logged step and per evaluation', async () => {
    const f = path.join(dir, 'metrics.jsonl');
    const m = { ...tiny(), train: { ...tiny().train, eval_every: 10 } };
    await run(m, 'metrics', { steps: 25, logEvery: 10, metricsFile: f });
    const lines = fs.readFileSync(f, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    const steps = lines.filter((l) => l.split === 'train');
    const evals = lines.filter((l) => l.split === 'test');
    expect(lines.every((l) => l.split === 'train' || l.split === 'test')).toBe(true);
    expect(steps.map((l) => l.step)).toEqual([1, 10, 20, 25]);
    // epochs are 1-based, as the console shows them (tiny: 13 steps per epoch)
    expect(steps.map((l) => l.epoch)).toEqual([1, 1, 2, 2]);
    expect(steps[0]).toMatchObject({ step: 1, epoch: 1, lr: 0.1 });
    expect(typeof steps[0].samples_per_sec).toBe('number');
    expect(typeof steps[0].loss).toBe('number');
    expect(evals.map((l) => l.step)).toEqual([10, 20, 25]);
    expect(typeof evals[0].accuracy).toBe('number');
    expect(typeof evals[0].loss).toBe('number');
  });

  it('trains from CSV files (train and test split), and command-line values override the spec', async () => {
    const rows = (n: number, off: number) => {
      const out: string[] = ['a,b,c,d,e,f,label'];
      for (let i = 0; i < n; i++) {
        const x = Array.from({ length: 6 }, (_, j) => Math.sin(7.3 * (i + off) + 1.7 * j));
        const label = x[0] + x[1] > 0.5 ? 2 : x[0] - x[2] > 0 ? 1 : 0;
        out.push([...x.map((v) => v.toFixed(5)), label].join(','));
      }
      return out.join('\n') + '\n';
    };
    fs.writeFileSync(path.join(dir, 'train.csv'), rows(200, 0));
    fs.writeFileSync(path.join(dir, 'test.csv'), rows(50, 1000));
    const m = tiny({ data: { kind: 'csv', train: path.join(dir, 'train.csv'), test: path.join(dir, 'test.csv'), label_column: 'label', normalize: null }, epochs: 3 });
    const r = await run(m, 'csv', { epochs: 10, batch: 20 });
    expect(r.steps).toBe(100); // 10 epochs x 200/20 (the override wins over the spec's 3 epochs and batch 8)
    expect(r.test!.samples).toBe(50);
    expect(r.test!.metrics.accuracy).toBeGreaterThan(0.7);
    expect(effectiveTrainConfig(m, { steps: 7 })).toMatchObject({ steps: 7, epochs: null, batch: 8 });
    expect(effectiveTrainConfig({ ...m, train: { ...m.train, steps: 9, epochs: null } }, { epochs: 2, seed: 5 })).toMatchObject({ steps: null, epochs: 2, seed: 5 });
  });

  it('too little data for one step is a clear error', async () => {
    const m = tiny({ data: { kind: 'synthetic', train_size: 5, test_size: 5, seed: 1 }, drop_last: true });
    expect(await userError(run(m, 'small', { steps: 1 }))).toContain('5 samples');
  });
});

const cpuAvailable = fs.existsSync(path.join(__dirname, '..', 'runtime', 'native', 'native_session.ts'));

async function runOn(device: string, m: CheckedModel, name: string, o: TrainOptions = {}) {
  return train(m, { device, checkpointDir: path.join(dir, name), ...o });
}

// cpu: bitwise as well (the CPU kernels use a fixed reduction order, independent of thread scheduling)
for (const device of ['reference', 'cpu']) {
  describe.skipIf(device === 'cpu' && !cpuAvailable)(`resume (${device})`, () => {
    for (const variant of [
      { name: 'sgd momentum, shuffle', o: {} },
      { name: 'adam, grad_accum 2, no shuffle', o: { optimizer: { kind: 'adam', lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0 }, grad_accum: 2, shuffle: false } },
    ] as { name: string; o: Partial<TinyOptions> }[]) {
      it(`${device}: 2N straight == N + --resume + N, bitwise (${variant.name})`, async () => {
        const N = 17; // crosses an epoch boundary (13 or 6 steps per epoch)
        const m = tiny(variant.o);
        const mEvery = { ...m, train: { ...m.train, checkpoint_every: N } };
        // the same checkpoint steps in every run: on the float64 reference each checkpoint rounds the live
        // state to the saved f32 values, so the runs agree bitwise when they checkpoint at the same steps
        const straight = await runOn(device, mEvery, `${device}-straight-${variant.name}`, { steps: 2 * N });
        const half = await runOn(device, mEvery, `${device}-half-${variant.name}`, { steps: N });
        expect(half.steps).toBe(N);
        const resumed = await runOn(device, mEvery, `${device}-half-${variant.name}`, { steps: 2 * N, resume: half.checkpoint! });
        expect(resumed.steps).toBe(2 * N);
        expectBitwiseEqual(tensors(straight.checkpoint!), tensors(resumed.checkpoint!));
        expect(resumed.test!.loss).toBe(straight.test!.loss);
      });
    }

    it(`${device}: a stop request (SIGINT) writes a checkpoint at the current step; resuming from the folder finishes identically`, async () => {
      const m = tiny();
      const mEvery = { ...m, train: { ...m.train, checkpoint_every: 9 } };
      const straight = await runOn(device, mEvery, `${device}-sig-straight`, { steps: 20 });
      const ac = new AbortController();
      const metricsFile = path.join(dir, `${device}-sig.jsonl`);
      const stopped = await runOn(device, mEvery, `${device}-sig`, { steps: 20, logEvery: 5, metricsFile, signal: ac.signal, onEvent: (e) => e.kind === 'step' && e.step === 9 && ac.abort() });
      expect(stopped.interrupted).toBe(true);
      expect(stopped.steps).toBe(9);
      // the last step is logged, as at the end of a run, although 9 is not a --log-every step
      const trainSteps = fs.readFileSync(metricsFile, 'utf8').trim().split('\n').map((l) => JSON.parse(l)).filter((l) => l.split === 'train');
      expect(trainSteps.map((l) => l.step)).toEqual([1, 5, 9]);
      expect(trainSteps[2].loss).toBe(stopped.lastLoss);
      expect(path.basename(stopped.checkpoint!)).toBe('checkpoint-9.safetensors');
      const resumed = await runOn(device, mEvery, `${device}-sig`, { steps: 20, resume: path.join(dir, `${device}-sig`) });
      expectBitwiseEqual(tensors(straight.checkpoint!), tensors(resumed.checkpoint!));
    });

    it(`${device}: batchnorm + dropout + adamw + cosine: stopped at N and resumed == straight, bitwise (running stats, RNG, schedule)`, async () => {
      const m0 = checkFile(path.join(__dirname, 'fixtures', 'train', 'bn_dropout.model'));
      const m = { ...m0, train: { ...m0.train, checkpoint_every: 10 } };
      const straight = await runOn(device, m, `${device}-bn-straight`, { steps: 30 });
      const ac = new AbortController();
      const stopped = await runOn(device, m, `${device}-bn`, { steps: 30, signal: ac.signal, onEvent: (e) => e.kind === 'step' && e.step === 10 && ac.abort() });
      expect(stopped.steps).toBe(10);
      const resumed = await runOn(device, m, `${device}-bn`, { steps: 30, resume: stopped.checkpoint! });
      const a = tensors(straight.checkpoint!);
      expect(a.has('bn1.running_mean')).toBe(true);
      expect(a.has('fc1.weight.exp_avg_sq')).toBe(true);
      expectBitwiseEqual(a, tensors(resumed.checkpoint!));
      const nbt = readCheckpointFile(resumed.checkpoint!).tensors.get('bn1.num_batches_tracked')!;
      expect(nbt.dtype).toBe('I64');
      expect(tensorToF32(nbt)[0]).toBe(30);
    });
  });
}
