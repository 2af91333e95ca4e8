/**
 * registry: the GPU kernel lowering of every IR op, keyed by the catalogue's op-name union
 * (`OpName`, compiler/ir/ops.ts), so an op added to the catalogue without a GPU entry fails
 * `tsc`. An op deliberately left to the CPU fallback is the explicit entry 'cpu' (none today).
 * Consumes an IR node and a lowering context (its dialect); produces the node's kernels.
 * Used by the backends' program lowering (codegen-metal/lower_program.ts).
 */
import type { Graph, Node } from '../ir/graph.js';
import { isOpName, type OpName } from '../ir/ops.js';
import type { KernelSpec, LowerCtx } from './kernel_types.js';
import { lowerElementwise } from './elementwise.js';
import { lowerGemm } from './gemm.js';
import { lowerOptim } from './optim.js';
import { lowerPool } from './pool.js';
import { lowerReduce } from './reduce.js';
import { lowerTensor } from './tensor.js';
import { lowerAttention } from './attention.js';
import { lowerCast } from './precision.js';

export type GpuLowering = (ctx: LowerCtx, g: Graph, n: Node) => KernelSpec[];

/** a family lowering (which switches on the op itself) as the entry of one op */
const family = (f: (ctx: LowerCtx, g: Graph, n: Node) => KernelSpec[] | null): GpuLowering => (ctx, g, n) => {
  const ks = f(ctx, g, n);
  if (!ks) throw new Error(`internal: the GPU registry routes op '${n.op}' to a lowering that does not handle it`);
  return ks;
};
const ew = family(lowerElementwise), gemm = family((ctx, g, n) => lowerGemm(ctx, g, n));
const red = family(lowerReduce), pool = family(lowerPool), optim = family(lowerOptim);
const tensor = family(lowerTensor), attn = family(lowerAttention), cast = family(lowerCast);

export const GPU_KERNELS: Record<OpName, GpuLowering | 'cpu'> = {
  // GEMM family (tiled + 8x8 matrix-unit variants)
  linear: gemm, matmul: gemm, conv2d: gemm, conv2d_grad_input: gemm, conv2d_grad_weight: gemm,
  // one thread per element
  reshape: ew, unary: ew, unary_grad: ew, binary: ew, sum_to: ew, dropout: ew, dropout_grad: ew,
  embedding: ew, embedding_grad: ew, concat: ew, slice: ew, batchnorm_eval: ew,
  mse_grad: ew, bce_with_logits_grad: ew, global_avgpool_grad: ew,
  // block reductions (rows, channels, whole tensors)
  cross_entropy: red, nll: red, mse: red, bce_with_logits: red, accuracy: red, top_k: red, cross_entropy_grad: red, nll_grad: red,
  softmax: red, log_softmax: red, softmax_grad: red, log_softmax_grad: red,
  batchnorm_train: red, batchnorm_grad: red, layernorm: red, layernorm_grad: red, grad_norm: red,
  // pooling
  maxpool2d: pool, avgpool2d: pool, global_avgpool: pool, maxpool2d_grad: pool, avgpool2d_grad: pool,
  // gradient plumbing and optimizers
  grad_accumulate: optim, zero: optim, clip_coef: optim, sgd_update: optim, adam_update: optim,
  // tensor algebra: one thread per output element or reduction group
  permute: tensor, pad: tensor, broadcast_to: tensor, reduce: tensor, reduce_max_grad: tensor, masked_fill: tensor, positions: tensor,
  // fused attention (query tiles x streamed key tiles, online softmax; backward in two kernels)
  attention: attn, attention_grad: attn, attention_qkv: attn, attention_qkv_grad: attn,
  // mixed precision: f32 <-> f16 / bf16, the one kernel that rounds to 16 bits (precision.ts)
  cast,
};

/**
 * The ops whose kernels above read 16-bit values at any float input and store any float output in
 * its buffer's type (common.ts readF / writeF, attention.ts, gemm.ts's store): what a GPU backend
 * may list in its FusionCaps `casts` (fuse.ts rule 4) for the nodes it lowers with these kernels.
 */
export const HALF_IO_OPS: readonly OpName[] = [
  'linear', 'matmul', 'conv2d', 'conv2d_grad_input', 'conv2d_grad_weight', 'attention', 'attention_grad', 'attention_qkv', 'attention_qkv_grad',
  'unary', 'unary_grad', 'binary', 'reshape', 'dropout', 'dropout_grad', 'slice', 'concat', 'permute',
  'layernorm', 'layernorm_grad', 'sum_to', 'cross_entropy', 'cross_entropy_grad',
];

/** A backend's registry: GPU_KERNELS, or a copy with some entries replaced (e.g. a library GEMM, or 'cpu'). */
export type GpuRegistry = Record<OpName, GpuLowering | 'cpu'>;

/** the node's kernels, or null when its op runs on the CPU fallback (registry entry 'cpu') */
export function lowerNode(ctx: LowerCtx, g: Graph, n: Node, registry: GpuRegistry = GPU_KERNELS): KernelSpec[] | null {
  if (!isOpName(n.op)) throw new Error(`internal: unknown IR op '${n.op}'`);
  const entry = registry[n.op];
  return entry === 'cpu' ? null : entry(ctx, g, n);
}
