/**
 * Generated CPU kernels vs the float64 reference interpreter: every op of ops.ts (forward,
 * backward, optimizer) at several shapes (odd sizes, non-multiples of the sgemm tiles,
 * stride 2, groups 2, padding, dilation), relative error < 1e-4.
 *
 * All cases go into ONE generated module (one cmake build for the file): each case is a
 * node whose f32 inputs and outputs are persistent tensors (written / read by name through
 * the session), whose i32 inputs are program inputs. Run with 2 threads so the parallel
 * paths are exercised.
 */
import { roundToHalf } from '../compiler/reference/half.js';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AttrValue, type DType, GraphBuilder, type Program, type ProgramSet, type StepScalars, numel } from '../compiler/ir/graph.js';
import { OPS, UNARY_FNS, opDef } from '../compiler/ir/ops.js';
import { makeRng, randomInts, randomTensor, relError, runOp } from '../compiler/reference/fixtures.js';
import { CPU_KERNELS } from '../compiler/codegen-cpu/kernels/index.js';
import { cpuPrograms, generateCpuModel } from '../compiler/codegen-cpu/emit_program.js';
import { planMemory } from '../compiler/ir/memory_plan.js';
import type { Session } from '../runtime/session.js';
import { createCpuSession } from '../runtime/native/native_session.js';
import { attrVariants, samplePoints } from './unary_cases.js';

interface In {
  shape: number[];
  dtype?: DType;
  lo?: number;
  hi?: number;
  /** i32: class count (values in [0, ints)) */
  ints?: number;
  /** fixed values (instead of random ones) */
  values?: number[];
  /** the same value as input k (a fused max-pool grad's mask is its input x) */
  same?: number;
  /** mixed precision: the op reads a 16-bit copy of the input, made by a `cast` node (rounded in the reference too) */
  cast?: 'f16' | 'bf16';
}
interface Case {
  label: string;
  op: string;
  inputs: (In | null)[];
  outShapes: number[][];
  attrs?: Record<string, AttrValue>;
  /** the (single) output is i32 */
  outI32?: boolean;
  /** a bound on each output element's absolute error, tol(x_i) for the case's input 0 value x_i (checked on top of the relative error) */
  absTol?: (x: number) => number;
}

const convOut = (H: number, K: number, s: number, p: number, d: number) => Math.floor((H + 2 * p - d * (K - 1) - 1) / s) + 1;

function convCases(): Case[] {
  const cases: Case[] = [];
  const geos = [
    { N: 2, C: 3, H: 7, W: 9, O: 5, KH: 3, KW: 3, s: [1, 1], p: [1, 1], d: [1, 1], g: 1, bias: true },
    { N: 2, C: 4, H: 11, W: 10, O: 6, KH: 3, KW: 2, s: [2, 2], p: [0, 1], d: [2, 1], g: 2, bias: true },
    { N: 3, C: 8, H: 15, W: 13, O: 17, KH: 5, KW: 5, s: [1, 2], p: [2, 2], d: [1, 1], g: 1, bias: false },
    { N: 2, C: 6, H: 5, W: 4, O: 9, KH: 1, KW: 1, s: [1, 1], p: [0, 0], d: [1, 1], g: 3, bias: true },
    // stride 1 with C/g*KH*KW > 32: the "wide" implicit-GEMM path (runtime/cpp/fast/conv.h), several
    // output-row bands per image (30 x 31 wide columns), dilation and unequal padding, groups
    { N: 1, C: 10, H: 30, W: 30, O: 7, KH: 3, KW: 3, s: [1, 1], p: [1, 1], d: [1, 1], g: 1, bias: true },
    { N: 2, C: 12, H: 8, W: 10, O: 8, KH: 3, KW: 3, s: [1, 1], p: [2, 1], d: [2, 1], g: 2, bias: false },
    { N: 3, C: 9, H: 6, W: 11, O: 13, KH: 3, KW: 5, s: [1, 1], p: [0, 2], d: [1, 1], g: 1, bias: true },
    // 3x3 stride 1 with C*O/(C+O) >= 32: Winograd F(2x2, 3x3) forward, grad-input and grad-weight
    // (runtime/cpp/fast/winograd.h; 35 tiles per image: the grad-weight needs 32 per batch chunk),
    // odd output size (cut last tile row and column)
    { N: 2, C: 64, H: 13, W: 9, O: 70, KH: 3, KW: 3, s: [1, 1], p: [1, 1], d: [1, 1], g: 1, bias: true },
    // padding larger than the window: grad-input cannot be a forward convolution (col2im path)
    { N: 2, C: 4, H: 5, W: 5, O: 3, KH: 2, KW: 2, s: [1, 1], p: [2, 2], d: [1, 1], g: 1, bias: true },
  ];
  geos.forEach((c, i) => {
    const OH = convOut(c.H, c.KH, c.s[0], c.p[0], c.d[0]), OW = convOut(c.W, c.KW, c.s[1], c.p[1], c.d[1]);
    const attrs = { stride: c.s, padding: c.p, dilation: c.d, groups: c.g };
    const xs = [c.N, c.C, c.H, c.W], ws = [c.O, c.C / c.g, c.KH, c.KW], ys = [c.N, c.O, OH, OW];
    cases.push({ label: `conv${i}`, op: 'conv2d', inputs: [{ shape: xs }, { shape: ws }, c.bias ? { shape: [c.O] } : null], outShapes: [ys], attrs });
    cases.push({ label: `conv${i}_gi`, op: 'conv2d_grad_input', inputs: [{ shape: ys }, { shape: ws }], outShapes: [xs], attrs: { ...attrs, x_shape: xs } });
    cases.push({ label: `conv${i}_gw`, op: 'conv2d_grad_weight', inputs: [{ shape: ys }, { shape: xs }], outShapes: [ws], attrs: { ...attrs, w_shape: ws } });
  });
  return cases;
}

function poolCases(): Case[] {
  const cases: Case[] = [];
  const geos = [
    { xs: [2, 3, 9, 8], k: [3, 3], s: [2, 2], p: [1, 1] },
    { xs: [3, 2, 8, 8], k: [2, 2], s: [2, 2], p: [0, 0] },
    { xs: [1, 4, 7, 5], k: [3, 2], s: [1, 2], p: [1, 0] },
    // 2x2 / stride 2 fast path (vectorised rows): odd H and W, a row wider than the vectors, 28x28
    { xs: [2, 3, 15, 11], k: [2, 2], s: [2, 2], p: [0, 0] },
    { xs: [1, 2, 3, 37], k: [2, 2], s: [2, 2], p: [0, 0] },
    { xs: [2, 5, 28, 28], k: [2, 2], s: [2, 2], p: [0, 0] },
  ];
  geos.forEach((g, i) => {
    const OH = Math.floor((g.xs[2] + 2 * g.p[0] - g.k[0]) / g.s[0]) + 1, OW = Math.floor((g.xs[3] + 2 * g.p[1] - g.k[1]) / g.s[1]) + 1;
    const ys = [g.xs[0], g.xs[1], OH, OW];
    const attrs = { kernel: g.k, stride: g.s, padding: g.p };
    cases.push({ label: `maxpool${i}`, op: 'maxpool2d', inputs: [{ shape: g.xs }], outShapes: [ys], attrs });
    cases.push({ label: `maxpool${i}_g`, op: 'maxpool2d_grad', inputs: [{ shape: ys }, { shape: g.xs }], outShapes: [g.xs], attrs });
    cases.push({ label: `avgpool${i}`, op: 'avgpool2d', inputs: [{ shape: g.xs }], outShapes: [ys], attrs });
    cases.push({ label: `avgpool${i}_g`, op: 'avgpool2d_grad', inputs: [{ shape: ys }], outShapes: [g.xs], attrs: { ...attrs, x_shape: g.xs } });
  });
  cases.push({ label: 'gap', op: 'global_avgpool', inputs: [{ shape: [2, 3, 5, 4] }], outShapes: [[2, 3, 1, 1]] });
  cases.push({ label: 'gap_g', op: 'global_avgpool_grad', inputs: [{ shape: [2, 3, 1, 1] }], outShapes: [[2, 3, 5, 4]], attrs: { x_shape: [2, 3, 5, 4] } });
  return cases;
}

function gemmCases(): Case[] {
  const cases: Case[] = [
    { label: 'linear_small', op: 'linear', inputs: [{ shape: [7, 13] }, { shape: [5, 13] }, { shape: [5] }], outShapes: [[7, 5]] },
    { label: 'linear_big', op: 'linear', inputs: [{ shape: [70, 300] }, { shape: [100, 300] }, null], outShapes: [[70, 100]] },
    { label: 'linear_3d', op: 'linear', inputs: [{ shape: [2, 3, 9] }, { shape: [4, 9] }, { shape: [4] }], outShapes: [[2, 3, 4]] },
  ];
  // narrow outputs (N below one register panel) take the transposed-C path
  cases.push({ label: 'matmul_narrow_tA', op: 'matmul', inputs: [{ shape: [70, 200] }, { shape: [70, 5] }], outShapes: [[200, 5]], attrs: { transA: true, transB: false } });
  cases.push({ label: 'matmul_narrow_tB', op: 'matmul', inputs: [{ shape: [300, 270] }, { shape: [9, 270] }], outShapes: [[300, 9]], attrs: { transA: false, transB: true } });
  for (const tA of [false, true]) {
    for (const tB of [false, true]) {
      const [M, N, K] = tA && tB ? [97, 33, 260] : [13, 35, 9];
      cases.push({
        label: `matmul_${tA}_${tB}`, op: 'matmul',
        inputs: [{ shape: tA ? [K, M] : [M, K] }, { shape: tB ? [N, K] : [K, N] }], outShapes: [[M, N]], attrs: { transA: tA, transB: tB },
      });
    }
  }
  // batched matmul: broadcast batch dims (b shared by a's leading dim), transposes, the shared-2-D-b
  // fold into one GEMM, many small products (whole products per thread), a few large ones
  for (const [tA, tB] of [[false, false], [true, false], [false, true], [true, true]]) {
    const [M, K, N] = [5, 7, 4];
    cases.push({
      label: `bmm_bcast_${tA}_${tB}`, op: 'matmul', attrs: { transA: tA, transB: tB },
      inputs: [{ shape: [2, 3, ...(tA ? [K, M] : [M, K])] }, { shape: [3, ...(tB ? [N, K] : [K, N])] }], outShapes: [[2, 3, M, N]],
    });
  }
  cases.push({ label: 'bmm_fold', op: 'matmul', inputs: [{ shape: [2, 9, 33] }, { shape: [33, 17] }], outShapes: [[2, 9, 17]], attrs: { transA: false, transB: false } });
  cases.push({ label: 'bmm_many', op: 'matmul', inputs: [{ shape: [3, 4, 19, 8] }, { shape: [3, 4, 23, 8] }], outShapes: [[3, 4, 19, 23]], attrs: { transA: false, transB: true } });
  cases.push({ label: 'bmm_few', op: 'matmul', inputs: [{ shape: [2, 70, 150] }, { shape: [1, 150, 90] }], outShapes: [[2, 70, 90]], attrs: { transA: false, transB: false } });
  return cases;
}

/** issue 13 tensor algebra and attention at odd sizes: T not a tile multiple, heads 1 and 16, D 8 and 64 */
function tensorAttentionCases(): Case[] {
  const cases: Case[] = [
    { label: 'permute_inner', op: 'permute', inputs: [{ shape: [2, 3, 4, 5] }], outShapes: [[2, 4, 3, 5]], attrs: { perm: [0, 2, 1, 3] } },
    { label: 'permute_strided', op: 'permute', inputs: [{ shape: [2, 3, 4, 5] }], outShapes: [[5, 3, 2, 4]], attrs: { perm: [3, 1, 0, 2] } },
    { label: 'pad', op: 'pad', inputs: [{ shape: [2, 3, 4] }], outShapes: [[3, 5, 8]], attrs: { pads: [1, 0, 0, 2, 3, 1], value: 0.5 } },
    { label: 'pad_last', op: 'pad', inputs: [{ shape: [3, 5] }], outShapes: [[3, 7]], attrs: { pads: [0, 0, 2, 0], value: 0 } },
    { label: 'bcast_to', op: 'broadcast_to', inputs: [{ shape: [3, 1, 5] }], outShapes: [[2, 3, 4, 5]], attrs: { shape: [2, 3, 4, 5] } },
    { label: 'bcast_to_col', op: 'broadcast_to', inputs: [{ shape: [3, 1] }], outShapes: [[3, 6]], attrs: { shape: [3, 6] } },
    { label: 'reduce_sum', op: 'reduce', inputs: [{ shape: [3, 5, 4] }], outShapes: [[3, 1, 4]], attrs: { fn: 'sum', axes: [1], keepdim: true } },
    { label: 'reduce_mean', op: 'reduce', inputs: [{ shape: [3, 5, 4] }], outShapes: [[5]], attrs: { fn: 'mean', axes: [0, 2], keepdim: false } },
    { label: 'reduce_max', op: 'reduce', inputs: [{ shape: [3, 5, 4] }], outShapes: [[3, 5]], attrs: { fn: 'max', axes: [2], keepdim: false } },
    { label: 'reduce_max_g', op: 'reduce_max_grad', inputs: [{ shape: [3, 1, 4] }, { shape: [3, 5, 4] }], outShapes: [[3, 5, 4]], attrs: { axes: [1], keepdim: true } },
    { label: 'mfill_causal', op: 'masked_fill', inputs: [{ shape: [2, 3, 5, 7] }, null], outShapes: [[2, 3, 5, 7]], attrs: { value: -30, causal: true } },
    { label: 'mfill_i32', op: 'masked_fill', inputs: [{ shape: [2, 5, 3] }, { shape: [5, 1], dtype: 'i32', ints: 2 }], outShapes: [[2, 5, 3]], attrs: { value: 2.5, invert: true } },
    { label: 'mfill_f32', op: 'masked_fill', inputs: [{ shape: [4, 6] }, { shape: [2, 4, 6], values: Array.from({ length: 48 }, (_, i) => (i % 3 === 0 ? 1 : 0)) }], outShapes: [[2, 4, 6]], attrs: { value: -1, causal: true } },
    { label: 'positions', op: 'positions', inputs: [{ shape: [3, 7], dtype: 'i32', ints: 5 }], outShapes: [[3, 7]], outI32: true },
    { label: 'ln_noaffine', op: 'layernorm', inputs: [{ shape: [3, 4, 10] }, null, null], outShapes: [[3, 4, 10], [3, 4], [3, 4]], attrs: { eps: 1e-5 } },
    { label: 'ln_bias_only', op: 'layernorm', inputs: [{ shape: [5, 9] }, null, { shape: [9] }], outShapes: [[5, 9], [5], [5]], attrs: { eps: 1e-5 } },
    {
      label: 'ln_grad_noaffine', op: 'layernorm_grad',
      inputs: [{ shape: [3, 4, 10] }, { shape: [3, 4, 10] }, null, { shape: [3, 4], lo: -0.2, hi: 0.2 }, { shape: [3, 4], lo: 0.5, hi: 2 }],
      outShapes: [[3, 4, 10], [10], [10]],
    },
  ];
  const lab = { shape: [2, 3, 5], dtype: 'i32' as const, ints: 7 };
  const x = { shape: [2, 3, 5, 7], lo: -3, hi: 3 };
  for (const ii of [undefined, 2]) {
    const a: Record<string, AttrValue> = ii === undefined ? {} : { ignore_index: ii }, tag = ii === undefined ? '' : '_ign';
    cases.push({ label: `ce_nd${tag}`, op: 'cross_entropy', inputs: [x, lab], outShapes: [[]], attrs: { label_smoothing: 0.1, ...a } });
    cases.push({ label: `ce_nd_g${tag}`, op: 'cross_entropy_grad', inputs: [x, lab], outShapes: [x.shape], attrs: { label_smoothing: 0.1, ...a } });
    cases.push({ label: `nll_nd${tag}`, op: 'nll', inputs: [{ shape: x.shape, lo: -5, hi: 0 }, lab], outShapes: [[]], attrs: a });
    cases.push({ label: `nll_nd_g${tag}`, op: 'nll_grad', inputs: [x, lab], outShapes: [x.shape], attrs: a });
    cases.push({ label: `acc_nd${tag}`, op: 'accuracy', inputs: [x, lab], outShapes: [[]], attrs: a });
    cases.push({ label: `topk_nd${tag}`, op: 'top_k', inputs: [x, lab], outShapes: [[]], attrs: { k: 2, ...a } });
  }
  // attention: [N, H, T, D] with S keys; T = 37 and 70 are not multiples of the 32-query / 64-key tiles
  const geos = [
    { N: 1, H: 1, T: 37, S: 37, D: 8, causal: true },
    { N: 2, H: 16, T: 19, S: 19, D: 64, causal: false },
    { N: 1, H: 3, T: 70, S: 70, D: 8, causal: true },
    { N: 2, H: 2, T: 33, S: 45, D: 64, causal: true },
    { N: 1, H: 16, T: 5, S: 130, D: 8, causal: false },
  ];
  geos.forEach((g, i) => {
    const q = { shape: [g.N, g.H, g.T, g.D], lo: -2, hi: 2 }, kv = { shape: [g.N, g.H, g.S, g.D], lo: -2, hi: 2 };
    const attrs = { causal: g.causal, scale: 1 / Math.sqrt(g.D) };
    cases.push({ label: `attn${i}`, op: 'attention', inputs: [q, kv, kv], outShapes: [q.shape, [g.N, g.H, g.T]], attrs });
    cases.push({
      label: `attn${i}_g`, op: 'attention_grad', attrs,
      inputs: [q, q, kv, kv, q, { shape: [g.N, g.H, g.T], lo: 1, hi: 3 }], outShapes: [q.shape, kv.shape, kv.shape],
    });
    if (g.S !== g.T) return;
    // the packed form: q, k, v in place in one [N, T, 3C] projection, o / do [N, T, C], dq, dk, dv into one [N, T, 3C]
    const C = g.H * g.D, qkv = { shape: [g.N, g.T, 3 * C], lo: -2, hi: 2 }, o = { shape: [g.N, g.T, C], lo: -2, hi: 2 };
    const pa = { heads: g.H, ...attrs };
    cases.push({ label: `attn_qkv${i}`, op: 'attention_qkv', inputs: [qkv], outShapes: [o.shape, [g.N, g.H, g.T]], attrs: pa });
    cases.push({ label: `attn_qkv${i}_g`, op: 'attention_qkv_grad', attrs: pa, inputs: [o, qkv, o, { shape: [g.N, g.H, g.T], lo: 1, hi: 3 }], outShapes: [qkv.shape] });
  });
  return cases;
}

function elementwiseCases(): Case[] {
  const cases: Case[] = [];
  // every fn of the table, each attribute variant, at its kinks and around them (test/unary_cases.ts)
  for (const fn of UNARY_FNS) {
    attrVariants(fn).forEach((fnAttrs, v) => {
      const p = samplePoints(fn, fnAttrs);
      const values = [...p.exact, ...p.smooth];
      const shape = [values.length];
      const attrs: Record<string, AttrValue> = { fn, ...fnAttrs };
      cases.push({ label: `unary_${fn}_${v}`, op: 'unary', inputs: [{ shape, values }], outShapes: [shape], attrs });
      cases.push({ label: `unary_grad_${fn}_${v}`, op: 'unary_grad', inputs: [{ shape }, { shape, values }], outShapes: [shape], attrs });
    });
  }
  // gelu and its gradient (mk::gelu_fwd / gelu_grad: A&S 7.1.26 erfc, exp(-x^2/2) shared) on a dense grid over
  // [-12, 12] of odd length (masked 16-lane tails), element by element: gelu within 2.5e-7 max(1, |x|), gelu'
  // (dy = 1) within 4e-7 (measured 4.2e-7 at x = 3.1 and 3.0e-7 at x = 0.05: bench/NOTES.md phase 11b)
  const grid = Array.from({ length: 4001 }, (_, i) => -12 + (24 * i) / 4000);
  cases.push({ label: 'gelu_grid', op: 'unary', inputs: [{ shape: [4001], values: grid }], outShapes: [[4001]], attrs: { fn: 'gelu' }, absTol: (x) => 2.5e-7 * Math.max(1, Math.abs(x)) });
  cases.push({ label: 'gelu_grad_grid', op: 'unary_grad', inputs: [{ shape: [4001], values: grid.map(() => 1) }, { shape: [4001], values: grid }], outShapes: [[4001]], attrs: { fn: 'gelu' }, absTol: () => 4e-7 });
  cases.push({ label: 'bin_bcast', op: 'binary', inputs: [{ shape: [4, 1, 5] }, { shape: [3, 1] }], outShapes: [[4, 3, 5]], attrs: { fn: 'add' } });
  cases.push({ label: 'bin_same', op: 'binary', inputs: [{ shape: [6, 7] }, { shape: [6, 7] }], outShapes: [[6, 7]], attrs: { fn: 'sub' } });
  cases.push({ label: 'bin_row', op: 'binary', inputs: [{ shape: [6, 7] }, { shape: [7] }], outShapes: [[6, 7]], attrs: { fn: 'mul' } });
  cases.push({ label: 'bin_scalar', op: 'binary', inputs: [{ shape: [1] }, { shape: [3, 4] }], outShapes: [[3, 4]], attrs: { fn: 'sub' } });
  cases.push({ label: 'reshape', op: 'reshape', inputs: [{ shape: [2, 3, 4] }], outShapes: [[6, 4]], attrs: { shape: [6, 4] } });
  cases.push({ label: 'sum_to_shape', op: 'sum_to', inputs: [{ shape: [4, 3, 5] }], outShapes: [[3, 1]], attrs: { shape: [3, 1] } });
  cases.push({ label: 'sum_to_prepend', op: 'sum_to', inputs: [{ shape: [4, 3, 5] }], outShapes: [[5]], attrs: { shape: [5] } });
  cases.push({ label: 'sum_to_bias', op: 'sum_to', inputs: [{ shape: [7, 5] }], outShapes: [[5]], attrs: { axes: [0] } });
  cases.push({ label: 'sum_to_conv_bias', op: 'sum_to', inputs: [{ shape: [2, 3, 4, 5] }], outShapes: [[3]], attrs: { axes: [0, 2, 3] } });
  cases.push({ label: 'sum_to_mid', op: 'sum_to', inputs: [{ shape: [2, 3, 4] }], outShapes: [[2, 4]], attrs: { axes: [1] } });
  cases.push({ label: 'dropout', op: 'dropout', inputs: [{ shape: [1000] }], outShapes: [[1000]], attrs: { p: 0.3, stream: 7 } });
  cases.push({ label: 'dropout_g', op: 'dropout_grad', inputs: [{ shape: [33, 7] }], outShapes: [[33, 7]], attrs: { p: 0.5, stream: 2 } });
  return cases;
}

function softmaxNormCases(): Case[] {
  const cases: Case[] = [];
  for (const [op, axis] of [['softmax', 1], ['log_softmax', 2], ['log_softmax', 0], ['softmax', 2]] as const) {
    cases.push({ label: `${op}_${axis}`, op, inputs: [{ shape: [3, 5, 4], lo: -4, hi: 4 }], outShapes: [[3, 5, 4]], attrs: { axis } });
    cases.push({ label: `${op}_g${axis}`, op: `${op}_grad`, inputs: [{ shape: [3, 5, 4] }, { shape: [3, 5, 4], lo: op === 'softmax' ? 0 : -3, hi: op === 'softmax' ? 1 : 0 }], outShapes: [[3, 5, 4]], attrs: { axis } });
  }
  for (const xs of [[4, 3, 5, 5], [6, 4]]) {
    const C = xs[1];
    const pos = { shape: [C], lo: 0.5, hi: 1.5 };
    cases.push({ label: `bn_train_${xs.length}`, op: 'batchnorm_train', inputs: [{ shape: xs }, { shape: [C] }, { shape: [C] }, { shape: [C] }, pos], outShapes: [xs, [C], [C]], attrs: { eps: 1e-5, momentum: 0.1 } });
    cases.push({ label: `bn_eval_${xs.length}`, op: 'batchnorm_eval', inputs: [{ shape: xs }, { shape: [C] }, { shape: [C] }, { shape: [C] }, pos], outShapes: [xs], attrs: { eps: 1e-5 } });
    cases.push({ label: `bn_grad_${xs.length}`, op: 'batchnorm_grad', inputs: [{ shape: xs }, { shape: xs }, { shape: [C] }, { shape: [C] }, pos], outShapes: [xs, [C], [C]] });
  }
  cases.push({ label: 'ln', op: 'layernorm', inputs: [{ shape: [3, 4, 10] }, { shape: [10] }, { shape: [10] }], outShapes: [[3, 4, 10], [3, 4], [3, 4]], attrs: { eps: 1e-5 } });
  cases.push({
    label: 'ln_grad', op: 'layernorm_grad',
    inputs: [{ shape: [3, 4, 10] }, { shape: [3, 4, 10] }, { shape: [10] }, { shape: [3, 4], lo: -0.2, hi: 0.2 }, { shape: [3, 4], lo: 0.5, hi: 2 }],
    outShapes: [[3, 4, 10], [10], [10]],
  });
  return cases;
}

function gatherLossCases(): Case[] {
  const ids = { shape: [3, 4], dtype: 'i32' as const, ints: 10 };
  const lab = { shape: [9], dtype: 'i32' as const, ints: 7 };
  const cases: Case[] = [
    { label: 'embedding', op: 'embedding', inputs: [ids, { shape: [10, 6] }], outShapes: [[3, 4, 6]] },
    { label: 'embedding_g', op: 'embedding_grad', inputs: [{ shape: [3, 4, 6] }, ids], outShapes: [[10, 6]], attrs: { w_shape: [10, 6] } },
    { label: 'concat2', op: 'concat', inputs: [{ shape: [2, 3, 4] }, { shape: [2, 5, 4] }], outShapes: [[2, 8, 4]], attrs: { axis: 1 } },
    { label: 'concat3', op: 'concat', inputs: [{ shape: [2, 3, 1] }, { shape: [2, 3, 4] }, { shape: [2, 3, 2] }], outShapes: [[2, 3, 7]], attrs: { axis: 2 } },
    { label: 'slice', op: 'slice', inputs: [{ shape: [2, 8, 4] }], outShapes: [[2, 4, 4]], attrs: { axis: 1, start: 3, length: 4 } },
    { label: 'ce', op: 'cross_entropy', inputs: [{ shape: [9, 7], lo: -3, hi: 3 }, lab], outShapes: [[]] },
    { label: 'ce_ls', op: 'cross_entropy', inputs: [{ shape: [9, 7], lo: -3, hi: 3 }, lab], outShapes: [[]], attrs: { label_smoothing: 0.1 } },
    { label: 'ce_g', op: 'cross_entropy_grad', inputs: [{ shape: [9, 7], lo: -3, hi: 3 }, lab], outShapes: [[9, 7]] },
    { label: 'ce_ls_g', op: 'cross_entropy_grad', inputs: [{ shape: [9, 7], lo: -3, hi: 3 }, lab], outShapes: [[9, 7]], attrs: { label_smoothing: 0.2 } },
    { label: 'nll', op: 'nll', inputs: [{ shape: [9, 7], lo: -5, hi: 0 }, lab], outShapes: [[]] },
    { label: 'nll_g', op: 'nll_grad', inputs: [{ shape: [9, 7] }, lab], outShapes: [[9, 7]] },
    { label: 'mse', op: 'mse', inputs: [{ shape: [5, 6] }, { shape: [5, 6] }], outShapes: [[]] },
    { label: 'mse_g', op: 'mse_grad', inputs: [{ shape: [5, 6] }, { shape: [5, 6] }], outShapes: [[5, 6]] },
    { label: 'bce', op: 'bce_with_logits', inputs: [{ shape: [5, 6], lo: -4, hi: 4 }, { shape: [5, 6], lo: 0, hi: 1 }], outShapes: [[]] },
    { label: 'bce_g', op: 'bce_with_logits_grad', inputs: [{ shape: [5, 6], lo: -4, hi: 4 }, { shape: [5, 6], lo: 0, hi: 1 }], outShapes: [[5, 6]] },
    { label: 'acc', op: 'accuracy', inputs: [{ shape: [9, 7] }, lab], outShapes: [[]] },
    { label: 'topk', op: 'top_k', inputs: [{ shape: [9, 7] }, lab], outShapes: [[]], attrs: { k: 3 } },
  ];
  return cases;
}

function optimCases(): Case[] {
  const p = { shape: [37, 5] };
  const sq = { shape: [37, 5], lo: 0, hi: 0.5 };
  const gs = { shape: [], lo: 0.3, hi: 0.9 };
  return [
    { label: 'gacc', op: 'grad_accumulate', inputs: [{ shape: [50] }, { shape: [50] }], outShapes: [], attrs: { scale: 0.25 } },
    { label: 'zero', op: 'zero', inputs: [{ shape: [50] }], outShapes: [] },
    { label: 'gnorm', op: 'grad_norm', inputs: [{ shape: [5, 6] }, { shape: [7] }, { shape: [3, 3, 2] }], outShapes: [[]] },
    { label: 'clip', op: 'clip_coef', inputs: [{ shape: [], lo: 1, hi: 3 }], outShapes: [[]], attrs: { max_norm: 0.5 } },
    { label: 'clip1', op: 'clip_coef', inputs: [{ shape: [], lo: 0, hi: 0.4 }], outShapes: [[]], attrs: { max_norm: 0.5 } },
    { label: 'sgd', op: 'sgd_update', inputs: [p, p, null, null], outShapes: [], attrs: { momentum: 0, nesterov: false, weight_decay: 0 } },
    { label: 'sgd_mom', op: 'sgd_update', inputs: [p, p, p, gs], outShapes: [], attrs: { momentum: 0.9, nesterov: true, weight_decay: 0.01 } },
    { label: 'sgd_mom2', op: 'sgd_update', inputs: [p, p, p, null], outShapes: [], attrs: { momentum: 0.9, nesterov: false, weight_decay: 0 } },
    { label: 'adam', op: 'adam_update', inputs: [p, p, p, sq, null], outShapes: [], attrs: { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01, decoupled: false } },
    { label: 'adamw', op: 'adam_update', inputs: [p, p, p, sq, gs], outShapes: [], attrs: { beta1: 0.8, beta2: 0.99, eps: 1e-6, weight_decay: 0.05, decoupled: true } },
  ];
}

/** large enough to take the multi-threaded paths (element-wise loops split above 32768 elements) */
function parallelCases(): Case[] {
  const big = [301, 157];
  return [
    { label: 'big_unary', op: 'unary', inputs: [{ shape: big }], outShapes: [big], attrs: { fn: 'gelu' } },
    { label: 'big_binary', op: 'binary', inputs: [{ shape: big }, { shape: [157] }], outShapes: [big], attrs: { fn: 'add' } },
    { label: 'big_dropout', op: 'dropout', inputs: [{ shape: big }], outShapes: [big], attrs: { p: 0.1, stream: 3 } },
    { label: 'big_sum_to', op: 'sum_to', inputs: [{ shape: big }], outShapes: [[157]], attrs: { axes: [0] } },
    { label: 'big_softmax', op: 'log_softmax', inputs: [{ shape: big }], outShapes: [big], attrs: { axis: 1 } },
    { label: 'big_adam', op: 'adam_update', inputs: [{ shape: big }, { shape: big }, { shape: big }, { shape: big, lo: 0, hi: 0.1 }, null], outShapes: [], attrs: { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0, decoupled: false } },
    // class losses over 613 rows of 67 logits (> PAR_MIN): rows split across the threads; ignore_index, label smoothing
    ...([undefined, 5] as (number | undefined)[]).flatMap((ii): Case[] => {
      const a: Record<string, AttrValue> = ii === undefined ? { label_smoothing: 0.1 } : { label_smoothing: 0.1, ignore_index: ii }, tag = ii === undefined ? '' : '_ign';
      const xb = { shape: [613, 67], lo: -4, hi: 4 }, lb = { shape: [613], dtype: 'i32' as const, ints: 67 };
      return [
        { label: `big_ce${tag}`, op: 'cross_entropy', inputs: [xb, lb], outShapes: [[]], attrs: a },
        { label: `big_ce_g${tag}`, op: 'cross_entropy_grad', inputs: [xb, lb], outShapes: [xb.shape], attrs: a },
        { label: `big_nll${tag}`, op: 'nll', inputs: [{ shape: xb.shape, lo: -5, hi: 0 }, lb], outShapes: [[]], attrs: ii === undefined ? {} : { ignore_index: ii } },
        { label: `big_nll_g${tag}`, op: 'nll_grad', inputs: [xb, lb], outShapes: [xb.shape], attrs: ii === undefined ? {} : { ignore_index: ii } },
      ];
    }),
    // 157 rows of 11 logits (1727, far below PAR_MIN): still split, since a logit weighs LOGIT_COST elements (losses.ts)
    ...((): Case[] => {
      const xm = { shape: [157, 11], lo: -4, hi: 4 }, lm = { shape: [157], dtype: 'i32' as const, ints: 11 };
      return [
        { label: 'mid_ce', op: 'cross_entropy', inputs: [xm, lm], outShapes: [[]], attrs: { ignore_index: 3 } },
        { label: 'mid_ce_g', op: 'cross_entropy_grad', inputs: [xm, lm], outShapes: [xm.shape], attrs: { ignore_index: 3 } },
      ];
    })(),
    // three consecutive Adam updates with the same step constants: emit_program.ts makes them one kernel
    // (mk::adam_multi) whose 2-thread split falls inside the second tensor; each keeps its own weight decay
    ...([[37], [211, 97], [129, 131]] as number[][]).map((shape, j): Case => ({
      label: `multi_adam${j}`, op: 'adam_update', inputs: [{ shape }, { shape }, { shape }, { shape, lo: 0, hi: 0.1 }, null], outShapes: [],
      attrs: { beta1: 0.85, beta2: 0.995, eps: 1e-7, weight_decay: [0.1, 0, 0.02][j], decoupled: true },
    })),
    { label: 'big_matmul', op: 'matmul', inputs: [{ shape: [201, 300] }, { shape: [300, 150] }], outShapes: [[201, 150]], attrs: { transA: false, transB: false } },
  ];
}

/** nodes carrying the fusion attrs of compiler/ir/fuse.ts that CPU_FUSIONS produces (the reference runs them as the unfused pair) */
function fusedCases(): Case[] {
  const conv = (K: number) => ({ stride: [1, 1], padding: [(K - 1) / 2, (K - 1) / 2], dilation: [1, 1], groups: 1, epilogue: 'relu' });
  const ep = { epilogue: 'relu' };
  return [
    { label: 'linear_relu', op: 'linear', inputs: [{ shape: [7, 13] }, { shape: [5, 13] }, { shape: [5] }], outShapes: [[7, 5]], attrs: ep },
    { label: 'linear_relu_big', op: 'linear', inputs: [{ shape: [70, 300] }, { shape: [100, 300] }, null], outShapes: [[70, 100]], attrs: ep },
    // other unary fns run as sgemm's Epilogue::post (gemm.ts linearEpilogue): edge tiles, a fn attr, two K blocks (K > KC)
    { label: 'linear_gelu', op: 'linear', inputs: [{ shape: [37, 45] }, { shape: [53, 45] }, { shape: [53] }], outShapes: [[37, 53]], attrs: { epilogue: 'gelu' } },
    { label: 'linear_leaky', op: 'linear', inputs: [{ shape: [3, 5, 19] }, { shape: [41, 19] }, null], outShapes: [[3, 5, 41]], attrs: { epilogue: 'leaky_relu', epilogue_alpha: 0.2 } },
    { label: 'linear_tanh_big', op: 'linear', inputs: [{ shape: [70, 300] }, { shape: [100, 300] }, { shape: [100] }], outShapes: [[70, 100]], attrs: { epilogue: 'tanh' } },
    // im2col (5x5), direct 1x1, the stride-1 "wide" path, Winograd (C*O/(C+O) >= 32)
    { label: 'conv_relu_5x5', op: 'conv2d', inputs: [{ shape: [2, 3, 9, 8] }, { shape: [4, 3, 5, 5] }, { shape: [4] }], outShapes: [[2, 4, 9, 8]], attrs: conv(5) },
    { label: 'conv_relu_1x1', op: 'conv2d', inputs: [{ shape: [2, 6, 5, 4] }, { shape: [9, 6, 1, 1] }, { shape: [9] }], outShapes: [[2, 9, 5, 4]], attrs: conv(1) },
    { label: 'conv_relu_wide', op: 'conv2d', inputs: [{ shape: [1, 10, 30, 30] }, { shape: [7, 10, 3, 3] }, null], outShapes: [[1, 7, 30, 30]], attrs: conv(3) },
    { label: 'conv_relu_winograd', op: 'conv2d', inputs: [{ shape: [1, 64, 10, 10] }, { shape: [64, 64, 3, 3] }, { shape: [64] }], outShapes: [[1, 64, 10, 10]], attrs: conv(3) },
    { label: 'gap_relu_in', op: 'global_avgpool', inputs: [{ shape: [2, 3, 5, 4] }], outShapes: [[2, 3, 1, 1]], attrs: { relu_in: true } },
    { label: 'gap_g_relu', op: 'global_avgpool_grad', inputs: [{ shape: [2, 3, 1, 1] }, { shape: [2, 3, 5, 4] }], outShapes: [[2, 3, 5, 4]], attrs: { x_shape: [2, 3, 5, 4], relu_grad: true } },
    // conv2d_grad_input with the relu-grad in its store (mask = last input): Winograd, wide, im2col (stride 2, groups)
    ...([
      ['convgi_relu_wino', [2, 64, 13, 9], [70, 64, 3, 3], [1, 1], [1, 1], 1],
      ['convgi_relu_wide', [2, 10, 11, 12], [7, 10, 3, 3], [1, 1], [1, 1], 1],
      ['convgi_relu_im2col', [2, 6, 9, 8], [4, 3, 3, 3], [2, 2], [1, 0], 2],
    ] as [string, number[], number[], number[], number[], number][]).map(([label, xs, ws, stride, padding, groups]): Case => {
      const [N, , H, W] = xs;
      const ys = [N, ws[0], Math.floor((H + 2 * padding[0] - 3) / stride[0]) + 1, Math.floor((W + 2 * padding[1] - 3) / stride[1]) + 1];
      return {
        label, op: 'conv2d_grad_input', inputs: [{ shape: ys }, { shape: ws }, { shape: xs }], outShapes: [xs],
        attrs: { stride, padding, dilation: [1, 1], groups, x_shape: xs, relu_grad: true },
      };
    }),
    // residual adds folded into layernorm (fuse.ts rules 5 / 6, norm.ts): odd row lengths, with and without
    // weight / bias, rows past the 16-row parallel grain
    { label: 'ln_add_in', op: 'layernorm', inputs: [{ shape: [5, 7, 37] }, { shape: [37] }, { shape: [37] }, { shape: [5, 7, 37] }], outShapes: [[5, 7, 37], [5, 7], [5, 7], [5, 7, 37]], attrs: { eps: 1e-5, add_in: true } },
    { label: 'ln_add_in_noaffine', op: 'layernorm', inputs: [{ shape: [3, 130] }, null, null, { shape: [3, 130] }], outShapes: [[3, 130], [3], [3], [3, 130]], attrs: { eps: 1e-5, add_in: true } },
    {
      label: 'ln_grad_add_out', op: 'layernorm_grad', attrs: { add_out: true },
      inputs: [{ shape: [5, 7, 37] }, { shape: [5, 7, 37] }, { shape: [37] }, { shape: [5, 7], lo: -0.2, hi: 0.2 }, { shape: [5, 7], lo: 0.5, hi: 2 }, { shape: [5, 7, 37] }],
      outShapes: [[5, 7, 37], [37], [37]],
    },
    {
      label: 'ln_grad_add_out_noaffine', op: 'layernorm_grad', attrs: { add_out: true },
      inputs: [{ shape: [3, 130] }, { shape: [3, 130] }, null, { shape: [3], lo: -0.2, hi: 0.2 }, { shape: [3], lo: 0.5, hi: 2 }, { shape: [3, 130] }],
      outShapes: [[3, 130], [130], [130]],
    },
    // relu's gradient in a matmul's store (fuse.ts rule 12, grad_fn relu: the mask = x, the last input): one GEMM
    // (edges, a batch folded into M) and products with a batched b (a mask per product)
    { label: 'matmul_relu_grad', op: 'matmul', inputs: [{ shape: [37, 11] }, { shape: [11, 45] }, { shape: [37, 45] }], outShapes: [[37, 45]], attrs: { transA: false, transB: false, grad_fn: 'relu' } },
    { label: 'matmul_relu_grad_folded', op: 'matmul', inputs: [{ shape: [3, 5, 19] }, { shape: [41, 19] }, { shape: [3, 5, 41] }], outShapes: [[3, 5, 41]], attrs: { transA: false, transB: true, grad_fn: 'relu' } },
    { label: 'matmul_relu_grad_batched', op: 'matmul', inputs: [{ shape: [4, 9, 6] }, { shape: [4, 6, 13] }, { shape: [4, 9, 13] }], outShapes: [[4, 9, 13]], attrs: { transA: false, transB: false, grad_fn: 'relu' } },
    { label: 'maxpool_g_relu', op: 'maxpool2d_grad', inputs: [{ shape: [2, 3, 7, 5] }, { shape: [2, 3, 15, 11] }, { shape: [2, 3, 15, 11], same: 1 }], outShapes: [[2, 3, 15, 11]], attrs: { kernel: [2, 2], stride: [2, 2], padding: [0, 0], relu_grad: true } },
  ];
}

/** mixed precision (issue 15): cast both ways, and GEMM-family ops reading 16-bit operands (widened, or the bf16 dot-product linear) */
function precisionCases(): Case[] {
  const h = (shape: number[], cast: 'f16' | 'bf16'): In => ({ shape, cast });
  return [
    { label: 'cast_f16', op: 'cast', inputs: [h([300, 7], 'f16')], outShapes: [[300, 7]], attrs: { to: 'f32' } },
    { label: 'cast_bf16', op: 'cast', inputs: [h([41], 'bf16')], outShapes: [[41]], attrs: { to: 'f32' } },
    { label: 'lin_bf16', op: 'linear', inputs: [h([6, 75], 'bf16'), h([9, 75], 'bf16'), { shape: [9] }], outShapes: [[6, 9]] },
    { label: 'lin_bf16_relu', op: 'linear', inputs: [h([2, 3, 40], 'bf16'), h([5, 40], 'bf16'), null], outShapes: [[2, 3, 5]], attrs: { epilogue: 'relu' } },
    { label: 'lin_f16', op: 'linear', inputs: [h([6, 33], 'f16'), h([9, 33], 'f16'), { shape: [9] }], outShapes: [[6, 9]] },
    { label: 'mm_f16', op: 'matmul', inputs: [h([17, 9], 'f16'), h([21, 9], 'f16')], outShapes: [[17, 21]], attrs: { transA: false, transB: true } },
    { label: 'conv_bf16', op: 'conv2d', inputs: [h([2, 3, 7, 9], 'bf16'), h([5, 3, 3, 3], 'bf16'), { shape: [5] }], outShapes: [[2, 5, 7, 9]], attrs: { stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups: 1 } },
  ];
}

const CASES: Case[] = [...precisionCases(), ...gemmCases(), ...convCases(), ...poolCases(), ...elementwiseCases(), ...softmaxNormCases(), ...gatherLossCases(), ...optimCases(), ...parallelCases(), ...tensorAttentionCases(), ...fusedCases()];
const SCALARS: StepScalars = { lr: 0.05, t: 3, seed: 987654321, counter: 5 };

interface Built {
  programs: ProgramSet;
  data: Map<string, Float64Array>; // initial data by persistent / input name
  intInputs: { name: string; data: Int32Array }[];
}

function buildAll(): Built {
  const rng = makeRng(42);
  const b = new GraphBuilder();
  const data = new Map<string, Float64Array>();
  const intInputs: { name: string; data: Int32Array }[] = [];
  const inputIds: number[] = [];
  CASES.forEach((c) => {
    const ids: number[] = [];
    c.inputs.forEach((inp, i) => ids.push((() => {
      if (!inp) return -1;
      if (inp.same !== undefined) return ids[inp.same];
      const name = `${c.label}.in${i}`;
      const d = inp.values ? Float64Array.from(inp.values)
        : inp.ints !== undefined ? randomInts(inp.shape, inp.ints, rng) : randomTensor(inp.shape, rng, inp.lo ?? -1, inp.hi ?? 1);
      data.set(name, d);
      if (inp.dtype === 'i32') {
        const id = b.value(name, 'i32', inp.shape, 'input');
        inputIds.push(id);
        intInputs.push({ name, data: Int32Array.from(d) });
        return id;
      }
      const id = b.value(name, 'f32', inp.shape, 'param');
      if (!inp.cast) return id;
      const h = b.value(`${name}.${inp.cast}`, inp.cast, inp.shape, 'activation');
      b.node('cast', [id], [h], { to: inp.cast });
      return h;
    })()));
    // outputs live in the persistent block (kind 'state') so the test can read them back by name
    const outs = c.outShapes.map((s, k) => b.value(`${c.label}.out${k}`, c.outI32 ? 'i32' : 'f32', s, 'state'));
    b.node(c.op, ids, outs, c.attrs ?? {});
  });
  const graph = b.graph;
  const prog = { name: 'train_step' as const, batch: 1, graph, inputs: inputIds, outputs: [] };
  const evalProg = { name: 'eval' as const, batch: 1, graph: { values: [], nodes: [] }, inputs: [], outputs: [] };
  return { programs: { model: 'cpu_kernels_test', train_step: prog, eval: evalProg }, data, intInputs };
}

describe('generated CPU kernels vs the reference interpreter', () => {
  let session: Session;
  let built: Built;
  beforeAll(async () => {
    built = buildAll();
    session = await createCpuSession(built.programs, { threads: 2, cacheDir: process.env.MPSC_CACHE_DIR ?? path.join(os.tmpdir(), 'mpsc-test-cache') });
    for (const name of session.tensorNames()) {
      const d = built.data.get(name);
      if (d) session.write(name, Float32Array.from(d));
    }
    session.run('train_step', built.intInputs.map((x) => x.data), SCALARS);
  });
  afterAll(() => session?.close());

  it('has an emitter for every op in ops.ts, and the cases cover every op', () => {
    expect(Object.keys(CPU_KERNELS).sort()).toEqual(Object.keys(OPS).sort());
    expect([...new Set(CASES.map((c) => c.op))].sort()).toEqual(Object.keys(OPS).sort());
  });

  it('runs the consecutive multi_adam updates as one kernel', () => {
    const cc = generateCpuModel(built.programs).files['model.cc'];
    expect(cc).toMatch(/static int p0_k\d+_adam_update_x3\(/);
    expect(cc).toContain('multi_adam0.in0');
  });

  it('splits the rows of a class loss over a batch far below PAR_MIN logits (mid_ce)', () => {
    const cc = generateCpuModel(built.programs).files['model.cc'];
    expect(cc).toMatch(/mk::par\(ctx, 157, (\d+),/);
    const minRows = Number(/mk::par\(ctx, 157, (\d+),/.exec(cc)![1]);
    expect(minRows).toBeLessThanOrEqual(157);
  });

  it('gives the same bits with 1 thread as with 2 (no reduction depends on the thread count)', async () => {
    const one = await createCpuSession(built.programs, { threads: 1, cacheDir: process.env.MPSC_CACHE_DIR ?? path.join(os.tmpdir(), 'mpsc-test-cache') });
    try {
      for (const name of one.tensorNames()) {
        const d = built.data.get(name);
        if (d) one.write(name, Float32Array.from(d));
      }
      one.run('train_step', built.intInputs.map((x) => x.data), SCALARS);
      for (const name of one.tensorNames()) expect(Array.from(one.read(name)), name).toEqual(Array.from(session.read(name)));
    } finally {
      one.close();
    }
  });

  for (const c of CASES) {
    it(`${c.label} (${c.op})`, () => {
      // the reference runs on the f32-rounded inputs the kernel saw
      const refInputs = c.inputs.map((inp, i) => {
        if (!inp) return null;
        const d = Float64Array.from(Float32Array.from(built.data.get(`${c.label}.in${inp.same ?? i}`)!));
        // a 16-bit input: the op reads the cast's rounding of it (the reference's rounding rule)
        if (inp.cast) d.forEach((v, j) => (d[j] = roundToHalf(v, inp.cast!)));
        return { shape: inp.shape, data: d, dtype: inp.dtype ?? 'f32' };
      });
      const outs = runOp(c.op, refInputs, c.outShapes, c.attrs ?? {}, SCALARS);
      outs.forEach((ref, k) => {
        const raw = session.read(`${c.label}.out${k}`);
        const got = c.outI32 ? Int32Array.from(new Int32Array(raw.buffer, raw.byteOffset, raw.length)) : raw;
        expect(got.length).toBe(numel(c.outShapes[k]));
        expect(relError(got, ref), `${c.label} output ${k}`).toBeLessThan(1e-4);
        if (c.absTol) {
          const x = refInputs[c.inputs.length - 1]!.data;
          const bad = Array.from(ref.keys()).filter((i) => !(Math.abs(got[i] - ref[i]) <= c.absTol!(x[i])));
          expect(bad.map((i) => `x=${x[i]}: ${got[i]} vs ${ref[i]}`).slice(0, 5), `${c.label} output ${k} elements past the bound`).toEqual([]);
        }
      });
      for (const m of opDef(c.op).mutates ?? []) {
        if (!refInputs[m]) continue;
        const got = session.read(`${c.label}.in${m}`);
        expect(relError(got, refInputs[m]!.data), `${c.label} mutated input ${m}`).toBeLessThan(1e-4);
      }
    });
  }
});

/** the named persistent tensors after one train_step of a 2-thread build with the CPU fusions on or off (MPSC_CPU_FUSE, read by the code generator and the cache key) */
async function runWithFusion(programs: ProgramSet, fuse: boolean, inputs: [string, Float64Array][], outputs: string[], intInputs: Int32Array[] = []): Promise<Float32Array[]> {
  const saved = process.env.MPSC_CPU_FUSE;
  process.env.MPSC_CPU_FUSE = fuse ? '1' : '0';
  let session: Session | undefined;
  try {
    session = await createCpuSession(programs, { threads: 2, cacheDir: process.env.MPSC_CACHE_DIR ?? path.join(os.tmpdir(), 'mpsc-test-cache') });
  } finally {
    if (saved === undefined) delete process.env.MPSC_CPU_FUSE;
    else process.env.MPSC_CPU_FUSE = saved;
  }
  try {
    for (const [name, data] of inputs) session.write(name, Float32Array.from(data));
    session.run('train_step', intInputs, SCALARS);
    return outputs.map((name) => session!.read(name));
  } finally {
    session.close();
  }
}
const bits = (a: Float32Array) => Array.from(new Uint32Array(a.buffer, a.byteOffset, a.length));

/**
 * The 2x2 max-pool grad with the relu-grad folded in (compiler/ir/fuse.ts, pool.ts) on valid IR with
 * arena values, as the pass and the planner leave it: per case t = neg(x) (x drawn from a few values,
 * so windows tie and have zero or negative maxima), g = maxpool2d_grad(dy, t), dx = relu-grad(g, mask t),
 * accumulated into a gradacc tensor the test reads. The pass folds the pair; the planner puts dx
 * exactly over t (in place, as in LeNet: ops.ts inPlace) unless a later node still reads t.
 * The kernel only selects, so dx must match the unfused pair and the float64 reference bit for bit.
 */
describe('2x2 max-pool grad with the relu-grad folded in', () => {
  // OW: 8-float chunks with and without a tail (18, 14, 8), 4-float (7, 5), scalar (3); odd H / W; 64 planes for 2 threads
  const geos = [
    { xs: [2, 3, 15, 11], inPlace: true },
    { xs: [1, 2, 3, 37], inPlace: true },
    { xs: [4, 16, 28, 28], inPlace: true },
    { xs: [2, 8, 14, 14], inPlace: true },
    { xs: [2, 3, 8, 16], inPlace: true },
    { xs: [1, 3, 6, 7], inPlace: true },
    { xs: [2, 5, 28, 28], inPlace: false },
    { xs: [1, 2, 5, 7], inPlace: false },
  ];
  const attrs = { kernel: [2, 2], stride: [2, 2], padding: [0, 0] };
  const rng = makeRng(11);
  const b = new GraphBuilder();
  const cases = geos.map((c, i) => {
    const [N, C, H, W] = c.xs;
    const ys = [N, C, Math.floor(H / 2), Math.floor(W / 2)];
    const x = Float64Array.from(randomInts(c.xs, 7, rng), (v) => (v - 3) * 0.5);
    const dy = randomTensor(ys, rng);
    const ids = {
      x: b.value(`mp${i}.x`, 'f32', c.xs, 'param'),
      dy: b.value(`mp${i}.dy`, 'f32', ys, 'param'),
      t: b.value(`mp${i}.t`, 'f32', c.xs, 'activation'),
      g: b.value(`mp${i}.g`, 'f32', c.xs, 'grad'),
      dx: b.value(`mp${i}.dx`, 'f32', c.xs, 'grad'),
      out: b.value(`mp${i}.out`, 'f32', c.xs, 'gradacc'),
      keep: b.value(`mp${i}.keep`, 'f32', c.xs, 'gradacc'),
    };
    b.node('unary', [ids.x], [ids.t], { fn: 'neg' });
    b.node('maxpool2d_grad', [ids.dy, ids.t], [ids.g], attrs);
    b.node('unary_grad', [ids.g, ids.t], [ids.dx], { fn: 'relu' });
    b.node('grad_accumulate', [ids.out, ids.dx], [], { scale: 1 });
    if (!c.inPlace) b.node('grad_accumulate', [ids.keep, ids.t], [], { scale: 1 });
    return { ...c, i, ys, x, dy };
  });
  const train: Program = { name: 'train_step', batch: 1, graph: b.graph, inputs: [], outputs: [] };
  train.plan = planMemory(train);
  const programs: ProgramSet = { model: 'cpu_kernels_mp_relu', train_step: train, eval: { name: 'eval', batch: 1, graph: { values: [], nodes: [] }, inputs: [], outputs: [] } };

  it('folds every case, in place over the pool input unless it is read later', () => {
    const p = cpuPrograms(programs, { fuse: true }).train_step;
    const code = generateCpuModel(programs, { fuse: true }).files['model.cc'];
    const pools = p.graph.nodes.filter((n) => n.op === 'maxpool2d_grad');
    expect(pools.length).toBe(cases.length);
    pools.forEach((P, k) => {
      expect(code, `case ${k}`).toMatch(new RegExp(`train_step node ${P.id}: maxpool2d_grad \\+ relu-grad \\(fused\\)`));
      expect(p.plan!.offsets[P.outputs[0]] === p.plan!.offsets[P.inputs[1]], `case ${k} in place`).toBe(cases[k].inPlace);
    });
    expect(code).not.toMatch(/unary_grad/);
  });

  /** each case's dx from a build with the fusion passes on or off */
  const run = (fuse: boolean) =>
    runWithFusion(programs, fuse, cases.flatMap((c): [string, Float64Array][] => [[`mp${c.i}.x`, c.x], [`mp${c.i}.dy`, c.dy]]), cases.map((c) => `mp${c.i}.out`));

  it('gives the bits of the unfused pair, and the float64 reference values (ties to the first maximum)', async () => {
    const fused = await run(true);
    const unfused = await run(false);
    for (const c of cases) {
      expect(bits(fused[c.i]), `case ${c.i} ${c.xs}`).toEqual(bits(unfused[c.i]));
      const f32 = (d: Float64Array) => Float64Array.from(Float32Array.from(d));
      const [t] = runOp('unary', [{ shape: c.xs, data: f32(c.x), dtype: 'f32' }], [c.xs], { fn: 'neg' });
      const [g] = runOp('maxpool2d_grad', [{ shape: c.ys, data: f32(c.dy), dtype: 'f32' }, { shape: c.xs, data: t, dtype: 'f32' }], [c.xs], attrs);
      const [dx] = runOp('unary_grad', [{ shape: c.xs, data: g, dtype: 'f32' }, { shape: c.xs, data: t, dtype: 'f32' }], [c.xs], { fn: 'relu' });
      expect(dx.some((v) => v !== 0), `case ${c.i} has gradients`).toBe(true);
      // the reference multiplies by relu' (-0 where g < 0 is masked); the kernels select +0
      expect(bits(fused[c.i]), `case ${c.i} ${c.xs} vs the reference`).toEqual(bits(Float32Array.from(dx, (v) => v + 0)));
    }
  }, 300_000);
});

/**
 * linear followed by a unary fn other than relu (compiler/ir/fuse.ts rule 1 with CPU_FUSIONS' opFns): the
 * fused kernel applies the fn in sgemm's epilogue (Epilogue::post) and must give the bits of the separate
 * unary pass, and the float64 reference's values; odd sizes, K over one KC block, 2 threads.
 */
describe('linear with a unary epilogue other than relu', () => {
  const geos: { M: number; N: number; K: number; fn: string; attrs: Record<string, AttrValue> }[] = [
    { M: 37, N: 53, K: 45, fn: 'gelu', attrs: {} },
    { M: 70, N: 100, K: 300, fn: 'gelu', attrs: {} },
    { M: 9, N: 33, K: 17, fn: 'leaky_relu', attrs: { alpha: 0.2 } },
    { M: 130, N: 67, K: 64, fn: 'tanh', attrs: {} },
  ];
  const rng = makeRng(5);
  const b = new GraphBuilder();
  const cases = geos.map((c, i) => {
    const x = randomTensor([c.M, c.K], rng, -2, 2), w = randomTensor([c.N, c.K], rng, -0.5, 0.5), bias = randomTensor([c.N], rng);
    const ids = {
      x: b.value(`le${i}.x`, 'f32', [c.M, c.K], 'param'),
      w: b.value(`le${i}.w`, 'f32', [c.N, c.K], 'param'),
      b: b.value(`le${i}.b`, 'f32', [c.N], 'param'),
      y: b.value(`le${i}.y`, 'f32', [c.M, c.N], 'activation'),
      z: b.value(`le${i}.z`, 'f32', [c.M, c.N], 'activation'),
      out: b.value(`le${i}.out`, 'f32', [c.M, c.N], 'gradacc'),
    };
    b.node('linear', [ids.x, ids.w, ids.b], [ids.y], {});
    b.node('unary', [ids.y], [ids.z], { fn: c.fn, ...c.attrs });
    b.node('grad_accumulate', [ids.out, ids.z], [], { scale: 1 });
    return { ...c, i, x, w, bias };
  });
  const train: Program = { name: 'train_step', batch: 1, graph: b.graph, inputs: [], outputs: [] };
  const programs: ProgramSet = { model: 'cpu_kernels_linear_epilogue', train_step: train, eval: { name: 'eval', batch: 1, graph: { values: [], nodes: [] }, inputs: [], outputs: [] } };

  it('folds every unary into its linear', () => {
    const code = generateCpuModel(programs, { fuse: true }).files['model.cc'];
    geos.forEach((c) => expect(code).toContain(`linear + ${c.fn} (fused)`));
    expect(code).not.toMatch(/_unary\(/);
    expect(generateCpuModel(programs, { fuse: false }).files['model.cc']).toMatch(/_unary\(/);
  });

  const run = (fuse: boolean) =>
    runWithFusion(programs, fuse, cases.flatMap((c): [string, Float64Array][] => [[`le${c.i}.x`, c.x], [`le${c.i}.w`, c.w], [`le${c.i}.b`, c.bias]]), cases.map((c) => `le${c.i}.out`));

  it('gives the bits of the separate unary pass, and the float64 reference values', async () => {
    const fused = await run(true);
    const unfused = await run(false);
    for (const c of cases) {
      expect(bits(fused[c.i]), `case ${c.i} ${c.fn}`).toEqual(bits(unfused[c.i]));
      const f32 = (d: Float64Array) => Float64Array.from(Float32Array.from(d));
      const [y] = runOp('linear', [{ shape: [c.M, c.K], data: f32(c.x), dtype: 'f32' }, { shape: [c.N, c.K], data: f32(c.w), dtype: 'f32' }, { shape: [c.N], data: f32(c.bias), dtype: 'f32' }], [[c.M, c.N]], {});
      const [z] = runOp('unary', [{ shape: [c.M, c.N], data: y, dtype: 'f32' }], [[c.M, c.N]], { fn: c.fn, ...c.attrs });
      expect(relError(fused[c.i], z), `case ${c.i} ${c.fn} vs the reference`).toBeLessThan(1e-4);
    }
  }, 300_000);
});

/**
 * Residual adds folded into layernorm (fuse.ts rules 5 and 6 with CPU_FUSIONS.addLayernorm, norm.ts): h = a + r
 * read by a layernorm (and by a later add, which reads it from the layernorm's extra output), and a layernorm_grad
 * whose dx is only read by out = dx + r2. The fused kernels must give the bits of the add kernel and the separate
 * layernorm / layernorm_grad, and the reference values; odd row lengths, 2 threads over more than 16 rows.
 */
describe('residual adds folded into layernorm and layernorm_grad', () => {
  const geos = [{ rows: 45, D: 37 }, { rows: 70, D: 128 }];
  const rng = makeRng(13);
  const b = new GraphBuilder();
  const cases = geos.map((c, i) => {
    const sh = [c.rows, c.D], v = (name: string, kind: 'param' | 'activation' | 'gradacc', shape = sh) => b.value(`ra${i}.${name}`, 'f32', shape, kind);
    const ids = {
      a: v('a', 'param'), r: v('r', 'param'), w: v('w', 'param', [c.D]), bias: v('bias', 'param', [c.D]), dy: v('dy', 'param'), r2: v('r2', 'param'),
      h: v('h', 'activation'), y: v('y', 'activation'), mean: v('mean', 'activation', [c.rows]), rstd: v('rstd', 'activation', [c.rows]),
      h2: v('h2', 'activation'), dx: v('dx', 'activation'), out: v('out', 'activation'), dw: v('dw', 'activation', [c.D]), db: v('db', 'activation', [c.D]),
    };
    b.node('binary', [ids.a, ids.r], [ids.h], { fn: 'add' });
    b.node('layernorm', [ids.h, ids.w, ids.bias], [ids.y, ids.mean, ids.rstd], { eps: 1e-5 });
    b.node('binary', [ids.h, ids.y], [ids.h2], { fn: 'add' });
    b.node('layernorm_grad', [ids.dy, ids.h, ids.w, ids.mean, ids.rstd], [ids.dx, ids.dw, ids.db], {});
    b.node('binary', [ids.r2, ids.dx], [ids.out], { fn: 'add' });
    // the checked values, copied out exactly (0 + 1 * v) into persistent accumulators the test reads
    for (const n of ['y', 'h2', 'out', 'dw', 'db'] as const) b.node('grad_accumulate', [v(`${n}.acc`, 'gradacc', n === 'dw' || n === 'db' ? [c.D] : sh), ids[n]], [], { scale: 1 });
    const data = Object.fromEntries((['a', 'r', 'w', 'bias', 'dy', 'r2'] as const).map((n) => [n, randomTensor(n === 'w' || n === 'bias' ? [c.D] : sh, rng)]));
    return { ...c, i, data };
  });
  const train: Program = { name: 'train_step', batch: 1, graph: b.graph, inputs: [], outputs: [] };
  const programs: ProgramSet = { model: 'cpu_kernels_add_layernorm', train_step: train, eval: { name: 'eval', batch: 1, graph: { values: [], nodes: [] }, inputs: [], outputs: [] } };
  const outNames = ['y', 'h2', 'out', 'dw', 'db'];

  it('folds both adds next to the layernorms (the add reading h stays)', () => {
    const fused = generateCpuModel(programs, { fuse: true }).files['model.cc'];
    expect(fused.match(/train_step node \d+: binary/g)?.length).toBe(geos.length);
    expect(generateCpuModel(programs, { fuse: false }).files['model.cc'].match(/train_step node \d+: binary/g)?.length).toBe(3 * geos.length);
  });

  it('gives the bits of the unfused nodes, and the float64 reference values', async () => {
    const inputs = cases.flatMap((c) => Object.entries(c.data).map(([n, d]): [string, Float64Array] => [`ra${c.i}.${n}`, d]));
    const names = cases.flatMap((c) => outNames.map((n) => `ra${c.i}.${n}.acc`));
    const fused = await runWithFusion(programs, true, inputs, names);
    const unfused = await runWithFusion(programs, false, inputs, names);
    names.forEach((n, j) => expect(bits(fused[j]), n).toEqual(bits(unfused[j])));
    for (const c of cases) {
      const t = (d: Float64Array, shape = [c.rows, c.D]) => ({ shape, data: Float64Array.from(Float32Array.from(d)), dtype: 'f32' as const });
      const [h] = runOp('binary', [t(c.data.a), t(c.data.r)], [[c.rows, c.D]], { fn: 'add' });
      const [y, mean, rstd] = runOp('layernorm', [t(h), t(c.data.w, [c.D]), t(c.data.bias, [c.D])], [[c.rows, c.D], [c.rows], [c.rows]], { eps: 1e-5 });
      const [dx, dw, db] = runOp('layernorm_grad', [t(c.data.dy), t(h), t(c.data.w, [c.D]), t(mean, [c.rows]), t(rstd, [c.rows])], [[c.rows, c.D], [c.D], [c.D]], {});
      const ref: Record<string, ArrayLike<number>> = { y, h2: h.map((v, j) => v + y[j]), out: dx.map((v, j) => v + c.data.r2[j]), dw, db };
      outNames.forEach((n) => expect(relError(fused[cases.indexOf(c) * outNames.length + outNames.indexOf(n)], ref[n]), `${c.i} ${n}`).toBeLessThan(1e-4));
    }
  }, 300_000);
});

/**
 * A grad-weight matmul (transA) and the sum_to over the same rows right after it (a linear's dW and db) run as
 * one kernel: sgemm sums the columns while it packs dY (emit_program.ts, gemm.ts matmulWithColumnSum). The bias
 * gradient must have the bits of the separate sum_to: 2 K blocks (K > KC), a 3-D dY read through a reshape view
 * (the GPT's form), and a 2-thread split where one part has no tile of C but its share of the sums.
 */
describe('grad-weight matmul with the bias-gradient sum fused', () => {
  const geos = [
    { lead: [300], M: 37, N: 53 },
    { lead: [3, 101], M: 70, N: 45 },
    { lead: [50], M: 5, N: 20 },
  ];
  const rng = makeRng(9);
  const b = new GraphBuilder();
  const cases = geos.map((c, i) => {
    const K = c.lead.reduce((x, y) => x * y, 1);
    const dys = [...c.lead, c.M];
    const p = randomTensor(dys, rng), x = randomTensor([K, c.N], rng);
    const ids = {
      p: b.value(`ms${i}.p`, 'f32', dys, 'param'),
      x: b.value(`ms${i}.x`, 'f32', [K, c.N], 'param'),
      dy: b.value(`ms${i}.dy`, 'f32', dys, 'activation'),
      dy2: b.value(`ms${i}.dy2`, 'f32', [K, c.M], 'activation'),
      dw: b.value(`ms${i}.dw`, 'f32', [c.M, c.N], 'grad'),
      db: b.value(`ms${i}.db`, 'f32', [c.M], 'grad'),
      outW: b.value(`ms${i}.outW`, 'f32', [c.M, c.N], 'gradacc'),
      outB: b.value(`ms${i}.outB`, 'f32', [c.M], 'gradacc'),
    };
    b.node('unary', [ids.p], [ids.dy], { fn: 'neg' });
    b.node('reshape', [ids.dy], [ids.dy2], { shape: [K, c.M] });
    b.node('matmul', [ids.dy2, ids.x], [ids.dw], { transA: true, transB: false });
    b.node('sum_to', [ids.dy], [ids.db], { axes: c.lead.map((_, j) => j) });
    b.node('grad_accumulate', [ids.outW, ids.dw], [], { scale: 1 });
    b.node('grad_accumulate', [ids.outB, ids.db], [], { scale: 1 });
    return { ...c, i, K, dys, p, x };
  });
  const train: Program = { name: 'train_step', batch: 1, graph: b.graph, inputs: [], outputs: [] };
  train.plan = planMemory(train); // planned: the reshape is a view, as in the programs buildPrograms makes
  const programs: ProgramSet = { model: 'cpu_kernels_matmul_sum', train_step: train, eval: { name: 'eval', batch: 1, graph: { values: [], nodes: [] }, inputs: [], outputs: [] } };

  it('fuses every pair', () => {
    const code = generateCpuModel(programs, { fuse: true }).files['model.cc'];
    expect(code.match(/static int p0_k\d+_matmul_sum_to\(/g)?.length).toBe(cases.length);
    expect(code).not.toMatch(/static int p0_k\d+_sum_to\(/);
  });

  const run = (fuse: boolean) =>
    runWithFusion(programs, fuse, cases.flatMap((c): [string, Float64Array][] => [[`ms${c.i}.p`, c.p], [`ms${c.i}.x`, c.x]]), cases.flatMap((c) => [`ms${c.i}.outW`, `ms${c.i}.outB`]));

  it('gives the bits of the separate matmul and sum_to, and the float64 reference values', async () => {
    const fused = await run(true);
    const unfused = await run(false);
    for (const c of cases) {
      const [w, bb] = [fused[2 * c.i], fused[2 * c.i + 1]];
      expect(bits(w), `case ${c.i} dW`).toEqual(bits(unfused[2 * c.i]));
      expect(bits(bb), `case ${c.i} db`).toEqual(bits(unfused[2 * c.i + 1]));
      const f32 = (d: Float64Array) => Float64Array.from(Float32Array.from(d));
      const dy = f32(c.p).map((v) => -v);
      const [rw] = runOp('matmul', [{ shape: [c.K, c.M], data: dy, dtype: 'f32' }, { shape: [c.K, c.N], data: f32(c.x), dtype: 'f32' }], [[c.M, c.N]], { transA: true, transB: false });
      const [rb] = runOp('sum_to', [{ shape: c.dys, data: dy, dtype: 'f32' }], [[c.M]], { axes: c.lead.map((_, j) => j) });
      expect(relError(w, rw), `case ${c.i} dW vs the reference`).toBeLessThan(1e-4);
      expect(relError(bb, rb), `case ${c.i} db vs the reference`).toBeLessThan(1e-4);
    }
  }, 300_000);
});

/**
 * cross_entropy and cross_entropy_grad over the same logits, adjacent: one kernel (emit_program.ts,
 * losses.ts crossEntropyWithGrad). Logits t = neg(x) in the arena, so the plan may put dx over t (in place);
 * odd sizes, ignore_index and label smoothing, a batch split over 2 threads and one that stays serial.
 */
describe('cross_entropy with its gradient in one kernel', () => {
  const geos: { N: number; C: number; attrs: Record<string, AttrValue> }[] = [
    { N: 157, C: 11, attrs: { ignore_index: 3, label_smoothing: 0.1 } },
    { N: 613, C: 67, attrs: {} },
    { N: 5, C: 4, attrs: { label_smoothing: 0.05 } },
  ];
  const rng = makeRng(13);
  const b = new GraphBuilder();
  const inputs: number[] = [];
  const cases = geos.map((c, i) => {
    const x = randomTensor([c.N, c.C], rng, -4, 4), lab = Int32Array.from(randomInts([c.N], c.C, rng));
    const ids = {
      x: b.value(`cg${i}.x`, 'f32', [c.N, c.C], 'param'),
      lab: b.value(`cg${i}.lab`, 'i32', [c.N], 'input'),
      t: b.value(`cg${i}.t`, 'f32', [c.N, c.C], 'activation'),
      loss: b.value(`cg${i}.loss`, 'f32', [], 'state'),
      dx: b.value(`cg${i}.dx`, 'f32', [c.N, c.C], 'grad'),
      out: b.value(`cg${i}.out`, 'f32', [c.N, c.C], 'gradacc'),
    };
    inputs.push(ids.lab);
    b.node('unary', [ids.x], [ids.t], { fn: 'neg' });
    b.node('cross_entropy', [ids.t, ids.lab], [ids.loss], c.attrs);
    b.node('cross_entropy_grad', [ids.t, ids.lab], [ids.dx], c.attrs);
    b.node('grad_accumulate', [ids.out, ids.dx], [], { scale: 1 });
    return { ...c, i, x, lab };
  });
  const train: Program = { name: 'train_step', batch: 1, graph: b.graph, inputs, outputs: [] };
  train.plan = planMemory(train);
  const programs: ProgramSet = { model: 'cpu_kernels_ce_grad', train_step: train, eval: { name: 'eval', batch: 1, graph: { values: [], nodes: [] }, inputs: [], outputs: [] } };

  it('fuses every pair', () => {
    const code = generateCpuModel(programs, { fuse: true }).files['model.cc'];
    expect(code.match(/static int p0_k\d+_cross_entropy_with_grad\(/g)?.length).toBe(cases.length);
    expect(code).not.toMatch(/static int p0_k\d+_cross_entropy(_grad)?\(/);
  });

  const run = (fuse: boolean) =>
    runWithFusion(programs, fuse, cases.map((c): [string, Float64Array] => [`cg${c.i}.x`, c.x]), cases.flatMap((c) => [`cg${c.i}.loss`, `cg${c.i}.out`]), cases.map((c) => c.lab));

  it('gives the bits of the two separate kernels, and the float64 reference values', async () => {
    const fused = await run(true);
    const unfused = await run(false);
    for (const c of cases) {
      const [loss, dx] = [fused[2 * c.i], fused[2 * c.i + 1]];
      expect(bits(loss), `case ${c.i} loss`).toEqual(bits(unfused[2 * c.i]));
      expect(bits(dx), `case ${c.i} dx`).toEqual(bits(unfused[2 * c.i + 1]));
      const t = Float64Array.from(Float32Array.from(c.x)).map((v) => -v);
      const ins = [{ shape: [c.N, c.C], data: t, dtype: 'f32' as const }, { shape: [c.N], data: Float64Array.from(c.lab), dtype: 'i32' as const }];
      const [rl] = runOp('cross_entropy', ins, [[]], c.attrs);
      const [rd] = runOp('cross_entropy_grad', ins, [[c.N, c.C]], c.attrs);
      expect(relError(loss, rl), `case ${c.i} loss vs the reference`).toBeLessThan(1e-5);
      expect(relError(dx, rd), `case ${c.i} dx vs the reference`).toBeLessThan(1e-5);
    }
  }, 300_000);
});
