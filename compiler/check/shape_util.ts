/** Shape helpers for the checker: printing with `N` for the batch dim, broadcasting, window sizes. */
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

/** numpy broadcasting with the symbolic batch dim (N against 1 gives N; N against k > 1 fails). */
export function broadcast(a: readonly number[], b: readonly number[]): number[] | null {
  const r = Math.max(a.length, b.length);
  const out: number[] = [];
  for (let i = 0; i < r; i++) {
    const x = a[a.length - r + i] ?? 1;
    const y = b[b.length - r + i] ?? 1;
    if (x === y) out.push(x);
    else if (x === 1) out.push(y);
    else if (y === 1) out.push(x);
    else return null;
  }
  return out;
}

/** floor((size + 2*pad - dil*(k-1) - 1)/stride) + 1 */
export function windowOut(size: number, k: number, stride: number, pad: number, dil: number): number {
  return Math.floor((size + 2 * pad - dil * (k - 1) - 1) / stride) + 1;
}
