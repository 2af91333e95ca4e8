/**
 * predict_program: an eval program extended to hand whole network values (e.g. `logits`
 * [N, C]) to the host (`mpsc predict`).
 *
 * Consumes: an eval or eval_tail Program (programs.ts) and the values to hand over (value ids
 *   of its graph, with a name each: compiler/export/heads.ts headReads + networkOutputs).
 * Produces: the same Program (name, batch, inputs, outputs, a fresh memory plan) with, per value,
 *   a persistent f32 buffer of its shape named predictBufferName(program, name) (kind gradacc:
 *   zero-filled, never checkpointed) and two nodes at the end of the graph:
 *     zero(buffer); grad_accumulate(buffer, value) {scale: 1}     => buffer = value
 *   After `run`, Session.read(buffer name) returns the value on every backend.
 * Relies on: programs return scalars only (element 0 of each output), while persistent tensors
 *   can be read whole through the Session interface; the buffer names hold the program name, so
 *   eval and eval_tail (two batch sizes, two shapes) never share a buffer.
 */
import type { Graph, Program } from './graph.js';
import { planMemory } from './memory_plan.js';
import { verifyGraph } from './verify.js';

/** the persistent buffer that holds value `name` after a run of `program` */
export function predictBufferName(program: string, name: string): string {
  return `predict/${program}/${name}`;
}

export function buildPredictProgram(p: Program, values: { name: string; value: number }[]): Program {
  const graph: Graph = { values: p.graph.values.map((v) => ({ ...v, shape: [...v.shape] })), nodes: p.graph.nodes.map((n) => ({ ...n })) };
  for (const { name, value } of values) {
    const v = graph.values[value];
    if (!v || v.dtype !== 'f32') throw new Error(`internal: predict program: value %${value} ('${name}') is not an f32 value of program ${p.name}`);
    const buf = graph.values.length;
    graph.values.push({ id: buf, name: predictBufferName(p.name, name), dtype: 'f32', shape: [...v.shape], kind: 'gradacc' });
    graph.nodes.push({ id: graph.nodes.length, op: 'zero', inputs: [buf], outputs: [], attrs: {}, path: 'predict' });
    graph.nodes.push({ id: graph.nodes.length, op: 'grad_accumulate', inputs: [buf, value], outputs: [], attrs: { scale: 1 }, path: 'predict' });
  }
  verifyGraph(graph, `program ${p.name} (predict)`);
  const out: Program = { name: p.name, batch: p.batch, graph, inputs: [...p.inputs], outputs: p.outputs.map((o) => ({ ...o })) };
  out.plan = planMemory(out);
  return out;
}
