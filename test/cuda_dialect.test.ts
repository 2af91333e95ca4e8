/**
 * The CUDA dialect of the GPU kernel language (compiler/codegen-cuda/cuda_dialect.ts): every
 * kernel of the example specs (train_step and eval) and of every op case of the Metal kernel
 * tests (the 16-bit cases of mixed precision included: __half / __nv_bfloat16 buffers), lowered once more for CUDA, compiles with `nvcc` for sm_90a (test/nvcc_target.ts) with warnings as errors.
 * Compile only: nothing runs on a GPU here (bench/cuda_check.sh runs them on one).
 * The same lowering gives MSL without any CUDA spelling, and CUDA without any MSL spelling.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkFile } from '../compiler/check/index.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import type { Program } from '../compiler/ir/graph.js';
import { lowerProgram, type LoweredProgram } from '../compiler/codegen-metal/lower_program.js';
import { programLayout, persistentTable } from '../compiler/codegen-metal/layout.js';
import { programsOf } from '../compiler/ir/graph.js';
import { CUDA } from '../compiler/codegen-cuda/cuda_dialect.js';
import { MSL } from '../compiler/codegen-metal/msl_dialect.js';
import { kernelFile } from '../compiler/kernels/prelude.js';
import type { Helper } from '../compiler/kernels/kernel_types.js';
import { allOpCases, fusedCases, halfCases, halfIoCases, reluGradFoldCases } from './metal_cases.js';
import { NVCC_COMPILE_CHECK } from './nvcc_target.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const NVCC = ['/usr/local/bin/nvcc', '/usr/local/cuda/bin/nvcc'].find((p) => fs.existsSync(p)) ?? 'nvcc';

function lowerAll(programs: Program[], d: typeof CUDA | typeof MSL, prefix: (i: number) => string): LoweredProgram[] {
  const table = persistentTable(programs);
  return programs.map((p, i) => lowerProgram(p, { noFallback: true, kernelPrefix: prefix(i) }, programLayout(p, table), d));
}

function cudaSource(lps: LoweredProgram[], title: string): string {
  const helpers = new Set<Helper>();
  for (const lp of lps) for (const h of lp.helpers) helpers.add(h);
  return kernelFile(CUDA, [title], helpers, lps.flatMap((lp) => lp.kernels), { plain: ' [16x16 tiles]', mma: ' [8x8 matrix unit]' });
}

/** nvcc -c of each file, unoptimised (NVCC_COMPILE_CHECK: this test asks only that nvcc accepts every kernel without a warning); returns the failures (file: compiler output) */
function nvcc(files: string[]): string[] {
  const bad: string[] = [];
  for (const f of files) {
    try {
      execFileSync(NVCC, [...NVCC_COMPILE_CHECK, '-c', f, '-o', f.replace(/\.cu$/, '.o'), '-Werror', 'all-warnings'], { stdio: 'pipe' });
    } catch (e) {
      const err = e as { stderr?: Buffer; message: string };
      bad.push(`${path.basename(f)}: ${err.stderr?.toString() || err.message}`);
    }
  }
  return bad;
}

const specPrograms = (spec: string) => {
  const model = checkFile(path.join(ROOT, 'specs', spec));
  return programsOf(buildPrograms(model, { batch: model.train.batch }));
};

describe('the CUDA dialect', () => {
  it('renders the same kernels with CUDA spellings only (and MSL with MSL spellings only)', () => {
    const programs = specPrograms('lenet.model');
    const cu = cudaSource(lowerAll(programs, CUDA, (i) => `p${i}_`), 'lenet');
    expect(cu).toMatch(/extern "C" __global__ void __launch_bounds__\(256\) p0_k0\(/);
    expect(cu).toMatch(/__syncthreads\(\);/);
    expect(cu).toMatch(/mpsc_warp_sum/);
    expect(cu).toMatch(/mpsc_mat8_mac/);
    expect(cu).not.toMatch(/precise::|threadgroup_barrier|simd_sum|simdgroup_|\[\[|device |kernel void/);
    const msl = kernelFile(MSL, ['lenet'], new Set(['block_reduce']), lowerAll(programs, MSL, () => '').flatMap((lp) => lp.kernels), { plain: '', mma: '' });
    expect(msl).not.toMatch(/__syncthreads|__global__|__shared__|mpsc_warp|mpsc_mat8|expf\(/);
  });

  it('every kernel of the example specs and of every op case compiles with nvcc for sm_90a', () => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-cuda-'));
    try {
      const files: string[] = [];
      for (const spec of fs.readdirSync(path.join(ROOT, 'specs')).filter((f) => f.endsWith('.model'))) {
        const f = path.join(out, spec.replace(/\.model$/, '.cu'));
        fs.writeFileSync(f, cudaSource(lowerAll(specPrograms(spec), CUDA, (i) => `p${i}_`), spec));
        files.push(f);
      }
      const cases = [...allOpCases(), ...fusedCases(), ...reluGradFoldCases(), ...halfCases(), ...halfIoCases()].map((c) => c.program);
      const f = path.join(out, 'op_cases.cu');
      fs.writeFileSync(f, cudaSource(lowerAll(cases, CUDA, (i) => `c${i}_`), 'op cases'));
      files.push(f);
      expect(nvcc(files)).toEqual([]);
    } finally {
      fs.rmSync(out, { recursive: true, force: true });
    }
  }, 600_000);
});
