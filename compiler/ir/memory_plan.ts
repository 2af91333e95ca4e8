/**
 * memory_plan: assigns arena offsets to the transient values of one Program.
 *
 * Consumes: a Program (its graph in final node order).
 * Produces: a MemoryPlan (graph.ts): an arena offset per activation / grad /
 *           output value (-1 for persistent values and inputs, which live in
 *           their own buffers), the arena size, persistent and input bytes, and
 *           peakBytes = arenaBytes + persistentBytes + inputBytes.
 * Method:   liveness over the node order. A value is live from the node that
 *           writes it to the last node that reads it, inclusive (so a node's
 *           outputs never alias its inputs); values kept for the backward pass
 *           (saved activations, batchnorm mean/invstd, ...) are simply read late,
 *           so they stay live until their last backward reader. Kind 'output'
 *           values (loss, metrics, grad norm) stay live to the end of the program
 *           because the host reads them after the run. Placement is greedy by
 *           size (largest first), each value at the lowest 64-byte-aligned offset
 *           that does not overlap any already placed value with an intersecting
 *           lifetime, so dead buffers are reused.
 *           A reshape whose input and output are both activations / gradients is a
 *           view: its output shares its input's buffer (one placement for the chain,
 *           live over the union of their lifetimes), so the reshape copies nothing
 *           (backends skip a copy onto itself).
 *           In place: when a node's op says output 0 may take over one of its inputs
 *           (ops.ts `inPlace`: a fused max-pool grad over the pool input it reads; the
 *           relu-folded global-avgpool grad over its mask; cross_entropy_grad over its logits,
 *           which every backend's kernel reads row by row before writing that row, so the
 *           gradient of GPT-2's 16384 x 50304 logits needs no second buffer)
 *           and the node is the last reader of that input's buffer, both have the same
 *           byte size and the input is an arena value, output 0 gets the input's offset:
 *           views and in-place outputs form one block (`bufferRoots`), placed once and
 *           live from its first writer to its last reader.
 * Invariants: `verifyPlan` re-checks that no two simultaneously live values
 *           overlap (except the members of one such block, at one offset) and that
 *           every arena value fits in the arena.
 */
import { isPersistent, valueBytes, type Graph, type MemoryPlan, type Program, type Value } from './graph.js';
import { isOpName, OPS } from './ops.js';

export const ARENA_ALIGN = 64;

const alignUp = (n: number) => Math.ceil(n / ARENA_ALIGN) * ARENA_ALIGN;

export function isArenaValue(v: Value): boolean {
  return v.kind === 'activation' || v.kind === 'grad' || v.kind === 'output';
}

export interface Lifetime {
  start: number; // index of the writing node
  end: number; // index of the last reading node (inclusive)
}

/** Lifetime of every arena value (undefined for others). */
export function lifetimes(graph: Graph): (Lifetime | undefined)[] {
  const life: (Lifetime | undefined)[] = graph.values.map(() => undefined);
  const last = graph.nodes.length - 1;
  graph.nodes.forEach((n, i) => {
    for (const o of n.outputs) if (isArenaValue(graph.values[o])) life[o] = { start: i, end: i };
  });
  graph.nodes.forEach((n, i) => {
    for (const id of n.inputs) {
      const l = id >= 0 ? life[id] : undefined;
      if (l && i > l.end) l.end = i;
    }
  });
  graph.values.forEach((v, id) => {
    const l = life[id];
    if (l && v.kind === 'output') l.end = Math.max(l.end, last);
  });
  return life;
}

const overlaps = (a: Lifetime, b: Lifetime) => a.start <= b.end && b.start <= a.end;

/**
 * For every value, the value whose buffer it uses: itself, or for the output of a reshape of an
 * activation / gradient into an activation / gradient, its input's root (chains follow).
 */
export function viewRoots(graph: Graph): number[] {
  const root = graph.values.map((_, i) => i);
  const viewable = (v: Value) => v.kind === 'activation' || v.kind === 'grad';
  for (const n of graph.nodes) {
    if (n.op !== 'reshape' || n.inputs[0] === undefined || n.inputs[0] < 0 || n.outputs.length !== 1) continue;
    const src = graph.values[n.inputs[0]], dst = graph.values[n.outputs[0]];
    if (viewable(src) && viewable(dst) && src.dtype === dst.dtype) root[dst.id] = root[src.id];
  }
  return root;
}

/** Lifetimes with each reshape chain's root live over the union of its members' lifetimes. */
function joinedLifetimes(graph: Graph, life: (Lifetime | undefined)[], root: number[]): (Lifetime | undefined)[] {
  const joined = life.map((l) => (l ? { ...l } : undefined));
  graph.values.forEach((_, id) => {
    const l = life[id], r = root[id];
    if (r === id || !l) return;
    const lr = joined[r]!;
    lr.start = Math.min(lr.start, l.start);
    lr.end = Math.max(lr.end, l.end);
  });
  return joined;
}

/** the input ids output 0 of node i may take over (ops.ts `inPlace`) */
function inPlaceInputs(graph: Graph, i: number): number[] {
  const n = graph.nodes[i];
  const def = isOpName(n.op) ? OPS[n.op] : undefined;
  return (def?.inPlace?.(n) ?? []).map((k) => n.inputs[k]).filter((id) => id !== undefined && id >= 0);
}

/**
 * output value id -> the input value whose bytes it takes over: node i's output 0 and an input
 * its op allows, when node i is the last reader of the input's buffer (its whole reshape chain),
 * both are arena values of one size and the output is not itself a reshape view.
 */
export function inPlacePairs(graph: Graph, life: (Lifetime | undefined)[] = lifetimes(graph)): Map<number, number> {
  const root = viewRoots(graph);
  const joined = joinedLifetimes(graph, life, root);
  const pairs = new Map<number, number>();
  const taken = new Set<number>();
  graph.nodes.forEach((n, i) => {
    const o = n.outputs[0];
    if (o === undefined || !life[o] || root[o] !== o) return;
    for (const id of inPlaceInputs(graph, i)) {
      const r = root[id];
      const l = joined[r];
      if (!l || l.end !== i || taken.has(r) || valueBytes(graph.values[id]) !== valueBytes(graph.values[o])) continue;
      pairs.set(o, r);
      taken.add(r);
      return;
    }
  });
  return pairs;
}

/**
 * For every value, the value at whose offset it is placed: reshape views share their input's
 * buffer, and in-place outputs take over their input's (chains of both follow).
 */
export function bufferRoots(graph: Graph, life: (Lifetime | undefined)[] = lifetimes(graph)): number[] {
  const view = viewRoots(graph);
  const pairs = inPlacePairs(graph, life);
  const follow = (id: number): number => (pairs.has(id) ? follow(view[pairs.get(id)!]) : id);
  return view.map((r) => follow(r));
}

/**
 * `reuseGap` (default 0): a dead buffer is reused only by a value written more than reuseGap nodes after its last
 * reader (each placement's lifetime ends reuseGap nodes late). The CUDA backend's lane programs use it
 * (codegen-cuda/lanes.ts): a write into a buffer that the node just before still read would order the two, and
 * with them the lanes they run on.
 */
export function planMemory(program: Program, reuseGap = 0): MemoryPlan {
  const { graph } = program;
  const life = lifetimes(graph);
  const root = bufferRoots(graph, life);
  // a chain of views and in-place outputs is placed once, at its root, live over the union of its members' lifetimes
  const last = graph.nodes.length - 1;
  const joined = joinedLifetimes(graph, life, root).map((l) => (l && reuseGap > 0 ? { start: l.start, end: Math.min(last, l.end + reuseGap) } : l));
  const offsets = graph.values.map(() => -1);
  const order = graph.values
    .filter((v) => life[v.id] !== undefined && root[v.id] === v.id)
    .sort((a, b) => valueBytes(b) - valueBytes(a) || joined[a.id]!.start - joined[b.id]!.start || a.id - b.id);
  const placed: { off: number; size: number; life: Lifetime }[] = [];
  let arenaBytes = 0;
  for (const v of order) {
    const size = alignUp(valueBytes(v));
    const l = joined[v.id]!;
    const busy = placed.filter((p) => overlaps(p.life, l)).sort((a, b) => a.off - b.off);
    let off = 0;
    for (const p of busy) {
      if (off + size <= p.off) break;
      off = Math.max(off, p.off + p.size);
    }
    offsets[v.id] = off;
    placed.push({ off, size, life: l });
    arenaBytes = Math.max(arenaBytes, off + size);
  }
  graph.values.forEach((v, id) => {
    if (root[id] !== id && life[id] !== undefined) offsets[id] = offsets[root[id]];
  });
  let persistentBytes = 0;
  let inputBytes = 0;
  for (const v of graph.values) {
    if (isPersistent(v)) persistentBytes += valueBytes(v);
    else if (v.kind === 'input') inputBytes += valueBytes(v);
  }
  return { offsets, arenaBytes, persistentBytes, inputBytes, peakBytes: arenaBytes + persistentBytes + inputBytes };
}

/** Problems with program.plan (empty when valid): overlaps of simultaneously live values, bad offsets, wrong totals. */
export function verifyPlan(program: Program): string[] {
  const plan = program.plan;
  if (!plan) return ['program has no memory plan'];
  const { graph } = program;
  const problems: string[] = [];
  if (plan.offsets.length !== graph.values.length) problems.push(`plan has ${plan.offsets.length} offsets for ${graph.values.length} values`);
  const life = lifetimes(graph);
  const root = bufferRoots(graph, life);
  const arena: { v: Value; off: number; end: number; life: Lifetime }[] = [];
  graph.values.forEach((v, id) => {
    const off = plan.offsets[id];
    if (!isArenaValue(v)) {
      if (off !== -1) problems.push(`%${id} (${v.name}, ${v.kind}) must not be in the arena`);
      return;
    }
    if (life[id] === undefined) {
      if (off !== -1) problems.push(`%${id} (${v.name}) is never written but has an offset`);
      return;
    }
    if (!Number.isInteger(off) || off < 0 || off % ARENA_ALIGN !== 0) problems.push(`%${id} (${v.name}) has bad offset ${off}`);
    const end = off + valueBytes(v);
    if (end > plan.arenaBytes) problems.push(`%${id} (${v.name}) ends at ${end} beyond the arena (${plan.arenaBytes} bytes)`);
    arena.push({ v, off, end, life: life[id]! });
  });
  for (let i = 0; i < arena.length; i++) {
    for (let j = i + 1; j < arena.length; j++) {
      const a = arena[i], b = arena[j];
      if (root[a.v.id] === root[b.v.id]) {
        if (a.off !== b.off) problems.push(`%${a.v.id} (${a.v.name}) and %${b.v.id} (${b.v.name}) share a buffer (reshape view or in-place) but are at different offsets`);
        continue;
      }
      if (overlaps(a.life, b.life) && a.off < b.end && b.off < a.end) {
        problems.push(`%${a.v.id} (${a.v.name}) and %${b.v.id} (${b.v.name}) are live at the same time and overlap in the arena`);
      }
    }
  }
  if (plan.peakBytes !== plan.arenaBytes + plan.persistentBytes + plan.inputBytes) problems.push('peakBytes is not arena + persistent + input bytes');
  return problems;
}
