/**
 * What the CPU runs of generated CUDA kernels share (cuda_flash_emu / cuda_loss_emu over test/native/cuda_warp_shim.h,
 * cuda_gemm_emu / cuda_ln_emu over cuda_thread_emu.h): a kernel's text for g++ (emuKernelSource), a 16-bit operand's
 * bits (halfBits), and the warp shim's build: every kernel set's C++ (a function `run_<index>(FILE* in, FILE* out)`
 * each) in one program whose `main` runs one set (`emu <index> <late> <operands> <outputs>`; late: cp.async copies land at
 * their wait), compiled by two g++ processes (the two halves of the sets) and linked: one build per test file instead
 * of one per run.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { CUDA } from '../compiler/codegen-cuda/cuda_dialect.js';
import type { KernelSpec, KernelVariant } from '../compiler/kernels/kernel_types.js';
import { kernelSource } from '../compiler/kernels/prelude.js';

const execFileAsync = promisify(execFile);

/** the program `exe` in `dir` from `head` (includes, helpers) and the sets' sources (`static void run_<index>(` each) */
export async function buildShimProgram(dir: string, exe: string, head: string, sets: readonly { index: number; cc: string }[], opt = '-O1'): Promise<void> {
  const half = Math.ceil(sets.length / 2);
  const parts = [sets.slice(0, half), sets.slice(half)];
  const objs = await Promise.all(parts.map(async (part, i) => {
    const cc = path.join(dir, `part${i}.cc`), o = path.join(dir, `part${i}.o`);
    const decls = parts[1 - i].map((b) => `void run_${b.index}(FILE*, FILE*);\n`).join('');
    fs.writeFileSync(cc, head + part.map((b) => b.cc.replace(`static void run_${b.index}(`, `void run_${b.index}(`)).join('\n') +
      (i === 0 ? `${decls}\nint main(int argc, char** argv) {\n  if (argc != 5) return 2;\n  shim_cp_late = argv[2][0] == '1';\n` +
        `  FILE* in = fopen(argv[3], "rb");\n  FILE* out = fopen(argv[4], "wb");\n  if (!in || !out) return 2;\n  switch (atoi(argv[1])) {\n` +
        sets.map((b) => `    case ${b.index}: run_${b.index}(in, out); break;\n`).join('') + '    default: return 2;\n  }\n  fclose(in);\n  return fclose(out) ? 1 : 0;\n}\n' : ''));
    await execFileAsync('g++', ['-std=c++20', opt, '-w', '-c', cc, '-o', o]);
    return o;
  }));
  await execFileAsync('g++', [...objs, '-o', exe]);
}

/** kernel `k`'s text (variant `v`, its body through `edit`) for g++: dynamic shared memory (past 48 KiB) as a static block-shared array of the same size */
export function emuKernelSource(k: KernelSpec, v: KernelVariant = k, edit: (body: string) => string = (b) => b): string {
  return kernelSource(CUDA, k, { ...v, body: edit(v.body) }, '')
    .replace(/extern __shared__ __align__\(16\) float tg\[\];\s*\/\/ (\d+) bytes, dynamic/, (_, b) => `__shared__ __align__(16) float tg[${Number(b) / 4}];`);
}

/** the 16-bit storage bits of x (already representable in type t) */
export function halfBits(x: number, t: 'bf16' | 'f16'): number {
  const f = new DataView(new ArrayBuffer(4));
  if (t === 'bf16') { f.setFloat32(0, x); return f.getUint32(0) >>> 16; }
  if (x === 0) return Object.is(x, -0) ? 0x8000 : 0;
  const s = x < 0 ? 0x8000 : 0, a = Math.abs(x);
  const e = Math.floor(Math.log2(a));
  if (e < -14) return s | Math.round(a / 2 ** -24);
  return s | ((e + 15) << 10) | Math.round((a / 2 ** e - 1) * 1024);
}
