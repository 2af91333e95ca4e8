/**
 * precision: the GPU kernel of `cast` (mixed precision, issue 15; compiler/ir/precision.ts inserts
 * it): one thread per element, the element read as float (a 16-bit source widened exactly) and
 * written in the target type (to 16 bits: the dialect's round-to-nearest-even conversion, overflow
 * to ±inf, subnormals kept: compiler/reference/half.ts's rule). The casts a backend folds into its
 * kernels (fuse.ts rule 4) round the same way at those kernels' stores (common.ts writeF).
 * Consumes a `cast` node; produces one KernelSpec in the context's dialect.
 */
import type { Graph, Node } from '../ir/graph.js';
import { isHalfElem } from './dialect.js';
import type { KernelSpec, LowerCtx } from './kernel_types.js';
import { argOf, elementwise, numel, readF, shapeOf } from './common.js';

export function lowerCast(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] | null {
  if (n.op !== 'cast') return null;
  const x = argOf(g, 'x', n.inputs[0], 'r'), y = argOf(g, 'y', n.outputs[0], 'w');
  if (x.type === 'int' || y.type === 'int') throw new Error(`internal: node ${n.id}: cast between ${x.type} and ${y.type} (float types only)`);
  const v = readF(ctx.d, g, n.inputs[0], 'x', 'i');
  const out = isHalfElem(y.type) ? ctx.d.fromFloat(y.type, v) : v;
  return [elementwise(ctx, g, n, [x, y], numel(shapeOf(g, n.inputs[0])), `  y[i] = ${out};\n`)];
}
