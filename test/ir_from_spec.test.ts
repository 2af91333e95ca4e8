/**
 * The IR passes on graphs made by the real front end (compiler/check): a `.model`
 * spec mixing grouped/strided convs, batchnorm, pools, residual arithmetic, layernorm,
 * dropout, concat and several metrics goes through buildPrograms (every program
 * verified and memory-planned), and its autodiff gradients match finite differences.
 */
import { describe, expect, it } from 'vitest';
import { checkSource } from '../compiler/check/index.js';
import { layersWithRole } from '../compiler/check/layers.js';
import { UNARY_FNS } from '../compiler/ir/scalar_fns.js';
import { bindBatch } from '../compiler/ir/bind_batch.js';
import { verifyPlan } from '../compiler/ir/memory_plan.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { formatProgramsForCheck } from '../compiler/ir/print_ir.js';
import { graphProblems } from '../compiler/ir/verify.js';
import { initParams } from '../compiler/train/init.js';
import { gradCheck } from './ir_helpers.js';

const SPEC = `model mixed
input image: f32[N, 2, 9, 7]
input label: i32[N]
network {
  a = image -> conv2d(4, kernel: 3, stride: 2, padding: 1, groups: 2) -> batchnorm -> gelu
  b = a -> conv2d(4, kernel: [3, 1], padding: [1, 0]) -> tanh
  c = a + b * a
  d = c -> avgpool(2, stride: 1) -> maxpool(2) -> flatten -> linear(6) -> layernorm -> dropout(0.3) -> leaky_relu(0.1)
  e = c -> global_avgpool -> flatten -> linear(6, bias: false) -> sigmoid
  f = concat(d, e) -> linear(3)
}
loss cross_entropy(f, label, label_smoothing: 0.1)
metrics accuracy(f, label), top_k(f, label, k: 2)
optimizer sgd(lr: 0.1, momentum: 0.9, nesterov: true)
schedule step(step_size: 2, gamma: 0.5)
train { data: synthetic(), epochs: 1, batch: 4, grad_accum: 2, grad_clip: 1.0 }
`;

describe('IR passes on a front-end model', () => {
  const model = checkSource(SPEC, 'mixed.model');

  it('builds verified, memory-planned programs', () => {
    const set = buildPrograms(model, { batch: 4, evalTail: 3 });
    for (const p of [set.train_step, set.apply_update!, set.eval, set.eval_tail!]) {
      expect(graphProblems(p.graph)).toEqual([]);
      expect(verifyPlan(p)).toEqual([]);
    }
    expect(set.train_step.outputs.map((o) => o.name)).toEqual(['loss', 'accuracy', 'top_k']);
    const trainable = model.params.filter((p) => p.kind === 'param').map((p) => p.path).sort();
    expect(set.train_step.graph.values.filter((v) => v.kind === 'gradacc').map((v) => v.name.replace(/\.grad$/, '')).sort()).toEqual(trainable);
    expect(set.apply_update!.graph.values.filter((v) => v.kind === 'optstate').map((v) => v.name.replace(/\.momentum_buffer$/, '')).sort()).toEqual(trainable);
    expect(set.eval.graph.nodes.map((n) => n.op)).not.toContain('dropout');
    expect(set.eval.graph.nodes.map((n) => n.op)).toContain('batchnorm_eval');
    expect(formatProgramsForCheck(model, 'apply_update')).toMatch(/grad_norm\(%conv2d0\.weight\.grad, /);
  });

  it('autodiff gradients match finite differences for every parameter', () => {
    const g = bindBatch(model.graph, 3);
    const label = model.inputs.find((i) => i.name === 'label')!.value;
    const names = gradCheck({ graph: g, loss: model.loss!.value, ints: { [label]: 3 } }, 4);
    expect(names).toEqual(model.params.filter((p) => p.kind === 'param').map((p) => p.path).sort());
  });

  it('initParams covers every parameter and buffer of the spec with its declared shape', () => {
    const init = initParams(model, 1);
    for (const p of model.params) expect(init.get(p.path)?.length).toBe(p.shape.reduce((a, b) => a * b, 1));
    expect(Array.from(init.get('batchnorm0.running_var')!)).toEqual([1, 1, 1, 1]);
  });
});

describe('every activation layer, from a spec', () => {
  // every table fn that is a layer (neg is written as the operator `-x`)
  const fns = UNARY_FNS.filter((fn) => layersWithRole('layer').some((d) => d.name === fn && !d.internal));
  // one branch per activation (a deep chain would make the gradients vanish), then a few with arguments
  const branches = fns.map((fn, i) => `  b${i} = x -> linear(4) -> ${fn}`).join('\n');
  const spec = `model acts
input x: f32[N, 6]
input label: i32[N]
network {
${branches}
  h = concat(${fns.map((_, i) => `b${i}`).join(', ')}) -> hardtanh(min_val: -0.5, max_val: 2) -> linear(6) -> softplus(beta: 2, threshold: 3) -> elu(0.5)
  logits = h -> leaky_relu(negative_slope: 0.2) -> linear(3)
}
loss cross_entropy(logits, label)
optimizer sgd(lr: 0.1)
train { data: synthetic(), epochs: 1, batch: 4 }
`;
  const model = checkSource(spec, 'acts.model');

  it('covers every activation of the layer table and lowers each to unary {fn} with its attrs', () => {
    expect(fns).toEqual(UNARY_FNS.filter((fn) => fn !== 'neg'));
    const unary = model.graph.nodes.filter((n) => n.op === 'unary').map((n) => n.attrs);
    expect(unary.map((a) => a.fn)).toEqual([...fns, 'hardtanh', 'softplus', 'elu', 'leaky_relu']);
    expect(unary.slice(-4)).toEqual([
      { fn: 'hardtanh', min_val: -0.5, max_val: 2 }, { fn: 'softplus', beta: 2, threshold: 3 }, { fn: 'elu', alpha: 0.5 }, { fn: 'leaky_relu', alpha: 0.2 },
    ]);
    expect(unary.find((a) => a.fn === 'softplus')).toEqual({ fn: 'softplus', beta: 1, threshold: 20 });
  });

  it('autodiff gradients through them match finite differences', () => {
    const g = bindBatch(model.graph, 3);
    const label = model.inputs.find((i) => i.name === 'label')!.value;
    gradCheck({ graph: g, loss: model.loss!.value, ints: { [label]: 3 } }, 5);
  });
});
