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
import { isHalf, isPersistent, programsOf, valueBytes, type Graph } from '../compiler/ir/graph.js';
import { opDef } from '../compiler/ir/ops.js';
import { AMP_CHECK_OUTPUT, LOSS_SCALE_STATE } from '../compiler/ir/optimizer_lowering.js';
import { applyPrecision } from '../compiler/ir/precision.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { graphProblems } from '../compiler/ir/verify.js';
import { checkPrecisionSupported, openSession } from '../runtime/device.js';
import { gptModel } from '../bench/gpt_tiny.js';
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
    it(`${p}: every GEMM operand reads a ${half} copy made once by a cast; everything else stays f32`, () => {
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
          if (n.op === 'cast') expect(n.attrs.to).toBe(half);
        }
        // 16-bit values: only cast outputs, read only by GEMM operands; never persistent, inputs or outputs
        for (const v of g.values) if (isHalf(v.dtype)) expect(v.kind === 'activation' || v.kind === 'grad', v.name).toBe(true);
        for (const r of halfReads(g)) expect(['linear', 'matmul']).toContain(r.op);
        const casts = g.nodes.filter((n) => n.op === 'cast');
        expect(new Set(casts.map((n) => n.inputs[0])).size).toBe(casts.length); // one copy per value
      }
      const train = set.train_step.graph;
      // the master weights stay f32 and the optimizer (in apply_update for fp16) reads f32 gradients
      expect(train.values.filter(isPersistent).every((v) => v.dtype === 'f32')).toBe(true);
      const w16 = train.values.find((v) => v.name === `fc1.weight.${half}`)!;
      expect(w16.shape).toEqual([256, 784]);
      expect(valueBytes(w16)).toBe(256 * 784 * 2);
      // the first linear reads the image's copy and the weight's copy; its backward dW reads the same image copy
      const lin = train.nodes.find((n) => n.op === 'linear' && n.path === 'fc1')!;
      expect(lin.inputs.slice(0, 2).map((id) => train.values[id].name)).toEqual([`flatten0.out.${half}`, `fc1.weight.${half}`]);
      const dW = train.nodes.find((n) => n.op === 'matmul' && n.path === 'fc1')!;
      expect(dW.inputs[1]).toBe(lin.inputs[0]);
      // the eval program computes at the same precision
      expect(set.eval.graph.nodes.filter((n) => n.op === 'cast').length).toBe(4);
    });
  }

  it('attention and conv operands are cast too (a GPT with fused attention, LeNet)', () => {
    const gpt = gptModel('gpt_toy', [13, 11, 16, 2, 2, 3, 1e-3]);
    const set = buildPrograms(at(gpt, 'bf16'), { batch: 2 });
    const ops = new Set(halfReads(set.train_step.graph).map((r) => `${r.op}:${r.k}`));
    for (const want of ['attention:0', 'attention:1', 'attention:2', 'attention_grad:0', 'attention_grad:4', 'linear:0', 'linear:1', 'matmul:0']) expect(ops).toContain(want);
    expect(ops).not.toContain('attention_grad:5'); // the logsumexp stays f32
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
  it('a 16-bit value read by an op that takes none (relu)', () => {
    const g = clone();
    const relu = g.nodes.find((n) => n.op === 'unary')!;
    relu.inputs[0] = g.values.find((v) => v.name === 'fc1.weight.bf16')!.id;
    expect(graphProblems(g).join('\n')).toMatch(/reads bf16 value .*fc1\.weight\.bf16.*no input/);
  });
  it('a 16-bit value written by something else than cast, and a cast writing the wrong type', () => {
    const g = clone();
    const lin = g.nodes.find((n) => n.op === 'linear')!;
    g.values[lin.outputs[0]].dtype = 'bf16';
    expect(graphProblems(g).join('\n')).toMatch(/only cast makes 16-bit values/);
    const h = clone();
    h.nodes.find((n) => n.op === 'cast')!.attrs.to = 'f16';
    expect(graphProblems(h).join('\n')).toMatch(/but casts to f16/);
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

describe('devices without 16-bit kernels refuse a 16-bit precision', () => {
  const set = buildPrograms(at(checkFile(spec('mnist_mlp.model')), 'bf16'), { batch: 2 });
  it('cuda', async () => {
    const e = await openSession('cuda', set).then(() => null, (x: unknown) => x);
    expect(e).toBeInstanceOf(UserError);
    expect((e as Error).message).toContain('--device cuda does not run precision "bf16" yet; it runs on --device cpu, --device metal, --device metal-emu, --device reference');
  });
  it('mpsc build --device cuda refuses (checkPrecisionSupported); metal, metal-emu, cpu and fp32 pass', () => {
    expect(() => checkPrecisionSupported('cuda', set)).toThrow(UserError);
    for (const d of ['cpu', 'metal', 'metal-emu']) expect(() => checkPrecisionSupported(d, set)).not.toThrow();
    expect(() => checkPrecisionSupported('cuda', buildPrograms(checkFile(spec('mnist_mlp.model')), { batch: 2 }))).not.toThrow();
  });
});
