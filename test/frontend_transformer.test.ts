// The transformer surface of the language (issue 13): specs/char_gpt.model checks with
// torch's parameter names and counts; repeat ... as NAME; attention lowering; tensor algebra
// and tensor-by-number arithmetic; split / chunk into several names; weight tying; shape
// errors with file:line:col, both shapes and a hint; and the hand-written attention equal to
// the fused `attention` layer in the float64 reference interpreter.
import { describe, it, expect } from 'vitest';
import * as fs from 'node:fs';
import { checkFile, checkSource } from '../compiler/check/index.js';
import { summarize, renderSummary } from '../compiler/check/summary.js';
import { plannedPeakBytes } from '../compiler/ir/print_ir.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { UserError } from '../compiler/errors.js';
import { initParams } from '../compiler/train/init.js';
import { createReferenceSession } from '../runtime/reference_session.js';
import { uint32Stream } from '../data/rng.js';

function checkError(src: string): string {
  try {
    checkSource(src, 'x.model');
  } catch (e) {
    expect(e).toBeInstanceOf(UserError);
    return (e as Error).message;
  }
  throw new Error('expected a UserError');
}

const HEAD = `model m
input tokens: i32[N, 8]
input targets: i32[N, 8]
`;
const TAIL = `
loss cross_entropy(logits, targets)
optimizer adam(lr: 1e-3)
train { data: text(), steps: 1, batch: 2 }
`;
const net = (body: string, blocks = '') => `${HEAD}${blocks}\nnetwork {\n${body}\n}${TAIL}`;

describe('specs/char_gpt.model', () => {
  const m = checkFile('specs/char_gpt.model');
  it('has the parameters of the torch GPT by name and shape (nn.ModuleList blocks.i, nn.MultiheadAttention names)', () => {
    const want: [string, number[]][] = [['tok.weight', [83, 128]], ['pos.weight', [64, 128]]];
    for (let i = 0; i < 4; i++) {
      const b = `blocks.${i}`;
      want.push(
        [`${b}.ln1.weight`, [128]], [`${b}.ln1.bias`, [128]],
        [`${b}.attn.in_proj_weight`, [384, 128]], [`${b}.attn.in_proj_bias`, [384]],
        [`${b}.attn.out_proj.weight`, [128, 128]], [`${b}.attn.out_proj.bias`, [128]],
        [`${b}.ln2.weight`, [128]], [`${b}.ln2.bias`, [128]],
        [`${b}.fc.weight`, [512, 128]], [`${b}.fc.bias`, [512]],
        [`${b}.proj.weight`, [128, 512]], [`${b}.proj.bias`, [128]],
      );
    }
    want.push(['ln_f.weight', [128]], ['ln_f.bias', [128]], ['head.weight', [83, 128]]);
    expect(m.params.map((p) => [p.path, p.shape]).sort()).toEqual(want.sort());
    expect(m.params.reduce((s, p) => s + p.shape.reduce((a, b) => a * b, 1), 0)).toBe(822_784);
    expect(m.train.data).toEqual({ kind: 'text', file: null, tokenizer: 'char' });
    expect(m.numClasses).toBe(83);
  });
  it('lowers attention to in_proj linear -> the fused attention_qkv op (q, k, v in place, o as [N, T, C]) -> out_proj linear', () => {
    const ops = m.graph.nodes.filter((n) => n.path === 'blocks.0.attn').map((n) => n.op);
    expect(ops).toEqual(['linear', 'attention_qkv', 'linear']);
    const att = m.graph.nodes.find((n) => n.op === 'attention_qkv')!;
    expect(att.attrs).toEqual({ heads: 4, causal: true, scale: 1 / Math.sqrt(32) });
    expect(m.graph.values[att.inputs[0]].shape).toEqual([-1, 64, 384]);
    expect(att.outputs.map((o) => m.graph.values[o].shape)).toEqual([[-1, 64, 128], [-1, 4, 64]]);
    // the backward: one attention_qkv_grad per layer writes d(qkv) whole (no concat / permute of head gradients)
    const p = buildPrograms(m, { batch: 2 });
    const ops2 = p.train_step.graph.nodes.map((n) => n.op);
    expect(ops2.filter((o) => o === 'attention_qkv_grad').length).toBe(4);
    expect(ops2.filter((o) => o === 'concat' || o === 'permute' || o === 'slice').length).toBe(0);
  });
  it('mpsc check prints the attention layers with shapes and parameters; the memory plan holds their intermediates', () => {
    const text = renderSummary(summarize(m, plannedPeakBytes(m)));
    expect(text).toMatch(/blocks\.3\.attn\s+attention\s+f32\[N, 64, 128\]\s+66,048/);
    expect(text).toMatch(/parameters: 822,784/);
    const p = buildPrograms(m, { batch: 4 });
    const lse = p.train_step.graph.values.find((v) => v.name === 'blocks.0.attn.lse')!;
    expect(lse.shape).toEqual([4, 4, 64]);
    expect(p.train_step.plan!.offsets[lse.id]).toBeGreaterThanOrEqual(0);
    const scoresBytes = 4 * 4 * 64 * 64 * 4; // an unfused [N, H, T, T] score tensor is never allocated
    expect(p.train_step.graph.values.some((v) => v.shape.length === 4 && v.shape[2] === 64 && v.shape[3] === 64)).toBe(false);
    expect(p.train_step.plan!.arenaBytes).toBeGreaterThan(scoresBytes);
  });
});

describe('attention options', () => {
  it('dropout > 0 takes the unfused path (dropout on the weights, removed in eval); bias: false drops both biases', () => {
    const m = checkSource(net('h = tokens -> embedding(10, 8) as tok -> attention(2, causal: true, dropout: 0.1, bias: false) as attn\nlogits = h -> linear(10) as head'), 'x.model');
    expect(m.graph.nodes.filter((n) => n.path === 'attn').map((n) => n.op)).toEqual([
      'linear', 'reshape', 'permute', 'slice', 'reshape', 'slice', 'reshape', 'slice', 'reshape',
      'matmul', 'unary', 'masked_fill', 'softmax', 'dropout', 'matmul', 'permute', 'reshape', 'linear',
    ]);
    expect(m.params.filter((p) => p.layer === 'attn').map((p) => p.path)).toEqual(['attn.in_proj_weight', 'attn.out_proj.weight']);
    const linears = m.graph.nodes.filter((n) => n.path === 'attn' && n.op === 'linear');
    for (const l of linears) expect(l.inputs[2]).toBe(-1);
    const p = buildPrograms(m, { batch: 2 });
    expect(p.eval.graph.nodes.some((n) => n.op === 'dropout')).toBe(false);
    expect(p.train_step.graph.nodes.some((n) => n.op === 'dropout')).toBe(true);
  });
});

describe('repeat as NAME, blocks with integer expressions', () => {
  it('names iteration i of a one-block body NAME.i and of a longer body NAME.i.<layer>', () => {
    const blocks = 'block mlp(d: int) {\n  in x\n  out x -> linear(2 * d) as up -> relu -> linear(d) as down\n}';
    const a = checkSource(net('h = tokens -> embedding(10, 4) as tok\nrepeat 2 as layers { h = mlp(h, 4) }\nlogits = h -> linear(10) as head', blocks), 'x.model');
    expect(a.params.map((p) => p.path)).toEqual(expect.arrayContaining(['layers.0.up.weight', 'layers.1.down.bias']));
    expect(a.params.find((p) => p.path === 'layers.1.up.weight')!.shape).toEqual([8, 4]);
    const b = checkSource(net('h = tokens -> embedding(10, 4) as tok\nrepeat 2 as layers { h = h -> linear(4) as lin -> relu }\nlogits = h -> linear(10) as head'), 'x.model');
    expect(b.params.map((p) => p.path)).toEqual(expect.arrayContaining(['layers.0.lin.weight', 'layers.1.lin.weight']));
  });
  it('takes the count from a name: repeat n as NAME inside a block', () => {
    const blocks = 'block stack(n: int) {\n  in x\n  h = x\n  repeat n as l { h = h -> linear(4) as lin }\n  out h\n}';
    const m = checkSource(net('h = tokens -> embedding(10, 4) as tok -> stack(3) as s\nlogits = h -> linear(10) as head', blocks), 'x.model');
    expect(m.params.map((p) => p.path)).toContain('s.l.2.lin.weight');
  });
});

describe('tensor algebra', () => {
  const emb = 'h = tokens -> embedding(10, 8) as tok\n';
  it('tensor-by-number arithmetic is the affine fn; / on tensors is binary div', () => {
    const m = checkSource(net(`${emb}a = h * 0.5\nb = h / 8\nc = 1 - h\nd = h + 2\ne = a / (b + c + d)\nlogits = e -> linear(10) as head`), 'x.model');
    const aff = m.graph.nodes.filter((n) => n.op === 'unary' && n.attrs.fn === 'affine').map((n) => [n.attrs.scale, n.attrs.shift]);
    expect(aff).toEqual([[0.5, 0], [0.125, 0], [-1, 1], [1, 2]]);
    expect(m.graph.nodes.some((n) => n.op === 'binary' && n.attrs.fn === 'div')).toBe(true);
  });
  it('split / chunk give several names; matmul, transpose, permute, slice, pad, reductions and where have their shapes', () => {
    const m = checkSource(
      net(
        `${emb}q, k, v = split(h -> linear(24) as qkv, 8, 2)\n` +
          'a, b = chunk(q, 2, -1)\n' +
          'c, d = split(k, [3, 5], 2)\n' +
          's = matmul(q, transpose(k, 1, 2))\n' +
          'p = permute(s, [0, 2, 1])\n' +
          'x = slice(v, 1, 2, -1)\n' +
          'y = pad(x, [0, 0, 1, 1])\n' +
          'r = sum(s, axis: -1, keepdim: true) + mean(s, -1, keepdim: true) + max(p, [2], keepdim: true)\n' +
          'w = where(s, s, p)\n' +
          'z = matmul(w + r, v)\n' +
          'e = pow(exp(a - b) + sqrt(abs(a) + 1) + log(abs(b) + 2) * rsqrt(abs(a) + 1), 2)\n' +
          'logits = (z + pad(e, [0, 4]) + slice(y, 1, 0, 1) + pad(c, [0, 5]) + pad(d, [3, 0])) -> linear(10) as head',
      ),
      'x.model',
    );
    const shape = (name: string) => m.layers.find((l) => l.path === name)!.outShape;
    expect(shape('split0.2')).toEqual([-1, 8, 8]);
    expect(shape('chunk0.1')).toEqual([-1, 8, 4]);
    expect(shape('split1.1')).toEqual([-1, 8, 5]);
    expect(shape('matmul0')).toEqual([-1, 8, 8]);
    expect(shape('slice0')).toEqual([-1, 5, 8]);
    expect(shape('pad0')).toEqual([-1, 7, 8]);
    expect(shape('sum0')).toEqual([-1, 8, 1]);
    const red = m.graph.nodes.filter((n) => n.op === 'reduce').map((n) => [n.attrs.fn, n.attrs.axes]);
    expect(red).toEqual([['sum', [2]], ['mean', [2]], ['max', [2]]]);
    expect(m.graph.nodes.find((n) => n.op === 'pad')!.attrs.pads).toEqual([0, 0, 1, 1, 0, 0]);
    expect(m.graph.nodes.filter((n) => n.path === 'where0').map((n) => n.op)).toEqual(['masked_fill', 'masked_fill', 'binary']);
  });
  it('math functions on numbers fold at compile time', () => {
    const m = checkSource(net(`${emb}logits = (h * (1 / sqrt(16)) + exp(0)) -> linear(10) as head`), 'x.model');
    expect(m.graph.nodes.filter((n) => n.op === 'unary').map((n) => [n.attrs.scale, n.attrs.shift])).toEqual([[0.25, 0], [1, 1]]);
  });
  it('weight tying: one parameter read by both layers', () => {
    const m = checkSource(net('h = tokens -> embedding(10, 8) as tok\nlogits = h -> linear(10, bias: false, tied_to: tok) as head'), 'x.model');
    expect(m.params.map((p) => p.path)).toEqual(['tok.weight']);
    const tok = m.params[0].value;
    expect(m.graph.nodes.find((n) => n.op === 'linear')!.inputs[1]).toBe(tok);
    expect(m.layers.find((l) => l.path === 'head')!.params).toBe(0);
  });
  it('layernorm without elementwise_affine has no parameters; losses take ignore_index', () => {
    const m = checkSource(net('h = tokens -> embedding(10, 8) as tok -> layernorm(elementwise_affine: false) as ln\nlogits = h -> linear(10) as head').replace('cross_entropy(logits, targets)', 'cross_entropy(logits, targets, ignore_index: 0)'), 'x.model');
    expect(m.params.filter((p) => p.layer === 'ln')).toEqual([]);
    expect(m.graph.nodes.find((n) => n.op === 'layernorm')!.inputs.slice(1)).toEqual([-1, -1]);
    expect(m.graph.nodes.find((n) => n.op === 'cross_entropy')!.attrs).toEqual({ label_smoothing: 0, ignore_index: 0 });
  });
});

describe('shape errors: file:line:col, both shapes, a hint', () => {
  it.each([
    ['matmul inner dims', 'h = tokens -> embedding(10, 6) as tok\nlogits = matmul(h, h) -> linear(10) as head', /x\.model:7:10: error: matmul 'matmul0': inner dims differ: f32\[N, 8, 6\] @ f32\[N, 8, 6\] \(6 vs 8\)[^]*hint: the last dim of a must equal/],
    ['tied_to shape', 'h = tokens -> embedding(10, 8) as tok\nlogits = h -> linear(12, tied_to: tok) as head', /tied_to 'tok' has weight \[10, 8\], but this layer needs \[12, 8\][^]*hint: give this layer out_features 10/],
    ['heads do not divide C', 'h = tokens -> embedding(10, 6) as tok -> attention(4) as attn\nlogits = h -> linear(10) as head', /6 channels do not divide into 4 heads[^]*hint: heads must divide C = 6/],
    ['split into the wrong count', 'h = tokens -> embedding(10, 8) as tok\na, b = chunk(h, 3, 2)\nlogits = a -> linear(10) as head', /'chunk' gives 3 tensors, but 2 names are assigned/],
    ['number / tensor', 'h = tokens -> embedding(10, 8) as tok\nlogits = (2 / h) -> linear(10) as head', /'2 \/ tensor'[^]*hint: write 2 \* pow\(x, -1\)/],
    ['unknown tied layer', 'h = tokens -> embedding(10, 8) as tok\nlogits = h -> linear(10, tied_to: tokk) as head', /no layer instance named 'tokk'[^]*hint: did you mean 'tok'/],
    ['permute moving the batch dim', 'h = tokens -> embedding(10, 8) as tok\nlogits = permute(h, [1, 0, 2]) -> linear(10) as head', /moves the batch dim[^]*hint: the batch dim N stays first/],
    ['class-last labels', 'h = tokens -> embedding(10, 8) as tok\nlogits = mean(h, 1) -> linear(10) as head', /expects label i32\[N\], got i32\[N, 8\]/],
  ])('%s', (_what, body, re) => {
    const msg = checkError(net(body));
    expect(msg).toMatch(/x\.model:\d+:\d+: error:/);
    expect(msg).toMatch(re);
  });
});

describe('hand-written attention equals the fused attention layer (float64 reference)', () => {
  const T = 6, C = 8, H = 2;
  const fused = `model f
input tokens: i32[N, ${T}]
input targets: i32[N, ${T}]
network {
  h = (tokens -> embedding(11, ${C}) as tok) + (tokens -> positions -> embedding(${T}, ${C}) as pos)
  logits = h -> attention(${H}, causal: true) as attn -> linear(11) as head
}
loss cross_entropy(logits, targets)
optimizer sgd(lr: 0.1)
train { data: synthetic(train_size: 4, test_size: 4), steps: 1, batch: 3 }
`;
  const manual = fused.replace(
    `logits = h -> attention(${H}, causal: true) as attn -> linear(11) as head`,
    `q, k, v = split(h -> linear(${3 * C}) as in_proj, ${C}, 2)
  q = transpose(reshape(q, ${T}, ${H}, ${C / H}), 1, 2)
  k = transpose(reshape(k, ${T}, ${H}, ${C / H}), 1, 2)
  v = transpose(reshape(v, ${T}, ${H}, ${C / H}), 1, 2)
  att = matmul(q, transpose(k, -2, -1)) / sqrt(${C / H})
  att = masked_fill(att, value: -inf, causal: true) -> softmax(axis: -1)
  y = reshape(transpose(matmul(att, v), 1, 2), ${T}, ${C}) -> linear(${C}) as out_proj
  logits = y -> linear(11) as head`,
  );
  it('same loss and same gradients (one SGD step gives the same weights)', async () => {
    const mf = checkSource(fused, 'f.model');
    const mm = checkSource(manual, 'm.model');
    const init = initParams(mf, 5);
    const rename: Record<string, string> = { 'attn.in_proj_weight': 'in_proj.weight', 'attn.in_proj_bias': 'in_proj.bias', 'attn.out_proj.weight': 'out_proj.weight', 'attn.out_proj.bias': 'out_proj.bias' };
    const next = uint32Stream(9);
    const tokens = Int32Array.from({ length: 3 * T }, () => next() % 11);
    const targets = Int32Array.from({ length: 3 * T }, () => next() % 11);
    const results: Map<string, Float32Array>[] = [];
    const losses: number[] = [];
    for (const m of [mf, mm]) {
      const p = buildPrograms(m, { batch: 3 });
      const s = await createReferenceSession(p);
      for (const [name, data] of init) s.write(rename[name] && m === mm ? rename[name] : name, data);
      losses.push(s.run('eval', [tokens, targets], { lr: 0, t: 1, seed: 0, counter: 0 })[0]);
      s.run('train_step', [tokens, targets], { lr: 0.1, t: 1, seed: 0, counter: 0 });
      results.push(new Map([...init.keys()].map((n) => [n, s.read(rename[n] && m === mm ? rename[n] : n)])));
    }
    expect(Math.abs(losses[0] - losses[1])).toBeLessThan(1e-6);
    for (const [n, a] of results[0]) {
      const b = results[1].get(n)!;
      const moved = a.some((x, i) => x !== init.get(n)![i]);
      expect(moved, `${n} is trained`).toBe(true);
      for (let i = 0; i < a.length; i++) expect(Math.abs(a[i] - b[i]), `${n}[${i}]`).toBeLessThan(1e-6);
    }
  });
});
