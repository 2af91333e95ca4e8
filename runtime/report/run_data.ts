/**
 * Reads one run folder for the report page.
 *
 * Consumes: `<runDir>/config.json` and `<runDir>/metrics.jsonl` as docs/workflow.md's "run folder"
 *           section defines them (the issue-16 contract: every metrics line has `split`: train / val
 *           / test / summary; train lines have step, epoch (1-based), loss, lr, samples_per_sec and
 *           each metric; val / test lines step, epoch, loss and each metric).
 * Produces: `RunData`: the run's id and config, and its metric records grouped by split. A line
 *           that is not a JSON object (a run killed mid-write leaves a partial last line) is
 *           skipped and counted, never fatal.
 * Also resolveRunDir: a run-folder argument (a folder, runs/<model> for its latest run, or a `latest`
 * file holding a run-id).
 * Relies on: run_folder.ts (what `latest` points at); a missing or unreadable config.json is a UserError.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { UserError } from '../../compiler/errors.js';
import { latestOfModelDir } from '../run_folder.js';

export interface RunConfig {
  mpsc_version?: string;
  model?: string;
  spec_file?: string;
  spec_text?: string;
  argv?: string[];
  device?: string;
  threads?: number;
  settings?: Record<string, Record<string, unknown>>;
  overrides?: string[];
  started_at?: string;
  resumed_from?: string;
}

export type MetricRecord = Record<string, unknown> & { split: string; step?: number; epoch?: number };

export interface RunData {
  /** the folder name (the run-id; through a `latest` symlink, the folder it points at) */
  id: string;
  dir: string;
  config: RunConfig;
  train: MetricRecord[];
  val: MetricRecord[];
  test: MetricRecord[];
  summary: MetricRecord | null;
  /** metrics.jsonl lines that could not be read */
  skippedLines: number;
}

/**
 * A run folder argument: a folder, or `runs/<model>/latest` where symlinks fail (a text file holding
 * the run-id, per the run-folder contract).
 */
export function resolveRunDir(arg: string): string {
  if (!fs.existsSync(arg)) throw new UserError(`${arg}: error: no such run folder\n  hint: run folders are runs/<model>/<run-id>/ (or runs/<model>/latest)`);
  if (fs.statSync(arg).isDirectory()) return latestOfModelDir(arg) ?? arg; // runs/<model>: its latest run, as for --resume
  const id = fs.readFileSync(arg, 'utf8').trim();
  const dir = path.join(path.dirname(arg), id);
  if (id !== '' && !id.includes('/') && fs.existsSync(dir) && fs.statSync(dir).isDirectory()) return dir;
  throw new UserError(`${arg}: error: not a run folder\n  hint: pass a folder that mpsc train wrote, such as runs/<model>/latest`);
}

export function readRun(runDir: string): RunData {
  const cfgFile = path.join(runDir, 'config.json');
  let config: RunConfig;
  try {
    config = JSON.parse(fs.readFileSync(cfgFile, 'utf8')) as RunConfig;
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code === 'ENOENT') throw new UserError(`${runDir}: error: not a run folder (it has no config.json)\n  hint: pass a folder that mpsc train wrote, such as runs/<model>/latest`);
    throw new UserError(`${cfgFile}: error: cannot read the run's configuration (${err.message})`);
  }
  const run: RunData = { id: path.basename(fs.realpathSync(runDir)), dir: runDir, config, train: [], val: [], test: [], summary: null, skippedLines: 0 };
  const metricsFile = path.join(runDir, 'metrics.jsonl');
  const text = fs.existsSync(metricsFile) ? fs.readFileSync(metricsFile, 'utf8') : '';
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    let rec: unknown;
    try {
      rec = JSON.parse(line);
    } catch {
      run.skippedLines++;
      continue;
    }
    if (typeof rec !== 'object' || rec === null || typeof (rec as MetricRecord).split !== 'string') {
      run.skippedLines++;
      continue;
    }
    const r = rec as MetricRecord;
    if (r.split === 'train' || r.split === 'val' || r.split === 'test') run[r.split].push(r);
    else if (r.split === 'summary') run.summary = r;
  }
  return run;
}

/** numeric keys of the records other than the bookkeeping ones: the loss and metric names */
export function metricNames(run: RunData): string[] {
  const skip = new Set(['split', 'step', 'epoch', 'lr', 'samples_per_sec', 'loss', 'time', 'seconds', 'samples']);
  const names = new Set<string>();
  for (const r of [...run.train, ...run.val, ...run.test]) for (const [k, v] of Object.entries(r)) if (!skip.has(k) && typeof v === 'number') names.add(k);
  return [...names];
}
