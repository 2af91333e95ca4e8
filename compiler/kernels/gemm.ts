/**
 * gemm: every matrix-product-shaped op as one GEMM kernel with op-specific loaders:
 * linear (over the last dim of x [..., K]), matmul (batched: one product per batch index on grid z,
 * leading dims broadcast), conv2d (implicit im2col), conv2d_grad_input, conv2d_grad_weight.
 * Two variants with the same grid: a plain 16x16-tiled kernel (all GPUs) and one on the
 * dialect's 8x8 matrix unit (Metal: simdgroup_float8x8, Apple7+), recorded as the launch's
 * `mma` variant. Loader snippets see g (group), mi/ki (A) or ki/ni (B) and assign `v`; the
 * store sees g, mi, ni and acc. Out-of-range indices never reach a loader.
 * 16-bit operands (half / bfloat buffers: a 16-bit train precision's casts or 16-bit stored
 * activations; keyed on the operand buffers' element types only):
 *  - the plain kernel (and a dialect whose matrix unit lists no 16-bit operands, e.g. CUDA's)
 *    widens them to float in the loaders: float tiles, float products, float accumulator;
 *  - the matrix-unit kernel, when A and B have the same 16-bit type the dialect's unit lists in
 *    `mma.halfOperands` (Metal: half and bfloat), keeps them 16-bit: 16-bit threadgroup tiles
 *    (half the memory), simdgroup_half8x8 / simdgroup_bfloat8x8 operands multiplied into a
 *    simdgroup_float8x8 accumulator, the float epilogue unchanged. The loaders still produce a
 *    float `v`; writing it back to the operand's own 16-bit type is exact. A product of two 16-bit
 *    numbers is exact in float, so both variants differ only in the order of the float sums.
 * A 16-bit output (autocast's storage of a product: compiler/ir/precision.ts) is rounded once, at
 * the store; a 16-bit bias (a linear's, as autocast casts it) is widened where it is added.
 * Consumes IR nodes (and an optional fused unary epilogue); produces KernelSpecs.
 */
import type { Graph, Node } from '../ir/graph.js';
import { broadcastStrides, matmulNodeDims, windowOut } from '../ir/shapes.js';
import { type Dialect, type HalfElem, isHalfElem } from './dialect.js';
import type { KernelArg, KernelSpec, LowerCtx } from './kernel_types.js';
import { argOf, ceilDiv, elemOf, label, numAttr, numel, pairAttr, readF, scalarExpr, shapeOf, stridedIndex, writeF } from './common.js';
import { unaryFwd } from './elementwise.js';
import { gradFnOf } from '../ir/fuse.js';
import { UNARY_FNS_TABLE, unaryFnAttrs, type UnaryFn } from '../ir/scalar_fns.js';

const L = '          ';

export interface Gemm {
  M: number; N: number; K: number; G: number;
  /** statements at the top of the kernel (after the group index g) */
  head?: string;
  loadA: string; loadB: string;
  /** the store: statements `pre`, then `out[idx] = acc + bias` */
  pre: string; out: string; idx: string; bias: string;
  args: KernelArg[];
}

/** a conv node's geometry from x's and w's shapes and its attributes (also codegen-cuda/conv_cuda.ts) */
export function convGeom(n: Node, xs: number[], ws: number[]) {
  const [SH, SW] = pairAttr(n, 'stride', [1, 1]);
  const [PH, PW] = pairAttr(n, 'padding', [0, 0]);
  const [DH, DW] = pairAttr(n, 'dilation', [1, 1]);
  const G = numAttr(n, 'groups', 1);
  const [NB, C, H, W] = xs;
  const [O, CG, KH, KW] = ws;
  const OH = windowOut(H, KH, SH, PH, DH), OW = windowOut(W, KW, SW, PW, DW);
  return { SH, SW, PH, PW, DH, DW, G, NB, C, H, W, O, CG, KH, KW, OH, OW, OG: O / G };
}

/** im2col read of x (`x(idx)`: the element as float): spatial index `sp` = (nb, oh, ow), filter index `fk` = (c, kh, kw) */
function im2col(d: Dialect, c: ReturnType<typeof convGeom>, sp: string, fk: string, x: (idx: string) => string): string {
  const u = (k: number) => d.u(k);
  return (
    `${L}const uint nb = ${sp} / ${u(c.OH * c.OW)}, p = ${sp} % ${u(c.OH * c.OW)}, oh = p / ${u(c.OW)}, ow = p % ${u(c.OW)};\n` +
    `${L}const uint c = ${fk} / ${u(c.KH * c.KW)}, q = ${fk} % ${u(c.KH * c.KW)}, kh = q / ${u(c.KW)}, kw = q % ${u(c.KW)};\n` +
    `${L}const int ih = int(oh * ${u(c.SH)} + kh * ${u(c.DH)}) - ${c.PH}, iw = int(ow * ${u(c.SW)} + kw * ${u(c.DW)}) - ${c.PW};\n` +
    `${L}if (ih >= 0 && ih < ${c.H} && iw >= 0 && iw < ${c.W}) v = ${x(`((nb * ${u(c.C)} + g * ${u(c.CG)} + c) * ${u(c.H)} + uint(ih)) * ${u(c.W)} + uint(iw)`)};`
  );
}

function gemmOf(d: Dialect, g: Graph, n: Node): Gemm | null {
  const u = (k: number) => d.u(k);
  const ins = n.inputs;
  // operand k's element `idx` (buffer `name`) as float: 16-bit operands are widened exactly, so the
  // tiles and the accumulation stay float (the products of two 16-bit numbers are exact in float)
  const rd = (k: number, name: string) => (idx: string) => readF(d, g, ins[k], name, idx);
  switch (n.op) {
    case 'linear': {
      // x [..., K]: the leading dims are the rows
      const xs = shapeOf(g, ins[0]), K = xs[xs.length - 1], M = numel(xs) / K;
      const N = shapeOf(g, ins[1])[0];
      const hasBias = ins.length > 2 && ins[2] >= 0;
      const args = [argOf(g, 'x', ins[0], 'r'), argOf(g, 'w', ins[1], 'r')];
      if (hasBias) args.push(argOf(g, 'b', ins[2], 'r'));
      args.push(argOf(g, 'y', n.outputs[0], 'w'));
      return {
        M, N, K, G: 1, args,
        loadA: `${L}v = ${rd(0, 'x')(`mi * ${u(K)} + ki`)};`,
        loadB: `${L}v = ${rd(1, 'w')(`ni * ${u(K)} + ki`)};`,
        pre: '', out: 'y', idx: `mi * ${u(N)} + ni`, bias: hasBias ? rd(2, 'b')('ni') : '',
      };
    }
    case 'matmul': {
      // one product per batch index g (grid z); an operand's batch offset through its broadcast strides
      const as = shapeOf(g, ins[0]), bs = shapeOf(g, ins[1]);
      const { ta, tb, batch, M, N, K } = matmulNodeDims(n.id, n.attrs, as, bs);
      const G = numel(batch);
      const sa = broadcastStrides(as.slice(0, -2), batch).map((x) => x * M * K);
      const sb = broadcastStrides(bs.slice(0, -2), batch).map((x) => x * K * N);
      const batched = G > 1;
      const head = batched ? stridedIndex(d, 'g', batch, sa, 'ao') + stridedIndex(d, 'g', batch, sb, 'bo') : '';
      const ao = batched ? 'ao + ' : '', bo = batched ? 'bo + ' : '';
      return {
        M, N, K, G, head,
        args: [argOf(g, 'a', ins[0], 'r'), argOf(g, 'b', ins[1], 'r'), argOf(g, 'y', n.outputs[0], 'w')],
        loadA: `${L}v = ${rd(0, 'a')(ta ? `${ao}ki * ${u(M)} + mi` : `${ao}mi * ${u(K)} + ki`)};`,
        loadB: `${L}v = ${rd(1, 'b')(tb ? `${bo}ni * ${u(K)} + ki` : `${bo}ki * ${u(N)} + ni`)};`,
        pre: '', out: 'y', idx: batched ? `g * ${u(M * N)} + mi * ${u(N)} + ni` : `mi * ${u(N)} + ni`, bias: '',
      };
    }
    case 'conv2d': {
      const c = convGeom(n, shapeOf(g, ins[0]), shapeOf(g, ins[1]));
      const hasBias = ins.length > 2 && ins[2] >= 0;
      const K = c.CG * c.KH * c.KW;
      const args = [argOf(g, 'x', ins[0], 'r'), argOf(g, 'w', ins[1], 'r')];
      if (hasBias) args.push(argOf(g, 'b', ins[2], 'r'));
      args.push(argOf(g, 'y', n.outputs[0], 'w'));
      return {
        M: c.NB * c.OH * c.OW, N: c.OG, K, G: c.G, args,
        loadA: im2col(d, c, 'mi', 'ki', rd(0, 'x')),
        loadB: `${L}v = ${rd(1, 'w')(`(g * ${u(c.OG)} + ni) * ${u(K)} + ki`)};`,
        pre: `      const uint nb = mi / ${u(c.OH * c.OW)}, p = mi % ${u(c.OH * c.OW)};\n`,
        out: 'y', idx: `(nb * ${u(c.O)} + g * ${u(c.OG)} + ni) * ${u(c.OH * c.OW)} + p`, bias: hasBias ? `b[g * ${u(c.OG)} + ni]` : '',
      };
    }
    case 'conv2d_grad_input': {
      const c = convGeom(n, n.attrs.x_shape as number[], shapeOf(g, ins[1]));
      const KK = c.KH * c.KW;
      return {
        M: c.NB * c.H * c.W, N: c.CG, K: c.OG * KK, G: c.G,
        args: [argOf(g, 'dy', ins[0], 'r'), argOf(g, 'w', ins[1], 'r'), argOf(g, 'dx', n.outputs[0], 'w')],
        loadA:
          `${L}const uint nb = mi / ${u(c.H * c.W)}, p = mi % ${u(c.H * c.W)}, ih = p / ${u(c.W)}, iw = p % ${u(c.W)};\n` +
          `${L}const uint o = ki / ${u(KK)}, q = ki % ${u(KK)}, kh = q / ${u(c.KW)}, kw = q % ${u(c.KW)};\n` +
          `${L}const int th = int(ih) + ${c.PH} - int(kh * ${u(c.DH)}), tw = int(iw) + ${c.PW} - int(kw * ${u(c.DW)});\n` +
          `${L}if (th >= 0 && tw >= 0 && th % ${c.SH} == 0 && tw % ${c.SW} == 0) {\n` +
          `${L}  const uint oh = uint(th) / ${u(c.SH)}, ow = uint(tw) / ${u(c.SW)};\n` +
          `${L}  if (oh < ${u(c.OH)} && ow < ${u(c.OW)}) v = ${rd(0, 'dy')(`((nb * ${u(c.O)} + g * ${u(c.OG)} + o) * ${u(c.OH)} + oh) * ${u(c.OW)} + ow`)};\n` +
          `${L}}`,
        loadB: `${L}v = ${rd(1, 'w')(`((g * ${u(c.OG)} + ki / ${u(KK)}) * ${u(c.CG)} + ni) * ${u(KK)} + ki % ${u(KK)}`)};`,
        pre: `      const uint nb = mi / ${u(c.H * c.W)}, p = mi % ${u(c.H * c.W)};\n`,
        out: 'dx', idx: `(nb * ${u(c.C)} + g * ${u(c.CG)} + ni) * ${u(c.H * c.W)} + p`, bias: '',
      };
    }
    case 'conv2d_grad_weight': {
      const c = convGeom(n, shapeOf(g, ins[1]), n.attrs.w_shape as number[]);
      const N = c.CG * c.KH * c.KW;
      return {
        M: c.OG, N, K: c.NB * c.OH * c.OW, G: c.G,
        args: [argOf(g, 'dy', ins[0], 'r'), argOf(g, 'x', ins[1], 'r'), argOf(g, 'dw', n.outputs[0], 'w')],
        loadA:
          `${L}const uint nb = ki / ${u(c.OH * c.OW)}, p = ki % ${u(c.OH * c.OW)};\n` +
          `${L}v = ${rd(0, 'dy')(`(nb * ${u(c.O)} + g * ${u(c.OG)} + mi) * ${u(c.OH * c.OW)} + p`)};`,
        loadB: im2col(d, c, 'ki', 'ni', rd(1, 'x')),
        pre: '', out: 'dw', idx: `(g * ${u(c.OG)} + mi) * ${u(N)} + ni`, bias: '',
      };
    }
  }
  return null;
}

export const GEMM_OPS = ['linear', 'matmul', 'conv2d', 'conv2d_grad_input', 'conv2d_grad_weight'];

/** GEMM geometry and snippets as the tile kernels see them (all but the loaders already literals) */
interface TileView {
  M: string; N: string; K: string;
  head: string;
  loadA: string; loadB: string; store: string;
}

/** the group index, declared only where a loader or the store reads it (no unused variable) */
const groupIndex = (v: TileView) => (/\bg\b/.test(v.head + v.loadA + v.loadB + v.store) ? `  const uint g = tgid.z;\n` : '') + v.head;

/**
 * operand loads of one 16x16 A tile (rows mi, columns ki) and B tile (rows ki, columns ni) into v;
 * `put(v)` is the value stored into the tile (the float itself, or it narrowed to a 16-bit tile)
 */
function loadTile(v: TileView, indent: string, a: { mi: string; ki: string; dst: string }, b: { ki: string; ni: string; dst: string }, put = (x: string) => x): string {
  const I = indent;
  return (
    `${I}{\n${I}  const uint mi = ${a.mi}, ki = ${a.ki};\n${I}  float v = 0.0f;\n${I}  if (mi < ${v.M} && ki < ${v.K}) {\n${v.loadA}\n${I}  }\n${I}  ${a.dst} = ${put('v')};\n${I}}\n` +
    `${I}{\n${I}  const uint ki = ${b.ki}, ni = ${b.ni};\n${I}  float v = 0.0f;\n${I}  if (ki < ${v.K} && ni < ${v.N}) {\n${v.loadB}\n${I}  }\n${I}  ${b.dst} = ${put('v')};\n${I}}\n`
  );
}

/** C = A * B per group (grid z) in 16x16 tiles of shared memory, one output per thread (16x16 threads) */
function gemmTiled(d: Dialect, v: TileView): string {
  const sh = d.space.shared;
  return (
    `  // C[${v.M} x ${v.N}] = A[${v.M} x ${v.K}] * B[${v.K} x ${v.N}] per group (grid z), 16x16 tiles in threadgroup memory\n` +
    groupIndex(v) +
    `  const uint row = tgid.y * 16u + tid.y;\n` +
    `  const uint col = tgid.x * 16u + tid.x;\n` +
    `  ${sh}float* As = tg;        // [16][16], As[r * 16 + k]\n` +
    `  ${sh}float* Bs = tg + 256;  // [16][16], Bs[k * 16 + c]\n` +
    `  float acc = 0.0f;\n` +
    `  for (uint k0 = 0u; k0 < ${v.K}; k0 += 16u) {\n` +
    loadTile(v, '    ', { mi: 'row', ki: 'k0 + tid.x', dst: 'As[tid.y * 16u + tid.x]' }, { ki: 'k0 + tid.y', ni: 'col', dst: 'Bs[tid.y * 16u + tid.x]' }) +
    `    ${d.barrier()}\n` +
    `    for (uint kk = 0u; kk < 16u; ++kk) acc += As[tid.y * 16u + kk] * Bs[kk * 16u + tid.x];\n` +
    `    ${d.barrier()}\n` +
    `  }\n` +
    `  if (row < ${v.M} && col < ${v.N}) {\n` +
    `    const uint mi = row, ni = col;\n${v.store}\n` +
    `  }\n`
  );
}

/** the element type of the matrix-unit kernel's operand tiles: A's and B's 16-bit type where the unit multiplies it, else float */
function tileElem(d: Dialect, g: Graph, n: Node): HalfElem | 'float' {
  const ta = elemOf(g, n.inputs[0]), tb = elemOf(g, n.inputs[1]);
  return isHalfElem(ta) && ta === tb && d.mma.halfOperands?.includes(ta) ? ta : 'float';
}

/** threadgroup bytes of the matrix-unit kernel: the A and B tiles (of `t`), the float C tile */
const mmaTgmem = (t: HalfElem | 'float') => 2 * 256 * (t === 'float' ? 4 : 2) + 256 * 4;

/**
 * The same product on the 8x8 matrix unit: a 16x16 output tile per threadgroup of 128 threads,
 * four SIMD-groups each accumulating one 8x8 block; the result goes through shared memory to
 * the same store as the tiled kernel. `t`: the operand tiles' element type (tileElem).
 */
function gemmMatrixUnit(d: Dialect, v: TileView, t: HalfElem | 'float'): string {
  const sh = d.space.shared, mu = d.mma;
  // 16-bit tiles: the float threadgroup block reinterpreted, A and B in its first 1 KiB, C after
  const tiles = t === 'float'
    ? `  ${sh}float* As = tg;        // [16][16] A tile, row-major\n` +
      `  ${sh}float* Bs = tg + 256;  // [16][16] B tile, row-major\n` +
      `  ${sh}float* Cs = tg + 512;  // [16][16] C tile, row-major\n`
    : `  ${sh}${t}* As = (${sh}${t}*)tg;  // [16][16] A tile, row-major, ${t}\n` +
      `  ${sh}${t}* Bs = As + 256;       // [16][16] B tile, row-major, ${t}\n` +
      `  ${sh}float* Cs = tg + 256;     // [16][16] C tile, row-major (after the two 16-bit tiles)\n`;
  const put = t === 'float' ? undefined : (x: string) => d.fromFloat(t, x);
  const opType = t === 'float' ? undefined : t;
  return (
    `  // C[${v.M} x ${v.N}] = A[${v.M} x ${v.K}] * B[${v.K} x ${v.N}] per group (grid z): a 16x16 output tile per\n` +
    `  // threadgroup, four SIMD-groups each multiplying one 8x8 block on the matrix unit` +
    (t === 'float' ? '\n' : ` (${t} operands, float accumulator)\n`) +
    groupIndex(v) +
    tiles +
    `  const uint br = (sg / 2u) * 8u, bc = (sg % 2u) * 8u;\n` +
    `  ${mu.declAcc('acc')}\n` +
    `  for (uint k0 = 0u; k0 < ${v.K}; k0 += 16u) {\n` +
    `    for (uint e = tidx; e < 256u; e += 128u) {\n` +
    `      const uint r = e / 16u, c = e % 16u;\n` +
    loadTile(v, '      ', { mi: 'tgid.y * 16u + r', ki: 'k0 + c', dst: 'As[e]' }, { ki: 'k0 + r', ni: 'tgid.x * 16u + c', dst: 'Bs[e]' }, put) +
    `    }\n` +
    `    ${d.barrier()}\n` +
    `    for (uint kk = 0u; kk < 16u; kk += 8u) {\n` +
    `      ${mu.declOperand('a', opType)}\n` +
    `      ${mu.declOperand('b', opType)}\n` +
    `      ${mu.load('a', 'As', 16, 'kk', 'br')}\n` +
    `      ${mu.load('b', 'Bs', 16, 'bc', 'kk')}\n` +
    `      ${mu.mac('acc', 'a', 'b')}\n` +
    `    }\n` +
    `    ${d.barrier()}\n` +
    `  }\n` +
    `  ${mu.store('acc', 'Cs', 16, 'bc', 'br')}\n` +
    `  ${d.barrier()}\n` +
    `  for (uint e = tidx; e < 256u; e += 128u) {\n` +
    `    const uint mi = tgid.y * 16u + e / 16u, ni = tgid.x * 16u + e % 16u;\n` +
    `    if (mi < ${v.M} && ni < ${v.N}) {\n` +
    `      const float acc = Cs[e];\n${v.store}\n` +
    `    }\n` +
    `  }\n`
  );
}

/** A GEMM node's geometry, loaders, kernel arguments and store statement (with an optional fused unary epilogue). */
export interface GemmParts {
  gm: Gemm;
  args: KernelArg[];
  /** label suffix naming the fused node */
  what: string;
  /** statements storing `acc` (with mi, ni, g in scope) */
  store: string;
  /** the stored float expression (of acc, bias, epilogue, mask) and the IR value it is stored to (output `gm.out` at `gm.idx`, after `gm.pre`) */
  value: string;
  outId: number;
}

/** `epilogue`: a following element-wise `unary` node fused into the store (its output replaces the GEMM's). */
export function gemmParts(ctx: LowerCtx, g: Graph, n: Node, epilogue?: Node): GemmParts | null {
  const gm = gemmOf(ctx.d, g, n);
  if (!gm) return null;
  // the product (with its bias): stored as is, or the input of the fused fn
  const product = gm.bias ? `acc + ${gm.bias}` : 'acc';
  let value = product;
  let args = gm.args;
  let what = '';
  if (epilogue) {
    const fn = String(epilogue.attrs.fn);
    value = unaryFwd(ctx, epilogue, `(${value})`);
    args = [...args.slice(0, -1), argOf(g, gm.out, epilogue.outputs[0], 'w')];
    what = ` + fused node ${epilogue.id}: unary ${fn} -> ${g.values[epilogue.outputs[0]].name}`;
  }
  if (n.attrs.relu_grad === true) {
    // a relu-grad folded into conv2d_grad_input (fuse.ts rule 2): the mask's element at the output's index gates the store
    const mask = n.inputs[n.inputs.length - 1];
    value = `(${readF(ctx.d, g, mask, 'mask', gm.idx)} > ${ctx.d.f(0)} ? ${value} : ${ctx.d.f(0)})`;
    args = [...args.slice(0, -1), argOf(g, 'mask', mask, 'r'), args[args.length - 1]];
    what += ` + fused relu-grad (mask ${g.values[mask].name})`;
  }
  const gradFn = gradFnOf(n);
  let pre = gm.pre;
  if (gradFn) {
    // a unary gradient folded into the product writing its g (fuse.ts rule 12): fn's gradient of x (the last input, read
    // once into gxv before the store) at g
    const x = n.inputs[n.inputs.length - 1], fn = String(gradFn.fn) as UnaryFn;
    value = scalarExpr(ctx, UNARY_FNS_TABLE[fn].grad, { x: 'gxv', g: `(${value})` }, unaryFnAttrs(fn, (name, dflt) => (typeof gradFn[name] === 'number' ? (gradFn[name] as number) : dflt)));
    pre += `      const float gxv = ${readF(ctx.d, g, x, 'gx', gm.idx)};\n`;
    args = [...args.slice(0, -1), argOf(g, 'gx', x, 'r'), args[args.length - 1]];
    what += ` + fused unary_grad ${fn} (x ${g.values[x].name})`;
  }
  // the output is the node's (or the fused unary's): a 16-bit one is rounded once, at this store
  const out = epilogue ? epilogue.outputs[0] : n.outputs[0];
  const store = `${pre}      ${writeF(ctx.d, g, out, gm.out, gm.idx, value)}`;
  if (epilogue && n.attrs.pre_out === true) {
    // the product before the epilogue kept as the last output (fuse.ts rule 13), stored beside it
    const kept = n.outputs[n.outputs.length - 1];
    args = [...args, argOf(g, 'ypre', kept, 'w')];
    what += ` (and the product before it -> ${g.values[kept].name})`;
    return { gm, args, what, store: `${store}\n      ${writeF(ctx.d, g, kept, 'ypre', gm.idx, product)}`, value, outId: out };
  }
  return { gm, args, what, store, value, outId: out };
}

/** `epilogue`: a following element-wise `unary` node fused into the store (its output replaces the GEMM's). */
export function lowerGemm(ctx: LowerCtx, g: Graph, n: Node, epilogue?: Node): KernelSpec[] | null {
  const d = ctx.d;
  const parts = gemmParts(ctx, g, n, epilogue);
  if (!parts) return null;
  const { gm, args, what, store } = parts;
  const view: TileView = { M: d.u(gm.M), N: d.u(gm.N), K: d.u(gm.K), head: gm.head ?? '', loadA: gm.loadA, loadB: gm.loadB, store };
  const name = ctx.next();
  const t = tileElem(d, g, n);
  return [{
    name, node: n.id, op: n.op, label: label(g, n) + what, args,
    groups: [Math.max(1, ceilDiv(gm.N, 16)), Math.max(1, ceilDiv(gm.M, 16)), gm.G],
    tgsize: [16, 16, 1], tgmem: 2 * 256 * 4, sync: true,
    body: gemmTiled(d, view),
    mma: { name: `${name}_mma`, tgsize: [128, 1, 1], tgmem: mmaTgmem(t), sync: true, body: gemmMatrixUnit(d, view, t) },
  }];
}
