/**
 * The op catalogue: the one list of IR operations every pass and backend agrees on, and
 * each op's rules, written once (the families live in compiler/ir/op_rules/*.ts):
 *  - `doc`: the exact semantics a backend must implement; the float64 reference
 *    interpreter (compiler/reference) is the executable form of this text;
 *  - `shape`: input shapes + attrs -> output shapes, with its checks (verify.ts);
 *  - `vjp`: the gradient rule, emitting backward nodes through a small builder (autodiff.ts);
 *  - `flops`: floating-point work (flops.ts, `mpsc bench`);
 *  - `category`: the section of docs/ops.md (print_ops_doc.ts);
 *  - `elementwise`: output element i reads only element i of each input (after
 *    broadcasting), and `scalar` its formula from compiler/ir/scalar_fns.ts when it has one;
 *  - `evalMode`: how eval_mode.ts rewrites a training-only op.
 * `OpName` is the union of the op names: backend registries are `Record<OpName, ...>`, so a
 * missing op fails tsc. Consumes nothing; relies on graph.ts's plain data.
 *
 * Conventions
 *  - Layout is row-major (C order). Images are NCHW. Linear weights are [out, in]
 *    and conv weights [out, in/groups, kh, kw] (PyTorch).
 *  - All tensors are f32 except class labels / token ids (i32), and under a 16-bit precision
 *    the f16 / bf16 values of compiler/ir/precision.ts (autocast's types): an op reads a 16-bit
 *    input widened to f32 (exactly), computes as usual, and rounds a 16-bit output once when it
 *    stores it. In the pass's canonical form only `cast` writes them and only `halfInputs` and
 *    casts read them; a backend folds casts into other ops' kernels (fuse.ts rule 4).
 *  - Scalars (shape []) are one element.
 *  - "x_shape" style attrs repeat a shape a backward op needs but cannot see in its inputs.
 *  - Reductions accumulate in at least f32 (backends) / f64 (reference).
 *  - Losses are mean-reduced (PyTorch's default reduction='mean').
 *  - Optional inputs are passed as -1 when absent; trailing optional inputs may also be
 *    left out (the fused `mask` of a pool gradient, see fuse.ts).
 *  - Fusion attributes (written only by compiler/ir/fuse.ts, checked by verify.ts): on the
 *    GEMM family (fuse.ts EPILOGUE_OPS) `epilogue: <unary fn>` + that fn's attrs as
 *    `epilogue_<name>`: output 0 is f(the op's result); on global_avgpool_grad,
 *    maxpool2d_grad and conv2d_grad_input `relu_grad: true` with the optional last input `mask`: the output is
 *    `mask > 0 ? (the op's result) : 0`; on global_avgpool `relu_in: true`: the op reads
 *    relu(x); on layernorm `add_in: true` with an extra last input `addend` and an extra last
 *    output (every input present or -1): the op normalises x + addend and also writes that sum;
 *    on layernorm_grad `add_out: true` with an extra last input `addend`: output 0 is dx + addend,
 *    and with `sum_out: true` an extra last output [D]: output 0 summed over its rows; on unary_grad (rule 14) and
 *    attention_qkv_grad (rule 15) `sum_out: true` with output 1 [D]: output 0 (as stored) summed over its rows; on matmul
 *    {transA: true} of 2-D operands `a_sums: true` with an extra last output [M]: input 0 [K, M]
 *    summed over its rows (a linear's bias gradient beside its weight gradient); on global_avgpool_grad
 *    `c_sums: true` with an extra last output [C]: output 0 (after its relu-grad, if any) summed over
 *    N, H and W (the bias gradient of the convolution before the pool); on conv2d `pool_out: true` with
 *    an extra last output [N, C, 1, 1]: output 0 (after its epilogue, if any) averaged over H and W
 *    (the global_avgpool after it); on linear / matmul with an epilogue `pre_out: true` with an extra last output:
 *    the result before the epilogue (rule 13); on matmul `grad_fn: <unary fn>` (+ `grad_fn_<name>`) with an extra
 *    last input x: output 0 is `unary_grad` of that fn at x with the op's result as the gradient (rule 12).
 */
import type { AttrValue, DType, Node } from './graph.js';
import type { SExpr } from './scalar_fns.js';
import { GEMM_CONV_OPS } from './op_rules/gemm_conv.js';
import { POOL_OPS } from './op_rules/pool.js';
import { ELEMENTWISE_OPS } from './op_rules/elementwise.js';
import { NORM_OPS } from './op_rules/norm.js';
import { GATHER_OPS } from './op_rules/gather.js';
import { LOSS_OPS } from './op_rules/losses.js';
import { OPTIM_OPS } from './op_rules/optim.js';
import { TENSOR_OPS } from './op_rules/tensor.js';
import { ATTENTION_OPS } from './op_rules/attention.js';
import { PRECISION_OPS } from './op_rules/precision.js';

export { UNARY_FNS, type UnaryFn, BINARY_FNS, type BinaryFn } from './scalar_fns.js';

/** What a shape rule sees: its node's input shapes, dtypes and attrs, and a way to report. */
export interface ShapeCtx {
  /** number of inputs (variadic ops) */
  count: number;
  /** shape of input k ([] when absent: see `has`) */
  in(k: number): readonly number[];
  /** input k is present (not an absent optional input) */
  has(k: number): boolean;
  dtype(k: number): DType | undefined;
  attrs: Readonly<Record<string, AttrValue>>;
  /** a number[] attr ([] when missing or not an array) */
  shapeAttr(name: string): number[];
  /** a [h, w] attr ([NaN, NaN] when missing or malformed: the shapes then fail to match) */
  pairAttr(name: string): [number, number];
  /** records `msg` when cond is false */
  want(cond: boolean, msg: string): void;
  /** input k must have this shape */
  sameAs(k: number, shape: readonly number[], what: string): void;
}

/** The builder a gradient rule emits backward nodes through (autodiff.ts implements it). */
export interface VjpCtx {
  node: Node;
  /** value id of input k / output k */
  x(k: number): number;
  y(k: number): number;
  /** the gradient of output 0 (an internal error when output 0 is the loss itself: only losses and `binary add` may produce it) */
  dy(): number;
  /** output 0 is the loss itself: its gradient is the implicit 1 (`passSeed`, `timesDy` handle it) */
  isSeed: boolean;
  /** output k has a gradient */
  hasDy(k: number): boolean;
  /** input k needs a gradient (it depends on a parameter and reaches the loss) */
  need(k: number): boolean;
  shape(id: number): number[];
  /**
   * emits `op(inputs)` with one f32 output holding (part of) the gradient of value `gradOf`:
   * named `d_<its name>`, shaped like it unless `shape` is given; returns the output id
   */
  emit(op: string, inputs: number[], gradOf: number, attrs?: Record<string, AttrValue>, shape?: number[]): number;
  /** the same with one output per entry of gradOf (shaped like it, or shapes[k] when given) */
  emitN(op: string, inputs: number[], gradOf: number[], attrs?: Record<string, AttrValue>, shapes?: number[][]): number[];
  /** adds g to the gradient of input k (nothing when input k needs none) */
  acc(k: number, g: number): void;
  /**
   * adds g as the gradient of one range of input k along `axis`, starting at `start` (zero
   * elsewhere; nothing when input k needs none). When such parts tile input k along one axis
   * (every slice of a split / chunk read), autodiff writes them as one `concat`; otherwise each is
   * zero-padded to input k's shape (`pad`) and added.
   */
  accPart(k: number, g: number, axis: number, start: number): void;
  /** input k receives the implicit loss seed (a sum of losses) */
  passSeed(k: number): void;
  /** g summed down to input k's shape when a broadcast stretched it */
  unbroadcast(g: number, k: number): number;
  /** g * dy (a `binary mul`), or g itself when dy is the seed */
  timesDy(g: number, gradOf: number): number;
}

export type OpCategory = 'forward' | 'loss' | 'metric' | 'backward' | 'optimizer';

export type OpFlops =
  /** a rough count: this many flops per element of the largest input or output */
  | { perElement: number }
  /** GEMM-like: 2 flops per multiply-add, from the node's input shapes and attrs */
  | { gemm: (shape: (k: number) => readonly number[], attrs: Readonly<Record<string, AttrValue>>) => number };

export interface OpDef {
  /** input names, in order; a trailing '?' marks an optional input; '...' a variadic tail */
  inputs: string[];
  /** variadic ops: the least number of inputs (default 2) */
  minInputs?: number;
  /** output names, in order */
  outputs: string[];
  /** indices of inputs the op writes in place (persistent values only) */
  mutates?: number[];
  /** attributes with their meaning */
  attrs: Record<string, string>;
  /** StepScalars fields the op reads */
  scalars?: ('lr' | 't' | 'seed' | 'counter')[];
  doc: string;
  category: OpCategory;
  /** the output shapes (in order), checking the inputs on the way */
  shape(c: ShapeCtx): (readonly number[])[];
  /** the gradient rule; absent for ops that never lie between a parameter and the loss in a training graph */
  vjp?(c: VjpCtx): void;
  /** default { perElement: 1 } */
  flops?: OpFlops;
  elementwise?: boolean;
  /** element-wise ops with a scalar_fns formula: that formula, for the node's attrs */
  scalar?(attrs: Readonly<Record<string, AttrValue>>): SExpr;
  /**
   * mixed precision: the inputs that read f16 / bf16 values (the GEMM-family operands): the op
   * widens them to f32 exactly and accumulates in f32 (f64 in the reference). compiler/ir/precision.ts
   * gives these inputs 16-bit values (a cast copy of an f32 one) and every other float input f32.
   */
  halfInputs?: number[];
  /**
   * inputs whose arena bytes output 0 may take over when this node is their last reader and
   * they have its byte size (memory_plan.ts): every backend's kernel for this node reads
   * element i of that input before it writes element i of the output, and reads nothing of
   * the input after writing near it. Default none (outputs never alias inputs).
   */
  inPlace?(n: Node): number[];
  /** eval_mode: 'identity' = the node is removed and readers of output 0 read input 0; or the op it becomes, keeping its first `outputs` outputs and dropping `dropAttrs` */
  evalMode?: 'identity' | { op: string; outputs: number; dropAttrs?: string[] };
}

const OP_DEFS = {
  ...GEMM_CONV_OPS, ...POOL_OPS, ...ELEMENTWISE_OPS, ...NORM_OPS, ...GATHER_OPS, ...TENSOR_OPS, ...ATTENTION_OPS, ...LOSS_OPS, ...OPTIM_OPS, ...PRECISION_OPS,
};

/** the union of IR op names */
export type OpName = keyof typeof OP_DEFS;
export const OPS: Record<OpName, OpDef> = OP_DEFS;
export const OP_NAMES = Object.keys(OPS) as OpName[];

export function isOpName(op: string): op is OpName {
  return Object.prototype.hasOwnProperty.call(OPS, op);
}

export function opDef(op: string): OpDef {
  if (!isOpName(op)) throw new Error(`internal: unknown IR op '${op}'`);
  return OPS[op];
}
