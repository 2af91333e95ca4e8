/**
 * Element-wise ops: unary (+ unary_grad), binary with numpy/PyTorch broadcasting,
 * and sum_to (the inverse of broadcasting; also bias gradients through attrs.axes).
 */
import { type OpCtx, type OpImpl, expectShape, fail, input, inShape, numAttr, strAttr } from './kernel.js';
import { UNARY_FNS } from '../ir/ops.js';

// ------------------------------------------------------------------ erf (for exact gelu)

const SQRT1_2 = Math.SQRT1_2;
const INV_SQRT_PI = 1 / Math.sqrt(Math.PI);
const INV_SQRT_2PI = 1 / Math.sqrt(2 * Math.PI);

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

// ------------------------------------------------------------------ unary

type UFn = (typeof UNARY_FNS)[number];

function fnAttr(c: OpCtx): UFn {
  const fn = strAttr(c, 'fn');
  if (!(UNARY_FNS as readonly string[]).includes(fn)) fail(c, `unknown unary fn '${fn}'`);
  return fn as UFn;
}

function sigmoid(x: number): number {
  if (x >= 0) return 1 / (1 + Math.exp(-x));
  const e = Math.exp(x);
  return e / (1 + e);
}

/** f(x) for each unary fn (alpha: leaky_relu negative slope). */
export function unaryValue(fn: UFn, x: number, alpha: number): number {
  switch (fn) {
    case 'relu': return Math.max(x, 0); // NaN stays NaN, as in torch
    case 'leaky_relu': return x > 0 ? x : alpha * x;
    case 'gelu': return 0.5 * x * erfc(-x * SQRT1_2);
    case 'sigmoid': return sigmoid(x);
    case 'tanh': return Math.tanh(x);
    case 'neg': return -x;
  }
}

/** f'(x) for each unary fn; relu'(0) = 0, leaky_relu'(0) = alpha. */
export function unaryDerivative(fn: UFn, x: number, alpha: number): number {
  switch (fn) {
    case 'relu': return x > 0 ? 1 : 0;
    case 'leaky_relu': return x > 0 ? 1 : alpha;
    case 'gelu': return 0.5 * erfc(-x * SQRT1_2) + x * INV_SQRT_2PI * Math.exp(-0.5 * x * x);
    case 'sigmoid': { const s = sigmoid(x); return s * (1 - s); }
    case 'tanh': { const t = Math.tanh(x); return 1 - t * t; }
    case 'neg': return -1;
  }
}

export const unary: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), fn = fnAttr(c), alpha = numAttr(c, 'alpha', 0.01);
  expectShape(c, 'output', c.outShapes[0], inShape(c, 0));
  const y = c.outputs[0];
  for (let i = 0; i < x.length; i++) y[i] = unaryValue(fn, x[i], alpha);
};

export const unary_grad: OpImpl = (c: OpCtx) => {
  const dy = input(c, 0), x = input(c, 1), fn = fnAttr(c), alpha = numAttr(c, 'alpha', 0.01);
  expectShape(c, 'dy', inShape(c, 0), inShape(c, 1));
  expectShape(c, 'output', c.outShapes[0], inShape(c, 1));
  const dx = c.outputs[0];
  for (let i = 0; i < x.length; i++) dx[i] = dy[i] * unaryDerivative(fn, x[i], alpha);
};

// ------------------------------------------------------------------ broadcasting

/** numpy broadcast of two shapes, or null when they do not broadcast. */
export function broadcastShape(a: readonly number[], b: readonly number[]): number[] | null {
  const r = Math.max(a.length, b.length);
  const out: number[] = [];
  for (let i = 0; i < r; i++) {
    const da = a[a.length - r + i] ?? 1, db = b[b.length - r + i] ?? 1;
    if (da !== db && da !== 1 && db !== 1) return null;
    out.push(da === 1 ? db : da);
  }
  return out;
}

/**
 * Strides to read a tensor of shape `small` while iterating over `big` (small aligned at
 * the right): stride 0 on dims that are stretched (size 1 in small) or absent from small.
 */
function broadcastStrides(small: readonly number[], big: readonly number[]): number[] {
  const r = big.length, off = r - small.length;
  const strides = new Array<number>(r).fill(0);
  let s = 1;
  for (let i = small.length - 1; i >= 0; i--) {
    strides[off + i] = small[i] === 1 && big[off + i] !== 1 ? 0 : s;
    s *= small[i];
  }
  return strides;
}

/** Calls visit(flatIndexInBig, offsetInSmall) for every element of `big`, in row-major order. */
function forEachBroadcast(big: readonly number[], strides: number[], visit: (i: number, off: number) => void): void {
  const r = big.length;
  const idx = new Array<number>(r).fill(0);
  let total = 1;
  for (const d of big) total *= d;
  let off = 0;
  for (let i = 0; i < total; i++) {
    visit(i, off);
    for (let k = r - 1; k >= 0; k--) {
      idx[k]++;
      off += strides[k];
      if (idx[k] < big[k]) break;
      off -= strides[k] * big[k];
      idx[k] = 0;
    }
  }
}

export const binary: OpImpl = (c: OpCtx) => {
  const a = input(c, 0), b = input(c, 1), as = inShape(c, 0), bs = inShape(c, 1);
  const fn = strAttr(c, 'fn');
  const ys = broadcastShape(as, bs);
  if (!ys) fail(c, `shapes [${as.join(',')}] and [${bs.join(',')}] do not broadcast`);
  expectShape(c, 'output', c.outShapes[0], ys);
  const y = c.outputs[0];
  const sa = broadcastStrides(as, ys), sb = broadcastStrides(bs, ys);
  // Offsets into b, recorded on a first pass; the second pass combines with a.
  const ob = new Int32Array(y.length);
  forEachBroadcast(ys, sb, (i, off) => { ob[i] = off; });
  let op: (u: number, v: number) => number;
  if (fn === 'add') op = (u, v) => u + v;
  else if (fn === 'sub') op = (u, v) => u - v;
  else if (fn === 'mul') op = (u, v) => u * v;
  else fail(c, `unknown binary fn '${fn}'`);
  forEachBroadcast(ys, sa, (i, off) => { y[i] = op(a[off], b[ob[i]]); });
};

export const sum_to: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), xs = inShape(c, 0), ys = c.outShapes[0], y = c.outputs[0];
  const axes = c.attrs.axes;
  if (axes !== undefined) {
    if (!Array.isArray(axes)) fail(c, `attr 'axes' must be number[]`);
    for (const a of axes) if (!Number.isInteger(a) || a < 0 || a >= xs.length) fail(c, `axis ${a} out of range for rank ${xs.length}`);
    const kept = xs.filter((_, i) => !axes.includes(i));
    expectShape(c, 'output', ys, kept);
    // read y through strides that are 0 on the summed axes
    const strides = new Array<number>(xs.length).fill(0);
    let s = 1;
    for (let i = xs.length - 1; i >= 0; i--) {
      if (axes.includes(i)) continue;
      strides[i] = s;
      s *= xs[i];
    }
    forEachBroadcast(xs, strides, (i, off) => { y[off] += x[i]; });
    return;
  }
  const target = c.attrs.shape;
  if (!Array.isArray(target)) fail(c, `attr 'shape' (number[]) or 'axes' is required`);
  expectShape(c, 'output', ys, target);
  const bc = broadcastShape(target, xs);
  if (!bc || bc.length !== xs.length || !bc.every((d, i) => d === xs[i])) fail(c, `[${xs.join(',')}] is not a broadcast of [${target.join(',')}]`);
  forEachBroadcast(xs, broadcastStrides(target, xs), (i, off) => { y[off] += x[i]; });
};
