/**
 * fuse: folds a node into its neighbour when a backend runs the pair as one kernel, by
 * rewriting the graph with explicit attributes (no backend keeps fusion side tables).
 * Runs after autodiff / optimizer lowering / eval_mode and before memory planning
 * (programs.ts `fuseProgram`), so the memory plan, `mpsc check --ir` and every backend see
 * the same fused graph.
 *
 * Consumes: a Program (verified graph; its memory plan, if any, is dropped) and the
 *           FusionCaps of the backend that will run it (each backend declares its set:
 *           compiler/codegen-cpu/fusions.ts, compiler/codegen-metal/fusions.ts).
 * Produces: a new Program (the input is not changed) without a plan, whose graph has value
 *           and node ids renumbered after the removals (Program.inputs / outputs follow):
 *  1. GEMM epilogue: a GEMM-family node P (EPILOGUE_OPS) with output y, and the `unary` R
 *     (z = f(y)) reading it: R disappears and P writes z, with attrs `epilogue: f` and f's
 *     own attrs as `epilogue_<name>` (e.g. `epilogue_alpha`); f in caps.fns for caps.ops, or in
 *     caps.opFns[P.op] (fns only some ops apply). Legal when y is not a program
 *     output and its readers are R and, when caps allow and f's derivative can be read from
 *     f's output (GRAD_FROM_OUTPUT: relu'(y) = [relu(y) > 0]), `unary_grad` nodes of the same
 *     f and attrs reading y as their forward input: those read z instead (same bits: the same
 *     select on the same sign).
 *  2. relu-grad into a pool gradient or a convolution's input gradient: P = global_avgpool_grad,
 *     maxpool2d_grad or conv2d_grad_input (without an epilogue) writing g, and U = `unary_grad
 *     relu` (dx = mask > 0 ? g : 0) the only reader of g: U disappears, P gets attr `relu_grad:
 *     true`, the mask as its optional last input `mask`, and writes dx (the conv applies the
 *     mask in its output store).
 *     maxpool2d_grad only with 2x2 windows, stride 2, no padding, and the mask being the pool
 *     input x itself (after rule 1 the relu-grad reads relu's output, which is what the pool
 *     read): the kernel the CPU backend has for it.
 *  3. relu into global_avgpool: R = `unary relu` (z = relu(y)) whose output only the
 *     global_avgpool G reads: R disappears, G reads y with attr `relu_in: true`.
 *  4. casts (mixed precision, compiler/ir/precision.ts's canonical form), when caps.casts lists the ops:
 *     a. a `cast {to: f32}` of a 16-bit value h, written w: each reader of w whose op reads 16-bit
 *        (`reads`; not a fused node) reads h instead; the cast goes when it had readers and none is left;
 *     b. a `cast {to: f16|bf16}` of an f32 value t that it alone reads, written by a node P whose op
 *        stores 16-bit (`stores`): P writes the cast's output itself (rounded at its store) and the
 *        cast goes. (a) runs first, so a rounded-then-widened value whose readers all read 16-bit
 *        ends up written by its producer in 16 bits.
 *     Before both, when reshape reads and stores 16-bit: a `cast {to}` of r = reshape(x), where x
 *     already has a copy xh made by a `cast {to}`, becomes reshape(xh) (x's 16-bit copy reshaped,
 *     not a second copy; the reshape of x goes when nothing else reads r).
 *     Exact: widening is exact, and the rounding happens at the same point (the reference
 *     interpreter rounds a node's 16-bit outputs when it stores them).
 *  5. residual add into layernorm: A = `binary add` (h = a + b, a and b of h's shape, h f32 and not a
 *     program output) and L = a `layernorm` reading h as its x, rows of D <= caps.addLayernorm.maxD,
 *     with no reader of h between A and L: A disappears and L, attr `add_in: true`, reads a as x and b
 *     as its last input `addend` (weight / bias as before, -1 when absent), normalises a + b and
 *     writes h as its fourth output (every other reader of h reads it there, after L). Exact: h is the
 *     same f32 sum, and L normalises that sum as it did when reading h.
 *  6. residual-gradient add into layernorm_grad: L = `layernorm_grad` writing dx (f32, not a program
 *     output, rows of D <= caps.addLayernorm.maxD) whose only reader is A = `binary add` (out = dx + r
 *     or r + dx, r of dx's shape, written before L, out f32): A disappears and L, attr `add_out: true`,
 *     reads r as its last input `addend` (absent weight: -1) and writes out as its output 0. The sum is
 *     the same f32 addition (a CUDA build may contract it with the last multiply of dx: one rounding).
 *  7. a bias gradient of that sum into the same layernorm_grad: S = `sum_to` of a rule-6 node's output 0
 *     over every leading dim (shape [D]; the bias gradient of the linear that read the residual stream),
 *     f32: S disappears and the node, attr `sum_out: true`, writes S's output as its last output.
 *     The same sum in another order (the kernel's rows, warps, blocks): within rounding, not bitwise.
 *  8. a bias gradient into the weight-gradient product reading the same rows (caps.matmulBiasGrad): S =
 *     `sum_to` of dy (any float, [..., M]) over every leading dim (shape [M], f32), and P = a `matmul`
 *     {transA: true, transB: false} without an epilogue whose input 0 is dy's rows as a 2-D [K, M] (dy
 *     itself, or a `reshape` of it), b 2-D, with no reader of S's output before P: S disappears and P,
 *     attr `a_sums: true`, writes S's output as its last output (a's column sums: the linear's bias
 *     gradient; cuBLASLt's BGRADB epilogue on CUDA, codegen-cuda/cublaslt.ts). The same sum in another order.
 *  9. a bias gradient into the node writing what it sums (after rule 2): S = `sum_to` of the output 0 (f32 [N, C, H, W])
 *     of G = a global_avgpool_grad (caps.poolGradBiasSum) or a conv2d_grad_input without an epilogue
 *     (caps.convGradBiasSum), with or without a folded relu-grad, over axes [0, 2, 3] (shape [C], f32: the bias gradient
 *     of the convolution before, whose output gradient G writes): S disappears and G, attr `c_sums: true`, writes S's
 *     output as its last output (output 0's channel sums). No node reads S's output before S (it reads G's output, so G
 *     comes first). The same sum in another order (CUDA: per plane the count of unmasked elements times the plane's
 *     value, codegen-cuda/avgpool_cuda.ts; each row tile's column sums in the conv's store, conv_cuda.ts): within
 *     rounding, not bitwise.
 * 10. the global average pool into the convolution before it (caps.convPool; after rule 1): G = `global_avgpool`
 *     (without relu_in) reading the f32 output 0 y of a `conv2d` P (with or without an epilogue) that has one output:
 *     G disappears and P, attr `pool_out: true`, writes G's output as its last output (y's per-plane means); y stays
 *     P's output 0 for its other readers (the backward's relu mask). The same means in another order (CUDA: per
 *     output tile column sums in the conv's store, then a sum of the tiles in order, codegen-cuda/conv_cuda.ts).
 * 11. the 16-bit copy of a residual gradient into the layernorm_grad writing it (caps.addLayernorm.halfOut; after
 *     rules 6 and 7): C = `cast {to: f16|bf16}` of the f32 output 0 of a rule-6 node L (`add_out`; the residual
 *     stream's gradient, which the next layernorm_grad reads in f32 while the products read its 16-bit copy), C's
 *     output not a program output: C disappears and L, attr `half_out: <type>`, writes C's output as its last
 *     output (after `sum_out`'s when both). Exact: the same f32 values, each rounded once as the cast did.
 * 12. a unary gradient into the small product writing its g (caps.smallEpilogues; after rule 8): U = `unary_grad` (fn in
 *     caps.fns, without fwd_out) whose g (input 0, f32, not a program output) a `matmul` P without fusion attrs writes and
 *     U alone reads, with x (input 1) an f32 of g's shape, P at most caps.maxMacs multiply-adds: U disappears and P, attrs
 *     `grad_fn: fn` (and fn's attrs as `grad_fn_<name>`), reads x as its last input and writes U's output (the product's
 *     store computes fn's gradient of x at g). Exact: the same f32 g, the same formula.
 * 13. a unary into the small product before it, keeping the product (caps.smallEpilogues; after rule 1, for what it
 *     left): R = `unary` (fn in caps.fns) reading the f32 output y (not a program output) of a `linear` / `matmul` P
 *     without fusion attrs (at most caps.maxMacs multiply-adds), y read by R and at least one other node (the gradient
 *     reads y as its x): R disappears and P, attrs `epilogue: fn` (+ `epilogue_<name>`) and `pre_out: true`, writes
 *     R's output as output 0 and y as its last output (both in its store). Exact: y is the same f32 value, R's
 *     formula applied to it.
 *     Only small products: a backend runs these on a kernel of its own that applies them in its store (CUDA:
 *     gemm_cuda.ts's small tiles), where a library call without such an epilogue would need the same extra kernel;
 *     and rematerialisation (remat.ts), which looks for the `unary` nodes, only acts on large programs. The CPU takes
 *     rule 12 alone, for relu at any size (sgemm.h's Epilogue::mask; caps.smallEpilogues.preOut false).
 * 14. a bias gradient into the unary gradient writing what it sums (caps.unaryGradBiasSum; after rule 4, before rule 8):
 *     S = `sum_to` of the output 0 dx (any float [..., D], D a multiple of caps.multipleOf and at most caps.maxD, at least
 *     caps.minElements elements) of U = a `unary_grad` without fusion attrs, over every leading dim (shape [D], f32): S
 *     disappears and U, attr `sum_out: true`, writes S's output as its output 1 (dx's column sums; grad_fwd.ts may then
 *     add `fwd_out`, whose f(x) comes after it). The sums are of dx as stored (rounded when dx is 16-bit), as S read it:
 *     the same sum in another order (codegen-cuda/wide_ew_cuda.ts: each thread's columns over its rows, then the blocks'
 *     partials in order), within rounding, not bitwise. For GPT-2 the fc bias gradient, which rule 8 would otherwise
 *     give the weight-gradient GEMM (cuBLASLt's BGRADB epilogue: ~47 us more per call on an H100 than the plain call).
 * 15. a bias gradient into the attention gradient writing what it sums (caps.attnGradBiasSum; after rule 4, before rule 8):
 *     S = `sum_to` of the output 0 dqkv (of a dtype in caps.dtypes) of A = an `attention_qkv_grad` without fusion attrs,
 *     over every leading dim (shape [3C], f32: the in_proj bias gradient): S disappears and A, attr `sum_out: true`,
 *     writes S's output as its output 1 (dqkv's column sums, of dqkv as stored). The same sum in another order
 *     (codegen-cuda/attention_cuda.ts: each flash backward block's column sums over its 64 rows in its store, then
 *     the blocks' partials in order), within rounding, not bitwise. For GPT-2 the qkv bias gradient, whose BGRADB
 *     epilogue (rule 8) cost its weight-gradient GEMM ~43 us per call on an H100.
 * 16. the 16-bit copies of persistent values to the start of the program (caps.hoistParamCasts; last, after every rule): each
 *     `cast {to: f16|bf16}` whose input is a persistent value (a parameter: precision.ts's `<param>.bf16` copies, made
 *     before each one's first reader, layer by layer) that no node before the cast mutates (the optimizer's updates come
 *     after every read of the parameter, autodiff's guarantee) moves, in its order among them, before every other node:
 *     consecutive independent element-wise kernels, which codegen-cuda/merge.ts launches as one kernel (GPT-2 small bf16:
 *     97 copies in 38 launches of 5-82 us each on an H100 become one launch). Exact (the same casts of the same values);
 *     the copies live longer, through the forward before their first reader (GPT-2: planned peak unchanged, the later
 *     layers' copies are live at the forward's end, which sets the peak, anyway; its eval's arena unchanged too).
 *  The rules run in this order over the whole graph (so rule 3 takes only relus rule 1 left).
 *  A node never carries two fusions of the same kind; running the pass on its own output
 *  changes nothing.
 * Relies on: SSA and topological order (verify.ts); a fused node is written where the first
 *  node of the pair ran, and every reader of its output comes after the second node, so
 *  moving the write earlier never reorders a read. Every fused form's meaning is "the
 *  original nodes in sequence" (`fusedParts`), which the reference interpreter executes.
 */
import { type AttrValue, type Graph, type Node, type Program, isHalf, isPersistent, numel } from './graph.js';
import { type OpName, opDef } from './ops.js';
import { type UnaryFn, UNARY_FNS_TABLE, isUnaryFn } from './scalar_fns.js';
import { matmulNodeDims, pairOf } from './shapes.js';

/** Which fusions a backend executes (plain data). An absent field means none of that kind. */
export interface FusionCaps {
  /** rule 1: the GEMM-family ops whose kernels apply an epilogue, the fns they apply, and whether
   * relu-grads may be redirected to the fused output (otherwise the unary must be y's only reader) */
  epilogue?: {
    ops: readonly OpName[];
    fns: readonly UnaryFn[];
    gradReaders: boolean;
    /** more fns that only these ops apply (e.g. the CPU's linear applies any unary fn; its conv only relu) */
    opFns?: Partial<Record<OpName, readonly UnaryFn[]>>;
  };
  /** rule 2: which pool gradients take a folded relu-grad, and whether conv2d_grad_input does (in its store) */
  poolGradRelu?: { globalAvgpool: boolean; maxpool2x2: boolean; convGradInput?: boolean };
  /** rule 3 */
  reluIntoGlobalAvgpool?: boolean;
  /**
   * rule 4 (mixed precision): the ops whose kernels read a 16-bit value at any float input
   * (widening it exactly as they load it), and those whose kernels store any float output in
   * its 16-bit type (rounding once, to nearest even, as they store it)
   */
  casts?: { reads: readonly OpName[]; stores: readonly OpName[] };
  /**
   * after the rules: recompute cheap forward values in the backward (remat.ts; programs.ts
   * fuseForBackend), only for a program whose planned peak without the copies is at least
   * `fromPeakBytes` (below it memory limits nothing, and every copy costs a kernel launch); `ops`: which of
   * remat.ts's ops (default all: unary, layernorm); `later`: ops recomputed only when the program, with the
   * other ops' copies, still plans `later.fromPeakBytes` or more (the costlier copies: a layernorm copy is a whole
   * row kernel, a gelu copy is one more store in its gradient's kernel, grad_fwd.ts)
   */
  remat?: { fromPeakBytes: number; ops?: readonly string[]; later?: { ops: readonly string[]; fromPeakBytes: number } };
  /** rules 5-7: a residual add folded into the layernorm after it (add), the residual-gradient add (grad) and its bias gradient (biasSum) into the layernorm_grad before it, for rows of at most maxD; each on unless false; rule 11 (halfOut) only when true */
  addLayernorm?: { maxD: number; add?: boolean; grad?: boolean; biasSum?: boolean; halfOut?: boolean };
  /** rule 8: a bias gradient (sum_to over the rows) into the weight-gradient matmul reading the same rows */
  matmulBiasGrad?: boolean;
  /** rule 14: a bias gradient (sum_to over the rows) into the unary_grad writing what it sums, for rows of D (a multiple of
   *  multipleOf, at most maxD) and at least minElements elements */
  unaryGradBiasSum?: { multipleOf: number; maxD: number; minElements: number };
  /** rule 15: a bias gradient (sum_to over the rows) into the attention_qkv_grad writing what it sums, for dqkv of these dtypes */
  attnGradBiasSum?: { dtypes: readonly string[] };
  /** rule 9: a conv bias gradient (sum_to over N, H, W) into the global_avgpool_grad / the conv2d_grad_input writing what it sums */
  poolGradBiasSum?: boolean;
  convGradBiasSum?: boolean;
  /** rule 10: a global_avgpool into the conv2d writing what it reads */
  convPool?: boolean;
  /** rules 12, 13: unary gradients / unaries keeping their input folded into the stores of products of at most maxMacs
   *  multiply-adds (preOut false: rule 12 only) */
  smallEpilogues?: { fns: readonly UnaryFn[]; maxMacs: number; preOut?: boolean };
  /** after remat: a recomputed unary and the unary_grad of the same fn over the same x as one node (grad_fwd.ts, programs.ts fuseForBackend) */
  gradWithForward?: boolean;
  /** rule 16: the 16-bit casts of persistent values (parameters' copies) moved before every other node, for one merged launch */
  hoistParamCasts?: boolean;
}

export const NO_FUSIONS: FusionCaps = {};

/** the ops that may carry an `epilogue` (verify.ts checks it) */
export const EPILOGUE_OPS: readonly OpName[] = ['linear', 'matmul', 'conv2d', 'conv2d_grad_input', 'conv2d_grad_weight'];
/** the gradients that may carry `relu_grad` + `mask` (the pools', and the conv's input gradient, in its store) */
export const RELU_GRAD_OPS: readonly OpName[] = ['global_avgpool_grad', 'maxpool2d_grad', 'conv2d_grad_input'];
/** the ops that may carry `add_in` (+ the `addend` input and the sum as an extra last output) */
export const ADD_IN_OPS: readonly OpName[] = ['layernorm'];
/** the ops that may carry `add_out` (+ the `addend` input, added to output 0), and with it `sum_out` (+ output 0's column sums as the last output) */
export const ADD_OUT_OPS: readonly OpName[] = ['layernorm_grad'];
/** the ops that may carry `sum_out` without `add_out` (+ output 0's column sums as output 1: rules 14, 15) */
export const SUM_OUT_OPS: readonly OpName[] = ['unary_grad', 'attention_qkv_grad'];
/** the ops that may carry `a_sums` (+ input 0's column sums as the last output: rule 8) */
export const A_SUMS_OPS: readonly OpName[] = ['matmul'];
/** the ops that may carry `c_sums` (+ output 0's channel sums, over N, H, W, as the last output: rule 9) */
export const C_SUMS_OPS: readonly OpName[] = ['global_avgpool_grad', 'conv2d_grad_input'];
/** the ops that may carry `pool_out` (+ output 0's global average pool, [N, C, 1, 1], as the last output: rule 10) */
export const POOL_OUT_OPS: readonly OpName[] = ['conv2d'];
/** the ops that may carry `fwd_out` (+ f(x) of input 1 as the last output: grad_fwd.ts) */
export const FWD_OUT_OPS: readonly OpName[] = ['unary_grad'];
/** the ops that may carry `grad_fn` (+ the gradient's x as the last input: rule 12) */
export const GRAD_FN_OPS: readonly OpName[] = ['matmul'];
/** the ops that may carry `pre_out` with their epilogue (+ the product before the epilogue as the last output: rule 13) */
export const PRE_OUT_OPS: readonly OpName[] = ['linear', 'matmul'];
/** the ops that may carry `relu_in` */
export const RELU_IN_OPS: readonly OpName[] = ['global_avgpool'];
/**
 * Unary fns whose derivative, as unary_grad computes it, is the same when it reads f(y) instead
 * of y: relu ([y > 0] = [relu(y) > 0]). (relu6 / hardtanh would qualify too, but no backend
 * declares them for grad readers.)
 */
export const GRAD_FROM_OUTPUT: readonly UnaryFn[] = ['relu'];

export const EPILOGUE_ATTR = 'epilogue';
const PREFIX = 'epilogue_';
export const GRAD_FN_ATTR = 'grad_fn';
const GRAD_PREFIX = 'grad_fn_';
/** the attrs a fusion adds to a node (with the `epilogue_<name>` ones): what `unfusedAttrs` drops */
const FUSION_FLAGS = new Set([EPILOGUE_ATTR, GRAD_FN_ATTR, 'pre_out', 'relu_grad', 'relu_in', 'add_in', 'add_out', 'sum_out', 'half_out', 'a_sums', 'c_sums', 'pool_out', 'fwd_out']);

/** a fused fn attr and its `<attr>_<name>` attrs as { fn, ...fn attrs }, or null */
function fnAttrsOf(n: Node, attr: string, prefix: string): Record<string, AttrValue> | null {
  const fn = n.attrs[attr];
  if (fn === undefined) return null;
  const out: Record<string, AttrValue> = { fn };
  for (const [k, v] of Object.entries(n.attrs)) if (k.startsWith(prefix)) out[k.slice(prefix.length)] = v;
  return out;
}

/** P's attrs with `attr: fn` and the fn's own attrs of node `from` (a unary or unary_grad) as `<prefix><name>` */
function withFnAttrs(P: Node, attr: string, prefix: string, fn: UnaryFn, from: Node, extra: Record<string, AttrValue> = {}): Record<string, AttrValue> {
  const attrs: Record<string, AttrValue> = { ...P.attrs, [attr]: fn, ...extra };
  for (const name of Object.keys(UNARY_FNS_TABLE[fn].attrs)) if (from.attrs[name] !== undefined) attrs[prefix + name] = from.attrs[name];
  return attrs;
}

/** the fused epilogue of a GEMM-family node as `unary` attrs ({ fn, ...fn attrs }), or null */
export const epilogueOf = (n: Node) => fnAttrsOf(n, EPILOGUE_ATTR, PREFIX);

/** the fused unary gradient of a product (rule 12) as `unary_grad` attrs ({ fn, ...fn attrs }), or null */
export const gradFnOf = (n: Node) => fnAttrsOf(n, GRAD_FN_ATTR, GRAD_PREFIX);

/** a node's attrs without the fusion attrs (what its unfused op reads) */
export function unfusedAttrs(n: Node): Record<string, AttrValue> {
  return Object.fromEntries(Object.entries(n.attrs).filter(([k]) => !FUSION_FLAGS.has(k) && !k.startsWith(PREFIX) && !k.startsWith(GRAD_PREFIX)));
}

/**
 * The meaning of a fused node as the original nodes in sequence:
 *  - `pre`:  input 0 is first mapped through `unary` with these attrs (relu_in);
 *  - `core`: the node's own op with `unfusedAttrs` and its first `coreInputs` inputs;
 *  - `post`: the core's output 0 then goes through `unary` (epilogue), through
 *            `unary_grad relu` with input `maskInput` (the last one) as the mask (relu_grad; rule 12's `grad_fn`:
 *            `unary_grad` of that fn with the last input as its x), or
 *            through `binary add` with input `addendInput` (the last one; add_out);
 *  - `sumOut`: after `post`, output `sumOut` (the last one, or the one before `halfOut`; a unary_grad's output 1) is output 0 (as stored: rounded when 16-bit) summed over the
 *            dims `sumAxes` (`sum_to`): every dim but its last (sum_out) or N, H and W (c_sums); the core has the
 *            node's outputs before it;
 *  - `halfOut`: after `post`, output `halfOut` (the last one) is output 0 again, stored in its 16-bit type (`cast`;
 *            half_out): the core has the node's outputs before it (and before `sumOut`'s);
 *  - `poolOut`: after `post`, output `poolOut` (the last one) is output 0's `global_avgpool` (pool_out):
 *            the core has the node's outputs before it;
 *  - `aSums`: output `aSums` (the last one) is input 0 (2-D [K, M]) summed over its rows (`sum_to`
 *            with axes [0]; a_sums): the core has the node's outputs before it;
 *  - `preOut`: before `post`, output `preOut` (the last one) is output 0 as the core wrote it (pre_out): the core has
 *            the node's outputs before it;
 *  - `fwdOut`: output `fwdOut` (the last one) is `unary` of input 1 with the node's attrs (fn and its
 *            attrs; grad_fwd.ts `fwd_out` on unary_grad): the core has the node's outputs before it;
 *  - `add`:  input 0 is first replaced by input 0 + input `input` (the last one; `binary add`), and
 *            that sum is also the node's output `output` (the last one; add_in): the core has the
 *            node's outputs before it.
 */
export interface FusedParts {
  pre?: Record<string, AttrValue>;
  add?: { input: number; output: number };
  sumOut?: number;
  sumAxes?: number[];
  halfOut?: number;
  poolOut?: number;
  aSums?: number;
  fwdOut?: number;
  preOut?: number;
  coreInputs: number;
  post?: { op: 'unary'; attrs: Record<string, AttrValue> } | { op: 'unary_grad'; attrs: Record<string, AttrValue>; maskInput: number } |
    { op: 'binary'; attrs: Record<string, AttrValue>; addendInput: number };
}

export function fusedParts(n: Node): FusedParts | null {
  const epi = epilogueOf(n);
  // pool_out (rule 10): output 0's global average pool as the last output, after the epilogue when there is one
  const pool = n.attrs.pool_out === true ? { poolOut: n.outputs.length - 1 } : {};
  if (epi) return { coreInputs: n.inputs.length, post: { op: 'unary', attrs: epi }, ...pool, ...(n.attrs.pre_out === true ? { preOut: n.outputs.length - 1 } : {}) };
  const gradFn = gradFnOf(n);
  if (gradFn) return { coreInputs: n.inputs.length - 1, post: { op: 'unary_grad', attrs: gradFn, maskInput: n.inputs.length - 1 } };
  if (n.attrs.pool_out === true) return { coreInputs: n.inputs.length, ...pool };
  // c_sums (rule 9): output 0's channel sums as the last output, after the relu-grad when there is one
  const cSums = n.attrs.c_sums === true ? { sumOut: n.outputs.length - 1, sumAxes: [0, 2, 3] } : {};
  if (n.attrs.relu_grad === true) return { coreInputs: n.inputs.length - 1, post: { op: 'unary_grad', attrs: { fn: 'relu' }, maskInput: n.inputs.length - 1 }, ...cSums };
  if (n.attrs.c_sums === true) return { coreInputs: n.inputs.length, ...cSums };
  if (n.attrs.relu_in === true) return { pre: { fn: 'relu' }, coreInputs: n.inputs.length };
  if (n.attrs.add_out === true) {
    const post = { op: 'binary' as const, attrs: { fn: 'add' }, addendInput: n.inputs.length - 1 };
    // the extra outputs in order: sum_out's, then half_out's (last)
    const half = n.attrs.half_out !== undefined ? 1 : 0;
    return { coreInputs: n.inputs.length - 1, post, ...(n.attrs.sum_out === true ? { sumOut: n.outputs.length - 1 - half } : {}),
      ...(half ? { halfOut: n.outputs.length - 1 } : {}) };
  }
  if (n.attrs.add_in === true) return { coreInputs: n.inputs.length - 1, add: { input: n.inputs.length - 1, output: n.outputs.length - 1 } };
  if (n.attrs.a_sums === true) return { coreInputs: n.inputs.length, aSums: n.outputs.length - 1 };
  // sum_out on a unary_grad (rule 14) or an attention_qkv_grad (rule 15): output 0's column sums as output 1, before fwd_out's f(x) when both
  if (n.attrs.sum_out === true) return { coreInputs: n.inputs.length, sumOut: 1, ...(n.attrs.fwd_out === true ? { fwdOut: 2 } : {}) };
  if (n.attrs.fwd_out === true) return { coreInputs: n.inputs.length, fwdOut: n.outputs.length - 1 };
  return null;
}

/** the graph being rewritten: removed nodes are null until the final renumbering */
interface Work {
  nodes: (Node | null)[];
  /** value id -> ids of the nodes reading it (recomputed after each rewrite) */
  readers: Map<number, number[]>;
  /** intermediate values no node writes any more */
  dropValues: Set<number>;
  /** the program's output values (never fused away) */
  outputs: Set<number>;
  /** a rule rewrote nodes without dropping a value (rule 5) */
  changed: boolean;
}

const sameAttrs = (a: Record<string, AttrValue>, b: Record<string, AttrValue>) => {
  const ka = Object.keys(a).sort(), kb = Object.keys(b).sort();
  return ka.length === kb.length && ka.every((k, i) => k === kb[i] && JSON.stringify(a[k]) === JSON.stringify(b[k]));
};

function readersOf(nodes: (Node | null)[]): Map<number, number[]> {
  const r = new Map<number, number[]>();
  for (const n of nodes) if (n) for (const id of new Set(n.inputs)) if (id >= 0) r.set(id, [...(r.get(id) ?? []), n.id]);
  return r;
}

function replaceInput(n: Node, from: number, to: number): Node {
  return { ...n, inputs: n.inputs.map((id) => (id === from ? to : id)) };
}

/** rule 1 */
function fuseEpilogues(g: Graph, w: Work, caps: NonNullable<FusionCaps['epilogue']>): void {
  for (const P of w.nodes) {
    const extra = (P && caps.opFns?.[P.op as OpName]) || [];
    if (!P || !(caps.ops.includes(P.op as OpName) || extra.length > 0) || P.attrs[EPILOGUE_ATTR] !== undefined || P.outputs.length !== 1) continue;
    const y = P.outputs[0];
    if (g.values[y].dtype !== 'f32' || w.outputs.has(y)) continue;
    const rs = (w.readers.get(y) ?? []).map((id) => w.nodes[id]!);
    const unaries = rs.filter((r) => r.op === 'unary' && r.inputs[0] === y);
    if (unaries.length !== 1) continue;
    const R = unaries[0];
    const fn = String(R.attrs.fn);
    if (!isUnaryFn(fn) || !((caps.ops.includes(P.op as OpName) && caps.fns.includes(fn)) || extra.includes(fn))) continue;
    const grads = rs.filter((r) => r !== R);
    const gradOk = (u: Node) =>
      u.op === 'unary_grad' && u.inputs[1] === y && u.inputs[0] !== y && sameAttrs(u.attrs, R.attrs);
    if (grads.length > 0 && !(caps.gradReaders && GRAD_FROM_OUTPUT.includes(fn) && grads.every(gradOk))) continue;
    const z = R.outputs[0];
    w.nodes[P.id] = { ...P, attrs: withFnAttrs(P, EPILOGUE_ATTR, PREFIX, fn, R), outputs: [z] };
    w.nodes[R.id] = null;
    for (const u of grads) w.nodes[u.id] = replaceInput(u, y, z);
    w.dropValues.add(y);
    w.readers = readersOf(w.nodes);
  }
}

/** a 2x2 / stride-2 / unpadded max-pool gradient over an input of at least 2x2 */
function maxpool2x2(P: Node, xShape: readonly number[]): boolean {
  const is = (a: AttrValue | undefined, h: number, w: number) => {
    const p = pairOf(a);
    return p !== null && p[0] === h && p[1] === w;
  };
  return is(P.attrs.kernel, 2, 2) && is(P.attrs.stride, 2, 2) && (P.attrs.padding === undefined || is(P.attrs.padding, 0, 0)) &&
    xShape.length === 4 && xShape[2] >= 2 && xShape[3] >= 2;
}

/** rule 2 */
function fusePoolGradRelu(g: Graph, w: Work, caps: NonNullable<FusionCaps['poolGradRelu']>): void {
  for (const P of w.nodes) {
    if (!P || P.outputs.length !== 1 || P.attrs.relu_grad !== undefined || P.attrs[EPILOGUE_ATTR] !== undefined) continue;
    if (!((P.op === 'global_avgpool_grad' && caps.globalAvgpool) || (P.op === 'maxpool2d_grad' && caps.maxpool2x2) ||
      (P.op === 'conv2d_grad_input' && caps.convGradInput === true))) continue;
    const gv = P.outputs[0];
    if (g.values[gv].dtype !== 'f32' || w.outputs.has(gv)) continue;
    const rs = w.readers.get(gv) ?? [];
    if (rs.length !== 1) continue;
    const U = w.nodes[rs[0]]!;
    if (U.op !== 'unary_grad' || U.attrs.fn !== 'relu' || U.inputs[0] !== gv || U.inputs[1] === gv) continue;
    const mask = U.inputs[1];
    if (g.values[mask].dtype !== 'f32' || g.values[mask].shape.join(',') !== g.values[gv].shape.join(',')) continue;
    if (P.op === 'maxpool2d_grad' && (mask !== P.inputs[1] || !maxpool2x2(P, g.values[P.inputs[1]].shape))) continue;
    w.nodes[P.id] = { ...P, inputs: [...P.inputs, mask], outputs: [...U.outputs], attrs: { ...P.attrs, relu_grad: true } };
    w.nodes[U.id] = null;
    w.dropValues.add(gv);
    w.readers = readersOf(w.nodes);
  }
}

/** rule 3 */
function fuseReluIntoPool(g: Graph, w: Work): void {
  for (const R of w.nodes) {
    if (!R || R.op !== 'unary' || R.attrs.fn !== 'relu') continue;
    const y = R.inputs[0], z = R.outputs[0];
    if (g.values[y].dtype !== 'f32' || w.outputs.has(z)) continue;
    const rs = w.readers.get(z) ?? [];
    if (rs.length !== 1) continue;
    const G = w.nodes[rs[0]]!;
    if (G.op !== 'global_avgpool' || G.inputs[0] !== z || G.attrs.relu_in !== undefined) continue;
    w.nodes[G.id] = { ...replaceInput(G, z, y), attrs: { ...G.attrs, relu_in: true } };
    w.nodes[R.id] = null;
    w.dropValues.add(z);
    w.readers = readersOf(w.nodes);
  }
}

/** rule 4 */
function foldCasts(g: Graph, w: Work, caps: NonNullable<FusionCaps['casts']>): void {
  const writer = new Map<number, Node>();
  for (const n of w.nodes) if (n) for (const o of n.outputs) writer.set(o, n);
  // 0: a 16-bit copy of reshape(x) where x has its own 16-bit copy xh: reshape xh instead
  if (caps.reads.includes('reshape') && caps.stores.includes('reshape')) {
    const copyOf = new Map<string, Node>(); // `${x}:${type}` -> the cast making x's copy
    for (const C of w.nodes) {
      if (!C || C.op !== 'cast' || !isHalf(g.values[C.outputs[0]].dtype)) continue;
      const r = C.inputs[0], R = writer.get(r), to = String(C.attrs.to);
      const xc = R?.op === 'reshape' && !w.outputs.has(r) ? copyOf.get(`${R.inputs[0]}:${to}`) : undefined;
      if (!R || !xc) {
        copyOf.set(`${r}:${to}`, C);
        continue;
      }
      const V: Node = { ...C, op: 'reshape', inputs: [xc.outputs[0]], attrs: { ...R.attrs } };
      w.nodes[C.id] = V;
      writer.set(C.outputs[0], V);
      w.readers = readersOf(w.nodes);
      if ((w.readers.get(r) ?? []).length === 0) {
        w.nodes[R.id] = null;
        w.dropValues.add(r);
      }
      copyOf.set(`${r}:${to}`, V);
    }
    w.readers = readersOf(w.nodes);
  }
  for (const C of w.nodes) {
    if (!C || C.op !== 'cast' || C.attrs.to !== 'f32') continue;
    const h = C.inputs[0], wide = C.outputs[0];
    if (!isHalf(g.values[h].dtype)) continue;
    let left = 0, moved = 0;
    for (const rid of w.readers.get(wide) ?? []) {
      const R = w.nodes[rid]!;
      if (R.op === 'cast' || !caps.reads.includes(R.op as OpName) || fusedParts(R) !== null) left++;
      else {
        w.nodes[rid] = replaceInput(R, wide, h);
        moved++;
      }
    }
    if (moved > 0 && left === 0 && !w.outputs.has(wide)) {
      w.nodes[C.id] = null;
      w.dropValues.add(wide);
    }
    w.readers = readersOf(w.nodes);
  }
  for (const C of w.nodes) {
    if (!C || C.op !== 'cast' || !isHalf(g.values[C.outputs[0]].dtype)) continue;
    const t = C.inputs[0];
    if (g.values[t].dtype !== 'f32' || w.outputs.has(t) || (w.readers.get(t) ?? []).length !== 1) continue;
    const at = writer.get(t)?.id;
    const P = at === undefined ? null : w.nodes[at];
    if (!P || P.op === 'cast' || !caps.stores.includes(P.op as OpName)) continue;
    w.nodes[P.id] = { ...P, outputs: P.outputs.map((o) => (o === t ? C.outputs[0] : o)) };
    w.nodes[C.id] = null;
    w.dropValues.add(t);
    w.readers = readersOf(w.nodes);
  }
}

/** rule 5 */
function fuseAddLayernorm(g: Graph, w: Work, caps: NonNullable<FusionCaps['addLayernorm']>): void {
  const same = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((d, i) => d === b[i]);
  for (const L of w.nodes) {
    if (!L || L.op !== 'layernorm' || L.attrs.add_in !== undefined || L.outputs.length !== 3) continue;
    const h = L.inputs[0], hv = g.values[h];
    if (hv.dtype !== 'f32' || hv.shape[hv.shape.length - 1] > caps.maxD || w.outputs.has(h)) continue;
    const at = w.nodes.findIndex((n) => n !== null && n.outputs.includes(h));
    const A = at < 0 ? null : w.nodes[at];
    if (!A || A.op !== 'binary' || A.attrs.fn !== 'add' || Object.keys(A.attrs).length !== 1 || A.outputs.length !== 1) continue;
    const [a, b] = A.inputs;
    if (!same(g.values[a].shape, hv.shape) || !same(g.values[b].shape, hv.shape)) continue;
    // L moves h's write from A to L: nothing may read h in between
    if ((w.readers.get(h) ?? []).some((r) => r > A.id && r < L.id)) continue;
    const ins = [a, L.inputs[1] ?? -1, L.inputs[2] ?? -1, b];
    w.nodes[L.id] = { ...L, inputs: ins, outputs: [...L.outputs, h], attrs: { ...L.attrs, add_in: true } };
    w.nodes[A.id] = null;
    w.changed = true;
    w.readers = readersOf(w.nodes);
  }
}

/** rule 6 */
function fuseLayernormGradAdd(g: Graph, w: Work, caps: NonNullable<FusionCaps['addLayernorm']>): void {
  const writer = new Map<number, number>();
  for (const n of w.nodes) if (n) for (const o of n.outputs) writer.set(o, n.id);
  for (const L of w.nodes) {
    if (!L || L.op !== 'layernorm_grad' || L.attrs.add_out !== undefined) continue;
    const dx = L.outputs[0], dv = g.values[dx];
    if (dv.dtype !== 'f32' || dv.shape[dv.shape.length - 1] > caps.maxD || w.outputs.has(dx)) continue;
    const rs = w.readers.get(dx) ?? [];
    if (rs.length !== 1) continue;
    const A = w.nodes[rs[0]]!;
    if (A.op !== 'binary' || A.attrs.fn !== 'add' || Object.keys(A.attrs).length !== 1 || g.values[A.outputs[0]].dtype !== 'f32') continue;
    const r = A.inputs[0] === dx ? A.inputs[1] : A.inputs[0];
    if (r === dx || !A.inputs.includes(dx) || g.values[r].shape.join(',') !== dv.shape.join(',')) continue;
    // L reads r: it must be written before L (or be an input / persistent value, written by no node)
    if ((writer.get(r) ?? -1) >= L.id) continue;
    const ins = [L.inputs[0], L.inputs[1], L.inputs[2] ?? -1, L.inputs[3], L.inputs[4], r];
    w.nodes[L.id] = { ...L, inputs: ins, outputs: [A.outputs[0], ...L.outputs.slice(1)], attrs: { ...L.attrs, add_out: true } };
    writer.set(A.outputs[0], L.id);
    w.nodes[A.id] = null;
    w.dropValues.add(dx);
    w.readers = readersOf(w.nodes);
  }
}

/** the `sum_to` reading value `out` ([..., D]) over every leading dim into an f32 [D] (a bias gradient), or undefined */
function rowSumOf(g: Graph, w: Work, out: number): Node | undefined {
  const shape = g.values[out].shape, D = shape[shape.length - 1];
  const leading = JSON.stringify(shape.slice(0, -1).map((_, i) => i));
  return (w.readers.get(out) ?? []).map((id) => w.nodes[id]!).find((S) => {
    if (S.op !== 'sum_to' || S.inputs[0] !== out) return false;
    const sv = g.values[S.outputs[0]], axes = S.attrs.axes;
    return sv.dtype === 'f32' && sv.shape.length === 1 && sv.shape[0] === D && JSON.stringify(S.attrs.shape) === JSON.stringify([D]) &&
      (axes === undefined || JSON.stringify(axes) === leading);
  });
}

/** node F (in w) takes S's output as its last output with attr `sum_out: true`; S goes */
function takeRowSum(w: Work, F: Node, S: Node): void {
  w.nodes[F.id] = { ...F, outputs: [...F.outputs, S.outputs[0]], attrs: { ...F.attrs, sum_out: true } };
  w.nodes[S.id] = null;
  w.changed = true;
  w.readers = readersOf(w.nodes);
}

/** rule 7 */
function fuseLayernormGradBiasSum(g: Graph, w: Work): void {
  for (const L of w.nodes) {
    if (!L || L.op !== 'layernorm_grad' || L.attrs.add_out !== true || L.attrs.sum_out !== undefined) continue;
    const S = rowSumOf(g, w, L.outputs[0]);
    if (S) takeRowSum(w, L, S);
  }
}

/** rule 14 */
function fuseUnaryGradBiasSum(g: Graph, w: Work, caps: NonNullable<FusionCaps['unaryGradBiasSum']>): void {
  for (const U of w.nodes) {
    if (!U || U.op !== 'unary_grad' || U.outputs.length !== 1 || Object.keys(U.attrs).some((k) => FUSION_FLAGS.has(k))) continue;
    const dx = U.outputs[0], shape = g.values[dx].shape, D = shape[shape.length - 1];
    if (shape.length < 2 || g.values[dx].dtype === 'i32' || D % caps.multipleOf !== 0 || D > caps.maxD || numel(shape) < caps.minElements) continue;
    const S = rowSumOf(g, w, dx);
    if (S) takeRowSum(w, U, S);
  }
}

/** rule 15 */
function fuseAttnGradBiasSum(g: Graph, w: Work, caps: NonNullable<FusionCaps['attnGradBiasSum']>): void {
  for (const A of w.nodes) {
    if (!A || A.op !== 'attention_qkv_grad' || A.outputs.length !== 1 || Object.keys(A.attrs).some((k) => FUSION_FLAGS.has(k))) continue;
    if (!caps.dtypes.includes(g.values[A.outputs[0]].dtype)) continue;
    const S = rowSumOf(g, w, A.outputs[0]);
    if (S) takeRowSum(w, A, S);
  }
}

/** rule 11 */
function fuseLayernormGradHalfOut(g: Graph, w: Work): void {
  for (const L of w.nodes) {
    if (!L || L.op !== 'layernorm_grad' || L.attrs.add_out !== true || L.attrs.half_out !== undefined) continue;
    const out = L.outputs[0];
    const C = (w.readers.get(out) ?? []).map((id) => w.nodes[id]!).find((n) => n.op === 'cast' && n.inputs[0] === out && isHalf(g.values[n.outputs[0]].dtype));
    if (!C || w.outputs.has(C.outputs[0]) || g.values[out].dtype !== 'f32') continue;
    w.nodes[L.id] = { ...L, outputs: [...L.outputs, C.outputs[0]], attrs: { ...L.attrs, half_out: g.values[C.outputs[0]].dtype } };
    w.nodes[C.id] = null;
    w.changed = true;
    w.readers = readersOf(w.nodes);
  }
}

/** rule 9 */
function fuseGradBiasSum(g: Graph, w: Work, ops: readonly string[]): void {
  for (const G of w.nodes) {
    if (!G || !ops.includes(G.op) || G.attrs.c_sums !== undefined || G.attrs[EPILOGUE_ATTR] !== undefined || G.outputs.length !== 1) continue;
    const dx = G.outputs[0], xs = g.values[dx].shape;
    if (g.values[dx].dtype !== 'f32' || xs.length !== 4) continue;
    const S = (w.readers.get(dx) ?? []).map((id) => w.nodes[id]!).find((n) => n.op === 'sum_to' && n.inputs[0] === dx);
    if (!S) continue;
    const sv = g.values[S.outputs[0]];
    if (sv.dtype !== 'f32' || sv.shape.length !== 1 || sv.shape[0] !== xs[1] || JSON.stringify(S.attrs.shape) !== JSON.stringify([xs[1]]) ||
      JSON.stringify(S.attrs.axes) !== JSON.stringify([0, 2, 3])) continue;
    w.nodes[G.id] = { ...G, outputs: [...G.outputs, S.outputs[0]], attrs: { ...G.attrs, c_sums: true } };
    w.nodes[S.id] = null;
    w.changed = true;
    w.readers = readersOf(w.nodes);
  }
}

/** rule 10 */
function fuseConvPool(g: Graph, w: Work): void {
  const writer = new Map<number, Node>();
  for (const n of w.nodes) if (n) for (const o of n.outputs) writer.set(o, n);
  for (const G of w.nodes) {
    if (!G || G.op !== 'global_avgpool' || G.attrs.relu_in !== undefined) continue;
    const y = G.inputs[0], P = writer.get(y);
    if (!P || w.nodes[P.id] !== P || P.op !== 'conv2d' || P.outputs.length !== 1 || P.attrs.pool_out !== undefined) continue;
    if (g.values[y].dtype !== 'f32' || g.values[G.outputs[0]].dtype !== 'f32') continue;
    const F: Node = { ...P, outputs: [...P.outputs, G.outputs[0]], attrs: { ...P.attrs, pool_out: true } };
    w.nodes[P.id] = F;
    writer.set(G.outputs[0], F);
    w.nodes[G.id] = null;
    w.changed = true;
    w.readers = readersOf(w.nodes);
  }
}

/** rule 8 */
function fuseMatmulBiasGrad(g: Graph, w: Work): void {
  const writer = new Map<number, Node>();
  for (const n of w.nodes) if (n) for (const o of n.outputs) writer.set(o, n);
  for (const S of w.nodes) {
    if (!S || S.op !== 'sum_to') continue;
    const dy = S.inputs[0], ys = g.values[dy].shape, M = ys[ys.length - 1], K = ys.slice(0, -1).reduce((a, b) => a * b, 1);
    const sv = g.values[S.outputs[0]], axes = S.attrs.axes;
    if (ys.length < 2 || sv.dtype !== 'f32' || sv.shape.length !== 1 || sv.shape[0] !== M || g.values[dy].dtype === 'i32') continue;
    if (axes !== undefined && JSON.stringify(axes) !== JSON.stringify(ys.slice(0, -1).map((_, i) => i))) continue;
    // dy's rows as a 2-D [K, M]: dy itself or a reshape of it
    const rows = [dy, ...(w.readers.get(dy) ?? []).map((id) => w.nodes[id]!).filter((r) => r.op === 'reshape' && r.inputs[0] === dy).map((r) => r.outputs[0])]
      .filter((id) => g.values[id].shape.length === 2 && g.values[id].shape[0] === K && g.values[id].shape[1] === M);
    const P = rows.flatMap((a) => (w.readers.get(a) ?? []).map((id) => w.nodes[id]!)).find((n) =>
      n.op === 'matmul' && n.inputs[0] !== n.inputs[1] && rows.includes(n.inputs[0]) && n.outputs.length === 1 && n.attrs.transA === true && n.attrs.transB !== true &&
      Object.keys(n.attrs).every((k) => k === 'transA' || k === 'transB') && g.values[n.inputs[1]].shape.length === 2);
    if (!P) continue;
    // P writes S's output: no node before P may read it (writer of dy before P holds: P reads a view of it)
    if ((w.readers.get(S.outputs[0]) ?? []).some((r) => r <= P.id) || (writer.get(dy)?.id ?? -1) >= P.id) continue;
    w.nodes[P.id] = { ...P, outputs: [...P.outputs, S.outputs[0]], attrs: { ...P.attrs, a_sums: true } };
    w.nodes[S.id] = null;
    w.changed = true;
    w.readers = readersOf(w.nodes);
  }
}

/** multiply-adds of a linear / matmul node (for rules 12, 13's size bound) */
function productMacs(g: Graph, n: Node): number {
  const as = g.values[n.inputs[0]].shape, bs = g.values[n.inputs[1]].shape;
  if (n.op === 'linear') return numel(as) * bs[0];
  const { batch, M, N, K } = matmulNodeDims(n.id, n.attrs, as, bs);
  return numel(batch) * M * N * K;
}

/** rule 12 */
function fuseGradEpilogues(g: Graph, w: Work, caps: NonNullable<FusionCaps['smallEpilogues']>): void {
  for (const U of w.nodes) {
    if (!U || U.op !== 'unary_grad' || U.attrs.fwd_out !== undefined || U.attrs.sum_out !== undefined) continue;
    const fn = String(U.attrs.fn);
    const [gv, x] = U.inputs;
    if (!isUnaryFn(fn) || !caps.fns.includes(fn) || gv === x || g.values[gv].dtype !== 'f32' || w.outputs.has(gv)) continue;
    if (g.values[x].dtype !== 'f32' || g.values[U.outputs[0]].dtype !== 'f32' || g.values[x].shape.join(',') !== g.values[gv].shape.join(',')) continue;
    if ((w.readers.get(gv) ?? []).length !== 1) continue;
    const P = w.nodes.find((n) => n !== null && n.outputs.includes(gv));
    if (!P || !(GRAD_FN_OPS as readonly string[]).includes(P.op) || P.outputs.length !== 1 || fusedParts(P) !== null || productMacs(g, P) > caps.maxMacs) continue;
    w.nodes[P.id] = { ...P, inputs: [...P.inputs, x], outputs: [...U.outputs], attrs: withFnAttrs(P, GRAD_FN_ATTR, GRAD_PREFIX, fn, U) };
    w.nodes[U.id] = null;
    w.dropValues.add(gv);
    w.readers = readersOf(w.nodes);
  }
}

/** rule 13 */
function fusePreOutEpilogues(g: Graph, w: Work, caps: NonNullable<FusionCaps['smallEpilogues']>): void {
  for (const P of w.nodes) {
    if (!P || !(PRE_OUT_OPS as readonly string[]).includes(P.op) || P.outputs.length !== 1 || fusedParts(P) !== null) continue;
    const y = P.outputs[0];
    if (g.values[y].dtype !== 'f32' || w.outputs.has(y)) continue;
    const rs = (w.readers.get(y) ?? []).map((id) => w.nodes[id]!);
    const unaries = rs.filter((r) => r.op === 'unary' && r.inputs[0] === y);
    if (unaries.length !== 1 || rs.length < 2) continue;
    const R = unaries[0];
    const fn = String(R.attrs.fn);
    if (!isUnaryFn(fn) || !caps.fns.includes(fn) || productMacs(g, P) > caps.maxMacs) continue;
    w.nodes[P.id] = { ...P, attrs: withFnAttrs(P, EPILOGUE_ATTR, PREFIX, fn, R, { pre_out: true }), outputs: [R.outputs[0], y] };
    w.nodes[R.id] = null;
    w.changed = true;
    w.readers = readersOf(w.nodes);
  }
}

/**
 * rule 16: every 16-bit `cast` of a persistent value not mutated by a node before it, in order, before every other node
 * (w.nodes reordered; the readers map is not used after it)
 */
function hoistParamCasts(g: Graph, w: Work): void {
  const mutated = new Set<number>();
  const casts: Node[] = [];
  const rest: Node[] = [];
  let moved = false;
  for (const n of w.nodes) {
    if (!n) continue;
    const x = n.inputs[0];
    if (n.op === 'cast' && isHalf(g.values[n.outputs[0]].dtype) && x >= 0 && isPersistent(g.values[x]) && !mutated.has(x)) {
      moved ||= rest.length > 0;
      casts.push(n);
      continue;
    }
    for (const k of opDef(n.op).mutates ?? []) if (n.inputs[k] >= 0) mutated.add(n.inputs[k]);
    rest.push(n);
  }
  if (!moved) return;
  w.nodes = [...casts, ...rest];
  w.changed = true;
}

/** The fused Program for a backend with these capabilities (see the header). */
export function fuseProgram(p: Program, caps: FusionCaps): Program {
  const g = p.graph;
  const w: Work = { nodes: [...g.nodes], readers: readersOf(g.nodes), dropValues: new Set(), outputs: new Set(p.outputs.map((o) => o.value)), changed: false };
  if (caps.epilogue) fuseEpilogues(g, w, caps.epilogue);
  if (caps.poolGradRelu) fusePoolGradRelu(g, w, caps.poolGradRelu);
  if (caps.reluIntoGlobalAvgpool) fuseReluIntoPool(g, w);
  if (caps.casts) foldCasts(g, w, caps.casts);
  if (caps.addLayernorm) {
    // each rule on unless the caps say false (rule 7 needs rule 6's nodes)
    const al = caps.addLayernorm;
    if (al.add !== false) fuseAddLayernorm(g, w, al);
    if (al.grad !== false) fuseLayernormGradAdd(g, w, al);
    if (al.biasSum !== false) fuseLayernormGradBiasSum(g, w);
  }
  // rules 14, 15 before rule 8: a unary / attention gradient's bias sum in its own kernels rather than in the GEMM reading it
  if (caps.unaryGradBiasSum) fuseUnaryGradBiasSum(g, w, caps.unaryGradBiasSum);
  if (caps.attnGradBiasSum) fuseAttnGradBiasSum(g, w, caps.attnGradBiasSum);
  if (caps.matmulBiasGrad) fuseMatmulBiasGrad(g, w);
  const sumOps = [...(caps.poolGradBiasSum ? ['global_avgpool_grad'] : []), ...(caps.convGradBiasSum ? ['conv2d_grad_input'] : [])];
  if (sumOps.length > 0) fuseGradBiasSum(g, w, sumOps);
  if (caps.convPool) fuseConvPool(g, w);
  if (caps.smallEpilogues) {
    fuseGradEpilogues(g, w, caps.smallEpilogues);
    if (caps.smallEpilogues.preOut !== false) fusePreOutEpilogues(g, w, caps.smallEpilogues);
  }
  // rule 11 last: the casts rule 4 left, of rule 6's outputs
  if (caps.addLayernorm?.halfOut === true) fuseLayernormGradHalfOut(g, w);
  // rule 16 after every rule (a reorder only: the rules before it see the nodes in their original places)
  if (caps.hoistParamCasts) hoistParamCasts(g, w);
  if (w.dropValues.size === 0 && !w.changed) return { name: p.name, batch: p.batch, graph: g, inputs: p.inputs, outputs: p.outputs };
  // renumber: kept values in their old order, nodes in w.nodes' (their old one but for rule 16's hoist)
  const vmap = new Map<number, number>();
  const values = g.values.filter((v) => !w.dropValues.has(v.id)).map((v, i) => {
    vmap.set(v.id, i);
    return { ...v, id: i };
  });
  const mapId = (id: number) => {
    if (id < 0) return id;
    const m = vmap.get(id);
    if (m === undefined) throw new Error(`internal: fuse: program ${p.name} still references removed value %${id} (${g.values[id].name})`);
    return m;
  };
  const nodes = w.nodes.filter((n): n is Node => n !== null).map((n, i) => ({ ...n, id: i, inputs: n.inputs.map(mapId), outputs: n.outputs.map(mapId) }));
  return {
    name: p.name,
    batch: p.batch,
    graph: { values, nodes },
    inputs: p.inputs.map(mapId),
    outputs: p.outputs.map((o) => ({ name: o.name, value: mapId(o.value) })),
  };
}
