/**
 * embedding_cuda: the CUDA backend's embedding_grad (dy [..., D], i32 ids [...] -> dw [V, D]:
 * dw[v] = the sum of dy's rows at the positions whose id is v, zero for ids that do not occur),
 * deterministic and fast at GPT-2's V = 50 304. The previous kernel gave each vocabulary row a
 * block scanning all J ids (V x J compares: 223 ms at J = 16 384). Here, two kernels:
 *  1. a stable counting sort of the positions by id, without atomics: position j's slot is the
 *     number of positions with a smaller id plus the number of earlier positions with the same id
 *     (one thread per position comparing against all ids, read through shared memory in tiles of
 *     256); slot -> position and slot -> id go to the plan's scratch region (`mpsc_scratch`, as
 *     floats: exact below 2^24);
 *  2. a block per vocabulary row v finds its run of slots by binary search over the sorted ids and
 *     adds its positions' dy rows in position order (the same order on every run: bitwise
 *     reproducible); a row without occurrence writes zeros.
 * Ids outside [0, V) are sorted like the others and never summed (no row looks for them).
 * Consumes an embedding_grad node (CUDA dialect context; the bodies use only the kernel language);
 * produces KernelSpecs.
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { argOf, ceilDiv, elemOf, kernelSpec, numel, readF, rowThreads, shapeOf } from '../kernels/common.js';
import { isHalfElem } from '../kernels/dialect.js';

const TILE = 256;
/** positions and ids are kept as floats in the scratch region: exact below this */
const FLOAT_EXACT = 2 ** 24;

export function lowerEmbeddingGradCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] {
  const d = ctx.d, u = (k: number) => d.u(k);
  const [V, D] = n.attrs.w_shape as number[];
  const J = numel(shapeOf(g, n.inputs[1]));
  if (J >= FLOAT_EXACT || V >= FLOAT_EXACT) throw new Error(`internal: embedding_grad node ${n.id}: ${J} ids / ${V} rows exceed the sort's float slots`);
  const bytes = 2 * J * 4;
  const sort: KernelSpec = {
    ...kernelSpec(ctx, g, n, [argOf(g, 'ids', n.inputs[1], 'r')], {
      groups: [ceilDiv(J, TILE), 1, 1], tgsize: [TILE, 1, 1], tgmem: TILE * 4, sync: true,
      body:
        `  // position j's slot in the stable sort by id: positions with a smaller id + earlier positions with the same id;\n` +
        `  // scratch[slot] = j, scratch[${u(J)} + slot] = its id\n` +
        `  const uint j = tgid.x * ${u(TILE)} + tidx;\n` +
        `  const float id = j < ${u(J)} ? float(ids[j]) : ${d.f(0)};\n` +
        `  uint slot = 0u;\n` +
        `  for (uint t0 = 0u; t0 < ${u(J)}; t0 += ${u(TILE)}) {\n` +
        `    ${d.barrier()}\n` +
        `    if (t0 + tidx < ${u(J)}) tg[tidx] = float(ids[t0 + tidx]);\n` +
        `    ${d.barrier()}\n` +
        `    const uint n = min(${u(TILE)}, ${u(J)} - t0);\n` +
        `    for (uint k = 0u; k < n; ++k) {\n` +
        `      const float o = tg[k];\n` +
        `      if (o < id || (o == id && t0 + k < j)) ++slot;\n` +
        `    }\n` +
        `  }\n` +
        `  if (j < ${u(J)}) { mpsc_scratch[slot] = float(j); mpsc_scratch[${u(J)} + slot] = id; }\n`,
    }, ` [stable sort of the ${J} positions by id]`),
    scratch: bytes,
  };
  const T = rowThreads(D);
  const outT = elemOf(g, n.outputs[0]);
  const store = (x: string) => (isHalfElem(outT) ? d.fromFloat(outT, x) : x);
  const first = (name: string, key: string) =>
    `  uint ${name} = 0u;\n  { uint hi = ${u(J)};\n    while (${name} < hi) { const uint mid = (${name} + hi) / 2u; if (mpsc_scratch[${u(J)} + mid] < ${key}) ${name} = mid + 1u; else hi = mid; }\n  }\n`;
  const sum: KernelSpec = {
    ...kernelSpec(ctx, g, n, [argOf(g, 'dy', n.inputs[0], 'r'), argOf(g, 'dw', n.outputs[0], 'w')], {
      groups: [V, 1, 1], tgsize: [T, 1, 1], tgmem: 0, sync: false,
      body:
        `  // vocabulary row v: its run [k0, k1) of the sorted slots (binary search), dy's rows of those positions added in position order\n` +
        `  const uint v = tgid.x;\n` +
        first('k0', 'float(v)') + first('k1', 'float(v + 1u)') +
        `  for (uint c = tidx; c < ${u(D)}; c += ${u(T)}) {\n` +
        `    float acc = ${d.f(0)};\n` +
        `    for (uint k = k0; k < k1; ++k) acc += ${readF(d, g, n.inputs[0], 'dy', `uint(mpsc_scratch[k]) * ${u(D)} + c`)};\n` +
        `    dw[v * ${u(D)} + c] = ${store('acc')};\n` +
        `  }\n`,
    }, ` [block per vocabulary row over its sorted positions, ${T} channels at a time]`),
    scratch: bytes,
  };
  return [sort, sum];
}
