/**
 * conv_cuda.ts's kernels executed on the CPU, without a GPU: the conv cases of the CUDA kernel
 * check (cuda_cases.ts cudaConvCases: 128-row/column tiles with partial edges, 3 input channels,
 * stride 2, groups, dilation, split-K weight gradients; and the Metal op cases' small convs and the
 * fused conv + gelu, and the relu-grads fuse.ts folds into conv2d_grad_input and the pool gradients) are
 * built for CUDA (buildCuda), their kernels' generated text is compiled by g++ against
 * test/native/cuda_thread_emu.h (one fiber per CUDA thread, real barriers, the TF32 rounding and the
 * warp-wide m16n8k8 mma emulated, cp.async in commit groups landing at issue or, in the late mode,
 * only at the wait that requires them: a pipeline reading a stage before its wait fails) and run; each
 * checked value must match the float64 reference interpreter: the fp32 variant within 1e-4 (as the
 * GPU check), the TF32 tensor-core variant within cuda_check's TF32 tolerance, 5e-3. A wrong index,
 * predicate, tile layout, fragment mapping or split-K slice shows up here by case name.
 * Where nvcc is found, the same kernels go through ptxas for sm_90a: no spills, no stack, and the
 * TF32 variants within 128 registers (two blocks of 256 threads per SM, what the tiles assume).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildCuda } from '../compiler/codegen-cuda/index.js';
import { checkFile } from '../compiler/check/index.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { CONV_OPS, roundExpr } from '../compiler/codegen-cuda/conv_cuda.js';
import { CUDA, SMEM_STATIC_MAX } from '../compiler/codegen-cuda/cuda_dialect.js';
import { helperSource, kernelSource } from '../compiler/kernels/prelude.js';
import type { KernelSpec, KernelVariant } from '../compiler/kernels/kernel_types.js';
import { numel } from '../compiler/ir/graph.js';
import { makeRng, relError } from '../compiler/reference/fixtures.js';
import { convGradSumsCases, convPoolCases, cudaConvCases, cudaLongCases, giVec16Cases, poolGradSumsCases } from './cuda_cases.js';
import { HOST_FILE, KERNELS_FILE } from '../compiler/codegen-cuda/index.js';
import { cudaInputsKey, findNvcc } from '../runtime/cuda/session.js';
import { allOpCases, fusedCases, reluGradFoldCases } from './metal_cases.js';
import { reference, type OpCase } from './metal_harness.js';
import { NVCC_SM90A } from './nvcc_target.js';

const SCALARS = { lr: 0.05, t: 3, seed: 987654321, counter: 5 };
const HARNESS = path.resolve(__dirname, 'native/cuda_thread_emu.h');
const hasGxx = spawnSync('g++', ['--version']).status === 0;
const NV = findNvcc();

/** the kernel text, which reaches PTX only through the dialect's helpers (the emulator defines them); any asm in it is an error */
export function emulable(text: string): string {
  if (/\basm\b/.test(text)) throw new Error(`a kernel has PTX the emulator does not know: ${text.match(/asm[^\n]*/)![0]}`);
  return text;
}

const safe = (s: string) => s.replace(/[^A-Za-z0-9_]/g, '_');

interface Emulated { problems: string[]; worst: { fp32: number; mma: number }; checked: number }

/**
 * Builds `all` for CUDA, compiles every kernel of theirs (both variants, bodies passed through
 * `mutate`) with the emulator, runs each case in both variants and judges every checked value.
 */
/** raw access for a test: `bits` edits an input's float bits before it is written, `raw` sees each checked output */
interface EmuIo {
  bits?: (i: number, name: string, u: Uint32Array) => void;
  raw?: (i: number, name: string, variant: 'fp32' | 'mma', v: Float32Array) => void;
}

function emulate(all: OpCase[], mutate: (body: string) => string = (b) => b, convOnly = true, late = false, io: EmuIo = {}): Emulated {
  const a = buildCuda(all.map((c) => c.program), 'conv_emu', { merge: false });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'conv-emu-'));
  const src: string[] = [`#include "${HARNESS}"`, '#include <cstdio>', '#include <string>'];
  const emitted = new Set<string>();
  const emit = (k: KernelSpec, v: KernelVariant) => {
    if (emitted.has(v.name)) return;
    emitted.add(v.name);
    // dynamic shared memory (past 48 KB) becomes the emulator's per-block static array of the kernel's size
    src.push(emulable(kernelSource(CUDA, k, { ...v, body: mutate(v.body) }, '')).replace(/extern __shared__ __align__\(16\) float tg\[\];/, `__shared__ __align__(16) float tg[${v.tgmem / 4}];`));
  };
  src.push(
    'static std::vector<float> load(const std::string& f, size_t n) { std::vector<float> v(n, 0.0f); if (FILE* p = std::fopen(f.c_str(), "rb")) { if (std::fread(v.data(), 4, n, p) != n) std::abort(); std::fclose(p); } return v; }',
    'static void save(const std::string& f, const std::vector<float>& v) { FILE* p = std::fopen(f.c_str(), "wb"); std::fwrite(v.data(), 4, v.size(), p); std::fclose(p); }',
  );
  // the prelude helpers the kernels call that the emulator does not define itself (the shared block sums: a pool kernel)
  const helpers = new Set(a.lowered.flatMap((lp) => [...lp.helpers]));
  if (helpers.has('block_reduce')) src.push(helperSource(CUDA, 'block_reduce'));
  const runs: string[] = [];
  all.forEach((c, i) => {
    const lp = a.lowered[i];
    const g = lp.program.graph;
    // every kernel of a conv case must be conv_cuda.ts's (the GEMM, and the split-K reduction)
    if (convOnly) {
      expect(lp.kernels.every((k) => CONV_OPS.has(k.op)), c.program.name).toBe(true);
      expect(lp.kernels[0].label, c.program.name).toMatch(/conv_cuda\.ts/);
    }
    const byName = new Map(c.program.graph.values.map((v) => [v.name, v.id]));
    const vals = new Map<string, number>();
    for (const k of lp.kernels) for (const arg of k.args) vals.set(g.values[arg.value].name, numel(g.values[arg.value].shape));
    for (const [name] of vals) {
      const d = c.data.get(byName.get(name)!);
      if (!d) continue;
      const f = Float32Array.from(d);
      io.bits?.(i, name, new Uint32Array(f.buffer));
      fs.writeFileSync(path.join(dir, `${i}_${safe(name)}.in`), Buffer.from(f.buffer));
    }
    const scratch = Math.max(0, ...lp.kernels.map((k) => k.scratch ?? 0)) / 4;
    let body = `static void run_${i}(const std::string& dir, bool mma) {\n  StepParams sp{0.05f, 3, 987654321u, 5u};\n  std::vector<float> scratch(${Math.max(1, scratch)});\n`;
    for (const [name, n] of vals) body += `  std::vector<float> v_${safe(name)} = load(dir + "/${i}_${safe(name)}.in", ${n});\n`;
    for (const k of lp.kernels) {
      emit(k, k);
      if (k.mma) emit(k, k.mma);
      const call = (v: KernelVariant) => {
        const args = [...k.args.map((x) => `v_${safe(g.values[x.value].name)}.data()`), ...(/\bmpsc_scratch\b/.test(v.body) ? ['scratch.data()'] : []), '&sp'];
        return `emu_launch(uint3{${k.groups.join('u, ')}u}, uint3{${v.tgsize.join('u, ')}u}, [&] { ${v.name}(${args.join(', ')}); });`;
      };
      body += k.mma ? `  if (mma) ${call(k.mma)}\n  else ${call(k)}\n` : `  ${call(k)}\n`;
    }
    for (const id of c.check) {
      const name = c.program.graph.values[id].name;
      body += `  save(dir + "/${i}_${safe(name)}." + (mma ? "mma" : "fp32"), v_${safe(name)});\n`;
    }
    src.push(body + '}');
    runs.push(`run_${i}(dir, mma);`);
  });
  src.push(`int main(int argc, char** argv) {\n  const std::string dir = argv[1];\n  emu_cp_late = argc > 2 && argv[2][0] == '1';\n  for (bool mma : {false, true}) {\n    ${runs.join('\n    ')}\n  }\n  return 0;\n}`);
  fs.writeFileSync(path.join(dir, 'emu.cpp'), src.join('\n\n') + '\n');
  execFileSync('g++', ['-std=c++20', '-O1', '-pthread', '-w', path.join(dir, 'emu.cpp'), '-o', path.join(dir, 'emu')], { stdio: 'pipe' });
  execFileSync(path.join(dir, 'emu'), [dir, late ? '1' : '0'], { stdio: 'pipe' });
  const out: Emulated = { problems: [], worst: { fp32: 0, mma: 0 }, checked: 0 };
  all.forEach((c, i) => {
    const ref = reference(c, SCALARS);
    for (const id of c.check) {
      const name = c.program.graph.values[id].name;
      for (const [variant, tol] of [['fp32', 1e-4], ['mma', 5e-3]] as const) {
        const b = fs.readFileSync(path.join(dir, `${i}_${safe(name)}.${variant}`));
        io.raw?.(i, name, variant, new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length)));
        const e = relError(Float64Array.from(new Float32Array(b.buffer, b.byteOffset, b.length / 4)), ref.get(id)!);
        if (!(e < tol)) out.problems.push(`${c.program.name} ${name} (${variant}): rel error ${e} (tolerance ${tol})`);
        out.worst[variant] = Math.max(out.worst[variant], Number.isNaN(e) ? Infinity : e);
        out.checked++;
      }
    }
  });
  fs.rmSync(dir, { recursive: true, force: true });
  return out;
}

describe.skipIf(!hasGxx)('conv_cuda.ts kernels on the CPU thread emulator', () => {
  it('match the float64 reference: fp32 within 1e-4, TF32 tensor cores within 5e-3, for every conv case', () => {
    const all: OpCase[] = [
      ...cudaConvCases(),
      ...allOpCases().filter((c) => c.program.graph.nodes.every((n) => CONV_OPS.has(n.op))),
      ...fusedCases().filter((c) => c.program.graph.nodes.some((n) => CONV_OPS.has(n.op))),
    ];
    // the cases reach every tile shape, the forward with and without its k table, and split-K weight gradients
    const a = buildCuda(all.map((c) => c.program), 'conv_emu_tiles', { merge: false });
    const firsts = a.lowered.map((lp) => lp.kernels[0]);
    const tiles = new Set(firsts.map((k) => k.label.match(/\[conv_cuda\.ts (\d+x\d+) /)?.[1]));
    for (const t of ['128x128', '128x64', '128x32', '64x128', '64x64', '64x32']) expect(tiles.has(t), t).toBe(true);
    const fwd = firsts.filter((k) => k.op === 'conv2d');
    expect(fwd.some((k) => /ktab/.test(k.body)) && fwd.some((k) => !/ktab/.test(k.body))).toBe(true);
    expect(fwd.some((k) => /128x128/.test(k.label) && /ktab/.test(k.body))).toBe(true);
    expect(firsts.some((k) => k.op === 'conv2d_grad_weight' && /split K/.test(k.label))).toBe(true);
    // both k table kinds: the tap mask (forward, unit-stride input gradient) and the bounds test (strided input gradient)
    expect(firsts.some((k) => k.op === 'conv2d' && /amsk/.test(k.body)) && firsts.some((k) => k.op === 'conv2d_grad_input' && /amsk/.test(k.body))).toBe(true);
    expect(firsts.some((k) => k.op === 'conv2d_grad_input' && /te\.y >> 16/.test(k.body))).toBe(true);
    // 4-byte fragment reads by default (MPSC_CONV_FRAG=vec: the A/B test below)
    expect(firsts.some((k) => /float2|float4/.test(k.mma!.body))).toBe(false);
    // the 128-row tiles' three stages take dynamic shared memory: declared extern, launched with their bytes, the limit raised at create
    const dyn = firsts.filter((k) => k.tgmem > SMEM_STATIC_MAX);
    expect(dyn.length).toBeGreaterThan(0);
    const host = a.files[HOST_FILE];
    for (const k of dyn) {
      const name = a.alias.get(k.mma!.name) ?? k.mma!.name;
      expect(a.files[KERNELS_FILE]).toMatch(new RegExp(`${name}\\([^{]*\\{\\n  extern __shared__ __align__\\(16\\) float tg\\[\\];`));
      expect(host).toContain(`cudaFuncSetAttribute(${name}, cudaFuncAttributeMaxDynamicSharedMemorySize, ${k.tgmem})`);
      expect(host).toMatch(new RegExp(`${name}<<<dim3\\([^>]*\\), ${k.tgmem}, st>>>`));
    }
    const r = emulate(all);
    expect(r.problems).toEqual([]);
    expect(r.checked).toBe(2 * all.length);
    // the tensor-core variant really rounds its operands to TF32 (an fp32-exact result would mean the mma path did not run)
    expect(r.worst.mma).toBeGreaterThan(1e-5);
    expect(r.worst.fp32).toBeLessThan(1e-5);
  }, 600_000);

  it('run the relu-grads fuse.ts folds for CUDA (conv2d_grad_input store, global-avgpool / 2x2 max-pool gradients) as one kernel each, matching the reference', () => {
    const all = reluGradFoldCases();
    expect(all.map((c) => String(c.program.name)).sort()).toEqual(
      ['fuse_conv_grad_input_relu', 'fuse_conv_grad_input_relu_stride2', 'fuse_global_avgpool_grad_relu', 'fuse_maxpool2x2_grad_relu']);
    const a = buildCuda(all.map((c) => c.program), 'relu_grad_emu', { merge: false });
    for (const lp of a.lowered) {
      // folded: one node with relu_grad and its mask, one kernel (the conv's on conv_cuda.ts)
      expect(lp.program.graph.nodes.map((n) => [n.op, n.attrs.relu_grad])).toEqual([[lp.program.graph.nodes[0].op, true]]);
      expect(lp.kernels).toHaveLength(1);
      if (lp.kernels[0].op === 'conv2d_grad_input') expect(lp.kernels[0].label).toMatch(/conv_cuda\.ts .*fused relu-grad|fused relu-grad.*conv_cuda\.ts/);
    }
    const r = emulate(all, (b) => b, false);
    expect(r.problems).toEqual([]);
    expect(r.checked).toBe(2 * all.length);
    // without the mask the result is wrong (negative control: the fold really applies it)
    const unmasked = emulate(all, (b) => b.replace(/mask\[[^\]]*\] > 0\.0f/g, 'true').replace(/&& v(\d) > 0\.0f/g, ''), false);
    for (const c of all) expect(unmasked.problems.join('\n')).toMatch(new RegExp(`${c.program.name} `));
  }, 600_000);

  it('run the avgpool gradient with the conv bias gradient folded in (fuse.ts rule 9: avgpool_cuda.ts, the unmasked counts in the scratch region) as CUDA, matching the reference', () => {
    const all = poolGradSumsCases(makeRng(31));
    const a = buildCuda(all.map((c) => c.program), 'pool_sums_emu', { merge: false });
    for (const lp of a.lowered) {
      expect(lp.program.graph.nodes.map((n) => [n.op, n.attrs.c_sums])).toEqual([['global_avgpool_grad', true]]);
      expect(lp.kernels.map((k) => k.scratch !== undefined)).toEqual(lp.program.graph.nodes[0].attrs.relu_grad === true ? [true, true] : [false, false]);
    }
    const r = emulate(all, (b) => b, false);
    expect(r.problems).toEqual([]);
    expect(r.checked).toBe(2 * 2 * all.length);
    // negative control: each warp's count alone (no butterfly sum) undercounts every masked case's channel sums
    const lone = emulate(all, (b) => b.replace(/c = mpsc_warp_sum\(c\);/, ''), false);
    for (const c of all.filter((x) => /relu/.test(String(x.program.name)))) expect(lone.problems.join('\n')).toMatch(new RegExp(`${c.program.name} ${c.program.name}\\.dbias`));
    expect(lone.problems.join('\n')).not.toMatch(/\.dx /);
  }, 600_000);

  it('pool the conv output in the conv\'s store (fuse.ts rule 10: row tiles\' column sums, then their sum), or run the shared pool after the conv where the tiles straddle images, matching the reference in both variants', () => {
    const all = convPoolCases(makeRng(37));
    const a = buildCuda(all.map((c) => c.program), 'conv_pool_emu', { merge: false });
    const labels = a.lowered.map((lp) => lp.kernels.map((k) => k.label));
    for (const [i, lp] of a.lowered.entries()) {
      expect(lp.program.graph.nodes.map((n) => [n.op, n.attrs.pool_out])).toEqual([['conv2d', true]]);
      const folded = !/unfolded/.test(String(lp.program.name));
      expect(labels[i][0]).toMatch(folded ? /conv_cuda\.ts .* \+ pooled output/ : /conv_cuda\.ts \d+x\d+ implicit GEMM\]$/);
      expect(labels[i][1]).toMatch(folded ? /pooled output: sum of the row tiles/ : /global_avgpool/);
    }
    const r = emulate(all, (b) => b, false);
    expect(r.problems).toEqual([]);
    expect(r.checked).toBe(2 * 2 * all.length);
    // negative control: without the butterflies the pooled outputs miss lanes' rows (both variants), the conv outputs stay right
    const lone = emulate(all, (b) => b.replace(/ *v \+= __shfl_xor_sync\(0xffffffffu, v, (4|8|16)\);\n/g, ''), false);
    for (const c of all.filter((x) => !/unfolded/.test(String(x.program.name)))) {
      for (const v of ['fp32', 'mma']) expect(lone.problems.join('\n')).toMatch(new RegExp(`${c.program.name} ${c.program.name}\\.pooled \\(${v}\\)`));
    }
    expect(lone.problems.join('\n')).not.toMatch(/\.(y|z) \(/);
  }, 600_000);

  it('sum the input gradient per channel in the conv\'s store (fuse.ts rule 9 into conv2d_grad_input: row tiles\' column sums, then a block per channel), also on 256x64 tiles, or run the sum_to after a grouped one, matching the reference in both variants', () => {
    const all = convGradSumsCases(makeRng(41));
    const saved = process.env.MPSC_CONV_BM256;
    try {
      for (const bm256 of [undefined, '1']) {
        if (bm256) process.env.MPSC_CONV_BM256 = bm256;
        else delete process.env.MPSC_CONV_BM256;
        const a = buildCuda(all.map((c) => c.program), 'conv_grad_sums_emu', { merge: false });
        for (const lp of a.lowered) {
          expect(lp.program.graph.nodes.map((n) => [n.op, n.attrs.c_sums])).toEqual([['conv2d_grad_input', true]]);
          const grouped = /groups/.test(String(lp.program.name)), labels = lp.kernels.map((k) => k.label);
          expect(labels[0]).toMatch(grouped ? /conv_cuda\.ts \d+x\d+ implicit GEMM\]$/ : /conv_cuda\.ts .* \+ channel sums/);
          expect(labels[1]).toMatch(grouped ? /sum_to|one block per output/ : /channel sums: the row tiles in order/);
          // 256-row tiles where BN is 64 (the masked case's 40 channels)
          if (!grouped) expect(labels[0]).toMatch(bm256 && /relu/.test(String(lp.program.name)) ? /256x64/ : /64x\d+ implicit/);
        }
        const r = emulate(all, (b) => b, false);
        expect(r.problems).toEqual([]);
        expect(r.checked).toBe(2 * 2 * all.length);
      }
      // negative control: without the butterflies of the column partials the sums miss rows (both variants), dx stays right
      delete process.env.MPSC_CONV_BM256;
      const lone = emulate(all, (b) => b.replace(/ *v \+= __shfl_xor_sync\(0xffffffffu, v, (4|8|16)\);\n/g, ''), false);
      for (const c of all.filter((x) => !/groups/.test(String(x.program.name)))) {
        for (const v of ['fp32', 'mma']) expect(lone.problems.join('\n')).toMatch(new RegExp(`${c.program.name} ${c.program.name}\\.dbias \\(${v}\\)`));
      }
      expect(lone.problems.join('\n')).not.toMatch(/\.(dx|g) \(/);
    } finally {
      if (saved === undefined) delete process.env.MPSC_CONV_BM256;
      else process.env.MPSC_CONV_BM256 = saved;
    }
  }, 600_000);

  it('fails a kernel whose im2col offset is off by one, in both variants, by case name (negative control)', () => {
    const one = cudaConvCases().filter((c) => String(c.program.name) === 'tc_conv_stride2_pad0');
    expect(one).toHaveLength(1);
    // the copy's offset: the row's base plus the k table's part (arb + te.x), or the decomposed one (ab0 + ...)
    const r = emulate(one, (b) => b.replace(/\? x \+ \((ab0|arb) \+ /g, '? x + (1 + $1 + '));
    expect(r.problems.join('\n')).toMatch(/tc_conv_stride2_pad0 .*\(fp32\)/);
    expect(r.problems.join('\n')).toMatch(/tc_conv_stride2_pad0 .*\(mma\)/);
  }, 600_000);

  it('with the copies landing only at their wait: the 3-stage pipeline waits for each k step before it reads it; one stage less of waiting fails', () => {
    const some = [...cudaConvCases(), ...reluGradFoldCases()].filter((c) =>
      ['tc_conv_tile128', 'tc_conv_stride2_pad0_grad_input', 'tc_conv_wide_grad_weight', 'fuse_conv_grad_input_relu'].includes(String(c.program.name)));
    expect(some).toHaveLength(4);
    const r = emulate(some, (b) => b, true, true);
    expect(r.problems).toEqual([]);
    // waiting for all but two groups reads k step t before its copies land: every case fails, in both variants
    const early = emulate(some, (b) => b.replace(/mpsc_cp_async_wait<1>\(\)/g, 'mpsc_cp_async_wait<2>()'), true, true);
    for (const c of some) for (const v of ['fp32', 'mma']) expect(early.problems.join('\n')).toMatch(new RegExp(`${c.program.name} .*\\(${v}\\)`));
  }, 600_000);

  it('the A/B variants (MPSC_CONV_TAPS=0: the bounds-tested k table; MPSC_CONV_FRAG=vec: float2 / float4 fragment reads; MPSC_CONV_STAGES=2, copies landing at their wait, with MPSC_CONV_ROUND=rna and the 16-byte copies; MPSC_CONV_ROUND=add with MPSC_CONV_BM256=1 (the default seed CNN kernels\' 256x64 tiles at small sizes) and MPSC_CONV_VEC16=0) match the reference too', () => {
    const some = [...cudaConvCases(), ...reluGradFoldCases(), ...cudaLongCases()].filter((c) =>
      ['tc_conv_tile128', 'tc_conv_tile128_grad_input', 'tc_conv_stride2_pad0', 'tc_conv_wide', 'tc_conv_wide_grad_weight', 'fuse_conv_grad_input_relu',
        'tc_conv_deep_k_grad_weight', 'long_k_conv_grad_weight_groups'].includes(String(c.program.name)));
    expect(some).toHaveLength(8);
    const saved = { taps: process.env.MPSC_CONV_TAPS, frag: process.env.MPSC_CONV_FRAG, round: process.env.MPSC_CONV_ROUND, stages: process.env.MPSC_CONV_STAGES, bm256: process.env.MPSC_CONV_BM256, vec16: process.env.MPSC_CONV_VEC16 };
    try {
      process.env.MPSC_CONV_TAPS = '0';
      process.env.MPSC_CONV_FRAG = 'vec';
      process.env.MPSC_CONV_STAGES = '2';
      process.env.MPSC_CONV_ROUND = 'rna';
      process.env.MPSC_CONV_VEC16 = '1';
      const a = buildCuda(some.map((c) => c.program), 'conv_emu_ab', { merge: false });
      const bodies = a.lowered.map((lp) => lp.kernels[0].mma!.body);
      // 16-byte copies: the forwards' weights (K = 36, 180, 144: multiples of 4), the weight gradients' dy where OH * OW % 4 == 0
      // (deep_k: 3 x 4 pixels, K = 12 ending inside a k step; the grouped split one: 30 x 30), not where it is 33 x 35
      expect(a.lowered.filter((lp) => /mpsc_cp_async16f/.test(lp.kernels[0].mma!.body)).map((lp) => String(lp.program.name)).sort()).toEqual(
        ['long_k_conv_grad_weight_groups', 'tc_conv_deep_k_grad_weight', 'tc_conv_stride2_pad0', 'tc_conv_tile128', 'tc_conv_wide']);
      expect(a.lowered.find((lp) => String(lp.program.name) === 'long_k_conv_grad_weight_groups')!.kernels[0].label).toMatch(/split K/);
      expect(bodies.every((b) => /mpsc_tf32\(/.test(b) && !/mpsc_tf32_rn\(/.test(b))).toBe(true);
      expect(bodies.some((b) => /amsk/.test(b))).toBe(false);
      // the fragments read by vector: float4 (a row-mode A of two 16-row tiles), float2 (k-mode operands)
      expect(bodies.some((b) => /const float4 v/.test(b)) && bodies.some((b) => /const float2 v = \*reinterpret_cast<const float2\*>\(&bs/.test(b))).toBe(true);
      expect(bodies.some((b) => /te\.y >> 16/.test(b))).toBe(true);
      expect(bodies.every((b) => /mpsc_cp_async_wait<0>\(\)/.test(b) && !/mpsc_cp_async_wait<1>/.test(b))).toBe(true);
      const r = emulate(some, (b) => b, false, true);
      expect(r.problems).toEqual([]);
      expect(r.checked).toBe(2 * some.length);
      // MPSC_CONV_ROUND=add (operands rounded by adding half a TF32 ulp to the bits), still with the vector reads: the same results
      delete process.env.MPSC_CONV_TAPS;
      delete process.env.MPSC_CONV_STAGES;
      process.env.MPSC_CONV_VEC16 = '0';
      process.env.MPSC_CONV_ROUND = 'add';
      process.env.MPSC_CONV_BM256 = '1';
      const add = buildCuda(some.map((c) => c.program), 'conv_emu_add', { merge: false });
      expect(add.lowered.every((lp) => /__float_as_uint\(v\.x\) \+ 0x1000u/.test(lp.kernels[0].mma!.body) && !/mpsc_tf32/.test(lp.kernels[0].mma!.body))).toBe(true);
      expect(add.lowered.some((lp) => /mpsc_cp_async16f/.test(lp.kernels[0].mma!.body))).toBe(false);
      // MPSC_CONV_BM256=1: tc_conv_wide's forward (N 70: BN 64, partial row and column tiles) and the relu-masked input
      // gradient on 256x64 tiles
      expect(add.lowered.filter((lp) => /conv_cuda\.ts 256x64 /.test(lp.kernels[0].label)).map((lp) => String(lp.program.name)).sort()).toEqual(['fuse_conv_grad_input_relu', 'tc_conv_wide']);
      const r2 = emulate(some, (b) => b, false);
      expect(r2.problems).toEqual([]);
      expect(r2.worst.mma).toBeGreaterThan(1e-5);
    } finally {
      for (const [k, v] of [['MPSC_CONV_TAPS', saved.taps], ['MPSC_CONV_FRAG', saved.frag], ['MPSC_CONV_ROUND', saved.round], ['MPSC_CONV_STAGES', saved.stages], ['MPSC_CONV_BM256', saved.bm256], ['MPSC_CONV_VEC16', saved.vec16]] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  }, 600_000);

  it('the unit-stride input gradient\'s dy in runs of 4 rows (the default; MPSC_CONV_GI_VEC16=0 turns it off: 16-byte copies where inside and aligned, 4-byte at the edges) matches the reference at odd sizes, also on 256x64 tiles; an unchecked alignment aborts and an unchecked edge fails (negative controls)', () => {
    const cases = giVec16Cases();
    const saved = { gi: process.env.MPSC_CONV_GI_VEC16, bm256: process.env.MPSC_CONV_BM256 };
    const runs = (lp: ReturnType<typeof buildCuda>['lowered'][number]) => /aall >> q/.test(lp.kernels[0].mma!.body) && /aall >> q/.test(lp.kernels[0].body);
    try {
      process.env.MPSC_CONV_GI_VEC16 = '0';
      expect(buildCuda(cases.map((c) => c.program), 'conv_emu_gi_off', { merge: false }).lowered.some(runs)).toBe(false);
      // part of the CUDA build key; a bad value refused
      const model = checkFile(path.resolve(__dirname, '../bench/seed_cnn_b32_64px_adam.model'));
      const ps = buildPrograms(model, { batch: model.train.batch });
      const off = cudaInputsKey(ps);
      process.env.MPSC_CONV_GI_VEC16 = 'yes';
      expect(() => buildCuda(cases.map((c) => c.program), 'conv_emu_gi_bad', { merge: false })).toThrow(/MPSC_CONV_GI_VEC16 must be one of '0', '1', got 'yes'/);
      delete process.env.MPSC_CONV_GI_VEC16;  // the default: on
      expect(cudaInputsKey(ps)).not.toBe(off);
      for (const bm256 of [undefined, '1']) {
        if (bm256) process.env.MPSC_CONV_BM256 = bm256;
        else delete process.env.MPSC_CONV_BM256;
        const a = buildCuda(cases.map((c) => c.program), 'conv_emu_gi', { merge: false });
        expect(a.lowered.every(runs)).toBe(true);
        expect(a.lowered.every((lp) => /mpsc_cp_async16f\(d, dy \+ o, true\)/.test(lp.kernels[0].mma!.body))).toBe(true);
        expect(a.lowered.filter((lp) => /conv_cuda\.ts 256x64 /.test(lp.kernels[0].label)).map((lp) => String(lp.program.name))).toEqual(bm256 ? ['conv_gi_vec16_sums_relu'] : []);
        const r = emulate(cases, (b) => b, false);
        expect(r.problems).toEqual([]);
        expect(r.checked).toBe(2 * 6);
      }
      // without the alignment test a 16-byte copy of a misaligned run aborts the emulator; with `any` for `all`, the runs
      // partly outside the image (padding 0: the first column's left taps) read neighbours' values
      expect(() => emulate(cases, (b) => b.replace(/ && \(o & 3\) == 0/g, ''), false)).toThrow();
      // the 16-byte copies run: zero-filled instead, every case fails
      const zero = emulate(cases, (b) => b.replace(/mpsc_cp_async16f\(d, dy \+ o, true\)/g, 'mpsc_cp_async16f(d, dy, false)'), false);
      expect(new Set(zero.problems.map((p) => p.split(' ')[0])).size).toBe(cases.length);
      const edge = emulate(cases, (b) => b.replace(/\(\(aall >> q\)/g, '((aany >> q)'), false);
      expect(edge.problems.some((p) => /^conv_gi_vec16_pad0 .* \(fp32\)/.test(p)) && edge.problems.some((p) => /^conv_gi_vec16_pad0 .* \(mma\)/.test(p))).toBe(true);
    } finally {
      for (const [k, v] of [['MPSC_CONV_GI_VEC16', saved.gi], ['MPSC_CONV_BM256', saved.bm256]] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  }, 600_000);

  it('the TF32 operand roundings (MPSC_CONV_ROUND) as compiled: rna and rn round to nearest (ties away / to even) and keep NaN; add loses the canonical NaN (negative control)', () => {
    // bit patterns: signed zeros, denormals (smallest, rounding into the normals), ties and their neighbours (odd and even
    // TF32 lsb), values rounding to the next binade, max-finite (rounding to infinity), infinities, NaNs (quiet, canonical
    // 0x7fffffff and its negation, payloads only in the dropped low 13 bits, all-ones TF32 mantissa), then random bits
    const special = [
      0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00000fff, 0x00001000, 0x00001fff, 0x007ff000, 0x007fffff, 0x807fffff, 0x00800000,
      0x3f800000, 0x3f800fff, 0x3f801000, 0x3f801001, 0x3f803000, 0x3f802fff, 0xbf801000, 0xbf803000, 0x3fffefff, 0x3ffff000, 0xbffff000,
      0x7f7fefff, 0x7f7ff000, 0x7f7fffff, 0xff7ff000, 0xff7fffff, 0x7f800000, 0xff800000,
      0x7fc00000, 0xffc00000, 0x7fffffff, 0xffffffff, 0x7ffff000, 0xfffff000, 0x7fffefff, 0x7f800001, 0x7f800fff, 0x7f801000, 0x7f802000, 0xff800001, 0xffbfffff,
    ];
    let seed = 12345;
    const rnd = () => { seed = (Math.imul(seed, 1103515245) + 12345) >>> 0; return seed; };
    const bits = Uint32Array.from([...special, ...Array.from({ length: 20000 }, () => ((rnd() & 0xffff0000) | (rnd() >>> 16)) >>> 0)]);
    const modes = ['rna', 'add', 'rn'] as const;
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'conv-round-'));
    try {
      // each mode's rounding exactly as conv_cuda.ts emits it into the kernels (roundExpr), compiled against the emulator's helpers
      const fns = modes.map((m) => `static uint r_${m}(float v) { return ${roundExpr(m, 'v')}; }`);
      fs.writeFileSync(path.join(dir, 'r.cpp'), [`#include "${HARNESS}"`, '#include <cstdio>', ...fns,
        `int main(int, char** argv) {\n  FILE* in = std::fopen(argv[1], "rb"); FILE* out = std::fopen(argv[2], "wb");\n  uint b;\n` +
        `  while (std::fread(&b, 4, 1, in) == 1) {\n    float v;\n    std::memcpy(&v, &b, 4);\n    const uint r[] = {${modes.map((m) => `r_${m}(v)`).join(', ')}};\n    std::fwrite(r, 4, ${modes.length}, out);\n  }\n  std::fclose(out);\n  return 0;\n}`].join('\n') + '\n');
      fs.writeFileSync(path.join(dir, 'in.bin'), Buffer.from(bits.buffer));
      execFileSync('g++', ['-std=c++20', '-O1', '-pthread', '-w', path.join(dir, 'r.cpp'), '-o', path.join(dir, 'r')], { stdio: 'pipe' });
      execFileSync(path.join(dir, 'r'), [path.join(dir, 'in.bin'), path.join(dir, 'out.bin')], { stdio: 'pipe' });
      const ob = fs.readFileSync(path.join(dir, 'out.bin'));
      const out = new Uint32Array(ob.buffer, ob.byteOffset, ob.length / 4);
      expect(out.length).toBe(bits.length * modes.length);
      const f32 = new Float32Array(1), u32 = new Uint32Array(f32.buffer);
      const asFloat = (b: number) => { u32[0] = b; return f32[0]; };
      const asBits = (x: number) => { f32[0] = x; return u32[0]; };
      const top = (b: number) => (b & 0xffffe000) >>> 0;  // what the tensor core reads
      const isNan = (b: number) => ((b >>> 0) & 0x7fffffff) > 0x7f800000;
      // the nearest TF32 value of a finite float (10 fraction bits; denormals on the same grid as the smallest normals),
      // ties away from zero (cvt.rna) or to even (cvt.rn), computed in float64 independently of any bit trick
      const nearest = (b: number, even: boolean) => {
        const v = asFloat(b), a = Math.abs(v);
        if (a === 0) return b >>> 0;
        const q = 2 ** (Math.max(Math.floor(Math.log2(a)), -126) - 10);
        const r = a / q, f = Math.floor(r);
        const n = r - f > 0.5 || (r - f === 0.5 && (!even || f % 2 === 1)) ? f + 1 : f;
        return asBits(Math.sign(v) * n * q);
      };
      // cvt.rna as ptxas emits it for sm_90 (FSETP.GEU |x|, +INF; the add predicated on a finite x; the low 13 bits masked)
      const rna = (b: number) => top(((b & 0x7fffffff) >>> 0) < 0x7f800000 ? b + 0x1000 : b);
      const bad: string[] = [];
      const hex = (b: number) => '0x' + (b >>> 0).toString(16).padStart(8, '0');
      bits.forEach((b, i) => {
        const [rnaOut, add, rn] = modes.map((_, m) => out[i * modes.length + m]);
        const finite = ((b & 0x7fffffff) >>> 0) < 0x7f800000;
        if (finite && rna(b) !== nearest(b, false)) bad.push(`model rna ${hex(b)}: ${hex(rna(b))} vs ${hex(nearest(b, false))}`);
        if (rnaOut !== rna(b)) bad.push(`rna ${hex(b)}: ${hex(rnaOut)} vs ${hex(rna(b))}`);
        if (finite && top(rn) !== nearest(b, true)) bad.push(`rn ${hex(b)}: ${hex(rn)} vs ${hex(nearest(b, true))}`);
        if (!finite && !isNan(b) && top(rn) !== b) bad.push(`rn ${hex(b)}: ${hex(rn)}`);
        if (isNan(b) && !isNan(top(rn))) bad.push(`rn ${hex(b)}: NaN lost (${hex(rn)})`);
        if (finite && top(add) !== rna(b)) bad.push(`add ${hex(b)}: ${hex(add)} vs ${hex(rna(b))}`);
      });
      expect(bad.slice(0, 20)).toEqual([]);
      // NaN stays NaN (rna, rn) wherever the tensor core can read one: every NaN whose top 19 bits are a NaN (quiet NaNs,
      // the canonical 0x7fffffff and the 0xffffffff a negation makes); cvt.rna reads 0x7f800001..0x7f801fff (payload only
      // in the dropped bits) as infinity, as the tensor core reads them unrounded
      const at = (b: number, m: number) => out[bits.indexOf(b) * modes.length + m];
      for (const b of [0x7fc00000, 0xffc00000, 0x7fffffff, 0xffffffff, 0x7ffff000, 0xfffff000, 0x7f802000, 0xffbfffff]) {
        expect(isNan(top(at(b, 0))), `rna ${hex(b)}`).toBe(true);
        expect(isNan(top(at(b, 2))), `rn ${hex(b)}`).toBe(true);
      }
      expect(top(at(0x7f800001, 0))).toBe(0x7f800000);
      // the negative control: the plain add turns the canonical NaN into -0 and its negation into +0
      expect(top(at(0x7fffffff, 1))).toBe(0x80000000);
      expect(top(at(0xffffffff, 1))).toBe(0);
      // ties: away from zero (rna) vs to even (rn) differ where the TF32 lsb is 0
      expect([top(at(0x3f801000, 0)), top(at(0x3f801000, 2))]).toEqual([0x3f802000, 0x3f800000]);
      expect([top(at(0x3f803000, 0)), top(at(0x3f803000, 2))]).toEqual([0x3f804000, 0x3f804000]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('propagate NaN through the TF32 rounding: the canonical NaN 0x7fffffff and its negation in an operand give NaN exactly where the float64 reference has it (MPSC_CONV_ROUND=add loses them: negative control)', () => {
    // the forward (x: the row-mode im2col A; the NaNs' windows reach 2 x 2 outputs each), the input gradient (dy gathered)
    // and the weight gradient (dy: the k-mode A): 0x7fffffff at element 0 and 0xffffffff at the last of input 0
    const names = ['tc_conv_stride2_pad0', 'tc_conv_stride2_pad0_grad_input', 'tc_conv_stride2_pad0_grad_weight'];
    const some = cudaConvCases().filter((c) => names.includes(String(c.program.name)));
    expect(some).toHaveLength(3);
    const first = some.map((c) => c.program.inputs[0]);
    const data = some.map((c, i) => {
      const d = Float64Array.from(c.data.get(first[i])!);
      d[0] = NaN;
      d[d.length - 1] = NaN;
      return { ...c, data: new Map([...c.data, [first[i], d]]) };
    });
    const refNan = data.map((c) => Array.from(reference(c, SCALARS).get(c.check[0])!, (x) => Number.isNaN(x)));
    for (const r of refNan) expect(r.filter(Boolean).length).toBeGreaterThan(0);
    const run = () => {
      const lost: string[] = [];
      emulate(data, (b) => b, true, false, {
        bits: (i, name, u) => {
          if (name !== data[i].program.graph.values[first[i]].name) return;
          u[0] = 0x7fffffff;
          u[u.length - 1] = 0xffffffff;
        },
        raw: (i, _name, variant, v) => {
          const bad = refNan[i].findIndex((nan, j) => nan !== Number.isNaN(v[j]));
          if (bad >= 0) lost.push(`${data[i].program.name} (${variant}): element ${bad} ${v[bad]}, reference ${refNan[i][bad] ? 'NaN' : 'finite'}`);
        },
      });
      return lost;
    };
    const saved = process.env.MPSC_CONV_ROUND;
    try {
      for (const r of [undefined, 'rna']) {
        // the default (cvt.rn) and cvt.rna
        if (r) process.env.MPSC_CONV_ROUND = r;
        else delete process.env.MPSC_CONV_ROUND;
        expect(run(), r ?? 'default').toEqual([]);
      }
      process.env.MPSC_CONV_ROUND = 'add';
      const lost = run();
      for (const n of names) expect(lost.join('\n')).toMatch(new RegExp(`${n} \\(mma\\)`));
      expect(lost.join('\n')).not.toMatch(/\(fp32\)/);
    } finally {
      if (saved === undefined) delete process.env.MPSC_CONV_ROUND;
      else process.env.MPSC_CONV_ROUND = saved;
    }
  }, 600_000);

  it('refuses PTX the emulator does not know (kernels reach PTX only through its helpers)', () => {
    expect(emulable('mpsc_cp_async_commit();')).toBe('mpsc_cp_async_commit();');
    expect(() => emulable('asm volatile("mma.sync.aligned.m16n8k8;" ::);')).toThrow(/PTX the emulator does not know/);
  });
});

describe.skipIf(!NV)('conv_cuda.ts kernels under ptxas', () => {
  it('compile for sm_90a without register spills or stack, each TF32 kernel within 2 blocks of 256 threads per SM (128 registers)', () => {
    ptxasCheck(buildCuda(cudaConvCases().map((c) => c.program), 'conv_ptxas', { merge: false }));
  }, 300_000);

  it('the seed CNN\'s conv kernels too (the default 256x64 grad_input and 2-stage 128x128 kernels reach no small case), also with MPSC_CONV_VEC16=0 and with MPSC_CONV_GI_VEC16=0', () => {
    const model = checkFile(path.resolve(__dirname, '../bench/seed_cnn_b32_64px_adam.model'));
    const saved = process.env.MPSC_CONV_VEC16, savedGi = process.env.MPSC_CONV_GI_VEC16;
    try {
      for (const v16 of [undefined, '0', 'gioff']) {
        if (v16 === '0') process.env.MPSC_CONV_VEC16 = v16;
        else delete process.env.MPSC_CONV_VEC16;
        if (v16 === 'gioff') process.env.MPSC_CONV_GI_VEC16 = '0';
        else delete process.env.MPSC_CONV_GI_VEC16;
        const a = buildCuda([buildPrograms(model, { batch: model.train.batch }).train_step], 'seed_ptxas');
        const convs = a.lowered[0].kernels.filter((k) => /conv_cuda\.ts/.test(k.label));
        const heads = convs.map((k) => k.body.match(/\d+x\d+ tile per block of 256 threads, k steps of 16 in \d cp\.async stages/)?.[0]);
        expect(heads.filter((h) => /256x64 .* 2 cp/.test(h ?? '')).length).toBe(1);
        expect(heads.filter((h) => /128x128 .* 2 cp/.test(h ?? '')).length).toBe(2);
        // 16-byte copies: conv 2's weights (forward), both weight gradients' dy and (unless MPSC_CONV_GI_VEC16=0)
        // the grad_input's dy in runs of 4 rows (64 x 64 planes); none with MPSC_CONV_VEC16=0
        expect(convs.filter((k) => /mpsc_cp_async16f/.test(k.mma!.body)).length).toBe(v16 === '0' ? 0 : v16 === 'gioff' ? 3 : 4);
        expect(convs.filter((k) => /aall >> q/.test(k.mma!.body)).map((k) => k.op)).toEqual(v16 === undefined ? ['conv2d_grad_input'] : []);
        ptxasCheck(a);
      }
    } finally {
      if (saved === undefined) delete process.env.MPSC_CONV_VEC16;
      else process.env.MPSC_CONV_VEC16 = saved;
      if (savedGi === undefined) delete process.env.MPSC_CONV_GI_VEC16;
      else process.env.MPSC_CONV_GI_VEC16 = savedGi;
    }
  }, 300_000);
});

/** ptxas -v of the built kernels for sm_90a (no warnings): every conv_cuda.ts kernel without spills or stack, its TF32 variant within 128 registers */
function ptxasCheck(a: ReturnType<typeof buildCuda>): void {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'conv-ptxas-'));
  fs.writeFileSync(path.join(dir, 'k.cu'), a.files[KERNELS_FILE]);
  const r = spawnSync(NV!.nvcc, [...NVCC_SM90A, '-fmad=true', '-c', path.join(dir, 'k.cu'), '-o', path.join(dir, 'k.o'), '-Werror', 'all-warnings', '-Xptxas', '-v'], { encoding: 'utf8' });
  fs.rmSync(dir, { recursive: true, force: true });
  expect(r.status, r.stderr).toBe(0);
  // ptxas -v: "Compiling entry function 'NAME'", then "N bytes stack frame, N bytes spill stores, N bytes spill loads", then "Used N registers"
  const conv = new Set(a.lowered.flatMap((lp) => lp.kernels).filter((k) => /conv_cuda\.ts/.test(k.label)).flatMap((k) => [k.name, k.mma?.name ?? '']));
  const seen = new Map<string, { stack: number; spills: number; regs: number }>();
  let cur = '';
  for (const line of r.stderr.split('\n')) {
    const e = line.match(/Compiling entry function '(\w+)'/);
    if (e) cur = e[1];
    const f = line.match(/(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads/);
    if (f && conv.has(cur)) seen.set(cur, { stack: +f[1], spills: +f[2] + +f[3], regs: 0 });
    const u = line.match(/Used (\d+) registers/);
    if (u && seen.has(cur)) seen.get(cur)!.regs = +u[1];
  }
  expect(seen.size).toBe([...conv].filter((n) => n && !a.alias.has(n)).length);
  for (const [name, v] of seen) {
    expect(v.spills, name).toBe(0);
    expect(v.stack, name).toBe(0);
    if (name.endsWith('_mma')) expect(v.regs, name).toBeLessThanOrEqual(128);
  }
}
