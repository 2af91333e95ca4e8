/**
 * Device selection: `--device auto|cuda|cpu|metal|metal-emu|reference`.
 *  - auto: cuda when this machine has an NVIDIA GPU and the CUDA toolkit (and the CUDA model
 *    builds and starts), else metal on macOS/Apple silicon with a usable Metal backend, else cpu
 *    (never metal-emu, which is a correctness tool, nor reference, which is slow); the choice and
 *    the reason are reported in `note`.
 *  - cuda: the generated CUDA backend (runtime/cuda); without a GPU or toolkit a UserError says which is missing.
 *  - cpu: the generated C++ backend; metal-emu: the MSL emulator; reference: the float64 interpreter.
 *  - metal anywhere else than macOS on Apple silicon: a UserError suggesting metal-emu or cpu.
 *  - a 16-bit train precision (ProgramSet.precision) runs on cpu, metal, metal-emu and reference
 *    (HALF_DEVICES): another device is a UserError naming those, and auto picks cpu. On metal, a
 *    bf16 program also needs a GPU with bfloat (the bridge checks: docs/metal.md).
 * Backends are imported lazily, through literal import() paths in one registry (BACKENDS), so a
 * missing or broken backend never breaks the others.
 */
import { UserError } from '../compiler/errors.js';
import type { ProgramSet } from '../compiler/ir/graph.js';
import type { Session } from './session.js';

export const DEVICES = ['auto', 'cuda', 'cpu', 'metal', 'metal-emu', 'reference'] as const;
export type DeviceName = (typeof DEVICES)[number];

export interface OpenOptions {
  threads?: number;
  /** build / compile progress messages of a backend */
  onProgress?: (msg: string) => void;
}

export interface OpenedSession {
  session: Session;
  /** the device actually used ('cpu', 'reference', ...) */
  device: string;
  /** one line saying what was picked and why (for auto) */
  note: string;
}

type Factory = (programs: ProgramSet, opts: OpenOptions) => Promise<Session>;
type Backend = Exclude<DeviceName, 'auto'>;

/**
 * The one registry of backends: each is loaded on first use through a literal import() (lazy, so
 * a backend's dependencies load only when it is picked; literal, so tsc checks the module and its
 * factory's type, and a reader can follow it).
 */
const BACKENDS: Record<Backend, () => Promise<Factory>> = {
  cuda: async () => (await import('./cuda/session.js')).createCudaSession,
  cpu: async () => (await import('./native/native_session.js')).createCpuSession,
  'metal-emu': async () => (await import('./metal-emu/session.js')).createMetalEmuSession,
  metal: async () => (await import('./metal-bridge/session.js')).createMetalSession,
  reference: async () => (await import('./reference_session.js')).createReferenceSession,
};

function isModuleMissing(e: unknown): boolean {
  const code = (e as { code?: string })?.code;
  return code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND';
}

/** the backend's session factory, or null when its module is missing from this build */
async function loadFactory(device: Backend): Promise<Factory | null> {
  try {
    return await BACKENDS[device]();
  } catch (e) {
    if (isModuleMissing(e)) return null;
    throw e;
  }
}

export function isAppleSilicon(): boolean {
  return process.platform === 'darwin' && process.arch === 'arm64';
}

export function parseDevice(d: string): DeviceName {
  if ((DEVICES as readonly string[]).includes(d)) return d as DeviceName;
  throw new UserError(`error: unknown device '${d}'\n  help: use one of ${DEVICES.join(', ')}`);
}

function metalElsewhere(): UserError {
  return new UserError(
    `error: --device metal needs macOS on Apple silicon (this machine is ${process.platform}/${process.arch})\n` +
      `  help: use --device cpu to train here, or --device metal-emu to run the generated Metal kernels in the emulator (slow, for testing)`,
  );
}

/** the devices that run a 16-bit train precision (the others have no 16-bit kernels yet) */
export const HALF_DEVICES: readonly DeviceName[] = ['cpu', 'metal', 'metal-emu', 'reference'];

/** a UserError when `programs` has a 16-bit precision and device `d` (a backend or a build target) has no 16-bit kernels */
export function checkPrecisionSupported(d: string, programs: ProgramSet): void {
  if (programs.precision && !(HALF_DEVICES as readonly string[]).includes(d)) throw precisionUnsupported(d, programs.precision);
}

function precisionUnsupported(d: string, precision: string): UserError {
  return new UserError(
    `error: --device ${d} does not run precision "${precision}" yet; it runs on ${HALF_DEVICES.map((x) => `--device ${x}`).join(', ')}\n` +
      `  help: use --device cpu, or train in fp32 on this device (--precision fp32)`,
  );
}

/** Open a session for `device` (resolving auto). */
export async function openSession(device: string, programs: ProgramSet, opts: OpenOptions = {}): Promise<OpenedSession> {
  const d = parseDevice(device);
  if (d !== 'auto') checkPrecisionSupported(d, programs);
  if (d === 'auto' && programs.precision) {
    // auto never picks metal-emu or reference, and cuda has no 16-bit kernels yet: the cpu, saying so
    const cpu = await loadFactory('cpu');
    if (cpu) return { session: await cpu(programs, opts), device: 'cpu', note: `device: cpu (auto: precision ${programs.precision} runs on ${HALF_DEVICES.join(', ')}; auto picks cpu)` };
  }
  if (d === 'auto') {
    let cudaWhy = '';
    const probe = await import('./cuda/session.js').catch((e) => (isModuleMissing(e) ? null : Promise.reject(e)));
    const missing = probe ? probe.cudaUnavailable() : 'the cuda backend is not in this build';
    if (!missing) {
      const cuda = await loadFactory('cuda');
      if (cuda) {
        try {
          return { session: await cuda(programs, opts), device: 'cuda', note: 'device: cuda (auto: an NVIDIA GPU and the CUDA toolkit are present)' };
        } catch (e) {
          cudaWhy = `the cuda backend failed: ${(e as Error).message.split('\n')[0]}`;
          opts.onProgress?.(`${cudaWhy}; trying the next device`);
        }
      }
    } else cudaWhy = missing;
    if (isAppleSilicon()) {
      const metal = await loadFactory('metal');
      if (metal) {
        try {
          return { session: await metal(programs, opts), device: 'metal', note: `device: metal (auto: ${cudaWhy}; macOS on Apple silicon)` };
        } catch (e) {
          opts.onProgress?.(`metal backend unavailable (${(e as Error).message.split('\n')[0]}); falling back to cpu`);
        }
      }
    }
    const cpu = await loadFactory('cpu');
    if (cpu) {
      const why = `auto: ${cudaWhy}; ${isAppleSilicon() ? 'no usable Metal backend' : `no Metal on ${process.platform}`}`;
      return { session: await cpu(programs, opts), device: 'cpu', note: `device: cpu (${why})` };
    }
    const ref = await loadFactory('reference');
    if (ref) {
      return {
        session: await ref(programs, opts),
        device: 'reference',
        note: 'device: reference (auto: the cpu backend is not available in this build; the float64 interpreter is slow)',
      };
    }
    throw new UserError('error: no backend is available in this build of mpsc');
  }
  if (d === 'metal' && !isAppleSilicon()) throw metalElsewhere();
  const f = await loadFactory(d);
  if (!f) throw new UserError(`error: the ${d} backend is not available in this build of mpsc\n  help: use --device ${d === 'cpu' ? 'reference' : 'cpu'}`);
  return { session: await f(programs, opts), device: d, note: `device: ${d}` };
}
