/**
 * The fuzz oracle: runs one mutated spec through the front end (and, when it is accepted,
 * through buildPrograms) and classifies the outcome.
 *
 * Consumes: a FuzzCase (tools/fuzz/mutate.ts) and the file name it pretends to be.
 * Produces: accepted | rejected | failure. The contract checked:
 *   - accepted: checkSource returned a CheckedModel (and buildPrograms either built the programs
 *     or threw a UserError);
 *   - rejected: a UserError whose first line is `<file>:<line>:<col>: error: <message>`;
 *   - failure: anything else: another exception type (TypeError, RangeError from a stack
 *     overflow, an `internal:` Error), a UserError without a location, or a front end slower
 *     than the time limit (2 s of CPU time for checkSource: CPU time, not wall time, so a
 *     loaded machine does not turn into false failures; buildPrograms of an accepted spec is
 *     timed separately and reported, it is not part of the front-end limit).
 * Decoding is what checkFile does (`readFileSync(path, 'utf8')`: invalid UTF-8 becomes U+FFFD).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { checkSource } from '../../compiler/check/index.js';
import { UserError } from '../../compiler/errors.js';
import { buildPrograms } from '../../compiler/ir/programs.js';
import type { FuzzCase } from './mutate.js';

export const TIME_LIMIT_MS = 2000;

export interface CaseResult {
  index: number;
  outcome: 'accepted' | 'rejected' | 'failure';
  /** CPU milliseconds of checkSource */
  ms: number;
  /** CPU milliseconds of buildPrograms (accepted specs only, else 0) */
  programsMs: number;
  /** for failures: what went wrong; for rejections: the first diagnostic line */
  detail: string;
  mutations: string[];
  seedFile: string;
}

/**
 * The seed specs: the corpus in test/fixtures/reliability/seeds (snapshots of the example specs,
 * bench specs and trainer fixtures, plus two seeds that cover most of the grammar). A fixed
 * folder, sorted, so a case number always means the same input; to fuzz a new example spec,
 * copy it there.
 */
export function loadSeeds(root = process.cwd()): { files: string[]; texts: string[] } {
  const d = 'test/fixtures/reliability/seeds';
  const files = fs
    .readdirSync(path.join(root, d))
    .filter((f) => f.endsWith('.model'))
    .sort()
    .map((f) => path.join(d, f));
  return { files, texts: files.map((f) => fs.readFileSync(path.join(root, f), 'utf8')) };
}

function escapeRe(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function describeError(e: unknown): string {
  const err = e as Error;
  const name = err?.constructor?.name ?? typeof e;
  const frame = (err?.stack ?? '').split('\n').find((l) => l.trim().startsWith('at ')) ?? '';
  return `${name}: ${String(err?.message ?? e).split('\n')[0].slice(0, 300)} ${frame.trim()}`;
}

export interface RunOptions {
  /** also build the programs of accepted specs (default true) */
  programs?: boolean;
  /** called when a stage starts (the fuzz harness's watchdog reports the stage a case hangs in) */
  onStage?: (stage: 'check' | 'programs') => void;
  timeLimitMs?: number;
}

export function runCase(c: FuzzCase, seedFile: string, opts: RunOptions = {}): CaseResult {
  const file = seedFile;
  const text = Buffer.from(c.bytes).toString('utf8');
  const limit = opts.timeLimitMs ?? TIME_LIMIT_MS;
  const cpu = () => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1000;
  };
  const t0 = cpu();
  let ms = 0;
  let programsMs = 0;
  const base = { index: c.index, mutations: c.mutations, seedFile };
  let outcome: CaseResult['outcome'];
  let detail = '';
  try {
    opts.onStage?.('check');
    const model = checkSource(text, file);
    ms = cpu() - t0;
    outcome = 'accepted';
    if (opts.programs !== false) {
      const p0 = cpu();
      opts.onStage?.('programs');
      try {
        const batch = Math.min(model.train.batch, 64);
        buildPrograms(model, { batch, evalTail: batch > 1 ? batch - 1 : undefined });
      } catch (e) {
        if (!(e instanceof UserError)) {
          outcome = 'failure';
          detail = `buildPrograms of an accepted spec threw ${describeError(e)}`;
        }
      }
      programsMs = cpu() - p0;
    }
  } catch (e) {
    ms = cpu() - t0;
    if (e instanceof UserError) {
      const first = e.message.split('\n')[0];
      const re = new RegExp(`^${escapeRe(file)}:\\d+:\\d+: error: \\S`);
      if (re.test(first)) {
        outcome = 'rejected';
        detail = first.slice(0, 300);
      } else {
        outcome = 'failure';
        detail = `UserError without a 'path:line:col: error:' location: ${first.slice(0, 300)}`;
      }
    } else {
      outcome = 'failure';
      detail = describeError(e);
    }
  }
  if (ms > limit && outcome !== 'failure') {
    outcome = 'failure';
    detail = `the front end took ${ms.toFixed(0)} ms of CPU time (limit ${limit} ms)${detail ? `; ${detail}` : ''}`;
  }
  return { ...base, outcome, ms, programsMs, detail };
}

/** a short, printable preview of a case's input for reports */
export function preview(bytes: Uint8Array, max = 160): string {
  const s = Buffer.from(bytes).toString('utf8');
  return JSON.stringify(s.length > max ? s.slice(0, max) + `...(${s.length} chars)` : s);
}
