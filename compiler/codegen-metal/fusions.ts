/**
 * fusions: what the Metal backend's kernels execute fused (the capability set it hands to
 * compiler/ir/fuse.ts; index.ts buildMetal fuses every program with it): a unary fn of any
 * kind in the store of the GEMM-family kernels (linear, matmul, conv2d and its two
 * gradients), when that unary is the only reader of the GEMM's output. An op forced onto the
 * CPU fallback (`fallbackOps`) takes no part in a fusion, since the fallback runs the CPU's
 * kernel for the node, which applies only a relu epilogue.
 */
import type { FusionCaps } from '../ir/fuse.js';
import { EPILOGUE_OPS } from '../ir/fuse.js';
import { UNARY_FNS } from '../ir/scalar_fns.js';

export function metalFusions(fallbackOps: readonly string[] = []): FusionCaps {
  if (fallbackOps.includes('unary')) return {};
  return { epilogue: { ops: EPILOGUE_OPS.filter((op) => !fallbackOps.includes(op)), fns: UNARY_FNS, gradReaders: false } };
}
