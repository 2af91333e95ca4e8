/**
 * The host training loop (device independent: it only talks to the Session interface).
 *
 * One optimizer step = grad_accum train_step runs (micro-batches), then apply_update when the
 * ProgramSet has it. StepScalars: lr = lrAt(schedule, base lr, updates done, total updates),
 * t = 1-based optimizer step, counter = train_step runs so far, seed = the run seed.
 * Evaluation on the test split: every eval_every optimizer steps (or at each epoch end), and
 * at the end: full batches through `eval`, the remainder through `eval_tail`; the results are
 * the sample-weighted means. Checkpoints: every checkpoint_every steps (or each epoch end) and
 * at the end; a stop request (SIGINT, SIGTERM) saves one at the current position and logs that step's
 * train line (on an asynchronous device, after the next step whose outputs are read). Resume restores every
 * persistent tensor and the position (epoch, micro-batch, counter); since the shuffle order is a
 * pure function of (seed, epoch) and dropout of (seed, counter), the continued run is exactly
 * the uninterrupted one.
 *
 * Precision fp16 (runtime/loss_scaler.ts): after the micro-batches, the train_step output
 * `amp.grad_norm` says whether the scaled gradients are finite; if so apply_update runs, else the
 * step is skipped (the accumulators are zeroed, Adam's t does not advance) and the scale backs off;
 * the scale goes to the session's `amp.loss_scale` state, the scaler's state into each checkpoint,
 * and each skipped step writes a metrics line; 40 skipped steps in a row stop the run (UserError).
 *
 * Data-parallel (`dataParallel`: this process is one rank of a group, runtime/ddp): `batch` stays the
 * global batch; the programs are built at batch / N with the update split off (train_step accumulates,
 * apply_update updates); each rank runs its shard of every global batch (replica.ts shardBatch), the
 * gradient accumulators are averaged over the ranks before apply_update (NCCL on cuda, the store on
 * the host otherwise), the step's outputs (loss, metrics, fp16's gradient norm) are averaged over the
 * ranks when read, and every stop (early stopping, SIGINT) is agreed so all ranks stop at one step.
 * Evaluations are split over the ranks (eval batch i on rank i mod N at batch / N, the tail on rank 0;
 * the sums added); rank 0 alone writes the run folder, metrics and checkpoints; the others print
 * nothing. Batch norm statistics are per replica (DDP's default); checkpoints hold rank 0's, which is
 * what DDP's buffer broadcast gives.
 *
 * Run folders (run_folder.ts): with `runDir` / `runsRoot` the run writes config.json, metrics.jsonl
 * (every line has `split`: train / val / test; epochs 1-based as on the console), its checkpoints,
 * model.safetensors (weights only, rewritten with every checkpoint) and best.safetensors (a full
 * checkpoint whenever the monitored value improves) into one folder and points `latest` at it once it
 * has written one of them. Resuming a checkpoint at or past the run's end is a UserError (nothing to do).
 * Retention: the newest `keepCheckpoints` checkpoint-<step> files of this run (best and model are
 * extra). Validation: `val_split` holds out the last fraction of the training data (file order),
 * evaluated with the test split at each evaluation. Monitor (best + early stopping): early_stop's
 * monitor, else val_loss with a validation split, else test_loss, else none.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { UserError } from '../compiler/errors.js';
import { numel, type ProgramName, type ProgramSet, type StepScalars } from '../compiler/ir/graph.js';
import type { CheckedModel, TrainConfig } from '../compiler/model.js';
import { createBatcher, epochOrder, trainBatchesPerEpoch } from '../data/batcher.js';
import { datasetChecksum, type Dataset } from '../data/dataset.js';
import { loadData } from '../data/load.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { initParamsThreaded } from './init_threads.js';
import { lrAt } from '../compiler/train/schedule.js';
import {
  pruneCheckpoints,
  readCheckpointFile,
  saveCheckpoint,
  checkpointFileName,
  loadIntoSession,
  programTensorTable,
  metadataToInfo,
  listCheckpoints,
  makeDirs,
  openForWriting,
  saveWeights,
  writeFileAtomic,
  type CheckpointInfo,
  type LoadIntoOptions,
  type TensorTarget,
  type TrainPosition,
} from './checkpoint.js';
import { openSession } from './device.js';
import { MAX_CONSECUTIVE_SKIPS, initialScaler, updateScaler, type ScalerState } from './loss_scaler.js';
import { AMP_CHECK_OUTPUT, LOSS_SCALE_STATE } from '../compiler/ir/optimizer_lowering.js';
import type { Session } from './session.js';
import type { ProcessGroup } from './ddp/group.js';
import { allreduceGradients, joinDeviceCollective, localBatch, rankSeed, shardBatch } from './ddp/replica.js';
import { holdOut } from '../data/dataset.js';
import {
  BEST_FILE,
  CONFIG_FILE,
  METRICS_FILE,
  WEIGHTS_FILE,
  createRunDir,
  ensureRunDir,
  modelRunsDir,
  resolveResume,
  trimMetrics,
  updateLatest,
} from './run_folder.js';

export interface TrainOptions {
  device?: string; // default 'auto'
  epochs?: number;
  steps?: number;
  batch?: number;
  seed?: number;
  threads?: number;
  initFrom?: string;
  saveInit?: string;
  /** default: checkpoints/<model name> under the current directory */
  checkpointDir?: string;
  /** a checkpoint file, or a folder (its newest checkpoint) */
  resume?: string;
  metricsFile?: string;
  /** log (and write a metrics line) every N optimizer steps (default 50), plus the first and the last */
  logEvery?: number;
  /** stop on a NaN/Inf loss (default true) */
  nanCheck?: boolean;
  /** how many checkpoint files to keep in the folder (default 3) */
  keepCheckpoints?: number;
  /** the run folder (created when missing); default: the resumed run's folder, else a new one under runsRoot */
  runDir?: string;
  /** create a new run folder under `<runsRoot>/<model>` (the CLI passes 'runs'); without runDir/runsRoot no run folder is written */
  runsRoot?: string;
  /**
   * called with the run folder after each evaluation and at the end (the report page is rebuilt
   * here); an exception becomes a warning note, never the end of training
   */
  onRunUpdate?: (runDir: string) => void;
  /** recorded in config.json */
  runConfig?: { argv: string[]; overrides: string[]; mpscVersion: string; threads: number | null };
  /** set to request a stop (SIGINT, SIGTERM): a checkpoint is written at the current position */
  signal?: AbortSignal;
  onEvent?: (e: TrainEvent) => void;
  /** this process is one rank of a data-parallel group (runtime/ddp); the flag that started it names it in messages */
  dataParallel?: { group: ProcessGroup; flag: '--gpus' | '--ranks' };
}

export type TrainEvent =
  | { kind: 'note'; message: string }
  | { kind: 'start'; device: string; totalSteps: number; stepsPerEpoch: number; startStep: number; batch: number; trainSamples: number; testSamples: number }
  | { kind: 'step'; step: number; epoch: number; loss: number; lr: number; metrics: Record<string, number>; samplesPerSec: number; logged: boolean; amp?: { scale: number; skipped: boolean; skippedSteps: number } }
  | { kind: 'eval'; step: number; epoch: number; split: 'val' | 'test'; result: EvalResult }
  | { kind: 'checkpoint'; step: number; file: string }
  | { kind: 'run'; dir: string; resumed: boolean }
  | { kind: 'best'; step: number; monitor: string; value: number; file: string }
  | { kind: 'early_stop'; step: number; monitor: string; best: number; bestStep: number; patience: number; minDelta: number };

export interface EvalResult {
  loss: number | null;
  metrics: Record<string, number>;
  samples: number;
}

export interface TrainResult {
  device: string;
  steps: number;
  epochs: number;
  seconds: number;
  samplesPerSec: number;
  test: EvalResult | null;
  val: EvalResult | null;
  checkpoint: string | null;
  interrupted: boolean;
  lastLoss: number | null;
  /** the run folder, when one was written */
  runDir: string | null;
  /** weights-only file (model.safetensors) and the best checkpoint, when written */
  weights: string | null;
  best: { file: string; step: number; monitor: string; value: number } | null;
  /** early stopping ended the run */
  stoppedEarly: boolean;
}

/** What best.safetensors and early stopping watch: early_stop's monitor, else val_loss, else test_loss. */
export function monitorOf(cfg: TrainConfig, hasVal: boolean, hasTest: boolean): { monitor: string; mode: 'min' | 'max' } | null {
  if (cfg.early_stop) return { monitor: cfg.early_stop.monitor, mode: cfg.early_stop.mode };
  if (hasVal) return { monitor: 'val_loss', mode: 'min' };
  if (hasTest) return { monitor: 'test_loss', mode: 'min' };
  return null;
}

function gcd(a: number, b: number): number {
  while (b) [a, b] = [b, a % b];
  return a;
}

/** the eval_tail batch that covers the last partial batch of every evaluated split (their gcd) */
export function evalTailBatch(B: number, counts: number[]): number | undefined {
  const tails = counts.map((c) => c % B).filter((t) => t > 0);
  if (!tails.length) return undefined;
  return tails.reduce(gcd);
}

/** The spec's train settings with the command line's overrides applied. */
export function effectiveTrainConfig(model: CheckedModel, o: TrainOptions): TrainConfig {
  const t: TrainConfig = { ...model.train };
  if (o.batch !== undefined) t.batch = o.batch;
  if (o.seed !== undefined) t.seed = o.seed;
  if (o.steps !== undefined) {
    t.steps = o.steps;
    t.epochs = null;
  } else if (o.epochs !== undefined) {
    t.epochs = o.epochs;
    t.steps = null;
  }
  if (t.steps === null && t.epochs === null) t.epochs = 1;
  return t;
}

/**
 * --resume of a checkpoint at or past the run's end (`step` >= `totalSteps`): there is nothing to train, so
 * a UserError says so before anything is built or written (no evaluation, no metrics line, no checkpoint,
 * `latest` unchanged). At the end exactly, the run is done: a note with exit 0, so a kill-and-resume loop
 * (a job scheduler requeueing a run killed after its last checkpoint) ends cleanly; past the end (a smaller
 * --steps / --epochs) it cannot be honoured: an error, exit 1. Consumes the checkpoint's file and step,
 * the end of this run and its train settings; returns when there is work left.
 */
export function refuseFinishedResume(file: string, step: number, totalSteps: number, cfg: TrainConfig, stepsPerEpoch: number): void {
  if (step < totalSteps) return;
  const end = cfg.steps !== null ? `--steps ${cfg.steps}` : `${cfg.epochs} epoch${cfg.epochs === 1 ? '' : 's'} of ${stepsPerEpoch} steps`;
  const done = step === totalSteps;
  const what = done ? `the run finished at step ${step}, its last step (${end})` : `the checkpoint is at step ${step}, past this run's end at step ${totalSteps} (${end})`;
  const epochs = Math.floor(step / stepsPerEpoch) + 1;
  throw new UserError(
    `${file}: ${done ? 'note' : 'error'}: nothing to resume: ${what}; nothing was changed\n` +
      `  help: to train further, give a later end: --steps ${step + stepsPerEpoch} (any number above ${step}) or --epochs ${epochs}; to evaluate it, use mpsc eval --weights`,
    done ? 0 : 1,
  );
}

/** Run the eval program over a dataset (file order), sample-weighted means of loss and metrics. */
export function evaluate(session: Session, programs: ProgramSet, ds: Dataset, scalars: StepScalars): EvalResult {
  return evalResult(programs, ds, evaluateSums(session, programs, ds, scalars));
}

/**
 * The sample-weighted sums of the eval outputs over a dataset (file order). `part`: data-parallel
 * training, where rank r runs the full batches i with i % world == r and rank 0 the tail, and the
 * ranks' sums are added (evalResult of the total is the whole split's result).
 */
export function evaluateSums(session: Session, programs: ProgramSet, ds: Dataset, scalars: StepScalars, part = { rank: 0, world: 1 }): Float64Array {
  const B = programs.eval.batch;
  const names = (p: ProgramName) => {
    const prog = programs[p]!;
    return prog.inputs.map((id) => prog.graph.values[id].name);
  };
  const outNames = programs.eval.outputs.map((o) => o.name);
  const sums = new Float64Array(outNames.length);
  const order = epochOrder(ds.count, false, 0, 0);
  const full = Math.floor(ds.count / B);
  const tail = ds.count - full * B;
  if (full > 0) {
    const batcher = createBatcher(ds, names('eval'), B);
    for (let i = part.rank; i < full; i += part.world) {
      const out = session.run('eval', batcher.fill(order, i * B), scalars);
      for (let k = 0; k < sums.length; k++) sums[k] += out[k] * B;
    }
  }
  if (tail > 0 && part.rank === 0) {
    const tb = programs.eval_tail?.batch;
    if (tb === undefined || tail % tb !== 0) {
      throw new Error(`internal: the split has a tail of ${tail} samples but no eval_tail program whose batch divides it`);
    }
    const batcher = createBatcher(ds, names('eval_tail'), tb);
    for (let off = full * B; off < ds.count; off += tb) {
      const out = session.run('eval_tail', batcher.fill(order, off), scalars);
      for (let k = 0; k < sums.length; k++) sums[k] += out[k] * tb;
    }
  }
  return sums;
}

/** loss and metrics from evaluateSums' totals */
export function evalResult(programs: ProgramSet, ds: Dataset, sums: Float64Array): EvalResult {
  const outNames = programs.eval.outputs.map((o) => o.name);
  const res: EvalResult = { loss: null, metrics: {}, samples: ds.count };
  outNames.forEach((n, k) => {
    const v = sums[k] / ds.count;
    if (n === 'loss') res.loss = v;
    else res.metrics[n] = v;
  });
  return res;
}

/** names the model's params/state (what --init-from / --save-init / --weights cover) */
export function modelTensorNames(model: CheckedModel): Set<string> {
  return new Set(model.params.map((p) => p.path));
}

/** true for checkpoint entries that are not parameters but may appear in a weights file */
export function isAuxiliaryTensor(name: string): boolean {
  return name.endsWith('.num_batches_tracked');
}

/**
 * How a weights file (a checkpoint, best.safetensors or model.safetensors) loads into a model's
 * programs for eval, predict, sample and export: every parameter and buffer the programs hold must
 * be in the file; a full checkpoint's optimizer state is skipped.
 */
export function weightsLoad(model: CheckedModel, table: TensorTarget): LoadIntoOptions {
  const names = new Set(table.tensorNames());
  const required = new Set([...modelTensorNames(model)].filter((n) => names.has(n)));
  return { required, only: required, ignorable: isAuxiliaryTensor, purpose: '--weights', spec: { file: model.file, hash: model.sourceHash } };
}

export async function train(model0: CheckedModel, opts: TrainOptions = {}): Promise<TrainResult> {
  const emit = opts.onEvent ?? (() => {});
  const cfg = effectiveTrainConfig(model0, opts);
  for (const [k, v] of [['batch', cfg.batch], ['grad_accum', cfg.grad_accum]] as const) {
    if (!Number.isInteger(v) || v < 1) throw new UserError(`error: ${k} must be a positive integer (got ${v})`);
  }
  const model: CheckedModel = { ...model0, train: cfg };
  const logEvery = opts.logEvery ?? 50;
  const nanCheck = opts.nanCheck ?? true;
  const B = cfg.batch;
  const K = cfg.grad_accum;
  const dp = opts.dataParallel?.group ?? null;
  const rank = dp?.rank ?? 0;
  const world = dp?.world ?? 1;
  const lead = rank === 0; // writes the files, reports
  const localB = dp ? localBatch(B, world, opts.dataParallel!.flag) : B;
  if (dp && world > 1 && cfg.sync_batchnorm && model.graph.nodes.some((n) => n.op === 'batchnorm_train')) {
    throw new UserError(
      `${model.file}: error: sync_batchnorm: true is not supported yet: with ${opts.dataParallel!.flag} ${world} each rank normalises with its own shard's batch statistics (DDP's default)\n` +
        `  help: remove sync_batchnorm from the train settings (per-replica statistics), or train on one ${opts.dataParallel!.flag === '--gpus' ? 'GPU' : 'rank'}`,
    );
  }

  // ---- resume: read the checkpoint first (its seed and position win)
  let resumeFile: string | null = null;
  let resumeRunDir: string | null = null;
  let resumeInfo: CheckpointInfo | null = null;
  let resumeSt: ReturnType<typeof readCheckpointFile> | null = null;
  if (opts.resume !== undefined) {
    const notes: string[] = [];
    const target = resolveResume(opts.resume, model.name, notes, opts.runsRoot);
    resumeFile = target.checkpoint;
    resumeRunDir = target.runDir;
    for (const n of notes) emit({ kind: 'note', message: n });
    resumeSt = readCheckpointFile(resumeFile);
    resumeInfo = metadataToInfo(resumeSt.metadata, resumeFile);
    if (resumeInfo.specHash !== model.sourceHash) {
      throw new UserError(
        `${resumeFile}: error: the checkpoint was written for a different spec (spec hash ${resumeInfo.specHash.slice(0, 12)}..., ` +
          `${model.file} is ${model.sourceHash.slice(0, 12)}...)\n  help: resume with the unchanged spec, or start from its weights with --init-from`,
      );
    }
    for (const [what, was, now] of [
      ['batch', resumeInfo.batch, B],
      ['grad_accum', resumeInfo.gradAccum, K],
    ] as const) {
      if (was !== now) throw new UserError(`${resumeFile}: error: the checkpoint was trained with ${what} ${was} but this run uses ${now}\n  help: resume with the same ${what}`);
    }
    const precision = cfg.precision ?? 'fp32';
    if ((resumeInfo.precision ?? 'fp32') !== precision) {
      throw new UserError(`${resumeFile}: error: the checkpoint was trained with precision ${resumeInfo.precision ?? 'fp32'} but this run uses ${precision}\n  help: resume with the same precision (--precision ${resumeInfo.precision ?? 'fp32'}), or start from its weights with --init-from`);
    }
    if (opts.seed !== undefined && opts.seed !== resumeInfo.seed) {
      throw new UserError(`${resumeFile}: error: the checkpoint was trained with seed ${resumeInfo.seed}; --seed ${opts.seed} cannot change it on --resume`);
    }
    cfg.seed = resumeInfo.seed;
    cfg.shuffle = resumeInfo.shuffle;
    cfg.drop_last = resumeInfo.dropLast;
  }

  // ---- data (the validation split is the last val_split of the training data, in file order)
  const data = loadData(model);
  let train = data.train;
  let val: Dataset | null = null;
  if ((cfg.val_split ?? 0) > 0) {
    const parts = holdOut(data.train, cfg.val_split!, model.file);
    train = parts.train;
    val = parts.val;
  }
  const test = data.test;
  const monitor = monitorOf(cfg, val !== null, test !== null);
  if (cfg.early_stop && cfg.early_stop.monitor.startsWith('test_') && !test) {
    throw new UserError(`${model.file}: error: early_stop monitors '${cfg.early_stop.monitor}' but the data source gives no test split\n  help: add val_split and monitor val_${cfg.early_stop.monitor.slice(5)}`);
  }
  // computed when first needed (resume check, first checkpoint): keeps it off the path to the first step
  let dataShaMemo: string | null = null;
  const dataSha = () => (dataShaMemo ??= datasetChecksum(train));
  // text data: the vocabulary goes into every weights file too (mpsc sample reads it)
  const vocabMeta: Record<string, string> = data.vocab ? { vocab: JSON.stringify(data.vocab) } : {};
  if (resumeInfo && resumeInfo.dataSha256 && resumeInfo.dataSha256 !== dataSha()) {
    throw new UserError(`${resumeFile}: error: the training data changed since this checkpoint was written (${train.source})\n  help: resume with the same data (and the same val_split)`);
  }
  const microPerEpoch = trainBatchesPerEpoch(train.count, B, cfg.drop_last);
  const stepsPerEpoch = Math.floor(microPerEpoch / K);
  if (stepsPerEpoch < 1) {
    throw new UserError(
      `${model.file}: error: the training split has ${train.count} samples, fewer than one optimizer step needs (batch ${B}${K > 1 ? ` x grad_accum ${K}` : ''}${cfg.drop_last ? ', drop_last' : ''})\n` +
        `  help: lower the batch size (--batch)`,
    );
  }
  const totalSteps = cfg.steps ?? (cfg.epochs ?? 1) * stepsPerEpoch;
  if (resumeInfo && resumeInfo.totalSteps !== totalSteps && model.schedule.kind === 'cosine' && model.schedule.t_max === null) {
    emit({
      kind: 'note',
      message:
        `note: the cosine schedule spans the whole run: it was planned for ${resumeInfo.totalSteps} steps and now continues for ${totalSteps}; ` +
        `the result differs from one uninterrupted ${totalSteps}-step run (set t_max in the spec to make the schedule independent of the run length)`,
    });
  }

  if (resumeInfo && resumeFile) refuseFinishedResume(resumeFile, resumeInfo.step, totalSteps, cfg, stepsPerEpoch);

  // ---- programs and session
  const evalTail = evalTailBatch(localB, [test?.count ?? 0, val?.count ?? 0]);
  const programs = buildPrograms(model, { batch: localB, evalTail, splitUpdate: dp !== null });
  // check checkpoint files against the programs' tensors before a backend is compiled
  const table = programTensorTable(programs);
  const tableNames = new Set(table.tensorNames());
  // the gradient accumulators (`<param>.grad`) are zero at every checkpoint (written after apply_update):
  // a checkpoint without them (one process) resumes a data-parallel run and one with them a single process
  const paramNames = new Set(model.params.map((p) => p.path));
  const isAccumulator = (n: string) => n.endsWith('.grad') && paramNames.has(n.slice(0, -'.grad'.length));
  const resumeLoad = {
    required: new Set([...tableNames].filter((n) => !isAccumulator(n))),
    ignorable: (n: string) => isAuxiliaryTensor(n) || isAccumulator(n),
    purpose: '--resume',
  };
  const initParamNames = new Set([...modelTensorNames(model)].filter((n) => tableNames.has(n)));
  const initLoad = { required: initParamNames, only: initParamNames, ignorable: isAuxiliaryTensor, purpose: '--init-from' };
  const initSt = !resumeSt && opts.initFrom !== undefined ? readCheckpointFile(opts.initFrom) : null;
  if (resumeSt && resumeFile) loadIntoSession(table, resumeSt, resumeFile, resumeLoad);
  if (initSt && opts.initFrom !== undefined) loadIntoSession(table, initSt, opts.initFrom, initLoad);
  // data-parallel: rank 0 builds the backend first, the others then find it in the build cache
  if (dp && !lead) await dp.barrier();
  const opened = await openSession(opts.device ?? 'auto', programs, {
    threads: opts.threads,
    onProgress: (m) => emit({ kind: 'note', message: m }),
  });
  const session = opened.session;
  emit({ kind: 'note', message: opened.note });
  if (dp && lead) await dp.barrier();
  let gradsOnDevice = false;
  if (dp) {
    try {
      gradsOnDevice = await joinDeviceCollective(session, dp);
    } catch (e) {
      session.close();
      throw e;
    }
    emit({
      kind: 'note',
      message: `data-parallel: ${world} rank${world === 1 ? '' : 's'} (${opts.dataParallel!.flag}), global batch ${B} = ${world} x ${localB}; gradients averaged ${gradsOnDevice ? `by ${session.collective!.name} on the device` : 'through the launcher (host)'} before each update`,
    });
  }
  const baseLr = model.optimizer.lr;
  const sessionNames = new Set(session.tensorNames());

  const metricsFds: number[] = [];
  const started = Date.now();
  const priorSeconds = resumeInfo?.trainSeconds ?? 0;
  const trainSeconds = () => priorSeconds + (Date.now() - started) / 1000;
  let pos: TrainPosition = { step: 0, epoch: 0, batchInEpoch: 0, counter: 0 };
  // fp16: the loss scaler (torch.amp.GradScaler's rules); its state resumes from the checkpoint
  const scaling = programs.precision === 'fp16';
  if (scaling && resumeInfo && !resumeInfo.amp) throw new UserError(`${resumeFile}: error: the checkpoint has no loss scaler state (amp_scale) although it was trained with precision fp16`);
  let scaler: ScalerState = resumeInfo?.amp ? { ...resumeInfo.amp } : initialScaler();
  const gradAccs = programs.train_step.graph.values.filter((v) => v.kind === 'gradacc').map((v) => ({ name: v.name, n: numel(v.shape) }));
  try {
    // ---- the other output paths the user named, then the run folder (after the backend is built: a
    // compile stopped by Ctrl-C leaves none; a bad --checkpoint-dir or --metrics path leaves none either)
    if (lead && opts.checkpointDir !== undefined) makeDirs(opts.checkpointDir, 'the checkpoint folder');
    if (lead && opts.metricsFile !== undefined) metricsFds.push(openForWriting(opts.metricsFile, resumeInfo ? 'a' : 'w'));
    let runDir: string | null = null;
    if (!lead) {
      // data-parallel ranks other than 0 write no files
    } else if (opts.runDir !== undefined) runDir = ensureRunDir(opts.runDir);
    else if (resumeRunDir !== null && (opts.runsRoot !== undefined || opts.checkpointDir === undefined)) runDir = resumeRunDir;
    else if (opts.runsRoot !== undefined) runDir = createRunDir(modelRunsDir(model.name, opts.runsRoot));
    if (runDir !== null) {
      writeRunConfig(runDir, model, opts, opened.device, resumeFile);
      emit({ kind: 'run', dir: runDir, resumed: resumeRunDir !== null && runDir === resumeRunDir });
    }

    // ---- initial parameters
    if (resumeInfo && resumeSt && resumeFile) {
      loadIntoSession(session, resumeSt, resumeFile, resumeLoad);
      pos = { step: resumeInfo.step, epoch: resumeInfo.epoch, batchInEpoch: resumeInfo.batchInEpoch, counter: resumeInfo.counter };
      emit({ kind: 'note', message: `resuming from ${resumeFile} at step ${pos.step} (epoch ${pos.epoch + 1})` });
    } else {
      const init = initParamsThreaded(model, cfg.seed);
      for (const [name, v] of init) if (sessionNames.has(name)) session.write(name, v);
      if (initSt && opts.initFrom !== undefined) {
        const loaded = loadIntoSession(session, initSt, opts.initFrom, initLoad);
        emit({ kind: 'note', message: `initial parameters from ${opts.initFrom} (${loaded.length} tensors)` });
      }
    }
    if (scaling) session.write(LOSS_SCALE_STATE, Float32Array.of(scaler.scale));
    if (opts.saveInit !== undefined && lead) {
      saveWeights(opts.saveInit, session, model, pos.counter, { seed: String(cfg.seed), ...vocabMeta });
      emit({ kind: 'note', message: `initial parameters written to ${opts.saveInit}` });
    }
    if (lead && runDir !== null) {
      const file = path.join(runDir, METRICS_FILE);
      if (resumeInfo && resumeRunDir !== null && path.resolve(runDir) === path.resolve(resumeRunDir)) trimMetrics(file, resumeInfo.step);
      metricsFds.push(openForWriting(file, resumeInfo ? 'a' : 'w'));
    }
    const writeMetrics = (obj: Record<string, unknown>) => {
      const line = JSON.stringify(obj) + '\n';
      for (const fd of metricsFds) fs.writeSync(fd, line);
    };

    // checkpoints: --checkpoint-dir, else the run folder, else the resumed checkpoint's folder, else checkpoints/<model>
    const ckptDir = opts.checkpointDir ?? runDir ?? (resumeFile ? path.dirname(resumeFile) : path.join('checkpoints', model.name));
    const keep = opts.keepCheckpoints ?? 3;
    const others = listCheckpoints(ckptDir).filter((c) => c.step > pos.step && !(resumeRunDir !== null && path.resolve(ckptDir) === path.resolve(resumeRunDir)));
    if (others.length && runDir === null) {
      emit({ kind: 'note', message: `note: ${ckptDir} already holds checkpoints up to step ${others[0].step} from another run; they are left alone (--resume ${ckptDir} would pick the highest step; use a run folder per run)` });
    }
    const infoNow = (): CheckpointInfo => ({
      ...pos,
      model: model.name,
      specHash: model.sourceHash,
      dataSha256: dataSha(),
      seed: cfg.seed,
      totalSteps,
      batch: B,
      gradAccum: K,
      shuffle: cfg.shuffle,
      dropLast: cfg.drop_last,
      device: opened.device,
      trainSeconds: trainSeconds(),
      ...(data.vocab ? { vocab: data.vocab } : {}),
      precision: cfg.precision ?? 'fp32',
      ...(scaling ? { amp: { ...scaler } } : {}),
      ...(monitor ? { monitor: { monitor: monitor.monitor, best: best && { value: best.value, step: best.step }, earlyStop: esRef, sinceBest } } : {}),
    });
    let lastCheckpoint: string | null = null;
    let lastCheckpointStep = -1;
    let weightsFile: string | null = null;
    // runs/<model>/latest points at this run once it holds a usable file (a checkpoint or best.safetensors):
    // a run that fails or stops before that leaves `latest` on the previous run
    let latestSet = false;
    const pointLatest = () => {
      if (latestSet || runDir === null || opts.runsRoot === undefined) return;
      updateLatest(modelRunsDir(model.name, opts.runsRoot), runDir);
      latestSet = true;
    };
    const checkpoint = () => {
      if (!lead) return;
      const file = path.join(ckptDir, checkpointFileName(pos.step));
      saveCheckpoint(file, session, model, infoNow());
      pruneCheckpoints(ckptDir, keep, pos.step);
      lastCheckpoint = file;
      lastCheckpointStep = pos.step;
      weightsFile = path.join(ckptDir, WEIGHTS_FILE);
      saveWeights(weightsFile, session, model, pos.counter, { seed: String(cfg.seed), step: String(pos.step), ...vocabMeta });
      pointLatest();
      emit({ kind: 'checkpoint', step: pos.step, file });
    };

    // ---- evaluation, best checkpoint, early stopping
    let lastEval: EvalResult | null = null;
    let lastVal: EvalResult | null = null;
    let lastEvalStep = -1;
    let best: TrainResult['best'] = null;
    let sinceBest = 0;
    let esRef: { value: number; step: number } | null = null;
    let stopEarly = false;
    // resumed: the checkpoint's monitor state (same monitor only), so best.safetensors is replaced only by a
    // better value and early stopping counts on as in the uninterrupted run; the best file itself only
    // where this run writes into the resumed checkpoint's folder
    const saved = resumeInfo?.monitor;
    if (saved && monitor && saved.monitor === monitor.monitor) {
      const bestFile = path.join(ckptDir, BEST_FILE);
      const sameFolder = resumeFile !== null && path.resolve(path.dirname(resumeFile)) === path.resolve(ckptDir);
      if (saved.best && sameFolder && fs.existsSync(bestFile)) best = { file: bestFile, step: saved.best.step, monitor: saved.monitor, value: saved.best.value };
      esRef = saved.earlyStop;
      sinceBest = saved.sinceBest;
    }
    const improves = (v: number, ref: number, delta: number) => (monitor!.mode === 'min' ? v < ref - delta : v > ref + delta);
    const runUpdate = () => {
      if (runDir === null || !opts.onRunUpdate) return;
      try {
        opts.onRunUpdate(runDir);
      } catch (e) {
        emit({ kind: 'note', message: `warning: updating ${runDir} failed (${(e as Error).message.split('\n')[0]}); training goes on` });
      }
    };
    // data-parallel: every rank evaluates its share of the batches, the sums are added; rank 0 reports
    const runEval = async () => {
      if (!test && !val) return;
      const scalars = { lr: 0, t: Math.max(pos.step, 1), seed: cfg.seed, counter: pos.counter };
      const values: Record<string, number> = {};
      for (const [split, ds] of [['val', val], ['test', test]] as const) {
        if (!ds) continue;
        const r = dp ? evalResult(programs, ds, await dp.allreduce(evaluateSums(session, programs, ds, scalars, { rank, world }), 'sum')) : evaluate(session, programs, ds, scalars);
        if (!lead) continue;
        if (split === 'val') lastVal = r;
        else lastEval = r;
        emit({ kind: 'eval', step: pos.step, epoch: pos.epoch, split, result: r });
        const line: Record<string, unknown> = { split, step: pos.step, epoch: pos.epoch + 1 };
        if (r.loss !== null) {
          line.loss = r.loss;
          values[`${split}_loss`] = r.loss;
        }
        for (const [k, v] of Object.entries(r.metrics)) values[`${split}_${k}`] = v;
        Object.assign(line, r.metrics);
        writeMetrics(line);
      }
      lastEvalStep = pos.step;
      runUpdate();
      if (!monitor) return;
      const v = values[monitor.monitor];
      if (v === undefined || !Number.isFinite(v)) return;
      // best.safetensors: any improvement; early stopping (as Keras): an improvement beyond min_delta resets
      // the count. The state is updated before best.safetensors is written, so the file carries it too.
      const improved = best === null || improves(v, best.value, 0);
      if (improved) best = { file: path.join(ckptDir, BEST_FILE), step: pos.step, monitor: monitor.monitor, value: v };
      if (cfg.early_stop) {
        if (esRef === null || improves(v, esRef.value, cfg.early_stop.min_delta)) {
          esRef = { value: v, step: pos.step };
          sinceBest = 0;
        } else sinceBest += 1;
      }
      if (improved && best) {
        saveCheckpoint(best.file, session, model, infoNow());
        pointLatest();
        emit({ kind: 'best', step: pos.step, monitor: monitor.monitor, value: v, file: best.file });
      }
      if (cfg.early_stop && esRef && sinceBest >= cfg.early_stop.patience && pos.step < totalSteps) {
        stopEarly = true;
        emit({ kind: 'early_stop', step: pos.step, monitor: monitor.monitor, best: esRef.value, bestStep: esRef.step, patience: cfg.early_stop.patience, minDelta: cfg.early_stop.min_delta });
      }
    };

    emit({ kind: 'start', device: opened.device + (world > 1 ? ` x${world}` : ''), totalSteps, stepsPerEpoch, startStep: pos.step, batch: B, trainSamples: train.count, testSamples: test?.count ?? 0 });

    const trainNames = programs.train_step.inputs.map((id) => programs.train_step.graph.values[id].name);
    const batcher = createBatcher(train, trainNames, B, cfg.seed);
    const outNames = programs.train_step.outputs.map((o) => o.name);
    const lossIdx = outNames.indexOf('loss');
    const ampIdx = outNames.indexOf(AMP_CHECK_OUTPUT);
    const hasApply = session.hasProgram('apply_update');
    let order = epochOrder(train.count, cfg.shuffle, cfg.seed, pos.epoch);
    let lastLoss: number | null = null;
    let lastMetrics: Record<string, number> = {};
    const deferReads = session.device === 'cuda';
    const loopStart = Date.now();
    let interrupted = false;
    // a stop request seen (data-parallel: agreed by every rank): the run stops after the next step whose
    // outputs were read (at once where every step is read), so its train line and checkpoint hold real values
    let stopRequested = false;
    let trainLine: { line: Record<string, unknown>; written: boolean } | null = null;
    const startStep = pos.step;

    while (pos.step < totalSteps) {
      if (pos.batchInEpoch + K > stepsPerEpoch * K) {
        pos.epoch += 1;
        pos.batchInEpoch = 0;
        order = epochOrder(train.count, cfg.shuffle, cfg.seed, pos.epoch);
      }
      const lr = lrAt(model.schedule, baseLr, pos.step, totalSteps);
      // t: the optimizer's own step count (Adam's bias correction), which a skipped fp16 step does not advance (as in torch)
      const scalars: StepScalars = { lr, t: pos.step + 1 - scaler.skipped * Number(scaling), seed: rankSeed(cfg.seed, rank), counter: 0 };
      const sums = new Float64Array(outNames.length);
      let ampNorm = 0;
      // an asynchronous device (cuda) reads the step's outputs only when the step is logged, evaluated
      // or checkpointed (so a checkpoint is never written after an unchecked NaN): reading waits for
      // the GPU, which otherwise runs this step while the host prepares the next one; fp16 loss scaling
      // reads every step (the scaler needs each step's gradient norm)
      const next = pos.step + 1;
      const endsEpoch = pos.batchInEpoch + 2 * K > stepsPerEpoch * K;
      const read = stopRequested || !deferReads || scaling || next === 1 || next % logEvery === 0 || next === totalSteps ||
        (cfg.eval_every !== null ? next % cfg.eval_every === 0 : endsEpoch) || (cfg.checkpoint_every !== null ? next % cfg.checkpoint_every === 0 : endsEpoch);
      for (let k = 0; k < K; k++) {
        scalars.counter = pos.counter;
        const out = session.run('train_step', shardBatch(batcher.fill(order, pos.batchInEpoch * B, pos.epoch), B, rank, world), scalars, { read });
        pos.counter += 1;
        pos.batchInEpoch += 1;
        if (ampIdx >= 0) ampNorm = out[ampIdx];
        if (!read) continue;
        // fp16: a non-finite loss gives non-finite gradients: the scaler skips the step (below)
        if (nanCheck && !scaling && lossIdx >= 0 && !Number.isFinite(out[lossIdx])) {
          const kept = lastCheckpoint ? ` The last good checkpoint is ${lastCheckpoint} (step ${lastCheckpointStep}).` : '';
          throw new UserError(
            `error: the loss became ${out[lossIdx]} at step ${pos.step + 1} (epoch ${pos.epoch + 1}, micro-batch ${pos.batchInEpoch}); training stopped.${kept}\n` +
              `  help: lower the learning rate, add grad_clip, or check the data for extreme values (--nan-check off disables this check)`,
          );
        }
        for (let i = 0; i < sums.length; i++) sums[i] += out[i];
      }
      if (dp) {
        // the step's outputs are the ranks' mean (every rank decides `read` alike); then the gradients
        if (read) sums.set(await dp.allreduce(sums, 'avg'));
        // fp16: any rank's inf / NaN gradient norm skips the step on every rank
        if (ampIdx >= 0) ampNorm = (await dp.allreduce(Float64Array.of(ampNorm), 'sum'))[0];
        await allreduceGradients(session, dp, gradsOnDevice, gradAccs);
      }
      const usedScale = scaler.scale;
      let skippedNow = false;
      if (scaling) {
        // found_inf: the scaled, accumulated gradients hold an inf or NaN: no update, the accumulators are cleared
        skippedNow = !Number.isFinite(ampNorm);
        if (skippedNow) for (const g of gradAccs) session.write(g.name, new Float32Array(g.n));
        else session.run('apply_update', [], scalars);
        scaler = updateScaler(scaler, skippedNow);
        if (scaler.scale !== usedScale) session.write(LOSS_SCALE_STATE, Float32Array.of(scaler.scale));
        if (nanCheck && scaler.consecutiveSkips >= MAX_CONSECUTIVE_SKIPS) {
          const kept = lastCheckpoint ? ` The last good checkpoint is ${lastCheckpoint} (step ${lastCheckpointStep}).` : '';
          throw new UserError(
            `error: precision fp16: the gradients were inf or NaN in ${scaler.consecutiveSkips} consecutive steps (up to step ${pos.step + 1}, epoch ${pos.epoch + 1}); ` +
              `the loss scale backed off to ${scaler.scale} and the loss is ${sums[lossIdx] / K}, so no scale makes them finite; training stopped.${kept}\n` +
              `  help: lower the learning rate, add grad_clip, check the data for extreme values, or train with precision "bf16" or "fp32" (--nan-check off keeps skipping steps)`,
          );
        }
      } else if (hasApply) session.run('apply_update', [], scalars);
      pos.step += 1;
      // a step whose outputs were not read reports the last values read
      const loss: number = read ? (lossIdx >= 0 ? sums[lossIdx] / K : NaN) : (lastLoss ?? NaN);
      lastLoss = loss;
      if (read)
        outNames.forEach((n, i) => {
          if (i !== lossIdx && i !== ampIdx) lastMetrics[n] = sums[i] / K;
        });
      const metrics: Record<string, number> = { ...lastMetrics };
      const elapsed = (Date.now() - loopStart) / 1000;
      const samplesPerSec = ((pos.step - startStep) * B * K) / Math.max(elapsed, 1e-3);
      const logged = pos.step === 1 || pos.step % logEvery === 0 || pos.step === totalSteps;
      const amp = scaling ? { scale: usedScale, skipped: skippedNow, skippedSteps: scaler.skipped } : undefined;
      emit({ kind: 'step', step: pos.step, epoch: pos.epoch, loss, lr, metrics, samplesPerSec, logged, ...(amp ? { amp } : {}) });
      // fp16: every skipped step gets a line too (loss_scale: the scale the step ran with; skipped_steps: the run's total so far)
      const ampFields = amp ? { loss_scale: amp.scale, skipped: amp.skipped, skipped_steps: amp.skippedSteps } : {};
      trainLine = { line: { split: 'train', step: pos.step, epoch: pos.epoch + 1, loss, lr, samples_per_sec: samplesPerSec, ...metrics, ...ampFields }, written: logged || skippedNow };
      if (trainLine.written) writeMetrics(trainLine.line);

      const epochEnd = pos.batchInEpoch + K > stepsPerEpoch * K;
      const evalNow = cfg.eval_every !== null ? pos.step % cfg.eval_every === 0 : epochEnd;
      if (evalNow) await runEval();
      // fp16: no checkpoint while the loss is not finite (the last good one stays the newest)
      const goodState = !scaling || Number.isFinite(loss);
      if ((cfg.checkpoint_every !== null ? pos.step % cfg.checkpoint_every === 0 : epochEnd) && goodState) checkpoint();
      await new Promise((r) => setImmediate(r)); // let SIGINT and timers in
      // data-parallel: every rank stops at the same step (rank 0's early stop, anyone's interrupt), agreed
      // after each evaluation and every 16 steps (not every step: a round trip through the launcher)
      if (dp && (evalNow || read || pos.step % 16 === 0)) {
        const agreed: Float64Array = await dp.allreduce(Float64Array.of(Number(stopEarly), Number(opts.signal?.aborted === true)), 'max');
        stopEarly = agreed[0] > 0;
        if (agreed[1] > 0) stopRequested = true;
      }
      if (stopEarly) break;
      if (!dp && opts.signal?.aborted) stopRequested = true;
      if (stopRequested && read && pos.step < totalSteps) {
        interrupted = true;
        // the last step is logged (as at the end of a run), also between two --log-every steps
        if (trainLine && !trainLine.written) writeMetrics(trainLine.line);
        break;
      }
    }
    if (!interrupted && lastEvalStep !== pos.step) await runEval();
    if (lastCheckpointStep !== pos.step) checkpoint();
    runUpdate();
    const seconds = trainSeconds();
    const doneSamples = pos.step * B * K;
    return {
      device: opened.device,
      steps: pos.step,
      epochs: pos.epoch + (pos.batchInEpoch > 0 ? 1 : 0),
      seconds,
      samplesPerSec: doneSamples / Math.max(seconds, 1e-6),
      test: lastEval,
      val: lastVal,
      checkpoint: lastCheckpoint,
      interrupted,
      lastLoss,
      runDir,
      weights: weightsFile,
      best,
      stoppedEarly: stopEarly,
    };
  } finally {
    for (const fd of metricsFds) fs.closeSync(fd);
    session.close();
  }
}

/** config.json of a run folder (the shared contract with the report page). */
function writeRunConfig(runDir: string, model: CheckedModel, opts: TrainOptions, device: string, resumedFrom: string | null): void {
  let specText = '';
  try {
    specText = fs.readFileSync(model.file, 'utf8');
  } catch {
    // a model checked from text has no file: the spec text stays empty
  }
  const { data, ...train } = model.train;
  const rc = opts.runConfig;
  const config: Record<string, unknown> = {
    mpsc_version: rc?.mpscVersion ?? null,
    model: model.name,
    spec_file: path.resolve(model.file),
    spec_text: specText,
    argv: rc?.argv ?? [],
    device,
    threads: rc?.threads ?? opts.threads ?? null,
    settings: { train, optimizer: model.optimizer, schedule: model.schedule, data },
    overrides: rc?.overrides ?? [],
    started_at: new Date().toISOString(),
  };
  if (resumedFrom !== null) {
    config.resumed_from = path.resolve(resumedFrom);
    try {
      const before = JSON.parse(fs.readFileSync(path.join(runDir, CONFIG_FILE), 'utf8')) as { started_at?: unknown };
      if (typeof before.started_at === 'string') config.started_at = before.started_at; // the run started then
    } catch {
      // a new folder for the resumed run: it starts now
    }
  }
  writeFileAtomic(path.join(runDir, CONFIG_FILE), new TextEncoder().encode(JSON.stringify(config, null, 2) + '\n'));
}

export interface EvalOptions {
  device?: string;
  weights: string;
  threads?: number;
  batch?: number;
  onEvent?: (e: TrainEvent) => void;
}

/** mpsc eval: load weights (params + buffers) and evaluate on the test split. */
export async function evaluateWeights(model0: CheckedModel, opts: EvalOptions): Promise<EvalResult & { device: string; seconds: number; split: string }> {
  const emit = opts.onEvent ?? (() => {});
  const cfg = effectiveTrainConfig(model0, { batch: opts.batch });
  const model: CheckedModel = { ...model0, train: cfg };
  const st = readCheckpointFile(opts.weights);
  const data = loadData(model);
  const split = data.test ? 'test' : 'train';
  const ds = data.test ?? data.train;
  if (!data.test) emit({ kind: 'note', message: 'the spec has no test data; evaluating on the training split' });
  const B = Math.min(cfg.batch, ds.count);
  const programs = buildPrograms(model, { batch: B, evalTail: ds.count % B !== 0 ? ds.count % B : undefined });
  const table = programTensorTable(programs);
  const load = weightsLoad(model, table);
  loadIntoSession(table, st, opts.weights, load); // names and shapes, before a backend is compiled
  const opened = await openSession(opts.device ?? 'auto', programs, { threads: opts.threads, onProgress: (m) => emit({ kind: 'note', message: m }) });
  emit({ kind: 'note', message: opened.note });
  const session = opened.session;
  try {
    loadIntoSession(session, st, opts.weights, load);
    const t0 = Date.now();
    const r = evaluate(session, programs, ds, { lr: 0, t: 1, seed: cfg.seed, counter: 0 });
    return { ...r, device: opened.device, seconds: (Date.now() - t0) / 1000, split };
  } finally {
    session.close();
  }
}

