/**
 * attention_cuda: the CUDA backend's flash attention (FlashAttention-2's structure) on the 16-bit
 * tensor cores, for `attention` and `attention_grad` nodes whose q, k, v (and dO) are bf16 or fp16
 * (a 16-bit train precision) with a head width D in FLASH_HEAD_DIMS, and their packed forms
 * attention_qkv / attention_qkv_grad (the same kernels: each operand addressed by op_rules' attnLayout,
 * a head's element offset and row stride; q, k, v read in place from the [N,T,3C] projection, o / dO
 * [N,T,C], dq, dk, dv stored into one [N,T,3C] gradient); other nodes go to the fp32 3xTF32
 * tensor-core kernels of attention_tf32x3.ts (all-fp32 operands) or the fp32 CUDA-core kernels of
 * attention_f32.ts where their head width allows, else they keep the shared kernel
 * (compiler/kernels/attention.ts: 16x16 tiles, fp32 and 3xTF32 variants; lowerAttentionCuda returns
 * null). Consumes those nodes (CUDA dialect context); produces KernelSpecs.
 * Same IR semantics and saved tensors as the shared kernel: o, and lse = log sum exp of the scaled,
 * masked scores per query (natural log, fp32); the causal rule keeps key j for query i iff
 * j <= i + S - T.
 *
 * Build-time switches for A/B on the GPU (flashForwardRows, flashLdsm, flashMinBlocks): the forward's
 * 128 or 64 query rows per block; the scores' B fragments by ldmatrix.x4 or 32-bit loads; each
 * kernel's __launch_bounds__ blocks per SM.
 * Every kernel: 128 threads = 4 warps; a warp owns 16 rows (queries, or keys in the dK/dV kernel)
 * of the block's 64 (the default forward: 32 query rows of 128, two m16 tiles that share every K
 * and V fragment read from shared memory, as FlashAttention-2's 128-row blocks); tiles of 64 rows x D sit in shared memory row-major with a pitch of D + 8
 * elements (the 32-bit fragment loads and the ldmatrix row reads are then free of bank conflicts),
 * rows past T / S zero. The block's own tile (Q; K and V in the dK/dV kernel) is loaded once with
 * 16-byte loads and kept as A fragments in registers; the streamed tiles are double-buffered with
 * 16-byte cp.async copies (the next step's tiles are copied while this step computes; the backward
 * kernels reuse their own tile's shared memory as the second buffer). The scores' B fragments (rows of
 * the streamed K, Q or dO tile) come by ldmatrix.x4, two n8 tiles per instruction, in the forward and
 * dK/dV kernels (dQ keeps two 32-bit loads per fragment: fewer registers, flashLdsm). Products are
 * mma.sync m16n8k16 with fp32 accumulation (mma.ts: helpers and fragment layouts); the scores'
 * fp32 C fragments are rounded to 16 bits as the A operand of the next product (P V, P^T dO,
 * dS^T Q, dS K), as FlashAttention-2 (and so PyTorch's bf16 / fp16 attention) does: the results
 * are within about 2^-8 (bf16) / 2^-11 (fp16) relative of the float64 reference, not 1e-4.
 *  - forward: block (64-query tile, head); the warp's Q fragments stay in registers; key / value
 *    tiles of 64 stream through shared memory; S = Q K^T, online softmax in base 2 (running max m
 *    of the unscaled scores when scale > 0, each exponent one FMA exp2(s * scale log2 e - m * scale
 *    log2 e); per-lane partial sums l, reduced across the 4 lanes of a row at the end), O rescaled and
 *    O += P V in registers; o = O / l, lse = m ln 2 + ln l. No T x S matrix exists anywhere.
 *  - backward, three kernels, no atomics (bitwise-equal reruns):
 *    1. Delta[i] = sum_d dO[i,d] O[i,d], one thread per query row, into the plan's scratch region
 *       (KernelSpec.scratch; the three kernels run back to back in stream order; the wgmma dQ kernel
 *       computes its rows' Delta itself and runs first instead, flashWgmmaDelta);
 *    2. dK, dV: block (64-key tile, head), the warp's K and V fragments in registers; loops over the
 *       query tiles that see the key tile, computing the transposed products S^T = K Q^T and
 *       dP^T = V dO^T, so P^T and dS^T = P^T (dP^T - Delta) scale are A fragments already;
 *       dV += P^T dO and dK += dS^T Q accumulate in registers;
 *    3. dQ: block (64-query tile, head), Q and dO fragments in registers; loops over the key tiles
 *       the queries see: S = Q K^T, dP = dO V^T, dS, dQ += dS K.
 *    FlashAttention-2 uses one kernel with atomic adds for dQ; the separate pass keeps reruns
 *    bitwise equal at the cost of computing S and dP twice (7 instead of 5 T x S x D products;
 *    flashDq 'stored' trades them for dS^T tiles stored and read back, measured no faster).
 * Causal: tiles entirely above the diagonal are never visited; the element mask is applied only
 * in tiles that cross the diagonal or the T / S edge (a warp-uniform test).
 * Relies on: 16-byte aligned buffers (the device plan aligns every value to 64 bytes; D a multiple
 * of 16 keeps every row 32-byte aligned), sm_80+ (mma.sync bf16, ldmatrix, cp.async), static shared
 * memory under 48 KiB (at D = 64: 5 tiles of 64 x 72 16-bit elements in the 64-row forward, 45 KiB;
 * 4 in the 128-row forward (its 128 Q rows in the next-tile buffers until their fragments are in
 * registers) and in the backward kernels, 36 KiB).
 * On Hopper (a build for sm_90a, flashWgmma) the head-width-64 forward, dK/dV and dQ are the same
 * algorithm on wgmma m64n64k16 instead: one warpgroup per 64 rows, the tiles 128B-swizzled without padding (wgStream,
 * wgSS, wgRS; the forward 40 KiB, dQ 48 KiB static, dK/dV 49 KiB dynamic), the same per-tile steps
 * (attention_steps.ts), rounding points and outputs; their fp32 sums in the products' order.
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelArg, KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { asFloat, isHalfElem, type ElemType } from '../kernels/dialect.js';
import { mmaSuffix, type Mma16Type } from './mma.js';
import { lowerAttentionTf32x3, tf32x3Refusal } from './attention_tf32x3.js';
import { forwardStore, kvProbStep, qProbStep, rescaleAcc, softmaxStep, softmaxStepSplit } from './attention_steps.js';
import { ATTENTION_FAMILY, attnGeom, deltaButterfly, f32Refusal, flashKernels, headOffsets, isForward, lit, lowerAttentionF32, lseValue, type AttnGeom } from './attention_f32.js';
import { envChoice, envInts, envList } from '../env_switch.js';
import { UserError } from '../errors.js';
import { blockSumsFinish } from './layernorm_cuda.js';

/** head widths the tensor-core kernels take (multiples of the k16 step; wider heads exceed 48 KiB of tiles) */
export const FLASH_HEAD_DIMS: readonly number[] = [16, 32, 48, 64];

/**
 * Blocks per SM the registers of the forward, dK/dV and dQ kernels must allow (__launch_bounds__' second
 * argument; 0: no bound), MPSC_CUDA_FLASH_MINBLOCKS="fwd,kv,q" at build time for A/B. At D = 64 (ptxas
 * 13.0, sm_90a, GPT-2's shape, the 64-row forward, the scores' B fragments by ldmatrix in all three) unbounded they take 139 / 237 / 174
 * registers: 3 / 2 / 2 blocks of 4 warps per SM (shared memory allows 5 / 6 / 6); bounded 4 / 3 / 3 they
 * take 128 / 168 / 168 and spill 16 / 92 / 4 bytes (with 32-bit B loads, MPSC_CUDA_FLASH_LDSM=0:
 * 135 / 204 / 160 unbounded). Default 0, 0, 0 (no spills: test/cuda_attention.test.ts holds every flash
 * kernel to none) until the GPU says whether 4, 0, 3 (a block more per SM for the forward and dQ, for
 * 16 and 4 bytes of spill) pays.
 */
export function flashMinBlocks(): [number, number, number] {
  return envInts('MPSC_CUDA_FLASH_MINBLOCKS', 3, 0, 8, [0, 0, 0], 'forward, dK/dV, dQ; 0: no bound') as [number, number, number];
}

/** the kernels whose scores' B fragments come by ldmatrix.x4 rather than 32-bit loads */
export type LdsmKernel = 'fwd' | 'kv' | 'q';
/**
 * Whether kernel `k`'s scores take their B fragments by ldmatrix.x4 (the 128-row forward always does):
 * MPSC_CUDA_FLASH_LDSM at build time, a comma list of fwd / kv / q or `none`; default fwd,kv. Measured on
 * the H200 (GPT-2 bf16, 4 Dec 16:40, per layer): dK/dV 257 -> 252 us with it; dQ 180 -> 214 us (ptxas 160
 * -> 174 registers: 3 -> 2 blocks per SM), so dQ keeps the 32-bit loads.
 */
export function flashLdsm(k: LdsmKernel): boolean {
  return envList<LdsmKernel>('MPSC_CUDA_FLASH_LDSM', ['fwd', 'kv', 'q'], ['fwd', 'kv']).includes(k);
}

/** rows per block (4 warps x 16) and per streamed tile */
const BR = 64;
const THREADS = 128;
const LOG2E = Math.LOG2E;

interface Geom extends AttnGeom {
  /** the 16-bit operand type */
  type: Mma16Type;
}

/** why a node does not run on the 16-bit tensor-core kernels, or null when they take it */
export function flashRefusal(g: Graph, n: Node): string | null {
  const fwd = isForward(n);
  // the 16-bit operands: q, k, v (or qkv), and dO in the backward
  const ops = { attention: [0, 1, 2], attention_grad: [0, 1, 2, 3], attention_qkv: [0], attention_qkv_grad: [0, 1] }[n.op as 'attention'] ?? [];
  const types = ops.map((i) => g.values[n.inputs[i]].dtype);
  if (!types.every((t) => t === 'bf16') && !types.every((t) => t === 'f16')) return `operands ${types.join(', ')} (the tensor-core kernels take all-bf16 or all-fp16 q, k, v${fwd ? '' : ', dO'})`;
  const D = attnGeom(g, n).D;
  if (!FLASH_HEAD_DIMS.includes(D)) return `head width ${D} (the tensor-core kernels take ${FLASH_HEAD_DIMS.join(', ')})`;
  const lse = lseValue(n);
  if (g.values[lse].dtype !== 'f32') return `lse stored as ${g.values[lse].dtype} (the kernels keep it fp32)`;
  return null;
}

function geomOf(g: Graph, n: Node): Geom {
  return { ...attnGeom(g, n), type: g.values[n.inputs[isForward(n) ? 0 : 1]].dtype === 'bf16' ? 'bfloat' : 'half' };
}

/** text builders of one geometry */
function text(gm: Geom, kernel: LdsmKernel) {
  const s = mmaSuffix(gm.type), P = gm.D + 8, NK = gm.D / 16, ND = gm.D / 8, causal = gm.causal;
  const shift = gm.S - gm.T;
  /** rows [r0, r0 + 64) of [rows x D] slabs (source pointer, row stride) into shared tiles (zeros past `rows`) */
  const load = (r0: string, rows: string, pairs: [string, string, string][]) =>
    `  for (int e = threadIdx.x; e < ${BR * (gm.D / 8)}; e += ${THREADS}) {\n` +
      `    const int r = e / ${gm.D / 8}, c = (e % ${gm.D / 8}) * 8;\n` +
      `    const bool in = ${r0} + r < ${rows};\n` +
      pairs.map(([dst, src, st]) =>
        `    *reinterpret_cast<uint4*>(${dst} + r * P + c) = in ? *reinterpret_cast<const uint4*>(${src} + (size_t)(${r0} + r) * ${st} + c) : make_uint4(0u, 0u, 0u, 0u);\n`).join('') +
      `  }\n`;
  /** rows [r0, r0 + 64) of [rows x D] slabs (source pointer, row stride) into shared tiles by cp.async (zeros past `rows`), one commit group */
  const asyncLoad = (r0: string, rows: string, pairs: [string, string, string][]) =>
    `  for (int e = threadIdx.x; e < ${BR * (gm.D / 8)}; e += ${THREADS}) {\n` +
    `    const int r = e / ${gm.D / 8}, c = (e % ${gm.D / 8}) * 8;\n` +
    `    const bool in = ${r0} + r < ${rows};\n` +
    pairs.map(([dst, src, st]) => `    mpsc_cp_async16(${dst} + r * P + c, ${src} + (size_t)(in ? ${r0} + r : 0) * ${st} + c, in);\n`).join('') +
    `  }\n  mpsc_cp_async_commit();\n`;
  return {
    P, ND,
    consts:
      `  constexpr int T = ${gm.T}, S = ${gm.S}, P = ${P};  // queries, keys, tile pitch\n` +
      `  constexpr int D = ${gm.D};  // head width\n` +
      `  constexpr float SC = ${lit(gm.scale * LOG2E)};  // scale * log2(e): scores in base 2\n` +
      `  const int w = threadIdx.x >> 5, l = threadIdx.x & 31, g = l >> 2, t = l & 3;\n` +
      `  const int bh = blockIdx.y;\n` + headOffsets(gm),
    /** the 16-bit elements of logical buffer `name` (its kernel argument) from element offset `off` */
    raw: (name: string, off: string) => `reinterpret_cast<const unsigned short*>(${gm.buf[name]}) + ${off}`,
    load,
    /** A fragments (rows w*16.., all D) of a shared tile into registers `name[NK][4]` */
    aFrag: (name: string, tile: string) =>
      `  uint ${name}[${NK}][4];\n  #pragma unroll\n  for (int kk = 0; kk < ${NK}; ++kk) {\n` +
      `    const unsigned short* a = ${tile} + (w * 16 + g) * P + kk * 16 + 2 * t;\n` +
      `    ${name}[kk][0] = mpsc_ld32(a); ${name}[kk][1] = mpsc_ld32(a + 8 * P); ${name}[kk][2] = mpsc_ld32(a + 8); ${name}[kk][3] = mpsc_ld32(a + 8 * P + 8);\n  }\n`,
    /**
     * acc[8][4] = A (registers, 16 x D) * tile^T (64 rows x D): 16 x 64 scores; the B fragments by
     * ldmatrix.x4 (two n8 tiles per instruction) or two 32-bit loads each (flashLdsm(kernel))
     */
    scores: (acc: string, a: string, tile: string) =>
      `  float ${acc}[8][4];\n` +
      `  #pragma unroll\n  for (int j = 0; j < 8; ++j) { ${acc}[j][0] = 0.0f; ${acc}[j][1] = 0.0f; ${acc}[j][2] = 0.0f; ${acc}[j][3] = 0.0f; }\n` +
      (flashLdsm(kernel)
        ? `  #pragma unroll\n  for (int kk = 0; kk < ${NK}; ++kk)\n    #pragma unroll\n    for (int j = 0; j < 8; j += 2) {\n` +
          `      // matrices (keys 8j.., cols 16kk..), (8j.., 16kk+8..), (8j+8.., 16kk..), (8j+8.., 16kk+8..): b[0], b[1] of n8 tiles j and j + 1\n` +
          `      uint bf[4];\n` +
          `      mpsc_ldsm_x4(bf, ${tile} + (j * 8 + (l >> 4) * 8 + (l & 7)) * P + kk * 16 + ((l >> 3) & 1) * 8);\n` +
          `      mpsc_mma_${s}(${acc}[j], ${a}[kk], bf);\n      mpsc_mma_${s}(${acc}[j + 1], ${a}[kk], bf + 2);\n    }\n`
        : `  #pragma unroll\n  for (int kk = 0; kk < ${NK}; ++kk)\n    #pragma unroll\n    for (int j = 0; j < 8; ++j) {\n` +
          `      const unsigned short* b = ${tile} + (j * 8 + g) * P + kk * 16 + 2 * t;\n` +
          `      const uint bf[2] = {mpsc_ld32(b), mpsc_ld32(b + 8)};\n` +
          `      mpsc_mma_${s}(${acc}[j], ${a}[kk], bf);\n    }\n`),
    /** acc[ND][4] += C (16 x 64 fp32 fragments in registers, rounded to 16 bits) * tile (64 rows x D) */
    times: (acc: string, c: string, tile: string) =>
      `  #pragma unroll\n  for (int kk = 0; kk < 4; ++kk) {\n` +
      `    const uint a[4] = {mpsc_pack_${s}(${c}[2 * kk][0], ${c}[2 * kk][1]), mpsc_pack_${s}(${c}[2 * kk][2], ${c}[2 * kk][3]),\n` +
      `                       mpsc_pack_${s}(${c}[2 * kk + 1][0], ${c}[2 * kk + 1][1]), mpsc_pack_${s}(${c}[2 * kk + 1][2], ${c}[2 * kk + 1][3])};\n` +
      `    #pragma unroll\n    for (int jd = 0; jd < ${gm.D / 16}; ++jd) {\n` +
      `      uint bf[4];\n` +
      `      mpsc_ldsm_x4_trans(bf, ${tile} + (kk * 16 + (l & 7) + ((l >> 3) & 1) * 8) * P + jd * 16 + (l >> 4) * 8);\n` +
      `      mpsc_mma_${s}(${acc}[2 * jd], a, bf);\n      mpsc_mma_${s}(${acc}[2 * jd + 1], a, bf + 2);\n    }\n  }\n`,
    zero: (acc: string) =>
      `  float ${acc}[${ND}][4];\n  #pragma unroll\n  for (int j = 0; j < ${ND}; ++j) { ${acc}[j][0] = 0.0f; ${acc}[j][1] = 0.0f; ${acc}[j][2] = 0.0f; ${acc}[j][3] = 0.0f; }\n`,
    /**
     * The loop over streamed 64-row tiles with cp.async double buffering, up to the loop body (the
     * brace left open; `closeStream` closes it): loop variable v from v0 (a variable) below vend,
     * tiles [current, next, source] (shared pointers swapped every step: the body reads `current`),
     * `extra(r0, which)` plain statements run with each tile's copies (they write the `cur` / `next`
     * side; visible after the step's barrier).
     */
    stream: (v: string, v0: string, vend: string, rows: string, tiles: [string, string, string, string][], extra: (r0: string, which: 'cur' | 'next') => string = () => '') =>
      asyncLoad(v0, rows, tiles.map(([c, , src, st]) => [c, src, st])) + extra(v0, 'cur') +
      `  for (int ${v} = ${v0}; ${v} < ${vend}; ${v} += ${BR}) {\n` +
      `    mpsc_cp_async_wait_all();\n` +
      `    __syncthreads();  // this step's tiles are in place; the previous step's are consumed\n` +
      `    if (${v} + ${BR} < ${vend}) {  // the next step's tiles, copied while this one computes\n` +
      (asyncLoad(`${v} + ${BR}`, rows, tiles.map(([, nx, src, st]) => [nx, src, st])) + extra(`${v} + ${BR}`, 'next')).replace(/^(?=.)/gm, '    ') +
      `    }\n`,
    closeStream: (tiles: [string, string][]) =>
      tiles.map(([c, nx]) => `    { auto const u = ${c}; ${c} = ${nx}; ${nx} = u; }\n`).join('') + `  }\n`,
    kend: causal ? `min(S, q0 + ${BR + shift})` : 'S',
    shift,
  };
}

/** a pair of adjacent fp32 values into buffer `a` at element `idx` (even), in its element type */
function storePair(a: KernelArg, idx: string, x: string, y: string): string {
  if (a.type === 'float') return `*reinterpret_cast<float2*>(${a.name} + ${idx}) = make_float2(${x}, ${y});`;
  if (!isHalfElem(a.type)) throw new Error(`internal: attention output ${a.name} of type ${a.type}`);
  return `*reinterpret_cast<uint*>(${a.name} + ${idx}) = mpsc_pack_${mmaSuffix(a.type)}(${x}, ${y});`;
}

/** stores a warp's [16 x D] accumulator rows r0 = base + g and r0 + 8 (below `rows`) into `out` at head offset `off`, row stride `st` */
function storeRows(x: ReturnType<typeof text>, out: KernelArg, acc: string, base: string, rows: string, off: string, st: string, mul: [string, string] = ['', '']): string {
  return (
    `  {\n    const int r0 = ${base} + g, r1 = r0 + 8;\n` +
    `    #pragma unroll\n    for (int j = 0; j < ${x.ND}; ++j) {\n` +
    `      const int c = j * 8 + 2 * t;\n` +
    `      if (r0 < ${rows}) ${storePair(out, `${off} + (size_t)r0 * ${st} + c`, `${acc}[j][0]${mul[0]}`, `${acc}[j][1]${mul[0]}`)}\n` +
    `      if (r1 < ${rows}) ${storePair(out, `${off} + (size_t)r1 * ${st} + c`, `${acc}[j][2]${mul[1]}`, `${acc}[j][3]${mul[1]}`)}\n` +
    `    }\n  }\n`
  );
}

/** the edge test of a key tile k0 for a warp's m16 tile starting at query qw */
function forwardEdge(gm: Geom, x: ReturnType<typeof text>, qw: string): string {
  return `k0 + ${BR} > S` + (gm.causal ? ` || k0 + ${BR - 1} > ${qw} + ${x.shift}` : '');
}

function forwardBody(gm: Geom, o: KernelArg): string {
  const x = text(gm, 'fwd'), P = x.P, fold = gm.scale > 0;
  return (
    `  // flash attention forward: ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = ${gm.D}${gm.causal ? ', causal' : ''}, ${mmaSuffix(gm.type)} tensor cores\n` +
    x.consts +
    `  __shared__ __align__(16) unsigned short sm[${5 * BR * P}];\n` +
    `  unsigned short* Qs = sm;\n  unsigned short* Ks = sm + ${BR * P};\n  unsigned short* Vs = sm + ${2 * BR * P};\n` +
    `  unsigned short* Kn = sm + ${3 * BR * P};\n  unsigned short* Vn = sm + ${4 * BR * P};  // the next key tile's (double buffering)\n` +
    `  // the last query tiles see the most keys: they start first\n` +
    `  const int q0 = (gridDim.x - 1 - blockIdx.x) * ${BR}, qw = q0 + w * 16;\n` +
    `  const unsigned short* qh = ${x.raw('q', 'qoff')};\n  const unsigned short* kh = ${x.raw('k', 'koff')};\n  const unsigned short* vh = ${x.raw('v', 'voff')};\n` +
    x.load('q0', 'T', [['Qs', 'qh', 'RQ']]) +
    `  __syncthreads();\n` +
    x.aFrag('qa', 'Qs') +
    x.zero('acc') +
    `  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows g and g + 8: running max (${fold ? 'of the unscaled scores' : 'base 2'}), partial sums\n` +
    `  const int kbeg = 0, kend = ${x.kend};\n` +
    x.stream('k0', 'kbeg', 'kend', 'S', [['Ks', 'Kn', 'kh', 'RK'], ['Vs', 'Vn', 'vh', 'RV']]) +
    x.scores('s', 'qa', 'Ks').replace(/^(?=.)/gm, '  ') +
    softmaxStep(gm, 8, x.ND, fold, 's', ['m0', 'm1'], ['l0', 'l1'], 'acc', 'qw', forwardEdge(gm, x, 'qw')) +
    x.times('acc', 's', 'Vs').replace(/^(?=.)/gm, '  ') +
    x.closeStream([['Ks', 'Kn'], ['Vs', 'Vn']]) +
    forwardStore(fold, ['m0', 'm1'], ['l0', 'l1'], 'qw', (mul) => storeRows(x, o, 'acc', 'qw', 'T', 'ooff', 'RO', mul))
  );
}

/**
 * The forward with 128 queries per block, 32 per warp (two m16 tiles, as FlashAttention-2's 128-row
 * blocks): every K fragment (ldmatrix.x4) and V fragment (ldmatrix.x4.trans) read from shared memory
 * feeds two mma instead of one, halving the shared-memory bytes per product. The 128 Q rows are
 * loaded into the next-tile buffers (4 tiles of 64 rows in all, as the backward kernels): their
 * fragments are in registers before the first next-tile copy.
 */
function forwardBody128(gm: Geom, o: KernelArg): string {
  const x = text(gm, 'fwd'), P = x.P, fold = gm.scale > 0, s = mmaSuffix(gm.type), NK = gm.D / 16;
  const BQ = 2 * BR, mts = [0, 1];
  const qwOf = (mt: number) => `qw${mt}`;
  const kend = gm.causal ? `min(S, q0 + ${BQ + x.shift})` : 'S';
  return (
    `  // flash attention forward, ${BQ} queries per block (32 per warp: two m16 tiles share each K / V fragment): ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = ${gm.D}${gm.causal ? ', causal' : ''}, ${s} tensor cores\n` +
    x.consts +
    `  __shared__ __align__(16) unsigned short sm[${4 * BR * P}];\n` +
    `  unsigned short* Ks = sm;\n  unsigned short* Vs = sm + ${BR * P};\n` +
    `  unsigned short* Qs = sm + ${2 * BR * P};  // the ${BQ} query rows; then the next key / value tiles (double buffering)\n` +
    `  unsigned short* Kn = Qs;\n  unsigned short* Vn = Qs + ${BR * P};\n` +
    `  // the last query tiles see the most keys: they start first\n` +
    `  const int q0 = (gridDim.x - 1 - blockIdx.x) * ${BQ};\n` +
    mts.map((mt) => `  const int ${qwOf(mt)} = q0 + w * 32 + ${mt * 16};\n`).join('') +
    `  const unsigned short* qh = ${x.raw('q', 'qoff')};\n  const unsigned short* kh = ${x.raw('k', 'koff')};\n  const unsigned short* vh = ${x.raw('v', 'voff')};\n` +
    x.load('q0', 'T', [['Qs', 'qh', 'RQ']]) + x.load(`q0 + ${BR}`, 'T', [[`Qs + ${BR * P}`, 'qh', 'RQ']]) +
    `  __syncthreads();\n` +
    mts.map((mt) =>
      `  uint qa${mt}[${NK}][4];\n  #pragma unroll\n  for (int kk = 0; kk < ${NK}; ++kk) {\n` +
      `    const unsigned short* a = Qs + (w * 32 + ${mt * 16} + g) * P + kk * 16 + 2 * t;\n` +
      `    qa${mt}[kk][0] = mpsc_ld32(a); qa${mt}[kk][1] = mpsc_ld32(a + 8 * P); qa${mt}[kk][2] = mpsc_ld32(a + 8); qa${mt}[kk][3] = mpsc_ld32(a + 8 * P + 8);\n  }\n` +
      x.zero(`acc${mt}`) +
      `  float m${mt}0 = -INFINITY, m${mt}1 = -INFINITY, l${mt}0 = 0.0f, l${mt}1 = 0.0f;  // rows ${qwOf(mt)} + g, + 8: running max (${fold ? 'of the unscaled scores' : 'base 2'}), partial sums\n`).join('') +
    `  const int kbeg = 0, kend = ${kend};\n` +
    x.stream('k0', 'kbeg', 'kend', 'S', [['Ks', 'Kn', 'kh', 'RK'], ['Vs', 'Vn', 'vh', 'RV']]) +
    `    // S = Q K^T for both m16 tiles: each K fragment pair (ldmatrix.x4) feeds four mma\n` +
    mts.map((mt) => `    float s${mt}[8][4];\n    #pragma unroll\n    for (int j = 0; j < 8; ++j) { s${mt}[j][0] = 0.0f; s${mt}[j][1] = 0.0f; s${mt}[j][2] = 0.0f; s${mt}[j][3] = 0.0f; }\n`).join('') +
    `    #pragma unroll\n    for (int kk = 0; kk < ${NK}; ++kk)\n      #pragma unroll\n      for (int j = 0; j < 8; j += 2) {\n` +
    `        uint bf[4];\n` +
    `        mpsc_ldsm_x4(bf, Ks + (j * 8 + (l >> 4) * 8 + (l & 7)) * P + kk * 16 + ((l >> 3) & 1) * 8);\n` +
    mts.map((mt) => `        mpsc_mma_${s}(s${mt}[j], qa${mt}[kk], bf);\n        mpsc_mma_${s}(s${mt}[j + 1], qa${mt}[kk], bf + 2);\n`).join('') +
    `      }\n` +
    mts.map((mt) => softmaxStep(gm, 8, x.ND, fold, `s${mt}`, [`m${mt}0`, `m${mt}1`], [`l${mt}0`, `l${mt}1`], `acc${mt}`, qwOf(mt), forwardEdge(gm, x, qwOf(mt)))).join('') +
    `    // O += P V for both m16 tiles: each V fragment pair (ldmatrix.x4.trans) feeds four mma\n` +
    `    #pragma unroll\n    for (int kk = 0; kk < 4; ++kk) {\n` +
    mts.map((mt) =>
      `      const uint a${mt}[4] = {mpsc_pack_${s}(s${mt}[2 * kk][0], s${mt}[2 * kk][1]), mpsc_pack_${s}(s${mt}[2 * kk][2], s${mt}[2 * kk][3]),\n` +
      `                         mpsc_pack_${s}(s${mt}[2 * kk + 1][0], s${mt}[2 * kk + 1][1]), mpsc_pack_${s}(s${mt}[2 * kk + 1][2], s${mt}[2 * kk + 1][3])};\n`).join('') +
    `      #pragma unroll\n      for (int jd = 0; jd < ${gm.D / 16}; ++jd) {\n` +
    `        uint bf[4];\n` +
    `        mpsc_ldsm_x4_trans(bf, Vs + (kk * 16 + (l & 7) + ((l >> 3) & 1) * 8) * P + jd * 16 + (l >> 4) * 8);\n` +
    mts.map((mt) => `        mpsc_mma_${s}(acc${mt}[2 * jd], a${mt}, bf);\n        mpsc_mma_${s}(acc${mt}[2 * jd + 1], a${mt}, bf + 2);\n`).join('') +
    `      }\n    }\n` +
    x.closeStream([['Ks', 'Kn'], ['Vs', 'Vn']]) +
    mts.map((mt) => forwardStore(fold, [`m${mt}0`, `m${mt}1`], [`l${mt}0`, `l${mt}1`], qwOf(mt), (mul) => storeRows(x, o, `acc${mt}`, qwOf(mt), 'T', 'ooff', 'RO', mul))).join('')
  );
}

/** elements of one 128B-swizzled 64 x 64 tile of the wgmma kernels */
const TILE = BR * 64;

/**
 * The wgmma kernels' loop over streamed 64-row tiles, double-buffered in 128B-swizzled shared tiles (`sm` the
 * kernel's 1024-byte aligned shared memory, in tiles of TILE elements): `tiles` [name, first slot, source, row
 * stride]: the tile of step parity b at slot + b, the next step's copied into slot + 1 - b by cp.async while this
 * step computes; the first step's copies are committed with any copies issued before (the block's own tiles).
 * `extra(r0, b)` plain statements run with each step's copies (they write buffer b, visible after the barrier).
 * `split`: a block of two warpgroups (256 threads, `wg` its warpgroup): tile i's copies by warpgroup i % 2 alone.
 * Up to the loop body (the brace left open): in the body, each name points at this step's tile, every copy of it
 * landed and seen by the async proxy.
 */
function wgStream(v: string, v0: string, vend: string, rows: string, tiles: [string, number, string, string][], extra: (r0: string, b: string) => string = () => '', split = false): string {
  const copies = (r0: string, b: (slot: number) => string) =>
    tiles.map(([, slot, src, st], i) => split
      ? `if (wg == ${i % 2}) mpsc_sw128_load_wg(sm + ${TILE} * ${b(slot)}, ${src}, ${st}, ${r0}, ${rows});\n`
      : `mpsc_sw128_load(sm + ${TILE} * ${b(slot)}, ${src}, ${st}, ${r0}, ${rows});\n`);
  return (
    `  if (${v0} < ${vend}) {\n` + copies(v0, (slot) => `${slot}`).map((c) => `    ${c}`).join('') + extra(v0, '0').replace(/^(?=.)/gm, '  ') + `  }\n` +
    `  mpsc_cp_async_commit();\n` +
    `  for (int ${v} = ${v0}, b = 0; ${v} < ${vend}; ${v} += ${BR}, b ^= 1) {\n` +
    tiles.map(([name, slot]) => `    unsigned short* const ${name} = sm + ${TILE} * (${slot} + b);\n`).join('') +
    `    __syncthreads();  // every thread is done with the other buffers (the previous step's)\n` +
    `    if (${v} + ${BR} < ${vend}) {  // the next step's tiles, copied while this one computes\n` +
    copies(`${v} + ${BR}`, (slot) => `(${slot + 1} - b)`).map((c) => `      ${c}`).join('') + extra(`${v} + ${BR}`, '(1 - b)').replace(/^(?=.)/gm, '    ') +
    `      mpsc_cp_async_commit();\n      mpsc_cp_async_wait<1>();\n    } else {\n      mpsc_cp_async_wait<0>();\n    }\n` +
    `    mpsc_fence_proxy_async();  // this thread's copies, seen by the products' async proxy\n` +
    `    __syncthreads();\n`
  );
}

/** `d` (+)= the 64 x 64 product of two swizzled shared tiles A [m][k] and B [n][k] (both K-major: A B^T), 4 wgmma k16 steps */
const wgSS = (s: string, d: string, a: string, b: string) =>
  `    #pragma unroll\n    for (int kk = 0; kk < 4; ++kk) mpsc_wgmma_ss_${s}(${d}, mpsc_sw128_desc(${a} + kk * 16), mpsc_sw128_desc(${b} + kk * 16), kk);\n`;

/** `c` (this warp's 16 x 64 fp32 fragments) rounded to 16 bits into its A fragments `a[4][4]` (n8 tiles 2kk, 2kk + 1) */
const wgPack = (s: string, a: string, c: string) =>
  `    #pragma unroll\n    for (int kk = 0; kk < 4; ++kk) {\n` +
  `      ${a}[kk][0] = mpsc_pack_${s}(${c}[2 * kk][0], ${c}[2 * kk][1]);\n      ${a}[kk][1] = mpsc_pack_${s}(${c}[2 * kk][2], ${c}[2 * kk][3]);\n` +
  `      ${a}[kk][2] = mpsc_pack_${s}(${c}[2 * kk + 1][0], ${c}[2 * kk + 1][1]);\n      ${a}[kk][3] = mpsc_pack_${s}(${c}[2 * kk + 1][2], ${c}[2 * kk + 1][3]);\n    }\n`;

/** `acc` += the A fragments `a[4][4]` times the swizzled tile `b` as stored ([k][n]: MN-major), 4 wgmma k16 steps */
const wgRSProducts = (s: string, acc: string, a: string, b: string) =>
  `    #pragma unroll\n    for (int kk = 0; kk < 4; ++kk) mpsc_wgmma_rs_tb_${s}(${acc}, ${a}[kk], mpsc_sw128_desc(${b} + kk * ${16 * 64}), 1);\n`;

/** `acc` += `c` (this warp's 16 x 64 fp32 fragments, rounded to 16 bits as A fragments) times the swizzled tile `b` as stored ([k][n]: MN-major) */
function wgRS(s: string, acc: string, c: string, b: string): string {
  const a = `${c}a`;
  return `    uint ${a}[4][4];  // ${c} rounded to 16 bits: this warp's A fragments (n8 tiles 2kk, 2kk + 1)\n` + wgPack(s, a, c) + wgRSProducts(s, acc, a, b);
}

/** product groups issued after one wgmma fence, each committed as a group of its own (not waited for) */
const wgIssue = (...groups: string[]) => `    mpsc_wgmma_fence();\n` + groups.map((g) => `${g}    mpsc_wgmma_commit();\n`).join('');
/** one group of wgmma products (`body`), issued after the fence and waited for */
const wgGroup = (body: string) => `${wgIssue(body)}    mpsc_wgmma_wait0();\n`;

/** the wgmma forwards' start: constants, `tiles` 128B-swizzled shared tiles (Q, K x 2, then `vTiles`), the block's query tile, the operands' rows, Q's copy issued */
function wgForwardHead(gm: Geom, x: ReturnType<typeof text>, what: string, tiles: number, vTiles: string): string {
  return (
    `  // flash attention forward on wgmma (sm_90a)${what}: ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = 64${gm.causal ? ', causal' : ''}, ${mmaSuffix(gm.type)}; one warpgroup per 64 queries\n` +
    x.consts +
    `  (void)P;\n` +
    `  __shared__ __align__(1024) unsigned short sm[${tiles * TILE}];  // Q, K x 2, ${vTiles}: 128B-swizzled tiles of 64 x 64\n` +
    `  unsigned short* const Qs = sm;\n` +
    `  // the last query tiles see the most keys: they start first\n` +
    `  const int q0 = (gridDim.x - 1 - blockIdx.x) * ${BR}, qw = q0 + w * 16;\n` +
    `  const unsigned short* qh = ${x.raw('q', 'qoff')};\n  const unsigned short* kh = ${x.raw('k', 'koff')};\n  const unsigned short* vh = ${x.raw('v', 'voff')};\n` +
    `  const int kbeg = 0, kend = ${x.kend};\n` +
    `  mpsc_sw128_load(Qs, qh, RQ, q0, T);\n`
  );
}

/** one key tile of the wgmma forward (a warpgroup's 64 queries): S = Q K^T, the online softmax, O += P V with V read as stored */
function wgForwardStep(gm: Geom, x: ReturnType<typeof text>): string {
  const s = mmaSuffix(gm.type);
  return (
    `    float sc[8][4];  // S = Q K^T\n` +
    wgGroup(wgSS(s, 'sc', 'Qs', 'Ks')) +
    softmaxStep(gm, 8, x.ND, gm.scale > 0, 'sc', ['m0', 'm1'], ['l0', 'l1'], 'acc', 'qw', forwardEdge(gm, x, 'qw')) +
    `    // O += P V, V read as stored\n` +
    wgGroup(wgRS(s, 'acc', 'sc', 'Vs'))
  );
}

/**
 * The forward on Hopper's warpgroup products (MPSC_CUDA_FLASH_WGMMA at build time, flashWgmma; head width 64, sm_90a): the block's
 * 4 warps are one warpgroup over a 64-query tile; Q, and the K / V tiles of 64 keys (double-buffered), sit in
 * 128B-swizzled shared tiles (mma.ts wgmma16Helpers), copied by 16-byte cp.async; per key tile S = Q K^T is 4 wgmma
 * from shared memory into fp32 fragments of the mma.sync C layout, so the online softmax is softmaxStep as in the
 * other forwards; P = S rounded to 16 bits becomes register A fragments, and O += P V is 4 wgmma with V read as
 * stored (MN-major). Each product group is waited for: the overlap is the other blocks on the SM (~100 registers,
 * 40 KiB: 5 blocks), not warp specialisation. The same online softmax, rounding points and lse as forwardBody; the
 * products' fp32 summation order differs from mma.sync's. bench/flash_wgmma_probe.cu, its standalone twin at GPT-2's
 * shape, ran in 98.2 us per layer on an H100 against this file's 128-row mma.sync forward's 157 us (7 Dec).
 */
function forwardBodyWgmma(gm: Geom, o: KernelArg): string {
  const x = text(gm, 'fwd'), fold = gm.scale > 0, s = mmaSuffix(gm.type);
  if (gm.D !== 64) throw new Error(`internal: the wgmma forward at head width ${gm.D}`);
  return (
    wgForwardHead(gm, x, '', 5, 'V x 2') +
    x.zero('acc') +
    `  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows g and g + 8: running max (${fold ? 'of the unscaled scores' : 'base 2'}), partial sums\n` +
    wgStream('k0', 'kbeg', 'kend', 'S', [['Ks', 1, 'kh', 'RK'], ['Vs', 3, 'vh', 'RV']]) +
    wgForwardStep(gm, x) +
    `  }\n` +
    forwardStore(fold, ['m0', 'm1'], ['l0', 'l1'], 'qw', (mul) => storeRows(x, o, 'acc', 'qw', 'T', 'ooff', 'RO', mul))
  );
}

/**
 * MPSC_CUDA_FLASH_WGMMA_FWD_ROWS at build time: query rows per block of the wgmma forward: 64 (the default: one warpgroup,
 * forwardBodyWgmma) or 128 (two warpgroups sharing each streamed K / V tile, forwardBodyWgmma2). Measured slower on an
 * H200 (GPT-2 bf16, 7 Dec, bench/NOTES.md v45 / v46, per layer): 130 -> 160 us; with the dQ kernel's 128 rows the step
 * 32.64 -> 33.42 ms. Kept for A/B.
 */
export function flashWgmmaFwdRows(): 64 | 128 {
  return Number(envChoice('MPSC_CUDA_FLASH_WGMMA_FWD_ROWS', ['64', '128'], '64')) as 64 | 128;
}

/**
 * MPSC_CUDA_FLASH_WGMMA_Q_ROWS at build time: query rows per block of the wgmma dQ kernel: 64 (the default: one warpgroup)
 * or 128 (two warpgroups sharing each streamed K / V tile: gradQBodyWgmma's `wgs` 2). Measured slower on an H200 (GPT-2
 * bf16, 7 Dec, per layer, with Delta): 148 -> 167 us, at 16 warps per SM either way: the block-wide barrier per key tile
 * couples the two warpgroups. Kept for A/B.
 */
export function flashWgmmaQRows(): 64 | 128 {
  return Number(envChoice('MPSC_CUDA_FLASH_WGMMA_Q_ROWS', ['64', '128'], '64')) as 64 | 128;
}

/** a two-warpgroup block's key range (q0 its first of 128 queries): the block's, and below `kown` the tiles warpgroup wg's rows see (causal) */
function twoWgKeys(gm: Geom, x: ReturnType<typeof text>): string {
  return (
    `  const int kbeg = 0, kend = ${gm.causal ? `min(S, q0 + ${2 * BR + x.shift})` : 'S'};\n` +
    `  const int kown = ${gm.causal ? `min(S, q0 + ${BR} * wg + ${BR + x.shift})` : 'S'};  // the key tiles below it: this warpgroup's rows see some of their keys\n`
  );
}

/**
 * The wgmma forward with 128 queries per block (flashWgmmaFwdRows): two warpgroups of 256 threads, warpgroup wg the
 * queries q0 + 64 wg .. + 63 with its own Q tile, both reading the same double-buffered K / V tiles (warpgroup 0 copies K,
 * warpgroup 1 V), so each K / V tile crosses from L2 into shared memory once per 128 queries instead of once per 64
 * (FlashAttention-2 / 3's 128-row forward blocks). Each warpgroup runs forwardBodyWgmma's step on its own rows, and skips
 * the key tiles its rows cannot see (causal: past its own diagonal; the block's loop runs to the second warpgroup's):
 * every row sees the same tiles, products and operations in the same order as in forwardBodyWgmma, so the same bits.
 * 6 tiles: 48 KiB of static shared memory; ~100 registers: 2 blocks (16 warps) per SM.
 */
function forwardBodyWgmma2(gm: Geom, o: KernelArg): string {
  const x = text(gm, 'fwd'), fold = gm.scale > 0, s = mmaSuffix(gm.type);
  if (gm.D !== 64) throw new Error(`internal: the wgmma forward at head width ${gm.D}`);
  return (
    `  // flash attention forward on wgmma (sm_90a), 128 queries per block: ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = 64${gm.causal ? ', causal' : ''}, ${s}; two warpgroups of 64 queries share each K / V tile\n` +
    x.consts +
    `  (void)P;\n` +
    `  const int wg = threadIdx.x >> 7;  // the warpgroup: queries q0 + 64 wg ..; warp w's 16 rows from q0 + 16 w\n` +
    `  __shared__ __align__(1024) unsigned short sm[${6 * TILE}];  // Q x 2 (one a warpgroup), K x 2, V x 2: 128B-swizzled tiles of 64 x 64\n` +
    `  unsigned short* const Qs = sm + ${TILE} * wg;\n` +
    `  // the last query tiles see the most keys: they start first\n` +
    `  const int q0 = (gridDim.x - 1 - blockIdx.x) * ${2 * BR}, qw = q0 + w * 16;\n` +
    `  const unsigned short* qh = ${x.raw('q', 'qoff')};\n  const unsigned short* kh = ${x.raw('k', 'koff')};\n  const unsigned short* vh = ${x.raw('v', 'voff')};\n` +
    twoWgKeys(gm, x) +
    `  mpsc_sw128_load_wg(Qs, qh, RQ, q0 + ${BR} * wg, T);\n` +
    x.zero('acc') +
    `  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows g and g + 8: running max (${fold ? 'of the unscaled scores' : 'base 2'}), partial sums\n` +
    wgStream('k0', 'kbeg', 'kend', 'S', [['Ks', 2, 'kh', 'RK'], ['Vs', 4, 'vh', 'RV']], undefined, true) +
    `    if (k0 < kown) {  // warpgroup-uniform: the products are the warpgroup's\n` +
    wgForwardStep(gm, x).replace(/^(?=.)/gm, '  ') +
    `    }\n` +
    `  }\n` +
    forwardStore(fold, ['m0', 'm1'], ['l0', 'l1'], 'qw', (mul) => storeRows(x, o, 'acc', 'qw', 'T', 'ooff', 'RO', mul))
  );
}

/**
 * MPSC_CUDA_FLASH_WGMMA_FWD_PIPE at build time (default 0): the wgmma forward overlaps each key tile's softmax with the
 * previous tile's O += P V (forwardBodyWgmmaPiped) instead of waiting for every product group. Measured slower on an H100
 * (GPT-2 bf16, 7 Dec, bench/NOTES.md v37): 128.6 us per layer against 123.5 (its 48 KiB leave 4 blocks per SM where
 * the plain forward has 5, whose interleaving already hid the softmax); kept for A/B (e.g. with two warpgroups per block).
 */
export function flashWgmmaFwdPipe(): boolean {
  return envChoice('MPSC_CUDA_FLASH_WGMMA_FWD_PIPE', ['0', '1'], '0') === '1';
}

/**
 * The wgmma forward with its products overlapped (flashWgmmaFwdPipe; FlashAttention-3's intra-warpgroup pipelining):
 * per key tile j, S_j = Q K_j^T and O += P_{j-1} V_{j-1} are issued as two groups; the softmax of S_j (into another
 * array, softmaxStepSplit) runs while the second product does, then O is rescaled by step j's factors once that product
 * is done and P_j is packed for the next step; the last tile's P V after the loop. O sees the same operations in the
 * same order as forwardBodyWgmma's (O = O * al_j + P_j V_j, unrolled), so the same bits. V_{j-1} must stay in shared
 * memory while step j + 1's tiles are copied: K double-buffered, V in three slots (6 tiles, 48 KiB static; 4 blocks per
 * SM where the other forward has 5).
 */
function forwardBodyWgmmaPiped(gm: Geom, o: KernelArg): string {
  const x = text(gm, 'fwd'), fold = gm.scale > 0, s = mmaSuffix(gm.type);
  if (gm.D !== 64) throw new Error(`internal: the wgmma forward at head width ${gm.D}`);
  const vCopy = (r0: string, slot: string) => `mpsc_sw128_load(sm + ${TILE} * (${slot}), vh, RV, ${r0}, S);\n`;
  const kCopy = (r0: string, slot: string) => `mpsc_sw128_load(sm + ${TILE} * (${slot}), kh, RK, ${r0}, S);\n`;
  // the P V product: acc += pa (this warp's A fragments) times the V tile `vt` as stored (MN-major)
  const pv = (vt: string) => wgRSProducts(s, 'acc', 'pa', vt);
  return (
    wgForwardHead(gm, x, ', softmax overlapped with the previous tile\'s P V', 6, 'V x 3') +
    `  if (kbeg < kend) {\n    ${kCopy('kbeg', '1')}    ${vCopy('kbeg', '3')}  }\n  mpsc_cp_async_commit();\n` +
    x.zero('acc') +
    `  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows g and g + 8: running max (${fold ? 'of the unscaled scores' : 'base 2'}), partial sums\n` +
    `  uint pa[4][4];  // P of the previous key tile, rounded to 16 bits: this warp's A fragments (n8 tiles 2kk, 2kk + 1)\n` +
    `  int vs = 0;  // this step's V slot (3 + vs); the previous step's is 3 + (vs + 2) % 3\n` +
    `  for (int k0 = kbeg, b = 0; k0 < kend; k0 += ${BR}, b ^= 1) {\n` +
    `    unsigned short* const Ks = sm + ${TILE} * (1 + b);\n` +
    `    const unsigned short* const Vp = sm + ${TILE} * (3 + (vs + 2) % 3);\n` +
    `    __syncthreads();  // every thread is done with K slot 1 + (1 - b) (step j - 1's S) and V slot 3 + (vs + 1) % 3 (step j - 2's, its P V waited for)\n` +
    `    if (k0 + ${BR} < kend) {  // the next step's tiles, copied while this one computes\n` +
    `      ${kCopy(`k0 + ${BR}`, '2 - b')}      ${vCopy(`k0 + ${BR}`, '3 + (vs + 1) % 3')}` +
    `      mpsc_cp_async_commit();\n      mpsc_cp_async_wait<1>();\n    } else {\n      mpsc_cp_async_wait<0>();\n    }\n` +
    `    mpsc_fence_proxy_async();  // this thread's copies, seen by the products' async proxy\n` +
    `    __syncthreads();\n` +
    `    float sc[8][4], pf[8][4];  // S = Q K^T (the accumulators of the first group); P\n` +
    `    mpsc_wgmma_fence();\n` +
    wgSS(s, 'sc', 'Qs', 'Ks') + `    mpsc_wgmma_commit();\n` +
    `    if (k0 > kbeg) {  // O += P V of the previous tile, while this tile's softmax runs (its own fence: another block of the program)\n      mpsc_wgmma_fence();\n` + pv('Vp').replace(/^(?=.)/gm, '  ') + `      mpsc_wgmma_commit();\n      mpsc_wgmma_wait1();  // S (P V may still run)\n    } else {\n      mpsc_wgmma_wait0();\n    }\n` +
    `    float al0, al1;  // this step's rescale of O and l\n` +
    softmaxStepSplit(gm, 8, fold, 'sc', 'pf', ['m0', 'm1'], ['l0', 'l1'], 'qw', forwardEdge(gm, x, 'qw')) +
    `    mpsc_wgmma_wait0();  // P V of the previous tile: O is free\n` +
    rescaleAcc(x.ND, 'acc') +
    wgPack(s, 'pa', 'pf') +
    `    vs = vs == 2 ? 0 : vs + 1;\n` +
    `  }\n` +
    `  if (kbeg < kend) {  // the last tile's P V\n` +
    `    const unsigned short* const Vp = sm + ${TILE} * (3 + (vs + 2) % 3);\n` +
    `    mpsc_wgmma_fence();\n` + pv('Vp') + `    mpsc_wgmma_commit();\n    mpsc_wgmma_wait0();\n  }\n` +
    forwardStore(fold, ['m0', 'm1'], ['l0', 'l1'], 'qw', (mul) => storeRows(x, o, 'acc', 'qw', 'T', 'ooff', 'RO', mul))
  );
}

/**
 * MPSC_CUDA_FLASH_WGMMA_PIPE at build time (default 1): the wgmma dK/dV and dQ kernels overlap their exp / dS work with
 * their products (kvStepsPiped, qStepsPiped) instead of waiting for each group of products before it; 0 gives v34's
 * bodies (for A/B). Measured on an H100 (GPT-2 bf16, 7 Dec, bench/NOTES.md v35, per layer): dK/dV 308 -> 189 us (168
 * registers instead of 198: 3 blocks per SM), dQ 129 -> 128 us.
 */
export function flashWgmmaPipe(): boolean {
  return envChoice('MPSC_CUDA_FLASH_WGMMA_PIPE', ['0', '1'], '1') === '1';
}

/**
 * One query tile of the wgmma dK/dV kernel with its products overlapped (flashWgmmaPipe): S^T and dP^T as two product
 * groups; P^T from S^T while dP^T's product runs; dV += P^T dO issued, and dS^T computed while it runs; dK += dS^T Q;
 * both waited for before the step ends. P^T and dS^T go to arrays of their own (pt, dst): ptxas serializes every
 * product of a kernel (info C7515) where plain instructions write a wgmma accumulator while a group is in flight,
 * and so where a group stays in flight across the loop's back edge (its phi moves).
 */
function kvStepsPiped(gm: Geom, s: string, edge: string): string {
  const a = { s: 'st', p: 'pt', dp: 'dpt', ds: 'dst' };
  return (
    `    float st[8][4], dpt[8][4];  // S^T = K Q^T, then dP^T = V dO^T: two product groups (accumulators only)\n` +
    `    float pt[8][4], dst[8][4];  // P^T, dS^T\n` +
    wgIssue(wgSS(s, 'st', 'Ks', 'Qs'), wgSS(s, 'dpt', 'Vs', 'Os')) +
    `    mpsc_wgmma_wait1();  // S^T (dP^T's product may still run)\n` +
    kvProbStep(gm, 8, edge, 'Ls[qc]', 'p', a) +
    `    // dV += P^T dO, dO read as stored; it runs while dS^T is computed\n` +
    wgIssue(wgRS(s, 'dva', 'pt', 'Os')) +
    `    mpsc_wgmma_wait1();  // dP^T (dV's product may still run)\n` +
    kvProbStep(gm, 8, edge, 'Ls[qc]', 'ds', a) +
    `    // dK += dS^T Q (the scale folded into dS), Q read as stored\n` +
    wgIssue(wgRS(s, 'dka', 'dst', 'Qs')) +
    `    mpsc_wgmma_wait0();  // dV and dK: none in flight past the step\n`
  );
}

/** One key tile of the wgmma dQ kernel with its products overlapped (flashWgmmaPipe; as kvStepsPiped): P from S while dP's product runs */
function qStepsPiped(gm: Geom, s: string, edge: string): string {
  const a = { s: 's', p: 'pq', dp: 'dp', ds: 'dsq' };
  return (
    `    float s[8][4], dp[8][4];  // S = Q K^T, then dP = dO V^T: two product groups (accumulators only)\n` +
    `    float pq[8][4], dsq[8][4];  // P, dS\n` +
    wgIssue(wgSS(s, 's', 'Qs', 'Ks'), wgSS(s, 'dp', 'Os', 'Vs')) +
    `    mpsc_wgmma_wait1();  // S (dP's product may still run)\n` +
    qProbStep(gm, 8, edge, 'p', a) +
    `    mpsc_wgmma_wait0();  // dP\n` +
    qProbStep(gm, 8, '', 'ds', a) +
    `    // dQ += dS K (the scale folded into dS), K read as stored\n` +
    wgIssue(wgRS(s, 'dqa', 'dsq', 'Ks')) +
    `    mpsc_wgmma_wait0();\n`
  );
}

/** bytes of dynamic shared memory of the wgmma dK/dV kernel: 6 swizzled tiles, lse and Delta of two query tiles, 1 KiB to align the tiles */
const WG_KV_SMEM = 6 * TILE * 2 + 4 * BR * 4 + 1024;
/** bytes of dynamic shared memory of the two-warpgroup wgmma dQ kernel: 8 swizzled tiles, 1 KiB to align them */
const WG_Q2_SMEM = 8 * TILE * 2 + 1024;

/**
 * dK and dV on Hopper's warpgroup products (flashWgmma(D, 'bwd')): block (64-key tile, head), one warpgroup; K and V
 * stay in swizzled shared tiles, the query tiles (Q, dO; lse and Delta) stream double-buffered. Per query tile
 * S^T = K Q^T and dP^T = V dO^T are 8 wgmma from shared memory (one group), kvProbStep turns them into P^T and dS^T
 * exactly as gradKVBody, and dV += P^T dO, dK += dS^T Q are 8 wgmma with P^T / dS^T rounded to 16 bits as register A
 * fragments and dO / Q read as stored (MN-major). 6 tiles + 1 KiB of lse / Delta pass 48 KiB: dynamic shared memory,
 * its tiles aligned to 1024 bytes in it (mpsc_sw128_base).
 */
function gradKVBodyWgmma(gm: Geom, dk: KernelArg, dv: KernelArg): string {
  const x = text(gm, 'kv'), s = mmaSuffix(gm.type);
  if (gm.D !== 64) throw new Error(`internal: the wgmma dK/dV kernel at head width ${gm.D}`);
  const edge = `q0 + ${BR} > T` + (gm.causal ? ` || kw + 15 > q0 + ${x.shift}` : '');
  const qbeg = gm.causal ? `max(0, k0 - ${x.shift}) / ${BR} * ${BR}` : '0';
  return (
    `  // flash attention backward, dK and dV, on wgmma (sm_90a): ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = 64${gm.causal ? ', causal' : ''}, ${s};\n` +
    `  // block (64-key tile, head), one warpgroup, the query tiles streamed; S^T = K Q^T, dP^T = V dO^T\n` +
    x.consts +
    `  (void)P;\n` +
    `  unsigned short* const sm = mpsc_sw128_base(tg);  // K, V, Q x 2, dO x 2: 128B-swizzled tiles of 64 x 64; then lse, Delta\n` +
    `  float* const Lb = reinterpret_cast<float*>(sm + ${6 * TILE});  // lse (base 2) of the query tile, double-buffered\n` +
    `  float* const Db = Lb + ${2 * BR};  // Delta, double-buffered\n` +
    `  unsigned short* const Ks = sm;\n  unsigned short* const Vs = sm + ${TILE};\n` +
    `  const int k0 = blockIdx.x * ${BR}, kw = k0 + w * 16;\n` +
    `  const unsigned short* qh = ${x.raw('q', 'qoff')};\n  const unsigned short* kh = ${x.raw('k', 'koff')};\n` +
    `  const unsigned short* vh = ${x.raw('v', 'voff')};\n  const unsigned short* oh = ${x.raw('dout', 'ooff')};\n` +
    `  mpsc_sw128_load(Ks, kh, RK, k0, S);\n  mpsc_sw128_load(Vs, vh, RV, k0, S);\n` +
    x.zero('dka') + x.zero('dva') +
    `  const int qbeg = ${qbeg};\n` +
    wgStream('q0', 'qbeg', 'T', 'T', [['Qs', 2, 'qh', 'RQ'], ['Os', 4, 'oh', 'RO']], (r0, b) =>
      `  if (threadIdx.x < ${BR}) {\n    const int qi = ${r0} + threadIdx.x;\n` +
      `    Lb[${b} * ${BR} + threadIdx.x] = qi < T ? lse[(size_t)bh * T + qi] * ${lit(LOG2E)} : 0.0f;\n` +
      `    Db[${b} * ${BR} + threadIdx.x] = qi < T ? mpsc_scratch[(size_t)bh * T + qi] : 0.0f;\n  }\n`) +
    `    const float* const Ls = Lb + b * ${BR};\n    const float* const Ds = Db + b * ${BR};\n` +
    (flashWgmmaPipe() ? kvStepsPiped(gm, s, edge) :
      `    float st[8][4], dpt[8][4];  // S^T = K Q^T, dP^T = V dO^T\n` +
      wgGroup(wgSS(s, 'st', 'Ks', 'Qs') + wgSS(s, 'dpt', 'Vs', 'Os')) +
      kvProbStep(gm, 8, edge) +
      `    // dV += P^T dO, dK += dS^T Q (the scale folded into dS), dO and Q read as stored\n` +
      wgGroup(wgRS(s, 'dva', 'st', 'Os') + wgRS(s, 'dka', 'dpt', 'Qs'))) +
    `  }\n` +
    storeRows(x, dk, 'dka', 'kw', 'S', 'koff', 'RK') +
    storeRows(x, dv, 'dva', 'kw', 'S', 'voff', 'RV')
  );
}

/**
 * dQ on Hopper's warpgroup products (flashWgmma(D, 'bwd')): block (64-query tile, head), one warpgroup; Q and dO stay in
 * swizzled shared tiles, the key tiles (K, V) stream double-buffered. Per key tile S = Q K^T and dP = dO V^T are 8
 * wgmma from shared memory, qProbStep makes dS as gradQBody, and dQ += dS K is 4 wgmma with dS rounded to 16 bits as
 * register A fragments and K read as stored (MN-major). 6 tiles: 48 KiB of static shared memory.
 * `wgs` 2 (flashWgmmaQRows 128): 128 queries per block in two warpgroups of 64 (256 threads, warpgroup wg the rows
 * q0 + 64 wg .., its own Q and dO tiles), both reading the same streamed K / V tiles (warpgroup 0 copies K, warpgroup 1
 * V), each skipping the key tiles its rows cannot see: every row sees the same tiles and products in the same order as
 * with one warpgroup, so the same bits. 8 tiles: 64 KiB of dynamic shared memory.
 */
function gradQBodyWgmma(gm: Geom, dq: KernelArg, delta: boolean, wgs: 1 | 2 = 1): string {
  const x = text(gm, 'q'), s = mmaSuffix(gm.type);
  if (gm.D !== 64) throw new Error(`internal: the wgmma dQ kernel at head width ${gm.D}`);
  // Delta in this kernel (flashWgmmaDelta): each warp its 16 query rows, 8 lanes per row (4 rows per pass) in the Delta
  // kernel's order, so the same bits; every pass's loads issued before any sum (one memory round trip, not four: the
  // sums pass by pass took ~19 us a layer at GPT-2's shape on an H100); a row's sum goes to the lanes that keep it
  // (rows qw + g, + 8) by a shuffle, and into the scratch region for the dK/dV kernel after this one. Static shared
  // memory is full (6 tiles, 48 KiB).
  const cvt = gm.type === 'bfloat' ? '__bfloat162float' : '__half2float';
  const deltaLines =
    `  float D0 = 0.0f, D1 = 0.0f;  // Delta of rows r0, r1: computed here, while the tiles' copies fly\n` +
    `  {\n    const int part = l & 7;\n` +
    `    float dv[4][8], ov[4][8];  // dO and O: this thread's 8 features of its row in each pass (zeros past T)\n` +
    `    #pragma unroll\n    for (int pass = 0; pass < 4; ++pass) {\n` +
    `      const int qi = qw + pass * 4 + (l >> 3);\n` +
    `      const size_t base = ooff + (size_t)min(qi, T - 1) * RO;\n` +
    `      #pragma unroll\n      for (int i = 0; i < 8; ++i) {\n` +
    `        const int c = part + 8 * i;\n` +
    `        dv[pass][i] = qi < T ? ${cvt}(${gm.buf.dout}[base + c]) : 0.0f;\n        ov[pass][i] = qi < T ? ${cvt}(${gm.buf.o}[base + c]) : 0.0f;\n      }\n    }\n` +
    `    #pragma unroll\n    for (int pass = 0; pass < 4; ++pass) {\n` +
    `      const int qi = qw + pass * 4 + (l >> 3);\n      float acc = 0.0f;\n` +
    `      #pragma unroll\n      for (int i = 0; i < 8; ++i) acc += dv[pass][i] * ov[pass][i];\n` +
    deltaButterfly('      ') +
    `      if (part == 0 && qi < T) mpsc_scratch[(size_t)bh * T + qi] = acc;\n` +
    `      const float v = __shfl_sync(0xffffffffu, acc, (g & 3) * 8);\n` +
    `      if (pass == (g >> 2)) D0 = v;\n      if (pass == 2 + (g >> 2)) D1 = v;\n    }\n  }\n`;
  const edge = `k0 + ${BR} > S` + (gm.causal ? ` || k0 + ${BR - 1} > qw + ${x.shift}` : '');
  const two = wgs === 2;
  const steps = flashWgmmaPipe() ? qStepsPiped(gm, s, edge) :
    `    float s[8][4], dp[8][4];  // S = Q K^T, dP = dO V^T\n` +
    wgGroup(wgSS(s, 's', 'Qs', 'Ks') + wgSS(s, 'dp', 'Os', 'Vs')) +
    qProbStep(gm, 8, edge) +
    `    // dQ += dS K (the scale folded into dS), K read as stored\n` +
    wgGroup(wgRS(s, 'dqa', 's', 'Ks'));
  return (
    `  // flash attention backward, dQ, on wgmma (sm_90a): ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = 64${gm.causal ? ', causal' : ''}, ${s};\n` +
    (two
      ? `  // block (128-query tile, head), two warpgroups of 64 queries sharing each streamed key tile: S = Q K^T, dP = dO V^T, dQ += dS K${delta ? '; Delta first' : ''}\n`
      : `  // block (64-query tile, head), one warpgroup, the key tiles streamed: S = Q K^T, dP = dO V^T, dQ += dS K${delta ? '; Delta first' : ''}\n`) +
    x.consts +
    `  (void)P;\n` +
    (two
      ? `  const int wg = threadIdx.x >> 7;  // the warpgroup: queries q0 + 64 wg ..; warp w's 16 rows from q0 + 16 w\n` +
        `  unsigned short* const sm = mpsc_sw128_base(tg);  // Q x 2, dO x 2 (one each a warpgroup), K x 2, V x 2: 128B-swizzled tiles of 64 x 64\n` +
        `  unsigned short* const Qs = sm + ${TILE} * wg;\n  unsigned short* const Os = sm + ${TILE} * (2 + wg);  // dO\n` +
        `  const int q0 = (gridDim.x - 1 - blockIdx.x) * ${2 * BR}, qw = q0 + w * 16;\n`
      : `  __shared__ __align__(1024) unsigned short sm[${6 * TILE}];  // Q, dO, K x 2, V x 2: 128B-swizzled tiles of 64 x 64\n` +
        `  unsigned short* const Qs = sm;\n  unsigned short* const Os = sm + ${TILE};  // dO\n` +
        `  const int q0 = (gridDim.x - 1 - blockIdx.x) * ${BR}, qw = q0 + w * 16;\n`) +
    `  const unsigned short* qh = ${x.raw('q', 'qoff')};\n  const unsigned short* kh = ${x.raw('k', 'koff')};\n` +
    `  const unsigned short* vh = ${x.raw('v', 'voff')};\n  const unsigned short* oh = ${x.raw('dout', 'ooff')};\n` +
    (two
      ? `  mpsc_sw128_load_wg(Qs, qh, RQ, q0 + ${BR} * wg, T);\n  mpsc_sw128_load_wg(Os, oh, RO, q0 + ${BR} * wg, T);\n`
      : `  mpsc_sw128_load(Qs, qh, RQ, q0, T);\n  mpsc_sw128_load(Os, oh, RO, q0, T);\n`) +
    `  const int r0 = qw + g, r1 = r0 + 8;\n` +
    `  const float L0 = r0 < T ? lse[(size_t)bh * T + r0] * ${lit(LOG2E)} : 0.0f, L1 = r1 < T ? lse[(size_t)bh * T + r1] * ${lit(LOG2E)} : 0.0f;\n` +
    (delta ? deltaLines : `  const float D0 = r0 < T ? mpsc_scratch[(size_t)bh * T + r0] : 0.0f, D1 = r1 < T ? mpsc_scratch[(size_t)bh * T + r1] : 0.0f;\n`) +
    x.zero('dqa') +
    (two
      ? twoWgKeys(gm, x) +
        wgStream('k0', 'kbeg', 'kend', 'S', [['Ks', 4, 'kh', 'RK'], ['Vs', 6, 'vh', 'RV']], undefined, true) +
        `    if (k0 < kown) {  // warpgroup-uniform: the products are the warpgroup's\n` + steps.replace(/^(?=.)/gm, '  ') + `    }\n`
      : `  const int kbeg = 0, kend = ${x.kend};\n` +
        wgStream('k0', 'kbeg', 'kend', 'S', [['Ks', 2, 'kh', 'RK'], ['Vs', 4, 'vh', 'RV']]) + steps) +
    `  }\n` +
    storeRows(x, dq, 'dqa', 'qw', 'T', 'qoff', 'RQ')
  );
}

/**
 * MPSC_CUDA_FLASH_WGMMA_DELTA at build time: where the wgmma dQ kernel's backward gets Delta = rowsum(dO * O): `q` (the
 * default) computes it in the dQ kernel for the block's own rows (gradQBodyWgmma; the same bits as the Delta kernel), which
 * then runs first and leaves it in the scratch region for the dK/dV kernel: one launch and one pass over dO fewer per layer;
 * `kernel`: the Delta kernel before dK/dV and dQ, as the other flash paths. Measured on an H100 (GPT-2 bf16, 7 Dec,
 * bench/NOTES.md v36, per layer): Delta 28.1 + dQ 123.1 us -> dQ with Delta 131.1 us; the step 33.75 -> 33.57 ms.
 */
export function flashWgmmaDelta(): 'q' | 'kernel' {
  return envChoice('MPSC_CUDA_FLASH_WGMMA_DELTA', ['q', 'kernel'], 'q') as 'q' | 'kernel';
}

/** the flash kernels that may run on Hopper's wgmma: the forward, dK/dV, dQ */
export type WgmmaPart = 'fwd' | 'kv' | 'q';
/**
 * The parts `auto` puts on wgmma on Hopper: all three. Measured on an H100 (GPT-2 bf16, 7 Dec, bench/NOTES.md v34 / v35;
 * mma.sync -> wgmma, per layer): forward 171 -> 124 us, dQ 195 -> 128 us, dK/dV 275 -> 189 us with the products
 * overlapped (flashWgmmaPipe; 308 us without, which is why v34 left dK/dV on mma.sync).
 */
const AUTO_PARTS: readonly WgmmaPart[] = ['fwd', 'kv', 'q'];

/**
 * MPSC_CUDA_FLASH_WGMMA at build time: which 16-bit head-width-64 flash kernels run on Hopper's wgmma: a comma list of
 * fwd (forwardBodyWgmma), kv (gradKVBodyWgmma), q (gradQBodyWgmma), whatever the target; `none`; or `auto` (the
 * default): AUTO_PARTS when the build targets sm_90a (the generator's `hopper`), else none. wgmma is sm_90a only:
 * runtime/cuda/session.ts wgmmaArchCheck refuses a list for another GPU before nvcc runs.
 */
export function flashWgmmaSetting(): WgmmaPart[] | 'auto' {
  const v = envList('MPSC_CUDA_FLASH_WGMMA', ['fwd', 'kv', 'q', 'auto'] as const, ['auto']);
  if (!v.includes('auto')) return v as WgmmaPart[];
  if (v.length > 1) throw new UserError(`error: MPSC_CUDA_FLASH_WGMMA=${v.join(',')}: 'auto' stands alone (or give a list of fwd, kv, q; or 'none')`);
  return 'auto';
}

/** whether MPSC_CUDA_FLASH_WGMMA asks for wgmma kernels whatever the target (a non-empty list) */
export function flashWgmmaForced(): boolean {
  const v = flashWgmmaSetting();
  return v !== 'auto' && v.length > 0;
}

/** whether the 16-bit flash kernel `part` of head width D runs on wgmma, in a build for Hopper (sm_90a) or not */
export function flashWgmma(D: number, part: WgmmaPart, hopper: boolean): boolean {
  const v = flashWgmmaSetting();
  return D === 64 && (v === 'auto' ? hopper && AUTO_PARTS.includes(part) : v.includes(part));
}

/** query rows per forward block: 128 (forwardBody128, default) or 64 (MPSC_CUDA_FLASH_FWD_ROWS=64 at build time, for A/B) */
export function flashForwardRows(): number {
  return Number(envChoice('MPSC_CUDA_FLASH_FWD_ROWS', ['64', '128'], `${2 * BR}` as '128'));
}

/**
 * How the 16-bit backward gets dQ: `recompute` (default) in its own kernel that computes S and dP a second time
 * (3 products per tile pair, 7 in the backward), or `stored` (MPSC_CUDA_FLASH_DQ=stored at build time): the dK/dV
 * kernel stores each tile pair's dS^T, rounded to 16 bits exactly as its dK product reads it, into the scratch region
 * (dsLayout: GPT-2 small 201 MB, causal tiles only), and the dQ kernel is dQ = dS K alone over those tiles (5 products
 * in the backward; the dS tiles read once from memory instead of two products recomputed). Both are deterministic (no
 * atomics); dQ's values differ from the recomputed ones by the tensor cores' summation order of S^T against S.
 * Measured on an H100 (GPT-2 bf16, bench/NOTES.md v21): dQ 193 -> 123 us per layer, but dK/dV 271 -> 345 us (the
 * 4-byte stores from the C fragments do not hide under its products): no gain, so `recompute` stays the default.
 */
export function flashDq(): 'recompute' | 'stored' {
  return envChoice('MPSC_CUDA_FLASH_DQ', ['recompute', 'stored'], 'recompute');
}

/**
 * Where the stored dS^T tiles (flashDq 'stored') sit in the scratch region, after Delta's H x T floats: per head bh
 * `perHead` tiles of 64 x 64 16-bit values (keys x queries, row-major), the tile of query tile qt and key tile kt
 * at (bh * perHead + rowStart(qt) + kt) * 4096 elements; a causal node with S = T keeps only the tiles kt <= qt
 * (row qt starts at qt (qt + 1) / 2), any other all nq x nk.
 */
export interface DsLayout { offFloats: number; perHead: number; bytes: number; rowStart(qt: string): string }
export function dsLayout(gm: AttnGeom): DsLayout {
  const nq = Math.ceil(gm.T / BR), nk = Math.ceil(gm.S / BR), tri = gm.causal && gm.S === gm.T;
  const perHead = tri ? (nq * (nq + 1)) / 2 : nq * nk;
  const offFloats = Math.ceil((gm.H * gm.T) / 64) * 64;
  return { offFloats, perHead, bytes: offFloats * 4 + gm.H * perHead * BR * BR * 2, rowStart: (qt) => (tri ? `${qt} * (${qt} + 1) / 2` : `${qt} * ${nk}`) };
}

function gradKVBody(gm: Geom, dk: KernelArg, dv: KernelArg, ds: DsLayout | null = null): string {
  const x = text(gm, 'kv'), P = x.P;
  const edge = `q0 + ${BR} > T` + (gm.causal ? ` || kw + 15 > q0 + ${x.shift}` : '');
  // the first query tile holding a query that sees key k0 (query i sees key j iff i >= j - (S - T))
  const qbeg = gm.causal ? `max(0, k0 - ${x.shift}) / ${BR} * ${BR}` : '0';
  return (
    `  // flash attention backward, dK and dV: ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = ${gm.D}${gm.causal ? ', causal' : ''}, ${mmaSuffix(gm.type)} tensor cores;\n` +
    `  // block (64-key tile, head), the query tiles streamed; transposed scores S^T = K Q^T, dP^T = V dO^T\n` +
    x.consts +
    `  __shared__ __align__(16) unsigned short sm[${4 * BR * P}];\n` +
    `  __shared__ float Lb[2][${BR}], Db[2][${BR}];  // lse (base 2) and Delta of the query tile, double-buffered\n` +
    `  unsigned short* Ks = sm;\n  unsigned short* Vs = sm + ${BR * P};\n  unsigned short* Qs = sm + ${2 * BR * P};\n  unsigned short* Os = sm + ${3 * BR * P};  // dO\n` +
    `  // the next query tile's (double buffering) in the K / V tiles once their fragments are in registers\n` +
    `  unsigned short* Qn = Ks;\n  unsigned short* On = Vs;\n` +
    `  float* Ls = Lb[0];\n  float* Ln = Lb[1];\n  float* Ds = Db[0];\n  float* Dn = Db[1];\n` +
    `  const int k0 = blockIdx.x * ${BR}, kw = k0 + w * 16;\n` +
    `  const unsigned short* qh = ${x.raw('q', 'qoff')};\n  const unsigned short* kh = ${x.raw('k', 'koff')};\n` +
    `  const unsigned short* vh = ${x.raw('v', 'voff')};\n  const unsigned short* oh = ${x.raw('dout', 'ooff')};\n` +
    (ds ? `  unsigned short* const dsT = reinterpret_cast<unsigned short*>(mpsc_scratch + ${ds.offFloats});  // the stored dS^T tiles (dsLayout)\n` : '') +
    x.load('k0', 'S', [['Ks', 'kh', 'RK'], ['Vs', 'vh', 'RV']]) +
    `  __syncthreads();\n` +
    x.aFrag('ka', 'Ks') + x.aFrag('va', 'Vs') +
    x.zero('dka') + x.zero('dva') +
    `  const int qbeg = ${qbeg};\n` +
    x.stream('q0', 'qbeg', 'T', 'T', [['Qs', 'Qn', 'qh', 'RQ'], ['Os', 'On', 'oh', 'RO']], (r0, which) =>
      `  if (threadIdx.x < ${BR}) {\n    const int qi = ${r0} + threadIdx.x;\n` +
      `    ${which === 'cur' ? 'Ls' : 'Ln'}[threadIdx.x] = qi < T ? lse[(size_t)bh * T + qi] * ${lit(LOG2E)} : 0.0f;\n` +
      `    ${which === 'cur' ? 'Ds' : 'Dn'}[threadIdx.x] = qi < T ? mpsc_scratch[(size_t)bh * T + qi] : 0.0f;\n  }\n`) +
    x.scores('st', 'ka', 'Qs').replace(/^(?=.)/gm, '  ') +
    x.scores('dpt', 'va', 'Os').replace(/^(?=.)/gm, '  ') +
    kvProbStep(gm, 8, edge) +
    (ds
      ? `    {  // this tile pair's dS^T (rows: the warp's keys, columns: the tile's queries), rounded as dK's product reads it, for the dQ kernel\n` +
        `      uint* const dst = reinterpret_cast<uint*>(dsT + ((size_t)bh * ${ds.perHead} + ${ds.rowStart(`(q0 / ${BR})`)} + blockIdx.x) * ${BR * BR} + (w * 16 + g) * ${BR} + 2 * t);\n` +
        `      #pragma unroll\n      for (int j = 0; j < 8; ++j) { dst[j * 4] = mpsc_pack_${mmaSuffix(gm.type)}(dpt[j][0], dpt[j][1]); dst[${4 * BR} + j * 4] = mpsc_pack_${mmaSuffix(gm.type)}(dpt[j][2], dpt[j][3]); }\n    }\n`
      : '') +
    `    // dV += P^T dO, dK += dS^T Q (the scale folded into dS)\n` +
    x.times('dva', 'st', 'Os').replace(/^(?=.)/gm, '  ') +
    x.times('dka', 'dpt', 'Qs').replace(/^(?=.)/gm, '  ') +
    x.closeStream([['Qs', 'Qn'], ['Os', 'On'], ['Ls', 'Ln'], ['Ds', 'Dn']]) +
    storeRows(x, dk, 'dka', 'kw', 'S', 'koff', 'RK') +
    storeRows(x, dv, 'dva', 'kw', 'S', 'voff', 'RV')
  );
}

function gradQBody(gm: Geom, dq: KernelArg): string {
  const x = text(gm, 'q'), P = x.P;
  const edge = `k0 + ${BR} > S` + (gm.causal ? ` || k0 + ${BR - 1} > qw + ${x.shift}` : '');
  return (
    `  // flash attention backward, dQ: ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = ${gm.D}${gm.causal ? ', causal' : ''}, ${mmaSuffix(gm.type)} tensor cores;\n` +
    `  // block (64-query tile, head), the key tiles streamed: S = Q K^T, dP = dO V^T, dQ += dS K\n` +
    x.consts +
    `  __shared__ __align__(16) unsigned short sm[${4 * BR * P}];\n` +
    `  unsigned short* Qs = sm;\n  unsigned short* Os = sm + ${BR * P};  // dO\n  unsigned short* Ks = sm + ${2 * BR * P};\n  unsigned short* Vs = sm + ${3 * BR * P};\n` +
    `  // the next key tile's (double buffering) in the Q / dO tiles once their fragments are in registers\n` +
    `  unsigned short* Kn = Qs;\n  unsigned short* Vn = Os;\n` +
    `  const int q0 = (gridDim.x - 1 - blockIdx.x) * ${BR}, qw = q0 + w * 16;\n` +
    `  const unsigned short* qh = ${x.raw('q', 'qoff')};\n  const unsigned short* kh = ${x.raw('k', 'koff')};\n` +
    `  const unsigned short* vh = ${x.raw('v', 'voff')};\n  const unsigned short* oh = ${x.raw('dout', 'ooff')};\n` +
    x.load('q0', 'T', [['Qs', 'qh', 'RQ'], ['Os', 'oh', 'RO']]) +
    `  __syncthreads();\n` +
    x.aFrag('qa', 'Qs') + x.aFrag('oa', 'Os') +
    `  const int r0 = qw + g, r1 = r0 + 8;\n` +
    `  const float L0 = r0 < T ? lse[(size_t)bh * T + r0] * ${lit(LOG2E)} : 0.0f, L1 = r1 < T ? lse[(size_t)bh * T + r1] * ${lit(LOG2E)} : 0.0f;\n` +
    `  const float D0 = r0 < T ? mpsc_scratch[(size_t)bh * T + r0] : 0.0f, D1 = r1 < T ? mpsc_scratch[(size_t)bh * T + r1] : 0.0f;\n` +
    x.zero('dqa') +
    `  const int kbeg = 0, kend = ${x.kend};\n` +
    x.stream('k0', 'kbeg', 'kend', 'S', [['Ks', 'Kn', 'kh', 'RK'], ['Vs', 'Vn', 'vh', 'RV']]) +
    x.scores('s', 'qa', 'Ks').replace(/^(?=.)/gm, '  ') +
    x.scores('dp', 'oa', 'Vs').replace(/^(?=.)/gm, '  ') +
    qProbStep(gm, 8, edge) +
    `    // dQ += dS K (the scale folded into dS)\n` +
    x.times('dqa', 's', 'Ks').replace(/^(?=.)/gm, '  ') +
    x.closeStream([['Ks', 'Kn'], ['Vs', 'Vn']]) +
    storeRows(x, dq, 'dqa', 'qw', 'T', 'qoff', 'RQ')
  );
}

/**
 * dQ from the dK/dV kernel's stored dS^T tiles (flashDq 'stored'): block (64-query tile, head), the key tiles streamed
 * with their dS^T tiles (cp.async, double-buffered), dQ += dS K, dS's A fragments by ldmatrix.x4.trans from the
 * keys x queries tile, K's B fragments as the recomputing kernel's; no S, no dP, no lse or Delta.
 */
function gradQStoredBody(gm: Geom, dq: KernelArg, ds: DsLayout): string {
  const x = text(gm, 'q'), P = x.P, PS = BR + 8, s = mmaSuffix(gm.type);
  const tile = (dst: string, r0: string) =>
    `  {\n    const unsigned short* src = dsq + (size_t)((${r0}) / ${BR}) * ${BR * BR};\n` +
    `    for (int e = threadIdx.x; e < ${(BR * BR) / 8}; e += ${THREADS}) {\n      const int r = e / ${BR / 8}, c = (e % ${BR / 8}) * 8;\n` +
    `      mpsc_cp_async16(${dst} + r * PS + c, src + r * ${BR} + c, true);\n    }\n    mpsc_cp_async_commit();\n  }\n`;
  return (
    `  // flash attention backward, dQ = dS K from the stored dS^T tiles: ${gm.H} heads, T = ${gm.T}, S = ${gm.S}, D = ${gm.D}${gm.causal ? ', causal' : ''}, ${s} tensor cores;\n` +
    `  // block (64-query tile, head), the key tiles and their dS^T tiles streamed\n` +
    x.consts.replace(/ {2}constexpr float SC = [^\n]*\n/, '') +  // (no scores here)
    `  constexpr int PS = ${PS};  // the dS^T tiles' pitch\n` +
    `  __shared__ __align__(16) unsigned short sm[${2 * BR * P + 2 * BR * PS}];\n` +
    `  unsigned short* Ks = sm;\n  unsigned short* Kn = sm + ${BR * P};\n  unsigned short* Ss = sm + ${2 * BR * P};\n  unsigned short* Sn = sm + ${2 * BR * P + BR * PS};\n` +
    `  const int q0 = (gridDim.x - 1 - blockIdx.x) * ${BR}, qw = q0 + w * 16;\n` +
    `  const unsigned short* kh = ${x.raw('k', 'koff')};\n` +
    `  // this query tile's row of dS^T tiles (dsLayout): key tile kt at dsq + kt * ${BR * BR}\n` +
    `  const unsigned short* dsq = reinterpret_cast<const unsigned short*>(mpsc_scratch + ${ds.offFloats}) + ((size_t)bh * ${ds.perHead} + ${ds.rowStart(`(q0 / ${BR})`)}) * ${BR * BR};\n` +
    x.zero('dqa') +
    `  const int kbeg = 0, kend = ${x.kend};\n` +
    x.stream('k0', 'kbeg', 'kend', 'S', [['Ks', 'Kn', 'kh', 'RK']], (r0, which) => tile(which === 'cur' ? 'Ss' : 'Sn', r0)) +
    `    // dQ += dS K: A fragments (the warp's 16 queries x 16 keys) from the keys x queries tile by ldmatrix.x4.trans\n` +
    `    #pragma unroll\n    for (int kk = 0; kk < 4; ++kk) {\n` +
    `      uint a[4];\n` +
    `      mpsc_ldsm_x4_trans(a, Ss + (kk * 16 + (l >> 4) * 8 + (l & 7)) * PS + w * 16 + ((l >> 3) & 1) * 8);\n` +
    `      #pragma unroll\n      for (int jd = 0; jd < ${gm.D / 16}; ++jd) {\n` +
    `        uint bf[4];\n` +
    `        mpsc_ldsm_x4_trans(bf, Ks + (kk * 16 + (l & 7) + ((l >> 3) & 1) * 8) * P + jd * 16 + (l >> 4) * 8);\n` +
    `        mpsc_mma_${s}(dqa[2 * jd], a, bf);\n        mpsc_mma_${s}(dqa[2 * jd + 1], a, bf + 2);\n      }\n    }\n` +
    x.closeStream([['Ks', 'Kn'], ['Ss', 'Sn']]) +
    storeRows(x, dq, 'dqa', 'qw', 'T', 'qoff', 'RQ')
  );
}

/**
 * fuse.ts rule 15 (`sum_out` on attention_qkv_grad): the column sums of dqkv as stored, over every row. Each backward block
 * (dK/dV: a 64-key tile of one head; dQ: a 64-query tile) adds the values it stores (rounded to 16 bits, as the sum_to
 * read them) over its rows into a partial per (batch, row tile) and column, in the scratch region after the kernels' own
 * (`base` floats in): G = N x ceil(T / 64) partial rows of 3C columns, each written by exactly one block (dQ's columns
 * by the dQ kernel, dK's and dV's by the dK/dV kernel); layernorm_cuda.ts's blockSumsFinish then adds them in order.
 */
interface ColSums { base: number; G: number; W: number; tiles: number }

function colSumsOf(gm: Geom, base: number): ColSums {
  const tiles = Math.ceil(gm.T / BR);
  return { base, G: gm.L.N * tiles, W: 3 * gm.L.H * gm.D, tiles };
}

/**
 * A block's partial column sums of the values its storeRows calls stored (accumulators `parts`, each with its part of the
 * packed row: 0 dq, 1 dk, 2 dv), appended after them: per thread its rows g, g + 8 of each column pair (rounded as stored),
 * then a butterfly over the 8 row groups of the warp (every lane the same sums), then the 4 warps' sums in warp order
 * through shared memory (the tiles' `sm`, free after a barrier), one float per column into the block's partial row.
 * `rw`: the warp's first row; `r0b`: the block's first row (a multiple of 64); `rows`: T or S.
 */
function colSumsText(gm: Geom, cs: ColSums, out: KernelArg, parts: { acc: string; part: number }[], rw: string, r0b: string, rows: string, wgs: 1 | 2 = 1): string {
  const D = gm.D, ND = D / 8, NP = parts.length, C = gm.L.H * D;
  // the value as storePair stores it: rounded to nearest even into a 16-bit output, itself into an fp32 one
  const round = (v: string) => (out.type === 'bfloat' ? `__bfloat162float(__float2bfloat16_rn(${v}))` : out.type === 'half' ? `__half2float(__float2half_rn(${v}))` : v);
  const xor = (v: string) => [4, 8, 16].map((o) => `${v} += __shfl_xor_sync(0xffffffffu, ${v}, ${o});`).join(' ');
  return (
    `  {  // fuse.ts rule 15: the stored values' column sums over this block's rows, its partial row (batch, row tile) in the scratch region
` +
    `    float* const cs = reinterpret_cast<float*>(sm);  // [${4 * wgs} warps][${NP} x ${D}], over the tiles once every warp is past them
` +
    `    __syncthreads();
` +
    `    const int c0 = ${rw} + g, c1 = c0 + 8;
` +
    parts.map((p, pi) =>
      `    #pragma unroll
    for (int j = 0; j < ${ND}; ++j) {
` +
      `      float a0 = (c0 < ${rows} ? ${round(`${p.acc}[j][0]`)} : 0.0f) + (c1 < ${rows} ? ${round(`${p.acc}[j][2]`)} : 0.0f);
` +
      `      float a1 = (c0 < ${rows} ? ${round(`${p.acc}[j][1]`)} : 0.0f) + (c1 < ${rows} ? ${round(`${p.acc}[j][3]`)} : 0.0f);
` +
      `      ${xor('a0')}
      ${xor('a1')}
` +
      `      if (g == 0) { cs[w * ${NP * D} + ${pi * D} + j * 8 + 2 * t] = a0; cs[w * ${NP * D} + ${pi * D} + j * 8 + 2 * t + 1] = a1; }
    }
`).join('') +
    `    __syncthreads();
` +
    (wgs === 1
      ? `    const size_t prow = ${cs.base} + ((size_t)(bh / ${gm.L.H}) * ${cs.tiles} + (${r0b}) / ${BR}) * ${cs.W} + (size_t)(bh % ${gm.L.H}) * ${D};
` +
        `    for (int c = threadIdx.x; c < ${NP * D}; c += ${THREADS}) {
` +
        `      const int pc = c / ${D};
` +
        `      mpsc_scratch[prow + (${parts.map((p, pi) => (pi < NP - 1 ? `pc == ${pi} ? ${p.part * C} : ` : `${p.part * C}`)).join('')}) + (c - pc * ${D})] = ((cs[c] + cs[${NP * D} + c]) + cs[${2 * NP * D} + c]) + cs[${3 * NP * D} + c];
` +
        `    }
`
      // two warpgroups: each its own row tile's partial row (warps 4 wg .. 4 wg + 3 in order, as one warpgroup's block adds them)
      : `    for (int e = threadIdx.x; e < ${2 * NP * D}; e += ${2 * THREADS}) {
` +
        `      const int wi = e / ${NP * D}, c = e - wi * ${NP * D}, pc = c / ${D};
` +
        `      if (${r0b} + ${BR} * wi >= ${rows}) continue;  // a warpgroup past the rows: no row tile
` +
        `      const size_t prow = ${cs.base} + ((size_t)(bh / ${gm.L.H}) * ${cs.tiles} + (${r0b}) / ${BR} + wi) * ${cs.W} + (size_t)(bh % ${gm.L.H}) * ${D};
` +
        `      const float* const cw = cs + wi * ${4 * NP * D};
` +
        `      mpsc_scratch[prow + (${parts.map((p, pi) => (pi < NP - 1 ? `pc == ${pi} ? ${p.part * C} : ` : `${p.part * C}`)).join('')}) + (c - pc * ${D})] = ((cw[c] + cw[${NP * D} + c]) + cw[${2 * NP * D} + c]) + cw[${3 * NP * D} + c];
` +
        `    }
`) +
    `  }
`
  );
}

/**
 * The flash kernels of an attention / attention_grad node: the 16-bit tensor-core ones (flashRefusal
 * null), else the fp32 3xTF32 tensor-core ones (attention_tf32x3.ts, tf32x3Refusal null), else the fp32
 * CUDA-core ones (attention_f32.ts, f32Refusal null), else null: the node keeps the shared kernel. `hopper`: the build
 * targets sm_90a (flashWgmma's auto mode).
 */
export function lowerAttentionCuda(ctx: LowerCtx, g: Graph, n: Node, hopper = false): KernelSpec[] | null {
  if (ctx.d.name !== 'cuda') throw new Error(`internal: the CUDA attention lowered for dialect ${ctx.d.name}`);
  if (!ATTENTION_FAMILY.includes(n.op)) return null;
  if (flashRefusal(g, n) !== null) {
    // fuse.ts rule 15's column sums: only the 16-bit kernels below add them (index.ts: else the shared kernel, then the sum)
    if (n.attrs.sum_out === true) return null;
    if (tf32x3Refusal(g, n) === null) return lowerAttentionTf32x3(ctx, g, n);
    return f32Refusal(g, n) === null ? lowerAttentionF32(ctx, g, n) : null;
  }
  const gm = geomOf(g, n);
  ctx.helpers.add('mma16');
  // Hopper's warpgroup products (flashWgmma): the forward, dK/dV, dQ
  const [wf, wkv, wq] = (['fwd', 'kv', 'q'] as const).map((p) => flashWgmma(gm.D, p, hopper) && (p === 'fwd') === isForward(n));
  if (wf || wkv || wq) ctx.helpers.add('wgmma16');
  // the wgmma forward: 64 rows per block (one warpgroup), or 128 (two: flashWgmmaFwdRows; the overlapped form is one warpgroup's)
  const wf2 = wf && flashWgmmaFwdRows() === 2 * BR;
  if (wf2 && flashWgmmaFwdPipe()) throw new UserError('error: MPSC_CUDA_FLASH_WGMMA_FWD_ROWS=128 and MPSC_CUDA_FLASH_WGMMA_FWD_PIPE=1 do not combine (the overlapped forward has one warpgroup per block); set one of them');
  const fr = wf ? (wf2 ? 2 * BR : BR) : flashForwardRows();
  const ds = !wkv && !wq && flashDq() === 'stored' ? dsLayout(gm) : null;
  const deltaInQ = wq && flashWgmmaDelta() === 'q';
  // rule 15's partial column sums after the kernels' own scratch (Delta; the stored dS^T tiles)
  const own = Math.max(gm.H * gm.T * 4, ds ? ds.bytes : 0);
  const cs = n.attrs.sum_out === true && !isForward(n) ? colSumsOf(gm, Math.ceil(own / 16) * 4) : null;
  const kvSums = (dk: KernelArg) => (cs ? colSumsText(gm, cs, dk, [{ acc: 'dka', part: 1 }, { acc: 'dva', part: 2 }], 'kw', 'k0', 'S') : '');
  // the wgmma dQ kernel: 64 query rows per block (one warpgroup), or 128 (two: flashWgmmaQRows)
  const wq2 = wq && flashWgmmaQRows() === 2 * BR;
  const qSums = (dq: KernelArg) => (cs ? colSumsText(gm, cs, dq, [{ acc: 'dqa', part: 0 }], 'qw', 'q0', 'T', wq2 ? 2 : 1) : '');
  const ks = flashKernels(ctx, g, n, {
    what: `${mmaSuffix(gm.type)} tensor cores, 64 rows per block`, rows: BR,
    forward: (_args, o) => (wf ? (wf2 ? forwardBodyWgmma2(gm, o) : flashWgmmaFwdPipe() ? forwardBodyWgmmaPiped(gm, o) : forwardBodyWgmma(gm, o)) : fr === BR ? forwardBody(gm, o) : forwardBody128(gm, o)),
    gradKV: (_args, dk, dv) => (wkv ? gradKVBodyWgmma(gm, dk, dv) : gradKVBody(gm, dk, dv, ds)) + kvSums(dk),
    gradQ: (_args, dq) => (wq ? gradQBodyWgmma(gm, dq, deltaInQ, wq2 ? 2 : 1) : ds ? gradQStoredBody(gm, dq, ds) : gradQBody(gm, dq)) + qSums(dq),
    ...(cs ? { gradScratch: (cs.base + cs.G * cs.W) * 4 } : ds ? { gradScratch: ds.bytes } : {}),
    ...(wkv || wq2 ? { tgmem: { ...(wkv ? { gradKV: WG_KV_SMEM } : {}), ...(wq2 ? { gradQ: WG_Q2_SMEM } : {}) } } : {}),
    deltaInQ,
  });
  // each kernel's part: the forward; or Delta, dK/dV, dQ; or dQ (with Delta), dK/dV (deltaInQ)
  const parts: ('fwd' | 'delta' | 'kv' | 'q')[] = isForward(n) ? ['fwd'] : deltaInQ ? ['q', 'kv'] : ['delta', 'kv', 'q'];
  const onWgPart = { fwd: wf, delta: false, kv: wkv, q: wq };
  // the wgmma kernels' label; the forward of 128 rows per block: its grid and label
  const onWg = (k: KernelSpec, i: number): KernelSpec => (onWgPart[parts[i]] ? { ...k, label: k.label.replace('tensor cores, ', 'wgmma (sm_90a), ') } : k);
  const fwd = (k: KernelSpec): KernelSpec => fr === BR ? k
    : { ...k, groups: [Math.max(1, Math.ceil(gm.T / fr)), k.groups[1], k.groups[2]], ...(wf2 ? { tgsize: [2 * THREADS, 1, 1] as [number, number, number] } : {}),
      label: k.label.replace('64 rows per block', `${fr} rows per block${wf2 ? ' (two warpgroups)' : ''}`) };
  // the register bounds: forward, dK/dV, dQ (the Delta kernel none)
  const [f, kv, q] = flashMinBlocks();
  const bound = { fwd: f, delta: 0, kv, q };
  const bounds = parts.map((p) => bound[p]);
  // the stored dS^T (flashDq): said in the dK/dV and dQ kernels' labels
  const stored = (k: KernelSpec, i: number): KernelSpec => !ds || isForward(n) || parts[i] === 'delta' ? k
    : { ...k, label: k.label.replace(/: (dK, dV|dQ)\]$/, (_m, w: string) => (w === 'dQ' ? ': dQ = dS K from the stored dS^T]' : ': dK, dV, dS^T stored]')) };
  // the dQ kernel of 128 rows per block: its grid, block and label
  const q2 = (k: KernelSpec, i: number): KernelSpec => !wq2 || parts[i] !== 'q' ? k
    : { ...k, groups: [Math.max(1, Math.ceil(gm.T / (2 * BR))), k.groups[1], k.groups[2]], tgsize: [2 * THREADS, 1, 1], label: k.label.replace('64 rows per block', '128 rows per block (two warpgroups)') };
  const out = ks.map((k, i) => onWg(q2(stored(isForward(n) ? fwd(k) : k, i), i), i)).map((k, i) => (bounds[i] ? { ...k, minBlocks: bounds[i] } : k));
  // rule 15: the partials' finish last (the flash kernels' bodies say what they add)
  return cs ? [...out, blockSumsFinish(ctx, g, n, [{ arg: 'dsum', out: n.outputs[1] }], cs.W, cs.G, cs.base)] : out;
}

/**
 * One line per kind of attention choice over the programs' graphs (`mpsc build --device cuda`): how
 * many attention-family nodes run on each flash path (16-bit tensor cores, fp32 as 3xTF32, fp32 on
 * the CUDA cores: why not the one before), and how many on the shared kernel and why. `hopper`: the
 * build targets sm_90a (the 16-bit head-width-64 kernels may be on wgmma: flashWgmma).
 */
export function attentionReport(graphs: Graph[], hopper = false): string[] {
  const wgmmaSaid = (D: number, fwd: boolean) => {
    const parts = (fwd ? ['fwd'] as const : ['kv', 'q'] as const).filter((p) => flashWgmma(D, p, hopper));
    return parts.length === 0 ? '' : `, wgmma (sm_90a)${fwd ? '' : `: ${parts.map((p) => (p === 'kv' ? 'dK/dV' : 'dQ')).join(', ')}`}`;
  };
  const counts = new Map<string, number>();
  for (const g of graphs)
    for (const n of g.nodes) {
      if (!ATTENTION_FAMILY.includes(n.op)) continue;
      const why = flashRefusal(g, n), whyX3 = why === null ? null : tf32x3Refusal(g, n), whyF32 = whyX3 === null ? null : f32Refusal(g, n);
      const key = why === null
        ? `flash attention (${mmaSuffix(geomOf(g, n).type)} tensor cores${wgmmaSaid(geomOf(g, n).D, isForward(n))}, attention_cuda.ts)`
        : whyX3 === null ? `flash attention (fp32 as 3xTF32 on the tensor cores, attention_tf32x3.ts)`
        : whyF32 === null ? `flash attention (fp32 on the CUDA cores, attention_f32.ts: ${whyX3})` : `the shared 16x16-tile kernel: ${whyF32}`;
      counts.set(key, (counts.get(key) ?? 0) + 1);
    }
  return [...counts].map(([what, k]) => `attention: ${k} node${k === 1 ? '' : 's'} on ${what}`);
}
