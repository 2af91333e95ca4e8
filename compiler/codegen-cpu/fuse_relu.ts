/**
 * fuse_relu: folds a relu into the linear / conv2d that produces its input (the GEMM epilogue
 * applies it), for the CPU backend. Plain data in, plain data out; the graph is not changed.
 *
 * Consumes: a Program and its arena offsets (bytes per value id, -1 when not in the arena).
 * Produces: a FusionPlan:
 *  - fused:     producer node id -> the relu's output value id (the producer writes relu(y) there);
 *  - skip:      relu node ids that no longer run;
 *  - redirect:  node id -> (input index -> value id): each relu-grad (unary_grad fn relu) that read
 *               y reads z = relu(y) instead (relu'(y) = [y > 0] = [z > 0], so the bits are the same).
 *
 * A producer P with output y and relu R (z = relu(y)) is fused only when it is safe under the
 * memory plan, which placed z knowing it is written at R and y is live until its last reader:
 *  - y's readers are R and relu-grads only, y is not a program output, z is in the arena;
 *  - no value read by a node in [P, R) overlaps z's bytes (z is now written earlier, at P);
 *  - no node in (P, R) writes over z's bytes;
 *  - for every relu-grad U of y: no node in (R, U) writes over z's bytes, and U's own output
 *    either misses z or is exactly z (element-wise in place).
 * When that fails (the planner gave z bytes that are still in use), the other way round: P writes
 * relu(y) into y's slot and z's readers read y (relu-grads keep reading y: [y' > 0] = [y > 0]),
 * when no node after P up to the last reader of z or y writes over y's bytes.
 *
 * In both cases `fused` maps P to the value it writes, `skip` holds R, `redirect` the readers moved.
 */
import { type Program, valueBytes } from '../ir/graph.js';
import { fusionView } from './fusion_view.js';

export interface FusionPlan {
  fused: Map<number, number>;
  skip: Set<number>;
  redirect: Map<number, Map<number, number>>;
  /** pool-grad node id -> mask value id: the node applies a folded relu-grad (fuse_relu_grad.ts) */
  reluMask: Map<number, number>;
  /** global_avgpool node ids that apply a folded relu to their input (fuse_relu_pool.ts) */
  reluIn: Set<number>;
}

const PRODUCERS = new Set(['linear', 'conv2d']);

export function planReluFusion(p: Program, offsets: readonly number[]): FusionPlan {
  const plan: FusionPlan = { fused: new Map(), skip: new Set(), redirect: new Map(), reluMask: new Map(), reluIn: new Set() };
  const { nodes, values } = p.graph;
  const { readers, outputsRead, range, overlaps } = fusionView(p, offsets);
  const isRelu = (id: number) => nodes[id].op === 'unary' && nodes[id].attrs.fn === 'relu';
  const isReluGradOf = (id: number, y: number) =>
    nodes[id].op === 'unary_grad' && nodes[id].attrs.fn === 'relu' && nodes[id].inputs[1] === y && nodes[id].inputs[0] !== y;

  for (const P of nodes) {
    if (!PRODUCERS.has(P.op) || P.outputs.length !== 1) continue;
    const y = P.outputs[0];
    if (values[y].dtype !== 'f32' || outputsRead.has(y)) continue;
    const rs = readers.get(y) ?? [];
    const relus = rs.filter((r) => isRelu(r) && nodes[r].inputs[0] === y);
    if (relus.length !== 1) continue;
    const R = relus[0];
    const grads = rs.filter((r) => r !== R);
    if (!grads.every((u) => isReluGradOf(u, y) && u > R)) continue;
    const z = nodes[R].outputs[0];
    const zr = range(z);
    if (!zr || valueBytes(values[z]) !== valueBytes(values[y]) || outputsRead.has(z)) continue;
    let safe = true;
    for (let i = P.id; i < R && safe; i++) {
      if (nodes[i].inputs.some((id) => id >= 0 && overlaps(range(id), zr))) safe = false;
      if (i > P.id && nodes[i].outputs.some((id) => overlaps(range(id), zr))) safe = false;
    }
    for (const U of grads) {
      for (let i = R + 1; i < U && safe; i++) if (nodes[i].outputs.some((id) => overlaps(range(id), zr))) safe = false;
      const dx = range(nodes[U].outputs[0]);
      if (overlaps(dx, zr) && !(dx![0] === zr[0] && dx![1] === zr[1])) safe = false;
    }
    if (safe) {
      plan.fused.set(P.id, z);
      plan.skip.add(R);
      for (const U of grads) plan.redirect.set(U, new Map([[1, z]]));
      continue;
    }
    // B: P writes relu(y) into y's own slot and z's readers read y. The plan keeps y intact until its
    // last reader (R or a relu-grad); z's readers that come later need y's bytes untouched up to them.
    const yr = range(y);
    const zReaders = readers.get(z) ?? [];
    if (!yr || zReaders.length === 0) continue;
    const last = Math.max(...zReaders, ...grads);
    let safeB = true;
    for (let i = P.id + 1; i <= last && safeB; i++) if (i !== R && nodes[i].outputs.some((id) => overlaps(range(id), yr))) safeB = false;
    if (!safeB) continue;
    plan.fused.set(P.id, y);
    plan.skip.add(R);
    for (const n of zReaders) {
      const m = plan.redirect.get(n) ?? new Map<number, number>();
      nodes[n].inputs.forEach((id, i) => id === z && m.set(i, y));
      plan.redirect.set(n, m);
    }
  }
  return plan;
}
