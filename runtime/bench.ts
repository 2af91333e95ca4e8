/**
 * bench: times whole training steps and eval steps of a checked model on synthetic data of
 * its input shapes, after a warm-up (what `mpsc bench` prints).
 *
 * Consumes: a CheckedModel, a device, step counts. Produces a BenchResult (plain data):
 * median / min ms per step, samples/s and achieved GFLOP/s (from compiler/ir/flops.ts) for
 * the train step (train_step, + apply_update when the model accumulates gradients) and the
 * eval program, the memory plan's peak bytes and the process RSS high-water mark.
 * Synthetic data: f32 inputs uniform in [-1, 1); i32 inputs (labels, token ids) uniform in
 * range (the class count, or the rows of the embedding they index), from a fixed seed.
 */
import { UserError } from '../compiler/errors.js';
import { countFlops } from '../compiler/ir/flops.js';
import { type Program, type ProgramSet, type StepScalars, numel } from '../compiler/ir/graph.js';
import { buildPrograms, fuseProgramSet } from '../compiler/ir/programs.js';
import { plannedPeakBytesOf } from '../compiler/ir/print_ir.js';
import { NO_FUSIONS } from '../compiler/ir/fuse.js';
import { deviceFusions } from '../compiler/device_fusions.js';
import type { CheckedModel } from '../compiler/model.js';
import { initParamsThreaded } from './init_threads.js';
import { openSession } from './device.js';
import type { Batch, Session } from './session.js';

export interface BenchOptions {
  device: string;
  steps: number;
  warmup: number;
  threads?: number;
  batch?: number;
  onProgress?: (msg: string) => void;
}

export interface PhaseTiming {
  median_ms: number;
  /**
   * all n timed steps over n: the last one reads its outputs, so the sum runs until the device has
   * finished every step. On an asynchronous device (cuda: a step is queued while the previous one
   * runs) the median is the retire interval only when n is well above the queue depth; mean_ms is
   * exact at any n (the warm-up's last step drains the queue before the timed ones)
   */
  mean_ms: number;
  min_ms: number;
  samples_per_s: number;
  /** total flops / median time */
  gflops: number;
  steps: number;
}

export interface BenchResult {
  spec: string;
  model: string;
  device: string;
  threads: number | null;
  batch: number;
  /** seconds from the start of the call to the first finished train step (build or cache hit included) */
  first_step_s: number;
  /** seconds spent opening the session (code generation, build or cache lookup, loading) */
  open_s: number;
  /** seconds computing the initial parameters (runtime/init_threads.ts) and writing them into the session */
  init_s: number;
  train: PhaseTiming;
  eval: PhaseTiming;
  flops: { train_step: number; eval: number; train_step_gemm: number; eval_gemm: number };
  /** the planned device memory as the device's backend runs the programs: every persistent tensor once + the largest arena + input batch (print_ir.ts plannedPeakBytesOf) */
  peak_bytes: number;
  /** process resident-set high-water mark */
  rss_peak_bytes: number;
}

/** xorshift32, deterministic synthetic data */
function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 4294967296;
  };
}

/** the exclusive upper bound of an i32 input: the rows of an embedding it indexes, else the class count */
function intRange(p: Program, vid: number, numClasses: number | null): number {
  for (const n of p.graph.nodes) {
    if (n.op === 'embedding' && n.inputs[1] === vid) return p.graph.values[n.inputs[0]].shape[0];
    if (n.op === 'embedding' && n.inputs[0] === vid) return p.graph.values[n.inputs[1]].shape[0];
  }
  return Math.max(1, numClasses ?? 2);
}

export function syntheticBatch(p: Program, numClasses: number | null, seed: number): Batch {
  const r = rng(seed);
  return p.inputs.map((vid) => {
    const v = p.graph.values[vid];
    const n = numel(v.shape);
    if (v.dtype === 'i32') {
      const hi = intRange(p, vid, numClasses);
      const a = new Int32Array(n);
      for (let i = 0; i < n; i++) a[i] = Math.min(hi - 1, Math.floor(r() * hi));
      return a;
    }
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = r() * 2 - 1;
    return a;
  });
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function timing(ms: number[], batch: number, flops: number): PhaseTiming {
  const med = median(ms);
  return {
    median_ms: Number(med.toFixed(3)),
    mean_ms: Number((ms.reduce((a, b) => a + b, 0) / ms.length).toFixed(3)),
    min_ms: Number(Math.min(...ms).toFixed(3)),
    samples_per_s: Number(((batch * 1000) / med).toFixed(1)),
    gflops: Number((flops / (med * 1e6)).toFixed(2)),
    steps: ms.length,
  };
}

/**
 * n steps, each timed; only the last one reads its outputs (`f(read)`), as training does between
 * logged steps: an asynchronous device (cuda) then queues step i while step i - 1 runs, and each
 * step's time is the interval at which the device retires steps (the last one, which waits for
 * the queue to drain, is an outlier the median drops).
 */
function timeSteps(n: number, f: (read: boolean) => void): number[] {
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    f(i === n - 1);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return ms;
}

/** the model's loss, or the user's error of timing a model without one */
function requireLoss(model: CheckedModel): void {
  if (!model.loss) throw new UserError(`${model.file}: error: model '${model.name}' has no loss, so there is no train step to time; add a loss to the spec`);
}

/**
 * `train(read)` runs one train step (train_step, + apply_update when the model accumulates gradients) of the batch
 * `trainIn`, its step count t counting the calls; `scalars()` the current step's StepScalars
 */
function stepper(session: Session, model: CheckedModel, trainIn: Batch): { train: (read: boolean) => void; scalars: () => StepScalars } {
  let t = 0;
  const scalars = (): StepScalars => ({ lr: model.optimizer.lr, t, seed: model.train.seed, counter: t });
  const hasUpdate = session.hasProgram('apply_update');
  return {
    scalars,
    train: (read) => {
      t += 1;
      session.run('train_step', trainIn, scalars(), { read: read && !hasUpdate });
      if (hasUpdate) session.run('apply_update', [], scalars(), { read });
    },
  };
}

export async function bench(model: CheckedModel, opts: BenchOptions): Promise<BenchResult> {
  const t0 = performance.now();
  const B = opts.batch ?? model.train.batch;
  requireLoss(model);
  const programs: ProgramSet = buildPrograms(model, { batch: B });
  const tOpen = performance.now();
  const opened = await openSession(opts.device, programs, { threads: opts.threads, onProgress: opts.onProgress });
  const open_s = (performance.now() - tOpen) / 1000;
  const session: Session = opened.session;
  try {
    const tInit = performance.now();
    for (const [name, data] of initParamsThreaded(model, model.train.seed)) session.write(name, data);
    const init_s = (performance.now() - tInit) / 1000;
    const evalIn = syntheticBatch(programs.eval, model.numClasses, 2);
    const { train: trainStep, scalars } = stepper(session, model, syntheticBatch(programs.train_step, model.numClasses, 1));
    const evalStep = (read: boolean) => void session.run('eval', evalIn, scalars(), { read });
    trainStep(true);
    const first_step_s = (performance.now() - t0) / 1000;
    timeSteps(Math.max(0, opts.warmup - 1), trainStep);
    const trainMs = timeSteps(opts.steps, trainStep);
    timeSteps(opts.warmup, evalStep);
    const evalMs = timeSteps(opts.steps, evalStep);
    const ft = countFlops(programs.train_step);
    const fu = programs.apply_update ? countFlops(programs.apply_update) : { total: 0, gemm: 0 };
    const fe = countFlops(programs.eval);
    const trainFlops = ft.total + fu.total;
    const all = [programs.train_step, programs.apply_update, programs.eval].filter((p): p is Program => p !== undefined);
    return {
      spec: model.file,
      model: model.name,
      device: opened.device,
      threads: opts.threads ?? null,
      batch: B,
      first_step_s: Number(first_step_s.toFixed(3)),
      open_s: Number(open_s.toFixed(3)),
      init_s: Number(init_s.toFixed(3)),
      train: timing(trainMs, B, trainFlops),
      eval: timing(evalMs, B, fe.total),
      flops: { train_step: trainFlops, eval: fe.total, train_step_gemm: ft.gemm + fu.gemm, eval_gemm: fe.gemm },
      // the plan as the device's backend runs it (fused: compiler/device_fusions.ts), what it allocates
      peak_bytes: plannedPeakBytesOf(fuseProgramSet(programs, deviceFusions(opened.device) ?? NO_FUSIONS)),
      rss_peak_bytes: process.resourceUsage().maxRSS * 1024,
    };
  } finally {
    session.close();
  }
}

/** one build of the model under its environment (generator switches read when the session is opened) */
export interface BenchVariant { name: string; env: Record<string, string> }

export interface VariantTiming {
  name: string;
  env: Record<string, string>;
  /** seconds opening the variant's session (code generation, build or cache lookup, loading) */
  open_s: number;
  /** each round's median ms per train step */
  rounds: number[];
  median_ms: number;
}

/**
 * A/B of builds in one process (bench/cuda_env_ab.ts): every variant's session opened under its environment
 * (restored after each), the initial parameters computed once and written into every session, then `rounds`
 * rounds in which each variant in turn runs `warmup` untimed and `steps` timed train steps; a round's figure is
 * the median of its steps. All sessions stay open together (device memory: one model per variant), so a drift of
 * the machine lands on every variant alike and no variant pays a process start or the parameter init again.
 */
export async function benchVariants(model: CheckedModel, variants: BenchVariant[], opts: BenchOptions & { rounds: number }): Promise<VariantTiming[]> {
  requireLoss(model);
  const B = opts.batch ?? model.train.batch;
  const programs: ProgramSet = buildPrograms(model, { batch: B });
  const init = initParamsThreaded(model, model.train.seed);
  const trainIn = syntheticBatch(programs.train_step, model.numClasses, 1);
  const opened: { v: BenchVariant; session: Session; open_s: number; step: (read: boolean) => void; rounds: number[] }[] = [];
  try {
    for (const v of variants) {
      const before = Object.fromEntries(Object.keys(v.env).map((k) => [k, process.env[k]]));
      Object.assign(process.env, v.env);
      const t0 = performance.now();
      try {
        const { session } = await openSession(opts.device, programs, { threads: opts.threads, onProgress: opts.onProgress });
        opened.push({ v, session, open_s: (performance.now() - t0) / 1000, step: stepper(session, model, trainIn).train, rounds: [] });
      } finally {
        for (const [k, val] of Object.entries(before)) if (val === undefined) delete process.env[k]; else process.env[k] = val;
      }
      for (const [name, data] of init) opened[opened.length - 1].session.write(name, data);
    }
    for (let r = 0; r < opts.rounds; r++) {
      for (const o of opened) {
        // the warm-up's last step reads its outputs: the queue is drained before the timed steps
        timeSteps(Math.max(1, opts.warmup), o.step);
        o.rounds.push(Number(median(timeSteps(opts.steps, o.step)).toFixed(3)));
      }
    }
    return opened.map((o) => ({ name: o.v.name, env: o.v.env, open_s: Number(o.open_s.toFixed(3)), rounds: o.rounds, median_ms: median(o.rounds) }));
  } finally {
    for (const o of opened) o.session.close();
  }
}
