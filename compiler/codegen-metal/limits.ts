/**
 * limits: Metal's per-kernel limits, checked when the plan is built (not when a Mac runs it):
 * at most 31 buffer bindings (the params struct takes one more index, 31 in all for buffers
 * 0..30), at most 32 KiB of threadgroup memory, at most 1024 threads per threadgroup.
 */
import { UserError } from '../errors.js';
import type { Program } from '../ir/graph.js';
import type { DispatchPlan } from './dispatch_plan.js';

export const MAX_BUFFERS = 31;
export const MAX_TG_MEMORY = 32 * 1024;
export const MAX_TG_THREADS = 1024;

export function checkLimits(plan: DispatchPlan, p: Program): void {
  const problems: string[] = [];
  for (const s of plan.steps) {
    if (s.kind !== 'kernel') continue;
    const n = p.graph.nodes[s.node];
    const at = `${n.loc ? `${n.loc.file}:${n.loc.line}:${n.loc.col}: ` : ''}node ${n.id} (${n.op}${n.path ? ` in layer '${n.path}'` : ''})`;
    const nbuf = s.bindings.length + 1;
    if (nbuf > MAX_BUFFERS)
      problems.push(`${at}: kernel ${s.kernel} needs ${nbuf} buffer bindings (${s.bindings.length} tensors + step params); Metal allows ${MAX_BUFFERS}.\n  fix: split the layer (e.g. fewer inputs to one concat), or build with --target cpu`);
    for (const [name, tg, mem] of [[s.kernel, s.threadgroup, s.threadgroupMemory], ...(s.mma ? [[s.mma.kernel, s.mma.threadgroup, s.mma.threadgroupMemory]] : [])] as [string, number[], number][]) {
      const threads = tg[0] * tg[1] * tg[2];
      if (threads > MAX_TG_THREADS) problems.push(`${at}: kernel ${name} uses ${threads} threads per threadgroup; Metal allows ${MAX_TG_THREADS}`);
      if (mem > MAX_TG_MEMORY) problems.push(`${at}: kernel ${name} uses ${mem} bytes of threadgroup memory; Metal allows ${MAX_TG_MEMORY}`);
    }
  }
  if (problems.length) throw new UserError(`error: the Metal program '${plan.program}' exceeds Metal's limits:\n${problems.join('\n')}`);
}
