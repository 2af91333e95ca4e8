/**
 * The warp-shim emulator's build, shared by the CPU runs of generated CUDA kernels over test/native/cuda_warp_shim.h
 * (cuda_flash_emu.test.ts, cuda_loss_emu.test.ts): every kernel set's C++ (a function `run_<index>(FILE* in, FILE* out)`
 * each) in one program whose `main` runs one set (`emu <index> <late> <operands> <outputs>`; late: cp.async copies land at
 * their wait), compiled by two g++ processes (the two halves of the sets) and linked: one build per test file instead
 * of one per run.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

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
