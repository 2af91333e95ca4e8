/**
 * `mpsc export SPEC --weights FILE --format onnx|torch -o OUT`: trained weights as a model other
 * tools run.
 *   onnx:  OUT is one .onnx file: the eval graph (opset 17, batch dimension `N` symbolic),
 *          inputs named as the spec's, outputs the network values the loss and metrics read.
 *   torch: OUT is a folder with model.py (a plain torch.nn.Module whose state_dict keys are the
 *          checkpoint's names, plus read_safetensors() and load()) and model.safetensors
 *          (parameters and buffers only).
 * Exit 1 on a user error (bad spec, missing tensor, an op the format cannot express).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Option, type Command } from 'commander';
import { checkFile } from '../compiler/check/index.js';
import { UserError } from '../compiler/errors.js';
import { exportOnnx } from '../compiler/export/onnx.js';
import { exportTorch } from '../compiler/export/torch.js';
import { readExportWeights } from '../compiler/export/weights.js';
import { makeDirs, saveTensors, writeFileAtomic } from '../runtime/checkpoint.js';
import { resolveWeights } from '../runtime/run_folder.js';
import { packageVersion } from './version.js';

interface ExportCliOptions {
  weights: string;
  format: 'onnx' | 'torch';
  output: string;
  json?: boolean;
}

export function register(program: Command): void {
  program
    .command('export')
    .description('export trained weights as an ONNX model or a PyTorch module')
    .argument('<spec>', 'the .model file the weights were trained with')
    .requiredOption('--weights <file>', 'a checkpoint, model.safetensors, a run folder or `latest` (optimizer state is ignored)')
    .addOption(new Option('--format <format>', 'onnx: one .onnx file; torch: a folder with model.py + model.safetensors').choices(['onnx', 'torch']).makeOptionMandatory())
    .requiredOption('-o, --output <path>', 'the .onnx file (onnx) or the folder (torch) to write')
    .option('--json', 'print what was written as one JSON object on stdout')
    .addHelpText(
      'after',
      `
Examples:
  mpsc export specs/lenet.model --weights runs/lenet/latest/model.safetensors --format onnx -o lenet.onnx
  mpsc export specs/lenet.model --weights runs/lenet/latest/best.safetensors --format torch -o lenet_torch/
  mpsc export specs/char_gpt.model --weights latest --format onnx -o char_gpt.onnx   (the transformer too)

The ONNX model's inputs are the spec inputs the network reads (batch dimension 'N'), its outputs
the values the loss and metrics read (e.g. 'logits'); dropout is absent and batchnorm uses the
running statistics. In Python: onnxruntime.InferenceSession("lenet.onnx").run(None, {"image": x}).
The torch folder: import model; m = model.load("model.safetensors"); m(x).`,
    )
    .action((spec: string, o: ExportCliOptions) => {
      const model = checkFile(spec);
      const weights = readExportWeights(model, resolveWeights(o.weights, model.name).file);
      const version = packageVersion();
      if (o.format === 'onnx') {
        if (fs.existsSync(o.output) && fs.statSync(o.output).isDirectory()) {
          throw new UserError(`${o.output}: error: --format onnx writes one file, and this is a folder\n  hint: pass a file name such as ${path.join(o.output, `${model.name}.onnx`)}`);
        }
        const r = exportOnnx(model, weights, version);
        writeFileAtomic(o.output, r.bytes);
        const info = { format: 'onnx', file: o.output, bytes: r.bytes.length, nodes: r.nodes, inputs: r.inputs, outputs: r.outputs };
        process.stdout.write(o.json ? JSON.stringify(info) + '\n' : `wrote ${o.output} (ONNX opset 17, ${r.nodes} nodes, inputs ${r.inputs.join(', ')}; outputs ${r.outputs.join(', ')})\n`);
        return;
      }
      if (fs.existsSync(o.output) && !fs.statSync(o.output).isDirectory()) {
        throw new UserError(`${o.output}: error: --format torch writes a folder, and this is a file\n  hint: pass a folder name such as ${path.basename(o.output).replace(/\.[^.]*$/, '')}_torch/`);
      }
      const r = exportTorch(model, weights, version);
      makeDirs(o.output, 'the export folder');
      const py = path.join(o.output, 'model.py');
      const st = path.join(o.output, 'model.safetensors');
      writeFileAtomic(py, new TextEncoder().encode(r.source));
      saveTensors(st, r.tensors, { format: 'pt', mpsc_model: model.name, ...weights.metadata });
      const info = { format: 'torch', folder: o.output, files: [py, st], class: r.className, tensors: r.tensors.size };
      process.stdout.write(o.json ? JSON.stringify(info) + '\n' : `wrote ${py} (class ${r.className}) and ${st} (${r.tensors.size} tensors)\n`);
    });
}
