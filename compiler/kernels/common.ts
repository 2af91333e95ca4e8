/**
 * common: small helpers shared by the kernel lowerings (IR node -> KernelSpec in one dialect):
 * attribute readers, kernel arguments, and the two launch shapes most kernels use (one thread
 * per element; one threadgroup per row / channel with a block reduction).
 */
import type { Graph, Node } from '../ir/graph.js';
import { numel } from '../ir/graph.js';
import { mathFnsUsed, renderScalar, type ScalarVar, type SExpr } from '../ir/scalar_fns.js';
import { type Access, type KernelArg, type KernelSpec, type LowerCtx, ceilDiv, SIMD } from './kernel_types.js';

export const EW_THREADS = 256;

export function shapeOf(g: Graph, id: number): number[] {
  return g.values[id].shape;
}

export function argOf(g: Graph, name: string, value: number, access: Access): KernelArg {
  return { name, value, access, type: g.values[value].dtype === 'i32' ? 'int' : 'float' };
}

export function numAttr(n: Node, key: string, dflt?: number): number {
  const v = n.attrs[key];
  if (typeof v === 'number') return v;
  if (typeof v === 'boolean') return v ? 1 : 0;
  if (v === undefined && dflt !== undefined) return dflt;
  throw new Error(`internal: node ${n.id} (${n.op}) lacks numeric attr '${key}'`);
}

export function boolAttr(n: Node, key: string, dflt = false): boolean {
  const v = n.attrs[key];
  return v === undefined ? dflt : Boolean(v);
}

export function pairAttr(n: Node, key: string, dflt?: [number, number]): [number, number] {
  const v = n.attrs[key];
  if (Array.isArray(v) && v.length === 2) return [v[0], v[1]];
  if (typeof v === 'number') return [v, v];
  if (v === undefined && dflt) return dflt;
  throw new Error(`internal: node ${n.id} (${n.op}) lacks pair attr '${key}'`);
}

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

/** One thread per element, 256 per threadgroup, no barriers. */
export function elementwise(ctx: LowerCtx, g: Graph, n: Node, args: KernelArg[], count: number, body: string, what = ''): KernelSpec {
  return {
    name: ctx.next(),
    node: n.id,
    op: n.op,
    label: label(g, n) + what,
    args,
    groups: [Math.max(1, ceilDiv(count, EW_THREADS)), 1, 1],
    tgsize: [EW_THREADS, 1, 1],
    tgmem: 0,
    sync: false,
    body: `  const uint i = gid.x;\n  if (i >= ${ctx.d.u(count)}) return;\n${body}`,
  };
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
  return {
    name: ctx.next(),
    node: n.id,
    op: n.op,
    label: label(g, n) + what,
    args,
    groups: [groups, 1, 1],
    tgsize: [T, 1, 1],
    tgmem: nsg * 4,
    sync: true,
    body: body({ T: ctx.d.u(T), nsg: ctx.d.u(nsg) }),
  };
}

export { numel, ceilDiv };
