/**
 * emit_program: turns a ProgramSet into one C++17 translation unit (`model.cc`) implementing
 * the model ABI of runtime/cpp/mpsc_model.h for the CPU backend.
 *
 * Consumes: ProgramSet (compiler/ir/graph.ts) with static shapes, unfused: each program is
 *           first fused with the CPU's capability set (fusions.ts, compiler/ir/fuse.ts) and
 *           planned again (programs.ts fuseProgramSet), so arena offsets come from the plan of
 *           the fused graph.
 * Produces: { files: { 'model.cc', 'mpsc_kernels.hpp' }, tensors, programs, persistentBytes }.
 *  - one function per node, named `p<program>_k<node>_<op>` (generated, never a spec name),
 *    with shapes and attrs baked in as constants (kernels/<family>.ts build them); a run of
 *    consecutive adam_update nodes with the same step constants is one function
 *    `p<program>_k<first node>_adam_update_x<count>` (kernels/optim.ts adamGroup), and a grad-weight
 *    matmul followed by the bias-gradient sum_to over the same rows is one `..._matmul_sum_to`
 *    (kernels/gemm.ts matmulWithColumnSum), and a cross_entropy followed by its cross_entropy_grad over
 *    the same logits is one `..._cross_entropy_with_grad` (kernels/losses.ts crossEntropyWithGrad),
 *    unless fusion is off;
 *  - one `run` per program calling its kernels in order, then reading the scalar outputs;
 *  - the descriptor table: persistent tensors (compiler/ir/persistent_table.ts, the one rule of
 *    the model ABI layout), programs, inputs, outputs. Every name is emitted through cString().
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type DType, type HostDType, hostDType, type Graph, type Program, type ProgramSet, isPersistent, numel, programsOf, valueBytes } from '../ir/graph.js';
import { isOpName } from '../ir/ops.js';
import { cString, commentText } from '../cfamily/text.js';
import { type KernelCtx, attrReaders } from './kernel_ctx.js';
import { type AliasPlan, planInputReshapeAliases } from './alias_reshape.js';
import { NO_FUSIONS } from '../ir/fuse.js';
import { type PersistentEntry, persistentTable } from '../ir/persistent_table.js';
import { fuseProgramSet } from '../ir/programs.js';
import { CPU_FUSIONS } from './fusions.js';
import { CPU_KERNELS } from './kernels/index.js';
import { withWidenedInputs } from './kernels/precision.js';
import { adamGroup, adamGroupKey } from './kernels/optim.js';
import { matmulWithColumnSum } from './kernels/gemm.js';
import { crossEntropyWithGrad } from './kernels/losses.js';
import { columnSumOf } from './kernels/elementwise.js';
import { tpl } from './template.js';
import { envChoice, envFlag } from '../env_switch.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ALIGN = 64;

export interface ProgramSummary {
  name: string;
  batch: number;
  kernels: number;
  arenaBytes: number;
  inputs: { name: string; dtype: DType; shape: number[] }[];
  outputs: string[];
}

export interface GeneratedCpuModel {
  /** generated files (relative path -> contents) for runtime/native/build.ts */
  files: Record<string, string>;
  tensors: PersistentEntry[];
  persistentBytes: number;
  programs: ProgramSummary[];
}

const alignUp = (n: number, a: number) => Math.ceil(n / a) * a;

/** arena offsets: the program's plan, or a trivial one (each value its own aligned slot) */
function arenaOffsets(p: Program): { offsets: number[]; bytes: number } {
  if (p.plan) {
    // values the plan leaves out (written but never read) share one sink slot after the arena
    const offsets = [...p.plan.offsets];
    let sink = 0;
    for (const v of p.graph.values) {
      if (!isPersistent(v) && v.kind !== 'input' && !(offsets[v.id] >= 0)) sink = Math.max(sink, valueBytes(v));
    }
    const base = alignUp(p.plan.arenaBytes, ALIGN);
    if (sink > 0) for (const v of p.graph.values) if (!isPersistent(v) && v.kind !== 'input' && !(offsets[v.id] >= 0)) offsets[v.id] = base;
    return { offsets, bytes: sink > 0 ? base + alignUp(sink, ALIGN) : p.plan.arenaBytes };
  }
  const offsets: number[] = [];
  let off = 0;
  for (const v of p.graph.values) {
    if (isPersistent(v) || v.kind === 'input') offsets.push(-1);
    else {
      offsets.push(off);
      off = alignUp(off + valueBytes(v), ALIGN);
    }
  }
  return { offsets, bytes: off };
}

/** 16-bit values are raw bit patterns (runtime/cpp/mpsc_half.hpp converts them) */
const CTYPE: Record<DType, string> = { f32: 'float', i32: 'int32_t', f16: 'uint16_t', bf16: 'uint16_t' };
const DTYPE_ENUM: Record<HostDType, string> = { f32: 'MPSC_F32', i32: 'MPSC_I32' };
const KIND_ENUM: Record<string, string> = { param: 'MPSC_PARAM', state: 'MPSC_STATE', optstate: 'MPSC_OPTSTATE', gradacc: 'MPSC_GRADACC', input: 'MPSC_INPUT' };

interface KernelVm {
  fn: string;
  comment: string;
  body: string;
}

function pointerResolver(p: Program, tensorIndex: Map<string, number>) {
  const { offsets, bytes } = arenaOffsets(p);
  const inputIndex = new Map(p.inputs.map((id, j) => [id, j]));
  return {
    arenaBytes: bytes,
    offsets,
    ptr(id: number): string {
      const v = p.graph.values[id];
      if (!v) throw new Error(`internal: program ${p.name} references value ${id}, which does not exist`);
      const t = CTYPE[v.dtype];
      if (isPersistent(v)) return `((${t}*)ctx->tensors[${tensorIndex.get(v.name)}])`;
      if (v.kind === 'input') {
        const j = inputIndex.get(id);
        if (j === undefined) throw new Error(`internal: program ${p.name}: input value %${id} (${v.name}) is not in Program.inputs`);
        return `((${t}*)in[${j}])`;
      }
      const off = offsets[id];
      if (off === undefined || off < 0) throw new Error(`internal: program ${p.name}: value %${id} (${v.name}) has no arena offset in the memory plan`);
      if (off + valueBytes(v) > bytes) throw new Error(`internal: program ${p.name}: value %${id} (${v.name}) at offset ${off} overflows the ${bytes}-byte arena`);
      return `((${t}*)(ctx->arena + ${off}))`;
    },
  };
}

function kernelCtx(graph: Graph, node: Graph['nodes'][number], ptr: (id: number) => string, alias: AliasPlan): KernelCtx {
  const fail = (msg: string): never => {
    throw new Error(`internal: CPU codegen, node ${node.id} (${node.op}${node.path ? ` at ${node.path}` : ''}): ${msg}`);
  };
  const val = (id: number) => graph.values[id] ?? fail(`value ${id} does not exist`);
  // alias_reshape.ts may point an input (the reshaped data batch) at the data input itself
  const redirect = alias.redirect.get(node.id);
  const inputs = node.inputs.map((id, i) => redirect?.get(i) ?? id);
  const outputs = node.outputs;
  const origId = (i: number) => {
    const id = node.inputs[i];
    if (id === undefined || id < 0) fail(`input ${i} is absent`);
    return id;
  };
  return {
    graph,
    node,
    inPtr: (i) => (inputs[i] === undefined || inputs[i] < 0 ? 'nullptr' : ptr(inputs[i])),
    outPtr: (i) => ptr(outputs[i] ?? fail(`output ${i} is absent`)),
    hasInput: (i) => inputs[i] !== undefined && inputs[i] >= 0,
    // shapes and dtypes are the node's own inputs' (a redirect changes where data is read, not its view)
    inShape: (i) => val(origId(i)).shape,
    inDtype: (i) => val(origId(i)).dtype,
    outShape: (i) => val(outputs[i] ?? fail(`output ${i} is absent`)).shape,
    samePlace: (a, b) => a === b,
    fail,
    ...attrReaders(node, fail),
  };
}

const MODEL = tpl(`// generated by mpsc (compiler/codegen-cpu) for model {{modelComment}}: do not edit
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

{{#unless amx}}
#define MPSC_FAST_AMX 0  // MPSC_CPU_AMX=0: sgemm on the FMA kernel even where the CPU has AMX tiles
{{/unless}}
{{#unless amxGrid}}
#define MPSC_FAST_AMX_GRID 0  // MPSC_CPU_AMX_GRID=0: the AMX path's parts split one axis only (sgemm.h detail::part_grid)
{{/unless}}
{{#unless fmaGrid}}
#define MPSC_FAST_FMA_GRID 0  // MPSC_CPU_FMA_GRID=0: the FMA path's parts split one axis only (sgemm.h detail::part_grid_fma)
{{/unless}}
{{#if mr12}}
#if defined(__AVX512F__)
#define MPSC_FAST_MR 12  // MPSC_CPU_MR=12: the FMA kernel's micro-tile 12 rows high (24 accumulators; the same bits)
#endif
{{/if}}
{{#if bf16}}
#define MPSC_HALF_BF16 {{bf16}}  // MPSC_CPU_BF16: the bf16 linears' kernel off the AMX tiles (mpsc_half.hpp linear_bf16)
{{/if}}
#include "mpsc_kernels.hpp"

namespace {

{{#each kernels}}
// {{comment}}
static int {{fn}}(mpsc_ctx* ctx, const void* const* in, const mpsc_scalars* sc) {
  (void)ctx; (void)in; (void)sc;
{{body}}  return 0;
}

{{/each}}
{{#each programs}}
static int run_{{id}}(mpsc_ctx* ctx, const void* const* in, const mpsc_scalars* sc, double* out) {
  (void)in; (void)sc; (void)out;
  const bool prof = mk::prof_on();
{{#each calls}}
  {
    const double t0 = prof ? mk::prof_now() : 0.0;
    if ({{fn}}(ctx, in, sc)) return 1;
    if (prof) mk::prof_add({{slot}}, "{{fn}}", t0);
  }
{{/each}}
{{#each outputs}}
  out[{{@index}}] = (double)({{ptr}})[0];
{{/each}}
  return 0;
}

{{#each inputs}}
static const int64_t {{shapeVar}}[] = { {{dims}} };
{{/each}}
static const mpsc_tensor_desc {{id}}_inputs[] = {
{{#each inputs}}
  { {{name}}, {{dtype}}, MPSC_INPUT, {{rank}}, {{shapeVar}}, {{numel}}, 0 },
{{/each}}
  { nullptr, 0, 0, 0, nullptr, 0, 0 }
};
static const char* const {{id}}_outputs[] = { {{#each outputNames}}{{this}}, {{/each}}nullptr };

{{/each}}
{{#each tensors}}
static const int64_t {{shapeVar}}[] = { {{dims}} };
{{/each}}
static const mpsc_tensor_desc tensors[] = {
{{#each tensors}}
  { {{name}}, {{dtype}}, {{kind}}, {{rank}}, {{shapeVar}}, {{numel}}, {{offset}} },
{{/each}}
  { nullptr, 0, 0, 0, nullptr, 0, 0 }
};

static const mpsc_program_desc programs[] = {
{{#each programs}}
  { {{name}}, {{batch}}, {{nInputs}}, {{id}}_inputs, {{nOutputs}}, {{id}}_outputs, {{arenaBytes}}, {{nKernels}}, run_{{id}} },
{{/each}}
};

static const mpsc_model_desc model = {
  MPSC_ABI_VERSION, {{modelName}}, "cpu", {{nTensors}}, tensors, {{persistentBytes}}, {{nPrograms}}, programs, nullptr, nullptr
};

}  // namespace

extern "C" const mpsc_model_desc* mpsc_model(void) { return &model; }
`);

/** the fast GEMM / conv core (runtime/cpp/fast), inlined in front of mpsc_kernels.hpp */
export const FAST_CORE_DIR = path.resolve(HERE, '../../runtime/cpp/fast');
/**
 * the C++ texts kernelsHeader() ships in the generated code, in its order: the fast core's amx.h, sgemm.h, winograd.h
 * and conv.h (namespace mpsc_fast), this backend's cpp/mpsc_kernels.hpp, and the 16-bit storage helpers (mixed
 * precision) runtime/cpp/mpsc_half.hpp; also what the CPU build key digests beside the generator's modules
 * (runtime/native/native_session.ts cpuInputsKey)
 */
export const KERNELS_HEADER_FILES: readonly string[] = [
  ...['amx.h', 'sgemm.h', 'winograd.h', 'conv.h'].map((f) => path.join(FAST_CORE_DIR, f)),
  path.join(HERE, 'cpp', 'mpsc_kernels.hpp'),
  path.resolve(HERE, '../../runtime/cpp/mpsc_half.hpp'),
];

let kernelsHppMemo: string | undefined;
/** mpsc_kernels.hpp as shipped next to generated code: the KERNELS_HEADER_FILES in order, one self-contained file */
export function kernelsHeader(): string {
  kernelsHppMemo ??= KERNELS_HEADER_FILES.map((file) => {
    const text = fs.readFileSync(file, 'utf8').replace(/^#include "(amx|sgemm|winograd)\.h"$/gm, '// ($1.h is inlined above)');
    return `// ---- ${path.relative(path.resolve(HERE, '../..'), file).split(path.sep).join('/')}\n${text}`;
  }).join('\n');
  return kernelsHppMemo;
}

export interface CpuCodegenOptions {
  /** fuse what CPU_FUSIONS lists (fusions.ts, compiler/ir/fuse.ts) and alias input reshapes; default true (MPSC_CPU_FUSE=0: false) */
  fuse?: boolean;
  /**
   * sgemm's large products on the AMX tiles where the build and the CPU allow it (runtime/cpp/fast/amx.h); default
   * true (MPSC_CPU_AMX=0: false, the FMA kernel everywhere: other bits on an AMX machine, for A/B runs)
   */
  amx?: boolean;
  /**
   * the AMX path's parts as a 2D grid of blocks where that packs less (runtime/cpp/fast/sgemm.h detail::part_grid);
   * default true (MPSC_CPU_AMX_GRID=0: false; the same bits either way)
   */
  amxGrid?: boolean;
  /**
   * rows of the FMA kernel's micro-tile (runtime/cpp/fast/sgemm.h MR): 8 by default (MPSC_CPU_MR=12: 12, for A/B on
   * CPUs where more accumulators may pay; the same bits either way, each element being one chain whatever the tile)
   */
  mr?: 8 | 12;
  /**
   * the FMA path's parts as a 2D grid of micro-tiles where that moves fewer floats per part (runtime/cpp/fast/sgemm.h
   * detail::part_grid_fma); default true (MPSC_CPU_FMA_GRID=0: false, for A/B; the same bits either way)
   */
  fmaGrid?: boolean;
  /**
   * how a bf16 x bf16 linear multiplies where the build has AVX-512 BF16 and the AMX tiles do not take it
   * (runtime/cpp/mpsc_half.hpp linear_bf16, MPSC_HALF_BF16): `auto` (default: VDPBF16PS on AMD CPUs, the widened f32
   * GEMM on others), `vnni` or `widen` (MPSC_CPU_BF16, for A/B runs and tests)
   */
  bf16?: Bf16Gemm;
}

export type Bf16Gemm = 'auto' | 'vnni' | 'widen';
/** MPSC_CPU_BF16 (default auto): CpuCodegenOptions.bf16 */
export function cpuBf16Choice(): Bf16Gemm {
  return envChoice('MPSC_CPU_BF16', ['auto', 'vnni', 'widen'], 'auto') as Bf16Gemm;
}

/** MPSC_CPU_MR (default 8): the FMA kernel's micro-tile rows, 8 or 12 (with AVX-512; the 8-lane build keeps its 6) */
export function cpuMrChoice(): 8 | 12 {
  return Number(envChoice('MPSC_CPU_MR', ['8', '12'], '8')) as 8 | 12;
}

/** MPSC_CPU_FMA_GRID (default 1): the FMA path's parts on sgemm.h's 2D grid where it moves half as much (detail::part_grid_fma) */
export function cpuFmaGridChoice(): boolean {
  return envFlag('MPSC_CPU_FMA_GRID', true);
}

/** MPSC_CPU_AMX_GRID (default 1): the AMX path's parts on sgemm.h's 2D grid where it packs less (detail::part_grid) */
export function cpuAmxGridChoice(): boolean {
  return envFlag('MPSC_CPU_AMX_GRID', true);
}

/**
 * Build-time env switches of the CPU generator whose generated code differs by value (MPSC_CPU_FUSE: cpuPrograms'
 * fusions; the others: #defines of the fast core in the model's source): part of the build key (cpuInputsKey), so that
 * a variant never reuses another's cached build (before 8 Dec only MPSC_CPU_FUSE was: `mpsc bench` with
 * MPSC_CPU_AMX=0, MPSC_CPU_MR=12 or MPSC_CPU_FMA_GRID=0 ran the default build)
 */
export const CPU_GENERATOR_ENV: readonly string[] = ['MPSC_CPU_FUSE', 'MPSC_CPU_AMX', 'MPSC_CPU_AMX_GRID', 'MPSC_CPU_MR', 'MPSC_CPU_FMA_GRID', 'MPSC_CPU_BF16'];

/** MPSC_CPU_AMX (default 1): whether the generated code may run sgemm on the AMX tiles (runtime/cpp/fast/amx.h) */
export function cpuAmxChoice(): boolean {
  return envFlag('MPSC_CPU_AMX', true);
}

/** the programs as the CPU backend runs them: fused with CPU_FUSIONS (or none) and planned again */
export function cpuPrograms(ps: ProgramSet, opts: CpuCodegenOptions = {}): ProgramSet {
  const fuse = opts.fuse ?? envFlag('MPSC_CPU_FUSE', true);
  return fuseProgramSet(ps, fuse ? CPU_FUSIONS : NO_FUSIONS);
}

export function generateCpuModel(unfused: ProgramSet, opts: CpuCodegenOptions = {}): GeneratedCpuModel {
  const fuse = opts.fuse ?? envFlag('MPSC_CPU_FUSE', true);
  const ps = cpuPrograms(unfused, { fuse });
  const programs = programsOf(ps);
  const { tensors, bytes: persistentBytes } = persistentTable(programs);
  const tensorIndex = new Map(tensors.map((t, i) => [t.name, i]));
  const kernels: KernelVm[] = [];
  const programVms: object[] = [];
  const summaries: ProgramSummary[] = [];
  programs.forEach((p, pi) => {
    const id = `p${pi}`;
    const r = pointerResolver(p, tensorIndex);
    const calls: { fn: string; slot: number }[] = [];
    const alias: AliasPlan = fuse ? planInputReshapeAliases(p) : { skip: new Set(), redirect: new Map() };
    const nodes = p.graph.nodes.filter((node) => !alias.skip.has(node.id));
    for (let ni = 0; ni < nodes.length; ni++) {
      const node = nodes[ni];
      if (!isOpName(node.op)) throw new Error(`internal: the CPU backend has no kernel for op '${node.op}' (node ${node.id} of ${p.name})`);
      const emit = CPU_KERNELS[node.op];
      if (!emit) throw new Error(`internal: the CPU backend has no kernel for op '${node.op}' (node ${node.id} of ${p.name})`);
      const kc = kernelCtx(p.graph, node, r.ptr, alias);
      // consecutive Adam updates with the same step constants: one kernel, one pool wake-up (optim.ts adamGroup)
      const key = fuse ? adamGroupKey(kc) : null;
      if (key !== null) {
        const group = [kc];
        while (ni + 1 < nodes.length) {
          const next = kernelCtx(p.graph, nodes[ni + 1], r.ptr, alias);
          if (adamGroupKey(next) !== key) break;
          group.push(next);
          ni++;
        }
        if (group.length > 1) {
          const fn = `${id}_k${node.id}_adam_update_x${group.length}`;
          const paths = group.map((g) => g.node.path ?? `node ${g.node.id}`).join(', ');
          kernels.push({ fn, comment: commentText(`${p.name} nodes ${node.id}-${group[group.length - 1].node.id}: adam_update x${group.length} (${paths})`), body: adamGroup(group) });
          calls.push({ fn, slot: kernels.length - 1 });
          continue;
        }
      }
      // a grad-weight matmul and the bias-gradient sum_to over the same rows right after it: one kernel
      if (fuse && node.op === 'matmul' && ni + 1 < nodes.length && nodes[ni + 1].op === 'sum_to') {
        const sc = kernelCtx(p.graph, nodes[ni + 1], r.ptr, alias);
        const sum = columnSumOf(sc);
        const body = sum ? matmulWithColumnSum(kc, sc, sum) : null;
        if (body !== null) {
          const fn = `${id}_k${node.id}_matmul_sum_to`;
          kernels.push({ fn, comment: commentText(`${p.name} nodes ${node.id}-${sc.node.id}: matmul + sum_to (its column sums, fused)${node.path ? ` (${node.path})` : ''}`), body });
          calls.push({ fn, slot: kernels.length - 1 });
          ni++;
          continue;
        }
      }
      // cross_entropy and its gradient over the same logits right after it: one kernel, each row's exps once
      if (fuse && node.op === 'cross_entropy' && ni + 1 < nodes.length && nodes[ni + 1].op === 'cross_entropy_grad') {
        const gc = kernelCtx(p.graph, nodes[ni + 1], r.ptr, alias);
        const body = crossEntropyWithGrad(kc, gc);
        if (body !== null) {
          const fn = `${id}_k${node.id}_cross_entropy_with_grad`;
          kernels.push({ fn, comment: commentText(`${p.name} nodes ${node.id}-${gc.node.id}: cross_entropy + cross_entropy_grad (fused)${node.path ? ` (${node.path})` : ''}`), body });
          calls.push({ fn, slot: kernels.length - 1 });
          ni++;
          continue;
        }
      }
      const fn = `${id}_k${node.id}_${node.op}`;
      const body = withWidenedInputs(kc, emit);
      const fusedNote = node.attrs.relu_grad === true || node.attrs.grad_fn === 'relu'
        ? ' + relu-grad (fused)'
        : node.attrs.epilogue !== undefined ? ` + ${String(node.attrs.epilogue)} (fused)` : node.attrs.relu_in === true ? ' of relu (fused)'
        : node.attrs.add_in === true ? ' of the residual add (fused)' : node.attrs.add_out === true ? ' + residual-gradient add (fused)' : '';
      kernels.push({ fn, comment: commentText(`${p.name} node ${node.id}: ${node.op}${fusedNote}${node.path ? ` (${node.path})` : ''}`), body });
      calls.push({ fn, slot: kernels.length - 1 });
    }
    const inputs = p.inputs.map((vid, j) => {
      const v = p.graph.values[vid];
      return { name: cString(v.name), dtype: DTYPE_ENUM[hostDType(v)], rank: v.shape.length, shapeVar: `${id}_in${j}_shape`, dims: v.shape.length ? v.shape.join(', ') : '0', numel: numel(v.shape) };
    });
    programVms.push({
      id, name: cString(p.name), batch: p.batch, calls, inputs, nInputs: inputs.length,
      outputs: p.outputs.map((o) => ({ ptr: r.ptr(o.value) })), outputNames: p.outputs.map((o) => cString(o.name)), nOutputs: p.outputs.length,
      arenaBytes: r.arenaBytes, nKernels: calls.length,
    });
    summaries.push({
      name: p.name, batch: p.batch, kernels: calls.length, arenaBytes: r.arenaBytes,
      inputs: p.inputs.map((vid) => ({ name: p.graph.values[vid].name, dtype: p.graph.values[vid].dtype, shape: [...p.graph.values[vid].shape] })),
      outputs: p.outputs.map((o) => o.name),
    });
  });
  const modelCc = MODEL({
    amx: opts.amx ?? cpuAmxChoice(), amxGrid: opts.amxGrid ?? cpuAmxGridChoice(), mr12: (opts.mr ?? cpuMrChoice()) === 12,
    fmaGrid: opts.fmaGrid ?? cpuFmaGridChoice(), bf16: { auto: '', vnni: '1', widen: '2' }[opts.bf16 ?? cpuBf16Choice()],
    modelComment: commentText(ps.model), modelName: cString(ps.model), kernels, programs: programVms, nPrograms: programVms.length,
    tensors: tensors.map((t, i) => ({
      name: cString(t.name), dtype: DTYPE_ENUM[t.dtype], kind: KIND_ENUM[t.kind], rank: t.shape.length, shapeVar: `t${i}_shape`,
      dims: t.shape.length ? t.shape.join(', ') : '0', numel: t.numel, offset: t.offset,
    })),
    nTensors: tensors.length, persistentBytes,
  });
  return { files: { 'model.cc': modelCc, 'mpsc_kernels.hpp': kernelsHeader() }, tensors, persistentBytes, programs: summaries };
}
