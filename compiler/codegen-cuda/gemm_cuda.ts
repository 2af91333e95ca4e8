/**
 * gemm_cuda: the CUDA backend's GEMM kernels, for every GEMM-shaped op (linear, matmul, conv2d and
 * its two gradients), with the shared kernels' loaders and stores (compiler/kernels/gemm.ts
 * gemmParts: implicit im2col, bias, fused unary epilogue) but 64x64 output tiles per block:
 *  - plain: 256 threads, each accumulating a 4x4 register block in fp32 (FFMA);
 *  - mma:   128 threads (4 warps of 32x32), 3xTF32 tensor-core products (mma.sync.m16n8k8 on
 *           hi/lo splits of both operands, fp32 accumulate: fp32 accuracy), the helpers of
 *           cuda_dialect.ts; for the convolutions (TF32_OPS) one plain TF32 product per fragment
 *           (operands rounded to TF32, fp32 accumulate), as cuDNN's default under PyTorch
 *           (torch.backends.cudnn.allow_tf32): about 1e-3 relative instead of fp32's 1e-6.
 *           Otherwise a 16-bit operand (A = input 0, B = input 1 of every GEMM op) is exact in TF32,
 *           so its lo products are left out (1 or 2 mma per fragment, the same sums).
 * Both share the grid (N/64, M/64, groups) and the shared-memory tiles: A as [64][20] (row m,
 * column k; the padding keeps the fragment reads conflict-free), B as [16][72] (row k, column n).
 * The global loads of B run along k where B is k-contiguous (linear, conv2d, matmul with transB),
 * else along n. Consumes IR nodes (CUDA dialect context); produces KernelSpecs.
 * Long-K GEMMs whose tile grid leaves most SMs idle (conv2d_grad_weight: K = batch*H*W on 1-20
 * tiles) are split along K at build time (splitK: from M, N, K, groups only): S blocks per tile
 * each write their partial sum into the plan's scratch region (`mpsc_scratch`, KernelSpec.scratch
 * bytes), then a reduction kernel adds the S partials in a fixed order and runs the store
 * (bias, epilogue): results do not depend on launch order.
 * The shared 16x16 kernels stay available (MPSC_CUDA_GEMM=shared at generation time).
 * Convolutions with fp32 operands are lowered by conv_cuda.ts first (128-row TF32 implicit GEMMs, which
 * reuse splitK with their own tiles and splitReduceKernel); this file's kernels take the rest.
 */
import { isHalf, type Graph, type Node } from '../ir/graph.js';
import type { KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { ceilDiv, label } from '../kernels/common.js';
import { gemmParts, type GemmParts } from '../kernels/gemm.js';
import { lowerConvCuda } from './conv_cuda.js';

const BM = 64, BN = 64, BK = 16, LDA = 20, LDB = 72;
const TGMEM = (BM * LDA + BK * LDB) * 4;

interface View { M: string; N: string; K: string; head: string; loadA: string; loadB: string; store: string; bAlongK: boolean }

/** the group index g (grid z) and the GEMM's head statements (batched matmul offsets), when used */
const groupIndex = (v: View) => (/\bg\b/.test(v.head + v.loadA + v.loadB + v.store) ? `  const uint g = tgid.z;\n` : '') + v.head;

/** the tile loads for `threads` threads: A [64 x 16] along k, B [16 x 64] along k or n */
function loadTiles(v: View, threads: number): string {
  const per = (BM * BK) / threads;
  const [kb, nb] = v.bAlongK ? ['e % 16u', 'e / 16u'] : ['e / 64u', 'e % 64u'];
  return (
    `    #pragma unroll\n` +
    `    for (uint r = 0u; r < ${per}u; ++r) {\n` +
    `      const uint e = tidx + r * ${threads}u;\n` +
    `      {\n        const uint mi = m0 + e / 16u, ki = k0 + e % 16u;\n        float v = 0.0f;\n` +
    `        if (mi < ${v.M} && ki < ${v.K}) {\n${v.loadA}\n        }\n        As[(e / 16u) * ${LDA}u + e % 16u] = v;\n      }\n` +
    `      {\n        const uint kq = ${kb}, nq = ${nb};\n        const uint ki = k0 + kq, ni = n0 + nq;\n        float v = 0.0f;\n` +
    `        if (ki < ${v.K} && ni < ${v.N}) {\n${v.loadB}\n        }\n        Bs[kq * ${LDB}u + nq] = v;\n      }\n` +
    `    }\n`
  );
}

/** a K split: S chunks of Kc (a multiple of BK) per output tile */
export interface Split { S: number; Kc: number }

/**
 * H200: 132 SMs; a split aims at two blocks per SM and never past them: tiles x S <= 264, one wave (the seed CNN's
 * 5-tile weight gradient was split 53 ways, 265 blocks: the 265th ran alone after the first wave, ~2x the time)
 */
const SPLIT_TARGET_BLOCKS = 264;
/** the shortest K chunk worth a block (32 tile steps) and the most chunks per tile (256: a one-tile GEMM still fills the 264 slots) */
const SPLIT_MIN_K = 512, SPLIT_MAX = 256;

/** The K split of an M x N x K GEMM with G groups on bm x bn tiles (this file's 64x64 unless given), or null when the tile grid alone fills the GPU or K is short. */
export function splitK(M: number, N: number, K: number, G: number, bm = BM, bn = BN): Split | null {
  const tiles = Math.max(1, ceilDiv(M, bm)) * Math.max(1, ceilDiv(N, bn)) * G;
  const want = Math.min(Math.floor(SPLIT_TARGET_BLOCKS / tiles), Math.floor(K / SPLIT_MIN_K), SPLIT_MAX);
  if (want < 2) return null;
  const Kc = ceilDiv(ceilDiv(K, want), BK) * BK;
  const S = ceilDiv(K, Kc);
  return S < 2 ? null : { S, Kc };
}

const prologue = (v: View, what: string, sp: Split | null) =>
  `  // C[${v.M} x ${v.N}] = A[${v.M} x ${v.K}] * B[${v.K} x ${v.N}] per group (grid z): ${what}\n` +
  (sp
    ? `  // split K: block z = group * ${sp.S} + chunk; chunk ks sums k in [ks * ${sp.Kc}, (ks + 1) * ${sp.Kc})\n` +
      (/\bg\b/.test(v.head + v.loadA + v.loadB) ? `  const uint g = tgid.z / ${sp.S}u;\n` : '') + v.head +
      `  const uint kbeg = (tgid.z % ${sp.S}u) * ${sp.Kc}u, kend = min(${v.K}, kbeg + ${sp.Kc}u);\n`
    : groupIndex(v)) +
  `  const uint m0 = tgid.y * ${BM}u, n0 = tgid.x * ${BN}u;\n` +
  `  float* As = tg;              // [${BM}][${LDA}]: As[m * ${LDA} + k]\n` +
  `  float* Bs = tg + ${BM * LDA}; // [${BK}][${LDB}]: Bs[k * ${LDB} + n]\n`;

/** the K loop's header: all of K, or this block's chunk */
const kLoop = (v: View, sp: Split | null) =>
  sp ? `  for (uint k0 = kbeg; k0 < kend; k0 += ${BK}u) {\n` : `  for (uint k0 = 0u; k0 < ${v.K}; k0 += ${BK}u) {\n`;

/** one output element: the node's store, or (split K) the raw partial sum into this chunk's scratch slice */
const storeOne = (v: View, sp: Split | null, mi: string, ni: string, acc: string) =>
  `      {\n        const uint mi = ${mi}, ni = ${ni};\n        if (mi < ${v.M} && ni < ${v.N}) {\n          const float acc = ${acc};\n` +
  (sp ? `          mpsc_scratch[(tgid.z * ${v.M} + mi) * ${v.N} + ni] = acc;` : v.store) + `\n        }\n      }\n`;

/** split K, second kernel: one thread per output element adds the chunks' partials in chunk order, then the node's store */
function reduceBody(v: View, sp: Split, M: number, N: number): string {
  return (
    `  // split-K reduction: C = sum of ${sp.S} partial products (fixed order), then the store\n` +
    (/\bg\b/.test(v.store) ? `  const uint g = tgid.z;\n` : '') +
    `  const uint e = tgid.x * 256u + tidx;\n  if (e < ${M * N}u) {\n` +
    `    const uint mi = e / ${v.N}, ni = e % ${v.N};\n` +
    `    const float* part = mpsc_scratch + tgid.z * ${sp.S * M * N}u + e;\n` +
    `    float sum = 0.0f;\n    for (uint s = 0u; s < ${sp.S}u; ++s) sum += part[s * ${M * N}u];\n` +
    `    {\n      const float acc = sum;\n${v.store}\n    }\n  }\n`
  );
}

function plainBody(v: View, sp: Split | null): string {
  return (
    prologue(v, '64x64 tile per block of 16x16 threads, a 4x4 fp32 register block per thread', sp) +
    `  float cacc[4][4];\n  #pragma unroll\n  for (uint i = 0u; i < 4u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < 4u; ++j) cacc[i][j] = 0.0f;\n` +
    kLoop(v, sp) +
    loadTiles(v, 256) +
    `    __syncthreads();\n` +
    `    #pragma unroll\n    for (uint kk = 0u; kk < ${BK}u; ++kk) {\n      float a[4], b[4];\n` +
    `      #pragma unroll\n      for (uint i = 0u; i < 4u; ++i) a[i] = As[(tid.y + 16u * i) * ${LDA}u + kk];\n` +
    `      #pragma unroll\n      for (uint j = 0u; j < 4u; ++j) b[j] = Bs[kk * ${LDB}u + tid.x + 16u * j];\n` +
    `      #pragma unroll\n      for (uint i = 0u; i < 4u; ++i)\n        #pragma unroll\n        for (uint j = 0u; j < 4u; ++j) cacc[i][j] += a[i] * b[j];\n    }\n` +
    `    __syncthreads();\n  }\n` +
    `  #pragma unroll\n  for (uint i = 0u; i < 4u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < 4u; ++j)\n` +
    storeOne(v, sp, 'm0 + tid.y + 16u * i', 'n0 + tid.x + 16u * j', 'cacc[i][j]')
  );
}

/** the GEMM-family ops whose tensor-core variant is plain TF32 (one product), as PyTorch's cuDNN convolutions; the rest are 3xTF32 */
export const TF32_OPS: ReadonlySet<string> = new Set(['conv2d', 'conv2d_grad_input', 'conv2d_grad_weight']);

/**
 * How an operand enters the products: `tf32` rounds both to TF32 (one product, hi*hi); otherwise an
 * operand that is exactly a TF32 number (`exact`: it was a 16-bit value: fp16's 10 and bf16's 7
 * mantissa bits fit TF32's 10, their exponents its 8) has lo = 0, so its lo product is dropped:
 * exactly the same sums with 2 (one exact operand) or 1 (both) mma instead of 3.
 */
interface Passes { tf32: boolean; exactA: boolean; exactB: boolean }

/** the fragment products of one k-step: lo*hi (A not exact), hi*lo (B not exact), hi*hi */
function mmaProducts(p: Passes): string {
  const mma = [
    ...(p.tf32 || p.exactA ? [] : ['mpsc_mma16x8(cacc[i][j], al[i], bh[j]);']),
    ...(p.tf32 || p.exactB ? [] : ['mpsc_mma16x8(cacc[i][j], ah[i], bl[j]);']),
    'mpsc_mma16x8(cacc[i][j], ah[i], bh[j]);',
  ];
  return `      #pragma unroll\n      for (uint i = 0u; i < 2u; ++i)\n        #pragma unroll\n        for (uint j = 0u; j < 4u; ++j) {\n` +
    mma.map((m) => `          ${m}\n`).join('') + `        }\n`;
}

function mmaBody(v: View, sp: Split | null, p: Passes): string {
  const tf32 = p.tf32;
  // an operand's fragment: hi and lo (3xTF32), or hi alone (TF32)
  const frag = (x: string, h: string, l: string) => tf32 ? `${h} = mpsc_tf32(${x});` : `mpsc_split_tf32(${x}, ${h}, ${l});`;
  const passes = tf32 ? 'TF32' : p.exactA && p.exactB ? 'TF32 (exact: 16-bit operands)' : p.exactA || p.exactB ? '2xTF32 (one operand 16-bit, exact in TF32)' : '3xTF32';
  return (
    prologue(v, `64x64 tile per block of 4 warps, 32x32 per warp as 2x4 ${passes} mma.sync m16n8k8 tiles`, sp) +
    `  const uint gq = lane / 4u, tq = lane % 4u;\n` +
    `  const uint wm = (sg / 2u) * 32u, wn = (sg % 2u) * 32u;\n` +
    `  float cacc[2][4][4];\n  #pragma unroll\n  for (uint i = 0u; i < 2u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < 4u; ++j)\n      #pragma unroll\n      for (uint q = 0u; q < 4u; ++q) cacc[i][j][q] = 0.0f;\n` +
    kLoop(v, sp) +
    loadTiles(v, 128) +
    `    __syncthreads();\n` +
    `    #pragma unroll\n    for (uint kk = 0u; kk < ${BK}u; kk += 8u) {\n` +
    (tf32 ? `      uint ah[2][4], bh[4][2];\n` : `      uint ah[2][4], al[2][4], bh[4][2], bl[4][2];\n`) +
    `      #pragma unroll\n      for (uint i = 0u; i < 2u; ++i) {\n` +
    `        const uint r = wm + 16u * i + gq;\n` +
    `        ${frag(`As[r * ${LDA}u + kk + tq]`, 'ah[i][0]', 'al[i][0]')}\n` +
    `        ${frag(`As[(r + 8u) * ${LDA}u + kk + tq]`, 'ah[i][1]', 'al[i][1]')}\n` +
    `        ${frag(`As[r * ${LDA}u + kk + tq + 4u]`, 'ah[i][2]', 'al[i][2]')}\n` +
    `        ${frag(`As[(r + 8u) * ${LDA}u + kk + tq + 4u]`, 'ah[i][3]', 'al[i][3]')}\n      }\n` +
    `      #pragma unroll\n      for (uint j = 0u; j < 4u; ++j) {\n` +
    `        const uint n = wn + 8u * j + gq;\n` +
    `        ${frag(`Bs[(kk + tq) * ${LDB}u + n]`, 'bh[j][0]', 'bl[j][0]')}\n` +
    `        ${frag(`Bs[(kk + tq + 4u) * ${LDB}u + n]`, 'bh[j][1]', 'bl[j][1]')}\n      }\n` +
    mmaProducts(p) + `    }\n` +
    `    __syncthreads();\n  }\n` +
    `  #pragma unroll\n  for (uint i = 0u; i < 2u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < 4u; ++j)\n      #pragma unroll\n      for (uint q = 0u; q < 4u; ++q)\n` +
    storeOne(v, sp, 'm0 + wm + 16u * i + gq + (q >= 2u ? 8u : 0u)', 'n0 + wn + 8u * j + 2u * tq + (q & 1u)', 'cacc[i][j][q]')
  );
}

/** ops whose B operand is contiguous along k */
function bAlongK(n: Node): boolean {
  return n.op === 'linear' || n.op === 'conv2d' || (n.op === 'matmul' && Boolean(n.attrs.transB));
}

/** The CUDA GEMM of a GEMM-family node (with an optional fused unary epilogue); null for other ops. */
export function lowerGemmCuda(ctx: LowerCtx, g: Graph, n: Node, epilogue?: Node): KernelSpec[] | null {
  if (ctx.d.name !== 'cuda') throw new Error(`internal: the CUDA GEMM lowered for dialect ${ctx.d.name}`);
  // fp32 convolutions: conv_cuda.ts's 128-row implicit GEMMs (null: this file's kernels, convKernelNote says why)
  const conv = lowerConvCuda(ctx, g, n, epilogue);
  if (conv) return conv;
  const parts = gemmParts(ctx, g, n, epilogue);
  if (!parts) return null;
  const { gm, args, what, store } = parts;
  const d = ctx.d;
  const view: View = { M: d.u(gm.M), N: d.u(gm.N), K: d.u(gm.K), head: gm.head ?? '', loadA: gm.loadA, loadB: gm.loadB, store, bAlongK: bAlongK(n) };
  const sp = splitK(gm.M, gm.N, gm.K, gm.G);
  const name = ctx.next();
  const tiles = [Math.max(1, ceilDiv(gm.N, BN)), Math.max(1, ceilDiv(gm.M, BM))] as const;
  const gemm: KernelSpec = {
    name, node: n.id, op: n.op, label: label(g, n) + what + (sp ? ` [split K: ${sp.S} chunks of ${sp.Kc}, partial sums]` : ''), args,
    groups: [tiles[0], tiles[1], gm.G * (sp?.S ?? 1)],
    tgsize: [16, 16, 1], tgmem: TGMEM, sync: true, body: plainBody(view, sp),
    mma: { name: `${name}_mma`, tgsize: [128, 1, 1], tgmem: TGMEM, sync: true, body: mmaBody(view, sp, { tf32: TF32_OPS.has(n.op), exactA: isHalf(g.values[n.inputs[0]].dtype), exactB: isHalf(g.values[n.inputs[1]].dtype) }) },
  };
  if (!sp) return [gemm];
  gemm.scratch = sp.S * gm.G * gm.M * gm.N * 4;
  return [gemm, splitReduceKernel(ctx, g, n, parts, sp, label(g, n) + what)];
}

/**
 * The second kernel of a split-K GEMM (this file's, or conv_cuda.ts's): one thread per output adds
 * the S partials of scratch slices [(group * S + chunk) * M * N] in chunk order, then the node's store.
 */
export function splitReduceKernel(ctx: LowerCtx, g: Graph, n: Node, parts: GemmParts, sp: Split, lbl: string): KernelSpec {
  const { gm, args, store } = parts;
  const d = ctx.d;
  const view: View = { M: d.u(gm.M), N: d.u(gm.N), K: d.u(gm.K), head: gm.head ?? '', loadA: gm.loadA, loadB: gm.loadB, store, bAlongK: bAlongK(n) };
  return {
    name: ctx.next(), node: n.id, op: n.op, label: lbl + ` [split K: sum of ${sp.S} partials]`, args,
    groups: [Math.max(1, ceilDiv(gm.M * gm.N, 256)), 1, gm.G], tgsize: [256, 1, 1], tgmem: 0, sync: false,
    body: reduceBody(view, sp, gm.M, gm.N), scratch: sp.S * gm.G * gm.M * gm.N * 4,
  };
}
