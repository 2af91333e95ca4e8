/**
 * dropout / dropout_grad: the keep mask is philox (compiler/ir/philox.ts dropoutKeep)
 * keyed by (seed, stream) with counter (i, counter): the backward op recomputes the
 * forward mask instead of storing it.
 */
import { dropoutKeep } from '../ir/philox.js';
import { type OpCtx, type OpImpl, expectShape, fail, input, inShape, numAttr } from './kernel.js';

function apply(c: OpCtx): void {
  const x = input(c, 0), y = c.outputs[0];
  expectShape(c, 'output', c.outShapes[0], inShape(c, 0));
  const p = numAttr(c, 'p'), stream = numAttr(c, 'stream');
  if (!(p >= 0 && p < 1)) fail(c, `p must be in [0,1), got ${p}`);
  const { seed, counter } = c.scalars;
  const keepScale = 1 - p;
  for (let i = 0; i < x.length; i++) y[i] = dropoutKeep(seed, counter, stream, i, p) ? x[i] / keepScale : 0;
}

/** y[i] = keep(i) ? x[i]/(1-p) : 0 */
export const dropout: OpImpl = apply;
/** dx[i] = keep(i) ? dy[i]/(1-p) : 0, the same mask as the forward */
export const dropout_grad: OpImpl = apply;
