/**
 * The CUDA kernel check's cases and the view of a CUDA build that the case runner reads. Consumes
 * the Metal op cases (metal_cases.ts) and adds the shapes only the CUDA backend treats specially
 * (cudaLongCases); cudaCaseBuild turns CUDA artifacts (compiler/codegen-cuda/index.ts buildCuda)
 * and the compiled ABI test driver into what runCases (metal_harness.ts) reads: the persistent
 * table and, per case, the program as built. bench/cuda_check.ts runs these on the GPU machine;
 * test/cuda_cases.test.ts runs the same path against a stand-in driver without a GPU.
 */
import { SMALL_BELOW, smallGemm, smallSplit, splitK } from '../compiler/codegen-cuda/gemm_cuda.js';
import { LONG, columnChunks } from '../compiler/codegen-cuda/reduce_cuda.js';
import { ONE_BLOCK_ROWS, rowBlock, rowGroupThreads } from '../compiler/codegen-cuda/class_rows.js';
import { WARP_D } from '../compiler/codegen-cuda/layernorm_cuda.js';
import { fuseProgram } from '../compiler/ir/fuse.js';
import { MIN_WIDE, PER_THREAD } from '../compiler/codegen-cuda/wide_ew_cuda.js';
import { countThreads } from '../compiler/codegen-cuda/avgpool_cuda.js';
import { convTiles } from '../compiler/codegen-cuda/conv_cuda.js';
import type { CudaArtifacts } from '../compiler/codegen-cuda/index.js';
import { makeRng, randomInts, randomTensor, relError, type Rng } from '../compiler/reference/fixtures.js';
import { GraphBuilder, numel, type HalfDType, type Program, type StepScalars } from '../compiler/ir/graph.js';
import { FLASH_HEAD_DIMS } from '../compiler/codegen-cuda/attention_cuda.js';
import { roundToHalf } from '../compiler/reference/half.js';
import type { CheckedModel } from '../compiler/model.js';
import type { Batch } from '../runtime/session.js';
import { allOpCases, castCase, fusedCases, halfCases, halfIoCase, halfIoCases, independentUpdatesCase, reluGradFoldCases, smallEpilogueCases } from './metal_cases.js';
import { opCase, reference, type CaseArtifacts, type EmuBuild, type OpCase } from './metal_harness.js';

/** every case of cuda_check's kernel part, in the order of the programs built from them */
export function cudaKernelCases(): OpCase[] {
  // (independentUpdatesCase: six optimizer / element-wise nodes the CUDA build runs as one launch, merge.ts)
  // (halfCases, halfIoCases: 16-bit operands, and kernels reading / writing 16-bit values: a 16-bit precision)
  // (smallEpilogueCases: fuse.ts rules 12, 13, folded into the small products' store, by default)
  return [...allOpCases(), ...fusedCases(), ...reluGradFoldCases(), ...smallEpilogueCases(), ...cudaLongCases(), ...cudaAttentionCases(), ...cudaConvCases(), ...halfCases(), ...halfIoCases(),
    ...weightBiasGradCases(), ...gradForwardCases(makeRng(20261206)), ...gradSumCases(makeRng(20261207)), ...giVec16Cases(), independentUpdatesCase()];
}

/**
 * A recomputed gelu and its gradient as one node (compiler/ir/grad_fwd.ts: unary_grad with `fwd_out`, wide_ew_cuda.ts
 * gradWithForward): dx = gelu'(x) dy and y = gelu(x), dy and x 16-bit copies (bf16 guarded span, f16 exact span)
 * or f32 at a small size (no other kernel serves the node at any size); checks dx and y widened to f32. `fused`
 * false: the same values written by the unfused pair (unary_grad, unary), the same value ids (bitwise comparison).
 */
export function gradForwardCases(rng: Rng, fused = true): OpCase[] {
  const one = (name: string, dtype: 'f32' | HalfDType, shape: number[]): OpCase => {
    const { b, data, input } = caseGraph(rng, name);
    const val = (n: string, t: 'f32' | HalfDType) => b.value(`${name}.${n}`, t, shape, 'activation');
    const dy0 = input('dy', shape, -1, 1), x0 = input('x', shape, -3, 3);
    const dy = dtype === 'f32' ? dy0 : val(`dy.${dtype}`, dtype), x = dtype === 'f32' ? x0 : val(`x.${dtype}`, dtype);
    const dx = val('dx', dtype), y = val('y', dtype);
    const wide = dtype === 'f32' ? [dx, y] : [val('dx.f32', 'f32'), val('y.f32', 'f32')];
    if (dtype !== 'f32') for (const [from, to] of [[dy0, dy], [x0, x]]) b.node('cast', [from], [to], { to: dtype });
    if (fused) b.node('unary_grad', [dy, x], [dx, y], { fn: 'gelu', fwd_out: true }, 'gelu');
    else {
      b.node('unary_grad', [dy, x], [dx], { fn: 'gelu' }, 'gelu');
      b.node('unary', [x], [y], { fn: 'gelu' }, 'gelu');
    }
    if (dtype !== 'f32') [dx, y].forEach((v, k) => b.node('cast', [v], [wide[k]], { to: 'f32' }));
    const program = { name, batch: 1, graph: b.graph, inputs: [...data.keys()], outputs: [] } as unknown as Program;
    return { program, data, check: wide };
  };
  const odd = [521, 509], even = [256, 1024];
  return [one('grad_fwd_gelu_bf16', 'bf16', odd), one('grad_fwd_gelu_f16', 'f16', even), one('grad_fwd_gelu_f32_small', 'f32', [7, 13])];
}

/**
 * A unary gradient with its column sums (fuse.ts rule 14: unary_grad with `sum_out`, wide_ew_cuda.ts gradWithSums), with
 * and without the recomputed forward (`fwd_out`): dx = gelu'(x) dy, the column sums of dx as stored (the bias gradient),
 * y = gelu(x). Shapes that take every guard: rows a multiple of the row block (bf16 [3, 300, 512]: 2-row blocks, the
 * unrolled rows past a block's end), a ragged last block (f32 [1030, 256]: 3-row blocks) and one row (f16 [1, 512]:
 * the sums stored without partials). `fused` false: the same values from the unfused nodes (unary_grad, unary, sum_to),
 * the same value ids (dx and y bitwise, the sums within rounding).
 */
export function gradSumCases(rng: Rng, fused = true): OpCase[] {
  const one = (name: string, dtype: 'f32' | HalfDType, shape: number[], fwd: boolean): OpCase => {
    const { b, data, input } = caseGraph(rng, name);
    const val = (n: string, t: 'f32' | HalfDType, sh = shape) => b.value(`${name}.${n}`, t, sh, 'activation');
    const D = shape[shape.length - 1];
    const dy0 = input('dy', shape, -1, 1), x0 = input('x', shape, -3, 3);
    const dy = dtype === 'f32' ? dy0 : val(`dy.${dtype}`, dtype), x = dtype === 'f32' ? x0 : val(`x.${dtype}`, dtype);
    const dx = val('dx', dtype), sum = val('dx.sum', 'f32', [D]), y = val('y', dtype);
    const wide = dtype === 'f32' ? [dx, y] : [val('dx.f32', 'f32'), val('y.f32', 'f32')];
    if (dtype !== 'f32') for (const [from, to] of [[dy0, dy], [x0, x]]) b.node('cast', [from], [to], { to: dtype });
    const axes = shape.slice(0, -1).map((_, i) => i);
    if (fused) b.node('unary_grad', [dy, x], fwd ? [dx, sum, y] : [dx, sum], { fn: 'gelu', sum_out: true, ...(fwd ? { fwd_out: true } : {}) }, 'gelu');
    else {
      b.node('unary_grad', [dy, x], [dx], { fn: 'gelu' }, 'gelu');
      b.node('sum_to', [dx], [sum], { shape: [D], axes }, 'bias');
    }
    if (fwd && !fused) b.node('unary', [x], [y], { fn: 'gelu' }, 'gelu');
    const outs = fwd ? [dx, y] : [dx];
    if (dtype !== 'f32') outs.forEach((v, k) => b.node('cast', [v], [wide[k]], { to: 'f32' }));
    const program = { name, batch: 1, graph: b.graph, inputs: [...data.keys()], outputs: [] } as unknown as Program;
    return { program, data, check: [...(dtype === 'f32' ? outs : wide.slice(0, outs.length)), sum] };
  };
  return [one('grad_sum_gelu_bf16', 'bf16', [3, 300, 512], true), one('grad_sum_gelu_f32', 'f32', [1030, 256], false), one('grad_sum_gelu_f16_row', 'f16', [1, 512], true)];
}

/**
 * A linear's weight and bias gradients from the same dy (fuse.ts rule 8 with CUDA's caps: the matmul carries
 * `a_sums`; cublaslt.ts: one cuBLASLt call with the BGRADB epilogue, the generated GEMM + sum kernels without
 * cuBLASLt): dw = reshape(dy)^T x, db = sum_to(dy) over its rows, dy [.., M] and x 16-bit (a bf16 / f16 copy,
 * as autocast makes it) or f32; odd sizes, rows both short and past reduce_cuda.ts's LONG (its row-chunked
 * column sums). Checks dw and db (f32).
 */
export function weightBiasGradCases(): OpCase[] {
  const rng = makeRng(20261205);
  const one = (name: string, dtype: 'f32' | HalfDType, rows: number[], M: number, N: number): OpCase => {
    const { b, data, input } = caseGraph(rng, name);
    const K = numel(rows), dyShape = [...rows, M];
    const half = (id: number, shape: number[]) => (dtype === 'f32' ? id : b.emit('cast', [id], [{ name: `${b.get(id).name}.${dtype}`, dtype, shape }], { to: dtype })[0]);
    const dy = half(input('dy', dyShape, -1, 1), dyShape), x = half(input('x', [K, N], -2, 2), [K, N]);
    const flat = b.emit('reshape', [dy], [{ name: `${name}.dy2`, dtype: b.get(dy).dtype, shape: [K, M] }], { shape: [K, M] })[0];
    const [dw] = b.emit('matmul', [flat, x], [{ name: `${name}.dw`, shape: [M, N] }], { transA: true, transB: false });
    const [db] = b.emit('sum_to', [dy], [{ name: `${name}.db`, shape: [M] }], { shape: [M], axes: rows.map((_, i) => i) });
    const program = { name, batch: 1, graph: b.graph, inputs: [...data.keys()], outputs: [] } as unknown as Program;
    if (fuseProgram(program, { matmulBiasGrad: true }).graph.nodes.filter((n) => n.attrs.a_sums === true).length !== 1) throw new Error(`internal: ${name}: the bias gradient is not folded into the matmul`);
    return { program, data, check: [dw, db] };
  };
  if (3 * 1001 < LONG || 7 * 13 >= LONG) throw new Error('internal: the weight / bias gradient cases miss the long or the short column sum');
  return [
    one('lt_bias_grad_bf16', 'bf16', [3, 1001], 37, 21),
    one('lt_bias_grad_f16_short', 'f16', [7, 13], 19, 33),
    one('lt_bias_grad_f32', 'f32', [5, 601], 23, 17),
  ];
}

/**
 * Convolutions at shapes that reach each of conv_cuda.ts's tile shapes (BM 64 / 128, BN 32 / 64 /
 * 128) with partial edge tiles on both axes (odd sizes, batch not a tile multiple): 3 input
 * channels, stride 2 with padding 0, padding 1, a grouped dilated conv, and weight gradients split
 * along K; each as conv2d (with bias), conv2d_grad_input and conv2d_grad_weight. The test asserts
 * which tiles each reaches (test/cuda_conv_emu.test.ts).
 */
export function cudaConvCases(): OpCase[] {
  const rng = makeRng(20261214);
  const f = (shape: number[]) => ({ shape, data: randomTensor(shape, rng, -1, 1) });
  const cases: OpCase[] = [];
  interface ConvCase { name: string; x: number[]; w: number[]; stride: number[]; padding: number[]; dilation: number[]; groups: number; gradWeight?: false }
  const convs: ConvCase[] = [
    { name: 'tc_conv_cin3', x: [3, 3, 21, 19], w: [130, 3, 3, 3], stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups: 1 },
    // K = 9000 taps: the forward's k table (72 KB) does not fit next to the stages (the k part computed in the loop)
    { name: 'tc_conv_deep_k', x: [1, 1000, 3, 4], w: [130, 1000, 3, 3], stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups: 1 },
    // 138 tiles of 128 x 128: the forward on the seed CNN's tile shape
    { name: 'tc_conv_tile128', x: [2, 4, 67, 65], w: [130, 4, 3, 3], stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups: 1 },
    { name: 'tc_conv_stride2_pad0', x: [5, 20, 15, 13], w: [36, 20, 3, 3], stride: [2, 2], padding: [0, 0], dilation: [1, 1], groups: 1 },
    { name: 'tc_conv_wide', x: [2, 16, 33, 35], w: [70, 16, 3, 3], stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups: 1 },
    { name: 'tc_conv_groups_dilated', x: [3, 8, 17, 17], w: [132, 4, 3, 3], stride: [1, 1], padding: [2, 2], dilation: [2, 2], groups: 2 },
    // enough 128-row tiles to fill the GPU (convTiles keeps BM = 128): the forward and grad_input on 128-row tiles of 64 and
    // 32 columns. Not its weight gradient: K = 17 420 summed in one thread by the shared 16x16 kernel (MPSC_CUDA_GEMM=shared
    // is not split) drifts past 1e-4 in 3xTF32 (1.16e-4 on the H200), a property of that kernel; the split ones are covered above
    { name: 'tc_conv_rows128', x: [4, 8, 67, 65], w: [40, 8, 3, 3], stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups: 1, gradWeight: false },
  ];
  for (const c of convs) {
    const OH = Math.floor((c.x[2] + 2 * c.padding[0] - c.dilation[0] * (c.w[2] - 1) - 1) / c.stride[0]) + 1;
    const OW = Math.floor((c.x[3] + 2 * c.padding[1] - c.dilation[1] * (c.w[3] - 1) - 1) / c.stride[1]) + 1;
    const y = [c.x[0], c.w[0], OH, OW];
    const attrs = { stride: c.stride, padding: c.padding, dilation: c.dilation, groups: c.groups };
    cases.push(opCase(`${c.name}`, 'conv2d', [f(c.x), f(c.w), f([c.w[0]])], [y], attrs));
    cases.push(opCase(`${c.name}_grad_input`, 'conv2d_grad_input', [f(y), f(c.w)], [c.x], { ...attrs, x_shape: c.x }));
    if (c.gradWeight !== false) cases.push(opCase(`${c.name}_grad_weight`, 'conv2d_grad_weight', [f(y), f(c.x)], [c.w], { ...attrs, w_shape: c.w }));
  }
  return cases;
}

/** the driver `exe` built from `a`: runCases finds each checked value in the programs as built (fused: ids renumbered, names kept) */
export function cudaCaseBuild(a: CudaArtifacts, exe: string): EmuBuild<CaseArtifacts> {
  return { exe, art: { table: a.table, programs: a.lowered.map((l) => ({ program: l.program })) } };
}

/**
 * Shapes only the CUDA backend treats specially: GEMMs long enough along K to be split (gemm_cuda.ts
 * splitK; the last chunk shorter than the others, bias in the reduction's store, grouped conv),
 * sum_to reductions with at least LONG terms per output (reduce_cuda.ts: innermost dim summed, and
 * kept: a column sum in row chunks, the last one shorter), layernorm_grad over enough rows to be
 * chunked, embedding_grad over many ids (embedding_cuda.ts: a sort over several tiles of 256 ids, a large
 * vocabulary with rows that never occur), and the class losses / metrics over many rows (class_rows.ts:
 * a block per row of GPT-2's V = 50 304, a warp per row of 1000 classes over a row count not a multiple
 * of 8, and few enough such rows for one block; label smoothing; ignore_index), a loss with its gradient
 * reading the loss kernel's log-sum-exp or fused into its kernel (lossAndGradCase), a position embedding and its gradient
 * (positionEmbeddingCase), and layernorm / its dx a warp per row (layernormPair: D a multiple of 32 and not,
 * the widest warp row, one past it).
 */
export function cudaLongCases(): OpCase[] {
  const rng = makeRng(20261203);
  const f = (shape: number[]) => ({ shape, data: randomTensor(shape, rng, -1, 1) });
  const cases: OpCase[] = [];
  const conv = (name: string, x: number[], w: number[], padding: number[], groups: number) => {
    const OH = x[2] + 2 * padding[0] - w[2] + 1, OW = x[3] + 2 * padding[1] - w[3] + 1;
    const attrs = { stride: [1, 1], padding, dilation: [1, 1], groups };
    if (!splitK(w[0] / groups, (x[1] / groups) * w[2] * w[3], x[0] * OH * OW, groups)) throw new Error(`internal: case ${name} is not split along K`);
    cases.push(opCase(name, 'conv2d_grad_weight', [f([x[0], w[0], OH, OW]), f(x)], [w], { ...attrs, w_shape: w }));
  };
  conv('long_k_conv_grad_weight', [8, 3, 33, 31], [5, 3, 3, 3], [1, 1], 1);
  conv('long_k_conv_grad_weight_groups', [4, 4, 30, 30], [6, 2, 3, 3], [1, 1], 2);
  // small GEMMs (gemm_cuda.ts smallGemm): split by smallSplit, not splitK
  if (!smallSplit(20, 24, 3000, 1) || !smallSplit(6, 10, 2000, 1)) throw new Error('internal: the long-K GEMM cases are not split along K');
  cases.push(opCase('long_k_matmul_transA', 'matmul', [f([3000, 20]), f([3000, 24])], [[20, 24]], { transA: true, transB: false }));
  cases.push(opCase('long_k_linear_bias', 'linear', [f([6, 2000]), f([10, 2000]), f([10])], [[6, 10]]));
  if (3 * 700 < LONG || 1200 < LONG) throw new Error('internal: the long sum_to cases are shorter than LONG');
  cases.push(opCase('long_sum_to_inner', 'sum_to', [f([3, 7, 700])], [[7, 1]], { shape: [7, 1] }));
  // 5005 terms for each of 3 outputs: a block per output and chunk (2503 and 2502 terms), then their sum
  cases.push(opCase('long_sum_to_inner_chunked', 'sum_to', [f([5, 3, 1001])], [[3, 1]], { shape: [3, 1] }));
  if (columnChunks(1200, 33).S < 2 || 1200 % columnChunks(1200, 33).chunk === 0) throw new Error('internal: long_sum_to_outer is not chunked unevenly');
  cases.push(opCase('long_sum_to_outer', 'sum_to', [f([1200, 33])], [[33]], { axes: [0] }));
  // layernorm_grad's weight / bias gradients over many rows, with and without the weight: rows up to WARP_D as
  // layernorm_cuda.ts's blocks' partial sums in scratch, then their sum; wider rows (the last case) in reduce_cuda.ts's
  // row chunks (the last chunk shorter); embedding_grad over many ids
  const lnRows = (rows: number[], D: number, weight: boolean) => {
    const R = rows.reduce((p, k) => p * k, 1);
    if (columnChunks(R, D).S < 2 || R % columnChunks(R, D).chunk === 0) throw new Error('internal: a long layernorm_grad case is not chunked unevenly');
    const x = [...rows, D];
    cases.push(opCase(`long_layernorm_grad${weight ? '' : '_noweight'}`, 'layernorm_grad',
      [f(x), f(x), weight ? f([D]) : null, { shape: rows, data: randomTensor(rows, rng, -0.2, 0.2) }, { shape: rows, data: randomTensor(rows, rng, 0.5, 2) }],
      [x, [D], [D]]));
  };
  lnRows([3, 333], 45, true);
  lnRows([1000], 70, false);
  if (columnChunks(301, WARP_D + 3).S < 2 || 301 % columnChunks(301, WARP_D + 3).chunk === 0) throw new Error('internal: long_layernorm_grad_wide is not chunked unevenly');
  cases.push(opCase('long_layernorm_grad_wide', 'layernorm_grad',
    [f([301, WARP_D + 3]), f([301, WARP_D + 3]), f([WARP_D + 3]), { shape: [301], data: randomTensor([301], rng, -0.2, 0.2) }, { shape: [301], data: randomTensor([301], rng, 0.5, 2) }],
    [[301, WARP_D + 3], [WARP_D + 3], [WARP_D + 3]]));
  // more rows than layernorm_cuda.ts's blocks have warps: several rows per warp, the last block's warps partly idle
  if (5005 <= 264 * 8 || 5005 % (8 * Math.ceil(5005 / (264 * 8))) === 0) throw new Error('internal: long_layernorm_grad_rows_per_warp takes one row per warp');
  cases.push(opCase('long_layernorm_grad_rows_per_warp', 'layernorm_grad',
    [f([5, 1001, 37]), f([5, 1001, 37]), f([37]), { shape: [5, 1001], data: randomTensor([5, 1001], rng, -0.2, 0.2) }, { shape: [5, 1001], data: randomTensor([5, 1001], rng, 0.5, 2) }],
    [[5, 1001, 37], [37], [37]]));
  const emb = (name: string, ids: number[], V: number, D: number) => cases.push(opCase(name, 'embedding_grad',
    [f([...ids, D]), { shape: ids, dtype: 'i32', data: randomInts(ids, V, rng) }], [[V, D]], { w_shape: [V, D] }));
  emb('long_embedding_grad', [7, 300], 37, 70);
  emb('embedding_grad_gpt2_vocab', [3, 333], 50304, 24);
  if (rowGroupThreads(50304) !== 256 || rowGroupThreads(1025) !== 256 || rowGroupThreads(50304, true) !== rowBlock() || rowGroupThreads(1000) !== 32) throw new Error('internal: the class-row cases miss a block or a warp per row');
  const classes = (tag: string, R: number, C: number, ignore?: number) => cases.push(...classRowCases(rng, `rows_${tag}`, R, C, ignore));
  classes('gpt2_vocab', 3, 50304);
  classes('gpt2_vocab_ignore', 4, 50304, 7);
  if (ONE_BLOCK_ROWS >= 301 || ONE_BLOCK_ROWS < 37) throw new Error('internal: the warp-per-row cases do not straddle ONE_BLOCK_ROWS');
  classes('warp_odd_rows', 301, 1000);
  classes('warp_odd_rows_ignore', 301, 1000, -100);
  classes('one_block_ignore', 37, 1000, -100);
  classes('block_odd', 5, 1025);
  for (const [D, w] of [[768, true], [333, false], [WARP_D, true], [WARP_D + 1, true]] as const) cases.push(...layernormPair(rng, `layernorm_rows_${D}`, [5, 7], D, w));
  // the residual add folded into the layernorm (a warp per row): D a multiple of 32 and not, the widest
  for (const [D, w] of [[768, true], [333, false], [WARP_D, true], [65, true]] as const) cases.push(addLayernormCase(rng, `add_layernorm_${D}`, [3, 37], D, w));
  // and the residual-gradient add into layernorm_grad (one block, and several rows per warp over many blocks)
  for (const [rows, D, w] of [[[3, 37], 768, true], [[5, 1001], 333, false], [[3, 7], WARP_D, true]] as const) cases.push(layernormGradAddCase(rng, `layernorm_grad_add_${D}`, [...rows], D, w));
  // with a bias gradient of the sum folded in too (rule 7): several blocks, one block
  cases.push(layernormGradAddCase(rng, 'layernorm_grad_add_bias_333', [5, 1001], 333, true, false, true),
    layernormGradAddCase(rng, 'layernorm_grad_add_bias_65', [3, 5], 65, false, false, true));
  cases.push(lossAndGradCase(rng, 'loss_and_grad_gpt2_vocab', 3, 50304, 0), lossAndGradCase(rng, 'loss_and_grad_warp_ignore', 301, 1000, 0.1, -100),
    lossAndGradCase(rng, 'loss_and_grad_one_block', 37, 65, 0));
  cases.push(positionEmbeddingCase('position_embedding', 3, 37, 41, 70), positionEmbeddingCase('position_embedding_full', 5, 64, 64, 33));
  cases.push(...halfLongCases(rng), ...wideElementwiseCases(rng), ...gemmTileCases(rng));
  // the gradient right after the loss: one kernel (class_rows.ts fusedGrad), a block and a warp per row
  cases.push(lossAndGradCase(rng, 'loss_grad_fused_gpt2_vocab', 3, 50304, 0, undefined, true), lossAndGradCase(rng, 'loss_grad_fused_block_ignore', 5, 1025, 0.1, 2, true),
    lossAndGradCase(rng, 'loss_grad_fused_warp_ignore', 301, 1000, 0.1, -100, true));
  // and over bf16 / f16 logits with C a multiple of 8: the vector path (16-byte accesses, exp2; MPSC_CUDA_CE_VEC)
  cases.push(lossAndGradCase(rng, 'loss_grad_fused_gpt2_vocab_bf16', 3, 50304, 0, undefined, true, 'bf16'),
    lossAndGradCase(rng, 'loss_grad_fused_block_ignore_f16', 5, 1032, 0.1, 2, true, 'f16'));
  // several rows per block where MPSC_CUDA_CE_SMEM=1 stages the rows in shared memory (class_rows.ts smemRows: min(R, 132)
  // persistent blocks): GPT-2's vocabulary (runs of 2 rows in the first two blocks: both buffers at full width), and an
  // ignore_index case (runs of 3 and 2: row i + 2's copies) (own seed: the cases after keep their data)
  const staged = makeRng(20261208);
  cases.push(lossAndGradCase(staged, 'loss_grad_fused_gpt2_vocab_bf16_runs', 134, 50304, 0, undefined, true, 'bf16'),
    lossAndGradCase(staged, 'loss_grad_fused_runs_ignore_f16', 301, 1032, 0.1, 2, true, 'f16'));
  // a conv bias gradient folded into the avgpool gradient (fuse.ts rule 9: buildCuda fuses the plain programs)
  cases.push(...poolGradSumsCases(rng));
  // a global_avgpool folded into the conv2d before it (fuse.ts rule 10), and one the conv's tiles cannot pool
  cases.push(...convPoolCases(rng));
  // a conv bias gradient folded into the next conv's input gradient (rule 9), and a grouped one that is not
  cases.push(...convGradSumsCases(rng));
  // GPT-2's layernorm_grad with rules 6 and 7 (the residual add, the bias sum) over several rows per warp: with
  // MPSC_CUDA_LN_VEC=all by 16-byte vectors (layernorm_cuda.ts), as the folded-add forward cases above at 768 / WARP_D
  // (the bf16 copy of rule 11 is a 16-bit checked value, which this harness does not read back: cuda_passes checks it)
  cases.push(layernormGradAddCase(makeRng(768), 'layernorm_grad_add_bias_768', [3, 705], 768, true, false, true));
  return cases;
}

/**
 * GEMMs at the edges of gemm_cuda.ts's small tiles (32x64, BK 32, the next k step prefetched): partial tiles on
 * both axes and K not a multiple of BK; every operand layout (linear; matmul with transA: the weight gradient,
 * A staged rows-contiguous; transB; a batch with a shared b); K split unevenly (smallSplit's last chunk
 * shorter) with and without transA; gpt_tiny's shapes scaled down (fused unary epilogues: metal_cases.ts fusedCases); and one product on the 64x64
 * tiles (its grid at SMALL_BELOW tiles: the large path, which the op cases no longer reach).
 */
export function gemmTileCases(rng: Rng): OpCase[] {
  const f = (shape: number[]) => ({ shape, data: randomTensor(shape, rng, -1, 1) });
  const cases: OpCase[] = [];
  const mm = (name: string, a: number[], b: number[], y: number[], transA: boolean, transB: boolean) =>
    cases.push(opCase(name, 'matmul', [f(a), f(b)], [y], { transA, transB }));
  cases.push(opCase('tile_linear_bias_67x65x129', 'linear', [f([67, 129]), f([65, 129]), f([65])], [[67, 65]]));
  mm('tile_matmul_transA_split', [1030, 37], [1030, 70], [37, 70], true, false);
  mm('tile_matmul_transB_split', [45, 700], [33, 700], [45, 33], false, true);
  mm('tile_matmul_transAB', [41, 35], [66, 41], [35, 66], true, true);
  mm('tile_matmul_batch_shared_b', [3, 37, 41], [41, 70], [3, 37, 70], false, false);
  // gpt_tiny's weight gradient (dY^T X, K = batch rows) and input gradient (dY W), scaled down
  mm('tile_gpt_weight_grad', [515, 65], [515, 130], [65, 130], true, false);
  mm('tile_gpt_input_grad', [2, 33, 130], [130, 67], [2, 33, 67], false, false);
  cases.push(opCase('tile_linear_129', 'linear', [f([70, 33]), f([129, 33]), f([129])], [[70, 129]]));
  cases.push(opCase('tile_large_linear', 'linear', [f([1030, 9]), f([1000, 9]), f([1000])], [[1030, 1000]]));
  const splits: [number, number, number][] = [[37, 70, 1030], [45, 33, 700], [65, 130, 515]];
  for (const [M, N, K] of splits) {
    const sp = smallSplit(M, N, K, 1);
    if (!sp || K % sp.Kc === 0) throw new Error(`internal: a small GEMM case ${M} x ${N} x ${K} is not split unevenly along K`);
  }
  if (!smallGemm('linear', 67, 65, 129, 1) || smallGemm('linear', 1030, 1000, 9, 1) || Math.ceil(1030 / 64) * Math.ceil(1000 / 64) < SMALL_BELOW) throw new Error('internal: the tile cases miss the small or the large path');
  return cases;
}

/**
 * Long 16-bit element-wise nodes, fp32 unary ones, adam_update and the f32 global-avgpool gradient (wide_ew_cuda.ts:
 * PER_THREAD elements per thread): gelu and its gradient (bf16, f16, fp32), a same-shape add, casts both ways, AdamW and
 * Adam with L2 decay and a gradient scale, the avgpool gradient with and without its folded relu-grad; sizes past MIN_WIDE,
 * one not a multiple of a block's span (the last block's elements guarded) and one a multiple (no guards).
 */
export function wideElementwiseCases(rng: Rng): OpCase[] {
  const f = (shape: number[], lo = -1, hi = 1) => ({ shape, data: randomTensor(shape, rng, lo, hi) });
  const odd = [521, 509], even = [256, 1024], avgOdd = [3, 7, 113, 113], avgEven = [2, 8, 128, 128];
  if ([odd, avgOdd].some((s) => numel(s) < MIN_WIDE || numel(s) % (256 * PER_THREAD) === 0) || [even, avgEven].some((s) => numel(s) < MIN_WIDE || numel(s) % (256 * PER_THREAD) !== 0)) {
    throw new Error('internal: the wide element-wise cases miss the guarded or the exact path');
  }
  return [
    halfIoCase('wide_gelu_bf16', 'bf16', 'unary', [f(odd, -3, 3)], [odd], { fn: 'gelu' }),
    halfIoCase('wide_gelu_grad_f16', 'f16', 'unary_grad', [f(even), f(even, -3, 3)], [even], { fn: 'gelu' }),
    halfIoCase('wide_add_bf16', 'bf16', 'binary', [f(even), f(even)], [even], { fn: 'add' }),
    halfIoCase('wide_mul_f16_f32', 'f16', 'binary', [f(odd), f(odd)], [odd], { fn: 'mul' }, [1], [0]),
    // f32 -> bf16 (the case's input cast) -> f32
    halfIoCase('wide_cast_bf16', 'bf16', 'cast', [f(odd, -3, 3)], [odd], { to: 'f32' }, [], [0]),
    // fp32 unary nodes (gpt_char fp32's gelu and its gradient): one load per thread in the shared kernel
    opCase('wide_gelu_f32', 'unary', [f(odd, -3, 3)], [odd], { fn: 'gelu' }),
    opCase('wide_gelu_grad_f32', 'unary_grad', [f(even), f(even, -3, 3)], [even], { fn: 'gelu' }),
    // AdamW (decoupled decay) and Adam with L2 decay and a gradient scale (fp16's unscale), f32 throughout
    opCase('wide_adamw', 'adam_update', [f(odd), f(odd), f(odd, -0.1, 0.1), f(odd, 0, 0.01), null], [], { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1, decoupled: true }),
    opCase('wide_adam_l2_gscale', 'adam_update', [f(even), f(even), f(even, -0.1, 0.1), f(even, 0, 0.01), f([], 0.3, 1)], [], { beta1: 0.8, beta2: 0.99, eps: 1e-6, weight_decay: 0.05, decoupled: false }),
    // the global-avgpool gradient in f32: plain over planes of 113 x 113 (guarded), and with its folded relu-grad (the
    // mask a separate input) over 2 x 8 planes of 128 x 128 (exact)
    opCase('wide_avgpool_grad', 'global_avgpool_grad', [f([3, 7, 1, 1])], [avgOdd], { x_shape: avgOdd }),
    opCase('wide_avgpool_grad_relu', 'global_avgpool_grad', [f([2, 8, 1, 1]), f(avgEven)], [avgEven], { x_shape: avgEven, relu_grad: true }),
  ];
}

/**
 * The long reductions of reduce_cuda.ts reading a 16-bit gradient (fuse.ts rule 4 folds its widening
 * cast into them: fusions.ts): the column sum of a linear bias gradient (row chunks, the last shorter)
 * and the block-per-output sum in two chunks, in bf16 and f16; layernorm_grad's dx (a warp per row, and
 * past WARP_D the shared kernel) and its weight / bias column sums over a 16-bit dy. Results f32.
 */
export function halfLongCases(rng: Rng): OpCase[] {
  const f = (shape: number[], lo = -1, hi = 1) => ({ shape, data: randomTensor(shape, rng, lo, hi) });
  const ln = (name: string, to: HalfDType, rows: number[], D: number, weight: boolean) => {
    const x = [...rows, D];
    return halfIoCase(name, to, 'layernorm_grad', [f(x), f(x, -2, 2), weight ? f([D]) : null, f(rows, -0.2, 0.2), f(rows, 0.5, 2)],
      [x, [D], [D]], {}, [1, 2, 3, 4], [0, 1, 2]);
  };
  if (columnChunks(1200, 33).S < 2 || 5 * 1001 < 2 * 2048 || WARP_D + 1 <= WARP_D) throw new Error('internal: the 16-bit long reductions miss a chunked path');
  return [
    halfIoCase('half_long_sum_to_outer_bf16', 'bf16', 'sum_to', [f([1200, 33])], [[33]], { axes: [0] }, [], [0]),
    halfIoCase('half_long_sum_to_inner_f16', 'f16', 'sum_to', [f([5, 3, 1001])], [[3, 1]], { shape: [3, 1] }, [], [0]),
    ln('half_long_layernorm_grad_bf16', 'bf16', [5, 1001], 45, true),
    ln('half_layernorm_grad_wide_f16', 'f16', [3, 7], WARP_D + 1, true),
    ln('half_long_layernorm_grad_noweight_f16', 'f16', [1000], 70, false),
  ];
}


/**
 * cross_entropy (with and without label smoothing), its gradient (same), accuracy and top_k (k 5) over R
 * rows of C classes (codegen-cuda/class_rows.ts: a warp per row up to WARP_C classes, a block per row above,
 * ONE block for at most ONE_BLOCK_ROWS warp rows), with ignore_index `ignore` when given (the label of every
 * third row); case names start with `prefix`.
 */
export function classRowCases(rng: Rng, prefix: string, R: number, C: number, ignore?: number): OpCase[] {
  const labels = randomInts([R], C, rng).map((l, i) => (ignore !== undefined && i % 3 === 1 ? ignore : l));
  const lab = { shape: [R], dtype: 'i32' as const, data: labels };
  const x = (lo: number, hi: number) => ({ shape: [R, C], data: randomTensor([R, C], rng, lo, hi) });
  const ii: Record<string, number> = ignore === undefined ? {} : { ignore_index: ignore };
  return [
    opCase(`${prefix}_cross_entropy`, 'cross_entropy', [x(-3, 3), lab], [[]], { label_smoothing: 0, ...ii }),
    opCase(`${prefix}_cross_entropy_ls`, 'cross_entropy', [x(-3, 3), lab], [[]], { label_smoothing: 0.1, ...ii }),
    opCase(`${prefix}_cross_entropy_grad`, 'cross_entropy_grad', [x(-3, 3), lab], [[R, C]], { label_smoothing: 0, ...ii }),
    opCase(`${prefix}_cross_entropy_grad_ls`, 'cross_entropy_grad', [x(-3, 3), lab], [[R, C]], { label_smoothing: 0.1, ...ii }),
    opCase(`${prefix}_accuracy`, 'accuracy', [x(-1, 1), lab], [[]], ii),
    opCase(`${prefix}_top_k`, 'top_k', [x(-1, 1), lab], [[]], { k: 5, ...ii }),
  ];
}

/**
 * layernorm over rows [...rows, D] (with weight and bias when `weight`, else neither) and layernorm_grad's
 * dx + weight / bias gradients (codegen-cuda/layernorm_cuda.ts: a warp per row up to WARP_D, registers
 * holding the row), case names `${name}_fwd` / `${name}_grad`.
 */
export function layernormPair(rng: Rng, name: string, rows: number[], D: number, weight: boolean): OpCase[] {
  const f = (shape: number[], lo = -1, hi = 1) => ({ shape, data: randomTensor(shape, rng, lo, hi) });
  const x = [...rows, D];
  return [
    opCase(`${name}_fwd`, 'layernorm', [f(x, -2, 3), weight ? f([D]) : null, weight ? f([D]) : null], [x, rows, rows], { eps: 1e-5 }),
    opCase(`${name}_grad`, 'layernorm_grad', [f(x), f(x), weight ? f([D]) : null, f(rows, -0.2, 0.2), f(rows, 0.5, 2)], [x, [D], [D]]),
  ];
}

/** a case's graph builder, its input data, and `input(n, shape, lo, hi)`: an f32 input `${name}.${n}` of float32-rounded uniform values */
export function caseGraph(rng: Rng, name: string) {
  const b = new GraphBuilder();
  const data = new Map<number, Float64Array>();
  const input = (n: string, shape: number[], lo: number, hi: number) => {
    const id = b.value(`${name}.${n}`, 'f32', shape, 'input');
    data.set(id, Float64Array.from(randomTensor(shape, rng, lo, hi), (v) => Math.fround(v)));
    return id;
  };
  return { b, data, input };
}

/**
 * A residual add folded into the layernorm after it (fuse.ts rule 5 with CUDA's caps; layernorm_cuda.ts):
 * h = a + r, y, mean, rstd = layernorm(h, w?, bias?), and h read again after it (by the next residual add,
 * as in a transformer block); checks y, mean, rstd, h and the later sum. `fused`: the program fused as the
 * CUDA build fuses it (for builds that do not fuse: the Metal emulator's); else the plain one, which buildCuda
 * fuses itself (and its shared-GEMM variant, whose shared layernorm has no folded add, does not).
 */
export function addLayernormCase(rng: Rng, name: string, rows: number[], D: number, weight: boolean, fused = false): OpCase {
  const { b, data, input } = caseGraph(rng, name);
  const x = [...rows, D];
  const a = input('a', x, -2, 3), r = input('r', x, -1, 1), r2 = input('r2', x, -1, 1);
  const w = weight ? input('w', [D], 0.5, 1.5) : -1, bias = weight ? input('bias', [D], -0.5, 0.5) : -1;
  const act = (n: string, shape: number[]) => b.value(`${name}.${n}`, 'f32', shape, 'activation');
  const h = act('h', x), y = act('y', x), mean = act('mean', rows), rstd = act('rstd', rows), next = act('next', x);
  b.node('binary', [a, r], [h], { fn: 'add' }, 'add');
  b.node('layernorm', [h, w, bias], [y, mean, rstd], { eps: 1e-5 }, 'ln');
  b.node('binary', [h, r2], [next], { fn: 'add' }, 'next');
  const plain = { name, batch: 1, graph: b.graph, inputs: [a, r, r2, ...(weight ? [w, bias] : [])], outputs: [] } as unknown as Program;
  // rule 5 renumbers nothing (it drops no value), so the checked ids hold in both forms
  const program = fuseProgram(plain, { addLayernorm: { maxD: WARP_D } });
  if (program.graph.nodes.length !== 2 || program.graph.nodes[0].attrs.add_in !== true) throw new Error(`internal: ${name}: the add is not folded into the layernorm`);
  return { program: fused ? program : plain, data, check: [y, mean, rstd, h, next] };
}

/**
 * The residual-gradient add folded into the layernorm_grad before it (fuse.ts rule 6 with CUDA's caps;
 * layernorm_cuda.ts layernormGradCuda): dx, dw, db = layernorm_grad(dy, x, w?, mean, rstd), then out = r + dx
 * (the gradient reaching the residual stream), and with `biasSum` its column sums (rule 7: a bias gradient);
 * checks out, dw, db (and the sums). `fused` as in addLayernormCase (rule 6 drops dx, so the checked ids are
 * looked up by name in the program returned).
 */
export function layernormGradAddCase(rng: Rng, name: string, rows: number[], D: number, weight: boolean, fused = false, biasSum = false, half?: 'bf16' | 'f16'): OpCase {
  const { b, data, input } = caseGraph(rng, name);
  const x = [...rows, D];
  const dy = input('dy', x, -1, 1), xv = input('x', x, -2, 2), w = weight ? input('w', [D], 0.5, 1.5) : -1;
  const mean = input('mean', rows, -0.2, 0.2), rstd = input('rstd', rows, 0.5, 2), r = input('r', x, -1, 1);
  const act = (n: string, shape: number[]) => b.value(`${name}.${n}`, 'f32', shape, 'activation');
  const dx = act('dx', x), dw = act('dw', [D]), db = act('db', [D]), out = act('out', x);
  b.node('layernorm_grad', [dy, xv, w, mean, rstd], [dx, dw, db], {}, 'ln');
  b.node('binary', [r, dx], [out], { fn: 'add' }, 'add');
  // rule 7: the bias gradient of the linear reading the residual stream, folded into the same kernel
  const dbias = biasSum ? act('dlinear_bias', [D]) : -1;
  if (biasSum) b.node('sum_to', [out], [dbias], { shape: [D], axes: rows.map((_, i) => i) }, 'bias_grad');
  // rule 11: the sum's 16-bit copy (what the next products read), stored by the same kernel: out rounded once from f32
  // (the reference rounds it from float64: equal unless the f32 rounding lands on a 16-bit midpoint; cuda_passes also
  // compares it bitwise with the kernel's own out)
  if (half) b.node('cast', [out], [b.value(`${name}.out_half`, half, x, 'activation')], { to: half }, 'cast');
  const plain = { name, batch: 1, graph: b.graph, inputs: [dy, xv, ...(weight ? [w] : []), mean, rstd, r], outputs: [] } as unknown as Program;
  const f = fuseProgram(plain, { addLayernorm: { maxD: WARP_D, halfOut: half !== undefined } });
  if (f.graph.nodes.length !== 1 || f.graph.nodes[0].attrs.add_out !== true || (f.graph.nodes[0].attrs.sum_out === true) !== biasSum ||
    f.graph.nodes[0].attrs.half_out !== half) throw new Error(`internal: ${name}: the add${biasSum ? ' and the bias sum are' : ' is'}${half ? ' (and the cast)' : ''} not folded into the layernorm_grad`);
  const program = fused ? f : plain;
  const id = (n: string) => program.graph.values.findIndex((v) => v.name === `${name}.${n}`);
  const fdata = new Map([...data].map(([k, v]) => [id(plain.graph.values[k].name.slice(name.length + 1)), v]));
  return { program, data: fdata, check: ['out', 'dw', 'db', ...(biasSum ? ['dlinear_bias'] : []), ...(half ? ['out_half'] : [])].map(id) };
}

/**
 * A convolution's bias gradient folded into the global-avgpool gradient after it (fuse.ts rule 9 with CUDA's caps;
 * codegen-cuda/avgpool_cuda.ts): dx = global_avgpool_grad(dy) over planes of x_shape, with `relu` masked by a separate
 * mask (rule 2's relu-grad: the mask where the forward's relu output was), then sum_to(dx) over N, H, W; checks dx and
 * the channel sums. Plane 0's mask is all negative and its dy infinite: the masked zeros add 0 (the kernel's count of
 * 0, never 0 * inf). `fused` as in addLayernormCase.
 */
export function poolGradSumsCase(rng: Rng, name: string, xs: number[], relu: boolean, fused = false): OpCase {
  const { b, data, input } = caseGraph(rng, name);
  const [N, C] = xs;
  const dy = input('dy', [N, C, 1, 1], -1, 1), mask = relu ? input('mask', xs, -1, 1) : -1;
  if (relu) {
    data.get(dy)![0] = Infinity;
    const m = data.get(mask)!;
    for (let i = 0; i < xs[2] * xs[3]; i++) m[i] = -Math.abs(m[i]) - 0.5;
  }
  const act = (n: string, shape: number[]) => b.value(`${name}.${n}`, 'f32', shape, 'activation');
  const g = act('g', xs), dx = relu ? act('dx', xs) : g, sums = act('dbias', [C]);
  b.node('global_avgpool_grad', [dy], [g], { x_shape: xs }, 'pool');
  if (relu) b.node('unary_grad', [g, mask], [dx], { fn: 'relu' }, 'relu');
  b.node('sum_to', [dx], [sums], { shape: [C], axes: [0, 2, 3] }, 'bias_grad');
  const plain = { name, batch: 1, graph: b.graph, inputs: [dy, ...(relu ? [mask] : [])], outputs: [] } as unknown as Program;
  const f = fuseProgram(plain, { poolGradRelu: { globalAvgpool: true, maxpool2x2: false }, poolGradBiasSum: true });
  if (f.graph.nodes.length !== 1 || f.graph.nodes[0].attrs.c_sums !== true || (f.graph.nodes[0].attrs.relu_grad === true) !== relu) {
    throw new Error(`internal: ${name}: the bias gradient is not folded into the pool gradient`);
  }
  const program = fused ? f : plain;
  const id = (n: string) => program.graph.values.findIndex((v) => v.name === `${name}.${n}`);
  const fdata = new Map([...data].map(([k, v]) => [id(plain.graph.values[k].name.slice(name.length + 1)), v]));
  return { program, data: fdata, check: [relu ? 'dx' : 'g', 'dbias'].map(id) };
}

/** poolGradSumsCase's shapes: masked planes over two chunks (the second guarded), one exact chunk, planes under a warp's span (32 threads), and unmasked ones on the wide kernel and on the shared one */
export function poolGradSumsCases(rng: Rng, fused = false): OpCase[] {
  const shapes: [string, number[], boolean][] = [['pool_sums_relu_47x47', [3, 5, 47, 47], true], ['pool_sums_relu_64x32', [2, 3, 64, 32], true],
    ['pool_sums_relu_5x7', [5, 7, 5, 7], true], ['pool_sums_wide_183x183', [2, 4, 183, 183], false], ['pool_sums_9x11', [3, 5, 9, 11], false]];
  if (countThreads(47 * 47) !== 256 || Math.ceil((47 * 47) / (256 * PER_THREAD)) !== 2 || (47 * 47) % (256 * PER_THREAD) === 0 || 64 * 32 !== 256 * PER_THREAD ||
    countThreads(35) !== 32 || numel([2, 4, 183, 183]) < MIN_WIDE || numel([3, 5, 9, 11]) >= MIN_WIDE) throw new Error('internal: the pool-sum cases miss a layout');
  return shapes.map(([name, xs, relu]) => poolGradSumsCase(rng, name, xs, relu, fused));
}

/**
 * A convolution's bias gradient folded into the input gradient of the next one (fuse.ts rule 9 with CUDA's caps, into
 * conv2d_grad_input; conv_cuda.ts: each row tile's column sums in the store, then a block per channel): g =
 * conv2d_grad_input(dy, w) (padding 1, `groups`), with `relu` masked by a separate mask (rule 2, in the store), then
 * sum_to over N, H, W; checks dx and the sums. `fused` as in addLayernormCase.
 */
export function convGradSumsCase(rng: Rng, name: string, xs: number[], ws: number[], relu: boolean, groups = 1, fused = false): OpCase {
  const { b, data, input } = caseGraph(rng, name);
  const dy = input('dy', [xs[0], ws[0], xs[2], xs[3]], -1, 1), w = input('w', ws, -0.5, 0.5), mask = relu ? input('mask', xs, -1, 1) : -1;
  const act = (n: string, shape: number[]) => b.value(`${name}.${n}`, 'f32', shape, 'activation');
  const g = act('g', xs), dx = relu ? act('dx', xs) : g, sums = act('dbias', [xs[1]]);
  b.node('conv2d_grad_input', [dy, w], [g], { stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups, x_shape: xs }, 'conv');
  if (relu) b.node('unary_grad', [g, mask], [dx], { fn: 'relu' }, 'relu');
  b.node('sum_to', [dx], [sums], { shape: [xs[1]], axes: [0, 2, 3] }, 'bias_grad');
  const plain = { name, batch: 1, graph: b.graph, inputs: [dy, w, ...(relu ? [mask] : [])], outputs: [] } as unknown as Program;
  const f = fuseProgram(plain, { poolGradRelu: { globalAvgpool: false, maxpool2x2: false, convGradInput: true }, convGradBiasSum: true });
  if (f.graph.nodes.length !== 1 || f.graph.nodes[0].attrs.c_sums !== true) throw new Error(`internal: ${name}: the bias gradient is not folded into the input gradient`);
  const program = fused ? f : plain;
  const id = (n: string) => program.graph.values.findIndex((v) => v.name === `${name}.${n}`);
  const fdata = new Map([...data].map(([k, v]) => [id(plain.graph.values[k].name.slice(name.length + 1)), v]));
  return { program, data: fdata, check: [relu ? 'dx' : 'g', 'dbias'].map(id) };
}

/**
 * convGradSumsCase's shapes: partial row and column tiles with the mask (64x64 tiles; 256x64 with MPSC_CONV_BM256=1), 32
 * columns without one, and two groups (conv_cuda.ts does not sum those: the sum_to kernel after the gradient)
 */
export function convGradSumsCases(rng: Rng): OpCase[] {
  const m = 3 * 13 * 11, t = convTiles(m, 40, 1, false, 24 * 9);
  if (t.BM !== 64 || t.BN !== 64 || m % 64 === 0 || convTiles(2 * 81, 20, 1, false, 108).BN !== 32) throw new Error('internal: the conv-gradient sum cases miss a tile shape');
  return [convGradSumsCase(rng, 'conv_grad_sums_relu', [3, 40, 13, 11], [24, 40, 3, 3], true),
    convGradSumsCase(rng, 'conv_grad_sums_plain', [2, 20, 9, 9], [12, 20, 3, 3], false),
    convGradSumsCase(rng, 'conv_grad_sums_groups', [2, 8, 7, 9], [6, 4, 3, 3], true, 2)];
}

/**
 * A global average pool folded into the conv2d before it (fuse.ts rule 10 with CUDA's caps; conv_cuda.ts: the row tiles'
 * column sums in the conv's store, then their sum in order): y = conv2d(x, w, b) (padding 1), with `relu` the relu
 * after it (its epilogue, rule 1), then global_avgpool; checks the conv's output and the pooled one. `fused` as in
 * addLayernormCase.
 */
export function convPoolCase(rng: Rng, name: string, xs: number[], ws: number[], relu: boolean, fused = false): OpCase {
  const { b, data, input } = caseGraph(rng, name);
  const x = input('x', xs, -1, 1), w = input('w', ws, -0.5, 0.5), bias = input('b', [ws[0]], -0.2, 0.2);
  const ys = [xs[0], ws[0], xs[2], xs[3]];
  const act = (n: string, shape: number[]) => b.value(`${name}.${n}`, 'f32', shape, 'activation');
  const y = act('y', ys), z = relu ? act('z', ys) : y, pooled = act('pooled', [xs[0], ws[0], 1, 1]);
  b.node('conv2d', [x, w, bias], [y], { stride: [1, 1], padding: [1, 1], dilation: [1, 1], groups: 1 }, 'conv');
  if (relu) b.node('unary', [y], [z], { fn: 'relu' }, 'relu');
  b.node('global_avgpool', [z], [pooled], {}, 'pool');
  const plain = { name, batch: 1, graph: b.graph, inputs: [x, w, bias], outputs: [] } as unknown as Program;
  const f = fuseProgram(plain, { epilogue: { ops: ['conv2d'], fns: ['relu'], gradReaders: true }, convPool: true });
  if (f.graph.nodes.length !== 1 || f.graph.nodes[0].attrs.pool_out !== true) throw new Error(`internal: ${name}: the pool is not folded into the conv`);
  const program = fused ? f : plain;
  const id = (n: string) => program.graph.values.findIndex((v) => v.name === `${name}.${n}`);
  const fdata = new Map([...data].map(([k, v]) => [id(plain.graph.values[k].name.slice(name.length + 1)), v]));
  return { program, data: fdata, check: [relu ? 'z' : 'y', 'pooled'].map(id) };
}

/**
 * convPoolCase's shapes: 64-row tiles with a partial column tile, 128 x 128 tiles (the seed CNN's conv 2's), no
 * epilogue, and planes of 255 pixels (not a multiple of the row tile: the conv, then the shared pool kernel)
 */
export function convPoolCases(rng: Rng): OpCase[] {
  const shapes: [string, number[], number[], boolean][] = [['conv_pool_64x64_n70', [3, 5, 16, 24], [70, 5, 3, 3], true],
    ['conv_pool_128x128', [2, 3, 96, 96], [128, 3, 3, 3], true], ['conv_pool_plain', [2, 6, 8, 16], [33, 6, 3, 3], false],
    ['conv_pool_unfolded_255', [2, 4, 15, 17], [9, 4, 3, 3], true]];
  const tiles = shapes.map(([, x, w]) => convTiles(x[0] * x[2] * x[3], w[0], 1, false, w[1] * 9));
  const fold = shapes.map(([, x], i) => (x[2] * x[3]) % tiles[i].BM === 0);
  if (tiles[0].BM !== 64 || 70 % tiles[0].BN === 0 || tiles[1].BM !== 128 || tiles[1].BN !== 128 || fold.join() !== 'true,true,true,false') {
    throw new Error('internal: the conv-pool cases miss a tile shape');
  }
  return shapes.map(([name, x, w, relu]) => convPoolCase(rng, name, x, w, relu));
}

/**
 * A training step's loss end: cross_entropy, accuracy, then cross_entropy_grad of the same logits and labels
 * (codegen-cuda/class_rows.ts lseConsumer: the gradient reads the loss kernel's per-row log-sum-exp from the
 * scratch region), over R rows of C with label smoothing `ls` and ignore_index `ignore` when given; `fused`:
 * the gradient right after the loss, accuracy last (class_rows.ts fusedGrad: one kernel writes the row terms
 * and the gradient). `half`: the logits cast to that 16-bit type first and the gradient stored in it (a 16-bit train
 * step's head), checked widened by a cast back to f32 (so caseTolerance allows one unit of the type); with C a multiple
 * of 8 and `fused`, class_rows.ts's vector path.
 */
export function lossAndGradCase(rng: Rng, name: string, R: number, C: number, ls: number, ignore?: number, fused = false, half?: 'bf16' | 'f16'): OpCase {
  const b = new GraphBuilder();
  const data = new Map<number, Float64Array>();
  const input = b.value(`${name}.logits`, 'f32', [R, C], 'input');
  data.set(input, Float64Array.from(randomTensor([R, C], rng, -3, 3), (x) => Math.fround(x)));
  const label = b.value(`${name}.label`, 'i32', [R], 'input');
  data.set(label, randomInts([R], C, rng).map((l, i) => (ignore !== undefined && i % 3 === 1 ? ignore : l)));
  const ii: Record<string, number> = ignore === undefined ? {} : { ignore_index: ignore };
  const out = (n: string, shape: number[], dtype: 'f32' | 'bf16' | 'f16' = 'f32') => b.value(`${name}.${n}`, dtype, shape, 'activation');
  const logits = half ? out('logits16', [R, C], half) : input;
  if (half) b.node('cast', [input], [logits], { to: half }, 'cast');
  const loss = out('loss', []), acc = out('acc', []), dlogits = out(half ? 'dlogits16' : 'dlogits', [R, C], half);
  b.node('cross_entropy', [logits, label], [loss], { label_smoothing: ls, ...ii }, 'loss');
  if (!fused) b.node('accuracy', [logits, label], [acc], ii, 'accuracy');
  b.node('cross_entropy_grad', [logits, label], [dlogits], { label_smoothing: ls, ...ii }, 'loss');
  if (fused) b.node('accuracy', [logits, label], [acc], ii, 'accuracy');
  const wide = half ? out('dlogits', [R, C]) : dlogits;
  if (half) b.node('cast', [dlogits], [wide], { to: 'f32' }, 'cast');
  const program = { name, batch: R, graph: b.graph, inputs: [input, label], outputs: [] } as unknown as Program;
  return { program, data, check: [loss, acc, wide] };
}

/**
 * A position embedding and its gradient (codegen-cuda/embedding_cuda.ts: with a `positions` node's output
 * for ids, the gather reads w[t] without them and the gradient sums dy over the sequences; rows of w past
 * T get zero gradients): tokens [N, T] -> positions -> embedding of w [V, D], and embedding_grad of dy.
 */
export function positionEmbeddingCase(name: string, N: number, T: number, V: number, D: number): OpCase {
  const rng = makeRng(N * 1000 + T);
  const b = new GraphBuilder();
  const data = new Map<number, Float64Array>();
  const inputs: number[] = [];
  const input = (n: string, dtype: 'f32' | 'i32', shape: number[], values: Float64Array) => {
    const id = b.value(n, dtype, shape, 'input');
    data.set(id, dtype === 'f32' ? Float64Array.from(values, (x) => Math.fround(x)) : values);
    inputs.push(id);
    return id;
  };
  const tokens = input(`${name}.tokens`, 'i32', [N, T], randomInts([N, T], V, rng));
  const w = input(`${name}.w`, 'f32', [V, D], randomTensor([V, D], rng, -1, 1));
  const dy = input(`${name}.dy`, 'f32', [N, T, D], randomTensor([N, T, D], rng, -1, 1));
  const pos = b.value(`${name}.pos`, 'i32', [N, T], 'activation');
  b.node('positions', [tokens], [pos], {}, 'positions');
  const y = b.value(`${name}.y`, 'f32', [N, T, D], 'activation');
  b.node('embedding', [pos, w], [y], {}, 'pos');
  const dw = b.value(`${name}.dw`, 'f32', [V, D], 'activation');
  b.node('embedding_grad', [dy, pos], [dw], { w_shape: [V, D] }, 'pos');
  const program = { name, batch: N, graph: b.graph, inputs, outputs: [] } as unknown as Program;
  return { program, data, check: [y, dw] };
}

/**
 * max-norm relative tolerance of a flash attention case by its operand type: the kernels round P
 * and dS to 16 bits as the A operand of the next tensor-core product (attention_cuda.ts, as
 * FlashAttention-2 does), about 2^-9 (bf16) / 2^-12 (fp16) relative per term; the reference rounds
 * only q, k, v, dO and o (the casts). An indexing or fragment-layout error is O(1).
 */
export const FLASH_TOL: Record<HalfDType, number> = { bf16: 2e-2, f16: 4e-3 };
const flashTol = new WeakMap<OpCase, number>();
/** the tolerance of a flash attention case (cudaAttentionCases), or null for any other case */
export function flashTolerance(c: OpCase): number | null {
  return flashTol.get(c) ?? null;
}

/**
 * 16-bit attention and attention_grad (q, k, v, dO and o through `cast` nodes, as the precision pass
 * writes them) at the shapes of the CUDA flash kernels (attention_cuda.ts): T and S not multiples of
 * the 64-row tile, several tiles, heads of 1 and 16 per case, head widths 16 / 32 / 48 / 64, causal with
 * S = T and S > T, non-causal with S > T, bf16 and fp16; and a head width the flash kernels refuse (8:
 * the shared kernel with 16-bit operands). The backward's o and lse are the float64 reference
 * forward's (of the rounded q, k, v). Then fp32 attention at the fp32 flash kernels' shapes
 * (attention_tf32x3.ts, attention_f32.ts), within the usual 1e-4.
 */
export function cudaAttentionCases(): OpCase[] {
  const rng = makeRng(20261205);
  const f = (shape: number[], lo = -1, hi = 1) => ({ shape, data: Float64Array.from(randomTensor(shape, rng, lo, hi), (x) => Math.fround(x)) });
  const out: OpCase[] = [];
  const add = (name: string, op: 'attention' | 'attention_grad' | 'attention_qkv' | 'attention_qkv_grad', inputs: { shape: number[]; data: Float64Array }[], outShapes: number[][], attrs: Record<string, number | boolean>, to: HalfDType) => {
    const c = castCase(name, op, inputs, outShapes, attrs, to);
    const D = attrs.heads === undefined ? inputs[1].shape[3] : inputs[op === 'attention_qkv' ? 0 : 1].shape[2] / 3 / Number(attrs.heads);
    if (FLASH_HEAD_DIMS.includes(D)) flashTol.set(c, FLASH_TOL[to]);
    out.push(c);
  };
  const round = (to: HalfDType, x: { shape: number[]; data: Float64Array }) => ({ shape: x.shape, data: x.data.map((v) => roundToHalf(v, to)) });
  for (const [N, H, T, S, D, causal, to] of [
    [1, 1, 37, 37, 64, true, 'bf16'], [1, 16, 21, 21, 64, false, 'f16'], [2, 3, 130, 130, 64, true, 'bf16'], [1, 2, 128, 128, 64, true, 'f16'],
    [1, 2, 70, 150, 32, false, 'bf16'], [1, 2, 70, 150, 16, true, 'f16'], [2, 1, 100, 100, 48, true, 'bf16'], [1, 1, 19, 19, 8, true, 'bf16'],
  ] as [number, number, number, number, number, boolean, HalfDType][]) {
    const tag = `flash_${N}x${H}_t${T}_s${S}_d${D}${causal ? '_causal' : ''}_${to}`;
    const q = f([N, H, T, D], -2, 2), k = f([N, H, S, D], -2, 2), v = f([N, H, S, D]);
    const attrs = { causal, scale: 1 / Math.sqrt(D) };
    const outs = [[N, H, T, D], [N, H, T]];
    add(`${tag}_fwd`, 'attention', [q, k, v], outs, attrs, to);
    // the reference forward of the rounded operands gives the backward's o and lse
    const fwd = opCase(`${tag}_ref`, 'attention', [round(to, q), round(to, k), round(to, v)], outs, attrs);
    const r = reference(fwd, { lr: 0, t: 1, seed: 0, counter: 0 });
    const [o, lse] = fwd.check.map((id) => ({ shape: fwd.program.graph.values[id].shape, data: r.get(id)! }));
    add(`${tag}_grad`, 'attention_grad', [f([N, H, T, D]), q, k, v, o, lse], [[N, H, T, D], [N, H, S, D], [N, H, S, D]], attrs, to);
  }
  // fp32 (attention_tf32x3.ts: 64-row blocks, 32 / 16-row tiles; attention_f32.ts with MPSC_CUDA_ATTN_TF32X3=0: 32-row tiles;
  // 1e-4): several tiles with a short last one, causal with S > T, each head width
  for (const [N, H, T, S, D, causal] of [
    [2, 3, 70, 70, 64, true], [1, 2, 45, 100, 32, true], [1, 3, 33, 65, 16, false], [2, 1, 64, 64, 48, false],
  ] as [number, number, number, number, number, boolean][]) {
    const tag = `flash_f32_${N}x${H}_t${T}_s${S}_d${D}${causal ? '_causal' : ''}`;
    const q = f([N, H, T, D], -2, 2), k = f([N, H, S, D], -2, 2), v = f([N, H, S, D]);
    const attrs = { causal, scale: 1 / Math.sqrt(D) };
    const fwd = opCase(`${tag}_fwd`, 'attention', [q, k, v], [[N, H, T, D], [N, H, T]], attrs);
    out.push(fwd);
    const r = reference(fwd, { lr: 0, t: 1, seed: 0, counter: 0 });
    const [o, lse] = fwd.check.map((id) => ({ shape: fwd.program.graph.values[id].shape, data: r.get(id)! }));
    out.push(opCase(`${tag}_grad`, 'attention_grad', [f([N, H, T, D]), q, k, v, o, lse], [[N, H, T, D], [N, H, S, D], [N, H, S, D]], attrs));
  }
  // the packed form (attention_qkv: q, k, v read in place from one [N,T,3C] projection, o [N,T,C], one
  // d(qkv)) on the same kernels: 16-bit (tensor cores) and fp32, heads 1 to 3, T not a tile multiple
  for (const [N, H, T, D, causal, to] of [
    [2, 3, 130, 64, true, 'bf16'], [1, 2, 70, 32, false, 'f16'], [2, 1, 37, 16, true, 'f16'], [1, 2, 45, 16, true, 'f32'], [2, 3, 70, 64, false, 'f32'],
    // causal D = 64: gpt_char's merged dK/dV + dQ launch (attention_tf32x3.ts mergeBackward)
    [2, 2, 70, 64, true, 'f32'],
  ] as [number, number, number, number, boolean, HalfDType | 'f32'][]) {
    const tag = `flash_qkv_${N}x${H}_t${T}_d${D}${causal ? '_causal' : ''}_${to}`;
    const C = H * D, qkv = f([N, T, 3 * C], -2, 2);
    const attrs = { heads: H, causal, scale: 1 / Math.sqrt(D) };
    const outs = [[N, T, C], [N, H, T]];
    const fwd = opCase(to === 'f32' ? `${tag}_fwd` : `${tag}_ref`, 'attention_qkv', [to === 'f32' ? qkv : round(to, qkv)], outs, attrs);
    const r = reference(fwd, { lr: 0, t: 1, seed: 0, counter: 0 });
    const [o, lse] = fwd.check.map((id) => ({ shape: fwd.program.graph.values[id].shape, data: r.get(id)! }));
    if (to === 'f32') {
      out.push(fwd);
      out.push(opCase(`${tag}_grad`, 'attention_qkv_grad', [f([N, T, C]), qkv, o, lse], [[N, T, 3 * C]], attrs));
    } else {
      add(`${tag}_fwd`, 'attention_qkv', [qkv], outs, attrs, to);
      add(`${tag}_grad`, 'attention_qkv_grad', [f([N, T, C]), qkv, o, lse], [[N, T, 3 * C]], attrs, to);
    }
  }
  // fuse.ts rule 15: the packed backward storing a 16-bit dqkv (as a 16-bit step stores it) with its column sums (`sum_out`:
  // the in_proj bias gradient; each backward block's partial row, then blockSumsFinish); T past a tile multiple, 2 batches;
  // and a head width the flash kernels refuse (8: the shared kernel, then the sum_to kernel over dqkv)
  for (const [N, H, T, D, causal, to] of [[2, 3, 130, 64, true, 'bf16'], [1, 2, 70, 32, false, 'f16'], [2, 2, 21, 8, true, 'bf16']] as [number, number, number, number, boolean, HalfDType][]) {
    const tag = `flash_qkv_sum_${N}x${H}_t${T}_d${D}${causal ? '_causal' : ''}_${to}`;
    const C = H * D, qkv = f([N, T, 3 * C], -2, 2), dO = f([N, T, C]);
    const attrs = { heads: H, causal, scale: 1 / Math.sqrt(D) };
    const fwd = opCase(`${tag}_ref`, 'attention_qkv', [round(to, qkv)], [[N, T, C], [N, H, T]], attrs);
    const r = reference(fwd, { lr: 0, t: 1, seed: 0, counter: 0 });
    const [o, lse] = fwd.check.map((id) => ({ shape: fwd.program.graph.values[id].shape, data: r.get(id)! }));
    const b = new GraphBuilder(), data = new Map<number, Float64Array>();
    const input = (nm: string, x: { shape: number[]; data: Float64Array }) => {
      const id = b.value(`${tag}.${nm}`, 'f32', x.shape, 'input');
      data.set(id, x.data);
      return id;
    };
    const half = (nm: string, x: { shape: number[]; data: Float64Array }) => {
      const id = b.value(`${tag}.${nm}.${to}`, to, x.shape, 'activation');
      b.node('cast', [input(nm, x)], [id], { to });
      return id;
    };
    const ins = [half('do', dO), half('qkv', qkv), half('o', o), input('lse', lse)];
    const dqkv = b.value(`${tag}.dqkv`, to, [N, T, 3 * C], 'activation'), sum = b.value(`${tag}.dqkv.sum`, 'f32', [3 * C], 'activation');
    b.node('attention_qkv_grad', ins, [dqkv, sum], { ...attrs, sum_out: true }, 'attn');
    const wide = b.value(`${tag}.dqkv.f32`, 'f32', [N, T, 3 * C], 'activation');
    b.node('cast', [dqkv], [wide], { to: 'f32' });
    const program = { name: `${tag}_grad`, batch: 1, graph: b.graph, inputs: [...data.keys()], outputs: [] } as unknown as Program;
    const c: OpCase = { program, data, check: [wide, sum] };
    if (FLASH_HEAD_DIMS.includes(D)) flashTol.set(c, FLASH_TOL[to]);
    out.push(c);
  }
  return out;
}

/** the batches of cuda_check's parity (and bench/tf32_margin.ts): two seeded random batches, alternating */
export function parityBatches(model: CheckedModel, p: Program, n: number): Batch[] {
  const rng = makeRng(11);
  const classes = model.numClasses ?? 10;
  const two = [0, 1].map(() => p.inputs.map((id) => {
    const v = p.graph.values[id];
    const k = numel(v.shape);
    if (v.dtype === 'i32') return Int32Array.from({ length: k }, () => Math.min(classes - 1, Math.floor(rng() * classes)));
    return Float32Array.from({ length: k }, () => 2 * rng() - 1);
  }));
  return Array.from({ length: n }, (_, s) => two[s % 2]);
}

/** one case's result against the float64 reference: ok, its worst max-norm relative error, and what failed (each naming the case) */
export interface CaseVerdict { name: string; ok: boolean; worst: number; problems: string[] }

/**
 * Judges each case's values from runCases (`got`, in case order) against the float64 reference
 * interpreter within `tol(c)`: an error string from the runner, a checked value missing from its
 * map, a reference that throws or a NaN error fail that case by name; the others go on. `refs`: the
 * references already computed (reference(cases[i], scalars) at index i), for a caller that judges the
 * same cases several times (test/cuda_cases.test.ts: the interpreter over all cases is most of its time).
 */
export function judgeCases(cases: OpCase[], got: (Map<number, Float64Array> | string)[], scalars: StepScalars, tol: (c: OpCase) => number,
  refs?: readonly Map<number, Float64Array>[]): CaseVerdict[] {
  return cases.map((c, i) => {
    const name = c.program.name;
    const r = got[i];
    if (r === undefined) return { name, ok: false, worst: Infinity, problems: [`${name}: no result (${got.length} results for ${cases.length} cases)`] };
    if (typeof r === 'string') return { name, ok: false, worst: Infinity, problems: [`${name}: ${r}`] };
    try {
      const ref = refs?.[i] ?? reference(c, scalars);
      const problems: string[] = [];
      let worst = 0;
      for (const id of c.check) {
        const v = c.program.graph.values[id].name, x = r.get(id), y = ref.get(id);
        if (!x || !y) { problems.push(`${name} value ${v}: ${x ? 'the reference' : 'the run'} has no value`); worst = Infinity; continue; }
        const e = relError(x, y);
        if (!(e < tol(c))) problems.push(`${name} value ${v}: rel error ${e} (tolerance ${tol(c)})`);
        worst = Math.max(worst, Number.isNaN(e) ? Infinity : e);
      }
      return { name, ok: problems.length === 0, worst, problems };
    } catch (e) {
      return { name, ok: false, worst: Infinity, problems: [`${name}: ${(e as Error).message.split('\n')[0]}`] };
    }
  });
}

/**
 * conv2d_grad_input where the input width W is a multiple of 4 (conv_cuda.ts Side.rowVec4: by default (MPSC_CONV_GI_VEC16=0: off)
 * its dy gather in runs of 4 rows, 16-byte copies where a run is inside the image and aligned, 4-byte copies at the
 * edges): padding 1 over 7 x 12 planes (a partial 64-row tile: M = 252), padding 0 (OW = 6: a run's alignment changes
 * with the row), dilation 2 with padding 2, 2 groups over 5 x 4 planes (K = 27, one k step partly past K), and the bias
 * gradient folded in with the relu mask over 10 x 16 planes (M = 320: a partial 256-row tile with MPSC_CONV_BM256=1).
 */
export function giVec16Cases(): OpCase[] {
  const rng = makeRng(20261204);
  const f = (shape: number[]) => ({ shape, data: randomTensor(shape, rng, -1, 1) });
  const gi = (name: string, x: number[], w: number[], pad: number, dil: number, groups: number) => {
    const o = (n: number) => n + 2 * pad - dil * 2;
    const attrs = { stride: [1, 1], padding: [pad, pad], dilation: [dil, dil], groups, x_shape: x };
    return opCase(name, 'conv2d_grad_input', [f([x[0], w[0], o(x[2]), o(x[3])]), f(w)], [x], attrs);
  };
  return [gi('conv_gi_vec16_pad1', [3, 5, 7, 12], [9, 5, 3, 3], 1, 1, 1), gi('conv_gi_vec16_pad0', [2, 4, 9, 8], [5, 4, 3, 3], 0, 1, 1),
    gi('conv_gi_vec16_dilated', [2, 6, 9, 8], [7, 6, 3, 3], 2, 2, 1), gi('conv_gi_vec16_groups', [1, 4, 5, 4], [6, 2, 3, 3], 1, 1, 2),
    convGradSumsCase(rng, 'conv_gi_vec16_sums_relu', [2, 40, 10, 16], [12, 40, 3, 3], true)];
}
