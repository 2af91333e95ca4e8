/**
 * Compiler diagnostics: `path:line:col: error: message`, the source line, a caret line
 * under the span, and an optional `hint: ...`. Every phase of the front end collects
 * Diagnostics into a list; `throwIfErrors` turns the list into one UserError (a
 * DiagnosticsError, which keeps the list for `--json`: diagnosticJson / userErrorJson).
 */
import { UserError } from './errors.js';
import type { SourceLoc } from './ir/graph.js';

export interface Diagnostic {
  severity: 'error' | 'warning';
  loc: SourceLoc;
  message: string;
  hint?: string;
}

export function errorAt(loc: SourceLoc, message: string, hint?: string): Diagnostic {
  const d: Diagnostic = { severity: 'error', loc, message };
  if (hint !== undefined) d.hint = hint;
  return d;
}

/** Format one diagnostic against the source text it points into. */
export function formatDiagnostic(d: Diagnostic, source: string): string {
  const { file, line, col } = d.loc;
  const out = [`${file}:${line}:${col}: ${d.severity}: ${d.message}`];
  const text = sourceLine(source, line);
  if (text !== null) {
    const shown = text.replace(/\t/g, ' ');
    out.push(`  ${shown}`);
    const endCol = d.loc.endLine === undefined || d.loc.endLine === line ? (d.loc.endCol ?? col) : shown.length;
    const width = Math.max(1, Math.min(endCol, shown.length + 1) - col + 1);
    out.push(`  ${' '.repeat(Math.max(0, col - 1))}${'^'.repeat(width)}`);
  }
  if (d.hint) out.push(`  hint: ${d.hint}`);
  return out.join('\n');
}

function sourceLine(source: string, line: number): string | null {
  let start = 0;
  for (let l = 1; l < line; l++) {
    const nl = source.indexOf('\n', start);
    if (nl < 0) return null;
    start = nl + 1;
  }
  let end = source.indexOf('\n', start);
  if (end < 0) end = source.length;
  const s = source.slice(start, end).replace(/\r$/, '');
  return s.length > 300 ? s.slice(0, 300) : s;
}

/** At most this many diagnostics are printed; the rest are counted. */
export const MAX_SHOWN = 50;

/** Sort by position and format the diagnostics (the first MAX_SHOWN), with an error count when there are several. */
export function formatDiagnostics(diags: readonly Diagnostic[], source: string): string {
  const sorted = [...diags].sort((a, b) => a.loc.line - b.loc.line || a.loc.col - b.loc.col);
  const errors = sorted.filter((d) => d.severity === 'error').length;
  const shown = sorted.slice(0, MAX_SHOWN).map((d) => formatDiagnostic(d, source));
  if (sorted.length > MAX_SHOWN) shown.push(`... and ${sorted.length - MAX_SHOWN} more`);
  const body = shown.join('\n');
  return errors > 1 ? `${body}\n${errors} errors` : body;
}

/** A UserError that carries its diagnostics, so `--json` can print them as objects. */
export class DiagnosticsError extends UserError {
  constructor(message: string, readonly diagnostics: readonly Diagnostic[]) {
    super(message);
    this.name = 'DiagnosticsError';
  }
}

/** Throw one UserError carrying every diagnostic when any of them is an error. */
export function throwIfErrors(diags: readonly Diagnostic[], source: string): void {
  if (diags.some((d) => d.severity === 'error')) {
    const errors = diags.filter((d) => d.severity === 'error');
    throw new DiagnosticsError(formatDiagnostics(errors, source), [...errors].sort((a, b) => a.loc.line - b.loc.line || a.loc.col - b.loc.col));
  }
}

/** The JSON form of a diagnostic (`mpsc check --json`, docs/language.md "Diagnostics as JSON"). */
export interface JsonDiagnostic {
  file: string;
  line: number | null;
  col: number | null;
  endLine: number | null;
  endCol: number | null;
  severity: 'error' | 'warning';
  message: string;
  hint: string | null;
}

export function diagnosticJson(d: Diagnostic): JsonDiagnostic {
  const { file, line, col } = d.loc;
  return { file, line, col, endLine: d.loc.endLine ?? line, endCol: d.loc.endCol ?? col, severity: d.severity, message: d.message, hint: d.hint ?? null };
}

/**
 * Any UserError as JSON diagnostics: a DiagnosticsError's own, else one error whose file and
 * position are read from a leading `file:line:col:` or `file:` when there is one, with the
 * message's `hint:` / `help:` line as the hint.
 */
export function userErrorJson(e: UserError): JsonDiagnostic[] {
  if (e instanceof DiagnosticsError) return e.diagnostics.map(diagnosticJson);
  const lines = e.message.split('\n');
  const first = lines[0];
  const hintLine = lines.find((l) => /^\s*(hint|help): /.test(l));
  const hint = hintLine ? hintLine.replace(/^\s*(hint|help): /, '') : null;
  const at = /^(.+?):(\d+):(\d+): (?:error: )?(.*)$/.exec(first);
  if (at) {
    const [line, col] = [Number(at[2]), Number(at[3])];
    return [{ file: at[1], line, col, endLine: line, endCol: col, severity: 'error', message: at[4], hint }];
  }
  const f = /^([^\s:]+): (?:error: )?(.*)$/.exec(first);
  return [{ file: f ? f[1] : '', line: null, col: null, endLine: null, endCol: null, severity: 'error', message: f ? f[2] : first, hint }];
}

/** Edit distance with adjacent transpositions (optimal string alignment), capped: returns max+1 once it exceeds max. */
export function editDistance(a: string, b: string, max = Infinity): number {
  if (Math.abs(a.length - b.length) > max) return max + 1;
  let prev2: number[] = [];
  let prev = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      let v = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, prev2[j - 2] + 1);
      cur.push(v);
      if (v < rowMin) rowMin = v;
    }
    if (rowMin > max) return max + 1;
    prev2 = prev;
    prev = cur;
  }
  return prev[b.length];
}

/** The closest candidate within a small edit distance (about a third of the word), or null. */
export function didYouMean(word: string, candidates: Iterable<string>): string | null {
  const max = Math.max(1, Math.min(3, Math.floor(word.length / 3)));
  let best: string | null = null;
  let bestD = max + 1;
  for (const c of candidates) {
    if (c === word) continue;
    const d = editDistance(word.toLowerCase(), c.toLowerCase(), max);
    if (d < bestD) {
      bestD = d;
      best = c;
    }
  }
  return best;
}

/** ` (did you mean 'x'?)`-style hint text, or undefined. */
export function suggestion(word: string, candidates: Iterable<string>): string | undefined {
  const m = didYouMean(word, candidates);
  return m === null ? undefined : `did you mean '${m}'?`;
}

/** The n candidates closest to word by edit distance (ties in the candidates' order). */
export function closestNames(word: string, candidates: Iterable<string>, n: number): string[] {
  const w = word.toLowerCase();
  return [...new Set(candidates)]
    .filter((c) => c !== word)
    .map((c, i) => ({ c, i, d: editDistance(w, c.toLowerCase()) - (c.toLowerCase().includes(w) || w.includes(c.toLowerCase()) ? 0.5 : 0) }))
    .sort((a, b) => a.d - b.d || a.i - b.i)
    .slice(0, n)
    .map((x) => x.c);
}
