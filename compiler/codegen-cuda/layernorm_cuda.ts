/**
 * layernorm_cuda: the CUDA backend's layernorm forward and layernorm_grad's dx over rows of D <= WARP_D:
 * a warp per row (8 rows per block of 256), the row's D values held in registers (lane l keeps elements
 * l, l + 32, ... : K = ceil(D / 32) of them, written out as K statements), so each row is read once
 * and written once, with warp butterflies (no barriers) for its sums. The shared kernels
 * (compiler/kernels/reduce.ts) give a row a threadgroup and read it three times with two block
 * reductions: GPT-2's 16 384 rows of 768 took ~54 us per layernorm and ~56 us per dx on the H200,
 * ~2 x the bytes at the copy rate. Wider rows keep the shared kernels.
 * The sums run in a fixed order (each lane's K values in order, then the butterfly), so results do
 * not depend on scheduling. 16-bit inputs are read through the dialect's typed loads, 16-bit outputs
 * written through its typed stores.
 * Consumes layernorm nodes and layernorm_grad nodes (the dx part; the weight / bias gradients are
 * reduce_cuda.ts's column sums) in a CUDA dialect context (the bodies use only the kernel language);
 * produces KernelSpecs (null: the shared kernel).
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { argOf, ceilDiv, elemOf, kernelSpec, numAttr, readF } from '../kernels/common.js';
import { isHalfElem } from '../kernels/dialect.js';
import { layernormRows } from '../kernels/reduce.js';

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

function store(ctx: LowerCtx, g: Graph, id: number, x: string): string {
  const t = elemOf(g, id);
  return isHalfElem(t) ? ctx.d.fromFloat(t, x) : x;
}

/** layernorm (x, w?, b? -> y, mean, rstd) a warp per row; null when D > WARP_D */
export function lowerLayernormCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] | null {
  const { D, rows } = layernormRows(g, n);
  if (D > WARP_D) return null;
  const d = ctx.d, u = (k: number) => d.u(k), f = (x: number) => d.f(x);
  const ins = n.inputs, outs = n.outputs;
  const weight = ins.length > 1 && ins[1] >= 0, bias = ins.length > 2 && ins[2] >= 0;
  const K = ceilDiv(D, 32);
  const vs = Array.from({ length: K }, (_, k) => `v${k}`);
  const args = [argOf(g, 'x', ins[0], 'r'), ...(weight ? [argOf(g, 'w', ins[1], 'r')] : []), ...(bias ? [argOf(g, 'b', ins[2], 'r')] : []),
    argOf(g, 'y', outs[0], 'w'), argOf(g, 'mean', outs[1], 'w'), argOf(g, 'rstd', outs[2], 'w')];
  const wAt = (col: string) => (weight ? ` * ${readF(d, g, ins[1], 'w', col)}` : '');
  const bAt = (col: string) => (bias ? ` + ${readF(d, g, ins[2], 'b', col)}` : '');
  return [kernelSpec(ctx, g, n, args, {
    groups: [ceilDiv(rows, WARPS), 1, 1], tgsize: [32 * WARPS, 1, 1], tgmem: 0, sync: true,
    body:
      `  // a warp per row of D = ${u(D)}: lane l keeps elements l, l + 32, ... in registers; one read, one write\n` +
      `  const uint r = tgid.x * ${u(WARPS)} + sg;\n  if (r >= ${u(rows)}) return;\n  const uint base = r * ${u(D)};\n` +
      `  float ${vs.map((v) => `${v} = ${f(0)}`).join(', ')};\n` +
      lanes(d, D, (k, idx) => `v${k} = ${readF(d, g, ins[0], 'x', idx)};`) +
      `  const float mu = ${d.simdSum(vs.join(' + '))} / ${f(D)};\n` +
      `  float q = ${f(0)};\n` +
      lanes(d, D, (k) => `{ const float c = v${k} - mu; q += c * c; }`) +
      `  const float rs = ${f(1)} / ${d.math('sqrt', `${d.simdSum('q')} / ${f(D)} + ${f(numAttr(n, 'eps', 1e-5))}`)};\n` +
      lanes(d, D, (k, idx, col) => `y[${idx}] = ${store(ctx, g, outs[0], `(v${k} - mu) * rs${wAt(col)}${bAt(col)}`)};`) +
      `  if (lane == 0u) { mean[r] = mu; rstd[r] = rs; }\n`,
  }, ' [a warp per row]')];
}

/** layernorm_grad's dx (dy, x, w?, mean, rstd -> dx) a warp per row; null when D > WARP_D */
export function layernormGradDxCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec | null {
  const { D, rows } = layernormRows(g, n);
  if (D > WARP_D) return null;
  const d = ctx.d, u = (k: number) => d.u(k), f = (x: number) => d.f(x);
  const ins = n.inputs;
  const weight = ins.length > 2 && ins[2] >= 0;
  const K = ceilDiv(D, 32);
  const args = [argOf(g, 'dy', ins[0], 'r'), argOf(g, 'x', ins[1], 'r'), ...(weight ? [argOf(g, 'w', ins[2], 'r')] : []),
    argOf(g, 'mean', ins[3], 'r'), argOf(g, 'rstd', ins[4], 'r'), argOf(g, 'dx', n.outputs[0], 'w')];
  const decl = (p: string) => `  float ${Array.from({ length: K }, (_, k) => `${p}${k} = ${f(0)}`).join(', ')};\n`;
  return kernelSpec(ctx, g, n, args, {
    groups: [ceilDiv(rows, WARPS), 1, 1], tgsize: [32 * WARPS, 1, 1], tgmem: 0, sync: true,
    body:
      `  // a warp per row of D = ${u(D)}: dx = rstd * (g - sum(g)/D - xhat * sum(g*xhat)/D), g = dy${weight ? ' * w' : ''}, each lane's g and xhat in registers\n` +
      `  const uint r = tgid.x * ${u(WARPS)} + sg;\n  if (r >= ${u(rows)}) return;\n  const uint base = r * ${u(D)};\n` +
      `  const float mu = mean[r], rs = rstd[r];\n` +
      decl('g') + decl('h') + `  float s1 = ${f(0)}, s2 = ${f(0)};\n` +
      lanes(d, D, (k, idx, col) =>
        `g${k} = ${readF(d, g, ins[0], 'dy', idx)}${weight ? ` * ${readF(d, g, ins[2], 'w', col)}` : ''}; h${k} = (${readF(d, g, ins[1], 'x', idx)} - mu) * rs; s1 += g${k}; s2 += g${k} * h${k};`) +
      `  s1 = ${d.simdSum('s1')} / ${f(D)};\n  s2 = ${d.simdSum('s2')} / ${f(D)};\n` +
      lanes(d, D, (k, idx) => `dx[${idx}] = ${store(ctx, g, n.outputs[0], `rs * (g${k} - s1 - h${k} * s2)`)};`),
  }, ' [dx: a warp per row]');
}
