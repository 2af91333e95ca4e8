/**
 * lower_program: a Program's nodes, in order, to GPU kernels of the kernel language
 * (compiler/kernels, rendered in the given dialect; MSL by default) or CPU fallback steps.
 * An op is a fallback step when it is listed in `fallbackOps` (used to test the fallback
 * path) or when the GPU registry (compiler/kernels/registry.ts) sends it to the CPU; with
 * `noFallback` the latter is an error. A reshape that the memory plan made a view (its output
 * on its input's bytes) gets no step at all.
 */
import type { Node, Program } from '../ir/graph.js';
import { epilogueOf } from '../ir/fuse.js';
import { UserError } from '../errors.js';
import type { Dialect } from '../kernels/dialect.js';
import type { Helper, KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { lowerGemm } from '../kernels/gemm.js';
import { GPU_KERNELS, lowerNode, type GpuRegistry } from '../kernels/registry.js';
import type { ProgramLayout } from './layout.js';
import { MSL } from './msl_dialect.js';

export type Step = { kind: 'kernel'; kernel: KernelSpec } | { kind: 'cpu'; node: number; op: string; reason: string };

export interface LoweredProgram {
  program: Program;
  kernels: KernelSpec[];
  steps: Step[];
  helpers: Set<Helper>;
  warnings: string[];
}

export interface LowerOptions {
  fallbackOps?: string[];
  noFallback?: boolean;
  /** prefix of the kernel names (default ''): kernels of several programs in one source file */
  kernelPrefix?: string;
  /** the GPU kernel registry (default GPU_KERNELS); an entry 'cpu' sends the op to the CPU fallback */
  registry?: GpuRegistry;
  /** the lowering of a GEMM-family node with a fused unary epilogue (default: the shared lowerGemm) */
  gemm?: typeof lowerGemm;
}

/**
 * whether a lowered program uses `bfloat`: buffers, or a matrix-unit variant's bfloat tiles and
 * simdgroup_bfloat8x8 operands (MSL 3.1 and a GPU with bfloat: runtime/metal-bridge/mpsc_metal_caps.h)
 */
export function usesBfloat(lp: LoweredProgram): boolean {
  return lp.kernels.some((k) => k.args.some((a) => a.type === 'bfloat') || (!!k.mma && /\bbfloat\b/.test(k.mma.body)));
}

function where(n: Node): string {
  const loc = n.loc ? `${n.loc.file}:${n.loc.line}:${n.loc.col}: ` : '';
  return `${loc}node ${n.id} (${n.op}${n.path ? ` in layer '${n.path}'` : ''})`;
}

/** a reshape whose output the memory plan puts on its input's bytes (a view): nothing to run */
function isView(n: Node, layout: ProgramLayout | undefined): boolean {
  if (n.op !== 'reshape' || !layout) return false;
  const a = layout.homes[n.inputs[0]], b = layout.homes[n.outputs[0]];
  return !!a && !!b && a.region === b.region && a.index === b.index && a.offset === b.offset;
}

export function lowerProgram(p: Program, opts: LowerOptions = {}, layout?: ProgramLayout, dialect: Dialect = MSL): LoweredProgram {
  let k = 0;
  const helpers = new Set<Helper>();
  const ctx: LowerCtx = { next: () => `${opts.kernelPrefix ?? ''}k${k++}`, helpers, d: dialect };
  const forced = new Set(opts.fallbackOps ?? []);
  const out: LoweredProgram = { program: p, kernels: [], steps: [], helpers, warnings: [] };
  const nodes = p.graph.nodes;
  for (let i = 0; i < nodes.length; i++) {
    const n = nodes[i];
    // a GEMM with a fused epilogue (compiler/ir/fuse.ts, caps in fusions.ts) applies it in its store
    const epilogue = epilogueOf(n);
    if (epilogue) {
      const ks = (opts.gemm ?? lowerGemm)(ctx, p.graph, n, { id: n.id, op: 'unary', inputs: n.outputs, outputs: n.outputs, attrs: epilogue });
      if (!ks) throw new Error(`internal: ${where(n)} carries an epilogue but has no GPU GEMM kernel`);
      for (const kern of ks) {
        out.kernels.push(kern);
        out.steps.push({ kind: 'kernel', kernel: kern });
      }
      continue;
    }
    if (isView(n, layout)) continue;
    if (forced.has(n.op)) {
      out.steps.push({ kind: 'cpu', node: n.id, op: n.op, reason: 'forced by fallbackOps' });
      out.warnings.push(`${where(n)} runs on the CPU (fallback forced for op '${n.op}'); program ${p.name}`);
      continue;
    }
    const ks = lowerNode(ctx, p.graph, n, opts.registry ?? GPU_KERNELS);
    if (!ks) {
      if (opts.noFallback)
        throw new UserError(`error: ${where(n)} has no Metal kernel and CPU fallback is disabled (--no-fallback).\n  fix: allow the fallback, or use --target cpu`);
      out.steps.push({ kind: 'cpu', node: n.id, op: n.op, reason: 'no Metal kernel' });
      out.warnings.push(`${where(n)} has no Metal kernel: it runs on the CPU between two command buffers; program ${p.name}`);
      continue;
    }
    for (const kern of ks) {
      out.kernels.push(kern);
      out.steps.push({ kind: 'kernel', kernel: kern });
    }
  }
  return out;
}
