/**
 * `mpsc` command-line entry. Each subcommand lives in its own file under cli/ and
 * exports `register(program)`; main only wires them together and maps errors to exit codes:
 *   0 success, 1 user error (bad spec, bad data, ...), 2 internal error (a bug in mpsc).
 * With --json, a user error is also printed on stdout as `{"ok": false, "diagnostics": [...]}`
 * (compiler/diagnostics.ts JsonDiagnostic: file, line, col, endLine, endCol, severity, message, hint).
 */
import { Command, CommanderError } from 'commander';
import { userErrorJson } from '../compiler/diagnostics.js';
import { UserError } from '../compiler/errors.js';
import { register as registerCheck } from './check.js';
import { register as registerBuild } from './build.js';
import { register as registerTrain } from './train.js';
import { register as registerEval } from './eval.js';
import { register as registerBench } from './bench.js';
import { register as registerPredict } from './predict.js';
import { register as registerExport } from './export.js';
import { register as registerReport } from './report.js';
import { register as registerSample } from './sample.js';
import { packageVersion } from './version.js';

/** the daily workflow end to end (docs/workflow.md), under `mpsc --help` */
export const WORKFLOW_HELP = `
Workflow: train -> report -> predict -> export (docs/workflow.md)
  mpsc train specs/lenet.model                    runs/lenet/<run-id>/: config.json, metrics.jsonl, train.log,
                                                  checkpoints, best.safetensors, model.safetensors, report.html
  mpsc report runs/lenet/latest                   rebuild the run's report.html (curves, settings, spec, memory)
  mpsc eval specs/lenet.model --weights latest    test loss and metrics of the newest run's best weights
  mpsc predict specs/lenet.model --weights latest --input digit.png
                                                  class and probability per sample (--json: the logits)
  mpsc export specs/lenet.model --weights latest --format onnx -o lenet.onnx
  mpsc export specs/lenet.model --weights latest --format torch -o lenet_torch/
Each command's --help has its options and examples.`;

export async function main(argv: string[]): Promise<number> {
  const program = new Command();
  program
    .name('mpsc')
    .description('Compile declarative .model training specs to Metal (Apple GPUs) and C++ (CPU), then train.')
    .version(packageVersion(), '-V, --version', 'print the mpsc version')
    .exitOverride()
    .showHelpAfterError('(run mpsc --help or mpsc <command> --help for usage)')
    .addHelpText('after', WORKFLOW_HELP);
  registerCheck(program);
  registerBuild(program);
  registerTrain(program);
  registerEval(program);
  registerBench(program);
  registerPredict(program);
  registerExport(program);
  registerReport(program);
  registerSample(program);
  try {
    await program.parseAsync(argv, { from: 'user' });
    return typeof process.exitCode === 'number' ? process.exitCode : 0;
  } catch (e) {
    if (e instanceof CommanderError) {
      return e.exitCode === 0 ? 0 : 1; // commander already printed the message
    }
    if (e instanceof UserError) {
      // with --json the error is also one JSON object on stdout (for editors and CI annotators)
      if (argv.includes('--json')) process.stdout.write(JSON.stringify({ ok: e.exitCode === 0, diagnostics: userErrorJson(e) }) + '\n');
      process.stderr.write(e.message.endsWith('\n') ? e.message : e.message + '\n');
      return e.exitCode;
    }
    const err = e as Error;
    process.stderr.write(`mpsc: internal error (this is a bug in mpsc, please report it): ${err?.message ?? String(e)}\n`);
    if (process.env.MPSC_DEBUG) process.stderr.write(`${err?.stack ?? ''}\n`);
    return 2;
  }
}
