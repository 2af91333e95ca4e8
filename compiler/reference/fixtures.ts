/**
 * Test helpers shared by the reference tests and by every backend's kernel tests:
 * a seeded RNG, random tensors, a relative-error measure, a one-op runner over the
 * reference interpreter, and central finite differences.
 */
import { type AttrValue, type DType, type StepScalars, GraphBuilder, numel } from '../ir/graph.js';
import { type Env, runGraph } from './interpret.js';

export type Rng = () => number;

/** mulberry32: a small seeded generator of uniform floats in [0, 1). Same seed, same sequence. */
export function makeRng(seed: number): Rng {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Uniform values in [lo, hi) (default [-1, 1)), row-major, numel(shape) elements. */
export function randomTensor(shape: readonly number[], rng: Rng, lo = -1, hi = 1): Float64Array {
  const a = new Float64Array(numel(shape));
  for (let i = 0; i < a.length; i++) a[i] = lo + (hi - lo) * rng();
  return a;
}

/** Integers uniform in [0, n) (class labels, token ids), stored as float64 like the interpreter's i32 values. */
export function randomInts(shape: readonly number[], n: number, rng: Rng): Float64Array {
  const a = new Float64Array(numel(shape));
  for (let i = 0; i < a.length; i++) a[i] = Math.min(n - 1, Math.floor(rng() * n));
  return a;
}

/**
 * relError(a, b) = max_i |a[i] - b[i]| / max(floor, max_i |b[i]|), floor = 1e-6 by default:
 * the largest absolute difference relative to the largest magnitude of the reference b
 * (so tiny elements of a mostly-large tensor are not over-weighted). NaN anywhere -> Infinity;
 * different lengths throw.
 */
export function relError(a: ArrayLike<number>, b: ArrayLike<number>, floor = 1e-6): number {
  if (a.length !== b.length) throw new Error(`relError: lengths differ (${a.length} vs ${b.length})`);
  let diff = 0, scale = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    if (Number.isNaN(d)) return Infinity;
    diff = Math.max(diff, d);
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return diff / Math.max(floor, scale);
}

export const DEFAULT_SCALARS: StepScalars = { lr: 0.1, t: 1, seed: 1234, counter: 0 };

export interface OpInput {
  shape: number[];
  data: Float64Array;
  dtype?: DType; // default f32
}

/**
 * Run one IR op on the reference interpreter. `inputs` entries may be null for an absent
 * optional input; `outShapes` are the static output shapes. Inputs are passed by reference,
 * so an op that mutates an input (optimizer updates) changes the caller's array.
 */
export function runOp(op: string, inputs: (OpInput | null)[], outShapes: number[][], attrs: Record<string, AttrValue> = {}, scalars: StepScalars = DEFAULT_SCALARS): Float64Array[] {
  const b = new GraphBuilder();
  const env: Env = new Map();
  const ids = inputs.map((x, i) => {
    if (!x) return -1;
    const id = b.value(`in${i}`, x.dtype ?? 'f32', x.shape, 'input');
    env.set(id, x.data);
    return id;
  });
  const outs = b.emit(op, ids, outShapes.map((shape, i) => ({ name: `out${i}`, shape })), attrs);
  runGraph(b.graph, env, scalars);
  return outs.map((id) => env.get(id)!);
}

/** Central differences d f / d x[i] = (f(x + h e_i) - f(x - h e_i)) / 2h; x is restored afterwards. */
export function finiteDiff(f: () => number, x: Float64Array, h = 1e-6): Float64Array {
  const g = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) {
    const x0 = x[i];
    x[i] = x0 + h;
    const fp = f();
    x[i] = x0 - h;
    const fm = f();
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

/** sum(w * y): the random linear functional used by gradient checks (its gradient w.r.t. y is w). */
export function dot(w: ArrayLike<number>, y: ArrayLike<number>): number {
  if (w.length !== y.length) throw new Error(`dot: lengths differ (${w.length} vs ${y.length})`);
  let s = 0;
  for (let i = 0; i < w.length; i++) s += w[i] * y[i];
  return s;
}
