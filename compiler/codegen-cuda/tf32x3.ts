/**
 * tf32x3: fp32-accurate cuBLASLt GEMMs on the tensor cores by split precision ("3xTF32").
 * Consumes a cuBLASLt call description of an fp32 GEMM node (cublaslt.ts planOf: LibraryGemm with
 * fp32 A, B and D), the node's operand values and the CUDA lowering context; produces, when the
 * size rule below takes the node, the call rewritten over split operands (the k of the call
 * tripled, CUBLAS_COMPUTE_32F_FAST_TF32; for a single product, cut into K chunks run as a strided
 * batch), the two element-wise split kernels that write those operands into the plan's scratch
 * region (KernelSpec.scratch; they run before the call, only on the cuBLASLt path: libraryPart
 * 'before') and, with K chunks, the kernel after the call that sums the chunks' partial products
 * into the node's output ('after'); else the reason the node stays an fp32 FMA call.
 *
 * Numerics. Every fp32 x is split as x = hi + lo + r with hi = tf32(x) (x's 24-bit significand
 * rounded to 11 bits, half away from zero), lo = tf32(x - hi) (x - hi is exact in fp32, Sterbenz)
 * and |r| <= 2^-22 |x|; hi and lo have their low 13 bits zero, so they are exact TF32 values and
 * the tensor cores multiply them exactly (an 11 x 11-bit product fits fp32) whatever rounding
 * cuBLASLt's TF32 kernels apply to fp32 operands (any rounding leaves an exact TF32 value alone).
 * a b ~ a_hi b_hi + a_hi b_lo + a_lo b_hi (the dropped a_lo b_lo is below 2^-22 |a b|) is ONE
 * product over a K three times longer: A' = [a_hi | a_hi | a_lo] (concatenated along K),
 * B' = [b_hi ; b_lo ; b_hi], accumulated in fp32 by the tensor cores. The split's own error (at most
 * ~2^-21 relative per product, random in sign) is about fp32's own rounding over K: with IEEE fp32
 * accumulation the sum's error is ~2x a plain fp32 GEMM's (test/cuda_tf32x3.test.ts, emulated at the
 * workloads' shapes); on the GPU the accumulation adds more (below).
 * Inf passes as hi = inf, lo = 0 (so inf * finite is inf, as in fp32); NaN becomes the quiet NaN
 * 0x7fffe000 (an exact TF32 NaN); a value whose rounding would overflow to inf keeps its truncation.
 * This is NOT plain TF32 (issue 14 rules that out for matmuls): the products keep ~22 bits of each operand.
 *
 * Layout. Both split operands are K-major: each row of K becomes a row of 3K, three consecutive blocks
 * of K elements (hi / lo in the pattern below). An operand whose K is its contiguous dim is split in
 * place, out[(i / K) * 3K + j K + i % K], j = 0, 1, 2; one whose K is its outer dim (a linear's weight
 * in the input gradient dY W) is transposed by its split kernel (each thread writes one element of the
 * K-major result, so the stores are coalesced): Hopper's TF32 tensor cores take K-major operands, and
 * with the earlier stacked K-outer layout cuBLASLt ran gpt_char's input gradients 10-20% slower than
 * the same shapes' forward products (bench/NOTES.md v30). The call's leading dims / rows / cols /
 * batch strides follow (tf32x3Layout): cuBLASLt's A always transposed, its B never.
 *
 * The rule (MPSC_CUDA_TF32X3: 1 the rule, default; 0 never; all every fp32 cuBLASLt call, for checks):
 * a cost model in H200 figures, split when the predicted 3xTF32 time is at most 0.85 of the fp32
 * call's: t_fp32 = F / 48 TFLOP/s (cuBLASLt's fp32 SIMT rate: 43-49 measured at the workloads' shapes),
 * t_3x = 3 F / 420 TFLOP/s (cuBLASLt's TF32 rate over the tripled K, 433 measured at 1024 x 4096 x 4096)
 * + 16 bytes per operand element / 3.2 TB/s (the split pass reads 4 and writes 12; 3.3 TB/s measured)
 * + the K chunks' partial products, (S + 1) x 4 bytes per output element (below);
 * and the output must fill the GPU with 128 x 128 tiles (at least 132, the H200's SMs: a long-K product
 * with a small output, 384 x 1536 x 16384, measured 1.3x SLOWER as 3xTF32), k >= 32, and k <= 4096 for a
 * strided batch (which is not cut into K chunks: accuracy, below). Figures from
 * bench/tf32x3_gemm.sh on the H200 (bench/NOTES.md, "3xTF32"). Small GEMMs (launch-bound) stay fp32 FMA.
 *
 * K chunks. Measured on the H200 (bench/NOTES.md): the tensor cores' fp32 accumulation is not IEEE
 * round-to-nearest; its error grows linearly with the length of the accumulated K (like a truncating
 * sum): one call over 3K had a max-norm relative error of 3e-6 at K = 384 ... 5e-5 at K = 4096, 5-40x a
 * SIMT fp32 call's (6e-7 ... 1.4e-6). So the 3K are cut into S chunks of at most 1536 (chunksOf), run
 * as S strided-batch products into the scratch region and summed in fp32 by a kernel after the call
 * (which adds the bias; a fused unary follows it): measured 2.4e-6 ... 3.3e-6 at K = 4096 with 8 chunks
 * (fp32: 0.95e-6 ... 1.4e-6), ~1.2x the unchunked call's time. The test's emulation (IEEE fp32
 * accumulation) is the split's own error, ~2x fp32's.
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelSpec, LibraryGemm, LowerCtx } from '../kernels/kernel_types.js';
import { argOf, elementwise, numel, shapeOf } from '../kernels/common.js';
import { envFlag } from '../env_switch.js';

/** MPSC_CUDA_TF32X3: the size rule (default), never, or every fp32 cuBLASLt call */
export type Tf32x3Mode = 'rule' | 'off' | 'all';

/** the cost model's figures (H200; see the header) */
export const TF32X3_MODEL = { fp32Flops: 48e12, tf32Flops: 420e12, bytesPerSecond: 3.2e12, bytesPerElement: 16, take: 0.85, tile: 128, minTiles: 132, minK: 32, maxK: 4096, chunk: 1536 };

/** the split operands of one call: scratch byte offsets of cuBLASLt's A (our b) and B (our a), and the bytes of both */
export interface Tf32x3Split { offA: number; offB: number; bytes: number; offD?: number }

const SCRATCH_ALIGN = 256;
const alignUp = (n: number) => Math.ceil(n / SCRATCH_ALIGN) * SCRATCH_ALIGN;

/** one element of a split operand (exact emulation of the kernel's mpsc_tf32_split; tests) */
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
const bitsOf = (x: number) => ((f32[0] = x), u32[0]);
const floatOf = (u: number) => ((u32[0] = u >>> 0), f32[0]);
const tf32Bits = (u: number) => ((u + 0x1000) & 0xffffe000) >>> 0;

export function tf32Split(x: number): [number, number] {
  const u = bitsOf(x);
  if ((u & 0x7f800000) >>> 0 === 0x7f800000) return [(u & 0x007fffff) !== 0 ? floatOf(0x7fffe000) : floatOf(u), 0];
  let h = tf32Bits(u);
  if ((h & 0x7f800000) >>> 0 === 0x7f800000) h = (u & 0xffffe000) >>> 0;
  const hi = floatOf(h);
  const r = Math.fround(Math.fround(x) - hi);
  return [hi, floatOf(tf32Bits(bitsOf(r)))];
}

/** the split helper of the kernel file (host and device: the tests run it on the CPU through nvcc) */
export function tf32SplitHelper(): string {
  const q = '__host__ __device__ __forceinline__';
  return (
    `// 3xTF32 split (codegen-cuda/tf32x3.ts): x ~ hi + lo, both exact TF32 values (low 13 bits zero), hi = x rounded to\n` +
    `// 11 significant bits (half away from zero; truncated where that would overflow), lo = (x - hi) rounded alike;\n` +
    `// inf: hi = inf, lo = 0; NaN: the quiet NaN 0x7fffe000\n` +
    `${q} uint mpsc_f2u(float x) {\n#ifdef __CUDA_ARCH__\n  return __float_as_uint(x);\n#else\n  uint u;\n  memcpy(&u, &x, 4);\n  return u;\n#endif\n}\n\n` +
    `${q} float mpsc_u2f(uint u) {\n#ifdef __CUDA_ARCH__\n  return __uint_as_float(u);\n#else\n  float x;\n  memcpy(&x, &u, 4);\n  return x;\n#endif\n}\n\n` +
    `${q} void mpsc_tf32_split(float x, float& hi, float& lo) {\n` +
    `  const uint u = mpsc_f2u(x);\n` +
    `  if ((u & 0x7f800000u) == 0x7f800000u) {\n    hi = (u & 0x007fffffu) ? mpsc_u2f(0x7fffe000u) : x;\n    lo = 0.0f;\n    return;\n  }\n` +
    `  uint h = (u + 0x1000u) & 0xffffe000u;\n` +
    `  if ((h & 0x7f800000u) == 0x7f800000u) h = u & 0xffffe000u;\n` +
    `  hi = mpsc_u2f(h);\n` +
    `  lo = mpsc_u2f((mpsc_f2u(x - hi) + 0x1000u) & 0xffffe000u);\n}\n`
  );
}

/**
 * $MPSC_CUDA_TF32X3_CHUNK_TILES (default 0): whether the size rule counts a chunked call's K-chunk products' output
 * tiles. 1 takes gpt_char's long-K weight gradients (384 x 1536 x 16384: 36 tiles, 1152 over its 32 chunks): their
 * chunked TF32 product ran 288 us against fp32's 421, but with the two operand splits (~150 us) and the partial sums the
 * step went 24.09 -> 25.67 ms (H100, bench/NOTES.md phase 20), so the rule counts the call's own tiles (A/B switch)
 */
export function tf32x3ChunkTiles(): boolean {
  return envFlag('MPSC_CUDA_TF32X3_CHUNK_TILES', false);
}

/** the rule's verdict on one fp32 call: take it, and the one-line reason either way */
export function tf32x3Rule(gemm: Pick<LibraryGemm, 'm' | 'n' | 'k' | 'batch'>, operandElems: number, mode: Tf32x3Mode): { take: boolean; why: string } {
  const { m, n, k, batch } = gemm;
  if (mode === 'off') return { take: false, why: '3xTF32 switched off (MPSC_CUDA_TF32X3=0)' };
  if (mode === 'all') return { take: true, why: 'MPSC_CUDA_TF32X3=all' };
  const M = TF32X3_MODEL;
  // a single product over 3K runs as S K-chunk products (chunksOf): with MPSC_CUDA_TF32X3_CHUNK_TILES=1 their tiles
  // count (a long-K weight gradient's small output, 384 x 1536 x 16384: 36 tiles, 1152 over its 32 chunks; measured slower)
  const S = chunksOf(3 * k, batch), chunkTiles = tf32x3ChunkTiles() ? S : 1;
  const tiles = Math.ceil(m / M.tile) * Math.ceil(n / M.tile) * batch * chunkTiles;
  if (tiles < M.minTiles) return { take: false, why: `too small an output to fill the GPU's tensor cores (${tiles} tiles of ${M.tile} x ${M.tile}${chunkTiles > 1 ? ` over ${chunkTiles} K chunks` : ''}, under ${M.minTiles})` };
  if (k < M.minK) return { take: false, why: `k ${k} < ${M.minK}` };
  // accuracy: the tensor cores' accumulation error grows with K (5.2e-5 max-norm relative measured at K 4096);
  // a single product is cut into K chunks (chunksOf), a strided batch is not: cap its K
  if (batch > 1 && k > M.maxK) return { take: false, why: `k ${k} > ${M.maxK} in a strided batch (no K chunks): the tensor cores' accumulation error grows with K (5e-5 at 4096 against the 1e-4 check)` };
  const flops = 2 * m * n * k * batch;
  // the K chunks' partial products: written by the call, read by the sum kernel, which writes D
  const partials = S > 1 ? (S + 1) * m * n * batch * 4 : 0;
  const t1 = flops / M.fp32Flops, t3 = (3 * flops) / M.tf32Flops + (operandElems * M.bytesPerElement + partials) / M.bytesPerSecond;
  const us = (t: number) => `${(t * 1e6).toFixed(1)} us`;
  const take = t3 <= M.take * t1;
  return { take, why: `predicted ${us(t3)} as 3xTF32 (split included) vs ${us(t1)} fp32${take ? '' : `: not below ${M.take} of it`}` };
}

/** K chunks of a call over 3K: the fewest, at most TF32X3_MODEL.chunk long each, that divide 3K (1 for a strided batch) */
export function chunksOf(k3: number, batch: number): number {
  if (batch > 1) return 1;
  let S = Math.max(1, Math.ceil(k3 / TF32X3_MODEL.chunk));
  while (k3 % S !== 0) S++;
  return S;
}

/**
 * How the split kernel of one operand writes it: `k` the product's K; each row of K becomes a row of 3K (blocks of k
 * elements). `t` for an operand whose K is its outer dim (stored `rows` x K column-major, `mat` elements a matrix):
 * the split is written transposed, K-major, so that both of the call's operands are K-major (the layout Hopper's TF32
 * tensor-core kernels take; bench/NOTES.md v30). `stacked` (MPSC_CUDA_TF32X3_KMAJOR=0, the layout before v30): a
 * K-outer operand's matrix of `stacked` elements becomes three stacked matrices, not transposed.
 */
export interface SplitSide { k: number; t?: { rows: number; mat: number }; stacked?: number }

/** $MPSC_CUDA_TF32X3_KMAJOR (build time, default 1): K-outer operands transposed to K-major by their split (0: stacked, as before v30; A/B) */
export function tf32x3KMajor(): boolean {
  return envFlag('MPSC_CUDA_TF32X3_KMAJOR', true);
}

/**
 * The call over split operands: k tripled. K-major (default): an operand whose K is its outer dim is transposed by
 * its split kernel (SplitSide), so cuBLASLt's A is always op = transposed (stored K x m) and its B not (stored K x n),
 * each with rows and leading dim 3K; stacked (MPSC_CUDA_TF32X3_KMAJOR=0): a K-outer operand keeps its transpose flag
 * and gets 3x cols. Nonzero batch strides triple. With S > 1 K chunks (chunksOf) the call is S strided products of
 * k = 3K / S each (the chunk offsets along K are the batch strides: the next k rows of a K-major operand, the next k
 * columns of a stacked one; D: S partial products, summed in fp32 by the reduce kernel, which also adds the bias: the
 * call's epilogue is then the default). Only for packed operands (ld = rows), which cublaslt.ts always describes.
 */
export function tf32x3Layout(L: LibraryGemm, kMajor = tf32x3KMajor()): { gemm: LibraryGemm; a: SplitSide; b: SplitSide; chunks: number } {
  if (L.lda !== L.rowsA || L.ldb !== L.rowsB) throw new Error('internal: 3xTF32 split of a strided (unpacked) operand');
  // cuBLASLt's A is m x k after op: stored k x m (K inner) when transposed, else m x k (K outer); its B k x n after op
  const aKInner = L.transA || kMajor, bKInner = !L.transB || kMajor;
  const K = L.k;
  // cuBLASLt's A is our b, its B our a
  const side = (kInner: boolean, rows: number, cols: number): SplitSide =>
    kInner ? { k: K } : kMajor ? { k: K, t: { rows, mat: rows * cols } } : { k: K, stacked: rows * cols };
  const b = side(L.transA, L.rowsA, L.colsA), a = side(!L.transB, L.rowsB, L.colsB);
  const S = chunksOf(3 * K, L.batch), k = (3 * K) / S;
  // K-major: A transposed (K x m), B not (K x n)
  const T: LibraryGemm = kMajor ? { ...L, transA: true, rowsA: K, colsA: L.m, lda: K, transB: false, rowsB: K, colsB: L.n, ldb: K } : L;
  const gemm: LibraryGemm = S === 1 ? {
    ...T, k,
    ...(aKInner ? { rowsA: 3 * K, lda: 3 * K } : { colsA: 3 * K }),
    ...(bKInner ? { rowsB: 3 * K, ldb: 3 * K } : { colsB: 3 * K }),
    strideA: 3 * L.strideA, strideB: 3 * L.strideB,
  } : {
    ...T, k, batch: S, epilogue: 'default', argBias: undefined,
    ...(aKInner ? { rowsA: k, lda: 3 * K, strideA: k } : { colsA: k, strideA: k * L.rowsA }),
    ...(bKInner ? { rowsB: k, ldb: 3 * K, strideB: k } : { colsB: k, strideB: k * L.rowsB }),
    strideD: L.m * L.n,
  };
  return { gemm, a, b, chunks: S };
}

/** hi / lo in the three blocks: our a (cuBLASLt's B) [hi, hi, lo], our b (cuBLASLt's A) [hi, lo, hi] */
export const SPLIT_PATTERN = { a: ['hi', 'hi', 'lo'], b: ['hi', 'lo', 'hi'] } as const;

/**
 * The split kernels of a call (our a, then our b: libraryPart 'before') and, for S > 1 K chunks, the
 * reduce kernel ('after', ahead of any fused unary): y = the S partial products summed in fp32 in chunk
 * order (+ the bias of the output's last dim). The call's scratch offsets; null when the split operands
 * do not fit 32-bit element indices.
 */
export function splitKernels(ctx: LowerCtx, g: Graph, n: Node, ops: { a: number; b: number; y: number; bias?: number }, lay: { a: SplitSide; b: SplitSide; chunks: number }, outElems: number): { kernels: KernelSpec[]; split: Tf32x3Split } | null {
  const ea = numel(shapeOf(g, ops.a)), eb = numel(shapeOf(g, ops.b));
  const S = lay.chunks;
  const offB = 0, offA = alignUp(3 * ea * 4), offD = alignUp(offA + 3 * eb * 4), bytes = S > 1 ? offD + S * outElems * 4 : offA + 3 * eb * 4;
  if (bytes / 4 >= 2 ** 32) return null;
  const d = ctx.d;
  const kernel = (value: number, count: number, side: SplitSide, off: number, role: 'a' | 'b'): KernelSpec => {
    const [p0, p1, p2] = SPLIT_PATTERN[role];
    // B: the block length (K; a stacked operand's whole matrix)
    const o = off / 4, K = side.k, B = side.stacked ?? K, at = o > 0 ? `${d.u(o)} + ` : '';
    let body: string;
    if (side.t) {
      // K-outer: thread i writes element i of the K-major split (coalesced stores); matrix g, row r of K, k = c
      const { rows, mat } = side.t;
      const g0 = count > mat;
      body = `${g0 ? `  const uint g = i / ${d.u(mat)}, t = i % ${d.u(mat)};\n` : '  const uint t = i;\n'}` +
        `  const uint r = t / ${d.u(K)}, c = t % ${d.u(K)};\n` +
        `  float hi, lo;\n  mpsc_tf32_split(x[${g0 ? `g * ${d.u(mat)} + ` : ''}c * ${d.u(rows)} + r], hi, lo);\n` +
        `  const uint o = ${at}${g0 ? `g * ${d.u(3 * mat)} + ` : ''}r * ${d.u(3 * K)} + c;\n`;
    } else {
      // in place: blocks of K along each row of K, or (stacked) of the whole matrix
      body = `  float hi, lo;\n  mpsc_tf32_split(x[i], hi, lo);\n  const uint o = ${B === count ? `${at}i` : `${at}(i / ${d.u(B)}) * ${d.u(3 * B)} + i % ${d.u(B)}`};\n`;
    }
    body += `  mpsc_scratch[o] = ${p0};\n  mpsc_scratch[o + ${d.u(B)}] = ${p1};\n  mpsc_scratch[o + ${d.u(2 * B)}] = ${p2};\n`;
    const k = elementwise(ctx, g, n, [argOf(g, 'x', value, 'r')], count, body, ` [3xTF32 split of operand ${role}${side.t ? ', transposed to K-major' : ''}: ${p0} | ${p1} | ${p2} in blocks of ${B}]`);
    return { ...k, scratch: bytes, libraryPart: 'before' };
  };
  ctx.helpers.add('tf32split');
  // our a is cuBLASLt's B, our b is cuBLASLt's A
  const kernels = [kernel(ops.a, ea, lay.a, offB, 'a'), kernel(ops.b, eb, lay.b, offA, 'b')];
  if (S > 1) {
    const o = offD / 4;
    const biasLen = ops.bias !== undefined ? numel(shapeOf(g, ops.bias)) : 0;
    const body = `  float v = mpsc_scratch[${d.u(o)} + i];\n  for (uint c = 1u; c < ${d.u(S)}; ++c) v += mpsc_scratch[${d.u(o)} + c * ${d.u(outElems)} + i];\n` +
      `  y[i] = v${ops.bias !== undefined ? ` + bias[i % ${d.u(biasLen)}]` : ''};\n`;
    const args = [argOf(g, 'y', ops.y, 'w'), ...(ops.bias !== undefined ? [argOf(g, 'bias', ops.bias, 'r')] : [])];
    const k = elementwise(ctx, g, n, args, outElems, body, ` [3xTF32: the ${S} K-chunk products summed${ops.bias !== undefined ? ', + bias' : ''}]`);
    kernels.push({ ...k, scratch: bytes, libraryPart: 'after' });
  }
  return { kernels, split: { offA, offB, bytes, ...(S > 1 ? { offD } : {}) } };
}
