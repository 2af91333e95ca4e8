/**
 * schedules: lrAt gives the lr of each optimizer step exactly as torch.optim.lr_scheduler
 * (scheduler.step() after every optimizer.step()): literal values derived by hand from
 * torch's definitions, and agreement with torch's recursive (chainable) get_lr forms
 * written out below.
 */
import { describe, expect, it } from 'vitest';
import type { ScheduleConfig } from '../compiler/model.js';
import { lrAt } from '../compiler/train/schedule.js';

const noWarm = { warmup_steps: 0, warmup_start_factor: 1 };
const lrs = (s: ScheduleConfig, base: number, n: number, total = n) => Array.from({ length: n }, (_, i) => lrAt(s, base, i, total));
const close = (xs: number[]) => xs.map((x) => expect.closeTo(x, 12));

/** python's % (non-negative for a positive modulus) */
const pymod = (a: number, m: number) => ((a % m) + m) % m;

/**
 * torch's recursive get_lr for the main schedulers, stepping from last_epoch 0:
 * returns the group lr after each scheduler.step(), i.e. lr used by update e.
 */
function torchRecursive(s: ScheduleConfig, base: number, n: number, total: number): number[] {
  const out: number[] = [];
  let lr = base;
  const W = s.warmup_steps;
  const f = s.warmup_start_factor;
  for (let e = 0; e < n; e++) {
    if (W > 0 && e < W) {
      // LinearLR(start_factor=f, end_factor=1, total_iters=W), recursive form
      if (e === 0) lr = base * f;
      else lr = lr * (1 + (1 - f) / (W * f + (e - 1) * (1 - f)));
      out.push(lr);
      continue;
    }
    const k = e - W; // main scheduler's last_epoch; SequentialLR calls step(0) at the milestone -> closed form at 0 = base
    if (k === 0) lr = base;
    else {
      switch (s.kind) {
        case 'constant':
          break;
        case 'step':
          if (k % s.step_size === 0) lr *= s.gamma;
          break;
        case 'multistep': {
          const c = s.milestones.filter((m) => m === k).length;
          if (c > 0) lr *= Math.pow(s.gamma, c);
          break;
        }
        case 'exponential':
          lr *= s.gamma;
          break;
        case 'cosine': {
          const T = s.t_max ?? total - W;
          if (pymod(k - 1 - T, 2 * T) === 0) lr = lr + ((base - s.eta_min) * (1 - Math.cos(Math.PI / T))) / 2;
          else lr = ((1 + Math.cos((Math.PI * k) / T)) / (1 + Math.cos((Math.PI * (k - 1)) / T))) * (lr - s.eta_min) + s.eta_min;
          break;
        }
      }
    }
    out.push(lr);
  }
  return out;
}

describe('lrAt: literal values from torch definitions', () => {
  it('constant', () => {
    expect(lrs({ kind: 'constant', ...noWarm }, 0.3, 4)).toEqual([0.3, 0.3, 0.3, 0.3]);
  });
  it('StepLR(step_size=2, gamma=0.5)', () => {
    expect(lrs({ kind: 'step', step_size: 2, gamma: 0.5, ...noWarm }, 1, 7)).toEqual([1, 1, 0.5, 0.5, 0.25, 0.25, 0.125]);
  });
  it('MultiStepLR(milestones=[2,5], gamma=0.1)', () => {
    expect(lrs({ kind: 'multistep', milestones: [2, 5], gamma: 0.1, ...noWarm }, 1, 7)).toEqual(close([1, 1, 0.1, 0.1, 0.1, 0.01, 0.01]));
  });
  it('ExponentialLR(gamma=0.9)', () => {
    expect(lrs({ kind: 'exponential', gamma: 0.9, ...noWarm }, 2, 4)).toEqual(close([2, 1.8, 1.62, 1.458]));
  });
  it('CosineAnnealingLR(T_max=4, eta_min=0): half-cosine, then rising again past T_max as torch does', () => {
    const a = (1 + Math.SQRT1_2) / 2; // 0.8535533905932737
    const b = (1 - Math.SQRT1_2) / 2; // 0.14644660940672627
    expect(lrs({ kind: 'cosine', t_max: 4, eta_min: 0, ...noWarm }, 1, 7)).toEqual(close([1, a, 0.5, b, 0, b, 0.5]));
  });
  it('CosineAnnealingLR(T_max=4, eta_min=0.01), base 0.1', () => {
    expect(lrAt({ kind: 'cosine', t_max: 4, eta_min: 0.01, ...noWarm }, 0.1, 2, 100)).toBeCloseTo(0.055, 15);
    expect(lrAt({ kind: 'cosine', t_max: 4, eta_min: 0.01, ...noWarm }, 0.1, 4, 100)).toBeCloseTo(0.01, 15);
  });
  it('LinearLR warmup (3 steps from 0.1) then constant', () => {
    expect(lrs({ kind: 'constant', warmup_steps: 3, warmup_start_factor: 0.1 }, 1, 6)).toEqual(close([0.1, 0.4, 0.7, 1, 1, 1]));
  });
  it('warmup (2 steps from 0.5) then StepLR(step_size=2, gamma=0.5) restarted at the milestone', () => {
    expect(lrs({ kind: 'step', step_size: 2, gamma: 0.5, warmup_steps: 2, warmup_start_factor: 0.5 }, 1, 8)).toEqual(close([0.5, 0.75, 1, 1, 0.5, 0.5, 0.25, 0.25]));
  });
  it('warmup then cosine with t_max null uses total steps minus warmup', () => {
    const s: ScheduleConfig = { kind: 'cosine', t_max: null, eta_min: 0, warmup_steps: 2, warmup_start_factor: 0 };
    expect(lrAt(s, 1, 0, 10)).toBe(0);
    expect(lrAt(s, 1, 1, 10)).toBeCloseTo(0.5, 15);
    expect(lrAt(s, 1, 2, 10)).toBeCloseTo(1, 15);
    expect(lrAt(s, 1, 6, 10)).toBeCloseTo(0.5, 15); // k = 4 = T/2, T = 8
    expect(lrAt(s, 1, 10, 10)).toBeCloseTo(0, 15);
  });
});

describe('lrAt agrees with torch recursive forms over many steps', () => {
  const cases: ScheduleConfig[] = [
    { kind: 'step', step_size: 3, gamma: 0.7, ...noWarm },
    { kind: 'multistep', milestones: [4, 9, 9, 20], gamma: 0.5, ...noWarm },
    { kind: 'exponential', gamma: 0.95, ...noWarm },
    { kind: 'cosine', t_max: 7, eta_min: 0.001, ...noWarm },
    { kind: 'cosine', t_max: null, eta_min: 0, warmup_steps: 5, warmup_start_factor: 0.01 },
    { kind: 'step', step_size: 4, gamma: 0.3, warmup_steps: 3, warmup_start_factor: 0.2 },
    { kind: 'exponential', gamma: 0.9, warmup_steps: 4, warmup_start_factor: 0.25 },
    { kind: 'multistep', milestones: [2, 6], gamma: 0.1, warmup_steps: 1, warmup_start_factor: 0.5 },
  ];
  for (const s of cases) {
    it(`${s.kind}${s.warmup_steps ? ` + warmup ${s.warmup_steps}` : ''}`, () => {
      const n = 40;
      const ours = lrs(s, 0.1, n, 30);
      const torch = torchRecursive(s, 0.1, n, 30);
      for (let i = 0; i < n; i++) expect(Math.abs(ours[i] - torch[i]), `step ${i}: ${ours[i]} vs ${torch[i]}`).toBeLessThan(1e-13);
    });
  }
});
