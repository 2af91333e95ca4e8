/**
 * The metal-emu Session: the generated `.metal` libraries and dispatch plans, executed by the
 * MSL emulator inside a native module that implements the model ABI (runtime/cpp/mpsc_model.h).
 * The module is built by the shared native build (runtime/native/build.ts, content-addressed
 * cache) and loaded with createNativeSession, so the host side is the CPU backend's.
 * Slow by design: every thread of every threadgroup is a fiber. Never picked by --device auto.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ProgramSet } from '../../compiler/ir/graph.js';
import { buildMetal, metalEmuSources } from '../../compiler/codegen-metal/index.js';
import { programsOf } from '../../compiler/ir/graph.js';
import { buildAddon } from '../native/build.js';
import { createNativeSession } from '../native/native_session.js';
import { gpuUserError } from '../metal-bridge/gpu_caps.js';
import type { Session } from '../session.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
/** emulator sources copied next to the generated model (src/ is on the include path) */
export const EMU_FILES = ['emu_fiber.h', 'emu_dispatch.h', 'metal_compat.h', 'metal_compat_end.h'] as const;
const CAPS_H = 'mpsc_metal_caps.h';

export interface MetalEmuOptions {
  /** OS threads running threadgroups (default: all hardware threads) */
  threads?: number;
  /** ops forced onto the CPU fallback */
  fallbackOps?: string[];
  cxxflags?: string;
  cacheDir?: string;
  onProgress?: (msg: string) => void;
}

/** Everything the metal-emu native module is built from: file name (under src/) -> contents. */
export function metalEmuProjectFiles(programs: ProgramSet, opts: { fallbackOps?: string[] } = {}): { files: Record<string, string>; warnings: string[] } {
  const art = buildMetal(programsOf(programs), programs.model, { fallbackOps: opts.fallbackOps });
  const files = metalEmuSources(art);
  for (const f of EMU_FILES) files[f] = fs.readFileSync(path.join(HERE, f), 'utf8');
  // the bridge's GPU capability rule, which the emulator models (bf16 programs)
  files[CAPS_H] = fs.readFileSync(path.join(HERE, '..', 'metal-bridge', CAPS_H), 'utf8');
  // what `#include <metal_stdlib>` in the unmodified .metal text resolves to
  files['metal_stdlib'] = '// metal-emu: <metal_stdlib> for generated .metal text\n#include "metal_compat.h"\n';
  return { files, warnings: art.warnings };
}

let f16c: boolean | undefined;
/**
 * Flags for the emulator's C++ on this machine: `-mf16c` where an x86-64 CPU has F16C (Linux: the
 * flags of /proc/cpuinfo), so `half` (_Float16) converts to and from float by instruction instead
 * of a libgcc call (__extendhfsf2 was about 40% of an fp16 LeNet run on metal-emu). The same bits:
 * checked against the software conversions over every half, a stride of 613 million float and 44
 * million double patterns, and half arithmetic (bench/NOTES.md, "CI time"). Part of the build key.
 */
export function emuArchFlags(): string[] {
  if (f16c === undefined) {
    f16c = false;
    if (process.arch === 'x64' && process.platform === 'linux') {
      try {
        f16c = /^flags\s*:.*\bf16c\b/m.test(fs.readFileSync('/proc/cpuinfo', 'utf8'));
      } catch {
        f16c = false;
      }
    }
  }
  return f16c ? ['-mf16c'] : [];
}

export async function createMetalEmuSession(programs: ProgramSet, opts: MetalEmuOptions = {}): Promise<Session> {
  const { files, warnings } = metalEmuProjectFiles(programs, opts);
  for (const w of warnings) opts.onProgress?.(`warning: ${w}`);
  // -O2 without -march=native: the emulator is about correctness, and a portable build keeps the cache shareable
  // (-mf16c only where this CPU has it: emuArchFlags)
  const built = await buildAddon({ files, cxxflags: opts.cxxflags ?? ['-O2', ...emuArchFlags()].join(' '), cacheDir: opts.cacheDir, onProgress: opts.onProgress });
  opts.onProgress?.(built.cached ? `using cached metal-emu build ${built.dir}` : `built metal-emu model into ${built.dir}`);
  try {
    return createNativeSession(built.modulePath, programs, 'metal-emu', opts.threads);
  } catch (e) {
    throw gpuUserError(e); // a bf16 program on an emulated GPU without bfloat (MPSC_METAL_EMU_GPU)
  }
}
