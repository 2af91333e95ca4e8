/**
 * The CUDA backend's launch-count passes and reduction shapes, on the generated plans (no nvcc,
 * no GPU): reshape views of program inputs (compiler/codegen-cuda/views.ts), merged launches of
 * independent element-wise kernels (merge.ts), the row chunks of layernorm_grad (reduce_cuda.ts),
 * the embedding_grad sort and sums (embedding_cuda.ts), the class losses' row kernels (class_rows.ts). The reduction lowerings' bodies are written against the
 * kernel language's built-ins, so they also run in the Metal emulator (MSL dialect) against the
 * float64 reference here; on the GPU machine bench/cuda_check.sh runs them as CUDA (kernel cases,
 * parity, merged vs unmerged bitwise).
 */
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkFile } from '../compiler/check/index.js';
import { buildPrograms, fuseForBackend } from '../compiler/ir/programs.js';
import { cudaFusions } from '../compiler/codegen-cuda/fusions.js';
import { programsOf } from '../compiler/ir/graph.js';
import type { ProgramSet } from '../compiler/ir/graph.js';
import { buildCuda, generateCudaModel, sharedAttentionThenSums } from '../compiler/codegen-cuda/index.js';
import { planKernels, planProblems, type KernelNodePlan } from '../compiler/codegen-cuda/plan.js';
import { columnChunks, lowerLayernormGradCuda, lowerSumToCuda } from '../compiler/codegen-cuda/reduce_cuda.js';
import { lowerEmbeddingCuda, lowerEmbeddingGradCuda } from '../compiler/codegen-cuda/embedding_cuda.js';
import { WARP_D, lowerLayernormCuda } from '../compiler/codegen-cuda/layernorm_cuda.js';
import { addLayernormCase, classRowCases, cudaAttentionCases, gradForwardCases, gradSumCases, layernormGradAddCase, halfLongCases, layernormPair, lossAndGradCase, poolGradSumsCases, positionEmbeddingCase, wideElementwiseCases } from './cuda_cases.js';
import { wideOr } from '../compiler/codegen-cuda/wide_ew_cuda.js';
import { lowerAvgpoolGradCuda } from '../compiler/codegen-cuda/avgpool_cuda.js';
import { ONE_BLOCK_ROWS, WARP_C, lowerClassForwardCuda, lowerCrossEntropyGradCuda } from '../compiler/codegen-cuda/class_rows.js';
import { GPU_KERNELS, type GpuLowering } from '../compiler/kernels/registry.js';
import { makeRng, randomInts, randomTensor, relError } from '../compiler/reference/fixtures.js';
import { compileEmu, opCase, reference, runCases, type OpCase } from './metal_harness.js';
import { allOpCases, caseTolerance, halfIoCase, independentUpdatesCase } from './metal_cases.js';
import { MAX_ARGS, mergeLaunches } from '../compiler/codegen-cuda/merge.js';
import { MSL } from '../compiler/codegen-metal/msl_dialect.js';
import { librarySource } from '../compiler/codegen-metal/library.js';
import { roundToHalf } from '../compiler/reference/half.js';
import { withEnv } from './env_helpers.js';
import type { HalfDType } from '../compiler/ir/graph.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');

function programs(file: string): ProgramSet {
  const model = checkFile(path.join(ROOT, file));
  return buildPrograms(model, { batch: model.train.batch });
}

const ranges = (n: KernelNodePlan) => n.args.map((a) => ({ lo: a.offset, hi: a.offset + a.bytes, w: a.access !== 'r' }));

/** every case's checked values within 1e-5 of the float64 reference (a 16-bit output checked widened: one unit of its type more, caseTolerance) */
function expectReference(cases: OpCase[], got: ReturnType<typeof runCases>, scalars: Parameters<typeof reference>[1]): void {
  cases.forEach((c, i) => {
    const r = got[i];
    if (typeof r === 'string') throw new Error(`${c.program.name}: ${r}`);
    const ref = reference(c, scalars);
    for (const id of c.check) expect(relError(r.get(id)!, ref.get(id)!), `${c.program.name} ${c.program.graph.values[id].name}`).toBeLessThan(caseTolerance(c, 1e-5, id));
  });
}

describe('merged launches (merge.ts) and input views (views.ts)', () => {
  const ps = programs('specs/mnist_mlp.model');
  const merged = generateCudaModel(ps), single = buildCuda(programsOf(ps), ps.model, { merge: false });
  const train = (a: typeof merged) => a.plan.programs.find((p) => p.name === 'train_step')!;

  it('the flatten of the image batch is a view of the upload image: no reshape kernel, the first linear reads the input set', () => {
    for (const a of [merged, single]) {
      expect(train(a).nodes.some((n) => n.op === 'reshape')).toBe(false);
      // the first node is the 784 -> 256 linear (a cuBLASLt call: its B operand is x), its fallback kernel reads x too
      const first = train(a).nodes[0];
      expect(first.op).toBe('linear');
      if (first.kind === 'cublaslt') expect(first.b.perSet).toBe(true);
      expect(planKernels(train(a))[0].args.find((x) => x.name === 'x')!.perSet).toBe(true);
      expect(planProblems(a.plan)).toEqual([]);
    }
  });

  it("the four Adam updates take one launch (the bias gradients come from the weight gradients' cuBLASLt calls: fuse.ts rule 8), each kernel's buffers in order", () => {
    const one = planKernels(train(single)).filter((n) => n.op === 'adam_update');
    expect(one).toHaveLength(4);
    const launches = planKernels(train(merged)).filter((n) => one.some((u) => u.args.every((x) => n.args.some((y) => y.value === x.value))));
    expect(launches).toHaveLength(1);
    expect(launches.map((n) => n.op)).toEqual(['adam_update']);
    for (const u of one) {
      const names = u.args.map((x) => x.value).join('|');
      expect(launches.some((n) => n.args.map((x) => x.value).join('|').includes(names)), names).toBe(true);
    }
    expect(train(merged).kernels).toBe(train(single).kernels - 3);
  });

  // gpt_tiny (53 parameter tensors) and lenet, whose merged runs include chunked sums' second kernels (the GPT's bias
  // sums now come from the weight gradients' BGRADB calls: fuse.ts rule 8)
  let withScratch = 0;
  for (const spec of ['bench/gpt_tiny_b32_t64.model', 'specs/lenet.model']) it(`${spec}: kernels of one launch touch no byte another of the launch writes; the kernel count is the merged runs fewer`, () => {
    const gpt = programs(spec);
    const a = generateCudaModel(gpt), b = buildCuda(programsOf(gpt), gpt.model, { merge: false });
    const t = a.plan.programs.find((p) => p.name === 'train_step')!, u = b.plan.programs.find((p) => p.name === 'train_step')!;
    // one launch for the optimizer updates of all parameter tensors (53 in the GPT)
    if (spec.includes('gpt')) {
      expect(planKernels(u).filter((n) => n.op === 'adam_update')).toHaveLength(53);
      expect(planKernels(t).filter((n) => n.op === 'adam_update')).toHaveLength(1);
    }
    expect(planProblems(a.plan)).toEqual([]);
    const kernels = new Map(a.lowered.flatMap((l) => l.kernels).map((k) => [k.name, k]));
    for (const n of planKernels(t)) {
      const k = kernels.get(n.kernel)!;
      expect(k.args.length).toBeLessThanOrEqual(MAX_ARGS);
      const segs = [...k.body.matchAll(/tgid\.x < (\d+)u/g)].map((m) => Number(m[1]));
      if (!segs.length) continue;
      // segments cover the grid in order, and their kernels' byte ranges do not conflict
      expect(segs[segs.length - 1]).toBe(n.grid[0]);
      expect([...segs].sort((x, y) => x - y)).toEqual(segs);
      const parts = [...k.body.matchAll(/const uint mpsc_gx/g)].length;
      expect(parts).toBe(segs.length);
      // at most one segment reads the scratch region (a chunked sum's second kernel), and then the launch binds it
      const scratchSegments = k.body.split(/else if \(tgid\.x </).filter((seg) => seg.includes('mpsc_scratch')).length;
      expect(scratchSegments).toBeLessThanOrEqual(1);
      expect(Boolean(n.scratch)).toBe(scratchSegments === 1);
    }
    // every merged run replaces at least two of the unmerged kernels; in lenet some take a chunked sum's second kernel
    const mergedNodes = planKernels(t).filter((n) => kernels.get(n.kernel)!.body.includes('mpsc_gx'));
    withScratch += mergedNodes.filter((n) => n.scratch).length;
    if (spec.includes('lenet')) expect(withScratch).toBeGreaterThan(0);
    expect(u.kernels - t.kernels).toBeGreaterThanOrEqual(mergedNodes.length);
    // (lenet's merged runs hold an in-place relu gradient, whose read and write of the same range are one
    // kernel's: the byte check below cannot tell kernels of a launch apart, so it runs on the GPT only)
    if (spec.includes('gpt')) for (const n of mergedNodes) {
      const writes = ranges(n).filter((r) => r.w);
      // a written range overlaps no other argument's range (the merged kernels are independent)
      for (const w of writes) expect(ranges(n).filter((r) => r !== w && r.lo < w.hi && w.lo < r.hi && !(r.lo === w.lo && r.hi === w.hi && r.w))).toEqual([]);
    }
  });

  it('a dependent element-wise chain stays separate launches', () => {
    const gpt = programs('bench/gpt_tiny_b32_t64.model');
    const a = generateCudaModel(gpt);
    const t = a.plan.programs.find((p) => p.name === 'train_step')!;
    const kernels = new Map(a.lowered.flatMap((l) => l.kernels).map((k) => [k.name, k]));
    // the token gather, the positions and the position gather (which reads w[t] without the positions:
    // embedding_cuda.ts) are one launch; their sum (another element-wise kernel) reads the gathers' outputs, so
    // the launch that writes them is not the one that reads them
    const ks = planKernels(t);
    const at = ks.findIndex((n) => n.args.some((x) => x.access === 'w' && x.value === 'tok.out'));
    expect(at).toBe(0);
    expect(kernels.get(ks[at].kernel)!.label).toMatch(/^3 element-wise kernels in one launch \(embedding, positions;/);
    expect(ks[at].args.some((x) => x.access === 'w' && x.value === 'pos.out')).toBe(true);
    const reader = ks.findIndex((n) => n.args.some((x) => x.access === 'r' && x.value === 'tok.out'));
    expect(reader).toBeGreaterThan(at);
  });
});

describe('column sums (sum_to, layernorm_grad), embedding_grad and the class losses (reduce_cuda.ts, embedding_cuda.ts, class_rows.ts)', () => {
  it('row chunks cover the rows exactly, hold at least 64 rows when there are several, and fill the GPU', () => {
    for (const [rows, D] of [[16384, 384], [2048, 128], [999, 45], [1000, 70], [12, 10], [64 * 256, 768]]) {
      const { S, chunk } = columnChunks(rows, D);
      expect(S * chunk).toBeGreaterThanOrEqual(rows);
      expect((S - 1) * chunk).toBeLessThan(rows);
      if (S > 1) expect(chunk).toBeGreaterThanOrEqual(64);
      expect(S * Math.ceil(D / 32)).toBeLessThanOrEqual(528 + Math.ceil(D / 32));
    }
    expect(columnChunks(12, 10)).toEqual({ S: 1, chunk: 12 });
    // 256 column tiles already give every SM a block: one chunk, no second kernel
    expect(columnChunks(1024, 8192)).toEqual({ S: 1, chunk: 1024 });
    expect(columnChunks(16384, 384).S).toBe(44);
  });

  it("a GPT's layernorm gradients take the scratch region; its token embedding gradient sorts the ids then takes a block per vocabulary row, its position embedding's sums over the sequences; its loss a warp per row", () => {
    const gpt = programs('bench/gpt_tiny_b32_t64.model');
    // (one launch per kernel: merge.ts puts the chunk-sum kernels into the element-wise launch after them)
    const a = buildCuda(programsOf(gpt), gpt.model, { merge: false });
    const ks = a.lowered.flatMap((l) => l.kernels);
    const ln = ks.filter((k) => k.op === 'layernorm_grad');
    // 9 layernorms: dx with the blocks' weight / bias partial sums (a warp per row, several rows per warp), their sum
    expect(ln).toHaveLength(18);
    expect(ln.filter((k) => k.scratch)).toHaveLength(18);
    expect(ln.filter((k) => / rows? per warp, \d+ blocks\]$/.test(k.label))).toHaveLength(9);
    expect(a.plan.scratch.bytes).toBeGreaterThanOrEqual(Math.max(...ln.map((k) => k.scratch ?? 0)));
    // the train step's 9 forward layernorms each with the residual add before it folded in (fuse.ts rule 5), no
    // recomputed copies (its planned peak is far below fusions.ts's 4 GiB); the 8 residual-gradient adds of the
    // backward folded into the layernorm_grad before each (rule 6; ln_f's has none): no binary kernel left
    const train = a.lowered.find((l) => l.program.name === 'train_step')!.kernels;
    const lnFwd = train.filter((k) => k.op === 'layernorm');
    expect(lnFwd).toHaveLength(9);
    expect(lnFwd.every((k) => k.label.endsWith('[a warp per row, the residual add folded in]'))).toBe(true);
    expect(train.filter((k) => k.op === 'layernorm_grad' && k.label.includes('[dx + the residual gradient, '))).toHaveLength(8);
    expect(train.filter((k) => k.op === 'binary')).toHaveLength(0);
    const emb = ks.filter((k) => k.op === 'embedding_grad');
    // the position table's (ids = positions): a sum over the 32 sequences, one thread per element of [64, 128];
    // the token table's over 2048 ids (32 x 64): a sort of 16 blocks of 128, then a block per row of the 65 tokens;
    // scratch: slot -> position and id (2 x 2048), each row's run (2 x 65)
    expect(emb.map((k) => [k.groups[0], k.tgsize[0] * k.tgsize[1]])).toEqual([[32, 256], [16, 1024], [65, 128]]);
    expect(emb.map((k) => k.scratch ?? 0)).toEqual([0, ...[65, 65].map((V) => (2 * 2048 + 2 * V) * 4)]);
    expect(emb.every((k) => !/atomic/.test(k.body))).toBe(true);
    // cross_entropy over 2048 rows of 65 (train_step, then eval): 256 blocks of 8 warps writing row terms, then one
    // block's mean; in train_step the grad right after the loss: the row-terms kernel writes it (class_rows.ts fusedGrad)
    const ce = ks.filter((k) => k.op === 'cross_entropy' || k.op === 'cross_entropy_grad');
    const fwd = (bytes: number) => [['cross_entropy', 256, 256, bytes], ['cross_entropy', 1, 256, bytes]];
    expect(ce.map((k) => [k.op, k.groups[0], k.tgsize[0], k.scratch ?? 0])).toEqual([...fwd(2048 * 4), ...fwd(2048 * 4)]);
    expect(ce[0].label).toMatch(/cross_entropy_grad \(fused\)\]$/);
    expect(ce[0].args.map((a) => a.name)).toEqual(['logits', 'label', 'dlogits']);
    expect(ce[2].args.map((a) => a.name)).toEqual(['logits', 'label']);
    expect(ce.every((k) => !/atomic/.test(k.body))).toBe(true);
  });
});

describe('mixed precision: the bias and layernorm gradients read the 16-bit gradients (fuse.ts rule 4 with cudaFusions)', () => {
  it("a bf16 GPT's train_step keeps no widening cast: sum_to and layernorm_grad read the products' 16-bit gradients", () => {
    const m = checkFile(path.join(ROOT, 'bench/gpt_tiny_b32_t64.model'));
    const set = buildPrograms({ ...m, train: { ...m.train, precision: 'bf16' } }, { batch: m.train.batch });
    const fused = fuseForBackend(set.train_step, cudaFusions()).graph;
    const unfused = set.train_step.graph;
    const widen = (g: typeof fused) => g.nodes.filter((n) => n.op === 'cast' && n.attrs.to === 'f32');
    const halfIn = (g: typeof fused, op: string) => g.nodes.filter((n) => n.op === op && g.values[n.inputs[0]].dtype === 'bf16').length;
    // before: the bias gradients of the fc and qkv products and each layernorm's dy are f32 copies
    expect(widen(unfused).length).toBeGreaterThan(0);
    expect(halfIn(unfused, 'sum_to') + halfIn(unfused, 'layernorm_grad')).toBe(0);
    expect(widen(fused)).toHaveLength(0);
    const lnGrads = fused.nodes.filter((n) => n.op === 'layernorm_grad').length;
    expect(halfIn(fused, 'layernorm_grad')).toBe(lnGrads);
    // the bias gradients over a product's 16-bit gradient: sum_to, the weight gradient's column sums (fuse.ts rule 8), or
    // the attention gradient's (rule 15: the qkv bias, summed from the 16-bit dqkv as stored, one per block)
    const attnSums = fused.nodes.filter((n) => n.op === 'attention_qkv_grad' && n.attrs.sum_out === true && fused.values[n.outputs[0]].dtype === 'bf16').length;
    expect(attnSums).toBe(fused.nodes.filter((n) => n.op === 'attention_qkv_grad').length);
    expect(attnSums).toBeGreaterThan(0);
    // no bias gradient left reading an f32 copy (every sum_to / a_sums over dy reads it in bf16)
    expect(fused.nodes.filter((n) => (n.op === 'sum_to' || n.attrs.a_sums === true) && fused.values[n.inputs[0]].dtype === 'f32' &&
      unfused.nodes.some((m) => m.op === 'cast' && m.outputs[0] === n.inputs[0]))).toHaveLength(0);
  });
});

describe('the CUDA reduction lowerings, rendered in MSL, in the Metal emulator', () => {
  it('column sums (one chunk and several, the last shorter), the block sum_to (one chunk and two), embedding_grad, the class losses / metrics (a warp and a block per row) and the avgpool gradient with channel sums equal the float64 reference', () => {
    const poolCases = poolGradSumsCases(makeRng(29), true);
    const rng = makeRng(7);
    const f = (shape: number[], lo = -1, hi = 1) => ({ shape, data: randomTensor(shape, rng, lo, hi) });
    const ln = (name: string, rows: number[], D: number, weight: boolean) => {
      const x = [...rows, D];
      return opCase(name, 'layernorm_grad', [f(x), f(x), weight ? f([D]) : null, f(rows, -0.2, 0.2), f(rows, 0.5, 2)], [x, [D], [D]]);
    };
    const pair = (name: string, R: number, C: number, ls: number, ignore?: number) =>
      [false, true].map((fused) => lossAndGradCase(makeRng(R * C), `${name}${fused ? '_fused' : ''}`, R, C, ls, ignore, fused));
    const fusedPairs = [...pair('loss_pair_block', 3, WARP_C + 29, 0.1, 2), ...pair('loss_pair_warp', ONE_BLOCK_ROWS + 9, 165, 0)];
    // the fused loss over 16-bit logits with C a multiple of 8 (class_rows.ts vector path): label smoothing and an ignored
    // row, and none (MPSC_CUDA_CE_VEC=1 for this build: the path is opt-in)
    const vecCases = [lossAndGradCase(makeRng(7), 'loss_vec_bf16', 5, WARP_C + 8 * 5, 0.1, 2, true, 'bf16'),
      lossAndGradCase(makeRng(8), 'loss_vec_f16', 3, 2048 + 8 * 7 * 1024 + 8, 0, undefined, true, 'f16')];
    const halfCopies = [layernormGradAddCase(rng, 'ln_grad_half_768', [3, 7], 768, true, true, true, 'bf16'), layernormGradAddCase(rng, 'ln_grad_half_65', [3, 5], 65, false, true, false, 'f16')];
    const cases: OpCase[] = [
      ...allOpCases().filter((c) => c.program.graph.nodes.some((n) => ['layernorm', 'layernorm_grad', 'embedding_grad', 'cross_entropy', 'cross_entropy_grad', 'accuracy', 'top_k'].includes(n.op))),
      // ids with gaps and repeats, D not a power of two
      opCase('emb_sparse', 'embedding_grad', [f([3, 5, 45]), { shape: [3, 5], dtype: 'i32', data: Float64Array.from([9, 2, 9, 9, 40, 2, 0, 9, 33, 2, 40, 9, 1, 0, 9]) }], [[41, 45]], { w_shape: [41, 45] }),
      lossAndGradCase(rng, 'loss_grad_block', 3, WARP_C + 29, 0.1, 2), lossAndGradCase(rng, 'loss_grad_warp', ONE_BLOCK_ROWS + 9, 165, 0),
      lossAndGradCase(rng, 'loss_grad_one_block', 37, 65, 0.1, 1),
      // the gradient right after the loss (class_rows.ts fusedGrad: one kernel), each beside the same data through the two kernels
      ...fusedPairs, ...vecCases,
      positionEmbeddingCase('pos_emb', 3, 37, 41, 70), positionEmbeddingCase('pos_emb_full', 5, 64, 64, 33),
      ...classRowCases(rng, 'block_ignore', 5, WARP_C + 29, 3), ...classRowCases(rng, 'one_block', 21, 165),
      ...classRowCases(rng, 'warp_ignore', ONE_BLOCK_ROWS + 7, 37, 4),
      ln('ln_chunked', [3, 333], 45, true), ln('ln_chunked_noweight', [1000], 70, false), ln('ln_rows_per_warp', [5, 1001], 37, true),
      // wider than WARP_D: the shared dx kernel and reduce_cuda.ts's column sums in row chunks
      ln('ln_wide_chunked', [301], WARP_D + 3, true),
      // a warp per row: D a multiple of 32 and not, the widest, and one past it (the shared kernels)
      ...([[768, true], [333, false], [WARP_D, true], [WARP_D + 1, true]] as const).flatMap(([D, w]) => layernormPair(rng, `ln_warp_${D}`, [3, 7], D, w)),
      // the residual add folded into the layernorm (fuse.ts rule 5): h stored after the row is loaded, the row normalised from registers
      ...([[768, true], [333, false], [WARP_D, true], [65, true]] as const).map(([D, w]) => addLayernormCase(rng, `add_ln_${D}`, [3, 7], D, w, true)),
      // the residual-gradient add folded into layernorm_grad (fuse.ts rule 6): dx stored plus the addend
      ...([[[3, 7], 768, true], [[5, 1001], 45, false], [[3, 7], WARP_D, true]] as const).map(([rows, D, w]) => layernormGradAddCase(rng, `ln_grad_add_${D}`, [...rows], D, w, true)),
      // and the bias gradient of the sum (rule 7): several blocks, one block
      layernormGradAddCase(rng, 'ln_grad_add_bias_45', [5, 1001], 45, true, true, true), layernormGradAddCase(rng, 'ln_grad_add_bias_65', [3, 5], 65, false, true, true),
      // and the sum's 16-bit copy (rule 11): with the bias sum, several blocks; without it, one block, fp16
      ...halfCopies,
      // a conv bias gradient folded into the avgpool gradient (fuse.ts rule 9, avgpool_cuda.ts): masked planes over two chunks,
      // one exact chunk and 32 threads, unmasked ones on the wide and the shared kernel
      ...poolCases,
      opCase('emb_long', 'embedding_grad', [f([7, 300, 70]), { shape: [7, 300], dtype: 'i32', data: randomInts([7, 300], 37, rng) }], [[37, 70]], { w_shape: [37, 70] }),
      opCase('sum_outer', 'sum_to', [f([1200, 33])], [[33]], { axes: [0] }),
      opCase('sum_outer_3d', 'sum_to', [f([40, 30, 33])], [[30, 1]], { shape: [30, 1] }),
      opCase('sum_inner', 'sum_to', [f([3, 7, 700])], [[7, 1]], { shape: [7, 1] }),
      // 5005 terms for each of 3 outputs: two chunks (2503 and 2502 terms) and their sum
      opCase('sum_inner_chunked', 'sum_to', [f([5, 3, 1001])], [[3, 1]], { shape: [3, 1] }),
      // the same reading a 16-bit gradient (its cast folded into the kernel)
      ...halfLongCases(rng),
    ];
    expect(columnChunks(301, WARP_D + 3).S).toBeGreaterThan(1);
    expect(columnChunks(1200, 33).S).toBeGreaterThan(1);
    const shared = GPU_KERNELS.sum_to as GpuLowering;
    const sharedEmbedding = GPU_KERNELS.embedding as GpuLowering, sharedLayernorm = GPU_KERNELS.layernorm as GpuLowering;
    const sharedEmbeddingGrad = GPU_KERNELS.embedding_grad as GpuLowering;
    const registry = { ...GPU_KERNELS, layernorm_grad: lowerLayernormGradCuda,
      embedding_grad: ((c, g, n) => lowerEmbeddingGradCuda(c, g, n) ?? sharedEmbeddingGrad(c, g, n)) as GpuLowering,
      embedding: ((c, g, n) => lowerEmbeddingCuda(c, g, n) ?? sharedEmbedding(c, g, n)) as GpuLowering,
      layernorm: ((c, g, n) => lowerLayernormCuda(c, g, n) ?? sharedLayernorm(c, g, n)) as GpuLowering,
      cross_entropy: lowerClassForwardCuda, accuracy: lowerClassForwardCuda, top_k: lowerClassForwardCuda, cross_entropy_grad: lowerCrossEntropyGradCuda,
      sum_to: ((c, g, n) => lowerSumToCuda(c, g, n) ?? shared(c, g, n)) as GpuLowering, global_avgpool_grad: lowerAvgpoolGradCuda };
    const SCRATCH_FLOATS = 1 << 16;
    const build = withEnv('MPSC_CUDA_CE_VEC', '1', () => compileEmu(cases.map((c) => c.program), { noFallback: true, registry }, undefined, 'cuda_reductions_emu', (a) => {
      for (const p of a.programs) {
        // CUDA binds the plan's scratch region as `mpsc_scratch`; here it is a static array, and every
        // launch waits for the one before (CUDA's stream order; Metal's plan only orders visible buffers)
        expect(Math.max(0, ...p.lowered.kernels.map((k) => k.scratch ?? 0))).toBeLessThanOrEqual(SCRATCH_FLOATS * 4);
        // (filled with a pattern first, as CUDA's region holds other kernels' partial sums: embedding_grad must
        // not trust the stale runs of ids that do not occur)
        p.library = p.library.replace(/#include <metal_stdlib>\n/, `$&static float mpsc_scratch[${SCRATCH_FLOATS}];\n` +
          `static const bool mpsc_scratch_filled = [] { for (int i = 0; i < ${SCRATCH_FLOATS}; ++i) mpsc_scratch[i] = float(i % 7); return true; }();\n`);
        for (const s of p.plan.steps) if (s.kind === 'kernel') s.barrier = true;
      }
      expect(a.programs.some((p) => p.library.includes('mpsc_scratch['))).toBe(true);
      // the fused pairs: the loss's rows kernel writes dlogits, the grad node has none
      for (const p of a.programs) {
        const name = String(p.lowered.program.name);
        if (!name.startsWith('loss_pair_')) continue;
        const ops = p.lowered.kernels.map((k) => k.op);
        expect(ops.includes('cross_entropy_grad'), name).toBe(!name.endsWith('_fused'));
        expect(p.lowered.kernels.some((k) => /cross_entropy_grad \(fused\)\]$/.test(k.label)), name).toBe(name.endsWith('_fused'));
      }
      // the 16-bit fused losses take the vector path (one kernel writes the loss's row terms and the gradient)
      for (const c of vecCases) {
        const p = a.programs.find((x) => x.lowered.program.name === c.program.name)!;
        expect(p.lowered.kernels.filter((k) => /cross_entropy_grad \(fused, 8 (bfloat|half) classes per 16-byte access, exp2\)\]$/.test(k.label)), String(c.program.name)).toHaveLength(1);
      }
      // the 16-bit cases' reductions read the 16-bit buffer itself
      const half = a.programs.filter((p) => p.lowered.program.name.startsWith('half_'));
      expect(half).toHaveLength(5);
      for (const p of half) expect(p.lowered.kernels.find((k) => k.op !== 'cast')!.args.some((x) => x.access === 'r' && (x.type === 'half' || x.type === 'bfloat'))).toBe(true);
      expect(a.programs.some((p) => p.lowered.kernels.some((k) => /one block per output and chunk \(2 chunks/.test(k.label)))).toBe(true);
      // the masked pool gradients count in blocks of 256 (two chunks) and 32 threads; the unmasked ones keep the plain kernels
      const pool = (name: string) => a.programs.find((p) => p.lowered.program.name === name)!.lowered.kernels.map((k) => k.label);
      expect(pool('pool_sums_relu_47x47')[0]).toMatch(/unmasked counts \[a block of 256 per plane and chunk \(2 chunks of 2048\)/);
      expect(pool('pool_sums_relu_5x7')[0]).toMatch(/unmasked counts \[a block of 32 per plane, 8 elements/);
      expect(pool('pool_sums_wide_183x183')[0]).toMatch(/\[8 elements per thread\]$/);
      expect(pool('pool_sums_9x11')).toHaveLength(2);
      for (const c of poolCases) expect(pool(c.program.name)[1]).toMatch(/\[channel sums/);
    }));
    const scalars = { lr: 0.05, t: 3, seed: 1, counter: 0 };
    const got = runCases(build, cases, scalars);
    expectReference(cases, got, scalars);
    // the pool gradient's dx: bitwise mask > 0 ? dy / HW : 0 in float (the unfused kernels' expression)
    for (const c of poolCases) {
      const r = got[cases.indexOf(c)] as Map<number, Float64Array>, node = c.program.graph.nodes[0];
      const [N, C, H, W] = node.attrs.x_shape as number[], dy = c.data.get(node.inputs[0])!, mask = node.inputs[1] === undefined ? null : c.data.get(node.inputs[1])!;
      const want = Float64Array.from({ length: N * C * H * W }, (_, i) => (mask && !(mask[i] > 0) ? 0 : Math.fround(dy[Math.floor(i / (H * W))] / (H * W))));
      expect(Array.from(r.get(node.outputs[0])!), c.program.name).toEqual(Array.from(want));
    }
    // the fused loss + gradient: the two kernels' bits (the same expressions per row), and no kernel for the grad node
    for (let i = 0; i < fusedPairs.length; i += 2) {
      const [a, b] = [cases.indexOf(fusedPairs[i]), cases.indexOf(fusedPairs[i + 1])];
      const [ra, rb] = [got[a] as Map<number, Float64Array>, got[b] as Map<number, Float64Array>];
      for (const id of fusedPairs[i].check) expect(Array.from(rb.get(id)!), String(fusedPairs[i + 1].program.name)).toEqual(Array.from(ra.get(id)!));
    }
    // rule 11's copy: bitwise the stored sum rounded once to its 16-bit type
    for (const c of halfCopies) {
      const g = c.program.graph, r = got[cases.indexOf(c)] as Map<number, Float64Array>, name = String(c.program.name);
      const id = (n: string) => g.values.findIndex((v) => v.name === `${name}.${n}`);
      const out = r.get(id('out'))!, copy = r.get(id('out_half'))!, t = g.values[id('out_half')].dtype as HalfDType;
      expect(copy.length, name).toBe(out.length);
      expect(Array.from(copy), name).toEqual(Array.from(out, (x) => roundToHalf(Math.fround(x), t)));
      expect(copy.some((x, i) => x !== out[i]), `${name}: the copy is rounded`).toBe(true);
    }
    // the sorted embedding_grad adds each row's terms in position order: bitwise a float32 sum in that order
    for (const name of ['emb_long', 'emb_sparse']) {
      const ci = cases.findIndex((c) => c.program.name === name);
      const c = cases[ci], g = c.program.graph, node = g.nodes[0];
      const [dyId, idsId] = node.inputs, [V, D] = node.attrs.w_shape as number[];
      const dy = c.data.get(dyId)!, ids = c.data.get(idsId)!;
      const want = new Float32Array(V * D);
      ids.forEach((v, j) => { for (let k = 0; k < D; k++) want[v * D + k] = Math.fround(want[v * D + k] + dy[j * D + k]); });
      expect(Array.from((got[ci] as Map<number, Float64Array>).get(node.outputs[0])!), name).toEqual(Array.from(want));
    }
  });
});

describe('layernorm and its gradient by 16-byte vectors (layernorm_cuda.ts, MPSC_CUDA_LN_VEC=all), rendered in MSL, in the Metal emulator', () => {
  it('every row of D a multiple of 256 takes the vector layout (f32, bf16 and f16 rows, the folded adds, the bias sum and the 16-bit copy, several rows per warp) and equals the float64 reference', () => {
    const rng = makeRng(41);
    const f = (shape: number[], lo = -1, hi = 1) => ({ shape, data: Float64Array.from(randomTensor(shape, rng, lo, hi), (x) => Math.fround(x)) });
    const halfFwd = (name: string, to: HalfDType, rows: number[], D: number) =>
      halfIoCase(name, to, 'layernorm', [f([...rows, D], -2, 3), f([D]), f([D])], [[...rows, D], rows, rows], { eps: 1e-5 }, [1, 2], [1, 2]);
    const halfGrad = (name: string, to: HalfDType, rows: number[], D: number, f32In: number[]) =>
      halfIoCase(name, to, 'layernorm_grad', [f([...rows, D]), f([...rows, D], -2, 2), f([D]), f(rows, -0.2, 0.2), f(rows, 0.5, 2)], [[...rows, D], [D], [D]], {}, f32In, [0, 1, 2]);
    const cases: OpCase[] = [
      ...layernormPair(rng, 'ln_vec_768', [3, 7], 768, true), ...layernormPair(rng, 'ln_vec_256', [5], 256, false),
      ...layernormPair(rng, 'ln_vec_1024', [2, 3], WARP_D, true),
      addLayernormCase(rng, 'add_ln_vec_768', [3, 7], 768, true, true), addLayernormCase(rng, 'add_ln_vec_512', [4], 512, false, true),
      layernormGradAddCase(rng, 'ln_grad_vec_768', [3, 7], 768, true, true),
      // 2115 rows: several rows per warp (RW > 1) and many blocks' partials
      layernormGradAddCase(rng, 'ln_grad_vec_rows_256', [3, 705], 256, false, true, true),
      layernormGradAddCase(rng, 'ln_grad_vec_half_768', [3, 7], 768, true, true, true, 'bf16'),
      halfFwd('ln_vec_half_fwd_bf16', 'bf16', [3, 7], 768), halfFwd('ln_vec_half_fwd_f16', 'f16', [5], 512),
      halfGrad('ln_vec_half_grad_bf16', 'bf16', [3, 7], 768, [1, 2, 3, 4]), halfGrad('ln_vec_half_grad_x_f16', 'f16', [2, 5], 256, [2, 3, 4]),
      // not a multiple of 256: the strided layout
      ...layernormPair(rng, 'ln_strided_333', [3], 333, true),
    ];
    const sharedLayernorm = GPU_KERNELS.layernorm as GpuLowering;
    const registry = { ...GPU_KERNELS, layernorm_grad: lowerLayernormGradCuda,
      layernorm: ((c, g, n) => lowerLayernormCuda(c, g, n) ?? sharedLayernorm(c, g, n)) as GpuLowering };
    const SCRATCH_FLOATS = 1 << 20;
    const build = withEnv('MPSC_CUDA_LN_VEC', 'all', () => compileEmu(cases.map((c) => c.program), { noFallback: true, registry }, undefined, 'cuda_ln_vec_emu', (a) => {
      for (const p of a.programs) {
        expect(Math.max(0, ...p.lowered.kernels.map((k) => k.scratch ?? 0))).toBeLessThanOrEqual(SCRATCH_FLOATS * 4);
        p.library = p.library.replace(/#include <metal_stdlib>\n/, `$&static float mpsc_scratch[${SCRATCH_FLOATS}];\n`);
        for (const s of p.plan.steps) if (s.kind === 'kernel') s.barrier = true;
        const name = String(p.lowered.program.name);
        const ln = p.lowered.kernels.filter((k) => k.op === 'layernorm' || (k.op === 'layernorm_grad' && / partials of /.test(k.label)));
        expect(ln.length, name).toBeGreaterThan(0);
        for (const k of ln) expect(/16-byte vectors/.test(k.label), `${name}: ${k.label}`).toBe(!name.includes('strided'));
      }
    }));
    const scalars = { lr: 0.05, t: 3, seed: 1, counter: 0 };
    expectReference(cases, runCases(build, cases, scalars), scalars);
  });
});

describe('long 16-bit element-wise nodes, fp32 unary ones, adam_update and the avgpool gradient, PER_THREAD elements per thread (wide_ew_cuda.ts), rendered in MSL, in the Metal emulator', () => {
  it('give bitwise the shared kernels\' results (guarded and exact spans, bf16, f16, fp32 unary, the f32 optimizer and avgpool gradients) and equal the float64 reference', () => {
    const cases = wideElementwiseCases(makeRng(11));
    const scalars = { lr: 0.05, t: 3, seed: 1, counter: 0 };
    const registry = { ...GPU_KERNELS, unary: wideOr('unary'), unary_grad: wideOr('unary_grad'), binary: wideOr('binary'), cast: wideOr('cast'), adam_update: wideOr('adam_update'), global_avgpool_grad: wideOr('global_avgpool_grad') };
    // adam: MPSC_CUDA_ADAM_VEC=1 (the optimizer cases only: the even-sized one by 16-byte vectors, the odd one strided);
    // vec32: MPSC_CUDA_EW_VEC32=1 (every case: f32 values by 16-byte vectors too, the input casts of the even-sized cases among them)
    const adamCases = cases.filter((c) => c.program.name.startsWith('wide_adam'));
    const run = (wide: boolean, mode: '' | 'adam' | 'vec32' = '') => runCases(withEnv('MPSC_CUDA_EW_VEC', '1', () => withEnv('MPSC_CUDA_ADAM_VEC', mode === 'adam' ? '1' : undefined, () =>
      withEnv('MPSC_CUDA_EW_VEC32', mode === 'vec32' ? '1' : undefined, () =>
        compileEmu((mode === 'adam' ? adamCases : cases).map((c) => c.program), { noFallback: true, ...(wide ? { registry } : {}) }, undefined, `wide_ew_emu_${wide}${mode ? `_${mode}` : ''}`, (a) => {
          // every node of the cases takes this kernel (the input casts too), except the shared build
          const labels = a.programs.flatMap((p) => p.lowered.kernels.map((k) => k.label));
          expect(labels.every((l) => / elements per thread\]$/.test(l))).toBe(wide);
          // all-16-bit nodes of a multiple of 8 elements by 16-byte vectors (vecKernel): the f16 gelu gradient, the bf16 add;
          // with adam, the Adam case of a multiple of 8 elements; with vec32 also the fp32 gelu gradient
          const vec = a.programs.filter((p) => p.lowered.kernels.some((k) => /\[16-byte vectors: 8 elements per thread\]$/.test(k.label))).map((p) => p.lowered.program.name);
          expect(vec).toEqual(mode === 'adam' ? ['wide_adam_l2_gscale'] : !wide ? [] : mode === 'vec32' ? ['wide_gelu_grad_f16', 'wide_add_bf16', 'wide_gelu_grad_f32'] : ['wide_gelu_grad_f16', 'wide_add_bf16']);
          // vec32: the even-sized cases' f32 -> 16-bit input casts by vectors too
          if (mode === 'vec32') expect(a.programs.flatMap((p) => p.lowered.kernels).filter((k) => k.op === 'cast' && /16-byte vectors/.test(k.label)).length).toBeGreaterThan(1);
        })))), mode === 'adam' ? adamCases : cases, scalars);
    const [wide, shared, adam, vec32] = [run(true), run(false), run(true, 'adam'), run(true, 'vec32')];
    cases.forEach((c, i) => {
      const w = wide[i], s = shared[i], v = vec32[i];
      if (typeof w === 'string' || typeof s === 'string' || typeof v === 'string') throw new Error(`${c.program.name}: ${w} / ${s} / ${v}`);
      const ref = reference(c, scalars);
      for (const id of c.check) {
        expect(Array.from(w.get(id)!), c.program.name).toEqual(Array.from(s.get(id)!));
        expect(Array.from(v.get(id)!), `${c.program.name} (MPSC_CUDA_EW_VEC32)`).toEqual(Array.from(s.get(id)!));
        expect(relError(w.get(id)!, ref.get(id)!), c.program.name).toBeLessThan(caseTolerance(c, 1e-5, id));
      }
    });
    // the vector form of Adam: bitwise the strided / shared results
    expect(adamCases.length).toBe(2);
    adamCases.forEach((c, i) => {
      const v = adam[i], s = shared[cases.indexOf(c)];
      if (typeof v === 'string' || typeof s === 'string') throw new Error(`${c.program.name}: ${v} / ${s}`);
      for (const id of c.check) expect(Array.from(v.get(id)!), `${c.program.name} (vector form)`).toEqual(Array.from(s.get(id)!));
    });
  });
});

describe('a recomputed gelu and its gradient as one node (grad_fwd.ts, wide_ew_cuda.ts gradWithForward), in the Metal emulator', () => {
  it('gives bitwise the unfused pair\'s results (each on its own wide / shared kernel) and equals the float64 reference', () => {
    const scalars = { lr: 0.05, t: 3, seed: 1, counter: 0 };
    const registry = { ...GPU_KERNELS, unary: wideOr('unary'), unary_grad: wideOr('unary_grad'), cast: wideOr('cast') };
    const run = (cases: OpCase[], tag: string) => runCases(withEnv('MPSC_CUDA_EW_VEC', '1', () => compileEmu(cases.map((c) => c.program), { noFallback: true, registry }, undefined, `grad_fwd_emu_${tag}`, (a) => {
      // the f16 pair (all 16-bit, a multiple of 8 elements) by 16-byte vectors (vecKernel), fused and not
      const vec = a.programs.filter((p) => p.lowered.kernels.some((k) => k.op.startsWith('unary') && /\[16-byte vectors: 8 elements per thread\]$/.test(k.label))).map((p) => p.lowered.program.name);
      expect(vec).toEqual(['grad_fwd_gelu_f16']);
    })), cases, scalars);
    const fused = gradForwardCases(makeRng(5)), plain = gradForwardCases(makeRng(5), false);
    const [a, b] = [run(fused, 'fused'), run(plain, 'plain')];
    fused.forEach((c, i) => {
      const x = a[i], y = b[i];
      if (typeof x === 'string' || typeof y === 'string') throw new Error(`${c.program.name}: ${x} / ${y}`);
      expect(c.program.graph.nodes.filter((n) => n.attrs.fwd_out === true)).toHaveLength(1);
      const ref = reference(c, scalars);
      for (const id of c.check) {
        expect(Array.from(x.get(id)!), c.program.name).toEqual(Array.from(y.get(id)!));
        expect(relError(x.get(id)!, ref.get(id)!), c.program.name).toBeLessThan(caseTolerance(c, 1e-5, id));
      }
    });
  });
});

describe('a unary gradient with its column sums (fuse.ts rule 14, wide_ew_cuda.ts gradWithSums), in the Metal emulator', () => {
  // the emulator has no scratch region: here the one-row case (its sums stored without partials); the row blocks' partials
  // run on the CPU thread emulator (cuda_gemm_emu.test.ts) and every case on the GPU (bench/cuda_check.sh kernels)
  it('gives bitwise the unfused nodes\' dx and f(x), their sums within rounding, and equals the float64 reference', () => {
    const scalars = { lr: 0.05, t: 3, seed: 1, counter: 0 };
    const registry = { ...GPU_KERNELS, unary: wideOr('unary'), unary_grad: wideOr('unary_grad'), cast: wideOr('cast') };
    const run = (cases: OpCase[], tag: string, expectSums: boolean) => runCases(withEnv('MPSC_CUDA_EW_VEC', '1', () => compileEmu(cases.map((c) => c.program), { noFallback: true, registry }, undefined, `grad_sum_emu_${tag}`, (a) => {
      // the fused nodes on gradWithSums: partials and their finish, except the one-row case (the sums stored directly)
      const labels = a.programs.map((p) => p.lowered.kernels.filter((k) => k.op === 'unary_grad').map((k) => k.label).join(' | '));
      if (expectSums) expect(labels).toEqual([expect.stringMatching(/8 columns per thread over 1 rows, and dx's column sums\]$/)]);
    })), cases, scalars);
    const row = (c: OpCase) => /_row$/.test(String(c.program.name));
    const fused = gradSumCases(makeRng(6)).filter(row), plain = gradSumCases(makeRng(6), false).filter(row);
    expect(fused).toHaveLength(1);
    const [a, b] = [run(fused, 'fused', true), run(plain, 'plain', false)];
    fused.forEach((c, i) => {
      const x = a[i], y = b[i];
      if (typeof x === 'string' || typeof y === 'string') throw new Error(`${c.program.name}: ${x} / ${y}`);
      expect(c.program.graph.nodes.filter((n) => n.attrs.sum_out === true)).toHaveLength(1);
      const ref = reference(c, scalars);
      c.check.forEach((id, k) => {
        const sums = k === c.check.length - 1;
        if (!sums) expect(Array.from(x.get(id)!), c.program.name).toEqual(Array.from(y.get(id)!));
        else expect(relError(x.get(id)!, y.get(id)!), `${c.program.name} sums against the unfused`).toBeLessThan(1e-5);
        expect(relError(x.get(id)!, ref.get(id)!), c.program.name).toBeLessThan(caseTolerance(c, 1e-5, id));
      });
    });
  });
});

describe('an attention gradient with its column sums (fuse.ts rule 15) that the flash kernels refuse, in the Metal emulator', () => {
  it('runs the shared kernel for the unfused node, then the sum_to kernel: dqkv and its sums equal the float64 reference', () => {
    const scalars = { lr: 0, t: 1, seed: 0, counter: 0 };
    const sumTo = GPU_KERNELS.sum_to;
    if (sumTo === 'cpu') throw new Error('sum_to has no shared kernel');
    const registry = { ...GPU_KERNELS, attention_qkv_grad: sharedAttentionThenSums(sumTo) };
    // head width 8: no flash kernel (test/cuda_attention.test.ts); its rule-15 node as the index.ts fallback lowers it
    const cases = cudaAttentionCases().filter((c) => /^flash_qkv_sum_.*_d8_/.test(String(c.program.name)));
    expect(cases).toHaveLength(1);
    const [r] = runCases(compileEmu(cases.map((c) => c.program), { noFallback: true, registry }, undefined, 'attn_sum_emu', (a) => {
      const ks = a.programs[0].lowered.kernels.filter((k) => k.op === 'attention_qkv_grad');
      expect(ks.length).toBeGreaterThanOrEqual(2);
    }), cases, scalars);
    if (typeof r === 'string') throw new Error(r);
    const ref = reference(cases[0], scalars);
    // dqkv rounded to bf16 (one unit where the kernel's f32 sum rounds the other way); its sums from those values
    for (const id of cases[0].check) expect(relError(r.get(id)!, ref.get(id)!), cases[0].program.graph.values[id].name).toBeLessThan(1e-2);
    // a sum that dropped a row (or read the wrong column) would be O(1) off: each column's sum against the reference's
    const sum = cases[0].check[1];
    expect(relError(r.get(sum)!, ref.get(sum)!)).toBeLessThan(1e-3);
  });
});

describe('merged launches (merge.ts), rendered in MSL, in the Metal emulator', () => {
  it('independent optimizer updates and element-wise ops as one launch give bitwise the results of one launch each', () => {
    const c = independentUpdatesCase();
    const { program, check } = c;
    const scalars = { lr: 0.01, t: 4, seed: 1, counter: 0 };
    const run = (merge: boolean) => {
      let launches = 0;
      const build = compileEmu([program], { noFallback: true }, undefined, `merge_emu_${merge}`, (a) => {
        for (const p of a.programs) {
          if (merge) {
            const m = mergeLaunches(p.lowered, p.plan, MSL);
            p.lowered = m.lp;
            p.plan = m.plan;
            p.library = librarySource(m.lp, a.model);
          }
          launches = p.plan.steps.length;
        }
      });
      const r = runCases(build, [c], scalars)[0];
      if (typeof r === 'string') throw new Error(r);
      return { r, launches };
    };
    const one = run(false), merged = run(true);
    expect(one.launches).toBe(6);
    expect(merged.launches).toBe(1);
    const ref = reference(c, scalars);
    for (const id of check) {
      expect(Array.from(merged.r.get(id)!), program.graph.values[id].name).toEqual(Array.from(one.r.get(id)!));
      expect(relError(merged.r.get(id)!, ref.get(id)!), program.graph.values[id].name).toBeLessThan(1e-5);
    }
  });
});

describe('input views (views.ts) in a one-node program', () => {
  it('a reshape that no kernel reads keeps its copy (the kernel check reads its output from the arena)', () => {
    const c = allOpCases().find((x) => x.program.graph.nodes[0].op === 'reshape')!;
    const a = buildCuda([c.program], 'reshape_case');
    expect(a.plan.programs[0].nodes.map((n) => n.op)).toEqual(['reshape']);
  });
});
