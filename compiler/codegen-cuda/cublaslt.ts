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
 * Numerics: CUBLAS_COMPUTE_32F (fp32 FMA, never TF32, as issue 14 asks for matmuls) with fp32
 * output; the bias (linear) through CUBLASLT_EPILOGUE_BIAS (acc + b in fp32, as the generated
 * store). Unary epilogues are NOT given to cuBLASLt: its GELU is the tanh approximation (the
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
import { lowerGemmCuda } from './gemm_cuda.js';
import { gemmParts } from '../kernels/gemm.js';

/** where a GEMM node runs, and why (plain data for reports) */
export interface GemmChoice {
  node: number;
  op: string;
  path: 'cublaslt' | 'generated';
  /** the product: M x N x K (x batch), operand type */
  shape: string;
  why: string;
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

function planOf(ctx: LowerCtx, g: Graph, n: Node): Plan {
  const ins = n.inputs;
  if (n.op === 'linear') {
    const xs = shapeOf(g, ins[0]), K = xs[xs.length - 1], M = numel(xs) / K, N = shapeOf(g, ins[1])[0];
    const t = libType(g, ins[0]);
    const shape = `${M} x ${N} x ${K}${t && t !== 'f32' ? ` ${t}` : ''}`;
    if (!t || libType(g, ins[1]) !== t) return { reason: 'operands of different types', shape };
    const hasBias = ins.length > 2 && ins[2] >= 0;
    return {
      shape,
      gemm: { m: N, n: M, k: K, ...ltOperands(M, N, K, false, true), ldd: N, batch: 1, strideA: 0, strideB: 0, strideD: 0, abType: t, epilogue: hasBias ? 'bias' : 'default' },
    };
  }
  if (n.op === 'matmul') {
    const as = shapeOf(g, ins[0]), bs = shapeOf(g, ins[1]);
    const { ta, tb, batch, M, N, K } = matmulNodeDims(n.id, n.attrs, as, bs);
    const G = numel(batch);
    const t = libType(g, ins[0]);
    const shape = `${M} x ${N} x ${K}${G > 1 ? ` x ${G} batches` : ''}${t && t !== 'f32' ? ` ${t}` : ''}`;
    if (!t || libType(g, ins[1]) !== t) return { reason: 'operands of different types', shape };
    const sa = batchStride(as, batch, M * K), sb = batchStride(bs, batch, K * N);
    if (sa === null || sb === null) return { reason: 'a partially broadcast batch (no strided-batch layout for it)', shape };
    const ops = ltOperands(M, N, K, ta, tb);
    if (G > 1 && sb === 0 && !ta && sa === M * K) {
      // b shared by every batch and a's batches consecutive K x M column-major blocks: one product of G*M columns
      return { shape, gemm: { m: N, n: G * M, k: K, ...ops, colsB: G * M, ldd: N, batch: 1, strideA: 0, strideB: 0, strideD: 0, abType: t, epilogue: 'default' } };
    }
    return { shape, gemm: { m: N, n: M, k: K, ...ops, ldd: N, batch: G, strideA: sb, strideB: sa, strideD: M * N, abType: t, epilogue: 'default' } };
  }
  const gm = gemmParts(ctx, g, n)?.gm;
  return { reason: `a convolution (implicit im2col: no cuBLASLt layout): ${convKernelNote(g, n)}`, shape: gm ? `${gm.M} x ${gm.N} x ${gm.K}${gm.G > 1 ? ` x ${gm.G} groups` : ''}` : '' };
}

/** `epilogue`: the fused unary (its output replaces the GEMM's); `lt`: cuBLASLt may be chosen at all */
export function lowerGemmCudaLt(ctx: LowerCtx, g: Graph, n: Node, epilogue: Node | undefined, lt: boolean): CudaGemmLowering | null {
  const fallback = lowerGemmCuda(ctx, g, n, epilogue);
  if (!fallback) return null;
  const p = planOf(ctx, g, n);
  const generated = (why: string): CudaGemmLowering => ({ kernels: fallback, choice: { node: n.id, op: n.op, path: 'generated', shape: p.shape, why } });
  if (!lt) return generated('cuBLASLt switched off (MPSC_CUDA_CUBLASLT=0) or not in this CUDA toolkit');
  if ('reason' in p) return generated(p.reason);
  const first = fallback[0];
  const nargs = first.args.length;
  const ltArgs = n.op === 'linear' ? { argA: 1, argB: 0, ...(p.gemm.epilogue === 'bias' ? { argBias: 2 } : {}) } : { argA: 1, argB: 0 };
  const epi = epilogue ? ` + ${String(epilogue.attrs.fn)} (in-place kernel after the call)` : '';
  const what = `cuBLASLt ${p.gemm.abType === 'f32' ? 'fp32 FMA (CUBLAS_COMPUTE_32F)' : `${p.gemm.abType} operands, fp32 accumulate (CUBLAS_COMPUTE_32F)`}: ` +
    `D[${p.gemm.m} x ${p.gemm.n}] = ${p.gemm.transA ? 'A^T' : 'A'} ${p.gemm.transB ? 'B^T' : 'B'}, k ${p.gemm.k}${p.gemm.batch > 1 ? `, ${p.gemm.batch} batches` : ''}` +
    `${p.gemm.epilogue === 'bias' ? ', epilogue BIAS' : ''}${epi}`;
  const library: LibraryGemm = { ...p.gemm, ...ltArgs, argD: nargs - 1, what };
  const kernels: KernelSpec[] = fallback.map((k, i) => ({ ...k, libraryPart: 'fallback' as const, ...(i === 0 ? { library } : {}) }));
  if (epilogue) {
    // the fused unary, in place on the call's output (fp32)
    const out = epilogue.outputs[0];
    const body = `  const float v = y[i];\n  y[i] = ${unaryFwd(ctx, epilogue, 'v')};\n`;
    const after = elementwise(ctx, g, n, [argOf(g, 'y', out, 'rw')], numel(shapeOf(g, out)), body, ` [after the cuBLASLt call: unary ${String(epilogue.attrs.fn)} in place]`);
    kernels.push({ ...after, libraryPart: 'after' });
  }
  const why = `the rule: every ${n.op} cuBLASLt can address; ${what.replace(/^cuBLASLt /, '')}; the generated kernel is the fallback`;
  return { kernels, choice: { node: n.id, op: n.op, path: 'cublaslt', shape: p.shape, why } };
}

/** one report line per GEMM node */
export function gemmChoiceLine(c: GemmChoice): string {
  return `node ${c.node} ${c.op}${c.shape ? ` ${c.shape}` : ''}: ${c.path === 'cublaslt' ? 'cuBLASLt' : 'generated kernel'} (${c.why})`;
}
