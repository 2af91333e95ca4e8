/**
 * class_rows: the CUDA backend's class losses and metrics over R rows of C classes (logits
 * [..., C], i32 labels): cross_entropy, accuracy, top_k and cross_entropy_grad. The shared kernels
 * (compiler/kernels/reduce.ts) reduce a whole loss in ONE threadgroup, each thread taking whole
 * rows in three passes: right on the emulated Metal GPU's small batches, but GPT-2's loss (16 384
 * rows of 50 304) took 850 ms on the H200. Here every row has its own threads:
 *  - a warp per row (8 rows per block of 256) when C <= WARP_C, else a block of 256 per row
 *    (rowBlock() = 1024 by default for the loss fused with its gradient);
 *  - one pass over the row: each thread keeps a running max m and sum of exp(x - m) (rescaled
 *    when the max grows; four elements per step while four remain), then the row's max M is the group's max of m and its sum the group's sum
 *    of s * exp(m - M) (SIMD-group / block reductions: a fixed butterfly and warp order);
 *  - the forward ops write each row's term (and, with ignore_index, whether the row counts) into
 *    the plan's scratch region (`mpsc_scratch`, KernelSpec.scratch), and a second kernel of one
 *    block adds the R terms in a fixed order (thread j takes rows j, j + 256, ...; then the block
 *    sum) and divides by the count: no atomics, the same bits on every run; with at most
 *    ONE_BLOCK_ROWS rows of at most WARP_C classes (the MNIST steps: launch-bound) ONE block does
 *    it all, its 8 warps taking the rows in turn and their totals added in warp order;
 *  - cross_entropy_grad writes (softmax - target) / count in a second pass over the row, each
 *    element read then written by the same thread, so it stays right when the memory plan makes
 *    dlogits share the logits' bytes; when the grad node comes right after the cross_entropy of the
 *    same logits and labels (fusedGrad; not the ONE-block case), the loss's per-row kernel writes it:
 *    the row's term, then its gradient from the row's log-sum-exp over the row read again (its
 *    second read from L2: a block of rowBlock() = 1024 threads per row by default keeps the rows
 *    in flight under the L2's size; the other row kernels a block of 256), and the grad node has no kernel; the same expressions, so the
 *    same bits, as the two kernels below (the term's label logit is read before the row's
 *    reductions: in place, its owner thread may overwrite it after them). With at most accuracy / top_k in between (lseConsumer),
 *    the loss kernel leaves each row's log-sum-exp in the scratch region and the gradient reads it:
 *    one pass over the logits instead of two;
 *  - opt-in, MPSC_CUDA_CE_SMEM=1 (ceSmem, smemRows): the fused loss + gradient over 16-bit rows of 8k classes that fit
 *    twice in a block's shared memory (GPT-2's) reads each row from global memory once: 132 persistent blocks, each a
 *    run of rows staged by 16-byte cp.async into two shared buffers (the next row's copies in flight while this row's
 *    reductions and gradient run from shared memory), the same bits as the vector kernel; checked on the CPU thread
 *    emulator (test/cuda_loss_emu.test.ts) and on an H100 (bench/cuda_check.sh kernels), but not faster in GPT-2's step
 *    (+0.22 ms, bench/NOTES.md v42): opt-in.
 * Logits are read through the dialect's typed loads (16-bit logits widened to float), dlogits
 * written through its typed stores. Consumes those nodes (CUDA dialect context; the bodies use
 * only the kernel language); produces KernelSpecs. nll / nll_grad keep the shared kernels (a
 * row's nll term is one load).
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelArg, KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { argOf, blockKernel, ceilDiv, elemOf, kernelSpec, numAttr, numel, readF, shapeOf } from '../kernels/common.js';
import { isHalfElem, type HalfElem } from '../kernels/dialect.js';
import { keptCount } from '../kernels/rows.js';
import { envChoice, envFlag } from '../env_switch.js';
import { SMEM_STATIC_MAX } from './cuda_dialect.js';

/** classes per row up to which a warp takes a row (above: a block of rowBlock() threads) */
export const WARP_C = 1024;
/**
 * threads of a block that takes one row (C > WARP_C) in the loss fused with its gradient (fusedGrad): 1024 by
 * default, MPSC_CUDA_CE_ROW_BLOCK=256 (or 512) at build time for A/B; a row's second read should come from
 * L2: 1024 threads per row keep about 2 rows per SM in flight (~26 MB of GPT-2's 100 KB rows, under the H200's
 * 50 MB L2), 256 threads about 8 (~105 MB). The other row kernels keep 256 threads: measured on the H200 (GPT-2
 * bf16, 4 Dec 16:40) the plain loss kernel over 16384 x 50304 bf16 took 847 us at 1024 against 661 at 256.
 */
export function rowBlock(): number {
  return Number(envChoice('MPSC_CUDA_CE_ROW_BLOCK', ['256', '512', '1024'], '1024'));
}
/**
 * loads in flight per thread in the fused loss + gradient kernel (fusedGrad, a block of 1024 per row): 4 in its
 * log-sum-exp pass and 8 in its gradient pass, 2 blocks per SM (registers capped at 32), by default; 16 in both
 * passes with 1024 threads per SM (1024 / rowBlock() blocks; 64 registers: the 16 loads fit) at MPSC_CUDA_CE_UNROLL=16
 * (build time, A/B): 32 KB of loads in flight per SM either way, but at 1024 threads per row one row per SM (13 MB of
 * rows on the GPU instead of 26) for the gradient's second read of the row from L2. Not the default: measured on the
 * H200 (GPT-2 bf16, 5 Dec, one round) 35.534 -> 35.387 ms per step, inside the rounds' spread; the kernel passed
 * bench/cuda_check.sh's fused-loss cases there (the GPT-2 vocabulary's included, within 1.5e-7). A warp per row keeps
 * the default steps either way (the unfused kernels' bits).
 */
export function ceUnroll(): 4 | 16 {
  return envChoice('MPSC_CUDA_CE_UNROLL', ['4', '16'], '4') === '16' ? 16 : 4;
}
/**
 * The fused loss + gradient (fusedGrad, a block per row) over 16-bit logits and a 16-bit gradient with C a multiple of 8
 * (GPT-2's 50304): each thread takes 8 consecutive classes per 16-byte load and store (the dialect's load8 / store8), two
 * vectors in flight per step, and every exp(x - m) as 2^(x log2(e) - m log2(e)), one fma and the hardware's exp2 (CUDA
 * exp2f). The scalar kernel spends ~40 instructions per element over its two passes (2-byte loads and stores with
 * their index arithmetic, and two full-precision expf of ~10 instructions each: ptxas of GPT-2's kernel), so it is
 * bound by issue, not bytes: GPT-2's 16384 x 50304 took 1.80 ms against 0.79 at the copy rate (H200, 5 Dec). Here
 * ~12. The error of the exponent's argument is ~|m| 2^-24 (the rounding of m log2(e)), a few 1e-7 relative in each
 * exponential at GPT-2's logits, and the gradient is then rounded to 16 bits anyway. On by default (MPSC_CUDA_CE_VEC=0 at
 * build time: the scalar kernel); measured on an H100 (6 Dec, bench/NOTES.md v18): GPT-2's loss kernel 2.01 -> 1.48 ms,
 * the step -0.69 ms. Other rows (f32, C not a multiple of 8, a warp per row) always keep the scalar kernel.
 */
export function ceVec(): boolean {
  return envFlag('MPSC_CUDA_CE_VEC', true);
}
/**
 * MPSC_CUDA_CE_SMEM=1 (build time, opt-in; off by default, the kernel text then unchanged): the vector path's fused loss +
 * gradient (ceVec) with each row read from global memory ONCE. Persistent blocks (min(R, SMEM_SMS) of them, one per SM of
 * an H100 / H200, each a run of consecutive rows: floor(R / G), the first R % G blocks one more) of rowBlock() threads
 * stage their rows in shared memory by 16-byte cp.async, double-buffered: row i + 1's copies are in flight while row i's
 * max / sum of exp and then its gradient are computed from shared memory (and the gradient stored by 16-byte stores), so
 * the SM's next read is queued at HBM during the row's block reductions; row i + 2's copies go into row i's buffer once
 * every thread is done with it. 4 C + 4 (rowBlock() / 32) bytes of dynamic shared memory per block (GPT-2's 50 304 classes:
 * 201 344 bytes; needs sm_90's 227 KB per block: where 4 C plus that does not fit SMEM_BLOCK the existing kernel serves
 * the row; an sm_80 GPU's 163 KB would refuse GPT-2's at create; on a GPU of fewer than 132 SMs the grid takes two
 * waves: right, slower); an ignored row (ignore_index) copies zeros instead of reading its logits. The same per-thread order of
 * every sum as the global-memory vector kernel (each thread's vectors t, t + W, ... two per step, then the same block
 * reductions), so the same bits. Checked on the CPU thread emulator (test/cuda_loss_emu.test.ts) and right on an H100
 * (bench/cuda_check.sh kernels); GPT-2's step on the H100 was not faster with it (33.53 against 33.31 ms, bench/NOTES.md v42).
 */
export function ceSmem(): boolean {
  return envFlag('MPSC_CUDA_CE_SMEM', false);
}
/** SMs the MPSC_CUDA_CE_SMEM grid is sized for (H100 SXM, H200: one wave of persistent blocks), bytes of shared memory a block may have (sm_90) */
const SMEM_SMS = 132, SMEM_BLOCK = 227 * 1024;

/** rows up to which a warp-per-row forward op is ONE block (8 warps taking rows in turn) rather than two kernels */
export const ONE_BLOCK_ROWS = 256;
const BLOCK = 256;
const WARPS = BLOCK / 32;

/** a class node's rows: R rows of C, ignore_index if any */
function classRows(g: Graph, n: Node): { R: number; C: number; ignore?: number } {
  const xs = shapeOf(g, n.inputs[0]), C = xs[xs.length - 1];
  return { R: numel(xs) / C, C, ignore: n.attrs.ignore_index === undefined ? undefined : numAttr(n, 'ignore_index') };
}

/** a cross_entropy and a cross_entropy_grad over the same logits and labels with the same attrs */
function sameLoss(n: Node, m: Node): boolean {
  return m.inputs[0] === n.inputs[0] && m.inputs[1] === n.inputs[1] &&
    (m.attrs.label_smoothing ?? 0) === (n.attrs.label_smoothing ?? 0) && m.attrs.ignore_index === n.attrs.ignore_index;
}

/**
 * The cross_entropy_grad node that reads cross_entropy node `n`'s per-row log-sum-exp from the scratch region
 * (at [2R, 3R): the row terms and kept flags use [0, 2R)) instead of computing it again: the same logits,
 * labels and attrs, and only accuracy / top_k nodes between them (their kernels use scratch below 2R; no
 * other kernel runs in between to overwrite it). A training step's loss and its gradient, typically.
 */
export function lseConsumer(g: Graph, n: Node): Node | undefined {
  if (n.op !== 'cross_entropy' || fusedGrad(g, n)) return undefined;
  for (let i = g.nodes.indexOf(n) + 1; i < g.nodes.length; i++) {
    const m = g.nodes[i];
    if (m.op === 'cross_entropy_grad' && sameLoss(n, m)) return m;
    if (m.op !== 'accuracy' && m.op !== 'top_k') return undefined;
  }
  return undefined;
}

/**
 * The cross_entropy_grad node fused into cross_entropy node `n` (one kernel reads each row once for the
 * loss term and, the row then hot in L2, writes its gradient: crossEntropyRows): the node right after `n`,
 * over the same logits, labels and attrs, when `n` runs as per-row kernel + mean (not the ONE-block
 * kernel). Nothing runs between the two nodes, so writing dlogits at the loss's time (possibly over the
 * logits' bytes: each element is read, then written, by the same thread) changes no other kernel's view.
 * MPSC_CUDA_CE_FUSE=0 at build time turns it off (the two kernels, lseConsumer).
 */
export function fusedGrad(g: Graph, n: Node): Node | undefined {
  if (n.op !== 'cross_entropy' || !envFlag('MPSC_CUDA_CE_FUSE', true)) return undefined;
  const m = g.nodes[g.nodes.indexOf(n) + 1];
  if (!m || m.op !== 'cross_entropy_grad' || !sameLoss(n, m)) return undefined;
  const { R, C } = classRows(g, n);
  return rowGroupThreads(C) === 32 && R <= ONE_BLOCK_ROWS ? undefined : m;
}

/** threads per row for C classes: a warp (32) or a block (256; rowBlock() for the loss fused with its gradient) */
export function rowGroupThreads(C: number, fused = false): number {
  return C <= WARP_C ? 32 : fused ? rowBlock() : BLOCK;
}

/**
 * The row layout of a class kernel: `head` declares r (the row; in warp mode a warp past the last
 * row returns), t (the thread's index in the row's group) and base; `max` / `sum` reduce over the
 * row's group (every thread of the group gets the result; block mode uses barriers, so every
 * thread of the block must call them).
 */
function rowLayout(ctx: LowerCtx, R: number, C: number, fused = false) {
  const d = ctx.d, u = (k: number) => d.u(k);
  const W = rowGroupThreads(C, fused);
  const warp = W === 32;
  if (!warp) ctx.helpers.add('block_reduce');
  // threads of a block, and its warps
  const tg = warp ? BLOCK : W, nsg = tg / 32;
  // the fused loss's block per row at MPSC_CUDA_CE_UNROLL=16 (a warp per row keeps the unfused kernels' steps: the same bits)
  const wide = fused && !warp && ceUnroll() === 16;
  return {
    W, warp, tg, nsg,
    /** 2 blocks of 1024 per SM (registers capped at 32 a thread: ptxas spills 8 bytes in the fused kernel, 48 registers uncapped) */
    minBlocks: wide ? { minBlocks: 1024 / tg } : tg === 1024 ? { minBlocks: 2 } : {},
    /** loads in flight per thread in the log-sum-exp pass, and in the gradient pass (unrolledRow) */
    unroll: wide ? 16 : 4,
    gradUnroll: wide ? 16 : ROW_UNROLL,
    groups: warp ? ceilDiv(R, WARPS) : R,
    tgmem: warp ? 0 : nsg * 4,
    head:
      (warp
        ? `  const uint r = tgid.x * ${u(WARPS)} + sg;\n  if (r >= ${u(R)}) return;\n  const uint t = lane;\n`
        : `  const uint r = tgid.x;\n  const uint t = tidx;\n`) +
      `  const uint base = r * ${u(C)};\n`,
    /** the row's first 8-class vector (the vector path: C a multiple of 8; '' otherwise) */
    vbase: C % 8 === 0 ? `r * ${u(C / 8)}` : '',
    max: (v: string) => (warp ? d.simdMax(v) : `mpsc_block_max(${v}, tg, lane, sg, ${u(nsg)})`),
    sum: (v: string) => (warp ? d.simdSum(v) : `mpsc_block_sum(${v}, tg, lane, sg, ${u(nsg)})`),
  };
}

/**
 * statements: the row's max M and sum S of exp(x - M) over its C logits in one pass (each thread's
 * running max m and sum s, rescaled when m grows; then combined over the group), and with `sx` the
 * row's sum of logits SX. Each thread takes its elements four at a time (four loads in flight, one
 * rescale test per four) while four remain, then one at a time.
 */
function onlineLse(ctx: LowerCtx, g: Graph, n: Node, L: ReturnType<typeof rowLayout>, C: number, sx: boolean): string {
  const d = ctx.d, u = (k: number) => d.u(k), exp = (x: string) => d.math('exp', x), max = (a: string, b: string) => d.math('max', a, b);
  const x = (k: number) => readF(d, g, n.inputs[0], 'logits', k ? `base + c + ${u(k * L.W)}` : 'base + c');
  const U = L.unroll, ks = Array.from({ length: U }, (_, k) => k);
  // balanced trees over names (max of the step's loads, sum of their exps): (a + b) + (c + d) at U = 4
  const paren = (a: string, b: string) => `(${a} + ${b})`;
  const sumOf = (xs: string[]) => `${tree(xs.slice(0, xs.length / 2), paren)} + ${tree(xs.slice(xs.length / 2), paren)}`;
  return (
    `  float m = ${d.f(-Infinity)}, s = ${d.f(0)};\n` + (sx ? `  float sx = ${d.f(0)};\n` : '') +
    `  uint c = t;\n` +
    `  for (; c + ${u((U - 1) * L.W)} < ${u(C)}; c += ${u(U * L.W)}) {\n` +
    `    const float ${ks.map((k) => `x${k} = ${x(k)}`).join(', ')};\n` +
    `    const float mx = ${tree(ks.map((k) => `x${k}`), max)};\n` +
    `    if (mx > m) { s = s * ${exp('m - mx')}; m = mx; }\n` +
    `    s += ${sumOf(ks.map((k) => exp(`x${k} - m`)))};\n` +
    (sx ? `    sx += ${sumOf(ks.map((k) => `x${k}`))};\n` : '') +
    `  }\n` +
    `  for (; c < ${u(C)}; c += ${u(L.W)}) {\n` +
    `    const float x = ${x(0)};\n` +
    `    if (x > m) { s = s * ${exp('m - x')} + ${d.f(1)}; m = x; } else s += ${exp('x - m')};\n` +
    (sx ? `    sx += x;\n` : '') +
    `  }\n` +
    `  const float M = ${L.max('m')};\n` +
    `  const float S = ${L.sum(`m == M ? s : s * ${exp('m - M')}`)};\n` +
    (sx ? `  const float SX = ${L.sum('sx')};\n` : '')
  );
}

/** log2(e) as a float: the vector path's exponentials are 2^(x LOG2E - m LOG2E) */
const LOG2E = Math.LOG2E;
/** 16-byte vectors per thread and step in the vector path (16 classes in flight) */
const VEC_STEP = 2;

/** the 16-bit type of the fused loss's logits and gradient when the vector path serves it (ceVec), else null */
function vecType(g: Graph, n: Node, grad: Node | undefined, L: ReturnType<typeof rowLayout>, C: number): HalfElem | null {
  if (!grad || L.warp || C % 8 !== 0 || !ceVec()) return null;
  const t = elemOf(g, n.inputs[0]);
  return isHalfElem(t) && elemOf(g, grad.outputs[0]) === t ? t : null;
}

/**
 * The vector path's passes over a row of C = 8 V classes (thread t takes vectors t, t + W, ...; VEC_STEP of them per
 * step while that many remain, then one at a time): `step(vs)` gets the vector index expressions of one step and
 * returns its statements.
 */
function vecLoop(d: LowerCtx['d'], V: number, W: number, step: (vs: string[]) => string): string {
  const ks = Array.from({ length: VEC_STEP }, (_, k) => k);
  return `  {\n  uint v = t;\n` +
    (V > (VEC_STEP - 1) * W
      ? `  for (; v + ${d.u((VEC_STEP - 1) * W)} < ${d.u(V)}; v += ${d.u(VEC_STEP * W)}) {\n${step(ks.map((k) => (k ? `(v + ${d.u(k * W)})` : 'v')))}  }\n`
      : '') +
    `  for (; v < ${d.u(V)}; v += ${d.u(W)}) {\n${step(['v'])}  }\n  }\n`;
}

/** a balanced tree of `op` over names: (a + b) + (c + d) */
function tree(xs: string[], op: (a: string, b: string) => string): string {
  return xs.length === 1 ? xs[0] : op(tree(xs.slice(0, xs.length >> 1), op), tree(xs.slice(xs.length >> 1), op));
}

/** statements (vector path): declare the floats x[8j .. 8j + 7] of each of the step's vectors vs[j] */
function vecLoads(d: LowerCtx['d'], L: ReturnType<typeof rowLayout>, t16: HalfElem, vs: string[], src?: VecSrc): string {
  return vs.map((v, j) => `    ${d.load8(t16, src ? src.ptr : 'logits', src ? src.at(v) : `${L.vbase} + ${v}`, Array.from({ length: 8 }, (_, k) => `x${8 * j + k}`))}\n`).join('');
}

/** where the vector path's loads read other than the row's vectors of `logits` (MPSC_CUDA_CE_SMEM: the row staged in shared memory): a typed pointer, the vector index of v */
interface VecSrc { ptr: string; at: (v: string) => string }

/**
 * statements (vector path): the row's max M and sum S of exp(x - M) as onlineLse computes them, and with `sx` the sum of
 * logits SX, over 8-class vectors: one running-max test per step, each exponential 2^(fma(x, LOG2E, -m LOG2E)).
 */
function vecLse(ctx: LowerCtx, L: ReturnType<typeof rowLayout>, t16: HalfElem, C: number, sx: boolean, src?: VecSrc): string {
  const d = ctx.d, l2e = d.f(LOG2E);
  const add = (a: string, b: string) => `(${a} + ${b})`, max = (a: string, b: string) => d.math('max', a, b);
  return `  float m = ${d.f(-Infinity)}, s = ${d.f(0)};\n` + (sx ? `  float sx = ${d.f(0)};\n` : '') +
    vecLoop(d, C / 8, L.W, (vs) => {
      const xs = Array.from({ length: 8 * vs.length }, (_, k) => `x${k}`);
      return vecLoads(d, L, t16, vs, src) +
        `    const float mx = ${tree(xs, max)};\n` +
        `    if (mx > m) { s = s * ${d.exp2(`(m - mx) * ${l2e}`)}; m = mx; }\n` +
        `    const float ml = m * ${l2e};\n` +
        `    s += ${tree(xs.map((x) => d.exp2(d.fma(x, l2e, '-ml'))), add)};\n` +
        (sx ? `    sx += ${tree(xs, add)};\n` : '');
    }) +
    `  const float M = ${L.max('m')};\n` +
    `  const float S = ${L.sum(`m == M ? s : s * ${d.exp2(`(m - M) * ${l2e}`)}`)};\n` +
    (sx ? `  const float SX = ${L.sum('sx')};\n` : '');
}

/** statements (vector path): the row's gradient (cross_entropy_grad node `m`), (softmax - target) / count, 8 classes per 16-byte load and store */
function vecGrad(ctx: LowerCtx, g: Graph, m: Node, L: ReturnType<typeof rowLayout>, t16: HalfElem, src?: VecSrc): string {
  const d = ctx.d, f = (x: number) => d.f(x), { C } = classRows(g, m), ls = numAttr(m, 'label_smoothing', 0);
  // the label's place in the step's vector j, lab - 8 v: the vector that holds it (one per row) takes the branch that
  // compares each class with it; every other vector's target is the constant ls / C (none without smoothing)
  const target = (dl: string | null, k: number): string | null => (dl === null ? (ls ? f(ls / C) : null)
    : ls ? `(${dl} == ${k} ? ${f(1 - ls)} : ${f(0)}) + ${f(ls / C)}` : `${dl} == ${k} ? ${f(1)} : ${f(0)}`);
  const store = (v: string, j: number, dl: string | null) => d.store8(t16, 'dlogits', `${L.vbase} + ${v}`, Array.from({ length: 8 }, (_, k) => {
    const p = d.exp2(d.fma(`x${8 * j + k}`, f(LOG2E), '-lsel')), tk = target(dl, k);
    return `(${tk === null ? p : `${p} - (${tk})`}) / count`;
  }));
  return `  const float lsel = lse * ${f(LOG2E)};\n` +
    vecLoop(d, C / 8, L.W, (vs) => vecLoads(d, L, t16, vs, src) +
      vs.map((v, j) => `    const int dl${j} = lab - int(8u * ${v});\n` +
        `    if (uint(dl${j}) < 8u) ${store(v, j, `dl${j}`)}\n    else ${store(v, j, null)}\n`).join(''));
}

/** cross_entropy / accuracy / top_k: per-row terms into the scratch region, then their fixed-order mean */
export function lowerClassForwardCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] {
  const d = ctx.d, u = (k: number) => d.u(k), f = (x: number) => d.f(x);
  const { R, C, ignore } = classRows(g, n);
  // the gradient right after the loss: this kernel writes it too, the row's second read hot in L2
  const grad = fusedGrad(g, n);
  const L = rowLayout(ctx, R, C, grad !== undefined);
  // the loss fused with its gradient over 16-bit rows of 8k classes: 16-byte loads and stores, exp2 (ceVec)
  const vec = n.op === 'cross_entropy' ? vecType(g, n, grad, L, C) : null;
  const counted = ignore !== undefined;
  const xAt = (idx: string) => readF(d, g, n.inputs[0], 'logits', idx);
  const keepLse = lseConsumer(g, n) !== undefined;
  let what: string;
  let row: string;
  switch (n.op) {
    case 'cross_entropy': {
      const ls = numAttr(n, 'label_smoothing', 0);
      what = `log-sum-exp${ls ? ', sum of logits' : ''}`;
      // with the gradient fused (in place over the logits, another thread may write the label's logit once the
      // row's reductions are done): the label's logit read before them
      const early = fusedGrad(g, n) !== undefined;
      row = (early ? `  const float xlab = ${xAt('base + uint(lab)')};  // before any thread of the row writes\n` : '') +
        (vec ? vecLse(ctx, L, vec, C, ls !== 0) : onlineLse(ctx, g, n, L, C, ls !== 0)) +
        `  const float lse = M + ${d.math('log', 'S')};\n` +
        `  const float term = -${f(1 - ls)} * (${early ? 'xlab' : xAt('base + uint(lab)')} - lse)` + (ls ? ` - ${f(ls / C)} * (SX - ${f(C)} * lse);\n` : ';\n') +
        (keepLse ? `  if (t == 0u) mpsc_scratch[${u(2 * R)} + r] = lse;  // for the gradient kernel\n` : '');
      break;
    }
    case 'accuracy': {
      // the first maximum: each thread's first largest logit (strict >), then the smallest index among the threads holding the row's max
      what = 'argmax';
      row =
        `  float best = ${f(-Infinity)};\n  uint bi = t;\n` +
        `  for (uint c = t; c < ${u(C)}; c += ${u(L.W)}) {\n    const float x = ${xAt('base + c')};\n    if (x > best) { best = x; bi = c; }\n  }\n` +
        `  const float M = ${L.max('best')};\n` +
        `  const float first = -${L.max(`best == M ? -float(bi) : ${f(-Infinity)}`)};\n` +
        `  const float term = uint(first) == uint(lab) ? ${f(1)} : ${f(0)};\n`;
      break;
    }
    case 'top_k': {
      what = 'logits above the label\'s';
      row =
        `  const float xl = ${xAt('base + uint(lab)')};\n  float above = ${f(0)};\n` +
        `  for (uint c = t; c < ${u(C)}; c += ${u(L.W)}) if (${xAt('base + c')} > xl) above += ${f(1)};\n` +
        `  const float term = ${L.sum('above')} < ${f(numAttr(n, 'k'))} ? ${f(1)} : ${f(0)};\n`;
      break;
    }
    default:
      throw new Error(`internal: class_rows: op '${n.op}' is not a class loss or metric`);
  }
  const out = n.op === 'cross_entropy' ? 'loss' : 'acc';
  if (L.warp && R <= ONE_BLOCK_ROWS) {
    // few rows: one launch (a launch-bound step saves the second kernel); warp w takes rows w, w + 8, ...
    // (all lanes hold the same term: the butterflies give every lane the same sums), lane 0 keeps the
    // warp's total, thread 0 adds the 8 warp totals in warp order
    const inner = row.replace(/^(?=.)/gm, counted ? '    ' : '  ');
    return [{ ...kernelSpec(ctx, g, n, [argOf(g, 'logits', n.inputs[0], 'r'), argOf(g, 'label', n.inputs[1], 'r'), argOf(g, out, n.outputs[0], 'w')], {
      groups: [1, 1, 1], tgsize: [BLOCK, 1, 1], tgmem: 2 * WARPS * 4, sync: true,
      body:
        `  // ONE block: warp sg takes rows sg, sg + ${u(WARPS)}, ... of ${u(R)} (${u(C)} classes each): its ${what}, the row terms summed in row order per warp
` +
        `  float part = ${f(0)}, cnt = ${f(0)};
` +
        `  for (uint r = sg; r < ${u(R)}; r += ${u(WARPS)}) {
    const uint t = lane;
    const uint base = r * ${u(C)};
    const int lab = label[r];
` +
        (counted ? `    if (lab != ${ignore}) {
${inner}      part += term;
      cnt += ${f(1)};
    }
` : `${inner}    part += term;
    cnt += ${f(1)};
`) +
        `  }
` +
        `  if (lane == 0u) { tg[sg] = part; tg[${u(WARPS)} + sg] = cnt; }
  ${d.barrier()}
` +
        `  if (tidx == 0u) {
    float total = ${f(0)}, count = ${f(0)};
` +
        `    for (uint w = 0u; w < ${u(WARPS)}; ++w) { total += tg[w]; count += tg[${u(WARPS)} + w]; }
` +
        `    ${out}[0] = total / ${counted ? 'count' : f(R)};
  }
`,
    }, ` [one block: a warp per row of ${C}, ${R} rows]`), ...(keepLse ? { scratch: 3 * R * 4 } : {})}];
  }
  const bytes = (keepLse ? 3 : counted ? 2 : 1) * R * 4;
  if (grad && counted) ctx.helpers.add('block_reduce');
  const zeroTerm = `    if (t == 0u) { mpsc_scratch[r] = ${f(0)}; mpsc_scratch[${u(R)} + r] = ${f(0)}; }\n`;
  const rows: KernelSpec = {
    ...kernelSpec(ctx, g, n, [argOf(g, 'logits', n.inputs[0], 'r'), argOf(g, 'label', n.inputs[1], 'r'), ...(grad ? [argOf(g, 'dlogits', grad.outputs[0], 'w')] : [])], {
      // (the vector path: one block of 1024 per SM, 64 registers for its 16 classes in flight)
      groups: [L.groups, 1, 1], tgsize: [L.tg, 1, 1], tgmem: grad && counted ? L.nsg * 4 : L.tgmem, sync: true, ...(vec ? { minBlocks: 1 } : L.minBlocks),
      body:
        `  // row r of ${u(C)} classes (${L.warp ? 'a warp per row' : 'a block per row'}): its ${what}, then its term into the scratch region` +
        (grad ? `,\n  // then its gradient (node ${grad.id}: (softmax - target) / count) over the row read again (from L2), each element read then written by the same thread\n` : '\n') +
        (grad ? keptCount(d, { T: u(L.tg), nsg: u(L.nsg) }, { R, ignore }) : '') +
        L.head + `  const int lab = label[r];\n` +
        (grad ? ignoredRow(ctx, g, grad, L, zeroTerm) : counted ? `  if (lab == ${ignore}) {\n${zeroTerm}    return;\n  }\n` : '') +
        row +
        `  if (t == 0u) {\n    mpsc_scratch[r] = term;\n${counted ? `    mpsc_scratch[${u(R)} + r] = ${f(1)};\n` : ''}  }\n` +
        (grad ? (vec ? vecGrad(ctx, g, grad, L, vec) : gradRow(ctx, g, grad, L, true)) : ''),
    }, ` [${L.warp ? 'a warp' : 'a block'} per row of ${C}, ${R} rows: the row terms${grad ? ` and node ${grad.id}'s cross_entropy_grad (fused${vec ? `, 8 ${vec} classes per 16-byte access, exp2` : ''})` : ''}]`),
    scratch: bytes,
  };
  // MPSC_CUDA_CE_SMEM: the same row terms and gradient from rows staged in shared memory (one read of the logits)
  const staged = grad && vec ? smemRows(ctx, g, n, grad, L, vec, bytes) : null;
  const mean = blockKernel(ctx, g, n, [argOf(g, out, n.outputs[0], 'w')], 1, BLOCK, (s) =>
    `  // the mean of the ${u(R)} row terms${counted ? ' over the counted rows' : ''}: thread j adds rows j, j + ${s.T}, ... in order, then the block sum\n` +
    `  float part = ${f(0)};\n` + (counted ? `  float cnt = ${f(0)};\n` : '') +
    `  for (uint j = tidx; j < ${u(R)}; j += ${s.T}) {\n    part += mpsc_scratch[j];\n${counted ? `    cnt += mpsc_scratch[${u(R)} + j];\n` : ''}  }\n` +
    `  const float total = mpsc_block_sum(part, tg, lane, sg, ${s.nsg});\n` +
    (counted ? `  const float count = mpsc_block_sum(cnt, tg, lane, sg, ${s.nsg});\n` : '') +
    `  if (tidx == 0u) ${out}[0] = total / ${counted ? 'count' : f(R)};\n`, ' [mean of the row terms]');
  return [staged ?? rows, { ...mean, scratch: bytes }];
}

/**
 * The fused loss + gradient's rows kernel of MPSC_CUDA_CE_SMEM (ceSmem: see there), or null where it does not serve
 * (switched off, not CUDA, or two rows of C do not fit a block's shared memory): G persistent blocks of L.tg threads,
 * block b the rows [r0, r0 + nr) (nr = floor(R / G), one more for the first R % G blocks), row i of its run copied into
 * buffer i % 2 (16-byte cp.async, one commit group per row: the two first rows' groups before the loop, then one per
 * row, empty where no row is left, so that wait<1> at row i leaves only row i + 1's group in flight), then the row's
 * term and gradient as the global-memory vector kernel computes them (vecLse / vecGrad over the staged row), a barrier
 * (every thread done reading the buffer), row i + 2's copies into it. `bytes`: the scratch region's, as the rows kernel's.
 */
function smemRows(ctx: LowerCtx, g: Graph, n: Node, grad: Node, L: ReturnType<typeof rowLayout>, t16: HalfElem, bytes: number): KernelSpec | null {
  const d = ctx.d, u = (k: number) => d.u(k), f = (x: number) => d.f(x);
  const { R, C, ignore } = classRows(g, n);
  // the block reductions' slots, then the two row buffers (16-byte aligned: 4 nsg bytes is a multiple of 16)
  const head = L.nsg, need = 4 * head + 2 * 2 * C;
  if (!ceSmem() || d.name !== 'cuda' || L.warp || need > SMEM_BLOCK) return null;
  ctx.helpers.add('mma16');  // mpsc_cp_async16
  const G = Math.min(R, SMEM_SMS), Q = Math.floor(R / G), E = R % G, V = C / 8;
  const ls = numAttr(n, 'label_smoothing', 0), counted = ignore !== undefined;
  const T = d.typeName(t16);
  // row i of the run into buffer i & 1 (an ignored row: zeros, its logits unread)
  const copy = (i: string, pad: string) => `${pad}{\n${pad}  const uint rc = r0 + ${i};\n` +
    `${pad}  const unsigned short* const src = reinterpret_cast<const unsigned short*>(logits) + rc * ${u(C)};\n` +
    `${pad}  unsigned short* const dst = xs + (${i} & 1u) * ${u(C)};\n` +
    (counted ? `${pad}  const bool keep = label[rc] != ${ignore};\n` : '') +
    `${pad}  for (uint j = tidx; j < ${u(V)}; j += ${u(L.tg)}) mpsc_cp_async16(dst + 8u * j, src + 8u * j, ${counted ? 'keep' : 'true'});\n${pad}}\n`;
  const src: VecSrc = { ptr: 'xr', at: (v) => v };
  const zeros = Array.from({ length: 8 }, () => f(0));
  const row =
    `  const float xlab = ${d.toFloat(t16, 'xr[uint(lab)]')};\n` +
    vecLse(ctx, L, t16, C, ls !== 0, src) +
    `  const float lse = M + ${d.math('log', 'S')};\n` +
    `  const float term = -${f(1 - ls)} * (xlab - lse)` + (ls ? ` - ${f(ls / C)} * (SX - ${f(C)} * lse);\n` : ';\n') +
    `  if (t == 0u) {\n    mpsc_scratch[r] = term;\n${counted ? `    mpsc_scratch[${u(R)} + r] = ${f(1)};\n` : ''}  }\n` +
    vecGrad(ctx, g, grad, L, t16, src);
  const body =
    `  // rows [r0, r0 + nr) of ${u(R)} (${u(C)} classes each; ${u(G)} blocks, runs of ${Q}${E ? ` or ${Q + 1}` : ''} rows), each read from global memory once:\n` +
    `  // row i staged in shared buffer i % 2 by cp.async (row i + 1's copies in flight while row i is computed), its term into\n` +
    `  // the scratch region and its gradient (node ${grad.id}: (softmax - target) / count) from the staged row, 16-byte stores\n` +
    keptCount(d, { T: u(L.tg), nsg: u(L.nsg) }, { R, ignore }) +
    `  const uint r0 = tgid.x * ${u(Q)}${E ? ` + min(tgid.x, ${u(E)})` : ''};\n` +
    `  const uint nr = ${E ? `tgid.x < ${u(E)} ? ${u(Q + 1)} : ${u(Q)}` : u(Q)};\n` +
    `  const uint t = tidx;\n` +
    `  unsigned short* const xs = reinterpret_cast<unsigned short*>(tg + ${u(head)});  // two rows of ${u(C)} 16-bit logits\n` +
    `  for (uint i = 0u; i < 2u; ++i) {\n    if (i < nr) ${copy('i', '    ').trimStart()}    mpsc_cp_async_commit();\n  }\n` +
    `  for (uint i = 0u; i < nr; ++i) {\n` +
    `    const uint r = r0 + i;\n` +
    `    const ${T}* const xr = reinterpret_cast<const ${T}*>(xs + (i & 1u) * ${u(C)});\n` +
    `    mpsc_cp_async_wait<1>();  // this thread's copies of row i landed (row i + 1's may be in flight)\n` +
    `    ${d.barrier()}  // every thread's\n` +
    `    const int lab = label[r];\n` +
    (counted
      ? `    if (lab == ${ignore}) {\n      if (t == 0u) { mpsc_scratch[r] = ${f(0)}; mpsc_scratch[${u(R)} + r] = ${f(0)}; }\n` +
        `      for (uint v = t; v < ${u(V)}; v += ${u(L.tg)}) ${d.store8(t16, 'dlogits', `${L.vbase} + v`, zeros)}\n    } else {\n` +
        row.replace(/^(?=.)/gm, '    ') + `    }\n`
      : row.replace(/^(?=.)/gm, '  ')) +
    `    ${d.barrier()}  // every thread done reading buffer i & 1\n` +
    `    if (i + 2u < nr) ${copy('(i + 2u)', '    ').trimStart()}    mpsc_cp_async_commit();\n` +
    `  }\n`;
  return {
    ...kernelSpec(ctx, g, n, [argOf(g, 'logits', n.inputs[0], 'r'), argOf(g, 'label', n.inputs[1], 'r'), argOf(g, 'dlogits', grad.outputs[0], 'w')], {
      // dynamic shared memory always (cuda_dialect.ts declares it 16-byte aligned, as the 16-byte copies need): at least
      // SMEM_STATIC_MAX + 16 bytes; a block of 1024 threads shares its SM with at most one other anyway
      groups: [G, 1, 1], tgsize: [L.tg, 1, 1], tgmem: Math.max(need, SMEM_STATIC_MAX + 16), sync: true, body,
    }, ` [${G} blocks of ${L.tg} per run of rows of ${C}, ${R} rows, each row staged in shared memory by cp.async (double-buffered, MPSC_CUDA_CE_SMEM): ` +
      `the row terms and node ${grad.id}'s cross_entropy_grad (fused, 8 ${t16} classes per 16-byte access, exp2)]`),
    // one block of 1024 per SM (its shared memory): 64 registers
    minBlocks: 1, scratch: bytes,
  };
}

/**
 * statements: row r's gradient (cross_entropy_grad node `m`) into dlogits, (softmax - target) / count (`count`
 * and `lab` declared before), softmax from the row's log-sum-exp `lse` (`fromLse`) or its max M and sum S;
 * an ignored row (ignore_index) gets zeros and its group returns.
 */
function gradRow(ctx: LowerCtx, g: Graph, m: Node, L: ReturnType<typeof rowLayout>, fromLse: boolean): string {
  const d = ctx.d, f = (x: number) => d.f(x);
  const { C } = classRows(g, m);
  const ls = numAttr(m, 'label_smoothing', 0);
  const outT = elemOf(g, m.outputs[0]);
  const store = (x: string) => (isHalfElem(outT) ? d.fromFloat(outT, x) : x);
  const target = (c: string) => (ls ? `(int(${c}) == lab ? ${f(1 - ls)} : ${f(0)}) + ${f(ls / C)}` : `int(${c}) == lab ? ${f(1)} : ${f(0)}`);
  return unrolledRow(d, C, L.W, L.gradUnroll, (k, c) => `    const float x${k} = ${readF(d, g, m.inputs[0], 'logits', `base + ${c}`)};\n`, (k, c) =>
    `    dlogits[base + ${c}] = ${store(`(${fromLse ? d.math('exp', `x${k} - lse`) : `${d.math('exp', `x${k} - M`)} / S`} - (${target(c)})) / count`)};\n`);
}

/** statements: an ignored row's (label ignore_index) zero gradient, the group returning; `also` runs first */
function ignoredRow(ctx: LowerCtx, g: Graph, m: Node, L: ReturnType<typeof rowLayout>, also = ''): string {
  const d = ctx.d, { C, ignore } = classRows(g, m);
  if (ignore === undefined) return '';
  const outT = elemOf(g, m.outputs[0]);
  const zero = isHalfElem(outT) ? d.fromFloat(outT, d.f(0)) : d.f(0);
  return `  if (lab == ${ignore}) {\n${also}    for (uint c = t; c < ${d.u(C)}; c += ${d.u(L.W)}) dlogits[base + c] = ${zero};\n    return;\n  }\n`;
}

/** cross_entropy_grad: a warp or block per row, one pass for the row's max and sum, one writing (softmax - target) / count; nothing when fused into its loss (fusedGrad) */
export function lowerCrossEntropyGradCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] {
  const d = ctx.d, u = (k: number) => d.u(k);
  // the loss's kernel writes this gradient (crossEntropyRows)
  if (g.nodes.some((m) => fusedGrad(g, m) === n)) return [];
  const { R, C, ignore } = classRows(g, n);
  const ls = numAttr(n, 'label_smoothing', 0);
  const L = rowLayout(ctx, R, C);
  // the kept count (ignore_index) is a block sum over all labels: before the warp mode's early return
  if (ignore !== undefined) ctx.helpers.add('block_reduce');
  const count = keptCount(d, { T: u(L.tg), nsg: u(L.nsg) }, { R, ignore });
  const args: KernelArg[] = [argOf(g, 'logits', n.inputs[0], 'r'), argOf(g, 'label', n.inputs[1], 'r'), argOf(g, 'dlogits', n.outputs[0], 'w')];
  // the loss's kernel left each row's log-sum-exp in the scratch region: one pass over the row instead of two
  const fromForward = g.nodes.some((m) => lseConsumer(g, m) === n);
  return [{ ...kernelSpec(ctx, g, n, args, {
    groups: [L.groups, 1, 1], tgsize: [L.tg, 1, 1], tgmem: ignore !== undefined || (!L.warp && !fromForward) ? L.nsg * 4 : 0, sync: true, ...L.minBlocks,
    body:
      `  // row r of ${u(C)} logits (${L.warp ? 'a warp per row' : 'a block per row'}): (softmax - ${ls ? '(1-ls)*onehot - ls/C' : 'onehot'}) / count;\n` +
      `  // each element is read and then written by the same thread (dlogits may share the logits' bytes), up to ${ROW_UNROLL} loads before their stores\n` +
      count + L.head + `  const int lab = label[r];\n` +
      ignoredRow(ctx, g, n, L) +
      (fromForward
        ? `  const float lse = mpsc_scratch[${u(2 * R)} + r];  // the forward kernel's\n`
        : onlineLse(ctx, g, n, L, C, false)) +
      gradRow(ctx, g, n, L, fromForward),
  }, ` [${L.warp ? 'a warp' : 'a block'} per row of ${C}, ${R} rows${fromForward ? ', the forward\'s log-sum-exp' : ''}]`), ...(fromForward ? { scratch: 3 * R * 4 } : {}) }];
}

/** elements a thread takes per step of unrolledRow */
export const ROW_UNROLL = 8;

/**
 * The statements of a thread's pass over its elements t, t + W, ... of a row of C (the body's `c` a
 * uint, `t` its first): U (ROW_UNROLL by default) at a time, every `load(k, column)` of a step before its first
 * `store(k, column)` (a store may write bytes the thread loaded, in place, so the compiler keeps loads
 * behind earlier stores: loads first puts U in flight, not one), then the rest one at a time;
 * each element gets the same statements either way.
 */
function unrolledRow(d: LowerCtx['d'], C: number, W: number, U: number, load: (k: number, c: string) => string, store: (k: number, c: string) => string): string {
  const ks = Array.from({ length: U }, (_, k) => k);
  const col = (k: number) => (k ? `(c + ${d.u(k * W)})` : 'c');
  // (rows too short for one step of U: the loop one at a time only)
  const steps = (U - 1) * W < C
    ? `  for (; c + ${d.u((U - 1) * W)} < ${d.u(C)}; c += ${d.u(U * W)}) {\n` + ks.map((k) => load(k, col(k))).join('') + ks.map((k) => store(k, col(k))).join('') + `  }\n`
    : '';
  return `  {\n  uint c = t;\n` + steps + `  for (; c < ${d.u(C)}; c += ${d.u(W)}) {\n${load(0, 'c')}${store(0, 'c')}  }\n  }\n`;
}
