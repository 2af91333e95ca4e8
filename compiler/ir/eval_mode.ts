/**
 * eval_mode: derives the evaluation form of a forward graph.
 *
 * Consumes: a batch-bound forward Graph in training form (bind_batch output).
 * Produces: a new, compacted Graph plus `idMap` (old value id -> new id, -1 for
 *           values that no longer exist) in which each op's `evalMode` rule (op
 *           catalogue, ops.ts) is applied; today:
 *            - batchnorm_train(x, w, b, rm, rv) -> y, mean, invstd becomes
 *              batchnorm_eval(x, w, b, rm, rv) -> y (the saved-statistics outputs
 *              are dropped; running stats are read, never mutated);
 *            - dropout nodes are removed and every reader of their output reads
 *              their input instead (inverted dropout is the identity in eval).
 * Invariants: every input and persistent value is kept (so Program.inputs and the
 *           persistent names are the same as in training); node order is kept;
 *           no node of the result mutates anything.
 */
import type { Graph, Node } from './graph.js';
import { opDef } from './ops.js';

export interface EvalGraph {
  graph: Graph;
  idMap: number[];
}

export function evalMode(graph: Graph): EvalGraph {
  // 1. alias: value id -> the id that stands for it (dropout outputs alias their input)
  const alias = graph.values.map((v) => v.id);
  const resolve = (id: number): number => (id < 0 ? id : alias[id]);
  const dropped = new Set<number>();
  const kept: Node[] = [];
  for (const n of graph.nodes) {
    const rule = opDef(n.op).evalMode;
    if (rule === 'identity') {
      alias[n.outputs[0]] = resolve(n.inputs[0]);
      dropped.add(n.outputs[0]);
      continue;
    }
    if (rule) {
      for (const id of n.outputs.slice(rule.outputs)) dropped.add(id);
      const attrs = { ...n.attrs };
      for (const a of rule.dropAttrs ?? []) delete attrs[a];
      kept.push({ ...n, op: rule.op, inputs: n.inputs.map(resolve), outputs: n.outputs.slice(0, rule.outputs), attrs });
      continue;
    }
    kept.push({ ...n, inputs: n.inputs.map(resolve), outputs: [...n.outputs], attrs: { ...n.attrs } });
  }
  // 2. compact value ids
  const idMap = new Array<number>(graph.values.length).fill(-1);
  const values = [];
  for (const v of graph.values) {
    if (dropped.has(v.id)) continue;
    idMap[v.id] = values.length;
    values.push({ ...v, id: values.length, shape: [...v.shape] });
  }
  // dropped values are represented by what they alias
  for (const id of dropped) idMap[id] = alias[id] === id ? -1 : idMap[alias[id]];
  const nodes = kept.map((n, i) => ({
    ...n,
    id: i,
    inputs: n.inputs.map((id) => (id < 0 ? id : idMap[id])),
    outputs: n.outputs.map((id) => idMap[id]),
  }));
  return { graph: { values, nodes }, idMap };
}
