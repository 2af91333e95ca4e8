/**
 * Rounding to the 16-bit float formats, in float64: the one copy of the rounding rule the
 * reference interpreter applies at every `cast` (compiler/ir/op_rules/precision.ts), so it rounds
 * exactly where the backends do. Round to nearest, ties to even; values at or beyond the midpoint
 * between the largest finite number and the next power of two become ±inf; NaN stays NaN; signed
 * zeros keep their sign; subnormals are kept (the formats' gradual underflow, no flush to zero).
 * Consumes and produces plain numbers; relies only on float64 holding every value involved exactly.
 */
import type { HalfDType } from '../ir/graph.js';

export interface HalfFormat {
  /** explicit mantissa bits */
  mantissa: number;
  /** exponent of the smallest normal number */
  minExp: number;
  /** exponent of the largest finite number */
  maxExp: number;
}

export const HALF_FORMATS: Record<HalfDType, HalfFormat> = {
  f16: { mantissa: 10, minExp: -14, maxExp: 15 }, // IEEE binary16: max 65504, min normal 2^-14, min subnormal 2^-24
  bf16: { mantissa: 7, minExp: -126, maxExp: 127 }, // bfloat16: f32's exponent range, 8 significant bits
};

/** the largest finite number of the format */
export function maxFinite(f: HalfFormat): number {
  return (2 - 2 ** -f.mantissa) * 2 ** f.maxExp;
}

/** x rounded to the format (round to nearest, ties to even) */
export function roundToFormat(x: number, f: HalfFormat): number {
  if (!Number.isFinite(x) || x === 0) return x; // NaN, ±inf, ±0
  const a = Math.abs(x);
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e -= 1; // log2 may be off by one next to a power of two
  else if (2 ** (e + 1) <= a) e += 1;
  const quantum = 2 ** (Math.max(e, f.minExp) - f.mantissa); // spacing of the format's numbers around a
  const y = a / quantum; // exact: a power-of-two scaling
  let r = Math.floor(y);
  const frac = y - r; // exact: y < 2^53
  if (frac > 0.5 || (frac === 0.5 && r % 2 === 1)) r += 1;
  const out = r * quantum > maxFinite(f) ? Infinity : r * quantum;
  return x < 0 ? -out : out;
}

export function roundToHalf(x: number, d: HalfDType): number {
  return roundToFormat(x, HALF_FORMATS[d]);
}
