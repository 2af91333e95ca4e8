/**
 * bind_batch, eval_mode, verify, memory_plan, programs and print_ir on hand-built
 * forward graphs shaped like CheckedModel graphs (training form, BATCH for N).
 */
import { describe, expect, it } from 'vitest';
import { GraphBuilder, valueBytes, type Graph, type Program } from '../compiler/ir/graph.js';
import { bindBatch } from '../compiler/ir/bind_batch.js';
import { evalMode } from '../compiler/ir/eval_mode.js';
import { graphProblems, verifyGraph } from '../compiler/ir/verify.js';
import { planMemory, verifyPlan } from '../compiler/ir/memory_plan.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { formatProgramsForCheck, plannedPeakBytes, printProgram } from '../compiler/ir/print_ir.js';
import { UserError } from '../compiler/errors.js';
import { BATCH } from '../compiler/model.js';
import { makeModel } from './ir_helpers.js';

const conv = (stride: number, pad: number) => ({ stride: [stride, stride], padding: [pad, pad], dilation: [1, 1], groups: 1 });

/** LeNet-5 shaped: conv(1->6,5,pad 2) relu maxpool conv(6->16,5) relu maxpool flatten fc 400-120-84-10, cross_entropy + accuracy */
function lenet(): { graph: Graph; loss: number; acc: number } {
  const b = new GraphBuilder();
  const x = b.value('image', 'f32', [BATCH, 1, 28, 28], 'input');
  const y = b.value('label', 'i32', [BATCH], 'input');
  const p = (name: string, shape: number[]) => b.value(name, 'f32', shape, 'param');
  const c1w = p('conv1.weight', [6, 1, 5, 5]), c1b = p('conv1.bias', [6]);
  const c2w = p('conv2.weight', [16, 6, 5, 5]), c2b = p('conv2.bias', [16]);
  const f1w = p('fc1.weight', [120, 400]), f1b = p('fc1.bias', [120]);
  const f2w = p('fc2.weight', [84, 120]), f2b = p('fc2.bias', [84]);
  const f3w = p('fc3.weight', [10, 84]), f3b = p('fc3.bias', [10]);
  const [c1] = b.emit('conv2d', [x, c1w, c1b], [{ name: 'conv1.out', shape: [BATCH, 6, 28, 28] }], conv(1, 2), 'conv1');
  const [r1] = b.emit('unary', [c1], [{ name: 'relu1.out', shape: [BATCH, 6, 28, 28] }], { fn: 'relu' }, 'relu1');
  const [p1] = b.emit('maxpool2d', [r1], [{ name: 'pool1.out', shape: [BATCH, 6, 14, 14] }], { kernel: [2, 2], stride: [2, 2], padding: [0, 0] }, 'pool1');
  const [c2] = b.emit('conv2d', [p1, c2w, c2b], [{ name: 'conv2.out', shape: [BATCH, 16, 10, 10] }], conv(1, 0), 'conv2');
  const [r2] = b.emit('unary', [c2], [{ name: 'relu2.out', shape: [BATCH, 16, 10, 10] }], { fn: 'relu' }, 'relu2');
  const [p2] = b.emit('maxpool2d', [r2], [{ name: 'pool2.out', shape: [BATCH, 16, 5, 5] }], { kernel: [2, 2], stride: [2, 2], padding: [0, 0] }, 'pool2');
  const [fl] = b.emit('reshape', [p2], [{ name: 'flatten.out', shape: [BATCH, 400] }], { shape: [BATCH, 400] }, 'flatten');
  const [h1] = b.emit('linear', [fl, f1w, f1b], [{ name: 'fc1.out', shape: [BATCH, 120] }], {}, 'fc1');
  const [a1] = b.emit('unary', [h1], [{ name: 'relu3.out', shape: [BATCH, 120] }], { fn: 'relu' }, 'relu3');
  const [h2] = b.emit('linear', [a1, f2w, f2b], [{ name: 'fc2.out', shape: [BATCH, 84] }], {}, 'fc2');
  const [a2] = b.emit('unary', [h2], [{ name: 'relu4.out', shape: [BATCH, 84] }], { fn: 'relu' }, 'relu4');
  const [z] = b.emit('linear', [a2, f3w, f3b], [{ name: 'fc3.out', shape: [BATCH, 10] }], {}, 'fc3');
  const [loss] = b.emit('cross_entropy', [z, y], [{ name: 'loss', shape: [], kind: 'output' }], { label_smoothing: 0 }, 'loss');
  const [acc] = b.emit('accuracy', [z, y], [{ name: 'accuracy', shape: [], kind: 'output' }], {}, 'accuracy');
  return { graph: b.graph, loss, acc };
}

/** linear -> batchnorm -> dropout -> linear -> dropout -> cross_entropy */
function bnDropout(): { graph: Graph; loss: number } {
  const b = new GraphBuilder();
  const x = b.value('x', 'f32', [BATCH, 5], 'input');
  const y = b.value('label', 'i32', [BATCH], 'input');
  const w1 = b.value('fc1.weight', 'f32', [4, 5], 'param');
  const bw = b.value('bn.weight', 'f32', [4], 'param');
  const bb = b.value('bn.bias', 'f32', [4], 'param');
  const rm = b.value('bn.running_mean', 'f32', [4], 'state');
  const rv = b.value('bn.running_var', 'f32', [4], 'state');
  const w2 = b.value('fc2.weight', 'f32', [3, 4], 'param');
  const [h] = b.emit('linear', [x, w1, -1], [{ name: 'fc1.out', shape: [BATCH, 4] }]);
  const [n] = b.emit('batchnorm_train', [h, bw, bb, rm, rv], [{ name: 'bn.out', shape: [BATCH, 4] }, { name: 'bn.mean', shape: [4] }, { name: 'bn.invstd', shape: [4] }], { eps: 1e-5, momentum: 0.1 });
  const [d] = b.emit('dropout', [n], [{ name: 'drop1.out', shape: [BATCH, 4] }], { p: 0.5, stream: 0 });
  const [d2] = b.emit('dropout', [d], [{ name: 'drop2.out', shape: [BATCH, 4] }], { p: 0.1, stream: 1 });
  const [z] = b.emit('linear', [d2, w2, -1], [{ name: 'fc2.out', shape: [BATCH, 3] }]);
  const [loss] = b.emit('cross_entropy', [z, y], [{ name: 'loss', shape: [], kind: 'output' }], { label_smoothing: 0 });
  return { graph: b.graph, loss };
}

const activationBytes = (p: Program) => p.graph.values.filter((v) => v.kind === 'activation' || v.kind === 'grad' || v.kind === 'output').reduce((s, v) => s + valueBytes(v), 0);

describe('bind_batch', () => {
  it('replaces BATCH in value shapes and shape attrs only, keeping ids and leaving the input untouched', () => {
    const { graph } = lenet();
    const bound = bindBatch(graph, 7);
    expect(bound.values.map((v) => v.id)).toEqual(graph.values.map((v) => v.id));
    expect(bound.values[0].shape).toEqual([7, 1, 28, 28]);
    expect(bound.nodes.find((n) => n.op === 'reshape')!.attrs.shape).toEqual([7, 400]);
    expect(bound.nodes[0].attrs.padding).toEqual([2, 2]);
    expect(graph.values[0].shape).toEqual([BATCH, 1, 28, 28]);
    expect(graphProblems(bound)).toEqual([]);
    expect(graphProblems(graph).some((p) => p.includes('non-static shape'))).toBe(true);
  });
});

describe('eval_mode', () => {
  it('batchnorm_train -> batchnorm_eval, dropout chains removed and rewired, nothing mutated', () => {
    const { graph, loss } = bnDropout();
    const { graph: ev, idMap } = evalMode(bindBatch(graph, 4));
    expect(graphProblems(ev)).toEqual([]);
    expect(ev.nodes.map((n) => n.op)).toEqual(['linear', 'batchnorm_eval', 'linear', 'cross_entropy']);
    expect(ev.nodes[1].outputs.length).toBe(1);
    expect(ev.nodes[1].attrs).toEqual({ eps: 1e-5 });
    // fc2 reads the batchnorm output directly
    expect(ev.nodes[2].inputs[0]).toBe(ev.nodes[1].outputs[0]);
    expect(ev.values.map((v) => v.name)).not.toContain('bn.mean');
    expect(ev.values.filter((v) => v.kind === 'state').map((v) => v.name)).toEqual(['bn.running_mean', 'bn.running_var']);
    expect(ev.values[idMap[loss]].name).toBe('loss');
  });
});

describe('verify', () => {
  it('reports broken invariants', () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [2, 3], 'input');
    const w = b.value('w', 'f32', [3, 3], 'param');
    const a = b.value('a', 'f32', [2, 3], 'activation');
    const c = b.value('c', 'f32', [2, 3], 'activation');
    b.node('unary', [a], [c], { fn: 'relu' }); // reads a before it is written
    b.node('unary', [x], [a], { fn: 'relu' });
    b.node('unary', [x], [a], { fn: 'relu' }); // a written twice
    b.node('unary', [x], [w], { fn: 'relu' }); // writes a param
    b.node('linear', [x], [c]); // arity
    b.node('nope', [x], []);
    b.node('zero', [a], []); // mutates an activation
    b.node('sgd_update', [w, a, -1, -1], [], { momentum: 0, nesterov: false, weight_decay: 0 }); // fine
    b.node('linear', [x, -1, -1], [b.value('d', 'f32', [2, 3], 'activation')]); // required input absent
    b.value('never', 'f32', [1], 'activation');
    const problems = graphProblems(b.graph).join('\n');
    for (const frag of ['reads %2 (a) before it is written', 'already written', 'writes param value', 'expects 3 inputs', 'unknown op', 'mutates %2 (a) which is not persistent', 'required input weight is absent', '(never, activation) is never written']) {
      expect(problems).toContain(frag);
    }
    expect(() => verifyGraph(b.graph, 'test')).toThrow(/internal: invalid IR in test/);
  });

  it('reports shapes and dtypes that break an op rule', () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [2, 3, 9, 7], 'input');
    const lab = b.value('label', 'f32', [2], 'input');
    const w = b.value('c.weight', 'f32', [4, 3, 3, 3], 'param');
    const fw = b.value('fc.weight', 'f32', [5, 4], 'param');
    const [c] = b.emit('conv2d', [x, w, -1], [{ name: 'c.out', shape: [2, 4, 7, 6] }], { stride: [1, 1], padding: [0, 0], dilation: [1, 1], groups: 1 }); // OW should be 5
    const [f] = b.emit('reshape', [c], [{ name: 'flat', shape: [2, 100] }], { shape: [2, 100] }); // 168 elements, not 200
    const [z] = b.emit('linear', [f, fw, -1], [{ name: 'z', shape: [2, 5] }]); // K mismatch
    b.emit('binary', [z, f], [{ name: 's', shape: [2, 5] }], { fn: 'add' }); // no broadcast
    b.emit('cross_entropy', [z, lab], [{ name: 'loss', shape: [], kind: 'output' }], { label_smoothing: 0 }); // f32 label
    b.emit('unary', [z], [{ name: 'u1', shape: [2, 5] }], { fn: 'swish' }); // not in scalar_fns.ts
    b.emit('unary', [z], [{ name: 'u2', shape: [2, 5] }], { fn: 'hardtanh', min_val: '-1' }); // attr of the wrong type
    const problems = graphProblems(b.graph).join('\n');
    for (const frag of [
      '(conv2d): output y has shape [2,4,7,6], expected [2,4,7,5]', 'changes the element count', 'x [2,100] and weight [5,4] do not match', 'do not broadcast', 'label must be i32',
      "unknown unary fn 'swish'", "attr 'min_val' of hardtanh must be a number",
    ]) {
      expect(problems).toContain(frag);
    }
  });

  it('checks the packed attention ops: qkv [N,T,3C] with C divisible by heads, o / do [N,T,C], lse [N,H,T]', () => {
    const b = new GraphBuilder();
    const qkv = b.value('qkv', 'f32', [2, 5, 24], 'input');
    const odd = b.value('odd', 'f32', [2, 5, 20], 'input');
    const [o, lse] = b.emit('attention_qkv', [qkv], [{ name: 'o', shape: [2, 5, 8] }, { name: 'lse', shape: [2, 2, 5] }], { heads: 2, causal: true, scale: 0.5 });
    expect(graphProblems(b.graph)).toEqual([]);
    b.emit('attention_qkv', [odd], [{ name: 'o2', shape: [2, 5, 6] }, { name: 'lse2', shape: [2, 3, 5] }], { heads: 3, causal: false, scale: 0.5 }); // 20 is not 3C
    b.emit('attention_qkv', [qkv], [{ name: 'o3', shape: [2, 5, 8] }, { name: 'lse3', shape: [2, 3, 5] }], { heads: 3, causal: false, scale: 0.5 }); // C 8 over 3 heads
    b.emit('attention_qkv_grad', [lse, qkv, o, lse], [{ name: 'dqkv', shape: [2, 5, 24] }], { heads: 2, causal: true, scale: 0.5 }); // do of lse's shape
    b.emit('attention_qkv_grad', [o, qkv, o, lse], [{ name: 'dqkv2', shape: [2, 5, 24] }], { heads: 2, causal: true }); // no scale
    const problems = graphProblems(b.graph).join('\n');
    for (const frag of ['qkv must be [N,T,3C] with C divisible by heads 3, got [2,5,20]', 'qkv must be [N,T,3C] with C divisible by heads 3, got [2,5,24]', 'do has shape [2,2,5], expected [2,5,8]', 'attr scale must be a finite number']) {
      expect(problems).toContain(frag);
    }
  });
});

describe('memory plan', () => {
  it('LeNet train_step: arena smaller than the sum of transient buffers, no live overlap, peak reported', () => {
    const { graph, loss, acc } = lenet();
    const set = buildPrograms(makeModel(graph, { loss, metrics: [{ name: 'accuracy', value: acc }], train: { batch: 16 } }), { batch: 16, evalTail: 5 });
    for (const p of [set.train_step, set.eval, set.eval_tail!]) {
      expect(verifyPlan(p)).toEqual([]);
      expect(p.plan!.arenaBytes).toBeLessThan(activationBytes(p));
      expect(p.plan!.peakBytes).toBe(p.plan!.arenaBytes + p.plan!.persistentBytes + p.plan!.inputBytes);
    }
    const train = set.train_step;
    // saved activations stay live until backward: conv1.out (read by relu, and maxpool_grad reads relu1.out) etc.
    const plan = train.plan!;
    const params = 6 * 25 + 6 + 16 * 150 + 16 + 120 * 400 + 120 + 84 * 120 + 84 + 10 * 84 + 10;
    expect(plan.persistentBytes).toBe(params * 4); // plain sgd: no optimizer state
    expect(plan.inputBytes).toBe(16 * 784 * 4 + 16 * 4);
    expect(plan.arenaBytes).toBeLessThan(activationBytes(train) * 0.7);
    expect(set.eval.plan!.arenaBytes).toBeLessThan(plan.arenaBytes);
    expect(set.eval_tail!.batch).toBe(5);
    expect(set.eval_tail!.graph.values[set.eval_tail!.inputs[0]].shape).toEqual([5, 1, 28, 28]);
  });

  it('verifyPlan catches overlapping live buffers and bad offsets', () => {
    const { graph, loss, acc } = lenet();
    const set = buildPrograms(makeModel(graph, { loss, metrics: [{ name: 'accuracy', value: acc }] }), { batch: 2 });
    const p = structuredClone(set.train_step);
    const ids = p.graph.values.filter((v) => p.plan!.offsets[v.id] >= 0).map((v) => v.id);
    // the loss and accuracy outputs are live together at the end of the program
    const lossId = p.outputs[0].value, accId = p.outputs[1].value;
    p.plan!.offsets[accId] = p.plan!.offsets[lossId];
    expect(verifyPlan(p).join('\n')).toMatch(/live at the same time and overlap/);
    p.plan!.offsets[ids[0]] = 3;
    expect(verifyPlan(p).join('\n')).toMatch(/bad offset 3/);
    expect(verifyPlan({ ...p, plan: undefined })).toEqual(['program has no memory plan']);
  });

  it('reuses the buffer of a dead value', () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [16], 'input');
    let cur = x;
    for (let i = 0; i < 6; i++) [cur] = b.emit('unary', [cur], [{ name: `a${i}`, shape: [16] }], { fn: 'relu' });
    const p: Program = { name: 'eval', batch: 1, graph: b.graph, inputs: [x], outputs: [] };
    p.plan = planMemory(p);
    expect(verifyPlan(p)).toEqual([]);
    expect(p.plan.arenaBytes).toBe(128); // two 64-byte slots ping-pong
    // reuseGap 2 (the CUDA lanes'): a buffer waits two more nodes after its last reader: a0 (read by node 1) is
    // reused by a4 (written by node 4), not by a2; four slots rotate
    const gap = { ...p, plan: planMemory(p, 2) };
    expect(verifyPlan(gap)).toEqual([]);
    expect(gap.plan.arenaBytes).toBe(256);
    const off = (name: string) => gap.plan.offsets[b.graph.values.find((v) => v.name === name)!.id];
    expect(off('a4')).toBe(off('a0'));
    expect(new Set(['a0', 'a1', 'a2', 'a3'].map(off)).size).toBe(4);
  });
});

describe('programs', () => {
  it('train_step = forward + backward + updates; eval has no gradients; outputs loss then metrics; all verified', () => {
    const { graph, loss, acc } = lenet();
    const model = makeModel(graph, {
      loss,
      metrics: [{ name: 'accuracy', value: acc }],
      optimizer: { kind: 'adam', lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0 },
      train: { grad_clip: 1 },
    });
    const set = buildPrograms(model, { batch: 8 });
    expect(set.model).toBe('test');
    expect(set.apply_update).toBeUndefined();
    expect(set.eval_tail).toBeUndefined();
    const t = set.train_step;
    expect(t.outputs.map((o) => o.name)).toEqual(['loss', 'accuracy']);
    expect(t.inputs.map((id) => t.graph.values[id].name)).toEqual(['image', 'label']);
    expect(t.graph.nodes.filter((n) => n.op === 'adam_update').length).toBe(10);
    expect(t.graph.nodes.filter((n) => n.op === 'grad_norm')[0].inputs.length).toBe(10);
    expect(t.graph.values.filter((v) => v.kind === 'optstate').length).toBe(20);
    expect(t.graph.values.find((v) => v.name === 'conv1.weight.grad')?.kind).toBe('grad');
    expect(set.eval.graph.values.some((v) => v.kind === 'grad' || v.kind === 'optstate')).toBe(false);
    expect(set.eval.outputs.map((o) => o.name)).toEqual(['loss', 'accuracy']);
    // no gradient for the image: conv1 has no conv2d_grad_input
    expect(t.graph.nodes.filter((n) => n.op === 'conv2d_grad_input').length).toBe(1);
    // JSON round trip: plain data only
    expect(JSON.parse(JSON.stringify(set))).toEqual(set);
  });

  it('grad_accum > 1 gives an apply_update program holding only persistent values', () => {
    const { graph, loss } = bnDropout();
    const set = buildPrograms(makeModel(graph, { loss, train: { grad_accum: 4 } }), { batch: 4 });
    const au = set.apply_update!;
    expect(au.inputs).toEqual([]);
    expect(au.outputs).toEqual([]);
    expect(au.graph.values.every((v) => v.kind === 'param' || v.kind === 'gradacc')).toBe(true);
    expect(set.train_step.graph.values.filter((v) => v.kind === 'gradacc').map((v) => v.name).sort()).toEqual(['bn.bias.grad', 'bn.weight.grad', 'fc1.weight.grad', 'fc2.weight.grad']);
    expect(set.train_step.graph.values.find((v) => v.name === 'd_fc1.weight')?.kind).toBe('grad');
  });

  it('a model without a loss is a user error', () => {
    const { graph } = lenet();
    expect(() => buildPrograms(makeModel(graph, { loss: null }), { batch: 2 })).toThrow(UserError);
  });
});

describe('print_ir', () => {
  it('prints one line per node with ids, names, attrs, types and the memory summary', () => {
    const { graph, loss, acc } = lenet();
    const model = makeModel(graph, { loss, metrics: [{ name: 'accuracy', value: acc }], train: { batch: 8 } });
    const text = formatProgramsForCheck(model, 'train_step');
    expect(text).toContain('program train_step (batch 8)');
    expect(text).toMatch(/%\d+ = conv2d\(%image, %conv1\.weight, %conv1\.bias\) \{stride=\[1,1\], padding=\[2,2\], dilation=\[1,1\], groups=1\} : f32\[8,6,28,28\]  # conv1\.out @\d+ \(conv1\)/);
    expect(text).toMatch(/sgd_update\(%fc3\.weight, %\d+, -, -\) \{momentum=0, nesterov=false, weight_decay=0\}/);
    expect(text).toContain('outputs: loss = %');
    expect(text).toMatch(/memory: arena .* peak .* \(\d+ bytes\)/);
    const set = buildPrograms(model, { batch: 8 });
    expect(printProgram(set.eval)).not.toContain('_grad(');
    const all = formatProgramsForCheck(model, 'all');
    expect(all).toContain('program eval (batch 8)');
    expect(all).toContain('planned peak:');
    expect(() => formatProgramsForCheck(model, 'apply_update')).toThrow(/grad_accum > 1/);
    expect(() => formatProgramsForCheck(model, 'bogus')).toThrow(UserError);
    const peak = plannedPeakBytes(model);
    expect(peak).toBeGreaterThanOrEqual(set.train_step.plan!.peakBytes);
    expect(peak).toBe(set.train_step.plan!.persistentBytes + Math.max(set.train_step.plan!.arenaBytes + set.train_step.plan!.inputBytes, set.eval.plan!.arenaBytes + set.eval.plan!.inputBytes));
  });
});
