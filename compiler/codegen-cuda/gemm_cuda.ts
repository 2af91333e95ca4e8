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
 * Small linear / matmul (smallGemm: under two blocks per SM of 64x64 tiles, at most 2^28 multiply-adds) run on
 * 32x64 tiles with register-prefetched k steps instead (the section "Small GEMMs" below; smallSplit for long K).
 * The shared 16x16 kernels stay available (MPSC_CUDA_GEMM=shared at generation time).
 * Convolutions with fp32 operands are lowered by conv_cuda.ts first (128-row TF32 implicit GEMMs, which
 * reuse splitK with their own tiles and splitReduceKernel); this file's kernels take the rest.
 */
import { isHalf, type Graph, type Node } from '../ir/graph.js';
import { matmulNodeDims } from '../ir/shapes.js';
import type { KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { ceilDiv, label, numel, shapeOf } from '../kernels/common.js';
import { gemmParts, type GemmParts } from '../kernels/gemm.js';
import { lowerConvCuda } from './conv_cuda.js';
import { envChoice, envFlag } from '../env_switch.js';
import { GPU_KERNELS } from '../kernels/registry.js';
import { lowerSumToCuda } from './reduce_cuda.js';

const BM = 64, BN = 64, BK = 16, LDA = 20, LDB = 72;
const TGMEM = (BM * LDA + BK * LDB) * 4;

interface View { M: string; N: string; K: string; head: string; loadA: string; loadB: string; store: string; bAlongK: boolean; aAlongM: boolean }

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

/** the kernel's first statements: what it computes, the group index and (split K) this block's chunk [kbeg, kend) */
const prologueHead = (v: View, what: string, sp: Split | null) =>
  `  // C[${v.M} x ${v.N}] = A[${v.M} x ${v.K}] * B[${v.K} x ${v.N}] per group (grid z): ${what}\n` +
  (sp
    ? `  // split K: block z = group * ${sp.S} + chunk; chunk ks sums k in [ks * ${sp.Kc}, (ks + 1) * ${sp.Kc})\n` +
      (/\bg\b/.test(v.head + v.loadA + v.loadB) ? `  const uint g = tgid.z / ${sp.S}u;\n` : '') + v.head +
      `  const uint kbeg = (tgid.z % ${sp.S}u) * ${sp.Kc}u, kend = min(${v.K}, kbeg + ${sp.Kc}u);\n`
    : groupIndex(v));

const prologue = (v: View, what: string, sp: Split | null) =>
  prologueHead(v, what, sp) +
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
    `  // split-K reduction: C = sum of ${sp.S} partial products (fixed order${sp.S > 64 ? '; unrolled by 32 so that many loads are in flight' : ''}), then the store\n` +
    (/\bg\b/.test(v.store) ? `  const uint g = tgid.z;\n` : '') +
    `  const uint e = tgid.x * 256u + tidx;\n  if (e < ${M * N}u) {\n` +
    `    const uint mi = e / ${v.N}, ni = e % ${v.N};\n` +
    `    const float* part = mpsc_scratch + tgid.z * ${sp.S * M * N}u + e;\n` +
    // by itself nvcc unrolled the seed CNN's 52 partials fully and its 256 by 16 (PTX): the pragma past 64 only
    `    float sum = 0.0f;\n${sp.S > 64 ? '    #pragma unroll 32\n' : ''}    for (uint s = 0u; s < ${sp.S}u; ++s) sum += part[s * ${M * N}u];\n` +
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
function mmaProducts(p: Passes, mi = 2): string {
  const mma = [
    ...(p.tf32 || p.exactA ? [] : ['mpsc_mma16x8(cacc[i][j], al[i], bh[j]);']),
    ...(p.tf32 || p.exactB ? [] : ['mpsc_mma16x8(cacc[i][j], ah[i], bl[j]);']),
    'mpsc_mma16x8(cacc[i][j], ah[i], bh[j]);',
  ];
  return `      #pragma unroll\n      for (uint i = 0u; i < ${mi}u; ++i)\n        #pragma unroll\n        for (uint j = 0u; j < 4u; ++j) {\n` +
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

/**
 * Small GEMMs: where the 64x64 grid leaves the GPU under two blocks per SM (tiles x groups < SMALL_BELOW:
 * gpt_tiny's M = 2048 x N 65..512 products are 64-256 such tiles, its weight gradients 1-16) and the product is
 * short (at most SMALL_MAX_MACS multiply-adds: latency-bound, not throughput-bound), a linear or
 * matmul runs on 32x64 tiles (twice the blocks) with BK = 32 (half the barriers of BK = 16) and the next
 * k step's global loads issued into registers before the current step's products (register double
 * buffering: the load latency, which the 64x64 kernel waits out at every k step, overlaps the mma).
 * Each operand is staged in shared memory in the order it is contiguous in global memory, so both the
 * coalesced loads' stores and the fragment reads are bank-conflict free: k-contiguous (linear's x and w,
 * matmul's a, and b with transB) as [rows][BK + 4], else (matmul's a with transA: the weight gradient
 * dY^T X; b without transB) as [BK][rows + 8]. K >= 512 over few tiles (at most a quarter of SMALL_BELOW: the
 * weight gradients, K = 2048 on 3-32 tiles) is cut into chunks of at least SMALL_SPLIT_CHUNK for about two
 * blocks per SM (smallSplit), summed in a fixed order by splitReduceKernel. MPSC_CUDA_GEMM_SMALL=0 (generation time) keeps the 64x64 kernel.
 */
const SBM = 32, SBN = 64, SBK = 32;
/** the 64x64 grid size (tiles x groups) under which a GEMM takes the small tiles: two blocks per SM of the H200's 132 */
export const SMALL_BELOW = 264;
/** K from which a small GEMM is split, and the shortest chunk (4 k steps) */
const SMALL_SPLIT_MIN_K = 512, SMALL_SPLIT_CHUNK = 128;

/**
 * the most multiply-adds of a small GEMM (2^28: gpt_tiny's largest products, 2048 x 512 x 128, are 2^27): past it a
 * product is long enough to be throughput-bound (gpt_char's weight gradients, 1152 x 384 x 16384: 7.2e9 on 216
 * tiles), where cuBLASLt's fp32 call or the 64x64 kernel's split stay
 */
export const SMALL_MAX_MACS = 2 ** 28;

/** whether a linear / matmul of this size runs on the small tiles (MPSC_CUDA_GEMM_SMALL=0: never) */
export function smallGemm(op: string, M: number, N: number, K: number, G: number): boolean {
  if (!envFlag('MPSC_CUDA_GEMM_SMALL', true) || (op !== 'linear' && op !== 'matmul')) return false;
  return Math.max(1, ceilDiv(M, BM)) * Math.max(1, ceilDiv(N, BN)) * G < SMALL_BELOW && M * N * K * G <= SMALL_MAX_MACS;
}

/**
 * The K split of a small GEMM, or null: only where its tiles leave at least half of the SMs idle (tiles x groups
 * <= SMALL_BELOW / 4: the reduction kernel, one more launch, is worth it only against a long chain of k steps on
 * few blocks), in chunks of >= SMALL_SPLIT_CHUNK (a multiple of SBK) for about SMALL_BELOW blocks
 */
export function smallSplit(M: number, N: number, K: number, G: number): Split | null {
  if (K < SMALL_SPLIT_MIN_K) return null;
  const tiles = Math.max(1, ceilDiv(M, SBM)) * Math.max(1, ceilDiv(N, SBN)) * G;
  if (tiles * 4 > SMALL_BELOW) return null;
  const want = Math.min(Math.floor(SMALL_BELOW / tiles), Math.floor(K / SMALL_SPLIT_CHUNK));
  if (want < 2) return null;
  const Kc = ceilDiv(ceilDiv(K, want), SBK) * SBK;
  const S = ceilDiv(K, Kc);
  return S < 2 ? null : { S, Kc };
}

/** one operand's shared-memory tile of `rows` x SBK: k-contiguous ([rows][SBK + 4]) or rows-contiguous ([SBK][rows + 8]) */
interface Stage { name: string; rows: number; kMajor: boolean; at: string }
const stageOf = (name: string, rows: number, kMajor: boolean, at: string): Stage => ({ name, rows, kMajor, at });
const stageFloats = (s: Stage) => (s.kMajor ? s.rows * (SBK + 4) : SBK * (s.rows + 8));
/** the shared-memory index of (row, k) */
const stIdx = (s: Stage, row: string, k: string) => (s.kMajor ? `(${row}) * ${SBK + 4}u + ${k}` : `(${k}) * ${s.rows + 8}u + ${row}`);

/**
 * The next k step's loads into registers (`k0` the step's first k) and their stores into shared memory, for
 * `threads` threads: element e of the tile is (row, k) in the operand's global order, so consecutive threads
 * read consecutive addresses.
 */
function smallLoads(v: View, a: Stage, b: Stage, threads: number, presplit: boolean): { fetch: (k0: string) => string; stage: string; decl: string } {
  const pa = (SBM * SBK) / threads, pb = (SBN * SBK) / threads;
  const rk = (s: Stage) => (s.kMajor ? [`e / ${SBK}u`, `e % ${SBK}u`] : [`e % ${s.rows}u`, `e / ${s.rows}u`]);
  const one = (s: Stage, P: number, reg: string, row: string, bound: string, load: string, k0: string) => {
    const [r, k] = rk(s);
    return `    #pragma unroll\n    for (uint r = 0u; r < ${P}u; ++r) {\n      const uint e = tidx + r * ${threads}u;\n` +
      `      const uint ${row} = ${s.at} + ${r}, ki = ${k0} + ${k};\n      float v = 0.0f;\n` +
      `      if (${row} < ${bound} && ki < ${v.K}) {\n${load}\n      }\n      ${reg}[r] = v;\n    }\n`;
  };
  const put = (s: Stage, P: number, reg: string) => {
    const [r, k] = rk(s);
    const at = stIdx(s, r, k);
    // presplit: the 3xTF32 halves stored once here (hi in the stage, lo in its twin `<name>L`), none in the k loop
    const st = presplit ? `mpsc_split_tf32(${reg}[r], ${s.name}[${at}], ${s.name}L[${at}]);` : `${s.name}[${at}] = ${reg}[r];`;
    return `    #pragma unroll\n    for (uint r = 0u; r < ${P}u; ++r) {\n      const uint e = tidx + r * ${threads}u;\n      ${st}\n    }\n`;
  };
  return {
    decl: `  float pa[${pa}], pb[${pb}];  // the next k step's A and B elements of this thread\n`,
    fetch: (k0) => one(a, pa, 'pa', 'mi', v.M, v.loadA, k0) + one(b, pb, 'pb', 'ni', v.N, v.loadB, k0),
    stage: put(a, pa, 'pa') + put(b, pb, 'pb'),
  };
}

/** the small kernel's frame: prologue, smem stages, the pipelined K loop around `step` (one BK step from shared memory), then `store` */
function smallFrame(v: View, sp: Split | null, what: string, threads: number, decl: string, step: string, store: string, presplit = false): string {
  const a = stageOf('As', SBM, !v.aAlongM, 'm0'), b = stageOf('Bs', SBN, v.bAlongK, 'n0');
  const L = smallLoads(v, a, b, threads, presplit);
  const T = presplit ? 'uint' : 'float', base = presplit ? 'reinterpret_cast<uint*>(tg)' : 'tg';
  const fa = stageFloats(a), fb = stageFloats(b);
  const [kb, ke] = sp ? ['kbeg', 'kend'] : ['0u', v.K];
  return (
    prologueHead(v, what, sp) +
    `  const uint m0 = tgid.y * ${SBM}u, n0 = tgid.x * ${SBN}u;\n` +
    `  ${T}* As = ${base};  // A (${SBM} rows) ${a.kMajor ? `[${SBM}][${SBK + 4}]: As[m * ${SBK + 4} + k]` : `[${SBK}][${SBM + 8}]: As[k * ${SBM + 8} + m]`}\n` +
    `  ${T}* Bs = As + ${fa};  // B (${SBN} columns) ${b.kMajor ? `[${SBN}][${SBK + 4}]: Bs[n * ${SBK + 4} + k]` : `[${SBK}][${SBN + 8}]: Bs[k * ${SBN + 8} + n]`}\n` +
    (presplit ? `  uint* AsL = Bs + ${fb};  // the lo halves, As's layout\n  uint* BsL = AsL + ${fa};  // the lo halves, Bs's layout\n` : '') +
    decl + L.decl +
    `  // register double buffering: step k0's elements were fetched during step k0 - ${SBK}'s products\n` +
    L.fetch(kb) +
    `  for (uint k0 = ${kb}; k0 < ${ke}; k0 += ${SBK}u) {\n` +
    L.stage + `    __syncthreads();\n` +
    `    if (k0 + ${SBK}u < ${ke}) {\n` + L.fetch(`k0 + ${SBK}u`).replace(/^/gm, '  ') + `    }\n` +
    step + `    __syncthreads();\n  }\n` + store
  );
}

/** A(row, k) and B(col, k) of the small kernel's stages */
const smallA = (v: View, m: string, k: string, arr = 'As') => `${arr}[${stIdx(stageOf('As', SBM, !v.aAlongM, ''), m, k)}]`;
const smallB = (v: View, n: string, k: string, arr = 'Bs') => `${arr}[${stIdx(stageOf('Bs', SBN, v.bAlongK, ''), n, k)}]`;
/** shared bytes of a small kernel (twice with the presplit hi / lo stages) */
const smallTgmem = (v: View, presplit = false) => (stageFloats(stageOf('As', SBM, !v.aAlongM, '')) + stageFloats(stageOf('Bs', SBN, v.bAlongK, ''))) * 4 * (presplit ? 2 : 1);
/**
 * MPSC_CUDA_SMALL_PRESPLIT=1 (build time, A/B): the small 3xTF32 kernel splits each operand element once, when it is
 * staged, into hi / lo stages (uint, twice the shared memory), so the k loop only loads fragments (the default splits
 * each fragment in the k loop: 3 instructions per fragment, each A element split by both warps that read it).
 * Measured slower on the H200 (gpt_tiny with the small products generated: 0.882 against 0.871 ms, bench/NOTES.md)
 */
const presplitOn = (p: Passes) => envFlag('MPSC_CUDA_SMALL_PRESPLIT', false) && !p.tf32;

/**
 * small tiles, fp32 FFMA: 128 threads, a 4x4 register block each (thread t: rows 4 (t / 16) .., columns 4 (t % 16) ..).
 * Both operands are staged k-major ([SBK][rows + 4]: row-contiguous, so each k step reads one float4 of A (a
 * broadcast: a warp holds two row quads) and one of B (16 consecutive quads, 2 wavefronts) for 16 FFMA). The loads
 * follow the operand's global order: a k-contiguous operand (x, w of linear) in groups of 8 k x 4 rows per warp
 * (four 32-byte sectors; the transposing stores hit 32 distinct banks since rows + 4 = 4 mod 32 words), a
 * row-contiguous one (dY^T of a weight gradient, b of a plain matmul) 32 rows per warp. fp32 FMA throughout: the
 * fp32 products cuBLASLt's CUBLAS_COMPUTE_32F computes, in this kernel's summation order.
 */
const FFMA_THREADS = 128;
/** the (row, k) of element e of a `rows` x SBK stage tile in the loads' order (kMajor: k-contiguous in global memory) */
const ffmaRowK = (rows: number, kMajor: boolean): [string, string] =>
  kMajor ? [`(e / 8u) % ${rows}u`, `e % 8u + 8u * (e / ${8 * rows}u)`] : [`e % ${rows}u`, `e / ${rows}u`];
const ffmaLd = (rows: number) => rows + 4;

function smallFfmaBody(v: View, sp: Split | null): string {
  const T = FFMA_THREADS;
  const ops = [
    { st: 'As', reg: 'pa', rows: SBM, kMajor: !v.aAlongM, at: 'm0', idx: 'mi', bound: v.M, load: v.loadA },
    { st: 'Bs', reg: 'pb', rows: SBN, kMajor: v.bAlongK, at: 'n0', idx: 'ni', bound: v.N, load: v.loadB },
  ];
  const fetch = (k0: string) => ops.map((o) => {
    const [r, k] = ffmaRowK(o.rows, o.kMajor);
    return `    #pragma unroll\n    for (uint r = 0u; r < ${(o.rows * SBK) / T}u; ++r) {\n      const uint e = tidx + r * ${T}u;\n` +
      `      const uint ${o.idx} = ${o.at} + ${r}, ki = ${k0} + ${k};\n      float v = 0.0f;\n` +
      `      if (${o.idx} < ${o.bound} && ki < ${v.K}) {\n${o.load}\n      }\n      ${o.reg}[r] = v;\n    }\n`;
  }).join('');
  const stage = ops.map((o) => {
    const [r, k] = ffmaRowK(o.rows, o.kMajor);
    return `    #pragma unroll\n    for (uint r = 0u; r < ${(o.rows * SBK) / T}u; ++r) {\n      const uint e = tidx + r * ${T}u;\n` +
      `      ${o.st}[(${k}) * ${ffmaLd(o.rows)}u + ${r}] = ${o.reg}[r];\n    }\n`;
  }).join('');
  const [kb, ke] = sp ? ['kbeg', 'kend'] : ['0u', v.K];
  const la = ffmaLd(SBM), lb = ffmaLd(SBN);
  return (
    prologueHead(v, `${SBM}x${SBN} tile per block of ${T} threads, a 4x4 fp32 FFMA register block per thread (float4 operand reads), BK ${SBK}, next k step prefetched`, sp) +
    `  const uint m0 = tgid.y * ${SBM}u, n0 = tgid.x * ${SBN}u;\n` +
    `  const uint tm = tidx / 16u, tn = tidx % 16u;  // rows m0 + 4 tm .., columns n0 + 4 tn ..\n` +
    `  float* As = tg;  // A (${SBM} rows) [${SBK}][${la}]: As[k * ${la} + m]\n` +
    `  float* Bs = As + ${SBK * la};  // B (${SBN} columns) [${SBK}][${lb}]: Bs[k * ${lb} + n]\n` +
    `  float cacc[4][4];\n  #pragma unroll\n  for (uint i = 0u; i < 4u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < 4u; ++j) cacc[i][j] = 0.0f;\n` +
    `  float pa[${(SBM * SBK) / T}], pb[${(SBN * SBK) / T}];  // the next k step's A and B elements of this thread\n` +
    `  // register double buffering: step k0's elements were fetched during step k0 - ${SBK}'s products\n` +
    fetch(kb) +
    `  for (uint k0 = ${kb}; k0 < ${ke}; k0 += ${SBK}u) {\n` +
    stage + `    __syncthreads();\n` +
    `    if (k0 + ${SBK}u < ${ke}) {\n` + fetch(`k0 + ${SBK}u`).replace(/^/gm, '  ') + `    }\n` +
    `    #pragma unroll\n    for (uint kk = 0u; kk < ${SBK}u; ++kk) {\n` +
    `      const float4 fa = *reinterpret_cast<const float4*>(As + kk * ${la}u + 4u * tm);\n` +
    `      const float4 fb = *reinterpret_cast<const float4*>(Bs + kk * ${lb}u + 4u * tn);\n` +
    `      const float av[4] = {fa.x, fa.y, fa.z, fa.w}, bv[4] = {fb.x, fb.y, fb.z, fb.w};\n` +
    `      #pragma unroll\n      for (uint i = 0u; i < 4u; ++i)\n        #pragma unroll\n        for (uint j = 0u; j < 4u; ++j) cacc[i][j] += av[i] * bv[j];\n    }\n` +
    `    __syncthreads();\n  }\n` +
    `  #pragma unroll\n  for (uint i = 0u; i < 4u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < 4u; ++j)\n` +
    storeOne(v, sp, 'm0 + 4u * tm + i', 'n0 + 4u * tn + j', 'cacc[i][j]')
  );
}
/** shared bytes of the FFMA small kernel */
const ffmaTgmem = () => SBK * (ffmaLd(SBM) + ffmaLd(SBN)) * 4;

/**
 * The pipelined FFMA small kernel (fp32 operands; MPSC_CUDA_SMALL_FP32=ffma): the operands are copied raw, global to
 * shared, by cp.async into a PIPE_STAGES ring of BK = 32 steps (no register staging, no transposing stores), each in its
 * global order: k-contiguous as [rows][BK + 4], row-contiguous as [BK][rows + 4]. A block of PIPE_KS k-groups of
 * (PIPE_BM / 4) x (PIPE_BN / 4) threads computes a PIPE_BM x PIPE_BN tile, each thread a 4x4 register block; group q takes k
 * steps [q BK / KS, (q + 1) BK / KS) of every stage (more warps per SM to hide the latencies of a one-wave grid), the
 * groups' sums added through shared memory at the end in group order (fixed: the same bits every run). Each 4-k step
 * reads 8 float4 for 64 FFMA, conflict-free: a k-contiguous operand's rows are strided by the thread grid (row t + 8 i
 * or n + 16 j: quarter-warps read rows 36 words apart, distinct bank quads), a row-contiguous one's are 4 t + i
 * (consecutive float4). bench/small_ffma.cu measured the tile shapes (bench/NOTES.md v31).
 */
const PIPE_STAGES = 3;
/** a pipelined kernel's tile: bm x bn outputs per block, ks k-groups of (bm / 4) x (bn / 4) threads */
interface PipeTile { bm: number; bn: number; ks: number }
/**
 * the tile by output width (bench/small_ffma.cu at gpt_tiny's shapes, H100, R = 40 launches per graph): N >= 256
 * (2048 x 512 x 128: 64x64, one k-group, 11.8 / 11.5 us against 12.7-16.4 for the 32-row tiles), else 32x64 in two
 * k-groups (2048 x 128 x K: within 0.3 us of the best variant at every K)
 */
const pipeTile = (N: number): PipeTile => (N >= 256 ? { bm: 64, bn: 64, ks: 1 } : { bm: 32, bn: 64, ks: 2 });
/** one fp32 operand as the pipelined kernel copies it: buffer, batch offset (`ao + ` or ''), leading dimension, k-contiguous, 16-byte copies */
interface RawOperand { buf: string; off: string; ld: number; kc: boolean; vec: boolean }
const pipeLd = (rows: number, kc: boolean) => (kc ? SBK + 4 : rows + 4);
const pipeStage = (rows: number, kc: boolean) => (kc ? rows * (SBK + 4) : SBK * (rows + 4));
/** shared bytes of the pipelined kernel: the stage ring (the k-groups' partial sums reuse it) */
const pipeTgmem = (t: PipeTile, a: RawOperand, b: RawOperand) => PIPE_STAGES * (pipeStage(t.bm, a.kc) + pipeStage(t.bn, b.kc)) * 4;

/** the raw operands of a linear / matmul with fp32 inputs (null otherwise: the register-staged kernel takes 16-bit ones) */
function rawOperands(g: Graph, n: Node): { a: RawOperand; b: RawOperand } | null {
  if (g.values[n.inputs[0]].dtype !== 'f32' || g.values[n.inputs[1]].dtype !== 'f32') return null;
  const vec = (ld: number, batchStride: number) => ld % 4 === 0 && batchStride % 4 === 0;
  if (n.op === 'linear') {
    const xs = shapeOf(g, n.inputs[0]), K = xs[xs.length - 1];
    return { a: { buf: 'x', off: '', ld: K, kc: true, vec: vec(K, 0) }, b: { buf: 'w', off: '', ld: K, kc: true, vec: vec(K, 0) } };
  }
  if (n.op !== 'matmul') return null;
  const { ta, tb, batch, M, N, K } = matmulNodeDims(n.id, n.attrs, shapeOf(g, n.inputs[0]), shapeOf(g, n.inputs[1]));
  const batched = numel(batch) > 1;
  const lda = ta ? M : K, ldb = tb ? K : N;
  return {
    a: { buf: 'a', off: batched ? 'ao + ' : '', ld: lda, kc: !ta, vec: vec(lda, M * K) },
    b: { buf: 'b', off: batched ? 'bo + ' : '', ld: ldb, kc: tb, vec: vec(ldb, K * N) },
  };
}

/**
 * one operand's copies of the stage at k0 into `dst` (rows r0 .., `bound` rows; k below `klim`): element (row, k) of a
 * k-contiguous operand at buf[off + row ld + k], of a row-contiguous one at buf[off + k ld + row]; 16-byte copies of 4
 * consecutive elements (vec: the contiguous extent and the batch offsets multiples of 4, so a quad is all in or all
 * out), else 4-byte ones; out-of-range elements zero-filled
 */
function pipeCopy(o: RawOperand, rows: number, dst: string, r0: string, bound: string, k0: string, klim: string, threads: number): string {
  const ld = pipeLd(rows, o.kc);
  const [outer, inner] = o.kc ? [rows, SBK] : [SBK, rows];
  const q = o.vec ? 4 : 1, per = inner / q, total = outer * per;
  const [row, k] = o.kc ? ['oi', 'ii'] : ['ii', 'oi'];
  const okRow = o.vec && !o.kc ? `${r0} + ${row} + 3u < ${bound}` : `${r0} + ${row} < ${bound}`;
  const okK = o.vec && o.kc ? `${k0} + ${k} + 3u < ${klim}` : `${k0} + ${k} < ${klim}`;
  const src = o.kc ? `${o.buf} + ${o.off}(${r0} + ${row}) * ${o.ld}u + ${k0} + ${k}` : `${o.buf} + ${o.off}(${k0} + ${k}) * ${o.ld}u + ${r0} + ${row}`;
  return (
    `    #pragma unroll\n    for (uint c = tidx; c < ${total}u; c += ${threads}u) {\n` +
    `      const uint oi = c / ${per}u, ii = ${q}u * (c % ${per}u);\n` +
    `      const bool ok = ${okRow} && ${okK};\n` +
    `      ${o.vec ? 'mpsc_cp_async16f' : 'mpsc_cp_async4'}(${dst} + oi * ${ld}u + ii, ok ? ${src} : ${o.buf}, ok);\n    }\n`
  );
}

function smallPipeBody(v: View, sp: Split | null, tile: PipeTile, a: RawOperand, b: RawOperand): string {
  const PIPE_BM = tile.bm, PIPE_BN = tile.bn, PIPE_KS = tile.ks;
  const TX = PIPE_BN / 4, TY = PIPE_BM / 4, NT = TX * TY, T = NT * PIPE_KS, KG = SBK / PIPE_KS, S = PIPE_STAGES;
  const la = pipeLd(PIPE_BM, a.kc), lb = pipeLd(PIPE_BN, b.kc);
  const sa = pipeStage(PIPE_BM, a.kc), sb = pipeStage(PIPE_BN, b.kc);
  const [kb, ke] = sp ? ['kbeg', 'kend'] : ['0u', v.K];
  const copies = (slot: string, k0: string) =>
    pipeCopy(a, PIPE_BM, `As + ${slot} * ${sa}u`, 'm0', v.M, k0, ke, T) + pipeCopy(b, PIPE_BN, `Bs + ${slot} * ${sb}u`, 'n0', v.N, k0, ke, T);
  // thread (tm, tn)'s rows / columns: k-contiguous operands strided by the grid, row-contiguous ones as quads
  const rowOf = a.kc ? `tm + ${TY}u * i` : `4u * tm + i`, colOf = b.kc ? `tn + ${TX}u * j` : `4u * tn + j`;
  const readA = a.kc ? `*reinterpret_cast<const float4*>(as + (tm + ${TY}u * u) * ${la}u + kk)` : `*reinterpret_cast<const float4*>(as + (kk + u) * ${la}u + 4u * tm)`;
  const readB = b.kc ? `*reinterpret_cast<const float4*>(bs + (tn + ${TX}u * u) * ${lb}u + kk)` : `*reinterpret_cast<const float4*>(bs + (kk + u) * ${lb}u + 4u * tn)`;
  const putA = a.kc ? 'av[u][0] = fa.x; av[u][1] = fa.y; av[u][2] = fa.z; av[u][3] = fa.w;' : 'av[0][u] = fa.x; av[1][u] = fa.y; av[2][u] = fa.z; av[3][u] = fa.w;';
  const putB = b.kc ? 'bv[0][u] = fb.x; bv[1][u] = fb.y; bv[2][u] = fb.z; bv[3][u] = fb.w;' : 'bv[u][0] = fb.x; bv[u][1] = fb.y; bv[u][2] = fb.z; bv[u][3] = fb.w;';
  const reduce = PIPE_KS > 1
    ? `  // the k-groups' sums through shared memory (the stages are free now), added to group 0's in group order\n` +
      `  __syncthreads();\n` +
      `  if (grp > 0u) {\n    #pragma unroll\n    for (uint i = 0u; i < 4u; ++i)\n      #pragma unroll\n      for (uint j = 0u; j < 4u; ++j) tg[((grp - 1u) * 16u + i * 4u + j) * ${NT}u + pt] = cacc[i][j];\n  }\n` +
      `  __syncthreads();\n  if (grp > 0u) return;\n` +
      `  #pragma unroll\n  for (uint q = 1u; q < ${PIPE_KS}u; ++q)\n    #pragma unroll\n    for (uint i = 0u; i < 4u; ++i)\n      #pragma unroll\n      for (uint j = 0u; j < 4u; ++j) cacc[i][j] += tg[((q - 1u) * 16u + i * 4u + j) * ${NT}u + pt];\n`
    : '';
  return (
    prologueHead(v, `${PIPE_BM}x${PIPE_BN} tile per block of ${T} threads (${PIPE_KS} k-groups), a 4x4 fp32 FFMA register block per thread, operands copied by cp.async into a ${S}-stage ring of BK ${SBK}`, sp) +
    `  const uint m0 = tgid.y * ${PIPE_BM}u, n0 = tgid.x * ${PIPE_BN}u;\n` +
    `  const uint grp = tidx / ${NT}u, pt = tidx % ${NT}u, tm = pt / ${TX}u, tn = pt % ${TX}u;  // k-group, rows ${a.kc ? `tm + ${TY} i` : '4 tm + i'}, columns ${b.kc ? `tn + ${TX} j` : '4 tn + j'}\n` +
    `  float* As = tg;  // ${S} stages of A: ${a.kc ? `[${PIPE_BM}][${la}]: As[m * ${la} + k]` : `[${SBK}][${la}]: As[k * ${la} + m]`}\n` +
    `  float* Bs = tg + ${S * sa};  // ${S} stages of B: ${b.kc ? `[${PIPE_BN}][${lb}]: Bs[n * ${lb} + k]` : `[${SBK}][${lb}]: Bs[k * ${lb} + n]`}\n` +
    `  float cacc[4][4];\n  #pragma unroll\n  for (uint i = 0u; i < 4u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < 4u; ++j) cacc[i][j] = 0.0f;\n` +
    `  const uint nk = (${ke} - ${kb} + ${SBK - 1}u) / ${SBK}u;\n` +
    `  #pragma unroll\n  for (uint s = 0u; s < ${S - 1}u; ++s) {\n    if (s < nk) {\n` +
    copies('s', `${kb} + s * ${SBK}u`).replace(/^/gm, '  ') +
    `    }\n    mpsc_cp_async_commit();\n  }\n` +
    `  for (uint kt = 0u; kt < nk; ++kt) {\n` +
    `    mpsc_cp_async_wait<${S - 2}>();\n    __syncthreads();  // stage kt landed for every thread; stage kt - 1's slot is free\n` +
    `    if (kt + ${S - 1}u < nk) {\n      const uint nx = kt + ${S - 1}u;\n` +
    copies(`(nx % ${S}u)`, `${kb} + nx * ${SBK}u`).replace(/^/gm, '  ') +
    `    }\n    mpsc_cp_async_commit();\n` +
    `    const float* as = As + (kt % ${S}u) * ${sa}u;\n    const float* bs = Bs + (kt % ${S}u) * ${sb}u;\n` +
    `    #pragma unroll\n    for (uint kk = grp * ${KG}u; kk < grp * ${KG}u + ${KG}u; kk += 4u) {\n` +
    `      float av[4][4], bv[4][4];  // av[i][k], bv[k][j]\n` +
    `      #pragma unroll\n      for (uint u = 0u; u < 4u; ++u) {\n` +
    `        const float4 fa = ${readA};\n        ${putA}\n` +
    `        const float4 fb = ${readB};\n        ${putB}\n      }\n` +
    `      #pragma unroll\n      for (uint k = 0u; k < 4u; ++k)\n        #pragma unroll\n        for (uint i = 0u; i < 4u; ++i)\n          #pragma unroll\n` +
    `          for (uint j = 0u; j < 4u; ++j) cacc[i][j] = fmaf(av[i][k], bv[k][j], cacc[i][j]);\n    }\n  }\n` +
    `  mpsc_cp_async_wait_all();\n` +
    reduce +
    `  #pragma unroll\n  for (uint i = 0u; i < 4u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < 4u; ++j)\n` +
    storeOne(v, sp, `m0 + ${rowOf}`, `n0 + ${colOf}`, 'cacc[i][j]')
  );
}

/** small tiles on the tensor cores: 4 warps of 16x32 (1x4 m16n8k8 tiles), the passes of mmaBody */
function smallMmaBody(v: View, sp: Split | null, p: Passes): string {
  const pre = presplitOn(p);
  // a fragment register pair from the stages: split here, or (presplit) both halves loaded; x is the hi stage's element
  const frag = (x: string, h: string, l: string) => (p.tf32 ? `${h} = mpsc_tf32(${x});` : pre ? `${h} = ${x}; ${l} = ${x.replace(/^(As|Bs)\[/, '$1L[')};` : `mpsc_split_tf32(${x}, ${h}, ${l});`);
  const passes = p.tf32 ? 'TF32' : p.exactA && p.exactB ? 'TF32 (exact: 16-bit operands)' : p.exactA || p.exactB ? '2xTF32 (one operand 16-bit, exact in TF32)' : '3xTF32';
  const decl =
    `  const uint gq = lane / 4u, tq = lane % 4u;\n` +
    `  const uint wm = (sg / 2u) * 16u, wn = (sg % 2u) * 32u;\n` +
    `  float cacc[1][4][4];\n  #pragma unroll\n  for (uint j = 0u; j < 4u; ++j)\n    #pragma unroll\n    for (uint q = 0u; q < 4u; ++q) cacc[0][j][q] = 0.0f;\n`;
  const step =
    `    #pragma unroll\n    for (uint kk = 0u; kk < ${SBK}u; kk += 8u) {\n` +
    (p.tf32 ? `      uint ah[1][4], bh[4][2];\n` : `      uint ah[1][4], al[1][4], bh[4][2], bl[4][2];\n`) +
    `      {\n        const uint r = wm + gq;\n` +
    `        ${frag(smallA(v, 'r', 'kk + tq'), 'ah[0][0]', 'al[0][0]')}\n` +
    `        ${frag(smallA(v, 'r + 8u', 'kk + tq'), 'ah[0][1]', 'al[0][1]')}\n` +
    `        ${frag(smallA(v, 'r', 'kk + tq + 4u'), 'ah[0][2]', 'al[0][2]')}\n` +
    `        ${frag(smallA(v, 'r + 8u', 'kk + tq + 4u'), 'ah[0][3]', 'al[0][3]')}\n      }\n` +
    `      #pragma unroll\n      for (uint j = 0u; j < 4u; ++j) {\n` +
    `        const uint n = wn + 8u * j + gq;\n` +
    `        ${frag(smallB(v, 'n', 'kk + tq'), 'bh[j][0]', 'bl[j][0]')}\n` +
    `        ${frag(smallB(v, 'n', 'kk + tq + 4u'), 'bh[j][1]', 'bl[j][1]')}\n      }\n` +
    mmaProducts(p, 1) + `    }\n`;
  const store = `  #pragma unroll\n  for (uint j = 0u; j < 4u; ++j)\n    #pragma unroll\n    for (uint q = 0u; q < 4u; ++q)\n` +
    storeOne(v, sp, 'm0 + wm + gq + (q >= 2u ? 8u : 0u)', 'n0 + wn + 8u * j + 2u * tq + (q & 1u)', 'cacc[0][j][q]');
  return smallFrame(v, sp, `${SBM}x${SBN} tile per block of 4 warps, 16x32 per warp as 1x4 ${passes} mma.sync m16n8k8 tiles, BK ${SBK}, next k step prefetched${pre ? ', operands split when staged' : ''}`, 128, decl, step, store, pre);
}

/** ops whose B operand is contiguous along k */
function bAlongK(n: Node): boolean {
  return n.op === 'linear' || n.op === 'conv2d' || (n.op === 'matmul' && Boolean(n.attrs.transB));
}

/** ops whose A operand is contiguous along m (matmul with transA: a weight gradient dY^T X) */
const aAlongM = (n: Node) => n.op === 'matmul' && Boolean(n.attrs.transA);

/** The CUDA GEMM of a GEMM-family node (with an optional fused unary epilogue); null for other ops. */
export function lowerGemmCuda(ctx: LowerCtx, g: Graph, n: Node, epilogue?: Node): KernelSpec[] | null {
  if (ctx.d.name !== 'cuda') throw new Error(`internal: the CUDA GEMM lowered for dialect ${ctx.d.name}`);
  // fp32 convolutions: conv_cuda.ts's 128-row implicit GEMMs (null: this file's kernels, convKernelNote says why)
  const conv = lowerConvCuda(ctx, g, n, epilogue);
  if (conv) return conv;
  if (n.attrs.pool_out === true) {
    // a conv2d with its pooled output (fuse.ts rule 10) that conv_cuda.ts does not pool in its store: the conv, then the
    // shared global_avgpool kernel over its output
    const { pool_out: _, ...attrs } = n.attrs;
    const ks = lowerGemmCuda(ctx, g, { ...n, outputs: [n.outputs[0]], attrs }, epilogue);
    const avg = GPU_KERNELS.global_avgpool;
    if (!ks || avg === 'cpu') return null;
    return [...ks, ...avg(ctx, g, { id: n.id, op: 'global_avgpool', inputs: [n.outputs[0]], outputs: [n.outputs[n.outputs.length - 1]], attrs: {} })];
  }
  if (n.attrs.c_sums === true) {
    // a conv2d_grad_input with its channel sums (fuse.ts rule 9) that conv_cuda.ts does not sum in its store: the
    // gradient, then the sum_to over N, H, W (reduce_cuda.ts, or the shared kernel for short sums)
    const { c_sums: _, ...attrs } = n.attrs;
    const ks = lowerGemmCuda(ctx, g, { ...n, outputs: [n.outputs[0]], attrs }, epilogue);
    const shared = GPU_KERNELS.sum_to;
    if (!ks || shared === 'cpu') return null;
    const S: Node = { id: n.id, op: 'sum_to', inputs: [n.outputs[0]], outputs: [n.outputs[n.outputs.length - 1]], attrs: { shape: [shapeOf(g, n.outputs[0])[1]], axes: [0, 2, 3] } };
    return [...ks, ...(lowerSumToCuda(ctx, g, S) ?? shared(ctx, g, S))];
  }
  const parts = gemmParts(ctx, g, n, epilogue);
  if (!parts) return null;
  const { gm, args, what, store } = parts;
  const d = ctx.d;
  const view: View = { M: d.u(gm.M), N: d.u(gm.N), K: d.u(gm.K), head: gm.head ?? '', loadA: gm.loadA, loadB: gm.loadB, store, bAlongK: bAlongK(n), aAlongM: aAlongM(n) };
  const passes: Passes = { tf32: TF32_OPS.has(n.op), exactA: isHalf(g.values[n.inputs[0]].dtype), exactB: isHalf(g.values[n.inputs[1]].dtype) };
  if (smallGemm(n.op, gm.M, gm.N, gm.K, gm.G)) return lowerSmall(ctx, g, n, parts, view, passes);
  const sp = splitK(gm.M, gm.N, gm.K, gm.G);
  const name = ctx.next();
  const tiles = [Math.max(1, ceilDiv(gm.N, BN)), Math.max(1, ceilDiv(gm.M, BM))] as const;
  const gemm: KernelSpec = {
    name, node: n.id, op: n.op, label: label(g, n) + what + (sp ? ` [split K: ${sp.S} chunks of ${sp.Kc}, partial sums]` : ''), args,
    groups: [tiles[0], tiles[1], gm.G * (sp?.S ?? 1)],
    tgsize: [16, 16, 1], tgmem: TGMEM, sync: true, body: plainBody(view, sp),
    mma: { name: `${name}_mma`, tgsize: [128, 1, 1], tgmem: TGMEM, sync: true, body: mmaBody(view, sp, passes) },
  };
  if (!sp) return [gemm];
  gemm.scratch = sp.S * gm.G * gm.M * gm.N * 4;
  return [gemm, splitReduceKernel(ctx, g, n, parts, sp, label(g, n) + what)];
}

/**
 * The kernels of a small GEMM whose operands are both fp32 (the products 3xTF32 would split), MPSC_CUDA_SMALL_FP32
 * (build time): 'x3' (default) the 3xTF32 small kernel as the tensor-core variant and the FFMA kernel as the plain one
 * (MPSC_CUDA_PLAIN=1); 'ffma' the FFMA kernel alone. Measured (H100, 6 Dec, bench/NOTES.md v22a: gpt_tiny with its
 * small products generated, MPSC_CUDA_SMALL_GEN=1): 0.964 ms per step with the FFMA kernel against 0.822 with the
 * 3xTF32 one and 0.751 on cuBLASLt; the FFMA kernel took 11.5-36.7 us per product one by one, cuBLASLt 8.9-18.7.
 * Operands with a 16-bit input keep their tensor-core variant either way.
 */
export const smallFp32 = () => envChoice('MPSC_CUDA_SMALL_FP32', ['ffma', 'x3'], 'x3');

/** a small GEMM (smallGemm): the 32x64-tile kernel, split along K by smallSplit, then splitReduceKernel */
function lowerSmall(ctx: LowerCtx, g: Graph, n: Node, parts: GemmParts, view: View, passes: Passes): KernelSpec[] {
  const { gm, args, what } = parts;
  const sp = smallSplit(gm.M, gm.N, gm.K, gm.G);
  const name = ctx.next();
  // a product whose store applies a fused unary gradient or keeps the product beside its epilogue (fuse.ts rules 12, 13)
  const fusedStore = n.attrs.grad_fn !== undefined || n.attrs.pre_out === true;
  const ffmaOnly = !passes.tf32 && !passes.exactA && !passes.exactB && (smallFp32() === 'ffma' || fusedStore);
  // fp32 operands on the FFMA kernel alone: the cp.async-pipelined one (raw copies), its tile by the output width
  const raw = ffmaOnly ? rawOperands(g, n) : null;
  const tile = pipeTile(gm.N);
  const [tm, tn] = raw ? [tile.bm, tile.bn] : [SBM, SBN];
  const gemm: KernelSpec = {
    name, node: n.id, op: n.op, label: label(g, n) + what + ` [gemm_cuda.ts small ${tm}x${tn} tiles${ffmaOnly ? `, fp32 FFMA${raw ? ` (cp.async ring, ${tile.ks} k-group${tile.ks > 1 ? 's' : ''})` : ''}` : ''}${sp ? `, split K: ${sp.S} chunks of ${sp.Kc}, partial sums` : ''}]`, args,
    groups: [Math.max(1, ceilDiv(gm.N, tn)), Math.max(1, ceilDiv(gm.M, tm)), gm.G * (sp?.S ?? 1)],
    ...(raw
      ? { tgsize: [(tile.bm / 4) * (tile.bn / 4) * tile.ks, 1, 1] as [number, number, number], tgmem: pipeTgmem(tile, raw.a, raw.b), sync: true, body: smallPipeBody(view, sp, tile, raw.a, raw.b) }
      : { tgsize: [FFMA_THREADS, 1, 1] as [number, number, number], tgmem: ffmaTgmem(), sync: true, body: smallFfmaBody(view, sp) }),
    ...(ffmaOnly ? {} : { mma: { name: `${name}_mma`, tgsize: [128, 1, 1] as [number, number, number], tgmem: smallTgmem(view, presplitOn(passes)), sync: true, body: smallMmaBody(view, sp, passes) } }),
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
  const view: View = { M: d.u(gm.M), N: d.u(gm.N), K: d.u(gm.K), head: gm.head ?? '', loadA: gm.loadA, loadB: gm.loadB, store, bAlongK: bAlongK(n), aAlongM: aAlongM(n) };
  return {
    name: ctx.next(), node: n.id, op: n.op, label: lbl + ` [split K: sum of ${sp.S} partials]`, args,
    groups: [Math.max(1, ceilDiv(gm.M * gm.N, 256)), 1, gm.G], tgsize: [256, 1, 1], tgmem: 0, sync: false,
    body: reduceBody(view, sp, gm.M, gm.N), scratch: sp.S * gm.G * gm.M * gm.N * 4,
  };
}
