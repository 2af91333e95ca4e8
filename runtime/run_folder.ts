/**
 * Run folders: where one `mpsc train` keeps everything it writes.
 *
 *   runs/<model>/<run-id>/   run-id = YYYYMMDD-HHMMSS (UTC) of the start, `-2`, `-3`... on collision
 *     config.json            the resolved settings and the command line (written at the start)
 *     metrics.jsonl          one JSON object per logged step / evaluation (`split`: train, val, test)
 *     train.log              a copy of the console output
 *     checkpoint-<step>.safetensors   full training checkpoints (the last --keep K)
 *     best.safetensors       the full checkpoint at the best monitored value
 *     model.safetensors      weights only (parameters and buffers, torch names), the newest
 *     report.html            the training report (runtime/report)
 *   runs/<model>/latest      symlink to the newest run folder (a text file with its run-id where
 *                            symlinks cannot be made)
 *
 * Consumes paths and names; produces folders and resolves references (`latest`, a run folder,
 * a checkpoint file) for --resume and for --weights (eval, predict, export). Relies on
 * checkpoint.ts for the checkpoint file list and atomic writes.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { UserError } from '../compiler/errors.js';
import { listCheckpoints, makeDirs, resolveCheckpoint, writeFileAtomic } from './checkpoint.js';

export const RUNS_ROOT = 'runs';
export const CONFIG_FILE = 'config.json';
export const METRICS_FILE = 'metrics.jsonl';
export const LOG_FILE = 'train.log';
export const BEST_FILE = 'best.safetensors';
export const WEIGHTS_FILE = 'model.safetensors';
export const LATEST = 'latest';

/** `runs/<model>` under `root` (default: runs/ in the current folder) */
export function modelRunsDir(model: string, root = RUNS_ROOT): string {
  return path.join(root, model);
}

export function runIdFor(date: Date): string {
  const p = (n: number) => String(n).padStart(2, '0');
  return `${date.getUTCFullYear()}${p(date.getUTCMonth() + 1)}${p(date.getUTCDate())}-${p(date.getUTCHours())}${p(date.getUTCMinutes())}${p(date.getUTCSeconds())}`;
}

/** Create a fresh run folder under `modelDir` (mkdir is the lock: two runs in one second get -2). */
export function createRunDir(modelDir: string, now = new Date()): string {
  makeDirs(modelDir, 'the runs folder');
  const base = runIdFor(now);
  for (let k = 1; k < 10_000; k++) {
    const dir = path.join(modelDir, k === 1 ? base : `${base}-${k}`);
    try {
      fs.mkdirSync(dir);
      return dir;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw new UserError(`${dir}: error: cannot create the run folder (${(e as Error).message})`);
    }
  }
  throw new UserError(`${modelDir}: error: too many runs started at ${base}`);
}

/** Create (or reuse) an explicit --run-dir. */
export function ensureRunDir(dir: string): string {
  makeDirs(dir, 'the run folder');
  return dir;
}

/**
 * Point `<modelDir>/latest` at `runDir` (atomically: a new link renamed over the old one). The
 * link holds the run-id when the run folder is in modelDir, else its absolute path (--run-dir).
 */
export function updateLatest(modelDir: string, runDir: string): void {
  const parent = path.resolve(modelDir);
  fs.mkdirSync(parent, { recursive: true });
  const target = path.dirname(path.resolve(runDir)) === parent ? path.basename(runDir) : path.resolve(runDir);
  const link = path.join(parent, LATEST);
  const tmp = path.join(parent, `.${LATEST}.tmp-${process.pid}`);
  fs.rmSync(tmp, { force: true });
  try {
    fs.symlinkSync(target, tmp, 'dir');
    fs.renameSync(tmp, link);
  } catch {
    fs.rmSync(tmp, { force: true });
    try {
      if (fs.lstatSync(link).isDirectory()) return; // a real folder named latest: leave it alone
    } catch {
      // no link yet
    }
    writeFileAtomic(link, new TextEncoder().encode(target + '\n'));
  }
}

/**
 * Resuming in a run folder from a checkpoint at `step`: keep the lines of metrics.jsonl up to that
 * step. Later lines were written after the checkpoint (a run killed by SIGTERM or SIGKILL between two
 * checkpoints, or a resume from an older checkpoint) and the resumed run writes them again; a torn
 * line (killed while writing) goes too, so appending starts on a line of its own.
 */
export function trimMetrics(file: string, step: number): void {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    return; // no metrics yet
  }
  const upTo = (line: string): boolean => {
    try {
      const o = JSON.parse(line) as { step?: unknown };
      return typeof o.step !== 'number' || o.step <= step;
    } catch {
      return false;
    }
  };
  const kept = text.split('\n').filter(upTo).map((l) => l + '\n').join('');
  if (kept !== text) writeFileAtomic(file, new TextEncoder().encode(kept));
}

/** The run folder `latest` points at (symlink or text file), or null. */
export function readLatest(modelDir: string): string | null {
  const link = path.join(modelDir, LATEST);
  let st: fs.Stats;
  try {
    st = fs.lstatSync(link);
  } catch {
    return null;
  }
  if (st.isSymbolicLink() || st.isDirectory()) return safeRealpath(link);
  const id = fs.readFileSync(link, 'utf8').trim();
  return id ? path.resolve(modelDir, id) : null;
}

function safeRealpath(p: string): string | null {
  try {
    return fs.realpathSync(p);
  } catch {
    return null;
  }
}

export function isRunDir(dir: string): boolean {
  return fs.existsSync(path.join(dir, CONFIG_FILE));
}

/**
 * A reference to a run: `latest` (runs/<model>/latest), `runs/<model>` (its latest), or a run
 * folder; anything else is returned unchanged (a file, or a folder of checkpoints).
 */
export function resolveRunRef(ref: string, model: string, root = RUNS_ROOT): string {
  if (ref === LATEST) {
    const modelDir = modelRunsDir(model, root);
    const dir = readLatest(modelDir);
    if (!dir || !fs.existsSync(dir)) {
      throw new UserError(`error: no runs of model '${model}' yet (${path.join(modelDir, LATEST)} does not exist)\n  help: train first (mpsc train SPEC), or give a run folder or checkpoint file`);
    }
    return dir;
  }
  return latestOfModelDir(ref) ?? ref;
}

/**
 * A `runs/<model>` folder (not a run folder, no checkpoints of its own, a `latest` entry): the run folder
 * its `latest` points at, when that exists; null for anything else. --resume, --weights and mpsc report
 * take such a folder as its latest run.
 */
export function latestOfModelDir(dir: string): string | null {
  if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory() || isRunDir(dir) || listCheckpoints(dir).length > 0) return null;
  const latest = readLatest(dir);
  return latest && fs.existsSync(latest) ? latest : null;
}

export interface ResumeTarget {
  /** the checkpoint file to load */
  checkpoint: string;
  /** the run folder to continue in, when the checkpoint lies in one */
  runDir: string | null;
}

/** --resume: `latest`, a run folder, a folder of checkpoints, or a checkpoint file. */
export function resolveResume(ref: string, model: string, notes: string[], root = RUNS_ROOT): ResumeTarget {
  const target = resolveRunRef(ref, model, root);
  const checkpoint = resolveCheckpoint(target, notes);
  const dir = path.dirname(checkpoint);
  return { checkpoint, runDir: isRunDir(dir) ? dir : null };
}

/**
 * --weights (eval, predict, export): a file, or a run folder / `latest`, in which the best
 * checkpoint is used when there is one, else the newest weights (model.safetensors), else the
 * newest checkpoint. Returns the file and a note saying which was picked for a folder.
 */
export function resolveWeights(ref: string, model: string, root = RUNS_ROOT): { file: string; note: string | null } {
  const target = resolveRunRef(ref, model, root);
  if (!fs.existsSync(target)) throw new UserError(`${ref}: error: weights file not found`);
  if (!fs.statSync(target).isDirectory()) return { file: target, note: null };
  for (const name of [BEST_FILE, WEIGHTS_FILE]) {
    const f = path.join(target, name);
    if (fs.existsSync(f)) return { file: f, note: `weights: ${f}` };
  }
  const notes: string[] = [];
  const f = resolveCheckpoint(target, notes);
  return { file: f, note: `weights: ${f}` };
}
