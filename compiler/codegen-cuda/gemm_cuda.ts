/**
 * gemm_cuda: the CUDA backend's GEMM kernels, for every GEMM-shaped op (linear, matmul, conv2d and
 * its two gradients), with the shared kernels' loaders and stores (compiler/kernels/gemm.ts
 * gemmParts: implicit im2col, bias, fused unary epilogue) but 64x64 output tiles per block:
 *  - plain: 256 threads, each accumulating a 4x4 register block in fp32 (FFMA);
 *  - mma:   128 threads (4 warps of 32x32), 3xTF32 tensor-core products (mma.sync.m16n8k8 on
 *           hi/lo splits of both operands, fp32 accumulate: fp32 accuracy), the helpers of
 *           cuda_dialect.ts.
 * Both share the grid (N/64, M/64, groups) and the shared-memory tiles: A as [64][20] (row m,
 * column k; the padding keeps the fragment reads conflict-free), B as [16][72] (row k, column n).
 * The global loads of B run along k where B is k-contiguous (linear, conv2d, matmul with transB),
 * else along n. Consumes IR nodes (CUDA dialect context); produces KernelSpecs.
 * The shared 16x16 kernels stay available (MPSC_CUDA_GEMM=shared at generation time).
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { ceilDiv, label } from '../kernels/common.js';
import { gemmParts } from '../kernels/gemm.js';

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

const prologue = (v: View, what: string) =>
  `  // C[${v.M} x ${v.N}] = A[${v.M} x ${v.K}] * B[${v.K} x ${v.N}] per group (grid z): ${what}\n` +
  groupIndex(v) +
  `  const uint m0 = tgid.y * ${BM}u, n0 = tgid.x * ${BN}u;\n` +
  `  float* As = tg;              // [${BM}][${LDA}]: As[m * ${LDA} + k]\n` +
  `  float* Bs = tg + ${BM * LDA}; // [${BK}][${LDB}]: Bs[k * ${LDB} + n]\n`;

const storeOne = (v: View, mi: string, ni: string, acc: string) =>
  `      {\n        const uint mi = ${mi}, ni = ${ni};\n        if (mi < ${v.M} && ni < ${v.N}) {\n          const float acc = ${acc};\n${v.store}\n        }\n      }\n`;

function plainBody(v: View): string {
  return (
    prologue(v, '64x64 tile per block of 16x16 threads, a 4x4 fp32 register block per thread') +
    `  float cacc[4][4];\n  #pragma unroll\n  for (uint i = 0u; i < 4u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < 4u; ++j) cacc[i][j] = 0.0f;\n` +
    `  for (uint k0 = 0u; k0 < ${v.K}; k0 += ${BK}u) {\n` +
    loadTiles(v, 256) +
    `    __syncthreads();\n` +
    `    #pragma unroll\n    for (uint kk = 0u; kk < ${BK}u; ++kk) {\n      float a[4], b[4];\n` +
    `      #pragma unroll\n      for (uint i = 0u; i < 4u; ++i) a[i] = As[(tid.y + 16u * i) * ${LDA}u + kk];\n` +
    `      #pragma unroll\n      for (uint j = 0u; j < 4u; ++j) b[j] = Bs[kk * ${LDB}u + tid.x + 16u * j];\n` +
    `      #pragma unroll\n      for (uint i = 0u; i < 4u; ++i)\n        #pragma unroll\n        for (uint j = 0u; j < 4u; ++j) cacc[i][j] += a[i] * b[j];\n    }\n` +
    `    __syncthreads();\n  }\n` +
    `  #pragma unroll\n  for (uint i = 0u; i < 4u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < 4u; ++j)\n` +
    storeOne(v, 'm0 + tid.y + 16u * i', 'n0 + tid.x + 16u * j', 'cacc[i][j]')
  );
}

function mmaBody(v: View): string {
  return (
    prologue(v, '64x64 tile per block of 4 warps, 32x32 per warp as 2x4 3xTF32 mma.sync m16n8k8 tiles') +
    `  const uint gq = lane / 4u, tq = lane % 4u;\n` +
    `  const uint wm = (sg / 2u) * 32u, wn = (sg % 2u) * 32u;\n` +
    `  float cacc[2][4][4];\n  #pragma unroll\n  for (uint i = 0u; i < 2u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < 4u; ++j)\n      #pragma unroll\n      for (uint q = 0u; q < 4u; ++q) cacc[i][j][q] = 0.0f;\n` +
    `  for (uint k0 = 0u; k0 < ${v.K}; k0 += ${BK}u) {\n` +
    loadTiles(v, 128) +
    `    __syncthreads();\n` +
    `    #pragma unroll\n    for (uint kk = 0u; kk < ${BK}u; kk += 8u) {\n` +
    `      uint ah[2][4], al[2][4], bh[4][2], bl[4][2];\n` +
    `      #pragma unroll\n      for (uint i = 0u; i < 2u; ++i) {\n` +
    `        const uint r = wm + 16u * i + gq;\n` +
    `        mpsc_split_tf32(As[r * ${LDA}u + kk + tq], ah[i][0], al[i][0]);\n` +
    `        mpsc_split_tf32(As[(r + 8u) * ${LDA}u + kk + tq], ah[i][1], al[i][1]);\n` +
    `        mpsc_split_tf32(As[r * ${LDA}u + kk + tq + 4u], ah[i][2], al[i][2]);\n` +
    `        mpsc_split_tf32(As[(r + 8u) * ${LDA}u + kk + tq + 4u], ah[i][3], al[i][3]);\n      }\n` +
    `      #pragma unroll\n      for (uint j = 0u; j < 4u; ++j) {\n` +
    `        const uint n = wn + 8u * j + gq;\n` +
    `        mpsc_split_tf32(Bs[(kk + tq) * ${LDB}u + n], bh[j][0], bl[j][0]);\n` +
    `        mpsc_split_tf32(Bs[(kk + tq + 4u) * ${LDB}u + n], bh[j][1], bl[j][1]);\n      }\n` +
    `      #pragma unroll\n      for (uint i = 0u; i < 2u; ++i)\n        #pragma unroll\n        for (uint j = 0u; j < 4u; ++j) {\n` +
    `          mpsc_mma16x8(cacc[i][j], al[i], bh[j]);\n          mpsc_mma16x8(cacc[i][j], ah[i], bl[j]);\n          mpsc_mma16x8(cacc[i][j], ah[i], bh[j]);\n        }\n    }\n` +
    `    __syncthreads();\n  }\n` +
    `  #pragma unroll\n  for (uint i = 0u; i < 2u; ++i)\n    #pragma unroll\n    for (uint j = 0u; j < 4u; ++j)\n      #pragma unroll\n      for (uint q = 0u; q < 4u; ++q)\n` +
    storeOne(v, 'm0 + wm + 16u * i + gq + (q >= 2u ? 8u : 0u)', 'n0 + wn + 8u * j + 2u * tq + (q & 1u)', 'cacc[i][j][q]')
  );
}

/** ops whose B operand is contiguous along k */
function bAlongK(n: Node): boolean {
  return n.op === 'linear' || n.op === 'conv2d' || (n.op === 'matmul' && Boolean(n.attrs.transB));
}

/** The CUDA GEMM of a GEMM-family node (with an optional fused unary epilogue); null for other ops. */
export function lowerGemmCuda(ctx: LowerCtx, g: Graph, n: Node, epilogue?: Node): KernelSpec[] | null {
  if (ctx.d.name !== 'cuda') throw new Error(`internal: the CUDA GEMM lowered for dialect ${ctx.d.name}`);
  const parts = gemmParts(ctx, g, n, epilogue);
  if (!parts) return null;
  const { gm, args, what, store } = parts;
  const d = ctx.d;
  const view: View = { M: d.u(gm.M), N: d.u(gm.N), K: d.u(gm.K), head: gm.head ?? '', loadA: gm.loadA, loadB: gm.loadB, store, bAlongK: bAlongK(n) };
  const name = ctx.next();
  return [{
    name, node: n.id, op: n.op, label: label(g, n) + what, args,
    groups: [Math.max(1, ceilDiv(gm.N, BN)), Math.max(1, ceilDiv(gm.M, BM)), gm.G],
    tgsize: [16, 16, 1], tgmem: TGMEM, sync: true, body: plainBody(view),
    mma: { name: `${name}_mma`, tgsize: [128, 1, 1], tgmem: TGMEM, sync: true, body: mmaBody(view) },
  }];
}
