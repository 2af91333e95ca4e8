/** linear (forward) and matmul (used by linear backward). */
import { type OpCtx, type OpImpl, expectShape, fail, input, inShape } from './kernel.js';

/** x [M,K], weight [N,K], bias [N] -> y [M,N] = x @ weight^T + bias. Leading dims of x are flattened into M. */
export const linear: OpImpl = (c: OpCtx) => {
  const x = input(c, 0), w = input(c, 1), b = c.inputs[2];
  const xs = inShape(c, 0), ws = inShape(c, 1);
  if (ws.length !== 2) fail(c, `weight must be 2-D [N,K], got [${ws.join(',')}]`);
  const [N, K] = ws;
  if (xs[xs.length - 1] !== K) fail(c, `x last dim ${xs[xs.length - 1]} != weight in-features ${K}`);
  if (b) expectShape(c, 'bias', c.inShapes[2]!, [N]);
  const M = x.length / K;
  const y = c.outputs[0];
  if (y.length !== M * N) fail(c, `output has ${y.length} elements, expected ${M * N}`);
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let s = b ? b[n] : 0;
      for (let k = 0; k < K; k++) s += x[m * K + k] * w[n * K + k];
      y[m * N + n] = s;
    }
  }
};

/** y = op(a) @ op(b), op = transpose when transA / transB is set; 2-D only. */
export const matmul: OpImpl = (c: OpCtx) => {
  const a = input(c, 0), b = input(c, 1);
  const as = inShape(c, 0), bs = inShape(c, 1);
  if (as.length !== 2 || bs.length !== 2) fail(c, `matmul is 2-D only, got [${as.join(',')}] and [${bs.join(',')}]`);
  const tA = c.attrs.transA === true, tB = c.attrs.transB === true;
  const M = tA ? as[1] : as[0], K = tA ? as[0] : as[1];
  const Kb = tB ? bs[1] : bs[0], N = tB ? bs[0] : bs[1];
  if (K !== Kb) fail(c, `inner dims differ: op(a) is [${M},${K}], op(b) is [${Kb},${N}]`);
  expectShape(c, 'output', c.outShapes[0], [M, N]);
  // a element (m,k): tA ? a[k*M + m] : a[m*K + k]; b element (k,n): tB ? b[n*K + k] : b[k*N + n]
  const y = c.outputs[0];
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let s = 0;
      for (let k = 0; k < K; k++) s += (tA ? a[k * M + m] : a[m * K + k]) * (tB ? b[n * K + k] : b[k * N + n]);
      y[m * N + n] = s;
    }
  }
};
