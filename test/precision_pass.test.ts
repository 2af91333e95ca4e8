/**
 * Mixed precision (issue 15), the compiler side: the `train { precision }` setting and
 * `--precision` (checked as spec text), the precision pass (compiler/ir/precision.ts: where casts
 * go, what stays f32), verify.ts's precision invariants (each checked to fail on a broken graph),
 * fp16 loss scaling in the programs (seeded backward, unscale before clip in apply_update), the
 * memory plan at 2 bytes per 16-bit element, and the GPU devices refusing a 16-bit precision.
 */
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { checkFile, checkSource } from '../compiler/check/index.js';
import { precisionOverride } from '../compiler/check/overrides.js';
import { UserError } from '../compiler/errors.js';
import { DiagnosticsError } from '../compiler/diagnostics.js';
import { isHalf, isPersistent, numel, programsOf, valueBytes, type Graph, type Program } from '../compiler/ir/graph.js';
import { opDef } from '../compiler/ir/ops.js';
import { AMP_CHECK_OUTPUT, LOSS_SCALE_STATE } from '../compiler/ir/optimizer_lowering.js';
import { applyPrecision } from '../compiler/ir/precision.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { graphProblems } from '../compiler/ir/verify.js';
import { openSession } from '../runtime/device.js';
import { findGpu } from '../runtime/cuda/session.js';
import { gptModel } from '../bench/gpt_tiny.js';
import { cudaFusions } from '../compiler/codegen-cuda/fusions.js';
import { verifyPlan } from '../compiler/ir/memory_plan.js';
import { runTwin } from './ir_helpers.js';
import type { CheckedModel } from '../compiler/model.js';

const spec = (name: string) => path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'specs', name);
const at = (m: CheckedModel, precision: 'fp32' | 'fp16' | 'bf16', over: Partial<CheckedModel['train']> = {}): CheckedModel => ({ ...m, train: { ...m.train, ...over, precision } });

const SMALL = `model small
input image: f32[N, 1, 28, 28]
input label: i32[N]
network { logits = image -> flatten -> linear(16) as fc1 -> relu -> linear(10) as fc2 }
loss cross_entropy(logits, label)
optimizer adam(lr: 1e-3)
`;

function firstError(fn: () => unknown): { message: string; line?: number; col?: number; hint?: string; file?: string } {
  try {
    fn();
  } catch (e) {
    if (e instanceof DiagnosticsError) {
      const d = e.diagnostics[0];
      return { message: d.message, line: d.loc.line, col: d.loc.col, hint: d.hint, file: d.loc.file };
    }
    if (e instanceof UserError) return { message: e.message };
    throw e;
  }
  throw new Error('expected an error');
}

describe('train { precision } and --precision', () => {
  it('defaults to fp32 and accepts fp16 / bf16', () => {
    expect(checkSource(SMALL + 'train { data: mnist() }', 'a.model').train.precision).toBe('fp32');
    expect(checkSource(SMALL + 'train { data: mnist(), precision: "bf16" }', 'a.model').train.precision).toBe('bf16');
    expect(checkSource(SMALL + 'train { data: mnist(), precision: "fp16" }', 'a.model').train.precision).toBe('fp16');
  });

  it('"fp8" is an error at the value with the allowed values', () => {
    const d = firstError(() => checkSource(SMALL + 'train { data: mnist(), precision: "fp8" }', 'a.model'));
    expect(d.message).toBe('precision must be "fp32", "fp16" or "bf16", got "fp8"');
    expect([d.line, d.col]).toEqual([7, 35]);
    const near = firstError(() => checkSource(SMALL + 'train { data: mnist(), precision: "bf61" }', 'a.model'));
    expect(near.hint).toContain('bf16');
  });

  it('--precision is the train.precision override, with the spec\'s error', () => {
    const m = checkFile(spec('mnist_mlp.model'), [precisionOverride('bf16')]);
    expect(m.train.precision).toBe('bf16');
    const d = firstError(() => checkFile(spec('mnist_mlp.model'), [precisionOverride('half')]));
    expect(d.message).toContain('<--precision half>:1:1: error: precision must be "fp32", "fp16" or "bf16", got "half"');
  });
});

/** every (node, input) that reads a 16-bit value */
function halfReads(g: Graph): { op: string; k: number; dtype: string }[] {
  const out: { op: string; k: number; dtype: string }[] = [];
  for (const n of g.nodes) n.inputs.forEach((id, k) => id >= 0 && isHalf(g.values[id].dtype) && out.push({ op: n.op, k, dtype: g.values[id].dtype }));
  return out;
}

describe('the precision pass', () => {
  const mlp = checkFile(spec('mnist_mlp.model'));

  it('fp32 leaves every program as it is', () => {
    const a = buildPrograms(at(mlp, 'fp32'), { batch: 4 });
    const b = buildPrograms({ ...mlp, train: { ...mlp.train, precision: undefined } }, { batch: 4 });
    expect(JSON.stringify(a)).toBe(JSON.stringify(b));
    expect(a.precision).toBeUndefined();
  });

  for (const p of ['bf16', 'fp16'] as const) {
    const half = p === 'bf16' ? 'bf16' : 'f16';
    it(`${p}: autocast's types (products and their readers' outputs ${half}, losses f32), only casts touching ${half}, one copy per value`, () => {
      const set = buildPrograms(at(mlp, p), { batch: 4 });
      expect(set.precision).toBe(p);
      for (const prog of programsOf(set)) {
        const g = prog.graph;
        expect(graphProblems(g), prog.name).toEqual([]);
        for (const n of g.nodes) {
          for (const k of opDef(n.op).halfInputs ?? []) {
            if (n.op === 'cast' || n.inputs[k] < 0) continue;
            expect(g.values[n.inputs[k]].dtype, `${prog.name}: ${n.op} input ${k}`).toBe(half);
          }
          // the canonical form: every op computes in f32, only casts write 16-bit values
          if (n.op !== 'cast') for (const o of n.outputs) expect(isHalf(g.values[o].dtype), `${prog.name}: ${n.op} writes ${g.values[o].name}`).toBe(false);
        }
        for (const v of g.values) if (isHalf(v.dtype)) expect(v.kind === 'activation' || v.kind === 'grad', v.name).toBe(true);
        for (const r of halfReads(g)) expect(['linear', 'matmul', 'cast']).toContain(r.op);
        const casts = g.nodes.filter((n) => n.op === 'cast');
        expect(new Set(casts.map((n) => `${n.inputs[0]}:${String(n.attrs.to)}`)).size).toBe(casts.length); // one copy per (value, type)
      }
      const train = set.train_step.graph;
      // (the last value of a name: fp16's unscaled loss gradient is a d_fc2.out before the scaled one)
      const type = (name: string) => [...train.values].reverse().find((v) => v.name === name)!.dtype;
      // the products' outputs and relu of a 16-bit value are 16-bit; the loss reads the logits widened
      expect([type('fc1.out'), type('relu0.out'), type('fc2.out')]).toEqual([half, half, half]);
      const ce = train.nodes.find((n) => n.op === 'cross_entropy')!;
      expect(train.values[ce.inputs[0]]).toMatchObject({ name: 'fc2.out.f32', dtype: 'f32' });
      // a gradient has its value's type; the parameters' gradients are f32 and never rounded
      expect([type('d_fc2.out'), type('d_relu0.out'), type('d_fc1.out')]).toEqual([half, half, half]);
      // (what the update reads at bf16; what fp16's loss scaling accumulates)
      const gradReads = train.nodes.filter((n) => n.op === 'adam_update' || n.op === 'grad_accumulate').map((n) => n.inputs[1]);
      expect(gradReads.length).toBe(4);
      for (const id of gradReads) {
        expect(train.values[id].dtype, train.values[id].name).toBe('f32');
        expect(train.nodes.find((n) => n.outputs.includes(id))!.op, train.values[id].name).not.toBe('cast');
      }
      // a 16-bit value is written by a cast of its producer's f32 result, right after it
      const fc1 = train.nodes.find((n) => n.op === 'linear' && n.path === 'fc1')!;
      const round = train.nodes[fc1.id + 1];
      expect([round.op, round.attrs.to, round.inputs[0], train.values[round.outputs[0]].name]).toEqual(['cast', half, fc1.outputs[0], 'fc1.out']);
      // the master weights stay f32 and the optimizer reads f32 gradients
      expect(train.values.filter(isPersistent).every((v) => v.dtype === 'f32')).toBe(true);
      const w16 = train.values.find((v) => v.name === `fc1.weight.${half}`)!;
      expect(w16.shape).toEqual([256, 784]);
      expect(valueBytes(w16)).toBe(256 * 784 * 2);
      // (the bias too, as autocast rounds it)
      expect(fc1.inputs.map((id) => train.values[id].name)).toEqual([`flatten0.out.${half}`, `fc1.weight.${half}`, `fc1.bias.${half}`]);
      // the backward dW reads the same image copy
      const dW = train.nodes.find((n) => n.op === 'matmul' && n.path === 'fc1')!;
      expect(dW.inputs[1]).toBe(fc1.inputs[0]);
    });
  }

  it('fp16: the loss scale multiplies the f32 loss gradient before its one rounding to f16', () => {
    const g = buildPrograms(at(mlp, 'fp16'), { batch: 4 }).train_step.graph;
    const ceGrad = g.nodes.find((n) => n.op === 'cross_entropy_grad')!;
    const seed = g.nodes.find((n) => n.op === 'binary' && n.inputs[0] === ceGrad.outputs[0])!;
    expect(g.values[ceGrad.outputs[0]].dtype).toBe('f32');
    const round = g.nodes.find((n) => n.op === 'cast' && n.inputs[0] === seed.outputs[0])!;
    expect([round.attrs.to, g.values[round.outputs[0]].name]).toEqual(['f16', 'd_fc2.out']);
  });

  it('rounds then widens the product gradient of an f32 value (the backward through its 16-bit copy)', () => {
    const gpt = gptModel('gpt_toy', [13, 11, 16, 2, 2, 3, 1e-3]);
    const g = buildPrograms(at(gpt, 'bf16'), { batch: 2 }).train_step.graph;
    // layernorm's output is f32 (autocast's fp32 list); the qkv projection's dx is rounded, then widened for layernorm_grad
    const lnGrad = g.nodes.find((n) => n.op === 'layernorm_grad')!;
    const dy = g.values[lnGrad.inputs[0]];
    const widen = g.nodes.find((n) => n.outputs.includes(dy.id))!;
    expect([widen.op, widen.attrs.to, dy.dtype]).toEqual(['cast', 'f32', 'f32']);
    const round = g.nodes.find((n) => n.outputs.includes(widen.inputs[0]))!;
    expect([round.op, round.attrs.to]).toEqual(['cast', 'bf16']);
    expect(['matmul', 'linear', 'reshape']).toContain(g.nodes.find((n) => n.outputs.includes(round.inputs[0]))!.op);
  });

  it('attention and conv operands are cast too (a GPT with fused attention, LeNet)', () => {
    const gpt = gptModel('gpt_toy', [13, 11, 16, 2, 2, 3, 1e-3]);
    const set = buildPrograms(at(gpt, 'bf16'), { batch: 2 });
    const ops = new Set(halfReads(set.train_step.graph).map((r) => `${r.op}:${r.k}`));
    // the GPT's layer lowers to attention_qkv (q, k, v in place in the projection): qkv, do and o 16-bit
    for (const want of ['attention_qkv:0', 'attention_qkv_grad:0', 'attention_qkv_grad:1', 'attention_qkv_grad:2', 'linear:0', 'linear:1', 'matmul:0']) expect(ops).toContain(want);
    expect(ops).not.toContain('attention_qkv_grad:3'); // the logsumexp stays f32
    const g = set.train_step.graph;
    for (const n of g.nodes.filter((x) => x.op === 'attention_qkv')) expect(g.values[n.outputs[1]].dtype).toBe('f32');
    for (const n of g.nodes.filter((x) => x.op === 'attention_qkv_grad')) expect(g.values[g.nodes.find((c) => c.inputs.includes(n.outputs[0]))!.outputs[0]].dtype).toBe('bf16');
    const lenet = buildPrograms(at(checkFile(spec('lenet.model')), 'fp16'), { batch: 2 });
    const cops = new Set(halfReads(lenet.train_step.graph).map((r) => r.op));
    for (const want of ['conv2d', 'conv2d_grad_input', 'conv2d_grad_weight']) expect(cops).toContain(want);
    expect(graphProblems(lenet.train_step.graph)).toEqual([]);
  });

  it('does not change its input graph', () => {
    const set = buildPrograms(at(mlp, 'fp32'), { batch: 2 });
    const before = JSON.stringify(set.train_step.graph);
    applyPrecision(set.train_step.graph, 'bf16');
    expect(JSON.stringify(set.train_step.graph)).toBe(before);
  });
});

describe('verify.ts catches broken precision graphs', () => {
  const g0 = buildPrograms(at(checkFile(spec('mnist_mlp.model')), 'bf16'), { batch: 2 }).train_step.graph;
  const clone = (): Graph => JSON.parse(JSON.stringify(g0));
  it('a cast writing another type than its `to`', () => {
    const h = clone();
    h.nodes.find((n) => n.op === 'cast')!.attrs.to = 'f16';
    expect(graphProblems(h).join('\n')).toMatch(/but casts to f16/);
  });
  it('a 16-bit output, and a 16-bit value an op mutates', () => {
    const g = clone();
    g.values.find((v) => v.name === 'loss')!.dtype = 'bf16';
    expect(graphProblems(g).join('\n')).toMatch(/\(loss\) is output but bf16/);
    const h = clone();
    const up = h.nodes.find((n) => n.op === 'adam_update')!;
    up.inputs[2] = h.values.find((v) => v.name === 'fc1.weight.bf16')!.id;
    expect(graphProblems(h).join('\n')).toMatch(/mutates bf16 value .*fc1\.weight\.bf16/);
  });
  it('a 16-bit parameter', () => {
    const g = clone();
    g.values.find((v) => v.name === 'fc1.weight')!.dtype = 'bf16';
    expect(graphProblems(g).join('\n')).toMatch(/fc1\.weight\) is param but bf16/);
  });
});

describe('fp16 loss scaling in the programs', () => {
  const m = at(checkFile(spec('mnist_mlp.model')), 'fp16', { grad_clip: 1 });
  const set = buildPrograms(m, { batch: 2 });
  const g = set.train_step.graph;

  it('seeds the backward with amp.loss_scale and reports the norm of the scaled gradients last', () => {
    const scale = g.values.find((v) => v.name === LOSS_SCALE_STATE)!;
    expect([scale.kind, scale.shape]).toEqual(['state', []]);
    const ceGrad = g.nodes.find((n) => n.op === 'cross_entropy_grad')!;
    const seed = g.nodes.find((n) => n.op === 'binary' && n.inputs[0] === ceGrad.outputs[0])!;
    expect([seed.attrs.fn, seed.inputs[1]]).toEqual(['mul', scale.id]);
    expect(set.train_step.outputs.map((o) => o.name)).toEqual(['loss', 'accuracy', AMP_CHECK_OUTPUT]);
    expect(g.nodes.some((n) => n.op === 'adam_update')).toBe(false);
  });

  it('apply_update unscales (divides by the scale) before the clip norm and the update read the gradients', () => {
    const u = set.apply_update!.graph;
    const scale = u.values.find((v) => v.name === LOSS_SCALE_STATE)!.id;
    const norm = u.nodes.find((n) => n.op === 'grad_norm')!;
    for (const id of norm.inputs) {
      const w = u.nodes.find((n) => n.outputs.includes(id))!;
      expect([w.op, w.attrs.fn, w.inputs[1], u.values[w.inputs[0]].kind]).toEqual(['binary', 'div', scale, 'gradacc']);
      expect(w.id).toBeLessThan(norm.id);
    }
    for (const up of u.nodes.filter((n) => n.op === 'adam_update')) expect(u.values[up.inputs[1]].name).toMatch(/\.grad_unscaled$/);
  });

  it('bf16 has no loss scaling', () => {
    const b = buildPrograms(at(checkFile(spec('mnist_mlp.model')), 'bf16'), { batch: 2 });
    expect(b.apply_update).toBeUndefined();
    expect(b.train_step.graph.values.some((v) => v.name === LOSS_SCALE_STATE)).toBe(false);
  });
});

describe('every device takes a 16-bit precision', () => {
  const set = buildPrograms(at(checkFile(spec('mnist_mlp.model')), 'bf16'), { batch: 2 });
  it.skipIf(findGpu() !== null)('cuda: on a machine without a GPU the refusal is the missing GPU, not the precision', async () => {
    const e = await openSession('cuda', set).then(() => null, (x: unknown) => x);
    expect(e).toBeInstanceOf(UserError);
    expect((e as Error).message).toMatch(/no CUDA device found/);
    expect((e as Error).message).not.toMatch(/precision/);
  });
});

describe('the casts folded into the GPU kernels (fuse.ts rule 4) and the in-place loss gradient', () => {
  const gpt = at(gptModel('gpt_toy', [13, 11, 16, 2, 2, 3, 1e-3]), 'bf16');
  const plain = buildPrograms(gpt, { batch: 2 });
  const cuda = buildPrograms(gpt, { batch: 2, fusions: cudaFusions() });
  const g = cuda.train_step.graph;
  const writerOf = (id: number) => g.nodes.find((n) => n.outputs.includes(id))!;

  it('the products, attention and the element-wise ops write their 16-bit outputs themselves; fewer casts', () => {
    expect(graphProblems(g)).toEqual([]);
    for (const n of g.nodes.filter((x) => x.op === 'linear' || x.op === 'attention' || x.op === 'unary')) {
      expect(g.values[n.outputs[0]].dtype, `${n.op} ${g.values[n.outputs[0]].name}`).toBe('bf16');
    }
    // no cast reads a GEMM's or an element-wise op's result, and none widens a value for a kernel that reads 16 bits
    const folded = cudaFusions().casts!;
    for (const c of g.nodes.filter((n) => n.op === 'cast')) {
      const w = writerOf(c.inputs[0]);
      const alone = g.nodes.filter((n) => n.inputs.includes(c.inputs[0])).length === 1; // (not a copy of a value others read in f32)
      if (c.attrs.to !== 'f32') {
        if (alone) expect(folded.stores, `a rounding cast of ${w?.op}`).not.toContain(w?.op);
      } else for (const r of g.nodes.filter((n) => n.inputs.includes(c.outputs[0]))) expect(folded.reads, `a widening cast for ${r.op}`).not.toContain(r.op);
    }
    const casts = (p: Program) => p.graph.nodes.filter((n) => n.op === 'cast').length;
    expect(casts(cuda.train_step)).toBeLessThan(casts(plain.train_step) / 2);
  });

  it('the reference interpreter gives the folded program bit for bit the canonical one\'s loss and update', () => {
    const { losses, stores } = runTwin(gpt.params, plain.train_step, cuda.train_step, 11, 2);
    for (const [a, b] of losses) expect(b).toBe(a);
    for (const pd of gpt.params) expect(Array.from(stores[1].get(pd.path)!), pd.path).toEqual(Array.from(stores[0].get(pd.path)!));
  });

  it('cross_entropy_grad writes its gradient over the dead logits (memory_plan.ts in place)', () => {
    const p = cuda.train_step;
    const ceg = g.nodes.find((n) => n.op === 'cross_entropy_grad')!;
    const [logits, dlogits] = [ceg.inputs[0], ceg.outputs[0]];
    expect([g.values[logits].dtype, g.values[dlogits].dtype]).toEqual(['bf16', 'bf16']);
    expect(p.plan!.offsets[dlogits]).toBe(p.plan!.offsets[logits]);
    expect(verifyPlan(p)).toEqual([]);
  });
});
