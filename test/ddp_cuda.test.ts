/**
 * Data-parallel training on CUDA (issue 18), what this machine (no GPU, no NCCL) can check:
 *  - runtime/cuda/mpsc_nccl.cpp passes `g++ -fsyntax-only -Wall -Wextra -Werror` against the NCCL
 *    declaration header test/fixtures/nccl_decl (and a misspelt NCCL name fails it: negative control);
 *  - the generated host code with MPSC_NCCL defined (the branch CMake takes where it finds NCCL)
 *    compiles with nvcc -Werror, and its all-reduce covers exactly the gradient accumulators;
 *  - the CMake project compiles and links the bridge only inside its NCCL guard;
 *  - programs built with splitUpdate end train_step at the accumulators (apply_update updates);
 *  - the GPU count and NCCL checks of `--gpus` are UserErrors.
 * The runs on the GPU are bench/ddp_check.sh.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkFile } from '../compiler/check/index.js';
import { parseSetArg } from '../compiler/check/overrides.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { generateCudaModel, HOST_FILE } from '../compiler/codegen-cuda/index.js';
import { BUCKET_BYTES, gradBuckets } from '../compiler/codegen-cuda/host.js';
import { UserError } from '../compiler/errors.js';
import { writeCmakeProject } from '../runtime/native/build.js';
import { cudaIncludeDirs, findNvcc } from '../runtime/cuda/session.js';
import { pickGpus, visibleGpus } from '../runtime/ddp/launcher.js';
import { NVCC_SM90A } from './nvcc_target.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const NV = findNvcc();
const cudaInclude = cudaIncludeDirs(NV?.nvcc ?? null).find((d) => fs.existsSync(path.join(d, 'cuda_runtime.h')));

describe('runtime/cuda/mpsc_nccl.cpp', () => {
  it.skipIf(!cudaInclude)('passes g++ -fsyntax-only -Wall -Wextra -Werror against the NCCL declaration header', () => {
    const args = ['-std=c++17', '-fsyntax-only', '-Wall', '-Wextra', '-Werror', '-I', path.join(ROOT, 'test/fixtures/nccl_decl'), '-I', cudaInclude!];
    execFileSync('g++', [...args, path.join(ROOT, 'runtime/cuda/mpsc_nccl.cpp')], { stdio: 'pipe' });
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-nccl-syn-'));
    try {
      const src = fs.readFileSync(path.join(ROOT, 'runtime/cuda/mpsc_nccl.cpp'), 'utf8').replace('ncclAvg', 'ncclAverage');
      fs.writeFileSync(path.join(dir, 'bad.cpp'), src);
      fs.copyFileSync(path.join(ROOT, 'runtime/cuda/mpsc_nccl.h'), path.join(dir, 'mpsc_nccl.h'));
      expect(() => execFileSync('g++', [...args, path.join(dir, 'bad.cpp')], { stdio: 'pipe' })).toThrow();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the generated host code with NCCL', () => {
  const model = checkFile(path.join(ROOT, 'specs', 'mnist_mlp.model'));
  const programs = buildPrograms(model, { batch: 32, splitUpdate: true });

  it('splitUpdate: each grad_accumulate comes right after the node producing its gradient (the backward order)', () => {
    const g = programs.train_step.graph;
    const producer = new Map<number, number>();
    g.nodes.forEach((n, i) => n.outputs.forEach((v) => producer.set(v, i)));
    const accs = g.nodes.map((n, i) => ({ n, i })).filter(({ n }) => n.op === 'grad_accumulate');
    expect(accs.length).toBe(model.params.length);
    for (const { n, i } of accs) {
      // only other accumulates between the producer and this one
      const p = producer.get(n.inputs[1])!;
      expect(g.nodes.slice(p + 1, i).every((m) => m.op === 'grad_accumulate')).toBe(true);
    }
    // the last layer's weight gradient is finished (and accumulated) before the first layer's
    const at = (name: string) => accs.find(({ n }) => g.values[n.inputs[0]].name === name)!.i;
    expect(at('fc2.weight.grad')).toBeLessThan(at('fc1.weight.grad'));
  });

  it('splitUpdate: train_step accumulates, apply_update updates and zeroes, even at grad_accum 1', () => {
    expect(model.train.grad_accum).toBe(1);
    expect(programs.apply_update).toBeDefined();
    const ops = (p: typeof programs.train_step) => p.graph.nodes.map((n) => n.op);
    expect(ops(programs.train_step)).toContain('grad_accumulate');
    expect(ops(programs.train_step).some((o) => o.endsWith('_update'))).toBe(false);
    expect(ops(programs.apply_update!).filter((o) => o.endsWith('_update')).length).toBe(model.params.filter((p) => p.kind !== 'state').length);
    expect(ops(programs.apply_update!)).toContain('zero');
    const plain = buildPrograms(model, { batch: 32 });
    expect(plain.apply_update).toBeUndefined();
  });

  it.skipIf(!NV || !cudaInclude)('compiles with MPSC_NCCL under nvcc -Werror; the all-reduce lists every gradient accumulator once', () => {
    const a = generateCudaModel(programs);
    const cu = a.files[HOST_FILE];
    const accs = programs.train_step.graph.values.filter((v) => v.kind === 'gradacc');
    expect(cu).toContain(`const int NGRAD = ${accs.length};`);
    const counts = cu.match(/const int64_t GRAD_COUNT\[NGRAD\] = \{ ([^}]*) \};/)![1].split(', ').map(Number);
    expect(counts.sort((x, y) => x - y)).toEqual(accs.map((v) => v.shape.reduce((p, d) => p * d, 1)).sort((x, y) => x - y));
    expect(cu).toMatch(/backend_collective_id, backend_collective_init, backend_allreduce_grads,/);
    // 0.8 MB of gradients: one bucket (at least 25 MiB each), after the node finishing the last accumulator
    expect(cu).toContain('const int NBUCKET = 1;');
    expect(cu).toContain(`const int BUCKET_FIRST[NBUCKET + 1] = { 0, ${accs.length} };`);
    expect(cu.match(/bucket_allreduce\(ctx, b, st, \d+\)/g)!.length).toBe(1);
    const order = cu.match(/const size_t GRAD_OFFSET\[NGRAD\] = \{ ([^}]*) \};/)![1].split(', ').map(Number);
    expect(new Set(order).size).toBe(accs.length);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-ddp-cu-'));
    try {
      for (const [f, t] of Object.entries(a.files)) fs.writeFileSync(path.join(dir, f), t);
      fs.copyFileSync(path.join(ROOT, 'runtime/cpp/mpsc_model.h'), path.join(dir, 'mpsc_model.h'));
      const args = [...NVCC_SM90A, '-c', path.join(dir, HOST_FILE), '-o', path.join(dir, 'out.o'), '-Werror', 'all-warnings',
        '-I', path.join(ROOT, 'runtime/cuda'), '-I', path.join(ROOT, 'test/fixtures/nccl_decl')];
      execFileSync(NV!.nvcc, [...args, '-DMPSC_NCCL'], { stdio: 'pipe' });
      // without NCCL the hooks say so: the message is in the generated source
      expect(cu).toContain('built without NCCL: CMake found no nccl.h / libnccl');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);

  it.skipIf(!NV || !cudaInclude)('with MPSC_NCCL (every build where CMake finds NCCL) the host code of plain programs and of fp16 (no buckets) compiles too', () => {
    const fp16 = checkFile(path.join(ROOT, 'specs', 'mnist_mlp.model'), [parseSetArg('train.precision="fp16"')]);
    for (const [what, ps] of [['plain', buildPrograms(model, { batch: 32 })], ['fp16 split', buildPrograms(fp16, { batch: 32, splitUpdate: true })]] as const) {
      const a = generateCudaModel(ps);
      const cu = a.files[HOST_FILE];
      // fp16: the gradient norm reads every accumulator at the end of train_step: no buckets, the all-reduce after the step
      if (what === 'fp16 split') expect(cu).toContain('const int NBUCKET = 0;');
      if (what === 'plain') expect(cu).not.toContain('const int NGRAD');
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-ddp-cu-'));
      try {
        for (const [f, t] of Object.entries(a.files)) fs.writeFileSync(path.join(dir, f), t);
        fs.copyFileSync(path.join(ROOT, 'runtime/cpp/mpsc_model.h'), path.join(dir, 'mpsc_model.h'));
        execFileSync(NV!.nvcc, [...NVCC_SM90A, '-c', path.join(dir, HOST_FILE), '-o', path.join(dir, 'out.o'), '-Werror', 'all-warnings',
          '-I', path.join(ROOT, 'runtime/cuda'), '-I', path.join(ROOT, 'test/fixtures/nccl_decl'), '-DMPSC_NCCL'], { stdio: 'pipe' });
      } catch (e) {
        throw new Error(`${what}: ${(e as { stderr?: Buffer }).stderr?.toString() ?? e}`);
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    }
  }, 300_000);

  it('buckets of a 41 MB GPT: >= 25 MiB each but the last, in the backward order, each after the node finishing it', () => {
    const gpt = checkFile(path.join(ROOT, 'bench', 'gpt_char_b64_t256.model'));
    const a = generateCudaModel(buildPrograms(gpt, { batch: 4, splitUpdate: true }));
    const bk = gradBuckets(a.plan, a.table);
    const sizes = bk.nodes.map((_, j) => bk.grads.slice(bk.first[j], bk.first[j + 1]).reduce((s, g) => s + g.count * 4, 0));
    expect(sizes.length).toBe(2);
    expect(sizes[0]).toBeGreaterThanOrEqual(BUCKET_BYTES);
    expect(sizes.reduce((x, y) => x + y, 0)).toBe(gpt.params.reduce((s, p) => s + p.shape.reduce((x, y) => x * y, 1) * 4, 0));
    // the head and the last block's gradients come first, the embeddings' last
    const names = bk.grads.map((g) => g.name);
    expect(names.indexOf('head.weight.grad')).toBeLessThan(names.indexOf('blocks.5.fc.weight.grad'));
    expect(names.indexOf('blocks.5.fc.weight.grad')).toBeLessThan(names.indexOf('blocks.0.fc.weight.grad'));
    expect(names.slice(-2).sort()).toEqual(['pos.weight.grad', 'tok.weight.grad']);
    // bucket 0 ends before bucket 1: the overlap has backward work to hide behind
    expect(bk.nodes[0]).toBeLessThan(bk.nodes[1]);
  }, 120_000);

  it('the CMake project builds the bridge only inside its NCCL guard', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-ddp-cmake-'));
    try {
      writeCmakeProject(dir, { 'model_cuda.cu': '' }, '-O2', 't', { nvcc: 'nvcc', version: 'x', architectures: '90a' });
      const cm = fs.readFileSync(path.join(dir, 'CMakeLists.txt'), 'utf8');
      const guard = /if\(MPSC_NCCL_INCLUDE AND MPSC_NCCL_LIBRARY\)\n([\s\S]*?)endif\(\)/g;
      const guarded = [...cm.matchAll(guard)].map((m) => m[1]).join('\n');
      expect(guarded).toMatch(/target_sources\(t PRIVATE "src\/mpsc_nccl.cpp"\)/);
      expect(guarded).toMatch(/MPSC_NCCL\)/);
      expect(cm).toMatch(/find_path\(MPSC_NCCL_INCLUDE nccl.h/);
      expect(cm).toMatch(/find_library\(MPSC_NCCL_LIBRARY nccl/);
      const unguarded = cm.replace(guard, '').replace(/find_(path|library)\(MPSC_NCCL_\w+ [^\n]*\n/g, '').replace(/message\(STATUS "mpsc: [^\n]*\n/g, '');
      expect(unguarded).not.toMatch(/mpsc_nccl.cpp|MPSC_NCCL/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('--gpus checks', () => {
  it('more GPUs than visible, none visible, a bad count: UserErrors that say how to fix them', () => {
    expect(pickGpus('2', ['0', '1', '2'])).toEqual(['0', '1']);
    expect(pickGpus('all', ['3', '5'])).toEqual(['3', '5']);
    expect(() => pickGpus('4', ['0', '1'])).toThrow(UserError);
    expect(() => pickGpus('4', ['0', '1'])).toThrow(/only 2 GPUs are visible \(0, 1\)[\s\S]*--gpus 2/);
    expect(() => pickGpus('1', [])).toThrow(/shows no CUDA GPU/);
    expect(() => pickGpus('0', ['0'])).toThrow(/positive integer or 'all'/);
    expect(() => pickGpus('two', ['0'])).toThrow(/positive integer or 'all'/);
  });

  it('CUDA_VISIBLE_DEVICES is read as the CUDA runtime reads it', () => {
    const four = () => 4;
    expect(visibleGpus({}, four)).toEqual(['0', '1', '2', '3']);
    expect(visibleGpus({ CUDA_VISIBLE_DEVICES: '2,3' }, four)).toEqual(['2', '3']);
    expect(visibleGpus({ CUDA_VISIBLE_DEVICES: '1,-1,2' }, four)).toEqual(['1']); // up to the first invalid entry
    expect(visibleGpus({ CUDA_VISIBLE_DEVICES: '' }, four)).toEqual([]);
    expect(visibleGpus({ CUDA_VISIBLE_DEVICES: 'GPU-8f2a1c3e-0000-1111-2222-333344445555' }, four)).toEqual(['GPU-8f2a1c3e-0000-1111-2222-333344445555']);
    // no driver: nothing is visible whatever the variable says
    expect(visibleGpus({ CUDA_VISIBLE_DEVICES: '0,1' }, () => 0)).toEqual([]);
    expect(visibleGpus({}, () => 0)).toEqual([]);
  });
});
