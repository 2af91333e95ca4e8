/**
 * gemm_cuda.ts's small-tile GEMM kernels (smallGemm: 32x64 tiles, BK 32, the next k step prefetched into
 * registers, each operand staged in the order it is contiguous, smallSplit's K chunks and their fixed-order
 * sum) executed on the CPU thread emulator (test/native/cuda_thread_emu.h: a fiber per CUDA thread, real
 * barriers, the warp-wide m16n8k8 TF32 mma), without a GPU: the GEMM tile cases of the CUDA kernel check
 * (cuda_cases.ts gemmTileCases) and the catalogue's linear / matmul op cases and GEMM + unary fusions
 * (metal_cases.ts), built without cuBLASLt (the generated path), both variants (fp32 FFMA, 3xTF32 tensor cores), each checked value against the float64
 * reference within 1e-4 (cuda_check's tolerance). Negative controls: the next step fetched one step late
 * (the prefetch's k offset dropped) and 3xTF32 reduced to plain TF32 (the lo products dropped) fail; the A/B variant
 * MPSC_CUDA_SMALL_PRESPLIT=1 (operands split once when staged) on the tile cases.
 * Where nvcc is found, the small kernels go through ptxas for sm_90a: no spills, no stack.
 * Also layernorm_cuda.ts's layernorm_grad over many blocks (its finish kernel, blockSumsFinish: a warp per column adding the
 * blocks' slots, every 32nd block per thread, then the warp's butterfly sum; and MPSC_CUDA_LN_FINISH=cols, each warp of a
 * block adding a run of the blocks' slots for 32 consecutive slots, then the warps' sums in order) on the same emulator.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildCuda, KERNELS_FILE } from '../compiler/codegen-cuda/index.js';
import type { KernelSpec, KernelVariant } from '../compiler/kernels/kernel_types.js';
import { numel } from '../compiler/ir/graph.js';
import { makeRng, relError } from '../compiler/reference/fixtures.js';
import { findNvcc } from '../runtime/cuda/session.js';
import { cudaLongCases, gemmTileCases, gradSumCases } from './cuda_cases.js';
import { allOpCases, fusedCases, smallEpilogueCases } from './metal_cases.js';
import { reference, type OpCase } from './metal_harness.js';
import { NVCC_SM90A } from './nvcc_target.js';
import { withEnv } from './env_helpers.js';
import { emuKernelSource } from './warp_shim_build.js';

const EMU = path.resolve(__dirname, 'native/cuda_thread_emu.h');
const hasGxx = spawnSync('g++', ['--version']).status === 0;
const NV = findNvcc();
const TOL = 1e-4;
const GEMM = new Set(['linear', 'matmul']);

const cases = (): OpCase[] => [
  ...gemmTileCases(makeRng(20261204)).filter((c) => !/large/.test(String(c.program.name))),
  ...allOpCases().filter((c) => c.program.graph.nodes.every((n) => GEMM.has(n.op))),
  ...fusedCases().filter((c) => c.program.graph.nodes.some((n) => GEMM.has(n.op))),
];

/** each case's worst relative error per variant (NaN: a value missing), after `edit` on every kernel body */
function runOnEmulator(all: OpCase[], edit: (body: string) => string = (b) => b): { name: string; fp32: number; mma: number }[] {
  const built = buildCuda(all.map((c) => c.program), 'gemm_emu', { merge: false, cublasLt: false });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gemm-emu-'));
  const id = (s: string) => s.replace(/[^A-Za-z0-9_]/g, '_');
  const lines: string[] = [`#include "${EMU}"`, '#include <string>',
    'static std::vector<float> rd(const std::string& f, size_t n) { std::vector<float> v(n, 0.0f); if (FILE* p = std::fopen(f.c_str(), "rb")) { if (std::fread(v.data(), 4, n, p) != n) std::abort(); std::fclose(p); } return v; }',
    'static void wr(const std::string& f, const std::vector<float>& v) { FILE* p = std::fopen(f.c_str(), "wb"); std::fwrite(v.data(), 4, v.size(), p); std::fclose(p); }'];
  const seen = new Set<string>();
  const source = (k: KernelSpec, v: KernelVariant) => {
    if (seen.has(v.name)) return;
    seen.add(v.name);
    // dynamic shared memory (past 48 KiB) as the emulator's static block-shared array of the same size
    lines.push(emuKernelSource(k, v, edit));
  };
  const calls: string[] = [];
  all.forEach((c, i) => {
    const lp = built.lowered[i];
    const g = lp.program.graph;
    const byName = new Map(c.program.graph.values.map((v) => [v.name, v.id]));
    const sizes = new Map<string, number>();
    for (const k of lp.kernels) for (const a of k.args) sizes.set(g.values[a.value].name, numel(g.values[a.value].shape));
    let fn = `static void case_${i}(const std::string& d, bool mma) {\n  StepParams sp{0.05f, 3, 987654321u, 5u};\n`;
    fn += `  std::vector<float> scratch(${Math.max(1, ...lp.kernels.map((k) => (k.scratch ?? 0) / 4))});\n`;
    for (const [name, n] of sizes) {
      const data = c.data.get(byName.get(name)!);
      if (data) fs.writeFileSync(path.join(dir, `${i}_${id(name)}`), Float32Array.from(data));
      fn += `  std::vector<float> v_${id(name)} = rd(d + "/${i}_${id(name)}", ${n});\n`;
    }
    for (const k of lp.kernels) {
      const launch = (v: KernelVariant) => {
        source(k, v);
        const args = [...k.args.map((a) => `v_${id(g.values[a.value].name)}.data()`), ...(/\bmpsc_scratch\b/.test(v.body) ? ['scratch.data()'] : []), '&sp'];
        return `emu_launch(uint3{${k.groups.join('u, ')}u}, uint3{${v.tgsize.join('u, ')}u}, [&] { ${v.name}(${args.join(', ')}); });`;
      };
      fn += k.mma ? `  if (mma) ${launch(k.mma)}\n  else ${launch(k)}\n` : `  ${launch(k)}\n`;
    }
    for (const v of c.check) fn += `  wr(d + "/${i}_" + (mma ? "mma" : "fp32") + "_${v}", v_${id(c.program.graph.values[v].name)});\n`;
    lines.push(fn + '}');
    calls.push(`case_${i}(argv[1], false);\n  case_${i}(argv[1], true);`);
  });
  lines.push(`int main(int, char** argv) {\n  ${calls.join('\n  ')}\n  return 0;\n}`);
  fs.writeFileSync(path.join(dir, 'emu.cpp'), lines.join('\n\n') + '\n');
  execFileSync('g++', ['-std=c++20', '-O1', '-pthread', '-w', path.join(dir, 'emu.cpp'), '-o', path.join(dir, 'emu')], { stdio: 'pipe' });
  execFileSync(path.join(dir, 'emu'), [dir], { stdio: 'pipe' });
  const out = all.map((c, i) => {
    const ref = reference(c, { lr: 0.05, t: 3, seed: 987654321, counter: 5 });
    const worst = (variant: string) => Math.max(...c.check.map((v) => {
      const b = fs.readFileSync(path.join(dir, `${i}_${variant}_${v}`));
      const e = relError(Float64Array.from(new Float32Array(b.buffer, b.byteOffset, b.length / 4)), ref.get(v)!);
      return Number.isNaN(e) ? Infinity : e;
    }));
    return { name: String(c.program.name), fp32: worst('fp32'), mma: worst('mma') };
  });
  fs.rmSync(dir, { recursive: true, force: true });
  return out;
}

describe.skipIf(!hasGxx)('gemm_cuda.ts small-tile kernels on the CPU thread emulator', () => {
  it('match the float64 reference within 1e-4 in both variants, for every small GEMM case (split K, transposes, batches, fused unary fns)', () => {
    // MPSC_CUDA_SMALL_FP32=x3 (the default): fp32 operands keep the 3xTF32 small kernel as their tensor-core variant
    withEnv('MPSC_CUDA_SMALL_FP32', 'x3', () => {
      const all = cases();
      const built = buildCuda(all.map((c) => c.program), 'gemm_emu_labels', { merge: false, cublasLt: false });
      const firsts = built.lowered.map((lp) => lp.kernels[0]);
      // every case runs on the small tiles; both operand stagings and uneven K splits are reached
      expect(firsts.every((k) => /small 32x64 tiles/.test(k.label))).toBe(true);
      expect(firsts.filter((k) => /split K: \d+ chunks/.test(k.label)).length).toBeGreaterThanOrEqual(3);
      expect(firsts.some((k) => /As\[k \* 40 \+ m\]/.test(k.mma!.body)) && firsts.some((k) => /As\[m \* 36 \+ k\]/.test(k.mma!.body))).toBe(true);
      expect(firsts.some((k) => /Bs\[k \* 72 \+ n\]/.test(k.mma!.body)) && firsts.some((k) => /Bs\[n \* 36 \+ k\]/.test(k.mma!.body))).toBe(true);
      const r = runOnEmulator(all);
      expect(r.filter((x) => !(x.fp32 < TOL && x.mma < TOL))).toEqual([]);
      // the tensor-core variant really ran its TF32 products (not bitwise the fp32 one) and stays fp32-accurate
      expect(Math.max(...r.map((x) => x.mma))).toBeGreaterThan(0);
      expect(Math.max(...r.map((x) => x.mma))).toBeLessThan(1e-5);
    });
  }, 900_000);

  it('with MPSC_CUDA_SMALL_FP32=ffma fp32 products run the cp.async-pipelined FFMA kernel alone (a 3-stage ring, 2 k-groups summed in order), within 1e-5', () => withEnv('MPSC_CUDA_SMALL_FP32', 'ffma', () => {
    const all = cases();
    const built = buildCuda(all.map((c) => c.program), 'gemm_emu_ffma', { merge: false, cublasLt: false });
    const firsts = built.lowered.map((lp) => lp.kernels[0]);
    const fp32 = firsts.filter((k) => /fp32 FFMA \(cp\.async ring, 2 k-groups\)/.test(k.label));
    expect(fp32.length).toBeGreaterThan(10);
    for (const k of fp32) expect(k.mma).toBeUndefined();
    // both stagings of each operand (k-contiguous [rows][36], row-contiguous [32][rows + 4]), 16- and 4-byte copies, K splits
    const bodies = fp32.map((k) => k.body);
    expect(bodies.some((b) => /As\[m \* 36 \+ k\]/.test(b)) && bodies.some((b) => /As\[k \* 36 \+ m\]/.test(b))).toBe(true);
    expect(bodies.some((b) => /Bs\[n \* 36 \+ k\]/.test(b)) && bodies.some((b) => /Bs\[k \* 68 \+ n\]/.test(b))).toBe(true);
    expect(bodies.some((b) => /mpsc_cp_async16f/.test(b)) && bodies.some((b) => /mpsc_cp_async4\(/.test(b))).toBe(true);
    expect(fp32.filter((k) => /split K: \d+ chunks/.test(k.label)).length).toBeGreaterThanOrEqual(2);
    const r = runOnEmulator(all);
    expect(r.filter((x) => !(x.fp32 < 1e-5 && x.mma < 1e-5))).toEqual([]);
    // negative controls: the ring's next stage copied from the current step's k (stale tiles), and group 1's sums
    // dropped, each fail
    // (cases of more than two k steps, so that the ring's in-loop copies run)
    const steps = (b: string) => Number(/const uint nk = \((\d+)u - 0u \+ 31u\) \/ 32u/.exec(b)?.[1] ?? 0);
    const some = all.filter((_, i) => /cp\.async ring/.test(firsts[i].label) && steps(firsts[i].body) > 64);
    expect(some.length).toBeGreaterThanOrEqual(2);
    for (const x of runOnEmulator(some, (b) => b.replaceAll('nx * 32u', 'kt * 32u'))) expect(x.fp32, x.name).toBeGreaterThan(TOL);
    for (const x of runOnEmulator(some, (b) => b.replace('cacc[i][j] += tg[', 'cacc[i][j] += 0.0f * tg['))) expect(x.fp32, x.name).toBeGreaterThan(TOL);
  }), 900_000);

  it('fuse.ts rules 12, 13 (MPSC_CUDA_SMALL_EPI=1: a unary gradient into the product writing its g; a unary into the product, the product kept) run in the pipelined kernel\'s store, within 1e-5', () => withEnv('MPSC_CUDA_SMALL_EPI', '1', () => {
    const all = smallEpilogueCases();
    const built = buildCuda(all.map((c) => c.program), 'gemm_emu_small_epi', { merge: false, cublasLt: false });
    // switched off (MPSC_CUDA_SMALL_EPI=0): the same cases build their unary / unary_grad kernels
    const plain = withEnv('MPSC_CUDA_SMALL_EPI', '0', () => buildCuda(all.map((c) => c.program), 'gemm_emu_small_epi0', { merge: false, cublasLt: false }));
    for (const lp of plain.lowered) expect(lp.kernels.length, lp.program.name).toBe(/keep/.test(lp.program.name) ? 3 : 2);
    const firsts = built.lowered.map((lp) => lp.kernels.find((k) => /matmul|linear/.test(k.label))!);
    expect(firsts.every((k) => /fp32 FFMA \(cp\.async ring/.test(k.label))).toBe(true);
    expect(firsts.filter((k) => /fused unary_grad/.test(k.label)).length).toBe(3);
    expect(firsts.filter((k) => /and the product before it/.test(k.label)).length).toBe(2);
    // the unary / the unary_grad has no kernel of its own (the kept product's gradient, a separate node, has one)
    for (const lp of built.lowered) expect(lp.kernels.length).toBe(/keep/.test(lp.program.name) ? 2 : 1);
    const r = runOnEmulator(all);
    expect(r.filter((x) => !(x.fp32 < 1e-5 && x.mma < 1e-5))).toEqual([]);
    // negative control: the kept product stored with the epilogue applied (z twice) fails the rule-13 cases
    const keep = all.filter((c) => /keep/.test(String(c.program.name)));
    for (const x of runOnEmulator(keep, (b) => b.replace(/ypre\[(.*)\] = acc/, 'ypre[$1] = 2.0f * acc'))) expect(x.fp32, x.name).toBeGreaterThan(TOL);
  }), 900_000);

  it('MPSC_CUDA_SMALL_PRESPLIT=1 (each operand element split once, when staged, into hi / lo stages) matches too', () => {
    const saved = process.env.MPSC_CUDA_SMALL_PRESPLIT;
    process.env.MPSC_CUDA_SMALL_PRESPLIT = '1';
    try {
      const some = gemmTileCases(makeRng(20261204)).filter((c) => !/large/.test(String(c.program.name)));
      const built = buildCuda(some.map((c) => c.program), 'gemm_emu_presplit', { merge: false, cublasLt: false });
      for (const lp of built.lowered) expect(lp.kernels[0].mma!.body).toMatch(/mpsc_split_tf32\(pa\[r\], As\[.*AsL\[/);
      const r = runOnEmulator(some);
      expect(r.filter((x) => !(x.fp32 < TOL && x.mma < TOL))).toEqual([]);
      expect(Math.max(...r.map((x) => x.mma))).toBeLessThan(1e-5);
    } finally {
      if (saved === undefined) delete process.env.MPSC_CUDA_SMALL_PRESPLIT;
      else process.env.MPSC_CUDA_SMALL_PRESPLIT = saved;
    }
  }, 900_000);

  it('fails when the next k step is fetched one step late, or when the lo products of 3xTF32 are dropped (negative controls)', () => {
    const some = cases().filter((c) => ['tile_linear_bias_67x65x129', 'tile_matmul_transA_split', 'tile_gpt_weight_grad'].includes(String(c.program.name)));
    expect(some).toHaveLength(3);
    const late = runOnEmulator(some, (b) => b.replace(/ki = k0 \+ 32u \+ /g, 'ki = k0 + '));
    for (const x of late) expect(x.fp32 > TOL && x.mma > TOL, x.name).toBe(true);
    const tf32 = runOnEmulator(some, (b) => b.replace(/ *mpsc_mma16x8\(cacc\[i\]\[j\], (al\[i\], bh\[j\]|ah\[i\], bl\[j\])\);\n/g, ''));
    for (const x of tf32) {
      expect(x.fp32, x.name).toBeLessThan(TOL);
      expect(x.mma, x.name).toBeGreaterThan(TOL);
    }
  }, 900_000);
});

describe.skipIf(!hasGxx)('layernorm_cuda.ts layernorm_grad (blockSumsFinish) on the CPU thread emulator', () => {
  it('matches the float64 reference within 1e-4 for block counts under, over and not a multiple of 32, with the folded add and bias sum', () => {
    const all = cudaLongCases().filter((c) => /layernorm_grad/.test(String(c.program.name)) && !/wide|half/.test(String(c.program.name)));
    const built = buildCuda(all.map((c) => c.program), 'ln_emu_labels', { merge: false });
    // each case's block count G (its finish kernel's label)
    const G = built.lowered.map((lp) => Number(lp.kernels.map((k) => k.label.match(/sum of (\d+) blocks, a warp per column/)?.[1]).find((x) => x) ?? 0));
    expect(G.every((x) => x > 1) && G.some((x) => x < 32) && G.some((x) => x > 32 && x % 32 !== 0)).toBe(true);
    expect(built.lowered.some((lp) => lp.kernels.some((k) => /dsum: sum of/.test(k.label)))).toBe(true);
    const r = runOnEmulator(all);
    expect(r).toHaveLength(9);
    expect(r.filter((x) => !(x.fp32 < TOL))).toEqual([]);
    // negative control: the finish's lanes adding only the first 32 blocks' slots fail exactly the cases of more blocks
    const short = runOnEmulator(all, (b) => b.replace(/for \(uint q = 0u; q < \d+u; \+\+q\)/g, 'for (uint q = 0u; q < 1u; ++q)'));
    expect(short.map((x) => x.fp32 > TOL)).toEqual(G.map((x) => x > 32));
    // the by-lines form (MPSC_CUDA_LN_FINISH=cols, not yet timed on a GPU) too, and its negative control (each warp adding
    // only the first block of its run)
    withEnv('MPSC_CUDA_LN_FINISH', 'cols', () => {
      expect(buildCuda(all.map((c) => c.program), 'ln_emu_cols', { merge: false }).lowered.every((lp) => lp.kernels.some((k) => /32 slots per block of \d+ warps\]$/.test(k.label)))).toBe(true);
      expect(runOnEmulator(all).filter((x) => !(x.fp32 < TOL))).toEqual([]);
      const shortCols = runOnEmulator(all, (b) => b.replace(/for \(uint q = 0u; q < \d+u; \+\+q\)/g, 'for (uint q = 0u; q < 1u; ++q)'));
      expect(shortCols.map((x) => x.fp32 > TOL)).toEqual(G.map((x) => x > 32));
    });
  }, 900_000);
});

describe.skipIf(!hasGxx)('wide_ew_cuda.ts unary gradient with its column sums (fuse.ts rule 14) on the CPU thread emulator', () => {
  it('matches the float64 reference within 1e-4 over row blocks with a ragged last one; fails when a block skips its last unrolled row', () => {
    const all = gradSumCases(makeRng(7)).filter((c) => /_f32$/.test(String(c.program.name)));
    const built = buildCuda(all.map((c) => c.program), 'grad_sum_emu_labels', { merge: false });
    const labels = built.lowered[0].kernels.map((k) => k.label).join(' | ');
    expect(labels).toMatch(/over 3 rows, and dx's column sums \(partials of 344 row blocks\).*dsum: sum of 344 blocks, a warp per column/);
    expect(runOnEmulator(all).map((x) => x.fp32 < TOL)).toEqual([true]);
    // negative control: the third row of each unrolled group dropped from the sums (its dx still stored)
    const short = runOnEmulator(all, (b) => b.replace(/if \(j \+ 2u < 3u && r \+ 2u < 1030u\) \{/, 'if (false) {'));
    expect(short.map((x) => x.fp32 > TOL)).toEqual([true]);
  }, 900_000);
});

describe.skipIf(!NV)('gemm_cuda.ts small-tile kernels under ptxas', () => {
  it('compile for sm_90a without register spills or stack', () => {
    const built = buildCuda(gemmTileCases(makeRng(20261204)).map((c) => c.program), 'gemm_ptxas', { merge: false, cublasLt: false });
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gemm-ptxas-'));
    fs.writeFileSync(path.join(dir, 'k.cu'), built.files[KERNELS_FILE]);
    const r = spawnSync(NV!.nvcc, [...NVCC_SM90A, '-c', path.join(dir, 'k.cu'), '-o', path.join(dir, 'k.o'), '-Xptxas', '-v'], { encoding: 'utf8' });
    fs.rmSync(dir, { recursive: true, force: true });
    expect(r.status, r.stderr).toBe(0);
    const small = new Set(built.lowered.flatMap((lp) => lp.kernels).filter((k) => /small 32x64/.test(k.label)).flatMap((k) => [k.name, k.mma!.name]).map((n) => built.alias.get(n) ?? n));
    expect(small.size).toBeGreaterThan(4);
    let cur = '';
    const checked = new Set<string>();
    for (const line of r.stderr.split('\n')) {
      const fn = line.match(/Compiling entry function '(\w+)'/);
      if (fn) cur = fn[1];
      const st = line.match(/(\d+) bytes stack frame, (\d+) bytes spill stores/);
      if (st && small.has(cur)) {
        expect([cur, Number(st[1]), Number(st[2])]).toEqual([cur, 0, 0]);
        checked.add(cur);
      }
    }
    expect(checked.size).toBe(small.size);
  }, 300_000);
});
