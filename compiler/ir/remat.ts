/**
 * remat: recomputes cheap forward values in the backward instead of keeping them alive between
 * the two (activation rematerialization, as torch.compile's partitioner does for pointwise ops and
 * norms). A train step keeps every forward value a backward node reads alive through the rest of
 * the forward; for a value an element-wise `unary` or a `layernorm` computes from inputs the
 * backward keeps alive anyway, a second copy of that node right before the value's first backward
 * reader costs one cheap kernel and frees the value's memory in between: for GPT-2 small, the
 * gelu of each block (its fc output is kept for gelu's gradient) and the layer-normed inputs of
 * the projections (the residual is kept for layernorm's gradient).
 *
 * Consumes: a Program (a verified, possibly fused graph; its plan, if any, is not kept).
 * Produces: the same Program object when nothing applies, else a new one (the input is not
 *           changed) whose graph has, for each such node N, a copy N' (same op, attrs, inputs; new
 *           output values `<name>.remat`) placed right before the first backward reader of N's
 *           outputs, with every backward reader of them reading N's outputs instead; value ids are
 *           kept (copies appended), node ids renumbered. Exact: the copy computes the same values
 *           from the same inputs (the ops are deterministic, and a 16-bit output is rounded the same).
 * Which nodes: op `unary` or `layernorm` (those of them the caller names), in the forward (before the first node whose op's category
 *           is 'backward'), with at least one reader in the backward, and whose every input is
 *           persistent or an input, or read again at or after that first backward reader (so the
 *           copy extends no lifetime). A layernorm with a folded residual add (fuse.ts rule 5,
 *           `add_in`) is copied as the plain layernorm of its sum output (x = the sum, weight,
 *           bias): y, mean and rstd are recomputed, the sum itself is not (its readers keep it).
 * Relies on: topological order and SSA (verify.ts); the backward's nodes come after the forward's
 *           (autodiff.ts appends them).
 */
import { isPersistent, type Node, type Program, type Value } from './graph.js';
import { opDef } from './ops.js';

/** the ops whose forward nodes may be recomputed (a backend's caps may name fewer: FusionCaps.remat.ops) */
export const REMAT_OPS: readonly string[] = ['unary', 'layernorm'];

export function rematerialize(p: Program, ops: readonly string[] = REMAT_OPS): Program {
  const g = p.graph;
  const bw = g.nodes.findIndex((n) => opDef(n.op).category === 'backward');
  if (bw < 0) return p;
  const readers = new Map<number, number[]>();
  g.nodes.forEach((n, i) => n.inputs.forEach((id) => id >= 0 && readers.set(id, [...(readers.get(id) ?? []), i])));
  const outputs = new Set(p.outputs.map((o) => o.value));
  const values: Value[] = g.values.map((v) => ({ ...v, shape: [...v.shape] }));
  /** node index -> copies to place before it */
  const before = new Map<number, Node[]>();
  /** node index -> (old value -> copy's value) for that backward reader */
  const redirect = new Map<number, Map<number, number>>();
  for (let i = 0; i < bw; i++) {
    const n = g.nodes[i];
    if (!REMAT_OPS.includes(n.op) || !ops.includes(n.op)) continue;
    // the plain form of the node (a folded residual add: the layernorm of its sum output) and the outputs it recomputes
    const addIn = n.attrs.add_in === true;
    const { add_in: _, ...plainAttrs } = n.attrs;
    const inputs = addIn ? [n.outputs[n.outputs.length - 1], ...n.inputs.slice(1, -1)] : n.inputs;
    const recomputed = addIn ? n.outputs.slice(0, -1) : n.outputs;
    if (recomputed.some((o) => outputs.has(o))) continue;
    const late = recomputed.flatMap((o) => (readers.get(o) ?? []).filter((r) => r >= bw));
    if (late.length === 0) continue;
    const first = Math.min(...late);
    const kept = inputs.every((id) => id < 0 || isPersistent(g.values[id]) || g.values[id].kind === 'input' || (readers.get(id) ?? []).some((r) => r >= first));
    if (!kept) continue;
    const copyOf = new Map<number, number>();
    const outs = recomputed.map((o) => {
      const id = values.length;
      values.push({ ...g.values[o], id, name: `${g.values[o].name}.remat`, shape: [...g.values[o].shape] });
      copyOf.set(o, id);
      return id;
    });
    before.set(first, [...(before.get(first) ?? []), { ...n, inputs: [...inputs], outputs: outs, attrs: { ...plainAttrs } }]);
    for (const r of late) {
      const m = redirect.get(r) ?? new Map<number, number>();
      for (const [o, c] of copyOf) m.set(o, c);
      redirect.set(r, m);
    }
  }
  if (before.size === 0) return p;
  const nodes: Node[] = [];
  g.nodes.forEach((n, i) => {
    nodes.push(...(before.get(i) ?? []));
    const m = redirect.get(i);
    nodes.push(m ? { ...n, inputs: n.inputs.map((id) => m.get(id) ?? id) } : n);
  });
  return { name: p.name, batch: p.batch, graph: { values, nodes: nodes.map((n, i) => ({ ...n, id: i })) }, inputs: p.inputs, outputs: p.outputs };
}
