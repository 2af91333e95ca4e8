/**
 * The CUDA backend's code generator. Consumes a ProgramSet (with memory plans, unfused: each
 * program is fused with fusions.ts's capability set and planned again); produces
 *   - `model_kernels.cuh`: every kernel of every program, from the shared kernel language
 *     (compiler/kernels) in the CUDA dialect (cuda_dialect.ts), kernel names prefixed per program;
 *     kernels whose text is the same but for the name (the same op at the same shapes: every
 *     layer of a transformer, the forward of train_step and eval) are emitted once and launched
 *     under the first one's name (sharedKernels: GPT-2 small's 1561 kernels are ~12x fewer to compile);
 *   - `model_cuda.cu`: the host code implementing the model ABI (host.ts) over the device plan
 *     (plan.ts: one device allocation, one CUDA graph per program);
 *   - the plan itself (plain data: reports, tests), and where each GEMM node runs (cublaslt.ts:
 *     cuBLASLt or the generated kernel, and why).
 * Before planning, a reshape of a program input becomes a view of its upload image (views.ts) and
 * runs of independent element-wise kernels become one launch each (merge.ts; never a kernel of a
 * cuBLASLt call's node).
 * The lowering and the dispatch plans are codegen-metal's (lower_program.ts, dispatch_plan.ts,
 * layout.ts), run with the CUDA dialect: the same kernels and the same bindings as Metal.
 * No CPU fallback: every op of the catalogue has a GPU kernel (compiler/kernels/registry.ts).
 */
import { programsOf, type Program, type ProgramSet } from '../ir/graph.js';
import type { Graph, Node } from '../ir/graph.js';
import type { Helper, KernelSpec, KernelVariant, LowerCtx } from '../kernels/kernel_types.js';
import { kernelFile } from '../kernels/prelude.js';
import { commentText } from '../cfamily/text.js';
import { lowerProgram, type LoweredProgram } from '../codegen-metal/lower_program.js';
import { buildPlan } from '../codegen-metal/dispatch_plan.js';
import { persistentTable, programLayout, type PersistentTable } from '../codegen-metal/layout.js';
import { CUDA, CUDA_PDL } from './cuda_dialect.js';
import { planCuda, type CudaPlan } from './plan.js';
import { mergeLaunches } from './merge.js';
import { reshapeViews } from './views.js';
import { cudaHostSource } from './host.js';
import { cudaLanes, planLanes, reuseGap, type LaneSchedule } from './lanes.js';
import { planMemory } from '../ir/memory_plan.js';
import { cudaPdl, type PdlMode } from './pdl.js';
import { lowerGemmCuda } from './gemm_cuda.js';
import { lowerGemmCudaLt, type GemmChoice } from './cublaslt.js';
import type { Tf32x3Mode } from './tf32x3.js';
import { lowerLayernormGradCuda, lowerSumToCuda } from './reduce_cuda.js';
import { lowerEmbeddingCuda, lowerEmbeddingGradCuda } from './embedding_cuda.js';
import { lowerLayernormCuda } from './layernorm_cuda.js';
import { sharedWithGradForward, wideOr } from './wide_ew_cuda.js';
import { lowerAvgpoolGradCuda } from './avgpool_cuda.js';
import { lowerClassForwardCuda, lowerCrossEntropyGradCuda } from './class_rows.js';
import { lowerAttentionCuda } from './attention_cuda.js';
import { NO_FUSIONS, unfusedAttrs } from '../ir/fuse.js';
import { fuseForBackend } from '../ir/programs.js';
import { cudaFusions } from './fusions.js';
import { GPU_KERNELS, type GpuLowering, type GpuRegistry } from '../kernels/registry.js';

/** which GEMM kernels: the CUDA 64x64 ones (gemm_cuda.ts, default; with the CUDA attention and reductions) or the shared 16x16 ones (and every shared kernel) */
export type CudaGemm = 'cuda' | 'shared';

const sharedSumTo = GPU_KERNELS.sum_to;
if (sharedSumTo === 'cpu') throw new Error('internal: sum_to has no shared GPU kernel');
/** long sums: a block per output (reduce_cuda.ts); short ones: the shared kernel */
const cudaSumTo: GpuLowering = (ctx, g, n) => {
  return lowerSumToCuda(ctx, g, n) ?? sharedSumTo(ctx, g, n);
};
const sharedLayernorm = GPU_KERNELS.layernorm;
if (sharedLayernorm === 'cpu') throw new Error('internal: layernorm has no shared GPU kernel');
/** rows of at most WARP_D: a warp per row (layernorm_cuda.ts); wider: the shared kernel */
const cudaLayernorm: GpuLowering = (ctx, g, n) => lowerLayernormCuda(ctx, g, n) ?? sharedLayernorm(ctx, g, n);
const sharedAttention = GPU_KERNELS.attention;
if (sharedAttention === 'cpu') throw new Error('internal: attention has no shared GPU kernel');
/**
 * The shared attention kernel, and for an attention_qkv_grad with `sum_out` (fuse.ts rule 15: a node the flash kernels
 * refuse, or the shared GEMM build's registry) that kernel for the unfused node, then dqkv's column sums by `sumTo` as the
 * sum_to the rule took would have run
 */
export const sharedAttentionThenSums = (sumTo: GpuLowering): GpuLowering => (ctx, g, n) => {
  if (n.attrs.sum_out !== true) return sharedAttention(ctx, g, n);
  const dqkv = n.outputs[0], shape = g.values[dqkv].shape;
  const core: Node = { ...n, outputs: [dqkv], attrs: unfusedAttrs(n) };
  const sum: Node = { ...n, op: 'sum_to', inputs: [dqkv], outputs: [n.outputs[1]], attrs: { shape: [shape[shape.length - 1]], axes: shape.slice(0, -1).map((_, i) => i) } };
  return [...sharedAttention(ctx, g, core), ...sumTo(ctx, g, sum)];
};
/** the shared GEMM build's registry: the shared kernels, with wide_ew_cuda.ts's for a unary_grad with fwd_out and rule 15's sums after attention */
const SHARED_REGISTRY: GpuRegistry = { ...GPU_KERNELS, unary_grad: sharedWithGradForward(), attention_qkv_grad: sharedAttentionThenSums(sharedSumTo) };
/** flash attention (attention_cuda.ts: 16-bit on the tensor cores, fp32 on attention_f32.ts; `hopper`: a build for sm_90a); other head widths: the shared kernel */
const cudaAttention = (hopper: boolean): GpuLowering => (ctx, g, n) => lowerAttentionCuda(ctx, g, n, hopper) ?? sharedAttentionThenSums(cudaSumTo)(ctx, g, n);
const sharedEmbeddingGrad = GPU_KERNELS.embedding_grad;
if (sharedEmbeddingGrad === 'cpu') throw new Error('internal: embedding_grad has no shared GPU kernel');
/** embedding_grad on embedding_cuda.ts (sorted ids, or positions); past its float slots the shared kernel */
const cudaEmbeddingGrad: GpuLowering = (ctx, g, n) => lowerEmbeddingGradCuda(ctx, g, n) ?? sharedEmbeddingGrad(ctx, g, n);
const sharedEmbedding = GPU_KERNELS.embedding;
if (sharedEmbedding === 'cpu') throw new Error('internal: embedding has no shared GPU kernel');
/** a position embedding reads its rows without the positions (embedding_cuda.ts); other ids: the shared gather */
const cudaEmbedding: GpuLowering = (ctx, g, n) => lowerEmbeddingCuda(ctx, g, n) ?? sharedEmbedding(ctx, g, n);
/**
 * The shared registry with the attention family (attention, attention_qkv and their gradients) on attention_cuda.ts where it applies, long sum_to and layernorm_grad on
 * reduce_cuda.ts (its dx and the layernorm forward a warp per row: layernorm_cuda.ts), embedding (ids = positions) and
 * embedding_grad on embedding_cuda.ts, long 16-bit element-wise nodes and long adam_update on wide_ew_cuda.ts, the class
 * losses / metrics cross_entropy(_grad), accuracy and top_k on class_rows.ts, and the GEMM family through cublaslt.ts
 * (cuBLASLt where its rule says and `lt` allows, fp32 calls as 3xTF32 where tf32x3.ts's rule and `tf32x3` say; else gemm_cuda.ts's kernels), recording each
 * GEMM node's choice in `choices`; `gemm` is the same lowering for nodes with a fused epilogue.
 */
function gemmRegistry(lt: boolean, tf32x3: Tf32x3Mode, choices: GemmChoice[], hopper: boolean): { registry: GpuRegistry; gemm: typeof lowerGemmCuda } {
  const gemm = (ctx: LowerCtx, g: Graph, n: Node, epilogue?: Node): KernelSpec[] | null => {
    const r = lowerGemmCudaLt(ctx, g, n, epilogue, lt, tf32x3);
    if (r) choices.push(r.choice);
    return r ? r.kernels : null;
  };
  const entry: GpuLowering = (ctx, g, n) => {
    const ks = gemm(ctx, g, n);
    if (!ks) throw new Error(`internal: op '${n.op}' is not a GEMM`);
    return ks;
  };
  const attention = cudaAttention(hopper);
  return { registry: { ...GPU_KERNELS, attention, attention_grad: attention, attention_qkv: attention, attention_qkv_grad: attention, sum_to: cudaSumTo, layernorm_grad: lowerLayernormGradCuda, embedding_grad: cudaEmbeddingGrad, embedding: cudaEmbedding, layernorm: cudaLayernorm,
    unary: wideOr('unary'), unary_grad: wideOr('unary_grad'), binary: wideOr('binary'), cast: wideOr('cast'), adam_update: wideOr('adam_update'), global_avgpool_grad: lowerAvgpoolGradCuda,
    cross_entropy: lowerClassForwardCuda, accuracy: lowerClassForwardCuda, top_k: lowerClassForwardCuda, cross_entropy_grad: lowerCrossEntropyGradCuda, linear: entry, matmul: entry, conv2d: entry, conv2d_grad_input: entry, conv2d_grad_weight: entry }, gemm };
}

export const KERNELS_FILE = 'model_kernels.cuh';
export const HOST_FILE = 'model_cuda.cu';

export interface CudaArtifacts {
  model: string;
  table: PersistentTable;
  lowered: LoweredProgram[];
  plan: CudaPlan;
  /** file name (under src/) -> contents */
  files: Record<string, string>;
  /** kernels launched under another kernel's name (sharedKernels) */
  alias: Map<string, string>;
  /** per program (plan order), where each GEMM node runs and why */
  gemms: { program: string; choices: GemmChoice[] }[];
  /** per program (plan order), its graph's lanes (lanes.ts planLanes of `plan`) */
  lanes: LaneSchedule[];
}

/**
 * Kernels whose generated text would be identical but for the name -> the first such kernel's name
 * (kernels that are their own first are not in the map). The key is everything the text depends
 * on: each variant's body, block shape, shared memory and barriers, the arguments' names, types and
 * access, whether the kernel takes the scratch region.
 */
export function sharedKernels(lowered: LoweredProgram[]): Map<string, string> {
  const first = new Map<string, KernelSpec>();
  const alias = new Map<string, string>();
  const variant = (v: KernelVariant | undefined) => (v ? [v.body, v.tgsize, v.tgmem, v.sync] : null);
  for (const lp of lowered)
    for (const k of lp.kernels) {
      const key = JSON.stringify([variant(k), variant(k.mma), k.args.map((a) => [a.name, a.type, a.access]), Boolean(k.scratch)]);
      const f = first.get(key);
      if (f === undefined) first.set(key, k);
      else {
        alias.set(k.name, f.name);
        if (k.mma && f.mma) alias.set(k.mma.name, f.mma.name);
      }
    }
  return alias;
}

/** The kernels file: the kernel language's prelude and every kernel of the lowered programs (shared ones once: `alias`), in the CUDA dialect. */
export function cudaKernelsSource(model: string, lowered: LoweredProgram[], alias: ReadonlyMap<string, string> = sharedKernels(lowered), pdl: PdlMode = 'off'): string {
  const helpers = new Set<Helper>();
  for (const lp of lowered) for (const h of lp.helpers) helpers.add(h);
  return kernelFile(pdl === 'off' ? CUDA : CUDA_PDL, [
    `Generated by mpsc: CUDA kernels of model ${commentText(model)} (programs ${lowered.map((l) => l.program.name).join(', ')}).`,
    'Do not edit; regenerate with `mpsc build --target cuda`. Static shapes are baked in; accumulation is',
    'in float; compile with -fmad=true and without fast math; GEMMs come in an fp32 and a 3xTF32 tensor-core variant.',
  ], helpers, lowered.flatMap((lp) => lp.kernels).filter((k) => !alias.has(k.name)), { plain: ' [fp32]', mma: ' [3xTF32 tensor cores]' });
}

export interface CudaGenOptions {
  gemm?: CudaGemm;
  fuse?: boolean;
  /** linear / matmul may run as cuBLASLt calls (cublaslt.ts's rule; default true): the build links cuBLASLt where CMake finds it */
  cublasLt?: boolean;
  /** fp32 cuBLASLt calls over 3xTF32 split operands (tf32x3.ts): its size rule (default), never, or all of them */
  tf32x3?: Tf32x3Mode;
  /** false: one launch per element-wise kernel (merge.ts otherwise merges runs of independent ones) */
  merge?: boolean;
  /** streams each graph is captured on (lanes.ts; default MPSC_CUDA_LANES, else 1: one chain) */
  lanes?: number;
  /** programmatic dependent launch between the graphs' kernels (pdl.ts; default MPSC_CUDA_PDL, else off) */
  pdl?: PdlMode;
  /** the build's CMAKE_CUDA_ARCHITECTURES (runtime/cuda/session.ts cudaArchitecture): 90a (Hopper) lets the flash kernels use wgmma (attention_cuda.ts flashWgmma) */
  arch?: string;
}

/**
 * Lowers, plans and emits the CUDA model of these programs. `merge: false` keeps one launch per
 * element-wise kernel (merge.ts otherwise runs independent ones as one launch; the check script
 * compares both bitwise).
 */
export function buildCuda(unfused: Program[], model: string, opts: CudaGenOptions = {}): CudaArtifacts {
  const own = (opts.gemm ?? 'cuda') === 'cuda';
  // the shared kernels (gemm 'shared') have no layernorm with a folded residual add (fuse.ts rule 5), no matmul with column sums (rule 8),
  // no unary_grad with the forward value (grad_fwd.ts; a program that has one gets wide_ew_cuda.ts's kernel for it), no pool gradient
  // or conv input gradient with channel sums (rule 9: avgpool_cuda.ts, conv_cuda.ts), no conv with its pooled output (rule 10: conv_cuda.ts),
  // no attention gradient with its column sums (rule 15: a program that has one gets the shared kernel, then the sum_to kernel)
  const caps = opts.fuse === false ? NO_FUSIONS : own ? cudaFusions() :
    { ...cudaFusions(), addLayernorm: undefined, matmulBiasGrad: undefined, gradWithForward: undefined, poolGradBiasSum: undefined, convGradBiasSum: undefined, convPool: undefined, attnGradBiasSum: undefined };
  const lanes = opts.lanes ?? cudaLanes(), pdl = opts.pdl ?? cudaPdl();
  // on lanes, buffers are reused only reuseGap() nodes after their last reader (lanes.ts: no write-after-read edges
  // between neighbours; planned again without the gap below when every program stays one chain)
  const gap = lanes > 1 ? reuseGap() : 0;
  const fused = unfused.map((p) => fuseForBackend(p, caps));
  const programs = gap > 0 ? fused.map((p) => (p.plan ? { ...p, plan: planMemory(p, gap) } : p)) : fused;
  const table = persistentTable(programs);
  const gemms: CudaArtifacts['gemms'] = [];
  const parts = programs.map((p, i) => {
    const layout = programLayout(p, table);
    const choices: GemmChoice[] = [];
    gemms.push({ program: p.name, choices });
    const reg = gemmRegistry(opts.cublasLt ?? true, opts.tf32x3 ?? 'rule', choices, opts.arch === '90a');
    const lp = lowerProgram(p, { noFallback: true, kernelPrefix: `p${i}_`, ...(own ? { registry: reg.registry, gemm: reg.gemm } : { registry: SHARED_REGISTRY }) }, layout, CUDA);
    const plan = buildPlan(lp, layout, table, model);
    const viewed = reshapeViews(lp, plan);
    return opts.merge === false ? viewed : mergeLaunches(viewed.lp, viewed.plan, CUDA);
  });
  const lowered = parts.map((x) => x.lp);
  const alias = sharedKernels(lowered);
  let plan = planCuda(model, table, parts, alias, lanes, pdl);
  let sched = planLanes(plan, lanes);
  // every program one chain (lanes.ts: estimated gains under its threshold): planned again on one lane, so that the
  // host code has no lanes and the allocation one cuBLASLt workspace
  if (lanes > 1 && sched.every((s) => s.lane.every((l) => l === 0))) {
    if (gap > 0) return buildCuda(unfused, model, { ...opts, lanes: 1 });
    plan = planCuda(model, table, parts, alias, 1, pdl);
    sched = planLanes(plan, 1);
  }
  return {
    model, table, lowered, plan, gemms, alias, lanes: sched,
    files: { [KERNELS_FILE]: cudaKernelsSource(model, lowered, alias, plan.pdl), [HOST_FILE]: cudaHostSource(plan, table, KERNELS_FILE, sched) },
  };
}

export function generateCudaModel(programs: ProgramSet, opts: CudaGenOptions = {}): CudaArtifacts {
  return buildCuda(programsOf(programs), programs.model, opts);
}
