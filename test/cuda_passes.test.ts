/**
 * The CUDA backend's launch-count passes and reduction shapes, on the generated plans (no nvcc,
 * no GPU): reshape views of program inputs (compiler/codegen-cuda/views.ts), merged launches of
 * independent element-wise kernels (merge.ts), the row chunks of layernorm_grad and the
 * embedding_grad kernel (reduce_cuda.ts). Numerics run on the GPU machine (bench/cuda_check.sh:
 * kernel cases, parity, merged vs unmerged bitwise).
 */
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkFile } from '../compiler/check/index.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { programsOf } from '../compiler/ir/graph.js';
import type { ProgramSet } from '../compiler/ir/graph.js';
import { buildCuda, generateCudaModel } from '../compiler/codegen-cuda/index.js';
import { planProblems, type KernelNodePlan } from '../compiler/codegen-cuda/plan.js';
import { columnChunks } from '../compiler/codegen-cuda/reduce_cuda.js';
import { MAX_ARGS } from '../compiler/codegen-cuda/merge.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');

function programs(file: string): ProgramSet {
  const model = checkFile(path.join(ROOT, file));
  return buildPrograms(model, { batch: model.train.batch });
}

const ranges = (n: KernelNodePlan) => n.args.map((a) => ({ lo: a.offset, hi: a.offset + a.bytes, w: a.access !== 'r' }));

describe('merged launches (merge.ts) and input views (views.ts)', () => {
  const ps = programs('specs/mnist_mlp.model');
  const merged = generateCudaModel(ps), single = buildCuda(programsOf(ps), ps.model, { merge: false });
  const train = (a: typeof merged) => a.plan.programs.find((p) => p.name === 'train_step')!;

  it('the flatten of the image batch is a view of the upload image: no reshape kernel, the first linear reads the input set', () => {
    for (const a of [merged, single]) {
      expect(train(a).nodes.some((n) => n.op === 'reshape')).toBe(false);
      const first = train(a).nodes[0];
      expect(first.op).toBe('linear');
      expect(first.args.find((x) => x.name === 'x')!.perSet).toBe(true);
      expect(planProblems(a.plan)).toEqual([]);
    }
  });

  it("the four Adam updates take two launches (fc1.weight's with fc1's bias gradient, then the other three), each kernel's buffers in order", () => {
    const one = train(single).nodes.filter((n) => n.op === 'adam_update');
    expect(one).toHaveLength(4);
    const launches = train(merged).nodes.filter((n) => one.some((u) => u.args.every((x) => n.args.some((y) => y.value === x.value))));
    expect(launches).toHaveLength(2);
    expect(launches.map((n) => n.op)).toEqual(['multi', 'adam_update']);
    for (const u of one) {
      const names = u.args.map((x) => x.value).join('|');
      expect(launches.some((n) => n.args.map((x) => x.value).join('|').includes(names)), names).toBe(true);
    }
    expect(train(merged).kernels).toBe(train(single).kernels - 4);
  });

  it('kernels of one launch touch no byte another of the launch writes; the kernel count is the merged runs fewer', () => {
    const gpt = programs('bench/gpt_tiny_b32_t64.model');
    const a = generateCudaModel(gpt), b = buildCuda(programsOf(gpt), gpt.model, { merge: false });
    const t = a.plan.programs.find((p) => p.name === 'train_step')!, u = b.plan.programs.find((p) => p.name === 'train_step')!;
    // one launch for the optimizer updates of all 53 parameter tensors
    expect(u.nodes.filter((n) => n.op === 'adam_update')).toHaveLength(53);
    expect(t.nodes.filter((n) => n.op === 'adam_update')).toHaveLength(1);
    expect(planProblems(a.plan)).toEqual([]);
    const kernels = new Map(a.lowered.flatMap((l) => l.kernels).map((k) => [k.name, k]));
    for (const n of t.nodes) {
      const k = kernels.get(n.kernel)!;
      expect(k.args.length).toBeLessThanOrEqual(MAX_ARGS);
      const segs = [...k.body.matchAll(/blockIdx\.x < (\d+)u/g)].map((m) => Number(m[1]));
      if (!segs.length) continue;
      // segments cover the grid in order, and their kernels' byte ranges do not conflict
      expect(segs[segs.length - 1]).toBe(n.grid[0]);
      expect([...segs].sort((x, y) => x - y)).toEqual(segs);
      const parts = [...k.body.matchAll(/const uint3 mpsc_gid/g)].length;
      expect(parts).toBe(segs.length);
    }
    // every merged run replaces at least two of the unmerged kernels
    const mergedNodes = t.nodes.filter((n) => kernels.get(n.kernel)!.body.includes('mpsc_gid'));
    expect(u.kernels - t.kernels).toBeGreaterThanOrEqual(mergedNodes.length);
    for (const n of mergedNodes) {
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
    // the token positions (an element-wise kernel) feed the position embedding (another one): the
    // launch that writes the positions is not the one that reads them
    const at = t.nodes.findIndex((n) => /positions/.test(kernels.get(n.kernel)!.label + kernels.get(n.kernel)!.body));
    expect(at).toBeGreaterThanOrEqual(0);
    const posValue = t.nodes[at].args.filter((x) => x.access === 'w').map((x) => x.value);
    const reader = t.nodes.findIndex((n) => n.args.some((x) => x.access === 'r' && posValue.includes(x.value)));
    expect(reader).toBeGreaterThan(at);
  });
});

describe('column sums (sum_to, layernorm_grad) and embedding_grad (reduce_cuda.ts)', () => {
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

  it("a GPT's layernorm gradients take the scratch region; its embedding gradients are a block per vocabulary row", () => {
    const gpt = programs('bench/gpt_tiny_b32_t64.model');
    const a = generateCudaModel(gpt);
    const ks = a.lowered.flatMap((l) => l.kernels);
    const ln = ks.filter((k) => k.op === 'layernorm_grad');
    // 9 layernorms: dx, the chunk partial sums, their sum
    expect(ln).toHaveLength(27);
    expect(ln.filter((k) => k.scratch)).toHaveLength(18);
    expect(a.plan.scratch.bytes).toBeGreaterThanOrEqual(Math.max(...ln.map((k) => k.scratch ?? 0)));
    const emb = ks.filter((k) => k.op === 'embedding_grad');
    expect(emb.map((k) => k.groups)).toEqual([[64, 4, 1], [65, 4, 1]]);
    expect(emb.every((k) => !/atomic/.test(k.body))).toBe(true);
  });
});
