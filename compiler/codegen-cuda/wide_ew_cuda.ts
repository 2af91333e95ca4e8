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
 * Serves: unary_grad with `fwd_out` (the gradient and the recomputed forward value, compiler/ir/grad_fwd.ts) at any size;
 * unary_grad with `sum_out` (fuse.ts rule 14: with dx's column sums, gradWithSums, two kernels; with or without fwd_out);
 * unary, unary_grad, same-shape binary and cast nodes with at least MIN_WIDE elements and a
 * 16-bit input or output (f32 element-wise kernels of two inputs already ran near the copy rate: the
 * residual add, 150 MB in 47 us), fp32 unary and unary_grad nodes of at least MIN_WIDE elements too (gpt_char
 * fp32's gelu, one load per thread: 200 MB in 85 us, ~2.4 TB/s; here 52 us, its gradient 96 -> 76: H200 4 Dec),
 * global_avgpool_grad (also f32, with or without its folded relu-grad: the seed CNN's
 * masked one, 67 MB read and 67 MB written, took 58 us one element a thread, ~2.3 TB/s),
 * and adam_update over at least MIN_WIDE elements (four f32 streams in, three out,
 * and two powf per element in the shared kernel: here the bias corrections once per thread, the same
 * values, and 32 loads in flight; GPT-2's AdamW ran at ~1.5 TB/s); anything else: null (the shared kernel).
 * Measured (H200, GPT-2 bf16, bench/NOTES.md): gelu 156 -> 80 us, its gradient 178 -> 124 us (now bound by erff /
 * expf instructions, not bytes), the residual stream's bf16 roundings 38 -> 22.5 us; AdamW 1.50 -> 1.45 ms only (its
 * loads were not the limit).
 * Consumes a node (CUDA dialect context; the body is kernel language, so the Metal emulator runs it in
 * tests); produces one KernelSpec or null. `wideOr(op)`: the registry entry (this kernel, else the shared one).
 */
import type { Graph, Node } from '../ir/graph.js';
import { isHalf } from '../ir/graph.js';
import { BINARY_FNS_TABLE, isBinaryFn, isUnaryFn } from '../ir/scalar_fns.js';
import type { KernelArg, KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { GPU_KERNELS, type GpuLowering } from '../kernels/registry.js';
import { argOf, boolAttr, ceilDiv, elemOf, EW_THREADS, kernelSpec, numAttr, numel, readF, scalarExpr, shapeOf, writeF } from '../kernels/common.js';
import { envFlag, envInts } from '../env_switch.js';
import { isHalfElem, isVecElem, type HalfElem, type VecElem } from '../kernels/dialect.js';
import { blockSumsFinish } from './layernorm_cuda.js';
import { unaryFwd, unaryGradExpr } from '../kernels/elementwise.js';

/** elements per thread */
export const PER_THREAD = 8;
/** the fewest elements a node needs for this kernel (from a grid of one block per SM of the H200: smaller ones keep the shared kernel) */
export const MIN_WIDE = 1 << 18;

/** the node's inputs read per element: the variable, the value id, its parameter name and (default: the element's) index */
interface Load { v: string; id: number; name: string; index?: (i: string) => string }

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
      const expr = unaryGradExpr(ctx, n);
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
    case 'global_avgpool_grad': {
      // dx[i] = dy[plane of i] / HW, with a folded relu-grad (fuse.ts rule 2) gated by mask[i] > 0 (dx may be the
      // mask's buffer: every thread reads its elements before its first store)
      const xs = n.attrs.x_shape as number[], HW = xs[2] * xs[3];
      const d = { v: 'd', id: ins[0], name: 'dy', index: (i: string) => `(${i}) / ${ctx.d.u(HW)}` };
      const v = `d / ${ctx.d.f(HW)}`;
      if (n.attrs.relu_grad === true) {
        return { loads: [d, { v: 'm', id: ins[1], name: 'mask' }], expr: `m > ${ctx.d.f(0)} ? ${v} : ${ctx.d.f(0)}`,
          args: [a(ins[0], 'dy', 'r'), a(ins[1], 'mask', 'r'), a(o, 'dx', 'w')], out: 'dx' };
      }
      return { loads: [d], expr: v, args: [a(ins[0], 'dy', 'r'), a(o, 'dx', 'w')], out: 'dx' };
    }
  }
  return null;
}

/** node n's kernel with PER_THREAD elements per thread, or null (the shared kernel) */
export function lowerWideElementwiseCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec | null {
  if (n.op === 'adam_update') return wideAdam(ctx, g, n);
  if (n.op === 'unary_grad' && n.attrs.fwd_out === true) return gradWithForward(ctx, g, n);
  if (n.outputs.length !== 1) return null;
  const o = n.outputs[0], count = numel(shapeOf(g, o));
  if (count < MIN_WIDE) return null;
  const form = formOf(ctx, g, n);
  if (!form) return null;
  // fp32 binary / cast nodes keep the shared kernel (two loads per thread already ran near the copy rate); fp32 unary
  // ones (one load per thread) come here too, and the global-avgpool gradient (the seed CNN's masked one, 134 MB: 58 us
  // one element a thread, ~2.3 TB/s on the H200)
  const unary = n.op === 'unary' || n.op === 'unary_grad';
  if (!(unary || n.op === 'global_avgpool_grad' || form.args.some((x) => x.type === 'bfloat' || x.type === 'half')) || !isHalfOrF32(g, [...n.inputs, o])) return null;
  const sub = (e: string, k: number) => form.loads.reduce((x, l) => x.replace(new RegExp(`\\b${l.v}\\b`, 'g'), `${l.v}${k}`), e);
  const vec = form.loads.every((l) => !l.index) &&
    vecKernel(ctx, g, n, form.args, count, form.loads, [{ id: o, name: form.out, value: (k) => sub(form.expr, k) }], n.attrs.relu_grad === true ? ' + fused relu-grad' : '');
  if (vec) return vec;
  return wideKernel(ctx, g, n, form.args, count, '', form.loads.map((l) => ({ v: l.v, load: (i: string) => readF(ctx.d, g, l.id, l.name, l.index ? l.index(i) : i) })),
    (k, i) => writeF(ctx.d, g, o, form.out, i, sub(form.expr, k)), n.attrs.relu_grad === true ? ' + fused relu-grad' : '');
}

/**
 * The kernel: `pre` once per thread, then for its PER_THREAD elements (index expressions i0 + 256 k) the
 * loads into `<v><k>` (every load before the first store), then `stmts(k, index)` per element.
 */
function wideKernel(ctx: LowerCtx, g: Graph, n: Node, args: KernelArg[], count: number, pre: string,
  loads: { v: string; load: (i: string) => string }[], stmts: (k: number, i: string) => string, what = ''): KernelSpec {
  const d = ctx.d, u = (k: number) => d.u(k);
  const P = PER_THREAD, span = EW_THREADS * P;
  const exact = count % span === 0;
  const at = (k: number) => (k ? `i0 + ${u(EW_THREADS * k)}` : 'i0');
  const guard = (k: number, s: string) => (exact ? `  ${s}\n` : `  if (${at(k)} < ${u(count)}) { ${s} }\n`);
  const ks = Array.from({ length: P }, (_, k) => k);
  const decl = loads.map((l) => `  float ${ks.map((k) => `${l.v}${k} = ${d.f(0)}`).join(', ')};\n`).join('');
  const body = ks.map((k) => guard(k, loads.map((l) => `${l.v}${k} = ${l.load(at(k))};`).join(' '))).join('') + ks.map((k) => guard(k, stmts(k, at(k)))).join('');
  return kernelSpec(ctx, g, n, args, {
    groups: [Math.max(1, ceilDiv(count, span)), 1, 1], tgsize: [EW_THREADS, 1, 1], tgmem: 0, sync: false,
    body:
      `  // ${P} elements per thread: i0 + ${u(EW_THREADS)} k (k < ${P}) of the block's ${span}; every load before the first store\n` +
      `  const uint i0 = (gid.x / ${u(EW_THREADS)}) * ${u(span)} + gid.x % ${u(EW_THREADS)};\n` +
      (exact ? '' : `  if (i0 >= ${u(count)}) return;\n`) + pre + decl + body,
  }, `${what} [${P} elements per thread]`);
}

/**
 * A node whose inputs and outputs are all 16-bit, with a multiple of 8 elements, takes vecKernel (MPSC_CUDA_EW_VEC=0 at
 * build time: the strided kernel). Measured on an H100 (6 Dec, bench/NOTES.md v19): GPT-2's gelu gradients 151 -> 137 us,
 * the gelu forwards (merged launches) 92 -> 85 us, the step -0.49 ms.
 */
export function ewVec(): boolean {
  return envFlag('MPSC_CUDA_EW_VEC', true);
}

/**
 * MPSC_CUDA_EW_VEC32 (build time, default off; bench/NOTES.md v48): vecKernel also takes nodes with f32 values beside
 * 16-bit ones or alone (load8 / store8 of f32: two 16-byte accesses), e.g. the parameters' bf16 copies (f32 -> bf16
 * casts, rule 16's merged launch: 163 M elements in 0.41 ms on the H200, ~2.4 TB/s strided) and fp32 unary nodes.
 * Measured on an H100 (7 Dec): that launch 462.7 -> 463.9 us, no step-level gain; so off by default.
 */
export function ewVec32(): boolean {
  return envFlag('MPSC_CUDA_EW_VEC32', false);
}

/**
 * The kernel over 16-bit values only (every load and output bf16 / f16, or also f32 with ewVec32; count a multiple of 8; ewVec): thread gid.x
 * takes the 8 consecutive elements 8 gid.x .. 8 gid.x + 7, each input by one 16-byte load and each output by one
 * 16-byte store (the dialect's load8 / store8: on CUDA a uint4, where the strided kernel's 2-byte accesses made a
 * warp's load 64 bytes and an element cost a load instruction per input), the same statements per element (the
 * exact widening, the same float expression, the same rounding: bitwise the strided kernel's values). A thread
 * reads all its elements before its first store (an output may share an input's bytes). The launch is the same 1-D
 * one of EW_THREADS (merge.ts merges it like the others); null when a value is not 16-bit (or f32 with ewVec32) or count % 8 != 0.
 */
function vecKernel(ctx: LowerCtx, g: Graph, n: Node, args: KernelArg[], count: number, loads: { v: string; id: number; name: string }[],
  outs: { id: number; name: string; value: (k: number) => string }[], what = ''): KernelSpec | null {
  const vecElem = (id: number) => isHalfElem(elemOf(g, id)) || (ewVec32() && elemOf(g, id) === 'float');
  if (count % 8 !== 0 || !ewVec() || ![...loads, ...outs].every((x) => vecElem(x.id))) return null;
  return vecLaunch(ctx, g, n, args, count, loads, outs, what);
}

/**
 * vecKernel's launch and body, ungated (count a multiple of 8, every value 16-bit or f32): thread gid.x takes the 8
 * consecutive elements 8 gid.x .. 8 gid.x + 7; `pre` (per thread, before the loads), the loads (load8 into <v>0..<v>7),
 * `mid` (statements after the loads: mutable locals the stores read), the stores (store8 of value(k)). wideAdam's
 * vector form takes it with its bias corrections as `pre` and its per-element statements as `mid`.
 */
function vecLaunch(ctx: LowerCtx, g: Graph, n: Node, args: KernelArg[], count: number, loads: { v: string; id: number; name: string }[],
  outs: { id: number; name: string; value: (k: number) => string }[], what: string, pre = '', mid = ''): KernelSpec {
  const elem = (id: number) => elemOf(g, id) as VecElem;
  const d = ctx.d, u = (k: number) => d.u(k), V = count / 8;
  const exact = V % EW_THREADS === 0;
  const ks = Array.from({ length: 8 }, (_, k) => k);
  const access = [...loads, ...outs].every((x) => isHalfElem(elem(x.id))) ? 'one 16-byte access per input and output' : 'one 16-byte access per 8 16-bit values, two per 8 f32';
  return kernelSpec(ctx, g, n, args, {
    groups: [Math.max(1, ceilDiv(V, EW_THREADS)), 1, 1], tgsize: [EW_THREADS, 1, 1], tgmem: 0, sync: false,
    body:
      `  // 8 consecutive elements per thread, ${access}; every load before the first store\n` +
      (exact ? '' : `  if (gid.x >= ${u(V)}) return;\n`) + pre +
      loads.map((l) => `  ${d.load8(elem(l.id), l.name, 'gid.x', ks.map((k) => `${l.v}${k}`))}\n`).join('') + mid +
      outs.map((o) => `  ${d.store8(elem(o.id), o.name, 'gid.x', ks.map((k) => o.value(k)))}\n`).join(''),
  }, `${what} [16-byte vectors: 8 elements per thread]`);
}

/**
 * unary_grad with `fwd_out` (compiler/ir/grad_fwd.ts: the gradient and the recomputed f(x) in one node), at any
 * size and type (no other kernel serves it): per element the gradient's and the forward's own statements, each as
 * its separate kernel has them (bitwise the same values; nvcc computes what they share, gelu's erf, once),
 * x and dy read once.
 */
function gradWithForward(ctx: LowerCtx, g: Graph, n: Node): KernelSpec {
  const [dy, x] = n.inputs, [dx, y] = n.outputs;
  const grad = unaryGradExpr(ctx, n);
  const fwd = unaryFwd(ctx, n, 'v');
  const args = [argOf(g, 'dy', dy, 'r'), argOf(g, 'x', x, 'r'), argOf(g, 'dx', dx, 'w'), argOf(g, 'y', y, 'w')];
  const sub = (e: string, k: number) => e.replace(/\bv\b/g, `v${k}`).replace(/\bd\b/g, `d${k}`);
  const vec = vecKernel(ctx, g, n, args, numel(shapeOf(g, dx)), [{ v: 'd', id: dy, name: 'dy' }, { v: 'v', id: x, name: 'x' }],
    [{ id: dx, name: 'dx', value: (k) => sub(grad, k) }, { id: y, name: 'y', value: (k) => sub(fwd, k) }]);
  if (vec) return vec;
  return wideKernel(ctx, g, n, args, numel(shapeOf(g, dx)), '',
    [{ v: 'd', load: (i: string) => readF(ctx.d, g, dy, 'dy', i) }, { v: 'v', load: (i: string) => readF(ctx.d, g, x, 'x', i) }],
    (k, i) => `${writeF(ctx.d, g, dx, 'dx', i, sub(grad, k))} ${writeF(ctx.d, g, y, 'y', i, sub(fwd, k))}`);
}

/** rows' loads a thread of gradWithSums issues at once */
const ROW_UNROLL = 4;

/**
 * MPSC_CUDA_GRAD_SUM_BLOCKS (build time, 32..4096, default 512): how many row blocks gradWithSums splits the rows into
 * at most (each block's column sums a partial that blockSumsFinish adds). Measured on an H200 (GPT-2 bf16, bench/NOTES.md
 * v39): at 512 the gelu gradient with its sums 127 us, the finish 12 us.
 */
export function gradSumBlocks(): number {
  return envInts('MPSC_CUDA_GRAD_SUM_BLOCKS', 1, 32, 4096, [512], 'row blocks of a unary gradient\'s column sums')[0];
}

/**
 * unary_grad with `sum_out` (fuse.ts rule 14: dx's column sums over its rows, a linear's bias gradient, as output 1), with
 * or without `fwd_out` (then f(x) is output 2): rows of D columns (D a multiple of 256, every value f32 or 16-bit: the
 * rule's caps, cudaFusions). Thread t of block (cx, ry) keeps the 8 consecutive columns 8 (cx T + t) .. + 7 and takes the
 * rows ry R .. ry R + R - 1 in order, ROW_UNROLL at a time (all their loads, 16-byte load8s, before the first store);
 * per element the gradient's (and the forward's) own statements, as gradWithForward has them, dx stored by store8 and
 * its stored value (rounded to 16 bits when dx is 16-bit: what the sum_to read) added to the thread's column sum. The
 * row blocks' partials go to the scratch region and blockSumsFinish adds them in block order: a fixed order, so the
 * sums do not depend on scheduling (another order than the sum_to kernel's or cuBLASLt's BGRADB: within rounding).
 * dy and x are read once for all outputs, where the unfused form read dx again in the weight-gradient GEMM's BGRADB
 * epilogue (GPT-2's fc: ~47 us more per call on an H100 than the plain call, bench/NOTES.md v39).
 */
function gradWithSums(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] {
  const [dy, x] = n.inputs, [dx, sum] = n.outputs, fwd = n.attrs.fwd_out === true ? n.outputs[2] : undefined;
  const shape = shapeOf(g, dx), D = shape[shape.length - 1], rows = numel(shape) / D;
  const vals = [dy, x, dx, ...(fwd === undefined ? [] : [fwd])];
  if (D % 256 !== 0 || !vals.every((id) => isVecElem(elemOf(g, id)))) {
    throw new Error(`internal: node ${n.id}: a unary_grad with column sums over rows of ${D} (${vals.map((id) => elemOf(g, id)).join(', ')}): fuse.ts rule 14's caps take D % 256 == 0, f32 or 16-bit values`);
  }
  const d = ctx.d, u = (k: number) => d.u(k), f = (v: number) => d.f(v);
  const C8 = D / 8, T = [256, 128, 64, 32].find((t) => C8 % t === 0)!, NC = C8 / T;
  const R = ceilDiv(rows, Math.min(rows, gradSumBlocks())), G = ceilDiv(rows, R);
  const t = (id: number) => elemOf(g, id) as VecElem;
  const gradE = unaryGradExpr(ctx, n);
  const fwdE = unaryFwd(ctx, n, 'v');
  const ks = Array.from({ length: 8 }, (_, k) => k);
  const sub = (e: string, a: number, k: number) => e.replace(/\bv\b/g, `v${a}_${k}`).replace(/\bd\b/g, `d${a}_${k}`);
  // the stored value of dx as a float: rounded through its 16-bit type, or the f32 itself
  const stored = (e: string) => (isHalfElem(t(dx)) ? d.toFloat(t(dx) as HalfElem, d.fromFloat(t(dx) as HalfElem, e)) : e);
  const args = [argOf(g, 'dy', dy, 'r'), argOf(g, 'x', x, 'r'), argOf(g, 'dx', dx, 'w'), ...(fwd === undefined ? [] : [argOf(g, 'y', fwd, 'w')]),
    ...(G === 1 ? [argOf(g, 'dsum', sum, 'w')] : [])];
  const As = Array.from({ length: ROW_UNROLL }, (_, a) => a);
  const rowAt = (a: number) => (a ? `r + ${u(a)}` : 'r');
  // row r + a is the block's (j + a < R, only in doubt when R % ROW_UNROLL != 0) and the tensor's (only in doubt when G R > rows)
  const guard = (a: number) => {
    const conds = [...(a && R % ROW_UNROLL ? [`j + ${u(a)} < ${u(R)}`] : []), ...(G * R > rows ? [`${rowAt(a)} < ${u(rows)}`] : [])];
    return conds.length ? `if (${conds.join(' && ')}) ` : '';
  };
  const body =
    `  // columns 8 c .. 8 c + 7 (c = tgid.x * ${u(T)} + tidx) of rows tgid.y * ${u(R)} + j (j < ${u(R)}) in order, ${ROW_UNROLL} rows' loads at once\n` +
    `  const uint c = tgid.x * ${u(T)} + tidx, r0 = tgid.y * ${u(R)};\n` +
    `  float ${ks.map((k) => `s${k} = ${f(0)}`).join(', ')};\n` +
    `  for (uint j = 0u; j < ${u(R)}; j += ${u(ROW_UNROLL)}) {\n    const uint r = r0 + j;\n` +
    // every row's loads first (a row past the end reads the last row again and stores nothing)
    As.map((a) => `    const uint q${a} = ${d.imin(rowAt(a), u(rows - 1))} * ${u(C8)} + c;\n` +
      `    ${d.load8(t(dy), 'dy', `q${a}`, ks.map((k) => `d${a}_${k}`))}\n    ${d.load8(t(x), 'x', `q${a}`, ks.map((k) => `v${a}_${k}`))}\n`).join('') +
    As.map((a) => `    ${guard(a)}{\n` +
      `      const float ${ks.map((k) => `e${k} = ${stored(sub(gradE, a, k))}`).join(', ')};\n` +
      `      ${d.store8(t(dx), 'dx', `q${a}`, ks.map((k) => `e${k}`))}\n` +
      (fwd === undefined ? '' : `      ${d.store8(t(fwd), 'y', `q${a}`, ks.map((k) => sub(fwdE, a, k)))}\n`) +
      `      ${ks.map((k) => `s${k} += e${k};`).join(' ')}\n    }\n`).join('') +
    `  }\n` +
    (G === 1
      ? `  ${ks.map((k) => writeF(d, g, sum, 'dsum', `8u * c + ${u(k)}`, `s${k}`)).join(' ')}\n`
      : `  ${ks.map((k) => `mpsc_scratch[tgid.y * ${u(D)} + 8u * c + ${u(k)}] = s${k};`).join(' ')}\n`);
  const first = kernelSpec(ctx, g, n, args, {
    groups: [NC, G, 1], tgsize: [T, 1, 1], tgmem: 0, sync: true, ...(G === 1 ? {} : { scratch: G * D * 4 }), body,
  }, ` [dx${fwd === undefined ? '' : ' and f(x)'} by 16-byte vectors, 8 columns per thread over ${R} rows, and dx's column sums${G === 1 ? '' : ` (partials of ${G} row blocks)`}]`);
  return G === 1 ? [first] : [first, blockSumsFinish(ctx, g, n, [{ arg: 'dsum', out: sum }], D, G)];
}

/**
 * MPSC_CUDA_ADAM_VEC (build time, default off): an adam_update of a multiple of 8 elements takes its 8 consecutive
 * elements per thread by the dialect's load8 / store8 (two 16-byte accesses per f32 stream, where the strided form
 * issues eight 4-byte ones), the same statements per element (the same bits). GPT-2's AdamW (163 M parameters x 28 B,
 * three merged launches) ran at 3.0 TB/s on the H200, 73% of its copy rate, strided (bench/NOTES.md v47). Measured on
 * an H100 (7 Dec, 87% of its copy rate strided): 1767 -> 1721 us, no step-level gain; so off by default.
 */
export function adamVec(): boolean {
  return envFlag('MPSC_CUDA_ADAM_VEC', false);
}

/**
 * adam_update (compiler/kernels/optim.ts's statements per element, its bias corrections once per thread); null below
 * MIN_WIDE. Strided (elements i0 + 256 k), or with adamVec and count % 8 == 0 the 8 consecutive elements 8 gid.x + k.
 */
function wideAdam(ctx: LowerCtx, g: Graph, n: Node): KernelSpec | null {
  const ins = n.inputs, count = numel(shapeOf(g, ins[0]));
  if (count < MIN_WIDE || ins.slice(0, 4).some((id) => g.values[id].dtype !== 'f32')) return null;
  const d = ctx.d, f = (x: number) => d.f(x);
  const gscale = ins.length > 4 && ins[4] >= 0;
  const b1 = numAttr(n, 'beta1'), b2 = numAttr(n, 'beta2'), eps = numAttr(n, 'eps'), wd = numAttr(n, 'weight_decay', 0);
  const decoupled = boolAttr(n, 'decoupled');
  const args = [argOf(g, 'param', ins[0], 'rw'), argOf(g, 'grad', ins[1], 'r'), argOf(g, 'ea', ins[2], 'rw'), argOf(g, 'eas', ins[3], 'rw'),
    ...(gscale ? [argOf(g, 'gscale', ins[4], 'r')] : [])];
  const pre =
    `  const float bc1 = ${f(1)} - ${d.math('pow', f(b1), 'float(sp.t)')};\n` +
    `  const float bc2 = ${f(1)} - ${d.math('pow', f(b2), 'float(sp.t)')};\n`;
  const scaled = (x: string) => `${x}${gscale ? ' * gscale[0]' : ''}`;
  // element k's statements: the decay, the two moments (m<k>, v<k>), then the parameter's step (p<k>)
  const moments = (k: number) =>
    (wd !== 0 ? (decoupled ? `p${k} *= ${f(1)} - sp.lr * ${f(wd)}; ` : `gr${k} += ${f(wd)} * p${k}; `) : '') +
    `const float m${k} = ${f(b1)} * ma${k} + ${f(1 - b1)} * gr${k}; const float v${k} = ${f(b2)} * va${k} + ${f(1 - b2)} * gr${k} * gr${k}; `;
  const step = (k: number) => `p${k} -= (sp.lr / bc1) * m${k} / (${d.math('sqrt', `v${k}`)} / ${d.math('sqrt', 'bc2')} + ${f(eps)});`;
  if (count % 8 === 0 && adamVec()) {
    const ks = Array.from({ length: 8 }, (_, k) => k);
    const mid = `  float ${ks.map((k) => `gr${k} = ${scaled(`gl${k}`)}, p${k} = pl${k}`).join(', ')};\n` + ks.map((k) => `  ${moments(k)}${step(k)}\n`).join('');
    return vecLaunch(ctx, g, n, args, count,
      [{ v: 'gl', id: ins[1], name: 'grad' }, { v: 'pl', id: ins[0], name: 'param' }, { v: 'ma', id: ins[2], name: 'ea' }, { v: 'va', id: ins[3], name: 'eas' }],
      [{ id: ins[2], name: 'ea', value: (k) => `m${k}` }, { id: ins[3], name: 'eas', value: (k) => `v${k}` }, { id: ins[0], name: 'param', value: (k) => `p${k}` }],
      '', pre, mid);
  }
  const loads = [{ v: 'gr', load: (i: string) => scaled(`grad[${i}]`) }, { v: 'p', load: (i: string) => `param[${i}]` },
    { v: 'ma', load: (i: string) => `ea[${i}]` }, { v: 'va', load: (i: string) => `eas[${i}]` }];
  return wideKernel(ctx, g, n, args, count, pre, loads, (k, i) => `${moments(k)}ea[${i}] = m${k}; eas[${i}] = v${k}; ${step(k)} param[${i}] = p${k};`);
}

/** every value f32 or 16-bit (no integer operand) */
function isHalfOrF32(g: Graph, ids: number[]): boolean {
  return ids.every((id) => g.values[id].dtype === 'f32' || isHalf(g.values[id].dtype));
}

/** the shared unary_grad but for a node with `fwd_out`, which only gradWithForward serves (the shared GEMM build's registry) */
export function sharedWithGradForward(): GpuLowering {
  const shared = GPU_KERNELS.unary_grad;
  if (shared === 'cpu') throw new Error('internal: unary_grad has no shared GPU kernel');
  return (ctx, g, n) => (n.attrs.sum_out === true ? gradWithSums(ctx, g, n) : n.attrs.fwd_out === true ? [gradWithForward(ctx, g, n)] : shared(ctx, g, n));
}

/** the registry entry of op: this kernel where it serves the node, else the shared kernel */
export function wideOr(op: 'unary' | 'unary_grad' | 'binary' | 'cast' | 'adam_update' | 'global_avgpool_grad'): GpuLowering {
  const shared = GPU_KERNELS[op];
  if (shared === 'cpu') throw new Error(`internal: ${op} has no shared GPU kernel`);
  return (ctx, g, n) => {
    if (n.op === 'unary_grad' && n.attrs.sum_out === true) return gradWithSums(ctx, g, n);
    const k = lowerWideElementwiseCuda(ctx, g, n);
    return k ? [k] : shared(ctx, g, n);
  };
}
