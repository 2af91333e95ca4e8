/**
 * cublaslt: which GEMM nodes of a CUDA program run as one cuBLASLt call, and that call's
 * description. Consumes IR nodes (linear, matmul; with an optional fused unary epilogue) in the
 * CUDA dialect's lowering context; produces the node's kernels: the generated GEMM kernels of
 * gemm_cuda.ts, marked as the call's fallback (they run when the model is built without
 * cuBLASLt, or when cuBLASLt has no algorithm for the shape), the first carrying the call
 * (KernelSpec.library), and for a fused unary fn an in-place element-wise kernel that runs after
 * the call ('after'; the call has no exact form of the spec's fns: see below).
 *
 * The rule (per node, at build time; `gemmChoice` says which and why, for `mpsc build`,
 * `mpsc check --ir --device cuda` and the run log):
 *  - cuBLASLt for linear and matmul whose operands it can address: each operand's batch offset
 *    is either g times its matrix size or 0 (shared by every batch), operands both f32 or both the
 *    same 16-bit type. A batched matmul whose B operand is shared and whose A is not transposed
 *    is one product with the batches folded into the rows.
 *  - the generated kernel for convolutions (implicit im2col: cuBLASLt has no layout for it; the
 *    reason names which kernel, conv_cuda.ts convKernelNote: the TF32 implicit-GEMM kernel, or
 *    gemm_cuda.ts's 64x64 one and why) and for partially broadcast batch dims.
 *  - `lt: false` (MPSC_CUDA_CUBLASLT=0 at generation time): every GEMM is generated.
 *  - with MPSC_CUDA_SMALL_GEN=1 (generation time; off by default; `nowgrad`: all but the weight gradients), the
 *    generated kernel for a small fp32 product (fp32 operands and output; gemm_cuda.ts smallGemm: its 64x64 grid under
 *    two blocks per SM, at most 2^28 multiply-adds), on the small tiles (gemm_cuda.ts smallFp32: the 3xTF32 kernel, or
 *    with MPSC_CUDA_SMALL_FP32=ffma the FFMA one, slower still: bench/NOTES.md v22a). Measured on the H200 at gpt_tiny's shapes (bench/NOTES.md, tinygemm): the
 *    small-tile 3xTF32 kernel takes 8.5-20.6 us per product one by one against cuBLASLt's fp32 calls' 8.8-21.5, and
 *    the graph step is slower with it (gpt_tiny 0.975 vs 0.924 ms, mnist_mlp 0.084-0.087 vs 0.074-0.078; with the
 *    layernorm_grad finish of layernorm_cuda.ts in both, gpt_tiny 0.871 vs 0.821): so the default stays cuBLASLt;
 *    16-bit products are cuBLASLt calls at any size.
 *  - an fp32 call (fp32 operands and D) that tf32x3.ts's size rule takes (MPSC_CUDA_TF32X3, default
 *    on) runs as 3xTF32: two split kernels ('before' the call) write hi / lo operands into the scratch
 *    region and the call, k tripled, multiplies them with CUBLAS_COMPUTE_32F_FAST_TF32 (exact products,
 *    the tensor cores' fp32 accumulation, over K chunks of at most 1536 summed in fp32 by an 'after'
 *    kernel that also adds the bias; tf32x3.ts has the numerics and the measured error). Small GEMMs stay fp32 FMA.
 * Numerics: CUBLAS_COMPUTE_32F (fp32 FMA, never plain TF32, as issue 14 asks for matmuls) with an fp32
 * output, or a 16-bit one (D of the operands' 16-bit type: autocast's storage of a product, the
 * fp32 result rounded once; not with a fused unary, which must see the unrounded result); the bias
 * of D's type (autocast rounds a linear's bias as it rounds the operands; an fp32 bias with a 16-bit
 * D has no cuBLASLt algorithm on the H200, so that combination runs the generated kernel), added
 * through CUBLASLT_EPILOGUE_BIAS (acc + b in fp32, as the generated store). Unary epilogues are NOT given to cuBLASLt: its GELU is the tanh approximation (the
 * spec's gelu is erf's), and its RELU's NaN behaviour is not documented while the spec's relu
 * passes NaN through; they run as the 'after' kernel, exactly the spec's fn.
 * Row-major to column-major: the row-major product Y[M x N] = op(a) op(b) is the column-major
 * D[N x M] = op(b)^T op(a)^T, so cuBLASLt's A is our b and its B our a (see ltOperands).
 */
import type { Graph, Node } from '../ir/graph.js';
import { broadcastStrides, matmulNodeDims } from '../ir/shapes.js';
import type { KernelSpec, LibraryDType, LibraryGemm, LowerCtx } from '../kernels/kernel_types.js';
import { argOf, elementwise, numel, shapeOf } from '../kernels/common.js';
import { unaryFwd } from '../kernels/elementwise.js';
import { convKernelNote } from './conv_cuda.js';
import { SMALL_BELOW, SMALL_MAX_MACS, lowerGemmCuda, smallFp32, smallGemm } from './gemm_cuda.js';
import { gemmParts } from '../kernels/gemm.js';
import { splitKernels, tf32x3Layout, tf32x3Rule, type Tf32x3Mode } from './tf32x3.js';
import { lowerSumToCuda } from './reduce_cuda.js';
import { GPU_KERNELS } from '../kernels/registry.js';
import { envChoice } from '../env_switch.js';

/**
 * MPSC_CUDA_SMALL_GEN (build time): which small fp32 products (gemm_cuda.ts smallGemm) run the generated small-tile
 * kernel instead of a cuBLASLt call: '0' none, '1' all, 'nowgrad' all but the weight gradients (matmuls with
 * transA, whose call sums the bias gradient in its BGRADB epilogue)
 */
export type SmallGen = '0' | '1' | 'nowgrad';
export const smallGenMode = (): SmallGen => envChoice('MPSC_CUDA_SMALL_GEN', ['0', '1', 'nowgrad'], '0');

/** where a GEMM node runs, and why (plain data for reports) */
export interface GemmChoice {
  node: number;
  op: string;
  path: 'cublaslt' | 'generated';
  /** the product: M x N x K (x batch), operand type */
  shape: string;
  why: string;
  /** the cuBLASLt call multiplies 3xTF32 split operands (tf32x3.ts) */
  tf32x3?: boolean;
}

/** the kernels and the choice of one GEMM-family node */
export interface CudaGemmLowering { kernels: KernelSpec[]; choice: GemmChoice }

interface Operands {
  transA: boolean; transB: boolean;
  rowsA: number; colsA: number; lda: number;
  rowsB: number; colsB: number; ldb: number;
}

/**
 * cuBLASLt's A = our b, its B = our a (row-major -> column-major), for op(a) [M x K], op(b) [K x N]:
 * a stored [M,K] is column-major K x M = op(a)^T (no transpose); stored [K,M] (ta) is M x K, transposed.
 */
function ltOperands(M: number, N: number, K: number, ta: boolean, tb: boolean): Operands {
  return {
    transA: tb, rowsA: tb ? K : N, colsA: tb ? N : K, lda: tb ? K : N,
    transB: ta, rowsB: ta ? M : K, colsB: ta ? K : M, ldb: ta ? M : K,
  };
}

const libType = (g: Graph, id: number): LibraryDType | null => {
  const t = g.values[id].dtype;
  return t === 'f32' || t === 'f16' || t === 'bf16' ? t : null;
};

/** per-batch element stride of an operand broadcast to `batch`: matrix elements, 0 (shared), or null (partially broadcast) */
function batchStride(shape: readonly number[], batch: readonly number[], matrix: number): number | null {
  const own = numel(shape.slice(0, -2));
  if (own === 1) return 0;
  const st = broadcastStrides(shape.slice(0, -2), batch);
  let want = 1;
  for (let i = batch.length - 1; i >= 0; i--) {
    if (st[i] !== want) return null;
    want *= batch[i];
  }
  return matrix;
}

type Plan = { gemm: Omit<LibraryGemm, 'argA' | 'argB' | 'argD' | 'argBias' | 'what'>; shape: string } | { reason: string; shape: string };

function planOf(ctx: LowerCtx, g: Graph, n: Node, epilogue: Node | undefined): Plan {
  const ins = n.inputs;
  // fuse.ts rules 12 / 13 (small products only): the generated store applies them, where a call would need the extra kernel
  if (n.attrs.grad_fn !== undefined || n.attrs.pre_out === true) {
    const gm = gemmParts(ctx, g, n)?.gm;
    const why = n.attrs.grad_fn !== undefined ? `the ${String(n.attrs.grad_fn)} gradient fused into its store` : `${String(n.attrs.epilogue)} fused into its store beside the product`;
    return { reason: `a small product with ${why} (fuse.ts rules 12, 13): gemm_cuda.ts's kernel applies it, a call would need the unfused kernel after it`, shape: gm ? `${gm.M} x ${gm.N} x ${gm.K}${gm.G > 1 ? ` x ${gm.G} batches` : ''}` : '' };
  }
  const out = epilogue ? epilogue.outputs[0] : n.outputs[0];
  const dType = libType(g, out);
  if (n.op === 'linear') {
    const xs = shapeOf(g, ins[0]), K = xs[xs.length - 1], M = numel(xs) / K, N = shapeOf(g, ins[1])[0];
    const t = libType(g, ins[0]);
    const shape = `${M} x ${N} x ${K}${t && t !== 'f32' ? ` ${t}` : ''}`;
    if (!t || libType(g, ins[1]) !== t) return { reason: 'operands of different types', shape };
    if (!dType || (dType !== 'f32' && (dType !== t || epilogue))) return { reason: `a ${g.values[out].dtype} output from ${t} operands${epilogue ? ' with a fused unary' : ''}`, shape };
    const hasBias = ins.length > 2 && ins[2] >= 0;
    // cuBLASLt adds a bias of D's type (an fp32 bias with a 16-bit D has no algorithm on the H200)
    if (hasBias && libType(g, ins[2]) !== dType) return { reason: `a ${g.values[ins[2]].dtype} bias with a ${dType} output`, shape };
    return {
      shape,
      gemm: { m: N, n: M, k: K, ...ltOperands(M, N, K, false, true), ldd: N, batch: 1, strideA: 0, strideB: 0, strideD: 0, abType: t, dType, epilogue: hasBias ? 'bias' : 'default' },
    };
  }
  if (n.op === 'matmul') {
    const as = shapeOf(g, ins[0]), bs = shapeOf(g, ins[1]);
    const { ta, tb, batch, M, N, K } = matmulNodeDims(n.id, n.attrs, as, bs);
    const G = numel(batch);
    const t = libType(g, ins[0]);
    const shape = `${M} x ${N} x ${K}${G > 1 ? ` x ${G} batches` : ''}${t && t !== 'f32' ? ` ${t}` : ''}`;
    if (!t || libType(g, ins[1]) !== t) return { reason: 'operands of different types', shape };
    if (!dType || (dType !== 'f32' && (dType !== t || epilogue))) return { reason: `a ${g.values[out].dtype} output from ${t} operands${epilogue ? ' with a fused unary' : ''}`, shape };
    const sa = batchStride(as, batch, M * K), sb = batchStride(bs, batch, K * N);
    if (sa === null || sb === null) return { reason: 'a partially broadcast batch (no strided-batch layout for it)', shape };
    const ops = ltOperands(M, N, K, ta, tb);
    if (n.attrs.a_sums === true) {
      // a's column sums (fuse.ts rule 8): cuBLASLt's B is our a, so BGRADB sums op(B)'s k rows per column of D; D of the
      // sums' type (f32) only: cuBLASLt writes the bias gradient in D's type
      return { shape, gemm: { m: N, n: M, k: K, ...ops, ldd: N, batch: 1, strideA: 0, strideB: 0, strideD: 0, abType: t, dType, epilogue: dType === 'f32' ? 'bgradb' : 'default' } };
    }
    if (G > 1 && sb === 0 && !ta && sa === M * K) {
      // b shared by every batch and a's batches consecutive K x M column-major blocks: one product of G*M columns
      return { shape, gemm: { m: N, n: G * M, k: K, ...ops, colsB: G * M, ldd: N, batch: 1, strideA: 0, strideB: 0, strideD: 0, abType: t, dType, epilogue: 'default' } };
    }
    return { shape, gemm: { m: N, n: M, k: K, ...ops, ldd: N, batch: G, strideA: sb, strideB: sa, strideD: M * N, abType: t, dType, epilogue: 'default' } };
  }
  const gm = gemmParts(ctx, g, n)?.gm;
  return { reason: `a convolution (implicit im2col: no cuBLASLt layout): ${convKernelNote(g, n)}`, shape: gm ? `${gm.M} x ${gm.N} x ${gm.K}${gm.G > 1 ? ` x ${gm.G} groups` : ''}` : '' };
}

/**
 * `epilogue`: the fused unary (its output replaces the GEMM's); `lt`: cuBLASLt may be chosen at all;
 * `tf32x3`: whether an fp32 call may run over split operands on the tensor cores (tf32x3.ts's rule);
 * `smallGen`: which small fp32 products run gemm_cuda.ts's small-tile kernel instead of a call (MPSC_CUDA_SMALL_GEN; A/B)
 */
export function lowerGemmCudaLt(ctx: LowerCtx, g: Graph, n: Node, epilogue: Node | undefined, lt: boolean, tf32x3: Tf32x3Mode = 'rule', smallGen: SmallGen = smallGenMode()): CudaGemmLowering | null {
  const gemmKernels = lowerGemmCuda(ctx, g, n, epilogue);
  if (!gemmKernels) return null;
  // a matmul with `a_sums` (fuse.ts rule 8): a's column sums as a sum_to over its rows (the generated path's second kernel(s))
  const sums = n.attrs.a_sums === true ? aSumsKernels(ctx, g, n) : [];
  const fallback = [...gemmKernels, ...sums];
  const p = planOf(ctx, g, n, epilogue);
  const generated = (why: string): CudaGemmLowering => ({ kernels: fallback, choice: { node: n.id, op: n.op, path: 'generated', shape: p.shape, why } });
  if (!lt) return generated('cuBLASLt switched off (MPSC_CUDA_CUBLASLT=0) or not in this CUDA toolkit');
  if ('reason' in p) return generated(p.reason);
  // small fp32 products on gemm_cuda.ts's small-tile kernel (MPSC_CUDA_SMALL_GEN; the rule's bullet above)
  const wgrad = n.op === 'matmul' && Boolean(n.attrs.transA);
  const gm = p.gemm.abType === 'f32' && p.gemm.dType === 'f32' && (smallGen === '1' || (smallGen === 'nowgrad' && !wgrad)) ? gemmParts(ctx, g, n)?.gm : undefined;
  if (gm && smallGemm(n.op, gm.M, gm.N, gm.K, gm.G))
    return generated(`a small fp32 product (under ${SMALL_BELOW} tiles of 64 x 64, at most 2^${Math.log2(SMALL_MAX_MACS)} multiply-adds): gemm_cuda.ts's small-tile ${smallFp32() === 'ffma' ? 'fp32 FFMA' : '3xTF32'} kernel (MPSC_CUDA_SMALL_GEN=${smallGen})`);
  const first = fallback[0];
  const nargs = first.args.length;
  const ltArgs = n.op === 'linear' ? { argA: 1, argB: 0, ...(p.gemm.epilogue === 'bias' ? { argBias: 2 } : {}) } : { argA: 1, argB: 0 };
  const epi = epilogue ? ` + ${String(epilogue.attrs.fn)} (in-place kernel after the call)` : '';
  const split0 = p.gemm.abType === 'f32' && p.gemm.dType === 'f32' ? splitCall(ctx, g, n, { ...p.gemm, ...ltArgs, argD: nargs - 1, what: '' }, first.args[nargs - 1].value, tf32x3) : null;
  // 3xTF32's split operands are not a: their BGRADB sums would be wrong, so the sums then run as kernels after the call
  const split = split0?.gemm && p.gemm.epilogue === 'bgradb' ? { ...split0, gemm: { ...split0.gemm, epilogue: 'default' as const } } : split0;
  const gemm = split?.gemm ?? p.gemm;
  // BGRADB: the column sums' output is an argument of the sum kernel that writes it (the node's kernel biasKernel)
  const sumOut = n.outputs[n.outputs.length - 1];
  const writesSum = (k: KernelSpec) => k.args.findIndex((x) => x.value === sumOut && x.access !== 'r');
  const biasKernel = gemm.epilogue === 'bgradb' ? fallback.findIndex((k, i) => i >= gemmKernels.length && writesSum(k) >= 0) : -1;
  const bgrad = biasKernel >= 0 ? { argBias: writesSum(fallback[biasKernel]), biasKernel } : {};
  const numerics = split?.kernels ? '3xTF32 (split operands on the tensor cores, CUBLAS_COMPUTE_32F_FAST_TF32: exact products, tensor-core fp32 accumulation)'
    : p.gemm.abType === 'f32' ? 'fp32 FMA (CUBLAS_COMPUTE_32F)' : `${p.gemm.abType} operands, fp32 accumulate (CUBLAS_COMPUTE_32F)`;
  const what = `cuBLASLt ${numerics}${gemm.dType !== 'f32' ? `, ${gemm.dType} D` : ''}: ` +
    `D[${gemm.m} x ${gemm.n}] = ${gemm.transA ? 'A^T' : 'A'} ${gemm.transB ? 'B^T' : 'B'}, k ${split?.kernels ? `3 x ${p.gemm.k}` : gemm.k}` +
    `${split?.chunks && split.chunks > 1 ? ` in ${split.chunks} K chunks of ${gemm.k} (strided batch) summed by a kernel${p.gemm.epilogue === 'bias' ? ' with the bias' : ''}` : gemm.batch > 1 ? `, ${gemm.batch} batches` : ''}` +
    `${gemm.epilogue === 'bias' ? ', epilogue BIAS' : gemm.epilogue === 'bgradb' ? `, epilogue BGRADB (a's column sums: ${g.values[sumOut].name})` : ''}${epi}` +
    `${sums.length && gemm.epilogue !== 'bgradb' ? ` + a's column sums (kernel after the call)` : ''}`;
  const library: LibraryGemm = { ...gemm, ...ltArgs, argD: nargs - 1, what, ...bgrad };
  // the sums' kernels ('unfused', right after the GEMM's: biasKernel counts from there): in the fallback, and after the
  // call unless it applies BGRADB (host.ts: after the 'after' kernels, e.g. a 3xTF32 chunk sum sharing the scratch region)
  const kernels: KernelSpec[] = fallback.map((k, i) => ({ ...k, libraryPart: i < gemmKernels.length ? 'fallback' as const : 'unfused' as const, ...(i === 0 ? { library } : {}) }));
  if (split?.kernels) kernels.push(...split.kernels);
  if (epilogue) {
    // the fused unary, in place on the call's output (fp32)
    const out = epilogue.outputs[0];
    const body = `  const float v = y[i];\n  y[i] = ${unaryFwd(ctx, epilogue, 'v')};\n`;
    const after = elementwise(ctx, g, n, [argOf(g, 'y', out, 'rw')], numel(shapeOf(g, out)), body, ` [after the cuBLASLt call: unary ${String(epilogue.attrs.fn)} in place]`);
    kernels.push({ ...after, libraryPart: 'after' });
  }
  const why = `the rule: every ${n.op} cuBLASLt can address; ${what.replace(/^cuBLASLt /, '')}${split ? ` (3xTF32: ${split.why})` : ''}; the generated kernel is the fallback`;
  return { kernels, choice: { node: n.id, op: n.op, path: 'cublaslt', shape: p.shape, why, ...(split?.kernels ? { tf32x3: true } : {}) } };
}

/**
 * the column sums of a matmul's a [K, M] (`a_sums`, its last output) as the CUDA sum_to over a's rows
 * (reduce_cuda.ts for long sums, else the shared kernel): the fused rule-8 sum_to, same kernels as unfused
 */
function aSumsKernels(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] {
  const out = n.outputs[n.outputs.length - 1];
  const S: Node = { id: n.id, op: 'sum_to', inputs: [n.inputs[0]], outputs: [out], attrs: { shape: [...shapeOf(g, out)], axes: [0] }, ...(n.path ? { path: n.path } : {}) };
  const shared = GPU_KERNELS.sum_to;
  if (shared === 'cpu') throw new Error('internal: sum_to has no shared GPU kernel');
  return lowerSumToCuda(ctx, g, S) ?? shared(ctx, g, S);
}

/** an fp32 call over 3xTF32 split operands when tf32x3.ts's rule takes it: the call, its split (and chunk-sum) kernels; or why not (`kernels` absent) */
function splitCall(ctx: LowerCtx, g: Graph, n: Node, L: LibraryGemm, y: number, mode: Tf32x3Mode): { gemm?: LibraryGemm; kernels?: KernelSpec[]; chunks?: number; why: string } {
  const a = n.inputs[0], b = n.inputs[1];
  const elems = numel(shapeOf(g, a)) + numel(shapeOf(g, b));
  const rule = tf32x3Rule(L, elems, mode);
  if (!rule.take) return { why: rule.why };
  const lay = tf32x3Layout(L);
  const bias = L.epilogue === 'bias' ? n.inputs[2] : undefined;
  const s = splitKernels(ctx, g, n, { a, b, y, ...(bias !== undefined ? { bias } : {}) }, lay, L.m * L.n * L.batch);
  if (!s) return { why: `${rule.why}; but the split operands exceed 2^32 elements: fp32 FMA` };
  return { gemm: { ...lay.gemm, tf32x3: s.split }, kernels: s.kernels, chunks: lay.chunks, why: rule.why };
}

/** one report line per GEMM node */
export function gemmChoiceLine(c: GemmChoice): string {
  return `node ${c.node} ${c.op}${c.shape ? ` ${c.shape}` : ''}: ${c.path === 'cublaslt' ? 'cuBLASLt' : 'generated kernel'} (${c.why})`;
}
