/**
 * The CUDA flash attention kernels (compiler/codegen-cuda/attention_cuda.ts, attention_f32.ts) run on
 * the CPU: each case's generated kernel text (the same text model_kernels.cuh gets, without the
 * prelude's PTX helpers) is compiled by g++ with test/native/cuda_warp_shim.h (threads for CUDA threads,
 * barriers, warp shuffles, and mma.m16n8k16 / ldmatrix.trans modelled from the PTX ISA's fragment
 * tables; the 16-bit kernels' cp.async copies landing at the copy and, in a second run, at the wait) and launched block by block; the outputs are compared with the float64 reference
 * within cuda_check's tolerances (FLASH_TOL for 16-bit operands, 1e-4 for fp32). This catches index,
 * masking, tiling and barrier mistakes of the generator without a GPU; a misreading of the PTX
 * fragment layouts shared by the shim would not be caught (bench/cuda_check.sh on the GPU is).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CUDA } from '../compiler/codegen-cuda/cuda_dialect.js';
import { lowerAttentionCuda } from '../compiler/codegen-cuda/attention_cuda.js';
import { kernelSource } from '../compiler/kernels/prelude.js';
import type { Helper } from '../compiler/kernels/kernel_types.js';
import { relError } from '../compiler/reference/fixtures.js';
import { roundToHalf } from '../compiler/reference/half.js';
import type { HalfDType } from '../compiler/ir/graph.js';
import { cudaAttentionCases, flashTolerance } from './cuda_cases.js';
import { reference, type OpCase } from './metal_harness.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const SHIM = path.join(ROOT, 'test/native/cuda_warp_shim.h');
/** a few cases covering both paths: several tiles with a short last one, causal with S = T and S > T, non-causal, bf16 / fp16 / fp32 */
const NAMES = /^flash_(2x3_t130_s130_d64_causal_bf16|1x2_t70_s150_d16_causal_f16|1x16_t21_s21_d64_f16|f32_1x2_t45_s100_d32_causal|f32_1x3_t33_s65_d16|qkv_2x3_t130_d64_causal_bf16|qkv_1x2_t70_d32_f16|qkv_1x2_t45_d16_causal_f32)_(fwd|grad)$/;

/** the 16-bit storage bits of x (already representable) */
function halfBits(x: number, t: HalfDType): number {
  const f = new DataView(new ArrayBuffer(4));
  if (t === 'bf16') { f.setFloat32(0, x); return f.getUint32(0) >>> 16; }
  if (x === 0) return Object.is(x, -0) ? 0x8000 : 0;
  const s = x < 0 ? 0x8000 : 0, a = Math.abs(x);
  const e = Math.floor(Math.log2(a));
  if (e < -14) return s | Math.round(a / 2 ** -24);
  return s | ((e + 15) << 10) | Math.round((a / 2 ** e - 1) * 1024);
}

/** runs the flash kernels of case c on the CPU; returns each output of its attention node as floats */
function runOnCpu(c: OpCase, dir: string, late: boolean): Map<number, Float32Array> {
  const g = c.program.graph;
  const n = g.nodes.find((x) => x.op.startsWith('attention'))!;
  let k = 0;
  const ks = lowerAttentionCuda({ next: () => `k${k++}`, helpers: new Set<Helper>(), d: CUDA }, g, n);
  if (!ks) throw new Error(`${c.program.name}: no flash kernels`);
  // the node's operands: program inputs, or cast outputs (rounded as the cast kernel rounds)
  const data = new Map<number, number[]>();
  for (const id of c.program.inputs) data.set(id, Array.from(c.data.get(id)!));
  for (const x of g.nodes) if (x.op === 'cast') data.set(x.outputs[0], data.get(x.inputs[0])!.map((v) => roundToHalf(v, g.values[x.outputs[0]].dtype as HalfDType)));
  let src = `#include "${SHIM}"\n` + ks.map((kk) => kernelSource(CUDA, kk, kk, '')).join('\n') + '\nint main(int, char** argv) {\n  StepParams sp{};\n';
  const ids = [...new Set(ks.flatMap((kk) => kk.args.map((a) => a.value)))];
  const scratch = Math.max(1, ...ks.map((kk) => (kk.scratch ?? 0) / 4));
  src += `  static float scratch[${scratch}];\n`;
  for (const id of ids) {
    const v = g.values[id], d = data.get(id);
    const type = v.dtype === 'bf16' ? '__nv_bfloat16' : v.dtype === 'f16' ? '__half' : 'float';
    const init = !d ? '' : v.dtype === 'f32' ? d.map((x) => `${Math.fround(x)}f`).join(',') : d.map((x) => `{${halfBits(x, v.dtype as HalfDType)}}`).join(',');
    src += `  alignas(64) static ${type} v${id}[${v.shape.reduce((p, q) => p * q, 1)}] = {${init}};\n`;
  }
  for (const kk of ks) {
    const args = [...kk.args.map((a) => `v${a.value}`), ...(/\bmpsc_scratch\b/.test(kk.body) ? ['scratch'] : []), '&sp'];
    src += `  launch({${kk.groups.join(', ')}}, {${kk.tgsize.join(', ')}}, [&] { ${kk.name}(${args.join(', ')}); });\n`;
  }
  src += '  FILE* f = fopen(argv[1], "wb");\n';
  for (const id of n.outputs) src += `  for (auto x : v${id}) { const float y = x; fwrite(&y, 4, 1, f); }\n`;
  src += '  fclose(f);\n}\n';
  fs.writeFileSync(path.join(dir, 'k.cc'), src);
  execFileSync('g++', ['-std=c++20', '-O1', '-pthread', '-w', `-DMPSC_SHIM_CP_ASYNC_LATE=${late ? 1 : 0}`, path.join(dir, 'k.cc'), '-o', path.join(dir, 'k')], { stdio: 'pipe' });
  execFileSync(path.join(dir, 'k'), [path.join(dir, 'out.bin')], { stdio: 'pipe' });
  const all = new Float32Array(new Uint8Array(fs.readFileSync(path.join(dir, 'out.bin'))).buffer);
  const out = new Map<number, Float32Array>();
  let off = 0;
  for (const id of n.outputs) {
    const cnt = g.values[id].shape.reduce((p, q) => p * q, 1);
    out.set(id, all.subarray(off, off + cnt));
    off += cnt;
  }
  return out;
}

describe('the flash attention kernels run on the CPU through the warp shim', () => {
  const cases = cudaAttentionCases().filter((c) => NAMES.test(String(c.program.name)));
  it('covers the chosen cases', () => expect(cases.length).toBe(16));
  for (const c of cases) {
    // the 16-bit kernels stream their tiles with cp.async: both ends of when a copy may land
    const modes = /^flash_f32|_f32_(fwd|grad)$/.test(String(c.program.name)) ? [false] : [false, true];
    for (const late of modes) {
      it(`${c.program.name}${late ? ' (cp.async landing at the wait)' : ''}: every output within the check's tolerance of the float64 reference`, () => {
        const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-flash-emu-'));
        try {
          const got = runOnCpu(c, dir, late);
          const ref = reference(c, { lr: 0, t: 1, seed: 0, counter: 0 });
          const tol = flashTolerance(c) ?? 1e-4;
          for (const [id, x] of got) expect(relError(x, ref.get(id)!), c.program.graph.values[id].name).toBeLessThan(tol);
        } finally {
          fs.rmSync(dir, { recursive: true, force: true });
        }
      }, 120_000);
    }
  }
});
