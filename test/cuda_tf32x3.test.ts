// The 3xTF32 cuBLASLt calls of the CUDA backend (compiler/codegen-cuda/tf32x3.ts), on a machine without a GPU:
//  - the split: hi and lo are exact TF32 values (low 13 bits zero) and x - hi - lo is below 2^-22 |x| (2^-137 for
//    subnormals, whose lo keeps only absolute precision);
//    the kernel file's split helper, compiled by nvcc for the host, gives the same bits as the emulation
//    (tf32Split) for random bit patterns, subnormals, values near FLT_MAX, inf and NaN;
//  - the layout: the generated split kernels (their bodies, compiled by nvcc for the host and run on the
//    CPU) write the operands, both K-major (K-outer ones transposed), that the rewritten call description
//    (k tripled) multiplies, in float64 by
//    the column-major interpreter, into the node's product (linear + bias, every matmul transpose, strided
//    and shared batches, the folded batch) at odd sizes;
//  - the accuracy: the split arithmetic with IEEE fp32 accumulation (tensor-core products of TF32 values
//    are exact) against the float64 reference at the workloads' GEMM shapes (sampled outputs, full K) and
//    at odd sizes: about twice a plain fp32 GEMM's error, far inside the kernel check's 1e-4, where plain
//    TF32 is not. This is the split's own error: the H200's tensor cores do not accumulate in IEEE
//    round-to-nearest, and bench/tf32x3_gemm.sh measured 3e-6 ... 5e-5 there (bench/NOTES.md, "3xTF32");
//  - the rule: large fp32 GEMMs take it, small ones and 16-bit ones do not, MPSC_CUDA_TF32X3=0 / all;
//    the model's plan puts the split operands in the scratch region, the host runs the splits before
//    the call, and the generated sources compile with nvcc.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { DType, Node } from '../compiler/ir/graph.js';
import { lowerGemmCudaLt } from '../compiler/codegen-cuda/cublaslt.js';
import { generateCudaModel, HOST_FILE, KERNELS_FILE } from '../compiler/codegen-cuda/index.js';
import { planProblems } from '../compiler/codegen-cuda/plan.js';
import { withEnv } from './env_helpers.js';
import { chunksOf, tf32Split, tf32SplitHelper, tf32x3Rule, type Tf32x3Mode } from '../compiler/codegen-cuda/tf32x3.js';
import type { KernelSpec } from '../compiler/kernels/kernel_types.js';
import { checkFile } from '../compiler/check/index.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { findNvcc } from '../runtime/cuda/session.js';
import { runtimeSources } from '../runtime/native/build.js';
import { blas, ctxOf, data, graphOf, rowMajor } from './cuda_gemm_helpers.js';
import { NVCC_SM90A } from './nvcc_target.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const NV = findNvcc();

const lower = (op: string, shapes: number[][], attrs: Node['attrs'] = {}, mode: Tf32x3Mode = 'all', dtype: DType = 'f32') => {
  const { g, n } = graphOf(op, shapes, attrs, dtype);
  return lowerGemmCudaLt(ctxOf(), g, n, undefined, true, mode)!;
};

const f32 = new Float32Array(1), u32 = new Uint32Array(f32.buffer);
const bits = (x: number) => ((f32[0] = x), u32[0]);
const fromBits = (u: number) => ((u32[0] = u >>> 0), f32[0]);

/** deterministic 32-bit patterns */
function patterns(count: number, seed: number): Uint32Array {
  const out = new Uint32Array(count);
  let s = seed >>> 0;
  for (let i = 0; i < count; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s;
  }
  return out;
}

describe('the 3xTF32 split (tf32Split, the kernel helper)', () => {
  it('hi and lo are exact TF32 values, and x - hi - lo is below 2^-22 |x| for finite x (2^-137 among subnormals)', () => {
    const xs = [...patterns(20000, 5)].map(fromBits).filter((x) => Number.isFinite(x));
    xs.push(1, -1, 1 + 2 ** -11, 1 + 2 ** -12, 3.4028234663852886e38, -3.4028234663852886e38, 1.4e-45, 1.1754943508222875e-38, 0, -0);
    for (const x of xs) {
      const [hi, lo] = tf32Split(x);
      expect((bits(hi) & 0x1fff) | (bits(lo) & 0x1fff), `${x}`).toBe(0);
      expect(Number.isFinite(hi), `${x}`).toBe(true);
      // float64: exact for these (hi, lo are fp32 values)
      expect(Math.abs(x - hi - lo), `${x}`).toBeLessThanOrEqual(Math.max(2 ** -22 * Math.abs(x), 2 ** -137));
    }
    expect(tf32Split(Infinity)).toEqual([Infinity, 0]);
    expect(tf32Split(-Infinity)).toEqual([-Infinity, 0]);
    const [nh, nl] = tf32Split(NaN);
    expect(Number.isNaN(nh) && bits(nh) === 0x7fffe000 && nl === 0).toBe(true);
  });

  it('rounds hi to nearest (ties away from zero): lo is at most half a TF32 ulp of hi', () => {
    for (const x of [...patterns(5000, 9)].map(fromBits).filter((v) => Number.isFinite(v) && Math.abs(v) > 1e-30 && Math.abs(v) < 1e30)) {
      const [hi] = tf32Split(x);
      const ulp = 2 ** (Math.floor(Math.log2(Math.abs(hi))) - 10);
      expect(Math.abs(x - hi), `${x}`).toBeLessThanOrEqual(ulp / 2);
    }
  });

  it.skipIf(!NV)('the kernel file\'s helper, compiled by nvcc for the host, gives the emulation\'s bits', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-tf32split-'));
    const src = `#include <cuda_runtime.h>\n#include <cstdio>\n#include <cstring>\ntypedef unsigned int uint;\n${tf32SplitHelper()}\n` +
      `int main(int argc, char** argv) {\n  FILE* f = std::fopen(argv[1], "rb");\n  FILE* o = std::fopen(argv[2], "wb");\n  uint u;\n` +
      `  while (std::fread(&u, 4, 1, f) == 1) {\n    float hi, lo;\n    mpsc_tf32_split(mpsc_u2f(u), hi, lo);\n    const uint r[2] = {mpsc_f2u(hi), mpsc_f2u(lo)};\n    std::fwrite(r, 4, 2, o);\n  }\n` +
      `  std::fclose(f);\n  std::fclose(o);\n  return 0;\n}\n`;
    fs.writeFileSync(path.join(dir, 'split.cu'), src);
    execFileSync(NV!.nvcc, ['-O2', ...NVCC_SM90A, path.join(dir, 'split.cu'), '-o', path.join(dir, 'split')], { stdio: 'pipe' });
    const ins = patterns(50000, 11);
    // specials: +-inf, NaNs (payload high and low), FLT_MAX, values that round up across a binade, subnormals
    ins.set([0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffffffff, 0x7f7fffff, 0xff7fffff, 0x3fffffff, 0x3ffff000, 0x00000001, 0x00001fff, 0x807fffff, 0, 0x80000000]);
    fs.writeFileSync(path.join(dir, 'in.bin'), Buffer.from(ins.buffer));
    execFileSync(path.join(dir, 'split'), [path.join(dir, 'in.bin'), path.join(dir, 'out.bin')]);
    const out = new Uint32Array(new Uint8Array(fs.readFileSync(path.join(dir, 'out.bin'))).buffer);
    expect(out.length).toBe(2 * ins.length);
    let bad = 0;
    ins.forEach((u, i) => {
      const [hi, lo] = tf32Split(fromBits(u));
      if (bits(hi) !== out[2 * i] || bits(lo) !== out[2 * i + 1]) bad++;
    });
    expect(bad).toBe(0);
    fs.rmSync(dir, { recursive: true, force: true });
  }, 120_000);
});

/** the split kernels of a lowering ('before' kernels), the K chunks' sum kernel ('after', when chunked) and the call */
function splitOf(r: ReturnType<typeof lower>) {
  const before = r.kernels.filter((k) => k.libraryPart === 'before');
  const after = r.kernels.filter((k) => k.libraryPart === 'after');
  return { before, after, lib: r.kernels[0].library! };
}

/** host C++ running a kernel body for every gid.x (the body's `return` leaves the lambda) over these parameters */
function hostKernel(name: string, k: KernelSpec, params: string): string {
  return `static void ${name}(${params}) {\n  for (uint g = 0; g < ${k.groups[0] * k.tgsize[0]}u; ++g) {\n    const uint3 gid = make_uint3(g, 0u, 0u);\n` +
    `    [&]() {\n${k.body}\n    }();\n  }\n}\n`;
}

describe('the split kernels, the rewritten call and the K chunks\' sum compute the node\'s product', () => {
  const M = 13, N = 7;
  const cases: { what: string; op: string; shapes: number[][]; attrs: Node['attrs']; ta: boolean; tb: boolean; bias: boolean }[] = [
    { what: 'linear 2x3 rows, bias', op: 'linear', shapes: [[2, 3, 37], [19, 37], [19], [2, 3, 19]], attrs: {}, ta: false, tb: true, bias: true },
    // 3K = 1800: two K chunks of 900; the bias moves to the sum kernel
    { what: 'linear K 600 (2 chunks), bias', op: 'linear', shapes: [[5, 600], [19, 600], [19], [5, 19]], attrs: {}, ta: false, tb: true, bias: true },
  ];
  for (const [ta, tb] of [[false, false], [true, false], [false, true], [true, true]] as const) {
    for (const K of [9, 601]) {
      const A = (batch: number[]) => [...batch, ...(ta ? [K, M] : [M, K])];
      const B = (batch: number[]) => [...batch, ...(tb ? [N, K] : [K, N])];
      // K 601: 3K = 1803, three chunks of 601 (a single product, and the folded shared-b batch)
      const batches: [number[], number[], number[]][] = K === 9 ? [[[], [], []], [[2, 3], [2, 3], [2, 3]], [[6], [], [6]], [[], [6], [6]]] : [[[], [], []], [[6], [], [6]]];
      for (const [ba, bb, out] of batches)
        cases.push({ what: `matmul ${ta ? 'aT' : 'a'} ${tb ? 'bT' : 'b'} ${A(ba)} x ${B(bb)}`, op: 'matmul', shapes: [A(ba), B(bb), [...out, M, N]], attrs: { transA: ta, transB: tb }, ta, tb, bias: false });
    }
  }

  // K-major (default: K-outer operands transposed by their split) and stacked (MPSC_CUDA_TF32X3_KMAJOR=0, the A/B switch)
  it.skipIf(!NV).each(['1', '0'])('generated split kernels (run on the CPU through nvcc) + the call description (float64 interpreter) + the chunks\' sum kernel = the product within 2^-20 (MPSC_CUDA_TF32X3_KMAJOR=%s)', (kMajor) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-tf32x3-'));
    const lowered = withEnv('MPSC_CUDA_TF32X3_KMAJOR', kMajor, () => cases.map((c) => lower(c.op, c.shapes, c.attrs)));
    let src = `#include <cuda_runtime.h>\n#include <cstdio>\n#include <cstring>\n#include <vector>\ntypedef unsigned int uint;\n${tf32SplitHelper()}\n`;
    lowered.forEach((r, i) => {
      const { before, after } = splitOf(r);
      expect(before, cases[i].what).toHaveLength(2);
      before.forEach((k, j) => (src += hostKernel(`c${i}_k${j}`, k, 'const float* x, float* mpsc_scratch')));
      src += after.length ? hostKernel(`c${i}_r`, after[0], 'float* y, const float* bias, float* mpsc_scratch') : `static void c${i}_r(float*, const float*, float*) {}\n`;
    });
    // main: mode s (splits: a, b -> scratch) or r (sum: scratch, bias -> y); case i; files
    src += `static std::vector<float> load(const char* p) {\n  std::vector<float> v;\n  FILE* f = std::fopen(p, "rb");\n  float x;\n  while (std::fread(&x, 4, 1, f) == 1) v.push_back(x);\n  std::fclose(f);\n  return v;\n}\n`;
    src += `static void save(const char* p, const std::vector<float>& v) {\n  FILE* o = std::fopen(p, "wb");\n  std::fwrite(v.data(), 4, v.size(), o);\n  std::fclose(o);\n}\n`;
    src += `int main(int argc, char** argv) {\n  const int c = std::atoi(argv[2]);\n  if (argv[1][0] == 's') {\n    std::vector<float> a = load(argv[3]), b = load(argv[4]), s(std::atoi(argv[5]), 0.0f);\n    switch (c) {\n`;
    lowered.forEach((_, i) => (src += `      case ${i}: c${i}_k0(a.data(), s.data()); c${i}_k1(b.data(), s.data()); break;\n`));
    src += `    }\n    save(argv[6], s);\n  } else {\n    std::vector<float> s = load(argv[3]), bias = load(argv[4]), y(std::atoi(argv[5]), 0.0f);\n    switch (c) {\n`;
    lowered.forEach((_, i) => (src += `      case ${i}: c${i}_r(y.data(), bias.data(), s.data()); break;\n`));
    src += `    }\n    save(argv[6], y);\n  }\n  return 0;\n}\n`;
    fs.writeFileSync(path.join(dir, 'layout.cu'), src);
    execFileSync(NV!.nvcc, ['-O2', '-std=c++17', ...NVCC_SM90A, '-include', 'cstdlib', path.join(dir, 'layout.cu'), '-o', path.join(dir, 'layout')], { stdio: 'pipe' });
    const f = (n: string) => path.join(dir, n);
    const readF32 = (n: string) => new Float32Array(new Uint8Array(fs.readFileSync(f(n))).buffer);
    let chunked = 0;
    cases.forEach((c, i) => {
      const { lib, after } = splitOf(lowered[i]);
      // K-major: both split operands K-major (a K-outer operand transposed by its split kernel), cuBLASLt's A^T B
      if (kMajor === '1') expect([lib.transA, lib.transB], c.what).toEqual([true, false]);
      const na = c.shapes[0].reduce((x, y) => x * y, 1), nb = c.shapes[1].reduce((x, y) => x * y, 1);
      const a = Float32Array.from(data(na, 3 + i)), b = Float32Array.from(data(nb, 40 + i));
      fs.writeFileSync(f('a.bin'), Buffer.from(a.buffer));
      fs.writeFileSync(f('b.bin'), Buffer.from(b.buffer));
      const floats = lib.tf32x3!.bytes / 4;
      execFileSync(f('layout'), ['s', String(i), f('a.bin'), f('b.bin'), String(floats), f('s.bin')]);
      const s32 = readF32('s.bin');
      const s = Float64Array.from(s32);
      // cuBLASLt's A is our b (at offA), its B our a (at offB)
      const bias = c.bias ? data(c.shapes[2][0], 77) : null;
      const want = c.op === 'linear'
        ? rowMajor([na / c.shapes[0].at(-1)!, c.shapes[0].at(-1)!], c.shapes[1], false, true, Float64Array.from(a), Float64Array.from(b)).map((v, e) => v + bias![e % c.shapes[1][0]])
        : rowMajor(c.shapes[0], c.shapes[1], c.ta, c.tb, Float64Array.from(a), Float64Array.from(b));
      let d: Float64Array;
      if (lib.tf32x3!.offD !== undefined) {
        // K chunks: the call writes its partial products into the scratch region, the sum kernel (run on the CPU) makes y
        chunked++;
        expect(after, c.what).toHaveLength(1);
        expect(lib.epilogue, c.what).toBe('default');
        const parts = blas(lib, s.subarray(lib.tf32x3!.offA / 4), s.subarray(lib.tf32x3!.offB / 4), null);
        s32.set(Float32Array.from(parts), lib.tf32x3!.offD / 4);
        fs.writeFileSync(f('s.bin'), Buffer.from(s32.buffer));
        fs.writeFileSync(f('bias.bin'), Buffer.from(Float32Array.from(bias ?? [0]).buffer));
        execFileSync(f('layout'), ['r', String(i), f('s.bin'), f('bias.bin'), String(want.length), f('y.bin')]);
        d = Float64Array.from(readF32('y.bin'));
      } else d = blas(lib, s.subarray(lib.tf32x3!.offA / 4), s.subarray(lib.tf32x3!.offB / 4), bias);
      const scale = want.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
      const err = d.reduce((m, v, e) => Math.max(m, Math.abs(v - want[e])), 0);
      expect(err / scale, `${c.what}: ${JSON.stringify(lib)}`).toBeLessThan(2 ** -20);
      // and every split value is an exact TF32 value
      expect(s32.subarray(0, (lib.tf32x3!.offD ?? lib.tf32x3!.bytes) / 4).every((v) => (bits(v) & 0x1fff) === 0)).toBe(true);
    });
    // linear K 600; K 601: the four single products and the two folded batches (!transA); a strided batch is not chunked
    expect(chunked).toBe(7);
    fs.rmSync(dir, { recursive: true, force: true });
  }, 240_000);
});

/**
 * Errors of `samples` dot products of length K (outputs of an M x N x K product, full K each) against the
 * float64 reference: fp32 FMA accumulation (a plain fp32 GEMM); the 3xTF32 sum with fp32 accumulation
 * (products of TF32 values are exact; hi*hi over K, then hi*lo, then lo*hi: the split call's K order);
 * plain TF32 (hi*hi only). `max`: the kernel check's metric, max |y - ref| / max |ref|; `rms`: the RMS of
 * |y - ref| / sum_k |a_k b_k| (the scale of the rounding-error bound; stable across samples).
 */
function errors(M: number, N: number, K: number, samples: number, seed: number, scaleB: number) {
  const pick = patterns(2 * samples, seed);
  let scale = 0;
  const max = { fp32: 0, x3: 0, tf32: 0 }, rms = { fp32: 0, x3: 0, tf32: 0 };
  for (let s = 0; s < samples; s++) {
    // row i of a (K values), column j of b: generated from (i, j) so each sample is a fresh dot product
    const a = Float32Array.from(data(K, (pick[2 * s] % M) + 1000 * seed));
    const b = Float32Array.from(data(K, (pick[2 * s + 1] % N) + 7777 * seed)).map((v) => v * scaleB);
    const sa = [...a].map(tf32Split), sb = [...b].map(tf32Split);
    let ref = 0, abs = 0, fp = 0, x3 = 0;
    for (let k = 0; k < K; k++) {
      ref += a[k] * b[k];
      abs += Math.abs(a[k] * b[k]);
      fp = Math.fround(fp + a[k] * b[k]);
    }
    for (let k = 0; k < K; k++) x3 = Math.fround(x3 + sa[k][0] * sb[k][0]);
    const tf = x3;
    for (let k = 0; k < K; k++) x3 = Math.fround(x3 + sa[k][0] * sb[k][1]);
    for (let k = 0; k < K; k++) x3 = Math.fround(x3 + sa[k][1] * sb[k][0]);
    scale = Math.max(scale, Math.abs(ref));
    for (const [key, y] of [['fp32', fp], ['x3', x3], ['tf32', tf]] as const) {
      max[key] = Math.max(max[key], Math.abs(y - ref));
      rms[key] += ((y - ref) / abs) ** 2 / samples;
    }
  }
  const out = (o: typeof max, f: (v: number) => number) => ({ fp32: f(o.fp32), x3: f(o.x3), tf32: f(o.tf32) });
  return { max: out(max, (v) => v / scale), rms: out(rms, Math.sqrt) };
}

describe('3xTF32 accuracy against the float64 reference (IEEE fp32 accumulation emulated; the GPU\'s is measured by bench/tf32x3_gemm.sh)', () => {
  // the workloads' large GEMMs (wide_mlp_b1024_adam; gpt_char_b64_t256 forward, grad-weight over the 16384 rows) and odd sizes
  const shapes: [string, number, number, number][] = [
    ['wide_mlp linear0', 1024, 4096, 3072], ['wide_mlp linear1', 1024, 4096, 4096], ['wide_mlp linear1 weight grad', 4096, 4096, 1024],
    ['gpt_char qkv', 16384, 1152, 384], ['gpt_char mlp down', 16384, 384, 1536], ['gpt_char mlp weight grad', 384, 1536, 16384],
    ['odd', 37, 129, 301], ['odd long K', 19, 23, 4099],
  ];
  for (const [what, M, N, K] of shapes)
    it(`${what} (${M} x ${N} x ${K}): the split's own error (IEEE fp32 accumulation) within 3x fp32's, inside the 1e-4 check, where plain TF32 is not`, () => {
      const e = errors(M, N, K, 96, (K % 97) + 1, 1 / Math.sqrt(K));
      const msg = JSON.stringify(e);
      expect(e.max.x3, msg).toBeLessThan(1e-5);
      // the split's own error (~2^-22 per operand, the dropped lo*lo) and the 3K additions: about twice fp32's
      expect(e.rms.x3, msg).toBeLessThan(3 * e.rms.fp32);
      // plain TF32 is what the split avoids: two to three orders of magnitude more
      expect(e.rms.tf32, msg).toBeGreaterThan(30 * e.rms.x3);
    });
});

describe('the 3xTF32 rule and the model', () => {
  it('large fp32 GEMMs take it; small ones, 16-bit ones and MPSC_CUDA_TF32X3=0 do not; all takes every fp32 call', () => {
    expect(tf32x3Rule({ m: 4096, n: 1024, k: 4096, batch: 1 }, 4096 * 4096 + 1024 * 4096, 'rule').take).toBe(true);
    expect(tf32x3Rule({ m: 10, n: 1024, k: 4096, batch: 1 }, 10 * 4096 + 1024 * 4096, 'rule').take).toBe(false);
    expect(tf32x3Rule({ m: 4096, n: 1024, k: 10, batch: 1 }, 4096 * 10 + 1024 * 10, 'rule').take).toBe(false);
    // outputs that do not fill the GPU with 128 x 128 tiles: a thin product, a long-K weight gradient (measured slower as
    // 3xTF32: 1.3x unchunked; chunked, its K chunks' tiles counted with MPSC_CUDA_TF32X3_CHUNK_TILES=1, the step 6.6% slower)
    expect(tf32x3Rule({ m: 128, n: 16384, k: 128, batch: 1 }, 128 * 128 + 16384 * 128, 'rule').take).toBe(false);
    expect(tf32x3Rule({ m: 384, n: 1536, k: 16384, batch: 1 }, 16384 * (384 + 1536), 'rule').why).toMatch(/36 tiles/);
    expect(withEnv('MPSC_CUDA_TF32X3_CHUNK_TILES', '1', () => tf32x3Rule({ m: 384, n: 1536, k: 16384, batch: 1 }, 16384 * (384 + 1536), 'rule').take)).toBe(true);
    expect(withEnv('MPSC_CUDA_TF32X3_CHUNK_TILES', '1', () => tf32x3Rule({ m: 128, n: 512, k: 2048, batch: 1 }, 2048 * (128 + 512), 'rule').why)).toMatch(/16 tiles of 128 x 128 over 4 K chunks/);
    // K beyond 4096 in a strided batch (no K chunks): the tensor cores' accumulation error (measured) would approach the 1e-4 check
    expect(tf32x3Rule({ m: 4096, n: 4096, k: 8192, batch: 2 }, 4 * 4096 * 8192, 'rule').why).toMatch(/k 8192 > 4096/);
    expect(tf32x3Rule({ m: 4096, n: 4096, k: 8192, batch: 1 }, 2 * 4096 * 8192, 'rule').take).toBe(true);
    expect(tf32x3Rule({ m: 4096, n: 4096, k: 8192, batch: 2 }, 4 * 4096 * 8192, 'all').take).toBe(true);
    // K chunks of at most 1536 that divide 3K; none for a strided batch
    expect([chunksOf(3 * 384, 1), chunksOf(3 * 1024, 1), chunksOf(3 * 4096, 1), chunksOf(3 * 601, 1), chunksOf(3 * 4096, 6)]).toEqual([1, 2, 8, 3, 1]);
    // enough tiles, but the split's traffic outweighs the product's saving: a 128-row output
    const thin = tf32x3Rule({ m: 128, n: 17000, k: 1024, batch: 1 }, 1024 * (128 + 17000), 'rule');
    expect(thin.take).toBe(false);
    expect(thin.why).toMatch(/not below 0.85/);
    const big = lower('matmul', [[2048, 2560], [2560, 1536], [2048, 1536]], {}, 'rule');
    expect(big.choice.tf32x3).toBe(true);
    expect(big.choice.why).toMatch(/3xTF32/);
    // 3K = 7680 in 5 K chunks of 1536
    expect(big.kernels[0].library!).toMatchObject({ k: 1536, batch: 5, epilogue: 'default' });
    expect(lower('matmul', [[2048, 2560], [2560, 1536], [2048, 1536]], {}, 'off').choice.tf32x3).toBeUndefined();
    expect(lower('matmul', [[5, 6], [6, 7], [5, 7]], {}, 'rule').kernels.some((k) => k.libraryPart === 'before')).toBe(false);
    expect(lower('matmul', [[5, 6], [6, 7], [5, 7]], {}, 'all').kernels.filter((k) => k.libraryPart === 'before')).toHaveLength(2);
    expect(lower('matmul', [[2048, 2560], [2560, 1536], [2048, 1536]], {}, 'all', 'bf16').choice.tf32x3).toBeUndefined();
  });

  it('the model: splits in the scratch region before each 3xTF32 call, a sound plan, sources that nvcc compiles', () => {
    const model = checkFile(path.join(ROOT, 'specs/mnist_mlp.model'));
    const a = generateCudaModel(buildPrograms(model, { batch: 256 }), { tf32x3: 'all' });
    expect(planProblems(a.plan)).toEqual([]);
    const calls = a.plan.programs.flatMap((p) => p.nodes).filter((n) => n.kind === 'cublaslt');
    const x3 = calls.filter((c) => c.kind === 'cublaslt' && c.gemm.tf32x3);
    expect(x3.length).toBeGreaterThan(0);
    for (const c of x3) {
      if (c.kind !== 'cublaslt') continue;
      expect(c.before).toHaveLength(2);
      expect(c.a.offset).toBe(a.plan.scratch.offset + c.gemm.tf32x3!.offA);
      expect(c.b.offset).toBe(a.plan.scratch.offset + c.gemm.tf32x3!.offB);
      expect(a.plan.scratch.bytes).toBeGreaterThanOrEqual(c.gemm.tf32x3!.bytes);
    }
    expect(a.files[HOST_FILE]).toMatch(/MPSC_LT_COMPUTE_TF32X3/);
    expect(a.files[KERNELS_FILE]).toMatch(/mpsc_tf32_split/);
    const off = generateCudaModel(buildPrograms(model, { batch: 256 }), { tf32x3: 'off' });
    expect(off.files[HOST_FILE]).not.toMatch(/MPSC_LT_COMPUTE_TF32X3 \}/);
    expect(off.files[KERNELS_FILE]).not.toMatch(/mpsc_tf32_split/);
    if (!NV) return;
    // the host code with the cuBLASLt interface (its kernels file included), as the GPU machine's build compiles it
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-tf32x3-model-'));
    try {
      for (const [f, t] of Object.entries({ ...runtimeSources(true), ...a.files })) fs.writeFileSync(path.join(dir, f), t);
      execFileSync(NV.nvcc, [...NVCC_SM90A, '-c', path.join(dir, HOST_FILE), '-o', path.join(dir, 'o.o'), '-Werror', 'all-warnings', '-DMPSC_CUBLASLT'], { stdio: 'pipe' });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 240_000);
});
