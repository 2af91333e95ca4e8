/**
 * alias_reshape: a reshape of a data input (e.g. flatten of the image batch) costs a copy of the
 * batch; the input buffer is never written during a run, so its readers can read the input in
 * place. Plain data in and out, for the CPU backend (emit_program.ts); the graph is not changed.
 *
 * Consumes: a Program. Produces: the reshape node ids to skip and, per reader node, the input
 * indices to read from the data input instead (kernels keep seeing the reshaped shape).
 */
import type { Program } from '../ir/graph.js';

export interface AliasPlan {
  skip: Set<number>;
  redirect: Map<number, Map<number, number>>;
}

export function planInputReshapeAliases(p: Program): AliasPlan {
  const plan: AliasPlan = { skip: new Set(), redirect: new Map() };
  const { nodes, values } = p.graph;
  const outputsRead = new Set(p.outputs.map((o) => o.value));
  for (const n of nodes) {
    if (n.op !== 'reshape' || n.inputs.length < 1 || n.outputs.length !== 1) continue;
    const src = n.inputs[0], dst = n.outputs[0];
    if (src < 0 || values[src].kind !== 'input' || outputsRead.has(dst) || values[src].dtype !== values[dst].dtype) continue;
    plan.skip.add(n.id);
    for (const r of nodes) {
      r.inputs.forEach((id, i) => {
        if (id !== dst) return;
        const m = plan.redirect.get(r.id) ?? new Map<number, number>();
        m.set(i, src);
        plan.redirect.set(r.id, m);
      });
    }
  }
  return plan;
}
