/**
 * Finite-difference gradient checks: every backward op of ops.ts against its forward op on
 * the reference interpreter. For a forward y = F(x) we take L = sum(w * y) with random w,
 * so dL/dy = w; the backward op fed dy = w must match central differences of L (float64,
 * relative error < 1e-6 by fixtures.relError).
 */
import { describe, expect, it } from 'vitest';
import { BINARY_FNS, UNARY_FNS } from '../compiler/ir/ops.js';
import { type Rng, dot, finiteDiff, makeRng, randomInts, randomTensor, relError, runOp } from '../compiler/reference/fixtures.js';

const TOL = 1e-6;
const f = (shape: number[], data: Float64Array) => ({ shape, data });
const i32 = (shape: number[], data: Float64Array) => ({ shape, data, dtype: 'i32' as const });

function check(analytic: Float64Array, loss: () => number, x: Float64Array): void {
  const numeric = finiteDiff(loss, x);
  const err = relError(analytic, numeric);
  expect(err).toBeLessThan(TOL);
  // a check that could not fail would have an all-zero gradient: make sure there is signal
  expect(Math.max(...numeric.map(Math.abs))).toBeGreaterThan(1e-3);
}

/** distinct values (no ties within 1e-3) in random order: keeps max pooling differentiable under the FD step */
function distinct(n: number, rng: Rng): Float64Array {
  const a = Float64Array.from({ length: n }, (_, i) => (i - n / 2) * 0.01);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

describe('conv2d_grad_input / conv2d_grad_weight / bias via sum_to', () => {
  const cases = [
    { name: 'non-square odd, 3x2 kernel', N: 2, C: 3, H: 5, W: 7, O: 4, KH: 3, KW: 2, s: [1, 1], p: [0, 0], d: [1, 1], g: 1 },
    { name: 'stride 2, padding 1', N: 2, C: 2, H: 7, W: 6, O: 3, KH: 3, KW: 3, s: [2, 2], p: [1, 1], d: [1, 1], g: 1 },
    { name: 'dilation 2, asymmetric stride/padding', N: 1, C: 2, H: 8, W: 9, O: 3, KH: 3, KW: 3, s: [1, 2], p: [2, 1], d: [2, 2], g: 1 },
    { name: 'groups 2, stride 2', N: 2, C: 4, H: 6, W: 5, O: 6, KH: 3, KW: 3, s: [2, 2], p: [1, 1], d: [1, 1], g: 2 },
    { name: 'depthwise (groups = C), multiplier 2', N: 2, C: 3, H: 5, W: 5, O: 6, KH: 3, KW: 3, s: [1, 1], p: [1, 1], d: [1, 1], g: 3 },
    { name: '1x3 kernel, stride [2,1], dilation [1,2]', N: 1, C: 2, H: 5, W: 8, O: 2, KH: 1, KW: 3, s: [2, 1], p: [0, 1], d: [1, 2], g: 1 },
  ];
  for (const k of cases) {
    it(k.name, () => {
      const rng = makeRng(11);
      const OH = Math.floor((k.H + 2 * k.p[0] - k.d[0] * (k.KH - 1) - 1) / k.s[0]) + 1;
      const OW = Math.floor((k.W + 2 * k.p[1] - k.d[1] * (k.KW - 1) - 1) / k.s[1]) + 1;
      const xs = [k.N, k.C, k.H, k.W], ws = [k.O, k.C / k.g, k.KH, k.KW], ys = [k.N, k.O, OH, OW];
      const x = randomTensor(xs, rng), wt = randomTensor(ws, rng), b = randomTensor([k.O], rng), w = randomTensor(ys, rng);
      const attrs = { stride: k.s, padding: k.p, dilation: k.d, groups: k.g };
      const L = () => dot(w, runOp('conv2d', [f(xs, x), f(ws, wt), f([k.O], b)], [ys], attrs)[0]);
      const [dx] = runOp('conv2d_grad_input', [f(ys, w), f(ws, wt)], [xs], { ...attrs, x_shape: xs });
      const [dw] = runOp('conv2d_grad_weight', [f(ys, w), f(xs, x)], [ws], { ...attrs, w_shape: ws });
      const [db] = runOp('sum_to', [f(ys, w)], [[k.O]], { axes: [0, 2, 3] });
      check(dx, L, x);
      check(dw, L, wt);
      check(db, L, b);
    });
  }
});

describe('linear via matmul and sum_to', () => {
  for (const [M, K, N] of [[3, 5, 4], [1, 7, 2], [6, 1, 3]]) {
    it(`x [${M},${K}] weight [${N},${K}]`, () => {
      const rng = makeRng(M * 100 + K * 10 + N);
      const x = randomTensor([M, K], rng), wt = randomTensor([N, K], rng), b = randomTensor([N], rng), w = randomTensor([M, N], rng);
      const L = () => dot(w, runOp('linear', [f([M, K], x), f([N, K], wt), f([N], b)], [[M, N]])[0]);
      const [dx] = runOp('matmul', [f([M, N], w), f([N, K], wt)], [[M, K]], { transA: false, transB: false });
      const [dw] = runOp('matmul', [f([M, N], w), f([M, K], x)], [[N, K]], { transA: true, transB: false });
      const [db] = runOp('sum_to', [f([M, N], w)], [[N]], { axes: [0] });
      check(dx, L, x);
      check(dw, L, wt);
      check(db, L, b);
      // the transB path: x @ weight^T through matmul equals linear without bias
      const [y1] = runOp('matmul', [f([M, K], x), f([N, K], wt)], [[M, N]], { transA: false, transB: true });
      const [y2] = runOp('linear', [f([M, K], x), f([N, K], wt), null], [[M, N]]);
      expect(relError(y1, y2)).toBeLessThan(1e-15);
    });
  }
});

describe('pools', () => {
  const cases = [
    { N: 2, C: 2, H: 6, W: 5, k: [2, 2], s: [2, 2], p: [0, 0] },
    { N: 1, C: 3, H: 7, W: 7, k: [3, 3], s: [2, 2], p: [1, 1] },
    { N: 2, C: 1, H: 5, W: 6, k: [3, 2], s: [1, 1], p: [1, 0] }, // overlapping windows
  ];
  for (const k of cases) {
    const OH = Math.floor((k.H + 2 * k.p[0] - k.k[0]) / k.s[0]) + 1;
    const OW = Math.floor((k.W + 2 * k.p[1] - k.k[1]) / k.s[1]) + 1;
    const xs = [k.N, k.C, k.H, k.W], ys = [k.N, k.C, OH, OW];
    const attrs = { kernel: k.k, stride: k.s, padding: k.p };
    it(`maxpool2d_grad ${JSON.stringify(k)}`, () => {
      const rng = makeRng(5);
      const x = distinct(xs.reduce((a, b) => a * b), rng), w = randomTensor(ys, rng);
      const L = () => dot(w, runOp('maxpool2d', [f(xs, x)], [ys], attrs)[0]);
      const [dx] = runOp('maxpool2d_grad', [f(ys, w), f(xs, x)], [xs], attrs);
      check(dx, L, x);
    });
    it(`avgpool2d_grad ${JSON.stringify(k)}`, () => {
      const rng = makeRng(6);
      const x = randomTensor(xs, rng), w = randomTensor(ys, rng);
      const L = () => dot(w, runOp('avgpool2d', [f(xs, x)], [ys], attrs)[0]);
      const [dx] = runOp('avgpool2d_grad', [f(ys, w)], [xs], { ...attrs, x_shape: xs });
      check(dx, L, x);
    });
  }
  for (const xs of [[2, 3, 4, 5], [1, 2, 3, 3]]) {
    it(`global_avgpool_grad [${xs}]`, () => {
      const rng = makeRng(7);
      const ys = [xs[0], xs[1], 1, 1];
      const x = randomTensor(xs, rng), w = randomTensor(ys, rng);
      const L = () => dot(w, runOp('global_avgpool', [f(xs, x)], [ys])[0]);
      const [dx] = runOp('global_avgpool_grad', [f(ys, w)], [xs], { x_shape: xs });
      check(dx, L, x);
    });
  }
});

describe('unary_grad', () => {
  for (const fn of UNARY_FNS) {
    for (const shape of [[7], [3, 4]]) {
      it(`${fn} [${shape}]`, () => {
        const rng = makeRng(fn.length * 31 + shape.length);
        // keep |x| >= 0.05 so relu / leaky_relu kinks are farther than the FD step; span [-4, 4] for gelu/sigmoid/tanh
        const x = randomTensor(shape, rng, -4, 4).map((v) => (v >= 0 ? 0.05 + v : v - 0.05));
        const w = randomTensor(shape, rng);
        const attrs = { fn, alpha: 0.2 };
        const L = () => dot(w, runOp('unary', [f(shape, x)], [shape], attrs)[0]);
        const [dx] = runOp('unary_grad', [f(shape, w), f(shape, x)], [shape], attrs);
        check(dx, L, x);
      });
    }
  }
});

describe('binary broadcasting, backward through sum_to', () => {
  const pairs: [number[], number[]][] = [
    [[2, 3, 4], [4]],
    [[3, 1], [1, 4]],
    [[2, 1, 5], [3, 1]],
    [[], [2, 3]],
    [[2, 3], [2, 3]],
  ];
  for (const [as, bs] of pairs) {
    for (const fn of BINARY_FNS) {
      it(`${fn} [${as}] with [${bs}]`, () => {
        const rng = makeRng(as.length * 7 + bs.length + fn.length);
        const r = Math.max(as.length, bs.length);
        const ys = Array.from({ length: r }, (_, i) => Math.max(as[as.length - r + i] ?? 1, bs[bs.length - r + i] ?? 1));
        const a = randomTensor(as, rng), b = randomTensor(bs, rng), w = randomTensor(ys, rng);
        const L = () => dot(w, runOp('binary', [f(as, a), f(bs, b)], [ys], { fn })[0]);
        // dy/da: w (add, sub), w*b (mul); dy/db: w (add), -w (sub), w*a (mul); then sum_to the input shape
        const gradA = fn === 'mul' ? runOp('binary', [f(ys, w), f(bs, b)], [ys], { fn: 'mul' })[0] : w;
        const gradB =
          fn === 'mul' ? runOp('binary', [f(ys, w), f(as, a)], [ys], { fn: 'mul' })[0]
          : fn === 'sub' ? runOp('unary', [f(ys, w)], [ys], { fn: 'neg' })[0]
          : w;
        const [da] = runOp('sum_to', [f(ys, gradA)], [as], { shape: as });
        const [db] = runOp('sum_to', [f(ys, gradB)], [bs], { shape: bs });
        check(da, L, a);
        check(db, L, b);
      });
    }
  }
});

describe('softmax_grad / log_softmax_grad', () => {
  const cases: [number[], number][] = [[[3, 5], 1], [[4, 3], 0], [[2, 3, 4], 1], [[2, 2, 5], 2]];
  for (const [shape, axis] of cases) {
    for (const op of ['softmax', 'log_softmax']) {
      it(`${op} [${shape}] axis ${axis}`, () => {
        const rng = makeRng(shape.length * 13 + axis);
        const x = randomTensor(shape, rng, -3, 3), w = randomTensor(shape, rng);
        const L = () => dot(w, runOp(op, [f(shape, x)], [shape], { axis })[0]);
        const [y] = runOp(op, [f(shape, x)], [shape], { axis });
        const [dx] = runOp(`${op}_grad`, [f(shape, w), f(shape, y)], [shape], { axis });
        check(dx, L, x);
      });
    }
  }
});

describe('dropout_grad', () => {
  for (const [shape, p] of [[[4, 6], 0.5], [[3, 2, 5], 0.2]] as [number[], number][]) {
    it(`[${shape}] p=${p}`, () => {
      const rng = makeRng(17);
      const x = randomTensor(shape, rng), w = randomTensor(shape, rng);
      const attrs = { p, stream: 3 };
      const scalars = { lr: 0, t: 1, seed: 99, counter: 5 };
      const L = () => dot(w, runOp('dropout', [f(shape, x)], [shape], attrs, scalars)[0]);
      const [dx] = runOp('dropout_grad', [f(shape, w)], [shape], attrs, scalars);
      check(dx, L, x);
      // same mask: zero exactly where the forward output is zero
      const [y] = runOp('dropout', [f(shape, x)], [shape], attrs, scalars);
      for (let i = 0; i < y.length; i++) expect(dx[i] === 0).toBe(y[i] === 0);
    });
  }
});

describe('batchnorm_grad', () => {
  for (const xs of [[5, 3], [3, 2, 3, 4], [2, 3, 1, 5]]) {
    it(`[${xs}]`, () => {
      const rng = makeRng(xs.length * 19 + xs[1]);
      const C = xs[1];
      const x = randomTensor(xs, rng, -2, 2), wt = randomTensor([C], rng, 0.5, 1.5), b = randomTensor([C], rng), w = randomTensor(xs, rng);
      const attrs = { eps: 1e-5, momentum: 0.1 };
      const fwd = () => runOp('batchnorm_train', [f(xs, x), f([C], wt), f([C], b), f([C], new Float64Array(C)), f([C], new Float64Array(C).fill(1))], [xs, [C], [C]], attrs);
      const L = () => dot(w, fwd()[0]);
      const [, mean, invstd] = fwd();
      const [dx, dw, db] = runOp('batchnorm_grad', [f(xs, w), f(xs, x), f([C], wt), f([C], mean), f([C], invstd)], [xs, [C], [C]]);
      check(dx, L, x);
      check(dw, L, wt);
      check(db, L, b);
    });
  }
});

describe('layernorm_grad', () => {
  for (const xs of [[4, 7], [2, 3, 5], [6]]) {
    it(`[${xs}]`, () => {
      const rng = makeRng(xs.length * 23 + xs[0]);
      const D = xs[xs.length - 1], rs = xs.slice(0, -1);
      const x = randomTensor(xs, rng, -2, 2), wt = randomTensor([D], rng, 0.5, 1.5), b = randomTensor([D], rng), w = randomTensor(xs, rng);
      const fwd = () => runOp('layernorm', [f(xs, x), f([D], wt), f([D], b)], [xs, rs, rs], { eps: 1e-5 });
      const L = () => dot(w, fwd()[0]);
      const [, mean, rstd] = fwd();
      const [dx, dw, db] = runOp('layernorm_grad', [f(xs, w), f(xs, x), f([D], wt), f(rs, mean), f(rs, rstd)], [xs, [D], [D]]);
      check(dx, L, x);
      check(dw, L, wt);
      check(db, L, b);
    });
  }
});

describe('embedding_grad (repeated ids)', () => {
  for (const [idShape, V, D] of [[[2, 5], 4, 3], [[7], 3, 2]] as [number[], number, number][]) {
    it(`ids [${idShape}] V=${V} D=${D}`, () => {
      const rng = makeRng(V * 10 + D);
      const ids = randomInts(idShape, V, rng);
      ids[1] = ids[0]; // at least one repeat
      const ys = [...idShape, D];
      const wt = randomTensor([V, D], rng), w = randomTensor(ys, rng);
      const L = () => dot(w, runOp('embedding', [i32(idShape, ids), f([V, D], wt)], [ys])[0]);
      const [dw] = runOp('embedding_grad', [f(ys, w), i32(idShape, ids)], [[V, D]], { w_shape: [V, D] });
      check(dw, L, wt);
    });
  }
});

describe('slice is the backward of concat', () => {
  const cases: [number[][], number][] = [[[[2, 3], [2, 4]], 1], [[[1, 2, 3], [2, 2, 3], [3, 2, 3]], 0], [[[2, 3, 1], [2, 3, 2]], 2]];
  for (const [shapes, axis] of cases) {
    it(`axis ${axis} of ${JSON.stringify(shapes)}`, () => {
      const rng = makeRng(axis + shapes.length);
      const xsData = shapes.map((s) => randomTensor(s, rng));
      const ys = [...shapes[0]];
      ys[axis] = shapes.reduce((t, s) => t + s[axis], 0);
      const w = randomTensor(ys, rng);
      const L = () => dot(w, runOp('concat', shapes.map((s, k) => f(s, xsData[k])), [ys], { axis })[0]);
      let start = 0;
      shapes.forEach((s, k) => {
        const [dx] = runOp('slice', [f(ys, w)], [s], { axis, start, length: s[axis] });
        check(dx, L, xsData[k]);
        start += s[axis];
      });
    });
  }
});

describe('loss gradients', () => {
  for (const [N, C] of [[4, 5], [1, 3], [7, 2]]) {
    for (const ls of [0, 0.1]) {
      it(`cross_entropy_grad N=${N} C=${C} label_smoothing=${ls}`, () => {
        const rng = makeRng(N * C + ls * 10);
        const x = randomTensor([N, C], rng, -3, 3), label = randomInts([N], C, rng);
        const L = () => runOp('cross_entropy', [f([N, C], x), i32([N], label)], [[]], { label_smoothing: ls })[0][0];
        const [dx] = runOp('cross_entropy_grad', [f([N, C], x), i32([N], label)], [[N, C]], { label_smoothing: ls });
        check(dx, L, x);
      });
    }
    it(`nll_grad N=${N} C=${C}`, () => {
      const rng = makeRng(N + C);
      const x = randomTensor([N, C], rng, -3, 0), label = randomInts([N], C, rng);
      const L = () => runOp('nll', [f([N, C], x), i32([N], label)], [[]])[0][0];
      const [dx] = runOp('nll_grad', [f([N, C], x), i32([N], label)], [[N, C]]);
      check(dx, L, x);
    });
  }
  for (const shape of [[3, 4], [5], [2, 1, 3]]) {
    it(`mse_grad [${shape}]`, () => {
      const rng = makeRng(shape.length * 3);
      const p = randomTensor(shape, rng), t = randomTensor(shape, rng);
      const L = () => runOp('mse', [f(shape, p), f(shape, t)], [[]])[0][0];
      const [dp] = runOp('mse_grad', [f(shape, p), f(shape, t)], [shape]);
      check(dp, L, p);
    });
    it(`bce_with_logits_grad [${shape}]`, () => {
      const rng = makeRng(shape.length * 5);
      const x = randomTensor(shape, rng, -4, 4), t = randomTensor(shape, rng, 0, 1);
      const L = () => runOp('bce_with_logits', [f(shape, x), f(shape, t)], [[]])[0][0];
      const [dx] = runOp('bce_with_logits_grad', [f(shape, x), f(shape, t)], [shape]);
      check(dx, L, x);
    });
  }
});
