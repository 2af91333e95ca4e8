/**
 * batchnorm (train / eval / grad) and layernorm (forward / grad).
 * batchnorm statistics are per channel (dim 1) over every other dim: x [N,C] or [N,C,H,W]
 * is viewed as [N, C, S] with S = H*W (or 1), m = N*S elements per channel.
 */
import { type OpCtx, type OpImpl, expectShape, fail, input, inShape, numAttr } from './kernel.js';

function channelView(c: OpCtx, xs: number[]): { N: number; C: number; S: number } {
  if (xs.length !== 2 && xs.length !== 4) fail(c, `x must be [N,C] or [N,C,H,W], got [${xs.join(',')}]`);
  return { N: xs[0], C: xs[1], S: xs.length === 4 ? xs[2] * xs[3] : 1 };
}

export const batchnorm_train: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), w = input(c, 1), b = input(c, 2), rm = input(c, 3), rv = input(c, 4);
  const xs = inShape(c, 0), { N, C, S } = channelView(c, xs);
  for (let i = 1; i <= 4; i++) expectShape(c, `input ${i}`, inShape(c, i), [C]);
  expectShape(c, 'y', c.outShapes[0], xs);
  expectShape(c, 'mean', c.outShapes[1], [C]);
  expectShape(c, 'invstd', c.outShapes[2], [C]);
  const eps = numAttr(c, 'eps', 1e-5), momentum = numAttr(c, 'momentum', 0.1);
  const [y, meanOut, invstdOut] = c.outputs;
  const m = N * S;
  for (let ch = 0; ch < C; ch++) {
    let sum = 0;
    for (let n = 0; n < N; n++) for (let s = 0; s < S; s++) sum += x[(n * C + ch) * S + s];
    const mean = sum / m;
    let sq = 0;
    for (let n = 0; n < N; n++) for (let s = 0; s < S; s++) { const d = x[(n * C + ch) * S + s] - mean; sq += d * d; }
    const variance = sq / m;
    const invstd = 1 / Math.sqrt(variance + eps);
    for (let n = 0; n < N; n++) {
      for (let s = 0; s < S; s++) {
        const j = (n * C + ch) * S + s;
        y[j] = (x[j] - mean) * invstd * w[ch] + b[ch];
      }
    }
    meanOut[ch] = mean;
    invstdOut[ch] = invstd;
    rm[ch] = (1 - momentum) * rm[ch] + momentum * mean;
    // unbiased variance for the running estimate (m/(m-1)); torch rejects m == 1 in training
    rv[ch] = (1 - momentum) * rv[ch] + momentum * (m > 1 ? (variance * m) / (m - 1) : variance);
  }
};

export const batchnorm_eval: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), w = input(c, 1), b = input(c, 2), rm = input(c, 3), rv = input(c, 4);
  const xs = inShape(c, 0), { N, C, S } = channelView(c, xs);
  for (let i = 1; i <= 4; i++) expectShape(c, `input ${i}`, inShape(c, i), [C]);
  expectShape(c, 'y', c.outShapes[0], xs);
  const eps = numAttr(c, 'eps', 1e-5), y = c.outputs[0];
  for (let n = 0; n < N; n++) {
    for (let ch = 0; ch < C; ch++) {
      const sd = Math.sqrt(rv[ch] + eps);
      for (let s = 0; s < S; s++) {
        const j = (n * C + ch) * S + s;
        y[j] = ((x[j] - rm[ch]) / sd) * w[ch] + b[ch];
      }
    }
  }
};

/** xhat=(x-mean)*invstd; dbias=sum dy; dweight=sum dy*xhat; dx = weight*invstd/m * (m*dy - dbias - xhat*dweight) */
export const batchnorm_grad: OpImpl = (c: OpCtx) => {
  const dy = input(c, 0), x = input(c, 1), w = input(c, 2), mean = input(c, 3), invstd = input(c, 4);
  const xs = inShape(c, 1), { N, C, S } = channelView(c, xs);
  expectShape(c, 'dy', inShape(c, 0), xs);
  for (let i = 2; i <= 4; i++) expectShape(c, `input ${i}`, inShape(c, i), [C]);
  expectShape(c, 'dx', c.outShapes[0], xs);
  expectShape(c, 'dweight', c.outShapes[1], [C]);
  expectShape(c, 'dbias', c.outShapes[2], [C]);
  const [dx, dw, db] = c.outputs;
  const m = N * S;
  for (let ch = 0; ch < C; ch++) {
    let sdy = 0, sdyx = 0;
    for (let n = 0; n < N; n++) {
      for (let s = 0; s < S; s++) {
        const j = (n * C + ch) * S + s;
        sdy += dy[j];
        sdyx += dy[j] * (x[j] - mean[ch]) * invstd[ch];
      }
    }
    db[ch] = sdy;
    dw[ch] = sdyx;
    const k = (w[ch] * invstd[ch]) / m;
    for (let n = 0; n < N; n++) {
      for (let s = 0; s < S; s++) {
        const j = (n * C + ch) * S + s;
        const xhat = (x[j] - mean[ch]) * invstd[ch];
        dx[j] = k * (m * dy[j] - sdy - xhat * sdyx);
      }
    }
  }
};

function rows(c: OpCtx, xs: number[]): { R: number; D: number } {
  if (xs.length < 1) fail(c, 'layernorm input must have rank >= 1');
  const D = xs[xs.length - 1];
  let R = 1;
  for (let i = 0; i < xs.length - 1; i++) R *= xs[i];
  return { R, D };
}

export const layernorm: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), xs = inShape(c, 0), { R, D } = rows(c, xs);
  const w = c.inputs[1] ?? new Float64Array(D).fill(1), b = c.inputs[2] ?? new Float64Array(D);
  if (c.inputs[1]) expectShape(c, 'weight', inShape(c, 1), [D]);
  if (c.inputs[2]) expectShape(c, 'bias', inShape(c, 2), [D]);
  expectShape(c, 'y', c.outShapes[0], xs);
  expectShape(c, 'mean', c.outShapes[1], xs.slice(0, -1));
  expectShape(c, 'rstd', c.outShapes[2], xs.slice(0, -1));
  const eps = numAttr(c, 'eps', 1e-5);
  const [y, meanOut, rstdOut] = c.outputs;
  for (let r = 0; r < R; r++) {
    let sum = 0;
    for (let d = 0; d < D; d++) sum += x[r * D + d];
    const mean = sum / D;
    let sq = 0;
    for (let d = 0; d < D; d++) { const t = x[r * D + d] - mean; sq += t * t; }
    const rstd = 1 / Math.sqrt(sq / D + eps);
    for (let d = 0; d < D; d++) y[r * D + d] = (x[r * D + d] - mean) * rstd * w[d] + b[d];
    meanOut[r] = mean;
    rstdOut[r] = rstd;
  }
};

/**
 * xhat = (x-mean)*rstd, g = dy*weight (weight absent: 1); dbias = sum_rows dy; dweight = sum_rows dy*xhat;
 * dx = rstd/D * (D*g - sum_d g - xhat * sum_d g*xhat) per row.
 */
export const layernorm_grad: OpImpl = (c: OpCtx) => {
  const dy = input(c, 0), x = input(c, 1), mean = input(c, 3), rstd = input(c, 4);
  const xs = inShape(c, 1), { R, D } = rows(c, xs);
  const w = c.inputs[2] ?? new Float64Array(D).fill(1);
  expectShape(c, 'dy', inShape(c, 0), xs);
  if (c.inputs[2]) expectShape(c, 'weight', inShape(c, 2), [D]);
  expectShape(c, 'mean', inShape(c, 3), xs.slice(0, -1));
  expectShape(c, 'rstd', inShape(c, 4), xs.slice(0, -1));
  expectShape(c, 'dx', c.outShapes[0], xs);
  expectShape(c, 'dweight', c.outShapes[1], [D]);
  expectShape(c, 'dbias', c.outShapes[2], [D]);
  const [dx, dw, db] = c.outputs;
  for (let r = 0; r < R; r++) {
    let sg = 0, sgx = 0;
    for (let d = 0; d < D; d++) {
      const j = r * D + d;
      const xhat = (x[j] - mean[r]) * rstd[r];
      const g = dy[j] * w[d];
      sg += g;
      sgx += g * xhat;
      db[d] += dy[j];
      dw[d] += dy[j] * xhat;
    }
    for (let d = 0; d < D; d++) {
      const j = r * D + d;
      const xhat = (x[j] - mean[r]) * rstd[r];
      dx[j] = (rstd[r] / D) * (D * dy[j] * w[d] - sg - xhat * sgx);
    }
  }
};
