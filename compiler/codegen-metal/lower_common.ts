/**
 * lower_common: small helpers shared by the lower_*.ts passes (IR node -> KernelSpec).
 */
import type { Graph, Node } from '../ir/graph.js';
import { numel } from '../ir/graph.js';
import { render } from './templates.js';
import { f32, u32 } from './msl_text.js';
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
    body: render('elementwise', { n: u32(count), body }),
  };
}

/** Threadgroup size for a strided loop over `len` elements: a power of two in [32, 256]. */
export function rowThreads(len: number): number {
  let t = SIMD;
  while (t < len && t < 256) t *= 2;
  return t;
}

/** A kernel with `groups` threadgroups of `T` threads using mpsc_block_sum/max (threadgroup memory: one float per SIMD-group). */
export function blockKernel(ctx: LowerCtx, g: Graph, n: Node, args: KernelArg[], groups: number, T: number, template: string, view: object, what = ''): KernelSpec {
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
    body: render(template, { T: u32(T), nsg: u32(nsg), ...view }),
  };
}

export { f32, u32, numel, ceilDiv };
