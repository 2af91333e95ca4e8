/**
 * sample_program: the eval program of a language model extended to hand one position's
 * logits to the host (`mpsc sample`).
 *
 * Consumes: the eval Program at batch 1 (programs.ts) and its class-last loss (cross_entropy
 *   or nll over logits [1, T, V]). Programs return scalars only (the model ABI reads element
 *   0 of each output value), so this pass appends:
 *     select  f32 [1, T, 1]  a new input: 1 at the position to read, 0 elsewhere
 *     picked = reduce sum over T of (logits * select)        -> [1, V]
 *     logit_c = slice(picked, axis 1, c, 1) for c in 0..V-1  -> V outputs [1, 1]
 * Produces: a Program named 'eval' whose inputs are the spec's inputs then `select`, and whose
 *   outputs are `logit_0` .. `logit_{V-1}` (the loss still runs, on whatever labels are fed).
 * Relies on: a static T: every token runs one whole [1, T] window (no KV cache: the programs
 *   are static-shaped); with causal attention the logits at position t depend on tokens 0..t
 *   only, so a context shorter than T sits at positions 0..L-1 and position L-1 is read.
 */
import type { Graph, Program } from './graph.js';
import { planMemory } from './memory_plan.js';
import { verifyGraph } from './verify.js';

export const SELECT_INPUT = 'select';

/** The logits value the loss reads, or null when the loss takes no class-last logits. */
export function lossLogits(p: Program): number | null {
  const loss = p.outputs.find((o) => o.name === 'loss');
  if (!loss) return null;
  const node = p.graph.nodes.find((n) => n.outputs.includes(loss.value));
  if (!node || (node.op !== 'cross_entropy' && node.op !== 'nll')) return null;
  return node.inputs[0];
}

export function buildSampleProgram(evalProgram: Program, logits: number): Program {
  const graph: Graph = { values: evalProgram.graph.values.map((v) => ({ ...v, shape: [...v.shape] })), nodes: evalProgram.graph.nodes.map((n) => ({ ...n })) };
  const shape = graph.values[logits].shape;
  if (shape.length !== 3 || shape[0] !== 1) throw new Error(`internal: sample program needs logits [1, T, V], got [${shape.join(', ')}]`);
  const [, T, V] = shape;
  const value = (name: string, s: number[], kind: 'input' | 'activation' | 'output') => {
    const id = graph.values.length;
    graph.values.push({ id, name, dtype: 'f32', shape: s, kind });
    return id;
  };
  const node = (op: string, inputs: number[], outputs: number[], attrs: Record<string, number | boolean | string | number[]>) =>
    graph.nodes.push({ id: graph.nodes.length, op, inputs, outputs, attrs, path: 'sample' });
  const select = value(SELECT_INPUT, [1, T, 1], 'input');
  const masked = value('sample.masked', [1, T, V], 'activation');
  node('binary', [logits, select], [masked], { fn: 'mul' });
  const picked = value('sample.picked', [1, V], 'activation');
  node('reduce', [masked], [picked], { fn: 'sum', axes: [1], keepdim: false });
  const outputs: { name: string; value: number }[] = [];
  for (let c = 0; c < V; c++) {
    const out = value(`logit_${c}`, [1, 1], 'output');
    node('slice', [picked], [out], { axis: 1, start: c, length: 1 });
    outputs.push({ name: `logit_${c}`, value: out });
  }
  verifyGraph(graph, 'program eval (sampling)');
  const p: Program = { name: 'eval', batch: 1, graph, inputs: [...evalProgram.inputs, select], outputs };
  p.plan = planMemory(p);
  return p;
}
