/**
 * avgpool_cuda: the CUDA global-average-pool gradient that also writes the bias gradient of the
 * convolution before the pool (fuse.ts rule 9, `c_sums`: output 0 summed over N, H and W). Unfused, that
 * bias gradient is a sum_to re-reading all of dx (the seed CNN: 67 MB, 23.9 + 3.3 us on the H200, two
 * launches) that the pool gradient has just written; but every element of plane (n, c) of dx is either the
 * plane's value v = dy[n, c] / HW or (a folded relu-grad masking it) 0, so the plane's sum is
 * count * v, count the plane's unmasked elements: only the counts need the big tensor, and the pool
 * gradient already reads its mask.
 *  - with a folded relu-grad: kernel 1 is the pool gradient with a block per (plane, chunk of 8 T
 *    elements), T threads (T = 256, fewer for planes under 2048 elements: a multiple of 32 covering
 *    the plane), each thread 8 elements tidx + T k of the chunk, all loads (the mask) before the stores
 *    (dx may be the mask's buffer), the stores the same expression as wide_ew_cuda.ts's kernel (bitwise the
 *    same dx); each thread counts its unmasked elements, the block adds the counts (warp butterflies, then
 *    the warps in order; exact: integers below 2^24 in float) into the scratch region, one float per block.
 *    Kernel 2, a thread per channel c: sum over n in order of (count > 0 ? count * v : 0), count the
 *    plane's chunk counts added in chunk order (a fully masked plane adds 0, as the masked zeros do, even
 *    where v is not finite); v is loaded before the count's test and the n loop unrolled, so every load is
 *    in flight at once (with v's load behind the branch, the seed CNN's 128 threads made 64 dependent round
 *    trips to memory: 14 us one by one on the H200, 5 Dec).
 *  - without one: kernel 1 is the plain pool gradient (wide_ew_cuda.ts or the shared kernel, as unfused);
 *    kernel 2 adds HW * v over n (no counts).
 * Every sum in a fixed order (bitwise reproducible). Not bitwise the unfused sum_to (which adds the
 * elements one at a time): within rounding of the float64 reference, one rounding per plane instead of
 * HW (test/cuda_passes.test.ts, bench/cuda_check.sh kernel cases).
 * Consumes a global_avgpool_grad node (CUDA dialect context); produces its KernelSpecs (`wideOr` for one
 * without c_sums).
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import type { GpuLowering } from '../kernels/registry.js';
import { argOf, ceilDiv, elementwise, kernelSpec, readF, writeF } from '../kernels/common.js';
import { PER_THREAD, wideOr } from './wide_ew_cuda.js';

/** the pool gradient alone (wide_ew_cuda.ts, else the shared kernel) */
const plainGrad = wideOr('global_avgpool_grad');

/** threads per block of the counting kernel for planes of HW elements: 256, or the fewest multiple of 32 covering the plane */
export function countThreads(HW: number): number {
  return Math.min(256, 32 * ceilDiv(HW, 32 * PER_THREAD));
}

/** a global_avgpool_grad node's kernels (with c_sums: the counting pool gradient and the channel sums) */
export const lowerAvgpoolGradCuda: GpuLowering = (ctx, g, n) => (n.attrs.c_sums === true ? withChannelSums(ctx, g, n) : plainGrad(ctx, g, n));

function withChannelSums(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] {
  const d = ctx.d, u = (k: number) => d.u(k), f = (x: number) => d.f(x);
  const [N, C, H, W] = n.attrs.x_shape as number[], HW = H * W;
  if (HW >= 2 ** 24) throw new Error(`internal: node ${n.id}: planes of ${HW} elements: the counts would not be exact in float`);
  const [dyId] = n.inputs, [dxId, sumId] = n.outputs;
  const relu = n.attrs.relu_grad === true;
  const v = (p: string) => `${readF(d, g, dyId, 'dy', p)} / ${f(HW)}`;
  const sums = argOf(g, 'y', sumId, 'w');
  if (!relu) {
    // every element of plane p is v: its sum is HW * v
    const { c_sums: _, ...attrs } = n.attrs;
    const dx = plainGrad(ctx, g, { ...n, outputs: [dxId], attrs });
    const finish = elementwise(ctx, g, n, [argOf(g, 'dy', dyId, 'r'), sums], C,
      `  // channel i: the sum over n of plane (n, i)'s ${HW} elements, each dy[n, i] / ${HW}\n  float s = ${f(0)};\n` +
      `  for (uint n = 0u; n < ${u(N)}; ++n) s += ${f(HW)} * (${v(`n * ${u(C)} + i`)});\n  ${writeF(d, g, sumId, 'y', 'i', 's')}\n`, ' [channel sums]');
    return [...dx, finish];
  }
  const T = countThreads(HW), span = T * PER_THREAD, S = ceilDiv(HW, span), planes = N * C, exact = HW % span === 0;
  const ks = Array.from({ length: PER_THREAD }, (_, k) => k);
  const at = (k: number) => (k ? `e0 + ${u(T * k)}` : 'e0');
  const guard = (k: number, s: string) => (exact ? `  ${s}\n` : `  if (${at(k)} < ${u(HW)}) { ${s} }\n`);
  const bytes = planes * S * 4;
  const args = [argOf(g, 'dy', dyId, 'r'), argOf(g, 'mask', n.inputs[1], 'r'), argOf(g, 'dx', dxId, 'w')];
  const count = kernelSpec(ctx, g, n, args, {
    groups: [planes * S, 1, 1], tgsize: [T, 1, 1], tgmem: (T / 32) * 4, sync: true,
    body:
      `  // plane p = block / ${S}, elements e0 + ${T} k (k < ${PER_THREAD}) of it, e0 = chunk * ${span} + tidx; all loads before the first store\n` +
      `  const uint p = tgid.x${S === 1 ? '' : ` / ${u(S)}`};\n  const uint e0 = ${S === 1 ? '' : `(tgid.x % ${u(S)}) * ${u(span)} + `}tidx;\n` +
      `  const uint b = p * ${u(HW)};\n  const float v = ${v('p')};\n` +
      `  float ${ks.map((k) => `m${k} = ${f(0)}`).join(', ')};\n` +
      ks.map((k) => guard(k, `m${k} = mask[b + ${at(k)}];`)).join('') +
      ks.map((k) => guard(k, writeF(d, g, dxId, 'dx', `b + ${at(k)}`, `m${k} > ${f(0)} ? v : ${f(0)}`))).join('') +
      `  // the unmasked elements of the block (elements past the plane kept m = 0: not counted)\n` +
      `  float c = ${ks.map((k) => `(m${k} > ${f(0)} ? ${f(1)} : ${f(0)})`).join(' + ')};\n` +
      `  c = ${d.simdSum('c')};\n  if (lane == 0u) tg[sg] = c;\n  ${d.barrier()}\n` +
      `  if (tidx == 0u) {\n    float t = ${f(0)};\n    for (uint w = 0u; w < ${u(T / 32)}; ++w) t += tg[w];\n    mpsc_scratch[tgid.x] = t;\n  }\n`,
  }, ` + fused relu-grad, unmasked counts [a block of ${T} per plane${S === 1 ? '' : ` and chunk (${S} chunks of ${span})`}, ${PER_THREAD} elements per thread]`);
  const finish = elementwise(ctx, g, n, [argOf(g, 'dy', dyId, 'r'), sums], C,
    `  // channel i: the sum over n of plane (n, i)'s unmasked count times dy[n, i] / ${HW} (a plane with none adds 0)\n  float s = ${f(0)};\n` +
    `  #pragma unroll${N <= 64 ? '' : ' 16'}\n  for (uint n = 0u; n < ${u(N)}; ++n) {\n    const uint p = n * ${u(C)} + i;\n` +
    `    const float v = ${v('p')};  // loaded whatever the count: no load behind the branch below\n` +
    (S === 1 ? `    const float c = mpsc_scratch[p];\n` :
      `    float c = ${f(0)};\n    for (uint k = 0u; k < ${u(S)}; ++k) c += mpsc_scratch[p * ${u(S)} + k];\n`) +
    `    s += c > ${f(0)} ? c * v : ${f(0)};\n  }\n  ${writeF(d, g, sumId, 'y', 'i', 's')}\n`, ' [channel sums of the counts]');
  return [{ ...count, scratch: bytes }, { ...finish, scratch: bytes }];
}
