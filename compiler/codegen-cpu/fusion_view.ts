/**
 * fusion_view: what the CPU fusion passes (fuse_relu.ts, fuse_relu_grad.ts, fuse_relu_pool.ts)
 * ask of a program and its memory plan: who reads a value, which values the program returns,
 * the arena bytes of a value, whether two byte ranges overlap, and what a node writes once the
 * fusions decided so far are applied. Plain functions over plain data; nothing is changed.
 */
import { type Program, valueBytes } from '../ir/graph.js';

export type ByteRange = [number, number];

export interface FusionView {
  /** value id -> ids of the nodes that read it, in program order */
  readers: Map<number, number[]>;
  /** values the program returns (never fused away) */
  outputsRead: Set<number>;
  /** the arena bytes [begin, end) of a value, or null when it is not in the arena */
  range(id: number): ByteRange | null;
  overlaps(a: ByteRange | null, b: ByteRange): boolean;
  /** the values node i writes, given `fused` (node id -> the folded consumer's output it writes instead) */
  written(i: number, fused?: ReadonlyMap<number, number>): number[];
}

export function fusionView(p: Program, offsets: readonly number[]): FusionView {
  const { nodes, values } = p.graph;
  const readers = new Map<number, number[]>();
  nodes.forEach((n) => n.inputs.forEach((id) => id >= 0 && readers.set(id, [...(readers.get(id) ?? []), n.id])));
  return {
    readers,
    outputsRead: new Set(p.outputs.map((o) => o.value)),
    range(id) {
      const off = offsets[id];
      return off === undefined || off < 0 ? null : [off, off + valueBytes(values[id])];
    },
    overlaps: (a, b) => a !== null && a[0] < b[1] && b[0] < a[1],
    written(i, fused) {
      const f = fused?.get(i);
      return f === undefined ? nodes[i].outputs : [f, ...nodes[i].outputs.slice(1)];
    },
  };
}
