/**
 * The default CPU thread count: the number of physical cores this process may use (SMT siblings
 * are not counted: two threads on one core compete for the same units and the GEMM tiles are
 * sized for one thread per core), or `MPSC_THREADS` when set. `--threads N` overrides both.
 *
 * Physical cores come from /proc/cpuinfo (distinct `physical id` / `core id` pairs) on Linux,
 * capped by os.availableParallelism() (CPU affinity); elsewhere availableParallelism() is used.
 * Results do not depend on the thread count (the CPU kernels are bitwise identical for any count).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import { UserError } from '../compiler/errors.js';

export const THREADS_HELP = 'CPU threads (default: the physical cores, or $MPSC_THREADS; on a machine busy with other work, fewer threads, e.g. --threads 1, can be much faster)';

/** distinct physical cores listed in a /proc/cpuinfo text, or null when it does not say */
export function physicalCoresFromCpuinfo(text: string): number | null {
  const cores = new Set<string>();
  let phys = '0';
  let sawCoreId = false;
  for (const line of text.split('\n')) {
    const m = /^(physical id|core id)\s*:\s*(\d+)/.exec(line);
    if (!m) continue;
    if (m[1] === 'physical id') phys = m[2];
    else {
      sawCoreId = true;
      cores.add(`${phys}:${m[2]}`);
    }
  }
  return sawCoreId && cores.size > 0 ? cores.size : null;
}

export function defaultThreads(): number {
  const env = process.env.MPSC_THREADS;
  if (env !== undefined && env !== '') {
    const n = Number(env);
    if (!Number.isSafeInteger(n) || n < 1) throw new UserError(`error: MPSC_THREADS must be a positive integer (got '${env}')`);
    return n;
  }
  const avail = Math.max(1, os.availableParallelism());
  if (process.platform !== 'linux') return avail;
  try {
    const phys = physicalCoresFromCpuinfo(fs.readFileSync('/proc/cpuinfo', 'utf8'));
    return phys === null ? avail : Math.max(1, Math.min(phys, avail));
  } catch {
    return avail;
  }
}
