/**
 * `mpsc report RUN_DIR [RUN_DIR...] [-o FILE]`: rebuild the training report page of run folders.
 * One folder: writes RUN_DIR/report.html (or FILE). Several: one page overlaying the runs, written
 * to FILE (default: report.html in the current folder). runs/<model> means its latest run (as for
 * --resume). Exit 1 when a folder is not a run folder.
 */
import type { Command } from 'commander';
import * as path from 'node:path';
import { writeComparison, writeReport } from '../runtime/report/index.js';
import { resolveRunDir } from '../runtime/report/run_data.js';

export function register(program: Command): void {
  program
    .command('report')
    .description('rebuild the training report page (report.html) of one run folder, or overlay several runs on one page')
    .argument('<run-dir...>', 'run folders written by mpsc train (runs/<model>/<run-id>, runs/<model>/latest, or runs/<model> for its latest run)')
    .option('-o, --output <file>', 'where to write the page (default: <run-dir>/report.html for one run, ./report.html for several)')
    .addHelpText(
      'after',
      `
The page is one self-contained HTML file (no network needed): loss and metric curves against step
and epoch for train, val and test, the learning rate, the throughput, the spec, the model summary
and the memory plan. mpsc train refreshes <run-dir>/report.html at each evaluation and at the end.

Examples:
  mpsc report runs/lenet/latest                                 rebuild runs/lenet/latest/report.html
  mpsc report runs/lenet                                        the same (runs/<model> is its latest run)
  mpsc report runs/lenet/20261203-101500 runs/lenet/20261203-104000 -o lenet_runs.html   compare two runs`,
    )
    .action((dirs: string[], o: { output?: string }) => {
      const runDirs = dirs.map(resolveRunDir);
      let out: string;
      if (runDirs.length === 1 && o.output === undefined) out = writeReport(runDirs[0]);
      else out = writeComparison(runDirs, o.output ?? path.resolve('report.html'));
      process.stdout.write(`wrote ${out}\n`);
    });
}
