import { BINARY_FNS, UNARY_FNS, UNARY_FNS_TABLE } from './scalar_fns.js';

/**
 * The op catalogue: the one list of IR operations every pass and backend agrees on.
 * Each entry states the exact semantics a backend must implement; the float64
 * reference interpreter (compiler/reference) is the executable form of this text.
 *
 * Conventions
 *  - Layout is row-major (C order). Images are NCHW. Linear weights are [out, in]
 *    and conv weights [out, in/groups, kh, kw] (PyTorch).
 *  - All tensors are f32 except class labels / token ids (i32).
 *  - Scalars (shape []) are one element.
 *  - "x_shape" style attrs repeat a shape a backward op needs but cannot see in its inputs.
 *  - Reductions accumulate in at least f32 (backends) / f64 (reference).
 *  - Losses are mean-reduced (PyTorch's default reduction='mean').
 *  - Optional inputs are passed as -1 when absent.
 */

export interface OpDef {
  /** input names, in order; a trailing '?' marks an optional input */
  inputs: string[];
  /** output names, in order */
  outputs: string[];
  /** indices of inputs the op writes in place (persistent values only) */
  mutates?: number[];
  /** attributes with their meaning */
  attrs: Record<string, string>;
  /** StepScalars fields the op reads */
  scalars?: ('lr' | 't' | 'seed' | 'counter')[];
  doc: string;
}

export { UNARY_FNS, type UnaryFn, BINARY_FNS, type BinaryFn } from './scalar_fns.js';

/** the numeric attrs of the unary fns, each with the fns that read it and their defaults */
function unaryAttrDocs(): Record<string, string> {
  const uses = new Map<string, string[]>();
  for (const fn of UNARY_FNS) {
    for (const [name, dflt] of Object.entries(UNARY_FNS_TABLE[fn].attrs as Record<string, number>)) {
      uses.set(name, [...(uses.get(name) ?? []), `${fn} (default ${dflt})`]);
    }
  }
  return Object.fromEntries([...uses].map(([name, fns]) => [name, fns.join(', ')]));
}

export const OPS: Record<string, OpDef> = {
  // ---------------------------------------------------------------- forward
  linear: {
    inputs: ['x', 'weight', 'bias?'],
    outputs: ['y'],
    attrs: {},
    doc: 'x [M,K], weight [N,K], bias [N] -> y [M,N] = x @ weight^T + bias.',
  },
  conv2d: {
    inputs: ['x', 'weight', 'bias?'],
    outputs: ['y'],
    attrs: { stride: '[sh,sw]', padding: '[ph,pw] (zeros)', dilation: '[dh,dw]', groups: 'int' },
    doc:
      'x [N,C,H,W], weight [O,C/groups,KH,KW], bias [O] -> y [N,O,OH,OW], ' +
      'OH = floor((H + 2ph - dh*(KH-1) - 1)/sh) + 1 (same for OW). Cross-correlation as torch.nn.functional.conv2d.',
  },
  maxpool2d: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { kernel: '[kh,kw]', stride: '[sh,sw]', padding: '[ph,pw] (-inf padding)' },
    doc: 'x [N,C,H,W] -> y [N,C,OH,OW], OH = floor((H + 2ph - kh)/sh) + 1. ceil_mode=false, dilation 1.',
  },
  avgpool2d: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { kernel: '[kh,kw]', stride: '[sh,sw]', padding: '[ph,pw]' },
    doc: 'Like maxpool2d but the mean; padded zeros count in the divisor (count_include_pad=true, divisor kh*kw).',
  },
  global_avgpool: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: {},
    doc: 'x [N,C,H,W] -> y [N,C,1,1], mean over H and W (torch AdaptiveAvgPool2d(1)).',
  },
  reshape: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { shape: 'output shape (same element count)' },
    doc: 'Same elements in the same row-major order, new shape. flatten lowers to this.',
  },
  unary: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { fn: UNARY_FNS.join('|'), ...unaryAttrDocs() },
    doc: 'Element-wise y = f(x), f from compiler/ir/scalar_fns.ts: ' + UNARY_FNS.map((f) => `${f}: ${UNARY_FNS_TABLE[f].doc}`).join('; ') + '.',
  },
  binary: {
    inputs: ['a', 'b'],
    outputs: ['y'],
    attrs: { fn: BINARY_FNS.join('|') },
    doc: 'Element-wise with numpy/PyTorch broadcasting (shapes aligned at the right, size-1 dims stretch). y shape is the broadcast shape.',
  },
  softmax: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { axis: 'non-negative axis' },
    doc: 'Numerically stable softmax along axis (subtract the max).',
  },
  log_softmax: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { axis: 'non-negative axis' },
    doc: 'x - max - log(sum(exp(x - max))) along axis.',
  },
  dropout: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { p: 'drop probability in [0,1)', stream: 'int, unique per dropout node in the model' },
    scalars: ['seed', 'counter'],
    doc:
      'Training only (eval programs contain no dropout node). keep(i) = philox_uniform(seed, counter, stream, i) >= p; ' +
      'y[i] = keep(i) ? x[i] / (1-p) : 0. philox_uniform is defined in compiler/ir/philox.ts: Philox4x32-10 with ' +
      'key = (seed, stream), counter = (i, counter, 0, 0); the first 32-bit output / 2^32.',
  },
  batchnorm_train: {
    inputs: ['x', 'weight', 'bias', 'running_mean', 'running_var'],
    outputs: ['y', 'mean', 'invstd'],
    mutates: [3, 4],
    attrs: { eps: 'default 1e-5', momentum: 'default 0.1' },
    doc:
      'x [N,C] or [N,C,H,W]; statistics per channel C over all other dims (count m). mean = sum/m, ' +
      'var = biased variance, invstd = 1/sqrt(var + eps); y = (x-mean)*invstd*weight + bias. ' +
      'running_mean = (1-momentum)*running_mean + momentum*mean; running_var = (1-momentum)*running_var + momentum*var*m/(m-1). ' +
      'Outputs mean and invstd are [C] (saved for backward).',
  },
  batchnorm_eval: {
    inputs: ['x', 'weight', 'bias', 'running_mean', 'running_var'],
    outputs: ['y'],
    attrs: { eps: 'default 1e-5' },
    doc: 'y = (x - running_mean) / sqrt(running_var + eps) * weight + bias, per channel (dim 1).',
  },
  layernorm: {
    inputs: ['x', 'weight', 'bias'],
    outputs: ['y', 'mean', 'rstd'],
    attrs: { eps: 'default 1e-5' },
    doc:
      'Normalise over the last dim D: x [..., D], weight/bias [D]. mean, rstd have shape x.shape[:-1] ' +
      '(rstd = 1/sqrt(biased var + eps)). y = (x-mean)*rstd*weight + bias.',
  },
  embedding: {
    inputs: ['ids', 'weight'],
    outputs: ['y'],
    attrs: {},
    doc: 'ids i32 [...], weight [V,D] -> y [..., D] = weight[ids]. Ids are validated on the host (0 <= id < V).',
  },
  concat: {
    inputs: ['x0', 'x1', '...'],
    outputs: ['y'],
    attrs: { axis: 'non-negative axis' },
    doc: 'Variadic (2 or more inputs); all dims but axis equal.',
  },
  // ---------------------------------------------------------------- losses and metrics (outputs are scalars [])
  cross_entropy: {
    inputs: ['logits', 'label'],
    outputs: ['loss'],
    attrs: { label_smoothing: 'in [0,1), default 0' },
    doc:
      'logits [N,C], label i32 [N]. With logp = log_softmax(logits): loss = mean_n( -(1-ls)*logp[n,label[n]] - ls/C * sum_c logp[n,c] ) ' +
      '(torch.nn.functional.cross_entropy with label_smoothing).',
  },
  nll: {
    inputs: ['logp', 'label'],
    outputs: ['loss'],
    attrs: {},
    doc: 'logp [N,C], label i32 [N]: loss = mean_n(-logp[n,label[n]]).',
  },
  mse: {
    inputs: ['pred', 'target'],
    outputs: ['loss'],
    attrs: {},
    doc: 'pred, target same shape (f32): loss = mean((pred-target)^2).',
  },
  bce_with_logits: {
    inputs: ['logits', 'target'],
    outputs: ['loss'],
    attrs: {},
    doc: 'Same shape (f32 targets in [0,1]): loss = mean(max(x,0) - x*t + log(1+exp(-|x|))).',
  },
  accuracy: {
    inputs: ['logits', 'label'],
    outputs: ['acc'],
    attrs: {},
    doc: 'logits [N,C], label i32 [N]: fraction of rows whose argmax (first maximum on ties) equals label.',
  },
  top_k: {
    inputs: ['logits', 'label'],
    outputs: ['acc'],
    attrs: { k: 'int >= 1' },
    doc: 'Fraction of rows where the label logit is strictly greater than all but fewer than k other logits (count of c with logits[c] > logits[label] is < k).',
  },
  // ---------------------------------------------------------------- backward
  matmul: {
    inputs: ['a', 'b'],
    outputs: ['y'],
    attrs: { transA: 'bool', transB: 'bool' },
    doc: 'y = op(a) @ op(b), op = transpose when the flag is set; 2-D only. Used by linear backward.',
  },
  sum_to: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { shape: 'target shape' },
    doc:
      'Reduce-sum x to shape (the inverse of broadcasting: target aligned at the right, summing dims that were stretched ' +
      'or prepended). Also used for bias gradients: attrs.axes (optional number[]) sums exactly those axes instead, y shape = x shape without them.',
  },
  conv2d_grad_input: {
    inputs: ['dy', 'weight'],
    outputs: ['dx'],
    attrs: { stride: '', padding: '', dilation: '', groups: '', x_shape: 'shape of x' },
    doc: 'Gradient of conv2d with respect to x.',
  },
  conv2d_grad_weight: {
    inputs: ['dy', 'x'],
    outputs: ['dw'],
    attrs: { stride: '', padding: '', dilation: '', groups: '', w_shape: 'shape of weight' },
    doc: 'Gradient of conv2d with respect to weight.',
  },
  maxpool2d_grad: {
    inputs: ['dy', 'x'],
    outputs: ['dx'],
    attrs: { kernel: '', stride: '', padding: '' },
    doc: 'Routes dy to the first maximum of each window (row-major scan order); overlapping windows add.',
  },
  avgpool2d_grad: {
    inputs: ['dy'],
    outputs: ['dx'],
    attrs: { kernel: '', stride: '', padding: '', x_shape: '' },
    doc: 'dx[window] += dy / (kh*kw).',
  },
  global_avgpool_grad: {
    inputs: ['dy'],
    outputs: ['dx'],
    attrs: { x_shape: '' },
    doc: 'dx[n,c,h,w] = dy[n,c,0,0] / (H*W).',
  },
  unary_grad: {
    inputs: ['dy', 'x'],
    outputs: ['dx'],
    attrs: { fn: '', ...unaryAttrDocs() },
    doc: "dx = dy * f'(x) with x the forward input, f' as PyTorch's backward computes it (scalar_fns.ts `grad`, kinks included).",
  },
  softmax_grad: {
    inputs: ['dy', 'y'],
    outputs: ['dx'],
    attrs: { axis: '' },
    doc: 'y = forward output: dx = y * (dy - sum(dy*y, axis)).',
  },
  log_softmax_grad: {
    inputs: ['dy', 'y'],
    outputs: ['dx'],
    attrs: { axis: '' },
    doc: 'y = forward output: dx = dy - exp(y) * sum(dy, axis).',
  },
  dropout_grad: {
    inputs: ['dy'],
    outputs: ['dx'],
    attrs: { p: '', stream: '' },
    scalars: ['seed', 'counter'],
    doc: 'dx[i] = keep(i) ? dy[i]/(1-p) : 0 with the same mask as the forward dropout.',
  },
  batchnorm_grad: {
    inputs: ['dy', 'x', 'weight', 'mean', 'invstd'],
    outputs: ['dx', 'dweight', 'dbias'],
    attrs: {},
    doc: 'Training-mode batchnorm backward (batch statistics), per channel: xhat=(x-mean)*invstd; dbias=sum dy; dweight=sum dy*xhat; dx = weight*invstd/m * (m*dy - dbias - xhat*dweight).',
  },
  layernorm_grad: {
    inputs: ['dy', 'x', 'weight', 'mean', 'rstd'],
    outputs: ['dx', 'dweight', 'dbias'],
    attrs: {},
    doc: 'Layernorm backward over the last dim.',
  },
  embedding_grad: {
    inputs: ['dy', 'ids'],
    outputs: ['dweight'],
    attrs: { w_shape: '[V,D]' },
    doc: 'dweight = zeros; dweight[ids[j]] += dy[j] for every position j.',
  },
  slice: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { axis: '', start: '', length: '' },
    doc: 'y = x[..., start:start+length, ...] along axis (concat backward).',
  },
  cross_entropy_grad: {
    inputs: ['logits', 'label'],
    outputs: ['dlogits'],
    attrs: { label_smoothing: '' },
    doc: 'd loss / d logits for cross_entropy (includes the 1/N of the mean).',
  },
  nll_grad: { inputs: ['logp', 'label'], outputs: ['dlogp'], attrs: {}, doc: 'dlogp[n,label[n]] = -1/N, 0 elsewhere.' },
  mse_grad: { inputs: ['pred', 'target'], outputs: ['dpred'], attrs: {}, doc: 'dpred = 2*(pred-target)/numel.' },
  bce_with_logits_grad: { inputs: ['logits', 'target'], outputs: ['dlogits'], attrs: {}, doc: '(sigmoid(x) - t)/numel.' },
  // ---------------------------------------------------------------- gradient plumbing and optimizers
  grad_accumulate: {
    inputs: ['acc', 'g'],
    outputs: [],
    mutates: [0],
    attrs: { scale: 'f32, 1/grad_accum' },
    doc: 'acc += scale * g (acc is a gradacc value).',
  },
  zero: { inputs: ['x'], outputs: [], mutates: [0], attrs: {}, doc: 'x = 0 (gradacc values after an update).' },
  grad_norm: {
    inputs: ['g0', 'g1', '...'],
    outputs: ['norm'],
    attrs: {},
    doc: 'Variadic: norm = sqrt(sum over all inputs of sum(g^2)) (torch.nn.utils.clip_grad_norm_ total norm, p=2).',
  },
  clip_coef: {
    inputs: ['norm'],
    outputs: ['coef'],
    attrs: { max_norm: 'f32' },
    doc: 'coef = min(1, max_norm / (norm + 1e-6)) (scalar), fed to the optimizer ops as gscale.',
  },
  sgd_update: {
    inputs: ['param', 'grad', 'momentum_buffer?', 'gscale?'],
    outputs: [],
    mutates: [0, 2],
    attrs: { momentum: 'f32', nesterov: 'bool', weight_decay: 'f32' },
    scalars: ['lr'],
    doc:
      'torch.optim.SGD (dampening 0): grad *= gscale (scalar, when present: gradient clipping); g = grad + weight_decay*param; if momentum != 0: buf = momentum*buf + g ' +
      '(buf starts at 0, so the first step gives buf = g as in torch); g = nesterov ? g + momentum*buf : buf. param -= lr*g.',
  },
  adam_update: {
    inputs: ['param', 'grad', 'exp_avg', 'exp_avg_sq', 'gscale?'],
    outputs: [],
    mutates: [0, 2, 3],
    attrs: { beta1: 'f32', beta2: 'f32', eps: 'f32', weight_decay: 'f32', decoupled: 'bool (adamw)' },
    scalars: ['lr', 't'],
    doc:
      'torch.optim.Adam / AdamW (amsgrad false). grad *= gscale when present. adam: g = grad + weight_decay*param. adamw: param *= 1 - lr*weight_decay. ' +
      'exp_avg = beta1*exp_avg + (1-beta1)*g; exp_avg_sq = beta2*exp_avg_sq + (1-beta2)*g*g; bc1 = 1-beta1^t; bc2 = 1-beta2^t; ' +
      'param -= (lr/bc1) * exp_avg / (sqrt(exp_avg_sq)/sqrt(bc2) + eps).',
  },
};

export function opDef(op: string): OpDef {
  const d = OPS[op];
  if (!d) throw new Error(`internal: unknown IR op '${op}'`);
  return d;
}
