/** Shape helpers for the checker: printing with `N` for the batch dim (the shape formulas are compiler/ir/shapes.ts), the hint of a same-shape loss mismatch. */
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
/** How to make a same-shape loss's two operands agree (the hint of its shape error). */
export function sameShapeHint(p: { dtype: string; shape: number[] }, t: { dtype: string; shape: number[] }, names: [string, string]): string {
  if (p.dtype !== 'f32' || t.dtype !== 'f32') return `both must be f32: declare the ${names[1]} input as f32 (i32 is for class labels, used by cross_entropy)`;
  const [a, b] = [p.shape, t.shape];
  if (a.length === b.length + 1 && a[a.length - 1] === 1 && b.every((d, i) => d === a[i])) return `${names[0]} has a trailing dimension of 1: declare the ${names[1]} input as f32[${[...b, 1].map((d) => (d < 0 ? 'N' : d)).join(', ')}]`;
  if (b.length === a.length + 1 && b[b.length - 1] === 1 && a.every((d, i) => d === b[i])) return `${names[1]} has a trailing dimension of 1 that ${names[0]} lacks: end the network with linear(1) or declare the ${names[1]} input as f32[${a.map((d) => (d < 0 ? 'N' : d)).join(', ')}]`;
  return `the loss compares element by element: make the network's last layer produce the ${names[1]}'s shape (e.g. linear(${b[b.length - 1] ?? 1}) for f32[N, ${b[b.length - 1] ?? 1}]), or declare the ${names[1]} input with the ${names[0]}'s shape`;
}
