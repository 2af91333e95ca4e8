/**
 * programs: builds every Program one model instance runs.
 *
 * Consumes: a CheckedModel (training-form forward graph with BATCH) and the
 *           batch sizes (`batch` for train_step / eval, optional `evalTail` for
 *           the smaller last test batch).
 * Produces: a ProgramSet:
 *  - train_step:   bind_batch(B) -> autodiff(loss) -> optimizer_lowering
 *                  (forward in training form + loss + metrics + backward +
 *                  clip + update, or + grad_accumulate when grad_accum > 1)
 *  - apply_update: only when grad_accum > 1 or `splitUpdate` (data-parallel training: the host
 *                  all-reduces the accumulators in between) (clip + update from the `<param>.grad`
 *                  accumulators, then zero them)
 *  - eval:         bind_batch(B) -> eval_mode (loss + metrics, no gradients)
 *  - eval_tail:    the same for batch evalTail (when given and != B)
 *  - precision (train { precision }): every program goes through precision.ts (16-bit GEMM
 *                  operands); fp16 also seeds autodiff with the `amp.loss_scale` state, always
 *                  has apply_update (the unscale + clip + update the host skips on overflow), and
 *                  train_step's last output is `amp.grad_norm` (optimizer_lowering.ts)
 *  Each Program's outputs are the loss (named 'loss') then the metrics (their
 *  spec names); inputs are the spec inputs in declaration order; each has its
 *  memory plan. Programs are independent Graphs (value ids are local) sharing
 *  persistent values by name.
 *  With `fusions` (a backend's FusionCaps), fuse.ts runs on each graph before it
 *  is verified and planned, and remat.ts after it when the caps say `remat`, the
 *  program's planned peak without it reaches the caps' `fromPeakBytes`, and its
 *  recomputations shrink the planned arena (with `gradWithForward`, grad_fwd.ts then pairs each recomputed
 *  unary with its gradient); `fuseProgramSet` does the same to a built set (what a
 *  backend does with the unfused set the host hands it).
 * Invariants: every program graph passes verify.ts (a failure is a bug in mpsc
 *  and throws an internal Error); a model without a loss cannot be trained
 *  (UserError).
 */
import { UserError } from '../errors.js';
import type { CheckedModel } from '../model.js';
import { autodiff } from './autodiff.js';
import { bindBatch } from './bind_batch.js';
import { evalMode } from './eval_mode.js';
import { type FusionCaps, NO_FUSIONS, fuseProgram } from './fuse.js';
import type { Program, ProgramName, ProgramSet } from './graph.js';
import { planMemory } from './memory_plan.js';
import { REMAT_OPS, rematerialize } from './remat.js';
import { pairGradWithForward } from './grad_fwd.js';
import { lowerOptimizer } from './optimizer_lowering.js';
import { verifyGraph } from './verify.js';
import { applyPrecision, type Precision } from './precision.js';
import { AMP_CHECK_OUTPUT, LOSS_SCALE_STATE, type LossScaling } from './optimizer_lowering.js';

/** the model's train precision (fp32 when unset) */
export function precisionOf(model: CheckedModel): Precision {
  return model.train.precision ?? 'fp32';
}

export interface BuildOptions {
  batch: number;
  evalTail?: number;
  /** the fusions of the backend the programs are for (fuse.ts); default none */
  fusions?: FusionCaps;
  /** always end train_step at the gradient accumulators and update in apply_update (runtime/ddp) */
  splitUpdate?: boolean;
}

/** verify, fuse (for a backend), plan memory */
function finish(p: Program, fusions: FusionCaps): Program {
  verifyGraph(p.graph, `program ${p.name}`);
  const fused = fuseForBackend(p, fusions);
  fused.plan = planMemory(fused);
  return fused;
}

/**
 * One program as a backend with these fusions runs it: fused (fuse.ts), rematerialized (remat.ts,
 * when `fusions.remat`, the fused program's planned peak is at least its `fromPeakBytes`, and the
 * copies shrink the arena; that is decided, and done, on the program fused without `smallEpilogues`, whose unaries
 * remat.ts would not see; the `later` ops' copies too when the peak with the others' is still at least
 * `later.fromPeakBytes`), the result verified,
 * and planned again (memory_plan.ts) when the program had a plan; a program without one (kernel
 * tests: every value in its own slot) stays without.
 */
export function fuseForBackend(p: Program, fusions: FusionCaps): Program {
  if (fusions.remat) {
    // the recomputations cost kernels: only where memory is large enough to matter, and where they shrink the arena;
    // the costlier ones (`later`) only where the program is still large with the others' copies. Decided on the
    // program fused without fuse.ts rules 12, 13 (smallEpilogues), whose fused unaries remat.ts would not see
    const { fromPeakBytes, ops = REMAT_OPS, later } = fusions.remat;
    const fused = fuseProgram(p, { ...fusions, smallEpilogues: undefined });
    const plain = planMemory(fused);
    /** the program with copies of `of`'s nodes and its planned peak, or null when they do not shrink the arena */
    const withCopies = (of: readonly string[]): { r: Program; peakBytes: number } | null => {
      if (of.length === 0) return null;
      const copies = rematerialize(fused, of);
      // a recomputed unary next to its gradient: one node (grad_fwd.ts), when the backend's caps say so
      const r = fusions.gradWithForward && copies !== fused ? pairGradWithForward(copies) : copies;
      if (r === fused) return null;
      const plan = planMemory(r);
      return plan.arenaBytes < plain.arenaBytes ? { r, peakBytes: plan.peakBytes } : null;
    };
    if (plain.peakBytes >= fromPeakBytes) {
      const first = withCopies(ops.filter((op) => !later?.ops.includes(op)));
      const all = later && (first?.peakBytes ?? plain.peakBytes) >= later.fromPeakBytes ? withCopies(ops) : null;
      const chosen = all ?? first;
      if (chosen) return finishFused(p, chosen.r);
    }
    if (!fusions.smallEpilogues) return finishFused(p, fused);
  }
  return finishFused(p, fuseProgram(p, fusions));
}

function finishFused(p: Program, fused: Program): Program {
  if (fused.graph !== p.graph) verifyGraph(fused.graph, `program ${p.name} after fusion`);
  if (p.plan) fused.plan = planMemory(fused);
  return fused;
}

/** The set as a backend with these fusions runs it: each program fused and planned again. */
export function fuseProgramSet(ps: ProgramSet, fusions: FusionCaps): ProgramSet {
  const out: ProgramSet = { model: ps.model, train_step: fuseForBackend(ps.train_step, fusions), eval: fuseForBackend(ps.eval, fusions) };
  if (ps.apply_update) out.apply_update = fuseForBackend(ps.apply_update, fusions);
  if (ps.eval_tail) out.eval_tail = fuseForBackend(ps.eval_tail, fusions);
  if (ps.precision) out.precision = ps.precision;
  return out;
}

function modelOutputs(model: CheckedModel, map: (id: number) => number = (id) => id): { name: string; value: number }[] {
  const outs: { name: string; value: number }[] = [];
  if (model.loss) outs.push({ name: 'loss', value: map(model.loss.value) });
  for (const m of model.metrics) outs.push({ name: m.name, value: map(m.value) });
  return outs;
}

function buildEval(model: CheckedModel, name: 'eval' | 'eval_tail', batch: number, fusions: FusionCaps): Program {
  const ev = evalMode(bindBatch(model.graph, batch));
  const idMap = ev.idMap;
  const graph = applyPrecision(ev.graph, precisionOf(model));
  const map = (id: number) => {
    const m = idMap[id];
    if (m === undefined || m < 0) throw new Error(`internal: value %${id} does not exist in the eval graph`);
    return m;
  };
  return finish({ name, batch, graph, inputs: model.inputs.map((i) => map(i.value)), outputs: modelOutputs(model, map) }, fusions);
}

export function buildPrograms(model: CheckedModel, opts: BuildOptions): ProgramSet {
  if (!model.loss) {
    throw new UserError(`${model.file}: error: model '${model.name}' has no loss, so it cannot be trained; add a loss (e.g. \`loss: cross_entropy(logits, label)\`) to the spec`);
  }
  const B = opts.batch;
  const precision = precisionOf(model);
  const bound = bindBatch(model.graph, B);
  // fp16: the backward is seeded with the loss scale (a persistent scalar the host's scaler writes)
  let scaling: LossScaling | undefined;
  if (precision === 'fp16') {
    scaling = { scale: bound.values.length };
    bound.values.push({ id: scaling.scale, name: LOSS_SCALE_STATE, dtype: 'f32', shape: [], kind: 'state' });
  }
  const ad = autodiff(bound, model.loss.value, scaling?.scale);
  if (ad.grads.length === 0) {
    throw new UserError(`${model.file}: error: the loss of model '${model.name}' does not depend on any trainable parameter, so there is nothing to train; check that the loss reads the network's output`);
  }
  const lowered = lowerOptimizer(ad.graph, ad.grads, model.optimizer, model.train, scaling, opts.splitUpdate === true);
  const inputs = model.inputs.map((i) => i.value);
  const fusions = opts.fusions ?? NO_FUSIONS;
  const trainOutputs = modelOutputs(model);
  if (scaling) trainOutputs.push({ name: AMP_CHECK_OUTPUT, value: lowered.train.values.findIndex((v) => v.name === AMP_CHECK_OUTPUT && v.kind === 'output') });
  const set: ProgramSet = {
    model: model.name,
    train_step: finish({ name: 'train_step', batch: B, graph: applyPrecision(lowered.train, precision, ad.gradOf), inputs, outputs: trainOutputs }, fusions),
    eval: buildEval(model, 'eval', B, fusions),
  };
  if (precision !== 'fp32') set.precision = precision;
  if (lowered.applyUpdate) set.apply_update = finish({ name: 'apply_update', batch: B, graph: applyPrecision(lowered.applyUpdate, precision), inputs: [], outputs: [] }, fusions);
  if (opts.evalTail !== undefined && opts.evalTail !== B && opts.evalTail > 0) set.eval_tail = buildEval(model, 'eval_tail', opts.evalTail, fusions);
  return set;
}
