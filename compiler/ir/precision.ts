/**
 * precision: mixed precision as an IR pass (issue 15, `train { precision: "fp16" | "bf16" }`),
 * with PyTorch autocast's storage types (torch.autocast on CUDA, docs/language.md "Precision").
 *
 * Consumes: a verified program Graph (a train_step after autodiff + optimizer lowering, an
 *           apply_update, or an eval graph), the precision, and for a train_step autodiff's
 *           `gradOf` (backward value -> the forward value it is the gradient of).
 * Produces: for fp32 the same graph object; for fp16 / bf16 a new graph (never mutating its
 *           input) in which every float value has autocast's type, written in the canonical form
 *           where every op computes in f32 and only `cast` nodes touch 16-bit values:
 *             - each float value gets a type (`AUTOCAST`, op by op): the matrix products
 *               (linear, matmul, conv2d, attention's o) are 16-bit; autocast's fp32 ops (softmax,
 *               log-softmax, losses, norms, sums, exp / log / pow / rsqrt / softplus, the optimizer)
 *               f32; the rest (activations, dropout, pools, reshapes, batchnorm's y, mean / max)
 *               their input's type; binary ops and concat the widest of their inputs;
 *             - a gradient has the type of the value it is the gradient of (autograd's rule),
 *               except that a parameter's gradient is f32 and never rounded (master weights: the
 *               optimizer reads it); a product's gradient output (dx = dy W) is rounded to 16 bits
 *               even when x is f32, as autocast's backward through the 16-bit copy of x does, then
 *               widened;
 *             - a node whose output is 16-bit writes an f32 value `<name>.unrounded` and a
 *               `cast {to}` right after it rounds that into the value itself (its id is kept);
 *             - an input the op lists in `OpDef.halfInputs` (GEMM-family operands) reads a 16-bit
 *               value (an f32 one gets one `cast` copy `<value>.f16` / `.bf16` per step, before
 *               its first such reader: a parameter's 16-bit copy is shared by its forward and
 *               backward products); any other float input reads an f32 value (a 16-bit one gets
 *               one widening `cast {to: f32}` copy `<value>.f32`, exact).
 *           Value ids of the input graph are kept (copies are appended); node ids are renumbered.
 *           A backend folds these casts into its kernels' loads and stores where it can
 *           (fuse.ts rule 4); the canonical form is the meaning.
 * Relies on: nodes in topological order (a value's first reader comes after its writer); inputs,
 *           persistent values and outputs are never 16-bit (verify.ts checks the result).
 * Loss scaling for fp16 is not here: programs.ts seeds autodiff with the `amp.loss_scale` state
 * and optimizer_lowering.ts unscales in apply_update (docs/language.md, "Precision").
 */
import type { DType, Graph, HalfDType, Node, Value } from './graph.js';
import { isHalf } from './graph.js';
import { type OpName, isOpName, opDef } from './ops.js';

export type Precision = 'fp32' | 'fp16' | 'bf16';
export const PRECISIONS: readonly Precision[] = ['fp32', 'fp16', 'bf16'];

/** the storage type of GEMM operands at a precision (null for fp32) */
export function halfTypeOf(p: Precision): HalfDType | null {
  return p === 'fp16' ? 'f16' : p === 'bf16' ? 'bf16' : null;
}

/**
 * How autocast types an op's float outputs (forward):
 *  - `lower`: autocast's lower-precision ops: 16-bit (attention's logsumexp stays f32);
 *  - `fp32`: autocast's fp32 ops (and those it runs in f32 when given no dtype): f32;
 *  - `input`: not on autocast's lists: the type of input 0 (batchnorm: of x; its saved statistics f32);
 *  - `promote`: type promotion over the float inputs: 16-bit only when all of them are;
 *  - `unary` / `reduce`: by fn (`FP32_UNARY`; reduce sum is fp32, mean / max follow the input).
 * Gradients ignore this (a gradient has its value's type) except for `lower` ops (see header).
 */
type Rule = 'lower' | 'fp32' | 'input' | 'promote' | 'unary' | 'reduce' | 'cast';
export const AUTOCAST: Record<OpName, Rule> = {
  linear: 'lower', matmul: 'lower', conv2d: 'lower', conv2d_grad_input: 'lower', conv2d_grad_weight: 'lower', attention: 'lower', attention_grad: 'lower',
  attention_qkv: 'lower', attention_qkv_grad: 'lower',
  softmax: 'fp32', log_softmax: 'fp32', softmax_grad: 'fp32', log_softmax_grad: 'fp32', layernorm: 'fp32', layernorm_grad: 'fp32',
  cross_entropy: 'fp32', nll: 'fp32', mse: 'fp32', bce_with_logits: 'fp32', accuracy: 'fp32', top_k: 'fp32',
  cross_entropy_grad: 'fp32', nll_grad: 'fp32', mse_grad: 'fp32', bce_with_logits_grad: 'fp32',
  grad_accumulate: 'fp32', zero: 'fp32', grad_norm: 'fp32', clip_coef: 'fp32', sgd_update: 'fp32', adam_update: 'fp32',
  embedding_grad: 'fp32', batchnorm_grad: 'input',
  reshape: 'input', dropout: 'input', dropout_grad: 'input', maxpool2d: 'input', avgpool2d: 'input', global_avgpool: 'input',
  maxpool2d_grad: 'input', avgpool2d_grad: 'input', global_avgpool_grad: 'input', permute: 'input', pad: 'input', broadcast_to: 'input',
  masked_fill: 'input', slice: 'input', batchnorm_train: 'input', batchnorm_eval: 'input', reduce_max_grad: 'input', sum_to: 'input',
  unary_grad: 'input', positions: 'input',
  embedding: 'promote', binary: 'promote', concat: 'promote',
  unary: 'unary', reduce: 'reduce', cast: 'cast',
};
/** the unary fns autocast runs in f32 (its fp32 list: exp, log, pow, rsqrt, softplus) */
export const FP32_UNARY: readonly string[] = ['exp', 'log', 'pow', 'rsqrt', 'softplus'];

/** output k of op is an attention's saved logsumexp (kept f32) */
const savedLse = (op: string, k: number) => (op === 'attention' || op === 'attention_qkv') && k === 1;

/** the 16-bit type autocast gives output k of a forward node whose float inputs have these types (f32 otherwise) */
function forwardType(n: Node, k: number, inType: (id: number) => DType | undefined, half: HalfDType): DType {
  const rule = isOpName(n.op) ? AUTOCAST[n.op] : 'fp32';
  const floats = n.inputs.map(inType).filter((t): t is DType => t !== undefined && t !== 'i32');
  const input0 = inType(n.inputs[0]);
  switch (rule) {
    case 'lower': return savedLse(n.op, k) ? 'f32' : half;
    case 'fp32': case 'cast': return 'f32';
    case 'input': return k === 0 && input0 !== undefined && isHalf(input0) ? half : 'f32';
    case 'promote': return floats.length > 0 && floats.every(isHalf) ? half : 'f32';
    case 'unary': return !FP32_UNARY.includes(String(n.attrs.fn)) && input0 !== undefined && isHalf(input0) ? half : 'f32';
    case 'reduce': return n.attrs.fn !== 'sum' && input0 !== undefined && isHalf(input0) ? half : 'f32';
  }
}

export function applyPrecision(graph: Graph, precision: Precision, gradOf: readonly number[] = []): Graph {
  const half = halfTypeOf(precision);
  if (half === null) return graph;
  const values: Value[] = graph.values.map((v) => ({ ...v, shape: [...v.shape] }));
  const nodes: Node[] = [];
  const copy16 = new Map<number, number>(); // f32 value -> its 16-bit copy
  const copy32 = new Map<number, number>(); // 16-bit value -> its widened f32 copy
  const newValue = (src: Value, name: string, dtype: DType): number => {
    const id = values.length;
    values.push({ id, name, dtype, shape: [...src.shape], kind: src.kind === 'grad' ? 'grad' : 'activation' });
    return id;
  };
  const castNode = (n: Node, x: number, y: number, to: DType): Node => {
    const c: Node = { id: -1, op: 'cast', inputs: [x], outputs: [y], attrs: { to } };
    if (n.path !== undefined) c.path = n.path;
    if (n.loc !== undefined) c.loc = n.loc;
    return c;
  };
  /** the value a reader that needs type `want` reads for value id (a cast copy made on first need) */
  const asType = (n: Node, id: number, want: DType): number => {
    const t = values[id].dtype;
    if (t === want || t === 'i32') return id;
    const cache = isHalf(want) ? copy16 : copy32;
    let c = cache.get(id);
    if (c === undefined) {
      c = newValue(values[id], `${values[id].name}.${want}`, want);
      nodes.push(castNode(n, id, c, want));
      cache.set(id, c);
    }
    return c;
  };
  const paramGrad = (id: number) => {
    const of = gradOf[id] ?? -1;
    return of >= 0 && values[of].kind === 'param';
  };

  for (const n0 of graph.nodes) {
    const n: Node = { ...n0, inputs: [...n0.inputs], outputs: [...n0.outputs], attrs: { ...n0.attrs } };
    if (n.op === 'cast') throw new Error(`internal: precision: node ${n0.id} is already a cast (the pass runs once)`);
    const halfIns = opDef(n.op).halfInputs ?? [];
    n.inputs = n.inputs.map((id, k) => (id < 0 || values[id].dtype === 'i32' ? id : asType(n, id, halfIns.includes(k) ? half : 'f32')));
    const lower = isOpName(n.op) && AUTOCAST[n.op] === 'lower';
    const after: Node[] = [];
    n.outputs = n.outputs.map((o, k) => {
      const v = values[o];
      if (v.dtype !== 'f32' || v.kind === 'output') return o;
      const of = gradOf[o] ?? -1;
      // the value's type, and whether the node's f32 result is rounded to 16 bits on the way
      const type: DType = of < 0 ? forwardType(n0, k, (id) => (id >= 0 ? values[id].dtype : undefined), half) : paramGrad(o) ? 'f32' : values[of].dtype;
      const rounded = isHalf(type) || (lower && of >= 0 && !paramGrad(o) && !savedLse(n.op, k));
      if (!rounded) return o;
      const acc = newValue(v, `${v.name}.unrounded`, 'f32');
      if (isHalf(type)) {
        v.dtype = half;
        after.push(castNode(n, acc, o, half));
      } else {
        // rounded, then widened back: the 16-bit step is also the value's 16-bit copy
        const h = newValue(v, `${v.name}.${half}`, half);
        after.push(castNode(n, acc, h, half), castNode(n, h, o, 'f32'));
        copy16.set(o, h);
      }
      return acc;
    });
    nodes.push(n, ...after);
  }
  nodes.forEach((n, i) => (n.id = i));
  return { values, nodes };
}
