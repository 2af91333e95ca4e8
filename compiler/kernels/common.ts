/**
 * common: small helpers shared by the kernel lowerings (IR node -> KernelSpec in one dialect):
 * attribute readers, kernel arguments, and the two launch shapes most kernels use (one thread
 * per element; one threadgroup per row / channel with a block reduction).
 */
import type { DType, Graph, Node } from '../ir/graph.js';
import { numel } from '../ir/graph.js';
import { boolAttrOf, numAttrOf, pairAttrOf } from '../ir/attrs.js';
import { mathFnsUsed, renderScalar, type ScalarVar, type SExpr } from '../ir/scalar_fns.js';
import { asFloat, type Dialect, type ElemType } from './dialect.js';
import { type Access, type KernelArg, type KernelSpec, type LowerCtx, ceilDiv, SIMD } from './kernel_types.js';

export const EW_THREADS = 256;

export function shapeOf(g: Graph, id: number): number[] {
  return g.values[id].shape;
}

/** the kernel-language element type of each IR dtype */
const ELEM_OF: Record<DType, ElemType> = { f32: 'float', i32: 'int', f16: 'half', bf16: 'bfloat' };

export function elemOf(g: Graph, id: number): ElemType {
  return ELEM_OF[g.values[id].dtype];
}

export function argOf(g: Graph, name: string, value: number, access: Access): KernelArg {
  return { name, value, access, type: elemOf(g, value) };
}

/** `name[idx]` of IR value `id` as a float expression (16-bit values widened: dialect.ts asFloat) */
export function readF(d: Dialect, g: Graph, id: number, name: string, idx: string): string {
  return asFloat(d, elemOf(g, id), `${name}[${idx}]`);
}

/**
 * The statement `name[idx] = v;` for IR value `id` (v a float expression; a 16-bit value gets it
 * rounded to nearest even: dialect.ts fromFloat). With readF, what lets a kernel read and write
 * 16-bit values (the ops a backend lists in its FusionCaps `casts`, fuse.ts rule 4).
 */
export function writeF(d: Dialect, g: Graph, id: number, name: string, idx: string, v: string): string {
  const t = elemOf(g, id);
  return `${name}[${idx}] = ${t === 'half' || t === 'bfloat' ? d.fromFloat(t, v) : v};`;
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

/**
 * Statements declaring `uint name` = the sum over the dims of `shape` of (coordinate of the
 * row-major flat index `index` in that dim) * strides[dim]; dims with stride 0 cost nothing.
 * Used to read a broadcast, permuted or batched operand from an output index.
 */
export function stridedIndex(d: Dialect, index: string, shape: readonly number[], strides: readonly number[], name: string, indent = '  '): string {
  const I = indent;
  if (!strides.some((s) => s !== 0)) return `${I}const uint ${name} = 0u;\n`;
  const contiguous = strides.every((s, k) => s === numel(shape.slice(k + 1)));
  if (contiguous) return `${I}const uint ${name} = ${index};\n`;
  let s = `${I}uint ${name} = 0u;\n${I}{\n${I}  uint rem = ${index};\n`;
  const last = strides.findIndex((st) => st !== 0);
  for (let k = shape.length - 1; k >= last; k--) {
    if (strides[k] !== 0) s += `${I}  ${name} += (rem % ${d.u(shape[k])}) * ${d.u(strides[k])};\n`;
    if (k > last) s += `${I}  rem /= ${d.u(shape[k])};\n`;
  }
  return s + `${I}}\n`;
}

/** row-major strides of a shape */
export function stridesOf(shape: readonly number[]): number[] {
  const s = new Array<number>(shape.length).fill(1);
  for (let i = shape.length - 2; i >= 0; i--) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

export { numel, ceilDiv };
