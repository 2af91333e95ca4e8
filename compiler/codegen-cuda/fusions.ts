/**
 * fusions: what the CUDA backend's kernels execute fused (the capability set it hands to
 * compiler/ir/fuse.ts; index.ts buildCuda fuses every program with it before lowering): any
 * unary fn in the store of the GEMM-family kernels (gemm_cuda.ts, conv_cuda.ts, or the shared
 * compiler/kernels/gemm.ts with `gemm: 'shared'`), when that unary is the only reader of the
 * GEMM's output or, for relu, its other readers are relu-grads (they read the fused output:
 * relu'(y) = [relu(y) > 0]); a relu-grad folded into the pool gradient before it (global
 * average pool; the 2x2 max-pool over the relu's output, compiler/kernels/pool.ts's window kernel)
 * or into a conv2d_grad_input's store (the mask read at the output element, compiler/kernels/gemm.ts
 * gemmParts). Metal's set plus these, minus its CPU-fallback exceptions: CUDA has a kernel for every op.
 * Mixed precision: the 16-bit casts fold into the loads and stores of the kernels that widen /
 * round (compiler/kernels/registry.ts HALF_IO_OPS; cuBLASLt writes a 16-bit D: cublaslt.ts), except
 * the convolutions (their CUDA kernels are not declared for it). And remat (compiler/ir/remat.ts):
 * gelu outputs the backward reads are recomputed there instead of kept, for a program whose planned
 * peak without the copies is at least REMAT_FROM_PEAK_BYTES (4 GiB): the GPU's memory is what limits
 * GPT-2's batch (8.83 -> 7.70 GiB planned with the gelu copies, each one more store in its gradient's
 * kernel), while below that a step fits any GPU this backend targets (sm_80 and later, 16 GB and up)
 * with room to spare (gpt_tiny and gpt_char keep theirs). Layernorm outputs only when the step with the
 * gelu copies still plans REMAT_LN_FROM_PEAK_BYTES (12 GiB) or more: each such copy is a row kernel of its
 * own (GPT-2 with them: 7.14 GiB, and 0.7 ms slower on the H200, 5 Dec).
 * And a residual add folded into the layernorm reading its sum (fuse.ts rule 5) for rows of at most
 * layernorm_cuda.ts's WARP_D (its warp-per-row kernel stores the sum after loading the row), and the
 * residual-gradient add (with the bias gradient summed from it) into the layernorm_grad before it (rules 6, 7).
 * And a linear's bias gradient (sum_to of dy over its rows) into the weight-gradient matmul reading the same
 * rows (fuse.ts rule 8: `a_sums`), which cublaslt.ts runs as one cuBLASLt call with the BGRADB epilogue.
 * And a linear's bias gradient into the unary gradient writing the dy it sums (fuse.ts rule 14: `sum_out`, before rule 8 takes
 * it; wide_ew_cuda.ts gradWithSums: dy's column sums kept while the kernel has the values, then its row blocks' partials
 * added), for rows of a multiple of 256 and at least MIN_WIDE elements: GPT-2's fc bias, whose BGRADB epilogue cost the fc
 * weight-gradient GEMM ~47 us per call on an H100 (bench/NOTES.md v39).
 * And the in_proj bias gradient (sum_to of the 16-bit dqkv over its rows) into the attention gradient writing dqkv (fuse.ts
 * rule 15: `sum_out`, before rule 8; attention_cuda.ts: each flash backward block's column sums over its 64 rows as it
 * stores them, then the blocks' partials added in order; a path without them sums dqkv after its kernels): GPT-2's qkv
 * bias, whose BGRADB epilogue cost the qkv weight-gradient GEMM ~43 us per call on an H100 (bench/NOTES.md v41).
 * And each recomputed unary paired with its gradient over the same x (compiler/ir/grad_fwd.ts, `fwd_out`: one
 * wide_ew_cuda.ts kernel reads x once and writes both; GPT-2's gelu copy and gelu's gradient).
 * And a convolution's bias gradient (sum_to over N, H, W) into the global_avgpool_grad writing what it sums (fuse.ts rule 9:
 * `c_sums`; avgpool_cuda.ts: per plane the unmasked count times the plane's value, no second read of the gradient), and
 * into the conv2d_grad_input writing the gradient it sums (rule 9 too; conv_cuda.ts: each row tile's column sums in the store).
 * And a global_avgpool into the conv2d whose output it reads (fuse.ts rule 10: `pool_out`; conv_cuda.ts: per-tile column
 * sums in the conv's store, then a fixed-order sum of the tiles; no second read of the conv output).
 * And on small products (gemm_cuda.ts SMALL_MAX_MACS; fuse.ts rules 12, 13; not relu): a unary gradient into the product writing
 * its g (gpt_tiny's gelu gradient into the fc2 input gradient) and a unary into the product before it with the product kept
 * (its gelu into the fc linear, whose pre-activation the gradient reads): those products run gemm_cuda.ts's small-tile FFMA
 * kernel, which applies them in its store, instead of a cuBLASLt call and the unfused kernel (cublaslt.ts); on by
 * default (MPSC_CUDA_SMALL_EPI=0 at build time keeps the unfused nodes).
 * And the 16-bit copies of the parameters (precision.ts's casts, each before its first reader, layer by layer) moved to the start of
 * each program (fuse.ts rule 16: `hoistParamCasts`), where merge.ts launches them as one kernel: GPT-2 small's train step had 38
 * cast launches of 5-11 us each (82 us the head weight's) on an H100, ~0.42 ms, for 0.74 GB moved (~0.25 ms at 3 TB/s);
 * planned peak unchanged (7.70 GiB: the later layers' copies are live at the forward's end, the peak, anyway).
 * $MPSC_CUDA_FUSE_OFF=remat,remat_unary,remat_ln,grad_fwd,add_ln,grad_add,bias_sum,ln_half,bias_grad,grad_sum,attn_sum,pool_bias,conv_bias,conv_pool,small_epi,cast_hoist switches any
 * of these off (A/B runs; remat_unary: no gelu copies, so only the layernorms' from 12 GiB; remat_ln: never layernorm copies).
 */
import { UserError } from '../errors.js';
import { envFlag } from '../env_switch.js';
import { EPILOGUE_OPS, GRAD_FROM_OUTPUT, type FusionCaps } from '../ir/fuse.js';
import { SMALL_MAX_MACS } from './gemm_cuda.js';
import { UNARY_FNS } from '../ir/scalar_fns.js';
import { REMAT_OPS } from '../ir/remat.js';
import { HALF_IO_OPS } from '../kernels/registry.js';
import { WARP_D } from './layernorm_cuda.js';
import { MIN_WIDE } from './wide_ew_cuda.js';

/**
 * fuse.ts rules 12, 13 on small products (at most gemm_cuda.ts's SMALL_MAX_MACS multiply-adds, where its small-tile kernel
 * runs them): every unary fn but relu, whose gradient rule 1 already reads from the fused output
 */
const SMALL_EPILOGUE_FNS = UNARY_FNS.filter((f) => !GRAD_FROM_OUTPUT.includes(f));

/**
 * MPSC_CUDA_SMALL_EPI (build time): whether rules 12, 13 run at all (MPSC_CUDA_FUSE_OFF=small_epi also switches them off).
 * On by default: exact in the reference (test/ir_fuse.test.ts), within 1e-5 on the thread emulator (test/cuda_gemm_emu.test.ts)
 * and on the GPU (bench/cuda_check.sh kernels, parity and compute-sanitizer), and faster (gpt_tiny 0.678 -> 0.668 ms on the
 * H200): bench/NOTES.md v31b
 */
export const smallEpiOn = () => envFlag('MPSC_CUDA_SMALL_EPI', true);

/** remat only for a program planned at this peak (bytes) or more without it */
export const REMAT_FROM_PEAK_BYTES = 4 * 2 ** 30;

/** the ops index.ts's registry lowers with kernels of its own that read / write only f32 besides their 16-bit GEMM operands */
const F32_ONLY = ['conv2d', 'conv2d_grad_input', 'conv2d_grad_weight'];

/** the fusions $MPSC_CUDA_FUSE_OFF may switch off (a comma-separated list, for A/B runs; runtime/cuda/session.ts keys builds on it) */
export const CUDA_FUSE_SWITCHES = ['remat', 'remat_unary', 'remat_ln', 'grad_fwd', 'add_ln', 'grad_add', 'bias_sum', 'ln_half', 'bias_grad', 'grad_sum', 'attn_sum', 'pool_bias', 'conv_bias', 'conv_pool', 'small_epi', 'cast_hoist'] as const;
export type CudaFuseSwitch = (typeof CUDA_FUSE_SWITCHES)[number];

/** $MPSC_CUDA_FUSE_OFF parsed: remat (remat.ts), remat_unary (remat.ts's unary copies only: GPT-2's gelu), remat_ln (its layernorm copies), grad_fwd (grad_fwd.ts), add_ln (fuse.ts rule 5), grad_add (rule 6, and so 7 and 11), bias_sum (rule 7), ln_half (rule 11), bias_grad (rule 8), grad_sum (rule 14), attn_sum (rule 15), pool_bias (rule 9 into the avgpool gradient), conv_bias (rule 9 into conv2d_grad_input), conv_pool (rule 10), small_epi (rules 12, 13), cast_hoist (rule 16) */
export function cudaFuseOff(env: string | undefined = process.env.MPSC_CUDA_FUSE_OFF): CudaFuseSwitch[] {
  const names = (env ?? '').split(',').map((x) => x.trim()).filter(Boolean);
  for (const x of names) {
    if (!(CUDA_FUSE_SWITCHES as readonly string[]).includes(x)) throw new UserError(`error: MPSC_CUDA_FUSE_OFF: unknown fusion '${x}' (known: ${CUDA_FUSE_SWITCHES.join(', ')})`);
  }
  return names as CudaFuseSwitch[];
}

/**
 * layernorm copies (remat.ts) only for a step still planned at this peak (bytes) or more with the gelu copies: each
 * is a row kernel of its own (GPT-2 small bf16: 25 x 33 us, 0.7 ms of its 36 ms step measured on the H200, for 0.56
 * GiB), while a gelu copy is one more store in its gradient's kernel (grad_fwd.ts). As torch.compile's partitioner,
 * which recomputes no reductions by default, a step of a usual size keeps its layernorm outputs.
 */
export const REMAT_LN_FROM_PEAK_BYTES = 12 * 2 ** 30;

/** remat.ts's caps after $MPSC_CUDA_FUSE_OFF's remat_unary / remat_ln (both: no copies at all) */
function rematCaps(off: readonly CudaFuseSwitch[]): NonNullable<FusionCaps['remat']> | undefined {
  const ops = REMAT_OPS.filter((op) => !(op === 'unary' && off.includes('remat_unary')) && !(op === 'layernorm' && off.includes('remat_ln')));
  if (off.includes('remat') || ops.length === 0) return undefined;
  return { fromPeakBytes: REMAT_FROM_PEAK_BYTES, ops, ...(ops.includes('layernorm') ? { later: { ops: ['layernorm'], fromPeakBytes: REMAT_LN_FROM_PEAK_BYTES } } : {}) };
}

export function cudaFusions(off: readonly CudaFuseSwitch[] = cudaFuseOff()): FusionCaps {
  const half = HALF_IO_OPS.filter((op) => !F32_ONLY.includes(op));
  const remat = rematCaps(off);
  return {
    epilogue: { ops: EPILOGUE_OPS, fns: UNARY_FNS, gradReaders: true },
    poolGradRelu: { globalAvgpool: true, maxpool2x2: true, convGradInput: true },
    casts: { reads: half, stores: half },
    ...(remat ? { remat } : {}),
    addLayernorm: { maxD: WARP_D, add: !off.includes('add_ln'), grad: !off.includes('grad_add'), biasSum: !off.includes('bias_sum'), halfOut: !off.includes('ln_half') },
    ...(off.includes('grad_sum') ? {} : { unaryGradBiasSum: { multipleOf: 256, maxD: 65536, minElements: MIN_WIDE } }),
    ...(off.includes('attn_sum') ? {} : { attnGradBiasSum: { dtypes: ['bf16', 'f16'] } }),
    ...(off.includes('bias_grad') ? {} : { matmulBiasGrad: true }),
    ...(off.includes('grad_fwd') ? {} : { gradWithForward: true }),
    ...(off.includes('pool_bias') ? {} : { poolGradBiasSum: true }),
    ...(off.includes('conv_bias') ? {} : { convGradBiasSum: true }),
    ...(off.includes('conv_pool') ? {} : { convPool: true }),
    ...(off.includes('small_epi') || !smallEpiOn() ? {} : { smallEpilogues: { fns: SMALL_EPILOGUE_FNS, maxMacs: SMALL_MAX_MACS } }),
    ...(off.includes('cast_hoist') ? {} : { hoistParamCasts: true }),
  };
}
