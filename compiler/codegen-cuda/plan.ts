/**
 * plan: the host-side plan of the CUDA backend, as plain data. Consumes the programs of a model
 * lowered in the CUDA dialect (codegen-metal/lower_program.ts with compiler/codegen-cuda's
 * dialect) and their dispatch plans (codegen-metal/dispatch_plan.ts: bindings by region, slot and
 * byte offset); produces
 *  - the ONE device allocation (one cudaMalloc) laid out by the static memory plan: the persistent
 *    block (parameters, gradients accumulators, optimizer state, running statistics: the same table
 *    and offsets as the host block of mpsc_model.h), the arena (max over programs of the memory
 *    plan's arena: activations, gradients, outputs), the scratch region of split-K GEMMs and chunked reductions (the
 *    largest KernelSpec.scratch of any kernel, once per lane: the users on one lane run in order and share its
 *    slice; lanes.ts laneScratch says when a program keeps one slice for all), the cuBLASLt workspaces (LT_WORKSPACE_BYTES per lane of the graphs when any GEMM node is a
 *    cuBLASLt call: calls on one lane run in order, calls on two lanes may overlap), and per program its upload region: TWO sets, one per pinned staging set, each the
 *    byte-for-byte image of the staging set's upload part (the input batch, then the step scalars,
 *    struct StepParams: lr, t, seed, counter), so one asynchronous copy per step moves a whole
 *    set while the step of the other set may still run;
 *  - per program, the pinned host staging layout (inputs, scalars: the upload part; then one float
 *    per output, written by the graph's last kernel through the mapped staging memory) and the CUDA
 *    graph's kernel list in order, each argument a byte offset in the device allocation (arguments
 *    in the upload region are set 0's: the host adds `set * setBytes` for set 1). A GEMM node that
 *    cublaslt.ts made a cuBLASLt call is one graph node of kind 'cublaslt' holding the call (its
 *    operands' offsets from the first kernel's bindings; for a 3xTF32 call, cublaslt.ts / tf32x3.ts,
 *    the split operands' offsets in the scratch region), its generated fallback kernels, the kernels
 *    that run before the call (the 3xTF32 operand splits) and after it (a fused unary fn). A kernel that index.ts sharedKernels found
 *    identical to an earlier one is launched under that one's name (`alias`).
 * Relies on: every kernel binding has a home (dispatch_plan.ts checks), kernels that touch the same bytes
 * run in plan order (lanes.ts orders every such pair of graph nodes, so the plan's barriers and memory reuse hold).
 */
import { pdlFor, type PdlMode } from './pdl.js';
import type { ElemType } from '../kernels/dialect.js';
import { hostDType, type Program } from '../ir/graph.js';
import type { KernelSpec, LibraryGemm } from '../kernels/kernel_types.js';
import type { DispatchPlan, PlanBinding } from '../codegen-metal/dispatch_plan.js';
import type { LoweredProgram } from '../codegen-metal/lower_program.js';
import type { PersistentTable } from '../codegen-metal/layout.js';
import { SMEM_STATIC_MAX } from './cuda_dialect.js';

/** `lp` without the kernels named in `dropped`, and with `replace`'s kernels in place of the ones they name (views.ts, merge.ts) */
export function editKernels(lp: LoweredProgram, dropped: ReadonlySet<string>, replace: ReadonlyMap<string, KernelSpec> = new Map()): LoweredProgram {
  const kernels = lp.kernels.filter((k) => !dropped.has(k.name)).map((k) => replace.get(k.name) ?? k);
  const steps = lp.steps.filter((s) => s.kind !== 'kernel' || !dropped.has(s.kernel.name))
    .map((s) => (s.kind === 'kernel' && replace.has(s.kernel.name) ? { kind: 'kernel' as const, kernel: replace.get(s.kernel.name)! } : s));
  return { ...lp, kernels, steps };
}

/** alignment of every region of the device allocation and of the staging sets (bytes) */
export const CUDA_ALIGN = 256;
/** sizeof(StepParams): float lr, int t, uint seed, uint counter */
export const SCALAR_BYTES = 16;

const align = (n: number, a = CUDA_ALIGN) => Math.ceil(n / a) * a;

export interface DeviceRegion { offset: number; bytes: number }

export interface KernelArgPlan {
  /** parameter name in the kernel */
  name: string;
  /** the kernel language's element type (CUDA spelling: CUDA.typeName) */
  type: ElemType;
  access: 'r' | 'w' | 'rw';
  /** byte offset of the bound tensor in the device allocation (in the upload region: set 0's) */
  offset: number;
  bytes: number;
  /** the value's name (for messages) */
  value: string;
  /** the tensor is in the program's upload region: staging set s binds it at offset + s * setBytes */
  perSet?: boolean;
}

/** One kernel node of a program's CUDA graph, in stream order. */
export interface KernelNodePlan {
  kind: 'kernel'; kernel: string; node: number; op: string; grid: [number, number, number]; block: [number, number, number];
  /** the tensor-core (3xTF32) variant with its block shape, when the kernel has one */
  mma?: { kernel: string; block: [number, number, number]; dyn?: number };
  /** bytes of dynamic shared memory (a block's shared memory past cuda_dialect.ts SMEM_STATIC_MAX), per variant */
  dyn?: number;
  args: KernelArgPlan[];
  /** the kernel takes the scratch region (split-K or chunked-reduction partial sums) after its buffers */
  scratch?: boolean;
}
/** A GEMM node as one cuBLASLt call (cublaslt.ts), with its fallback kernels (no library, no algorithm) and the kernels after the call. */
export interface LtNodePlan {
  kind: 'cublaslt';
  node: number; op: string;
  /** index of the call among the model's cuBLASLt calls, all programs (the host's descriptor table) */
  index: number;
  gemm: LibraryGemm;
  /** the operands' device offsets and bytes (perSet: in the upload region, set 0's) */
  a: KernelArgPlan; b: KernelArgPlan; d: KernelArgPlan; bias?: KernelArgPlan;
  fallback: KernelNodePlan[];
  /** fallback kernels that also run after the call (after `after`) unless its BGRADB epilogue computes the same (a matmul's column sums) */
  unfused: KernelNodePlan[];
  /** kernels that run before the call only (3xTF32: the operand splits into the scratch region, whose offsets `a` and `b` then are) */
  before: KernelNodePlan[];
  after: KernelNodePlan[];
}
export type GraphNodePlan = KernelNodePlan | LtNodePlan;

/** cuBLASLt's workspace: NVIDIA's recommendation for Hopper (cuBLAS docs, cublasSetWorkspace: 32 MiB) */
export const LT_WORKSPACE_BYTES = 32 * 1024 * 1024;

export interface ProgramPlan {
  name: string;
  batch: number;
  /** input k: its bytes, its offset in the staging set and (set 0) in the device allocation */
  inputs: { name: string; dtype: 'f32' | 'i32'; shape: number[]; bytes: number; deviceOffset: number; hostOffset: number }[];
  /** output k: its device offset (arena) and the offset of its float in the staging set */
  outputs: { name: string; deviceOffset: number; hostOffset: number }[];
  /** bytes of one pinned staging set: inputs, the scalars (the upload part), then one float per output */
  stagingBytes: number;
  scalarsHostOffset: number;
  /** bytes copied host -> device per step: the staging set's inputs and scalars (= scalarsHostOffset + SCALAR_BYTES) */
  uploadBytes: number;
  /** device offset of set 0's upload image; set 1's is setBytes after it */
  uploadOffset: number;
  setBytes: number;
  nodes: GraphNodePlan[];
  /** number of kernel launches of the model (the model ABI's n_kernels; the graph adds one output-gather kernel) */
  kernels: number;
  arenaBytes: number;
}

export interface CudaPlan {
  model: string;
  /** the one device allocation */
  deviceBytes: number;
  persistent: DeviceRegion;
  arena: DeviceRegion;
  /**
   * split-K and chunked-reduction partial sums (bytes 0 when no kernel needs scratch); on more than one lane, one
   * slice of `scratchLane` bytes per lane (lanes.ts laneScratch: a kernel takes its lane's slice)
   */
  scratch: DeviceRegion;
  /** bytes of one lane's slice of the scratch region (= scratch.bytes on one lane) */
  scratchLane: number;
  /** cuBLASLt's workspaces, LT_WORKSPACE_BYTES per lane of the graphs (lanes.ts; bytes 0 when no GEMM node is a cuBLASLt call) */
  ltWorkspace: DeviceRegion;
  /** streams each program's graph is captured on (lanes.ts) */
  lanes: number;
  /** programmatic dependent launch between the graphs' kernels (pdl.ts; 'off' on more than one lane) */
  pdl: PdlMode;
  /** each program's upload region (both sets; in `programs` order) */
  inputs: DeviceRegion[];
  programs: ProgramPlan[];
}

function argsOf(k: KernelSpec, bindings: PlanBinding[], base: (b: PlanBinding) => number): KernelArgPlan[] {
  return k.args.map((a, i) => {
    const b = bindings[i];
    if (!b || b.value !== a.value) throw new Error(`internal: kernel ${k.name}: binding ${i} does not match argument '${a.name}'`);
    return { name: a.name, type: a.type, access: a.access, offset: base(b) + b.offset, bytes: b.bytes, value: b.name, ...(b.region === 'input' ? { perSet: true } : {}) };
  });
}

/** The device layout and graph kernel lists of a model's programs (lowered in the CUDA dialect). */
export function planCuda(model: string, table: PersistentTable, lowered: { lp: LoweredProgram; plan: DispatchPlan }[], alias: ReadonlyMap<string, string> = new Map(), lanes = 1, pdl: PdlMode = 'off'): CudaPlan {
  const launched = (name: string) => alias.get(name) ?? name;
  let off = 0;
  const take = (bytes: number): DeviceRegion => {
    const r = { offset: off, bytes };
    off = align(off + Math.max(bytes, 1));
    return r;
  };
  const persistent = take(table.bytes);
  const arena = take(Math.max(0, ...lowered.map((l) => l.plan.arenaBytes)));
  // one slice per lane (lanes.ts laneScratch: kernels on different lanes never share partial sums)
  const scratchLane = align(Math.max(0, ...lowered.flatMap((l) => l.lp.kernels.map((k) => k.scratch ?? 0))));
  const scratch = take(scratchLane * Math.max(1, lanes));
  // one cuBLASLt workspace per lane (lanes.ts: calls on different lanes may run at once)
  const ltWorkspace = take(lowered.some((l) => l.lp.kernels.some((k) => k.library)) ? lanes * LT_WORKSPACE_BYTES : 0);
  const inputs: DeviceRegion[] = [];
  let calls = 0;
  const programs: ProgramPlan[] = lowered.map(({ lp, plan }) => {
    const p: Program = lp.program;
    if (plan.steps.some((s) => s.kind === 'cpu'))
      throw new Error(`internal: program ${p.name} has a CPU fallback step; the CUDA backend lowers every op`);
    // the staging set: each input 256-aligned (the device image keeps the offsets), the scalars, the outputs
    let host = 0;
    const hostOffsets = plan.inputs.map((i) => {
      const o = host;
      host = align(host + i.bytes);
      return o;
    });
    const scalarsHostOffset = host;
    const uploadBytes = scalarsHostOffset + SCALAR_BYTES;
    host += SCALAR_BYTES;
    const setBytes = align(uploadBytes);
    const region = take(2 * setBytes);
    inputs.push(region);
    const ins = plan.inputs.map((i, k) => {
      const v = p.graph.values[i.value];
      return { name: i.name, dtype: hostDType(v), shape: v.shape, bytes: i.bytes, deviceOffset: region.offset + hostOffsets[k], hostOffset: hostOffsets[k] };
    });
    const outs = plan.outputs.map((o) => {
      const hostOffset = host;
      host += 4;
      return { name: o.name, deviceOffset: arena.offset + o.offset, hostOffset };
    });
    const base = (b: PlanBinding) =>
      b.region === 'arena' ? arena.offset : b.region === 'persistent' ? persistent.offset : ins[b.slot].deviceOffset;
    const byName = new Map(lp.kernels.map((k) => [k.name, k]));
    const nodes: GraphNodePlan[] = [];
    let lt: LtNodePlan | null = null;
    let ltKernels = 0;
    for (const s of plan.steps) {
      if (s.kind !== 'kernel') continue;
      const k = byName.get(s.kernel)!;
      const kn: KernelNodePlan = {
        kind: 'kernel', kernel: launched(k.name), node: k.node, op: k.op, grid: k.groups, block: k.tgsize,
        ...(k.tgmem > SMEM_STATIC_MAX ? { dyn: k.tgmem } : {}),
        ...(k.mma ? { mma: { kernel: launched(k.mma.name), block: k.mma.tgsize, ...(k.mma.tgmem > SMEM_STATIC_MAX ? { dyn: k.mma.tgmem } : {}) } } : {}),
        args: argsOf(k, s.bindings, base),
        ...(k.scratch ? { scratch: true } : {}),
      };
      if (k.library) {
        const L = k.library, arg = (i: number) => kn.args[i];
        // 3xTF32: cuBLASLt's A and B are the split operands in the scratch region
        const inScratch = (x: KernelArgPlan, off: number, elems: number, what = '3xTF32 split'): KernelArgPlan => ({ name: x.name, type: x.type, access: 'r', offset: scratch.offset + off, bytes: elems * 4, value: `${x.value} (${what})` });
        const [a, b] = L.tf32x3
          ? [inScratch(arg(L.argA), L.tf32x3.offA, L.rowsA * L.colsA * Math.max(1, L.strideA ? L.batch : 1)), inScratch(arg(L.argB), L.tf32x3.offB, L.rowsB * L.colsB * Math.max(1, L.strideB ? L.batch : 1))]
          : [arg(L.argA), arg(L.argB)];
        // 3xTF32 in K chunks: D is the chunks' partial products in the scratch region (an 'after' kernel sums them)
        const d = L.tf32x3?.offD !== undefined ? { ...inScratch(arg(L.argD), L.tf32x3.offD, L.m * L.n * L.batch, '3xTF32 K-chunk partials'), access: 'w' as const } : arg(L.argD);
        lt = { kind: 'cublaslt', node: k.node, op: k.op, index: calls++, gemm: L, a, b, d, ...(L.argBias !== undefined && !L.biasKernel ? { bias: arg(L.argBias) } : {}), fallback: [kn], unfused: [], before: [], after: [] };
        nodes.push(lt);
        ltKernels = 1;
      } else if (k.libraryPart) {
        if (!lt || lt.node !== k.node) throw new Error(`internal: kernel ${k.name} is part of a cuBLASLt node but follows none`);
        // the bias vector bound in a later kernel of the node (BGRADB: the column sums' kernel)
        if (lt.gemm.biasKernel === ltKernels++ && lt.gemm.argBias !== undefined) lt.bias = kn.args[lt.gemm.argBias];
        if (k.libraryPart === 'unfused') lt.unfused.push(kn);
        (k.libraryPart === 'after' ? lt.after : k.libraryPart === 'before' ? lt.before : lt.fallback).push(kn);
      } else {
        lt = null;
        nodes.push(kn);
      }
    }
    return {
      name: p.name, batch: p.batch, inputs: ins, outputs: outs, stagingBytes: align(host, 64), scalarsHostOffset, uploadBytes,
      uploadOffset: region.offset, setBytes, nodes, kernels: nodes.length, arenaBytes: plan.arenaBytes,
    };
  });
  return { model, deviceBytes: align(off), persistent, arena, scratch, scratchLane, ltWorkspace, lanes, pdl: pdlFor(pdl, lanes), inputs, programs };
}

/** every generated kernel of a program's graph nodes, in order (a cuBLASLt call's fallback kernels, then its 'before' and 'after' kernels) */
export function planKernels(p: ProgramPlan): KernelNodePlan[] {
  return p.nodes.flatMap((n) => (n.kind === 'kernel' ? [n] : [...n.fallback, ...n.before, ...n.after]));
}

/** Problems of a plan (empty when sound): regions overlap or leave the allocation, an argument leaves its region. */
export function planProblems(plan: CudaPlan): string[] {
  const bad: string[] = [];
  const regions = [
    { name: 'persistent', ...plan.persistent }, { name: 'arena', ...plan.arena }, { name: 'scratch', ...plan.scratch }, { name: 'cuBLASLt workspace', ...plan.ltWorkspace },
    ...plan.inputs.map((r, i) => ({ name: `upload region of ${plan.programs[i].name}`, ...r })),
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
  plan.programs.forEach((p, pi) => {
    const up = plan.inputs[pi];
    if (p.uploadOffset !== up.offset || 2 * p.setBytes > up.bytes || p.uploadBytes > p.setBytes) bad.push(`${p.name}: the two upload sets do not fit its upload region`);
    if (p.uploadBytes > p.stagingBytes) bad.push(`${p.name}: the upload part leaves the staging set`);
    for (const o of p.outputs) {
      if (o.hostOffset + 4 > p.stagingBytes) bad.push(`${p.name}: output ${o.name} leaves the staging set`);
      if (!inside(o.deviceOffset, 4)) bad.push(`${p.name}: output ${o.name} leaves its region`);
    }
    for (const n of p.nodes)
      if (n.kind === 'cublaslt' && n.gemm.tf32x3)
        for (const x of [n.a, n.b, ...(n.gemm.tf32x3.offD !== undefined ? [n.d] : [])])
          if (x.offset < plan.scratch.offset || x.offset + x.bytes > plan.scratch.offset + plan.scratch.bytes) bad.push(`${p.name}: cuBLASLt call ${n.index}: the 3xTF32 operand ${x.value} leaves the scratch region`);
    for (const n of planKernels(p))
      for (const a of n.args) {
        if (!inside(a.offset, a.bytes)) bad.push(`${p.name}.${n.kernel}: argument ${a.name} (${a.value}) leaves its region`);
        if (a.perSet && (a.offset < up.offset || a.offset + a.bytes > up.offset + p.uploadBytes))
          bad.push(`${p.name}.${n.kernel}: argument ${a.name} (${a.value}) is not in set 0 of the upload region`);
      }
  });
  return bad;
}
