/**
 * Metal code generation on Linux: `generateMetalProject` writes the .metal libraries,
 * dispatch plans and bridge project for the example specs; golden files of the generated
 * MSL and plans for three specs (the MLP, LeNet and the char-level GPT; UPDATE_GOLDEN=1
 * rewrites them: review the diff); Metal's limits are enforced at build time; forced
 * fallbacks are listed as warnings; spec strings never reach generated code unescaped.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkFile } from '../compiler/check/index.js';
import { GraphBuilder, type Program } from '../compiler/ir/graph.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { UserError } from '../compiler/errors.js';
import { buildMetal, generateMetalProject } from '../compiler/codegen-metal/index.js';
import { checkLimits } from '../compiler/codegen-metal/limits.js';
import { GPU_KERNELS } from '../compiler/kernels/registry.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const GOLDEN = path.join(ROOT, 'test/golden/metal');

function programsOf(spec: string, precision?: 'fp16' | 'bf16') {
  const model = checkFile(path.join(ROOT, 'specs', spec));
  return buildPrograms(precision ? { ...model, train: { ...model.train, precision } } : model, { batch: model.train.batch });
}

describe('generateMetalProject', () => {
  for (const spec of fs.readdirSync(path.join(ROOT, 'specs')).filter((f) => f.endsWith('.model'))) {
    it(`writes sources, plans and the bridge project for ${spec}`, () => {
      const out = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-metal-gen-'));
      try {
        const { files, warnings } = generateMetalProject(programsOf(spec), out);
        expect(warnings).toEqual([]);
        const rel = files.map((f) => path.relative(out, f));
        expect(rel).toContain('train_step.metal');
        expect(rel).toContain('eval.metal');
        expect(rel).toContain('train_step.plan.json');
        expect(rel).toContain('bridge/mpsc_metal_plan.inc');
        expect(rel).toContain('bridge/mpsc_metal_bridge.mm');
        expect(rel).toContain('bridge/CMakeLists.txt');
        const plan = JSON.parse(fs.readFileSync(path.join(out, 'train_step.plan.json'), 'utf8'));
        expect(plan.format).toBe('mpsc-metal-plan/1');
        for (const s of plan.steps) {
          expect(s.kind).toBe('kernel');
          expect(s.bindings.length + 1).toBeLessThanOrEqual(31);
          expect(s.threadgroup[0] * s.threadgroup[1] * s.threadgroup[2]).toBeLessThanOrEqual(1024);
          expect(s.threadgroupMemory).toBeLessThanOrEqual(32768);
        }
      } finally {
        fs.rmSync(out, { recursive: true, force: true });
      }
    });
  }

  it('lists forced CPU fallbacks as warnings and plans them as CPU steps', () => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-metal-gen-'));
    try {
      const { warnings } = generateMetalProject(programsOf('mnist_mlp.model'), out, { fallbackOps: ['cross_entropy'] });
      expect(warnings.length).toBe(2); // train_step and eval
      expect(warnings[0]).toMatch(/node \d+ \(cross_entropy[ )].* runs on the CPU/);
      const plan = JSON.parse(fs.readFileSync(path.join(out, 'train_step.plan.json'), 'utf8'));
      expect(plan.steps.filter((s: { kind: string }) => s.kind === 'cpu').map((s: { op: string }) => s.op)).toEqual(['cross_entropy']);
    } finally {
      fs.rmSync(out, { recursive: true, force: true });
    }
  });
});

describe('bridge host tables', () => {
  it('the generated mpsc_metal_plan.inc (with a CPU fallback step) is valid C++', () => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-metal-gen-'));
    try {
      generateMetalProject(programsOf('lenet.model'), out, { fallbackOps: ['maxpool2d_grad'] });
      const inc = fs.readFileSync(path.join(out, 'bridge/mpsc_metal_plan.inc'), 'utf8');
      expect(inc).toMatch(/static int mfb_p0_\d+\(mpsc_ctx\* ctx/);
      execFileSync('g++', ['-std=c++17', '-fsyntax-only', '-x', 'c++', path.join(out, 'bridge/mpsc_metal_plan.inc')], { stdio: ['ignore', 'ignore', 'pipe'] });
      expect(inc).toMatch(/kPrograms, false \};/); // fp32: no bfloat, no GPU check
    } finally {
      fs.rmSync(out, { recursive: true, force: true });
    }
  });
  it('a bf16 program: its libraries are MSL 3.1 and the model asks the bridge to check the GPU', () => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-metal-gen-'));
    try {
      generateMetalProject(programsOf('mnist_mlp.model', 'bf16'), out);
      const inc = fs.readFileSync(path.join(out, 'bridge/mpsc_metal_plan.inc'), 'utf8');
      expect(inc).toMatch(/kPrograms, true \};/);
      expect(fs.readFileSync(path.join(out, 'train_step.metal'), 'utf8')).toMatch(/^\/\/ bfloat buffers: MSL 3.1 or later \(MTLLanguageVersion3_1\)$/m);
      expect(fs.existsSync(path.join(out, 'bridge/mpsc_metal_caps.h'))).toBe(true);
      execFileSync('g++', ['-std=c++17', '-fsyntax-only', '-x', 'c++', path.join(out, 'bridge/mpsc_metal_plan.inc')], { stdio: ['ignore', 'ignore', 'pipe'] });
    } finally {
      fs.rmSync(out, { recursive: true, force: true });
    }
  });
});

describe('golden MSL', () => {
  // mnist_mlp_bf16: a 16-bit program (mixed precision: bfloat buffers, cast kernels, widening loaders)
  for (const [spec, precision] of [['mnist_mlp'], ['lenet'], ['char_gpt'], ['mnist_mlp', 'bf16']] as [string, 'bf16' | undefined][]) {
    const name = precision ? `${spec}_${precision}` : spec;
    it(`${name}: generated .metal and plans match test/golden/metal (UPDATE_GOLDEN=1 to rewrite)`, () => {
      const ps = programsOf(`${spec}.model`, precision);
      const a = buildMetal([ps.train_step, ps.eval], ps.model);
      for (const p of a.programs) {
        for (const [file, text] of [[`${name}.${p.program.name}.metal`, p.library], [`${name}.${p.program.name}.plan.json`, JSON.stringify(p.plan, null, 1) + '\n']]) {
          const f = path.join(GOLDEN, file);
          if (process.env.UPDATE_GOLDEN === '1' || !fs.existsSync(f)) {
            fs.mkdirSync(GOLDEN, { recursive: true });
            fs.writeFileSync(f, text);
          }
          expect(text, `${file} differs from the golden file; if the change is intended, rerun with UPDATE_GOLDEN=1 and review the diff`).toBe(fs.readFileSync(f, 'utf8'));
        }
      }
    });
  }
});

function concatProgram(n: number, name = 'cat'): Program {
  const b = new GraphBuilder();
  const xs = Array.from({ length: n }, (_, i) => b.value(`x${i}`, 'f32', [2, 3], 'input'));
  b.emit('concat', xs, [{ name: 'y', shape: [2, 3 * n] }], { axis: 1 }, name, { file: 'big.model', line: 4, col: 7 });
  return { name: 'train_step', batch: 2, graph: b.graph, inputs: xs, outputs: [] };
}

describe('Metal limits are checked at build time', () => {
  it('variadic ops are split to stay within 31 buffer bindings', () => {
    const a = buildMetal([concatProgram(70)], 'm');
    const steps = a.programs[0].plan.steps;
    expect(steps.length).toBe(3);
    for (const s of steps) expect(s.bindings.length + 1).toBeLessThanOrEqual(31);
  });

  it('more than 31 buffer bindings is a user error naming the layer and the fix', () => {
    const p = concatProgram(29);
    const plan = buildMetal([p], 'm').programs[0].plan; // 29 inputs + output + params = 31: fine
    const s = plan.steps[0];
    if (s.kind !== 'kernel') throw new Error('expected a kernel');
    s.bindings.push({ ...s.bindings[0], index: s.bindings.length });
    let err: unknown;
    try { checkLimits(plan, p); } catch (e) { err = e; }
    expect(err).toBeInstanceOf(UserError);
    expect((err as Error).message).toMatch(/big\.model:4:7: node 0 \(concat in layer 'cat'\): kernel k0 needs 32 buffer bindings .*Metal allows 31/);
    expect((err as Error).message).toMatch(/fix:/);
  });

  it('threadgroup size and threadgroup memory over the limits are errors', () => {
    const p = concatProgram(2);
    const plan = buildMetal([p], 'm').programs[0].plan;
    const s = plan.steps[0];
    if (s.kind !== 'kernel') throw new Error('expected a kernel');
    s.threadgroup = [32, 64, 1];
    s.threadgroupMemory = 40000;
    expect(() => checkLimits(plan, p)).toThrow(/2048 threads per threadgroup; Metal allows 1024[\s\S]*40000 bytes of threadgroup memory; Metal allows 32768/);
  });

  it('fused attention picks its tile from the head width; heads too wide for 32 KiB are a user error', () => {
    const attn = (D: number) => {
      const b = new GraphBuilder();
      const [q, k, v] = ['q', 'k', 'v'].map((n) => b.value(n, 'f32', [1, 2, 17, D], 'input'));
      b.emit('attention', [q, k, v], [{ name: 'o', shape: [1, 2, 17, D] }, { name: 'lse', shape: [1, 2, 17] }], { causal: true, scale: 1 / Math.sqrt(D) }, 'attn', { file: 'wide.model', line: 3, col: 9 });
      const p: Program = { name: 'eval', batch: 1, graph: b.graph, inputs: [q, k, v], outputs: [] };
      return () => buildMetal([p], 'm').programs[0].plan.steps;
    };
    for (const [D, tile] of [[64, 16], [72, 16], [80, 8], [160, 8]]) {
      const s = attn(D)()[0];
      if (s.kind !== 'kernel') throw new Error('expected a kernel');
      expect(s.groups[0], `D = ${D}`).toBe(Math.ceil(17 / tile));
      expect(s.threadgroupMemory).toBeLessThanOrEqual(32768);
      expect(s.mma!.threadgroupMemory).toBeLessThanOrEqual(32768);
    }
    expect(attn(168)).toThrow(UserError);
    expect(attn(168)).toThrow(/wide\.model:3:9: node 0 \(attention in layer 'attn'\): the fused Metal attention supports heads of at most 160 features per head; this one has 168[\s\S]*fix: use more heads/);
  });

  it("an op whose registry entry is 'cpu' is a CPU fallback, or an error with noFallback", () => {
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [4], 'input');
    b.emit('unary', [x], [{ name: 'y', shape: [4] }], { fn: 'relu' }, 'odd');
    const p: Program = { name: 'eval', batch: 1, graph: b.graph, inputs: [x], outputs: [] };
    const registry = { ...GPU_KERNELS, unary: 'cpu' as const };
    expect(buildMetal([p], 'm').warnings).toEqual([]);
    const a = buildMetal([p], 'm', { registry });
    expect(a.warnings[0]).toMatch(/node 0 \(unary in layer 'odd'\) has no Metal kernel/);
    expect(a.programs[0].plan.steps.map((s) => s.kind)).toEqual(['cpu']);
    expect(() => buildMetal([p], 'm', { registry, noFallback: true })).toThrow(UserError);
  });
});

describe('--device metal off macOS', () => {
  it.skipIf(process.platform === 'darwin')('createMetalSession is a user error that suggests metal-emu', async () => {
    const { createMetalSession } = await import('../runtime/metal-bridge/session.js');
    await expect(createMetalSession(programsOf('mnist_mlp.model'))).rejects.toThrow(/needs macOS[\s\S]*--device metal-emu/);
  });
});

describe('spec strings in generated code', () => {
  it('layer paths and value names are escaped in comments, C strings and JSON', () => {
    const b = new GraphBuilder();
    const evil = 'a*/ #include "x" \n b\\ ??= é';
    const x = b.value(evil, 'f32', [4], 'input');
    b.emit('unary', [x], [{ name: `${evil}.out`, shape: [4] }], { fn: 'relu' }, evil);
    const p: Program = { name: 'eval', batch: 1, graph: b.graph, inputs: [x], outputs: [] };
    const a = buildMetal([p], evil);
    const lib = a.programs[0].library;
    expect(lib).not.toContain(evil);
    expect(lib).not.toMatch(/a\*\/ #include/);
    for (const line of lib.split('\n')) if (/^\s*#/.test(line)) expect(line).toBe('#include <metal_stdlib>');
    expect(JSON.parse(JSON.stringify(a.programs[0].plan)).steps[0].bindings[0].name).toBe(evil);
  });
});
