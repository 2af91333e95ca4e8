/**
 * fuse_relu_grad: folds a relu-grad into the pooling gradient that produces its incoming
 * gradient (global_avgpool_grad or 2x2 maxpool2d_grad -> unary_grad fn relu), for the CPU
 * backend. The pool grad then writes `mask > 0 ? g : 0` straight into the relu-grad's output, so
 * its gradient g is never written and read back (seed CNN: one pass over 67 MB per step; LeNet:
 * the 3/4-zero max-pool dx of both conv blocks). Same bits as the unfused pair: the same select on
 * the same g.
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
 *  - dx and the mask are in the arena; dx does not overlap the mask, except exactly in place (the
 *    kernel reads mask[i] before it writes dx[i]);
 *  - global_avgpool_grad: dx may overlap P's input: the kernel copies that N x C input aside
 *    before it writes (pool.ts);
 *  - maxpool2d_grad: kernel 2, stride 2, no padding (the vectorised 2x2 kernel), and the mask is
 *    the pool input x itself (relu'(y) read from z = relu(y) = x after fuse_relu's redirect), so the
 *    mask at a window's argmax is the window maximum. The plan usually puts dx exactly over x (it
 *    was made with the relu-grad reading y, so x = z dies at P): the kernel reads each chunk of a
 *    row pair before it writes it (pool.ts). dx must not overlap dy, which the kernel reads while
 *    it writes;
 *  - no node in (P, U) reads or writes dx's bytes or writes the mask's bytes.
 */
import { type AttrValue, type Node, type Program, valueBytes } from '../ir/graph.js';
import type { FusionPlan } from './fuse_relu.js';
import { fusionView } from './fusion_view.js';

const POOL_GRADS = new Set(['global_avgpool_grad', 'maxpool2d_grad']);

/** an [h, w] attr (a number means both), `dflt` when absent */
function pair(a: AttrValue | undefined, dflt: number[]): number[] | null {
  if (a === undefined) return dflt;
  if (typeof a === 'number') return [a, a];
  return Array.isArray(a) && a.length === 2 ? a : null;
}

/** a max-pool grad the 2x2 kernel runs (pool.ts tiled2x2): 2x2 windows, stride 2, no padding, H, W >= 2 */
function maxpool2x2(P: Node, xShape: readonly number[]): boolean {
  const same = (a: number[] | null, h: number, w: number) => a !== null && a[0] === h && a[1] === w;
  const k = pair(P.attrs.kernel, [0, 0]);
  return same(k, 2, 2) && same(pair(P.attrs.stride, [2, 2]), 2, 2) && same(pair(P.attrs.padding, [0, 0]), 0, 0) &&
    xShape.length === 4 && xShape[2] >= 2 && xShape[3] >= 2;
}

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
    // in place over the mask is fine (mask[i] is read before dx[i] is written), a partial overlap is not
    if (overlaps(mr, dxr) && !(mr[0] === dxr[0] && mr[1] === dxr[1])) continue;
    if (P.op === 'maxpool2d_grad') {
      const [dy, x] = [0, 1].map((i) => plan.redirect.get(P.id)?.get(i) ?? P.inputs[i]);
      if (mask !== x || !maxpool2x2(P, values[x].shape) || overlaps(range(dy), dxr)) continue;
    }
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
