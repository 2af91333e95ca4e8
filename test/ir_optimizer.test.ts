/**
 * optimizer lowering: N train_step runs of the lowered program in the reference
 * interpreter match PyTorch's update formulas written out here (torch.optim.SGD,
 * Adam, AdamW, clip_grad_norm_), and grad accumulation over K micro-batches equals
 * one step on the big batch for a linear model.
 */
import { describe, expect, it } from 'vitest';
import { GraphBuilder, type Graph } from '../compiler/ir/graph.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { graphProblems } from '../compiler/ir/verify.js';
import { BATCH, type OptimizerConfig } from '../compiler/model.js';
import { makeModel, maxAbsDiff, randArray, rng, runProgram, type Store } from './ir_helpers.js';

const IN = 3;
const OUT = 2;

/** x [N,3] -> linear(W [2,3], b [2]) -> mse(target [N,2]) */
function linearMse(): { graph: Graph; loss: number } {
  const b = new GraphBuilder();
  const x = b.value('x', 'f32', [BATCH, IN], 'input');
  const t = b.value('target', 'f32', [BATCH, OUT], 'input');
  const w = b.value('fc.weight', 'f32', [OUT, IN], 'param');
  const bias = b.value('fc.bias', 'f32', [OUT], 'param');
  const [y] = b.emit('linear', [x, w, bias], [{ name: 'fc.out', shape: [BATCH, OUT] }]);
  const [loss] = b.emit('mse', [y, t], [{ name: 'loss', shape: [], kind: 'output' }]);
  return { graph: b.graph, loss };
}

/** analytic mse gradients of the linear model */
function grads(W: Float64Array, bias: Float64Array, x: Float64Array, t: Float64Array, n: number): { dW: Float64Array; db: Float64Array } {
  const dW = new Float64Array(OUT * IN);
  const db = new Float64Array(OUT);
  for (let i = 0; i < n; i++) {
    for (let o = 0; o < OUT; o++) {
      let pred = bias[o];
      for (let k = 0; k < IN; k++) pred += x[i * IN + k] * W[o * IN + k];
      const d = (2 * (pred - t[i * OUT + o])) / (n * OUT);
      db[o] += d;
      for (let k = 0; k < IN; k++) dW[o * IN + k] += d * x[i * IN + k];
    }
  }
  return { dW, db };
}

interface TorchState {
  p: Float64Array;
  buf: Float64Array;
  m: Float64Array;
  v: Float64Array;
}

/** torch.optim.SGD / Adam / AdamW single-tensor step, written out (dampening 0, amsgrad false, maximize false) */
function torchStep(s: TorchState, grad: Float64Array, opt: OptimizerConfig, lr: number, t: number): void {
  for (let i = 0; i < s.p.length; i++) {
    let g = grad[i];
    if (opt.kind === 'sgd') {
      if (opt.weight_decay !== 0) g = g + opt.weight_decay * s.p[i];
      if (opt.momentum !== 0) {
        s.buf[i] = t === 1 ? g : opt.momentum * s.buf[i] + g; // torch: first step buf = clone(grad)
        g = opt.nesterov ? g + opt.momentum * s.buf[i] : s.buf[i];
      }
      s.p[i] -= lr * g;
    } else {
      if (opt.kind === 'adamw') s.p[i] *= 1 - lr * opt.weight_decay;
      else if (opt.weight_decay !== 0) g = g + opt.weight_decay * s.p[i];
      s.m[i] = opt.beta1 * s.m[i] + (1 - opt.beta1) * g; // torch: exp_avg.lerp_(grad, 1-beta1)
      s.v[i] = opt.beta2 * s.v[i] + (1 - opt.beta2) * g * g;
      const bc1 = 1 - Math.pow(opt.beta1, t);
      const bc2 = 1 - Math.pow(opt.beta2, t);
      const stepSize = lr / bc1;
      const denom = Math.sqrt(s.v[i]) / Math.sqrt(bc2) + opt.eps;
      s.p[i] -= stepSize * (s.m[i] / denom);
    }
  }
}

/** torch.nn.utils.clip_grad_norm_(max_norm): coef = clamp(max_norm / (total + 1e-6), max=1) */
function torchClip(gs: Float64Array[], maxNorm: number): number {
  let sq = 0;
  for (const g of gs) for (const x of g) sq += x * x;
  const total = Math.sqrt(sq);
  const coef = Math.min(1, maxNorm / (total + 1e-6));
  for (const g of gs) for (let i = 0; i < g.length; i++) g[i] *= coef;
  return total;
}

function newState(p: Float64Array): TorchState {
  return { p: Float64Array.from(p), buf: new Float64Array(p.length), m: new Float64Array(p.length), v: new Float64Array(p.length) };
}

const OPTIMIZERS: { name: string; opt: OptimizerConfig; clip: number | null }[] = [
  { name: 'sgd', opt: { kind: 'sgd', lr: 0.1, momentum: 0, nesterov: false, weight_decay: 0 }, clip: null },
  { name: 'sgd momentum + weight decay', opt: { kind: 'sgd', lr: 0.05, momentum: 0.9, nesterov: false, weight_decay: 0.01 }, clip: null },
  { name: 'sgd nesterov', opt: { kind: 'sgd', lr: 0.05, momentum: 0.8, nesterov: true, weight_decay: 0.001 }, clip: null },
  { name: 'adam', opt: { kind: 'adam', lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0 }, clip: null },
  { name: 'adam + L2 weight decay', opt: { kind: 'adam', lr: 0.01, beta1: 0.8, beta2: 0.99, eps: 1e-6, weight_decay: 0.1 }, clip: null },
  { name: 'adamw (decoupled decay)', opt: { kind: 'adamw', lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.05 }, clip: null },
  { name: 'sgd momentum + grad clipping', opt: { kind: 'sgd', lr: 0.1, momentum: 0.9, nesterov: false, weight_decay: 0 }, clip: 0.05 },
  { name: 'adamw + grad clipping', opt: { kind: 'adamw', lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 }, clip: 0.1 },
];

describe('optimizer lowering matches PyTorch formulas', () => {
  for (const { name, opt, clip } of OPTIMIZERS) {
    it(`${name}: 6 steps`, () => {
      const B = 4;
      const { graph, loss } = linearMse();
      const set = buildPrograms(makeModel(graph, { loss, optimizer: opt, train: { batch: B, grad_clip: clip } }), { batch: B });
      const p = set.train_step;
      expect(graphProblems(p.graph)).toEqual([]);
      // state naming
      const optNames = p.graph.values.filter((v) => v.kind === 'optstate').map((v) => v.name).sort();
      if (opt.kind === 'sgd') expect(optNames).toEqual(opt.momentum !== 0 ? ['fc.bias.momentum_buffer', 'fc.weight.momentum_buffer'] : []);
      else expect(optNames).toEqual(['fc.bias.exp_avg', 'fc.bias.exp_avg_sq', 'fc.weight.exp_avg', 'fc.weight.exp_avg_sq']);
      expect(p.graph.nodes.some((n) => n.op === 'grad_norm')).toBe(clip !== null);

      const r = rng(42);
      const store: Store = new Map([
        ['fc.weight', randArray(OUT * IN, r)],
        ['fc.bias', randArray(OUT, r)],
      ]);
      const sw = newState(store.get('fc.weight')!);
      const sb = newState(store.get('fc.bias')!);
      for (let step = 0; step < 6; step++) {
        const x = randArray(B * IN, r, -2, 2);
        const t = randArray(B * OUT, r, -2, 2);
        const lr = opt.lr * (1 - 0.1 * step); // any host-side schedule
        const { dW, db } = grads(sw.p, sb.p, x, t, B);
        if (clip !== null) torchClip([dW, db], clip);
        torchStep(sw, dW, opt, lr, step + 1);
        torchStep(sb, db, opt, lr, step + 1);
        runProgram(p, store, [x, t], { lr, t: step + 1, seed: 1, counter: step });
        expect(maxAbsDiff(store.get('fc.weight')!, sw.p)).toBeLessThan(1e-12);
        expect(maxAbsDiff(store.get('fc.bias')!, sb.p)).toBeLessThan(1e-12);
        if (opt.kind === 'sgd' && opt.momentum !== 0) expect(maxAbsDiff(store.get('fc.weight.momentum_buffer')!, sw.buf)).toBeLessThan(1e-12);
        if (opt.kind !== 'sgd') {
          expect(maxAbsDiff(store.get('fc.weight.exp_avg')!, sw.m)).toBeLessThan(1e-12);
          expect(maxAbsDiff(store.get('fc.weight.exp_avg_sq')!, sw.v)).toBeLessThan(1e-12);
        }
      }
    });
  }

  it('one plain sgd step gives the hand-derived values', () => {
    const { graph, loss } = linearMse();
    const set = buildPrograms(makeModel(graph, { loss, train: { batch: 1 } }), { batch: 1 });
    const store: Store = new Map([
      ['fc.weight', new Float64Array(6)],
      ['fc.bias', new Float64Array(2)],
    ]);
    // pred = 0, dpred = 2*(0 - t)/2 = [-1, 1]; dW = dpred^T x; db = dpred; lr 0.1
    const env = runProgram(set.train_step, store, [Float64Array.of(1, 2, 3), Float64Array.of(1, -1)], { lr: 0.1, t: 1, seed: 0, counter: 0 });
    expect(env.get(set.train_step.outputs[0].value)![0]).toBeCloseTo(1, 14);
    expect(Array.from(store.get('fc.weight')!)).toEqual([0.1, 0.2, 0.30000000000000004, -0.1, -0.2, -0.30000000000000004].map((v) => expect.closeTo(v, 14)));
    expect(Array.from(store.get('fc.bias')!)).toEqual([expect.closeTo(0.1, 14), expect.closeTo(-0.1, 14)]);
  });

  it('the first adam step moves every parameter by lr * g/(|g| + eps) (bias correction)', () => {
    const { graph, loss } = linearMse();
    const opt: OptimizerConfig = { kind: 'adam', lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0 };
    const set = buildPrograms(makeModel(graph, { loss, optimizer: opt, train: { batch: 2 } }), { batch: 2 });
    const r = rng(5);
    const w0 = randArray(6, r);
    const store: Store = new Map([
      ['fc.weight', Float64Array.from(w0)],
      ['fc.bias', new Float64Array(2)],
    ]);
    runProgram(set.train_step, store, [randArray(6, r), randArray(4, r, 3, 4)], { lr: 0.01, t: 1, seed: 0, counter: 0 });
    const w1 = store.get('fc.weight')!;
    for (let i = 0; i < 6; i++) expect(Math.abs(w1[i] - w0[i])).toBeCloseTo(0.01, 7);
  });

  it('grad accumulation: K=2 micro-batches of 3 equal one step on the batch of 6 (sgd momentum, weight decay, clipping)', () => {
    const opt: OptimizerConfig = { kind: 'sgd', lr: 0.1, momentum: 0.9, nesterov: false, weight_decay: 0.01 };
    const { graph, loss } = linearMse();
    const accSet = buildPrograms(makeModel(graph, { loss, optimizer: opt, train: { batch: 3, grad_accum: 2, grad_clip: 0.5 } }), { batch: 3 });
    const bigSet = buildPrograms(makeModel(graph, { loss, optimizer: opt, train: { batch: 6, grad_accum: 1, grad_clip: 0.5 } }), { batch: 6 });
    expect(accSet.apply_update).toBeDefined();
    expect(bigSet.apply_update).toBeUndefined();
    const acc = accSet.apply_update!;
    expect(graphProblems(acc.graph)).toEqual([]);
    expect(acc.graph.values.filter((v) => v.kind === 'gradacc').map((v) => v.name).sort()).toEqual(['fc.bias.grad', 'fc.weight.grad']);
    expect(accSet.train_step.graph.nodes.filter((n) => n.op === 'grad_accumulate').map((n) => n.attrs.scale)).toEqual([0.5, 0.5]);
    expect(accSet.train_step.graph.nodes.some((n) => n.op === 'sgd_update')).toBe(false);
    expect(acc.graph.nodes.map((n) => n.op)).toEqual(['grad_norm', 'clip_coef', 'sgd_update', 'sgd_update', 'zero', 'zero']);

    const r = rng(9);
    const w = randArray(6, r);
    const bias = randArray(2, r);
    const sA: Store = new Map([
      ['fc.weight', Float64Array.from(w)],
      ['fc.bias', Float64Array.from(bias)],
    ]);
    const sB: Store = new Map([
      ['fc.weight', Float64Array.from(w)],
      ['fc.bias', Float64Array.from(bias)],
    ]);
    for (let step = 0; step < 3; step++) {
      const x = randArray(6 * IN, r, -2, 2);
      const t = randArray(6 * OUT, r, -2, 2);
      const sc = { lr: 0.1, t: step + 1, seed: 0, counter: step };
      runProgram(accSet.train_step, sA, [x.slice(0, 3 * IN), t.slice(0, 3 * OUT)], sc);
      runProgram(accSet.train_step, sA, [x.slice(3 * IN), t.slice(3 * OUT)], sc);
      runProgram(acc, sA, [], sc);
      runProgram(bigSet.train_step, sB, [x, t], sc);
      expect(maxAbsDiff(sA.get('fc.weight')!, sB.get('fc.weight')!)).toBeLessThan(1e-12);
      expect(maxAbsDiff(sA.get('fc.bias')!, sB.get('fc.bias')!)).toBeLessThan(1e-12);
      expect(maxAbsDiff(sA.get('fc.weight.momentum_buffer')!, sB.get('fc.weight.momentum_buffer')!)).toBeLessThan(1e-12);
      expect(Array.from(sA.get('fc.weight.grad')!)).toEqual([0, 0, 0, 0, 0, 0]);
    }
  });
});
