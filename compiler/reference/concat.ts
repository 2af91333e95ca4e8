/** Data movement: concat along an axis, slice (concat's backward), and reshape (a row-major copy). */
import { numel } from '../ir/graph.js';
import { type OpCtx, type OpImpl, expectShape, fail, input, inShape, numAttr, shapeAttr, splitAxis } from './kernel.js';

/** Variadic (2+ inputs); every dim but axis equal. */
export const concat: OpImpl = (c: OpCtx) => {
  const axis = numAttr(c, 'axis');
  if (c.inputs.length < 2) fail(c, `concat needs 2 or more inputs, got ${c.inputs.length}`);
  const shapes = c.inputs.map((_, i) => inShape(c, i));
  const first = shapes[0];
  let total = 0;
  for (const s of shapes) {
    const other = s.map((d, i) => (i === axis ? -1 : d)), want = first.map((d, i) => (i === axis ? -1 : d));
    expectShape(c, 'concat input (axis masked as -1)', other, want);
    total += s[axis];
  }
  const ys = [...first];
  ys[axis] = total;
  expectShape(c, 'output', c.outShapes[0], ys);
  const [outer, , inner] = splitAxis(c, ys, axis);
  const y = c.outputs[0];
  let at = 0; // running offset along axis
  for (let k = 0; k < c.inputs.length; k++) {
    const x = input(c, k), len = shapes[k][axis];
    for (let o = 0; o < outer; o++) {
      for (let a = 0; a < len; a++) {
        const src = (o * len + a) * inner, dst = (o * total + at + a) * inner;
        for (let i = 0; i < inner; i++) y[dst + i] = x[src + i];
      }
    }
    at += len;
  }
};

/** y = x[..., start:start+length, ...] along axis */
export const slice: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), xs = inShape(c, 0);
  const axis = numAttr(c, 'axis'), start = numAttr(c, 'start'), length = numAttr(c, 'length');
  const [outer, size, inner] = splitAxis(c, xs, axis);
  if (start < 0 || length < 1 || start + length > size) fail(c, `slice [${start}, ${start + length}) outside axis of size ${size}`);
  const ys = [...xs];
  ys[axis] = length;
  expectShape(c, 'output', c.outShapes[0], ys);
  const y = c.outputs[0];
  for (let o = 0; o < outer; o++) {
    for (let a = 0; a < length; a++) {
      const src = (o * size + start + a) * inner, dst = (o * length + a) * inner;
      for (let i = 0; i < inner; i++) y[dst + i] = x[src + i];
    }
  }
};

/** Same elements, same order, new shape. */
export const reshape: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), ys = shapeAttr(c, 'shape');
  expectShape(c, 'output', c.outShapes[0], ys);
  if (numel(ys) !== numel(inShape(c, 0))) fail(c, `reshape [${inShape(c, 0).join(',')}] -> [${ys.join(',')}] changes the element count`);
  c.outputs[0].set(x);
};
