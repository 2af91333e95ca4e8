/**
 * Op rules, gradient plumbing and optimizers: grad_accumulate, zero, grad_norm, clip_coef,
 * sgd_update, adam_update (see ops.ts for what each field means). None has a gradient.
 */
import type { OpDef, ShapeCtx } from '../ops.js';

/** param [..]: the other tensor inputs (when present) have its shape; the last one, gscale, is a scalar */
function updateShape(c: ShapeCtx): (readonly number[])[] {
  const p = c.in(0), last = c.count - 1;
  for (let k = 1; k < last; k++) if (c.has(k)) c.sameAs(k, p, `input ${k}`);
  if (c.has(last)) c.sameAs(last, [], 'gscale');
  return [];
}

export const OPTIM_OPS = {
  grad_accumulate: {
    inputs: ['acc', 'g'],
    outputs: [],
    mutates: [0],
    attrs: { scale: 'f32, 1/grad_accum' },
    doc: 'acc += scale * g (acc is a gradacc value).',
    category: 'optimizer',
    shape(c) {
      c.sameAs(1, c.in(0), 'g');
      return [];
    },
  },
  zero: {
    inputs: ['x'], outputs: [], mutates: [0], attrs: {}, doc: 'x = 0 (gradacc values after an update).',
    category: 'optimizer', shape: () => [], flops: { perElement: 0 },
  },
  grad_norm: {
    inputs: ['g0', 'g1', '...'],
    minInputs: 1,
    outputs: ['norm'],
    attrs: {},
    doc: 'Variadic: norm = sqrt(sum over all inputs of sum(g^2)) (torch.nn.utils.clip_grad_norm_ total norm, p=2).',
    category: 'optimizer',
    shape: () => [[]],
    flops: { perElement: 2 },
  },
  clip_coef: {
    inputs: ['norm'],
    outputs: ['coef'],
    attrs: { max_norm: 'f32' },
    doc: 'coef = min(1, max_norm / (norm + 1e-6)) (scalar), fed to the optimizer ops as gscale.',
    category: 'optimizer',
    shape(c) {
      c.sameAs(0, [], 'norm');
      return [[]];
    },
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
    category: 'optimizer',
    shape: updateShape,
    flops: { perElement: 5 },
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
    category: 'optimizer',
    shape: updateShape,
    flops: { perElement: 12 },
  },
} satisfies Record<string, OpDef>;
