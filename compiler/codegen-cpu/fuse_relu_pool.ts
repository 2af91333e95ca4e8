/**
 * fuse_relu_pool: folds a relu into the global_avgpool that reads it (CPU backend), for the relus
 * fuse_relu.ts could not fold into their producer. The typical case is an eval program:
 * conv2d -> relu -> global_avgpool, where the memory plan put the relu's output over the conv's
 * input, so the conv cannot write it. Then the pool reads the conv output y itself and sums
 * max(v, 0), and the relu pass (one read and one write of the whole activation) disappears. The
 * sum order is unchanged, so the bits are the same as the unfused pair.
 *
 * Consumes: a Program, its arena offsets and the FusionPlan of the passes before it.
 * Produces: additions to that plan:
 *  - reluIn:   global_avgpool node id (the pool applies relu to what it reads);
 *  - redirect: that node's input 0 -> the relu's input y;
 *  - skip:     the relu node id.
 *
 * Fused only when it is safe under the memory plan: the relu R (z = relu(y)) is not skipped
 * already, z is read by this pool G only and is not a program output, y is an f32 arena value and
 * no node in (R, G) writes over y's bytes (the plan let y die at R). G's own output may lie over y:
 * the kernel writes its means to scratch and copies them out after reading every plane.
 */
import type { Program } from '../ir/graph.js';
import type { FusionPlan } from './fuse_relu.js';
import { fusionView } from './fusion_view.js';

export function planReluPoolFusion(p: Program, offsets: readonly number[], plan: FusionPlan): void {
  const { nodes, values } = p.graph;
  const v = fusionView(p, offsets);
  const { readers, outputsRead, range, overlaps } = v;
  // what node i writes once the earlier fusions are applied (a fused node writes its folded consumer's output)
  const written = (i: number) => v.written(i, plan.fused);

  for (const R of nodes) {
    if (R.op !== 'unary' || R.attrs.fn !== 'relu' || plan.skip.has(R.id)) continue;
    const y = R.inputs[0], z = R.outputs[0];
    if (values[y].dtype !== 'f32' || outputsRead.has(z) || plan.redirect.has(R.id)) continue;
    const rs = readers.get(z) ?? [];
    if (rs.length !== 1) continue;
    const G = nodes[rs[0]];
    if (G.op !== 'global_avgpool' || G.inputs[0] !== z || plan.skip.has(G.id) || plan.redirect.has(G.id)) continue;
    const yr = range(y);
    if (!yr) continue;
    let safe = true;
    for (let i = R.id + 1; i < G.id && safe; i++) {
      if (plan.skip.has(i)) continue;
      if (written(i).some((id) => overlaps(range(id), yr))) safe = false;
    }
    if (!safe) continue;
    plan.reluIn.add(G.id);
    plan.redirect.set(G.id, new Map([[0, y]]));
    plan.skip.add(R.id);
  }
}
