/** embedding (row gather) and embedding_grad (row scatter-add; repeated ids accumulate). */
import { type OpCtx, type OpImpl, expectShape, fail, input, inShape, shapeAttr } from './kernel.js';

function rowOf(c: OpCtx, id: number, V: number, j: number): number {
  if (!Number.isInteger(id) || id < 0 || id >= V) fail(c, `id ${id} at position ${j} is outside [0, ${V})`);
  return id;
}

/** ids i32 [...], weight [V,D] -> y [..., D] = weight[ids] */
export const embedding: OpImpl = (c: OpCtx) => {
  const ids = input(c, 0), w = input(c, 1), ws = inShape(c, 1);
  if (ws.length !== 2) fail(c, `weight must be [V,D], got [${ws.join(',')}]`);
  const [V, D] = ws;
  expectShape(c, 'output', c.outShapes[0], [...inShape(c, 0), D]);
  const y = c.outputs[0];
  for (let j = 0; j < ids.length; j++) {
    const r = rowOf(c, ids[j], V, j);
    for (let d = 0; d < D; d++) y[j * D + d] = w[r * D + d];
  }
};

/** dweight = zeros [V,D]; dweight[ids[j]] += dy[j] */
export const embedding_grad: OpImpl = (c: OpCtx) => {
  const dy = input(c, 0), ids = input(c, 1), ws = shapeAttr(c, 'w_shape');
  if (ws.length !== 2) fail(c, `w_shape must be [V,D], got [${ws.join(',')}]`);
  const [V, D] = ws;
  expectShape(c, 'dy', inShape(c, 0), [...inShape(c, 1), D]);
  expectShape(c, 'output', c.outShapes[0], ws);
  const dw = c.outputs[0];
  for (let j = 0; j < ids.length; j++) {
    const r = rowOf(c, ids[j], V, j);
    for (let d = 0; d < D; d++) dw[r * D + d] += dy[j * D + d];
  }
};
