/**
 * parity_drift: how far two correct backends drift apart over a training run, to tell float-order
 * drift from a wrong kernel (bench/cuda_check.ts's parity compares cuda with cpu step by step).
 * Runs the parity run of cuda_check (same initial parameters, batches, scalars, STEPS steps) on
 * the CPU backend (fp32) and on the float64 reference interpreter, and prints per step both losses
 * and their relative difference. A CPU-vs-reference drift of the size cuda-vs-CPU shows for the
 * same spec means fp32 rounding amplified by the training dynamics, not a kernel error.
 * Usage: npx tsx bench/parity_drift.ts SPEC [--steps 20] [--batch N]
 * Consumes a spec; needs a C++ compiler (the CPU backend), no GPU.
 */
import os from 'node:os';
import { checkFile } from '../compiler/check/index.js';
import { numel } from '../compiler/ir/graph.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { makeRng } from '../compiler/reference/fixtures.js';
import { initParams } from '../compiler/train/init.js';
import { createCpuSession } from '../runtime/native/native_session.js';
import { createReferenceSession } from '../runtime/reference_session.js';
import type { Batch, Session } from '../runtime/session.js';

const args = process.argv.slice(2);
const opt = (k: string, d: string) => (args.includes(k) ? args[args.indexOf(k) + 1] : d);
const spec = args.find((a) => a.endsWith('.model'));
if (!spec) {
  console.error('usage: npx tsx bench/parity_drift.ts SPEC [--steps 20] [--batch N]');
  process.exit(1);
}
const STEPS = Number(opt('--steps', '20'));
const model = checkFile(spec);
const programs = buildPrograms(model, { batch: Number(opt('--batch', String(model.train.batch))) });
const p = programs.train_step;
// cuda_check.ts's batches: two random batches alternating, from seed 11
const rng = makeRng(11);
const classes = model.numClasses ?? 10;
const two: Batch[] = [0, 1].map(() => p.inputs.map((id) => {
  const v = p.graph.values[id];
  const k = numel(v.shape);
  if (v.dtype === 'i32') return Int32Array.from({ length: k }, () => Math.min(classes - 1, Math.floor(rng() * classes)));
  return Float32Array.from({ length: k }, () => 2 * rng() - 1);
}));
const losses = (s: Session) => {
  for (const [name, v] of initParams(model, 1)) s.write(name, v);
  return Array.from({ length: STEPS }, (_, step) => s.run('train_step', two[step % 2], { lr: model.optimizer.lr, t: step + 1, seed: 3, counter: step })[0]);
};
const cpu = await createCpuSession(programs, { threads: Math.min(8, os.cpus().length) });
const ref = await createReferenceSession(programs);
const a = losses(cpu), b = losses(ref);
cpu.close();
ref.close();
console.log(`${spec} batch ${p.batch}, lr ${model.optimizer.lr}: step, cpu (fp32) loss, reference (float64) loss, relative difference`);
a.forEach((l, s) => console.log(`${String(s).padStart(4)} ${l.toPrecision(7).padStart(12)} ${b[s].toPrecision(7).padStart(12)} ${(Math.abs(l - b[s]) / Math.abs(b[s])).toExponential(2)}`));
