/**
 * Small seeded generators for the data layer (shuffling, synthetic data). Deterministic
 * across platforms and Node versions: 32-bit integer arithmetic only.
 */

/** splitmix32: a well-mixed 32-bit hash of a 32-bit state, used to derive seeds. */
export function mix32(x: number): number {
  let z = (x + 0x9e3779b9) >>> 0;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
  return (z ^ (z >>> 16)) >>> 0;
}

/** mulberry32 stream: returns a function giving uint32 values. */
export function uint32Stream(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

/** uniform in [0, 1) with 32 bits of resolution */
export function uniformStream(seed: number): () => number {
  const next = uint32Stream(seed);
  return () => next() / 4294967296;
}

/** standard normal samples (Box-Muller) */
export function normalStream(seed: number): () => number {
  const u = uniformStream(seed);
  return () => {
    const u1 = 1 - u(); // (0, 1]
    const u2 = u();
    return Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
  };
}

/** uniform integer in [0, n) without modulo bias */
export function randBelow(next: () => number, n: number): number {
  const limit = 4294967296 - (4294967296 % n);
  for (;;) {
    const v = next();
    if (v < limit) return v % n;
  }
}
