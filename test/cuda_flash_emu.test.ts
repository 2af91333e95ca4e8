/**
 * The CUDA flash attention kernels (compiler/codegen-cuda/attention_cuda.ts, attention_tf32x3.ts,
 * attention_f32.ts) run on the CPU: each case's generated kernel text (the same text model_kernels.cuh
 * gets, without the prelude's PTX helpers; mma.ts's plain-C++ 3xTF32 product and swizzled tile copy included) is
 * compiled by g++ with test/native/cuda_warp_shim.h (a fiber for each CUDA thread, barriers, warp shuffles,
 * and mma.m16n8k16 / mma.m16n8k8 TF32 / ldmatrix.trans / cvt.rna.tf32 / wgmma m64n64k16 over 128B-swizzled tiles modelled from the PTX ISA's
 * fragment tables; the 16-bit kernels' cp.async copies landing at the copy and, in a second run, at the
 * wait, where the wgmma products are then also computed at the wait_group that retires them) and launched block by block; every case's kernel sets go into one emulator program (one g++ build
 * per file, the operands read from a file), each run its own process; the outputs are compared with the float64 reference within
 * cuda_check's tolerances (FLASH_TOL for 16-bit operands), 1e-5 for the fp32 3xTF32 kernels (with a
 * negative control: the same kernel text with the split's lo dropped, plain TF32, must miss it) and 1e-4
 * for the fp32 CUDA-core ones (MPSC_CUDA_ATTN_TF32X3=0). This catches index,
 * masking, tiling and barrier mistakes of the generator without a GPU; a misreading of the PTX
 * fragment layouts shared by the shim would not be caught (bench/cuda_check.sh on the GPU is).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CUDA } from '../compiler/codegen-cuda/cuda_dialect.js';
import { lowerAttentionCuda } from '../compiler/codegen-cuda/attention_cuda.js';
import { sw128LoadHelper, tf32x3MmaHelpers } from '../compiler/codegen-cuda/mma.js';
import type { Helper } from '../compiler/kernels/kernel_types.js';
import { relError } from '../compiler/reference/fixtures.js';
import { roundToHalf } from '../compiler/reference/half.js';
import type { HalfDType } from '../compiler/ir/graph.js';
import { cudaAttentionCases, flashTolerance } from './cuda_cases.js';
import { buildShimProgram, emuKernelSource, halfBits } from './warp_shim_build.js';
import { reference, type OpCase } from './metal_harness.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const SHIM = path.join(ROOT, 'test/native/cuda_warp_shim.h');
/** a few cases covering every path: several tiles with a short last one, causal with S = T and S > T, non-causal, 1 to 16 heads, bf16 / fp16 / fp32 (each fp32 head width) */
const NAMES = /^flash_(2x3_t130_s130_d64_causal_bf16|1x2_t70_s150_d16_causal_f16|1x16_t21_s21_d64_f16|f32_1x2_t45_s100_d32_causal|f32_1x3_t33_s65_d16|f32_2x3_t70_s70_d64_causal|f32_2x1_t64_s64_d48|qkv_2x3_t130_d64_causal_bf16|qkv_1x2_t70_d32_f16|qkv_1x2_t45_d16_causal_f32|qkv_2x3_t70_d64_f32|qkv_2x2_t70_d64_causal_f32|qkv_sum_2x3_t130_d64_causal_bf16|qkv_sum_1x2_t70_d32_f16)_(fwd|grad)$/;

/**
 * how a case runs: cp.async copies landing at the wait (`late`); fp32 operands on the 3xTF32 kernels
 * (`x3`, the default) or the CUDA-core ones (MPSC_CUDA_ATTN_TF32X3=0); `plain`: the kernels' split
 * (mma.ts mpsc_split_tf32_hl) replaced by the shim's hi-only one, so the 3xTF32 kernels compute plain
 * TF32 products (the negative control)
 */
interface Mode { late: boolean; x3: boolean; plain: boolean; env?: Record<string, string>; edit?: [string, string] }

/** the lowering of one node with MPSC_CUDA_ATTN_TF32X3 set for `x3` and the generator switches `env`; kernels named `${prefix}k0`, ... */
function lower(g: OpCase['program']['graph'], n: OpCase['program']['graph']['nodes'][number], x3: boolean, helpers: Set<Helper>, prefix: string, env: Record<string, string> = {}) {
  const set = { ...env, MPSC_CUDA_ATTN_TF32X3: x3 ? '1' : '0' };
  const before = Object.fromEntries(Object.keys(set).map((k) => [k, process.env[k]]));
  Object.assign(process.env, set);
  try {
    let k = 0;
    return lowerAttentionCuda({ next: () => `${prefix}k${k++}`, helpers, d: CUDA }, g, n);
  } finally {
    for (const [k, v] of Object.entries(before)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

/**
 * One kernel set of a case (the case's attention node lowered in a mode; `late` is chosen when it runs): its
 * C++ (the kernels, renamed r<index>_k0, ..., and a function run_<index> that reads the node's operands from a
 * file, launches the kernels and writes the node's outputs), the operands' bytes, or why it cannot run.
 */
interface Build { index: number; c: OpCase; cc: string; input: Buffer; labels: string[]; helpers: Set<Helper>; error?: string }

const modeKey = (m: Mode) => JSON.stringify([m.x3, m.plain, m.env ?? {}, m.edit ?? []]);

function buildOf(c: OpCase, mode: Mode, index: number): Build {
  const g = c.program.graph;
  const n = g.nodes.find((x) => x.op.startsWith('attention'))!;
  const helpers = new Set<Helper>();
  const ks = lower(g, n, mode.x3, helpers, `r${index}_`, mode.env);
  const none = { index, c, cc: '', input: Buffer.alloc(0), labels: [], helpers };
  if (!ks) return { ...none, error: `${c.program.name}: no flash kernels` };
  // the node's operands: program inputs, or cast outputs (rounded as the cast kernel rounds)
  const data = new Map<number, number[]>();
  for (const id of c.program.inputs) data.set(id, Array.from(c.data.get(id)!));
  for (const x of g.nodes) if (x.op === 'cast' && data.has(x.inputs[0])) data.set(x.outputs[0], data.get(x.inputs[0])!.map((v) => roundToHalf(v, g.values[x.outputs[0]].dtype as HalfDType)));
  const text = ks.map((k) => emuKernelSource(k)).join('\n');
  // a negative control's edit of the kernels' text (it must change something)
  if (mode.edit && !text.includes(mode.edit[0])) return { ...none, error: `${c.program.name}: nothing to edit (${mode.edit[0]})` };
  const kernels = mode.edit ? text.replaceAll(mode.edit[0], mode.edit[1]) : text;
  if (mode.plain && !kernels.includes('mpsc_split_tf32_hl(')) return { ...none, error: `${c.program.name}: no 3xTF32 split to drop` };
  let src = (mode.plain ? kernels.replaceAll('mpsc_split_tf32_hl(', 'mpsc_split_tf32_hi_only(') : kernels) + `\nstatic void run_${index}(FILE* in, FILE* out) {\n  StepParams sp{};\n`;
  const ids = [...new Set(ks.flatMap((kk) => kk.args.map((a) => a.value)))];
  const scratch = Math.max(1, ...ks.map((kk) => (kk.scratch ?? 0) / 4));
  src += `  float* scratch = shim_buffer<float>(${scratch}, nullptr);\n`;
  const input: Buffer[] = [];
  for (const id of ids) {
    const v = g.values[id], d = data.get(id);
    const type = v.dtype === 'bf16' ? '__nv_bfloat16' : v.dtype === 'f16' ? '__half' : 'float';
    if (d) input.push(Buffer.from(v.dtype === 'f32' ? Float32Array.from(d).buffer : Uint16Array.from(d, (x) => halfBits(x, v.dtype as HalfDType)).buffer));
    src += `  ${type}* v${id} = shim_buffer<${type}>(${v.shape.reduce((p, q) => p * q, 1)}, ${d ? 'in' : 'nullptr'});\n`;
  }
  for (const kk of ks) {
    const args = [...kk.args.map((a) => `v${a.value}`), ...(/\bmpsc_scratch\b/.test(kk.body) ? ['scratch'] : []), '&sp'];
    src += `  launch({${kk.groups.join(', ')}}, {${kk.tgsize.join(', ')}}, [&] { ${kk.name}(${args.join(', ')}); });\n`;
  }
  for (const id of n.outputs) src += `  shim_write(v${id}, ${g.values[id].shape.reduce((p, q) => p * q, 1)}, out);\n`;
  src += '}\n';
  // fuse.ts rule 15's finish (the qkv_sum cases), which the label checks below leave out (they are about the flash kernels)
  const labels = ks.map((kk) => kk.label).filter((l) => !/: sum of \d+ blocks/.test(l));
  return { index, c, cc: src, input: Buffer.concat(input), labels, helpers };
}

/**
 * Every kernel set of the chosen cases in one emulator program (`emu <index> <late> <operands> <outputs>` runs
 * one), built by two g++ processes (two halves of the sets) and linked: one build per file instead of one per run.
 */
class Emulator {
  private readonly builds = new Map<string, Build>();
  private readonly refs = new Map<OpCase, Map<number, Float64Array>>();
  readonly dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-flash-emu-'));
  private readonly exe = path.join(this.dir, 'emu');

  add(c: OpCase, mode: Mode): void {
    const key = `${c.program.name} ${modeKey(mode)}`;
    if (!this.builds.has(key)) this.builds.set(key, buildOf(c, mode, this.builds.size));
  }

  async compile(): Promise<void> {
    const all = [...this.builds.values()].filter((b) => !b.error);
    const x3 = all.some((b) => b.helpers.has('mma_tf32x3')) ? tf32x3MmaHelpers() : '';
    const sw = all.some((b) => b.helpers.has('wgmma16')) ? sw128LoadHelper() : '';
    await buildShimProgram(this.dir, this.exe, `#include "${SHIM}"\n` + x3 + sw, all);
  }

  /** max-norm relative error of each output of case c run in `mode`, against the float64 reference; `out` the outputs' floats */
  errors(c: OpCase, mode: Mode): { err: Map<string, number>; labels: string[]; out: Float32Array } {
    const b = this.builds.get(`${c.program.name} ${modeKey(mode)}`);
    if (!b) throw new Error(`${c.program.name}: ${modeKey(mode)} not built`);
    if (b.error) throw new Error(b.error);
    const inFile = path.join(this.dir, `in${b.index}.bin`), outFile = path.join(this.dir, `out${b.index}.bin`);
    fs.writeFileSync(inFile, b.input);
    execFileSync(this.exe, [String(b.index), mode.late ? '1' : '0', inFile, outFile], { stdio: 'pipe' });
    const all = new Float32Array(new Uint8Array(fs.readFileSync(outFile)).buffer);
    if (!this.refs.has(c)) this.refs.set(c, reference(c, { lr: 0, t: 1, seed: 0, counter: 0 }));
    const ref = this.refs.get(c)!;
    const g = c.program.graph, n = g.nodes.find((x) => x.op.startsWith('attention'))!;
    const err = new Map<string, number>();
    let off = 0;
    for (const id of n.outputs) {
      const cnt = g.values[id].shape.reduce((p, q) => p * q, 1);
      err.set(g.values[id].name, relError(all.subarray(off, off + cnt), ref.get(id)!));
      off += cnt;
    }
    if (off !== all.length) throw new Error(`${c.program.name}: ${all.length} output floats, ${off} expected`);
    return { err, labels: b.labels, out: all };
  }

  dispose(): void {
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * the 3xTF32 kernels' bound (max-norm relative, float64 reference): fp32's own rounding is ~1e-7 here, the
 * split's ~2^-21 per product (measured 1.7e-7 ... 5.6e-7, as the CUDA-core kernels); plain TF32 (2^-11 per
 * operand) misses it on every output (the negative control)
 */
const X3_TOL = 1e-5;

/** the modes the tests run: the default kernels; fp32: plain TF32 (the negative control), the synchronous 3xTF32 variant, the CUDA-core kernels */
const DEFAULT: Mode = { late: false, x3: true, plain: false };
const PLAIN: Mode = { ...DEFAULT, plain: true };
const SYNC: Mode = { ...DEFAULT, env: { MPSC_CUDA_ATTN_X3_ASYNC: 'none', MPSC_CUDA_ATTN_X3_KSPLIT: '0' } };
const SIMT: Mode = { ...DEFAULT, x3: false };
/** the 3xTF32 backward with the separate Delta kernel also where S <= 64 (MPSC_CUDA_FLASH_DELTA_FOLD=0; by default the bodies compute Delta there) */
const NOFOLD: Mode = { ...DEFAULT, env: { MPSC_CUDA_FLASH_DELTA_FOLD: '0' } };
/** the 16-bit backward with dQ from the dK/dV kernel's stored dS^T tiles (MPSC_CUDA_FLASH_DQ=stored) */
const STORED: Mode = { ...DEFAULT, env: { MPSC_CUDA_FLASH_DQ: 'stored' } };
/** the 16-bit head-width-64 kernels on wgmma without the overlap (MPSC_CUDA_FLASH_WGMMA=fwd,kv,q MPSC_CUDA_FLASH_WGMMA_PIPE=0: v34's bodies; the shim models wgmma over the swizzled tiles) */
const WGMMA: Mode = { ...DEFAULT, env: { MPSC_CUDA_FLASH_WGMMA: 'fwd,kv,q', MPSC_CUDA_FLASH_WGMMA_PIPE: '0' } };
/** the wgmma backward with its products overlapped with the exp / dS work (MPSC_CUDA_FLASH_WGMMA_PIPE=1, the default) */
const WGPIPE: Mode = { ...DEFAULT, env: { MPSC_CUDA_FLASH_WGMMA: 'fwd,kv,q', MPSC_CUDA_FLASH_WGMMA_PIPE: '1' } };
/** the wgmma forward with each tile's softmax overlapped with the previous tile's P V (MPSC_CUDA_FLASH_WGMMA_FWD_PIPE=1) */
const WGFPIPE: Mode = { ...DEFAULT, env: { MPSC_CUDA_FLASH_WGMMA: 'fwd,kv,q', MPSC_CUDA_FLASH_WGMMA_PIPE: '0', MPSC_CUDA_FLASH_WGMMA_FWD_PIPE: '1' } };
/** the wgmma forward with 128 queries per block, two warpgroups sharing each K / V tile (MPSC_CUDA_FLASH_WGMMA_FWD_ROWS=128) */
const WGFWD2: Mode = { ...DEFAULT, env: { MPSC_CUDA_FLASH_WGMMA: 'fwd,kv,q', MPSC_CUDA_FLASH_WGMMA_PIPE: '0', MPSC_CUDA_FLASH_WGMMA_FWD_ROWS: '128' } };
/** the wgmma dQ kernel with 128 queries per block, two warpgroups sharing each K / V tile (MPSC_CUDA_FLASH_WGMMA_Q_ROWS=128), products overlapped */
const WGQ2: Mode = { ...DEFAULT, env: { MPSC_CUDA_FLASH_WGMMA: 'fwd,kv,q', MPSC_CUDA_FLASH_WGMMA_PIPE: '1', MPSC_CUDA_FLASH_WGMMA_Q_ROWS: '128' } };
/** the wgmma backward with the separate Delta kernel (MPSC_CUDA_FLASH_WGMMA_DELTA=kernel; by default the dQ kernel computes Delta and runs first) */
const WGDELTA: Mode = { ...DEFAULT, env: { MPSC_CUDA_FLASH_WGMMA: 'fwd,kv,q', MPSC_CUDA_FLASH_WGMMA_PIPE: '1', MPSC_CUDA_FLASH_WGMMA_DELTA: 'kernel' } };
const isWgmmaCase = (name: string) => /_d64_(.*_)?(fwd|grad)$/.test(name) && !/f32/.test(name);

/** a 3xTF32 backward case's kernels by its name (flash_[qkv_]NxH_tT[_sS]_dD[_causal]_...): dK/dV and dQ merged, Delta folded in */
function backwardShape(name: string): { merged: boolean; folded: boolean } {
  const m = /_t(\d+)(?:_s(\d+))?_d(\d+)(_causal)?_/.exec(name);
  if (!m || !/_grad$/.test(name)) return { merged: false, folded: false };
  const S = Number(m[2] ?? m[1]), D = Number(m[3]);
  return { merged: /^flash_qkv_/.test(name) && (D <= 32 || m[4] !== undefined), folded: S <= 64 };
}

describe('the flash attention kernels run on the CPU through the warp shim', () => {
  const cases = cudaAttentionCases().filter((c) => NAMES.test(String(c.program.name)));
  const isF32 = (c: OpCase) => /^flash_f32|_f32_(fwd|grad)$/.test(String(c.program.name));
  const emu = new Emulator();
  const isGrad = (c: OpCase) => /_grad$/.test(String(c.program.name));
  for (const c of cases) for (const m of isF32(c) ? [DEFAULT, PLAIN, SYNC, SIMT, ...(isGrad(c) ? [NOFOLD] : [])] : [DEFAULT, ...(isGrad(c) ? [STORED] : []), ...(isWgmmaCase(String(c.program.name)) ? [WGMMA, ...(isGrad(c) ? [WGPIPE, WGDELTA, WGQ2] : [WGFPIPE, WGFWD2])] : [])]) emu.add(c, m);
  beforeAll(() => emu.compile(), 300_000);
  afterAll(() => emu.dispose());
  const errors = (c: OpCase, mode: Mode) => emu.errors(c, mode);
  it('covers the chosen cases', () => expect(cases.length).toBe(26));
  // rule 15 (the sum cases): a butterfly step dropped must miss the tolerance on the sums (the negative control)
  const DROP: [string, string] = ['a0 += __shfl_xor_sync(0xffffffffu, a0, 16);', ''];
  const sumCases = cases.filter((c) => /^flash_qkv_sum_/.test(String(c.program.name)));
  for (const c of sumCases) for (const m of [{ ...DEFAULT, edit: DROP }, ...(isWgmmaCase(String(c.program.name)) ? [{ ...WGPIPE, edit: DROP }] : [])]) emu.add(c, m);
  for (const c of sumCases) {
    const name = String(c.program.name);
    it(`${name}: dqkv and its column sums (fuse.ts rule 15) within the tolerance${isWgmmaCase(name) ? ', on mma.sync and on wgmma' : ''}; a dropped butterfly step misses it`, () => {
      for (const m of [DEFAULT, ...(isWgmmaCase(name) ? [WGPIPE] : [])]) {
        const { err } = errors(c, m);
        expect([...err.keys()].some((k) => /dqkv\.sum$/.test(k))).toBe(true);
        for (const [v, e] of err) expect(e, v).toBeLessThan(flashTolerance(c)!);
        const bad = errors(c, { ...m, edit: DROP }).err;
        expect(bad.get(`${name.replace(/_grad$/, '')}.dqkv.sum`)!, 'the sums with a dropped butterfly step').toBeGreaterThan(flashTolerance(c)!);
      }
    });
  }
  for (const c of cases) {
    const name = String(c.program.name);
    if (!isF32(c)) {
      // the 16-bit kernels stream their tiles with cp.async: both ends of when a copy may land
      for (const late of [false, true]) {
        it(`${name}${late ? ' (cp.async landing at the wait)' : ''}: every output within the check's tolerance of the float64 reference`, () => {
          const { err } = errors(c, { ...DEFAULT, late });
          for (const [v, e] of err) expect(e, v).toBeLessThan(flashTolerance(c)!);
        });
        if (isWgmmaCase(name)) {
          it(`${name} on wgmma without the overlap (MPSC_CUDA_FLASH_WGMMA=fwd,kv,q MPSC_CUDA_FLASH_WGMMA_PIPE=0)${late ? ', cp.async copies and wgmma products completing at their waits' : ''}: every output within the check's tolerance`, () => {
            const { err, labels } = errors(c, { ...WGMMA, late });
            // the forward; or dQ (with Delta, first), dK/dV: every flash kernel on wgmma
            expect(labels).toHaveLength(isGrad(c) ? 2 : 1);
            expect(labels.filter((l) => /wgmma \(sm_90a\), 64 rows per block(: dK, dV|: dQ and Delta)?\]$/.test(l))).toHaveLength(isGrad(c) ? 2 : 1);
            if (isGrad(c)) expect(labels[0]).toMatch(/: dQ and Delta\]$/);
            for (const [v, e] of err) expect(e, `${v} (wgmma)`).toBeLessThan(flashTolerance(c)!);
          });
        }
        if (isWgmmaCase(name) && !isGrad(c)) {
          it(`${name} on wgmma, softmax overlapped with the previous tile's P V (MPSC_CUDA_FLASH_WGMMA_FWD_PIPE=1)${late ? ', copies and products completing at their waits' : ''}: the same bits as the forward without the overlap`, () => {
            const piped = errors(c, { ...WGFPIPE, late }), plain = errors(c, { ...WGMMA, late });
            expect(piped.labels).toHaveLength(1);
            for (const [v, e] of piped.err) expect(e, `${v} (wgmma, forward overlapped)`).toBeLessThan(flashTolerance(c)!);
            expect(Buffer.from(piped.out.buffer).equals(Buffer.from(plain.out.buffer))).toBe(true);
          });
        }
        if (isWgmmaCase(name) && !isGrad(c)) {
          it(`${name} on wgmma, 128 queries per block in two warpgroups (MPSC_CUDA_FLASH_WGMMA_FWD_ROWS=128)${late ? ', copies and products completing at their waits' : ''}: the same bits as the 64-row forward`, () => {
            const two = errors(c, { ...WGFWD2, late }), one = errors(c, { ...WGMMA, late });
            expect(two.labels).toHaveLength(1);
            expect(two.labels[0]).toMatch(/wgmma \(sm_90a\), 128 rows per block \(two warpgroups\)\]$/);
            for (const [v, e] of two.err) expect(e, `${v} (wgmma, two warpgroups)`).toBeLessThan(flashTolerance(c)!);
            expect(Buffer.from(two.out.buffer).equals(Buffer.from(one.out.buffer))).toBe(true);
          });
        }
        if (isWgmmaCase(name) && isGrad(c)) {
          it(`${name} on wgmma, products overlapped (MPSC_CUDA_FLASH_WGMMA_PIPE=1)${late ? ', cp.async copies and wgmma products completing at their waits' : ''}: every output within the check's tolerance`, () => {
            const { err } = errors(c, { ...WGPIPE, late });
            for (const [v, e] of err) expect(e, `${v} (wgmma, overlapped)`).toBeLessThan(flashTolerance(c)!);
          });
          it(`${name} on wgmma, dQ with 128 queries per block in two warpgroups (MPSC_CUDA_FLASH_WGMMA_Q_ROWS=128)${late ? ', copies and products completing at their waits' : ''}: the same bits as the 64-row dQ kernel`, () => {
            const two = errors(c, { ...WGQ2, late }), one = errors(c, { ...WGPIPE, late });
            expect(two.labels).toHaveLength(2);
            expect(two.labels[0]).toMatch(/wgmma \(sm_90a\), 128 rows per block \(two warpgroups\): dQ and Delta\]$/);
            for (const [v, e] of two.err) expect(e, `${v} (wgmma, dQ in two warpgroups)`).toBeLessThan(flashTolerance(c)!);
            expect(Buffer.from(two.out.buffer).equals(Buffer.from(one.out.buffer))).toBe(true);
          });
          it(`${name} on wgmma with the Delta kernel (MPSC_CUDA_FLASH_WGMMA_DELTA=kernel)${late ? ', copies and products completing at their waits' : ''}: within the tolerance, and the same bits as Delta in the dQ kernel`, () => {
            const sep = errors(c, { ...WGDELTA, late }), inQ = errors(c, { ...WGPIPE, late });
            expect(sep.labels).toHaveLength(3);
            expect(sep.labels[0]).toMatch(/Delta = rowsum\(dO \* O\)/);
            for (const [v, e] of sep.err) expect(e, `${v} (wgmma, Delta kernel)`).toBeLessThan(flashTolerance(c)!);
            expect(Buffer.from(sep.out.buffer).equals(Buffer.from(inQ.out.buffer))).toBe(true);
          });
        }
        if (isGrad(c)) {
          it(`${name}, dQ from the stored dS^T tiles (MPSC_CUDA_FLASH_DQ=stored)${late ? ', cp.async landing at the wait' : ''}: every output within the check's tolerance`, () => {
            const { err, labels } = errors(c, { ...STORED, late });
            expect(labels.filter((l) => /: dK, dV, dS\^T stored\]$|: dQ = dS K from the stored dS\^T\]$/.test(l))).toHaveLength(2);
            for (const [v, e] of err) expect(e, `${v} (stored dS)`).toBeLessThan(flashTolerance(c)!);
          });
        }
      }
      continue;
    }
    it(`${name}, fp32 as 3xTF32 on the tensor cores: every output within ${X3_TOL} of the float64 reference; as plain TF32 (lo dropped) not`, () => {
      const x3 = errors(c, DEFAULT);
      // the packed backward's dK/dV and dQ kernels run as one launch at head widths up to 32 or causal
      // (MPSC_CUDA_FLASH_BWD_MERGE), the separate layout's and wider non-causal heads' as two; with one key tile per
      // head (S <= 64) they compute Delta themselves (MPSC_CUDA_FLASH_DELTA_FOLD, on by default): no Delta kernel
      const { merged, folded } = backwardShape(name);
      expect(x3.labels.filter((l) => /flash attention, fp32 as 3xTF32/.test(l)).length).toBe(/_fwd$/.test(name) || merged ? 1 : 2);
      expect(x3.labels.some((l) => /dK, dV and dQ in one launch/.test(l))).toBe(merged);
      expect(x3.labels.some((l) => /Delta = rowsum/.test(l))).toBe(/_grad$/.test(name) && !folded);
      for (const [v, e] of x3.err) expect(e, v).toBeLessThan(X3_TOL);
      // the negative control: the same kernels with plain TF32 products miss the bound on every output (lse,
      // of magnitude ~log S, the least: 4e-5), the worst by more than 10x (4e-4 ... 8e-4 measured)
      const plain = errors(c, PLAIN);
      for (const [v, e] of plain.err) expect(e, `${v} as plain TF32`).toBeGreaterThan(X3_TOL);
      expect(Math.max(...plain.err.values())).toBeGreaterThan(10 * X3_TOL);
    });
    // the default kernels stream their tiles with cp.async (MPSC_CUDA_ATTN_X3_ASYNC): copies landing at the wait;
    // and the synchronous variant (=none, with the dK/dV kernel's single score accumulators, MPSC_CUDA_ATTN_X3_KSPLIT=0)
    it(`${name}, fp32 as 3xTF32, cp.async landing at the wait; the synchronous variant: every output within ${X3_TOL}`, () => {
      const late = errors(c, { ...DEFAULT, late: true });
      const { merged, folded } = backwardShape(name);
      expect(late.labels.length).toBe(/_fwd$/.test(name) ? 1 : (merged ? 1 : 2) + (folded ? 0 : 1));
      for (const [v, e] of late.err) expect(e, v).toBeLessThan(X3_TOL);
      const sync = errors(c, SYNC);
      for (const [v, e] of sync.err) expect(e, `${v} (synchronous)`).toBeLessThan(X3_TOL);
    });
    if (/_grad$/.test(name))
      it(`${name}, fp32 as 3xTF32 with MPSC_CUDA_FLASH_DELTA_FOLD=0: every output within ${X3_TOL}; the Delta kernel also where S <= 64`, () => {
        const nofold = errors(c, NOFOLD);
        const { merged } = backwardShape(name);
        expect(nofold.labels.length).toBe((merged ? 1 : 2) + 1);
        expect(nofold.labels.some((l) => /Delta = rowsum/.test(l))).toBe(true);
        for (const [v, e] of nofold.err) expect(e, `${v} (separate Delta kernel)`).toBeLessThan(X3_TOL);
      });
    it(`${name}, fp32 on the CUDA cores (MPSC_CUDA_ATTN_TF32X3=0): every output within 1e-4 of the float64 reference`, () => {
      const simt = errors(c, SIMT);
      expect(simt.labels.some((l) => /fp32 on the CUDA cores/.test(l))).toBe(true);
      for (const [v, e] of simt.err) expect(e, v).toBeLessThan(1e-4);
    });
  }
});
