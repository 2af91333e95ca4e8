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
 *
 * The same pattern (32 adjacent channels x 8 interleaved row slices per block, slice sums added
 * in slice order) replaces two more shared kernels that loop over all rows in one thread:
 *  - layernorm_grad's weight and bias gradients (sums over all B*T rows per channel): the rows
 *    are cut into S chunks so that the grid fills the GPU; block (channel tile, chunk) writes its
 *    two partial sums into the plan's scratch region (`mpsc_scratch`, KernelSpec.scratch), and a
 *    second kernel adds the S partials per channel in chunk order (S = 1: the first kernel
 *    writes the gradients itself). The dx kernel is the shared one (reduce.ts layernormGradDx).
 *  - embedding_grad: block (vocabulary row v, channel tile) scans all ids; each row slice adds
 *    dy of the positions whose id is v in position order. No atomics: the result is the same
 *    for every launch order.
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { argOf, ceilDiv, elementwise, label, numel, shapeOf } from '../kernels/common.js';
import { sumToDims } from '../kernels/elementwise.js';
import { layernormGradDx, layernormRows } from '../kernels/reduce.js';

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

/** four blocks of 256 threads per SM of the H200 (132 SMs): the row chunks of layernorm_grad aim at this many blocks */
const FILL_BLOCKS = 528;
/** rows per chunk at least (8 per row slice) */
const MIN_CHUNK_ROWS = 64;

/** layernorm_grad's row chunks: S chunks of `chunk` rows (the last one may be shorter) */
export function layernormChunks(rows: number, D: number): { S: number; chunk: number } {
  const tiles = ceilDiv(D, 32);
  const want = Math.max(1, Math.min(ceilDiv(FILL_BLOCKS, tiles), Math.floor(rows / MIN_CHUNK_ROWS)));
  const chunk = ceilDiv(rows, want);
  return { S: ceilDiv(rows, chunk), chunk };
}

/** layernorm_grad: the shared dx kernel, then the weight and bias gradients as a chunked two-pass reduction */
export function lowerLayernormGradCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] {
  const d = ctx.d, u = (k: number) => d.u(k);
  const { D, rows } = layernormRows(g, n);
  const { S, chunk } = layernormChunks(rows, D);
  const ins = n.inputs, outs = n.outputs;
  const dx = layernormGradDx(ctx, g, n);
  const reads = [argOf(g, 'dy', ins[0], 'r'), argOf(g, 'x', ins[1], 'r'), argOf(g, 'mean', ins[3], 'r'), argOf(g, 'rstd', ins[4], 'r')];
  const grads = [argOf(g, 'dweight', outs[1], 'w'), argOf(g, 'dbias', outs[2], 'w')];
  const store = S === 1
    ? `    dweight[c] = sw;\n    dbias[c] = sb;\n`
    : `    mpsc_scratch[tgid.y * ${u(2 * D)} + c] = sw;\n    mpsc_scratch[tgid.y * ${u(2 * D)} + ${u(D)} + c] = sb;\n`;
  const partial: KernelSpec = {
    node: n.id, op: n.op, name: ctx.next(), args: S === 1 ? [...reads, ...grads] : reads, sync: true,
    label: `${label(g, n)} [dweight, dbias: 32 channels x 8 row slices per block, ${S} chunk${S === 1 ? '' : 's'} of ${chunk} rows]`,
    groups: [ceilDiv(D, 32), S, 1], tgsize: [32, 8, 1], tgmem: 2 * 256 * 4,
    ...(S === 1 ? {} : { scratch: S * 2 * D * 4 }),
    body:
      `  // channel c, rows ${chunk} * chunk + y, + 8, ... of the chunk: sums of dy * xhat (dweight) and of dy (dbias)\n` +
      `  const uint c = tgid.x * 32u + tid.x;\n` +
      `  const uint r0 = tgid.y * ${u(chunk)}, r1 = min(r0 + ${u(chunk)}, ${u(rows)});\n` +
      `  float sw = 0.0f, sb = 0.0f;\n` +
      `  if (c < ${u(D)}) {\n` +
      `    for (uint r = r0 + tid.y; r < r1; r += 8u) {\n` +
      `      const float g = dy[r * ${u(D)} + c];\n` +
      `      sb += g;\n      sw += g * (x[r * ${u(D)} + c] - mean[r]) * rstd[r];\n    }\n  }\n` +
      `  tg[tid.y * 32u + tid.x] = sw;\n  tg[256u + tid.y * 32u + tid.x] = sb;\n  ${d.barrier()}\n` +
      `  if (tid.y == 0u && c < ${u(D)}) {\n    sw = 0.0f; sb = 0.0f;\n` +
      `    for (uint s = 0u; s < 8u; ++s) { sw += tg[s * 32u + tid.x]; sb += tg[256u + s * 32u + tid.x]; }\n` +
      store + `  }\n`,
  };
  if (S === 1) return [dx, partial];
  const finish = elementwise(ctx, g, n, grads, D,
    `  // the ${S} chunks' partial sums of channel i, in chunk order\n` +
    `  float sw = 0.0f, sb = 0.0f;\n` +
    `  for (uint s = 0u; s < ${u(S)}; ++s) { sw += mpsc_scratch[s * ${u(2 * D)} + i]; sb += mpsc_scratch[s * ${u(2 * D)} + ${u(D)} + i]; }\n` +
    `  dweight[i] = sw;\n  dbias[i] = sb;\n`, ` [dweight, dbias: sum of ${S} chunks]`);
  return [dx, partial, { ...finish, scratch: S * 2 * D * 4 }];
}

/** embedding_grad: block (vocabulary row, 32 channels) scans the ids in 8 interleaved slices, no atomics */
export function lowerEmbeddingGradCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] {
  const d = ctx.d, u = (k: number) => d.u(k);
  const [V, D] = n.attrs.w_shape as number[];
  const J = numel(shapeOf(g, n.inputs[1]));
  return [{
    node: n.id, op: n.op, name: ctx.next(), sync: true,
    label: `${label(g, n)} [block per vocabulary row x 32 channels, ${J} ids in 8 slices]`,
    args: [argOf(g, 'dy', n.inputs[0], 'r'), argOf(g, 'ids', n.inputs[1], 'r'), argOf(g, 'dw', n.outputs[0], 'w')],
    groups: [V, ceilDiv(D, 32), 1], tgsize: [32, 8, 1], tgmem: 256 * 4,
    body:
      `  // dw[v, c] = sum of dy[j, c] over the positions j whose id is v: slice y takes j = y, y + 8, ... in order\n` +
      `  const int v = int(tgid.x);\n  const uint c = tgid.y * 32u + tid.x;\n  float acc = 0.0f;\n` +
      `  if (c < ${u(D)}) {\n` +
      `    for (uint j = tid.y; j < ${u(J)}; j += 8u) if (ids[j] == v) acc += dy[j * ${u(D)} + c];\n  }\n` +
      `  tg[tid.y * 32u + tid.x] = acc;\n  ${d.barrier()}\n` +
      `  if (tid.y == 0u && c < ${u(D)}) {\n    float s = 0.0f;\n    for (uint y = 0u; y < 8u; ++y) s += tg[y * 32u + tid.x];\n` +
      `    dw[uint(v) * ${u(D)} + c] = s;\n  }\n`,
  }];
}
