/**
 * wide_ew_cuda: the CUDA backend's element-wise kernels over long 16-bit tensors, PER_THREAD elements
 * per thread. The shared kernels (compiler/kernels/elementwise.ts, precision.ts) give each element a
 * thread: a thread then has one 2-byte load in flight, and GPT-2's gelu over bf16 [16384, 3072] (100 MB
 * each way) took ~150 us on the H200 (~0.7 TB/s of its ~3.3 TB/s copy rate; its gradient ~180 us). Here
 * thread t of block b takes elements b * 256 * P + t + 256 k (k < P): each of its loads is still one
 * coalesced 2-byte element per lane, but all P of every input are issued before the first store (the
 * stores may alias nothing the thread still has to read, so no ordering holds the loads back), P times
 * the bytes in flight, and P times fewer blocks. Same statements per element as the shared kernels
 * (readF, the scalar-math table, writeF): bitwise the same results. The launch is the shared 1-D one
 * (256 threads, only `gid.x`), so merge.ts still merges it with its independent neighbours.
 * Serves: unary, unary_grad, same-shape binary and cast nodes with at least MIN_WIDE elements and a
 * 16-bit input or output (f32 element-wise kernels already ran near the copy rate: the residual add,
 * 150 MB in 47 us); anything else: null (the shared kernel).
 * Consumes a node (CUDA dialect context; the body is kernel language, so the Metal emulator runs it in
 * tests); produces one KernelSpec or null. `wideOr(op)`: the registry entry (this kernel, else the shared one).
 */
import type { Graph, Node } from '../ir/graph.js';
import { isHalf } from '../ir/graph.js';
import { BINARY_FNS_TABLE, UNARY_FNS_TABLE, isBinaryFn, isUnaryFn, unaryFnAttrs } from '../ir/scalar_fns.js';
import type { KernelArg, KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { GPU_KERNELS, type GpuLowering } from '../kernels/registry.js';
import { argOf, ceilDiv, EW_THREADS, kernelSpec, numAttr, numel, readF, scalarExpr, shapeOf, writeF } from '../kernels/common.js';
import { unaryFwd } from '../kernels/elementwise.js';

/** elements per thread */
export const PER_THREAD = 8;
/** the fewest elements a node needs for this kernel (from a grid of one block per SM of the H200: smaller ones keep the shared kernel) */
export const MIN_WIDE = 1 << 18;

/** the node's inputs read per element: the variable, the value id and its parameter name */
interface Load { v: string; id: number; name: string }

/** the loads and the float expression of node n's output element, or null when this kernel does not serve n */
function formOf(ctx: LowerCtx, g: Graph, n: Node): { loads: Load[]; expr: string; args: KernelArg[]; out: string } | null {
  const ins = n.inputs, o = n.outputs[0];
  const a = (id: number, name: string, acc: 'r' | 'w') => argOf(g, name, id, acc);
  switch (n.op) {
    case 'unary':
      return { loads: [{ v: 'v', id: ins[0], name: 'x' }], expr: unaryFwd(ctx, n, 'v'), args: [a(ins[0], 'x', 'r'), a(o, 'y', 'w')], out: 'y' };
    case 'unary_grad': {
      const fn = String(n.attrs.fn);
      if (!isUnaryFn(fn)) return null;
      const expr = scalarExpr(ctx, UNARY_FNS_TABLE[fn].grad, { x: 'v', g: 'd' }, unaryFnAttrs(fn, (name, dflt) => numAttr(n, name, dflt)));
      const loads = [{ v: 'd', id: ins[0], name: 'dy' }, ...(/\bv\b/.test(expr) ? [{ v: 'v', id: ins[1], name: 'x' }] : [])];
      return { loads, expr, args: [a(ins[0], 'dy', 'r'), a(ins[1], 'x', 'r'), a(o, 'dx', 'w')], out: 'dx' };
    }
    case 'binary': {
      const fn = String(n.attrs.fn), out = shapeOf(g, o);
      const same = (id: number) => shapeOf(g, id).length === out.length && shapeOf(g, id).every((s, k) => s === out[k]);
      if (!isBinaryFn(fn) || !same(ins[0]) || !same(ins[1])) return null;
      return {
        loads: [{ v: 'va', id: ins[0], name: 'a' }, { v: 'vb', id: ins[1], name: 'b' }],
        expr: scalarExpr(ctx, BINARY_FNS_TABLE[fn].fwd, { a: 'va', b: 'vb' }, {}), args: [a(ins[0], 'a', 'r'), a(ins[1], 'b', 'r'), a(o, 'y', 'w')], out: 'y',
      };
    }
    case 'cast':
      return { loads: [{ v: 'v', id: ins[0], name: 'x' }], expr: 'v', args: [a(ins[0], 'x', 'r'), a(o, 'y', 'w')], out: 'y' };
  }
  return null;
}

/** node n's kernel with PER_THREAD elements per thread, or null (the shared kernel) */
export function lowerWideElementwiseCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec | null {
  if (n.outputs.length !== 1) return null;
  const o = n.outputs[0], count = numel(shapeOf(g, o));
  if (count < MIN_WIDE) return null;
  const form = formOf(ctx, g, n);
  if (!form) return null;
  if (!form.args.some((x) => x.type === 'bfloat' || x.type === 'half') || !isHalfOrF32(g, [...n.inputs, o])) return null;
  const d = ctx.d, u = (k: number) => d.u(k);
  const P = PER_THREAD, span = EW_THREADS * P;
  const exact = count % span === 0;
  const at = (k: number) => (k ? `i0 + ${u(EW_THREADS * k)}` : 'i0');
  const guard = (k: number, s: string) => (exact ? `  ${s}\n` : `  if (${at(k)} < ${u(count)}) { ${s} }\n`);
  const ks = Array.from({ length: P }, (_, k) => k);
  const decl = form.loads.map((l) => `  float ${ks.map((k) => `${l.v}${k} = ${d.f(0)}`).join(', ')};\n`).join('');
  const loads = ks.map((k) => guard(k, form.loads.map((l) => `${l.v}${k} = ${readF(d, g, l.id, l.name, at(k))};`).join(' '))).join('');
  const stores = ks.map((k) => {
    const expr = form.loads.reduce((e, l) => e.replace(new RegExp(`\\b${l.v}\\b`, 'g'), `${l.v}${k}`), form.expr);
    return guard(k, writeF(d, g, o, form.out, at(k), expr));
  }).join('');
  return kernelSpec(ctx, g, n, form.args, {
    groups: [Math.max(1, ceilDiv(count, span)), 1, 1], tgsize: [EW_THREADS, 1, 1], tgmem: 0, sync: false,
    body:
      `  // ${P} elements per thread: i0 + ${u(EW_THREADS)} k (k < ${P}) of the block's ${span}; every load before the first store\n` +
      `  const uint i0 = (gid.x / ${u(EW_THREADS)}) * ${u(span)} + gid.x % ${u(EW_THREADS)};\n` +
      (exact ? '' : `  if (i0 >= ${u(count)}) return;\n`) + decl + loads + stores,
  }, ` [${P} elements per thread]`);
}

/** every value f32 or 16-bit (no integer operand) */
function isHalfOrF32(g: Graph, ids: number[]): boolean {
  return ids.every((id) => g.values[id].dtype === 'f32' || isHalf(g.values[id].dtype));
}

/** the registry entry of op: this kernel where it serves the node, else the shared kernel */
export function wideOr(op: 'unary' | 'unary_grad' | 'binary' | 'cast'): GpuLowering {
  const shared = GPU_KERNELS[op];
  if (shared === 'cpu') throw new Error(`internal: ${op} has no shared GPU kernel`);
  return (ctx, g, n) => {
    const k = lowerWideElementwiseCuda(ctx, g, n);
    return k ? [k] : shared(ctx, g, n);
  };
}
