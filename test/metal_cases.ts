/**
 * Op-level cases for the Metal kernel tests: every IR op (forward, backward, optimizer) at
 * several shapes, including sizes that are not multiples of the 16x16 GEMM tile or the
 * 32-wide SIMD-group. Deterministic (seeded).
 */
import { makeRng, randomInts, randomTensor } from '../compiler/reference/fixtures.js';
import { UNARY_FNS } from '../compiler/ir/ops.js';
import { UNARY_FNS_TABLE } from '../compiler/ir/scalar_fns.js';
import { attrVariants, samplePoints } from './unary_cases.js';
import { GraphBuilder, type HalfDType, type Program } from '../compiler/ir/graph.js';
import { opDef } from '../compiler/ir/ops.js';
import { opCase, reference, type OpCase } from './metal_harness.js';
import { DEFAULT_SCALARS } from '../compiler/reference/fixtures.js';

export function allOpCases(): OpCase[] {
  const rng = makeRng(20261202);
  const f = (shape: number[], lo = -1, hi = 1) => ({ shape, data: randomTensor(shape, rng, lo, hi) });
  const ids = (shape: number[], n: number) => ({ shape, data: randomInts(shape, n, rng), dtype: 'i32' as const });
  const cases: OpCase[] = [];
  let k = 0;
  const add: Add = (op, inputs, outs, attrs = {}, outDtypes = []) =>
    cases.push(opCase(`c${k++}_${op}`, op, inputs, outs, attrs, outDtypes));

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
      // random points inside the fn's domain (log, sqrt, pow: x > 0)
      const [dlo, dhi] = (UNARY_FNS_TABLE[fn] as { domain?: [number, number] }).domain ?? [-Infinity, Infinity];
      const x = { shape: [0], data: Float64Array.from([...p.exact, ...p.smooth, ...randomTensor([300], rng, Math.max(-4, dlo + 0.05), Math.min(4, dhi - 0.05))]) };
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
  transformerCases(add, f, ids, rng);
  // (last, so the random data of the cases above stays as it was) past 256 terms per output sum_to adds blocks of
  // 256 (elementwise.ts SUM_TO_BLOCK): a partial last block; and a long sum of equal terms (a pooled bias gradient's
  // shape), whose roundings all go one way: one fp32 chain over its 66978 terms misses the float64 sum by 6.6e-4
  add('sum_to', [f([3, 5, 37, 29])], [[5]], { axes: [0, 2, 3] });
  add('sum_to', [{ shape: [2, 4, 183, 183], data: new Float64Array(2 * 4 * 183 * 183).fill(Math.fround(0.7)) }], [[4]], { axes: [0, 2, 3] });
  return cases;
}

/** N, H, T, S, D, causal */
type AttnDims = [number, number, number, number, number, boolean];

/** attention at `dims`, and its backward from the reference forward's o and lse */
function attentionPair(add: (op: string, inputs: { shape: number[]; data: Float64Array }[], outs: number[][], attrs: Record<string, number | boolean>) => void, f: F, [N, H, T, S, D, causal]: AttnDims): void {
  const q = f([N, H, T, D], -2, 2), k = f([N, H, S, D], -2, 2), v = f([N, H, S, D]);
  const attrs = { causal, scale: 1 / Math.sqrt(D) };
  add('attention', [q, k, v], [[N, H, T, D], [N, H, T]], attrs);
  const fwd = opCase('attention_fwd', 'attention', [q, k, v], [[N, H, T, D], [N, H, T]], attrs);
  const r = reference(fwd, DEFAULT_SCALARS);
  const [o, lse] = fwd.check.map((id) => ({ shape: fwd.program.graph.values[id].shape, data: r.get(id)! }));
  add('attention_grad', [f([N, H, T, D]), q, k, v, o, lse], [[N, H, T, D], [N, H, S, D], [N, H, S, D]], attrs);
}

/** N, H, T, D, causal of a packed (attention_qkv) case */
type PackedDims = [number, number, number, number, boolean];

/** attention_qkv at `dims` (q, k, v in place in one [N,T,3C] projection), and its backward from the reference forward's o and lse */
function packedPair(add: (op: string, inputs: { shape: number[]; data: Float64Array }[], outs: number[][], attrs: Record<string, number | boolean>) => void, f: F, [N, H, T, D, causal]: PackedDims): void {
  const C = H * D, qkv = f([N, T, 3 * C], -2, 2);
  const attrs = { heads: H, causal, scale: 1 / Math.sqrt(D) };
  add('attention_qkv', [qkv], [[N, T, C], [N, H, T]], attrs);
  const fwd = opCase('attention_qkv_fwd', 'attention_qkv', [qkv], [[N, T, C], [N, H, T]], attrs);
  const r = reference(fwd, DEFAULT_SCALARS);
  const [o, lse] = fwd.check.map((id) => ({ shape: fwd.program.graph.values[id].shape, data: r.get(id)! }));
  add('attention_qkv_grad', [f([N, T, C]), qkv, o, lse], [[N, T, 3 * C]], attrs);
}

type Add = (op: string, inputs: Parameters<typeof opCase>[2], outs: number[][], attrs?: Parameters<typeof opCase>[4], outDtypes?: Parameters<typeof opCase>[5]) => void;
type F = (shape: number[], lo?: number, hi?: number) => { shape: number[]; data: Float64Array };
type Ids = (shape: number[], n: number) => { shape: number[]; data: Float64Array; dtype: 'i32' };

/**
 * The ops of issue 13 (tensor algebra, sequence losses, fused attention) at the sizes the issue
 * asks for: T not a multiple of the 16-query tile, heads of 1 and 16, C/heads of 8 and 64 (and
 * 12 and 100: a padded head, the 8-query tile), causal and not, S > T.
 */
function transformerCases(add: Add, f: F, ids: Ids, rng: () => number): void {
  // batched matmul: full batch, broadcast batch dims, a shared rank-2 operand, transposes
  add('matmul', [f([2, 3, 17, 9]), f([2, 3, 9, 21])], [[2, 3, 17, 21]]);
  add('matmul', [f([3, 1, 5, 7]), f([4, 7, 6])], [[3, 4, 5, 6]]);
  add('matmul', [f([2, 5, 7]), f([7, 3])], [[2, 5, 3]]);
  add('matmul', [f([2, 2, 9, 17]), f([2, 2, 19, 9])], [[2, 2, 17, 19]], { transA: true, transB: true });
  add('matmul', [f([4, 8, 33]), f([33, 5])], [[4, 8, 5]], { transA: false, transB: false });
  add('linear', [f([2, 5, 7]), f([3, 7]), f([3])], [[2, 5, 3]]);
  add('permute', [f([2, 3, 4, 5])], [[2, 4, 3, 5]], { perm: [0, 2, 1, 3] });
  add('permute', [f([3, 4, 5])], [[5, 3, 4]], { perm: [2, 0, 1] });
  add('slice', [f([3, 5, 7])], [[3, 5, 4]], { axis: 2, start: 3, length: 4 });
  add('pad', [f([2, 3, 4])], [[2, 6, 7]], { pads: [0, 0, 1, 2, 0, 3], value: 0 });
  add('pad', [f([5, 2])], [[8, 2]], { pads: [3, 0, 0, 0], value: -1.5 });
  add('broadcast_to', [f([3, 1])], [[2, 3, 4]], { shape: [2, 3, 4] });
  add('broadcast_to', [f([4])], [[3, 4]], { shape: [3, 4] });
  // small integers: ties in every max group (the first maximal element wins)
  const tied = (shape: number[]) => ({ shape, data: randomInts(shape, 4, rng) });
  for (const [shape, axes, keepdim] of [[[3, 7, 4], [1], false], [[2, 3, 5], [0, 2], true], [[4, 6], [0, 1], false], [[5, 40], [1], true]] as [number[], number[], boolean][]) {
    const ys = keepdim ? shape.map((d, i) => (axes.includes(i) ? 1 : d)) : shape.filter((_, i) => !axes.includes(i));
    for (const fn of ['sum', 'mean', 'max']) add('reduce', [fn === 'max' ? tied(shape) : f(shape)], [ys], { fn, axes, keepdim });
    add('reduce_max_grad', [f(ys), tied(shape)], [shape], { axes, keepdim });
  }
  add('masked_fill', [f([3, 4, 5]), ids([4, 1], 2)], [[3, 4, 5]], { value: -2.5 });
  add('masked_fill', [f([4, 5]), f([2, 1, 5], 0, 1.4)], [[2, 4, 5]], { value: 3, invert: true });
  add('masked_fill', [f([2, 3, 7, 9]), null], [[2, 3, 7, 9]], { value: -7, causal: true });
  add('masked_fill', [f([5, 5]), ids([5, 5], 2)], [[5, 5]], { value: 0, causal: true });
  add('positions', [ids([3, 7], 5)], [[3, 7]], {}, ['i32']);
  add('positions', [f([2, 5, 4])], [[2, 5]], {}, ['i32']);
  // layernorm without weight and / or bias
  add('layernorm', [f([4, 3, 33]), null, null], [[4, 3, 33], [4, 3], [4, 3]], { eps: 1e-5 });
  add('layernorm', [f([5, 12]), f([12]), null], [[5, 12], [5], [5]], { eps: 1e-5 });
  add('layernorm_grad', [f([4, 3, 33]), f([4, 3, 33]), null, f([4, 3], -0.2, 0.2), f([4, 3], 0.5, 2)], [[4, 3, 33], [33], [33]]);
  // class losses and metrics over leading dims, with and without ignore_index
  for (const [shape, ignore] of [[[2, 5, 7], undefined], [[3, 11, 4], 1], [[2, 9, 6], -100]] as [number[], number | undefined][]) {
    const C = shape[shape.length - 1], rows = shape.slice(0, -1);
    const lab = ids(rows, C);
    if (ignore === -100) lab.data.forEach((_, i) => { if (i % 3 === 1) lab.data[i] = -100; });
    const ii: Record<string, number> = ignore === undefined ? {} : { ignore_index: ignore };
    add('cross_entropy', [f(shape, -3, 3), lab], [[]], { label_smoothing: 0, ...ii });
    add('cross_entropy', [f(shape, -3, 3), lab], [[]], { label_smoothing: 0.1, ...ii });
    add('cross_entropy_grad', [f(shape, -3, 3), lab], [shape], { label_smoothing: 0.1, ...ii });
    add('cross_entropy_grad', [f(shape, -3, 3), lab], [shape], { label_smoothing: 0, ...ii });
    add('nll', [f(shape, -3, 0), lab], [[]], ii);
    add('nll_grad', [f(shape, -3, 0), lab], [shape], ii);
    add('accuracy', [f(shape), lab], [[]], ii);
    add('top_k', [f(shape), lab], [[]], { k: 2, ...ii });
  }
  // fused attention: forward, and its backward from the reference forward's o and lse
  for (const dims of [
    [1, 1, 37, 37, 8, true], [1, 1, 37, 37, 8, false], [1, 16, 21, 21, 64, true], [1, 16, 21, 21, 64, false],
    [2, 2, 5, 13, 12, true], [2, 1, 9, 20, 12, false], [1, 1, 11, 11, 100, true],
  ] as AttnDims[]) attentionPair(add, f, dims);
  // the packed form: heads 1 and 16, D 8, 64 and 12 (a padded head), T not a tile multiple
  for (const dims of [[1, 1, 37, 8, true], [1, 16, 21, 64, false], [2, 3, 19, 12, true]] as PackedDims[]) packedPair(add, f, dims);
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

/**
 * Unary gradients and unaries-with-the-product-kept that the CUDA backend folds into small products (fuse.ts rules 12,
 * 13: gemm_cuda.ts's small-tile kernel applies them in its store); other backends run the nodes as they are.
 */
export function smallEpilogueCases(): OpCase[] {
  const rng = makeRng(79);
  const out: OpCase[] = [];
  const make = (name: string, build: (b: GraphBuilder, input: (shape: number[]) => number) => number[]) => {
    const b = new GraphBuilder();
    const data = new Map<number, Float64Array>();
    let k = 0;
    const input = (shape: number[]) => {
      const id = b.value(`${name}.in${k++}`, 'f32', shape, 'input');
      data.set(id, Float64Array.from(randomTensor(shape, rng), (v) => Math.fround(v)));
      return id;
    };
    const check = build(b, input);
    const program = { name, batch: 1, graph: b.graph, inputs: [...data.keys()], outputs: [] } as unknown as Program;
    out.push({ program, data, check });
  };
  // rule 13: linear -> gelu with the pre-activation read again (by its gradient): z and the gradient both checked
  const keep = (name: string, rows: number, K: number, N: number, fn: string) => make(name, (b, input) => {
    const x = input([rows, K]), w = input([N, K]), bias = input([N]), dz = input([rows, N]);
    const [y] = b.emit('linear', [x, w, bias], [{ name: `${name}.y`, shape: [rows, N] }]);
    const [z] = b.emit('unary', [y], [{ name: `${name}.z`, shape: [rows, N] }], { fn });
    const [dy] = b.emit('unary_grad', [dz, y], [{ name: `${name}.dy`, shape: [rows, N] }], { fn });
    return [z, dy];
  });
  keep('fuse_linear_gelu_keep', 70, 40, 300, 'gelu');
  keep('fuse_linear_tanh_keep', 33, 65, 37, 'tanh');
  // rule 12: a matmul's output read only by a unary gradient (its x another input)
  const grad = (name: string, as: number[], bs: number[], ys: number[], attrs: Record<string, boolean>, fn: string) => make(name, (b, input) => {
    const a = input(as), m = input(bs), x = input(ys);
    const [g] = b.emit('matmul', [a, m], [{ name: `${name}.g`, shape: ys }], attrs);
    const [dx] = b.emit('unary_grad', [g, x], [{ name: `${name}.dx`, shape: ys }], { fn });
    return [dx];
  });
  grad('fuse_matmul_gelu_grad', [70, 40], [40, 300], [70, 300], { transA: false, transB: false }, 'gelu');
  grad('fuse_matmul_silu_grad_batched', [3, 21, 65], [65, 130], [3, 21, 130], { transA: false, transB: false }, 'silu');
  grad('fuse_matmul_tanh_grad_tb', [45, 96], [50, 96], [45, 50], { transA: false, transB: true }, 'tanh');
  return out;
}

/**
 * Relu-grads the CUDA backend folds into the gradient before them (fuse.ts rule 2: conv2d_grad_input's store,
 * the global-avgpool gradient, the 2x2 max-pool gradient over the relu's output); other backends run two kernels.
 */
export function reluGradFoldCases(): OpCase[] {
  const rng = makeRng(78);
  const out: OpCase[] = [];
  // a gradient op P, then a relu-grad of its output with `mask` (a separate input, or P's input `maskIs` itself):
  // the backends that fold the relu-grad into P (fuse.ts rule 2: CUDA) run one kernel, the others two
  const gradChain = (name: string, op: string, shapes: number[][], yShape: number[], attrs: Record<string, number[] | number>, maskIs?: number) => {
    const b = new GraphBuilder();
    const data = new Map<number, Float64Array>();
    const ids = shapes.map((shape, k) => {
      const id = b.value(`${name}.in${k}`, 'f32', shape, 'input');
      data.set(id, Float64Array.from(randomTensor(shape, rng), (v) => Math.fround(v)));
      return id;
    });
    const [y] = b.emit(op, maskIs === undefined ? ids.slice(0, -1) : ids, [{ name: `${name}.g`, shape: yShape }], attrs);
    const mask = maskIs ?? ids.length - 1;
    const [z] = b.emit('unary_grad', [y, ids[mask]], [{ name: `${name}.dx`, shape: yShape }], { fn: 'relu' });
    const program = { name, batch: 1, graph: b.graph, inputs: ids, outputs: [] } as unknown as Program;
    out.push({ program, data, check: [z] });
  };
  // conv2d_grad_input on conv_cuda.ts's 64x64 tiles with partial edges (M = 3 * 11 * 13, N = 70, K = 20 * 9), the mask in the store
  gradChain('fuse_conv_grad_input_relu', 'conv2d_grad_input', [[3, 20, 11, 13], [20, 70, 3, 3], [3, 70, 11, 13]], [3, 70, 11, 13],
    { stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups: 1, x_shape: [3, 70, 11, 13] });
  // stride 2: the gathered dy has holes
  gradChain('fuse_conv_grad_input_relu_stride2', 'conv2d_grad_input', [[2, 6, 4, 5], [6, 5, 3, 3], [2, 5, 9, 11]], [2, 5, 9, 11],
    { stride: [2, 2], padding: [0, 0], dilation: [1, 1], groups: 1, x_shape: [2, 5, 9, 11] });
  gradChain('fuse_global_avgpool_grad_relu', 'global_avgpool_grad', [[2, 3, 1, 1], [2, 3, 5, 7]], [2, 3, 5, 7], { x_shape: [2, 3, 5, 7] });
  // odd height and width: the last row / column is in no window (dx 0 there); the mask is the pool's input
  gradChain('fuse_maxpool2x2_grad_relu', 'maxpool2d_grad', [[2, 3, 3, 4], [2, 3, 7, 9]], [2, 3, 7, 9], { kernel: [2, 2], stride: [2, 2], padding: [0, 0] }, 1);
  return out;
}

/**
 * One program of independent element-wise nodes (AdamW on three parameters of odd sizes, SGD with
 * Nesterov momentum on a fourth, relu and tanh), each reading and writing its own buffers: the
 * CUDA backend runs them as one launch (compiler/codegen-cuda/merge.ts).
 */
export function independentUpdatesCase(): OpCase {
  const rng = makeRng(11);
  const b = new GraphBuilder();
  const data = new Map<number, Float64Array>();
  const inputs: number[] = [];
  const check: number[] = [];
  const val = (name: string, shape: number[], kind: 'param' | 'input', lo = -1, hi = 1) => {
    const id = b.value(name, 'f32', shape, kind);
    data.set(id, Float64Array.from(randomTensor(shape, rng, lo, hi), (x) => Math.fround(x)));
    if (kind === 'input') inputs.push(id); else check.push(id);
    return id;
  };
  for (const [k, n] of [[0, 300], [1, 33], [2, 1025]]) {
    const ids = [val(`p${k}`, [n], 'param'), val(`g${k}`, [n], 'input'), val(`m${k}`, [n], 'param', -0.1, 0.1), val(`v${k}`, [n], 'param', 0, 0.01), -1];
    b.node('adam_update', ids, [], { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1, decoupled: true }, `adam${k}`);
  }
  b.node('sgd_update', [val('p3', [77], 'param'), val('g3', [77], 'input'), val('buf3', [77], 'param'), -1], [], { momentum: 0.9, nesterov: true, weight_decay: 0 }, 'sgd3');
  for (const fn of ['relu', 'tanh']) {
    const y = b.value(`${fn}.y`, 'f32', [5, 41], 'activation');
    b.node('unary', [val(`${fn}.x`, [5, 41], 'input')], [y], { fn }, fn);
    check.push(y);
  }
  const program = { name: 'independent_updates', batch: 1, graph: b.graph, inputs, outputs: [] } as unknown as Program;
  return { program, data, check };
}

/**
 * One case of op `op` whose 16-bit inputs (OpDef.halfInputs) go through a `cast {to}` node first, as
 * compiler/ir/precision.ts writes them; the other inputs and the outputs are f32.
 */
export function castCase(name: string, op: string, inputs: { shape: number[]; data: Float64Array }[], outShapes: number[][], attrs: Record<string, number[] | number | boolean>, to: HalfDType): OpCase {
  const b = new GraphBuilder();
  const data = new Map<number, Float64Array>();
  const half = opDef(op).halfInputs ?? [];
  const ids = inputs.map((x, i) => {
    const id = b.value(`${name}.in${i}`, 'f32', x.shape, 'input');
    data.set(id, x.data);
    if (!half.includes(i)) return id;
    return b.emit('cast', [id], [{ name: `${name}.in${i}.${to}`, dtype: to, shape: x.shape }], { to })[0];
  });
  const outs = b.emit(op, ids, outShapes.map((shape, i) => ({ name: `${name}.out${i}`, shape })), attrs);
  const program = { name, batch: 1, graph: b.graph, inputs: [...data.keys()], outputs: [] } as unknown as Program;
  return { program, data, check: outs };
}

/**
 * Mixed precision (issue 15): every op that reads 16-bit operands (OpDef.halfInputs: the GEMM
 * family and attention, forward and backward) with those operands made 16-bit by a `cast` node
 * first, as compiler/ir/precision.ts makes them, alternating f16 and bf16; the outputs are f32.
 * The reference rounds at the same casts (compiler/reference/half.ts), so the kernels' only
 * difference is their f32 accumulation. The first node of each case is a cast.
 */
export function halfCases(): OpCase[] {
  const rng = makeRng(20261203);
  const f = (shape: number[], lo = -1, hi = 1) => ({ shape, data: Float64Array.from(randomTensor(shape, rng, lo, hi), (x) => Math.fround(x)) });
  const out: OpCase[] = [];
  let k = 0;
  const add = (op: string, inputs: { shape: number[]; data: Float64Array }[], outShapes: number[][], attrs: Record<string, number[] | number | boolean>, type?: HalfDType) => {
    const to: HalfDType = type ?? (k % 2 === 0 ? 'bf16' : 'f16');
    out.push(castCase(`h${k++}_${op}_${to}`, op, inputs, outShapes, attrs, to));
  };
  // a round trip f32 -> 16 bits -> f32 over the finite range (f16 subnormals included; the edge
  // values: ties, overflow, inf, NaN are compared bit for bit in metal_precision.test.ts)
  for (const to of ['f16', 'bf16'] as const) {
    const b = new GraphBuilder();
    const name = `h${k++}_cast_${to}`;
    const x = b.value(`${name}.in0`, 'f32', [300], 'input');
    const h = b.emit('cast', [x], [{ name: `${name}.h`, dtype: to, shape: [300] }], { to })[0];
    const y = b.emit('cast', [h], [{ name: `${name}.y`, shape: [300] }], { to: 'f32' })[0];
    const data = new Map([[x, Float64Array.from({ length: 300 }, (_, i) => Math.fround((rng() * 2 - 1) * 2 ** ((i % 34) - 20)))]]);
    out.push({ program: { name, batch: 1, graph: b.graph, inputs: [x], outputs: [] } as unknown as Program, data, check: [y] });
  }
  add('linear', [f([9, 18]), f([5, 18]), f([5])], [[9, 5]], {});
  add('linear', [f([2, 17, 33]), f([20, 33])], [[2, 17, 20]], {});
  add('matmul', [f([17, 9]), f([21, 9])], [[17, 21]], { transA: false, transB: true });
  add('matmul', [f([2, 3, 9, 17]), f([3, 9, 5])], [[2, 3, 17, 5]], { transA: true, transB: false });
  const conv = { stride: [2, 1], padding: [1, 1], dilation: [1, 1], groups: 1 };
  add('conv2d', [f([2, 3, 9, 8]), f([4, 3, 3, 3]), f([4])], [[2, 4, 5, 8]], conv);
  add('conv2d_grad_input', [f([2, 4, 5, 8]), f([4, 3, 3, 3])], [[2, 3, 9, 8]], { ...conv, x_shape: [2, 3, 9, 8] });
  add('conv2d_grad_weight', [f([2, 4, 5, 8]), f([2, 3, 9, 8])], [[4, 3, 3, 3]], { ...conv, w_shape: [4, 3, 3, 3] });
  for (const dims of [[1, 2, 19, 19, 8, true], [2, 1, 9, 20, 12, false]] as AttnDims[]) attentionPair(add, f, dims);
  for (const dims of [[1, 2, 19, 8, true], [2, 3, 9, 12, false]] as PackedDims[]) packedPair(add, f, dims);
  // the GEMM family again with the other 16-bit type (each op in f16 and in bf16: the Metal matrix-unit
  // variant's half and bfloat tiles), odd sizes: K below one 8-deep step, M and N not multiples of 8,
  // grouped and strided convolutions
  add('linear', [f([13, 7]), f([11, 7]), f([11])], [[13, 11]], {}, 'f16');
  add('linear', [f([3, 5, 21]), f([6, 21])], [[3, 5, 6]], {}, 'bf16');
  add('matmul', [f([23, 19]), f([19, 9])], [[23, 9]], { transA: false, transB: false }, 'f16');
  add('matmul', [f([2, 19, 23]), f([2, 9, 19])], [[2, 23, 9]], { transA: true, transB: true }, 'bf16');
  const gconv = { stride: [1, 2], padding: [0, 1], dilation: [2, 1], groups: 2 };
  for (const to of ['f16', 'bf16'] as const) {
    add('conv2d', [f([1, 4, 11, 7]), f([6, 2, 3, 2]), f([6])], [[1, 6, 7, 4]], gconv, to);
    add('conv2d_grad_input', [f([1, 6, 7, 4]), f([6, 2, 3, 2])], [[1, 4, 11, 7]], { ...gconv, x_shape: [1, 4, 11, 7] }, to);
    add('conv2d_grad_weight', [f([1, 6, 7, 4]), f([1, 4, 11, 7])], [[6, 2, 3, 2]], { ...gconv, w_shape: [6, 2, 3, 2] }, to);
  }
  add('conv2d', [f([2, 3, 9, 8]), f([4, 3, 3, 3]), f([4])], [[2, 4, 5, 8]], conv, 'f16');
  add('conv2d_grad_input', [f([2, 4, 5, 8]), f([4, 3, 3, 3])], [[2, 3, 9, 8]], { ...conv, x_shape: [2, 3, 9, 8] }, 'bf16');
  add('conv2d_grad_weight', [f([2, 4, 5, 8]), f([2, 3, 9, 8])], [[4, 3, 3, 3]], { ...conv, w_shape: [4, 3, 3, 3] }, 'f16');
  out.push(mixedLinear(f));
  return out;
}

/** an input of halfIoCase: f32 data (rounded to float), or i32 ids */
export type HalfIoInput = { shape: number[]; data: Float64Array; dtype?: 'i32' };

/**
 * One op reading 16-bit values: each float input not in `f32In` made `to` by a `cast` first (null: an
 * absent optional input), the outputs `to` except those in `f32Out`; the checked values are the outputs,
 * the 16-bit ones widened by a `cast {to: f32}` (what fuse.ts rule 4 folds into the op's kernel).
 */
export function halfIoCase(name: string, to: HalfDType, op: string, inputs: (HalfIoInput | null)[], outShapes: number[][],
  attrs: Record<string, number[] | number | boolean | string>, f32In: number[] = [], f32Out: number[] = []): OpCase {
  const b = new GraphBuilder();
  const data = new Map<number, Float64Array>();
  const ids = inputs.map((x, i) => {
    if (!x) return -1;
    const id = b.value(`${name}.in${i}`, x.dtype ?? 'f32', x.shape, 'input');
    data.set(id, x.dtype === 'i32' ? x.data : Float64Array.from(x.data, (v) => Math.fround(v)));
    if (x.dtype === 'i32' || f32In.includes(i)) return id;
    return b.emit('cast', [id], [{ name: `${name}.in${i}.${to}`, dtype: to, shape: x.shape }], { to })[0];
  });
  const outs = b.emit(op, ids, outShapes.map((shape, i) => ({ name: `${name}.out${i}`, shape, dtype: f32Out.includes(i) ? 'f32' as const : to })), attrs);
  const check = outs.map((o, i) => (f32Out.includes(i) ? o : b.emit('cast', [o], [{ name: `${name}.out${i}.f32`, shape: outShapes[i] }], { to: 'f32' })[0]));
  const program = { name, batch: 1, graph: b.graph, inputs: [...data.keys()], outputs: [] } as unknown as Program;
  return { program, data, check };
}

/**
 * Mixed precision, folded casts (fuse.ts rule 4: compiler/kernels/registry.ts HALF_IO_OPS): each
 * op reading 16-bit values at every float input a `cast` makes 16-bit first and writing its outputs
 * in 16 bits (autocast's storage: rounded once at the store), alternating f16 and bf16; the checked
 * values are those outputs widened by a `cast {to: f32}`. Odd sizes throughout. `f32Out` lists
 * the outputs that stay f32 (attention's logsumexp, the loss) and `f32In` the inputs that stay f32
 * (a bias, layernorm's weight, one operand of a mixed add).
 */
export function halfIoCases(): OpCase[] {
  const rng = makeRng(20261204);
  const f = (shape: number[], lo = -1, hi = 1) => ({ shape, data: Float64Array.from(randomTensor(shape, rng, lo, hi), (x) => Math.fround(x)) });
  const out: OpCase[] = [];
  let k = 0;
  type In = HalfIoInput;
  const add = (op: string, inputs: (In | null)[], outShapes: number[][], attrs: Record<string, number[] | number | boolean | string>, f32In: number[] = [], f32Out: number[] = []) => {
    const to: HalfDType = k % 2 === 0 ? 'bf16' : 'f16';
    out.push(halfIoCase(`hio${k++}_${op}_${to}`, to, op, inputs, outShapes, attrs, f32In, f32Out));
  };
  const ids = (shape: number[], n: number): In => ({ shape, data: randomInts(shape, n, rng), dtype: 'i32' });
  add('linear', [f([9, 18]), f([5, 18]), f([5])], [[9, 5]], {}, [2]);
  add('linear', [f([2, 17, 33]), f([20, 33])], [[2, 17, 20]], {});
  add('matmul', [f([17, 9]), f([21, 9])], [[17, 21]], { transA: false, transB: true });
  add('matmul', [f([2, 3, 9, 17]), f([3, 9, 5])], [[2, 3, 17, 5]], { transA: true, transB: false });
  add('unary', [f([3, 37], -3, 3)], [[3, 37]], { fn: 'gelu' });
  add('unary', [f([5, 13], -3, 3)], [[5, 13]], { fn: 'relu' });
  add('unary_grad', [f([3, 37]), f([3, 37], -3, 3)], [[3, 37]], { fn: 'gelu' });
  add('binary', [f([2, 5, 7]), f([2, 5, 7])], [[2, 5, 7]], { fn: 'add' });
  add('binary', [f([2, 5, 7]), f([7])], [[2, 5, 7]], { fn: 'mul' }, [1], [0]); // 16-bit * f32 = f32 (type promotion)
  add('reshape', [f([6, 35])], [[3, 70]], { shape: [3, 70] });
  add('dropout', [f([5, 41])], [[5, 41]], { p: 0.3, stream: 1 });
  add('dropout_grad', [f([5, 41])], [[5, 41]], { p: 0.3, stream: 1 });
  add('slice', [f([4, 9, 5])], [[4, 5, 5]], { axis: 1, start: 2, length: 5 });
  add('concat', [f([3, 4]), f([3, 5])], [[3, 9]], { axis: 1 });
  add('permute', [f([2, 3, 5, 7])], [[2, 5, 3, 7]], { perm: [0, 2, 1, 3] });
  add('layernorm', [f([5, 33], -2, 2), f([33]), f([33])], [[5, 33], [5], [5]], { eps: 1e-5 }, [1, 2], [1, 2]);
  add('cross_entropy', [f([7, 29], -3, 3), ids([7], 29)], [[]], { label_smoothing: 0.1 }, [], [0]);
  add('cross_entropy_grad', [f([7, 29], -3, 3), ids([7], 29)], [[7, 29]], { label_smoothing: 0 });
  add('cross_entropy_grad', [f([3, 5, 31], -3, 3), ids([3, 5], 31)], [[3, 5, 31]], { label_smoothing: 0.1 });
  for (const [N, H, T, S, D, causal] of [[1, 2, 19, 19, 8, true], [2, 1, 9, 20, 12, false]] as AttnDims[]) {
    const q = f([N, H, T, D], -2, 2), kk = f([N, H, S, D], -2, 2), v = f([N, H, S, D]);
    const attrs = { causal, scale: 1 / Math.sqrt(D) };
    add('attention', [q, kk, v], [[N, H, T, D], [N, H, T]], attrs, [], [1]);
    const fwd = opCase('attention_fwd', 'attention', [q, kk, v], [[N, H, T, D], [N, H, T]], attrs);
    const r = reference(fwd, DEFAULT_SCALARS);
    const [o, lse] = fwd.check.map((id) => ({ shape: fwd.program.graph.values[id].shape, data: r.get(id)! }));
    add('attention_grad', [f([N, H, T, D]), q, kk, v, o, lse], [[N, H, T, D], [N, H, S, D], [N, H, S, D]], attrs, [5]);
  }
  // layernorm_grad of a 16-bit dy (a product's gradient) over f32 x, weight and statistics: dx and the weight / bias gradients f32
  add('layernorm_grad', [f([5, 33]), f([5, 33], -2, 2), f([33]), f([5], -0.2, 0.2), f([5], 0.5, 2)], [[5, 33], [33], [33]], {}, [1, 2, 3, 4], [0, 1, 2]);
  add('layernorm_grad', [f([3, 2, 19]), f([3, 2, 19], -2, 2), null, f([3, 2], -0.2, 0.2), f([3, 2], 0.5, 2)], [[3, 2, 19], [19], [19]], {}, [1, 3, 4], [0, 1, 2]);
  // a bias gradient summing a 16-bit gradient into f32 (short sums: one thread per output)
  add('sum_to', [f([3, 7, 37])], [[37]], { axes: [0, 1] }, [], [0]);
  add('sum_to', [f([5, 3, 11])], [[3, 1]], { shape: [3, 1] }, [], [0]);
  for (const [N, H, T, D, causal] of [[2, 2, 19, 8, true]] as PackedDims[]) {
    const C = H * D, qkv = f([N, T, 3 * C], -2, 2);
    const attrs = { heads: H, causal, scale: 1 / Math.sqrt(D) };
    add('attention_qkv', [qkv], [[N, T, C], [N, H, T]], attrs, [], [1]);
    const fwd = opCase('attention_qkv_fwd', 'attention_qkv', [qkv], [[N, T, C], [N, H, T]], attrs);
    const r = reference(fwd, DEFAULT_SCALARS);
    const [o, lse] = fwd.check.map((id) => ({ shape: fwd.program.graph.values[id].shape, data: r.get(id)! }));
    add('attention_qkv_grad', [f([N, T, C]), qkv, o, lse], [[N, T, 3 * C]], attrs, [3]);
  }
  return out;
}

/**
 * The tolerance of a case at `base`, plus one unit in the last place of a 16-bit type (relative: 2^-7
 * for bf16, 2^-10 for f16) when a checked value is a 16-bit output widened (halfIoCases): a kernel's
 * f32 result within f32 noise of a 16-bit rounding midpoint rounds to the other neighbour than the
 * float64 reference's, which moves that element by one unit of the 16-bit type. With `only`, that checked
 * value's tolerance (the unit only if it is such an output).
 */
export function caseTolerance(c: OpCase, base: number, only?: number): number {
  const g = c.program.graph;
  let ulp = 0;
  for (const id of only === undefined ? c.check : [only]) {
    const w = g.nodes.find((n) => n.outputs.includes(id));
    if (w?.op !== 'cast' || w.attrs.to !== 'f32') continue;
    const src = g.nodes.find((n) => n.outputs.includes(w.inputs[0]));
    if (!src || src.op === 'cast') continue;
    ulp = Math.max(ulp, g.values[w.inputs[0]].dtype === 'bf16' ? 2 ** -7 : 2 ** -10);
  }
  return base + ulp;
}

/**
 * A linear whose x is 16-bit (cast to f16) and whose weight stays f32: operands of different
 * types, so both GEMM variants widen them to float tiles (the matrix unit's 16-bit operands need
 * A and B of the same 16-bit type).
 */
function mixedLinear(f: (shape: number[]) => { shape: number[]; data: Float64Array }): OpCase {
  const b = new GraphBuilder();
  const name = 'h_mixed_linear_f16_f32';
  const x = f([10, 13]), w = f([9, 13]);
  const xi = b.value(`${name}.in0`, 'f32', x.shape, 'input'), wi = b.value(`${name}.in1`, 'f32', w.shape, 'input');
  const xh = b.emit('cast', [xi], [{ name: `${name}.in0.f16`, dtype: 'f16', shape: x.shape }], { to: 'f16' })[0];
  const y = b.emit('linear', [xh, wi], [{ name: `${name}.out0`, shape: [10, 9] }], {});
  const program = { name, batch: 1, graph: b.graph, inputs: [xi, wi], outputs: [] } as unknown as Program;
  return { program, data: new Map([[xi, x.data], [wi, w.data]]), check: y };
}
