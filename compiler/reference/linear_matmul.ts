/** linear (forward, over the last dim) and the batched, broadcasting matmul. */
import { broadcastStrides, matmulDims } from '../ir/shapes.js';
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

/**
 * y = op(a) @ op(b) per batch index, op = transpose of the last two dims when transA / transB is
 * set; the leading dims broadcast (a rank-2 operand is shared by every batch).
 */
export const matmul: OpImpl = (c: OpCtx) => {
  const a = input(c, 0), b = input(c, 1);
  const as = inShape(c, 0), bs = inShape(c, 1);
  const tA = c.attrs.transA === true, tB = c.attrs.transB === true;
  const d = matmulDims(as, bs, tA, tB);
  if (!d) fail(c, `op(a) [${as.join(',')}] and op(b) [${bs.join(',')}] do not multiply`);
  const { batch, M, N, K } = d;
  expectShape(c, 'output', c.outShapes[0], [...batch, M, N]);
  // batch offsets of a and b, read through broadcast strides over the batch shape
  const sa = broadcastStrides(as.slice(0, -2), batch), sb = broadcastStrides(bs.slice(0, -2), batch);
  const nb = batch.reduce((x, y) => x * y, 1), idx = new Array<number>(batch.length).fill(0);
  const y = c.outputs[0];
  for (let bi = 0; bi < nb; bi++) {
    let oa = 0, ob = 0;
    idx.forEach((v, j) => { oa += v * sa[j]; ob += v * sb[j]; });
    const A = oa * M * K, B = ob * K * N, Y = bi * M * N;
    // a element (m,k): tA ? a[k*M + m] : a[m*K + k]; b element (k,n): tB ? b[n*K + k] : b[k*N + n]
    for (let m = 0; m < M; m++) {
      for (let n = 0; n < N; n++) {
        let s = 0;
        for (let k = 0; k < K; k++) s += (tA ? a[A + k * M + m] : a[A + m * K + k]) * (tB ? b[B + n * K + k] : b[B + k * N + n]);
        y[Y + m * N + n] = s;
      }
    }
    for (let j = batch.length - 1; j >= 0; j--) {
      if (++idx[j] < batch[j]) break;
      idx[j] = 0;
    }
  }
};
