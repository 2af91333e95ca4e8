/** softmax / log_softmax along one axis, and their gradients (given the forward output y). */
import { type OpCtx, type OpImpl, expectShape, input, inShape, numAttr, splitAxis } from './kernel.js';

/** Visit each 1-D line along `axis`: calls line(start, stride, size). */
function forEachLine(c: OpCtx, shape: number[], line: (start: number, stride: number, size: number) => void): void {
  const [outer, size, inner] = splitAxis(c, shape, numAttr(c, 'axis'));
  for (let o = 0; o < outer; o++) for (let i = 0; i < inner; i++) line(o * size * inner + i, inner, size);
}

function forward(c: OpCtx, log: boolean): void {
  const x = input(c, 0), xs = inShape(c, 0), y = c.outputs[0];
  expectShape(c, 'output', c.outShapes[0], xs);
  forEachLine(c, xs, (start, stride, size) => {
    let max = -Infinity;
    for (let k = 0; k < size; k++) max = Math.max(max, x[start + k * stride]);
    let sum = 0;
    for (let k = 0; k < size; k++) sum += Math.exp(x[start + k * stride] - max);
    const logSum = Math.log(sum);
    for (let k = 0; k < size; k++) {
      const z = x[start + k * stride] - max;
      y[start + k * stride] = log ? z - logSum : Math.exp(z) / sum;
    }
  });
}

export const softmax: OpImpl = (c) => forward(c, false);
export const log_softmax: OpImpl = (c) => forward(c, true);

/** dx = y * (dy - sum(dy*y, axis)) */
export const softmax_grad: OpImpl = (c: OpCtx) => {
  const dy = input(c, 0), y = input(c, 1), ys = inShape(c, 1), dx = c.outputs[0];
  expectShape(c, 'dy', inShape(c, 0), ys);
  expectShape(c, 'output', c.outShapes[0], ys);
  forEachLine(c, ys, (start, stride, size) => {
    let dot = 0;
    for (let k = 0; k < size; k++) dot += dy[start + k * stride] * y[start + k * stride];
    for (let k = 0; k < size; k++) { const j = start + k * stride; dx[j] = y[j] * (dy[j] - dot); }
  });
};

/** dx = dy - exp(y) * sum(dy, axis) */
export const log_softmax_grad: OpImpl = (c: OpCtx) => {
  const dy = input(c, 0), y = input(c, 1), ys = inShape(c, 1), dx = c.outputs[0];
  expectShape(c, 'dy', inShape(c, 0), ys);
  expectShape(c, 'output', c.outShapes[0], ys);
  forEachLine(c, ys, (start, stride, size) => {
    let sum = 0;
    for (let k = 0; k < size; k++) sum += dy[start + k * stride];
    for (let k = 0; k < size; k++) { const j = start + k * stride; dx[j] = dy[j] - Math.exp(y[j]) * sum; }
  });
};
