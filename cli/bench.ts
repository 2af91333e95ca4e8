/**
 * `mpsc bench SPEC`: times whole training steps and eval steps of a spec on synthetic data of
 * its input shapes (runtime/bench.ts) and prints median ms/step, samples/s, achieved GFLOP/s
 * and peak memory; `--json` prints one object for scripts (bench/compare.sh reads it).
 */
import { Option, type Command } from 'commander';
import { checkFile } from '../compiler/check/index.js';
import { DEVICES } from '../runtime/device.js';
import { bench, type BenchResult, type PhaseTiming } from '../runtime/bench.js';
import { parseNonNegInt, parsePositiveInt } from './train.js';
import { defaultThreads, THREADS_HELP } from '../runtime/threads.js';

interface BenchCliOptions {
  device: string;
  steps: number;
  warmup: number;
  threads?: number;
  batch?: number;
  json?: boolean;
}

const MB = 1024 * 1024;

function line(name: string, t: PhaseTiming, flops: number): string {
  return `${name.padEnd(6)} ${t.median_ms.toFixed(2).padStart(9)} ms/step (mean ${t.mean_ms.toFixed(2)}, min ${t.min_ms.toFixed(2)})  ${Math.round(t.samples_per_s).toString().padStart(7)} samples/s  ${t.gflops.toFixed(1).padStart(6)} GFLOP/s  (${(flops / 1e6).toFixed(1)} MFLOP/step)`;
}

export function formatBench(r: BenchResult): string {
  return [
    `${r.model} (${r.spec}) on ${r.device}, batch ${r.batch}, threads ${r.threads ?? 'all'}, median of ${r.train.steps} steps`,
    line('train', r.train, r.flops.train_step),
    line('eval', r.eval, r.flops.eval),
    `memory: plan peak ${(r.peak_bytes / MB).toFixed(1)} MiB, process RSS high-water ${(r.rss_peak_bytes / MB).toFixed(1)} MiB`,
    ...(r.device === 'cuda' && r.train.steps < 10
      ? [`note: with fewer than 10 steps the median of an asynchronous device's steps measures their queueing, not the device: read the mean (or pass --steps 10 or more)`]
      : []),
    `first train step after ${r.first_step_s.toFixed(2)} s (opening the ${r.device} session: ${r.open_s.toFixed(2)} s; initial parameters: ${r.init_s.toFixed(2)} s)`,
  ].join('\n');
}

export function register(program: Command): void {
  program
    .command('bench')
    .description('time training and eval steps of a spec on synthetic data: `mpsc bench bench/mnist_mlp_b256_adam.model --threads 2`')
    .argument('<spec>', 'the .model file (its data section is ignored: inputs are synthetic, of the spec\'s shapes)')
    .addOption(new Option('--device <device>', 'where to run: auto picks cuda (NVIDIA GPU + CUDA toolkit), else metal on Apple silicon, else cpu').choices([...DEVICES]).default('auto'))
    .option('--steps <n>', 'timed steps per phase (the median is reported)', parsePositiveInt('--steps'), 20)
    .option('--warmup <n>', 'untimed steps before timing each phase', parseNonNegInt('--warmup'), 3)
    .option('--threads <n>', THREADS_HELP, parsePositiveInt('--threads'))
    .option('--batch <n>', "batch size (default: the spec's train batch)", parsePositiveInt('--batch'))
    .option('--json', 'print one JSON object: { spec, device, threads, batch, train: { median_ms, samples_per_s, gflops }, eval: {...}, flops, peak_bytes, ... }')
    .addHelpText(
      'after',
      '\nThe train step is train_step (+ apply_update when grad_accum > 1), parameters initialised as in `mpsc train`.\n' +
        'GFLOP/s counts 2 flops per multiply-add of linear/matmul/conv plus a rough count for element-wise ops.\n' +
        'peak_bytes is the memory plan as the device\'s backend runs the programs (fused; parameters/optimizer state once + the largest arena + input batch): what `mpsc check --device D` prints; rss_peak_bytes the process high-water mark.',
    )
    .action(async (spec: string, o: BenchCliOptions) => {
      const model = await checkFile(spec);
      const r = await bench(model, {
        device: o.device,
        steps: o.steps,
        warmup: o.warmup,
        threads: o.threads ?? defaultThreads(),
        batch: o.batch,
        onProgress: o.json ? undefined : (m) => process.stderr.write(m + '\n'),
      });
      process.stdout.write((o.json ? JSON.stringify(r) : formatBench(r)) + '\n');
    });
}
