// pdl.ts: programmatic dependent launch between the CUDA graphs' kernels. Checked in the generated text: every
// kernel's first statement is the wait (before the step scalars are read), the host sets the attribute only after
// a generated kernel (mode gen) or also after a cuBLASLt call (mode all), never in a profiled step or on several
// lanes; the switch is part of the build key (as MPSC_CUDA_LANES now is); the host and kernels compile with nvcc.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { withEnv } from './env_helpers.js';
import { checkFile } from '../compiler/check/index.js';
import { precisionOverride } from '../compiler/check/overrides.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { generateCudaModel, HOST_FILE, KERNELS_FILE } from '../compiler/codegen-cuda/index.js';
import { cudaPdl, pdlFor, type PdlMode } from '../compiler/codegen-cuda/pdl.js';
import { runtimeSources } from '../runtime/native/build.js';
import { cudaInputsKey, findNvcc } from '../runtime/cuda/session.js';
import { NVCC_SM90A } from './nvcc_target.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const NV = findNvcc();

function programsOf(file: string, precision?: 'bf16') {
  const model = checkFile(path.join(ROOT, file), precision ? [precisionOverride(precision)] : []);
  return buildPrograms(model, { batch: model.train.batch });
}

/** the kernels' definitions: name -> body text */
function kernelBodies(cuh: string): Map<string, string> {
  const out = new Map<string, string>();
  const re = /extern "C" __global__ void __launch_bounds__\([^)]*\) (\w+)\(/g;
  let m: RegExpExecArray | null;
  while ((m = re.exec(cuh))) {
    const open = cuh.indexOf('{', cuh.indexOf(')\n{', m.index));
    out.set(m[1], cuh.slice(open + 1, open + 400));
  }
  return out;
}

describe('programmatic dependent launch (pdl.ts)', () => {
  it('MPSC_CUDA_PDL: off by default, off / gen / all, anything else a clear error; off on more than one lane', () => {
    expect(withEnv('MPSC_CUDA_PDL', undefined, cudaPdl)).toBe('off');
    expect(withEnv('MPSC_CUDA_PDL', 'gen', cudaPdl)).toBe('gen');
    expect(withEnv('MPSC_CUDA_PDL', 'all', cudaPdl)).toBe('all');
    expect(() => withEnv('MPSC_CUDA_PDL', 'yes', cudaPdl)).toThrow(/MPSC_CUDA_PDL must be one of 'off', 'gen', 'all', got 'yes'/);
    expect(pdlFor('all', 2)).toBe('off');
    expect(pdlFor('gen', 1)).toBe('gen');
  });

  it('off: the kernels and the host code have no trace of it', () => {
    const a = generateCudaModel(programsOf('bench/gpt_tiny_b32_t64.model'), { pdl: 'off', lanes: 1 });
    expect(a.plan.pdl).toBe('off');
    expect(a.files[KERNELS_FILE]).not.toContain('mpsc_pdl_enter');
    expect(a.files[HOST_FILE]).not.toMatch(/mpsc_launch|\bpk\b/);
    expect(a.files[HOST_FILE]).toMatch(/<<<dim3\(/);
  });

  for (const mode of ['gen', 'all'] as PdlMode[])
    it(`${mode}: every kernel waits first; the attribute follows a generated kernel${mode === 'all' ? ' or a cuBLASLt call' : ' only'}; not when profiling`, () => {
      const a = generateCudaModel(programsOf('bench/gpt_tiny_b32_t64.model'), { pdl: mode, lanes: 1 });
      expect(a.plan.pdl).toBe(mode);
      const bodies = kernelBodies(a.files[KERNELS_FILE]);
      expect(bodies.size).toBeGreaterThan(20);
      for (const [name, body] of bodies) expect(body.trimStart().startsWith('mpsc_pdl_enter();'), name).toBe(true);
      // the wait is compiled only for sm_90+ (older GPUs run the kernels as without PDL)
      expect(a.files[KERNELS_FILE]).toMatch(/__CUDA_ARCH__ >= 900\n  asm volatile\("griddepcontrol\.wait;" ::: "memory"\);\n  asm volatile\("griddepcontrol\.launch_dependents;"/);
      const cu = a.files[HOST_FILE];
      expect(cu).not.toMatch(/\bp\d+_k\w*<<</);  // every generated kernel through mpsc_launch (the output gather keeps <<<>>>)
      expect(cu).toContain('const bool pdl = !ev;');
      const launches = cu.match(/mpsc_launch\(pdl && pk, /g) ?? [];
      expect(launches.length).toBeGreaterThan(50);
      // each record function starts with pk false: its first kernel follows the batch upload, not a kernel
      const recs = cu.split(/\nbool record_p\d+\(/).slice(1);
      for (const r of recs) expect(r.indexOf('bool pk = false;')).toBeLessThan(r.indexOf('mpsc_launch('));
      const afterLt = cu.match(/pk = (true|false);  \/\/ after a cuBLASLt call/g) ?? [];
      expect(afterLt.length).toBeGreaterThan(10);
      expect(afterLt.every((l) => l.includes(mode === 'all' ? 'pk = true' : 'pk = false'))).toBe(true);
    });

  it('several lanes: no PDL (a node\'s stream predecessor is not its plan predecessor)', () => {
    const a = generateCudaModel(programsOf('bench/gpt_tiny_b32_t64.model'), { pdl: 'all', lanes: 2 });
    expect(a.plan.pdl).toBe('off');
    expect(a.files[KERNELS_FILE]).not.toContain('mpsc_pdl_enter');
    expect(a.files[HOST_FILE]).not.toContain('mpsc_launch');
  });

  it('MPSC_CUDA_PDL and MPSC_CUDA_LANES are part of the CUDA build key (a warm cache never serves another variant)', () => {
    const ps = programsOf('bench/mnist_mlp_b256_adam.model');
    const plain = withEnv('MPSC_CUDA_PDL', undefined, () => withEnv('MPSC_CUDA_LANES', undefined, () => cudaInputsKey(ps)));
    const pdl = withEnv('MPSC_CUDA_PDL', 'gen', () => withEnv('MPSC_CUDA_LANES', undefined, () => cudaInputsKey(ps)));
    const lanes = withEnv('MPSC_CUDA_PDL', undefined, () => withEnv('MPSC_CUDA_LANES', '2', () => cudaInputsKey(ps)));
    expect(new Set([plain, pdl, lanes]).size).toBe(3);
  });

  it.skipIf(!NV)('the PDL host code and kernels of char_gpt (bf16: cuBLASLt calls and flash attention) compile with nvcc for sm_90a', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-pdl-'));
    try {
      const a = generateCudaModel(programsOf('specs/char_gpt.model', 'bf16'), { pdl: 'all', lanes: 1 });
      for (const [f, t] of Object.entries({ ...runtimeSources(true), ...a.files })) fs.writeFileSync(path.join(dir, f), t);
      execFileSync(NV!.nvcc, [...NVCC_SM90A, '-c', path.join(dir, HOST_FILE), '-o', path.join(dir, 'o.o'), '-Werror', 'all-warnings', '-I', path.join(ROOT, 'test/fixtures/cublaslt_decl'), '-DMPSC_CUBLASLT'], { stdio: 'pipe' });
      // the wait and the trigger reach the PTX of every kernel for sm_90a
      execFileSync(NV!.nvcc, [...NVCC_SM90A, '-ptx', path.join(dir, HOST_FILE), '-o', path.join(dir, 'o.ptx'), '-I', path.join(ROOT, 'test/fixtures/cublaslt_decl'), '-DMPSC_CUBLASLT'], { stdio: 'pipe' });
      const ptx = fs.readFileSync(path.join(dir, 'o.ptx'), 'utf8');
      const entries = (ptx.match(/\.entry p\d+_k/g) ?? []).length;
      expect(entries).toBeGreaterThan(20);
      expect((ptx.match(/griddepcontrol\.wait;/g) ?? []).length).toBeGreaterThanOrEqual(entries);
      expect((ptx.match(/griddepcontrol\.launch_dependents;/g) ?? []).length).toBeGreaterThanOrEqual(entries);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 600_000);
});
