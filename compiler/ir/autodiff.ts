/**
 * autodiff: reverse-mode automatic differentiation of a scalar loss.
 *
 * Consumes: a batch-bound forward Graph in training form (bind_batch output) and
 *           the value id of its scalar loss.
 * Produces: a new Graph = the forward graph unchanged (same value and node ids)
 *           followed by backward nodes built from the backward ops of ops.ts, and
 *           the list of { param, grad } pairs: one per parameter the loss depends
 *           on (parameters that do not reach the loss get no gradient, like a
 *           PyTorch parameter whose .grad stays None).
 * Invariants relied on: the forward graph is in topological order and SSA; the
 *           loss is a scalar produced by a loss op (cross_entropy, nll, mse,
 *           bce_with_logits) or by `binary add` of such scalars.
 * Guarantees:
 *  - only gradients that lead to a parameter are computed: a value gets a
 *    gradient iff it depends on a parameter and the loss depends on it (no
 *    gradients for inputs, labels, running stats or metric branches);
 *  - a value read by several nodes (residuals, shared weights) receives the sum
 *    of all contributions (binary add), so parameter gradients accumulate;
 *  - broadcasting in `binary` is undone with sum_to; dropout_grad reuses the same
 *    (seed, counter, stream) so its mask equals the forward mask;
 *  - gradient values have kind 'grad' and are named `d_<value name>`; the final
 *    gradient of parameter `fc1.weight` is named `fc1.weight.grad` (when that
 *    value is not also the gradient of another value, e.g. through `add`).
 */
import { GraphBuilder, type AttrValue, type Graph, type Node, type Value } from './graph.js';

export interface ParamGrad {
  /** parameter value id */
  param: number;
  /** gradient value id (same shape as the parameter) */
  grad: number;
}

export interface AutodiffResult {
  graph: Graph;
  grads: ParamGrad[];
}

/** The implicit gradient of the loss with respect to itself (1). */
const SEED = -2;

const LOSS_GRAD_OP: Record<string, string> = {
  cross_entropy: 'cross_entropy_grad',
  nll: 'nll_grad',
  mse: 'mse_grad',
  bce_with_logits: 'bce_with_logits_grad',
};

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

export function autodiff(forward: Graph, loss: number): AutodiffResult {
  const b = new GraphBuilder();
  for (const v of forward.values) b.graph.values.push({ ...v, shape: [...v.shape] });
  for (const n of forward.nodes) b.graph.nodes.push({ ...n, inputs: [...n.inputs], outputs: [...n.outputs], attrs: { ...n.attrs } });
  const values = b.graph.values;
  const V = (id: number): Value => values[id];

  const lossValue = forward.values[loss];
  if (!lossValue || lossValue.shape.length !== 0) throw new Error(`internal: autodiff needs a scalar loss value, got %${loss}`);

  // ---- which values need a gradient: depend on a param (forward sweep) and reach the loss (backward sweep)
  const fromParam = new Array<boolean>(values.length).fill(false);
  for (const v of forward.values) if (v.kind === 'param') fromParam[v.id] = true;
  for (const n of forward.nodes) {
    if (n.inputs.some((i) => i >= 0 && fromParam[i])) for (const o of n.outputs) fromParam[o] = true;
  }
  const toLoss = new Array<boolean>(values.length).fill(false);
  toLoss[loss] = true;
  for (let k = forward.nodes.length - 1; k >= 0; k--) {
    const n = forward.nodes[k];
    if (n.outputs.some((o) => toLoss[o])) for (const i of n.inputs) if (i >= 0) toLoss[i] = true;
  }
  const needs = (id: number) => id >= 0 && fromParam[id] && toLoss[id];

  // ---- gradient bookkeeping
  const grad = new Map<number, number>(); // value id -> current gradient value id (or SEED)
  const owner = new Map<number, number>(); // gradient value id -> how many values use it as their gradient
  const claim = (g: number) => owner.set(g, (owner.get(g) ?? 0) + 1);
  const gname = (id: number) => `d_${V(id).name}`;
  const emit = (op: string, inputs: number[], name: string, shape: number[], attrs: Record<string, AttrValue>, n: Node, dtype: 'f32' | 'i32' = 'f32'): number =>
    b.emit(op, inputs, [{ name, shape, dtype, kind: 'grad' }], attrs, n.path, n.loc)[0];

  const accumulate = (target: number, g: number, n: Node) => {
    if (!needs(target)) return;
    const prev = grad.get(target);
    if (prev === undefined) {
      grad.set(target, g);
      claim(g);
      return;
    }
    if (prev === SEED || g === SEED) throw new Error(`internal: autodiff cannot add the implicit loss seed to another gradient (%${target})`);
    const sum = emit('binary', [prev, g], gname(target), [...V(target).shape], { fn: 'add' }, n);
    owner.set(prev, (owner.get(prev) ?? 1) - 1);
    grad.set(target, sum);
    claim(sum);
  };

  /** gradient of a broadcast operand: sum the stretched dims away when shapes differ */
  const unbroadcast = (dy: number, target: number, n: Node): number => {
    const shape = V(target).shape;
    if (sameShape(V(dy).shape, shape)) return dy;
    return emit('sum_to', [dy], gname(target), [...shape], { shape: [...shape] }, n);
  };

  if (needs(loss)) grad.set(loss, SEED);
  for (let k = forward.nodes.length - 1; k >= 0; k--) {
    const n = forward.nodes[k];
    const dyOf = n.outputs.map((o) => grad.get(o));
    if (dyOf.every((g) => g === undefined)) continue;
    const dy = dyOf[0];
    const [x0, x1, x2] = n.inputs;
    const need = n.inputs.map((i) => needs(i));
    const shapeOf = (id: number) => [...V(id).shape];
    if (dy === SEED && !(n.op in LOSS_GRAD_OP) && !(n.op === 'binary' && n.attrs.fn === 'add')) {
      throw new Error(`internal: autodiff: the loss must be produced by a loss op, not '${n.op}'`);
    }
    switch (n.op) {
      case 'linear': {
        if (need[0]) accumulate(x0, emit('matmul', [dy!, x1], gname(x0), shapeOf(x0), { transA: false, transB: false }, n), n);
        if (need[1]) accumulate(x1, emit('matmul', [dy!, x0], gname(x1), shapeOf(x1), { transA: true, transB: false }, n), n);
        if (x2 >= 0 && need[2]) accumulate(x2, emit('sum_to', [dy!], gname(x2), shapeOf(x2), { shape: shapeOf(x2), axes: [0] }, n), n);
        break;
      }
      case 'conv2d': {
        const conv = { stride: n.attrs.stride, padding: n.attrs.padding, dilation: n.attrs.dilation, groups: n.attrs.groups };
        if (need[0]) accumulate(x0, emit('conv2d_grad_input', [dy!, x1], gname(x0), shapeOf(x0), { ...conv, x_shape: shapeOf(x0) }, n), n);
        if (need[1]) accumulate(x1, emit('conv2d_grad_weight', [dy!, x0], gname(x1), shapeOf(x1), { ...conv, w_shape: shapeOf(x1) }, n), n);
        if (x2 >= 0 && need[2]) accumulate(x2, emit('sum_to', [dy!], gname(x2), shapeOf(x2), { shape: shapeOf(x2), axes: [0, 2, 3] }, n), n);
        break;
      }
      case 'maxpool2d':
        if (need[0]) accumulate(x0, emit('maxpool2d_grad', [dy!, x0], gname(x0), shapeOf(x0), { kernel: n.attrs.kernel, stride: n.attrs.stride, padding: n.attrs.padding }, n), n);
        break;
      case 'avgpool2d':
        if (need[0]) accumulate(x0, emit('avgpool2d_grad', [dy!], gname(x0), shapeOf(x0), { kernel: n.attrs.kernel, stride: n.attrs.stride, padding: n.attrs.padding, x_shape: shapeOf(x0) }, n), n);
        break;
      case 'global_avgpool':
        if (need[0]) accumulate(x0, emit('global_avgpool_grad', [dy!], gname(x0), shapeOf(x0), { x_shape: shapeOf(x0) }, n), n);
        break;
      case 'reshape':
        if (need[0]) accumulate(x0, emit('reshape', [dy!], gname(x0), shapeOf(x0), { shape: shapeOf(x0) }, n), n);
        break;
      case 'unary': {
        // the fn and all its attrs (scalar_fns.ts): the gradient formula reads the same attrs
        if (need[0]) accumulate(x0, emit('unary_grad', [dy!, x0], gname(x0), shapeOf(x0), { ...n.attrs }, n), n);
        break;
      }
      case 'binary': {
        const fn = n.attrs.fn;
        if (dy === SEED) {
          // scalar loss = add(loss_a, loss_b): both receive the seed
          if (need[0]) accumulate(x0, SEED, n);
          if (need[1]) accumulate(x1, SEED, n);
          break;
        }
        const yShape = V(n.outputs[0]).shape;
        if (fn === 'add' || fn === 'sub') {
          if (need[0]) accumulate(x0, unbroadcast(dy!, x0, n), n);
          if (need[1]) {
            const g = fn === 'add' ? dy! : emit('unary', [dy!], gname(x1), [...yShape], { fn: 'neg' }, n);
            accumulate(x1, unbroadcast(g, x1, n), n);
          }
        } else if (fn === 'mul') {
          if (need[0]) accumulate(x0, unbroadcast(emit('binary', [dy!, x1], gname(x0), [...yShape], { fn: 'mul' }, n), x0, n), n);
          if (need[1]) accumulate(x1, unbroadcast(emit('binary', [dy!, x0], gname(x1), [...yShape], { fn: 'mul' }, n), x1, n), n);
        } else {
          throw new Error(`internal: autodiff: no gradient rule for binary fn '${String(fn)}'`);
        }
        break;
      }
      case 'softmax':
        if (need[0]) accumulate(x0, emit('softmax_grad', [dy!, n.outputs[0]], gname(x0), shapeOf(x0), { axis: n.attrs.axis }, n), n);
        break;
      case 'log_softmax':
        if (need[0]) accumulate(x0, emit('log_softmax_grad', [dy!, n.outputs[0]], gname(x0), shapeOf(x0), { axis: n.attrs.axis }, n), n);
        break;
      case 'dropout':
        if (need[0]) accumulate(x0, emit('dropout_grad', [dy!], gname(x0), shapeOf(x0), { p: n.attrs.p, stream: n.attrs.stream }, n), n);
        break;
      case 'batchnorm_train':
      case 'layernorm': {
        // only dy of output 0 flows back (mean / invstd are saved statistics, not differentiated outputs)
        if (dyOf.slice(1).some((g) => g !== undefined)) throw new Error(`internal: autodiff: gradient reaches the saved statistics of ${n.op}`);
        if (!(need[0] || need[1] || need[2])) break;
        const gop = n.op === 'layernorm' ? 'layernorm_grad' : 'batchnorm_grad';
        const outs = b.emit(
          gop,
          [dy!, x0, x1, n.outputs[1], n.outputs[2]],
          [
            { name: gname(x0), shape: shapeOf(x0), kind: 'grad' },
            { name: gname(x1), shape: shapeOf(x1), kind: 'grad' },
            { name: gname(x2), shape: shapeOf(x2), kind: 'grad' },
          ],
          {},
          n.path,
          n.loc,
        );
        for (let j = 0; j < 3; j++) if (need[j]) accumulate(n.inputs[j], outs[j], n);
        break;
      }
      case 'embedding':
        if (need[1]) accumulate(x1, emit('embedding_grad', [dy!, x0], gname(x1), shapeOf(x1), { w_shape: shapeOf(x1) }, n), n);
        break;
      case 'concat': {
        const axis = n.attrs.axis as number;
        let start = 0;
        for (const id of n.inputs) {
          const len = V(id).shape[axis];
          if (needs(id)) accumulate(id, emit('slice', [dy!], gname(id), shapeOf(id), { axis, start, length: len }, n), n);
          start += len;
        }
        break;
      }
      case 'cross_entropy':
      case 'nll':
      case 'mse':
      case 'bce_with_logits': {
        const gop = LOSS_GRAD_OP[n.op];
        const attrs: Record<string, AttrValue> = n.op === 'cross_entropy' ? { label_smoothing: n.attrs.label_smoothing ?? 0 } : {};
        const scaled = (g: number, target: number): number =>
          dy === SEED ? g : emit('binary', [g, dy!], gname(target), shapeOf(target), { fn: 'mul' }, n);
        let dpred = -1;
        if (need[0]) {
          dpred = emit(gop, [x0, x1], gname(x0), shapeOf(x0), attrs, n);
          accumulate(x0, scaled(dpred, x0), n);
        }
        if (need[1]) {
          if (n.op !== 'mse') throw new Error(`internal: autodiff: no gradient for the target of ${n.op}`);
          // mse is symmetric: d/dtarget = -d/dpred
          const dp = dpred >= 0 ? dpred : emit(gop, [x0, x1], gname(x0), shapeOf(x0), attrs, n);
          accumulate(x1, scaled(emit('unary', [dp], gname(x1), shapeOf(x1), { fn: 'neg' }, n), x1), n);
        }
        break;
      }
      default:
        throw new Error(`internal: autodiff: no gradient rule for op '${n.op}'`);
    }
  }

  const grads: ParamGrad[] = [];
  for (const v of forward.values) {
    if (v.kind !== 'param') continue;
    const g = grad.get(v.id);
    if (g === undefined) continue;
    if (g === SEED) throw new Error(`internal: autodiff: parameter ${v.name} is the loss itself`);
    if ((owner.get(g) ?? 0) === 1 && values[g].kind === 'grad') values[g].name = `${v.name}.grad`;
    grads.push({ param: v.id, grad: g });
  }
  return { graph: b.graph, grads };
}
