/** Metrics over logits [N, ..., C] and i32 labels [N, ...] (every position a row; ignore_index left out); scalar outputs. */
import { type OpCtx, type OpImpl, expectShape, fail, input, numAttr } from './kernel.js';
import { classRows } from './losses.js';

/** fraction of rows whose argmax (first maximum on ties) equals the label */
export const accuracy: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), { N, C, label, keep, count } = classRows(c);
  expectShape(c, 'acc', c.outShapes[0], []);
  let hits = 0;
  for (let n = 0; n < N; n++) {
    if (!keep[n]) continue;
    let best = 0;
    for (let k = 1; k < C; k++) if (x[n * C + k] > x[n * C + best]) best = k;
    if (best === label[n]) hits++;
  }
  c.outputs[0][0] = hits / count;
};

/** fraction of rows where fewer than k logits are strictly greater than the label's logit */
export const top_k: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), { N, C, label, keep, count } = classRows(c);
  const k = numAttr(c, 'k');
  if (!Number.isInteger(k) || k < 1) fail(c, `k must be an integer >= 1, got ${k}`);
  expectShape(c, 'acc', c.outShapes[0], []);
  let hits = 0;
  for (let n = 0; n < N; n++) {
    if (!keep[n]) continue;
    const v = x[n * C + label[n]];
    let greater = 0;
    for (let j = 0; j < C; j++) if (x[n * C + j] > v) greater++;
    if (greater < k) hits++;
  }
  c.outputs[0][0] = hits / count;
};
