/**
 * The IR passes on graphs made by the real front end (compiler/check): a `.model`
 * spec mixing grouped/strided convs, batchnorm, pools, residual arithmetic, layernorm,
 * dropout, concat and several metrics goes through buildPrograms (every program
 * verified and memory-planned), and its autodiff gradients match finite differences.
 */
import { describe, expect, it } from 'vitest';
import { checkSource } from '../compiler/check/index.js';
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
