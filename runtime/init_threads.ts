/**
 * init_threads: a large model's initial parameters computed on worker threads.
 *
 * compiler/train/init.ts draws every element's Philox numbers in JavaScript: GPT-2 small's 163 M
 * parameters take ~14 s on one core. Each element depends only on its index (initSlice), so the
 * tensors are cut into slices and the slices dealt to worker threads, which fill them in shared
 * memory; the values are the same bits as initParams' (test/init_threads.test.ts).
 *
 * Consumes: a CheckedModel, a seed, and the thread count (default: the machine's parallelism).
 * Produces: Map path -> Float32Array, as initParams (plain arrays: the shared buffers are copied out).
 * The caller's thread blocks until the workers are done (Atomics.wait), so callers stay synchronous.
 * Small models (under MIN_THREADED elements), one thread, or any worker failure (the module cannot
 * be loaded, a shape error): initParams on the calling thread, which also reports a user's error.
 */
import os from 'node:os';
import { Worker } from 'node:worker_threads';
import { numel } from '../compiler/ir/graph.js';
import { initParams, type InitDecl } from '../compiler/train/init.js';
import type { CheckedModel } from '../compiler/model.js';

/** the fewest parameters for which workers pay their start (~50 ms each, more when the TypeScript loader runs) */
export const MIN_THREADED = 1 << 23;
/** the largest slice a worker takes at once (keeps the threads busy to the end) */
const SLICE = 1 << 21;
/** how long the caller waits for the workers before it computes the values itself */
const TIMEOUT_MS = 600_000;

interface Job { decl: InitDecl; from: number; buffer: SharedArrayBuffer; byteOffset: number; length: number }

/** the worker's body: load init.ts (through tsx when running from the sources), fill its slices, then count itself done */
const WORKER = `
const { workerData } = require('node:worker_threads');
const status = new Int32Array(workerData.status);
(async () => {
  try {
    if (workerData.tsx) (await import(workerData.tsx)).register();
    const { initSlice } = await import(workerData.module);
    for (const j of workerData.jobs) initSlice(j.decl, workerData.seed, j.from, new Float32Array(j.buffer, j.byteOffset, j.length));
  } catch (e) {
    Atomics.add(status, 1, 1);
  }
  Atomics.add(status, 0, 1);
  Atomics.notify(status, 0);
})();
`;

/** the URL of init.ts / init.js beside this module's tree, and tsx's register API when that is TypeScript */
function initModule(): { module: string; tsx?: string } {
  const here = import.meta.url;
  const ts = here.endsWith('.ts');
  const module = new URL(`../compiler/train/init.${ts ? 'ts' : 'js'}`, here).href;
  if (!ts) return { module };
  return { module, tsx: import.meta.resolve('tsx/esm/api') };
}

/** how initParamsThreaded runs: threads (default the machine's parallelism), the fewest elements for workers, the slice size; `used` is set to the workers that filled the values (0: the calling thread did) */
export interface InitThreadOptions { threads?: number; minElements?: number; slice?: number; used?: { workers: number } }

export function initParamsThreaded(model: CheckedModel, seed: number, opts: InitThreadOptions = {}): Map<string, Float32Array> {
  const { threads = os.availableParallelism(), minElements = MIN_THREADED, slice = SLICE, used = { workers: 0 } } = opts;
  used.workers = 0;
  const total = model.params.reduce((n, p) => n + numel(p.shape), 0);
  const workers = Math.min(threads, Math.ceil(total / slice));
  if (workers <= 1 || total < minElements) return initParams(model, seed);
  // one shared buffer per tensor, its slices dealt round-robin over the workers
  const buffers = new Map<string, SharedArrayBuffer>();
  const jobs: Job[][] = Array.from({ length: workers }, () => []);
  let k = 0;
  for (const p of model.params) {
    const n = numel(p.shape);
    const buffer = new SharedArrayBuffer(n * 4);
    buffers.set(p.path, buffer);
    const decl: InitDecl = { path: p.path, shape: p.shape, init: p.init };
    for (let from = 0; from < n; from += slice) jobs[k++ % workers].push({ decl, from, buffer, byteOffset: from * 4, length: Math.min(slice, n - from) });
  }
  let where: ReturnType<typeof initModule>;
  try {
    where = initModule();
  } catch {
    return initParams(model, seed);
  }
  const status = new SharedArrayBuffer(8);
  const st = new Int32Array(status);
  const started: Worker[] = [];
  try {
    for (const j of jobs) started.push(new Worker(WORKER, { eval: true, workerData: { ...where, jobs: j, seed, status } }));
  } catch {
    for (const w of started) void w.terminate();
    return initParams(model, seed);
  }
  const deadline = Date.now() + TIMEOUT_MS;
  let done = Atomics.load(st, 0);
  while (done < started.length && Date.now() < deadline) {
    Atomics.wait(st, 0, done, Math.max(1, deadline - Date.now()));
    done = Atomics.load(st, 0);
  }
  for (const w of started) void w.terminate();
  if (done < started.length || Atomics.load(st, 1) > 0 || started.length < jobs.length) return initParams(model, seed);
  const out = new Map<string, Float32Array>();
  for (const p of model.params) out.set(p.path, new Float32Array(new Float32Array(buffers.get(p.path)!)));
  used.workers = started.length;
  return out;
}
