/**
 * End to end on the emulator: the example specs' programs (front end -> IR -> Metal codegen
 * -> metal-emu native module) train 20 steps from the same initial parameters and batches as
 * the CPU backend; per-step losses and metrics agree within 1e-4 relative. The same with an
 * op forced onto the CPU fallback (the fallback path runs the CPU backend's kernel on the
 * shared buffers between two command buffers).
 */
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkFile } from '../compiler/check/index.js';
import { numel, type Program, type ProgramSet, type StepScalars } from '../compiler/ir/graph.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import type { CheckedModel } from '../compiler/model.js';
import { makeRng } from '../compiler/reference/fixtures.js';
import { createCpuSession } from '../runtime/native/native_session.js';
import { createMetalEmuSession } from '../runtime/metal-emu/session.js';
import type { Session } from '../runtime/session.js';

const CACHE = process.env.MPSC_CACHE_DIR ?? path.join(os.tmpdir(), 'mpsc-test-cache');
const STEPS = 20;
const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');

function batches(p: Program, steps: number, classes: number): (Float32Array | Int32Array)[][] {
  const rng = makeRng(11);
  const out: (Float32Array | Int32Array)[][] = [];
  // two batches, alternating: the loss on a batch seen before must go down
  for (let s = 0; s < 2; s++)
    out.push(p.inputs.map((id) => {
      const v = p.graph.values[id];
      const n = numel(v.shape);
      if (v.dtype === 'i32') return Int32Array.from({ length: n }, () => Math.min(classes - 1, Math.floor(rng() * classes)));
      return Float32Array.from({ length: n }, () => rng());
    }));
  return Array.from({ length: steps }, (_, s) => out[s % 2]);
}

function initParams(model: CheckedModel, s: Session[]): void {
  const rng = makeRng(5);
  for (const pd of model.params) {
    const n = numel(pd.shape);
    const fanIn = pd.shape.length > 1 ? n / pd.shape[0] : Math.max(1, n);
    const b = 1 / Math.sqrt(fanIn);
    const a = Float32Array.from({ length: n }, () => (pd.kind === 'param' ? (2 * rng() - 1) * b : 0));
    for (const x of s) x.write(pd.path, a);
  }
}

function train(model: CheckedModel, programs: ProgramSet, session: Session, data: (Float32Array | Int32Array)[][]): number[][] {
  const outs: number[][] = [];
  data.forEach((batch, step) => {
    const scalars: StepScalars = { lr: model.optimizer.lr, t: step + 1, seed: 3, counter: step };
    outs.push(Array.from(session.run('train_step', batch, scalars)));
  });
  outs.push(Array.from(session.run('eval', data[0], { lr: 0, t: STEPS, seed: 3, counter: STEPS })));
  return outs;
}

async function compare(spec: string, batch: number, fallbackOps: string[] = []) {
  const model = checkFile(path.join(ROOT, 'specs', spec));
  const programs = buildPrograms(model, { batch });
  const cpu = await createCpuSession(programs, { threads: 1, cacheDir: CACHE });
  const emu = await createMetalEmuSession(programs, { threads: 2, cacheDir: CACHE, fallbackOps });
  try {
    expect(emu.device).toBe('metal-emu');
    initParams(model, [cpu, emu]);
    const data = batches(programs.train_step, STEPS, model.numClasses ?? 10);
    const a = train(model, programs, cpu, data);
    const b = train(model, programs, emu, data);
    for (let s = 0; s < a.length; s++)
      for (let k = 0; k < a[s].length; k++)
        expect(Math.abs(b[s][k] - a[s][k]) / Math.max(1e-6, Math.abs(a[s][k])), `step ${s} output ${k}: metal-emu ${b[s][k]} vs cpu ${a[s][k]}`).toBeLessThan(1e-4);
    expect(a[STEPS - 1][0]).toBeLessThan(a[1][0]); // it trains (steps 1 and 19 see the same batch)
    for (const name of cpu.tensorNames().filter((n) => !n.includes('exp_avg'))) {
      const x = cpu.read(name), y = emu.read(name);
      let d = 0, m = 0;
      for (let i = 0; i < x.length; i++) { d = Math.max(d, Math.abs(x[i] - y[i])); m = Math.max(m, Math.abs(x[i])); }
      expect(d / Math.max(m, 1e-6), name).toBeLessThan(5e-3); // f32 summation-order drift over 20 steps
    }
  } finally {
    cpu.close();
    emu.close();
  }
}

describe('metal-emu trains like the CPU backend', () => {
  it('mnist_mlp: 20 steps, per-step losses within 1e-4', async () => {
    await compare('mnist_mlp.model', 16);
  }, 600_000);

  it('lenet: 20 steps, per-step losses within 1e-4', async () => {
    await compare('lenet.model', 4);
  }, 900_000);

  it('mnist_mlp with linear and cross_entropy forced onto the CPU fallback', async () => {
    await compare('mnist_mlp.model', 16, ['linear', 'cross_entropy_grad']);
  }, 600_000);
});
