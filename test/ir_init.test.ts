/**
 * init: PyTorch's init formulas (bounds and moments within statistical tolerance),
 * reproducibility for a seed, and independence of layers (adding a layer does not
 * change the others).
 */
import { describe, expect, it } from 'vitest';
import { GraphBuilder } from '../compiler/ir/graph.js';
import { UserError } from '../compiler/errors.js';
import type { CheckedModel, InitSpec } from '../compiler/model.js';
import { calculateGain, fanInOut, initParams, initTensor } from '../compiler/train/init.js';
import { makeModel } from './ir_helpers.js';

function stats(a: Float32Array): { min: number; max: number; mean: number; std: number } {
  let min = Infinity, max = -Infinity, s = 0, s2 = 0;
  for (const x of a) {
    min = Math.min(min, x);
    max = Math.max(max, x);
    s += x;
    s2 += x * x;
  }
  const mean = s / a.length;
  return { min, max, mean, std: Math.sqrt(s2 / a.length - mean * mean) };
}

const t = (path: string, shape: number[], init: InitSpec) => ({ path, shape, init });

describe('init formulas', () => {
  it('default_weight = kaiming_uniform(a=sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for linear and conv', () => {
    for (const [shape, fanIn] of [
      [[256, 100], 100],
      [[32, 3, 5, 5], 75],
    ] as [number[], number][]) {
      const a = initTensor(t('w', shape, { kind: 'default_weight' }), 1);
      const b = 1 / Math.sqrt(fanIn);
      const s = stats(a);
      expect(s.min).toBeGreaterThanOrEqual(-b);
      expect(s.max).toBeLessThanOrEqual(b);
      expect(s.min).toBeLessThan(-0.98 * b);
      expect(s.max).toBeGreaterThan(0.98 * b);
      expect(Math.abs(s.mean)).toBeLessThan(0.05 * b);
      expect(s.std / (b / Math.sqrt(3))).toBeCloseTo(1, 1);
    }
    // the same bound through the generic kaiming_uniform with leaky_relu gain sqrt(2/(1+5))
    expect((Math.sqrt(3) * calculateGain('leaky_relu', Math.sqrt(5))) / Math.sqrt(100)).toBeCloseTo(0.1, 15);
  });

  it('default_bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in))', () => {
    const a = initTensor(t('b', [4000], { kind: 'default_bias', fan_in: 16 }), 3);
    const s = stats(a);
    expect(s.min).toBeGreaterThanOrEqual(-0.25);
    expect(s.max).toBeLessThanOrEqual(0.25);
    expect(s.std).toBeCloseTo(0.25 / Math.sqrt(3), 2);
  });

  it('normal, uniform, constant, zeros, ones', () => {
    const n = stats(initTensor(t('n', [100, 100], { kind: 'normal', mean: 1, std: 2 }), 5));
    expect(n.mean).toBeCloseTo(1, 1);
    expect(n.std / 2).toBeCloseTo(1, 1);
    const u = stats(initTensor(t('u', [10000], { kind: 'uniform', a: -3, b: 1 }), 5));
    expect(u.min).toBeGreaterThanOrEqual(-3);
    expect(u.max).toBeLessThanOrEqual(1);
    expect(u.mean).toBeCloseTo(-1, 1);
    expect(Array.from(initTensor(t('c', [3], { kind: 'constant', value: 0.5 }), 1))).toEqual([0.5, 0.5, 0.5]);
    expect(Array.from(initTensor(t('z', [2], { kind: 'zeros' }), 1))).toEqual([0, 0]);
    expect(Array.from(initTensor(t('o', [2], { kind: 'ones' }), 1))).toEqual([1, 1]);
  });

  it('xavier_uniform / xavier_normal / kaiming_normal use torch fan and gain rules', () => {
    expect(fanInOut([16, 3, 5, 5], 'w')).toEqual({ fanIn: 75, fanOut: 400 });
    expect(calculateGain('relu', 0)).toBeCloseTo(Math.SQRT2, 15);
    expect(calculateGain('linear', 0)).toBe(1);
    expect(calculateGain('leaky_relu', 0.2)).toBeCloseTo(Math.sqrt(2 / 1.04), 15);
    const xu = stats(initTensor(t('xu', [200, 100], { kind: 'xavier_uniform', gain: 2 }), 7));
    const xb = 2 * Math.sqrt(6 / 300);
    expect(xu.max).toBeLessThanOrEqual(xb);
    expect(xu.min).toBeGreaterThanOrEqual(-xb);
    expect(xu.std / (xb / Math.sqrt(3))).toBeCloseTo(1, 1);
    const xn = stats(initTensor(t('xn', [200, 100], { kind: 'xavier_normal', gain: 1 }), 7));
    expect(xn.std / Math.sqrt(2 / 300)).toBeCloseTo(1, 1);
    const kn = stats(initTensor(t('kn', [64, 8, 3, 3], { kind: 'kaiming_normal', a: 0, nonlinearity: 'relu' }), 7));
    expect(kn.std / (Math.SQRT2 / Math.sqrt(72))).toBeCloseTo(1, 1);
    expect(Math.abs(kn.mean)).toBeLessThan(0.02);
    const ku = stats(initTensor(t('ku', [300, 50], { kind: 'kaiming_uniform', a: 0, nonlinearity: 'relu' }), 7));
    const kb = Math.sqrt(3) * Math.SQRT2 / Math.sqrt(50);
    expect(ku.max).toBeLessThanOrEqual(kb);
    expect(ku.max).toBeGreaterThan(0.98 * kb);
  });

  it('fan-based init of a 1-D tensor is a user error naming the tensor', () => {
    expect(() => initTensor(t('fc.bias', [4], { kind: 'xavier_uniform', gain: 1 }), 0)).toThrow(UserError);
    expect(() => initTensor(t('fc.bias', [4], { kind: 'xavier_uniform', gain: 1 }), 0)).toThrow(/fc\.bias/);
  });
});

describe('initParams', () => {
  function model(extra: boolean): CheckedModel {
    const b = new GraphBuilder();
    b.value('x', 'f32', [-1, 4], 'input');
    if (extra) b.value('extra.weight', 'f32', [4, 4], 'param');
    b.value('fc.weight', 'f32', [3, 4], 'param');
    b.value('fc.bias', 'f32', [3], 'param');
    b.value('bn.running_var', 'f32', [3], 'state');
    b.value('bn.running_mean', 'f32', [3], 'state');
    const init = (name: string): InitSpec =>
      name.endsWith('weight') ? { kind: 'default_weight' } : name === 'fc.bias' ? { kind: 'default_bias', fan_in: 4 } : name.endsWith('running_var') ? { kind: 'ones' } : { kind: 'zeros' };
    return makeModel(b.graph, { loss: null, init });
  }

  it('covers every param and state, is reproducible, depends on the seed, and layers are independent', () => {
    const a = initParams(model(false), 11);
    expect([...a.keys()].sort()).toEqual(['bn.running_mean', 'bn.running_var', 'fc.bias', 'fc.weight']);
    expect(Array.from(a.get('bn.running_var')!)).toEqual([1, 1, 1]);
    expect(Array.from(a.get('bn.running_mean')!)).toEqual([0, 0, 0]);
    const again = initParams(model(false), 11);
    expect(again.get('fc.weight')).toEqual(a.get('fc.weight'));
    const other = initParams(model(false), 12);
    expect(other.get('fc.weight')).not.toEqual(a.get('fc.weight'));
    const withExtra = initParams(model(true), 11);
    expect(withExtra.get('fc.weight')).toEqual(a.get('fc.weight'));
    expect(withExtra.get('fc.bias')).toEqual(a.get('fc.bias'));
    // different tensors with the same shape and init get different values
    expect(withExtra.get('extra.weight')!.slice(0, 12)).not.toEqual(a.get('fc.weight'));
  });
});
