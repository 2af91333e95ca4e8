/**
 * class_rows.ts's fused cross-entropy loss + gradient over 16-bit logits (the vector path) with MPSC_CUDA_CE_SMEM=1:
 * persistent blocks each taking a run of rows, every row staged in shared memory by 16-byte cp.async, double-buffered
 * (row i + 1's copies in flight while row i is computed), run on the CPU through test/native/cuda_warp_shim.h (a fiber
 * per CUDA thread, block barriers, warp shuffles; cp.async copies landing at the copy and, in a second run, at the
 * wait). Each case's generated kernel text (the rows kernel and the mean kernel, as model_kernels.cuh gets them) is
 * compiled by g++ once per file; the loss and the gradient (widened from its 16-bit type) are compared with the float64
 * reference (test/metal_harness.ts) within the fused loss's tolerance (caseTolerance: 1e-5, plus one unit of the
 * gradient's type), and with the default kernel (the switch off: a block per row reading the logits from global memory),
 * which must give the same bits (the same per-thread order of every sum). Negative controls: the kernel waiting one
 * commit group too few (wait<2>: row i read before its copies land, in the run where copies land at the wait), and the
 * copy of row i + 2 dropped (a stale row), must miss the tolerance. This catches index, run, buffer and commit-group
 * mistakes without a GPU; the GPU run (MPSC_CUDA_CE_SMEM=1 bench/cuda_check.sh) stays the ground truth.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CUDA } from '../compiler/codegen-cuda/cuda_dialect.js';
import { lowerClassForwardCuda } from '../compiler/codegen-cuda/class_rows.js';
import { helperSource } from '../compiler/kernels/prelude.js';
import type { Helper } from '../compiler/kernels/kernel_types.js';
import { makeRng, relError } from '../compiler/reference/fixtures.js';
import { roundToHalf } from '../compiler/reference/half.js';
import { lossAndGradCase } from './cuda_cases.js';
import { caseTolerance } from './metal_cases.js';
import { reference, type OpCase } from './metal_harness.js';
import { withEnv } from './env_helpers.js';
import { buildShimProgram, emuKernelSource, halfBits } from './warp_shim_build.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const SHIM = path.join(ROOT, 'test/native/cuda_warp_shim.h');
const hasGxx = spawnSync('g++', ['--version']).status === 0;

/** what the shim lacks for these kernels: the 16-bit pairs (load8 / store8) */
const EXTRA = `
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
struct __half2 { __half x, y; };
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {__bfloat162float(h.x), __bfloat162float(h.y)}; }
static inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)}; }
static inline __half2 __floats2half2_rn(float a, float b) { return {__float2half_rn(a), __float2half_rn(b)}; }
`;

/** a variant of a case's kernels: the switch on or off, and an edit of the rows kernel's body (the negative controls) */
interface Variant { smem: boolean; edit?: (body: string) => string; tag: string }

/** one kernel set: its C++ (kernels r<index>_k0, ... and run_<index>), the operands' bytes, the kernels' labels */
interface Build { index: number; c: OpCase; cc: string; input: Buffer; labels: string[]; bodies: string[]; helpers: Set<Helper> }

/** a case's operand bytes (the logits' 16-bit bits, then the labels), once per case */
const operandCache = new WeakMap<OpCase, Buffer>();
function operands(c: OpCase, input: number, label: number, t16: 'bf16' | 'f16'): Buffer {
  let b = operandCache.get(c);
  if (!b) {
    const bits = Uint16Array.from(c.data.get(input)!, (x) => halfBits(roundToHalf(x, t16), t16));
    b = Buffer.concat([Buffer.from(bits.buffer), Buffer.from(Int32Array.from(c.data.get(label)!).buffer)]);
    operandCache.set(c, b);
  }
  return b;
}

function buildOf(c: OpCase, v: Variant, index: number): Build {
  const g = c.program.graph;
  const n = g.nodes.find((x) => x.op === 'cross_entropy')!;
  const grad = g.nodes.find((x) => x.op === 'cross_entropy_grad')!;
  const helpers = new Set<Helper>();
  let k = 0;
  const ks = withEnv('MPSC_CUDA_CE_SMEM', v.smem ? '1' : '0', () => lowerClassForwardCuda({ next: () => `r${index}_k${k++}`, helpers, d: CUDA }, g, n));
  if (v.edit) ks[0] = { ...ks[0], body: v.edit(ks[0].body) };
  const [logits, label] = n.inputs, dl = grad.outputs[0], loss = n.outputs[0];
  const t16 = g.values[logits].dtype as 'bf16' | 'f16';
  const R = g.values[label].shape[0], C = g.values[logits].shape[1];
  const T = t16 === 'bf16' ? '__nv_bfloat16' : '__half', wide = t16 === 'bf16' ? '__bfloat162float' : '__half2float';
  const input = g.nodes.find((x) => x.op === 'cast' && x.outputs[0] === logits)!.inputs[0];
  const bytes = operands(c, input, label, t16);
  const ptr = new Map<number, string>([[logits, 'x'], [label, 'lab'], [dl, 'dx'], [loss, 'loss']]);
  let src = ks.map((k) => emuKernelSource(k)).join('\n') + `\nstatic void run_${index}(FILE* in, FILE* out) {\n  StepParams sp{};\n` +
    `  float* scratch = shim_buffer<float>(${Math.max(...ks.map((kk) => (kk.scratch ?? 0) / 4))}, nullptr);\n` +
    `  ${T}* x = shim_buffer<${T}>(${R * C}, in);\n  int* lab = shim_buffer<int>(${R}, in);\n` +
    // in place, as GPT-2's plan has it (dlogits over the logits' bytes)
    `  ${T}* dx = x;\n  float* loss = shim_buffer<float>(1, nullptr);\n`;
  for (const kk of ks) {
    const args = [...kk.args.map((a) => ptr.get(a.value)!), ...(/\bmpsc_scratch\b/.test(kk.body) ? ['scratch'] : []), '&sp'];
    src += `  launch({${kk.groups.join(', ')}}, {${kk.tgsize.join(', ')}}, [&] { ${kk.name}(${args.join(', ')}); });\n`;
  }
  src += `  shim_write(loss, 1, out);\n  std::vector<float> w(${R * C});\n  for (size_t i = 0; i < w.size(); ++i) w[i] = ${wide}(dx[i]);\n  shim_write(w.data(), w.size(), out);\n}\n`;
  return { index, c, cc: src, input: bytes, labels: ks.map((kk) => kk.label), bodies: ks.map((kk) => kk.body), helpers };
}

/** every kernel set in one program (`emu <index> <late> <operands> <outputs>` runs one), built by two g++ processes */
class Emulator {
  private readonly builds = new Map<string, Build>();
  private readonly refs = new Map<OpCase, Map<number, Float64Array>>();
  readonly dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-loss-emu-'));
  private readonly exe = path.join(this.dir, 'emu');

  add(c: OpCase, v: Variant): Build {
    const key = `${c.program.name} ${v.tag}`;
    if (!this.builds.has(key)) this.builds.set(key, buildOf(c, v, this.builds.size));
    return this.builds.get(key)!;
  }

  async compile(): Promise<void> {
    const all = [...this.builds.values()];
    const helpers = new Set(all.flatMap((b) => [...b.helpers]));
    // (mma16's PTX helpers are the shim's: mpsc_cp_async16 and its commit / wait)
    const head = `#include "${SHIM}"\n${EXTRA}\n` + (helpers.has('block_reduce') ? helperSource(CUDA, 'block_reduce') : '');
    await buildShimProgram(this.dir, this.exe, head, all, '-O2');
  }

  /** the loss's and the gradient's max-norm relative error against the float64 reference, and the output floats */
  run(b: Build, late: boolean): { loss: number; grad: number; out: Float32Array } {
    const inFile = path.join(this.dir, `in${b.index}.bin`), outFile = path.join(this.dir, `out${b.index}_${late ? 1 : 0}.bin`);
    fs.writeFileSync(inFile, b.input);
    execFileSync(this.exe, [String(b.index), late ? '1' : '0', inFile, outFile], { stdio: 'pipe' });
    const out = new Float32Array(new Uint8Array(fs.readFileSync(outFile)).buffer);
    const c = b.c;
    if (!this.refs.has(c)) this.refs.set(c, reference(c, { lr: 0, t: 1, seed: 0, counter: 0 }));
    const ref = this.refs.get(c)!;
    const [loss, , wide] = c.check;
    const n = ref.get(wide)!.length;
    if (out.length !== 1 + n) throw new Error(`${c.program.name}: ${out.length} output floats, ${1 + n} expected`);
    return { loss: relError(out.subarray(0, 1), ref.get(loss)!), grad: relError(out.subarray(1), ref.get(wide)!), out };
  }

  dispose(): void {
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * The cases: 301 rows of 1032 bf16 classes with label smoothing (132 blocks: runs of 3 for the first 37, 2 for the rest;
 * fewer 16-byte vectors than threads), 140 rows of 16 680 f16 classes with label smoothing and ignore_index (every third row
 * ignored, its copies zero-filled; runs of 2 for the first 8 blocks; more vectors than two per thread: the two-vector steps,
 * then one), and 134 rows of GPT-2's 50 304 bf16 classes (runs of 2 for the first two blocks: both buffers at full width).
 */
function cases(): OpCase[] {
  return [
    lossAndGradCase(makeRng(11), 'smem_loss_bf16_ls', 301, 1032, 0.1, undefined, true, 'bf16'),
    lossAndGradCase(makeRng(12), 'smem_loss_f16_ignore', 140, 8 * (2 * 1024 + 37), 0.05, 2, true, 'f16'),
    lossAndGradCase(makeRng(13), 'smem_loss_gpt2_vocab_bf16', 134, 50304, 0, undefined, true, 'bf16'),
  ];
}

const SMEM: Variant = { smem: true, tag: 'smem' };
const GLOBAL: Variant = { smem: false, tag: 'global' };
/** one commit group too few waited for: row i read before its copies land (where they land at the wait) */
const LATE_WAIT: Variant = { smem: true, tag: 'late wait', edit: (b) => b.replace('mpsc_cp_async_wait<1>();', 'mpsc_cp_async_wait<2>();') };
/** row i + 2's copies dropped: its buffer still holds row i */
const DROPPED: Variant = { smem: true, tag: 'dropped copy', edit: (b) => b.replace('if (i + 2u < nr) {', 'if (i + 2u < nr && false) {') };

describe.skipIf(!hasGxx)('the fused loss + gradient with MPSC_CUDA_CE_SMEM=1 (rows staged in shared memory) on the CPU warp shim', () => {
  const all = cases();
  const emu = new Emulator();
  const builds = all.map((c) => ({ c, smem: emu.add(c, SMEM), global: emu.add(c, GLOBAL) }));
  // (on the case with runs of 3 rows: row i + 2's copies are issued in the loop)
  const controls = all.filter((c) => /bf16_ls/.test(String(c.program.name))).map((c) => ({ c, late: emu.add(c, LATE_WAIT), dropped: emu.add(c, DROPPED) }));
  beforeAll(() => emu.compile(), 300_000);
  afterAll(() => emu.dispose());

  it('the switch picks the staged kernel (persistent blocks, cp.async, dynamic shared memory), off by default', () => {
    for (const { smem, global } of builds) {
      expect(smem.labels[0]).toMatch(/^node \d+: cross_entropy .* \[132 blocks of 1024 per run of rows of \d+, \d+ rows, each row staged in shared memory by cp\.async \(double-buffered, MPSC_CUDA_CE_SMEM\)/);
      expect(smem.bodies[0]).toMatch(/mpsc_cp_async16\(/);
      expect(global.labels[0]).toMatch(/\[a block per row of \d+, \d+ rows: the row terms and node \d+'s cross_entropy_grad \(fused, 8 \w+ classes per 16-byte access, exp2\)\]$/);
      expect(global.bodies[0]).not.toMatch(/cp_async/);
    }
    expect(withEnv('MPSC_CUDA_CE_SMEM', undefined, () => buildOf(all[0], { smem: false, tag: 'x' }, 99).labels[0])).toBe(builds[0].global.labels[0]);
    // runs not all of one length: 301 = 132 * 2 + 37; 140 = 132 + 8; 134 = 132 + 2
    expect(builds.map((b) => /runs of (\d+) or (\d+) rows/.exec(b.smem.bodies[0])?.slice(1))).toEqual([['2', '3'], ['1', '2'], ['1', '2']]);
  });

  for (const { c, smem, global } of builds) {
    const name = String(c.program.name);
    it(`${name}: within the fused loss's tolerance of the float64 reference, copies landing at the copy and at the wait; the same bits as the global-memory kernel`, () => {
      const [loss, , wide] = c.check;
      const base = emu.run(global, false);
      expect(base.loss).toBeLessThan(caseTolerance(c, 1e-5, loss));
      expect(base.grad).toBeLessThan(caseTolerance(c, 1e-5, wide));
      for (const late of [false, true]) {
        const r = emu.run(smem, late);
        expect(r.loss, `loss${late ? ' (late)' : ''}`).toBeLessThan(caseTolerance(c, 1e-5, loss));
        expect(r.grad, `gradient${late ? ' (late)' : ''}`).toBeLessThan(caseTolerance(c, 1e-5, wide));
        expect(Buffer.from(r.out.buffer).equals(Buffer.from(base.out.buffer)), `same bits${late ? ' (late)' : ''}`).toBe(true);
      }
    }, 120_000);
  }

  for (const { c, late, dropped } of controls) {
    it(`${c.program.name}: negative controls (row i read one commit group early; row i + 2's copies dropped) miss the tolerance`, () => {
      const [loss, , wide] = c.check;
      expect(late.bodies[0]).toMatch(/mpsc_cp_async_wait<2>/);
      expect(dropped.bodies[0]).toMatch(/&& false/);
      const r = [emu.run(late, true), emu.run(dropped, false), emu.run(dropped, true)];
      for (const x of r) expect(x.loss > caseTolerance(c, 1e-5, loss) || x.grad > caseTolerance(c, 1e-5, wide)).toBe(true);
    }, 120_000);
  }
});
