/**
 * Command-line overrides of spec settings: `--set key=value` (and `--lr X`, which is
 * `--set optimizer.lr=X`), applied to the parsed AST before the settings are checked.
 *
 * Consumes: the spec's ModelFile AST and the override arguments. Produces: the same AST with
 * the train / optimizer / schedule / data entries replaced or added (a new AST; the input is
 * not mutated), plus diagnostics for keys that name no section. Every other check (unknown key
 * with "did you mean", type, range) is the spec's own, in settings.ts, because the value is an
 * expression parsed by the spec's parser whose source positions point into the argument
 * (file `--set`, line 1), so errors show the argument with a caret.
 *
 * Keys: `train.<key>`, `train.early_stop.<key>`, `optimizer` / `optimizer.<arg>`,
 * `schedule` / `schedule.<arg>`, `data` / `data.<arg>` (the train section's data source).
 * Values are spec expressions (`3e-4`, `true`, `[100, 200]`, `cosine(t_max: 500)`); anything
 * that does not start like one (`runs/x.csv`, `val_accuracy`) is taken as a string. Relative
 * data paths given here (data.train, data.test, data.dir, data.file, and those arguments of a
 * whole `data=<call>`) resolve against the current folder.
 */
import * as nodePath from 'node:path';
import type * as A from '../parser/ast.js';
import { parseSource } from '../parser/parse.js';
import { errorAt, formatDiagnostics, suggestion, type Diagnostic } from '../diagnostics.js';
import { UserError } from '../errors.js';
import type { ArgSpec } from './args.js';
import { DATA_SOURCES, OPTIMIZERS, SCHEDULES, TRAIN_KEYS } from './settings.js';

export interface Override {
  /** `optimizer.lr` */
  key: string;
  /** the value text */
  value: string;
  /** the command-line text shown in messages (`optimizer.lr=3e-4`) and the flag (`--set`) */
  source: string;
  flag: string;
  /** the file name its diagnostics carry: `<--set optimizer.lr=3e-4>` */
  file: string;
  /** 1-based columns of the key and the value in `source` */
  keyCol: number;
  valueCol: number;
}

export const SECTIONS = ['train', 'optimizer', 'schedule', 'data'] as const;

/** `--set KEY=VALUE` text -> Override (a missing '=' is a UserError). */
export function parseSetArg(text: string, flag = '--set'): Override {
  const eq = text.indexOf('=');
  if (eq <= 0 || /[\r\n]/.test(text)) {
    throw new UserError(`error: ${flag} '${text}': expected KEY=VALUE\n  help: e.g. ${flag} optimizer.lr=3e-4 or ${flag} train.batch=128`);
  }
  return { key: text.slice(0, eq).trim(), value: text.slice(eq + 1).trim(), source: text, flag, file: `<${flag} ${text}>`, keyCol: 1, valueCol: eq + 2 };
}

/** `--lr X` -> the optimizer.lr override (shown as the value alone). */
export function lrOverride(value: string): Override {
  return { key: 'optimizer.lr', value, source: value, flag: '--lr', file: `<--lr ${value}>`, keyCol: 1, valueCol: 1 };
}

/** `--precision P` -> the train.precision override (the value is the spec's string `"P"`, so it is checked as spec text). */
export function precisionOverride(value: string): Override {
  const text = JSON.stringify(value);
  return { key: 'train.precision', value: text, source: text, flag: '--precision', file: `<--precision ${value}>`, keyCol: 1, valueCol: 1 };
}

/** the text form recorded in config.json */
export function overrideText(o: Override): string {
  return `${o.key}=${o.value}`;
}

const EXPR_START = /^(-?[0-9.]|"|\[|\{|true$|false$|[A-Za-z_][A-Za-z0-9_]*\s*\()/;

function shiftLoc(loc: A.Loc, file: string, by: number, max: number): A.Loc {
  const col = Math.min(Math.max(1, loc.col + by), max);
  const out: A.Loc = { file, line: 1, col };
  if (loc.endCol !== undefined) out.endCol = Math.min(Math.max(col, loc.endCol + by), max);
  if (loc.endLine !== undefined) out.endLine = 1;
  return out;
}

/** every loc of a parsed expression moved from the snippet into the argument's columns */
function relocate<T>(node: T, file: string, by: number, max: number): T {
  if (Array.isArray(node)) return node.map((x) => relocate(x, file, by, max)) as T;
  if (node === null || typeof node !== 'object') return node;
  const o = node as Record<string, unknown>;
  if (typeof o.line === 'number' && typeof o.col === 'number' && typeof o.file === 'string') return shiftLoc(o as unknown as A.Loc, file, by, max) as T;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) out[k] = relocate(v, file, by, max);
  return out as T;
}

/** The value as an expression located in the argument text, or null (diagnostics added). */
function parseValue(o: Override, diags: Diagnostic[]): A.Expr | null {
  const max = o.source.length + 1;
  const at = (col: number, len: number): A.Loc => ({ file: o.file, line: 1, col, endLine: 1, endCol: Math.max(col, col + len - 1) });
  if (o.value === '') {
    diags.push(errorAt(at(o.valueCol, 1), `${o.flag} ${o.key}: the value is empty`));
    return null;
  }
  if (!EXPR_START.test(o.value)) return { kind: 'str', value: o.value, loc: at(o.valueCol, o.value.length) };
  const prefix = 'train { __v: ';
  const snippet = `${prefix}${o.value} }`;
  const by = o.valueCol - (prefix.length + 1);
  const { ast, diagnostics } = parseSource(snippet, o.file);
  if (diagnostics.length) {
    for (const d of diagnostics) diags.push({ ...d, loc: shiftLoc(d.loc, o.file, by, max) });
    return null;
  }
  const entry = ast.train[0]?.value.entries[0];
  if (!entry || ast.train[0].value.entries.length !== 1) {
    diags.push(errorAt(at(o.valueCol, o.value.length), `${o.flag} ${o.key}: expected one value`));
    return null;
  }
  return relocate(entry.value, o.file, by, max);
}

function ident(name: string, loc: A.Loc): A.Ident {
  return { name, loc };
}

/** the arguments a value can be given by position (in this order) */
function positionalArgs(specs: ArgSpec[] | undefined): ArgSpec[] {
  return (specs ?? []).filter((s) => s.type !== 'init' && s.type !== 'strmap' && s.type !== 'call' && s.type !== 'map');
}

/** the data source arguments that are file or folder paths */
const DATA_PATH_ARGS = ['train', 'test', 'dir', 'file'];

/** a path given on the command line is relative to the current folder (the spec's own paths to the spec's folder) */
function cwdPath(v: A.Expr): A.Expr {
  return v.kind === 'str' ? { ...v, value: nodePath.resolve(v.value) } : v;
}

/** `--set data=<call>`: its path arguments, named or positional, resolved against the current folder */
function cwdDataPaths(value: A.Expr): A.Expr {
  if (value.kind !== 'call') return value;
  const positional = positionalArgs(DATA_SOURCES[value.callee.name]?.args);
  let i = 0;
  const args = value.args.map((a) => {
    const name = a.name ? a.name.name : positional[i++]?.name;
    return name !== undefined && DATA_PATH_ARGS.includes(name) ? { ...a, value: cwdPath(a.value) } : a;
  });
  return { ...value, args };
}

/** set a named argument of a call (replacing a positional one at the same place) */
function setCallArg(call: A.CallExpr, specs: ArgSpec[] | undefined, key: A.Ident, value: A.Expr): A.CallExpr {
  const args = call.args.map((a) => ({ ...a }));
  const positional = positionalArgs(specs);
  const pIdx = positional.findIndex((s) => s.name === key.name);
  const posArgs = args.filter((a) => !a.name);
  if (pIdx >= 0 && pIdx < posArgs.length) {
    posArgs[pIdx].value = value;
    return { ...call, args, hasParens: true };
  }
  const kept = args.filter((a) => a.name?.name !== key.name);
  kept.push({ name: key, value });
  return { ...call, args: kept, hasParens: true };
}

function setMapEntry(map: A.MapExpr, key: A.Ident, value: A.Expr): A.MapExpr {
  const entries = map.entries.filter((e) => e.key.name !== key.name);
  entries.push({ key, value });
  return { ...map, entries };
}

/** which sections have a key of this name (for `--set lr=...` -> "did you mean optimizer.lr") */
function sectionsWithKey(name: string): string[] {
  const out: string[] = [];
  if (TRAIN_KEYS.some((k) => k.name === name)) out.push(`train.${name}`);
  if (Object.values(OPTIMIZERS).some((d) => d.args.some((a) => a.name === name))) out.push(`optimizer.${name}`);
  if (Object.values(SCHEDULES).some((d) => d.args.some((a) => a.name === name))) out.push(`schedule.${name}`);
  if (Object.values(DATA_SOURCES).some((d) => d.args.some((a) => a.name === name))) out.push(`data.${name}`);
  return out;
}

/**
 * Apply the overrides to a copy of the AST. Errors (unknown section, unparsable value) go to
 * `diags` with locations in the argument; the rest is checked with the spec.
 */
export function applyOverrides(ast0: A.ModelFile, overrides: Override[], diags: Diagnostic[]): A.ModelFile {
  const ast: A.ModelFile = { ...ast0, optimizer: [...ast0.optimizer], schedule: [...ast0.schedule], train: [...ast0.train] };
  for (const o of overrides) {
    const parts = o.key.split('.');
    const keyLoc = (i: number): A.Loc => {
      const before = parts.slice(0, i).reduce((n, p) => n + p.length + 1, 0);
      const col = o.keyCol + before;
      return { file: o.file, line: 1, col, endLine: 1, endCol: col + Math.max(1, parts[i].length) - 1 };
    };
    const section = parts[0];
    if (!(SECTIONS as readonly string[]).includes(section)) {
      const elsewhere = parts.length === 1 ? sectionsWithKey(section) : [];
      const hint = elsewhere.length ? `did you mean ${elsewhere.join(' or ')}?` : (suggestion(section, [...SECTIONS]) ?? `keys are <section>.<name> with section ${SECTIONS.join(', ')}`);
      diags.push(errorAt(keyLoc(0), `${o.flag}: unknown setting '${o.key}'`, hint));
      continue;
    }
    const tooDeep = parts.length > (section === 'train' && parts[1] === 'early_stop' ? 3 : 2) || parts.some((p) => p === '');
    if (tooDeep || (section === 'train' && parts.length === 1)) {
      diags.push(errorAt(keyLoc(0), `${o.flag}: '${o.key}' is not a setting`, section === 'train' ? 'use train.<key>, e.g. train.batch=128' : `use ${section}=<call> or ${section}.<argument>`));
      continue;
    }
    const value = parseValue(o, diags);
    if (value === null) continue;
    const trainSec = ast.train[0];
    if (!trainSec && section !== 'optimizer' && section !== 'schedule') {
      diags.push(errorAt(keyLoc(0), `${o.flag}: the spec has no train section to override`));
      continue;
    }
    if (section === 'optimizer' || section === 'schedule') {
      const table = section === 'optimizer' ? OPTIMIZERS : SCHEDULES;
      const list = ast[section];
      if (parts.length === 1) {
        if (value.kind !== 'call') {
          diags.push(errorAt(value.loc, `${o.flag} ${section}: expected a call such as ${section === 'optimizer' ? 'sgd(lr: 0.1)' : 'cosine()'}`));
          continue;
        }
        list[0] = { value, loc: list[0]?.loc ?? value.loc };
        continue;
      }
      const cur: A.CallExpr = list[0]?.value ?? { kind: 'call', callee: ident('constant', keyLoc(0)), args: [], hasParens: true, loc: keyLoc(0) };
      if (!list[0] && section === 'optimizer') {
        diags.push(errorAt(keyLoc(0), `${o.flag}: the spec has no optimizer line`, 'give the whole optimizer: --set optimizer="adam(lr: 1e-3)"'));
        continue;
      }
      list[0] = { value: setCallArg(cur, table[cur.callee.name]?.args, ident(parts[1], keyLoc(1)), value), loc: list[0]?.loc ?? cur.loc };
      continue;
    }
    let map = trainSec.value;
    if (section === 'data') {
      const dataEntry = map.entries.find((e) => e.key.name === 'data');
      if (parts.length === 1) {
        map = setMapEntry(map, dataEntry?.key ?? ident('data', keyLoc(0)), cwdDataPaths(value));
      } else {
        if (!dataEntry || dataEntry.value.kind !== 'call') {
          diags.push(errorAt(keyLoc(0), `${o.flag}: the train section has no data source call to change`, 'give the whole source: --set data="csv(train: \\"x.csv\\")"'));
          continue;
        }
        const v = DATA_PATH_ARGS.includes(parts[1]) ? cwdPath(value) : value;
        map = setMapEntry(map, dataEntry.key, setCallArg(dataEntry.value, DATA_SOURCES[dataEntry.value.callee.name]?.args, ident(parts[1], keyLoc(1)), v));
      }
    } else if (parts.length === 3) {
      const es = map.entries.find((e) => e.key.name === 'early_stop');
      const base: A.MapExpr = es && es.value.kind === 'map' ? es.value : { kind: 'map', entries: [], loc: keyLoc(1) };
      map = setMapEntry(map, es?.key ?? ident('early_stop', keyLoc(1)), setMapEntry(base, ident(parts[2], keyLoc(2)), value));
    } else {
      const key = parts[1];
      map = setMapEntry(map, ident(key, keyLoc(1)), value);
      // steps and epochs exclude each other: the override replaces the spec's choice
      if (key === 'steps' || key === 'epochs') map = { ...map, entries: map.entries.filter((e) => e.key.name !== (key === 'steps' ? 'epochs' : 'steps')) };
    }
    ast.train[0] = { value: map, loc: trainSec.loc };
  }
  return ast;
}

/**
 * Format a diagnostic list whose entries point either into the spec text or into one of the
 * override arguments (each has its own file name): each group against its own text.
 */
export function formatWithOverrides(diags: Diagnostic[], specText: string, overrides: Override[]): string {
  const files = new Set(overrides.map((o) => o.file));
  const groups: string[] = [];
  const spec = diags.filter((d) => !files.has(d.loc.file));
  if (spec.length) groups.push(formatDiagnostics(spec, specText));
  for (const o of overrides) {
    const own = diags.filter((d) => d.loc.file === o.file);
    if (own.length && !groups.includes(formatDiagnostics(own, o.source))) groups.push(formatDiagnostics(own, o.source));
  }
  return groups.join('\n');
}
