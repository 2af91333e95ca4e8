/**
 * `mpsc train SPEC`: check the spec (with the --set / --lr overrides applied), load its data,
 * build the programs, open a device session and run the training loop (runtime/trainer.ts) in a
 * run folder (runtime/run_folder.ts). Progress goes to stderr (a progress bar on a terminal,
 * else one line every --log-every steps) and, as lines, to the run's train.log; the end summary
 * goes to stdout and train.log (one JSON object with --json). SIGINT (and SIGTERM, except in a
 * data-parallel rank) during training writes a checkpoint at the current position and exits with code
 * 130 (143 for SIGTERM); before training starts (checking, compiling) it prints one line and exits at once.
 * Data-parallel (issue 18, runtime/ddp): `--gpus N|all` (cuda, NCCL) or `--ranks N` (cpu and the other
 * devices, host all-reduce) makes this process the launcher (runtime/ddp/launcher.ts), which re-runs
 * this command line once per rank; a worker (MPSC_DDP_WORKER=1) joins the group and trains its shard,
 * rank 0 printing and writing as a single process would.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { InvalidArgumentError, Option, type Command } from 'commander';
import cliProgress from 'cli-progress';
import { checkFile } from '../compiler/check/index.js';
import { UserError } from '../compiler/errors.js';
import type { CheckedModel } from '../compiler/model.js';
import { lrOverride, overrideText, parseSetArg, precisionOverride, type Override } from '../compiler/check/overrides.js';
import { DEVICES } from '../runtime/device.js';
import { CONFIG_FILE, LOG_FILE, RUNS_ROOT, resolveResume } from '../runtime/run_folder.js';
import { defaultThreads, THREADS_HELP } from '../runtime/threads.js';
import { train, type EvalResult, type TrainEvent, type TrainResult } from '../runtime/trainer.js';
import { writeReport } from '../runtime/report/index.js';
import { packageVersion } from './version.js';
import { joinGroup, workerEnv, type ProcessGroup } from '../runtime/ddp/group.js';
import { launch, pickGpus, visibleGpus } from '../runtime/ddp/launcher.js';
import { localBatch } from '../runtime/ddp/replica.js';
import { findNccl } from '../runtime/cuda/session.js';

export function parsePositiveInt(name: string): (v: string) => number {
  return (v: string) => {
    const n = Number(v);
    if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n) || n < 1) throw new InvalidArgumentError(`${name} must be a positive integer (got '${v}')`);
    return n;
  };
}

export function parseNonNegInt(name: string): (v: string) => number {
  return (v: string) => {
    const n = Number(v);
    if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n)) throw new InvalidArgumentError(`${name} must be a non-negative integer (got '${v}')`);
    return n;
  };
}

export async function checkSpec(file: string, overrides: Override[] = []): Promise<CheckedModel> {
  return checkFile(file, overrides);
}

export function metricLabel(name: string, v: number): string {
  return name === 'accuracy' || name.startsWith('top') ? `${name} ${(v * 100).toFixed(2)}%` : `${name} ${v.toFixed(4)}`;
}

export function evalLine(r: EvalResult): string {
  const parts: string[] = [];
  if (r.loss !== null) parts.push(`loss ${r.loss.toFixed(4)}`);
  for (const [k, v] of Object.entries(r.metrics)) parts.push(metricLabel(k, v));
  return parts.join('  ');
}

/** the summary's JSON keys: test_loss, test_<metric> */
export function evalJson(r: EvalResult | null, prefix = 'test'): Record<string, number | null> {
  const o: Record<string, number | null> = { [`${prefix}_loss`]: r ? r.loss : null };
  if (r) for (const [k, v] of Object.entries(r.metrics)) o[`${prefix}_${k}`] = v;
  return o;
}

function fmtEta(s: number): string {
  if (!Number.isFinite(s)) return '--';
  const m = Math.floor(s / 60);
  return m > 0 ? `${m}m${String(Math.round(s % 60)).padStart(2, '0')}s` : `${Math.round(s)}s`;
}

interface Progress {
  onEvent(e: TrainEvent): void;
  stop(): void;
}

/**
 * The console text of an event (the non-TTY progress and train.log both show these lines):
 * null for steps that are not logged.
 */
export function eventLine(): (e: TrainEvent) => string | null {
  let total = 0;
  let perEpoch = 1;
  let startStep = 0;
  let t0 = Date.now();
  return (e) => {
    switch (e.kind) {
      case 'note':
        return e.message;
      case 'run':
        return `run folder: ${e.dir}${e.resumed ? ' (continued)' : ''}`;
      case 'start':
        total = e.totalSteps;
        perEpoch = e.stepsPerEpoch;
        startStep = e.startStep;
        t0 = Date.now();
        return `training: ${e.trainSamples} samples, batch ${e.batch}, ${e.totalSteps} steps (${e.stepsPerEpoch} per epoch) on ${e.device}`;
      case 'step': {
        if (!e.logged && !e.amp?.skipped) return null;
        const done = e.step - startStep;
        const eta = done > 0 ? (((Date.now() - t0) / 1000) * (total - e.step)) / done : NaN;
        const ms = Object.entries(e.metrics).map(([k, v]) => `  ${metricLabel(k, v)}`).join('');
        // fp16: the loss scale, and a skipped step (its gradients overflowed) is always shown
        const amp = e.amp ? `  loss scale ${e.amp.scale}${e.amp.skipped ? ` (step skipped: inf/NaN gradients; ${e.amp.skippedSteps} so far)` : ''}` : '';
        return `step ${e.step}/${total}  epoch ${e.epoch + 1}/${Math.ceil(total / perEpoch)}  loss ${e.loss.toFixed(4)}${ms}  lr ${e.lr.toPrecision(3)}${amp}  ${Math.round(e.samplesPerSec)} samples/s  ETA ${fmtEta(eta)}`;
      }
      case 'eval':
        return `eval at step ${e.step}: ${e.split} ${evalLine(e.result)}`;
      case 'best':
        return null;
      case 'early_stop':
        return `early stopping at step ${e.step}: ${e.monitor} has not improved${e.minDelta > 0 ? ` by more than ${e.minDelta}` : ''} in ${e.patience} evaluation${e.patience === 1 ? '' : 's'} since ${e.best.toPrecision(5)} at step ${e.bestStep}`;
      case 'checkpoint':
        return null;
    }
  };
}

/** TTY: a cli-progress bar on stderr; otherwise a line every logged step. `log` receives every line either way. */
function makeProgress(tty: boolean, log: (line: string) => void): Progress {
  const err = (s: string) => process.stderr.write(s + '\n');
  const line = eventLine();
  let total = 0;
  let perEpoch = 1;
  if (!tty) {
    return {
      onEvent(e) {
        const l = line(e);
        if (l === null) return;
        err(l);
        log(l);
      },
      stop() {},
    };
  }
  const multi = new cliProgress.MultiBar(
    {
      stream: process.stderr,
      format: 'epoch {epoch} |{bar}| step {value}/{total} | loss {loss} | {metric} | {sps} samples/s | ETA {eta_formatted}',
      barsize: 24,
      hideCursor: true,
      clearOnComplete: false,
      etaBuffer: 50,
      fps: 10,
    },
    cliProgress.Presets.shades_classic,
  );
  let bar: cliProgress.SingleBar | null = null;
  return {
    onEvent(e) {
      const l = line(e);
      if (l !== null) log(l);
      if (e.kind === 'start') {
        total = e.totalSteps;
        perEpoch = e.stepsPerEpoch;
        bar = multi.create(e.totalSteps, e.startStep, { epoch: '-', loss: '-', metric: '', sps: '-' });
      } else if (e.kind === 'step') {
        if (!bar) return;
        const [mk, mv] = Object.entries(e.metrics)[0] ?? [];
        bar.update(e.step, {
          epoch: `${e.epoch + 1}/${Math.ceil(total / perEpoch)}`,
          loss: e.loss.toFixed(4),
          metric: mk !== undefined ? metricLabel(mk, mv!) : '',
          sps: Math.round(e.samplesPerSec),
        });
      } else if (l !== null) {
        if (bar) multi.log(l + '\n');
        else err(l);
      }
    },
    stop() {
      multi.stop();
    },
  };
}

/** The summary lines (or one JSON object); every path printed exists. */
export function trainSummary(r: TrainResult, json: boolean): string {
  const exists = (f: string | null | undefined): string | null => (f && fs.existsSync(f) ? f : null);
  if (json) {
    const o = {
      ...evalJson(r.test),
      ...(r.val ? evalJson(r.val, 'val') : {}),
      steps: r.steps,
      epochs: r.epochs,
      seconds: Number(r.seconds.toFixed(3)),
      samples_per_sec: Number(r.samplesPerSec.toFixed(1)),
      train_loss: r.lastLoss,
      checkpoint: exists(r.checkpoint),
      run_dir: exists(r.runDir),
      weights: exists(r.weights),
      best: exists(r.best?.file) ? { file: r.best!.file, step: r.best!.step, monitor: r.best!.monitor, value: r.best!.value } : null,
      stopped_early: r.stoppedEarly,
      device: r.device,
      interrupted: r.interrupted,
    };
    return JSON.stringify(o) + '\n';
  }
  const lines: string[] = [];
  const ckpt = exists(r.checkpoint);
  const resumeRef = r.runDir ?? ckpt;
  if (r.interrupted) lines.push(`interrupted at step ${r.steps}; checkpoint saved (resume with --resume ${resumeRef})`);
  if (r.stoppedEarly) lines.push(`stopped early at step ${r.steps} (early_stop patience reached)`);
  if (r.val) lines.push(`val ${evalLine(r.val)}  (${r.val.samples} samples)`);
  if (r.test) lines.push(`test ${evalLine(r.test)}  (${r.test.samples} samples)`);
  else if (!r.interrupted && !r.val) lines.push('no test split: the spec gives no test data');
  lines.push(`${r.steps} steps, ${r.epochs} epoch${r.epochs === 1 ? '' : 's'} in ${r.seconds.toFixed(1)} s (${Math.round(r.samplesPerSec)} samples/s) on ${r.device}`);
  if (exists(r.runDir)) lines.push(`run folder: ${r.runDir}`);
  if (ckpt) lines.push(`checkpoint: ${ckpt}`);
  if (exists(r.best?.file)) lines.push(`best:       ${r.best!.file} (${r.best!.monitor} ${r.best!.value.toPrecision(5)} at step ${r.best!.step})`);
  if (exists(r.weights)) lines.push(`weights:    ${r.weights} (parameters and buffers only)`);
  return lines.join('\n') + '\n';
}

export function printTrainSummary(r: TrainResult, json: boolean): void {
  process.stdout.write(trainSummary(r, json));
}

interface TrainCliOptions {
  device: string;
  epochs?: number;
  steps?: number;
  batch?: number;
  seed?: number;
  lr?: string;
  precision?: string;
  set?: string[];
  threads?: number;
  initFrom?: string;
  saveInit?: string;
  runDir?: string;
  keep: number;
  checkpointDir?: string;
  resume?: string;
  metrics?: string;
  logEvery: number;
  json?: boolean;
  nanCheck: 'on' | 'off';
  gpus?: string;
  ranks?: number;
}

/**
 * `--gpus` / `--ranks` in the process the user started: check what can be checked once (the flags,
 * the device, the GPUs, NCCL, the batch split), then launch the ranks; resolves with the exit code.
 */
async function launchRanks(o: TrainCliOptions, model: CheckedModel): Promise<number> {
  if (o.gpus !== undefined && o.ranks !== undefined) throw new UserError('error: give either --gpus (CUDA, NCCL) or --ranks (CPU and the other devices), not both');
  const args = [...process.execArgv, process.argv[1], ...process.argv.slice(2)];
  let gpus: string[] | undefined;
  let world: number;
  let flag: string;
  if (o.gpus !== undefined) {
    if (o.device !== 'auto' && o.device !== 'cuda') throw new UserError(`error: --gpus runs on CUDA GPUs, not --device ${o.device}\n  help: drop --device (or use --device cuda); for data-parallel ranks on the CPU use --device cpu --ranks N`);
    gpus = pickGpus(o.gpus, visibleGpus());
    if (!findNccl()) {
      throw new UserError(
        'error: --gpus: built without NCCL: nccl.h was not found (CUDA toolkit include folders, $NCCL_HOME/include, /usr/include, /usr/local/include), so the model cannot all-reduce its gradients between GPUs\n' +
          '  help: install NCCL (e.g. the libnccl2 and libnccl-dev packages, or set NCCL_HOME), or train on one GPU without --gpus',
      );
    }
    world = gpus.length;
    flag = '--gpus';
    args.push('--device', 'cuda');
  } else {
    if (o.device === 'cuda') throw new UserError('error: --ranks is the host all-reduce for the CPU and the other devices; on CUDA GPUs use --gpus N (NCCL)');
    world = o.ranks!;
    flag = '--ranks';
    if (o.device === 'auto') args.push('--device', 'cpu');
  }
  localBatch(o.batch ?? model.train.batch, world, flag);
  // each CPU rank gets its share of the cores unless --threads says otherwise
  const env: Record<string, string> = {};
  if (o.threads === undefined && gpus === undefined) env.MPSC_THREADS = String(Math.max(1, Math.floor(defaultThreads() / world)));
  return launch({ world, command: process.execPath, args, gpus, env });
}

/** the overrides config.json of the run that --resume names recorded (none for a bare checkpoint) */
function runOverrides(ref: string, model: string): string[] {
  const notes: string[] = [];
  const t = resolveResume(ref, model, notes);
  if (!t.runDir) return [];
  try {
    const cfg = JSON.parse(fs.readFileSync(path.join(t.runDir, CONFIG_FILE), 'utf8')) as { overrides?: unknown };
    return Array.isArray(cfg.overrides) ? cfg.overrides.filter((x): x is string => typeof x === 'string') : [];
  } catch {
    return [];
  }
}

/** `key=value` texts with only the last one of each key kept (in the order of those last ones): the same result when applied in order */
export function lastPerKey(texts: string[]): string[] {
  const key = (t: string) => t.slice(0, t.indexOf('='));
  return texts.filter((t, i) => !texts.slice(i + 1).some((u) => key(u) === key(t)));
}

function collect(v: string, prev: string[] | undefined): string[] {
  return [...(prev ?? []), v];
}

/**
 * The stop signals of a training process: SIGINT (Ctrl-C) and, in a single process, SIGTERM (what job
 * schedulers, `timeout` and `docker stop` send). Before training starts (`started()` false) the first one
 * prints a line and exits at once (nothing is written yet); during training the first one calls `abort`
 * (the trainer finishes the step and writes a checkpoint) and a second one exits at once. The exit code is
 * 128 + the signal's number: 130 for SIGINT, 143 for SIGTERM. A data-parallel rank (`single` false) takes
 * SIGINT only: the launcher forwards the stop as SIGINT and sends SIGTERM to end a rank at once.
 * Produces `code()`, the exit code of the first signal (130 when none came), and `remove()`.
 */
export function stopOnSignals(quiet: boolean, single: boolean, log: (line: string) => void, started: () => boolean, abort: () => void): { code(): number; remove(): void } {
  const signals: NodeJS.Signals[] = single ? ['SIGINT', 'SIGTERM'] : ['SIGINT'];
  let first: NodeJS.Signals | null = null;
  const exitCode = (sig: NodeJS.Signals) => (sig === 'SIGTERM' ? 143 : 130);
  const on = (sig: NodeJS.Signals) => {
    if (!started()) {
      // still checking, loading or compiling: nothing to save, stop at once
      if (!quiet) process.stderr.write(`\n${sig === 'SIGINT' ? 'interrupted' : `stopped by ${sig}`} before training started (nothing was written)\n`);
      process.exit(exitCode(sig));
    }
    if (first !== null) process.exit(exitCode(sig));
    first = sig;
    const again = sig === 'SIGINT' ? 'press Ctrl-C again' : `send ${sig} or Ctrl-C again`;
    const l = `${sig === 'SIGINT' ? 'interrupt' : sig}: finishing the current step and writing a checkpoint (${again} to quit at once)`;
    if (!quiet) process.stderr.write(`\n${l}\n`);
    log(l);
    abort();
  };
  for (const s of signals) process.on(s, on);
  return { code: () => exitCode(first ?? 'SIGINT'), remove: () => signals.forEach((s) => process.off(s, on)) };
}

export const TRAIN_EXAMPLES = `
Examples:
  mpsc train specs/mnist_mlp.model                          train; writes runs/mnist_mlp/<run-id>/
  mpsc train specs/mnist_mlp.model --epochs 1 --lr 3e-4     shortcuts for train.epochs and optimizer.lr
  mpsc train specs/mnist_mlp.model --set train.batch=128 --set schedule="cosine()"
  mpsc train specs/mnist_mlp.model --set train.val_split=0.1 --set train.early_stop.patience=3
  mpsc train specs/mnist_mlp.model --resume latest          continue the newest run in its folder
  mpsc train specs/mnist_mlp.model --resume runs/mnist_mlp/20260101-120000

Run folder (runs/<model>/<run-id>/, or --run-dir): config.json, metrics.jsonl, train.log,
checkpoint-<step>.safetensors, best.safetensors, model.safetensors, report.html;
runs/<model>/latest points at the newest run that has written a checkpoint.
Stopping: Ctrl-C or SIGTERM finishes the current step, writes a checkpoint and exits 130 (Ctrl-C)
or 143 (SIGTERM); a second signal quits at once. --resume of a run that already reached its end
says so and changes nothing (exit 0): give a later --steps / --epochs to train further.
Checkpoints: one at each epoch end (or every checkpoint_every steps) and at the end; the newest
--keep K (default 3) are kept. best.safetensors (a full checkpoint) is rewritten whenever the
monitored value improves: early_stop's monitor, else val_loss with a val_split, else test_loss.
model.safetensors holds only the weights (parameters and buffers, torch names) of the newest
checkpoint: load it with mpsc eval/predict --weights or torch's load_state_dict(strict=True).
Data-parallel (docs/workflow.md): --gpus N|all starts one process per GPU (NCCL all-reduce),
--device cpu --ranks N one process per rank (all-reduce through the launcher); batch stays the
global batch (a multiple of N), split over the ranks; rank 0 writes the run folder and prints;
--resume works with any N. Example: mpsc train specs/char_gpt.model --gpus all --batch 256
--set KEY=VALUE: KEY is train.<key>, train.early_stop.<key>, optimizer[.<arg>], schedule[.<arg>]
or data[.<arg>]; VALUE is written as in the spec (3e-4, true, [100, 200], cosine(t_max: 500)).
`;

export function register(program: Command): void {
  program
    .command('train')
    .description('train a model: `mpsc train specs/mnist_mlp.model` (command-line values override the spec\'s settings)')
    .argument('<spec>', 'the .model file')
    .addOption(new Option('--device <device>', 'where to run: auto picks cuda (NVIDIA GPU + CUDA toolkit), else metal on Apple silicon, else cpu').choices([...DEVICES]).default('auto'))
    .option('--epochs <n>', 'number of epochs (= --set train.epochs=N)', parsePositiveInt('--epochs'))
    .option('--steps <n>', 'number of optimizer steps instead of epochs (= --set train.steps=N)', parsePositiveInt('--steps'))
    .option('--batch <n>', 'batch size (= --set train.batch=N)', parsePositiveInt('--batch'))
    .option('--seed <n>', 'random seed: init, shuffling, dropout (= --set train.seed=N)', parseNonNegInt('--seed'))
    .option('--lr <x>', 'learning rate (= --set optimizer.lr=X)')
    .option('--precision <p>', 'fp32, fp16 (with dynamic loss scaling) or bf16 (= --set train.precision="P"); 16-bit runs on every --device (docs/language.md, Precision)')
    .option('--set <key=value>', 'override a train, optimizer, schedule or data setting (repeatable; see below)', collect)
    .option('--threads <n>', THREADS_HELP, parsePositiveInt('--threads'))
    .option('--init-from <file>', 'load initial parameters from a safetensors file')
    .option('--save-init <file>', 'write the initial parameters to a safetensors file')
    .option('--run-dir <dir>', "the run folder (default: runs/<model>/<YYYYMMDD-HHMMSS>, or the resumed run's folder)")
    .option('--keep <k>', 'keep the newest K checkpoint-<step> files (best.safetensors and model.safetensors are extra)', parsePositiveInt('--keep'), 3)
    .option('--checkpoint-dir <dir>', 'write checkpoints here instead of the run folder')
    .option('--resume <ref>', 'continue a run: latest, a run folder, runs/<model> (its latest run), a checkpoint file, or a folder of checkpoints (its newest)')
    .option('--metrics <file>', 'also write the metrics JSON lines to this file')
    .option('--log-every <n>', 'log every N steps', parsePositiveInt('--log-every'), 50)
    .option('--json', 'print the end summary as one JSON object on stdout')
    .addOption(new Option('--nan-check <on|off>', 'stop when the loss becomes NaN/Inf').choices(['on', 'off']).default('on'))
    .option('--gpus <n|all>', 'data-parallel training on N GPUs of this machine (one process per GPU, gradients averaged by NCCL; batch stays the global batch, split over the GPUs)')
    .option('--ranks <n>', 'data-parallel training in N processes on --device cpu (or another non-CUDA device), gradients averaged through the launcher: the CPU counterpart of --gpus', parsePositiveInt('--ranks'))
    .addHelpText('after', TRAIN_EXAMPLES)
    .action(async (spec: string, o: TrainCliOptions) => {
      if (o.epochs !== undefined && o.steps !== undefined) throw new UserError('error: give either --epochs or --steps, not both');
      const worker = workerEnv();
      // --gpus / --ranks: this process launches the ranks (they print the run's lines, the --resume settings too)
      const launcher = !worker && (o.gpus !== undefined || o.ranks !== undefined);
      const group: ProcessGroup | null = worker ? await joinGroup(worker) : null;
      const quiet = launcher || (group !== null && group.rank !== 0); // only rank 0 prints and writes
      const given = [...(o.lr !== undefined ? [lrOverride(o.lr)] : []), ...(o.precision !== undefined ? [precisionOverride(o.precision)] : []), ...(o.set ?? []).map((t) => parseSetArg(t))];
      // --resume of a run folder: that run's --set overrides apply again (given ones after them win)
      const inherited = o.resume !== undefined ? runOverrides(o.resume, (await checkSpec(spec)).name) : [];
      if (inherited.length && !quiet) process.stderr.write(`resuming with the run's settings: --set ${inherited.join(' --set ')}\n`);
      const overrides = [...inherited.map((t) => parseSetArg(t)), ...given];
      const model = await checkSpec(spec, overrides);
      if (launcher) {
        process.exitCode = await launchRanks(o, model);
        return;
      }
      const texts = overrides.map(overrideText);
      for (const [k, v] of [['epochs', o.epochs], ['steps', o.steps], ['batch', o.batch], ['seed', o.seed]] as const) if (v !== undefined) texts.push(`train.${k}=${v}`);
      const recorded = lastPerKey(texts);
      const threads = o.threads ?? defaultThreads();

      // train.log: the console lines, buffered until the run folder exists
      let logFd: number | null = null;
      const pending: string[] = [];
      const log = (line: string) => {
        if (logFd !== null) fs.writeSync(logFd, line + '\n');
        else pending.push(line);
      };
      const controller = new AbortController();
      let started = false;
      const stop = stopOnSignals(quiet, group === null, log, () => started, () => controller.abort());
      const progress: Progress = quiet ? { onEvent() {}, stop() {} } : makeProgress(process.stderr.isTTY === true && !process.env.CI, log);
      let result: TrainResult;
      try {
        result = await train(model, {
          device: o.device,
          epochs: o.epochs,
          steps: o.steps,
          batch: o.batch,
          seed: o.seed,
          threads,
          initFrom: o.initFrom,
          saveInit: o.saveInit,
          checkpointDir: o.checkpointDir,
          resume: o.resume,
          runDir: o.runDir,
          runsRoot: RUNS_ROOT,
          keepCheckpoints: o.keep,
          onRunUpdate: (dir) => void writeReport(dir), // report.html after each evaluation and at the end
          runConfig: { argv: process.argv.slice(2), overrides: recorded, mpscVersion: packageVersion(), threads },
          metricsFile: o.metrics,
          logEvery: o.logEvery,
          nanCheck: o.nanCheck !== 'off',
          signal: controller.signal,
          ...(group ? { dataParallel: { group, flag: o.gpus !== undefined ? ('--gpus' as const) : ('--ranks' as const) } } : {}),
          onEvent: (e) => {
            if (e.kind === 'run') {
              logFd = fs.openSync(path.join(e.dir, LOG_FILE), e.resumed ? 'a' : 'w');
              for (const l of pending.splice(0)) fs.writeSync(logFd, l + '\n');
            }
            if (e.kind === 'start') started = true;
            progress.onEvent(e);
          },
        });
      } catch (e) {
        if (logFd !== null) fs.writeSync(logFd, `${(e as Error).message}\n`);
        throw e;
      } finally {
        progress.stop();
        stop.remove();
        group?.close();
      }
      if (result.interrupted) process.exitCode = stop.code();
      if (quiet) return;
      const summary = trainSummary(result, o.json === true);
      process.stdout.write(summary);
      if (logFd !== null) {
        fs.writeSync(logFd, summary);
        fs.closeSync(logFd);
      }
    });
}
