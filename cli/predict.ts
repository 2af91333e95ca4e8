/**
 * `mpsc predict SPEC --weights REF --input FILE... [--json] [--batch N] [--device D] [--threads N]`:
 * run a trained model on new inputs (runtime/predict.ts) on any device (auto, as train; reference
 * for the float64 interpreter). Prints each sample's top class and probability for a
 * classifier (a head read by cross_entropy / nll / accuracy / top_k), else the head values;
 * with --json one object {"outputs": {"<value>": [...nested arrays...]}} on stdout.
 */
import { Option, type Command } from 'commander';
import { DEVICES } from '../runtime/device.js';
import { resolveWeights } from '../runtime/run_folder.js';
import { loadPredictInputs, nested, predict, topClasses } from '../runtime/predict.js';
import { defaultThreads, THREADS_HELP } from '../runtime/threads.js';
import { checkSpec, parsePositiveInt } from './train.js';

interface PredictCliOptions {
  weights: string;
  input: string[];
  batch?: number;
  device: string;
  threads?: number;
  json?: boolean;
}

export const PREDICT_HELP = `
Inputs (--input):
  one .safetensors file   one tensor per spec input except the label, named as in the spec, [N, ...]
  one .csv file           rows as the spec's csv() source reads them, with or without the label column
  .png / .jpg files       one sample each, for a model with one f32 image input [N, C, H, W]: grayscale
                          (C = 1) or RGB, resized to H x W, scaled as the data source scales pixels
                          (mnist(): /255 then the MNIST mean/std; MNIST digits are white on black)
Labels are never needed (the label input is fed zeros; the loss is not reported).
--weights: a checkpoint, model.safetensors, a run folder or latest (a folder's best.safetensors,
else its model.safetensors, else its newest checkpoint). Runs the spec's eval program on --device
(auto: cuda, else metal on Apple silicon, else cpu, as train; the first run on a native device
compiles the model, later runs reuse the build cache; --device reference runs the float64
interpreter with no compile step).

Examples:
  mpsc predict specs/mnist_mlp.model --weights latest --input digit.png
  mpsc predict specs/lenet.model --weights runs/lenet/20260101-120000 --input a.png b.jpg
  mpsc predict specs/mnist_mlp.model --weights model.safetensors --input batch.safetensors --json
  mpsc predict specs/lenet.model --weights latest --input digit.png --device reference
`;

export function register(program: Command): void {
  program
    .command('predict')
    .description('run a trained model on new inputs: `mpsc predict specs/mnist_mlp.model --weights latest --input digit.png`')
    .argument('<spec>', 'the .model file')
    .requiredOption('--weights <ref>', 'a checkpoint or weights file, a run folder, or latest')
    .requiredOption('--input <files...>', 'a .safetensors file, a .csv file, or image files (.png, .jpg)')
    .option('--batch <n>', "samples per evaluation chunk (default: the spec's batch)", parsePositiveInt('--batch'))
    .addOption(new Option('--device <device>', 'where to run: auto picks cuda (NVIDIA GPU + CUDA toolkit), else metal on Apple silicon, else cpu').choices([...DEVICES]).default('auto'))
    .option('--threads <n>', THREADS_HELP, parsePositiveInt('--threads'))
    .option('--json', 'print {"outputs": {"<value>": [...]}} on stdout')
    .addHelpText('after', PREDICT_HELP)
    .action(async (spec: string, o: PredictCliOptions) => {
      const model = await checkSpec(spec);
      const w = resolveWeights(o.weights, model.name);
      if (w.note) process.stderr.write(w.note + '\n');
      const inputs = loadPredictInputs(model, o.input);
      const r = await predict(model, inputs, {
        weights: w.file,
        batch: o.batch ?? model.train.batch,
        device: o.device,
        threads: o.threads ?? defaultThreads(),
        onNote: (m) => process.stderr.write(m + '\n'),
      });
      if (o.json) {
        const outputs: Record<string, unknown> = {};
        r.heads.forEach((h, k) => (outputs[h.name] = nested(r.values[k], inputs.count, r.shapes[k])));
        process.stdout.write(JSON.stringify({ outputs }) + '\n');
        return;
      }
      const lines: string[] = [];
      r.heads.forEach((h, k) => {
        const shape = r.shapes[k];
        if (h.scores && shape.length === 1) {
          const top = topClasses(r.values[k], inputs.count, shape[0], h.scores);
          top.forEach((t, i) => lines.push(`${inputs.labels[i]}: class ${t.cls} (p=${t.p.toFixed(4)})`));
        } else {
          const per = shape.reduce((a, b) => a * b, 1);
          for (let i = 0; i < inputs.count; i++) {
            const vals = Array.from(r.values[k].subarray(i * per, Math.min((i + 1) * per, i * per + 8)), (v) => v.toPrecision(5));
            lines.push(`${inputs.labels[i]}: ${h.name} [${shape.join(', ')}] ${vals.join(' ')}${per > 8 ? ' ...' : ''}`);
          }
        }
      });
      process.stdout.write(lines.join('\n') + '\n');
    });
}
