/**
 * Op rules, row-statistics family: softmax / log_softmax, batchnorm (train, eval), layernorm
 * and their gradients (see ops.ts for what each field means).
 */
import type { OpDef, ShapeCtx, VjpCtx } from '../ops.js';

function axisShape(c: ShapeCtx): (readonly number[])[] {
  const axis = c.attrs.axis;
  c.want(typeof axis === 'number' && Number.isInteger(axis) && axis >= 0 && axis < c.in(0).length, `axis ${String(axis)} out of range for rank ${c.in(0).length}`);
  return [c.in(0)];
}

/** batchnorm_train / layernorm: only output 0 is differentiated (mean / invstd are saved statistics) */
function normVjp(gradOp: string) {
  return (c: VjpCtx) => {
    if (c.hasDy(1) || c.hasDy(2)) throw new Error(`internal: autodiff: gradient reaches the saved statistics of ${c.node.op}`);
    if (!(c.need(0) || c.need(1) || c.need(2))) return;
    const outs = c.emitN(gradOp, [c.dy(), c.x(0), c.x(1), c.y(1), c.y(2)], [c.x(0), c.x(1), c.x(2)]);
    for (let j = 0; j < 3; j++) if (c.need(j)) c.acc(j, outs[j]);
  };
}

function normGradShape(c: ShapeCtx): (readonly number[])[] {
  c.sameAs(1, c.in(0), 'x');
  return [c.in(0), c.in(2), c.in(2)];
}

export const NORM_OPS = {
  softmax: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { axis: 'non-negative axis' },
    doc: 'Numerically stable softmax along axis (subtract the max).',
    category: 'forward',
    shape: axisShape,
    vjp(c) {
      if (c.need(0)) c.acc(0, c.emit('softmax_grad', [c.dy(), c.y(0)], c.x(0), { axis: c.node.attrs.axis }));
    },
    flops: { perElement: 5 },
  },
  log_softmax: {
    inputs: ['x'],
    outputs: ['y'],
    attrs: { axis: 'non-negative axis' },
    doc: 'x - max - log(sum(exp(x - max))) along axis.',
    category: 'forward',
    shape: axisShape,
    vjp(c) {
      if (c.need(0)) c.acc(0, c.emit('log_softmax_grad', [c.dy(), c.y(0)], c.x(0), { axis: c.node.attrs.axis }));
    },
    flops: { perElement: 5 },
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
    category: 'forward',
    shape(c) {
      const ch = [c.in(0)[1]];
      for (let k = 1; k < 5; k++) c.sameAs(k, ch, `input ${k}`);
      return [c.in(0), ch, ch];
    },
    vjp: normVjp('batchnorm_grad'),
    flops: { perElement: 8 },
    evalMode: { op: 'batchnorm_eval', outputs: 1, dropAttrs: ['momentum'] },
  },
  batchnorm_eval: {
    inputs: ['x', 'weight', 'bias', 'running_mean', 'running_var'],
    outputs: ['y'],
    attrs: { eps: 'default 1e-5' },
    doc: 'y = (x - running_mean) / sqrt(running_var + eps) * weight + bias, per channel (dim 1).',
    category: 'forward',
    shape(c) {
      for (let k = 1; k < 5; k++) c.sameAs(k, [c.in(0)[1]], `input ${k}`);
      return [c.in(0)];
    },
    flops: { perElement: 2 },
  },
  layernorm: {
    inputs: ['x', 'weight', 'bias'],
    outputs: ['y', 'mean', 'rstd'],
    attrs: { eps: 'default 1e-5' },
    doc:
      'Normalise over the last dim D: x [..., D], weight/bias [D]. mean, rstd have shape x.shape[:-1] ' +
      '(rstd = 1/sqrt(biased var + eps)). y = (x-mean)*rstd*weight + bias.',
    category: 'forward',
    shape(c) {
      const x = c.in(0);
      for (let k = 1; k < 3; k++) c.sameAs(k, [x[x.length - 1]], `input ${k}`);
      return [x, x.slice(0, -1), x.slice(0, -1)];
    },
    vjp: normVjp('layernorm_grad'),
    flops: { perElement: 8 },
  },
  softmax_grad: {
    inputs: ['dy', 'y'],
    outputs: ['dx'],
    attrs: { axis: '' },
    doc: 'y = forward output: dx = y * (dy - sum(dy*y, axis)).',
    category: 'backward',
    shape(c) {
      c.sameAs(1, c.in(0), 'second input');
      return axisShape(c);
    },
    flops: { perElement: 3 },
  },
  log_softmax_grad: {
    inputs: ['dy', 'y'],
    outputs: ['dx'],
    attrs: { axis: '' },
    doc: 'y = forward output: dx = dy - exp(y) * sum(dy, axis).',
    category: 'backward',
    shape(c) {
      c.sameAs(1, c.in(0), 'second input');
      return axisShape(c);
    },
    flops: { perElement: 3 },
  },
  batchnorm_grad: {
    inputs: ['dy', 'x', 'weight', 'mean', 'invstd'],
    outputs: ['dx', 'dweight', 'dbias'],
    attrs: {},
    doc: 'Training-mode batchnorm backward (batch statistics), per channel: xhat=(x-mean)*invstd; dbias=sum dy; dweight=sum dy*xhat; dx = weight*invstd/m * (m*dy - dbias - xhat*dweight).',
    category: 'backward',
    shape: normGradShape,
    flops: { perElement: 10 },
  },
  layernorm_grad: {
    inputs: ['dy', 'x', 'weight', 'mean', 'rstd'],
    outputs: ['dx', 'dweight', 'dbias'],
    attrs: {},
    doc: 'Layernorm backward over the last dim.',
    category: 'backward',
    shape: normGradShape,
    flops: { perElement: 10 },
  },
} satisfies Record<string, OpDef>;
