/**
 * The CUDA backend without a GPU: the generated sources of every example spec (kernels from the
 * shared kernel language + host code over the device plan), golden files for two specs
 * (test/golden/cuda; UPDATE_GOLDEN=1 rewrites them: review the diff), every generated model
 * compiled by `nvcc` for sm_90a (test/nvcc_target.ts: the CMake build's compute_90a / sm_90a) with warnings as errors (a deliberately broken kernel must
 * fail: negative control), the host-side planning (one device allocation: regions, kernel
 * argument offsets, the graph's node list and the step-scalar slot), and one full cmake-js build
 * of the CUDA addon whose `create` must say that there is no CUDA device (CI has none).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkFile } from '../compiler/check/index.js';
import { buildPrograms, fuseForBackend } from '../compiler/ir/programs.js';
import { cudaFusions } from '../compiler/codegen-cuda/fusions.js';
import { isPersistent, type Program, type ProgramSet } from '../compiler/ir/graph.js';
import { planMemory } from '../compiler/ir/memory_plan.js';
import { reuseGap } from '../compiler/codegen-cuda/lanes.js';
import { generateCudaModel, HOST_FILE, KERNELS_FILE } from '../compiler/codegen-cuda/index.js';
import { CUDA_ALIGN, planKernels, planProblems, SCALAR_BYTES, type CudaPlan } from '../compiler/codegen-cuda/plan.js';
import { splitK } from '../compiler/codegen-cuda/gemm_cuda.js';
import { buildAddon, loadAddon } from '../runtime/native/build.js';
import { cudaInputsKey, findGpu, findNvcc } from '../runtime/cuda/session.js';
import { NVCC_SM90A } from './nvcc_target.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const GOLDEN = path.join(ROOT, 'test/golden/cuda');
const SPECS = fs.readdirSync(path.join(ROOT, 'specs')).filter((f) => f.endsWith('.model')).sort();
const NV = findNvcc();

function programsOf(spec: string): ProgramSet {
  const model = checkFile(path.join(ROOT, 'specs', spec));
  return buildPrograms(model, { batch: model.train.batch });
}

/** nvcc -c of the host file (which includes the kernels) in dir; returns the compiler's complaint or '' */
function nvccCompile(dir: string, file: string): string {
  fs.copyFileSync(path.join(ROOT, 'runtime/cpp/mpsc_model.h'), path.join(dir, 'mpsc_model.h'));
  try {
    execFileSync(NV!.nvcc, [...NVCC_SM90A, '-fmad=true', '-c', path.join(dir, file), '-o', path.join(dir, 'out.o'), '-Werror', 'all-warnings'], { stdio: 'pipe' });
    return '';
  } catch (e) {
    const err = e as { stderr?: Buffer; message: string };
    return err.stderr?.toString() || err.message;
  }
}

function writeAll(dir: string, files: Record<string, string>): void {
  for (const [f, t] of Object.entries(files)) fs.writeFileSync(path.join(dir, f), t);
}

describe('CUDA sources of every example spec', () => {
  for (const spec of SPECS) {
    it(`${spec}: generated, planned soundly, and compiled by nvcc for sm_90a -Werror`, () => {
      const a = generateCudaModel(programsOf(spec));
      expect(planProblems(a.plan)).toEqual([]);
      expect(Object.keys(a.files).sort()).toEqual([KERNELS_FILE, HOST_FILE].sort());
      const cu = a.files[HOST_FILE];
      // every kernel of the kernels file is launched by the host code
      const kernels = [...a.files[KERNELS_FILE].matchAll(/__global__ void __launch_bounds__\(\d+(?:, \d+)?\) (\w+)\(/g)].map((m) => m[1]);
      expect(kernels.length).toBeGreaterThan(0);
      for (const k of kernels) expect(cu, `kernel ${k} is never launched`).toContain(`${k}<<<`);
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-cuda-gen-'));
      try {
        writeAll(dir, a.files);
        expect(nvccCompile(dir, HOST_FILE)).toBe('');
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    }, 300_000);
  }

  // 16-bit precisions: autocast's types with the casts folded into the kernels (16-bit loads and
  // stores, cuBLASLt with a 16-bit D), the convolutions' casts kept (no remat copies: both steps are planned far below CUDA's 4 GiB)
  for (const [spec, precision] of [['char_gpt.model', 'bf16'], ['lenet.model', 'fp16']] as const) {
    it(`${spec} at ${precision}: generated, planned soundly, and compiled by nvcc for sm_90a -Werror`, () => {
      const m = checkFile(path.join(ROOT, 'specs', spec));
      const a = generateCudaModel(buildPrograms({ ...m, train: { ...m.train, precision } }, { batch: m.train.batch }));
      expect(planProblems(a.plan)).toEqual([]);
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-cuda-gen-'));
      try {
        writeAll(dir, a.files);
        expect(nvccCompile(dir, HOST_FILE)).toBe('');
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    }, 300_000);
  }

  it('a deliberately broken kernel fails the nvcc compile (negative control)', () => {
    const a = generateCudaModel(programsOf('mnist_mlp.model'));
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-cuda-bad-'));
    try {
      // a barrier with its semicolon dropped, and a read of an undeclared buffer
      const broken = a.files[KERNELS_FILE].replace('__syncthreads();', '__syncthreads()').replace(/(\n  const uint i = gid\.x;)/, '$1\n  float zz = nowhere[i];');
      expect(broken).not.toBe(a.files[KERNELS_FILE]);
      writeAll(dir, { ...a.files, [KERNELS_FILE]: broken });
      expect(nvccCompile(dir, HOST_FILE)).toMatch(/error/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});

describe('golden CUDA sources', () => {
  for (const spec of ['mnist_mlp', 'lenet']) {
    it(`${spec}: kernels, host code and plan match test/golden/cuda (UPDATE_GOLDEN=1 to rewrite)`, () => {
      const a = generateCudaModel(programsOf(`${spec}.model`));
      const outs: [string, string][] = [
        [`${spec}.kernels.cuh`, a.files[KERNELS_FILE]], [`${spec}.model_cuda.cu`, a.files[HOST_FILE]],
        [`${spec}.plan.json`, JSON.stringify(a.plan, null, 1) + '\n'],
      ];
      for (const [file, text] of outs) {
        const f = path.join(GOLDEN, file);
        if (process.env.UPDATE_GOLDEN === '1') {
          fs.mkdirSync(GOLDEN, { recursive: true });
          fs.writeFileSync(f, text);
        }
        expect(fs.existsSync(f), `${f} is missing: run with UPDATE_GOLDEN=1`).toBe(true);
        expect(text, `${file} differs from the golden file; if the change is intended, rerun with UPDATE_GOLDEN=1 and review the diff`).toBe(fs.readFileSync(f, 'utf8'));
      }
    });
  }
});

describe('split K (gemm_cuda.ts)', () => {
  it('splits long-K GEMMs on small tile grids into chunks that cover K exactly, and leaves the rest alone', () => {
    // conv weight gradients: LeNet's conv1 (1 tile, K 50 176), the seed CNN's conv2 (18 tiles, K 131 072), grouped
    for (const [M, N, K, G] of [[32, 9, 50176, 1], [128, 576, 131072, 1], [6, 18, 3600, 2], [20, 24, 3000, 1]]) {
      const sp = splitK(M, N, K, G)!;
      expect(sp, `${M}x${N}x${K}`).not.toBeNull();
      expect(sp.Kc % 16).toBe(0);
      expect(sp.Kc).toBeGreaterThanOrEqual(512);
      expect((sp.S - 1) * sp.Kc).toBeLessThan(K);
      expect(sp.S * sp.Kc).toBeGreaterThanOrEqual(K);
      expect(sp.S).toBeLessThanOrEqual(256);
      // one wave of two blocks per SM (132 SMs): no block left over for a second wave
      expect(sp.S * Math.ceil(M / 64) * Math.ceil(N / 64) * G).toBeLessThanOrEqual(264);
    }
    // the seed CNN's conv2 weight gradient on conv_cuda.ts's 128x128 tiles (5 tiles): 52 chunks, 260 blocks (53 gave 265)
    expect(splitK(128, 576, 131072, 1, 128, 128)).toEqual({ S: 52, Kc: 2528 });
    // its first conv's (one 64x32 tile, K 131 072): 256 chunks of 512 (128 at most before: half the slots idle)
    expect(splitK(64, 27, 131072, 1, 64, 32)).toEqual({ S: 256, Kc: 512 });
    expect(splitK(32, 9, 50176, 1)).toEqual({ S: 98, Kc: 512 });
    // a grid that already fills the GPU, and short K, are not split
    expect(splitK(4096, 4096, 1024, 1)).toBeNull();
    expect(splitK(256, 256, 784, 1)).toBeNull();
  });
});

describe('shared kernels (index.ts sharedKernels)', () => {
  it('emits each distinct kernel once: the eval forward reuses the train forward\'s kernels, every alias is to an emitted kernel', () => {
    const a = generateCudaModel(programsOf('mnist_mlp.model'));
    expect(a.alias.size).toBeGreaterThan(0);
    const src = a.files[KERNELS_FILE];
    for (const [from, to] of a.alias) {
      expect(src).not.toMatch(new RegExp(`\\b${from}\\(`));
      expect(src).toMatch(new RegExp(`\\b${to}\\(`));
      expect(a.alias.has(to)).toBe(false);
    }
    // the alias' kernels are the same text but for the name
    const all = new Map(a.lowered.flatMap((l) => l.kernels).map((k) => [k.name, k]));
    for (const [from, to] of a.alias) if (all.has(from)) expect(all.get(from)!.body).toBe(all.get(to)!.body);
  });
});

describe('host-side planning', () => {
  const ps = programsOf('lenet.model');
  const a = generateCudaModel(ps);
  const plan = a.plan;
  // the programs as the CUDA backend runs them: fused with its capability set and planned again
  // (lenet: the relus fold into the conv / linear stores with their relu-grads reading the relus' outputs,
  // and those relu-grads into the max-pool gradients: 38 -> 33 nodes, the train step's arena 26.5 -> 14.5 MB,
  // the CPU's plan; the eval's unary epilogues drop its arena from 12.8 to 8.0 MB)
  // on lanes (lenet's train step takes three) the memory plan keeps each dead buffer reuseGap() nodes (lanes.ts)
  const gap = plan.lanes > 1 ? reuseGap() : 0;
  const replan = (p: Program): Program => (gap > 0 ? { ...p, plan: planMemory(p, gap) } : p);
  const fused = { train_step: replan(fuseForBackend(ps.train_step, cudaFusions())), eval: replan(fuseForBackend(ps.eval, cudaFusions())) };

  it('lays out one allocation: persistent block, arena, split-K scratch, two upload sets per program, aligned and disjoint', () => {
    expect(plan.persistent.offset).toBe(0);
    expect(plan.persistent.bytes).toBe(a.table.bytes);
    expect(plan.arena.offset).toBeGreaterThanOrEqual(plan.persistent.bytes);
    expect(plan.arena.bytes).toBe(Math.max(...[fused.train_step, fused.eval].map((p) => p.plan!.arenaBytes)));
    // lenet's first conv weight gradient (K = 64 * 28 * 28 on one output tile) is split along K
    const split = a.lowered.flatMap((l) => l.kernels).filter((k) => k.scratch);
    expect(split.length).toBeGreaterThan(0);
    // one slice per lane (lanes.ts laneScratch), each as large as the largest kernel's partial sums
    expect(plan.scratchLane).toBe(Math.ceil(Math.max(...split.map((k) => k.scratch!)) / CUDA_ALIGN) * CUDA_ALIGN);
    expect(plan.scratch.bytes).toBe(plan.scratchLane * plan.lanes);
    expect(plan.inputs).toHaveLength(plan.programs.length);
    for (const r of [plan.persistent, plan.arena, plan.scratch, ...plan.inputs]) expect(r.offset % CUDA_ALIGN).toBe(0);
    plan.programs.forEach((p, i) => {
      // the upload part of a staging set (inputs, then the scalars) is one copy; the device keeps two images of it
      expect(p.uploadBytes).toBe(p.scalarsHostOffset + SCALAR_BYTES);
      expect(p.uploadOffset).toBe(plan.inputs[i].offset);
      expect(plan.inputs[i].bytes).toBe(2 * p.setBytes);
      for (const inp of p.inputs) expect(inp.deviceOffset - p.uploadOffset).toBe(inp.hostOffset);
      for (const o of p.outputs) expect(o.hostOffset).toBeGreaterThanOrEqual(p.uploadBytes);
    });
    const last = plan.inputs[plan.inputs.length - 1];
    expect(plan.deviceBytes).toBeGreaterThanOrEqual(last.offset + last.bytes);
    expect(plan.deviceBytes % CUDA_ALIGN).toBe(0);
    expect(planProblems(plan)).toEqual([]);
  });

  it('binds every kernel argument at its value\'s home: persistent by the table, activations by the memory plan', () => {
    const p = fused.train_step;
    const tp = plan.programs.find((q) => q.name === 'train_step')!;
    const table = new Map(a.table.tensors.map((t) => [t.name, t.offset]));
    let checked = 0;
    for (const n of planKernels(tp)) {
      for (const arg of n.args) {
        const v = p.graph.values.find((x) => x.name === arg.value)!;
        if (isPersistent(v)) expect(arg.offset).toBe(plan.persistent.offset + table.get(v.name)!);
        else if (v.kind === 'input') {
          expect(arg.offset).toBe(tp.inputs.find((i) => i.name === v.name)!.deviceOffset);
          expect(arg.perSet).toBe(true);
        }
        else expect(arg.offset).toBe(plan.arena.offset + p.plan!.offsets[v.id]);
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(50);
  });

  it('lists each graph\'s kernels in the program\'s order, split-K pairs adjacent, GEMMs with their tensor-core variant', () => {
    for (const tp of plan.programs) {
      const lp = a.lowered.find((l) => l.program.name === tp.name)!;
      const ks = planKernels(tp);
      // a kernel identical to an earlier one (sharedKernels) is launched under that one's name
      expect(ks.map((n) => n.kernel)).toEqual(lp.kernels.map((k) => a.alias.get(k.name) ?? k.name));
      expect(tp.kernels).toBe(tp.nodes.length);
      expect(tp.outputs.map((o) => o.name)).toEqual((tp.name === 'train_step' ? ps.train_step : ps.eval).outputs.map((o) => o.name));
      ks.forEach((n, i) => {
        // a split-K GEMM writes partial sums; the next kernel (same node) reduces them
        if (n.scratch && n.mma) expect(ks[i + 1]).toMatchObject({ node: n.node, scratch: true });
      });
    }
    // (not a split-K reduction, nor the in-place unary after a cuBLASLt call: lenet's linear + relu, whose relu-grad reads the relu's output)
    const after = new Set(a.lowered.flatMap((l) => l.kernels).filter((k) => k.libraryPart === 'after').map((k) => k.name));
    expect(after.size).toBeGreaterThan(0);
    const gemms = planKernels(plan.programs[0]).filter((n) => /linear|conv2d|matmul/.test(n.op) && !(n.scratch && !n.mma) && !after.has(n.kernel));
    expect(gemms.length).toBeGreaterThan(0);
    for (const g of gemms) expect(g.mma?.kernel).toMatch(/_mma$/);
  });

  it('planProblems catches overlapping regions and arguments outside them', () => {
    const bad: CudaPlan = structuredClone(plan);
    bad.arena.offset = bad.persistent.offset + 64;
    expect(planProblems(bad).join('\n')).toMatch(/persistent overlaps arena|arena is not 256-byte aligned/);
    const bad2: CudaPlan = structuredClone(plan);
    planKernels(bad2.programs[0])[0].args[0].offset = bad2.deviceBytes;
    expect(planProblems(bad2).join('\n')).toMatch(/leaves its region/);
    const bad3: CudaPlan = structuredClone(plan);
    const inArg = planKernels(bad3.programs[0]).flatMap((n) => n.args).find((x) => x.perSet)!;
    inArg.offset += bad3.programs[0].setBytes;
    expect(planProblems(bad3).join('\n')).toMatch(/not in set 0 of the upload region/);
  });
});

describe.skipIf(!NV || findGpu() !== null)('the CUDA addon on a machine without a GPU', () => {
  it('builds with cmake-js (CUDA as a CMake language) and its create() says that no CUDA device was found', async () => {
    const ps = programsOf('mnist_mlp.model');
    const built = await buildAddon({
      files: () => generateCudaModel(ps).files, inputsKey: cudaInputsKey(ps), cxxflags: '-O2',
      cuda: { nvcc: NV!.nvcc, version: NV!.version, architectures: '90a' },
    });
    const addon = loadAddon<{ describe(): { backend: string; programs: { name: string }[] }; create(t: number): unknown }>(built.modulePath);
    expect(addon.describe().backend).toBe('cuda');
    expect(addon.describe().programs.map((p) => p.name)).toEqual(['train_step', 'eval']);
    expect(() => addon.create(1)).toThrowError(/no CUDA device found/);
  }, 600_000);
});
