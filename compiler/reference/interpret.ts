/**
 * The float64 reference interpreter: the executable form of compiler/ir/ops.ts and the
 * oracle every backend is tested against. Clarity over speed.
 *
 * An Env maps value id -> data (row-major Float64Array; i32 values hold integers).
 * runNode reads a node's inputs from env, allocates its outputs (zero-filled, sized by the
 * values' static shapes), runs the op, and stores the outputs in env; ops listed as
 * `mutates` in ops.ts change those input arrays in place. A node fused by compiler/ir/fuse.ts
 * runs as the original nodes in sequence (fuse.ts `fusedParts`), so fused programs stay
 * comparable with the unfused oracle. Values are float64 whatever their type; a node's 16-bit
 * (f16 / bf16) outputs are rounded to that type when stored, so a cast folded into its producer
 * rounds at the same point as the cast.
 */
import { type AttrValue, type Graph, type Node, type StepScalars, numel } from '../ir/graph.js';
import { fusedParts, unfusedAttrs } from '../ir/fuse.js';
import { type OpName, isOpName } from '../ir/ops.js';
import type { OpImpl } from './kernel.js';
import { roundToHalf } from './half.js';
import { linear, matmul } from './linear_matmul.js';
import { conv2d, conv2d_grad_input, conv2d_grad_weight } from './conv.js';
import { avgpool2d, avgpool2d_grad, global_avgpool, global_avgpool_grad, maxpool2d, maxpool2d_grad } from './pool.js';
import { binary, cast, sum_to, unary, unary_grad } from './elementwise.js';
import { log_softmax, log_softmax_grad, softmax, softmax_grad } from './softmax.js';
import { batchnorm_eval, batchnorm_grad, batchnorm_train, layernorm, layernorm_grad } from './norm.js';
import { dropout, dropout_grad } from './dropout.js';
import { embedding, embedding_grad } from './embedding.js';
import { concat, reshape, slice } from './concat.js';
import { bce_with_logits, bce_with_logits_grad, cross_entropy, cross_entropy_grad, mse, mse_grad, nll, nll_grad } from './losses.js';
import { accuracy, top_k } from './metrics.js';
import { broadcast_to, masked_fill, pad, permute, positions, reduce, reduce_max_grad } from './tensor.js';
import { attention, attention_grad, attention_qkv, attention_qkv_grad } from './attention.js';
import { adam_update, clip_coef, grad_accumulate, grad_norm, sgd_update, zero } from './optimizers.js';

export type Env = Map<number, Float64Array>;

/** One implementation per op of ops.ts: keyed by OpName, so a missing op fails tsc. */
export const REFERENCE_OPS: Record<OpName, OpImpl> = {
  linear, conv2d, maxpool2d, avgpool2d, global_avgpool, reshape, unary, binary, softmax, log_softmax, dropout,
  batchnorm_train, batchnorm_eval, layernorm, embedding, concat,
  cross_entropy, nll, mse, bce_with_logits, accuracy, top_k,
  matmul, sum_to, conv2d_grad_input, conv2d_grad_weight, maxpool2d_grad, avgpool2d_grad, global_avgpool_grad,
  unary_grad, softmax_grad, log_softmax_grad, dropout_grad, batchnorm_grad, layernorm_grad, embedding_grad, slice,
  cross_entropy_grad, nll_grad, mse_grad, bce_with_logits_grad,
  grad_accumulate, zero, grad_norm, clip_coef, sgd_update, adam_update,
  permute, pad, broadcast_to, reduce, reduce_max_grad, masked_fill, positions, attention, attention_grad, attention_qkv, attention_qkv_grad,
  cast,
};

function describe(graph: Graph, id: number): string {
  const v = graph.values[id];
  return v ? `value ${id} '${v.name}' [${v.shape.join(',')}]` : `value ${id} (not in the graph)`;
}

export function runNode(graph: Graph, node: Node, env: Env, scalars: StepScalars): void {
  const at = `node ${node.id} (${node.op}${node.path ? ` at ${node.path}` : ''})`;
  if (!isOpName(node.op)) throw new Error(`internal: reference interpreter has no op '${node.op}' (${at})`);
  const impl = REFERENCE_OPS[node.op];
  const inputs: (Float64Array | null)[] = [];
  const inShapes: (number[] | null)[] = [];
  for (const id of node.inputs) {
    if (id === -1) { inputs.push(null); inShapes.push(null); continue; }
    const data = env.get(id);
    if (!data) throw new Error(`internal: reference interpreter: ${at} reads ${describe(graph, id)}, which has no data in the environment`);
    const v = graph.values[id];
    if (!v) throw new Error(`internal: reference interpreter: ${at} reads ${describe(graph, id)}`);
    if (data.length !== numel(v.shape)) throw new Error(`internal: reference interpreter: ${at}: ${describe(graph, id)} holds ${data.length} elements, expected ${numel(v.shape)}`);
    inputs.push(data);
    inShapes.push(v.shape);
  }
  const outShapes = node.outputs.map((id) => {
    const v = graph.values[id];
    if (!v) throw new Error(`internal: reference interpreter: ${at} writes ${describe(graph, id)}`);
    return v.shape;
  });
  const exec = (run: OpImpl, attrs: Record<string, AttrValue>, ins: (Float64Array | null)[], shapes: (number[] | null)[], outs: number[][]) => {
    const outputs = outs.map((s) => new Float64Array(numel(s)));
    run({ node, inputs: ins, inShapes: shapes, outputs, outShapes: outs, attrs, scalars });
    return outputs;
  };
  const parts = fusedParts(node);
  let outputs: Float64Array[];
  if (!parts) outputs = exec(impl, node.attrs, inputs, inShapes, outShapes);
  else {
    const ins = inputs.slice(0, parts.coreInputs), shapes = inShapes.slice(0, parts.coreInputs);
    if (parts.pre) ins[0] = exec(REFERENCE_OPS.unary, parts.pre, [ins[0]], [shapes[0]], [shapes[0]!])[0];
    const add = parts.add;
    if (add) {
      // the folded residual add: input 0 + the addend, the core's input and the node's last output
      ins[0] = exec(REFERENCE_OPS.binary, { fn: 'add' }, [ins[0], inputs[add.input]], [shapes[0], inShapes[add.input]], [outShapes[add.output]])[0];
      outputs = [...exec(impl, unfusedAttrs(node), ins, shapes, outShapes.slice(0, add.output)), ins[0]!];
    } else {
      const own = parts.sumOut ?? parts.poolOut ?? parts.aSums ?? parts.fwdOut ?? parts.halfOut ?? parts.preOut;
      outputs = exec(impl, unfusedAttrs(node), ins, shapes, own === undefined ? outShapes : outShapes.slice(0, own));
    }
    // the product before its epilogue, kept as the last output (pre_out)
    if (parts.preOut !== undefined) outputs[parts.preOut] = Float64Array.from(outputs[0]);
    const post = parts.post;
    if (post?.op === 'unary') outputs[0] = exec(REFERENCE_OPS.unary, post.attrs, [outputs[0]], [outShapes[0]], [outShapes[0]])[0];
    else if (post?.op === 'binary') {
      const k = post.addendInput;
      outputs[0] = exec(REFERENCE_OPS.binary, post.attrs, [outputs[0], inputs[k]], [outShapes[0], inShapes[k]], [outShapes[0]])[0];
    }
    else if (post) {
      const k = post.maskInput;
      outputs[0] = exec(REFERENCE_OPS.unary_grad, post.attrs, [outputs[0], inputs[k]], [outShapes[0], inShapes[k]], [outShapes[0]])[0];
    }
    if (parts.sumOut !== undefined) {
      // output 0 as stored (rounded when 16-bit: what the sum_to read) summed over sumAxes, by default every dim but its
      // last (a bias gradient: sum_to)
      const s0 = outShapes[0], to = outShapes[parts.sumOut], t0 = graph.values[node.outputs[0]].dtype;
      const stored = t0 === 'f16' || t0 === 'bf16' ? outputs[0].map((x) => roundToHalf(x, t0)) : outputs[0];
      outputs[parts.sumOut] = exec(REFERENCE_OPS.sum_to, { shape: to, axes: parts.sumAxes ?? s0.slice(0, -1).map((_, i) => i) }, [stored], [s0], [to])[0];
    }
    // output 0 again, stored in its 16-bit type (rounded below, as a cast stores it: half_out)
    if (parts.halfOut !== undefined) outputs[parts.halfOut] = Float64Array.from(outputs[0]);
    if (parts.poolOut !== undefined) {
      // output 0's global average pool (a conv's output pooled in its store: pool_out)
      const s0 = outShapes[0], to = outShapes[parts.poolOut];
      outputs[parts.poolOut] = exec(REFERENCE_OPS.global_avgpool, {}, [outputs[0]], [s0], [to])[0];
    }
    if (parts.fwdOut !== undefined) {
      // f(x) of the gradient's x (input 1): the recomputed forward value (grad_fwd.ts)
      const k = parts.fwdOut;
      outputs[k] = exec(REFERENCE_OPS.unary, unfusedAttrs(node), [inputs[1]], [inShapes[1]], [outShapes[k]])[0];
    }
    if (parts.aSums !== undefined) {
      // input 0 [K, M] summed over its rows (a bias gradient beside the weight gradient: sum_to)
      const to = outShapes[parts.aSums];
      outputs[parts.aSums] = exec(REFERENCE_OPS.sum_to, { shape: to, axes: [0] }, [inputs[0]], [inShapes[0]], [to])[0];
    }
  }
  // a 16-bit output (a cast, or a cast a backend folded into its producer: fuse.ts rule 4) is
  // stored rounded once, after everything the node computes
  node.outputs.forEach((id, k) => {
    const t = graph.values[id].dtype;
    if (t === 'f16' || t === 'bf16') outputs[k] = outputs[k].map((x) => roundToHalf(x, t));
    env.set(id, outputs[k]);
  });
}

export function runGraph(graph: Graph, env: Env, scalars: StepScalars): void {
  for (const node of graph.nodes) runNode(graph, node, env, scalars);
}
