/**
 * fuse_relu_grad: folds a relu-grad into the pooling gradient that produces its incoming
 * gradient (maxpool2d_grad / global_avgpool_grad -> unary_grad fn relu), for the CPU backend.
 * The pool-grad kernel then writes `mask > 0 ? g : 0` straight into the relu-grad's output, so
 * the pooled gradient g is never written and read back (LeNet: two passes over 6.4 and 3.2 MB per
 * step; seed CNN: one over 67 MB). Same bits as the unfused pair: the same select on the same g.
 *
 * Consumes: a Program, its arena offsets (bytes per value id, -1 when not in the arena) and the
 * FusionPlan of fuse_relu.ts (whose redirects say where each relu-grad reads its mask).
 * Produces: additions to that plan:
 *  - fused:    pool-grad node id -> the relu-grad's output value id (the node writes there);
 *  - reluMask: pool-grad node id -> the mask value id (the relu-grad's input 1, after redirects);
 *  - skip:     the relu-grad node ids.
 *
 * Fused only when it is safe under the memory plan (the relu-grad's output dx is now written at
 * the pool-grad node P instead of at the relu-grad U):
 *  - g = P's output is read by U only (as input 0) and is not a program output;
 *  - dx and the mask are in the arena; dx overlaps none of P's inputs (P reads them while it writes
 *    dx; global_avgpool_grad copies its N x C input aside first, so it may), nor the mask, except
 *    exactly in place for global_avgpool_grad (it reads mask[i] right before it writes dx[i]);
 *  - no node in (P, U) reads or writes dx's bytes or writes the mask's bytes.
 */
import { type Program, valueBytes } from '../ir/graph.js';
import type { FusionPlan } from './fuse_relu.js';
import { fusionView } from './fusion_view.js';

const POOL_GRADS = new Set(['maxpool2d_grad', 'global_avgpool_grad']);

export function planReluGradFusion(p: Program, offsets: readonly number[], plan: FusionPlan): void {
  const { nodes, values } = p.graph;
  const v = fusionView(p, offsets);
  const { readers, outputsRead, range, overlaps } = v;
  // what node i writes once the earlier fusions are applied (a fused node writes its folded consumer's output)
  const written = (i: number) => v.written(i, plan.fused);

  for (const P of nodes) {
    if (!POOL_GRADS.has(P.op) || P.outputs.length !== 1 || plan.skip.has(P.id) || plan.fused.has(P.id)) continue;
    const g = P.outputs[0];
    if (values[g].dtype !== 'f32' || outputsRead.has(g)) continue;
    const rs = readers.get(g) ?? [];
    if (rs.length !== 1) continue;
    const U = nodes[rs[0]];
    if (U.op !== 'unary_grad' || U.attrs.fn !== 'relu' || U.inputs[0] !== g || U.inputs[1] === g || plan.skip.has(U.id)) continue;
    const mask = plan.redirect.get(U.id)?.get(1) ?? U.inputs[1];
    const dx = U.outputs[0];
    const dxr = range(dx);
    const mr = range(mask);
    if (!dxr || !mr || outputsRead.has(dx) || valueBytes(values[dx]) !== valueBytes(values[g])) continue;
    if (valueBytes(values[mask]) !== valueBytes(values[g])) continue;
    // P reads its inputs and the mask while it writes dx. The unfused U may have been planned in place
    // over its mask: global_avgpool_grad reads mask[i] just before it writes dx[i], so exactly the
    // same bytes are fine there; max-pool grad writes a window before it reads the next mask values.
    // global_avgpool_grad copies its small input (N x C) aside before it writes (pool.ts), so only the
    // max-pool grad needs dx clear of its inputs
    const gap = P.op === 'global_avgpool_grad';
    const inPlace = gap && mr[0] === dxr[0] && mr[1] === dxr[1];
    if (!gap && P.inputs.some((id) => id >= 0 && overlaps(range(id), dxr))) continue;
    if (overlaps(mr, dxr) && !inPlace) continue;
    let safe = true;
    for (let i = P.id + 1; i < U.id && safe; i++) {
      const n = nodes[i];
      if (plan.skip.has(i)) continue;
      if (n.inputs.some((id) => id >= 0 && overlaps(range(id), dxr))) safe = false;
      if (written(i).some((id) => overlaps(range(id), dxr) || overlaps(range(id), mr))) safe = false;
    }
    if (!safe) continue;
    plan.fused.set(P.id, dx);
    plan.reluMask.set(P.id, mask);
    plan.skip.add(U.id);
  }
}
