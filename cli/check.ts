/**
 * `mpsc check SPEC [--json]`: parse and check a .model file, print the model summary.
 * Exit 0 when valid, 1 with diagnostics when not.
 */
import type { Command } from 'commander';
import { checkFileWithWarnings } from '../compiler/check/index.js';
import { renderSummary, summarize } from '../compiler/check/summary.js';

export function register(program: Command): void {
  program
    .command('check')
    .description('check a .model spec (syntax, names, shapes, settings) and print a model summary')
    .argument('<spec>', 'path to a .model file')
    .option('--json', 'print the summary as JSON')
    // EXTENSION POINT (IR / memory planner issue): add `--ir` here to print the train-step
    // program, and add the memory plan's planned peak bytes to the summary below.
    .action((spec: string, opts: { json?: boolean }) => {
      const { model, warnings } = checkFileWithWarnings(spec);
      for (const w of warnings) process.stderr.write(w + '\n');
      const summary = summarize(model);
      process.stdout.write(opts.json ? JSON.stringify(summary, null, 2) + '\n' : renderSummary(summary) + '\n');
    });
}
