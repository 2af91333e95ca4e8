/**
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"),
 * the counter-based RNG behind dropout. Every backend implements exactly this
 * function, so a seeded run drops the same elements on the reference
 * interpreter, the CPU backend and Metal.
 *
 *   philox_uniform(seed, counter, stream, i) =
 *     philox4x32_10(key = [seed, stream], ctr = [i, counter, 0, 0])[0] / 2^32
 */
const M0 = 0xd2511f53;
const M1 = 0xcd9e8d57;
const W0 = 0x9e3779b9;
const W1 = 0xbb67ae85;

/**
 * High 32 bits of the 64-bit product of a uint32 a = aH * 2^16 + aL (given as its 16-bit halves: the
 * constants M0, M1 are split once) and a uint32 b, exactly: a*b = aH*bH*2^32 + (aH*bL + aL*bH)*2^16 + aL*bL,
 * each partial product below 2^32; the carries out of the low 32 bits are the 16-bit sums in `mid`.
 */
function mulhi(aH: number, aL: number, b: number): number {
  const bL = b & 0xffff, bH = b >>> 16;
  const ll = aL * bL, lh = aL * bH, hl = aH * bL;
  const mid = (ll >>> 16) + (lh & 0xffff) + (hl & 0xffff);
  return (aH * bH + (lh >>> 16) + (hl >>> 16) + (mid >>> 16)) >>> 0;
}

/** philox4x32-10 of key (key0, key1) and counter (c0, c1, c2, c3) into out[0..3] (no allocation: init.ts draws 163 M of these for GPT-2) */
export function philox4x32Into(key0: number, key1: number, c0: number, c1: number, c2: number, c3: number, out: Uint32Array): void {
  let k0 = key0 >>> 0, k1 = key1 >>> 0;
  let x0 = c0 >>> 0, x1 = c1 >>> 0, x2 = c2 >>> 0, x3 = c3 >>> 0;
  for (let r = 0; r < 10; r++) {
    const hi0 = mulhi(M0 >>> 16, M0 & 0xffff, x0), lo0 = Math.imul(M0, x0) >>> 0;
    const hi1 = mulhi(M1 >>> 16, M1 & 0xffff, x2), lo1 = Math.imul(M1, x2) >>> 0;
    const n0 = (hi1 ^ x1 ^ k0) >>> 0;
    const n2 = (hi0 ^ x3 ^ k1) >>> 0;
    x0 = n0; x1 = lo1; x2 = n2; x3 = lo0;
    k0 = (k0 + W0) >>> 0;
    k1 = (k1 + W1) >>> 0;
  }
  out[0] = x0; out[1] = x1; out[2] = x2; out[3] = x3;
}

const scratch = new Uint32Array(4);

export function philox4x32(key0: number, key1: number, c0: number, c1: number, c2: number, c3: number): [number, number, number, number] {
  philox4x32Into(key0, key1, c0, c1, c2, c3, scratch);
  return [scratch[0], scratch[1], scratch[2], scratch[3]];
}

export function philoxUniform(seed: number, counter: number, stream: number, i: number): number {
  return philox4x32(seed, stream, i, counter, 0, 0)[0] / 4294967296;
}

/** keep-mask test used by dropout and dropout_grad (compare in float64 here; backends compare the uint32 against a threshold: see below). */
export function dropoutKeep(seed: number, counter: number, stream: number, i: number, p: number): boolean {
  return philox4x32(seed, stream, i, counter, 0, 0)[0] >= dropoutThreshold(p);
}

/** uint32 threshold: keep iff philox output >= threshold. Backends bake this integer in, so no float rounding differs. */
export function dropoutThreshold(p: number): number {
  return Math.min(4294967295, Math.floor(p * 4294967296));
}
