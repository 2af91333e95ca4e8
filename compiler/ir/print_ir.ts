/**
 * print_ir: a readable text dump of Programs (for `mpsc check --ir` and debugging).
 *
 * Consumes: a Program (with its memory plan), or a CheckedModel for the helpers
 *           used by `mpsc check` (`formatProgramsForCheck`, `plannedPeakBytes`),
 *           which build the ProgramSet at the spec's batch size.
 * Produces: text. One line per node:
 *   %12 = conv2d(%3, %conv1.weight, %conv1.bias) {stride=[1,1], ...} : f32[64,32,28,28]  # conv1.out @4096 (conv1)
 *   persistent values and inputs print by name (%fc1.weight), others by id (%12);
 *   absent optional inputs print as `-`; `@N` is the arena offset; then the
 *   persistent values, the outputs and the memory plan summary. `mpsc check --ir`
 *   prints the programs fused for one backend (fuse.ts; the fusion attrs such as
 *   `epilogue=relu`, `relu_grad=true` show in the node's attrs) and planned after that.
 * Invariants: pure function of its input; never mutates it.
 */
import { UserError } from '../errors.js';
import type { CheckedModel } from '../model.js';
import { PROGRAM_NAMES, isPersistent, programsOf, valueBytes, type AttrValue, type Program, type ProgramName, type ProgramSet, type Value } from './graph.js';
import { type FusionCaps, NO_FUSIONS } from './fuse.js';
import { buildPrograms } from './programs.js';

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 * 1024 * 1024) return `${(n / (1024 * 1024)).toFixed(2)} MiB`;
  return `${(n / (1024 * 1024 * 1024)).toFixed(2)} GiB`;
}

function ref(v: Value): string {
  return isPersistent(v) || v.kind === 'input' ? `%${v.name}` : `%${v.id}`;
}

function typeOf(v: Value): string {
  return `${v.dtype}[${v.shape.join(',')}]`;
}

function attrText(a: AttrValue): string {
  if (Array.isArray(a)) return `[${a.join(',')}]`;
  if (typeof a === 'string') return a;
  return String(a);
}

export function printProgram(p: Program): string {
  const { values, nodes } = p.graph;
  const lines: string[] = [];
  lines.push(`program ${p.name} (batch ${p.batch}): ${nodes.length} nodes, ${values.length} values`);
  lines.push(`  inputs: ${p.inputs.map((id) => `${ref(values[id])} : ${typeOf(values[id])}`).join(', ') || '(none)'}`);
  lines.push(`  outputs: ${p.outputs.map((o) => `${o.name} = ${ref(values[o.value])}`).join(', ') || '(none)'}`);
  const persistent = values.filter(isPersistent);
  if (persistent.length > 0) {
    lines.push('  persistent:');
    for (const v of persistent) lines.push(`    ${v.kind.padEnd(8)} ${v.name} : ${typeOf(v)}`);
  }
  lines.push('  nodes:');
  for (const n of nodes) {
    const outs = n.outputs.map((id) => ref(values[id]));
    const args = n.inputs.map((id) => (id < 0 ? '-' : ref(values[id]))).join(', ');
    const attrs = Object.entries(n.attrs);
    const attrStr = attrs.length > 0 ? ` {${attrs.map(([k, a]) => `${k}=${attrText(a)}`).join(', ')}}` : '';
    const types = n.outputs.map((id) => typeOf(values[id])).join(', ');
    const names = n.outputs
      .map((id) => {
        const off = p.plan?.offsets[id] ?? -1;
        return `${values[id].name}${off >= 0 ? ` @${off}` : ''}`;
      })
      .join(', ');
    const head = outs.length > 0 ? `${outs.join(', ')} = ` : '';
    const tail = outs.length > 0 ? ` : ${types}  # ${names}` : '';
    lines.push(`    ${head}${n.op}(${args})${attrStr}${tail}${n.path ? ` (${n.path})` : ''}`);
  }
  if (p.plan) {
    const pl = p.plan;
    const arenaValues = values.filter((v) => (pl.offsets[v.id] ?? -1) >= 0);
    const unplanned = arenaValues.reduce((s, v) => s + valueBytes(v), 0);
    lines.push(
      `  memory: arena ${formatBytes(pl.arenaBytes)} (${arenaValues.length} values, ${formatBytes(unplanned)} without reuse), ` +
        `persistent ${formatBytes(pl.persistentBytes)}, inputs ${formatBytes(pl.inputBytes)}, peak ${formatBytes(pl.peakBytes)} (${pl.peakBytes} bytes)`,
    );
  }
  return lines.join('\n');
}

/**
 * Peak device bytes planned for the model at its batch size: every persistent tensor
 * once (programs share them by name) + the largest (arena + input batch) of any program.
 */
export function plannedPeakBytesOf(set: ProgramSet): number {
  const persistent = new Map<string, number>();
  let transient = 0;
  for (const p of programsOf(set)) {
    for (const v of p.graph.values) if (isPersistent(v)) persistent.set(v.name, valueBytes(v));
    if (p.plan) transient = Math.max(transient, p.plan.arenaBytes + p.plan.inputBytes);
  }
  let total = transient;
  for (const b of persistent.values()) total += b;
  return total;
}

/** `fusions`: as the backend with that capability set runs the programs (default: unfused) */
export function plannedPeakBytes(model: CheckedModel, fusions: FusionCaps = NO_FUSIONS): number {
  return plannedPeakBytesOf(buildPrograms(model, { batch: model.train.batch, fusions }));
}

/**
 * Text for `mpsc check --ir [program]`: `which` is a program name (PROGRAM_NAMES:
 * train_step, apply_update, eval, eval_tail) or 'all'. Programs are built at the spec's batch
 * size, fused with `fusions` (the capability set of the backend named `device`) and planned after that.
 */
export function formatProgramsForCheck(model: CheckedModel, which: string, fusions: FusionCaps = NO_FUSIONS, device = 'reference'): string {
  const set = buildPrograms(model, { batch: model.train.batch, fusions });
  const head = `# programs as the ${device} backend runs them (fused by compiler/ir/fuse.ts, then memory-planned)\n`;
  if (which === 'all') return head + programsOf(set).map(printProgram).join('\n\n') + `\nplanned peak: ${formatBytes(plannedPeakBytesOf(set))}\n`;
  if (!(PROGRAM_NAMES as readonly string[]).includes(which)) {
    throw new UserError(`error: unknown program '${which}' for --ir; use one of: ${PROGRAM_NAMES.join(', ')}, all`);
  }
  const p = set[which as ProgramName];
  if (!p) {
    const why = which === 'apply_update' ? ' (it exists only when train.grad_accum > 1)' : ' (it exists only when the test split does not divide by the batch)';
    throw new UserError(`error: model '${model.name}' has no '${which}' program${why}; use one of: ${programsOf(set).map((q) => q.name).join(', ')}, all`);
  }
  return head + printProgram(p) + '\n';
}
