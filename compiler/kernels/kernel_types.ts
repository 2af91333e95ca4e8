/**
 * kernel_types: the plain data one lowered GPU kernel is described by. Produced by the
 * lowerings of compiler/kernels (elementwise, reduce, gemm, pool, optim), for one dialect;
 * consumed by the backends (codegen-metal: library.ts for the source text, dispatch_plan.ts
 * for the launches, limits.ts, emu_model.ts; codegen-cuda).
 */
import type { Dialect, ElemType } from './dialect.js';

export type Access = 'r' | 'w' | 'rw';

export interface KernelArg {
  /** generated parameter name used by the body (x, w, y, ...) */
  name: string;
  /** IR value id bound to this argument */
  value: number;
  access: Access;
  /** element type (the kernel language's name: float, int, half, bfloat) */
  type: ElemType;
}

export interface KernelVariant {
  /** kernel function name */
  name: string;
  /** body text (statements) in the dialect the program was lowered for */
  body: string;
  tgsize: [number, number, number];
  /** bytes of shared (threadgroup) memory `tg` (0: none) */
  tgmem: number;
  /** uses barriers or SIMD-group functions (the emulator then runs threads as fibers) */
  sync: boolean;
  /** blocks per SM the kernel's registers must allow (CUDA: __launch_bounds__'s second argument; absent: no bound) */
  minBlocks?: number;
}

export interface KernelSpec extends KernelVariant {
  /** IR node this kernel implements (a node may need several kernels) */
  node: number;
  op: string;
  /** what the kernel does, for comments (may contain spec strings: escaped on output) */
  label: string;
  args: KernelArg[];
  /** threadgroups per grid (dispatchThreadgroups; CUDA: blocks) */
  groups: [number, number, number];
  /** 8x8 matrix-unit variant (Metal: simdgroup_float8x8, Apple7+): same args and grid */
  mma?: KernelVariant;
  /**
   * bytes of device scratch the kernel reads or writes through `mpsc_scratch` (CUDA only: split-K
   * partial sums, codegen-cuda/gemm_cuda.ts; layernorm_grad row-chunk sums, reduce_cuda.ts); the backend binds one scratch region after the buffers
   */
  scratch?: number;
  /**
   * CUDA only (codegen-cuda/cublaslt.ts): the node may run as one library GEMM call instead of its
   * generated kernels. On the first kernel of such a node: the call, in column-major BLAS terms.
   */
  library?: LibraryGemm;
  /**
   * CUDA only, on every kernel of a node that carries `library`: 'fallback' kernels run when the
   * library call is unavailable (built without the library, or no algorithm for the shape);
   * 'after' kernels run after the library call only (an epilogue the library cannot apply);
   * 'before' kernels run before it only (the 3xTF32 operand splits, codegen-cuda/tf32x3.ts);
   * 'unfused' kernels compute what the call may not (a matmul's column sums, `a_sums`): they run in the
   * fallback, and after the call ('after' kernels first) unless the call's BGRADB epilogue computes them.
   */
  libraryPart?: 'fallback' | 'after' | 'before' | 'unfused';
}

/** operand element types of a library GEMM */
export type LibraryDType = 'f32' | 'f16' | 'bf16';

/**
 * A GEMM as one cuBLASLt call (column-major, as BLAS sees it): D[m x n] = op(A)[m x k] op(B)[k x n]
 * (+ bias per row of D: the epilogue), `batch` products at the given element strides.
 * A, B, bias and D are argument indices of the kernel carrying it (their device offsets come from
 * that kernel's bindings); C is D with beta 0. Accumulation is fp32 (CUBLAS_COMPUTE_32F: fp32
 * FMA, never plain TF32); A and B are fp32, or both the same 16-bit type; D is fp32 or that 16-bit type.
 * `tf32x3` (fp32 only, codegen-cuda/tf32x3.ts): A and B are the split operands in the scratch region
 * (the description is already over them: k tripled), multiplied with CUBLAS_COMPUTE_32F_FAST_TF32.
 */
export interface LibraryGemm {
  m: number; n: number; k: number;
  transA: boolean; transB: boolean;
  /** the stored matrices' rows x cols (before op) and leading dimensions */
  rowsA: number; colsA: number; lda: number;
  rowsB: number; colsB: number; ldb: number;
  ldd: number;
  batch: number; strideA: number; strideB: number; strideD: number;
  abType: LibraryDType;
  /** D's type: f32, or abType's 16-bit type (the f32 result rounded once: autocast's storage) */
  dType: LibraryDType;
  /** bias: + the bias vector per row of D; bgradb: the bias gradient, op(B) summed over k per column of D, into the bias vector (D's type) */
  epilogue: 'default' | 'bias' | 'bgradb';
  /** argument indices: A, B, D and (epilogue bias / bgradb) the bias vector */
  argA: number; argB: number; argD: number; argBias?: number;
  /** the bias vector is argument argBias of the node's kernel biasKernel (in the node's kernel order; default 0: this one) */
  biasKernel?: number;
  /** 3xTF32: byte offsets of A and B in the scratch region (the 'before' kernels write them there), bytes of all; offD: the K chunks' partial D's (batch = chunks), which an 'after' kernel sums into the output */
  tf32x3?: { offA: number; offB: number; bytes: number; offD?: number };
  /** one line: the product and why this path (reports, logs) */
  what: string;
}

/** Helper functions a library prelude must contain ('mma16', 'wgmma16' (sm_90a), 'mma_tf32x3': CUDA only, codegen-cuda/mma.ts; 'tf32split': CUDA only, codegen-cuda/tf32x3.ts). */
export type Helper = 'erf' | 'erfc' | 'expm1' | 'log1p' | 'philox' | 'block_reduce' | 'mma16' | 'wgmma16' | 'mma_tf32x3' | 'tf32split';

export interface LowerCtx {
  /** next kernel number within the program */
  next(): string;
  helpers: Set<Helper>;
  /** the target the bodies are written for */
  d: Dialect;
}

export const SIMD = 32;
/** shared (threadgroup) memory a kernel may use on every target: Metal's 32 KiB, the smallest limit */
export const MAX_SHARED_BYTES = 32 * 1024;
export const ceilDiv = (a: number, b: number) => Math.floor((a + b - 1) / b);
