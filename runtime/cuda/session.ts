/**
 * The cuda Session: the generated CUDA model (compiler/codegen-cuda: kernels from the shared kernel
 * language + host code over one device allocation and one CUDA graph per program), built by the
 * shared native build (runtime/native/build.ts: cmake-js, CUDA as a CMake language, the
 * content-addressed cache) and loaded with createNativeSession, so the host side is the CPU
 * backend's. Also the probes `--device auto` and `mpsc build --target cuda` use: where nvcc is,
 * which GPU this machine has (nvidia-smi) and the CUDA architecture to build for (90a on Hopper,
 * else the GPU's own compute capability).
 * Errors a user can act on (no toolkit, no GPU, driver too old, out of GPU memory) are UserErrors.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { UserError } from '../../compiler/errors.js';
import type { ProgramSet } from '../../compiler/ir/graph.js';
import { generateCudaModel, type CudaArtifacts, type CudaGemm } from '../../compiler/codegen-cuda/index.js';
import { gemmChoiceLine } from '../../compiler/codegen-cuda/cublaslt.js';
import type { Tf32x3Mode } from '../../compiler/codegen-cuda/tf32x3.js';
import { attnTf32x3Enabled } from '../../compiler/codegen-cuda/attention_tf32x3.js';
import { flashWgmmaForced, flashWgmmaSetting } from '../../compiler/codegen-cuda/attention_cuda.js';
import { cudaFuseOff } from '../../compiler/codegen-cuda/fusions.js';
import { buildAddon, defaultCacheDir, moduleClosure, sourcesDigest, type CudaBuild } from '../native/build.js';
import { createNativeSession } from '../native/native_session.js';
import type { Session } from '../session.js';
import { envChoice, envFlag, setSwitches } from '../../compiler/env_switch.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const EXT = path.extname(fileURLToPath(import.meta.url));

/** the nvcc to use ($MPSC_NVCC, /usr/local/bin, /usr/local/cuda/bin, PATH) and its release line, or null */
export function findNvcc(): { nvcc: string; version: string } | null {
  const candidates = [process.env.MPSC_NVCC, '/usr/local/bin/nvcc', '/usr/local/cuda/bin/nvcc', 'nvcc'].filter((c): c is string => !!c);
  for (const nvcc of candidates) {
    if (nvcc.includes('/') && !fs.existsSync(nvcc)) continue;
    const r = spawnSync(nvcc, ['--version'], { encoding: 'utf8' });
    if (r.status === 0) return { nvcc, version: r.stdout.split('\n').find((l) => /release/.test(l))?.trim() ?? r.stdout.trim() };
  }
  return null;
}

export interface GpuInfo { name: string; computeCap: string }

/** the first GPU nvidia-smi lists, or null (no driver, no GPU, no nvidia-smi) */
export function findGpu(): GpuInfo | null {
  const r = spawnSync('nvidia-smi', ['--query-gpu=name,compute_cap', '--format=csv,noheader'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) return null;
  const line = r.stdout.split('\n').find((l) => l.trim());
  if (!line) return null;
  const [name, cap] = line.split(',').map((s) => s.trim());
  return /^\d+\.\d+$/.test(cap ?? '') ? { name, computeCap: cap } : null;
}

/**
 * The cuBLASLt header of the CUDA toolkit nvcc belongs to (as CMake's FindCUDAToolkit looks for it
 * next to nvcc), or null: where it is, the build links cuBLASLt and the GEMM nodes cublaslt.ts
 * chose run as cuBLASLt calls; elsewhere they run as their generated kernels.
 */
export function findCublasLt(nvcc: string | null = findNvcc()?.nvcc ?? null): string | null {
  for (const d of cudaIncludeDirs(nvcc)) if (fs.existsSync(path.join(d, 'cublasLt.h'))) return path.join(d, 'cublasLt.h');
  return null;
}

/**
 * nccl.h where the generated CMake project looks for it (the CUDA toolkit's include folders,
 * $NCCL_HOME/include, /usr/include, /usr/local/include), or null: without it the model is built
 * without NCCL and `--gpus` (runtime/ddp) refuses to start.
 */
export function findNccl(nvcc: string | null = findNvcc()?.nvcc ?? null): string | null {
  const dirs = [...cudaIncludeDirs(nvcc), ...(process.env.NCCL_HOME ? [path.join(process.env.NCCL_HOME, 'include')] : []), '/usr/include', '/usr/local/include'];
  for (const d of dirs) if (fs.existsSync(path.join(d, 'nccl.h'))) return path.join(d, 'nccl.h');
  return null;
}

/** the include folders of the CUDA toolkit: next to nvcc (through links), $CUDA_HOME / $CUDA_PATH, /usr/local/cuda */
export function cudaIncludeDirs(nvcc: string | null): string[] {
  const dirs = new Set<string>();
  if (nvcc) {
    try {
      const bin = path.dirname(fs.realpathSync(nvcc.includes('/') ? nvcc : (spawnSync('sh', ['-c', `command -v ${nvcc}`], { encoding: 'utf8' }).stdout.trim() || nvcc)));
      dirs.add(path.resolve(bin, '../include'));
      dirs.add(path.resolve(bin, '../targets/x86_64-linux/include'));
    } catch {
      // nvcc vanished between the probes
    }
  }
  for (const env of [process.env.CUDA_HOME, process.env.CUDA_PATH]) if (env) dirs.add(path.join(env, 'include'));
  dirs.add('/usr/local/cuda/include');
  return [...dirs].filter((d) => fs.existsSync(d));
}

/** whether GEMM nodes may become cuBLASLt calls: $MPSC_CUDA_CUBLASLT = 1 (default) | 0 (every GEMM generated, for A/B runs and checks) */
export function cublasLtChoice(): boolean {
  return envFlag('MPSC_CUDA_CUBLASLT', true);
}

/**
 * whether fp32 cuBLASLt calls run over 3xTF32 split operands (compiler/codegen-cuda/tf32x3.ts): $MPSC_CUDA_TF32X3 =
 * 1 (default: the size rule) | 0 (never: every fp32 call is fp32 FMA, for A/B runs) | all (every fp32 call, for checks)
 */
export function tf32x3Choice(): Tf32x3Mode {
  const v = envChoice('MPSC_CUDA_TF32X3', ['0', '1', 'all'], '1');
  return v === '1' ? 'rule' : v === '0' ? 'off' : 'all';
}

/**
 * MPSC_CUDA_FLASH_WGMMA=fwd,kv,q (a list: flash kernels on Hopper's wgmma whatever the target, codegen-cuda/attention_cuda.ts) builds only for sm_90a:
 * on another GPU it is the user's setting that cannot apply, said before nvcc would fail on the instructions
 */
export function wgmmaArchCheck(architectures: string): void {
  if (flashWgmmaForced() && architectures !== '90a')
    throw new UserError(`error: MPSC_CUDA_FLASH_WGMMA=${String(flashWgmmaSetting())} needs a Hopper GPU (sm_90a: wgmma); this build targets sm_${architectures}\n  help: unset MPSC_CUDA_FLASH_WGMMA (auto: wgmma only where the build targets Hopper; the other flash kernels run on any GPU of sm_80 or later)`);
}

/** CMAKE_CUDA_ARCHITECTURES for a compute capability: 90a on Hopper (its own instructions), else e.g. 89 */
export function cudaArchitecture(computeCap: string | null): string {
  if (!computeCap) return '90a';
  const [maj, min] = computeCap.split('.');
  return maj === '9' && min === '0' ? '90a' : `${maj}${min}`;
}

/**
 * how the cuBLASLt calls' algorithms are chosen at create ($MPSC_CUDA_LT_TUNE): waves (default: each call's heuristic
 * candidates timed on its own operands, the fastest kept, except where the heuristic's first fills less than one wave
 * of the GPU: that call keeps it, since it shares the SMs with the graph's other lanes), 1 (every call tuned), 0
 * (the heuristic's first, for A/B runs). Read by runtime/cuda/mpsc_cublaslt.cpp at create; validated here so a typo
 * is a UserError, not a silent default.
 */
export function ltTuneChoice(): 'waves' | '1' | '0' {
  return envChoice('MPSC_CUDA_LT_TUNE', ['waves', '1', '0'], 'waves');
}

/**
 * The file where mpsc_cublaslt.cpp remembers its tuned choices (one line per GPU, cuBLASLt version and call
 * description): $MPSC_CUDA_LT_TUNE_FILE, else cublaslt-tune.tsv in the build cache. Later sessions read it back,
 * so every run of a spec on one GPU takes the same algorithms (the same bits), and tunes nothing again.
 */
export function ltTuneFile(cacheDir?: string): string {
  return process.env.MPSC_CUDA_LT_TUNE_FILE || path.join(cacheDir ?? defaultCacheDir(), 'cublaslt-tune.tsv');
}

/** Why CUDA cannot run here, or null when a toolkit and a GPU are both present. */
export function cudaUnavailable(): string | null {
  const gpu = findGpu();
  if (!gpu) return 'no CUDA device found: nvidia-smi lists no GPU';
  if (!findNvcc()) return `a GPU (${gpu.name}) but no CUDA toolkit: nvcc was not found (set MPSC_NVCC or put nvcc on PATH)`;
  return null;
}

export interface CudaSessionOptions {
  cxxflags?: string;
  cacheDir?: string;
  onProgress?: (msg: string) => void;
  /** false: one launch per element-wise kernel (compiler/codegen-cuda/merge.ts off; the check script's bitwise comparison) */
  merge?: boolean;
}

/**
 * what the generated CUDA sources are a pure function of, besides the ProgramSet and the options cudaInputsKey names:
 * every module the generator reaches (codegen-cuda/index and its imports: the shared kernels, codegen-metal's lowering
 * and dispatch plan, compiler/ir's fusion, memory plan and recomputation it runs itself); it reads no file as text
 */
export function cudaGeneratorFiles(): string[] {
  return moduleClosure(path.resolve(HERE, `../../compiler/codegen-cuda/index${EXT}`));
}
let generatorDigest: string | undefined;

/** the GEMM kernels to generate: $MPSC_CUDA_GEMM = cuda (64x64 tiles, default) | shared (the kernel language's 16x16 tiles) */
export function cudaGemmChoice(): CudaGemm {
  return envChoice<CudaGemm>('MPSC_CUDA_GEMM', ['cuda', 'shared'], 'cuda');
}

/**
 * Build-time env switches of the CUDA generator whose generated code differs by value (A/B variants:
 * class_rows.ts fusedGrad / rowBlock, attention_cuda.ts flashForwardRows / flashLdsm / flashMinBlocks, gemm_cuda.ts smallGemm,
 * cublaslt.ts's small fp32 rule, layernorm_cuda.ts's finish kernel, attention_tf32x3.ts x3Async / x3KSplit, conv_cuda.ts's
 * MPSC_CONV_* switches, lanes.ts's graph lanes, pdl.ts's programmatic dependent launch, wide_ew_cuda.ts gradSumBlocks / adamVec / ewVec32):
 * part of the build key, so that a variant never reuses another's cached build.
 */
export const GENERATOR_ENV: readonly string[] = [
  'MPSC_CUDA_CE_FUSE', 'MPSC_CUDA_CE_ROW_BLOCK', 'MPSC_CUDA_CE_UNROLL', 'MPSC_CUDA_CE_VEC', 'MPSC_CUDA_EW_VEC', 'MPSC_CUDA_LN_VEC', 'MPSC_CUDA_FLASH_DQ', 'MPSC_CUDA_FLASH_FWD_ROWS', 'MPSC_CUDA_FLASH_LDSM', 'MPSC_CUDA_FLASH_MINBLOCKS',
  'MPSC_CUDA_GEMM_SMALL', 'MPSC_CUDA_SMALL_GEN', 'MPSC_CUDA_SMALL_FP32', 'MPSC_CUDA_LANE_SCRATCH', 'MPSC_CUDA_REUSE_GAP', 'MPSC_CUDA_SMALL_PRESPLIT', 'MPSC_CUDA_LN_FINISH', 'MPSC_CUDA_ATTN_X3_ASYNC', 'MPSC_CUDA_ATTN_X3_KSPLIT', 'MPSC_CUDA_FLASH_BWD_MERGE',
  'MPSC_CONV_TAPS', 'MPSC_CONV_FRAG', 'MPSC_CONV_STAGES', 'MPSC_CONV_ROUND', 'MPSC_CONV_BM256', 'MPSC_CONV_VEC16', 'MPSC_CONV_GI_VEC16',
  'MPSC_CUDA_LANES', 'MPSC_CUDA_PDL', 'MPSC_CUDA_TF32X3_CHUNK_TILES', 'MPSC_CUDA_TF32X3_KMAJOR', 'MPSC_CUDA_FLASH_DELTA_FOLD', 'MPSC_CUDA_LANE_PRIORITY', 'MPSC_CUDA_SMALL_EPI', 'MPSC_CUDA_FLASH_WGMMA', 'MPSC_CUDA_FLASH_WGMMA_PIPE',
  'MPSC_CUDA_FLASH_WGMMA_DELTA', 'MPSC_CUDA_FLASH_WGMMA_FWD_PIPE', 'MPSC_CUDA_FLASH_WGMMA_FWD_ROWS', 'MPSC_CUDA_FLASH_WGMMA_Q_ROWS', 'MPSC_CUDA_GRAD_SUM_BLOCKS', 'MPSC_CUDA_CE_SMEM', 'MPSC_CUDA_LN_GRAD', 'MPSC_CUDA_ADAM_VEC', 'MPSC_CUDA_EW_VEC32',
];

/** digest of what the generated CUDA sources are a pure function of (the generator, the programs, the options, $MPSC_CUDA_ATTN_TF32X3, GENERATOR_ENV) */
export function cudaInputsKey(programs: ProgramSet, gemm: CudaGemm = 'cuda', cublasLt = true, merge = true, tf32x3: Tf32x3Mode = 'rule'): string {
  generatorDigest ??= sourcesDigest(cudaGeneratorFiles());
  const env = setSwitches(GENERATOR_ENV);
  return createHash('sha256').update(generatorDigest).update('\0').update(gemm).update(cublasLt ? '\0lt' : '\0nolt').update(merge ? '' : '\0unmerged')
    .update(tf32x3 === 'rule' ? '' : `\0tf32x3:${tf32x3}`).update(attnTf32x3Enabled() ? '' : '\0attn-cuda-cores').update(env)
    // $MPSC_CUDA_FUSE_OFF changes what buildCuda fuses (codegen-cuda/fusions.ts)
    .update(cudaFuseOff().length ? `\0fuseoff:${cudaFuseOff().join(',')}` : '')
    .update('\0').update(JSON.stringify(programs)).digest('hex');
}

/** The CUDA build settings for this machine (nvcc, architecture), or a UserError saying what is missing. */
export function cudaBuildSettings(): CudaBuild & { gpu: GpuInfo | null } {
  const nv = findNvcc();
  if (!nv) throw new UserError('error: --device cuda: no CUDA toolkit found (nvcc is not in /usr/local/bin, /usr/local/cuda/bin or on PATH)\n  help: install the CUDA toolkit or set MPSC_NVCC; or use --device cpu');
  const gpu = findGpu();
  return { nvcc: nv.nvcc, version: nv.version, architectures: cudaArchitecture(gpu?.computeCap ?? null), gpu, nccl: findNccl(nv.nvcc) };
}

/**
 * What `mpsc build` and the run log say about the GEMM nodes: a count per path, the rule's reasons,
 * and whether this toolkit has cuBLASLt (`ltHeader`); `detail`: one line per GEMM node.
 */
export function gemmReport(gemms: CudaArtifacts['gemms'], ltHeader: string | null, detail = false): string[] {
  const all = gemms.flatMap((p) => p.choices.map((c) => ({ program: p.program, c })));
  const lt = all.filter((x) => x.c.path === 'cublaslt');
  const lines = [
    `GEMM nodes: ${lt.length} of ${all.length} chosen for cuBLASLt (linear / matmul it can address: fp32 FMA or 16-bit operands, fp32 accumulation), ` +
      `${all.length - lt.length} generated (convolutions, partial broadcasts, small fp32 products with MPSC_CUDA_SMALL_GEN=1, or MPSC_CUDA_CUBLASLT=0); ` +
      (lt.length === 0 ? 'no cuBLASLt call in this model'
        : ltHeader ? `cuBLASLt found (${ltHeader}): those run as cuBLASLt calls, each falling back to its generated kernel if cuBLASLt has no algorithm for it`
        : 'no cuBLASLt in this CUDA toolkit: they run as their generated kernels'),
  ];
  const x3 = lt.filter((x) => x.c.tf32x3).length;
  if (lt.length) lines.push(`3xTF32 (fp32 calls over split operands on the tensor cores, compiler/codegen-cuda/tf32x3.ts): ${x3} of the ${lt.length} cuBLASLt calls (the size rule; MPSC_CUDA_TF32X3=0 turns it off)`);
  if (detail) for (const x of all) lines.push(`  ${x.program}: ${gemmChoiceLine(x.c)}`);
  return lines;
}

export async function createCudaSession(programs: ProgramSet, opts: CudaSessionOptions = {}): Promise<Session> {
  const gpu = findGpu();
  if (!gpu) throw new UserError('error: --device cuda: no CUDA device found (nvidia-smi lists no GPU, or there is no NVIDIA driver)\n  help: use --device cpu on this machine');
  const settings = cudaBuildSettings();
  wgmmaArchCheck(settings.architectures);
  let planned = 0, ltCalls = 0;
  const gemm = cudaGemmChoice();
  const cublasLt = cublasLtChoice();
  const tf32x3 = tf32x3Choice();
  const ltHeader = findCublasLt(settings.nvcc);
  let report: string[] = [];
  const generate = () => {
    const a = generateCudaModel(programs, { gemm, cublasLt, merge: opts.merge, tf32x3, arch: settings.architectures });
    planned = a.plan.deviceBytes;
    ltCalls = a.gemms.flatMap((p) => p.choices).filter((c) => c.path === 'cublaslt').length;
    report = gemmReport(a.gemms, ltHeader);
    return a;
  };
  const built = await buildAddon({
    files: () => generate().files,
    inputsKey: cudaInputsKey(programs, gemm, cublasLt, opts.merge !== false, tf32x3),
    cxxflags: opts.cxxflags ?? '-O2',
    cacheDir: opts.cacheDir,
    cuda: settings,
    onProgress: opts.onProgress,
  });
  if (!planned) generate();
  opts.onProgress?.(`${built.cached ? 'using cached' : 'built'} CUDA model (sm_${settings.architectures}, ${gpu.name}, ${gemm} GEMMs) in ${built.dir}; planned device memory ${planned} bytes (one allocation)`);
  for (const line of report) opts.onProgress?.(line);
  const tune = ltTuneChoice();
  const tuneFile = ltTuneFile(opts.cacheDir);
  if (tune !== '0' && ltCalls > 0 && ltHeader)
    opts.onProgress?.(`cuBLASLt algorithms: each call's heuristic candidates timed once at create, the fastest kept${tune === 'waves' ? ' (calls under one wave of the GPU keep the first)' : ''} (remembered in ${tuneFile}; MPSC_CUDA_LT_TUNE=0: the heuristic's first)`);
  // the model's create (inside createNativeSession) reads the file's name from the environment: set for that call only
  const savedFile = process.env.MPSC_CUDA_LT_TUNE_FILE;
  process.env.MPSC_CUDA_LT_TUNE_FILE = tuneFile;
  try {
    // one host thread: the work runs on the GPU
    return createNativeSession(built.modulePath, programs, 'cuda', 1);
  } catch (e) {
    const msg = (e as Error).message;
    if (/^mpsc: /.test(msg) && !/internal/.test(msg)) throw new UserError(`error: --device cuda: ${msg.replace(/^mpsc: /, '')}`);
    throw e;
  } finally {
    if (savedFile === undefined) delete process.env.MPSC_CUDA_LT_TUNE_FILE;
    else process.env.MPSC_CUDA_LT_TUNE_FILE = savedFile;
  }
}
