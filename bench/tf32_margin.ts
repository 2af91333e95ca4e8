/**
 * tf32_margin: how far TF32 convolutions move a spec's logits over cuda_check's 20 parity steps,
 * the evidence for cuda_check's near-tie margin of argmax metrics (TF32_TIE_MARGIN).
 * Consumes a spec (default specs/lenet.model) and cuda_check's parity data (test/cuda_cases.ts
 * parityBatches, initParams(model, 1), the same step scalars); runs the train_step program twice on
 * the float64 reference interpreter from the same start: once exact, once with both GEMM operands
 * of every convolution node (gemm_cuda.ts TF32_OPS: conv2d and its two gradients) rounded to TF32
 * as the CUDA kernels' cvt.rna.tf32.f32 does (fp32 first, then 10 mantissa bits, ties away from
 * zero). Each run carries its own parameters and optimizer state, so the difference is what the
 * CUDA run's TF32 convolutions do to the step's forward pass AND the drift of its parameters from
 * the earlier steps, as in the parity check. Prints per step: the loss's relative difference, the
 * largest logit difference over the largest |logit| (delta), and the accuracy rows that flip.
 * A row's argmax flips only if its margin (label logit - best other logit) is below the change of
 * that difference, at most 2 x max|logit difference|: so rows with margin >= 2 x delta x max|logit|
 * cannot flip, and the near-tie margin must be at least 2 x the worst delta (cuda_check takes a
 * safety factor on top, for the real kernels' fp32 accumulation order and trajectories other than
 * this one). No GPU needed; about a minute for LeNet on one core.
 * Usage: npx tsx bench/tf32_margin.ts [specs/lenet.model] [steps (default 20)]
 */
import path from 'node:path';
import { checkFile } from '../compiler/check/index.js';
import { isPersistent, numel, type StepScalars } from '../compiler/ir/graph.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { runNode, type Env } from '../compiler/reference/interpret.js';
import { TF32_OPS } from '../compiler/codegen-cuda/gemm_cuda.js';
import { initParams } from '../compiler/train/init.js';
import { parityBatches } from '../test/cuda_cases.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const spec = process.argv[2] ?? 'specs/lenet.model';
const STEPS = Number(process.argv[3] ?? 20);

/** x rounded to fp32, then to TF32 (cvt.rna.tf32.f32: 13 low mantissa bits dropped, round half away from zero) */
const f32 = new Float32Array(1), u32 = new Uint32Array(f32.buffer);
function tf32(x: number): number {
  f32[0] = x;
  if (!Number.isFinite(f32[0])) return f32[0];
  u32[0] = (u32[0] + 0x1000) & 0xffffe000;
  return f32[0];
}

const model = checkFile(path.resolve(ROOT, spec));
const p = buildPrograms(model, { batch: model.train.batch }).train_step;
const convs = p.graph.nodes.filter((n) => TF32_OPS.has(n.op)).length;
if (!convs) throw new Error(`${spec} has no convolution: TF32 does not apply`);
const metric = p.graph.nodes.find((n) => n.op === 'accuracy' || n.op === 'top_k');
if (!metric) throw new Error(`${spec} has no accuracy / top_k metric`);
const logitsId = metric.inputs[0], labelsId = metric.inputs[1];
const C = p.graph.values[logitsId].shape.at(-1)!;
const data = parityBatches(model, p, STEPS);
const init = initParams(model, 1);

/** one run's persistent state (parameters, optimizer state), by value id, carried across steps */
function start(): Env {
  const env: Env = new Map();
  for (const v of p.graph.values) if (isPersistent(v)) env.set(v.id, init.has(v.name) ? Float64Array.from(init.get(v.name)!) : new Float64Array(numel(v.shape)));
  return env;
}

/** one train step; with `round`, the convolution nodes see TF32-rounded operands (inputs 0 and 1) */
function step(state: Env, s: number, round: boolean): { loss: number; logits: Float64Array; labels: Float64Array } {
  const env: Env = new Map(state);
  p.inputs.forEach((id, k) => env.set(id, Float64Array.from(data[s][k])));
  const sc: StepScalars = { lr: model.optimizer.lr, t: s + 1, seed: 3, counter: s };
  for (const n of p.graph.nodes) {
    if (round && TF32_OPS.has(n.op)) {
      const saved = [0, 1].map((k) => env.get(n.inputs[k])!);
      saved.forEach((x, k) => env.set(n.inputs[k], x.map(tf32)));
      runNode(p.graph, n, env, sc);
      // (the operands may be persistent tensors: the weights must keep their fp32 values)
      saved.forEach((x, k) => env.set(n.inputs[k], x));
    } else runNode(p.graph, n, env, sc);
  }
  return { loss: env.get(p.outputs[0].value)![0], logits: env.get(logitsId)!, labels: env.get(labelsId)! };
}

const exact = start(), rounded = start();
/** per step: the loss's relative difference, delta, the rows that flip, the smallest margin of a flipped row, every row's margin (exact run) */
const rows: { lossRel: number; delta: number; flips: number; minFlip: number; margins: number[] }[] = [];
for (let s = 0; s < STEPS; s++) {
  const a = step(exact, s, false), b = step(rounded, s, true);
  const scale = a.logits.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
  let d = 0;
  a.logits.forEach((v, i) => { d = Math.max(d, Math.abs(v - b.logits[i])); });
  const argmax = (x: Float64Array, r: number) => { let j = 0; for (let c = 1; c < C; c++) if (x[r * C + c] > x[r * C + j]) j = c; return j; };
  const margins: number[] = [];
  let flips = 0, minFlip = Infinity;
  for (let r = 0; r < a.labels.length; r++) {
    const l = a.labels[r];
    let best = -Infinity;
    for (let c = 0; c < C; c++) if (c !== l) best = Math.max(best, a.logits[r * C + c]);
    margins.push(Math.abs(a.logits[r * C + l] - best) / scale);
    if ((argmax(a.logits, r) === l) === (argmax(b.logits, r) === l)) continue;
    flips++;
    minFlip = Math.min(minFlip, margins[r]);
  }
  rows.push({ lossRel: Math.abs(a.loss - b.loss) / Math.abs(a.loss), delta: d / scale, flips, minFlip, margins });
}
const worstDelta = Math.max(...rows.map((r) => r.delta)), bound = 2 * worstDelta;
console.log(`${spec}: ${convs} convolution nodes in train_step, batch ${p.batch}, ${STEPS} steps (cuda_check's parity data), exact vs TF32-rounded convolution operands`);
console.log('step  loss rel diff  delta = max|dlogit|/max|logit|  rows flipped  smallest margin of a flipped row  rows with margin < 2 x worst delta');
rows.forEach((r, s) => console.log(`${String(s).padStart(4)}  ${r.lossRel.toExponential(2).padStart(13)}  ${r.delta.toExponential(2).padStart(30)}  ${String(r.flips).padStart(12)}  ${(r.flips ? r.minFlip.toExponential(2) : '-').padStart(32)}  ${String(r.margins.filter((m) => m < bound).length).padStart(34)}`));
console.log(`worst loss rel diff ${Math.max(...rows.map((r) => r.lossRel)).toExponential(2)}; worst delta ${worstDelta.toExponential(2)}: rows with margin >= ${bound.toExponential(2)} x max|logit| cannot flip on this trajectory (margins from the exact run, relative to its max |logit|)`);
