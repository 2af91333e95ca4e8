/**
 * layernorm_cuda: the CUDA backend's layernorm forward (also with a residual add folded in: fuse.ts rule 5)
 * and layernorm_grad's dx over rows of D <= WARP_D:
 * a warp per row (8 rows per block of 256), the row's D values held in registers (lane l keeps elements
 * l, l + 32, ... : K = ceil(D / 32) of them, written out as K statements), so each row is read once
 * and written once, with warp butterflies (no barriers) for its sums. The shared kernels
 * (compiler/kernels/reduce.ts) give a row a threadgroup and read it three times with two block
 * reductions: GPT-2's 16 384 rows of 768 took ~54 us per layernorm and ~56 us per dx on the H200,
 * ~2 x the bytes at the copy rate. Wider rows keep the shared kernels.
 * The sums run in a fixed order (each lane's K values in order, then the butterfly), so results do
 * not depend on scheduling. 16-bit inputs are read through the dialect's typed loads, 16-bit outputs
 * written through its typed stores. Rows of D a multiple of 256 take a vector layout instead (lnVec: 8 consecutive
 * elements per lane and group of 256, 16-byte accesses; the forward by default).
 * layernorm_grad: the same warp per row for dx, each warp taking several rows in turn and keeping its
 * lanes' partial weight / bias gradients in registers, so dy and x are read once for all three outputs
 * (layernormGradCuda; MPSC_CUDA_LN_GRAD=smem / smem2, opt-in: each warp's partials in its own shared-memory slots instead,
 * 24 warps per SM where the registers' form fits one block of 8: lnGrad); a second kernel adds the blocks' partials. With the residual-gradient add folded
 * in (fuse.ts rule 6, `add_out`) dx is stored plus the addend (the residual stream's gradient), and with
 * `sum_out` (rule 7) the stored values' column sums (a linear's bias gradient) are a third partial; with `half_out`
 * (rule 11) each stored value is also stored rounded to 16 bits (the copy the next products read: no cast kernel).
 * Consumes layernorm and layernorm_grad nodes in a CUDA dialect context (the bodies use only the kernel
 * language); produces KernelSpecs (null: the shared kernels, with reduce_cuda.ts's column sums).
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { argOf, ceilDiv, elemOf, elementwise, kernelSpec, numAttr, readF, writeF } from '../kernels/common.js';
import { isHalfElem, isVecElem, type VecElem } from '../kernels/dialect.js';
import { layernormRows } from '../kernels/reduce.js';
import { envChoice } from '../env_switch.js';

/** the widest row a warp takes (32 values per lane in registers) */
export const WARP_D = 1024;
const WARPS = 8;

/** per lane: K statements `line(k, index)` for its elements index = base + lane + 32k (the last one guarded when D is not a multiple of 32) */
function lanes(d: LowerCtx['d'], D: number, line: (k: number, idx: string, col: string) => string): string {
  const K = ceilDiv(D, 32);
  let s = '';
  for (let k = 0; k < K; k++) {
    const col = k ? `lane + ${d.u(32 * k)}` : 'lane';
    const guarded = 32 * (k + 1) > D;
    s += guarded ? `  if (${col} < ${d.u(D)}) { ${line(k, `base + ${col}`, col)} }\n` : `  ${line(k, `base + ${col}`, col)}\n`;
  }
  return s;
}

/**
 * MPSC_CUDA_LN_VEC at build time (`fwd`, the default: the forward kernel; `all`: the gradient's dx kernel too;
 * `off`): rows of D a multiple of 256 whose row tensors are all f32 or 16-bit take the vector layout: lane l keeps the
 * 8 consecutive elements 256 c + 8 l .. + 7 of each group c < D / 256, read and written by the dialect's load8 /
 * store8 (on CUDA one 16-byte access per 8 16-bit values, two per 8 f32 ones, where the strided layout spends a load
 * or store instruction per element and tensor). The same statements per element; the row sums add each lane's
 * values in its own order, so the bits differ from the strided layout's (both a fixed order). Measured on an H100
 * (GPT-2 bf16, bench/NOTES.md v20): the forward 63.7 -> 55.0 us per layernorm, but the gradient's dx kernel 43.1 ->
 * 53.0 us per kernel (slower; with its block partials free of bank conflicts still +0.32 ms per step), hence `fwd`.
 */
export function lnVec(): 'off' | 'fwd' | 'all' {
  return envChoice('MPSC_CUDA_LN_VEC', ['off', 'fwd', 'all'], 'fwd');
}

/** whether the vector layout applies: lnVec takes this kernel, D % 256 == 0, every given value f32 or 16-bit */
function vecLayout(g: Graph, D: number, ids: number[], grad: boolean): boolean {
  const on = lnVec();
  return on !== 'off' && (!grad || on === 'all') && D % 256 === 0 && ids.every((id) => isVecElem(elemOf(g, id)));
}

/** the vector layout: per group c the statement text, with `names(p)` the 8 names p<8c + j> and `at` the group's 8-element index of a row slot / a column slot */
function vecGroups(D: number, line: (c: number, names: (p: string) => string[], rowAt: string, colAt: string) => string): string {
  let s = '';
  for (let c = 0; c < D / 256; c++) {
    const names = (p: string) => Array.from({ length: 8 }, (_, j) => `${p}${8 * c + j}`);
    s += line(c, names, c ? `vb + ${32 * c}u` : 'vb', c ? `lane + ${32 * c}u` : 'lane');
  }
  return s;
}

function store(ctx: LowerCtx, g: Graph, id: number, x: string): string {
  const t = elemOf(g, id);
  return isHalfElem(t) ? ctx.d.fromFloat(t, x) : x;
}

/**
 * layernorm (x, w?, b? -> y, mean, rstd) a warp per row; null when D > WARP_D. With a folded residual
 * add (fuse.ts rule 5, `add_in`: x, w, b, addend -> y, mean, rstd, h) the row is x + addend, stored to h
 * after all its loads (h = a + b in f32, as the binary kernel wrote it) and normalised from the registers:
 * one launch and one read of the row fewer than the add kernel and the layernorm.
 */
export function lowerLayernormCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] | null {
  const { D, rows } = layernormRows(g, n);
  const addIn = n.attrs.add_in === true;
  if (D > WARP_D) {
    if (addIn) throw new Error(`internal: node ${n.id}: a layernorm with a folded add over rows of ${D} > WARP_D (fuse.ts rule 5 takes D <= ${WARP_D})`);
    return null;
  }
  const d = ctx.d, u = (k: number) => d.u(k), f = (x: number) => d.f(x);
  const ins = n.inputs, outs = n.outputs;
  const weight = ins.length > 1 && ins[1] >= 0, bias = ins.length > 2 && ins[2] >= 0;
  const K = ceilDiv(D, 32);
  const vs = Array.from({ length: K }, (_, k) => `v${k}`);
  const addend = ins[ins.length - 1], sum = outs[outs.length - 1];
  const args = [argOf(g, 'x', ins[0], 'r'), ...(weight ? [argOf(g, 'w', ins[1], 'r')] : []), ...(bias ? [argOf(g, 'b', ins[2], 'r')] : []),
    ...(addIn ? [argOf(g, 'xa', addend, 'r')] : []),
    argOf(g, 'y', outs[0], 'w'), argOf(g, 'mean', outs[1], 'w'), argOf(g, 'rstd', outs[2], 'w'), ...(addIn ? [argOf(g, 'h', sum, 'w')] : [])];
  // every load of the row before any store: a store to h between them would keep the next loads from being issued
  // before it lands (the compiler cannot tell that h overlaps neither x nor xa), one memory round trip per element
  const load = (k: number, idx: string) => addIn
    ? `v${k} = ${readF(d, g, ins[0], 'x', idx)} + ${readF(d, g, addend, 'xa', idx)};`
    : `v${k} = ${readF(d, g, ins[0], 'x', idx)};`;
  const wAt = (col: string) => (weight ? ` * ${readF(d, g, ins[1], 'w', col)}` : '');
  const bAt = (col: string) => (bias ? ` + ${readF(d, g, ins[2], 'b', col)}` : '');
  const vt = vecLayout(g, D, [ins[0], outs[0], ...(addIn ? [addend, sum] : []), ...(weight ? [ins[1]] : []), ...(bias ? [ins[2]] : [])], false);
  if (vt) {
    const t = (id: number) => elemOf(g, id) as VecElem;
    const ks = Array.from({ length: K }, (_, k) => k);
    return [kernelSpec(ctx, g, n, args, {
      groups: [ceilDiv(rows, WARPS), 1, 1], tgsize: [32 * WARPS, 1, 1], tgmem: 0, sync: true,
      body:
        `  // a warp per row of D = ${u(D)}, 8 consecutive elements per lane and group of 256 (16-byte accesses); one read, one write${addIn ? ' (the row is x + xa, stored to h after all its loads)' : ''}\n` +
        `  const uint r = tgid.x * ${u(WARPS)} + sg;\n  if (r >= ${u(rows)}) return;\n  const uint vb = r * ${u(D / 8)} + lane;\n` +
        vecGroups(D, (_c, nm, at) => `  ${d.load8(t(ins[0]), 'x', at, nm('x'))}\n` + (addIn ? `  ${d.load8(t(addend), 'xa', at, nm('e'))}\n` : '')) +
        vecGroups(D, (_c, nm) => `  const float ${nm('v').map((v, j) => `${v} = ${nm('x')[j]}${addIn ? ` + ${nm('e')[j]}` : ''}`).join(', ')};\n`) +
        (addIn ? vecGroups(D, (_c, nm, at) => `  ${d.store8(t(sum), 'h', at, nm('v'))}\n`) : '') +
        `  const float mu = ${d.simdSum(vs.join(' + '))} / ${f(D)};\n` +
        `  float q = ${f(0)};\n` +
        ks.map((k) => `  { const float c = v${k} - mu; q += c * c; }\n`).join('') +
        `  const float rs = ${f(1)} / ${d.math('sqrt', `${d.simdSum('q')} / ${f(D)} + ${f(numAttr(n, 'eps', 1e-5))}`)};\n` +
        vecGroups(D, (_c, nm, at, col) =>
          (weight ? `  ${d.load8(t(ins[1]), 'w', col, nm('w'))}\n` : '') + (bias ? `  ${d.load8(t(ins[2]), 'b', col, nm('b'))}\n` : '') +
          `  ${d.store8(t(outs[0]), 'y', at, nm('v').map((v, j) => `(${v} - mu) * rs${weight ? ` * ${nm('w')[j]}` : ''}${bias ? ` + ${nm('b')[j]}` : ''}`))}\n`) +
        `  if (lane == 0u) { mean[r] = mu; rstd[r] = rs; }\n`,
    }, addIn ? ' [a warp per row, 16-byte vectors, the residual add folded in]' : ' [a warp per row, 16-byte vectors]')];
  }
  return [kernelSpec(ctx, g, n, args, {
    groups: [ceilDiv(rows, WARPS), 1, 1], tgsize: [32 * WARPS, 1, 1], tgmem: 0, sync: true,
    body:
      `  // a warp per row of D = ${u(D)}: lane l keeps elements l, l + 32, ... in registers; one read, one write${addIn ? ' (the row is x + xa, stored to h once all its loads are issued)' : ''}\n` +
      `  const uint r = tgid.x * ${u(WARPS)} + sg;\n  if (r >= ${u(rows)}) return;\n  const uint base = r * ${u(D)};\n` +
      `  float ${vs.map((v) => `${v} = ${f(0)}`).join(', ')};\n` +
      lanes(d, D, (k, idx) => load(k, idx)) +
      (addIn ? lanes(d, D, (k, idx) => `h[${idx}] = v${k};`) : '') +
      `  const float mu = ${d.simdSum(vs.join(' + '))} / ${f(D)};\n` +
      `  float q = ${f(0)};\n` +
      lanes(d, D, (k) => `{ const float c = v${k} - mu; q += c * c; }`) +
      `  const float rs = ${f(1)} / ${d.math('sqrt', `${d.simdSum('q')} / ${f(D)} + ${f(numAttr(n, 'eps', 1e-5))}`)};\n` +
      lanes(d, D, (k, idx, col) => `y[${idx}] = ${store(ctx, g, outs[0], `(v${k} - mu) * rs${wAt(col)}${bAt(col)}`)};`) +
      `  if (lane == 0u) { mean[r] = mu; rstd[r] = rs; }\n`,
  }, addIn ? ' [a warp per row, the residual add folded in]' : ' [a warp per row]')];
}

/** blocks of layernormGradCuda's first kernel (two per SM of the H200) */
const GRAD_BLOCKS = 264;

/**
 * MPSC_CUDA_LN_GRAD at build time: where layernormGradCuda's first kernel (the strided layout; lnVec's vector dx keeps
 * `regs`) keeps each lane's per-column weight / bias (/ sum_out) partials over the rows its warp takes. `regs` (the
 * default): in registers, next to the row's K = ceil(D / 32) values g, h: 5 K floats per lane with sum_out, GPT-2's
 * kernel 230 registers, one block of 8 warps per SM (ncu: 12.5% occupancy, no eligible warp 84% of cycles, DRAM 72%;
 * ~68 us per kernel on an H200 where its bytes need ~48). `smem`: in shared memory, each warp its own P x D floats
 * (lane l's columns l + 32 k: conflict-free, no atomics, nothing shared between warps until the block's end), so a lane
 * keeps only g, h (2 K floats): one block of W = 24 warps per SM (W x P x D x 4 bytes of shared, 221 KB for GPT-2's
 * P = 3, D = 768; registers capped at 80 by __launch_bounds__), the rows split evenly over the grid's warps (each
 * warp a run of consecutive rows, one more for the first rows % warps, taken across the blocks: GPT-2 124 or 125 rows per block), G <= 132 blocks (one wave on the H100 / H200's
 * 132 SMs), so the finish adds fewer slots than `regs`'s 256; `smem2`: the same with two blocks of 12 warps per SM
 * (G <= 264). Per element and partial a shared load and store instead of a register add. Fixed order either way (a
 * warp's rows in order, then the block's warps in order, then blockSumsFinish); the bits differ from `regs`'s where
 * the rows per warp differ. Checked on the CPU thread emulator (test/cuda_ln_emu.test.ts), under ptxas and on an H100
 * (bench/cuda_check.sh kernels); `smem` made GPT-2's step slower there (33.63 against 33.31 ms, bench/NOTES.md v43): the
 * shared read-modify-write per element and partial costs more than the occupancy buys. Opt-in.
 */
export function lnGrad(): 'regs' | 'smem' | 'smem2' {
  return envChoice('MPSC_CUDA_LN_GRAD', ['regs', 'smem', 'smem2'], 'regs');
}

/** SMs the `smem` forms' grid is sized for (H100 SXM, H200), shared bytes per SM and per block (sm_90), registers per SM */
const SMS = 132, SMEM_SM = 228 * 1024, SMEM_BLOCK = 227 * 1024, REGS_SM = 65536;

/**
 * lnGrad's shared-memory forms: B blocks per SM of W warps, G blocks; null for `regs`. W * B warps per SM (at most 24),
 * as many as the row's registers (an estimate of 2 K + 32 per lane, rounded up to 8: 80 at K = 24) and the warps' shared
 * slots (P * D floats each, plus 1 KB reserved per block) allow.
 */
function smemLayout(form: 'regs' | 'smem' | 'smem2', rows: number, D: number, P: number): { W: number; B: number; G: number } | null {
  if (form === 'regs') return null;
  const B = form === 'smem' ? 1 : 2, K = ceilDiv(D, 32), regs = 8 * ceilDiv(2 * K + 32, 8);
  const bySmem = Math.min(Math.floor(SMEM_BLOCK / (P * D * 4)), Math.floor((SMEM_SM / B - 1024) / (P * D * 4)));
  // ptxas gives each of the SM's 4 partitions (16K registers each) ceil(warps / 4) warps: 24 warps at most 80 registers, 20 at 96
  const perSm = Math.min(24, 4 * Math.floor(REGS_SM / 4 / (32 * regs)));
  const W = Math.max(1, Math.min(4 * Math.floor(perSm / (4 * B)), bySmem));
  return { W, B, G: Math.min(ceilDiv(rows, W), SMS * B) };
}

/**
 * layernorm_grad whole (dy, x, w?, mean, rstd -> dx, dweight, dbias) over rows of D <= WARP_D, or null:
 * the dx of layernormGradDxCuda, a warp per row, but each warp takes RW consecutive rows in order and
 * keeps its lanes' partial weight / bias gradients (sum of dy * xhat, sum of dy per column) in registers
 * while it has the row there; the block adds its 8 warps' partials in warp order in shared memory and
 * writes them to the scratch region (one slot per block), and a second kernel adds the G blocks' slots
 * (a warp per column: each lane the slots of every 32nd block in block order, then the warp's butterfly sum;
 * G = 1: the block stores the gradients itself). dy and x are read once (the column sums
 * of reduce_cuda.ts read them a second time); fixed order throughout, so results do not depend on scheduling.
 * MPSC_CUDA_LN_GRAD=smem / smem2 (lnGrad, opt-in; the strided layout only): the same row body, but each warp adds its
 * lanes' partials into its own slots of shared memory (smemKernel), rows through per-row pointers, up to 24 warps per SM
 * at 80 registers (GPT-2: no spills under ptxas 13.0), the blocks' slots in the same scratch layout for blockSumsFinish;
 * right on an H100 but slower in GPT-2's step (bench/NOTES.md v43).
 */
export function layernormGradCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] | null {
  const { D, rows } = layernormRows(g, n);
  // the residual gradient added to dx as it is stored (fuse.ts rule 6, `add_out`: the addend is the last input)
  const addOut = n.attrs.add_out === true;
  // output 0's 16-bit copy as the last output (fuse.ts rule 11, `half_out`; only with add_out)
  const half = n.attrs.half_out !== undefined, halfId = n.outputs[n.outputs.length - 1];
  if (D > WARP_D) {
    if (addOut) throw new Error(`internal: node ${n.id}: a layernorm_grad with a folded add over rows of ${D} > WARP_D (fuse.ts rule 6 takes D <= ${WARP_D})`);
    return null;
  }
  const d = ctx.d, u = (k: number) => d.u(k), f = (x: number) => d.f(x);
  const ins = n.inputs, outs = n.outputs;
  const weight = ins.length > 2 && ins[2] >= 0;
  const K = ceilDiv(D, 32);
  const RW = Math.max(1, ceilDiv(rows, GRAD_BLOCKS * WARPS));
  let G = ceilDiv(rows, WARPS * RW);
  // the column sums kept per lane: dy * xhat (dweight), dy (dbias), and with `sum_out` (rule 7) the stored dx + addend (its last output)
  const sums = [{ p: 'pw', arg: 'dweight', out: outs[1] }, { p: 'pb', arg: 'dbias', out: outs[2] },
    ...(n.attrs.sum_out === true ? [{ p: 'po', arg: 'dsum', out: outs[3] }] : [])];
  const P = sums.length;
  // the vector layout (lnVec): loads and stores by load8 / store8 per group of 8, the same statements per element
  const vt = vecLayout(g, D, [ins[0], ins[1], outs[0], ...(weight ? [ins[2]] : []), ...(addOut ? [ins[5]] : []), ...(half ? [halfId] : [])], true);
  // lnGrad's shared-memory forms (the strided layout only): W warps per block, G blocks
  const sm = vt ? null : smemLayout(lnGrad(), rows, D, P);
  if (sm) G = sm.G;
  const writes = sums.map((x) => argOf(g, x.arg, x.out, 'w'));
  const args = [argOf(g, 'dy', ins[0], 'r'), argOf(g, 'x', ins[1], 'r'), ...(weight ? [argOf(g, 'w', ins[2], 'r')] : []),
    argOf(g, 'mean', ins[3], 'r'), argOf(g, 'rstd', ins[4], 'r'), ...(addOut ? [argOf(g, 'xa', ins[5], 'r')] : []),
    argOf(g, 'dx', outs[0], 'w'), ...(half ? [argOf(g, 'dxh', halfId, 'w')] : []), ...(G === 1 ? writes : [])];
  // a row tensor's element at column col of row r: name[base + col] (`regs`), or namer[col] through the row's pointer (lnGrad's
  // `smem` forms: one 64-bit address per row and constant offsets, where the 32-bit index base + col, which may wrap, costs
  // an address computation and two registers per element: GPT-2's kernel spilled 160 bytes at 80 registers without them)
  const nm = (name: string) => (sm ? `${name}r` : name);
  const ix = (idx: string, col: string) => (sm ? col : idx);
  const plus = (idx: string, col: string) => (addOut ? ` + ${readF(d, g, ins[5], nm('xa'), ix(idx, col))}` : '');
  const decl = (p: string) => `  float ${Array.from({ length: K }, (_, k) => `${p}${k} = ${f(0)}`).join(', ')};\n`;
  /** stores of the column totals, the j-th from the expression total(j) */
  const storeAll = (c: string, total: (j: number) => string) => sums.map((x, j) => writeF(d, g, x.out, x.arg, c, total(j))).join(' ');
  const bytes = G * P * D * 4;
  // partial j (sums[j]) of the lane's value k += x: a register (`regs`), or the warp's own slot in shared memory (lnGrad's `smem` forms: tl = sg * P * D + lane)
  const slot = (j: number, k: number) => (j * D + 32 * k ? `tl + ${u(j * D + 32 * k)}` : 'tl');
  const acc = (j: number, k: number, x: string) => (sm ? `tg[${slot(j, k)}] += ${x};` : `${sums[j].p}${k} += ${x};`);
  // with the addend: every lane's dx + addend computed (all its loads issued) before any store to dx, whose overlap with
  // xa the compiler cannot rule out (a store between the loads costs a memory round trip per element); g_k holds the result
  const dxLine = (k: number, idx: string, col: string) => addOut
    ? `${nm('dx')}[${ix(idx, col)}] = ${store(ctx, g, outs[0], `g${k}`)};${half ? ` ${nm('dxh')}[${ix(idx, col)}] = ${store(ctx, g, halfId, `g${k}`)};` : ''}${P === 3 ? ` ${acc(2, k, `g${k}`)}` : ''}`
    : `${nm('dx')}[${ix(idx, col)}] = ${store(ctx, g, outs[0], `rs * (g${k} - s1 - h${k} * s2)`)};`;
  const sumLine = (k: number, idx: string, col: string) => `g${k} = rs * (g${k} - s1 - h${k} * s2)${plus(idx, col)};`;
  const t = (id: number) => elemOf(g, id) as VecElem;
  const ks = Array.from({ length: K }, (_, k) => k);
  /**
   * per value k of the lane: the statement line(k, slot) with its column's slot in the block's shared sums (the strided
   * layout: the column, with its guard where D % 32 != 0; the vector layout: column 256 c + 8 l + j at slot 256 c + 32 j + l,
   * so a warp's 32 lanes write 32 consecutive words, where by column they would meet in 4 banks: 8-way conflicts in
   * each of the warps' turns. Without them the vector dx kernel is still slower than the strided one in GPT-2's step on
   * an H100, +0.32 ms: bench/NOTES.md v20, hence lnVec's default `fwd`)
   */
  const perSlot = (line: (k: number, slot: string) => string) =>
    vt ? ks.map((k) => `  ${line(k, `lane + ${u(256 * (k >> 3) + 32 * (k & 7))}`)}\n`).join('') : lanes(d, D, (k, _idx, col) => line(k, col));
  /** the shared sums' slot of column expression c (c itself in the strided layout) */
  const slotOf = (c: string) => (vt ? `((${c}) & ~255u) + (((${c}) & 7u) << 5) + (((${c}) & 255u) >> 3)` : c);
  const elemStmt = (k: number, e: string, w: string | null, x: string) =>
    `g${k} = ${e}${w ? ` * ${w}` : ''}; h${k} = (${x} - mu) * rs; s1 += g${k}; s2 += g${k} * h${k}; ${acc(0, k, `${e} * h${k}`)} ${acc(1, k, e)}`;
  const rowPtr = (name: string, id: number, access: 'r' | 'w') => `  ${d.space.global}${access === 'r' ? 'const ' : ''}${d.typeName(elemOf(g, id))}* const ${nm(name)} = ${name} + base;\n`;
  const rowPointers = rowPtr('dy', ins[0], 'r') + rowPtr('x', ins[1], 'r') + (addOut ? rowPtr('xa', ins[5], 'r') : '') + rowPtr('dx', outs[0], 'w') +
    (half ? rowPtr('dxh', halfId, 'w') : '');
  const rowBody = vt
    ? `  const uint vb = r * ${u(D / 8)} + lane;\n  const float mu = mean[r], rs = rstd[r];\n  float s1 = ${f(0)}, s2 = ${f(0)};\n` +
      vecGroups(D, (c, nm, at, col) => `  ${d.load8(t(ins[0]), 'dy', at, nm('e'))}\n  ${d.load8(t(ins[1]), 'x', at, nm('xv'))}\n` +
        (weight ? `  ${d.load8(t(ins[2]), 'w', col, nm('w'))}\n` : '') +
        nm('e').map((e, j) => `  ${elemStmt(8 * c + j, e, weight ? nm('w')[j] : null, nm('xv')[j])}\n`).join('')) +
      `  s1 = ${d.simdSum('s1')} / ${f(D)};\n  s2 = ${d.simdSum('s2')} / ${f(D)};\n` +
      (addOut
        ? vecGroups(D, (c, nm, at) => `  ${d.load8(t(ins[5]), 'xa', at, nm('a'))}\n` +
          nm('g').map((gk, j) => `  ${gk} = rs * (${gk} - s1 - h${8 * c + j} * s2) + ${nm('a')[j]};${P === 3 ? ` po${8 * c + j} += ${gk};` : ''}\n`).join('') +
          `  ${d.store8(t(outs[0]), 'dx', at, nm('g'))}\n` + (half ? `  ${d.store8(t(halfId), 'dxh', at, nm('g'))}\n` : ''))
        : vecGroups(D, (c, nm, at) => `  ${d.store8(t(outs[0]), 'dx', at, nm('g').map((gk, j) => `rs * (${gk} - s1 - h${8 * c + j} * s2)`))}\n`))
    : `  const uint base = r * ${u(D)};\n` + (sm ? rowPointers : '') + `  const float mu = mean[r], rs = rstd[r];\n  float s1 = ${f(0)}, s2 = ${f(0)};\n` +
      lanes(d, D, (k, idx, col) =>
        `{ const float e = ${readF(d, g, ins[0], nm('dy'), ix(idx, col))}; ${elemStmt(k, 'e', weight ? readF(d, g, ins[2], 'w', col) : null, readF(d, g, ins[1], nm('x'), ix(idx, col)))} }`) +
      `  s1 = ${d.simdSum('s1')} / ${f(D)};\n  s2 = ${d.simdSum('s2')} / ${f(D)};\n` +
      (addOut ? lanes(d, D, sumLine) : '') +
      lanes(d, D, dxLine);
  /**
   * lnGrad's shared-memory forms: warp wg = sg G + b (warp sg of block b) of the grid's G W takes a run of consecutive rows
   * (rows / (G W), one more for the first rows % (G W) warps: spread over the blocks, so that no SM takes many more rows) in order, each as a warp per row (the strided row body), adding its lanes'
   * partials into its own P x D floats of tg; then the block adds its W warps' slots per column in warp order into its
   * scratch slot (the layout blockSumsFinish reads; G = 1: the gradients themselves).
   */
  const smemKernel = ({ W, B }: { W: number; B: number }): KernelSpec => {
    const NW = G * W, Q = Math.floor(rows / NW), REM = rows % NW, PD = P * D, T = 32 * W;
    const slots = (c: string) => `tg[wi * ${u(PD)} + ${c}]`;
    return kernelSpec(ctx, g, n, args, {
      groups: [G, 1, 1], tgsize: [T, 1, 1], tgmem: W * PD * 4, sync: true, ...{ minBlocks: B }, ...(G === 1 ? {} : { scratch: bytes }),
      body:
        `  // warp wg = sg * ${G} + b of the grid's ${NW} (so that every block gets its share of the longer runs): ${REM ? `${Q + 1} rows (wg < ${REM}) or ${Q}` : `${Q} rows`} from r0 in order, each as a warp per row of D = ${D}:\n` +
        `  // dx = rstd * (g - sum(g)/D - xhat * sum(g*xhat)/D), g = dy${weight ? ' * w' : ''}; the lanes' sums of dy * xhat, dy${P === 3 ? ' and the stored dx' : ''} per column in the warp's own ${P} x ${D} floats of tg, not in registers\n` +
        `  const uint wg = sg * ${u(G)} + tgid.x;\n` +
        (REM ? `  const uint nr = wg < ${u(REM)} ? ${u(Q + 1)} : ${u(Q)}, r0 = wg * ${u(Q)} + (wg < ${u(REM)} ? wg : ${u(REM)});\n`
          : `  const uint nr = ${u(Q)}, r0 = wg * ${u(Q)};\n`) +
        `  const uint tl = sg * ${u(PD)} + lane;\n` +
        lanes(d, D, (k) => sums.map((_, j) => `tg[${slot(j, k)}] = ${f(0)};`).join(' ')) +
        // (a barrier: where a warp takes at most one row, ptxas otherwise folds the zeros into the row's sums and spills at D = 1024)
        `  ${d.barrier()}\n` + decl('g') + decl('h') +
        `  for (uint j = 0u; j < nr; ++j) {\n    const uint r = r0 + j;\n` + rowBody + `  }\n` +
        `  // the block's sums per column: its ${W} warps' slots added in warp order\n  ${d.barrier()}\n` +
        (G === 1
          ? `  for (uint c = tidx; c < ${u(D)}; c += ${u(T)}) {\n    float ${sums.map((_, j) => `t${j} = ${f(0)}`).join(', ')};\n` +
            `    #pragma unroll\n    for (uint wi = 0u; wi < ${u(W)}; ++wi) {${sums.map((_, j) => ` t${j} += ${slots(j ? `${u(j * D)} + c` : 'c')};`).join('')} }\n` +
            `    ${storeAll('c', (j) => `t${j}`)}\n  }\n`
          : `  for (uint c = tidx; c < ${u(PD)}; c += ${u(T)}) {\n    float t = ${f(0)};\n` +
            `    #pragma unroll\n    for (uint wi = 0u; wi < ${u(W)}; ++wi) t += ${slots('c')};\n` +
            `    mpsc_scratch[tgid.x * ${u(PD)} + c] = t;\n  }\n`),
    }, ` [dx${addOut ? ' + the residual gradient' : ''}${half ? ' (and its 16-bit copy)' : ''}, and dweight / dbias${P === 3 ? ' / its column sums' : ''} partials in shared memory (each warp its own) of ${REM ? `${Q}-${Q + 1}` : Q} rows per warp, ${W} warps per block, ${G} block${G === 1 ? '' : 's'}]`);
  };
  const first = sm ? smemKernel(sm) : kernelSpec(ctx, g, n, args, {
    groups: [G, 1, 1], tgsize: [32 * WARPS, 1, 1], tgmem: P * D * 4, sync: true, ...(G === 1 ? {} : { scratch: bytes }),
    body:
      `  // warp sg of block b: rows (b * ${u(WARPS)} + sg) * ${u(RW)} + j (j < ${u(RW)}) in order, each as a warp per row of D = ${u(D)}${vt ? ' (8 consecutive elements per lane and group of 256: 16-byte accesses)' : ''}:\n` +
      `  // dx = rstd * (g - sum(g)/D - xhat * sum(g*xhat)/D), g = dy${weight ? ' * w' : ''}; the lanes' sums of dy * xhat (pw) and dy (pb)${P === 3 ? ' and of the stored dx (po)' : ''} per column kept\n` +
      decl('g') + decl('h') + sums.map((x) => decl(x.p)).join('') +
      `  const uint r0 = (tgid.x * ${u(WARPS)} + sg) * ${u(RW)};\n` +
      `  for (uint j = 0u; j < ${u(RW)}; ++j) {\n    const uint r = r0 + j;\n    if (r < ${u(rows)}) {\n` +
      rowBody +
      `    }\n  }\n` +
      `  // the block's sums per column: its warps' partials added in warp order (tg: ${sums.map((x) => x.p).join(' then ')})\n` +
      `  for (uint wi = 0u; wi < ${u(WARPS)}; ++wi) {\n    if (sg == wi) {\n` +
      perSlot((k, slot) => sums.map((x, j) => {
        const at = j ? `${u(j * D)} + ${slot}` : slot;
        return `tg[${at}] = (wi == 0u ? ${f(0)} : tg[${at}]) + ${x.p}${k};`;
      }).join(' ')) +
      `    }\n    ${d.barrier()}\n  }\n` +
      (G === 1
        ? `  for (uint c = tidx; c < ${u(D)}; c += ${u(32 * WARPS)}) { ${storeAll('c', (j) => (j ? `tg[${u(j * D)} + ${slotOf('c')}]` : `tg[${slotOf('c')}]`))} }\n`
        : vt
          ? `  for (uint c = tidx; c < ${u(P * D)}; c += ${u(32 * WARPS)}) { const uint q = c / ${u(D)}, cc = c - q * ${u(D)}; mpsc_scratch[tgid.x * ${u(P * D)} + c] = tg[q * ${u(D)} + ${slotOf('cc')}]; }\n`
          : `  for (uint c = tidx; c < ${u(P * D)}; c += ${u(32 * WARPS)}) mpsc_scratch[tgid.x * ${u(P * D)} + c] = tg[c];\n`),
  }, ` [dx${addOut ? ' + the residual gradient' : ''}${half ? ' (and its 16-bit copy)' : ''}${vt ? ' by 16-byte vectors' : ''}, and dweight / dbias${P === 3 ? ' / its column sums' : ''} partials of ${RW} row${RW === 1 ? '' : 's'} per warp, ${G} block${G === 1 ? '' : 's'}]`);
  if (G === 1) return [first];
  // MPSC_CUDA_LN_FINISH=serial (build time): the thread-per-column chain (A/B)
  const serial = finishMode() === 'serial';
  if (!serial) return [first, blockSumsFinish(ctx, g, n, sums, D, G)];
  const finish = elementwise(ctx, g, n, writes, D,
    `  // the ${G} blocks' sums of column i, in block order\n  float ${sums.map((_, j) => `t${j} = ${f(0)}`).join(', ')};\n` +
    `  for (uint b = 0u; b < ${u(G)}; ++b) {${sums.map((_, j) => ` t${j} += mpsc_scratch[b * ${u(P * D)} + ${j ? `${u(j * D)} + ` : ''}i];`).join('')} }\n` +
    `  ${storeAll('i', (j) => `t${j}`)}\n`, ` [${sums.map((x) => x.arg).join(', ')}: sum of ${G} blocks]`);
  return [first, { ...finish, scratch: bytes }];
}

/**
 * MPSC_CUDA_LN_FINISH (build time): how the blocks' partial column sums are added (blockSumsFinish). `warp` (default): a
 * warp per column (each lane every 32nd block: a line per lane and load, the slots a row apart); `cols`: a block per 32
 * slots, its warps taking consecutive runs of blocks, each warp reading 32 consecutive slots per block (one 128-byte
 * line): right on an H100 (bench/cuda_check.sh kernels) and faster per finish there (~7 us against phase 30's 9-12 on an
 * H200), but no faster step within the rounds' spread (bench/NOTES.md phase 31), so not the default (new bits for no measured gain);
 * `serial` (layernorm_grad only): one thread per column adding all slots in a chain.
 */
export function finishMode(): 'cols' | 'warp' | 'serial' {
  return envChoice('MPSC_CUDA_LN_FINISH', ['warp', 'cols', 'serial'], 'warp');
}

/**
 * The second kernel of a column sum kept as G blocks' partials: block b's P sums of D columns at mpsc_scratch[b * P * D +
 * j * D + c] (sum j, column c); writes each sum's D totals to its output (`sums[j]`: argument name, value id).
 * `cols` (MPSC_CUDA_LN_FINISH=cols, finishMode): the P * D slots of a block as one row, block x of the kernel taking slots 32 x .. 32 x + 31
 * with S = min(32, G) warps: warp w adds blocks w Q .. w Q + Q - 1 in order (Q = ceil(G / S), every load issued at once;
 * the 32 lanes read 32 consecutive slots, one line), then warp 0 adds the S warps' sums in warp order: a fixed order.
 * The `warp` form (the default: a warp per column, lane l adding the blocks l, l + 32, ... then the warp's butterfly sum)
 * reads one line per lane and load, the slots a row of P * D floats apart: 12.1 us for GPT-2's fc bias (512 x 3072 slots)
 * and 8.7 us per layernorm gradient (256 x 2304) on an H200 (bench/NOTES.md v40). One thread per column adding all G slots
 * in a chain took 12-20 us at G = 256 (gpt_tiny, main fe774ce profile); the warp form's graph steps, H200: gpt_tiny
 * 0.920 -> 0.821 ms, gpt_char fp32 23.81 -> 23.63 ms. Serves layernorm_grad's partials and wide_ew_cuda.ts's unary
 * gradient column sums.
 */
export function blockSumsFinish(ctx: LowerCtx, g: Graph, n: Node, sums: readonly { arg: string; out: number }[], D: number, G: number, base = 0): KernelSpec {
  const d = ctx.d, u = (k: number) => d.u(k), f = (x: number) => d.f(x);
  const P = sums.length, W = P * D;
  // the partials' first float in the scratch region (after a kernel's own scratch: attention_cuda.ts's rule-15 sums)
  const at = (i: string) => (base ? `${u(base)} + ${i}` : i);
  const writes = sums.map((x) => argOf(g, x.arg, x.out, 'w'));
  if (finishMode() === 'cols') {
    const S = Math.min(32, G), Q = ceilDiv(G, S);
    // slot w of the row: sum j = w / D, column w - j D
    const store = sums.map((x, j) => `${j ? ' else ' : ''}${j < P - 1 ? `if (w < ${u((j + 1) * D)}) ` : ''}{ ${writeF(d, g, x.out, x.arg, j ? `w - ${u(j * D)}` : 'w', 't')} }`).join('');
    const spec = kernelSpec(ctx, g, n, writes, {
      groups: [ceilDiv(W, 32), 1, 1], tgsize: [32 * S, 1, 1], tgmem: 32 * S * 4, sync: true,
      body:
        `  // slots w = 32 tgid.x + l (l = tidx % 32) of the ${G} blocks' rows of ${W}: warp sg adds blocks sg * ${u(Q)} + q (q < ${u(Q)}) in order, then warp 0 the ${S} warps' sums in order\n` +
        `  const uint w = tgid.x * 32u + tidx % 32u;\n  float t = ${f(0)};\n` +
        `  if (w < ${u(W)}) {\n    #pragma unroll\n    for (uint q = 0u; q < ${u(Q)}; ++q) {\n      const uint b = sg * ${u(Q)} + q;\n` +
        `      ${Q * S > G ? `if (b < ${u(G)}) ` : ''}t += mpsc_scratch[${at(`b * ${u(W)} + w`)}];\n    }\n  }\n` +
        `  tg[tidx] = t;\n  ${d.barrier()}\n` +
        `  if (sg == 0u && w < ${u(W)}) {\n    t = ${f(0)};\n    for (uint k = 0u; k < ${u(S)}; ++k) t += tg[k * 32u + tidx];\n    ${store}\n  }\n`,
    }, ` [${sums.map((x) => x.arg).join(', ')}: sum of ${G} blocks, 32 slots per block of ${S} warps]`);
    return { ...spec, scratch: (base + G * W) * 4 };
  }
  const Q = ceilDiv(G, 32);
  const finish = elementwise(ctx, g, n, writes, 32 * D,
    `  // the ${G} blocks' sums of column c (warp c): its thread l adds blocks l + 32 q (q < ${Q}) in order, then the warp's sum\n` +
    `  const uint c = i / 32u, l = i % 32u;\n  float ${sums.map((_, j) => `t${j} = ${f(0)}`).join(', ')};\n` +
    `  #pragma unroll\n  for (uint q = 0u; q < ${u(Q)}; ++q) {\n    const uint b = l + 32u * q;\n` +
    `    if (b < ${u(G)}) {${sums.map((_, j) => ` t${j} += mpsc_scratch[${at(`b * ${u(P * D)} + ${j ? `${u(j * D)} + ` : ''}c`)}];`).join('')} }\n  }\n` +
    sums.map((_, j) => `  t${j} = ${d.simdSum(`t${j}`)};\n`).join('') +
    `  if (l == 0u) { ${sums.map((x, j) => writeF(d, g, x.out, x.arg, 'c', `t${j}`)).join(' ')} }\n`, ` [${sums.map((x) => x.arg).join(', ')}: sum of ${G} blocks, a warp per column]`);
  // the warp sums are SIMD-group functions: declared with barriers (sync), so merge.ts leaves the kernel its own launch
  return { ...finish, scratch: (base + G * W) * 4, sync: true };
}
