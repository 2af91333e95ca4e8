/** Shape helpers for the checker: printing with `N` for the batch dim (the shape formulas are compiler/ir/shapes.ts). */
import type { DType } from '../ir/graph.js';
import { BATCH } from '../model.js';

export interface TensorInfo {
  dtype: DType;
  shape: number[];
}

export function fmtDims(shape: readonly number[]): string {
  return `[${shape.map((d) => (d === BATCH ? 'N' : String(d))).join(', ')}]`;
}

export function fmtTensor(t: TensorInfo): string {
  return `${t.dtype}${fmtDims(t.shape)}`;
}

/** Per-sample element count (the batch dim excluded). */
export function sampleNumel(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) if (d !== BATCH) n *= d;
  return n;
}
