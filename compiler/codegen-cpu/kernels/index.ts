/** The emitter for every op of compiler/ir/ops.ts: keyed by OpName, so a missing op fails tsc. */
import type { OpName } from '../../ir/ops.js';
import type { KernelEmitter } from '../kernel_ctx.js';
import { linear, matmul } from './gemm.js';
import { conv2d, conv2d_grad_input, conv2d_grad_weight } from './conv.js';
import { avgpool2d, avgpool2d_grad, global_avgpool, global_avgpool_grad, maxpool2d, maxpool2d_grad } from './pool.js';
import { binary, dropout, dropout_grad, reshape, sum_to, unary, unary_grad } from './elementwise.js';
import { log_softmax, log_softmax_grad, softmax, softmax_grad } from './softmax.js';
import { batchnorm_eval, batchnorm_grad, batchnorm_train, layernorm, layernorm_grad } from './norm.js';
import { concat, embedding, embedding_grad, slice } from './gather.js';
import { accuracy, bce_with_logits, bce_with_logits_grad, cross_entropy, cross_entropy_grad, mse, mse_grad, nll, nll_grad, top_k } from './losses.js';
import { broadcast_to, masked_fill, pad, permute, positions, reduce, reduce_max_grad } from './tensor.js';
import { attention, attention_grad, attention_qkv, attention_qkv_grad } from './attention.js';
import { adam_update, clip_coef, grad_accumulate, grad_norm, sgd_update, zero } from './optim.js';
import { cast } from './precision.js';

export const CPU_KERNELS: Record<OpName, KernelEmitter> = {
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
