/**
 * Optimizer ops (sgd_update, adam_update), grad_norm, clip_coef, grad_accumulate and zero:
 * N steps on a tiny vector against PyTorch's update formulas written out again here, plus
 * a few cases worked by hand.
 */
import { describe, expect, it } from 'vitest';
import type { StepScalars } from '../compiler/ir/graph.js';
import { makeRng, randomTensor, relError, runOp } from '../compiler/reference/fixtures.js';

const v = (data: Float64Array | number[]) => ({ shape: [data.length], data: data instanceof Float64Array ? data : Float64Array.from(data) });
const scalar = (x: number) => ({ shape: [], data: Float64Array.from([x]) });
const step = (lr: number, t: number): StepScalars => ({ lr, t, seed: 0, counter: 0 });

/** gradient of the toy objective sum(c * p^2 + p) at p, different per step so momentum matters */
function toyGrad(p: Float64Array, k: number): Float64Array {
  return p.map((x, i) => 2 * (1 + 0.1 * i) * x + Math.sin(k + i));
}

describe('sgd_update', () => {
  const cfgs = [
    { name: 'plain', momentum: 0, nesterov: false, weight_decay: 0, gs: undefined },
    { name: 'momentum', momentum: 0.9, nesterov: false, weight_decay: 0, gs: undefined },
    { name: 'nesterov', momentum: 0.9, nesterov: true, weight_decay: 0, gs: undefined },
    { name: 'weight decay + momentum', momentum: 0.5, nesterov: false, weight_decay: 0.01, gs: undefined },
    { name: 'weight decay, no momentum, gscale', momentum: 0, nesterov: false, weight_decay: 0.1, gs: 0.3 },
    { name: 'nesterov + weight decay + gscale', momentum: 0.8, nesterov: true, weight_decay: 0.05, gs: 0.5 },
  ];
  for (const cfg of cfgs) {
    it(`${cfg.name}: 6 steps match torch.optim.SGD`, () => {
      const rng = makeRng(1);
      const p = randomTensor([5], rng), buf = new Float64Array(5);
      const pRef = Float64Array.from(p), bufRef = new Float64Array(5);
      const lrs = [0.1, 0.1, 0.05, 0.05, 0.02, 0.01];
      lrs.forEach((lr, k) => {
        const grad = toyGrad(pRef, k);
        // torch.optim.SGD._single_tensor_sgd, dampening 0; clip_grad_norm_ scales grads first
        for (let i = 0; i < 5; i++) {
          let d = grad[i] * (cfg.gs ?? 1);
          if (cfg.weight_decay !== 0) d = d + cfg.weight_decay * pRef[i];
          if (cfg.momentum !== 0) {
            bufRef[i] = k === 0 ? d : cfg.momentum * bufRef[i] + d; // torch: buf = clone(d) on the first step
            d = cfg.nesterov ? d + cfg.momentum * bufRef[i] : bufRef[i];
          }
          pRef[i] = pRef[i] - lr * d;
        }
        runOp('sgd_update', [v(p), v(grad), cfg.momentum !== 0 ? v(buf) : null, cfg.gs !== undefined ? scalar(cfg.gs) : null], [], { momentum: cfg.momentum, nesterov: cfg.nesterov, weight_decay: cfg.weight_decay }, step(lr, k + 1));
      });
      expect(relError(p, pRef)).toBeLessThan(1e-14);
      if (cfg.momentum !== 0) expect(relError(buf, bufRef)).toBeLessThan(1e-14);
      else expect(Array.from(buf)).toEqual([0, 0, 0, 0, 0]);
    });
  }
  it('by hand: momentum 0.9 and nesterov, grad 1, lr 0.1, two steps', () => {
    // momentum: buf = 1, p = 1 - 0.1 = 0.9; buf = 0.9 + 1 = 1.9, p = 0.9 - 0.19 = 0.71
    // nesterov: buf = 1, g = 1 + 0.9 = 1.9, p = 0.81; buf = 1.9, g = 1 + 1.71 = 2.71, p = 0.539
    for (const [nesterov, want] of [[false, 0.71], [true, 0.539]] as [boolean, number][]) {
      const p = Float64Array.from([1]), buf = new Float64Array(1);
      for (let t = 1; t <= 2; t++) runOp('sgd_update', [v(p), v([1]), v(buf), null], [], { momentum: 0.9, nesterov, weight_decay: 0 }, step(0.1, t));
      expect(p[0]).toBeCloseTo(want, 14);
    }
  });
  it('does not write the gradient', () => {
    const g = Float64Array.from([1, 2]);
    runOp('sgd_update', [v([0, 0]), v(g), null, scalar(0.5)], [], { momentum: 0, nesterov: false, weight_decay: 0 }, step(0.1, 1));
    expect(Array.from(g)).toEqual([1, 2]);
  });
});

describe('adam_update', () => {
  const cfgs = [
    { name: 'adam', decoupled: false, weight_decay: 0, gs: undefined },
    { name: 'adam + L2 weight decay', decoupled: false, weight_decay: 0.1, gs: undefined },
    { name: 'adamw', decoupled: true, weight_decay: 0.01, gs: undefined },
    { name: 'adam + gscale', decoupled: false, weight_decay: 0.05, gs: 0.25 },
    { name: 'adamw + gscale', decoupled: true, weight_decay: 0.1, gs: 0.7 },
  ];
  for (const cfg of cfgs) {
    it(`${cfg.name}: 7 steps match torch.optim.${cfg.decoupled ? 'AdamW' : 'Adam'}`, () => {
      const rng = makeRng(2);
      const b1 = 0.9, b2 = 0.999, eps = 1e-8;
      const p = randomTensor([4], rng), m = new Float64Array(4), s = new Float64Array(4);
      const pRef = Float64Array.from(p), mRef = new Float64Array(4), sRef = new Float64Array(4);
      for (let t = 1; t <= 7; t++) {
        const lr = 0.01 * (1 + (t % 3));
        const grad = toyGrad(pRef, t);
        // torch.optim.adam._single_tensor_adam (amsgrad false); AdamW: param.mul_(1 - lr * weight_decay) first
        for (let i = 0; i < 4; i++) {
          let g = grad[i] * (cfg.gs ?? 1);
          if (cfg.decoupled) pRef[i] = pRef[i] * (1 - lr * cfg.weight_decay);
          else if (cfg.weight_decay !== 0) g = g + cfg.weight_decay * pRef[i];
          mRef[i] = mRef[i] + (g - mRef[i]) * (1 - b1); // torch lerp_ form
          sRef[i] = sRef[i] * b2 + (1 - b2) * g * g;
          const bias1 = 1 - b1 ** t, bias2 = 1 - b2 ** t;
          const denom = Math.sqrt(sRef[i]) / Math.sqrt(bias2) + eps;
          pRef[i] = pRef[i] - (lr / bias1) * (mRef[i] / denom);
        }
        runOp('adam_update', [v(p), v(grad), v(m), v(s), cfg.gs !== undefined ? scalar(cfg.gs) : null], [], { beta1: b1, beta2: b2, eps, weight_decay: cfg.weight_decay, decoupled: cfg.decoupled }, step(lr, t));
      }
      expect(relError(p, pRef)).toBeLessThan(1e-13);
      expect(relError(m, mRef)).toBeLessThan(1e-13);
      expect(relError(s, sRef)).toBeLessThan(1e-13);
    });
  }
  it('by hand: the first adam step moves by lr * g/|g|', () => {
    // p = 1, g = 0.5, lr = 0.1: m = 0.05, v = 0.00025, bc1 = 0.1, bc2 = 0.001;
    // p -= (0.1/0.1) * 0.05 / (sqrt(0.00025)/sqrt(0.001) + 1e-8) = 0.05 / (0.5 + 1e-8)
    const p = Float64Array.from([1]), m = new Float64Array(1), s = new Float64Array(1);
    runOp('adam_update', [v(p), v([0.5]), v(m), v(s), null], [], { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0, decoupled: false }, step(0.1, 1));
    expect(p[0]).toBeCloseTo(0.900000002, 15);
    expect(m[0]).toBeCloseTo(0.05, 15);
    expect(s[0]).toBeCloseTo(0.00025, 15);
  });
  it('by hand: adamw decays the parameter before the update', () => {
    // p = 2, g = 0 -> m = v = 0, the update is 0; only p *= 1 - 0.1*0.5 = 0.95
    const p = Float64Array.from([2]);
    runOp('adam_update', [v(p), v([0]), v([0]), v([0]), null], [], { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.5, decoupled: true }, step(0.1, 3));
    expect(p[0]).toBeCloseTo(1.9, 15);
  });
});

describe('grad_norm / clip_coef / grad_accumulate / zero', () => {
  it('grad_norm over several tensors', () => {
    // sqrt(3^2 + 4^2 + 12^2) = 13
    expect(runOp('grad_norm', [v([3]), { shape: [1, 2], data: Float64Array.from([4, 12]) }], [[]])[0][0]).toBeCloseTo(13, 14);
  });
  it('clip_coef = min(1, max_norm / (norm + 1e-6))', () => {
    expect(runOp('clip_coef', [scalar(5)], [[]], { max_norm: 1 })[0][0]).toBeCloseTo(1 / (5 + 1e-6), 15);
    expect(runOp('clip_coef', [scalar(5)], [[]], { max_norm: 10 })[0][0]).toBe(1);
  });
  it('grad_accumulate adds scale*g in place and zero clears', () => {
    const acc = Float64Array.from([1, 2]);
    runOp('grad_accumulate', [v(acc), v([4, 8])], [], { scale: 0.25 });
    expect(Array.from(acc)).toEqual([2, 4]);
    runOp('zero', [v(acc)], []);
    expect(Array.from(acc)).toEqual([0, 0]);
  });
});
