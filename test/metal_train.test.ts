/**
 * End to end on the emulator: the example specs' programs (front end -> IR -> Metal codegen
 * -> metal-emu native module) train 20 steps from the same initial parameters and batches as
 * the CPU backend; per-step losses and metrics agree within 1e-4 relative. The same with an
 * op forced onto the CPU fallback (the fallback path runs the CPU backend's kernel on the
 * shared buffers between two command buffers). A small GPT three ways (fused attention,
 * the unfused attention path, attention written by hand) trains alike on both.
 */
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkFile, checkSource } from '../compiler/check/index.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { createCpuSession } from '../runtime/native/native_session.js';
import { createMetalEmuSession } from '../runtime/metal-emu/session.js';
import type { Session } from '../runtime/session.js';
import { batches, CACHE, compareModel, initParams } from './metal_train_helpers.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');

async function compare(spec: string, batch: number, fallbackOps: string[] = []) {
  await compareModel(checkFile(path.join(ROOT, 'specs', spec)), batch, fallbackOps);
}

// every op family at once: grouped/strided convs, batchnorm, pools, residual arithmetic,
// layernorm, dropout, concat, metrics, grad clipping, gradient accumulation, eval_tail
const MIXED = `model mixed
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
optimizer adamw(lr: 0.01, weight_decay: 0.01)
train { data: synthetic(), epochs: 1, batch: 4, grad_accum: 2, grad_clip: 1.0 }
`;

/**
 * A small GPT (char_gpt's structure at tiny sizes): token + position embeddings, pre-norm blocks
 * with causal multi-head attention, a GELU MLP, the output layer tied to the token embedding.
 * `attn` is the attention layer's text (the fused op, or the unfused path with dropout).
 * SGD, not Adam: the gradient of the key bias is zero in exact arithmetic (softmax ignores a
 * constant added to every score of a row), and Adam would turn each backend's float roundoff
 * in it into steps of size lr in unrelated directions, which the parameter comparison flags.
 */
const tinyGpt = (attn: string) => `model tiny_gpt
input tokens: i32[N, 9]
input targets: i32[N, 9]
block gpt_block(d: int, heads: int) {
  in x
  h = x + (x -> layernorm as ln1 -> ${attn} as attn)
  out h + (h -> layernorm as ln2 -> linear(2 * d) as fc -> gelu -> linear(d) as proj)
}
network {
  h = (tokens -> embedding(11, 16) as tok) + (tokens -> positions -> embedding(9, 16) as pos)
  repeat 2 as blocks { h = gpt_block(h, 16, 2) }
  logits = h -> layernorm as ln_f -> linear(11, bias: false, tied_to: tok) as head
}
loss cross_entropy(logits, targets)
optimizer sgd(lr: 0.1, momentum: 0.9)
train { data: synthetic(), steps: 20, batch: 3, seed: 0 }
`;

// attention written by hand with the tensor algebra (split, reshape, transpose, batched matmul,
// number arithmetic, the causal masked_fill with -inf, softmax on the last axis), layernorm
// without affine, reductions over an axis, pad + slice, cross_entropy over [N, T, C] with ignore_index
const MANUAL_GPT = `model manual_gpt
input tokens: i32[N, 9]
input targets: i32[N, 9]
block manual_block(d: int, heads: int) {
  in x
  q, k, v = split(x -> layernorm(elementwise_affine: false) as ln1 -> linear(3 * d) as qkv, d, 2)
  qh = transpose(reshape(q, 9, heads, d / heads), 1, 2)
  kh = transpose(reshape(k, 9, heads, d / heads), 1, 2)
  vh = transpose(reshape(v, 9, heads, d / heads), 1, 2)
  att = matmul(qh, transpose(kh, -2, -1)) / sqrt(d / heads) -> masked_fill(value: -inf, causal: true) -> softmax(axis: -1)
  o = reshape(transpose(matmul(att, vh), 1, 2), 9, d) -> linear(d) as proj
  h = x + o
  s = h - (h -> mean(axis: 2, keepdim: true)) + (h -> max(axis: 2, keepdim: true)) * 0.1
  out s + (pad(s, [0, 0, 1, 0]) -> slice(1, 0, 9)) * 0.5
}
network {
  h = (tokens -> embedding(11, 16) as tok) + (tokens -> positions -> embedding(9, 16) as pos)
  repeat 2 as blocks { h = manual_block(h, 16, 2) }
  logits = h -> layernorm as ln_f -> linear(11, bias: false, tied_to: tok) as head
}
loss cross_entropy(logits, targets, ignore_index: 3)
optimizer sgd(lr: 0.1, momentum: 0.9)
train { data: synthetic(), steps: 20, batch: 3, seed: 0 }
`;

describe('metal-emu trains a small GPT like the CPU backend', () => {
  it('fused causal attention, tied output layer: 20 steps, per-step losses within 1e-4', async () => {
    await compareModel(checkSource(tinyGpt('attention(heads, causal: true)'), 'tiny_gpt.model'), 3, [], 11);
  }, 600_000);

  it('the unfused attention path (dropout 0.1 inside attention)', async () => {
    await compareModel(checkSource(tinyGpt('attention(heads, causal: true, dropout: 0.1)'), 'tiny_gpt.model'), 3, [], 11);
  }, 600_000);

  it('attention written by hand with the tensor algebra, and a loss with ignore_index', async () => {
    await compareModel(checkSource(MANUAL_GPT, 'manual_gpt.model'), 3, [], 11);
  }, 600_000);
});

describe('metal-emu trains like the CPU backend', () => {
  it('a spec using every op family, with grad_accum, grad_clip, dropout and eval_tail', async () => {
    const model = checkSource(MIXED, 'mixed.model');
    const programs = buildPrograms(model, { batch: 4, evalTail: 3 });
    const cpu = await createCpuSession(programs, { threads: 1, cacheDir: CACHE });
    const emu = await createMetalEmuSession(programs, { threads: 1, cacheDir: CACHE });
    try {
      expect(emu.hasProgram('apply_update')).toBe(true);
      initParams(model, [cpu, emu]);
      for (const s of [cpu, emu]) for (const n of s.tensorNames().filter((t) => t.endsWith('running_var'))) s.write(n, new Float32Array(s.tensorShape(n).reduce((x, y) => x * y, 1)).fill(1));
      const data = batches(programs.train_step, 8, 3);
      const tail = batches(programs.eval_tail!, 1, 3)[0];
      const outs = (s: Session) => {
        const r: number[][] = [];
        data.forEach((batch, step) => {
          r.push(Array.from(s.run('train_step', batch, { lr: 0.01, t: Math.floor(step / 2) + 1, seed: 5, counter: step })));
          if (step % 2 === 1) r.push(Array.from(s.run('apply_update', [], { lr: 0.01, t: Math.floor(step / 2) + 1, seed: 5, counter: step })));
        });
        r.push(Array.from(s.run('eval', data[0], { lr: 0, t: 1, seed: 5, counter: 0 })));
        r.push(Array.from(s.run('eval_tail', tail, { lr: 0, t: 1, seed: 5, counter: 0 })));
        return r;
      };
      const a = outs(cpu), b = outs(emu);
      expect(b.length).toBe(a.length);
      for (let i = 0; i < a.length; i++)
        for (let k = 0; k < a[i].length; k++)
          expect(Math.abs(b[i][k] - a[i][k]) / Math.max(1e-6, Math.abs(a[i][k])), `run ${i} output ${k}: ${b[i][k]} vs ${a[i][k]}`).toBeLessThan(1e-4);
    } finally {
      cpu.close();
      emu.close();
    }
  }, 600_000);

  it('mnist_mlp: 20 steps, per-step losses within 1e-4', async () => {
    await compare('mnist_mlp.model', 16);
  }, 600_000);

  it('lenet: 20 steps, per-step losses within 1e-4', async () => {
    await compare('lenet.model', 4);
  }, 900_000);

  it('mnist_mlp with linear and cross_entropy forced onto the CPU fallback', async () => {
    await compare('mnist_mlp.model', 16, ['linear', 'cross_entropy_grad']);
  }, 600_000);
});
