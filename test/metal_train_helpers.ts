/**
 * Test helper: train the same programs for a few steps on the CPU backend and on metal-emu from
 * the same initial parameters and batches, and compare per-step outputs and the final tensors.
 * Used by metal_train.test.ts (fp32: 1e-4) and metal_precision.test.ts (fp16 / bf16, with its
 * own tolerances). A program set with an `apply_update` program (fp16 loss scaling) runs it after
 * every train_step, with the loss-scale state fixed at LOSS_SCALE (the host's scaler is not here).
 */
import * as os from 'node:os';
import * as path from 'node:path';
import { expect } from 'vitest';
import { numel, type Program, type StepScalars } from '../compiler/ir/graph.js';
import { LOSS_SCALE_STATE } from '../compiler/ir/optimizer_lowering.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import type { CheckedModel } from '../compiler/model.js';
import { makeRng } from '../compiler/reference/fixtures.js';
import { createCpuSession } from '../runtime/native/native_session.js';
import { createMetalEmuSession } from '../runtime/metal-emu/session.js';
import type { Session } from '../runtime/session.js';

export const CACHE = process.env.MPSC_CACHE_DIR ?? path.join(os.tmpdir(), 'mpsc-test-cache');
export const STEPS = 20;
/** the fp16 loss scale of the comparison runs (2^10: no overflow in these small models) */
export const LOSS_SCALE = 1024;

export function batches(p: Program, steps: number, classes: number): (Float32Array | Int32Array)[][] {
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

export function initParams(model: CheckedModel, s: Session[]): void {
  const rng = makeRng(5);
  for (const pd of model.params) {
    const n = numel(pd.shape);
    const fanIn = pd.shape.length > 1 ? n / pd.shape[0] : Math.max(1, n);
    const b = 1 / Math.sqrt(fanIn);
    const a = Float32Array.from({ length: n }, () => (pd.kind === 'param' ? (2 * rng() - 1) * b : 0));
    for (const x of s) x.write(pd.path, a);
  }
  for (const x of s) if (x.tensorNames().includes(LOSS_SCALE_STATE)) x.write(LOSS_SCALE_STATE, Float32Array.of(LOSS_SCALE));
}

function train(model: CheckedModel, session: Session, data: (Float32Array | Int32Array)[][]): number[][] {
  const outs: number[][] = [];
  const apply = session.hasProgram('apply_update');
  data.forEach((batch, step) => {
    const scalars: StepScalars = { lr: model.optimizer.lr, t: step + 1, seed: 3, counter: step };
    outs.push(Array.from(session.run('train_step', batch, scalars)));
    if (apply) session.run('apply_update', [], scalars);
  });
  outs.push(Array.from(session.run('eval', data[0], { lr: 0, t: STEPS, seed: 3, counter: STEPS })));
  return outs;
}

export interface Tolerance {
  /** per-step outputs (losses, metrics): relative difference */
  outputs: number;
  /** the first step's outputs (before any update: same parameters on both sides); default `outputs` */
  first?: number;
  /** final tensors: max |difference| / max |cpu value|, per tensor */
  tensors: number;
}

/**
 * 20 steps on both backends; `classes`: the range of every i32 input (labels, token ids).
 * Returns the largest output and tensor differences seen, and the tensor with the latter (for the caller's report).
 */
export async function compareModel(model: CheckedModel, batch: number, fallbackOps: string[] = [], classes = model.numClasses ?? 10,
  tol: Tolerance = { outputs: 1e-4, tensors: 5e-3 }): Promise<{ outputs: number; tensors: number; tensor: string }> {
  const programs = buildPrograms(model, { batch });
  const cpu = await createCpuSession(programs, { threads: 1, cacheDir: CACHE });
  const emu = await createMetalEmuSession(programs, { threads: 2, cacheDir: CACHE, fallbackOps });
  const worst = { outputs: 0, tensors: 0, tensor: '' };
  try {
    expect(emu.device).toBe('metal-emu');
    initParams(model, [cpu, emu]);
    const data = batches(programs.train_step, STEPS, classes);
    const a = train(model, cpu, data);
    const b = train(model, emu, data);
    for (let s = 0; s < a.length; s++)
      for (let k = 0; k < a[s].length; k++) {
        const rel = Math.abs(b[s][k] - a[s][k]) / Math.max(1e-6, Math.abs(a[s][k]));
        worst.outputs = Math.max(worst.outputs, rel);
        expect(rel, `step ${s} output ${k}: metal-emu ${b[s][k]} vs cpu ${a[s][k]}`).toBeLessThan(s === 0 ? tol.first ?? tol.outputs : tol.outputs);
      }
    expect(a[STEPS - 1][0]).toBeLessThan(a[1][0]); // it trains (steps 1 and 19 see the same batch)
    for (const name of cpu.tensorNames().filter((n) => !n.includes('exp_avg'))) {
      const x = cpu.read(name), y = emu.read(name);
      let d = 0, m = 0;
      for (let i = 0; i < x.length; i++) { d = Math.max(d, Math.abs(x[i] - y[i])); m = Math.max(m, Math.abs(x[i])); }
      if (d / Math.max(m, 1e-6) > worst.tensors) Object.assign(worst, { tensors: d / Math.max(m, 1e-6), tensor: name });
      expect(d / Math.max(m, 1e-6), name).toBeLessThan(tol.tensors); // f32 summation-order drift over 20 steps
    }
  } finally {
    cpu.close();
    emu.close();
  }
  return worst;
}
