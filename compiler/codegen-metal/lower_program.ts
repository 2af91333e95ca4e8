/**
 * lower_program: a Program's nodes, in order, to Metal kernels (or CPU fallback steps).
 * An op is a fallback step when it is listed in `fallbackOps` (used to test the fallback
 * path) or when no Metal lowering exists for it; with `noFallback` the latter is an error.
 */
import type { Graph, Node, Program } from '../ir/graph.js';
import { epilogueOf } from '../ir/fuse.js';
import { UserError } from '../errors.js';
import type { Helper, KernelSpec, LowerCtx } from './kernel_types.js';
import { lowerElementwise } from './lower_elementwise.js';
import { GEMM_OPS, lowerGemm } from './lower_gemm.js';
import type { ProgramLayout } from './layout.js';
import { lowerPool } from './lower_pool.js';
import { lowerReduce } from './lower_reduce.js';
import { lowerOptim } from './lower_optim.js';

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
}

const LOWERINGS = [lowerGemm, lowerElementwise, lowerPool, lowerReduce, lowerOptim];

export function lowerNode(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] | null {
  for (const f of LOWERINGS) {
    const r = f(ctx, g, n);
    if (r) return r;
  }
  return null;
}

function where(n: Node): string {
  const loc = n.loc ? `${n.loc.file}:${n.loc.line}:${n.loc.col}: ` : '';
  return `${loc}node ${n.id} (${n.op}${n.path ? ` in layer '${n.path}'` : ''})`;
}

export function lowerProgram(p: Program, opts: LowerOptions = {}, layout?: ProgramLayout): LoweredProgram {
  let k = 0;
  const helpers = new Set<Helper>();
  const ctx: LowerCtx = { next: () => `k${k++}`, helpers };
  const forced = new Set(opts.fallbackOps ?? []);
  const out: LoweredProgram = { program: p, kernels: [], steps: [], helpers, warnings: [] };
  const nodes = p.graph.nodes;
  for (let i = 0; i < nodes.length; i++) {
    const n = nodes[i];
    // a GEMM with a fused epilogue (compiler/ir/fuse.ts, caps in fusions.ts) applies it in its store
    const epilogue = epilogueOf(n);
    if (epilogue) {
      const ks = lowerGemm(ctx, p.graph, n, { id: n.id, op: 'unary', inputs: n.outputs, outputs: n.outputs, attrs: epilogue });
      if (!ks) throw new Error(`internal: ${where(n)} carries an epilogue but has no Metal GEMM kernel`);
      for (const kern of ks) {
        out.kernels.push(kern);
        out.steps.push({ kind: 'kernel', kernel: kern });
      }
      continue;
    }
    if (forced.has(n.op)) {
      out.steps.push({ kind: 'cpu', node: n.id, op: n.op, reason: 'forced by fallbackOps' });
      out.warnings.push(`${where(n)} runs on the CPU (fallback forced for op '${n.op}'); program ${p.name}`);
      continue;
    }
    const ks = lowerNode(ctx, p.graph, n);
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
