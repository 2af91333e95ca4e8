/** createReferenceSession over a hand-built ProgramSet: softmax regression trained with SGD + momentum. */
import { describe, expect, it } from 'vitest';
import { GraphBuilder, type Program, type ProgramSet } from '../compiler/ir/graph.js';
import { makeRng } from '../compiler/reference/fixtures.js';
import { createReferenceSession } from '../runtime/reference_session.js';

const B = 8, K = 3, C = 2;

/** linear -> cross_entropy (+ accuracy in eval); train_step adds cross_entropy_grad -> matmul / sum_to -> sgd_update */
function buildPrograms(): ProgramSet {
  function forward(): { b: GraphBuilder; x: number; label: number; W: number; bias: number; logits: number; loss: number } {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [B, K], 'input');
    const label = b.value('label', 'i32', [B], 'input');
    const W = b.value('fc.weight', 'f32', [C, K], 'param');
    const bias = b.value('fc.bias', 'f32', [C], 'param');
    const [logits] = b.emit('linear', [x, W, bias], [{ name: 'fc.out', shape: [B, C] }], {}, 'fc');
    const [loss] = b.emit('cross_entropy', [logits, label], [{ name: 'loss', shape: [], kind: 'output' }], { label_smoothing: 0 });
    return { b, x, label, W, bias, logits, loss };
  }
  const tr = forward();
  const { b } = tr;
  const [dlogits] = b.emit('cross_entropy_grad', [tr.logits, tr.label], [{ name: 'd_fc.out', shape: [B, C], kind: 'grad' }], { label_smoothing: 0 });
  const [dW] = b.emit('matmul', [dlogits, tr.x], [{ name: 'd_fc.weight', shape: [C, K], kind: 'grad' }], { transA: true, transB: false });
  const [db] = b.emit('sum_to', [dlogits], [{ name: 'd_fc.bias', shape: [C], kind: 'grad' }], { axes: [0] });
  const bufW = b.value('fc.weight.momentum_buffer', 'f32', [C, K], 'optstate');
  const bufB = b.value('fc.bias.momentum_buffer', 'f32', [C], 'optstate');
  const sgd = { momentum: 0.9, nesterov: false, weight_decay: 0 };
  b.node('sgd_update', [tr.W, dW, bufW, -1], [], sgd);
  b.node('sgd_update', [tr.bias, db, bufB, -1], [], sgd);
  const train_step: Program = { name: 'train_step', batch: B, graph: b.graph, inputs: [tr.x, tr.label], outputs: [{ name: 'loss', value: tr.loss }] };

  const ev = forward();
  const [acc] = ev.b.emit('accuracy', [ev.logits, ev.label], [{ name: 'accuracy', shape: [], kind: 'output' }]);
  const evalP: Program = { name: 'eval', batch: B, graph: ev.b.graph, inputs: [ev.x, ev.label], outputs: [{ name: 'loss', value: ev.loss }, { name: 'accuracy', value: acc }] };
  return { model: 'softmax_regression', train_step, eval: evalP };
}

/** two separable blobs: class c has mean (c ? +1 : -1) on every feature */
function batch(seed: number): [Float32Array, Int32Array] {
  const rng = makeRng(seed);
  const x = new Float32Array(B * K), y = new Int32Array(B);
  for (let n = 0; n < B; n++) {
    y[n] = n % 2;
    for (let k = 0; k < K; k++) x[n * K + k] = (y[n] ? 1 : -1) + 0.5 * (rng() - 0.5);
  }
  return [x, y];
}

describe('createReferenceSession', () => {
  it('trains: the loss falls over a few steps and eval sees the updated parameters', async () => {
    const s = await createReferenceSession(buildPrograms());
    expect(s.device).toBe('reference');
    expect(s.tensorNames()).toEqual(['fc.bias', 'fc.bias.momentum_buffer', 'fc.weight', 'fc.weight.momentum_buffer']);
    expect(s.tensorShape('fc.weight')).toEqual([C, K]);
    expect(Array.from(s.read('fc.weight'))).toEqual(new Array(C * K).fill(0)); // zero-filled
    s.write('fc.weight', Float32Array.from([0.3, -0.2, 0.1, -0.3, 0.2, -0.1])); // starts wrong-signed
    const ev0 = s.run('eval', batch(100), { lr: 0, t: 1, seed: 0, counter: 0 });
    const losses: number[] = [];
    for (let t = 1; t <= 8; t++) losses.push(s.run('train_step', batch(t), { lr: 0.5, t, seed: 0, counter: t - 1 })[0]);
    expect(losses[0]).toBeCloseTo(ev0[0], 0);
    for (let i = 1; i < losses.length; i++) expect(losses[i]).toBeLessThan(losses[i - 1]);
    expect(losses[losses.length - 1]).toBeLessThan(0.5 * losses[0]);
    const ev1 = s.run('eval', batch(100), { lr: 0, t: 1, seed: 0, counter: 0 });
    expect(ev1[0]).toBeLessThan(ev0[0]);
    expect(ev1[1]).toBe(1);
    expect(ev0[1]).toBe(0);
    // optimizer state is a persistent tensor the host can read (checkpointing)
    expect(s.read('fc.weight.momentum_buffer').some((x) => x !== 0)).toBe(true);
    s.close();
  });

  it('the first train step equals a by-hand SGD step', async () => {
    // W = 0, b = 0: logits 0, p = 1/2; dlogits[n,c] = (1/2 - [c == y_n]) / B; buf = grad on step 1
    const s = await createReferenceSession(buildPrograms());
    const [x, y] = batch(7);
    const loss = s.run('train_step', [x, y], { lr: 0.5, t: 1, seed: 0, counter: 0 });
    expect(loss[0]).toBeCloseTo(Math.LN2, 12);
    const W = s.read('fc.weight');
    for (let c = 0; c < C; c++) {
      for (let k = 0; k < K; k++) {
        let g = 0;
        for (let n = 0; n < B; n++) g += ((0.5 - (y[n] === c ? 1 : 0)) / B) * x[n * K + k];
        expect(W[c * K + k]).toBeCloseTo(-0.5 * g, 6);
      }
    }
  });

  it('checks batch lengths, dtypes, programs and tensor names', async () => {
    const s = await createReferenceSession(buildPrograms());
    const [x, y] = batch(1);
    const sc = { lr: 0.1, t: 1, seed: 0, counter: 0 };
    expect(() => s.run('train_step', [x.subarray(1), y], sc)).toThrow(/'x' has 23 elements, expected 24/);
    expect(() => s.run('train_step', [x, Float32Array.from(y)], sc)).toThrow(/'label' must be a Int32Array/);
    expect(() => s.run('train_step', [x], sc)).toThrow(/takes 2 inputs/);
    expect(s.hasProgram('train_step')).toBe(true);
    expect(s.hasProgram('apply_update')).toBe(false);
    expect(() => s.run('apply_update', [], sc)).toThrow(/no program 'apply_update'/);
    expect(() => s.write('fc.bias', new Float32Array(3))).toThrow(/expected 2/);
    expect(() => s.read('nope')).toThrow(/no persistent tensor 'nope'/);
    s.close();
    expect(() => s.run('eval', [x, y], sc)).toThrow(/after close/);
  });

  it('rejects one persistent name with two shapes', async () => {
    const p = buildPrograms();
    p.eval.graph.values.find((v) => v.name === 'fc.bias')!.shape = [3];
    await expect(createReferenceSession(p)).rejects.toThrow(/'fc.bias' has shape \[2\] in one program and \[3\] in eval/);
  });
});
