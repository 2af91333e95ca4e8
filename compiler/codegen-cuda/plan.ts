/**
 * plan: the host-side plan of the CUDA backend, as plain data. Consumes the programs of a model
 * lowered in the CUDA dialect (codegen-metal/lower_program.ts with compiler/codegen-cuda's
 * dialect) and their dispatch plans (codegen-metal/dispatch_plan.ts: bindings by region, slot and
 * byte offset); produces
 *  - the ONE device allocation (one cudaMalloc) laid out by the static memory plan: the persistent
 *    block (parameters, gradients accumulators, optimizer state, running statistics: the same table
 *    and offsets as the host block of mpsc_model.h), the arena (max over programs of the memory
 *    plan's arena: activations, gradients, outputs), each program's input batch, the step-scalar
 *    slot (struct StepParams: lr, t, seed, counter);
 *  - per program, the pinned host staging set (inputs, scalars, outputs; the runtime keeps two
 *    sets so the host fills one while the GPU reads the other) and the CUDA graph's node list in
 *    order: input and scalar copies host -> device, every kernel launch with its argument byte
 *    offsets in the device allocation, the output copies device -> host.
 * Relies on: every kernel binding has a home (dispatch_plan.ts checks), kernels run in stream
 * order (a graph captured from one stream is a chain, so the plan's barriers are implied).
 */
import { hostDType, type Program } from '../ir/graph.js';
import type { KernelSpec } from '../kernels/kernel_types.js';
import type { DispatchPlan, PlanBinding } from '../codegen-metal/dispatch_plan.js';
import type { LoweredProgram } from '../codegen-metal/lower_program.js';
import type { PersistentTable } from '../codegen-metal/layout.js';

/** alignment of every region of the device allocation and of the staging sets (bytes) */
export const CUDA_ALIGN = 256;
/** sizeof(StepParams): float lr, int t, uint seed, uint counter */
export const SCALAR_BYTES = 16;

const align = (n: number, a = CUDA_ALIGN) => Math.ceil(n / a) * a;

export interface DeviceRegion { offset: number; bytes: number }

export interface KernelArgPlan {
  /** parameter name in the kernel */
  name: string;
  type: 'float' | 'int';
  access: 'r' | 'w' | 'rw';
  /** byte offset of the bound tensor in the device allocation */
  offset: number;
  bytes: number;
  /** the value's name (for messages) */
  value: string;
}

/** One node of a program's CUDA graph, in stream order. */
export type GraphNodePlan =
  | { kind: 'h2d'; what: string; hostOffset: number; deviceOffset: number; bytes: number }
  | { kind: 'kernel'; kernel: string; node: number; op: string; grid: [number, number, number]; block: [number, number, number];
    /** the tensor-core (3xTF32) variant with its block shape, when the kernel has one */
    mma?: { kernel: string; block: [number, number, number] };
    args: KernelArgPlan[] }
  | { kind: 'd2h'; what: string; hostOffset: number; deviceOffset: number; bytes: number };

export interface ProgramPlan {
  name: string;
  batch: number;
  inputs: { name: string; dtype: 'f32' | 'i32'; shape: number[]; bytes: number; deviceOffset: number; hostOffset: number }[];
  outputs: { name: string; deviceOffset: number; hostOffset: number }[];
  /** bytes of one pinned staging set: inputs, then the scalars, then one float per output */
  stagingBytes: number;
  scalarsHostOffset: number;
  nodes: GraphNodePlan[];
  /** number of kernel launches (the model ABI's n_kernels) */
  kernels: number;
  arenaBytes: number;
}

export interface CudaPlan {
  model: string;
  /** the one device allocation */
  deviceBytes: number;
  persistent: DeviceRegion;
  arena: DeviceRegion;
  scalars: DeviceRegion;
  /** each program's input batch region (one per program, in `programs` order) */
  inputs: DeviceRegion[];
  programs: ProgramPlan[];
}

function argsOf(k: KernelSpec, bindings: PlanBinding[], base: (b: PlanBinding) => number): KernelArgPlan[] {
  return k.args.map((a, i) => {
    const b = bindings[i];
    if (!b || b.value !== a.value) throw new Error(`internal: kernel ${k.name}: binding ${i} does not match argument '${a.name}'`);
    return { name: a.name, type: a.type, access: a.access, offset: base(b) + b.offset, bytes: b.bytes, value: b.name };
  });
}

/** The device layout and graph node lists of a model's programs (lowered in the CUDA dialect). */
export function planCuda(model: string, table: PersistentTable, lowered: { lp: LoweredProgram; plan: DispatchPlan }[]): CudaPlan {
  let off = 0;
  const take = (bytes: number): DeviceRegion => {
    const r = { offset: off, bytes };
    off = align(off + Math.max(bytes, 1));
    return r;
  };
  const persistent = take(table.bytes);
  const arena = take(Math.max(0, ...lowered.map((l) => l.plan.arenaBytes)));
  const scalars = take(SCALAR_BYTES);
  const inputs: DeviceRegion[] = [];
  const programs: ProgramPlan[] = lowered.map(({ lp, plan }) => {
    const p: Program = lp.program;
    if (plan.steps.some((s) => s.kind === 'cpu'))
      throw new Error(`internal: program ${p.name} has a CPU fallback step; the CUDA backend lowers every op`);
    // input batch: one device region per program, each input 256-aligned inside it
    let inBytes = 0;
    const inLocal = plan.inputs.map((i) => {
      const o = inBytes;
      inBytes = align(inBytes + i.bytes);
      return o;
    });
    const region = take(inBytes);
    inputs.push(region);
    let host = 0;
    const ins = plan.inputs.map((i, k) => {
      const v = p.graph.values[i.value];
      const hostOffset = host;
      host = align(host + i.bytes, 16);
      return { name: i.name, dtype: hostDType(v), shape: v.shape, bytes: i.bytes, deviceOffset: region.offset + inLocal[k], hostOffset };
    });
    const scalarsHostOffset = host;
    host += SCALAR_BYTES;
    const outs = plan.outputs.map((o) => {
      const hostOffset = host;
      host += 4;
      return { name: o.name, deviceOffset: arena.offset + o.offset, hostOffset };
    });
    const base = (b: PlanBinding) =>
      b.region === 'arena' ? arena.offset : b.region === 'persistent' ? persistent.offset : ins[b.slot].deviceOffset;
    const byName = new Map(lp.kernels.map((k) => [k.name, k]));
    const nodes: GraphNodePlan[] = [];
    for (const i of ins) nodes.push({ kind: 'h2d', what: `input ${i.name}`, hostOffset: i.hostOffset, deviceOffset: i.deviceOffset, bytes: i.bytes });
    nodes.push({ kind: 'h2d', what: 'step scalars', hostOffset: scalarsHostOffset, deviceOffset: scalars.offset, bytes: SCALAR_BYTES });
    let kernels = 0;
    for (const s of plan.steps) {
      if (s.kind !== 'kernel') continue;
      const k = byName.get(s.kernel)!;
      kernels++;
      nodes.push({
        kind: 'kernel', kernel: k.name, node: k.node, op: k.op, grid: k.groups, block: k.tgsize,
        ...(k.mma ? { mma: { kernel: k.mma.name, block: k.mma.tgsize } } : {}),
        args: argsOf(k, s.bindings, base),
      });
    }
    for (const o of outs) nodes.push({ kind: 'd2h', what: `output ${o.name}`, hostOffset: o.hostOffset, deviceOffset: o.deviceOffset, bytes: 4 });
    return {
      name: p.name, batch: p.batch, inputs: ins, outputs: outs, stagingBytes: align(host, 64), scalarsHostOffset, nodes, kernels,
      arenaBytes: plan.arenaBytes,
    };
  });
  return { model, deviceBytes: align(off), persistent, arena, scalars, inputs, programs };
}

/** Problems of a plan (empty when sound): regions overlap or leave the allocation, an argument leaves its region. */
export function planProblems(plan: CudaPlan): string[] {
  const bad: string[] = [];
  const regions = [
    { name: 'persistent', ...plan.persistent }, { name: 'arena', ...plan.arena }, { name: 'scalars', ...plan.scalars },
    ...plan.inputs.map((r, i) => ({ name: `inputs of ${plan.programs[i].name}`, ...r })),
  ];
  for (const r of regions) {
    if (r.offset % CUDA_ALIGN) bad.push(`${r.name} is not ${CUDA_ALIGN}-byte aligned`);
    if (r.offset + r.bytes > plan.deviceBytes) bad.push(`${r.name} ends after the allocation`);
  }
  for (let i = 0; i < regions.length; i++)
    for (let j = i + 1; j < regions.length; j++) {
      const a = regions[i], b = regions[j];
      if (a.bytes && b.bytes && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes) bad.push(`${a.name} overlaps ${b.name}`);
    }
  const inside = (o: number, n: number) => regions.some((r) => o >= r.offset && o + n <= r.offset + r.bytes);
  for (const p of plan.programs)
    for (const n of p.nodes) {
      if (n.kind === 'kernel') {
        for (const a of n.args) if (!inside(a.offset, a.bytes)) bad.push(`${p.name}.${n.kernel}: argument ${a.name} (${a.value}) leaves its region`);
      } else {
        if (!inside(n.deviceOffset, n.bytes)) bad.push(`${p.name}: copy of ${n.what} leaves its region`);
        if (n.hostOffset + n.bytes > p.stagingBytes) bad.push(`${p.name}: copy of ${n.what} leaves the staging set`);
      }
    }
  return bad;
}
