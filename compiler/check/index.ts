/**
 * The front end: `.model` text -> CheckedModel. Phases: parse (compiler/parser),
 * expand_blocks, shapes, settings, lower. Every phase adds to one diagnostic list;
 * any error throws a UserError carrying all of them.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import * as nodePath from 'node:path';
import { UserError } from '../errors.js';
import { textProblem } from '../utf8.js';
import type { CheckedModel } from '../model.js';
import { errorAt, formatDiagnostic, throwIfErrors, suggestion, type Diagnostic } from '../diagnostics.js';
import { parseSource } from '../parser/parse.js';
import { expand } from './expand_blocks.js';
import { inferShapes } from './shapes.js';
import { lower } from './lower.js';
import { checkOptimizer, checkSchedule, checkTrain } from './settings.js';
import { applyOverrides, formatWithOverrides, type Override } from './overrides.js';

function dedupe(diags: Diagnostic[]): Diagnostic[] {
  const seen = new Set<string>();
  return diags.filter((d) => {
    const k = `${d.loc.line}:${d.loc.col}:${d.message}`;
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}

export interface CheckResult {
  model: CheckedModel;
  /** formatted warnings (values computed but never used, data files that do not exist) */
  warnings: string[];
  /** the same warnings as Diagnostics (for --json) */
  warningDiagnostics: Diagnostic[];
}

export function checkSource(text: string, file: string): CheckedModel {
  return checkSourceWithWarnings(text, file).model;
}

export function checkFile(path: string, overrides: Override[] = []): CheckedModel {
  return checkSourceWithWarnings(readSpec(path), path, overrides).model;
}

export function checkFileWithWarnings(path: string, overrides: Override[] = []): CheckResult {
  return checkSourceWithWarnings(readSpec(path), path, overrides);
}

/** `overrides` (--set, --lr) replace settings of the parsed spec before they are checked (overrides.ts). */
export function checkSourceWithWarnings(text: string, file: string, overrides: Override[] = []): CheckResult {
  const parsed = parseSource(text, file);
  const diags = parsed.diagnostics;
  throwIfErrors(diags, text);
  const ast = overrides.length ? applyOverrides(parsed.ast, overrides, diags) : parsed.ast;
  const failOnErrors = (ds: Diagnostic[], src: string) => {
    if (overrides.length && ds.some((d) => d.severity === 'error')) throw new UserError(formatWithOverrides(ds.filter((d) => d.severity === 'error'), src, overrides));
    throwIfErrors(ds, src);
  };

  for (const m of ast.model.slice(1)) diags.push(errorAt(m.loc, "duplicate 'model' line"));
  const name = ast.model[0]?.value.name ?? nodePath.basename(file).replace(/\.model$/, '');

  const x = expand(ast, diags);
  const optimizer = checkOptimizer(ast, diags);
  const schedule = checkSchedule(ast, diags);
  const metricInfo = x ? x.layers.filter((l) => l.role === 'metric').map((l) => ({ name: l.path, type: l.type })) : [];
  const train = x ? checkTrain(ast, nodePath.dirname(nodePath.resolve(file)), x.inputs, diags, x.inputErrors, metricInfo) : null;
  // shapes are checked even when a setting is wrong, so one run reports both kinds of error
  const inf = x ? inferShapes(x, diags) : null;
  if (x === null || inf === null || optimizer === null || schedule === null || train === null) {
    failOnErrors(dedupe(diags), text);
    throw new Error('internal: checking failed without a diagnostic');
  }
  if (!diags.some((d) => d.severity === 'error')) {
    const read = new Set<number>();
    for (const l of x.layers) for (const i of l.inputs) read.add(i);
    x.inputs.forEach((inp, i) => {
      if (!read.has(i)) diags.push(errorAt(inp.loc, `input '${inp.name}' is never used`, 'use it in the network, the loss or a metric, or remove it'));
    });
  }
  failOnErrors(dedupe(diags), text);
  const low = lower(x, inf);

  const read = new Set<number>();
  for (const l of x.layers) for (const i of l.inputs) read.add(i);
  const warnings: Diagnostic[] = diags.filter((d) => d.severity === 'warning');
  for (const a of x.assigned) {
    if (!read.has(a.id)) warnings.push({ severity: 'warning', loc: a.loc, message: `value '${a.name}' is never used`, hint: 'use it in the loss or a metric, or remove it (its layers still run)' });
  }

  let numClasses: number | null = null;
  const heads = [...(low.loss ? [low.loss.value] : []), ...low.metrics.map((m) => m.value)];
  for (const h of heads) {
    const node = low.graph.nodes.find((n) => n.outputs[0] === h)!;
    if (['cross_entropy', 'nll', 'accuracy', 'top_k'].includes(node.op)) {
      const s = low.graph.values[node.inputs[0]].shape;
      numClasses = s[s.length - 1];
    }
  }

  const model: CheckedModel = {
    name,
    file,
    sourceHash: createHash('sha256').update(text).digest('hex'),
    graph: low.graph,
    inputs: low.inputs,
    params: low.params,
    layers: low.layers,
    loss: low.loss,
    metrics: low.metrics,
    optimizer,
    schedule,
    train,
    numClasses,
    names: x.assigned.map((a) => ({ name: a.name, value: low.valueIds[a.id] })),
  };
  const shown = dedupe(warnings);
  return { model, warnings: shown.map((w) => formatDiagnostic(w, text)), warningDiagnostics: shown };
}

/** Read a spec file; a missing or unreadable file is a UserError. */
function readSpec(path: string): string {
  try {
    if (statSync(path).isDirectory()) throw new UserError(`${path}: is a folder, not a .model file`);
    const bytes = readFileSync(path);
    const bad = textProblem(bytes);
    if (bad) {
      throw new UserError(
        `${path}:${bad.line}:${bad.col}: error: this is not a .model spec: ${bad.what} (byte offset ${bad.offset}); a spec is UTF-8 text\n` +
          `  help: give the .model file (a binary or data file cannot be a spec); a spec saved in another encoding must be converted to UTF-8`,
      );
    }
    return bytes.toString('utf8');
  } catch (e) {
    if (e instanceof UserError) throw e;
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') {
      const hint = suggestion(nodePath.basename(path), listModels(nodePath.dirname(path)));
      throw new UserError(`${path}: no such file${hint ? `\n  hint: ${hint}` : ''}`);
    }
    throw new UserError(`${path}: cannot read the file (${code ?? (e as Error).message})`);
  }
}

function listModels(dir: string): string[] {
  try {
    return readdirSync(dir).filter((f) => f.endsWith('.model'));
  } catch {
    return [];
  }
}
