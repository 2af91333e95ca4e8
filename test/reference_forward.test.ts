/** Forward ops of the reference interpreter against small values computed by hand. */
import { describe, expect, it } from 'vitest';
import { makeRng, randomTensor, runOp } from '../compiler/reference/fixtures.js';

const f = (shape: number[], data: number[] | Float64Array) => ({ shape, data: Float64Array.from(data) });
const i32 = (shape: number[], data: number[]) => ({ shape, data: Float64Array.from(data), dtype: 'i32' as const });
const close = (got: ArrayLike<number>, want: number[], digits = 12) => {
  expect(got.length).toBe(want.length);
  want.forEach((w, i) => expect(got[i]).toBeCloseTo(w, digits));
};
const seq = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

describe('linear / matmul', () => {
  it('linear with bias', () => {
    const [y] = runOp('linear', [f([2, 2], [1, 2, 3, 4]), f([3, 2], [1, 0, 0, 1, 1, 1]), f([3], [0.5, -1, 0])], [[2, 3]]);
    close(y, [1.5, 1, 3, 3.5, 3, 7]);
  });
  it('matmul with transposes', () => {
    // a = [[1,2],[3,4]], b = [[5,6],[7,8]]; a^T b = [[1*5+3*7, 1*6+3*8],[2*5+4*7, 2*6+4*8]]
    close(runOp('matmul', [f([2, 2], [1, 2, 3, 4]), f([2, 2], [5, 6, 7, 8])], [[2, 2]], { transA: true, transB: false })[0], [26, 30, 38, 44]);
    // a b^T = [[1*5+2*6, 1*7+2*8],[3*5+4*6, 3*7+4*8]]
    close(runOp('matmul', [f([2, 2], [1, 2, 3, 4]), f([2, 2], [5, 6, 7, 8])], [[2, 2]], { transA: false, transB: true })[0], [17, 23, 39, 53]);
    // [1,3] @ [3,2]
    close(runOp('matmul', [f([1, 3], [1, 2, 3]), f([3, 2], [1, 0, 0, 1, 1, 1])], [[1, 2]], { transA: false, transB: false })[0], [4, 5]);
  });
});

describe('conv2d', () => {
  const x9 = f([1, 1, 3, 3], seq(9));
  it('2x2 kernel, bias', () => {
    // y[i,j] = x[i,j] - x[i+1,j+1] + 1 = -4 + 1
    const [y] = runOp('conv2d', [x9, f([1, 1, 2, 2], [1, 0, 0, -1]), f([1], [1])], [[1, 1, 2, 2]], { stride: [1, 1], padding: [0, 0], dilation: [1, 1], groups: 1 });
    close(y, [-3, -3, -3, -3]);
  });
  it('stride 2, padding 1, no bias', () => {
    // windows: x[0..1][0..1]=12, x[0..1][1..2]=16, x[1..2][0..1]=24, x[1..2][1..2]=28
    const [y] = runOp('conv2d', [x9, f([1, 1, 3, 3], new Array(9).fill(1)), null], [[1, 1, 2, 2]], { stride: [2, 2], padding: [1, 1], dilation: [1, 1], groups: 1 });
    close(y, [12, 16, 24, 28]);
  });
  it('dilation 2', () => {
    // corners 1 + 3 + 7 + 9
    const [y] = runOp('conv2d', [x9, f([1, 1, 2, 2], [1, 1, 1, 1]), null], [[1, 1, 1, 1]], { stride: [1, 1], padding: [0, 0], dilation: [2, 2], groups: 1 });
    close(y, [20]);
  });
  it('groups 2 and a 2-channel dense conv', () => {
    // group 0 sees channel 0 only (2*10), group 1 channel 1 only (3*100)
    close(runOp('conv2d', [f([1, 2, 1, 1], [2, 3]), f([2, 1, 1, 1], [10, 100]), null], [[1, 2, 1, 1]], { groups: 2 })[0], [20, 300]);
    // groups 2 with 2 outputs per group: outputs 0,1 read channel 0 and outputs 2,3 read channel 1
    close(runOp('conv2d', [f([1, 2, 1, 1], [2, 3]), f([4, 1, 1, 1], [1, 10, 100, 1000]), null], [[1, 4, 1, 1]], { groups: 2 })[0], [2, 20, 300, 3000]);
    // groups 1: each output sums both channels
    close(runOp('conv2d', [f([1, 2, 1, 1], [2, 3]), f([2, 2, 1, 1], [10, 100, 1, -1]), null], [[1, 2, 1, 1]], { groups: 1 })[0], [320, -1]);
  });
});

describe('conv2d against an independent zero-padded formulation', () => {
  /** pads x explicitly, then y[n][o][i][j] = b[o] + sum over the group's channels of a dilated window dot product */
  function naive(x: Float64Array, xs: number[], w: Float64Array, ws: number[], b: Float64Array, s: number[], p: number[], d: number[], groups: number): number[] {
    const [N, C, H, W] = xs, [O, Cg, KH, KW] = ws;
    const Hp = H + 2 * p[0], Wp = W + 2 * p[1];
    const padded = (n: number, ch: number, i: number, j: number) => {
      const ii = i - p[0], jj = j - p[1];
      return ii < 0 || jj < 0 || ii >= H || jj >= W ? 0 : x[((n * C + ch) * H + ii) * W + jj];
    };
    const out: number[] = [];
    const OH = Math.floor((Hp - d[0] * (KH - 1) - 1) / s[0]) + 1, OW = Math.floor((Wp - d[1] * (KW - 1) - 1) / s[1]) + 1;
    const perGroup = O / groups;
    for (let n = 0; n < N; n++)
      for (let o = 0; o < O; o++)
        for (let i = 0; i < OH; i++)
          for (let j = 0; j < OW; j++) {
            let acc = b[o];
            const group = Math.floor(o / perGroup);
            for (let cg = 0; cg < Cg; cg++)
              for (let u = 0; u < KH; u++)
                for (let v = 0; v < KW; v++) acc += w[((o * Cg + cg) * KH + u) * KW + v] * padded(n, group * Cg + cg, i * s[0] + u * d[0], j * s[1] + v * d[1]);
            out.push(acc);
          }
    return out;
  }
  const cases = [
    { xs: [2, 4, 7, 6], O: 6, K: [3, 3], s: [2, 1], p: [1, 2], d: [1, 2], g: 2 },
    { xs: [1, 3, 5, 9], O: 3, K: [2, 3], s: [1, 3], p: [0, 1], d: [2, 1], g: 3 },
    { xs: [3, 2, 6, 6], O: 5, K: [1, 1], s: [2, 2], p: [0, 0], d: [1, 1], g: 1 },
  ];
  for (const k of cases) {
    it(JSON.stringify(k), () => {
      const rng = makeRng(9);
      const ws = [k.O, k.xs[1] / k.g, ...k.K];
      const x = randomTensor(k.xs, rng), w = randomTensor(ws, rng), b = randomTensor([k.O], rng);
      const want = naive(x, k.xs, w, ws, b, k.s, k.p, k.d, k.g);
      const OH = Math.floor((k.xs[2] + 2 * k.p[0] - k.d[0] * (k.K[0] - 1) - 1) / k.s[0]) + 1;
      const OW = Math.floor((k.xs[3] + 2 * k.p[1] - k.d[1] * (k.K[1] - 1) - 1) / k.s[1]) + 1;
      const [y] = runOp('conv2d', [f(k.xs, x), f(ws, w), f([k.O], b)], [[k.xs[0], k.O, OH, OW]], { stride: k.s, padding: k.p, dilation: k.d, groups: k.g });
      close(y, want);
    });
  }
});

describe('pools', () => {
  const x4 = f([1, 1, 2, 2], [1, 2, 3, 4]);
  const attrs = { kernel: [2, 2], stride: [1, 1], padding: [1, 1] };
  it('maxpool2d with padding (-inf, so negative inputs win over padding)', () => {
    close(runOp('maxpool2d', [x4], [[1, 1, 3, 3]], attrs)[0], [1, 2, 2, 3, 4, 4, 3, 4, 4]);
    close(runOp('maxpool2d', [f([1, 1, 2, 2], [-1, -2, -3, -4])], [[1, 1, 3, 3]], attrs)[0], [-1, -1, -2, -1, -1, -2, -3, -3, -4]);
  });
  it('maxpool2d 2x2 stride 2', () => {
    const x = f([1, 1, 2, 4], [1, 5, 2, 0, 3, 4, 8, 7]);
    close(runOp('maxpool2d', [x], [[1, 1, 1, 2]], { kernel: [2, 2], stride: [2, 2], padding: [0, 0] })[0], [5, 8]);
  });
  it('avgpool2d counts padding in the divisor', () => {
    // (0,0): 1/4; (0,1): (1+2)/4; (1,1): 10/4; (2,2): 4/4
    close(runOp('avgpool2d', [x4], [[1, 1, 3, 3]], attrs)[0], [0.25, 0.75, 0.5, 1, 2.5, 1.5, 0.75, 1.75, 1]);
  });
  it('global_avgpool', () => {
    close(runOp('global_avgpool', [f([1, 2, 1, 2], [1, 2, 3, 5])], [[1, 2, 1, 1]])[0], [1.5, 4]);
  });
  it('maxpool2d_grad routes to the first maximum on ties', () => {
    const [dx] = runOp('maxpool2d_grad', [f([1, 1, 1, 1], [7]), f([1, 1, 2, 2], [3, 3, 3, 3])], [[1, 1, 2, 2]], { kernel: [2, 2], stride: [2, 2], padding: [0, 0] });
    close(dx, [7, 0, 0, 0]);
  });
});

describe('element-wise', () => {
  it('unary fns', () => {
    const x = f([5], [-2, -1, 0, 0.5, 1]);
    close(runOp('unary', [x], [[5]], { fn: 'relu' })[0], [0, 0, 0, 0.5, 1]);
    close(runOp('unary', [x], [[5]], { fn: 'leaky_relu', alpha: 0.1 })[0], [-0.2, -0.1, 0, 0.5, 1]);
    close(runOp('unary', [x], [[5]], { fn: 'leaky_relu' })[0], [-0.02, -0.01, 0, 0.5, 1]); // default alpha 0.01
    // exact gelu: 0.5*x*(1+erf(x/sqrt 2)); erf(1/sqrt2) = 0.6826894921370859, erf(sqrt2) = 0.9544997361036416
    close(runOp('unary', [x], [[5]], { fn: 'gelu' })[0], [-0.04550026389635842, -0.15865525393145707, 0, 0.34573123063700656, 0.8413447460685429], 14);
    close(runOp('unary', [x], [[5]], { fn: 'sigmoid' })[0], [1 / (1 + Math.E ** 2), 1 / (1 + Math.E), 0.5, 1 / (1 + Math.exp(-0.5)), 1 / (1 + Math.exp(-1))]);
    close(runOp('unary', [x], [[5]], { fn: 'tanh' })[0], [-0.9640275800758169, -0.7615941559557649, 0, 0.46211715726000974, 0.7615941559557649]);
    close(runOp('unary', [x], [[5]], { fn: 'neg' })[0], [2, 1, -0, -0.5, -1]);
  });
  it('unary_grad at the kinks: relu\'(0) = 0, leaky_relu\'(0) = alpha', () => {
    close(runOp('unary_grad', [f([2], [1, 1]), f([2], [0, -3])], [[2]], { fn: 'relu' })[0], [0, 0]);
    close(runOp('unary_grad', [f([2], [2, 2]), f([2], [0, 3])], [[2]], { fn: 'leaky_relu', alpha: 0.25 })[0], [0.5, 2]);
  });
  it('binary broadcasting [2,1] with [3]', () => {
    const a = f([2, 1], [1, 2]), b = f([3], [10, 20, 30]);
    close(runOp('binary', [a, b], [[2, 3]], { fn: 'add' })[0], [11, 21, 31, 12, 22, 32]);
    close(runOp('binary', [a, b], [[2, 3]], { fn: 'sub' })[0], [-9, -19, -29, -8, -18, -28]);
    close(runOp('binary', [a, b], [[2, 3]], { fn: 'mul' })[0], [10, 20, 30, 20, 40, 60]);
    close(runOp('binary', [f([], [2]), f([2, 2], [1, 2, 3, 4])], [[2, 2]], { fn: 'mul' })[0], [2, 4, 6, 8]);
  });
  it('sum_to by shape and by axes', () => {
    const x = f([2, 3], seq(6));
    close(runOp('sum_to', [x], [[3]], { shape: [3] })[0], [5, 7, 9]);
    close(runOp('sum_to', [x], [[2, 1]], { shape: [2, 1] })[0], [6, 15]);
    close(runOp('sum_to', [x], [[]], { shape: [] })[0], [21]);
    close(runOp('sum_to', [x], [[2]], { axes: [1] })[0], [6, 15]);
    close(runOp('sum_to', [f([2, 2, 2], seq(8))], [[2]], { axes: [0, 2] })[0], [1 + 2 + 5 + 6, 3 + 4 + 7 + 8]);
  });
});

describe('softmax / log_softmax', () => {
  it('along the last axis', () => {
    const x = f([1, 3], [0, Math.log(2), Math.log(3)]);
    close(runOp('softmax', [x], [[1, 3]], { axis: 1 })[0], [1 / 6, 2 / 6, 3 / 6]);
    close(runOp('log_softmax', [x], [[1, 3]], { axis: 1 })[0], [Math.log(1 / 6), Math.log(2 / 6), Math.log(3 / 6)]);
  });
  it('along axis 0, stable for large inputs', () => {
    close(runOp('softmax', [f([2, 2], [1000, 0, 1000 + Math.log(3), 0])], [[2, 2]], { axis: 0 })[0], [0.25, 0.5, 0.75, 0.5]);
  });
});

describe('dropout', () => {
  const n = 20000, p = 0.3;
  const x = f([n], new Array(n).fill(2));
  const attrs = { p, stream: 1 };
  it('keeps about 1-p of the elements and scales them by 1/(1-p)', () => {
    const [y] = runOp('dropout', [x], [[n]], attrs, { lr: 0, t: 1, seed: 42, counter: 0 });
    let kept = 0;
    for (const v of y) {
      if (v !== 0) { kept++; expect(v).toBeCloseTo(2 / 0.7, 14); }
    }
    // binomial sd = sqrt(n p (1-p)) / n ~ 0.0032; allow 4 sd
    expect(Math.abs(kept / n - 0.7)).toBeLessThan(0.013);
  });
  it('is deterministic in (seed, counter, stream) and changes with each', () => {
    const run = (seed: number, counter: number, stream: number) => runOp('dropout', [x], [[n]], { p, stream }, { lr: 0, t: 1, seed, counter })[0];
    const a = run(42, 0, 1);
    expect(run(42, 0, 1)).toEqual(a);
    for (const other of [run(43, 0, 1), run(42, 1, 1), run(42, 0, 2)]) expect(other).not.toEqual(a);
  });
  it('p = 0 keeps everything unchanged', () => {
    const [y] = runOp('dropout', [f([4], [1, -2, 3, 4])], [[4]], { p: 0, stream: 0 });
    close(y, [1, -2, 3, 4]);
  });
});

describe('normalisation', () => {
  it('batchnorm_train: batch stats, outputs and running-stat updates', () => {
    const rm = Float64Array.from([0]), rv = Float64Array.from([1]);
    const [y, mean, invstd] = runOp('batchnorm_train', [f([4, 1], [1, 2, 3, 4]), f([1], [2]), f([1], [0.5]), { shape: [1], data: rm }, { shape: [1], data: rv }], [[4, 1], [1], [1]], { eps: 1e-5, momentum: 0.1 });
    const is = 1 / Math.sqrt(1.25 + 1e-5); // var of 1..4 = 1.25
    close(mean, [2.5]);
    close(invstd, [is]);
    close(y, [-1.5, -0.5, 0.5, 1.5].map((d) => d * is * 2 + 0.5));
    close(rm, [0.25]); // 0.9*0 + 0.1*2.5
    close(rv, [0.9 + 0.1 * (1.25 * 4) / 3]); // unbiased var 5/3
  });
  it('batchnorm_train on [N,C,H,W] uses per-channel stats over N,H,W', () => {
    // channel 0: [1,3 | 5,7] mean 4; channel 1: all 10 -> mean 10
    const x = f([2, 2, 1, 2], [1, 3, 10, 10, 5, 7, 10, 10]);
    const ones = () => f([2], [1, 1]), zeros = () => f([2], [0, 0]);
    const [, mean] = runOp('batchnorm_train', [x, ones(), zeros(), zeros(), ones()], [[2, 2, 1, 2], [2], [2]], { eps: 1e-5, momentum: 0.1 });
    close(mean, [4, 10]);
  });
  it('batchnorm_eval', () => {
    // (3-1)/sqrt(3+1)*2 + 1 = 3
    close(runOp('batchnorm_eval', [f([1, 1], [3]), f([1], [2]), f([1], [1]), f([1], [1]), f([1], [3])], [[1, 1]], { eps: 1 })[0], [3]);
  });
  it('layernorm over the last dim', () => {
    const r = 1 / Math.sqrt(1 + 1e-5);
    const [y, mean, rstd] = runOp('layernorm', [f([2, 2], [1, 3, 0, 0]), f([2], [1, 2]), f([2], [0, 1])], [[2, 2], [2], [2]], { eps: 1e-5 });
    close(mean, [2, 0]);
    close(rstd, [r, 1 / Math.sqrt(1e-5)]);
    close(y, [-r, 2 * r + 1, 0, 1]);
  });
});

describe('embedding / concat / slice / reshape', () => {
  it('embedding gathers rows', () => {
    close(runOp('embedding', [i32([3], [2, 0, 2]), f([3, 2], [1, 2, 3, 4, 5, 6])], [[3, 2]])[0], [5, 6, 1, 2, 5, 6]);
  });
  it('embedding_grad adds repeated ids', () => {
    close(runOp('embedding_grad', [f([3, 2], [1, 1, 2, 2, 3, 3]), i32([3], [2, 0, 2])], [[3, 2]], { w_shape: [3, 2] })[0], [2, 2, 0, 0, 4, 4]);
  });
  it('concat along axes 0 and 1 (three inputs)', () => {
    close(runOp('concat', [f([1, 2], [1, 2]), f([1, 1], [3]), f([1, 1], [4])], [[1, 4]], { axis: 1 })[0], [1, 2, 3, 4]);
    close(runOp('concat', [f([1, 2], [1, 2]), f([2, 2], [3, 4, 5, 6])], [[3, 2]], { axis: 0 })[0], [1, 2, 3, 4, 5, 6]);
  });
  it('slice', () => {
    close(runOp('slice', [f([2, 3], seq(6))], [[2, 2]], { axis: 1, start: 1, length: 2 })[0], [2, 3, 5, 6]);
  });
  it('reshape keeps row-major order', () => {
    close(runOp('reshape', [f([2, 3], seq(6))], [[3, 2]], { shape: [3, 2] })[0], seq(6));
  });
});

describe('losses and metrics', () => {
  it('cross_entropy with and without label smoothing', () => {
    // logits [ln 3, 0] -> p = [3/4, 1/4]
    const x = f([1, 2], [Math.log(3), 0]), l = i32([1], [0]);
    close(runOp('cross_entropy', [x, l], [[]])[0], [-Math.log(0.75)]);
    // ls = 0.2, C = 2: -(0.8) ln(3/4) - 0.1 (ln(3/4) + ln(1/4)) = -0.9 ln(3/4) - 0.1 ln(1/4) = 0.397...
    close(runOp('cross_entropy', [x, l], [[]], { label_smoothing: 0.2 })[0], [-0.9 * Math.log(0.75) - 0.1 * Math.log(0.25)]);
    expect(runOp('cross_entropy', [x, l], [[]], { label_smoothing: 0.2 })[0][0]).toBeCloseTo(0.39754, 5);
    // mean over rows: equal logits give ln 2 per row
    close(runOp('cross_entropy', [f([2, 2], [0, 0, 5, 5]), i32([2], [1, 0])], [[]])[0], [Math.LN2]);
  });
  it('cross_entropy_grad with label smoothing', () => {
    // (p - (1-ls)*onehot - ls/C) / N with p = [3/4, 1/4], ls = 0.2
    close(runOp('cross_entropy_grad', [f([1, 2], [Math.log(3), 0]), i32([1], [0])], [[1, 2]], { label_smoothing: 0.2 })[0], [0.75 - 0.8 - 0.1, 0.25 - 0.1]);
  });
  it('nll, mse, bce_with_logits', () => {
    close(runOp('nll', [f([2, 2], [-1, -2, -3, -4]), i32([2], [1, 0])], [[]])[0], [2.5]);
    close(runOp('mse', [f([2], [1, 2]), f([2], [0, 0])], [[]])[0], [2.5]);
    // x = 0, t = 1: ln 2; x = 2, t = 0: 2 + ln(1 + e^-2)
    close(runOp('bce_with_logits', [f([2], [0, 2]), f([2], [1, 0])], [[]])[0], [(Math.LN2 + 2 + Math.log1p(Math.exp(-2))) / 2]);
    close(runOp('nll_grad', [f([2, 2], [-1, -2, -3, -4]), i32([2], [1, 0])], [[2, 2]])[0], [0, -0.5, -0.5, 0]);
    close(runOp('mse_grad', [f([2], [1, 2]), f([2], [0, 0])], [[2]])[0], [1, 2]);
    close(runOp('bce_with_logits_grad', [f([2], [0, 0]), f([2], [1, 0])], [[2]])[0], [-0.25, 0.25]);
  });
  it('accuracy: argmax with the first maximum on ties', () => {
    close(runOp('accuracy', [f([3, 2], [1, 2, 3, 1, 1, 1]), i32([3], [1, 1, 0])], [[]])[0], [2 / 3]);
  });
  it('top_k counts strictly greater logits', () => {
    const x = f([2, 3], [3, 2, 1, 1, 2, 3]), l = i32([2], [1, 0]);
    close(runOp('top_k', [x, l], [[]], { k: 1 })[0], [0]);
    close(runOp('top_k', [x, l], [[]], { k: 2 })[0], [0.5]);
    close(runOp('top_k', [x, l], [[]], { k: 3 })[0], [1]);
    close(runOp('top_k', [f([1, 3], [1, 1, 1]), i32([1], [2])], [[]], { k: 1 })[0], [1]);
  });
});

it('randomTensor is reproducible for a seed', () => {
  expect(randomTensor([5], makeRng(3))).toEqual(randomTensor([5], makeRng(3)));
  expect(randomTensor([5], makeRng(3))).not.toEqual(randomTensor([5], makeRng(4)));
});
