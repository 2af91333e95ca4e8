/**
 * kernel_types: the plain data one lowered kernel is described by. Produced by the lower_*.ts
 * passes, consumed by library.ts (MSL text), dispatch_plan.ts (launches) and limits.ts.
 */

export type Access = 'r' | 'w' | 'rw';

export interface KernelArg {
  /** generated parameter name used by the body (x, w, y, ...) */
  name: string;
  /** IR value id bound to this argument */
  value: number;
  access: Access;
  /** MSL element type */
  type: 'float' | 'int';
}

export interface KernelVariant {
  /** kernel function name */
  name: string;
  /** MSL body text (statements), rendered from a template */
  body: string;
  tgsize: [number, number, number];
  /** bytes of [[threadgroup(0)]] memory (0: none) */
  tgmem: number;
  /** uses threadgroup_barrier or SIMD-group functions (the emulator then runs threads as fibers) */
  sync: boolean;
}

export interface KernelSpec extends KernelVariant {
  /** IR node this kernel implements (a node may need several kernels) */
  node: number;
  op: string;
  /** what the kernel does, for comments (may contain spec strings: escaped on output) */
  label: string;
  args: KernelArg[];
  /** threadgroups per grid (dispatchThreadgroups) */
  groups: [number, number, number];
  /** simdgroup_float8x8 variant for Apple7+ GPUs: same args and grid */
  mma?: KernelVariant;
}

/** Helper functions a library prelude must contain. */
export type Helper = 'erfc' | 'philox' | 'block_reduce';

export interface LowerCtx {
  /** next kernel number within the program */
  next(): string;
  helpers: Set<Helper>;
}

export const SIMD = 32;
export const ceilDiv = (a: number, b: number) => Math.floor((a + b - 1) / b);
