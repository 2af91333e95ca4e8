import { describe, it, expect } from 'vitest';
import { readFileSync } from 'node:fs';
import { checkFile, checkSource } from '../compiler/check/index.js';
import { BATCH as N } from '../compiler/model.js';

const TAIL = `loss cross_entropy(logits, label)
optimizer sgd(lr: 0.1)
train { data: synthetic(), batch: 8 }
`;
function model(inputs: string, body: string, tail = TAIL) {
  return checkSource(`model t\n${inputs}\ninput label: i32[N]\nnetwork {\n${body}\n}\n${tail}`, 't.model');
}
const shapes = (m: ReturnType<typeof model>) => Object.fromEntries(m.layers.map((l) => [l.path, l.outShape]));

describe('shape inference against hand-computed shapes', () => {
  it('conv2d: stride, padding, dilation, groups', () => {
    const m = model(
      'input image: f32[N, 4, 32, 30]',
      'a = image -> conv2d(8, 5, stride: 2, padding: 1) as a\n' + // (32+2-4-1)/2+1 = 15, (30+2-4-1)/2+1 = 14
        'b = image -> conv2d(8, [3, 1], dilation: 2, groups: 4) as b\n' + // 32-4 = 28, 30
        'logits = a -> global_avgpool -> flatten -> linear(10)\n' +
        'z = b -> maxpool(3, stride: 2, padding: 1) as p\n' + // (28+2-3)/2+1 = 14, (30+2-3)/2+1 = 15
        'w = b -> avgpool([2, 3]) as q', // 14, 10
    );
    const s = shapes(m);
    expect(s.a).toEqual([N, 8, 15, 14]);
    expect(s.b).toEqual([N, 8, 28, 30]);
    expect(s.p).toEqual([N, 8, 14, 15]);
    expect(s.q).toEqual([N, 8, 14, 10]);
    expect(m.params.find((p) => p.path === 'b.weight')!.shape).toEqual([8, 1, 3, 1]);
    expect(m.params.find((p) => p.path === 'b.bias')!.init).toEqual({ kind: 'default_bias', fan_in: 3 });
  });

  it('LeNet spec: every layer shape and parameter count', () => {
    const m = checkFile('specs/lenet.model');
    expect(m.layers.map((l) => [l.path, l.outShape, l.params])).toEqual([
      ['conv2d0', [N, 32, 28, 28], 320],
      ['relu0', [N, 32, 28, 28], 0],
      ['maxpool0', [N, 32, 14, 14], 0],
      ['conv2d1', [N, 64, 14, 14], 18496],
      ['relu1', [N, 64, 14, 14], 0],
      ['maxpool1', [N, 64, 7, 7], 0],
      ['flatten0', [N, 3136], 0],
      ['linear0', [N, 128], 401536],
      ['relu2', [N, 128], 0],
      ['linear1', [N, 10], 1290],
    ]);
    expect(m.numClasses).toBe(10);
    expect(m.optimizer).toEqual({ kind: 'sgd', lr: 0.01, momentum: 0.9, nesterov: false, weight_decay: 0 });
    expect(m.train).toMatchObject({ epochs: 5, steps: null, batch: 64, shuffle: true, seed: 0, grad_accum: 1, data: { kind: 'mnist', dir: null } });
  });

  it('broadcasting, concat, reshape, embedding, layernorm, softmax', () => {
    const m = model(
      'input image: f32[N, 6, 4, 4]\ninput ids: i32[N, 5]',
      'a = image -> conv2d(6, 1) as c\n' +
        's = image -> global_avgpool as g\n' +
        'y = a * s + image as ignored\n'.replace(' as ignored', '') +
        'cat = concat(y, image, axis: 1) as cat\n' + // [N,12,4,4]
        'r = cat -> reshape(12, -1) as r\n' + // [N,12,16]
        'e = ids -> embedding(100, 16) as emb -> layernorm as ln\n' + // [N,5,16]
        'both = concat(r, e, axis: 1) as both -> softmax(axis: -1) as sm\n' + // [N,17,16]
        'logits = both -> flatten -> linear(10)',
    );
    const s = shapes(m);
    expect(s.mul0).toEqual([N, 6, 4, 4]);
    expect(s.add0).toEqual([N, 6, 4, 4]);
    expect(s.cat).toEqual([N, 12, 4, 4]);
    expect(s.r).toEqual([N, 12, 16]);
    expect(s.ln).toEqual([N, 5, 16]);
    expect(s.sm).toEqual([N, 17, 16]);
    const sm = m.graph.nodes.find((n) => n.path === 'sm')!;
    expect(sm.attrs).toEqual({ axis: 2 });
    expect(m.params.filter((p) => p.layer === 'ln').map((p) => [p.path, p.shape])).toEqual([
      ['ln.weight', [16]],
      ['ln.bias', [16]],
    ]);
    expect(m.params.find((p) => p.path === 'emb.weight')).toMatchObject({ shape: [100, 16], init: { kind: 'normal', mean: 0, std: 1 } });
  });
});

describe('parameter paths follow the PyTorch state_dict naming', () => {
  it('resnet_small: blocks, repeat, named and numbered instances', () => {
    const m = checkFile('specs/resnet_small.model');
    const keys = m.params.map((p) => `${p.path} ${JSON.stringify(p.shape)} ${p.kind}`);
    const bn = (p: string) => [`${p}.weight [32] param`, `${p}.bias [32] param`, `${p}.running_mean [32] state`, `${p}.running_var [32] state`];
    const res = (r: string) => [`${r}.conv1.conv2d0.weight [32,32,3,3] param`, ...bn(`${r}.conv1.batchnorm0`), `${r}.conv2.conv2d0.weight [32,32,3,3] param`, ...bn(`${r}.conv2.batchnorm0`)];
    expect(keys).toEqual([
      'stem.conv2d0.weight [32,1,3,3] param',
      ...bn('stem.batchnorm0'),
      ...res('residual0'),
      ...res('residual1'),
      ...res('residual2'),
      ...res('residual3'),
      'fc.weight [10,32] param',
      'fc.bias [10] param',
    ]);
    expect(m.schedule).toEqual({ kind: 'cosine', t_max: null, eta_min: 0, warmup_steps: 100, warmup_start_factor: 1 / 3 });
  });

  it('mnist_mlp: fc1/fc2 with [out, in] weights and default inits', () => {
    const m = checkFile('specs/mnist_mlp.model');
    expect(m.params.map((p) => [p.path, p.shape, p.init])).toEqual([
      ['fc1.weight', [256, 784], { kind: 'default_weight' }],
      ['fc1.bias', [256], { kind: 'default_bias', fan_in: 784 }],
      ['fc2.weight', [10, 256], { kind: 'default_weight' }],
      ['fc2.bias', [10], { kind: 'default_bias', fan_in: 256 }],
    ]);
    expect(m.optimizer).toEqual({ kind: 'adam', lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0 });
  });

  it('ordinals count per layer type and scope; naming one layer does not renumber others', () => {
    const m = model('input image: f32[N, 784]', 'logits = image -> linear(20) -> relu -> linear(20) as mid -> relu -> linear(10)');
    expect(m.layers.map((l) => l.path)).toEqual(['linear0', 'relu0', 'mid', 'relu1', 'linear2']);
  });
});

describe('lowering to the forward IR graph', () => {
  it('values and nodes follow the contract (kinds, BATCH, ops, attrs)', () => {
    const m = checkFile('specs/resnet_small.model');
    const g = m.graph;
    g.values.forEach((v, i) => expect(v.id).toBe(i));
    g.nodes.forEach((n, i) => expect(n.id).toBe(i));
    expect(m.inputs.map((i) => [i.name, g.values[i.value].kind, i.shape])).toEqual([
      ['image', 'input', [N, 1, 28, 28]],
      ['label', 'input', [N]],
    ]);
    const conv = g.nodes.find((n) => n.path === 'stem.conv2d0')!;
    expect(conv.op).toBe('conv2d');
    expect(conv.attrs).toEqual({ stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups: 1 });
    expect(conv.inputs[2]).toBe(-1); // bias: false
    const bn = g.nodes.find((n) => n.path === 'stem.batchnorm0')!;
    expect(bn.op).toBe('batchnorm_train');
    expect(bn.inputs.slice(1).map((v) => g.values[v].kind)).toEqual(['param', 'param', 'state', 'state']);
    expect(bn.outputs.map((v) => g.values[v].name)).toEqual(['stem.batchnorm0.out', 'stem.batchnorm0.mean', 'stem.batchnorm0.invstd']);
    const flat = g.nodes.find((n) => n.path === 'flatten0')!;
    expect(flat).toMatchObject({ op: 'reshape', attrs: { shape: [N, 32] } });
    const loss = g.nodes[g.nodes.length - 2];
    expect(loss).toMatchObject({ op: 'cross_entropy', attrs: { label_smoothing: 0.1 } });
    expect(g.values[m.loss!.value]).toMatchObject({ kind: 'output', shape: [], name: 'loss' });
    expect(m.metrics.map((x) => x.name)).toEqual(['accuracy']);
    // SSA and topological order
    const written = new Set<number>();
    for (const n of g.nodes) {
      for (const i of n.inputs) if (i >= 0 && ['activation', 'output'].includes(g.values[i].kind)) expect(written.has(i)).toBe(true);
      for (const o of n.outputs) {
        expect(written.has(o)).toBe(false);
        written.add(o);
      }
    }
    expect(JSON.parse(JSON.stringify(g))).toEqual(g);
  });

  it('dropout streams are unique; settings defaults and relative data paths', () => {
    const src = readFileSync('specs/mnist_mlp.model', 'utf8')
      .replace('-> relu ->', '-> dropout(0.2) -> relu -> dropout ->')
      .replace('train { data: mnist(), epochs: 5, batch: 64 }', 'train { data: csv(train: "d/train.csv"), steps: 7 }');
    const m = checkSource(src.replace('input image: f32[N, 1, 28, 28]', 'input image: f32[N, 784]'), '/tmp/x/spec.model');
    const drops = m.graph.nodes.filter((n) => n.op === 'dropout');
    expect(drops.map((d) => d.attrs)).toEqual([
      { p: 0.2, stream: 0 },
      { p: 0.5, stream: 1 },
    ]);
    expect(m.train).toEqual({
      data: { kind: 'csv', train: '/tmp/x/d/train.csv', test: null, label_column: 'label', normalize: null },
      epochs: null,
      steps: 7,
      batch: 32,
      shuffle: true,
      seed: 0,
      drop_last: false,
      grad_clip: null,
      grad_accum: 1,
      eval_every: null,
      checkpoint_every: null,
      val_split: 0,
      early_stop: null,
      precision: 'fp32',
    });
    expect(m.schedule).toEqual({ kind: 'constant', warmup_steps: 0, warmup_start_factor: 1 / 3 });
  });

  it('block parameters, defaults and integer arithmetic', () => {
    const m = checkSource(
      `model t\ninput image: f32[N, 3, 16, 16]\ninput label: i32[N]\nblock cb(c: int, k: int = 3) {\n  in x\n  out x -> conv2d(c * 2, k, padding: k / 2) -> relu\n}\n` +
        `network {\n  logits = image -> cb(4) as s1 -> cb(8, k: 5) -> global_avgpool -> flatten -> linear(10, init: xavier_uniform(gain: 2))\n}\n${TAIL}`,
      't.model',
    );
    expect(m.params.filter((p) => p.path.endsWith('.weight')).map((p) => [p.path, p.shape])).toEqual([
      ['s1.conv2d0.weight', [8, 3, 3, 3]],
      ['cb1.conv2d0.weight', [16, 8, 5, 5]],
      ['linear0.weight', [10, 16]],
    ]);
    expect(m.params.find((p) => p.path === 'linear0.weight')!.init).toEqual({ kind: 'xavier_uniform', gain: 2 });
    expect(m.layers.find((l) => l.path === 'cb1.conv2d0')!.outShape).toEqual([N, 16, 16, 16]);
  });
});
