/**
 * native_session: the Session (runtime/session.ts) over a built native addon
 * (runtime/cpp/binding.cc), and createCpuSession, which generates the CPU model,
 * builds it (or hits the cache) and loads it.
 *
 * The binding checks every argument again; this layer checks first so errors name the
 * program and input in the host's terms, and compares the module's descriptor table with
 * the ProgramSet (a mismatch means a stale or foreign module: a bug, not a user error).
 */
import { createHash } from 'node:crypto';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PROGRAM_NAMES, type ProgramName, type ProgramSet, type StepScalars } from '../../compiler/ir/graph.js';
import { CPU_GENERATOR_ENV, generateCpuModel, KERNELS_HEADER_FILES } from '../../compiler/codegen-cpu/emit_program.js';
import type { Batch, DeviceCollective, RunOptions, Session } from '../session.js';
import { buildAddon, loadAddon, moduleClosure, sourcesDigest } from './build.js';
import { setSwitches } from '../../compiler/env_switch.js';

export interface AddonTensor {
  name: string;
  dtype: 'f32' | 'i32';
  kind: string;
  shape: number[];
}

export interface AddonDescription {
  abi: number;
  model: string;
  backend: string;
  persistentBytes: number;
  tensors: AddonTensor[];
  programs: { name: string; batch: number; arenaBytes: number; kernels: number; inputs: AddonTensor[]; outputs: string[] }[];
}

/** what binding.cc exports */
export interface NativeAddon {
  describe(): AddonDescription;
  create(threads: number): unknown;
  read(handle: unknown, name: string): Float32Array;
  write(handle: unknown, name: string, data: Float32Array): void;
  /** read false: outputs = NULL for the model (the CUDA backend then does not wait for the step; NaN outputs) */
  run(handle: unknown, program: string, inputs: Batch, scalars: StepScalars, read?: boolean): Float64Array;
  free(handle: unknown): void;
  /** data-parallel collectives (runtime/cpp/mpsc_model.h backend_collective_*): they throw on a backend without them */
  collectiveId(handle: unknown): Uint8Array;
  collectiveInit(handle: unknown, nranks: number, rank: number, id: Uint8Array): void;
  allreduceGrads(handle: unknown): void;
}


export function createNativeSession(modulePath: string, programs: ProgramSet, device: string, threads?: number): Session {
  const addon = loadAddon<NativeAddon>(modulePath);
  const desc = addon.describe();
  for (const name of PROGRAM_NAMES) {
    const p = programs[name];
    const d = desc.programs.find((q) => q.name === name);
    if (!p !== !d) throw new Error(`internal: native module ${modulePath} ${d ? 'has' : 'lacks'} program ${name}, the ProgramSet ${p ? 'has' : 'lacks'} it`);
    if (p && d) {
      const ins = p.inputs.map((id) => p.graph.values[id]);
      const same = ins.length === d.inputs.length && ins.every((v, i) => v.name === d.inputs[i].name && v.dtype === d.inputs[i].dtype && v.shape.join(',') === d.inputs[i].shape.join(','));
      if (!same) throw new Error(`internal: native module ${modulePath} program ${name} inputs do not match the ProgramSet`);
    }
  }
  const shapes = new Map(desc.tensors.map((t) => [t.name, t.shape]));
  const async = desc.backend === 'cuda';
  const names = desc.tensors.map((t) => t.name).sort();
  let handle: unknown = addon.create(threads ?? 0);
  const live = () => {
    if (handle === null) throw new Error('internal: session used after close()');
    return handle;
  };
  // the cuda backend's collective (NCCL; its calls fail with "built without NCCL" where CMake found none)
  const collective: DeviceCollective | undefined = async
    ? {
        name: 'NCCL',
        uniqueId: () => addon.collectiveId(live()),
        init: (nranks: number, rank: number, id: Uint8Array) => addon.collectiveInit(live(), nranks, rank, id),
        allreduceGrads: () => addon.allreduceGrads(live()),
      }
    : undefined;
  return {
    device,
    ...(collective ? { collective } : {}),
    tensorNames: () => [...names],
    tensorShape(name: string): number[] {
      const s = shapes.get(name);
      if (!s) throw new Error(`internal: no persistent tensor '${name}'`);
      return [...s];
    },
    read: (name: string) => addon.read(live(), name),
    write(name: string, data: Float32Array): void {
      const s = shapes.get(name);
      if (!s) throw new Error(`internal: no persistent tensor '${name}'`);
      addon.write(live(), name, data);
    },
    hasProgram: (program: ProgramName) => programs[program] !== undefined,
    run(program: ProgramName, inputs: Batch, scalars: StepScalars, opts?: RunOptions): Float64Array {
      const p = programs[program];
      if (!p) throw new Error(`internal: this model has no program '${program}'`);
      // only the asynchronous backend takes outputs = NULL (the generated CPU models always write them)
      return addon.run(live(), program, inputs, scalars, !(async && opts?.read === false));
    },
    close(): void {
      if (handle !== null) addon.free(handle);
      handle = null;
    },
  };
}

export interface CpuSessionOptions {
  threads?: number;
  cxxflags?: string;
  cacheDir?: string;
  onProgress?: (msg: string) => void;
}

const HERE = path.dirname(fileURLToPath(import.meta.url));
const EXT = path.extname(fileURLToPath(import.meta.url));
/**
 * what the generated CPU sources are a pure function of, besides the ProgramSet and CPU_GENERATOR_ENV: every module the
 * generator reaches (emit_program and its imports: the kernels, compiler/ir's fusion and memory plan it runs itself,
 * scalar_fns' math) and the C++ headers it ships (KERNELS_HEADER_FILES)
 */
export function cpuGeneratorFiles(): string[] {
  return [...moduleClosure(path.resolve(HERE, `../../compiler/codegen-cpu/emit_program${EXT}`)), ...KERNELS_HEADER_FILES];
}
let generatorDigest: string | undefined;

/** digest of the CPU generator's inputs: the ProgramSet (plain data), the generator's sources and its build-time switches (CPU_GENERATOR_ENV) */
export function cpuInputsKey(programs: ProgramSet): string {
  generatorDigest ??= sourcesDigest(cpuGeneratorFiles());
  return createHash('sha256').update(generatorDigest).update(setSwitches(CPU_GENERATOR_ENV)).update('\0').update(JSON.stringify(programs)).digest('hex');
}

/**
 * Generates the CPU model for these programs, builds it (or reuses the cache) and opens a
 * session. A warm cache skips code generation (the key digests the generator's inputs).
 */
export async function createCpuSession(programs: ProgramSet, opts: CpuSessionOptions = {}): Promise<Session> {
  const built = await buildAddon({
    files: () => generateCpuModel(programs).files,
    inputsKey: cpuInputsKey(programs),
    cxxflags: opts.cxxflags,
    cacheDir: opts.cacheDir,
    onProgress: opts.onProgress,
  });
  opts.onProgress?.(built.cached ? `using cached CPU build ${built.dir}` : `built CPU model into ${built.dir}`);
  return createNativeSession(built.modulePath, programs, 'cpu', opts.threads);
}
