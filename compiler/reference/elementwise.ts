/**
 * Element-wise ops: unary (+ unary_grad), binary with numpy/PyTorch broadcasting,
 * and sum_to (the inverse of broadcasting; also bias gradients through attrs.axes).
 */
import { broadcastShapes, broadcastStrides } from '../ir/shapes.js';
import { type OpCtx, type OpImpl, expectShape, fail, input, inShape, numAttr, strAttr } from './kernel.js';
import { type UnaryFn, BINARY_FNS_TABLE, UNARY_FNS_TABLE, compileScalar, isBinaryFn, isUnaryFn, unaryFnAttrs } from '../ir/scalar_fns.js';

// ------------------------------------------------------------------ unary (formulas: compiler/ir/scalar_fns.ts)

function fnAttr(c: OpCtx): UnaryFn {
  const fn = strAttr(c, 'fn');
  if (!isUnaryFn(fn)) fail(c, `unknown unary fn '${fn}'`);
  return fn;
}

export const unary: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), fn = fnAttr(c);
  expectShape(c, 'output', c.outShapes[0], inShape(c, 0));
  const f = compileScalar(UNARY_FNS_TABLE[fn].fwd, unaryFnAttrs(fn, (name, d) => numAttr(c, name, d)));
  const vars = { x: 0 };
  const y = c.outputs[0];
  for (let i = 0; i < x.length; i++) {
    vars.x = x[i];
    y[i] = f(vars);
  }
};

export const unary_grad: OpImpl = (c: OpCtx) => {
  const dy = input(c, 0), x = input(c, 1), fn = fnAttr(c);
  expectShape(c, 'dy', inShape(c, 0), inShape(c, 1));
  expectShape(c, 'output', c.outShapes[0], inShape(c, 1));
  const f = compileScalar(UNARY_FNS_TABLE[fn].grad, unaryFnAttrs(fn, (name, d) => numAttr(c, name, d)));
  const vars = { x: 0, g: 0 };
  const dx = c.outputs[0];
  for (let i = 0; i < x.length; i++) {
    vars.x = x[i];
    vars.g = dy[i];
    dx[i] = f(vars);
  }
};

// ------------------------------------------------------------------ broadcasting

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
  const ys = broadcastShapes(as, bs);
  if (!ys) fail(c, `shapes [${as.join(',')}] and [${bs.join(',')}] do not broadcast`);
  expectShape(c, 'output', c.outShapes[0], ys);
  const y = c.outputs[0];
  const sa = broadcastStrides(as, ys), sb = broadcastStrides(bs, ys);
  // Offsets into b, recorded on a first pass; the second pass combines with a.
  const ob = new Int32Array(y.length);
  forEachBroadcast(ys, sb, (i, off) => { ob[i] = off; });
  if (!isBinaryFn(fn)) fail(c, `unknown binary fn '${fn}'`);
  const op = compileScalar(BINARY_FNS_TABLE[fn].fwd, {});
  const vars = { a: 0, b: 0 };
  forEachBroadcast(ys, sa, (i, off) => {
    vars.a = a[off];
    vars.b = b[ob[i]];
    y[i] = op(vars);
  });
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
  const bc = broadcastShapes(target, xs);
  if (!bc || bc.length !== xs.length || !bc.every((d, i) => d === xs[i])) fail(c, `[${xs.join(',')}] is not a broadcast of [${target.join(',')}]`);
  forEachBroadcast(xs, broadcastStrides(target, xs), (i, off) => { y[off] += x[i]; });
};
