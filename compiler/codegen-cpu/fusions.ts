/**
 * fusions: what the CPU backend's kernels execute fused (the capability set it hands to
 * compiler/ir/fuse.ts; emit_program.ts fuses every program with it before planning memory).
 *  - GEMM epilogue: relu in the epilogue of linear (sgemm) and conv2d (conv.h), with the
 *    relu-grads of the pre-activation reading the relu output instead; any other unary fn
 *    (gelu, tanh, ...) in linear's epilogue (sgemm's Epilogue::post: the unary kernel's own
 *    formula on each finished tile row, so the same bits as the separate pass); that applies
 *    where nothing else reads the pre-activation (the eval program: the train step's
 *    unary_grad reads it);
 *  - relu-grad folded into global_avgpool_grad, into the 2x2 / stride-2 maxpool2d_grad
 *    (mk::maxpool2x2_grad_row<..., true>, which may run in place over the pool input), and into
 *    conv2d_grad_input's store (conv.h mask_store: the select of the separate pass);
 *  - relu folded into the global_avgpool that reads it;
 *  - a residual `binary add` into the layernorm that reads its sum (`add_in`), and the residual-gradient
 *    add after a layernorm_grad into it (`add_out`): norm.ts, the same f32 additions;
 *  - relu's gradient into the matmul writing the g it masks (rule 12, `grad_fn: relu`; sgemm.h Epilogue::mask).
 * The kernels read the fusion attrs from the node (kernels/gemm.ts, conv.ts, pool.ts).
 */
import type { FusionCaps } from '../ir/fuse.js';
import { UNARY_FNS_TABLE, type UnaryFn } from '../ir/scalar_fns.js';

export const CPU_FUSIONS: FusionCaps = {
  epilogue: {
    ops: ['linear', 'conv2d'], fns: ['relu'], gradReaders: true,
    opFns: { linear: (Object.keys(UNARY_FNS_TABLE) as UnaryFn[]).filter((f) => f !== 'relu') },
  },
  poolGradRelu: { globalAvgpool: true, maxpool2x2: true, convGradInput: true },
  reluIntoGlobalAvgpool: true,
  // rules 5 and 6 (any row length: the kernels loop over the row); the bias sum of rule 7 stays in the
  // grad-weight GEMM (gemm.ts matmulWithColumnSum), which reads the same rows while packing them
  addLayernorm: { maxD: 1 << 30, add: true, grad: true, biasSum: false },
  // rule 12 only, relu only, any size: a matmul writing the g that only a relu gradient reads masks its own store
  // (sgemm.h Epilogue::mask: the select of the separate pass), e.g. the MLP's grad-input through its relu
  smallEpilogues: { fns: ['relu'], maxMacs: Number.MAX_SAFE_INTEGER, preOut: false },
};
