/**
 * embedding_cuda: the CUDA backend's embedding_grad (dy [..., D], i32 ids [...] -> dw [V, D]:
 * dw[v] = the sum of dy's rows at the positions whose id is v, zero for ids that do not occur),
 * deterministic and fast at GPT-2's V = 50 304. The previous kernel gave each vocabulary row a
 * block scanning all J ids (V x J compares: 223 ms at J = 16 384). Here, two kernels:
 *  1. a stable counting sort of the positions by id, without atomics: position j's slot is the
 *     number of positions with a smaller id plus the number of earlier positions with the same id
 *     (a block per TILE positions, its SLICES row slices each comparing them against every
 *     SLICES-th tile of TILE ids in shared memory, their counts added in slice order); slot ->
 *     position and slot -> id go to the plan's scratch region (`mpsc_scratch`, as floats: exact
 *     below 2^24; more ids or rows than that keep the shared kernel), and the first position of
 *     each id writes the id's run of slots (begin, end) there too;
 *  2. a block per vocabulary row v reads its run, trusting it only when the slot -> id entry at its
 *     begin is v (the runs of ids absent this step are stale; the slot -> id entries are all
 *     rewritten every step, so that check is exact), and adds its positions' dy rows in position
 *     order (the same order on every run: bitwise reproducible); a row without occurrence writes zeros.
 * Ids outside [0, V) are sorted like the others and never summed (no row looks for them).
 * When the ids are a `positions` node's output (a GPT's position embedding: id t at every [n, t]),
 * no sort: dw[t] is the sum over the N sequences of dy[n, t], one thread per element of dw (an
 * element-wise kernel, which merge.ts may launch together with independent neighbours).
 * The forward embedding with positions for ids reads w[t] directly (lowerEmbeddingCuda), so its
 * launch does not wait for the positions kernel. Consumes embedding / embedding_grad nodes (CUDA
 * dialect context; the bodies use only the kernel language); produces KernelSpecs (null to keep the
 * shared kernel).
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { argOf, ceilDiv, elemOf, elementwise, kernelSpec, numel, readF, rowThreads, shapeOf } from '../kernels/common.js';
import { isHalfElem } from '../kernels/dialect.js';

/** positions per block of the sort (and ids per shared-memory tile): 128 blocks at J = 16 384 */
const TILE = 128;
/** row slices of a sort block, each comparing against its own share of the tiles (1024 threads per block: occupancy) */
const SLICES = 8;
/** positions and ids are kept as floats in the scratch region: exact below this */
const FLOAT_EXACT = 2 ** 24;

/** whether value `ids` is a `positions` node's output (id t at every [n, t]) */
function isPositions(g: Graph, ids: number): boolean {
  return g.nodes.some((m) => m.op === 'positions' && m.outputs.includes(ids));
}

/**
 * embedding with positions for ids and T <= V: y[n, t] = w[t] read without the ids (so the launch does not
 * wait for the positions kernel: merge.ts can launch the token gather, the positions and this one together);
 * other ids: the shared gather (null)
 */
export function lowerEmbeddingCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] | null {
  const ids = n.inputs[0];
  if (!isPositions(g, ids)) return null;
  const [, T] = shapeOf(g, ids);
  const [V, D] = shapeOf(g, n.inputs[1]);
  if (T > V) return null;
  const d = ctx.d, u = (k: number) => d.u(k);
  return [elementwise(ctx, g, n, [argOf(g, 'w', n.inputs[1], 'r'), argOf(g, 'y', n.outputs[0], 'w')], numel(shapeOf(g, n.outputs[0])),
    `  // the ids are positions (id t at [n, t]): y[n, t] = w[t], read without them\n` +
    `  y[i] = ${readF(d, g, n.inputs[1], 'w', `i % ${u(T * D)}`)};\n`, ' [ids are positions]')];
}

/** embedding_grad: positions' sum over the sequences, or the sort + a block per vocabulary row; null (the shared kernel) past 2^24 ids or rows */
export function lowerEmbeddingGradCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] | null {
  const d = ctx.d, u = (k: number) => d.u(k), f = (x: number) => d.f(x);
  const [V, D] = n.attrs.w_shape as number[];
  const J = numel(shapeOf(g, n.inputs[1]));
  const outT = elemOf(g, n.outputs[0]);
  const store = (x: string) => (isHalfElem(outT) ? d.fromFloat(outT, x) : x);
  if (isPositions(g, n.inputs[1])) {
    // ids = positions ([N, T] with id t at [n, t]): dw[t] = the sum over n of dy[n, t] (rows t >= T zero): one
    // thread per element of dw adding the N terms in order (no sort; element-wise, so merge.ts may share its launch)
    const [N, T] = shapeOf(g, n.inputs[1]);
    const TD = Math.min(T, V) * D;
    return [elementwise(ctx, g, n, [argOf(g, 'dy', n.inputs[0], 'r'), argOf(g, 'dw', n.outputs[0], 'w')], V * D,
      `  // the ids are positions: dw[t, c] = sum over the ${u(N)} sequences of dy[n, t, c] (rows past ${u(Math.min(T, V))} zero)\n` +
      `  float acc = ${f(0)};\n` +
      `  if (i < ${u(TD)}) for (uint s = 0u; s < ${u(N)}; ++s) acc += ${readF(d, g, n.inputs[0], 'dy', `s * ${u(T * D)} + i`)};\n` +
      `  dw[i] = ${store('acc')};\n`, ' [ids are positions: a sum over the sequences]')];
  }
  if (J >= FLOAT_EXACT || V >= FLOAT_EXACT) return null;
  // scratch (floats): [0, J) slot -> position, [J, 2J) slot -> id, [2J, 2J + V) first slot of id v, [2J + V, 2J + 2V) its end
  const POS = 0, ID = J, BEGIN = 2 * J, END = 2 * J + V;
  const bytes = (2 * J + 2 * V) * 4;
  // block b: positions b * TILE + x (x < TILE), the tiles of TILE ids split over SLICES row slices (slice y counts
  // against tiles y, y + SLICES, ... each loaded into its own part of tg); the slices' counts are then added in order
  const tiles = ceilDiv(J, TILE), rounds = ceilDiv(tiles, SLICES), own = `tgid.x * ${u(TILE)}`;
  const count = (ownTile: boolean) =>
    `      for (uint k = 0u; k < cnt; ++k) {\n        const float o = tg[tid.y * ${u(TILE)} + k];\n        if (o < id) ++less;\n` +
    (ownTile
      ? `        if (o == id && k < tid.x) ++before;\n        if (o == id && k > tid.x) ++after;\n      }\n`
      : `        if (o == id) ++eq;\n      }\n`);
  const sort: KernelSpec = {
    ...kernelSpec(ctx, g, n, [argOf(g, 'ids', n.inputs[1], 'r')], {
      groups: [tiles, 1, 1], tgsize: [TILE, SLICES, 1], tgmem: 3 * SLICES * TILE * 4, sync: true,
      body:
        `  // position j's slot in the stable sort by id: positions with a smaller id + earlier positions with the same id\n` +
        `  // (tiles before this block's are all earlier, tiles after it all later); the first position of an id also\n` +
        `  // writes the id's run [slot, slot + its count). Slice tid.y takes tiles tid.y, tid.y + ${u(SLICES)}, ...\n` +
        `  const uint j = ${own} + tid.x;\n` +
        `  const float id = j < ${u(J)} ? float(ids[j]) : ${f(0)};\n` +
        `  uint less = 0u, before = 0u, after = 0u;\n` +
        `  for (uint round = 0u; round < ${u(rounds)}; ++round) {\n` +
        `    const uint t0 = (round * ${u(SLICES)} + tid.y) * ${u(TILE)};\n` +
        `    ${d.barrier()}\n` +
        `    if (t0 + tid.x < ${u(J)}) tg[tid.y * ${u(TILE)} + tid.x] = float(ids[t0 + tid.x]);\n` +
        `    ${d.barrier()}\n` +
        `    if (t0 < ${u(J)}) {\n` +
        `      const uint cnt = min(${u(TILE)}, ${u(J)} - t0);\n` +
        `      uint eq = 0u;\n` +
        `      if (t0 == ${own}) {\n${count(true)}      } else {\n${count(false)}        if (t0 < ${own}) before += eq; else after += eq;\n      }\n` +
        `    }\n` +
        `  }\n` +
        `  // the slices' counts, added in slice order by slice 0\n` +
        `  ${d.barrier()}\n` +
        `  tg[tid.y * ${u(TILE)} + tid.x] = float(less);\n` +
        `  tg[${u(SLICES * TILE)} + tid.y * ${u(TILE)} + tid.x] = float(before);\n` +
        `  tg[${u(2 * SLICES * TILE)} + tid.y * ${u(TILE)} + tid.x] = float(after);\n` +
        `  ${d.barrier()}\n` +
        `  if (tid.y == 0u && j < ${u(J)}) {\n` +
        `    float l = ${f(0)}, b = ${f(0)}, a = ${f(0)};\n` +
        `    for (uint y = 0u; y < ${u(SLICES)}; ++y) {\n` +
        `      l += tg[y * ${u(TILE)} + tid.x];\n      b += tg[${u(SLICES * TILE)} + y * ${u(TILE)} + tid.x];\n      a += tg[${u(2 * SLICES * TILE)} + y * ${u(TILE)} + tid.x];\n` +
        `    }\n` +
        `    const uint slot = uint(l + b);\n` +
        `    mpsc_scratch[${u(POS)} + slot] = float(j);\n` +
        `    mpsc_scratch[${u(ID)} + slot] = id;\n` +
        `    if (b == ${f(0)} && id >= ${f(0)} && id < ${f(V)}) {\n` +
        `      mpsc_scratch[${u(BEGIN)} + uint(id)] = float(slot);\n` +
        `      mpsc_scratch[${u(END)} + uint(id)] = float(slot) + ${f(1)} + a;\n` +
        `    }\n` +
        `  }\n`,
    }, ` [stable sort of the ${J} positions by id, each id's run of slots]`),
    scratch: bytes,
  };
  const T = rowThreads(D);
  const sum: KernelSpec = {
    ...kernelSpec(ctx, g, n, [argOf(g, 'dy', n.inputs[0], 'r'), argOf(g, 'dw', n.outputs[0], 'w')], {
      groups: [V, 1, 1], tgsize: [T, 1, 1], tgmem: 0, sync: false,
      body:
        `  // vocabulary row v: its run [k0, k1) of sorted slots, dy's rows of those positions added in position order.\n` +
        `  // The run's bounds are written only for ids that occur this step; the slot -> id entries all are, so a\n` +
        `  // bound is trusted only when its slot holds v (otherwise v does not occur: an empty run, zeros)\n` +
        `  const uint v = tgid.x;\n  uint k0 = 0u, k1 = 0u;\n` +
        `  const float b = mpsc_scratch[${u(BEGIN)} + v];\n` +
        `  if (b >= ${f(0)} && b < ${f(J)} && mpsc_scratch[${u(ID)} + uint(b)] == float(v)) { k0 = uint(b); k1 = uint(mpsc_scratch[${u(END)} + v]); }\n` +
        `  for (uint c = tidx; c < ${u(D)}; c += ${u(T)}) {\n` +
        `    float acc = ${f(0)};\n` +
        `    for (uint k = k0; k < k1; ++k) acc += ${readF(d, g, n.inputs[0], 'dy', `uint(mpsc_scratch[${u(POS)} + k]) * ${u(D)} + c`)};\n` +
        `    dw[v * ${u(D)} + c] = ${store('acc')};\n` +
        `  }\n`,
    }, ` [block per vocabulary row over its run of sorted positions, ${T} channels at a time]`),
    scratch: bytes,
  };
  return [sort, sum];
}
