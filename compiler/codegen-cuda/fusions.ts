/**
 * fusions: what the CUDA backend's kernels execute fused (the capability set it hands to
 * compiler/ir/fuse.ts; index.ts buildCuda fuses every program with it before lowering): any
 * unary fn in the store of the GEMM-family kernels (gemm_cuda.ts, or the shared
 * compiler/kernels/gemm.ts with `gemm: 'shared'`), when that unary is the only reader of the
 * GEMM's output. Metal's set, minus its CPU-fallback exceptions: CUDA has a kernel for every op.
 */
import { EPILOGUE_OPS, type FusionCaps } from '../ir/fuse.js';
import { UNARY_FNS } from '../ir/scalar_fns.js';

export function cudaFusions(): FusionCaps {
  return { epilogue: { ops: EPILOGUE_OPS, fns: UNARY_FNS, gradReaders: false } };
}
