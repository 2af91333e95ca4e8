/**
 * embedding_cuda: the CUDA backend's embedding_grad (dy [..., D], i32 ids [...] -> dw [V, D]:
 * dw[v] = the sum of dy's rows at the positions whose id is v, zero for ids that do not occur),
 * deterministic and fast at GPT-2's V = 50 304. The previous kernel gave each vocabulary row a
 * block scanning all J ids (V x J compares: 223 ms at J = 16 384). Here, two kernels:
 *  1. a stable counting sort of the positions by id, without atomics: position j's slot is the
 *     number of positions with a smaller id plus the number of earlier positions with the same id
 *     (one thread per position comparing against all ids, read through shared memory in tiles of
 *     TILE); slot -> position and slot -> id go to the plan's scratch region (`mpsc_scratch`, as
 *     floats: exact below 2^24), and the first position of each id writes the id's run of slots
 *     (begin, end) there too;
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
 * dialect context; the bodies use only the kernel language); produces KernelSpecs (embedding: null
 * to keep the shared gather).
 */
import type { Graph, Node } from '../ir/graph.js';
import type { KernelSpec, LowerCtx } from '../kernels/kernel_types.js';
import { argOf, ceilDiv, elemOf, elementwise, kernelSpec, numel, readF, rowThreads, shapeOf } from '../kernels/common.js';
import { isHalfElem } from '../kernels/dialect.js';

/** positions per block of the sort (and per shared-memory tile of ids): 128 blocks at J = 16 384 */
const TILE = 128;
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

export function lowerEmbeddingGradCuda(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] {
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
  if (J >= FLOAT_EXACT || V >= FLOAT_EXACT) throw new Error(`internal: embedding_grad node ${n.id}: ${J} ids / ${V} rows exceed the sort's float slots`);
  // scratch (floats): [0, J) slot -> position, [J, 2J) slot -> id, [2J, 2J + V) first slot of id v, [2J + V, 2J + 2V) its end
  const POS = 0, ID = J, BEGIN = 2 * J, END = 2 * J + V;
  const bytes = (2 * J + 2 * V) * 4;
  const sort: KernelSpec = {
    ...kernelSpec(ctx, g, n, [argOf(g, 'ids', n.inputs[1], 'r')], {
      groups: [ceilDiv(J, TILE), 1, 1], tgsize: [TILE, 1, 1], tgmem: TILE * 4, sync: true,
      body:
        `  // position j's slot in the stable sort by id: positions with a smaller id + earlier positions with the same id
` +
        `  // (tiles before this block's are all earlier, tiles after it all later); the first position of an id also
` +
        `  // writes the id's run [slot, slot + its count)
` +
        `  const uint j = tgid.x * ${u(TILE)} + tidx;
` +
        `  const float id = j < ${u(J)} ? float(ids[j]) : ${f(0)};
` +
        `  uint less = 0u, before = 0u, after = 0u;
` +
        `  for (uint t0 = 0u; t0 < ${u(J)}; t0 += ${u(TILE)}) {
` +
        `    ${d.barrier()}
` +
        `    if (t0 + tidx < ${u(J)}) tg[tidx] = float(ids[t0 + tidx]);
` +
        `    ${d.barrier()}
` +
        `    const uint cnt = min(${u(TILE)}, ${u(J)} - t0);
` +
        `    uint eq = 0u;
` +
        `    if (t0 == tgid.x * ${u(TILE)}) {
` +
        `      for (uint k = 0u; k < cnt; ++k) {
` +
        `        const float o = tg[k];
` +
        `        if (o < id) ++less;
        if (o == id && k < tidx) ++before;
        if (o == id && k > tidx) ++after;
` +
        `      }
` +
        `    } else {
` +
        `      for (uint k = 0u; k < cnt; ++k) {
        const float o = tg[k];
        if (o < id) ++less;
        if (o == id) ++eq;
      }
` +
        `      if (t0 < tgid.x * ${u(TILE)}) before += eq; else after += eq;
` +
        `    }
` +
        `  }
` +
        `  if (j < ${u(J)}) {
` +
        `    const uint slot = less + before;
` +
        `    mpsc_scratch[${u(POS)} + slot] = float(j);
    mpsc_scratch[${u(ID)} + slot] = id;
` +
        `    if (before == 0u && id >= ${f(0)} && id < ${f(V)}) {
` +
        `      mpsc_scratch[${u(BEGIN)} + uint(id)] = float(slot);
      mpsc_scratch[${u(END)} + uint(id)] = float(slot + 1u + after);
    }
` +
        `  }
`,
    }, ` [stable sort of the ${J} positions by id, each id's run of slots]`),
    scratch: bytes,
  };
  const T = rowThreads(D);
  const sum: KernelSpec = {
    ...kernelSpec(ctx, g, n, [argOf(g, 'dy', n.inputs[0], 'r'), argOf(g, 'dw', n.outputs[0], 'w')], {
      groups: [V, 1, 1], tgsize: [T, 1, 1], tgmem: 0, sync: false,
      body:
        `  // vocabulary row v: its run [k0, k1) of sorted slots, dy's rows of those positions added in position order.
` +
        `  // The run's bounds are written only for ids that occur this step; the slot -> id entries all are, so a
` +
        `  // bound is trusted only when its slot holds v (otherwise v does not occur: an empty run, zeros)
` +
        `  const uint v = tgid.x;
  uint k0 = 0u, k1 = 0u;
` +
        `  const float b = mpsc_scratch[${u(BEGIN)} + v];
` +
        `  if (b >= ${f(0)} && b < ${f(J)} && mpsc_scratch[${u(ID)} + uint(b)] == float(v)) { k0 = uint(b); k1 = uint(mpsc_scratch[${u(END)} + v]); }
` +
        `  for (uint c = tidx; c < ${u(D)}; c += ${u(T)}) {
` +
        `    float acc = ${f(0)};
` +
        `    for (uint k = k0; k < k1; ++k) acc += ${readF(d, g, n.inputs[0], 'dy', `uint(mpsc_scratch[${u(POS)} + k]) * ${u(D)} + c`)};
` +
        `    dw[v * ${u(D)} + c] = ${store('acc')};
` +
        `  }
`,
    }, ` [block per vocabulary row over its run of sorted positions, ${T} channels at a time]`),
    scratch: bytes,
  };
  return [sort, sum];
}
