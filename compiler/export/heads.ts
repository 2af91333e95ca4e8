/**
 * Network outputs of a model: the values its loss and metrics read that the network
 * computes (e.g. `logits`), which is what an exported or deployed model returns.
 *
 * Consumes: a CheckedModel (training-form forward graph, model value ids).
 * Produces: `{ name, value }[]` in first-read order: `value` is a model graph value id,
 *           `name` the spec's name for it (the last `name = ...` assignment that binds it,
 *           CheckedModel.names) or, for an unnamed value, its debug name (`fc2.out`).
 * Also headReads (the same values of any graph of the model, e.g. a bound eval program's, by id)
 * and forwardNodesFor: the nodes a set of values depends on.
 * Relies on: loss and metric nodes ("heads") write only `output` values; a head may read
 *           another head's output (a sum of losses), which is not a network output; spec
 *           inputs (labels, targets) are not network outputs either.
 */
import type { Graph, Node } from '../ir/graph.js';
import type { CheckedModel } from '../model.js';

export interface NetworkOutput {
  name: string;
  value: number;
}

export function networkOutputs(model: CheckedModel): NetworkOutput[] {
  const nameOf = new Map<number, string>();
  for (const a of model.names ?? []) nameOf.set(a.value, a.name);
  return headReads(model.graph).map((id) => ({ name: nameOf.get(id) ?? model.graph.values[id].name, value: id }));
}

/**
 * The network values the loss and metric nodes of a graph read, in first-read order. Graph passes
 * keep node order, so a bound or eval-form graph of a model gives its networkOutputs in the same order.
 */
export function headReads(g: Graph): number[] {
  const isHead = (outs: number[]) => outs.length > 0 && outs.every((o) => g.values[o].kind === 'output');
  const seen = new Set<number>();
  const out: number[] = [];
  for (const n of g.nodes) {
    if (!isHead(n.outputs)) continue;
    for (const id of n.inputs) {
      if (id < 0 || seen.has(id)) continue;
      const v = g.values[id];
      if (v.kind === 'input' || v.kind === 'output') continue;
      seen.add(id);
      out.push(id);
    }
  }
  return out;
}

/** The nodes the given values depend on, in graph order (loss and metric branches drop out). */
export function forwardNodesFor(graph: Graph, values: number[]): Node[] {
  const want = new Set(values);
  const keep: boolean[] = new Array(graph.nodes.length).fill(false);
  for (let k = graph.nodes.length - 1; k >= 0; k--) {
    const n = graph.nodes[k];
    if (!n.outputs.some((o) => want.has(o))) continue;
    keep[k] = true;
    for (const i of n.inputs) if (i >= 0) want.add(i);
  }
  return graph.nodes.filter((_, k) => keep[k]);
}
