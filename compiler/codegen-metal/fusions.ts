/**
 * fusions: what the Metal backend's kernels execute fused (the capability set it hands to
 * compiler/ir/fuse.ts; index.ts buildMetal fuses every program with it): a unary fn of any
 * kind in the store of the GEMM-family kernels (linear, matmul, conv2d and its two
 * gradients: compiler/kernels/gemm.ts), when that unary is the only reader of the GEMM's
 * output. An op that runs on the CPU fallback (forced by `fallbackOps`, or the registry entry
 * 'cpu') takes no part in a fusion, since the fallback runs the CPU's kernel for the node,
 * which applies only a relu epilogue. Mixed precision: the 16-bit casts fold into the loads and
 * stores of the shared kernels that widen / round (registry.ts HALF_IO_OPS) where they run on the GPU.
 */
import type { FusionCaps } from '../ir/fuse.js';
import { EPILOGUE_OPS } from '../ir/fuse.js';
import type { OpName } from '../ir/ops.js';
import { UNARY_FNS } from '../ir/scalar_fns.js';
import { GPU_KERNELS, HALF_IO_OPS, type GpuRegistry } from '../kernels/registry.js';

export function metalFusions(fallbackOps: readonly string[] = [], registry: GpuRegistry = GPU_KERNELS): FusionCaps {
  const onCpu = (op: OpName) => fallbackOps.includes(op) || registry[op] === 'cpu';
  const half = HALF_IO_OPS.filter((op) => !onCpu(op));
  const casts = { reads: half, stores: half };
  if (onCpu('unary')) return { casts };
  return { epilogue: { ops: EPILOGUE_OPS.filter((op) => !onCpu(op)), fns: UNARY_FNS, gradReaders: false }, casts };
}
