/**
 * `mpsc eval SPEC --weights FILE`: loss and metrics of saved weights on the spec's test split
 * (the training split when the spec has no test data). Prints one line, or one JSON object
 * with --json (keys: split, samples, test_loss, test_<metric>, device, seconds, weights).
 */
import { Option, type Command } from 'commander';
import { DEVICES } from '../runtime/device.js';
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
    .description('evaluate saved weights (a checkpoint or --save-init file) on the test split')
    .argument('<spec>', 'the .model file')
    .requiredOption('--weights <file>', 'safetensors file with the parameters (a checkpoint works)')
    .addOption(new Option('--device <device>', 'where to run').choices([...DEVICES]).default('auto'))
    .option('--batch <n>', 'evaluation batch size (default: the spec\'s batch)', parsePositiveInt('--batch'))
    .option('--threads <n>', 'CPU threads (default: all cores)', parsePositiveInt('--threads'))
    .option('--json', 'print the result as one JSON object on stdout')
    .action(async (spec: string, o: EvalCliOptions) => {
      const model = await checkSpec(spec);
      const r = await evaluateWeights(model, {
        weights: o.weights,
        device: o.device,
        batch: o.batch,
        threads: o.threads,
        onEvent: (e) => {
          if (e.kind === 'note') process.stderr.write(e.message + '\n');
        },
      });
      if (o.json) {
        const out = { split: r.split, samples: r.samples, ...evalJson(r, r.split), device: r.device, seconds: Number(r.seconds.toFixed(3)), weights: o.weights };
        if (r.split !== 'test') Object.assign(out, evalJson(r, 'test'));
        process.stdout.write(JSON.stringify(out) + '\n');
      } else {
        process.stdout.write(`${r.split} ${evalLine(r)}  (${r.samples} samples, ${r.device})\n`);
      }
    });
}
