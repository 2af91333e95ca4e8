/**
 * createMetalSession (macOS on Apple silicon): generates the Metal project for a ProgramSet
 * (compiler/codegen-metal generateMetalProject: .metal libraries, plans, bridge sources, and
 * the package.json / mpsc_paths.cmake cmake-js and the CMake project need),
 * builds the Objective-C++ bridge with cmake-js into a content-addressed cache, and loads it
 * through the shared native session (runtime/native/native_session.ts) as device 'metal'.
 * Never executed by its authors (no Mac was available): see README.md.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { UserError } from '../../compiler/errors.js';
import type { ProgramSet } from '../../compiler/ir/graph.js';
import { generateMetalProject } from '../../compiler/codegen-metal/index.js';
import { defaultCacheDir, runCmakeJs } from '../native/build.js';
import { createNativeSession } from '../native/native_session.js';
import type { Session } from '../session.js';
import { gpuUserError } from './gpu_caps.js';

export interface MetalSessionOptions {
  threads?: number;
  cacheDir?: string;
  fallbackOps?: string[];
  onProgress?: (msg: string) => void;
}

function hashDir(dir: string): string {
  const h = createHash('sha256');
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else h.update(path.relative(dir, p)).update('\0').update(fs.readFileSync(p, 'utf8')).update('\0');
    }
  };
  walk(dir);
  return h.digest('hex');
}

export async function createMetalSession(programs: ProgramSet, opts: MetalSessionOptions = {}): Promise<Session> {
  if (process.platform !== 'darwin')
    throw new UserError(`error: --device metal needs macOS (this machine runs ${process.platform})\n  help: use --device cpu, or --device metal-emu to run the generated Metal kernels in the emulator`);
  const root = path.join(opts.cacheDir ?? defaultCacheDir(), 'metal');
  fs.mkdirSync(root, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(root, 'tmp-'));
  const { warnings } = generateMetalProject(programs, tmp, { fallbackOps: opts.fallbackOps });
  for (const w of warnings) opts.onProgress?.(`warning: ${w}`);
  const key = hashDir(tmp);
  const dir = path.join(root, key.slice(0, 32));
  const mod = path.join(dir, 'bridge', 'build', 'Release', 'mpsc_metal.node');
  if (fs.existsSync(mod)) {
    fs.rmSync(tmp, { recursive: true, force: true });
    opts.onProgress?.(`using cached Metal build ${dir}`);
  } else {
    await runCmakeJs(path.join(tmp, 'bridge'), 'mpsc_metal', Math.max(1, os.cpus().length), opts.onProgress);
    fs.rmSync(dir, { recursive: true, force: true });
    fs.renameSync(tmp, dir);
    opts.onProgress?.(`built the Metal bridge into ${dir}`);
  }
  try {
    return createNativeSession(mod, programs, 'metal', opts.threads);
  } catch (e) {
    throw gpuUserError(e); // e.g. a bf16 program on a GPU without bfloat (mpsc_metal_caps.h)
  }
}
