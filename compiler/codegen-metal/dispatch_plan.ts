/**
 * dispatch_plan: the host side of one program as plain JSON: per launch the kernel, its
 * buffer bindings (region + byte offset + size), threadgroups per grid, threads per
 * threadgroup, threadgroup memory, and whether a memory barrier must precede it; CPU
 * fallback steps end the current command buffer. The bridge (macOS) and the emulator both
 * execute exactly this plan.
 *
 * Barriers: launches run in one concurrent compute encoder; a launch gets `barrier: true`
 * when it reads a byte range written since the last barrier, or writes a range read or
 * written since then (RAW, WAR and WAW hazards). The emulator runs each barrier-free
 * segment in reverse order, so a missing barrier changes results.
 */
import type { Program } from '../ir/graph.js';
import { OPS, isOpName } from '../ir/ops.js';
import type { KernelSpec } from '../kernels/kernel_types.js';
import type { LoweredProgram } from './lower_program.js';
import type { PersistentTable, ProgramLayout } from './layout.js';

export interface PlanBinding {
  index: number;           // [[buffer(index)]]
  value: number;           // IR value id
  name: string;            // value name (JSON-escaped by JSON.stringify)
  region: 'arena' | 'persistent' | 'input';
  slot: number;            // persistent tensor index / program input index / -1 for the arena
  offset: number;          // byte offset within the region's buffer
  bytes: number;
  access: 'r' | 'w' | 'rw';
}

export interface PlanLaunch {
  kind: 'kernel';
  kernel: string;
  node: number;
  op: string;
  groups: [number, number, number];
  threadgroup: [number, number, number];
  threadgroupMemory: number;
  /** uses barriers / SIMD-group functions */
  sync: boolean;
  barrier: boolean;
  paramsIndex: number;
  bindings: PlanBinding[];
  mma?: { kernel: string; threadgroup: [number, number, number]; threadgroupMemory: number };
}

export interface PlanFallback {
  kind: 'cpu';
  node: number;
  op: string;
  reason: string;
  bindings: PlanBinding[];
}

export interface DispatchPlan {
  format: 'mpsc-metal-plan/1';
  model: string;
  program: string;
  batch: number;
  library: string;
  arenaBytes: number;
  persistentBytes: number;
  inputs: { name: string; value: number; dtype: string; bytes: number }[];
  outputs: { name: string; value: number; offset: number }[];
  steps: (PlanLaunch | PlanFallback)[];
}

function bindingsFor(p: Program, layout: ProgramLayout, ids: { value: number; access: 'r' | 'w' | 'rw' }[]): PlanBinding[] {
  return ids.map((a, index) => {
    const h = layout.homes[a.value];
    const v = p.graph.values[a.value];
    if (!h) throw new Error(`internal: value ${a.value} '${v?.name}' of program ${p.name} has no memory (missing from the memory plan)`);
    return { index, value: a.value, name: v.name, region: h.region, slot: h.index, offset: h.offset, bytes: h.bytes, access: a.access };
  });
}

function fallbackBindings(p: Program, layout: ProgramLayout, node: number): PlanBinding[] {
  // the node's present inputs, then its outputs (cpu_fallback.ts fallbackValues)
  const n = p.graph.nodes[node];
  const mutates = (isOpName(n.op) ? OPS[n.op].mutates : undefined) ?? [];
  const ids: { value: number; access: 'r' | 'w' | 'rw' }[] = [];
  n.inputs.forEach((v, k) => { if (v >= 0) ids.push({ value: v, access: mutates.includes(k) ? 'rw' : 'r' }); });
  n.outputs.forEach((v) => ids.push({ value: v, access: 'w' }));
  return bindingsFor(p, layout, ids);
}

type Range = { key: string; lo: number; hi: number };

const rangeOf = (b: PlanBinding): Range => ({ key: b.region === 'arena' ? 'arena' : `${b.region}:${b.slot}`, lo: b.offset, hi: b.offset + b.bytes });
const overlaps = (a: Range, list: Range[]) => list.some((b) => b.key === a.key && a.lo < b.hi && b.lo < a.hi);

export function buildPlan(lp: LoweredProgram, layout: ProgramLayout, table: PersistentTable, model: string): DispatchPlan {
  const p = lp.program;
  const steps: (PlanLaunch | PlanFallback)[] = [];
  let written: Range[] = [], read: Range[] = [];
  for (const s of lp.steps) {
    if (s.kind === 'cpu') {
      steps.push({ kind: 'cpu', node: s.node, op: s.op, reason: s.reason, bindings: fallbackBindings(p, layout, s.node) });
      written = []; read = []; // the command buffer ends and completes before the CPU step
      continue;
    }
    const k: KernelSpec = s.kernel;
    const bindings = bindingsFor(p, layout, k.args);
    const rs = bindings.filter((b) => b.access !== 'w').map(rangeOf);
    const ws = bindings.filter((b) => b.access !== 'r').map(rangeOf);
    const barrier = rs.some((r) => overlaps(r, written)) || ws.some((w) => overlaps(w, written) || overlaps(w, read));
    if (barrier) { written = []; read = []; }
    written.push(...ws);
    read.push(...rs);
    const launch: PlanLaunch = {
      kind: 'kernel', kernel: k.name, node: k.node, op: k.op, groups: k.groups, threadgroup: k.tgsize,
      threadgroupMemory: k.tgmem, sync: k.sync, barrier, paramsIndex: k.args.length, bindings,
    };
    if (k.mma) launch.mma = { kernel: k.mma.name, threadgroup: k.mma.tgsize, threadgroupMemory: k.mma.tgmem };
    steps.push(launch);
  }
  return {
    format: 'mpsc-metal-plan/1',
    model,
    program: p.name,
    batch: p.batch,
    library: `${p.name}.metal`,
    arenaBytes: layout.arenaBytes,
    persistentBytes: table.bytes,
    inputs: p.inputs.map((id) => ({ name: p.graph.values[id].name, value: id, dtype: p.graph.values[id].dtype, bytes: layout.homes[id]!.bytes })),
    outputs: p.outputs.map((o) => {
      const h = layout.homes[o.value];
      if (!h || h.region !== 'arena') throw new Error(`internal: output '${o.name}' of program ${p.name} is not in the arena`);
      return { name: o.name, value: o.value, offset: h.offset };
    }),
    steps,
  };
}
