/**
 * layernorm_cuda.ts's layernorm_grad kernels in lnGrad's shared-memory forms (MPSC_CUDA_LN_GRAD=smem: one block of up to
 * 24 warps per SM; smem2: two blocks of 12), each warp keeping its lanes' per-column weight / bias (/ sum_out) partials
 * in its own slots of shared memory instead of registers, executed on the CPU thread emulator
 * (test/native/cuda_thread_emu.h: a fiber per CUDA thread, real barriers, warp shuffles) without a GPU, the finish
 * (blockSumsFinish) included, and compared with the float64 reference within 1e-4 (cuda_check's tolerance): with and
 * without the weight, the residual-gradient add (fuse.ts rule 6), its column sums (rule 7), its 16-bit copy (rule 11;
 * checked bitwise against the kernel's own f32 sum rounded to bf16), a bf16 dy (GPT-2's), block counts under, over and
 * not a multiple of 32, one block (the gradients stored by the block), rows split unevenly over the warps, D = 768,
 * 1024 and D not a multiple of 32. Negative controls: each warp skipping its last row, and the block's last warp left
 * out of its sums, fail. Where nvcc is found, the forms' kernels go through ptxas for sm_90a: no spills, no stack.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildCuda, KERNELS_FILE } from '../compiler/codegen-cuda/index.js';
import { lnGrad } from '../compiler/codegen-cuda/layernorm_cuda.js';
import type { KernelSpec } from '../compiler/kernels/kernel_types.js';
import { makeRng, relError, type Rng } from '../compiler/reference/fixtures.js';
import { numel, type Program } from '../compiler/ir/graph.js';
import { roundToHalf } from '../compiler/reference/half.js';
import { findNvcc } from '../runtime/cuda/session.js';
import { caseGraph, cudaLongCases, layernormGradAddCase, layernormPair } from './cuda_cases.js';
import { reference, type OpCase } from './metal_harness.js';
import { NVCC_SM90A } from './nvcc_target.js';
import { withEnv } from './env_helpers.js';
import { emuKernelSource } from './warp_shim_build.js';

const EMU = path.resolve(__dirname, 'native/cuda_thread_emu.h');
const hasGxx = spawnSync('g++', ['--version']).status === 0;
const NV = findNvcc();
const TOL = 1e-4;

// the 16-bit types and conversions the generated kernels use (cuda_thread_emu.h has none): round to nearest even
const HALF_TYPES = `struct __nv_bfloat16 { unsigned short b; };
struct __half { unsigned short b; };
static inline float __bfloat162float(__nv_bfloat16 h) { uint u = ((uint)h.b) << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { uint u; std::memcpy(&u, &f, 4); return {(unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)}; }
static inline float __half2float(__half h) { _Float16 x; std::memcpy(&x, &h.b, 2); return (float)x; }
static inline __half __float2half_rn(float f) { _Float16 x = (_Float16)f; __half h; std::memcpy(&h.b, &x, 2); return h; }`;

/** the cases: layernorm_grad alone and with rules 6 / 7 / 11 folded in, over several block counts */
function cases(): OpCase[] {
  const long = cudaLongCases().filter((c) => /^(long_layernorm_grad(_noweight|_rows_per_warp)?|layernorm_grad_add_(768|333|1024|bias_333|bias_65|bias_768))$/.test(String(c.program.name)));
  const rng = makeRng(3030);
  const pairs = [...layernormPair(rng, 'ln_768', [5, 7], 768, true), ...layernormPair(rng, 'ln_333', [3, 11], 333, false)].filter((c) => /_grad$/.test(String(c.program.name)));
  return [...long, ...pairs, gptCase(rng, 'ln_gpt_768', [5, 700], 768), gptCase(rng, 'ln_gpt_333', [3, 211], 333)];
}

/**
 * GPT-2's form of layernormGradAddCase (cuda_cases.ts): dy a bf16 activation (here cast from an f32 input; in GPT-2 the
 * product's output), out = r + layernorm_grad's dx (rule 6), its column sums (rule 7) and its bf16 copy (rule 11)
 */
function gptCase(rng: Rng, name: string, rows: number[], D: number): OpCase {
  const { b, data, input } = caseGraph(rng, name);
  const x = [...rows, D];
  const dy32 = input('dy32', x, -1, 1), xv = input('x', x, -2, 2), w = input('w', [D], 0.5, 1.5);
  const mean = input('mean', rows, -0.2, 0.2), rstd = input('rstd', rows, 0.5, 2), r = input('r', x, -1, 1);
  const act = (n: string, shape: number[], dtype: 'f32' | 'bf16' = 'f32') => b.value(`${name}.${n}`, dtype, shape, 'activation');
  const dy = act('dy', x, 'bf16'), dx = act('dx', x), dw = act('dw', [D]), db = act('db', [D]), out = act('out', x), dsum = act('dlinear_bias', [D]);
  const half = act('out_half', x, 'bf16');
  b.node('cast', [dy32], [dy], { to: 'bf16' }, 'dy_cast');
  b.node('layernorm_grad', [dy, xv, w, mean, rstd], [dx, dw, db], {}, 'ln');
  b.node('binary', [r, dx], [out], { fn: 'add' }, 'add');
  b.node('sum_to', [out], [dsum], { shape: [D], axes: rows.map((_, i) => i) }, 'bias_grad');
  b.node('cast', [out], [half], { to: 'bf16' }, 'cast');
  const program = { name, batch: 1, graph: b.graph, inputs: [dy32, xv, w, mean, rstd, r], outputs: [] } as unknown as Program;
  return { program, data, check: [out, dw, db, dsum, half] };
}

/** the negative controls' cases (42 blocks of one row each at most, 2 blocks at D = 1024, one block of 15 rows, GPT-2's form in 132 blocks, 1-2 rows per warp) and smem2's */
const SOME = /^(long_layernorm_grad|layernorm_grad_add_1024|layernorm_grad_add_bias_65|ln_gpt_768)$/;
const SOME2 = /^(long_layernorm_grad_rows_per_warp|layernorm_grad_add_bias_65|ln_gpt_768|ln_gpt_333)$/;

const C_TYPE = { f32: 'float', bf16: '__nv_bfloat16', f16: '__half', i32: 'int' } as const;

/**
 * each case's worst relative error over its checked f32 values (NaN: a value missing), and whether its 16-bit copy (rule
 * 11) is bitwise the kernel's own f32 sum rounded (true where it has none), after `edit` on every kernel body
 */
function runOnEmulator(all: OpCase[], edit: (body: string) => string = (b) => b): { name: string; err: number; half: boolean }[] {
  const built = buildCuda(all.map((c) => c.program), 'ln_emu', { merge: false });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ln-emu-'));
  const id = (s: string) => s.replace(/[^A-Za-z0-9_]/g, '_');
  const lines: string[] = [`#include "${EMU}"`, '#include <string>', HALF_TYPES,
    'template <class T> static T to_t(float f);',
    'template <> float to_t<float>(float f) { return f; }',
    'template <> __nv_bfloat16 to_t<__nv_bfloat16>(float f) { return __float2bfloat16_rn(f); }',
    'template <> __half to_t<__half>(float f) { return __float2half_rn(f); }',
    'static float of_t(float f) { return f; }',
    'static float of_t(__nv_bfloat16 h) { return __bfloat162float(h); }',
    'static float of_t(__half h) { return __half2float(h); }',
    'template <class T> static std::vector<T> rd(const std::string& f, size_t n) { std::vector<float> v(n, 0.0f); if (FILE* p = std::fopen(f.c_str(), "rb")) { if (std::fread(v.data(), 4, n, p) != n) std::abort(); std::fclose(p); } std::vector<T> t(n); for (size_t i = 0; i < n; i++) t[i] = to_t<T>(v[i]); return t; }',
    'template <class T> static void wr(const std::string& f, const std::vector<T>& t) { std::vector<float> v(t.size()); for (size_t i = 0; i < t.size(); i++) v[i] = of_t(t[i]); FILE* p = std::fopen(f.c_str(), "wb"); std::fwrite(v.data(), 4, v.size(), p); std::fclose(p); }'];
  const seen = new Set<string>();
  const source = (k: KernelSpec) => {
    if (seen.has(k.name)) return;
    seen.add(k.name);
    // dynamic shared memory (past 48 KiB) as the emulator's static block-shared array of the same size
    lines.push(emuKernelSource(k, k, edit));
  };
  const calls: string[] = [];
  all.forEach((c, i) => {
    const lp = built.lowered[i];
    const g = lp.program.graph;
    const byName = new Map(c.program.graph.values.map((v) => [v.name, v.id]));
    const vals = new Map<string, { n: number; t: string }>();
    for (const k of lp.kernels) for (const a of k.args) vals.set(g.values[a.value].name, { n: numel(g.values[a.value].shape), t: C_TYPE[g.values[a.value].dtype] });
    let fn = `static void case_${i}(const std::string& d) {\n  StepParams sp{0.05f, 3, 987654321u, 5u};\n`;
    fn += `  std::vector<float> scratch(${Math.max(1, ...lp.kernels.map((k) => (k.scratch ?? 0) / 4))});\n`;
    for (const [name, { n, t }] of vals) {
      const data = c.data.get(byName.get(name)!);
      if (data) fs.writeFileSync(path.join(dir, `${i}_${id(name)}`), Float32Array.from(data));
      fn += `  std::vector<${t}> v_${id(name)} = rd<${t}>(d + "/${i}_${id(name)}", ${n});\n`;
    }
    for (const k of lp.kernels) {
      source(k);
      const args = [...k.args.map((a) => `v_${id(g.values[a.value].name)}.data()`), ...(/\bmpsc_scratch\b/.test(k.body) ? ['scratch.data()'] : []), '&sp'];
      fn += `  emu_launch(uint3{${k.groups.join('u, ')}u}, uint3{${k.tgsize.join('u, ')}u}, [&] { ${k.name}(${args.join(', ')}); });\n`;
    }
    for (const v of c.check) fn += `  wr(d + "/${i}_out_${v}", v_${id(c.program.graph.values[v].name)});\n`;
    lines.push(fn + '}');
    calls.push(`case_${i}(argv[1]);`);
  });
  lines.push(`int main(int, char** argv) {\n  ${calls.join('\n  ')}\n  return 0;\n}`);
  fs.writeFileSync(path.join(dir, 'emu.cpp'), lines.join('\n\n') + '\n');
  try {
    execFileSync('g++', ['-std=c++20', '-O1', '-pthread', '-w', path.join(dir, 'emu.cpp'), '-o', path.join(dir, 'emu')], { stdio: 'pipe' });
    execFileSync(path.join(dir, 'emu'), [dir], { stdio: 'pipe' });
    return all.map((c, i) => {
      const ref = reference(c, { lr: 0.05, t: 3, seed: 987654321, counter: 5 });
      const got = (v: number) => {
        const b = fs.readFileSync(path.join(dir, `${i}_out_${v}`));
        return Float64Array.from(new Float32Array(b.buffer, b.byteOffset, b.length / 4));
      };
      const name = (v: number) => c.program.graph.values[v].name;
      const halves = c.check.filter((v) => /\.out_half$/.test(name(v)));
      const err = Math.max(...c.check.filter((v) => !halves.includes(v)).map((v) => {
        const e = relError(got(v), ref.get(v)!);
        return Number.isNaN(e) ? Infinity : e;
      }));
      // the 16-bit copy: the kernel's own f32 sum `out`, rounded once
      const half = halves.every((v) => {
        const out = got(c.check.find((x) => name(x) === name(v).replace(/_half$/, ''))!), h = got(v);
        return h.every((x, j) => x === roundToHalf(out[j], 'bf16'));
      });
      return { name: String(c.program.name), err, half };
    });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** per case: the first kernel's warps per block and blocks (its label), and its rows */
function layouts(all: OpCase[]): { W: number; G: number; rows: number }[] {
  const built = buildCuda(all.map((c) => c.program), 'ln_emu_labels', { merge: false });
  return built.lowered.map((lp, i) => {
    const k = lp.kernels.find((x) => /partials in shared memory/.test(x.label));
    const m = k?.label.match(/(\d+) warps per block, (\d+) blocks?\]/);
    if (!m) throw new Error(`${all[i].program.name}: no shared-memory layernorm_grad kernel (${lp.kernels.map((x) => x.label).join(' | ')})`);
    const ln = lp.program.graph.nodes.find((n) => n.op === 'layernorm_grad')!;
    const x = lp.program.graph.values[ln.inputs[1]].shape;
    return { W: Number(m[1]), G: Number(m[2]), rows: numel(x) / x[x.length - 1] };
  });
}

describe('MPSC_CUDA_LN_GRAD', () => {
  it("defaults to 'regs' (the register partials); takes smem and smem2; refuses others", () => {
    expect(withEnv('MPSC_CUDA_LN_GRAD', undefined, lnGrad)).toBe('regs');
    expect(withEnv('MPSC_CUDA_LN_GRAD', 'smem', lnGrad)).toBe('smem');
    expect(withEnv('MPSC_CUDA_LN_GRAD', 'smem2', lnGrad)).toBe('smem2');
    expect(() => withEnv('MPSC_CUDA_LN_GRAD', 'shared', lnGrad)).toThrow(/MPSC_CUDA_LN_GRAD must be one of 'regs', 'smem', 'smem2'/);
  });
});

describe.skipIf(!hasGxx)('layernorm_cuda.ts layernorm_grad with its partials in shared memory (MPSC_CUDA_LN_GRAD) on the CPU thread emulator', () => {
  const all = cases();
  it('smem: matches the float64 reference within 1e-4 over every option and block count; fails when a warp skips its last row or a block its last warp', () => withEnv('MPSC_CUDA_LN_GRAD', 'smem', () => {
    const L = layouts(all);
    // one block, under 32, over 32 and not a multiple, the grid's cap (132 blocks of 24 warps); D = 1024's fewer warps (registers)
    expect(L.some((x) => x.G === 1) && L.some((x) => x.G > 1 && x.G < 32) && L.some((x) => x.G > 32 && x.G % 32 !== 0) && L.some((x) => x.G === 132)).toBe(true);
    expect(L.some((x) => x.W === 24) && L.some((x) => x.W < 24)).toBe(true);
    // rows split unevenly over the grid's warps (some warps one more row), and warps of two rows or more
    expect(L.some((x) => x.rows % (x.G * x.W) !== 0 && x.rows > x.G * x.W)).toBe(true);
    const r = runOnEmulator(all);
    expect(r).toHaveLength(all.length);
    expect(r.filter((x) => !(x.err < TOL && x.half))).toEqual([]);
    // negative controls (on a few cases: one block, several, D = 1024's two): every warp's last row skipped (dx and the
    // sums), and the block's last warp left out of its sums (fails wherever that warp has rows in some block: warp W - 1
    // of block b is the grid's warp (W - 1) G + b)
    const some = all.map((c, i) => ({ c, i })).filter(({ c }) => SOME.test(String(c.program.name)));
    expect(some).toHaveLength(4);
    const cs = some.map((x) => x.c);
    expect(runOnEmulator(cs, (b) => b.replace('j < nr;', 'j + 1u < nr;')).filter((x) => x.err > TOL)).toHaveLength(cs.length);
    const lastWarp = runOnEmulator(cs, (b) => b.replace(/for \(uint wi = 0u; wi < (\d+)u; \+\+wi\)/, (_, w) => `for (uint wi = 0u; wi < ${Number(w) - 1}u; ++wi)`));
    expect(lastWarp.map((x) => x.err > TOL)).toEqual(some.map(({ i }) => (L[i].W - 1) * L[i].G < L[i].rows));
    expect(lastWarp.map((x) => x.err > TOL)).toContain(false);
  }), 60_000);

  it('smem2 (two blocks of 12 warps per SM) matches too', () => withEnv('MPSC_CUDA_LN_GRAD', 'smem2', () => {
    const cs = all.filter((c) => SOME2.test(String(c.program.name)));
    expect(cs).toHaveLength(4);
    const L = layouts(cs);
    expect(L.some((x) => x.W === 12) && L.some((x) => x.G === 264) && L.some((x) => x.G < 32)).toBe(true);
    expect(runOnEmulator(cs).filter((x) => !(x.err < TOL && x.half))).toEqual([]);
  }), 60_000);
});

describe.skipIf(!NV)('layernorm_grad in shared-memory form under ptxas', () => {
  it('compiles for sm_90a without register spills or stack (D = 768 and 333 with every option, 1024, 65, 45, 37)', async () => {
    // both forms' sources, compiled at once
    const runs = ['smem', 'smem2'].map((form) => withEnv('MPSC_CUDA_LN_GRAD', form, () => {
      const built = buildCuda(cases().filter((c) => SOME.test(String(c.program.name)) || SOME2.test(String(c.program.name))).map((c) => c.program), 'ln_ptxas', { merge: false });
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ln-ptxas-'));
      fs.writeFileSync(path.join(dir, 'k.cu'), built.files[KERNELS_FILE]);
      const ks = new Set(built.lowered.flatMap((lp) => lp.kernels).filter((k) => /partials in shared memory/.test(k.label)).map((k) => built.alias.get(k.name) ?? k.name));
      const done = new Promise<{ status: number | null; stderr: string }>((resolve) => {
        const p = spawn(NV!.nvcc, [...NVCC_SM90A, '-c', path.join(dir, 'k.cu'), '-o', path.join(dir, 'k.o'), '-Xptxas', '-v']);
        let stderr = '';
        p.stderr.on('data', (x) => (stderr += String(x)));
        p.on('close', (status) => resolve({ status, stderr }));
      });
      return { form, dir, ks, done };
    }));
    for (const { form, dir, ks, done } of runs) {
      const r = await done;
      fs.rmSync(dir, { recursive: true, force: true });
      expect(r.status, r.stderr).toBe(0);
      let cur = '';
      const checked = new Set<string>();
      for (const line of r.stderr.split('\n')) {
        const fn = line.match(/Compiling entry function '(\w+)'/);
        if (fn) cur = fn[1];
        const st = line.match(/(\d+) bytes stack frame, (\d+) bytes spill stores/);
        if (st && ks.has(cur)) {
          expect([form, cur, Number(st[1]), Number(st[2])]).toEqual([form, cur, 0, 0]);
          checked.add(cur);
        }
      }
      expect(checked.size).toBe(ks.size);
      expect(ks.size).toBe(6);
    }
  }, 120_000);
});
