/**
 * Op-level cases for the Metal kernel tests: every IR op (forward, backward, optimizer) at
 * several shapes, including sizes that are not multiples of the 16x16 GEMM tile or the
 * 32-wide SIMD-group. Deterministic (seeded).
 */
import { makeRng, randomInts, randomTensor } from '../compiler/reference/fixtures.js';
import { UNARY_FNS } from '../compiler/ir/ops.js';
import { attrVariants, samplePoints } from './unary_cases.js';
import { GraphBuilder, type Program } from '../compiler/ir/graph.js';
import { opCase, type OpCase } from './metal_harness.js';

export function allOpCases(): OpCase[] {
  const rng = makeRng(20261202);
  const f = (shape: number[], lo = -1, hi = 1) => ({ shape, data: randomTensor(shape, rng, lo, hi) });
  const ids = (shape: number[], n: number) => ({ shape, data: randomInts(shape, n, rng), dtype: 'i32' as const });
  const cases: OpCase[] = [];
  let k = 0;
  const add = (op: string, inputs: Parameters<typeof opCase>[2], outs: number[][], attrs: Parameters<typeof opCase>[4] = {}) =>
    cases.push(opCase(`c${k++}_${op}`, op, inputs, outs, attrs));

  for (const [M, K, N, bias] of [[5, 7, 3, true], [33, 20, 17, true], [16, 32, 16, true], [9, 18, 40, false]] as const)
    add('linear', [f([M, K]), f([N, K]), bias ? f([N]) : null], [[M, N]]);
  for (const [M, K, N] of [[17, 9, 21], [8, 33, 5]])
    for (const transA of [false, true])
      for (const transB of [false, true])
        add('matmul', [f(transA ? [K, M] : [M, K]), f(transB ? [N, K] : [K, N])], [[M, N]], { transA, transB });

  const convs = [
    { x: [2, 3, 9, 8], w: [4, 3, 3, 3], stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups: 1 },
    { x: [2, 3, 11, 10], w: [5, 3, 3, 2], stride: [2, 2], padding: [0, 1], dilation: [2, 1], groups: 1 },
    { x: [1, 4, 7, 7], w: [6, 2, 3, 3], stride: [1, 2], padding: [1, 0], dilation: [1, 1], groups: 2 },
    { x: [3, 1, 12, 12], w: [6, 1, 5, 5], stride: [1, 1], padding: [0, 0], dilation: [1, 1], groups: 1 },
  ];
  for (const c of convs) {
    const OH = Math.floor((c.x[2] + 2 * c.padding[0] - c.dilation[0] * (c.w[2] - 1) - 1) / c.stride[0]) + 1;
    const OW = Math.floor((c.x[3] + 2 * c.padding[1] - c.dilation[1] * (c.w[3] - 1) - 1) / c.stride[1]) + 1;
    const y = [c.x[0], c.w[0], OH, OW];
    const attrs = { stride: c.stride, padding: c.padding, dilation: c.dilation, groups: c.groups };
    add('conv2d', [f(c.x), f(c.w), f([c.w[0]])], [y], attrs);
    add('conv2d_grad_input', [f(y), f(c.w)], [c.x], { ...attrs, x_shape: c.x });
    add('conv2d_grad_weight', [f(y), f(c.x)], [c.w], { ...attrs, w_shape: c.w });
  }

  const pools = [
    { x: [2, 3, 9, 8], kernel: [2, 2], stride: [2, 2], padding: [0, 0] },
    { x: [1, 2, 7, 9], kernel: [3, 3], stride: [2, 2], padding: [1, 1] },
    { x: [2, 2, 6, 6], kernel: [3, 2], stride: [1, 2], padding: [1, 0] },
  ];
  for (const p of pools) {
    const OH = Math.floor((p.x[2] + 2 * p.padding[0] - p.kernel[0]) / p.stride[0]) + 1;
    const OW = Math.floor((p.x[3] + 2 * p.padding[1] - p.kernel[1]) / p.stride[1]) + 1;
    const y = [p.x[0], p.x[1], OH, OW];
    const attrs = { kernel: p.kernel, stride: p.stride, padding: p.padding };
    add('maxpool2d', [f(p.x)], [y], attrs);
    add('avgpool2d', [f(p.x)], [y], attrs);
    add('maxpool2d_grad', [f(y), f(p.x)], [p.x], attrs);
    add('avgpool2d_grad', [f(y)], [p.x], { ...attrs, x_shape: p.x });
  }
  add('global_avgpool', [f([2, 3, 5, 7])], [[2, 3, 1, 1]]);
  add('global_avgpool', [f([1, 2, 20, 20])], [[1, 2, 1, 1]]);
  add('global_avgpool_grad', [f([2, 3, 1, 1])], [[2, 3, 5, 7]], { x_shape: [2, 3, 5, 7] });
  add('reshape', [f([3, 4, 5])], [[12, 5]], { shape: [12, 5] });

  // every fn of the scalar-math table, each attribute variant, at its kinks, around them and
  // at random points (test/unary_cases.ts derives the points from the table)
  for (const fn of UNARY_FNS) {
    for (const fnAttrs of attrVariants(fn)) {
      const p = samplePoints(fn, fnAttrs);
      const x = { shape: [0], data: Float64Array.from([...p.exact, ...p.smooth, ...randomTensor([300], rng, -4, 4)]) };
      x.shape = [x.data.length];
      add('unary', [x], [x.shape], { fn, ...fnAttrs });
      add('unary_grad', [f(x.shape), x], [x.shape], { fn, ...fnAttrs });
    }
  }
  add('binary', [f([4, 5]), f([5])], [[4, 5]], { fn: 'add' });
  add('binary', [f([3, 1, 5]), f([4, 1])], [[3, 4, 5]], { fn: 'mul' });
  add('binary', [f([7, 3]), f([7, 3])], [[7, 3]], { fn: 'sub' });
  add('binary', [f([1]), f([2, 6])], [[2, 6]], { fn: 'sub' });

  for (const [shape, axis] of [[[3, 7, 4], 1], [[5, 300], 1], [[6, 10], 1], [[4, 3], 0]] as [number[], number][]) {
    add('softmax', [f(shape, -3, 3)], [shape], { axis });
    add('log_softmax', [f(shape, -3, 3)], [shape], { axis });
    add('softmax_grad', [f(shape), f(shape, 0, 1)], [shape], { axis });
    add('log_softmax_grad', [f(shape), f(shape, -3, 0)], [shape], { axis });
  }
  add('dropout', [f([1000])], [[1000]], { p: 0.3, stream: 2 });
  add('dropout', [f([4, 33])], [[4, 33]], { p: 0.5, stream: 0 });
  add('dropout_grad', [f([1000])], [[1000]], { p: 0.3, stream: 2 });

  for (const shape of [[8, 5], [4, 3, 5, 5], [2, 40, 3, 3]]) {
    const C = shape[1];
    add('batchnorm_train', [f(shape, -2, 2), f([C]), f([C]), f([C]), f([C], 0.5, 2)], [shape, [C], [C]], { eps: 1e-5, momentum: 0.1 });
    add('batchnorm_eval', [f(shape), f([C]), f([C]), f([C]), f([C], 0.5, 2)], [shape], { eps: 1e-5 });
    add('batchnorm_grad', [f(shape), f(shape), f([C]), f([C], -0.2, 0.2), f([C], 0.5, 2)], [shape, [C], [C]]);
  }
  for (const shape of [[6, 10], [2, 3, 33], [3, 300]]) {
    const D = shape[shape.length - 1], rows = shape.slice(0, -1);
    add('layernorm', [f(shape), f([D]), f([D])], [shape, rows, rows], { eps: 1e-5 });
    add('layernorm_grad', [f(shape), f(shape), f([D]), f(rows, -0.2, 0.2), f(rows, 0.5, 2)], [shape, [D], [D]]);
  }
  add('embedding', [ids([4, 3], 10), f([10, 7])], [[4, 3, 7]]);
  add('embedding_grad', [f([4, 3, 7]), ids([4, 3], 10)], [[10, 7]], { w_shape: [10, 7] });
  add('concat', [f([2, 3, 4]), f([2, 5, 4])], [[2, 8, 4]], { axis: 1 });
  add('concat', [f([1, 3]), f([2, 3]), f([4, 3])], [[7, 3]], { axis: 0 });
  add('slice', [f([2, 8, 4])], [[2, 3, 4]], { axis: 1, start: 2, length: 3 });
  // more inputs than one kernel may bind: split into several kernels
  add('concat', Array.from({ length: 40 }, (_, i) => f([2, 1 + (i % 3), 3])), [[2, 79, 3]], { axis: 1 });

  for (const [N, C] of [[9, 10], [70, 3], [1, 17]]) {
    add('cross_entropy', [f([N, C], -3, 3), ids([N], C)], [[]], { label_smoothing: 0 });
    add('cross_entropy', [f([N, C], -3, 3), ids([N], C)], [[]], { label_smoothing: 0.1 });
    add('cross_entropy_grad', [f([N, C], -3, 3), ids([N], C)], [[N, C]], { label_smoothing: 0.1 });
    add('nll', [f([N, C], -3, 0), ids([N], C)], [[]]);
    add('nll_grad', [f([N, C], -3, 0), ids([N], C)], [[N, C]]);
    add('accuracy', [f([N, C]), ids([N], C)], [[]]);
    add('top_k', [f([N, C]), ids([N], C)], [[]], { k: 2 });
  }
  add('mse', [f([5, 7]), f([5, 7])], [[]]);
  add('mse_grad', [f([5, 7]), f([5, 7])], [[5, 7]]);
  add('bce_with_logits', [f([300], -4, 4), f([300], 0, 1)], [[]]);
  add('bce_with_logits_grad', [f([300], -4, 4), f([300], 0, 1)], [[300]]);
  add('sum_to', [f([4, 5])], [[5]], { shape: [5] });
  add('sum_to', [f([3, 4, 5])], [[4, 1]], { shape: [4, 1] });
  add('sum_to', [f([3, 4, 5])], [[4]], { axes: [0, 2] });
  add('sum_to', [f([70, 33])], [[33]], { axes: [0] });

  add('grad_accumulate', [f([50]), f([50])], [], { scale: 0.25 });
  add('zero', [f([37])], []);
  add('grad_norm', [f([5, 7]), f([300]), f([1])], [[]]);
  add('grad_norm', Array.from({ length: 65 }, (_, i) => f([1 + i])), [[]]);
  add('clip_coef', [f([], 0, 3)], [[]], { max_norm: 1 });
  add('clip_coef', [f([], 0, 0.5)], [[]], { max_norm: 1 });
  add('sgd_update', [f([40]), f([40]), null, null], [], { momentum: 0, nesterov: false, weight_decay: 0 });
  add('sgd_update', [f([40]), f([40]), f([40]), f([], 0.2, 1)], [], { momentum: 0.9, nesterov: false, weight_decay: 1e-2 });
  add('sgd_update', [f([300]), f([300]), f([300]), null], [], { momentum: 0.8, nesterov: true, weight_decay: 0 });
  add('adam_update', [f([40]), f([40]), f([40], -0.1, 0.1), f([40], 0, 0.01), null], [], { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0, decoupled: false });
  add('adam_update', [f([300]), f([300]), f([300], -0.1, 0.1), f([300], 0, 0.01), f([], 0.3, 1)], [], { beta1: 0.8, beta2: 0.99, eps: 1e-6, weight_decay: 0.05, decoupled: true });
  add('adam_update', [f([33]), f([33]), f([33], -0.1, 0.1), f([33], 0, 0.01), null], [], { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01, decoupled: false });
  return cases;
}

/** Two-node chains whose unary the Metal backend fuses into the GEMM kernel's store. */
export function fusedCases(): OpCase[] {
  const rng = makeRng(77);
  const out: OpCase[] = [];
  const chain = (name: string, op: string, ins: { shape: number[] }[], yShape: number[], attrs: Record<string, number[] | number>, fn: string) => {
    const b = new GraphBuilder();
    const data = new Map<number, Float64Array>();
    const ids = ins.map((x, k) => {
      const id = b.value(`${name}.in${k}`, 'f32', x.shape, 'input');
      data.set(id, Float64Array.from(randomTensor(x.shape, rng), (v) => Math.fround(v)));
      return id;
    });
    const [y] = b.emit(op, ids, [{ name: `${name}.y`, shape: yShape }], attrs);
    const [z] = b.emit('unary', [y], [{ name: `${name}.z`, shape: yShape }], { fn });
    const program = { name, batch: 1, graph: b.graph, inputs: ids, outputs: [] } as unknown as Program;
    out.push({ program, data, check: [z] });
  };
  chain('fuse_linear_relu', 'linear', [{ shape: [19, 23] }, { shape: [17, 23] }, { shape: [17] }], [19, 17], {}, 'relu');
  chain('fuse_conv_gelu', 'conv2d', [{ shape: [2, 3, 7, 6] }, { shape: [5, 3, 3, 3] }, { shape: [5] }], [2, 5, 7, 6], { stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups: 1 }, 'gelu');
  chain('fuse_matmul_leaky', 'matmul', [{ shape: [9, 33] }, { shape: [33, 18] }], [9, 18], {}, 'leaky_relu');
  chain('fuse_linear_silu', 'linear', [{ shape: [7, 12] }, { shape: [10, 12] }, { shape: [10] }], [7, 10], {}, 'silu');
  chain('fuse_matmul_mish', 'matmul', [{ shape: [6, 20] }, { shape: [20, 9] }], [6, 9], {}, 'mish');
  return out;
}
