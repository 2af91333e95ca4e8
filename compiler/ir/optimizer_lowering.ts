/**
 * optimizer_lowering: turns parameter gradients into in-place parameter updates.
 *
 * Consumes: the autodiff Graph (forward + backward), its { param, grad } list,
 *           the model's OptimizerConfig and TrainConfig (grad_clip, grad_accum).
 * Produces:
 *  - grad_accum == 1: `train` = the input graph followed by
 *      [grad_norm(all grads) -> clip_coef {max_norm}]   (only when grad_clip is set)
 *      one sgd_update / adam_update per parameter (gscale = clip coef or -1)
 *  - grad_accum == K > 1: `train` = the input graph followed by one
 *      grad_accumulate(acc, g) {scale: 1/K} per parameter, where acc is a 'gradacc'
 *      value named `<param>.grad` (the transient gradient is renamed `d_<param>`);
 *      and `applyUpdate`, a separate Graph holding only persistent values:
 *      [grad_norm(accs) -> clip_coef], one update per parameter reading acc as its
 *      gradient, then zero(acc) for every accumulator.
 *  - loss scaling (fp16, `scaling` given): as grad_accum > 1 (also for K = 1), and train_step ends
 *      with grad_norm(accs) as the output AMP_CHECK_OUTPUT (the host skips apply_update and zeroes
 *      the accumulators when it is not finite); apply_update divides each accumulator by the
 *      LOSS_SCALE_STATE scalar (`binary div`) before the clip and the update read it, as
 *      torch.amp.GradScaler unscales before clipping.
 *  - split (data-parallel training, runtime/ddp): as grad_accum > 1 (also for K = 1), so the host can
 *      all-reduce the accumulators between train_step and apply_update; each grad_accumulate sits
 *      right after the node producing its gradient (accumulateEarly), so a backend can all-reduce
 *      finished accumulators while the backward goes on.
 *  Optimizer state values have kind 'optstate' and the parameter's shape, named
 *  `<param>.momentum_buffer` (sgd with momentum != 0), `<param>.exp_avg` and
 *  `<param>.exp_avg_sq` (adam, adamw); they start at zero (backends zero-fill).
 * Invariants: updates come after every node of the input graph, so all backward
 *  reads of a parameter see its pre-update value; the clip coefficient is computed
 *  from all gradients before any update. Node and value ids of the input graph
 *  are unchanged (values and nodes are only appended).
 */
import { GraphBuilder, type Graph, type Value } from './graph.js';
import type { OptimizerConfig, TrainConfig } from '../model.js';
import type { ParamGrad } from './autodiff.js';

export interface LoweredOptimizer {
  train: Graph;
  /** present iff grad_accum > 1, loss scaling or split */
  applyUpdate?: Graph;
  /** value id (in the graph that performs the update) of the global grad norm, when grad_clip is set */
  gradNorm?: number;
}

function copyGraph(g: Graph): GraphBuilder {
  const b = new GraphBuilder();
  for (const v of g.values) b.graph.values.push({ ...v, shape: [...v.shape] });
  for (const n of g.nodes) b.graph.nodes.push({ ...n, inputs: [...n.inputs], outputs: [...n.outputs], attrs: { ...n.attrs } });
  return b;
}

/** Emit clip (optional) + one update node per (param, grad) pair into b. Returns the grad-norm value id, if any. */
function emitUpdates(b: GraphBuilder, pairs: { param: Value; grad: number }[], opt: OptimizerConfig, gradClip: number | null): number | undefined {
  let gscale = -1;
  let norm: number | undefined;
  if (gradClip !== null && pairs.length > 0) {
    norm = b.emit('grad_norm', pairs.map((p) => p.grad), [{ name: 'grad_norm', shape: [], kind: 'output' }], {}, 'optimizer')[0];
    gscale = b.emit('clip_coef', [norm], [{ name: 'clip_coef', shape: [] }], { max_norm: gradClip }, 'optimizer')[0];
  }
  for (const { param, grad } of pairs) {
    const state = (suffix: string) => b.value(`${param.name}.${suffix}`, 'f32', [...param.shape], 'optstate');
    if (opt.kind === 'sgd') {
      const buf = opt.momentum !== 0 ? state('momentum_buffer') : -1;
      b.node('sgd_update', [param.id, grad, buf, gscale], [], { momentum: opt.momentum, nesterov: opt.nesterov, weight_decay: opt.weight_decay }, param.name);
    } else {
      const m = state('exp_avg');
      const v = state('exp_avg_sq');
      b.node(
        'adam_update',
        [param.id, grad, m, v, gscale],
        [],
        { beta1: opt.beta1, beta2: opt.beta2, eps: opt.eps, weight_decay: opt.weight_decay, decoupled: opt.kind === 'adamw' },
        param.name,
      );
    }
  }
  return norm;
}

/** the train_step output that fp16 loss scaling checks: the norm of the scaled, accumulated gradients (inf / NaN: skip the step) */
export const AMP_CHECK_OUTPUT = 'amp.grad_norm';
/** the persistent scalar (kind state) holding the fp16 loss scale; the host's scaler (runtime/loss_scaler.ts) writes it */
export const LOSS_SCALE_STATE = 'amp.loss_scale';

export interface LossScaling {
  /** value id of the LOSS_SCALE_STATE scalar in `graph` */
  scale: number;
}

export function lowerOptimizer(
  graph: Graph,
  grads: ParamGrad[],
  opt: OptimizerConfig,
  train: Pick<TrainConfig, 'grad_clip' | 'grad_accum'>,
  scaling?: LossScaling,
  split = false,
): LoweredOptimizer {
  const K = train.grad_accum;
  if (!Number.isInteger(K) || K < 1) throw new Error(`internal: grad_accum must be an integer >= 1, got ${K}`);
  const b = copyGraph(graph);
  // split: data-parallel training (runtime/ddp) all-reduces the accumulators between train_step and apply_update
  if (K === 1 && !scaling && !split) {
    const pairs = grads.map((g) => ({ param: b.graph.values[g.param], grad: g.grad }));
    const gradNorm = emitUpdates(b, pairs, opt, train.grad_clip);
    return { train: b.graph, gradNorm };
  }
  // grad_accum > 1, loss scaling or split: accumulate in train_step, update in apply_update
  const up = new GraphBuilder();
  const pairs: { param: Value; grad: number }[] = [];
  const accs: number[] = [];
  const trainAccs: number[] = [];
  const upScale = scaling ? up.value(LOSS_SCALE_STATE, 'f32', [], 'state') : -1;
  for (const g of grads) {
    const p = b.graph.values[g.param];
    const gv = b.graph.values[g.grad];
    if (gv.name === `${p.name}.grad`) gv.name = `d_${p.name}`;
    const acc = b.value(`${p.name}.grad`, 'f32', [...p.shape], 'gradacc');
    b.node('grad_accumulate', [acc, g.grad], [], { scale: 1 / K }, p.name);
    trainAccs.push(acc);
    const upParam = up.value(p.name, p.dtype, [...p.shape], 'param');
    const upAcc = up.value(`${p.name}.grad`, 'f32', [...p.shape], 'gradacc');
    // loss scaling: the optimizer (and the clip before it) reads the unscaled gradient, acc / scale
    const grad = scaling ? up.emit('binary', [upAcc, upScale], [{ name: `${p.name}.grad_unscaled`, shape: [...p.shape] }], { fn: 'div' }, p.name)[0] : upAcc;
    pairs.push({ param: up.get(upParam), grad });
    accs.push(upAcc);
  }
  // loss scaling: the host skips apply_update when the scaled gradients hold an inf or NaN (their norm is then not finite)
  if (scaling) b.emit('grad_norm', trainAccs, [{ name: AMP_CHECK_OUTPUT, shape: [], kind: 'output' }], {}, 'optimizer');
  const gradNorm = emitUpdates(up, pairs, opt, train.grad_clip);
  for (const acc of accs) up.node('zero', [acc], [], {}, up.get(acc).name);
  return { train: split ? accumulateEarly(b.graph) : b.graph, applyUpdate: up.graph, gradNorm };
}

/**
 * Data-parallel train_step: each grad_accumulate moved right after the node producing its gradient
 * (the backward's order: the last layers' first), so a backend can start averaging an accumulator over
 * the ranks while the rest of the backward runs (codegen-cuda's buckets). Valid because an accumulate
 * reads only its gradient and its accumulator, and nothing in train_step reads the accumulator after it
 * (the grad_norm of loss scaling reads them all and stays last). Node ids are renumbered.
 */
function accumulateEarly(g: Graph): Graph {
  const producer = new Map<number, number>();
  g.nodes.forEach((n, i) => n.outputs.forEach((v) => producer.set(v, i)));
  const after = new Map<number, Graph['nodes']>();
  const moved = new Set<number>();
  g.nodes.forEach((n, i) => {
    const at = n.op === 'grad_accumulate' ? producer.get(n.inputs[1]) : undefined;
    if (at === undefined) return;
    moved.add(i);
    after.set(at, [...(after.get(at) ?? []), n]);
  });
  const nodes: Graph['nodes'] = [];
  g.nodes.forEach((n, i) => {
    if (moved.has(i)) return;
    nodes.push(n, ...(after.get(i) ?? []));
  });
  return { ...g, nodes: nodes.map((n, id) => ({ ...n, id })) };
}
