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
 *           In place: when a node's op says output 0 may take over one of its inputs
 *           (ops.ts `inPlace`, e.g. a fused max-pool grad over the pool input it reads)
 *           and the node is that input's last reader, both have the same byte size and
 *           the input is an arena value, output 0 gets the input's offset: the two are
 *           placed as one block living from the input's writer to the output's last reader.
 * Invariants: `verifyPlan` re-checks that no two simultaneously live values
 *           overlap (except such an in-place pair, at the same offset) and that every
 *           arena value fits in the arena.
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

/** the input ids output 0 of node i may take over (ops.ts `inPlace`) */
function inPlaceInputs(graph: Graph, i: number): number[] {
  const n = graph.nodes[i];
  const def = isOpName(n.op) ? OPS[n.op] : undefined;
  return (def?.inPlace?.(n) ?? []).map((k) => n.inputs[k]).filter((id) => id !== undefined && id >= 0);
}

/**
 * output value id -> the input value whose bytes it takes over: node i's output 0 and an input
 * its op allows, when node i is the input's last reader and both are arena values of one size.
 */
export function inPlacePairs(graph: Graph, life: (Lifetime | undefined)[] = lifetimes(graph)): Map<number, number> {
  const pairs = new Map<number, number>();
  const taken = new Set<number>();
  graph.nodes.forEach((n, i) => {
    const o = n.outputs[0];
    if (o === undefined || !life[o]) return;
    for (const id of inPlaceInputs(graph, i)) {
      const l = life[id];
      if (!l || l.end !== i || taken.has(id) || valueBytes(graph.values[id]) !== valueBytes(graph.values[o])) continue;
      pairs.set(o, id);
      taken.add(id);
      return;
    }
  });
  return pairs;
}

export function planMemory(program: Program): MemoryPlan {
  const { graph } = program;
  const life = lifetimes(graph);
  const offsets = graph.values.map(() => -1);
  // in-place chains become one block: the root (first value of the chain) carries the joined lifetime
  const pairs = inPlacePairs(graph, life);
  const rootOf = (id: number): number => (pairs.has(id) ? rootOf(pairs.get(id)!) : id);
  const blockLife = new Map<number, Lifetime>();
  graph.values.forEach((v) => {
    const l = life[v.id];
    if (!l) return;
    const r = rootOf(v.id);
    const b = blockLife.get(r);
    blockLife.set(r, b ? { start: Math.min(b.start, l.start), end: Math.max(b.end, l.end) } : { ...l });
  });
  const order = graph.values
    .filter((v) => blockLife.has(v.id))
    .sort((a, b) => valueBytes(b) - valueBytes(a) || blockLife.get(a.id)!.start - blockLife.get(b.id)!.start || a.id - b.id);
  const placed: { off: number; size: number; life: Lifetime }[] = [];
  let arenaBytes = 0;
  for (const v of order) {
    const size = alignUp(valueBytes(v));
    const l = blockLife.get(v.id)!;
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
  for (const v of graph.values) if (life[v.id] && !blockLife.has(v.id)) offsets[v.id] = offsets[rootOf(v.id)];
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
  const pairs = inPlacePairs(graph, life);
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
      const inPlace = (pairs.get(a.v.id) === b.v.id || pairs.get(b.v.id) === a.v.id) && a.off === b.off;
      if (overlaps(a.life, b.life) && a.off < b.end && b.off < a.end && !inPlace) {
        problems.push(`%${a.v.id} (${a.v.name}) and %${b.v.id} (${b.v.name}) are live at the same time and overlap in the arena`);
      }
    }
  }
  if (plan.peakBytes !== plan.arenaBytes + plan.persistentBytes + plan.inputBytes) problems.push('peakBytes is not arena + persistent + input bytes');
  return problems;
}
