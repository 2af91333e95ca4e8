/** Losses (mean-reduced, scalar outputs) and their gradients with respect to the first input. */
import { type OpCtx, type OpImpl, expectShape, fail, input, inShape, numAttr } from './kernel.js';

/**
 * Logits [N, ..., C] (class dim last) as N rows of C (N = every position) plus the i32 labels
 * [N, ...], each checked to be in [0, C) unless it equals ignore_index; `keep[n]` says whether
 * position n counts, `count` how many do.
 */
export function classRows(c: OpCtx): { N: number; C: number; label: Float64Array; keep: boolean[]; count: number } {
  const s = inShape(c, 0);
  if (s.length < 2) fail(c, `expected [N, ..., C] logits, got [${s.join(',')}]`);
  const C = s[s.length - 1], N = s.slice(0, -1).reduce((a, b) => a * b, 1);
  expectShape(c, 'label', inShape(c, 1), s.slice(0, -1));
  const label = input(c, 1);
  const ignore = c.attrs.ignore_index === undefined ? undefined : numAttr(c, 'ignore_index');
  const keep: boolean[] = [];
  for (let n = 0; n < N; n++) {
    keep.push(label[n] !== ignore);
    if (keep[n] && (!Number.isInteger(label[n]) || label[n] < 0 || label[n] >= C)) fail(c, `label ${label[n]} at row ${n} is outside [0, ${C})`);
  }
  return { N, C, label, keep, count: keep.filter(Boolean).length };
}

function lsAttr(c: OpCtx): number {
  const ls = numAttr(c, 'label_smoothing', 0);
  if (!(ls >= 0 && ls < 1)) fail(c, `label_smoothing must be in [0,1), got ${ls}`);
  return ls;
}

/** log_softmax of row n of x [N,C] into out (length C). */
function logSoftmaxRow(x: Float64Array, n: number, C: number, out: Float64Array): void {
  let max = -Infinity;
  for (let k = 0; k < C; k++) max = Math.max(max, x[n * C + k]);
  let sum = 0;
  for (let k = 0; k < C; k++) sum += Math.exp(x[n * C + k] - max);
  const lse = max + Math.log(sum);
  for (let k = 0; k < C; k++) out[k] = x[n * C + k] - lse;
}

/** loss = mean_n( -(1-ls)*logp[n,label] - ls/C * sum_c logp[n,c] ) */
export const cross_entropy: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), { N, C, label, keep, count } = classRows(c), ls = lsAttr(c);
  expectShape(c, 'loss', c.outShapes[0], []);
  const logp = new Float64Array(C);
  let total = 0;
  for (let n = 0; n < N; n++) {
    if (!keep[n]) continue;
    logSoftmaxRow(x, n, C, logp);
    let all = 0;
    for (let k = 0; k < C; k++) all += logp[k];
    total += -(1 - ls) * logp[label[n]] - (ls / C) * all;
  }
  c.outputs[0][0] = total / count;
};

/** dlogits[n,c] = (softmax[n,c] - (1-ls)*[c == label[n]] - ls/C) / count; 0 on ignored rows */
export const cross_entropy_grad: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), { N, C, label, keep, count } = classRows(c), ls = lsAttr(c);
  expectShape(c, 'output', c.outShapes[0], inShape(c, 0));
  const dx = c.outputs[0], logp = new Float64Array(C);
  for (let n = 0; n < N; n++) {
    if (!keep[n]) continue;
    logSoftmaxRow(x, n, C, logp);
    for (let k = 0; k < C; k++) dx[n * C + k] = (Math.exp(logp[k]) - (k === label[n] ? 1 - ls : 0) - ls / C) / count;
  }
};

/** loss = mean over kept positions of -logp[n,label[n]] */
export const nll: OpImpl = (c: OpCtx) => {
  const logp = input(c, 0), { N, C, label, keep, count } = classRows(c);
  expectShape(c, 'loss', c.outShapes[0], []);
  let total = 0;
  for (let n = 0; n < N; n++) if (keep[n]) total -= logp[n * C + label[n]];
  c.outputs[0][0] = total / count;
};

/** dlogp[n,label[n]] = -1/count on kept positions, 0 elsewhere */
export const nll_grad: OpImpl = (c: OpCtx) => {
  const { N, C, label, keep, count } = classRows(c);
  expectShape(c, 'output', c.outShapes[0], inShape(c, 0));
  for (let n = 0; n < N; n++) if (keep[n]) c.outputs[0][n * C + label[n]] = -1 / count;
};

function sameShapePair(c: OpCtx): [Float64Array, Float64Array] {
  expectShape(c, 'target', inShape(c, 1), inShape(c, 0));
  return [input(c, 0), input(c, 1)];
}

/** loss = mean((pred-target)^2) */
export const mse: OpImpl = (c: OpCtx) => {
  const [p, t] = sameShapePair(c);
  expectShape(c, 'loss', c.outShapes[0], []);
  let s = 0;
  for (let i = 0; i < p.length; i++) { const d = p[i] - t[i]; s += d * d; }
  c.outputs[0][0] = s / p.length;
};

/** dpred = 2*(pred-target)/numel */
export const mse_grad: OpImpl = (c: OpCtx) => {
  const [p, t] = sameShapePair(c);
  expectShape(c, 'output', c.outShapes[0], inShape(c, 0));
  for (let i = 0; i < p.length; i++) c.outputs[0][i] = (2 * (p[i] - t[i])) / p.length;
};

/** loss = mean(max(x,0) - x*t + log(1+exp(-|x|))) */
export const bce_with_logits: OpImpl = (c: OpCtx) => {
  const [x, t] = sameShapePair(c);
  expectShape(c, 'loss', c.outShapes[0], []);
  let s = 0;
  for (let i = 0; i < x.length; i++) s += Math.max(x[i], 0) - x[i] * t[i] + Math.log1p(Math.exp(-Math.abs(x[i])));
  c.outputs[0][0] = s / x.length;
};

/** dlogits = (sigmoid(x) - t)/numel */
export const bce_with_logits_grad: OpImpl = (c: OpCtx) => {
  const [x, t] = sameShapePair(c);
  expectShape(c, 'output', c.outShapes[0], inShape(c, 0));
  for (let i = 0; i < x.length; i++) {
    const s = x[i] >= 0 ? 1 / (1 + Math.exp(-x[i])) : Math.exp(x[i]) / (1 + Math.exp(x[i]));
    c.outputs[0][i] = (s - t[i]) / x.length;
  }
};
