// The cuBLASLt GEMM path of the CUDA backend, on a machine without cuBLAS (no GPU needed):
//  - the rule (compiler/codegen-cuda/cublaslt.ts): which GEMM nodes become cuBLASLt calls, and why not;
//  - the call descriptions are right: a column-major BLAS interpreter runs each LibraryGemm on the
//    row-major operands and must give the node's own product (linear + bias, every matmul transpose,
//    strided batches, shared operands), so a wrong transpose / leading dimension / stride fails here;
//  - runtime/cuda/mpsc_cublaslt.cpp passes `g++ -fsyntax-only` against test/fixtures/cublaslt_decl
//    (declarations of exactly the cuBLASLt subset it calls; the GPU machine uses NVIDIA's header);
//  - the generated host code compiles with nvcc both with and without -DMPSC_CUBLASLT, and the CMake
//    project adds the cuBLASLt source, define and library only under `if(TARGET CUDA::cublasLt)`.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { DType, Node } from '../compiler/ir/graph.js';
import { lowerGemmCudaLt } from '../compiler/codegen-cuda/cublaslt.js';
import { generateCudaModel, HOST_FILE, KERNELS_FILE } from '../compiler/codegen-cuda/index.js';
import { precisionOverride } from '../compiler/check/overrides.js';
import { planKernels, planProblems } from '../compiler/codegen-cuda/plan.js';
import { checkFile } from '../compiler/check/index.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { runtimeSources, writeCmakeProject } from '../runtime/native/build.js';
import { cudaIncludeDirs, findNvcc } from '../runtime/cuda/session.js';
import { blas, blasBgradB, ctxOf, data, graphOf, maxDiff, rowMajor } from './cuda_gemm_helpers.js';
import { NVCC_HOST_VARIANT, NVCC_SM90A } from './nvcc_target.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const NV = findNvcc();

function libraryOf(op: string, shapes: number[][], attrs: Node['attrs'] = {}, dtype: DType = 'f32') {
  const { g, n } = graphOf(op, shapes, attrs, dtype);
  const r = lowerGemmCudaLt(ctxOf(), g, n, undefined, true)!;
  return { r, lib: r.kernels[0].library, g, n };
}

describe('the cuBLASLt rule (cublaslt.ts)', () => {
  it('linear and matmul become cuBLASLt calls with their generated kernels as the fallback; convolutions stay generated', () => {
    const lin = libraryOf('linear', [[6, 5], [7, 5], [7], [6, 7]]);
    expect(lin.r.choice.path).toBe('cublaslt');
    expect(lin.lib).toMatchObject({ m: 7, n: 6, k: 5, transA: true, transB: false, epilogue: 'bias', argA: 1, argB: 0, argBias: 2, argD: 3, abType: 'f32' });
    expect(lin.r.kernels.every((k) => k.libraryPart === 'fallback')).toBe(true);
    const conv = graphOf('conv2d', [[2, 3, 8, 8], [4, 3, 3, 3], [2, 4, 6, 6]], { stride: [1, 1], padding: [0, 0], dilation: [1, 1], groups: 1 });
    const c = lowerGemmCudaLt(ctxOf(), conv.g, conv.n, undefined, true)!;
    expect(c.choice.path).toBe('generated');
    expect(c.choice.why).toMatch(/convolution/);
    expect(c.kernels.some((k) => k.library || k.libraryPart)).toBe(false);
  });

  it('leaves partially broadcast batches and MPSC_CUDA_CUBLASLT=0 to the generated kernel', () => {
    // a [2,1,4,3] x b [1,3,3,5]: each operand broadcast along a different batch dim
    const part = libraryOf('matmul', [[2, 1, 4, 3], [1, 3, 3, 5], [2, 3, 4, 5]]);
    expect(part.r.choice.path).toBe('generated');
    expect(part.r.choice.why).toMatch(/partially broadcast/);
    const { g, n } = graphOf('matmul', [[4, 3], [3, 5], [4, 5]]);
    const off = lowerGemmCudaLt(ctxOf(), g, n, undefined, false)!;
    expect(off.choice.path).toBe('generated');
    expect(off.kernels[0].library).toBeUndefined();
  });

  it('a fused unary runs in place after the call (cuBLASLt has no exact gelu / NaN-passing relu), only on the cuBLASLt path', () => {
    const { g, n } = graphOf('linear', [[6, 5], [7, 5], [7], [6, 7]]);
    const epi: Node = { id: 0, op: 'unary', inputs: n.outputs, outputs: n.outputs, attrs: { fn: 'gelu' } };
    const r = lowerGemmCudaLt(ctxOf(), g, n, epi, true)!;
    const after = r.kernels.filter((k) => k.libraryPart === 'after');
    expect(after).toHaveLength(1);
    expect(after[0].args).toEqual([{ name: 'y', value: 3, access: 'rw', type: 'float' }]);
    expect(after[0].body).toMatch(/erf/);
    expect(r.kernels[0].library!.epilogue).toBe('bias');
  });

  it('16-bit operands (both the same type) keep fp32 accumulation and output; mixed types stay generated', () => {
    const bf = libraryOf('matmul', [[4, 3], [3, 5], [4, 5]], {}, 'bf16');
    expect(bf.lib!.abType).toBe('bf16');
    expect(bf.r.choice.shape).toMatch(/bf16/);
    const { g, n } = graphOf('matmul', [[4, 3], [3, 5], [4, 5]], {}, 'f16');
    g.values[1].dtype = 'f32';
    expect(lowerGemmCudaLt(ctxOf(), g, n, undefined, true)!.choice.path).toBe('generated');
  });
});

describe('the small fp32 rule (cublaslt.ts, gemm_cuda.ts smallGemm)', () => {
  it('small fp32 products stay cuBLASLt calls by default (their fallback the small-tile kernel); smallGen (MPSC_CUDA_SMALL_GEN=1) runs them generated; large and 16-bit ones are calls either way', () => {
    // gpt_tiny's attention out-projection (2048 x 128 x 128: 64 tiles of 64 x 64) and its weight gradient (128 x 128 x 2048)
    const small = graphOf('linear', [[2048, 128], [128, 128], [128], [2048, 128]]);
    const d = lowerGemmCudaLt(ctxOf(), small.g, small.n, undefined, true)!;
    expect(d.choice.path).toBe('cublaslt');
    expect(d.kernels[0].label).toMatch(/small 32x64 tiles/);
    const r = lowerGemmCudaLt(ctxOf(), small.g, small.n, undefined, true, 'rule', '1')!;
    expect(r.choice.path).toBe('generated');
    expect(r.choice.why).toMatch(/small fp32 product .*MPSC_CUDA_SMALL_GEN=1/);
    expect(r.kernels.every((k) => k.libraryPart === undefined && k.library === undefined)).toBe(true);
    const dw = graphOf('matmul', [[2048, 128], [2048, 128], [128, 128]], { transA: true, transB: false });
    const rw = lowerGemmCudaLt(ctxOf(), dw.g, dw.n, undefined, true, 'rule', '1')!;
    expect(rw.choice.path).toBe('generated');
    // split along K (16 chunks of 128 over 8 tiles of 32 x 64), then the fixed-order sum
    expect(rw.kernels.map((k) => k.label.match(/split K: [^\]]*/)?.[0])).toEqual(['split K: 16 chunks of 128, partial sums', 'split K: sum of 16 partials']);
    // 264 tiles of 64 x 64 (two blocks per SM), or more than 2^28 multiply-adds: not small
    const large = graphOf('linear', [[2048, 128], [528, 128], [528], [2048, 528]]);
    expect(lowerGemmCudaLt(ctxOf(), large.g, large.n, undefined, true, 'rule', '1')!.choice.path).toBe('cublaslt');
    const long = graphOf('matmul', [[16384, 384], [16384, 384], [384, 384]], { transA: true, transB: false });
    expect(lowerGemmCudaLt(ctxOf(), long.g, long.n, undefined, true, 'rule', '1')!.choice.path).toBe('cublaslt');
    const half = graphOf('linear', [[2048, 128], [128, 128], [128], [2048, 128]], {}, 'bf16');
    expect(lowerGemmCudaLt(ctxOf(), half.g, half.n, undefined, true, 'rule', '1')!.choice.path).toBe('cublaslt');
  });
});

/** dw [M, N] = a^T b with a [K, M], b [K, N] (a weight gradient), and a's column sums [M] (fuse.ts rule 8: `a_sums`) */
function weightGradWithSums(K: number, M: number, N: number, dtype: DType) {
  const { g, n } = graphOf('matmul', [[K, M], [K, N], [M, N]], { transA: true, transB: false, a_sums: true }, dtype);
  g.values.push({ id: 3, name: 'db', dtype: 'f32', shape: [M], kind: 'activation' });
  n.outputs.push(3);
  return { g, n };
}

describe('a weight gradient with its bias gradient (a_sums: fuse.ts rule 8)', () => {
  for (const dtype of ['bf16', 'f32'] as const) {
    it(`${dtype}: one call with the BGRADB epilogue into the sums; the sum kernels are the fallback's and run after a call without the epilogue`, () => {
      const { g, n } = weightGradWithSums(37, 5, 3, dtype);
      const r = lowerGemmCudaLt(ctxOf(), g, n, undefined, true, 'off')!;
      const lib = r.kernels[0].library!;
      expect(r.choice.path).toBe('cublaslt');
      expect(lib).toMatchObject({ m: 3, n: 5, k: 37, transA: false, transB: true, epilogue: 'bgradb', dType: 'f32', abType: dtype });
      expect(lib.what).toMatch(/BGRADB/);
      const sums = r.kernels.filter((k) => k.libraryPart === 'unfused');
      expect(sums.length).toBeGreaterThan(0);
      expect(sums.every((k) => k.op === 'sum_to' && k.node === n.id)).toBe(true);
      // the bias vector is the sums' output, bound in the kernel that writes it
      const bk = r.kernels[lib.biasKernel!];
      expect(bk.libraryPart).toBe('unfused');
      expect(bk.args[lib.argBias!]).toMatchObject({ value: 3, type: 'float' });
      expect(bk.args[lib.argBias!].access).not.toBe('r');
      // cuBLASLt's B is our a: BGRADB's sums over k are a's column sums
      const a = data(37 * 5, 4), b = data(37 * 3, 5);
      const want = Array.from({ length: 5 }, (_, m) => Array.from({ length: 37 }, (_, k) => a[k * 5 + m]).reduce((x, y) => x + y, 0));
      expect(maxDiff(blasBgradB(lib, a), Float64Array.from(want))).toBeLessThan(1e-12);
      expect(maxDiff(blas(lib, b, a, null), rowMajor([37, 5], [37, 3], true, false, a, b))).toBeLessThan(1e-12);
      // cuBLASLt off: the generated GEMM and the same sum kernels, no library parts
      const off = lowerGemmCudaLt(ctxOf(), g, n, undefined, false)!;
      expect(off.kernels.some((k) => k.library || k.libraryPart)).toBe(false);
      expect(off.kernels.filter((k) => k.op === 'sum_to').map((k) => k.body)).toEqual(sums.map((k) => k.body));
    });
  }

  it('fp32 over 3xTF32 split operands (not a): no epilogue, the sums run after the call (and its chunk sum) and in the fallback', () => {
    const { g, n } = weightGradWithSums(4096, 64, 64, 'f32');
    const r = lowerGemmCudaLt(ctxOf(), g, n, undefined, true, 'all')!;
    expect(r.choice.tf32x3).toBe(true);
    expect(r.kernels[0].library!.epilogue).toBe('default');
    expect(r.kernels[0].library!.biasKernel).toBeUndefined();
    const sums = r.kernels.filter((k) => k.op === 'sum_to');
    expect(sums.length).toBeGreaterThan(0);
    expect(sums.every((k) => k.libraryPart === 'unfused')).toBe(true);
    // a model: such a call's sums are launched after it unconditionally, a BGRADB call's only without the epilogue
    const mlp = checkFile(path.join(ROOT, 'specs/mnist_mlp.model'));
    const m = generateCudaModel(buildPrograms(mlp, { batch: mlp.train.batch }), { tf32x3: 'all' });
    const calls = m.plan.programs.flatMap((p) => p.nodes).filter((c) => c.kind === 'cublaslt' && c.unfused.length > 0);
    expect(calls.some((c) => c.kind === 'cublaslt' && c.gemm.epilogue === 'default')).toBe(true);
    for (const c of calls) if (c.kind === 'cublaslt') {
      const guarded = m.files[HOST_FILE].includes(`if (!b->lt_epi[${c.index}])`);
      expect(guarded, `call ${c.index} (${c.gemm.epilogue})`).toBe(c.gemm.epilogue === 'bgradb');
      expect(c.fallback.slice(-c.unfused.length)).toEqual(c.unfused);
    }
  });
});

describe('cuBLASLt call descriptions compute the node\'s product (column-major interpreter)', () => {
  it('linear with bias: D = W^T-as-A times x-as-B plus the bias per output feature', () => {
    const { lib } = libraryOf('linear', [[2, 3, 5], [7, 5], [7], [2, 3, 7]]);
    const x = data(30, 1), w = data(35, 2), b = data(7, 3);
    const d = blas(lib!, w, x, b);
    const want = rowMajor([6, 5], [7, 5], false, true, x, w).map((v, i) => v + b[i % 7]);
    expect(maxDiff(d, want)).toBeLessThan(1e-12);
  });

  for (const [ta, tb] of [[false, false], [true, false], [false, true], [true, true]] as const) {
    it(`matmul transA=${ta} transB=${tb}: plain, strided batch, shared b (folded into rows), shared a (stride 0)`, () => {
      const M = 5, N = 3, K = 4;
      const A = (batch: number[]) => [...batch, ...(ta ? [K, M] : [M, K])];
      const B = (batch: number[]) => [...batch, ...(tb ? [N, K] : [K, N])];
      const cases: [number[], number[], number[]][] = [[[], [], []], [[2, 3], [2, 3], [2, 3]], [[6], [], [6]], [[], [6], [6]]];
      for (const [ba, bb, out] of cases) {
        const as = A(ba), bs = B(bb);
        const { lib } = libraryOf('matmul', [as, bs, [...out, M, N]], { transA: ta, transB: tb });
        expect(lib, `${as} x ${bs}`).toBeDefined();
        const a = data(as.reduce((x, y) => x * y, 1), 7), b = data(bs.reduce((x, y) => x * y, 1), 8);
        const d = blas(lib!, b, a, null);
        expect(maxDiff(d, rowMajor(as, bs, ta, tb, a, b)), `${as} x ${bs}: ${JSON.stringify(lib)}`).toBeLessThan(1e-12);
        if (bb.length === 0 && ba.length > 0 && !ta) expect(lib!.batch).toBe(1); // folded
      }
    });
  }
});

describe('the CUDA model with cuBLASLt calls', () => {
  const model = checkFile(path.join(ROOT, 'specs/char_gpt.model'));
  const a = generateCudaModel(buildPrograms(model, { batch: 4 }));
  const bf16 = generateCudaModel(buildPrograms(checkFile(path.join(ROOT, 'specs/char_gpt.model'), [precisionOverride('bf16')]), { batch: 4 }));

  it('bf16: the calls take bf16 A and B and write bf16 D (autocast), fp32 D for the weight gradients; casts round to / widen from 2 bytes', () => {
    expect(planProblems(bf16.plan)).toEqual([]);
    const calls = bf16.plan.programs.flatMap((p) => p.nodes.filter((n) => n.kind === 'cublaslt'));
    expect(calls.length).toBeGreaterThan(10);
    for (const c of calls) if (c.kind === 'cublaslt') expect(c.gemm.abType).toBe('bf16');
    const dTypes = new Set(calls.map((c) => (c.kind === 'cublaslt' ? c.gemm.dType : '')));
    expect([...dTypes].sort()).toEqual(['bf16', 'f32']);
    for (const c of calls) if (c.kind === 'cublaslt') expect(c.d.bytes).toBe(c.gemm.m * c.gemm.n * c.gemm.batch * (c.gemm.dType === 'bf16' ? 2 : 4));
    expect(bf16.files[HOST_FILE]).toMatch(/MPSC_LT_BF16/);
    // the bias gradients of fc and in_proj (rule 8): BGRADB calls writing f32 sums, with their sum kernels for a call without it
    const bgrad = calls.filter((c) => c.kind === 'cublaslt' && c.gemm.epilogue === 'bgradb');
    expect(bgrad.length).toBeGreaterThan(0);
    for (const c of bgrad) if (c.kind === 'cublaslt') {
      expect(c.bias?.bytes).toBe(c.gemm.n * 4);
      expect(c.unfused.length).toBeGreaterThan(0);
      expect(c.unfused.every((k) => c.fallback.includes(k))).toBe(true);
    }
    expect(bf16.files[HOST_FILE]).toMatch(/MPSC_LT_EPI_BGRADB/);
    expect(bf16.files[HOST_FILE]).toMatch(/if \(!b->lt_epi\[\d+\]\)/);
    expect(bf16.files[KERNELS_FILE]).toMatch(/__float2bfloat16_rn/);
    // a 16-bit value takes 2 bytes per element: the cast kernels' outputs, and the calls' A / B
    const casts = bf16.plan.programs.flatMap(planKernels).filter((k) => k.op === 'cast');
    expect(casts.length).toBeGreaterThan(0);
    for (const k of casts) expect(k.args[1].bytes).toBe(k.args[1].type === 'float' ? k.args[0].bytes * 2 : k.args[0].bytes / 2);
    for (const c of calls) if (c.kind === 'cublaslt') expect(c.a.bytes).toBe(c.gemm.rowsA * c.gemm.colsA * 2 * (c.gemm.strideA ? c.gemm.batch : 1));
  });

  it('plans one workspace, one graph node per call with its fallback kernels, and sound offsets', () => {
    expect(planProblems(a.plan)).toEqual([]);
    const calls = a.plan.programs.flatMap((p) => p.nodes.filter((n) => n.kind === 'cublaslt'));
    expect(calls.length).toBeGreaterThan(10);
    expect(calls.map((c) => (c.kind === 'cublaslt' ? c.index : -1))).toEqual(calls.map((_, i) => i));
    expect(a.plan.ltWorkspace.bytes).toBeGreaterThan(0);
    for (const c of calls) if (c.kind === 'cublaslt') expect(c.fallback.length).toBeGreaterThan(0);
    // every generated kernel is still launched somewhere (the fallbacks included)
    for (const p of a.plan.programs) expect(planKernels(p).length).toBeGreaterThanOrEqual(p.nodes.length);
    const choices = a.gemms.flatMap((p) => p.choices);
    expect(choices.filter((c) => c.path === 'cublaslt').length).toBe(calls.length);
  });

  it.skipIf(!NV)('compiles with nvcc with and without -DMPSC_CUBLASLT (the cuBLASLt interface header only), fp32 and bf16', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-lt-'));
    try {
      for (const files of [a.files, bf16.files]) {
        for (const [f, t] of Object.entries({ ...runtimeSources(true), ...files })) fs.writeFileSync(path.join(dir, f), t);
        // with the cuBLASLt interface the kernels optimised as the build compiles them; without it (host code only differs) unoptimised
        for (const def of [['-DMPSC_CUBLASLT'], []])
          execFileSync(NV!.nvcc, [...(def.length ? NVCC_SM90A : NVCC_HOST_VARIANT), '-c', path.join(dir, HOST_FILE), '-o', path.join(dir, 'o.o'), '-Werror', 'all-warnings', ...def], { stdio: 'pipe' });
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 600_000);

  it('the CMake project adds the cuBLASLt source, define and library only where CMake finds CUDA::cublasLt', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-lt-cmake-'));
    try {
      writeCmakeProject(dir, a.files, '-O2', 't', { nvcc: 'nvcc', version: 'x', architectures: '90a' });
      const cm = fs.readFileSync(path.join(dir, 'CMakeLists.txt'), 'utf8');
      const guarded = [...cm.matchAll(/if\(TARGET CUDA::cublasLt\)\n([\s\S]*?)endif\(\)/g)].map((m) => m[1]).join('\n');
      expect(guarded).toMatch(/target_sources\(t PRIVATE "src\/mpsc_cublaslt.cpp"\)/);
      expect(guarded).toMatch(/MPSC_CUBLASLT/);
      expect(guarded).toMatch(/CUDA::cublasLt/);
      const unguarded = cm.replace(/if\(TARGET CUDA::cublasLt\)\n[\s\S]*?endif\(\)/g, '');
      expect(unguarded).not.toMatch(/mpsc_cublaslt.cpp|MPSC_CUBLASLT|CUDA::cublasLt/);
      expect(fs.existsSync(path.join(dir, 'src/mpsc_cublaslt.cpp'))).toBe(true);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('runtime/cuda/mpsc_cublaslt.cpp', () => {
  const cudaInclude = cudaIncludeDirs(NV?.nvcc ?? null).find((d) => fs.existsSync(path.join(d, 'library_types.h')));
  it.skipIf(!cudaInclude)('passes g++ -fsyntax-only -Wall -Werror against the declaration header', () => {
    const args = ['-std=c++17', '-fsyntax-only', '-Wall', '-Wextra', '-Werror', '-I', path.join(ROOT, 'test/fixtures/cublaslt_decl'), '-I', cudaInclude!];
    execFileSync('g++', [...args, path.join(ROOT, 'runtime/cuda/mpsc_cublaslt.cpp')], { stdio: 'pipe' });
    // negative control: a misspelt attribute fails the same check
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-lt-syn-'));
    try {
      const src = fs.readFileSync(path.join(ROOT, 'runtime/cuda/mpsc_cublaslt.cpp'), 'utf8').replace('CUBLASLT_MATMUL_DESC_TRANSA', 'CUBLASLT_MATMUL_DESC_TRANSPOSE_A');
      fs.writeFileSync(path.join(dir, 'bad.cpp'), src);
      fs.copyFileSync(path.join(ROOT, 'runtime/cuda/mpsc_cublaslt.h'), path.join(dir, 'mpsc_cublaslt.h'));
      expect(() => execFileSync('g++', [...args, path.join(dir, 'bad.cpp')], { stdio: 'pipe' })).toThrow();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
