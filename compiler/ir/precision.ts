/**
 * precision: mixed precision as an IR pass (issue 15, `train { precision: "fp16" | "bf16" }`).
 *
 * Consumes: a verified program Graph (a train_step after autodiff + optimizer lowering, an
 *           apply_update, or an eval graph) and the precision.
 * Produces: for fp32 the same graph object; for fp16 / bf16 a new graph (never mutating its
 *           input) in which every f32 input an op lists in `OpDef.halfInputs` (the operands of
 *           linear, matmul, conv2d and its two gradients, attention and its gradient, forward and
 *           backward alike) reads a 16-bit copy made by a `cast {to}` node instead:
 *             - one cast per (value, type), placed right before its first reader, so a parameter
 *               gets one 16-bit copy per step that its forward and backward GEMMs share (the
 *               master weights stay f32: the optimizer reads and updates them), and an activation
 *               saved for the backward is saved as its 16-bit copy when only GEMMs read it;
 *             - the copy is named `<value>.f16` / `<value>.bf16`, with the source's kind;
 *             - everything else (element-wise ops, softmax, log-softmax, norms, losses, reductions,
 *               gradient sums, the optimizer) keeps reading and writing f32, and GEMM outputs are f32
 *               (accumulated in f32, not rounded to 16 bits).
 *           Value ids of the input graph are kept (copies are appended); node ids are renumbered.
 * Relies on: nodes in topological order (a value's first reader comes after its writer); inputs,
 *           persistent values and outputs are never 16-bit (verify.ts checks the result).
 * Loss scaling for fp16 is not here: programs.ts seeds autodiff with the `amp.loss_scale` state
 * and optimizer_lowering.ts unscales in apply_update (docs/language.md, "Precision").
 */
import type { Graph, HalfDType, Node, Value } from './graph.js';
import { opDef } from './ops.js';

export type Precision = 'fp32' | 'fp16' | 'bf16';
export const PRECISIONS: readonly Precision[] = ['fp32', 'fp16', 'bf16'];

/** the storage type of GEMM operands at a precision (null for fp32) */
export function halfTypeOf(p: Precision): HalfDType | null {
  return p === 'fp16' ? 'f16' : p === 'bf16' ? 'bf16' : null;
}

export function applyPrecision(graph: Graph, precision: Precision): Graph {
  const half = halfTypeOf(precision);
  if (half === null) return graph;
  const values: Value[] = graph.values.map((v) => ({ ...v, shape: [...v.shape] }));
  const nodes: Node[] = [];
  const copyOf = new Map<number, number>(); // f32 value id -> its 16-bit copy
  for (const n0 of graph.nodes) {
    const n: Node = { ...n0, inputs: [...n0.inputs], outputs: [...n0.outputs], attrs: { ...n0.attrs } };
    for (const k of opDef(n.op).halfInputs ?? []) {
      const id = n.inputs[k];
      if (id === undefined || id < 0 || values[id].dtype !== 'f32' || n.op === 'cast') continue;
      let c = copyOf.get(id);
      if (c === undefined) {
        const src = values[id];
        c = values.length;
        const kind = src.kind === 'grad' ? 'grad' : 'activation';
        values.push({ id: c, name: `${src.name}.${half}`, dtype: half, shape: [...src.shape], kind });
        const cast: Node = { id: -1, op: 'cast', inputs: [id], outputs: [c], attrs: { to: half } };
        if (n.path !== undefined) cast.path = n.path;
        if (n.loc !== undefined) cast.loc = n.loc;
        nodes.push(cast);
        copyOf.set(id, c);
      }
      n.inputs[k] = c;
    }
    nodes.push(n);
  }
  nodes.forEach((n, i) => (n.id = i));
  return { values, nodes };
}
