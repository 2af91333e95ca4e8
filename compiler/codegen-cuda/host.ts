/**
 * host: the CUDA backend's host code, `model_cuda.cu`: an implementation of the model ABI
 * (runtime/cpp/mpsc_model.h) over the plan of plan.ts. Consumes a CudaPlan and the kernels'
 * file name; produces CUDA C++ text that
 *  - at create: finds a device (a clear message when there is none, or the driver is too old
 *    for the runtime), makes the ONE device allocation of the plan (out of memory names the
 *    planned bytes and what the GPU has free), zero-fills it, creates a compute stream and a copy
 *    stream and, per program, two pinned (mapped) staging sets, and raises the shared-memory limit of
 *    each kernel with more than 48 KB of it (dynamic: passed at its launch; plan.ts `dyn`);
 *  - per run: uploads the host's persistent tensors when the host changed them (checkpoint load,
 *    init), waits until the GPU is done with the staging set it is about to fill (the step before
 *    the previous one), copies the batch and the step scalars into it, copies its upload part to
 *    the set's device image on the copy stream (one cudaMemcpyAsync; it overlaps the previous
 *    step's kernels), makes the compute stream wait for that copy and launches the set's CUDA graph
 *    (captured ONCE per staging set, replayed afterwards: kernels read the scalars from device
 *    memory, so nothing is re-captured; captured on the lanes of lanes.ts: a node on lane c > 0 is
 *    launched on stream b->lane[c], after events of the earlier nodes it depends on, and every lane
 *    joins the capture's stream at the end). The graph's last node gathers the scalar outputs into
 *    the staging set through its mapped device address; only when the caller asks for the outputs
 *    (outputs != NULL) does the host wait for the step and read them;
 *  - backend_to_host / backend_from_host: keep the host copy of the persistent block (what
 *    read / write / checkpoints see) in step with the device copy;
 *  - data-parallel training (runtime/ddp): backend_collective_id / _init make the NCCL communicator
 *    (runtime/cuda/mpsc_nccl.cpp, where CMake found NCCL: MPSC_NCCL) and backend_allreduce_grads
 *    enqueues, on the compute stream after the last run, one NCCL group averaging every gradient
 *    accumulator in place (in the reverse of the persistent table order: the last layers' gradients
 *    first, as the backward produces them). Without NCCL they fail with "built without NCCL".
 * Every CUDA call and launch is checked; failures become ctx->error messages (never a crash).
 * Kernel variant: the tensor-core (3xTF32) GEMMs unless MPSC_CUDA_PLAIN=1 picks the fp32 FFMA
 * ones (bench/cuda_check.sh runs both). MPSC_CUDA_MIRROR_ARENA=1 copies the arena back to
 * ctx->arena after each step whose outputs are read (the kernel checks read intermediate values).
 * MPSC_CUDA_PROFILE=1 launches the kernels one by one (no graph) with a CUDA event after each and
 * prints, when the model is freed, every kernel's mean time per step (stderr): where a step's time goes
 * (each program's first step only as a total: it includes loading the module's kernels).
 */
import { cString, commentText } from '../cfamily/text.js';
import type { PersistentTable } from '../codegen-metal/layout.js';
import { CUDA } from './cuda_dialect.js';
import type { CudaPlan, GraphNodePlan, KernelArgPlan, KernelNodePlan, LtNodePlan, ProgramPlan } from './plan.js';
import { planLanes, type LaneSchedule } from './lanes.js';
import { pdlHostHelper, type PdlMode } from './pdl.js';

const LT_TYPE = { f32: 'MPSC_LT_F32', f16: 'MPSC_LT_F16', bf16: 'MPSC_LT_BF16' } as const;
const LT_EPI = { default: 'MPSC_LT_EPI_DEFAULT', bias: 'MPSC_LT_EPI_BIAS', bgradb: 'MPSC_LT_EPI_BGRADB' } as const;

/** the model's cuBLASLt calls (all programs, LtNodePlan.index order): their descriptions for mpsc_cublaslt.h */
function ltTable(plan: CudaPlan): string {
  const calls = plan.programs.flatMap((p) => p.nodes.filter((n): n is LtNodePlan => n.kind === 'cublaslt')).sort((x, y) => x.index - y.index);
  let s = `const int NLT = ${calls.length};  // cuBLASLt calls (GEMM nodes whose rule chose cuBLASLt)\n`;
  if (!calls.length) return s + '\n';
  s += '#ifdef MPSC_CUBLASLT\n';
  s += `const size_t LT_WORKSPACE_OFFSET = ${plan.ltWorkspace.offset}, LT_WORKSPACE_BYTES = ${plan.ltWorkspace.bytes / plan.lanes};  // per lane (${plan.lanes})\n`;
  s += '// m, n, k, transA, transB, rowsA, colsA, lda, rowsB, colsB, ldb, ldd, batch, strideA, strideB, strideD, A/B type, D type, epilogue,\n// offsets of A, B, D, bias; node; what; compute (3xTF32: A and B are split operands in the scratch region)\n';
  s += 'const MpscLtGemm LT_GEMMS[NLT] = {\n';
  for (const c of calls) {
    const g = c.gemm;
    // a bias / BGRADB call without its bound vector would read or write offset 0 (the persistent block)
    if (g.epilogue !== 'default' && !c.bias) throw new Error(`internal: cuBLASLt call ${c.index} (node ${c.node}): ${g.epilogue} epilogue without a bound bias vector`);
    s += `  { ${g.m}, ${g.n}, ${g.k}, ${g.transA ? 1 : 0}, ${g.transB ? 1 : 0}, ${g.rowsA}, ${g.colsA}, ${g.lda}, ${g.rowsB}, ${g.colsB}, ${g.ldb}, ${g.ldd}, ` +
      `${g.batch}, ${g.strideA}, ${g.strideB}, ${g.strideD}, ${LT_TYPE[g.abType]}, ${LT_TYPE[g.dType]}, ${LT_EPI[g.epilogue]}, ` +
      `${c.a.offset}, ${c.b.offset}, ${c.d.offset}, ${c.bias ? c.bias.offset : 0}, ${c.node}, ${cString(`${c.op}: ${g.what}`)}, ${g.tf32x3 ? 'MPSC_LT_COMPUTE_TF32X3' : 'MPSC_LT_COMPUTE_32F'} },\n`;
  }
  s += '};\n#else\n';
  s += `const int LT_GEMMS_NODE[NLT] = { ${calls.map((c) => c.node).join(', ')} };\n`;
  s += `const char* const LT_GEMMS_WHAT[NLT] = { ${calls.map((c) => cString(`${c.op}: ${c.gemm.what}`)).join(', ')} };\n`;
  return s + '#endif\n\n';
}

/** the host's lt_setup (create): the cuBLASLt calls' descriptors, or nothing to do when the model has none */
function ltSetupFn(plan: CudaPlan): string {
  if (!plan.programs.some((p) => p.nodes.some((n) => n.kind === 'cublaslt'))) return 'bool lt_setup(mpsc_ctx* ctx, Backend* b) {\n  (void)ctx; (void)b;\n  return true;\n}\n';
  return `/**
 * The cuBLASLt calls: descriptors and one algorithm each, tuned among the heuristic's (mpsc_cublaslt.cpp); a call
 * without an algorithm runs its generated kernels. One line to stderr says which GEMM path the
 * model's GEMM nodes take (MPSC_CUDA_GEMM_LOG=1: one line per call, with the reason).
 */
bool lt_setup(mpsc_ctx* ctx, Backend* b) {
  (void)ctx; (void)b;
  const char* log = std::getenv("MPSC_CUDA_GEMM_LOG");
  const bool each = log && log[0] == '1';
#ifdef MPSC_CUBLASLT
  char why0[sizeof ctx->error] = {0};
  b->lt = mpsc_lt_create(LT_GEMMS, NLT, b->dev, LT_WORKSPACE_OFFSET, LT_WORKSPACE_BYTES, why0, sizeof why0);
  if (!b->lt) {
    // no cuBLASLt handle (a library / driver mismatch): every GEMM node runs its generated kernels
    std::fprintf(stderr, "mpsc cuda: cuBLASLt is linked but unusable (%s): all %d cuBLASLt-eligible GEMM nodes run as generated kernels\\n", why0, NLT);
    b->serial = true;
    return true;
  }
  int ok = 0, x3 = 0;
  for (int i = 0; i < NLT; ++i) {
    b->lt_ok[i] = mpsc_lt_ok(b->lt, i);
    b->lt_epi[i] = mpsc_lt_epilogue(b->lt, i);
    // one eager call before any graph capture (loads cuBLASLt's kernel, checks the call); it writes only D (and a
    // BGRADB call its bias gradient: arena bytes), which the first step recomputes (the persistent block is uploaded
    // again before the first step: host_dirty)
    const MpscLtGemm& g = LT_GEMMS[i];
    char why[sizeof ctx->error] = {0};
    if (b->lt_ok[i] && !(mpsc_lt_run(b->lt, i, b->dev + g.offA, b->dev + g.offB, b->dev + g.offD, b->stream, 0, why, sizeof why) &&
                         cudaStreamSynchronize(b->stream) == cudaSuccess)) {
      b->lt_ok[i] = false;
      cudaGetLastError();
      std::fprintf(stderr, "mpsc cuda: GEMM node %d (%s): generated kernel: the first cuBLASLt call failed (%s)\\n", g.node, g.what, why[0] ? why : "cudaStreamSynchronize");
    } else if (each || !b->lt_ok[i]) std::fprintf(stderr, "mpsc cuda: GEMM node %d (%s): %s\\n", g.node, g.what, mpsc_lt_note(b->lt, i));
    ok += b->lt_ok[i] ? 1 : 0;
    x3 += b->lt_ok[i] && g.compute == MPSC_LT_COMPUTE_TF32X3 ? 1 : 0;
  }
  b->serial = ok < NLT;  // a generated fallback runs: the graphs are captured on one stream
  std::fprintf(stderr, "mpsc cuda: %d of %d GEMM calls run on cuBLASLt (fp32 accumulation; %d of them 3xTF32 split operands), %d as generated kernels (no algorithm)%s\\n",
               ok, NLT, x3, NLT - ok, each ? "" : "; MPSC_CUDA_GEMM_LOG=1 lists every call");
#else
  std::fprintf(stderr, "mpsc cuda: built without cuBLASLt (CMake found no CUDA::cublasLt): all %d cuBLASLt-eligible GEMM nodes run as generated kernels\\n", NLT);
  if (each) for (int i = 0; i < NLT; ++i) std::fprintf(stderr, "mpsc cuda: GEMM node %d (%s): generated kernel\\n", LT_GEMMS_NODE[i], LT_GEMMS_WHAT[i]);
  b->serial = NLT > 0;  // the generated fallbacks run: the graphs are captured on one stream
#endif
  return true;
}
`;
}

const dim3 = (d: number[]) => `dim3(${d[0]}u, ${d[1]}u, ${d[2]}u)`;

/**
 * one generated kernel's launch and its check (statements at `indent`); with PDL (pdl.ts) through mpsc_launch, the
 * attribute set when the previous operation on the stream was a generated kernel (`pk`), which it then is
 */
function kernelLaunch(p: ProgramPlan, n: KernelNodePlan, indent: string, st = 'st', pdl = false, scratchAt = 0): string {
  const args = n.args.map((a) => {
    const t = `${a.access === 'r' ? 'const ' : ''}${CUDA.typeName(a.type)}*`;
    return `reinterpret_cast<${t}>(${devAt(p, a)})`;
  });
  // its lane's slice of the scratch region (scratchAt bytes in: lanes.ts LaneSchedule.ownScratch)
  if (n.scratch) args.push(`reinterpret_cast<float*>(dev + SCRATCH_OFFSET${scratchAt ? ` + ${scratchAt}` : ''})`);
  args.push(`reinterpret_cast<const StepParams*>(dev + ${p.uploadOffset + p.scalarsHostOffset} + set * ${p.setBytes})`);
  const what = cString(`${n.kernel} (node ${n.node}: ${n.op})`);
  if (pdl) {
    const call = (k: string, block: number[], dyn = 0) => `mpsc_launch(pdl && pk, ${k}, ${dim3(n.grid)}, ${dim3(block)}, ${dyn}, ${st}, ${args.join(', ')})`;
    const e = n.mma ? `mma ? ${call(n.mma.kernel, n.mma.block, n.mma.dyn)}\n${indent}    : ${call(n.kernel, n.block, n.dyn)}` : call(n.kernel, n.block, n.dyn);
    return `${indent}if (!ck(ctx, ${e}, ${what})) return false;\n${indent}pk = true;\n`;
  }
  const call = (k: string, block: number[], dyn = 0) => `${k}<<<${dim3(n.grid)}, ${dim3(block)}, ${dyn}, ${st}>>>(${args.join(', ')});`;
  const body = n.mma ? `if (mma) ${call(n.mma.kernel, n.mma.block, n.mma.dyn)}\n${indent}else ${call(n.kernel, n.block, n.dyn)}` : call(n.kernel, n.block, n.dyn);
  return `${indent}${body}\n${indent}if (!ck(ctx, cudaGetLastError(), ${what})) return false;\n`;
}

/** the device address of a bound tensor (batch inputs: in this staging set's image) */
const devAt = (p: ProgramPlan, a: KernelArgPlan) => `dev + ${a.offset}${a.perSet ? ` + set * ${p.setBytes}` : ''}`;

/**
 * create's smem_setup: each kernel with dynamic shared memory (plan.ts `dyn`, past 48 KB) gets its limit raised to
 * what it launches with (cudaFuncAttributeMaxDynamicSharedMemorySize; before any launch or capture)
 */
function smemSetupFn(plan: CudaPlan): string {
  const dyn = new Map<string, number>();
  const note = (k: string, bytes?: number) => {
    if (bytes) dyn.set(k, Math.max(bytes, dyn.get(k) ?? 0));
  };
  for (const p of plan.programs)
    for (const n of p.nodes)
      for (const k of n.kind === 'kernel' ? [n] : [...n.fallback, ...n.after]) {
        note(k.kernel, k.dyn);
        if (k.mma) note(k.mma.kernel, k.mma.dyn);
      }
  const lines = [...dyn].map(([k, bytes]) =>
    `  if (!ck(ctx, cudaFuncSetAttribute(${k}, cudaFuncAttributeMaxDynamicSharedMemorySize, ${bytes}), ${cString(`cudaFuncSetAttribute (${k}: ${bytes} bytes of shared memory)`)})) return false;\n`);
  return `static bool smem_setup(mpsc_ctx* ctx) {\n${lines.join('')}${lines.length ? '' : '  (void)ctx;\n'}  return true;\n}\n`;
}

/**
 * graph node k on lane c (lanes.ts; lane 0 is the capture's own stream `st`): its waits for other lanes' nodes,
 * a kernel or a cuBLASLt call (its fallback kernels when the call has no algorithm or the build no cuBLASLt),
 * then the profiling event, or its own event when a later node on another lane waits for it
 */
function launch(p: ProgramPlan, n: GraphNodePlan, k: number, sched: LaneSchedule, recorded: boolean[], pdl: PdlMode = 'off', scratchLane = 0,
  streams: string[] = [], switchAfter = -1): string {
  const on = pdl !== 'off';
  // its lane's stream (streams[k]: the stream recordFn chose, a lane's high-priority one for a critical node)
  const c = sched.lane[k], st = streams[k] ?? (c === 0 ? 'st' : `ls${c}`);
  // the kernels' scratch slice: their lane's (scratchLane: its bytes, 0 when the program shares slice 0)
  const kl = (x: KernelNodePlan, indent: string) => kernelLaunch(p, x, indent, st, on, c * scratchLane);
  let body: string;
  if (n.kind === 'kernel') body = kl(n, '    ');
  else {
    const lt = `    if (!mpsc_lt_run(b->lt, ${n.index}, ${devAt(p, n.a)}, ${devAt(p, n.b)}, ${devAt(p, n.d)}, ${st}, ${c}, ctx->error, sizeof ctx->error)) return false;\n` +
      (on ? `    pk = ${pdl === 'all' ? 'true' : 'false'};  // after a cuBLASLt call (pdl.ts: ${pdl === 'all' ? 'its last operation taken to be a kernel' : 'mode gen'})\n` : '');
    // the fallback's kernels for what the call does not compute: after a BGRADB call only when cuBLASLt runs it without the epilogue
    const unfused = !n.unfused.length ? '' : n.gemm.epilogue !== 'bgradb' ? n.unfused.map((a) => kl(a, '      ')).join('')
      : `      if (!b->lt_epi[${n.index}]) {  // cuBLASLt runs the call without its epilogue\n${n.unfused.map((a) => kl(a, '        ')).join('')}      }\n`;
    body = `#ifdef MPSC_CUBLASLT\n    if (b->lt_ok[${n.index}]) {  // node ${n.node}: ${commentText(n.gemm.what)}\n${n.before.map((a) => kl(a, '      ')).join('')}${lt}${n.after.map((a) => kl(a, '      ')).join('')}${unfused}    } else\n#endif\n` +
      `    {  // the generated kernels\n${n.fallback.map((f) => kl(f, '      ')).join('')}    }\n`;
  }
  // switchAfter: the lane's previous node, captured on the lane's other stream (lane priorities; -1: none)
  const order = switchAfter >= 0 ? [switchAfter] : [];
  const waits = [...order, ...sched.waits[k]].map((d) => `    if (!one && !lane_wait(ctx, b, ${st}, ${d})) return false;  // after node ${d} (lane ${sched.lane[d]}${d === switchAfter ? ', its other stream' : ''})\n`).join('');
  const mark = recorded[k] ? `    if (!one && !lane_mark(ctx, b, ${st}, ${k})) return false;\n` : '';
  return `  {${sched.lanes > 1 ? `  // lane ${c}` : ''}\n${waits}${body}    if (ev && !ck(ctx, cudaEventRecord(ev[${k + 1}], st), "cudaEventRecord")) return false;\n${mark}  }\n`;
}

/** the kernel copying program i's scalar outputs (arena floats) into the staging set (mapped pinned memory) */
function gatherKernel(p: ProgramPlan, i: number): string {
  if (!p.outputs.length) return '';
  return `// program ${commentText(p.name)}: its scalar outputs -> the staging set\n` +
    `__global__ void mpsc_gather_p${i}(const unsigned char* __restrict__ dev, float* __restrict__ out) {\n` +
    p.outputs.map((o, k) => `  if (threadIdx.x == ${k}u) out[${k}] = *reinterpret_cast<const float*>(dev + ${o.deviceOffset});  // ${commentText(o.name)}\n`).join('') +
    '}\n\n';
}

function recordFn(p: ProgramPlan, i: number, buckets: GradBuckets, sched: LaneSchedule, pdl: PdlMode = 'off', scratchLane = 0): string {
  const L = sched.lanes;
  let s = `// program ${commentText(p.name)}: the graph's nodes in plan order (${p.kernels} kernels, then the output gather)${L > 1 ? `, captured on ${L} lanes\n// (lanes.ts: a node waits for the earlier nodes of other lanes that touch its bytes; every lane joins lane 0 at the end)` : ''}.\n`;
  s += `// set: the staging set (its upload image in the device allocation); out: its outputs (device address of mapped\n`;
  s += `// pinned memory); ev (profiling only, NULL when captured): an event after each kernel${L > 1 ? ', all on st (one by one)' : ''}\n`;
  s += `bool record_p${i}(mpsc_ctx* ctx, Backend* b, unsigned char* dev, int set, float* out, cudaStream_t st, bool mma, cudaEvent_t* ev) {\n  (void)b; (void)mma; (void)set; (void)out;\n`;
  if (pdl !== 'off') s += `  // programmatic dependent launch (pdl.ts): not in a profiled step; pk: the last operation on st was a generated kernel\n  const bool pdl = !ev;\n  bool pk = false;\n  (void)pdl; (void)pk;\n`;
  const mine = p.name === 'train_step' ? buckets.nodes : [];
  // lane priorities (lanes.ts lanePriority): a critical node on its lane's high-priority stream lh<c>; not with the
  // data-parallel buckets (their joins take lane 0 to be st)
  const prio = L > 1 && !!sched.critical && !mine.length;
  const streams = !prio ? [] : sched.lane.map((c, k) => (sched.critical![k] ? `lh${c}` : c === 0 ? 'st' : `ls${c}`));
  // the lanes' streams that capture something (with priorities, ls<l> only where lane l has a node off the critical path)
  const used = Array.from({ length: L }, (_, l) => l).filter((l) => l > 0 && sched.lane.some((c, k) => c === l && (!prio || streams[k] === `ls${l}`)));
  const hi = Array.from({ length: L }, (_, l) => l).filter((l) => streams.includes(`lh${l}`));
  if (used.length || hi.length) {
    s += `  // one stream when profiling (ev) or when a cuBLASLt call runs its generated fallback (b->serial: lanes.ts left those out)\n`;
    s += `  const bool one = ev || b->serial;\n`;
    for (const l of used) s += `  const cudaStream_t ls${l} = one ? st : b->lane[${l}];\n`;
    for (const l of hi) s += `  const cudaStream_t lh${l} = one ? st : b->lane_hi[${l}];  // lane ${l}'s critical nodes\n`;
    // every lane joins the capture at its start (a lane's first node may have nothing to wait for)
    s += `  if (!one && !lane_fork(ctx, b, st, {${[...used.map((l) => `ls${l}`), ...hi.map((l) => `lh${l}`)].join(', ')}})) return false;\n`;
  }
  // data-parallel overlap: before a bucket's all-reduce on st, st waits for every lane's nodes so far (their events recorded)
  const recorded = [...sched.recorded];
  // lane priorities: switchAfter[k], node k's previous node on its lane where that one is on the lane's other stream
  // (k waits for it; it records its event); lane 0's last node records its event when it is on lh0 (st waits for it
  // at the end)
  const switchAfter = sched.lane.map(() => -1);
  const last0 = sched.lane.lastIndexOf(0);
  if (prio) {
    const prevOn = new Array<number>(L).fill(-1);
    sched.lane.forEach((c, k) => {
      const j = prevOn[c];
      if (j >= 0 && streams[j] !== streams[k]) { switchAfter[k] = j; recorded[j] = true; }
      prevOn[c] = k;
    });
    if (last0 >= 0 && streams[last0] !== 'st') recorded[last0] = true;
  }
  // each bucket node's last node so far on every lane
  const tails = new Map(mine.map((k) => [k, Array.from({ length: L }, (_, l) => sched.lane.slice(0, k + 1).lastIndexOf(l))]));
  if (L > 1) for (const ts of tails.values()) ts.forEach((t, l) => { if (l > 0 && t >= 0) recorded[t] = true; });
  p.nodes.forEach((n, k) => {
    s += launch(p, n, k, sched, recorded, pdl, scratchLane, streams, switchAfter[k]);
    const j = mine.indexOf(k);
    // data-parallel overlap: this node wrote the last gradient of bucket j: its all-reduce starts on the side stream
    if (j >= 0) {
      const joins = L > 1 ? tails.get(k)!.map((t, l) => (l > 0 && t >= 0 ? `    if (!one && !lane_wait(ctx, b, st, ${t})) return false;\n` : '')).join('') : '';
      const after = pdl !== 'off' ? '  pk = false;\n' : '';
      s += joins ? `#ifdef MPSC_NCCL\n  if (b->overlap) {\n${joins}    if (!bucket_allreduce(ctx, b, st, ${j})) return false;\n${after ? '  ' + after : ''}  }\n#endif\n`
        : `#ifdef MPSC_NCCL\n  if (b->overlap && !bucket_allreduce(ctx, b, st, ${j})) return false;\n${after}#endif\n`;
    }
  });
  const joins = (prio && last0 >= 0 && streams[last0] !== 'st' ? `  if (!one && !lane_wait(ctx, b, st, ${last0})) return false;  // lane 0's last node (on lh0)\n` : '') +
    sched.joins.map((t, l) => (t >= 0 ? `  if (!one && !lane_wait(ctx, b, st, ${t})) return false;  // lane ${l}'s last node\n` : '')).join('');
  if (joins) s += `  // every lane joins lane 0\n${joins}`;
  if (mine.length) s += `#ifdef MPSC_NCCL\n  if (b->overlap && !bucket_join(ctx, b, st)) return false;  // the step ends after every bucket's all-reduce\n#endif\n`;
  if (p.outputs.length) {
    s += `  mpsc_gather_p${i}<<<1, ${p.outputs.length}, 0, st>>>(dev, out);\n`;
    s += `  if (!ck(ctx, cudaGetLastError(), "the output gather of ${commentText(p.name)}")) return false;\n`;
  }
  return s + '  return true;\n}\n';
}

const nodeName = (n: GraphNodePlan) => (n.kind === 'kernel' ? `${n.kernel} (node ${n.node}: ${n.op})` : `cuBLASLt call ${n.index} (node ${n.node}: ${n.op})`);
const kernelNames = (p: ProgramPlan, i: number) =>
  `const char* const knames_p${i}[] = { ${p.nodes.map((n) => cString(nodeName(n)) + ', ').join('')}nullptr };\n`;

function runFn(p: ProgramPlan, i: number): string {
  const copyIn = p.inputs.map((inp, k) => `  std::memcpy(stage + ${inp.hostOffset}, inputs[${k}], ${inp.bytes});\n`).join('');
  const readOut = p.outputs.map((o, k) => `    { float v; std::memcpy(&v, stage + ${o.hostOffset}, 4); outputs[${k}] = v; }\n`).join('');
  const name = commentText(p.name);
  return (
    `int run_p${i}(mpsc_ctx* ctx, const void* const* inputs, const mpsc_scalars* sc, double* outputs) {\n` +
    `  Backend* b = static_cast<Backend*>(ctx->backend);\n` +
    `  Prog& q = b->progs[${i}];\n` +
    `  if (!upload_if_dirty(ctx, b)) return 1;\n` +
    `  const int s = q.next;\n  q.next ^= 1;\n` +
    `  // the GPU must be done with this staging set and its device image (the step before the previous one)\n` +
    `  if (q.pending[s] && !ck(ctx, cudaEventSynchronize(q.done[s]), "a previous step")) return 1;\n` +
    `  q.pending[s] = false;\n` +
    `  unsigned char* stage = q.stage[s];\n` +
    `  (void)inputs;\n${copyIn}` +
    `  std::memcpy(stage + ${p.scalarsHostOffset}, sc, sizeof(StepParams));\n` +
    `  // batch + scalars -> the set's device image on the copy stream, overlapping the step now running\n` +
    `  if (!ck(ctx, cudaMemcpyAsync(b->dev + ${p.uploadOffset} + s * ${p.setBytes}, stage, ${p.uploadBytes}, cudaMemcpyHostToDevice, b->copy), "copying the ${name} batch") ||\n` +
    `      !ck(ctx, cudaEventRecord(q.copied[s], b->copy), "cudaEventRecord") ||\n` +
    `      !ck(ctx, cudaStreamWaitEvent(b->stream, q.copied[s], 0), "cudaStreamWaitEvent")) return 1;\n` +
    `  float* out = reinterpret_cast<float*>(q.stage_dev[s] + ${p.outputs.length ? p.outputs[0].hostOffset : 0});\n` +
    `  if (b->profile) {\n` +
    `    if (!profile_step(ctx, b, record_p${i}, s, out, q, ${p.nodes.length})) return 1;\n` +
    `  } else {\n` +
    `    if (!q.exec[s] && !capture(ctx, b, record_p${i}, s, out, &q.exec[s], ${cString(p.name)})) return 1;\n` +
    `    if (!ck(ctx, cudaGraphLaunch(q.exec[s], b->stream), "launching the ${name} graph")) return 1;\n` +
    `  }\n` +
    `  if (!ck(ctx, cudaEventRecord(q.done[s], b->stream), "cudaEventRecord")) return 1;\n` +
    `  q.pending[s] = true;\n  b->device_newer = true;\n` +
    `  if (outputs) {\n` +
    `    if (!ck(ctx, cudaEventSynchronize(q.done[s]), "the ${name} step")) return 1;\n` +
    `${readOut}` +
    `    // MPSC_CUDA_MIRROR_ARENA=1 (bench/cuda_check.ts): the arena is copied to the host after each step, for kernel checks\n` +
    `    if (b->mirror && !ck(ctx, cudaMemcpy(ctx->arena, b->dev + ARENA_OFFSET, ARENA_BYTES < (size_t)ctx->arena_bytes ? ARENA_BYTES : (size_t)ctx->arena_bytes, cudaMemcpyDeviceToHost), "mirroring the arena")) return 1;\n` +
    `  }\n  return 0;\n}\n`
  );
}

/**
 * The data-parallel all-reduce (runtime/ddp): the gradient accumulators in the order train_step finishes
 * them (by the graph node that writes each last; table order within a node) and, for the overlap, the
 * buckets: consecutive accumulators of at least BUCKET_BYTES, each all-reduced on a side stream right
 * after the node that finishes its last accumulator, while the rest of the backward runs. No buckets (nodes: []) when an accumulator is read later in train_step
 * (fp16's gradient norm) or written by no node: then the all-reduce runs after the step.
 */
export interface GradBuckets {
  grads: { name: string; offset: number; count: number }[];
  /** train_step graph node index of bucket j's last writer */
  nodes: number[];
  /** bucket j holds grads[first[j] .. first[j + 1]) */
  first: number[];
}

/** the smallest bucket (bytes of accumulators) before the next one starts: PyTorch DDP's default bucket_cap_mb, 25 MiB */
export const BUCKET_BYTES = 25 * 1024 * 1024;

export function gradBuckets(plan: CudaPlan, table: PersistentTable): GradBuckets {
  const tensors = table.tensors.filter((t) => t.kind === 'gradacc');
  const ts = plan.programs.find((p) => p.name === 'train_step');
  const argsOf = (n: GraphNodePlan): KernelArgPlan[] => (n.kind === 'kernel' ? n.args : [...n.fallback, ...n.after].flatMap((k) => k.args));
  const placed = tensors.map((t, i) => {
    const off = plan.persistent.offset + t.offset;
    const bytes = t.shape.reduce((a, b) => a * b, 1) * 4;
    const touches = (a: KernelArgPlan) => a.offset < off + bytes && off < a.offset + a.bytes;
    let last = -1;
    ts?.nodes.forEach((n, k) => { if (argsOf(n).some((a) => a.access !== 'r' && touches(a))) last = k; });
    const readLater = last >= 0 && ts!.nodes.slice(last + 1).some((n) => argsOf(n).some(touches));
    return { name: t.name, offset: t.offset, count: bytes / 4, last, readLater, i };
  });
  const overlap = placed.length > 0 && placed.every((g) => g.last >= 0 && !g.readLater);
  const order = overlap ? [...placed].sort((a, b) => a.last - b.last || a.i - b.i) : [...placed].reverse();
  // buckets of at least BUCKET_BYTES (PyTorch DDP's bucket_cap_mb), closed at a node boundary: a bucket
  // ends after the node that writes its last accumulator
  const nodes: number[] = [];
  const first: number[] = [];
  if (overlap) {
    let bytes = 0;
    order.forEach((g, k) => {
      if (k === 0 || (bytes >= BUCKET_BYTES && g.last !== order[k - 1].last)) {
        if (k > 0) nodes.push(order[k - 1].last);
        first.push(k);
        bytes = 0;
      }
      bytes += g.count * 4;
    });
    nodes.push(order[order.length - 1].last);
  }
  first.push(order.length);
  return { grads: order.map(({ name, offset, count }) => ({ name, offset, count })), nodes: overlap ? nodes : [], first: overlap ? first : [0, order.length] };
}

/** the accumulators and buckets as C tables (NCCL builds only) */
function gradTables(bk: GradBuckets): string {
  const n = bk.grads.length;
  return `#ifdef MPSC_NCCL
// data-parallel training: the gradient accumulators the all-reduce averages, in the order train_step finishes them
${n ? `const int NGRAD = ${n};
const size_t GRAD_OFFSET[NGRAD] = { ${bk.grads.map((g) => g.offset).join(', ')} };
const int64_t GRAD_COUNT[NGRAD] = { ${bk.grads.map((g) => g.count).join(', ')} };
` : ''}// buckets (MPSC_DDP_OVERLAP=1): bucket j = accumulators BUCKET_FIRST[j] .. BUCKET_FIRST[j + 1], all-reduced after train_step
// graph node ${bk.nodes.length ? bk.nodes.join(', ') : '(none)'} respectively
const int NBUCKET = ${bk.nodes.length};${bk.nodes.length ? `
const int BUCKET_FIRST[NBUCKET + 1] = { ${bk.first.join(', ')} };` : ''}
#endif
`;
}

/** the lanes' event helpers (lanes.ts): stream s waits for node k's event / records it */
function lanesFns(plan: CudaPlan): string {
  if (plan.lanes < 2) return '';
  return `bool lane_wait(mpsc_ctx* ctx, Backend* b, cudaStream_t s, int k) {
  return ck(ctx, cudaStreamWaitEvent(s, b->lane_ev[k], 0), "cudaStreamWaitEvent (graph lanes)");
}

bool lane_mark(mpsc_ctx* ctx, Backend* b, cudaStream_t s, int k) {
  return ck(ctx, cudaEventRecord(b->lane_ev[k], s), "cudaEventRecord (graph lanes)");
}

/** the lanes' streams ls start after what st has captured so far: so they are part of st's capture */
bool lane_fork(mpsc_ctx* ctx, Backend* b, cudaStream_t st, std::initializer_list<cudaStream_t> ls) {
  if (!ck(ctx, cudaEventRecord(b->lane_fork, st), "cudaEventRecord (graph lanes)")) return false;
  for (cudaStream_t l : ls)
    if (!ck(ctx, cudaStreamWaitEvent(l, b->lane_fork, 0), "cudaStreamWaitEvent (graph lanes)")) return false;
  return true;
}
`;
}

/** the side-stream bucket all-reduce of train_step's graph and its join (NCCL builds with buckets only) */
function bucketFns(bk: GradBuckets): string {
  if (!bk.nodes.length) return '';
  return `#ifdef MPSC_NCCL
/** bucket j: after the node that wrote its last gradient (an event on the step's stream), one NCCL group on the side stream */
bool bucket_allreduce(mpsc_ctx* ctx, Backend* b, cudaStream_t st, int j) {
  if (!ck(ctx, cudaEventRecord(b->bucket_ev[j], st), "cudaEventRecord (gradient bucket)") ||
      !ck(ctx, cudaStreamWaitEvent(b->side, b->bucket_ev[j], 0), "cudaStreamWaitEvent (gradient bucket)")) return false;
  float* ptrs[NGRAD];
  const int n = BUCKET_FIRST[j + 1] - BUCKET_FIRST[j];
  for (int i = 0; i < n; ++i) ptrs[i] = reinterpret_cast<float*>(b->dev + PERSISTENT_OFFSET + GRAD_OFFSET[BUCKET_FIRST[j] + i]);
  b->graph_allreduce = true;
  return mpsc_nccl_allreduce_avg(b->nccl, ptrs, GRAD_COUNT + BUCKET_FIRST[j], n, b->side, ctx->error, sizeof ctx->error);
}

/** the step's stream waits for every bucket's all-reduce */
bool bucket_join(mpsc_ctx* ctx, Backend* b, cudaStream_t st) {
  return ck(ctx, cudaEventRecord(b->bucket_ev[NBUCKET], b->side), "cudaEventRecord (gradient buckets done)") &&
         ck(ctx, cudaStreamWaitEvent(st, b->bucket_ev[NBUCKET], 0), "cudaStreamWaitEvent (gradient buckets done)");
}
#endif
`;
}

/**
 * The data-parallel hooks (runtime/ddp): the three collective functions over runtime/cuda/mpsc_nccl.h,
 * or their "built without NCCL" failures.
 */
function collectiveFns(bk: GradBuckets): string {
  const n = bk.grads.length;
  const noNccl = 'built without NCCL: CMake found no nccl.h / libnccl when this model was built, so --gpus cannot run it: install NCCL (e.g. the libnccl2 and libnccl-dev packages, or set NCCL_HOME) and train again (the model is rebuilt)';
  return `int32_t backend_collective_id(mpsc_ctx* ctx, void* p, unsigned char* id, int32_t len) {
  (void)p; (void)id; (void)len;
#ifdef MPSC_NCCL
  return mpsc_nccl_unique_id(id, len, ctx->error, sizeof ctx->error);
#else
  std::snprintf(ctx->error, sizeof ctx->error, ${cString(noNccl)});
  return -1;
#endif
}

int backend_collective_init(mpsc_ctx* ctx, void* p, int32_t nranks, int32_t rank, const unsigned char* id, int32_t len) {
  (void)p; (void)nranks; (void)rank; (void)id; (void)len;
#ifdef MPSC_NCCL
  Backend* b = static_cast<Backend*>(p);
  if (b->nccl) { std::snprintf(ctx->error, sizeof ctx->error, "the NCCL communicator already exists"); return 1; }
  b->nccl = mpsc_nccl_init(nranks, rank, id, len, ctx->error, sizeof ctx->error);
  if (!b->nccl) return 1;
  // MPSC_DDP_OVERLAP=1: the buckets' all-reduces run inside train_step's graph on a side stream (captured at its first run, after this)
  const char* ov = std::getenv("MPSC_DDP_OVERLAP");
  b->overlap = NBUCKET > 0 && ov && ov[0] == '1';
  if (b->overlap) {
    if (!ck(ctx, cudaStreamCreateWithFlags(&b->side, cudaStreamNonBlocking), "cudaStreamCreate (gradient buckets)")) return 1;
    for (cudaEvent_t& e : b->bucket_ev) if (!ck(ctx, cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate (gradient buckets)")) return 1;
  }
  char v[32];
  mpsc_nccl_version(v, sizeof v);
  if (rank == 0) std::fprintf(stderr, "mpsc cuda: NCCL %s communicator of %d rank%s; gradients all-reduced %s\\n", v, (int)nranks, nranks == 1 ? "" : "s",
                              b->overlap ? "in buckets overlapping the backward (MPSC_DDP_OVERLAP=1)" : "after the backward");
  return 0;
#else
  std::snprintf(ctx->error, sizeof ctx->error, ${cString(noNccl)});
  return 1;
#endif
}

int backend_allreduce_grads(mpsc_ctx* ctx, void* p) {
  (void)p;
#ifdef MPSC_NCCL
  Backend* b = static_cast<Backend*>(p);
  if (b->graph_allreduce) return 0;  // train_step's graph did it, bucket by bucket
  if (!upload_if_dirty(ctx, b)) return 1;
${n ? `  float* ptrs[NGRAD];
  for (int i = 0; i < NGRAD; ++i) ptrs[i] = reinterpret_cast<float*>(b->dev + PERSISTENT_OFFSET + GRAD_OFFSET[i]);
  if (!mpsc_nccl_allreduce_avg(b->nccl, ptrs, GRAD_COUNT, NGRAD, b->stream, ctx->error, sizeof ctx->error)) return 1;
  b->device_newer = true;
` : ''}  return 0;
#else
  std::snprintf(ctx->error, sizeof ctx->error, ${cString(noNccl)});
  return 1;
#endif
}
`;
}

const KINDS: Record<string, string> = { param: 'MPSC_PARAM', state: 'MPSC_STATE', optstate: 'MPSC_OPTSTATE', gradacc: 'MPSC_GRADACC' };

/** `model_cuda.cu`: includes the kernels file `kernelsFile` and implements the model ABI. */
export function cudaHostSource(plan: CudaPlan, table: PersistentTable, kernelsFile: string, lanes: LaneSchedule[] = planLanes(plan, plan.lanes)): string {
  const P = plan.programs;
  const buckets = gradBuckets(plan, table);
  // lane priorities (lanes.ts lanePriority) in some program: the high-priority streams, node priorities in the graphs
  const prio = plan.lanes > 1 && lanes.some((l) => l.lanes > 1 && l.critical);
  const tensors = table.tensors.map((t, i) => ({
    shape: `const int64_t tshape${i}[] = { ${t.shape.length ? t.shape.join(', ') : '0'} };`,
    row: `  { ${cString(t.name)}, ${t.dtype === 'i32' ? 'MPSC_I32' : 'MPSC_F32'}, ${KINDS[t.kind] ?? 'MPSC_STATE'}, ${t.shape.length}, tshape${i}, ${t.shape.reduce((a, b) => a * b, 1)}, ${t.offset} },`,
  }));
  const progTables = P.map((p, i) =>
    p.inputs.map((inp, k) => `const int64_t ishape_p${i}_${k}[] = { ${inp.shape.length ? inp.shape.join(', ') : '0'} };\n`).join('') +
    `const mpsc_tensor_desc in_p${i}[] = {\n` +
    p.inputs.map((inp, k) => `  { ${cString(inp.name)}, ${inp.dtype === 'i32' ? 'MPSC_I32' : 'MPSC_F32'}, MPSC_INPUT, ${inp.shape.length}, ishape_p${i}_${k}, ${inp.shape.reduce((a, b) => a * b, 1)}, 0 },\n`).join('') +
    `  { nullptr, 0, 0, 0, nullptr, 0, 0 }\n};\n` +
    `const char* const outnames_p${i}[] = { ${p.outputs.map((o) => cString(o.name) + ', ').join('')}nullptr };\n`).join('');
  return `// Generated by mpsc: the CUDA implementation of mpsc_model.h for model ${commentText(plan.model)}.
// One device allocation of ${plan.deviceBytes} bytes (persistent ${plan.persistent.bytes} at ${plan.persistent.offset},
// arena ${plan.arena.bytes} at ${plan.arena.offset}, split-K scratch ${plan.scratch.bytes} at ${plan.scratch.offset}, the programs' upload images after them);
// each program is one CUDA graph per pinned staging set, captured once and replayed.
// Do not edit; regenerate with \`mpsc build --target cuda\`.
#include "mpsc_model.h"
#include ${cString(kernelsFile)}
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#ifdef MPSC_CUBLASLT
#include "mpsc_cublaslt.h"  // defined by the CMake project where it finds CUDA::cublasLt
#endif
#ifdef MPSC_NCCL
#include "mpsc_nccl.h"  // defined by the CMake project where it finds nccl.h and libnccl
#endif

namespace {
${ltTable(plan)}${plan.pdl !== 'off' ? pdlHostHelper() + '\n' : ''}
const size_t DEVICE_BYTES = ${plan.deviceBytes};
const size_t PERSISTENT_OFFSET = ${plan.persistent.offset};
const size_t ARENA_OFFSET = ${plan.arena.offset};
const size_t ARENA_BYTES = ${plan.arena.bytes};
${P.some((p) => p.nodes.some((n) => (n.kind === 'kernel' ? [n] : n.fallback).some((k) => k.scratch))) ? `const size_t SCRATCH_OFFSET = ${plan.scratch.offset};  // split-K partial sums, ${plan.scratch.bytes} bytes\n` : ''}const int NPROG = ${P.length};
const int NLANE = ${plan.lanes};  // streams each graph is captured on (lanes.ts)
${prio ? `// (lanes.ts lanePriority: each lane's critical nodes on a high-priority stream, the graphs instantiated with node priorities)
` : ''}const size_t STAGING_BYTES[NPROG] = { ${P.map((p) => p.stagingBytes).join(', ')} };
static_assert(sizeof(StepParams) == sizeof(mpsc_scalars), "StepParams must match mpsc_scalars");
${gradTables(buckets)}
struct Prog {
  unsigned char* stage[2] = {nullptr, nullptr};      // pinned, mapped host staging sets
  unsigned char* stage_dev[2] = {nullptr, nullptr};  // their device addresses
  cudaGraphExec_t exec[2] = {nullptr, nullptr};      // captured on first use, then replayed
  cudaEvent_t done[2] = {nullptr, nullptr};
  cudaEvent_t copied[2] = {nullptr, nullptr};
  bool pending[2] = {false, false};
  int next = 0;
  double* prof_ms = nullptr;  // MPSC_CUDA_PROFILE=1: per kernel, summed ms over the profiled steps
  int prof_steps = 0;
  // the program's first profiled step is not counted: its first launch loads the module's kernels
  // (CUDA's lazy loading, milliseconds for a large model), which made the first kernel look slow
  double prof_first_us = -1.0;
};

struct Backend {
  unsigned char* dev = nullptr;   // the one device allocation
  cudaStream_t stream = nullptr;  // the steps
  cudaStream_t copy = nullptr;    // the batch uploads
  bool mma = true;                // tensor-core (3xTF32) GEMM variants
  bool mirror = false;            // copy the arena to ctx->arena after each step whose outputs are read
  bool profile = false;           // launch kernel by kernel with events (MPSC_CUDA_PROFILE=1)
  bool lt_ok[NLT > 0 ? NLT : 1] = {};  // cuBLASLt call i has an algorithm (else its generated kernels run)
  bool lt_epi[NLT > 0 ? NLT : 1] = {};  // ... with its epilogue (a BGRADB call without one: its 'unfused' kernels run after it)
#ifdef MPSC_CUBLASLT
  MpscLt* lt = nullptr;
#endif
#ifdef MPSC_NCCL
  MpscNccl* nccl = nullptr;  // data-parallel training: the communicator (collective_init)
  bool overlap = false;      // MPSC_DDP_OVERLAP=1 and buckets: train_step's graph all-reduces them on the side stream
  bool graph_allreduce = false;  // a recorded train_step holds the all-reduce (allreduce_grads has nothing to do)
  cudaStream_t side = nullptr;
  cudaEvent_t bucket_ev[NBUCKET + 1] = {};
#endif
  cudaEvent_t prof_ev[${Math.max(0, ...P.map((p) => p.nodes.length)) + 1}] = {};
  cudaStream_t lane[NLANE] = {};  // lanes 1.. of the graphs (lanes.ts; lane 0 is the capture's stream)
${prio ? `  cudaStream_t lane_hi[NLANE] = {};  // each lane's high-priority stream (its critical nodes)
` : ''}  cudaEvent_t lane_ev[NLANE > 1 ? ${Math.max(1, ...P.map((p) => p.nodes.length))} : 1] = {};  // node k's event (graph edges between lanes)
  cudaEvent_t lane_fork = nullptr;  // the lanes join each capture at its start
  bool serial = false;  // capture on one stream: a cuBLASLt call runs its generated fallback (lanes.ts scheduled the calls, not the fallbacks)
  bool host_dirty = true;         // the host copy of the persistent block is newer than the device's
  bool device_newer = false;      // the device copy is newer than the host's
  size_t free_before = 0, total = 0;
  Prog progs[NPROG];
};

bool ck(mpsc_ctx* ctx, cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::snprintf(ctx->error, sizeof ctx->error, "CUDA error in %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
  return false;
}

bool upload_if_dirty(mpsc_ctx* ctx, Backend* b) {
  if (!b->host_dirty) return true;
  if (!ck(ctx, cudaMemcpyAsync(b->dev + PERSISTENT_OFFSET, ctx->persistent, (size_t)ctx->model->persistent_bytes, cudaMemcpyHostToDevice, b->stream), "uploading the persistent tensors")) return false;
  if (!ck(ctx, cudaStreamSynchronize(b->stream), "uploading the persistent tensors")) return false;
  b->host_dirty = false;
  return true;
}

typedef bool (*record_fn)(mpsc_ctx*, Backend*, unsigned char*, int, float*, cudaStream_t, bool, cudaEvent_t*);

/** stream capture of one program's nodes (staging set: set) into an instantiated graph */
bool capture(mpsc_ctx* ctx, Backend* b, record_fn rec, int set, float* out, cudaGraphExec_t* exec, const char* name) {
  if (!ck(ctx, cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture")) return false;
  const bool ok = rec(ctx, b, b->dev, set, out, b->stream, b->mma, nullptr);
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(b->stream, &g);
  if (!ok) { if (g) cudaGraphDestroy(g); return false; }
  if (!ck(ctx, e, "cudaStreamEndCapture")) return false;
  const cudaError_t ei = cudaGraphInstantiate(exec, g, ${prio ? 'cudaGraphInstantiateFlagUseNodePriority' : '0'});
  cudaGraphDestroy(g);
  if (ei != cudaSuccess) {
    std::snprintf(ctx->error, sizeof ctx->error, "CUDA error instantiating the %s graph: %s", name, cudaGetErrorString(ei));
    return false;
  }
  return true;
}

/** MPSC_CUDA_PROFILE=1: one step launched kernel by kernel, an event after each; adds each kernel's time */
bool profile_step(mpsc_ctx* ctx, Backend* b, record_fn rec, int set, float* out, Prog& q, int n) {
  if (!ck(ctx, cudaEventRecord(b->prof_ev[0], b->stream), "cudaEventRecord")) return false;
  if (!rec(ctx, b, b->dev, set, out, b->stream, b->mma, b->prof_ev)) return false;
  if (!ck(ctx, cudaEventSynchronize(b->prof_ev[n]), "a profiled step")) return false;
  if (!q.prof_ms) q.prof_ms = static_cast<double*>(std::calloc((size_t)n + 1, sizeof(double)));
  double step_ms = 0.0;
  for (int k = 0; k < n; ++k) {
    float ms = 0.0f;
    if (!ck(ctx, cudaEventElapsedTime(&ms, b->prof_ev[k], b->prof_ev[k + 1]), "cudaEventElapsedTime")) return false;
    if (q.prof_first_us >= 0.0) q.prof_ms[k] += ms;
    step_ms += ms;
  }
  if (q.prof_first_us < 0.0) q.prof_first_us = 1000.0 * step_ms;
  else q.prof_steps++;
  return true;
}

${P.map(gatherKernel).join('')}${P.map(kernelNames).join('')}
${bucketFns(buckets)}
${lanesFns(plan)}
${P.map((p, i) => recordFn(p, i, buckets, lanes[i], plan.pdl, lanes[i].ownScratch ? plan.scratchLane : 0)).join('\n')}
${P.map(runFn).join('\n')}
const char* const* const KNAMES[NPROG] = { ${P.map((_, i) => `knames_p${i}`).join(', ')} };
const char* const PNAMES[NPROG] = { ${P.map((p) => cString(p.name)).join(', ')} };

/** MPSC_CUDA_PROFILE=1: every profiled program's kernels, mean microseconds per step, slowest first */
void print_profile(Backend* b) {
  for (int i = 0; i < NPROG; ++i) {
    Prog& q = b->progs[i];
    if (!q.prof_ms || !q.prof_steps) continue;
    int n = 0;
    while (KNAMES[i][n]) ++n;
    double total = 0.0;
    for (int k = 0; k < n; ++k) total += q.prof_ms[k];
    std::fprintf(stderr, "mpsc cuda profile: %s, %d kernels, %.1f us of kernel time per step (mean of %d steps after the first, %.1f us with module loading; kernels launched one by one)\\n",
                 PNAMES[i], n, 1000.0 * total / q.prof_steps, q.prof_steps, q.prof_first_us);
    bool* shown = static_cast<bool*>(std::calloc((size_t)n + 1, 1));
    for (int r = 0; r < n; ++r) {
      int best = -1;
      for (int k = 0; k < n; ++k) if (!shown[k] && (best < 0 || q.prof_ms[k] > q.prof_ms[best])) best = k;
      shown[best] = true;
      std::fprintf(stderr, "  %9.1f us %5.1f%%  %s\\n", 1000.0 * q.prof_ms[best] / q.prof_steps, total > 0 ? 100.0 * q.prof_ms[best] / total : 0.0, KNAMES[i][best]);
    }
    std::free(shown);
  }
}

void destroy(Backend* b) {
  if (b->stream) cudaStreamSynchronize(b->stream);
  if (b->profile) print_profile(b);
  for (Prog& q : b->progs) {
    for (int s = 0; s < 2; ++s) {
      if (q.exec[s]) cudaGraphExecDestroy(q.exec[s]);
      if (q.done[s]) cudaEventDestroy(q.done[s]);
      if (q.copied[s]) cudaEventDestroy(q.copied[s]);
      if (q.stage[s]) cudaFreeHost(q.stage[s]);
    }
    std::free(q.prof_ms);
  }
  for (cudaEvent_t e : b->prof_ev) if (e) cudaEventDestroy(e);
  for (cudaEvent_t e : b->lane_ev) if (e) cudaEventDestroy(e);
  if (b->lane_fork) cudaEventDestroy(b->lane_fork);
  for (cudaStream_t l : b->lane) if (l) cudaStreamDestroy(l);
${prio ? `  for (cudaStream_t l : b->lane_hi) if (l) cudaStreamDestroy(l);
` : ''}#ifdef MPSC_CUBLASLT
  mpsc_lt_destroy(b->lt);
#endif
#ifdef MPSC_NCCL
  for (cudaEvent_t e : b->bucket_ev) if (e) cudaEventDestroy(e);
  if (b->side) { cudaStreamSynchronize(b->side); cudaStreamDestroy(b->side); }
  mpsc_nccl_destroy(b->nccl);
#endif
  if (b->dev) cudaFree(b->dev);
  if (b->copy) cudaStreamDestroy(b->copy);
  if (b->stream) cudaStreamDestroy(b->stream);
  delete b;
}

${ltSetupFn(plan)}
${smemSetupFn(plan)}
void* backend_create(mpsc_ctx* ctx) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  if (drv == 0 || e == cudaErrorNoDevice) {
    std::snprintf(ctx->error, sizeof ctx->error, "no CUDA device found (no NVIDIA driver or GPU: %s): use --device cpu", cudaGetErrorString(e));
    return nullptr;
  }
  if (e == cudaErrorInsufficientDriver) {
    std::snprintf(ctx->error, sizeof ctx->error, "the NVIDIA driver is too old for this CUDA runtime (runtime %d.%d, driver supports %d.%d): update the driver, or use --device cpu",
                  rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10);
    return nullptr;
  }
  if (e != cudaSuccess || n == 0) {
    std::snprintf(ctx->error, sizeof ctx->error, "no CUDA device found (%s): use --device cpu", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return nullptr;
  }
  Backend* b = new Backend();
  const char* plain = std::getenv("MPSC_CUDA_PLAIN");
  b->mma = !(plain && plain[0] == '1');
  const char* mirror = std::getenv("MPSC_CUDA_MIRROR_ARENA");
  b->mirror = mirror && mirror[0] == '1';
  const char* profile = std::getenv("MPSC_CUDA_PROFILE");
  b->profile = profile && profile[0] == '1';
  if (!ck(ctx, cudaSetDevice(0), "cudaSetDevice") || !ck(ctx, cudaMemGetInfo(&b->free_before, &b->total), "cudaMemGetInfo")) { destroy(b); return nullptr; }
  const cudaError_t em = cudaMalloc(reinterpret_cast<void**>(&b->dev), DEVICE_BYTES);
  if (em != cudaSuccess) {
    b->dev = nullptr;
    std::snprintf(ctx->error, sizeof ctx->error, "out of GPU memory: the model needs %zu bytes on the device (its static memory plan), the GPU has %zu of %zu free (%s): use a smaller batch",
                  DEVICE_BYTES, b->free_before, b->total, cudaGetErrorString(em));
    cudaGetLastError();
    destroy(b);
    return nullptr;
  }
  bool ok = ck(ctx, cudaMemset(b->dev, 0, DEVICE_BYTES), "cudaMemset") &&
            ck(ctx, cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking), "cudaStreamCreate") &&
            ck(ctx, cudaStreamCreateWithFlags(&b->copy, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int i = 0; ok && i < NPROG; ++i)
    for (int s = 0; ok && s < 2; ++s) {
      Prog& q = b->progs[i];
      ok = ck(ctx, cudaHostAlloc(reinterpret_cast<void**>(&q.stage[s]), STAGING_BYTES[i], cudaHostAllocMapped), "cudaHostAlloc (pinned staging)") &&
           ck(ctx, cudaHostGetDevicePointer(reinterpret_cast<void**>(&q.stage_dev[s]), q.stage[s], 0), "cudaHostGetDevicePointer (pinned staging)") &&
           ck(ctx, cudaEventCreateWithFlags(&q.done[s], cudaEventDisableTiming), "cudaEventCreate") &&
           ck(ctx, cudaEventCreateWithFlags(&q.copied[s], cudaEventDisableTiming), "cudaEventCreate");
    }
  for (cudaEvent_t& e : b->prof_ev) if (ok && b->profile) ok = ck(ctx, cudaEventCreate(&e), "cudaEventCreate");
  for (int l = 1; ok && l < NLANE; ++l) ok = ck(ctx, cudaStreamCreateWithFlags(&b->lane[l], cudaStreamNonBlocking), "cudaStreamCreate (graph lanes)");
${prio ? `  int least_prio = 0, greatest_prio = 0;
  if (ok) ok = ck(ctx, cudaDeviceGetStreamPriorityRange(&least_prio, &greatest_prio), "cudaDeviceGetStreamPriorityRange");
  for (int l = 0; ok && l < NLANE; ++l)
    ok = ck(ctx, cudaStreamCreateWithPriority(&b->lane_hi[l], cudaStreamNonBlocking, greatest_prio), "cudaStreamCreateWithPriority (graph lanes)");
` : ''}  for (cudaEvent_t& e : b->lane_ev) if (ok && NLANE > 1) ok = ck(ctx, cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate (graph lanes)");
  if (ok && NLANE > 1) ok = ck(ctx, cudaEventCreateWithFlags(&b->lane_fork, cudaEventDisableTiming), "cudaEventCreate (graph lanes)");
  if (!ok || !smem_setup(ctx)) { destroy(b); return nullptr; }
  if (!lt_setup(ctx, b)) { destroy(b); return nullptr; }
  for (int i = 0; i < NPROG; ++i) for (int s = 0; s < 2; ++s) std::memset(b->progs[i].stage[s], 0, STAGING_BYTES[i]);
  return b;
}

void backend_free(mpsc_ctx* ctx, void* p) {
  (void)ctx;
  if (p) destroy(static_cast<Backend*>(p));
}

int backend_to_host(mpsc_ctx* ctx, void* p) {
  Backend* b = static_cast<Backend*>(p);
  if (!b->device_newer) return 0;
  if (!ck(ctx, cudaStreamSynchronize(b->stream), "waiting for the GPU")) return 1;
  if (!ck(ctx, cudaMemcpy(ctx->persistent, b->dev + PERSISTENT_OFFSET, (size_t)ctx->model->persistent_bytes, cudaMemcpyDeviceToHost), "downloading the persistent tensors")) return 1;
  b->device_newer = false;
  return 0;
}

int backend_from_host(mpsc_ctx* ctx, void* p) {
  (void)ctx;
  static_cast<Backend*>(p)->host_dirty = true;
  return 0;
}

${collectiveFns(buckets)}
${progTables}
${tensors.map((t) => t.shape).join('\n')}
const mpsc_tensor_desc tensors[] = {
${tensors.map((t) => t.row).join('\n')}
  { nullptr, 0, 0, 0, nullptr, 0, 0 }
};
const mpsc_program_desc programs[] = {
${P.map((p, i) => `  { ${cString(p.name)}, ${p.batch}, ${p.inputs.length}, in_p${i}, ${p.outputs.length}, outnames_p${i}, ${p.arenaBytes}, ${p.kernels}, run_p${i} },`).join('\n')}
};
const mpsc_model_desc model = {
  MPSC_ABI_VERSION, ${cString(plan.model)}, "cuda", ${table.tensors.length}, tensors, ${table.bytes}, ${P.length}, programs,
  backend_create, backend_free, backend_to_host, backend_from_host,
  backend_collective_id, backend_collective_init, backend_allreduce_grads,
};

} // namespace

extern "C" const mpsc_model_desc* mpsc_model(void) { return &model; }
`;
}
