/**
 * float64_math: float64 special functions the reference semantics need and JavaScript's
 * Math lacks (erf, erfc), accurate to about 1e-15 relative, with no cancellation near the
 * tails. Consumed by scalar_fns.ts (evalScalar) and so by the reference interpreter.
 * Relies on nothing but Math.
 */

const INV_SQRT_PI = 1 / Math.sqrt(Math.PI);

/** erf for |z| < 1.5: 2/sqrt(pi) * exp(-z^2) * sum_n (2z^2)^n z / (1*3*...*(2n+1)); all terms share one sign, so no cancellation. */
function erfSeries(z: number): number {
  const z2 = 2 * z * z;
  let term = z, sum = z;
  for (let n = 1; n < 200; n++) {
    term *= z2 / (2 * n + 1);
    sum += term;
    if (Math.abs(term) < 1e-17 * Math.abs(sum)) break;
  }
  return 2 * INV_SQRT_PI * Math.exp(-z * z) * sum;
}

/** erfc for z >= 1.5 (120 terms: converged to ~1 ulp there) by its continued fraction erfc(z) = exp(-z^2)/sqrt(pi) / (z + (1/2)/(z + 1/(z + (3/2)/(z + ...)))). */
function erfcLarge(z: number): number {
  let t = z;
  for (let n = 120; n >= 1; n--) t = z + n / 2 / t;
  return (Math.exp(-z * z) * INV_SQRT_PI) / t;
}

/** Complementary error function, ~1e-15 relative for z > -1.5, ~1e-16 absolute below. */
export function erfc(z: number): number {
  if (Number.isNaN(z)) return NaN;
  if (z >= 1.5) return erfcLarge(z);
  if (z <= -1.5) return 2 - erfcLarge(-z);
  return 1 - erfSeries(z);
}

export function erf(z: number): number {
  if (Number.isNaN(z)) return NaN;
  if (Math.abs(z) < 1.5) return erfSeries(z);
  return z > 0 ? 1 - erfcLarge(z) : erfcLarge(-z) - 1;
}
