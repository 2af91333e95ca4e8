/**
 * `mpsc train SPEC`: check the spec, load its data, build the programs, open a device session
 * and run the training loop (runtime/trainer.ts). Command-line values override the spec's
 * `train { }` settings. Progress goes to stderr (a progress bar on a terminal, else one line
 * every --log-every steps); the end summary goes to stdout (one JSON object with --json).
 * SIGINT writes a checkpoint at the current position and exits with code 130.
 */
import { InvalidArgumentError, Option, type Command } from 'commander';
import cliProgress from 'cli-progress';
import { checkFile } from '../compiler/check/index.js';
import { UserError } from '../compiler/errors.js';
import type { CheckedModel } from '../compiler/model.js';
import { DEVICES } from '../runtime/device.js';
import { train, type EvalResult, type TrainEvent, type TrainResult } from '../runtime/trainer.js';

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

export async function checkSpec(file: string): Promise<CheckedModel> {
  return checkFile(file);
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

/** TTY: a cli-progress bar on stderr; otherwise a line every logged step. */
function makeProgress(tty: boolean): Progress {
  const err = (s: string) => process.stderr.write(s + '\n');
  let total = 0;
  let perEpoch = 1;
  let startStep = 0;
  let t0 = Date.now();
  if (!tty) {
    return {
      onEvent(e) {
        if (e.kind === 'note') err(e.message);
        else if (e.kind === 'start') {
          total = e.totalSteps;
          perEpoch = e.stepsPerEpoch;
          startStep = e.startStep;
          t0 = Date.now();
          err(`training: ${e.trainSamples} samples, batch ${e.batch}, ${e.totalSteps} steps (${e.stepsPerEpoch} per epoch) on ${e.device}`);
        } else if (e.kind === 'step' && e.logged) {
          const done = e.step - startStep;
          const eta = done > 0 ? (((Date.now() - t0) / 1000) * (total - e.step)) / done : NaN;
          const ms = Object.entries(e.metrics).map(([k, v]) => `  ${metricLabel(k, v)}`).join('');
          err(`step ${e.step}/${total}  epoch ${e.epoch + 1}/${Math.ceil(total / perEpoch)}  loss ${e.loss.toFixed(4)}${ms}  lr ${e.lr.toPrecision(3)}  ${Math.round(e.samplesPerSec)} samples/s  ETA ${fmtEta(eta)}`);
        } else if (e.kind === 'eval') {
          err(`eval at step ${e.step}: test ${evalLine(e.result)}`);
        }
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
      if (e.kind === 'note') {
        if (bar) multi.log(e.message + '\n');
        else err(e.message);
      } else if (e.kind === 'start') {
        total = e.totalSteps;
        perEpoch = e.stepsPerEpoch;
        bar = multi.create(e.totalSteps, e.startStep, { epoch: '-', loss: '-', metric: '', sps: '-' });
      } else if (e.kind === 'step' && bar) {
        const [mk, mv] = Object.entries(e.metrics)[0] ?? [];
        bar.update(e.step, {
          epoch: `${e.epoch + 1}/${Math.ceil(total / perEpoch)}`,
          loss: e.loss.toFixed(4),
          metric: mk !== undefined ? metricLabel(mk, mv!) : '',
          sps: Math.round(e.samplesPerSec),
        });
      } else if (e.kind === 'eval' && bar) {
        multi.log(`eval at step ${e.step}: test ${evalLine(e.result)}\n`);
      }
    },
    stop() {
      multi.stop();
    },
  };
}

export function printTrainSummary(r: TrainResult, json: boolean): void {
  if (json) {
    const o = {
      ...evalJson(r.test),
      steps: r.steps,
      epochs: r.epochs,
      seconds: Number(r.seconds.toFixed(3)),
      samples_per_sec: Number(r.samplesPerSec.toFixed(1)),
      train_loss: r.lastLoss,
      checkpoint: r.checkpoint,
      device: r.device,
      interrupted: r.interrupted,
    };
    process.stdout.write(JSON.stringify(o) + '\n');
    return;
  }
  const lines: string[] = [];
  if (r.interrupted) lines.push(`interrupted at step ${r.steps}; checkpoint saved (resume with --resume ${r.checkpoint})`);
  if (r.test) lines.push(`test ${evalLine(r.test)}  (${r.test.samples} samples)`);
  else if (!r.interrupted) lines.push('no test split: the spec gives no test data');
  lines.push(`${r.steps} steps, ${r.epochs} epoch${r.epochs === 1 ? '' : 's'} in ${r.seconds.toFixed(1)} s (${Math.round(r.samplesPerSec)} samples/s) on ${r.device}`);
  if (r.checkpoint) lines.push(`checkpoint: ${r.checkpoint}`);
  process.stdout.write(lines.join('\n') + '\n');
}

interface TrainCliOptions {
  device: string;
  epochs?: number;
  steps?: number;
  batch?: number;
  seed?: number;
  threads?: number;
  initFrom?: string;
  saveInit?: string;
  checkpointDir?: string;
  resume?: string;
  metrics?: string;
  logEvery: number;
  json?: boolean;
  nanCheck: 'on' | 'off';
}

export function register(program: Command): void {
  program
    .command('train')
    .description('train a model: `mpsc train specs/mnist_mlp.model` (command-line values override the spec\'s train settings)')
    .argument('<spec>', 'the .model file')
    .addOption(new Option('--device <device>', 'where to run: auto picks cuda (NVIDIA GPU + CUDA toolkit), else metal on Apple silicon, else cpu').choices([...DEVICES]).default('auto'))
    .option('--epochs <n>', 'number of epochs', parsePositiveInt('--epochs'))
    .option('--steps <n>', 'number of optimizer steps (instead of --epochs)', parsePositiveInt('--steps'))
    .option('--batch <n>', 'batch size', parsePositiveInt('--batch'))
    .option('--seed <n>', 'random seed (init, shuffling, dropout)', parseNonNegInt('--seed'))
    .option('--threads <n>', 'CPU threads (default: all cores)', parsePositiveInt('--threads'))
    .option('--init-from <file>', 'load initial parameters from a safetensors file')
    .option('--save-init <file>', 'write the initial parameters to a safetensors file')
    .option('--checkpoint-dir <dir>', 'where checkpoints go (default: checkpoints/<model>, or the folder of the --resume checkpoint)')
    .option('--resume <file>', 'continue from a checkpoint file (or the newest one in a folder)')
    .option('--metrics <file>', 'write JSON lines: one per logged step and one per evaluation')
    .option('--log-every <n>', 'log every N steps', parsePositiveInt('--log-every'), 50)
    .option('--json', 'print the end summary as one JSON object on stdout')
    .addOption(new Option('--nan-check <on|off>', 'stop when the loss becomes NaN/Inf').choices(['on', 'off']).default('on'))
    .action(async (spec: string, o: TrainCliOptions) => {
      if (o.epochs !== undefined && o.steps !== undefined) throw new UserError('error: give either --epochs or --steps, not both');
      const model = await checkSpec(spec);
      const controller = new AbortController();
      let sigints = 0;
      const onSigint = () => {
        sigints += 1;
        if (sigints > 1) process.exit(130);
        process.stderr.write('\ninterrupt: finishing the current step and writing a checkpoint (press Ctrl-C again to quit at once)\n');
        controller.abort();
      };
      process.on('SIGINT', onSigint);
      const progress = makeProgress(process.stderr.isTTY === true && !process.env.CI);
      let result: TrainResult;
      try {
        result = await train(model, {
          device: o.device,
          epochs: o.epochs,
          steps: o.steps,
          batch: o.batch,
          seed: o.seed,
          threads: o.threads,
          initFrom: o.initFrom,
          saveInit: o.saveInit,
          checkpointDir: o.checkpointDir,
          resume: o.resume,
          metricsFile: o.metrics,
          logEvery: o.logEvery,
          nanCheck: o.nanCheck !== 'off',
          signal: controller.signal,
          onEvent: (e) => progress.onEvent(e),
        });
      } finally {
        progress.stop();
        process.off('SIGINT', onSigint);
      }
      printTrainSummary(result, o.json === true);
      if (result.interrupted) process.exitCode = 130;
    });
}
