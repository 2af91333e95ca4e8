/**
 * Gradient plumbing and optimizer updates. These mutate persistent inputs in place
 * (ops.ts `mutates`); the gradient inputs themselves are never written.
 */
import { numel } from '../ir/graph.js';
import { type OpCtx, type OpImpl, boolAttr, expectShape, fail, input, inShape, numAttr } from './kernel.js';

/** acc += scale * g */
export const grad_accumulate: OpImpl = (c: OpCtx) => {
  const acc = input(c, 0), g = input(c, 1), scale = numAttr(c, 'scale');
  expectShape(c, 'g', inShape(c, 1), inShape(c, 0));
  for (let i = 0; i < acc.length; i++) acc[i] += scale * g[i];
};

/** x = 0 */
export const zero: OpImpl = (c: OpCtx) => {
  input(c, 0).fill(0);
};

/** norm = sqrt(sum over all inputs of sum(g^2)) */
export const grad_norm: OpImpl = (c: OpCtx) => {
  expectShape(c, 'norm', c.outShapes[0], []);
  let s = 0;
  for (let k = 0; k < c.inputs.length; k++) {
    const g = input(c, k);
    for (let i = 0; i < g.length; i++) s += g[i] * g[i];
  }
  c.outputs[0][0] = Math.sqrt(s);
};

/** coef = min(1, max_norm / (norm + 1e-6)) */
export const clip_coef: OpImpl = (c: OpCtx) => {
  const norm = scalarInput(c, 0), maxNorm = numAttr(c, 'max_norm');
  expectShape(c, 'coef', c.outShapes[0], []);
  c.outputs[0][0] = Math.min(1, maxNorm / (norm + 1e-6));
};

function scalarInput(c: OpCtx, i: number): number {
  const s = inShape(c, i);
  if (numel(s) !== 1) fail(c, `input ${i} must be a scalar, got shape [${s.join(',')}]`);
  return input(c, i)[0];
}

/** The optional gscale input (index i), 1 when absent. */
function gscale(c: OpCtx, i: number): number {
  return c.inputs[i] ? scalarInput(c, i) : 1;
}

/**
 * torch.optim.SGD (dampening 0): grad *= gscale; g = grad + wd*param;
 * if momentum != 0: buf = momentum*buf + g; g = nesterov ? g + momentum*buf : buf. param -= lr*g.
 */
export const sgd_update: OpImpl = (c: OpCtx) => {
  const p = input(c, 0), grad = input(c, 1), buf = c.inputs[2];
  const ps = inShape(c, 0);
  expectShape(c, 'grad', inShape(c, 1), ps);
  const momentum = numAttr(c, 'momentum', 0), nesterov = boolAttr(c, 'nesterov', false), wd = numAttr(c, 'weight_decay', 0);
  if (momentum !== 0) {
    if (!buf) fail(c, 'momentum != 0 needs a momentum_buffer input');
    expectShape(c, 'momentum_buffer', c.inShapes[2]!, ps);
  }
  const gs = gscale(c, 3), lr = c.scalars.lr;
  for (let i = 0; i < p.length; i++) {
    let g = grad[i] * gs + wd * p[i];
    if (momentum !== 0) {
      buf![i] = momentum * buf![i] + g;
      g = nesterov ? g + momentum * buf![i] : buf![i];
    }
    p[i] -= lr * g;
  }
};

/**
 * torch.optim.Adam / AdamW (amsgrad false): grad *= gscale; adam: g = grad + wd*param;
 * adamw: param *= 1 - lr*wd. exp_avg = b1*exp_avg + (1-b1)*g; exp_avg_sq = b2*exp_avg_sq + (1-b2)*g^2;
 * param -= (lr/bc1) * exp_avg / (sqrt(exp_avg_sq)/sqrt(bc2) + eps), bc_k = 1 - beta_k^t.
 */
export const adam_update: OpImpl = (c: OpCtx) => {
  const p = input(c, 0), grad = input(c, 1), m = input(c, 2), v = input(c, 3);
  const ps = inShape(c, 0);
  for (let i = 1; i <= 3; i++) expectShape(c, `input ${i}`, inShape(c, i), ps);
  const b1 = numAttr(c, 'beta1'), b2 = numAttr(c, 'beta2'), eps = numAttr(c, 'eps');
  const wd = numAttr(c, 'weight_decay', 0), decoupled = boolAttr(c, 'decoupled', false);
  const { lr, t } = c.scalars;
  if (!(Number.isInteger(t) && t >= 1)) fail(c, `step t must be an integer >= 1, got ${t}`);
  const gs = gscale(c, 4);
  const bc1 = 1 - Math.pow(b1, t), bc2 = 1 - Math.pow(b2, t);
  const stepSize = lr / bc1, sqrtBc2 = Math.sqrt(bc2);
  for (let i = 0; i < p.length; i++) {
    let g = grad[i] * gs;
    if (decoupled) p[i] *= 1 - lr * wd;
    else g += wd * p[i];
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = b2 * v[i] + (1 - b2) * g * g;
    p[i] -= (stepSize * m[i]) / (Math.sqrt(v[i]) / sqrtBc2 + eps);
  }
};
