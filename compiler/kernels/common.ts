/**
 * common: small helpers shared by the kernel lowerings (IR node -> KernelSpec in one dialect):
 * attribute readers, kernel arguments, and the two launch shapes most kernels use (one thread
 * per element; one threadgroup per row / channel with a block reduction).
 */
import type { Graph, Node } from '../ir/graph.js';
import { numel } from '../ir/graph.js';
import { boolAttrOf, numAttrOf, pairAttrOf } from '../ir/attrs.js';
import { mathFnsUsed, renderScalar, type ScalarVar, type SExpr } from '../ir/scalar_fns.js';
import { type Access, type KernelArg, type KernelSpec, type LowerCtx, ceilDiv, SIMD } from './kernel_types.js';

export const EW_THREADS = 256;

export function shapeOf(g: Graph, id: number): number[] {
  return g.values[id].shape;
}

export function argOf(g: Graph, name: string, value: number, access: Access): KernelArg {
  return { name, value, access, type: g.values[value].dtype === 'i32' ? 'int' : 'float' };
}

const failOf = (n: Node) => (msg: string): never => {
  throw new Error(`internal: node ${n.id} (${n.op}): ${msg}`);
};

/** the attribute readers of compiler/ir/attrs.ts, failing with the node named */
export const numAttr = (n: Node, key: string, dflt?: number): number => numAttrOf(n.attrs, key, failOf(n), dflt);
export const boolAttr = (n: Node, key: string, dflt = false): boolean => boolAttrOf(n.attrs, key, failOf(n), dflt);
export const pairAttr = (n: Node, key: string, dflt?: [number, number]): [number, number] => pairAttrOf(n.attrs, key, failOf(n), dflt);

export function label(g: Graph, n: Node): string {
  const out = n.outputs.map((o) => g.values[o].name).join(', ');
  return `node ${n.id}: ${n.op}${n.path ? ` (${n.path})` : ''}${out ? ` -> ${out}` : ''}`;
}

/**
 * A scalar-math table expression (compiler/ir/scalar_fns.ts) in the context's dialect, with
 * the prelude helpers its math calls need recorded in ctx.helpers.
 */
export function scalarExpr(ctx: LowerCtx, e: SExpr, vars: Partial<Record<ScalarVar, string>>, attrs: Record<string, number>): string {
  for (const fn of mathFnsUsed(e)) {
    const h = ctx.d.helperFor(fn);
    if (h) ctx.helpers.add(h);
  }
  return renderScalar(e, ctx.d.scalar, vars, attrs);
}

/** How a kernel is launched and what it runs (the rest of a KernelSpec comes from its node). */
export type Launch = Pick<KernelSpec, 'groups' | 'tgsize' | 'tgmem' | 'sync' | 'body'>;

/** A KernelSpec for node n: the next kernel name, n's label (+ `what`), the arguments and the launch. */
export function kernelSpec(ctx: LowerCtx, g: Graph, n: Node, args: KernelArg[], launch: Launch, what = ''): KernelSpec {
  return { name: ctx.next(), node: n.id, op: n.op, label: label(g, n) + what, args, ...launch };
}

/** One thread per element, 256 per threadgroup, no barriers (the body sees `i` < count). */
export function elementwise(ctx: LowerCtx, g: Graph, n: Node, args: KernelArg[], count: number, body: string, what = ''): KernelSpec {
  return kernelSpec(ctx, g, n, args, {
    groups: [Math.max(1, ceilDiv(count, EW_THREADS)), 1, 1], tgsize: [EW_THREADS, 1, 1], tgmem: 0, sync: false,
    body: `  const uint i = gid.x;\n  if (i >= ${ctx.d.u(count)}) return;\n${body}`,
  }, what);
}

/** Threadgroup size for a strided loop over `len` elements: a power of two in [32, 256]. */
export function rowThreads(len: number): number {
  let t = SIMD;
  while (t < len && t < 256) t *= 2;
  return t;
}

/** The shape of a block-reduction kernel's body: T threads per threadgroup, nsg SIMD-groups (both as literals). */
export interface BlockShape {
  T: string;
  nsg: string;
}

/**
 * A kernel with `groups` threadgroups of `T` threads using mpsc_block_sum/max (shared memory:
 * one float per SIMD-group); `body` writes the statements for that shape.
 */
export function blockKernel(ctx: LowerCtx, g: Graph, n: Node, args: KernelArg[], groups: number, T: number, body: (s: BlockShape) => string, what = ''): KernelSpec {
  ctx.helpers.add('block_reduce');
  const nsg = T / SIMD;
  return kernelSpec(ctx, g, n, args, {
    groups: [groups, 1, 1], tgsize: [T, 1, 1], tgmem: nsg * 4, sync: true, body: body({ T: ctx.d.u(T), nsg: ctx.d.u(nsg) }),
  }, what);
}

export { numel, ceilDiv };
