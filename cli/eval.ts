/**
 * `mpsc eval SPEC --weights REF`: loss and metrics of saved weights on the spec's test split
 * (the training split when the spec has no test data). REF is a weights or checkpoint file, a
 * run folder or `latest` (run_folder.ts resolveWeights). Prints one line, or one JSON object
 * with --json (keys: split, samples, test_loss, test_<metric>, device, seconds, weights).
 */
import { Option, type Command } from 'commander';
import { DEVICES } from '../runtime/device.js';
import { resolveWeights } from '../runtime/run_folder.js';
import { defaultThreads, THREADS_HELP } from '../runtime/threads.js';
import { evaluateWeights } from '../runtime/trainer.js';
import { checkSpec, evalJson, evalLine, parsePositiveInt } from './train.js';

interface EvalCliOptions {
  weights: string;
  device: string;
  batch?: number;
  threads?: number;
  json?: boolean;
}

export function register(program: Command): void {
  program
    .command('eval')
    .description('evaluate saved weights on the test split: `mpsc eval specs/mnist_mlp.model --weights latest`')
    .argument('<spec>', 'the .model file')
    .requiredOption('--weights <ref>', "a checkpoint or weights file, a run folder, or latest (a folder's best.safetensors, else model.safetensors, else its newest checkpoint)")
    .addOption(new Option('--device <device>', 'where to run').choices([...DEVICES]).default('auto'))
    .option('--batch <n>', 'evaluation batch size (default: the spec\'s batch)', parsePositiveInt('--batch'))
    .option('--threads <n>', THREADS_HELP, parsePositiveInt('--threads'))
    .option('--json', 'print the result as one JSON object on stdout')
    .addHelpText(
      'after',
      `
Examples:
  mpsc eval specs/mnist_mlp.model --weights latest                  the newest run (its best checkpoint)
  mpsc eval specs/mnist_mlp.model --weights runs/mnist_mlp/20260101-120000/model.safetensors
  mpsc eval specs/lenet.model --weights runs/lenet/20260101-120000 --device reference --json
`,
    )
    .action(async (spec: string, o: EvalCliOptions) => {
      const model = await checkSpec(spec);
      const w = resolveWeights(o.weights, model.name);
      if (w.note) process.stderr.write(w.note + '\n');
      const r = await evaluateWeights(model, {
        weights: w.file,
        device: o.device,
        batch: o.batch,
        threads: o.threads ?? defaultThreads(),
        onEvent: (e) => {
          if (e.kind === 'note') process.stderr.write(e.message + '\n');
        },
      });
      if (o.json) {
        const out = { split: r.split, samples: r.samples, ...evalJson(r, r.split), device: r.device, seconds: Number(r.seconds.toFixed(3)), weights: w.file };
        if (r.split !== 'test') Object.assign(out, evalJson(r, 'test'));
        process.stdout.write(JSON.stringify(out) + '\n');
      } else {
        process.stdout.write(`${r.split} ${evalLine(r)}  (${r.samples} samples, ${r.device})\n`);
      }
    });
}
