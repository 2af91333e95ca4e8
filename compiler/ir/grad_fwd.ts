/**
 * grad_fwd: a `unary` copy that recomputes f(x) in the backward (remat.ts) and the `unary_grad` of the
 * same f over the same x, as one node writing both: one read of x, and a backend kernel may share the
 * work the two formulas have in common (gelu: the erf of x / sqrt 2). For GPT-2 the recomputed gelu of
 * each block (read by the proj weight gradient) and gelu's gradient (read by the fc gradients).
 *
 * Consumes: a Program (verified; a backend's fused, rematerialized program: programs.ts fuseForBackend,
 *           when the caps say `gradWithForward`).
 * Produces: the same Program object when nothing applies, else a new one (the input is not changed): for
 *           each pair C = `unary` {fn, attrs} (y = f(x)) and U = `unary_grad` {fn, same attrs} (dx = f'(x) dy)
 *           after C, where dy is written before C (or is an input / persistent value) and neither dx nor y
 *           is a program output (U may carry fuse.ts rule 14's `sum_out`, its column sums as output 1, which then
 *           also move): U moves to C's place with attr `fwd_out: true` and y as its last output,
 *           C and U's old place are gone. Value ids are kept, node ids renumbered. Exact: the same two
 *           formulas on the same values (fuse.ts `fusedParts`: the grad, then the unary of input 1).
 * Relies on: SSA and topological order (verify.ts). Moving U earlier reorders no read: its inputs are
 *           written before C, and its output's readers all come after U's old place.
 */
import { unfusedAttrs } from './fuse.js';
import type { Program } from './graph.js';

export function pairGradWithForward(p: Program): Program {
  const g = p.graph;
  const outputs = new Set(p.outputs.map((o) => o.value));
  const writer = new Map<number, number>();
  g.nodes.forEach((n, i) => n.outputs.forEach((o) => writer.set(o, i)));
  const nodes = [...g.nodes];
  const drop = new Set<number>();
  let changed = false;
  g.nodes.forEach((C, ci) => {
    if (C.op !== 'unary' || outputs.has(C.outputs[0]) || C.inputs.length !== 1) return;
    const x = C.inputs[0];
    // U as fuse.ts left it: plain, or with its column sums (rule 14, `sum_out`: output 1, which stays before f(x))
    const ui = g.nodes.findIndex((U, i) => i > ci && !drop.has(i) && U.op === 'unary_grad' && U.inputs[1] === x &&
      U.outputs.length === (U.attrs.sum_out === true ? 2 : 1) && U.attrs.fwd_out === undefined && sameAttrs(unfusedAttrs(U), C.attrs) &&
      !U.outputs.some((o) => outputs.has(o)) && (writer.get(U.inputs[0]) ?? -1) < ci);
    if (ui < 0) return;
    const U = g.nodes[ui];
    nodes[ci] = { ...U, outputs: [...U.outputs, C.outputs[0]], attrs: { ...U.attrs, fwd_out: true } };
    drop.add(ui);
    changed = true;
  });
  if (!changed) return p;
  const kept = nodes.filter((_, i) => !drop.has(i)).map((n, i) => ({ ...n, id: i }));
  return { name: p.name, batch: p.batch, graph: { values: g.values, nodes: kept }, inputs: p.inputs, outputs: p.outputs };
}

function sameAttrs(a: Record<string, unknown>, b: Record<string, unknown>): boolean {
  const ka = Object.keys(a).sort(), kb = Object.keys(b).sort();
  return ka.length === kb.length && ka.every((k, i) => k === kb[i] && JSON.stringify(a[k]) === JSON.stringify(b[k]));
}
