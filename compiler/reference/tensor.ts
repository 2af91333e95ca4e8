/**
 * Tensor algebra in float64: permute, pad, broadcast_to, reduce (sum / mean / max) and the max
 * gradient, masked_fill (mask and / or the causal rule), positions. Exactly as
 * compiler/ir/op_rules/tensor.ts states.
 */
import { broadcastShapes, broadcastStrides } from '../ir/shapes.js';
import { isPermutation, reducedShape } from '../ir/op_rules/tensor.js';
import { type OpCtx, type OpImpl, expectShape, fail, input, inShape, numAttr, shapeAttr, strAttr } from './kernel.js';

/** row-major strides of a shape */
function stridesOf(s: readonly number[]): number[] {
  const out = new Array<number>(s.length).fill(1);
  for (let i = s.length - 2; i >= 0; i--) out[i] = out[i + 1] * s[i + 1];
  return out;
}

/** visit(i, idx) for every index of shape in row-major order (idx is reused: copy it to keep it) */
function forEachIndex(shape: readonly number[], visit: (i: number, idx: number[]) => void): void {
  const total = shape.reduce((a, b) => a * b, 1), idx = new Array<number>(shape.length).fill(0);
  for (let i = 0; i < total; i++) {
    visit(i, idx);
    for (let k = shape.length - 1; k >= 0; k--) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
  }
}

export const permute: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), xs = inShape(c, 0), perm = shapeAttr(c, 'perm');
  if (!isPermutation(perm, xs.length)) fail(c, `perm [${perm.join(',')}] is not a permutation of rank ${xs.length}`);
  const ys = perm.map((p) => xs[p]), st = stridesOf(xs);
  expectShape(c, 'output', c.outShapes[0], ys);
  const y = c.outputs[0];
  forEachIndex(ys, (i, idx) => {
    let off = 0;
    for (let k = 0; k < idx.length; k++) off += idx[k] * st[perm[k]];
    y[i] = x[off];
  });
};

export const pad: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), xs = inShape(c, 0), pads = shapeAttr(c, 'pads'), value = numAttr(c, 'value', 0);
  if (pads.length !== 2 * xs.length || pads.some((p) => !Number.isInteger(p) || p < 0)) fail(c, `bad pads [${pads.join(',')}]`);
  const ys = xs.map((d, i) => d + pads[2 * i] + pads[2 * i + 1]), st = stridesOf(xs);
  expectShape(c, 'output', c.outShapes[0], ys);
  const y = c.outputs[0];
  forEachIndex(ys, (i, idx) => {
    let off = 0, inside = true;
    for (let k = 0; k < idx.length; k++) {
      const j = idx[k] - pads[2 * k];
      if (j < 0 || j >= xs[k]) inside = false;
      off += j * st[k];
    }
    y[i] = inside ? x[off] : value;
  });
};

export const broadcast_to: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), xs = inShape(c, 0), ys = shapeAttr(c, 'shape');
  const b = broadcastShapes(xs, ys);
  if (!b || b.length !== ys.length || b.some((d, i) => d !== ys[i])) fail(c, `[${xs.join(',')}] does not broadcast to [${ys.join(',')}]`);
  expectShape(c, 'output', c.outShapes[0], ys);
  const st = broadcastStrides(xs, ys), y = c.outputs[0];
  forEachIndex(ys, (i, idx) => {
    let off = 0;
    for (let k = 0; k < idx.length; k++) off += idx[k] * st[k];
    y[i] = x[off];
  });
};

/** the reduction groups: for each output element, the input offsets it reduces (row-major order) */
function groups(c: OpCtx, xs: readonly number[]): { axes: number[]; keep: boolean; ys: number[]; out: number[][] } {
  const axes = shapeAttr(c, 'axes'), keep = c.attrs.keepdim === true;
  if (axes.length === 0 || axes.some((a, i) => !Number.isInteger(a) || a < 0 || a >= xs.length || (i > 0 && a <= axes[i - 1]))) fail(c, `bad axes [${axes.join(',')}]`);
  const ys = reducedShape(xs, axes, keep), ks = reducedShape(xs, axes, true), kst = stridesOf(ks);
  const out: number[][] = Array.from({ length: ks.reduce((a, b) => a * b, 1) }, () => []);
  forEachIndex(xs, (i, idx) => {
    let o = 0;
    for (let k = 0; k < idx.length; k++) if (!axes.includes(k)) o += idx[k] * kst[k];
    out[o].push(i);
  });
  return { axes, keep, ys, out };
}

/** the first maximal element of a group (a NaN counts as the maximum: the first NaN) */
function argmaxOf(x: Float64Array, group: number[]): number {
  let best = group[0];
  for (const i of group) {
    if (Number.isNaN(x[best])) break;
    if (Number.isNaN(x[i]) || x[i] > x[best]) best = i;
  }
  return best;
}

export const reduce: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), xs = inShape(c, 0), fn = strAttr(c, 'fn');
  const { ys, out } = groups(c, xs);
  expectShape(c, 'output', c.outShapes[0], ys);
  const y = c.outputs[0];
  out.forEach((g, o) => {
    if (fn === 'max') y[o] = x[argmaxOf(x, g)];
    else if (fn === 'sum' || fn === 'mean') {
      let s = 0;
      for (const i of g) s += x[i];
      y[o] = fn === 'mean' ? s / g.length : s;
    } else fail(c, `unknown reduce fn '${fn}'`);
  });
};

export const reduce_max_grad: OpImpl = (c: OpCtx) => {
  const dy = input(c, 0), x = input(c, 1), xs = inShape(c, 1);
  const { ys, out } = groups(c, xs);
  expectShape(c, 'dy', inShape(c, 0), ys);
  expectShape(c, 'output', c.outShapes[0], xs);
  out.forEach((g, o) => { c.outputs[0][argmaxOf(x, g)] = dy[o]; });
};

export const masked_fill: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), xs = inShape(c, 0), value = numAttr(c, 'value');
  const causal = c.attrs.causal === true, invert = c.attrs.invert === true;
  const mask = c.inputs[1], ms = mask ? inShape(c, 1) : xs;
  const ys = broadcastShapes(xs, ms);
  if (!ys) fail(c, `mask [${ms.join(',')}] does not broadcast with [${xs.join(',')}]`);
  if (!mask && !causal) fail(c, 'needs a mask or causal');
  expectShape(c, 'output', c.outShapes[0], ys);
  const sx = broadcastStrides(xs, ys), sm = broadcastStrides(ms, ys), r = ys.length;
  const T = ys[r - 2], S = ys[r - 1];
  if (causal && (r < 2 || S < T)) fail(c, `causal needs [.., T, S] with S >= T, got [${ys.join(',')}]`);
  const y = c.outputs[0];
  forEachIndex(ys, (i, idx) => {
    let ox = 0, om = 0;
    for (let k = 0; k < r; k++) { ox += idx[k] * sx[k]; om += idx[k] * sm[k]; }
    const hit = (mask !== null && (mask[om] !== 0) !== invert) || (causal && idx[r - 1] > idx[r - 2] + S - T);
    y[i] = hit ? value : x[ox];
  });
};

export const positions: OpImpl = (c: OpCtx) => {
  const xs = inShape(c, 0);
  if (xs.length < 2) fail(c, `positions needs [N, T, ...], got [${xs.join(',')}]`);
  const [N, T] = xs;
  expectShape(c, 'output', c.outShapes[0], [N, T]);
  for (let n = 0; n < N; n++) for (let t = 0; t < T; t++) c.outputs[0][n * T + t] = t;
};
