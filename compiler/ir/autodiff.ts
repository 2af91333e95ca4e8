/**
 * autodiff: reverse-mode automatic differentiation of a scalar loss.
 *
 * Consumes: a batch-bound forward Graph in training form (bind_batch output),
 *           the value id of its scalar loss, and optionally a scalar value to seed the
 *           backward with instead of 1 (fp16 loss scaling: every gradient is then scaled by it).
 * Produces: a new Graph = the forward graph unchanged (same value and node ids)
 *           followed by backward nodes built from the backward ops of ops.ts, and
 *           the list of { param, grad } pairs: one per parameter the loss depends
 *           on (parameters that do not reach the loss get no gradient, like a
 *           PyTorch parameter whose .grad stays None).
 * How: walks the nodes in reverse and runs each op's gradient rule (`vjp` in the op
 *           catalogue, ops.ts / op_rules/*.ts) through a VjpCtx that names, shapes and
 *           accumulates what the rule emits; this file knows no op by name.
 * Invariants relied on: the forward graph is in topological order and SSA; the
 *           loss is a scalar produced by a loss op (cross_entropy, nll, mse,
 *           bce_with_logits) or by `binary add` of such scalars.
 * Guarantees:
 *  - only gradients that lead to a parameter are computed: a value gets a
 *    gradient iff it depends on a parameter and the loss depends on it (no
 *    gradients for inputs, labels, running stats or metric branches);
 *  - a value read by several nodes (residuals, shared weights) receives the sum
 *    of all contributions (binary add), so parameter gradients accumulate;
 *  - gradients of parts of a value (accPart: slices) that tile it along one axis (the q, k, v
 *    of a fused projection split apart) are one `concat`, not a zero-padded full-size tensor
 *    per part summed with adds; parts that do not tile are padded and added;
 *  - broadcasting in `binary` is undone with sum_to; dropout_grad reuses the same
 *    (seed, counter, stream) so its mask equals the forward mask;
 *  - `gradOf` names the forward value each accumulated gradient (contribution or sum) belongs to;
 *  - gradient values have kind 'grad' and are named `d_<value name>`; the final
 *    gradient of parameter `fc1.weight` is named `fc1.weight.grad` (when that
 *    value is not also the gradient of another value, e.g. through `add`).
 */
import { GraphBuilder, type AttrValue, type Graph, type Node, type Value } from './graph.js';
import { type VjpCtx, opDef } from './ops.js';

export interface ParamGrad {
  /** parameter value id */
  param: number;
  /** gradient value id (same shape as the parameter) */
  grad: number;
}

export interface AutodiffResult {
  graph: Graph;
  grads: ParamGrad[];
  /**
   * gradOf[id]: the forward value whose gradient backward value `id` is, or a contribution to it
   * (what a gradient rule accumulates, and the sums, concats and pads of those); -1 for forward
   * values and for values computed inside one rule on the way (mixed precision stores a gradient
   * in its value's type: precision.ts)
   */
  gradOf: number[];
}

/** The implicit gradient of the loss with respect to itself (1). */
const SEED = -2;

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

/**
 * `seed`: the id of a scalar value of `forward` to use as the loss's gradient instead of the
 * implicit 1 (fp16 loss scaling: the `amp.loss_scale` state), so every gradient is scaled by it.
 */
export function autodiff(forward: Graph, loss: number, seed?: number): AutodiffResult {
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
  const gradOf: number[] = forward.values.map(() => -1);
  /** emits op with one output per target (the gradient of that forward value, named after it) */
  const emitFor = (op: string, inputs: number[], targets: number[], shapes: number[][], attrs: Record<string, AttrValue>, n: Node): number[] => {
    const outs = b.emit(op, inputs, targets.map((t, k) => ({ name: gname(t), shape: shapes[k], dtype: 'f32' as const, kind: 'grad' as const })), attrs, n.path, n.loc);
    outs.forEach((o, k) => (gradOf[o] = targets[k]));
    return outs;
  };
  const emit = (op: string, inputs: number[], target: number, shape: number[], attrs: Record<string, AttrValue>, n: Node): number =>
    emitFor(op, inputs, [target], [shape], attrs, n)[0];

  const contribution = new Set<number>();
  const accumulate = (target: number, g: number, n: Node) => {
    if (!needs(target)) return;
    if (g !== SEED) contribution.add(g);
    const prev = grad.get(target);
    if (prev === undefined) {
      grad.set(target, g);
      claim(g);
      return;
    }
    if (prev === SEED || g === SEED) throw new Error(`internal: autodiff cannot add the implicit loss seed to another gradient (%${target})`);
    const sum = emit('binary', [prev, g], target, [...V(target).shape], { fn: 'add' }, n);
    contribution.add(sum);
    owner.set(prev, (owner.get(prev) ?? 1) - 1);
    grad.set(target, sum);
    claim(sum);
  };

  /** value id -> gradient parts (accPart: g covers [start, start + its length) of the value along axis), in arrival order */
  const parts = new Map<number, { g: number; axis: number; start: number; n: Node }[]>();
  const accumulatePart = (target: number, g: number, axis: number, start: number, n: Node) => {
    if (!needs(target)) return;
    if (g === SEED) throw new Error(`internal: autodiff: the loss seed cannot be part of a gradient (%${target})`);
    parts.set(target, [...(parts.get(target) ?? []), { g, axis, start, n }]);
  };
  /**
   * the parts of target's gradient into its gradient, once every reader of target has run its rule
   * (target's producer is next, or target is a parameter): parts that tile target along one axis
   * (in order, no gap, no overlap) become one concat (a single part covering all of target is its
   * gradient as it is); otherwise each part is zero-padded to target's shape and added
   */
  const settle = (target: number) => {
    const ps = parts.get(target);
    if (!ps) return;
    parts.delete(target);
    const shape = V(target).shape, axis = ps[0].axis;
    const sorted = [...ps].sort((a, b) => a.start - b.start);
    let end = 0;
    const tiles = ps.every((p) => p.axis === axis) && sorted.every((p) => {
      const ok = p.start === end;
      end += V(p.g).shape[axis];
      return ok;
    }) && end === shape[axis];
    if (tiles) {
      const last = ps[ps.length - 1].n;
      accumulate(target, sorted.length === 1 ? sorted[0].g : emit('concat', sorted.map((p) => p.g), target, [...shape], { axis }, last), last);
      return;
    }
    for (const p of ps) {
      const pads = shape.flatMap((d, i) => (i === p.axis ? [p.start, d - p.start - V(p.g).shape[p.axis]] : [0, 0]));
      accumulate(target, emit('pad', [p.g], target, [...shape], { pads, value: 0 }, p.n), p.n);
    }
  };

  /** gradient of a broadcast operand: sum the stretched dims away when shapes differ */
  const unbroadcast = (dy: number, target: number, n: Node): number => {
    const shape = V(target).shape;
    if (sameShape(V(dy).shape, shape)) return dy;
    return emit('sum_to', [dy], target, [...shape], { shape: [...shape] }, n);
  };

  if (seed !== undefined && (forward.values[seed]?.shape.length ?? -1) !== 0) throw new Error(`internal: autodiff seed %${seed} is not a scalar value`);
  if (needs(loss)) {
    grad.set(loss, seed ?? SEED);
    if (seed !== undefined) claim(seed);
  }
  for (let k = forward.nodes.length - 1; k >= 0; k--) {
    const n = forward.nodes[k];
    const dyOf = n.outputs.map((o) => {
      settle(o);
      return grad.get(o);
    });
    if (dyOf.every((g) => g === undefined)) continue;
    const def = opDef(n.op);
    if (!def.vjp) throw new Error(`internal: autodiff: no gradient rule for op '${n.op}'`);
    const ctx: VjpCtx = {
      node: n,
      x: (k) => n.inputs[k],
      y: (k) => n.outputs[k],
      dy() {
        const g = dyOf[0];
        if (g === undefined) throw new Error(`internal: autodiff: ${n.op} output 0 has no gradient`);
        if (g === SEED) throw new Error(`internal: autodiff: the loss must be produced by a loss op, not '${n.op}'`);
        return g;
      },
      isSeed: dyOf[0] === SEED,
      hasDy: (k) => dyOf[k] !== undefined,
      need: (k) => needs(n.inputs[k] ?? -1),
      shape: (id) => [...V(id).shape],
      emit: (op, inputs, target, attrs = {}, shape) => emit(op, inputs, target, shape ?? [...V(target).shape], attrs, n),
      emitN: (op, inputs, targets, attrs = {}, shapes) => emitFor(op, inputs, targets, targets.map((id, k) => [...(shapes?.[k] ?? V(id).shape)]), attrs, n),
      acc: (k, g) => accumulate(n.inputs[k], g, n),
      accPart: (k, g, axis, start) => accumulatePart(n.inputs[k], g, axis, start, n),
      passSeed: (k) => accumulate(n.inputs[k], SEED, n),
      unbroadcast: (g, k) => unbroadcast(g, n.inputs[k], n),
      timesDy: (g, target) => (dyOf[0] === SEED ? g : emit('binary', [g, ctx.dy()], target, [...V(target).shape], { fn: 'mul' }, n)),
    };
    def.vjp(ctx);
  }

  const grads: ParamGrad[] = [];
  for (const v of forward.values) {
    if (v.kind !== 'param') continue;
    settle(v.id);
    const g = grad.get(v.id);
    if (g === undefined) continue;
    if (g === SEED) throw new Error(`internal: autodiff: parameter ${v.name} is the loss itself`);
    if ((owner.get(g) ?? 0) === 1 && values[g].kind === 'grad') values[g].name = `${v.name}.grad`;
    grads.push({ param: v.id, grad: g });
  }
  return { graph: b.graph, grads, gradOf: values.map((_, i) => (contribution.has(i) ? gradOf[i] : -1)) };
}
