/**
 * reduce_cuda: the CUDA backend's sum_to (bias gradients, broadcast gradients) for long
 * reductions. The shared kernel (compiler/kernels/elementwise.ts) runs one thread per output
 * looping over all its terms: right for short sums, but a conv bias gradient is 32-128 threads
 * each summing 131 072 strided terms, latency-bound on a few SMs. Here, when an output has at
 * least LONG terms, the terms are spread over a block:
 *  - innermost dim summed (conv bias: terms adjacent in memory): one block of 256 threads per
 *    output, thread j takes terms j, j + 256, ...; then the warps' butterfly sums and a sum of
 *    the 8 warp totals in warp order;
 *  - innermost dim kept (linear bias: [batch, N] -> [N]): blocks of 32 x 8 threads, x over 32
 *    adjacent outputs (coalesced loads), y over 8 interleaved slices of the terms; the 8 slice
 *    sums are added in slice order.
 * The order of additions is fixed by the shapes, so results do not depend on scheduling.
 * Consumes a sum_to node (CUDA dialect context); produces a KernelSpec, or null to keep the
 * shared kernel. The index arithmetic is the shared one (sumToDims).
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { argOf, ceilDiv, label } from '../kernels/common.js';
import { sumToDims } from '../kernels/elementwise.js';

/** terms per output from which a block shares one output's sum */
export const LONG = 512;

export function lowerSumToCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec | null {
  const d = ctx.d;
  const { kept, red, RN, count, innerReduced } = sumToDims(d, g, n);
  if (RN < LONG) return null;
  const base = (i: string) =>
    `    uint rem = ${i}, base = 0u;\n` + kept.map((k) => `    { const uint c = rem % ${k.size}; rem /= ${k.size}; base += c * ${k.stride}; }\n`).join('');
  const term = (t: string) =>
    `      uint q = ${t}, off = base;\n` + red.map((k) => `      { const uint c = q % ${k.size}; q /= ${k.size}; off += c * ${k.stride}; }\n`).join('') +
    `      acc += x[off];\n`;
  const args = [argOf(g, 'x', n.inputs[0], 'r'), argOf(g, 'y', n.outputs[0], 'w')];
  const common = { node: n.id, op: n.op, args, sync: true };
  if (innerReduced) {
    return {
      ...common, name: ctx.next(), label: `${label(g, n)} [one block per output, ${RN} terms]`,
      groups: [count, 1, 1], tgsize: [256, 1, 1], tgmem: 8 * 4,
      body:
        `  // y[i] = sum of x over the reduced dims (${RN} terms): block i, thread j sums terms j, j + 256, ...\n` +
        `  const uint i = tgid.x;\n  float acc = 0.0f;\n  {\n${base('i')}` +
        `    for (uint t = tidx; t < ${d.u(RN)}; t += 256u) {\n${term('t')}    }\n  }\n` +
        `  acc = ${d.simdSum('acc')};\n` +
        `  if (lane == 0u) tg[sg] = acc;\n  ${d.barrier()}\n` +
        `  if (tidx == 0u) {\n    float s = 0.0f;\n    for (uint w = 0u; w < 8u; ++w) s += tg[w];\n    y[i] = s;\n  }\n`,
    };
  }
  return {
    ...common, name: ctx.next(), label: `${label(g, n)} [32 outputs x 8 term slices per block, ${RN} terms]`,
    groups: [ceilDiv(count, 32), 1, 1], tgsize: [32, 8, 1], tgmem: 256 * 4,
    body:
      `  // y[i] = sum of x over the reduced dims (${RN} terms): thread (x, y) sums terms y, y + 8, ... of output 32 * block + x\n` +
      `  const uint i = tgid.x * 32u + tid.x;\n  float acc = 0.0f;\n  if (i < ${d.u(count)}) {\n${base('i')}` +
      `    for (uint t = tid.y; t < ${d.u(RN)}; t += 8u) {\n${term('t')}    }\n  }\n` +
      `  tg[tid.y * 32u + tid.x] = acc;\n  ${d.barrier()}\n` +
      `  if (tid.y == 0u && i < ${d.u(count)}) {\n    float s = 0.0f;\n    for (uint w = 0u; w < 8u; ++w) s += tg[w * 32u + tid.x];\n    y[i] = s;\n  }\n`,
  };
}
