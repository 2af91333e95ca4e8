/**
 * reduce_cuda: the CUDA backend's long reductions: sum_to (bias gradients, broadcast gradients),
 * layernorm_grad's weight / bias gradients (embedding_grad: embedding_cuda.ts; class losses:
 * class_rows.ts). The shared sum_to kernel
 * (compiler/kernels/elementwise.ts) runs one thread per output looping over all its terms:
 * right for short sums, but a conv bias gradient is 32-128 threads
 * each summing 131 072 strided terms, latency-bound on a few SMs. Here, when an output has at
 * least LONG terms, the terms are spread over a block:
 *  - innermost dim summed (conv bias: terms adjacent in memory): one block of 256 threads per
 *    output, thread j takes terms j, j + 256, ...; then the warps' butterfly sums and a sum of
 *    the 8 warp totals in warp order; when the outputs leave SMs idle, a block per output and
 *    chunk of the terms, the chunk sums into the scratch region and a second kernel adding them
 *    in chunk order;
 *  - innermost dim kept (linear bias: [batch, N] -> [N]): a column sum (columnSums, below).
 * Column sums (32 adjacent columns x 8 interleaved row slices per block, each slice taking its rows
 * four at a time in order, the slice sums added in slice order): the rows are cut into S chunks so that the grid fills the GPU; block (column
 * tile, chunk) writes its partial sums into the plan's scratch region (`mpsc_scratch`,
 * KernelSpec.scratch), and a second kernel adds the S partials per column in chunk order (S = 1:
 * the first kernel writes the results itself). They serve the kept-innermost sum_to and
 * layernorm_grad's weight and bias gradients over rows wider than layernorm_cuda.ts's WARP_D (sums over all B*T rows per
 * channel after the shared reduce.ts layernormGradDx; narrower rows: layernorm_cuda.ts layernormGradCuda, all three in one
 * pass), which the shared kernels sum in one thread per column.
 * The order of additions is fixed by the shapes, so results do not depend on scheduling. x (sum_to) and
 * dy, x (layernorm_grad) may be 16-bit (widened as they are loaded: the casts fuse.ts rule 4 folds into
 * these kernels, fusions.ts), and the outputs are stored in their types (common.ts writeF): a bias gradient
 * then reads the 16-bit gradient itself, not an f32 copy.
 * Consumes sum_to / layernorm_grad nodes (CUDA dialect context); produces KernelSpecs (sum_to:
 * null to keep the shared kernel). The index arithmetic of sum_to is the shared one (sumToDims).
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelArg, KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { argOf, ceilDiv, elementwise, label, readF, writeF } from '../kernels/common.js';
import { sumToDims } from '../kernels/elementwise.js';
import { layernormGradDx, layernormRows } from '../kernels/reduce.js';
import { layernormGradCuda } from './layernorm_cuda.js';

/** terms per output from which a block shares one output's sum */
export const LONG = 512;

/** the H200's SMs */
const SMS = 132;
/** four blocks of 256 threads per SM: chunked sums aim at this many blocks */
const FILL_BLOCKS = 4 * SMS;
/** terms per chunk at least of a block-per-output sum (8 per thread of 256) */
const MIN_CHUNK_TERMS = 2048;
/** rows per chunk at least (8 per row slice) */
const MIN_CHUNK_ROWS = 64;

export function lowerSumToCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] | null {
  const d = ctx.d;
  const { kept, red, RN, count, innerReduced } = sumToDims(d, g, n);
  if (RN < LONG) return null;
  const base = (i: string) =>
    `    uint rem = ${i}, base = 0u;\n` + kept.map((k) => `    { const uint c = rem % ${k.size}; rem /= ${k.size}; base += c * ${k.stride}; }\n`).join('');
  const term = (t: string) =>
    `      uint q = ${t}, off = base;\n` + red.map((k) => `      { const uint c = q % ${k.size}; q /= ${k.size}; off += c * ${k.stride}; }\n`).join('') +
    `      acc += ${readF(d, g, n.inputs[0], 'x', 'off')};\n`;
  const args = [argOf(g, 'x', n.inputs[0], 'r'), argOf(g, 'y', n.outputs[0], 'w')];
  const yAt = (i: string, v: string) => writeF(d, g, n.outputs[0], 'y', i, v);
  const common = { node: n.id, op: n.op, args, sync: true };
  if (innerReduced) {
    // S chunks of the terms per output when the outputs alone leave SMs idle (conv bias gradients)
    const S = count >= SMS ? 1 : Math.max(1, Math.min(ceilDiv(FILL_BLOCKS, count), Math.floor(RN / MIN_CHUNK_TERMS)));
    const chunk = ceilDiv(RN, S);
    const bytes = S * count * 4;
    const first: KernelSpec = {
      ...common, args: S === 1 ? args : [args[0]], name: ctx.next(),
      label: `${label(g, n)} [one block per output${S === 1 ? '' : ` and chunk (${S} chunks of ${chunk})`}, ${RN} terms]`,
      groups: [count, S, 1], tgsize: [256, 1, 1], tgmem: 8 * 4, ...(S === 1 ? {} : { scratch: bytes }),
      body:
        `  // y[i] = sum of x over the reduced dims (${RN} terms): block (i, chunk), thread j sums terms j, j + 256, ... of the chunk\n` +
        `  const uint i = tgid.x;\n  const uint t1 = min((tgid.y + 1u) * ${d.u(chunk)}, ${d.u(RN)});\n  float acc = 0.0f;\n  {\n${base('i')}` +
        `    for (uint t = tgid.y * ${d.u(chunk)} + tidx; t < t1; t += 256u) {\n${term('t')}    }\n  }\n` +
        `  acc = ${d.simdSum('acc')};\n` +
        `  if (lane == 0u) tg[sg] = acc;\n  ${d.barrier()}\n` +
        `  if (tidx == 0u) {\n    float s = 0.0f;\n    for (uint w = 0u; w < 8u; ++w) s += tg[w];\n` +
        (S === 1 ? `    ${yAt('i', 's')}\n` : `    mpsc_scratch[tgid.y * ${d.u(count)} + i] = s;\n`) + `  }\n`,
    };
    if (S === 1) return [first];
    const finish = elementwise(ctx, g, n, [args[1]], count,
      `  // the ${S} chunks' sums of output i, in chunk order\n  float s = 0.0f;\n` +
      `  for (uint c = 0u; c < ${d.u(S)}; ++c) s += mpsc_scratch[c * ${d.u(count)} + i];\n  ${yAt('i', 's')}\n`, ` [sum of ${S} chunks]`);
    return [first, { ...finish, scratch: bytes }];
  }
  return columnSums(ctx, g, n, {
    C: count, R: RN, sums: 1, reads: [args[0]], writes: [args[1]], what: 'y',
    col: base('c'), row: term('r').replace('acc += ', 's0 += '), store: (c) => yAt(c, 's0'),
  });
}

/**
 * the row chunks of a column sum of C columns: S chunks of `chunk` rows (the last one may be
 * shorter); one chunk when the column tiles alone give every SM a block (a second kernel would cost
 * more than it saves)
 */
export function columnChunks(rows: number, C: number): { S: number; chunk: number } {
  const tiles = ceilDiv(C, 32);
  const want = tiles >= SMS ? 1 : Math.max(1, Math.min(ceilDiv(FILL_BLOCKS, tiles), Math.floor(rows / MIN_CHUNK_ROWS)));
  const chunk = ceilDiv(rows, want);
  return { S: ceilDiv(rows, chunk), chunk };
}

/**
 * layernorm_grad: rows up to layernorm_cuda.ts's WARP_D there (dx and the weight / bias partials in one pass); wider rows
 * the shared dx kernel, then the weight and bias gradients as chunked column sums over the rows
 */
export function lowerLayernormGradCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] {
  const fused = layernormGradCuda(ctx, g, n);
  if (fused) return fused;
  const u = (k: number) => ctx.d.u(k);
  const { D, rows } = layernormRows(g, n);
  const ins = n.inputs, outs = n.outputs;
  return [layernormGradDx(ctx, g, n), ...columnSums(ctx, g, n, {
    C: D, R: rows, sums: 2, what: 'dweight, dbias',
    reads: [argOf(g, 'dy', ins[0], 'r'), argOf(g, 'x', ins[1], 'r'), argOf(g, 'mean', ins[3], 'r'), argOf(g, 'rstd', ins[4], 'r')],
    writes: [argOf(g, 'dweight', outs[1], 'w'), argOf(g, 'dbias', outs[2], 'w')],
    col: '',
    row: `      const float g = ${readF(ctx.d, g, ins[0], 'dy', `r * ${u(D)} + c`)};\n      s0 += g * (${readF(ctx.d, g, ins[1], 'x', `r * ${u(D)} + c`)} - mean[r]) * rstd[r];\n      s1 += g;\n`,
    store: (c) => `${writeF(ctx.d, g, outs[1], 'dweight', c, 's0')} ${writeF(ctx.d, g, outs[2], 'dbias', c, 's1')}`,
  })];
}

/**
 * K sums per column c of C (s0, s1, ...) over R rows: `col` (statements for column c) and `row`
 * (statements for row r of column c, adding to s0..) run in blocks of 32 columns x 8 row slices
 * over S row chunks (columnChunks); the 8 slice sums are added in slice order, then (S > 1) each
 * chunk's sums go to the scratch region and a second kernel adds the S chunks in chunk order;
 * `store(c)` writes the K totals of column c from s0..
 */
function columnSums(ctx: LowerCtx, g: Graph, n: Node, v: {
  C: number; R: number; sums: number; reads: KernelArg[]; writes: KernelArg[]; what: string; col: string; row: string; store: (c: string) => string;
}): KernelSpec[] {
  const d = ctx.d, u = (k: number) => d.u(k);
  const { S, chunk } = columnChunks(v.R, v.C);
  const K = Array.from({ length: v.sums }, (_, k) => k);
  const decl = `float ${K.map((k) => `s${k} = 0.0f`).join(', ')};`;
  const bytes = S * v.sums * v.C * 4;
  const first: KernelSpec = {
    node: n.id, op: n.op, name: ctx.next(), args: S === 1 ? [...v.reads, ...v.writes] : v.reads, sync: true,
    label: `${label(g, n)} [${v.what}: 32 columns x 8 row slices per block, ${S} chunk${S === 1 ? '' : 's'} of ${chunk} of ${v.R} rows]`,
    groups: [ceilDiv(v.C, 32), S, 1], tgsize: [32, 8, 1], tgmem: v.sums * 256 * 4,
    ...(S === 1 ? {} : { scratch: bytes }),
    body:
      `  // column c, rows y, y + 8, ... of chunk ${S === 1 ? '0' : 'tgid.y'} (${chunk} rows)\n` +
      `  const uint c = tgid.x * 32u + tid.x;\n` +
      `  const uint r0 = tgid.y * ${u(chunk)}, r1 = min(r0 + ${u(chunk)}, ${u(v.R)});\n` +
      `  ${decl}\n` +
      `  if (c < ${u(v.C)}) {\n${v.col}    uint r8 = r0 + tid.y;\n` +
      `    // four rows per step (their loads in flight together), added in the same order as one at a time\n` +
      `    for (; r8 + 24u < r1; r8 += 32u) {\n` +
      [0, 8, 16, 24].map((k) => `    {\n      const uint r = r8${k ? ` + ${k}u` : ''};\n${v.row}    }\n`).join('') +
      `    }\n    for (; r8 < r1; r8 += 8u) {\n      const uint r = r8;\n${v.row}    }\n  }\n` +
      K.map((k) => `  tg[${k * 256}u + tid.y * 32u + tid.x] = s${k};\n`).join('') + `  ${d.barrier()}\n` +
      `  if (tid.y == 0u && c < ${u(v.C)}) {\n` + K.map((k) => `    s${k} = 0.0f;\n`).join('') +
      `    for (uint w = 0u; w < 8u; ++w) {${K.map((k) => ` s${k} += tg[${k * 256}u + w * 32u + tid.x];`).join('')} }\n` +
      (S === 1 ? `    ${v.store('c')}\n` : K.map((k) => `    mpsc_scratch[(tgid.y * ${u(v.sums)} + ${u(k)}) * ${u(v.C)} + c] = s${k};\n`).join('')) + `  }\n`,
  };
  if (S === 1) return [first];
  const finish = elementwise(ctx, g, n, v.writes, v.C,
    `  // the ${S} chunks' sums of column i, in chunk order\n  ${decl}\n` +
    `  for (uint s = 0u; s < ${u(S)}; ++s) {${K.map((k) => ` s${k} += mpsc_scratch[(s * ${u(v.sums)} + ${u(k)}) * ${u(v.C)} + i];`).join('')} }\n` +
    `  ${v.store('i')}\n`, ` [${v.what}: sum of ${S} chunks]`);
  return [first, { ...finish, scratch: bytes }];
}
