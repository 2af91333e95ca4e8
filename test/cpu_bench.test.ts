/**
 * issue 6: the FLOP counter (compiler/ir/flops.ts), the relu fusion plan of the CPU backend
 * (compiler/codegen-cpu/fuse_relu.ts) and `mpsc bench` (cli/bench.ts, runtime/bench.ts).
 */
import { spawnSync } from 'node:child_process';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { checkFile } from '../compiler/check/index.js';
import { countFlops } from '../compiler/ir/flops.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { generateCpuModel } from '../compiler/codegen-cpu/emit_program.js';
import { planReluFusion } from '../compiler/codegen-cpu/fuse_relu.js';
import { planReluGradFusion } from '../compiler/codegen-cpu/fuse_relu_grad.js';
import { planReluPoolFusion } from '../compiler/codegen-cpu/fuse_relu_pool.js';
import { planInputReshapeAliases } from '../compiler/codegen-cpu/alias_reshape.js';
import { GraphBuilder, type Program } from '../compiler/ir/graph.js';
import { syntheticBatch } from '../runtime/bench.js';

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..');
const env = { ...process.env, MPSC_CACHE_DIR: process.env.MPSC_CACHE_DIR ?? path.join(os.tmpdir(), 'mpsc-test-cache') };

async function programs(spec: string, batch?: number) {
  const model = await checkFile(path.join(ROOT, spec));
  return { model, ps: buildPrograms(model, { batch: batch ?? model.train.batch }) };
}

describe('countFlops', () => {
  it('counts 2*M*N*K for every GEMM of the MLP workload (bench/NOTES.md: 209.5 MFLOP train, 104.1 forward)', async () => {
    const { ps } = await programs('bench/mnist_mlp_b256_adam.model');
    const t = countFlops(ps.train_step), e = countFlops(ps.eval);
    // fc1 fwd + dW (no dX: its input is data), fc2 fwd + dX + dW
    expect(t.gemm).toBe(2 * 256 * 784 * 256 * 2 + 2 * 256 * 256 * 10 * 3);
    expect(e.gemm).toBe(2 * 256 * 784 * 256 + 2 * 256 * 256 * 10);
    expect(t.elementwise).toBeGreaterThan(0);
    expect(t.total).toBe(t.gemm + t.elementwise);
  });

  it('counts the three conv passes of the LeNet workload (1599.7 MFLOP train, 542.9 forward)', async () => {
    const { ps } = await programs('bench/mnist_cnn_b64_sgdm.model');
    const conv1 = 2 * 64 * 32 * 784 * 9, conv2 = 2 * 64 * 64 * 196 * 288, fc1 = 2 * 64 * 3136 * 128, fc2 = 2 * 64 * 128 * 10;
    expect(countFlops(ps.eval).gemm).toBe(conv1 + conv2 + fc1 + fc2);
    expect(countFlops(ps.train_step).gemm).toBe(2 * conv1 + 3 * conv2 + 3 * fc1 + 3 * fc2);
    expect(countFlops(ps.train_step).byOp.conv2d_grad_input).toBe(conv2);
  });
});

describe('relu fusion plan', () => {
  const relus = (p: Program) => p.graph.nodes.filter((n) => n.op === 'unary' && n.attrs.fn === 'relu').map((n) => n.id);

  it('folds the MLP relu into fc1 and points its relu-grad at the relu output', async () => {
    const { ps } = await programs('bench/mnist_mlp_b256_adam.model');
    const p = ps.train_step;
    const plan = planReluFusion(p, p.plan!.offsets);
    const [r] = relus(p);
    expect(plan.skip.has(r)).toBe(true);
    const producer = p.graph.nodes.find((n) => n.outputs.includes(p.graph.nodes[r].inputs[0]))!;
    expect(producer.op).toBe('linear');
    expect(plan.fused.get(producer.id)).toBe(p.graph.nodes[r].outputs[0]);
    const grad = p.graph.nodes.find((n) => n.op === 'unary_grad' && n.inputs[1] === producer.outputs[0])!;
    expect(plan.redirect.get(grad.id)?.get(1)).toBe(p.graph.nodes[r].outputs[0]);
  });

  it('writes relu(y) over y instead when z shares memory with the input, and does not fuse when both are unsafe', async () => {
    const { ps } = await programs('bench/mnist_mlp_b256_adam.model');
    const p = ps.eval;
    const [r] = relus(p);
    const y = p.graph.nodes[r].inputs[0], z = p.graph.nodes[r].outputs[0];
    const producer = p.graph.nodes.find((n) => n.outputs.includes(y))!;
    const reader = p.graph.nodes.find((n) => n.inputs.includes(z))!;
    // every arena value in its own 1 MiB slot: A (write z at the producer) is safe
    const own = p.plan!.offsets.map((o, id) => (o >= 0 ? id * (1 << 20) : -1));
    expect(planReluFusion(p, own).fused.get(producer.id)).toBe(z);
    // z on the producer's input x (as a planner reusing x's slot would): B, z's reader reads y
    const x = producer.inputs[0];
    const shared = [...own];
    shared[z] = shared[x];
    const b = planReluFusion(p, shared);
    expect(b.fused.get(producer.id)).toBe(y);
    expect(b.skip.has(r)).toBe(true);
    expect([...b.redirect.get(reader.id)!.values()]).toEqual([y]);
    // and the reader's output over y as well: neither is safe
    shared[reader.outputs[0]] = shared[y];
    expect(planReluFusion(p, shared).fused.size).toBe(0);
  });

  it('leaves a relu whose input has another reader alone, and the generated code says what it fused', async () => {
    const { ps } = await programs('bench/mnist_cnn_b64_sgdm.model');
    const code = generateCpuModel(ps).files['model.cc'];
    expect(code).toMatch(/train_step node \d+: conv2d \+ relu \(fused\)/);
    expect(code).toMatch(/train_step node \d+: linear \+ relu \(fused\)/);
    const off = generateCpuModel(ps, { fuse: false }).files['model.cc'];
    expect(off).not.toMatch(/\(fused\)/);
  });
});

describe('relu-grad folded into the pooling gradient (fuse_relu_grad.ts)', () => {
  it('folds the relu-grad after the global-avgpool grad of the seed CNN, masked by the fused relu output', async () => {
    const { ps } = await programs('bench/seed_cnn_b32_64px_adam.model');
    const p = ps.train_step;
    const plan = planReluFusion(p, p.plan!.offsets);
    planReluGradFusion(p, p.plan!.offsets, plan);
    const P = p.graph.nodes.find((n) => n.op === 'global_avgpool_grad')!;
    const U = p.graph.nodes.find((n) => n.op === 'unary_grad' && n.inputs[0] === P.outputs[0])!;
    expect(plan.skip.has(U.id)).toBe(true);
    expect(plan.fused.get(P.id)).toBe(U.outputs[0]);
    // the mask is what the relu-grad would have read (the fused relu's output after fuse_relu's redirect)
    expect(plan.reluMask.get(P.id)).toBe(plan.redirect.get(U.id)?.get(1) ?? U.inputs[1]);
    const code = generateCpuModel(ps).files['model.cc'];
    expect(code).toMatch(/train_step node \d+: global_avgpool_grad \+ relu-grad \(fused\)/);
    expect(code).not.toMatch(new RegExp(`train_step node ${U.id}: unary_grad`));
  });

  it('does not fold when the relu-grad output would overwrite what the pool grad still reads', async () => {
    const { ps } = await programs('bench/seed_cnn_b32_64px_adam.model');
    const p = ps.train_step;
    const P = p.graph.nodes.find((n) => n.op === 'global_avgpool_grad')!;
    const U = p.graph.nodes.find((n) => n.op === 'unary_grad' && n.inputs[0] === P.outputs[0])!;
    const plan = planReluFusion(p, p.plan!.offsets);
    const mask = plan.redirect.get(U.id)?.get(1) ?? U.inputs[1];
    // put dx over the second half of the mask: the kernel would overwrite mask values before reading them
    const off = [...p.plan!.offsets];
    off[U.outputs[0]] = off[mask] + 4096;
    planReluGradFusion(p, off, plan);
    expect(plan.reluMask.size).toBe(0);
    expect(plan.skip.has(U.id)).toBe(false);
  });

  it('folds both LeNet relu-grads into their 2x2 max-pool grads, in place over the pool input (the mask)', async () => {
    const { ps } = await programs('bench/mnist_cnn_b64_sgdm.model');
    const p = ps.train_step;
    const plan = planReluFusion(p, p.plan!.offsets);
    planReluGradFusion(p, p.plan!.offsets, plan);
    const off = p.plan!.offsets;
    const pools = p.graph.nodes.filter((n) => n.op === 'maxpool2d_grad');
    expect(pools.length).toBe(2);
    const code = generateCpuModel(ps).files['model.cc'];
    for (const P of pools) {
      const U = p.graph.nodes.find((n) => n.op === 'unary_grad' && n.inputs[0] === P.outputs[0])!;
      const dx = U.outputs[0], x = P.inputs[1];
      // the relu-grad's mask (after fuse_relu's redirect) is the pool input, and dx is planned exactly over it
      expect(plan.redirect.get(U.id)?.get(1)).toBe(x);
      expect(off[dx]).toBe(off[x]);
      expect(plan.reluMask.get(P.id)).toBe(x);
      expect(plan.fused.get(P.id)).toBe(dx);
      expect(plan.skip.has(U.id)).toBe(true);
      expect(code).toMatch(new RegExp(`train_step node ${P.id}: maxpool2d_grad \\+ relu-grad \\(fused\\)`));
      expect(code).not.toMatch(new RegExp(`train_step node ${U.id}: unary_grad`));
    }
  });

  it('does not fold a max-pool grad on a partial overlap, over dy, with another reader of g, off the 2x2 / stride-2 kernel, or with a mask that is not the pool input', async () => {
    const { ps } = await programs('bench/mnist_cnn_b64_sgdm.model');
    const p = ps.train_step;
    const pools = p.graph.nodes.filter((n) => n.op === 'maxpool2d_grad');
    const fold = (off: readonly number[], relu = true, prog: Program = p) => {
      const plan = relu ? planReluFusion(prog, p.plan!.offsets) : { fused: new Map(), skip: new Set<number>(), redirect: new Map(), reluMask: new Map(), reluIn: new Set<number>() };
      planReluGradFusion(prog, off, plan);
      return pools.map((P) => plan.reluMask.has(P.id));
    };
    expect(fold(p.plan!.offsets)).toEqual([true, true]);
    for (const [k, P] of pools.entries()) {
      const U = p.graph.nodes.find((n) => n.op === 'unary_grad' && n.inputs[0] === P.outputs[0])!;
      const dx = U.outputs[0], [dy, x] = P.inputs;
      const expected = pools.map((_, i) => i !== k);
      // dx half a row pair past x: the kernel would write pool inputs before it reads them
      const shifted = [...p.plan!.offsets];
      shifted[dx] = shifted[x] + 4 * p.graph.values[x].shape[3];
      expect(fold(shifted)).toEqual(expected);
      // dx over dy, which the kernel reads while it writes
      const overDy = [...p.plan!.offsets];
      overDy[dx] = overDy[dy];
      expect(fold(overDy)).toEqual(expected);
      // g read by another node as well (a neg at the end that writes nothing): the pool grad must still write it
      const neg = { ...U, id: p.graph.nodes.length, op: 'unary', attrs: { fn: 'neg' }, inputs: [P.outputs[0]], outputs: [] };
      const extra: Program = { ...p, graph: { ...p.graph, nodes: [...p.graph.nodes, neg] } };
      expect(fold(p.plan!.offsets, true, extra)).toEqual(expected);
      // not a 2x2 / stride-2 window (same plan): only the 2x2 kernel takes a folded relu-grad
      const stride1: Program = { ...p, graph: { ...p.graph, nodes: p.graph.nodes.map((n) => (n.id === P.id ? { ...n, attrs: { ...n.attrs, stride: [1, 1] } } : n)) } };
      expect(fold(p.plan!.offsets, true, stride1)).toEqual(expected);
    }
    // without fuse_relu's redirect the relu-grads read their mask from the conv output, not the pool input
    expect(fold(p.plan!.offsets, false)).toEqual([false, false]);
  });
});

describe('relu folded into the global average pool that reads it (fuse_relu_pool.ts)', () => {
  it('folds the eval relu of the seed CNN (which the conv could not take) into the pool', async () => {
    const { ps } = await programs('bench/seed_cnn_b32_64px_adam.model');
    const p = ps.eval;
    const plan = planReluFusion(p, p.plan!.offsets);
    const R = p.graph.nodes.find((n) => n.op === 'unary' && n.attrs.fn === 'relu' && p.graph.nodes.some((g) => g.op === 'global_avgpool' && g.inputs[0] === n.outputs[0]))!;
    expect(plan.skip.has(R.id)).toBe(false); // the producer could not write the relu's output here
    planReluPoolFusion(p, p.plan!.offsets, plan);
    const G = p.graph.nodes.find((n) => n.op === 'global_avgpool')!;
    expect(plan.skip.has(R.id)).toBe(true);
    expect(plan.reluIn.has(G.id)).toBe(true);
    expect(plan.redirect.get(G.id)?.get(0)).toBe(R.inputs[0]);
    expect(generateCpuModel(ps).files['model.cc']).toMatch(/eval node \d+: global_avgpool of relu \(fused\)/);
  });

  it('does not fold when a node between the relu and the pool writes over the relu input', () => {
    // x -> y = relu(x); z = relu(y); t = relu(x); m = global_avgpool(z): t is written between R and G
    const b = new GraphBuilder();
    const x = b.value('x', 'f32', [1, 2, 4, 4], 'input');
    const y = b.value('y', 'f32', [1, 2, 4, 4], 'activation');
    const z = b.value('z', 'f32', [1, 2, 4, 4], 'activation');
    const t = b.value('t', 'f32', [1, 2, 4, 4], 'activation');
    const m = b.value('m', 'f32', [1, 2], 'activation');
    b.node('unary', [x], [y], { fn: 'relu' });
    const R = b.node('unary', [y], [z], { fn: 'relu' });
    b.node('unary', [x], [t], { fn: 'relu' });
    const G = b.node('global_avgpool', [z], [m], {});
    const p: Program = { name: 'eval', batch: 1, graph: b.graph, inputs: [x], outputs: [{ name: 'm', value: m }, { name: 't', value: t }] } as unknown as Program;
    const plan = () => ({ fused: new Map(), skip: new Set<number>(), redirect: new Map(), reluMask: new Map(), reluIn: new Set<number>() });
    const apart = [-1, 0, 128, 256, 384];
    const ok = plan();
    planReluPoolFusion(p, apart, ok);
    expect(ok.reluIn.has(G) && ok.skip.has(R)).toBe(true);
    const over = [-1, 0, 128, 64, 384]; // t overlaps y
    const no = plan();
    planReluPoolFusion(p, over, no);
    expect(no.reluIn.size).toBe(0);
    expect(no.skip.size).toBe(0);
  });
});

describe('input reshape aliasing', () => {
  it('skips the flatten of the image batch and lets its readers read the input in place', async () => {
    const { ps } = await programs('bench/mnist_mlp_b256_adam.model');
    const p = ps.train_step;
    const flat = p.graph.nodes.find((n) => n.op === 'reshape' && p.graph.values[n.inputs[0]].kind === 'input')!;
    const plan = planInputReshapeAliases(p);
    expect(plan.skip.has(flat.id)).toBe(true);
    const readers = p.graph.nodes.filter((n) => n.inputs.includes(flat.outputs[0]));
    expect(readers.length).toBeGreaterThan(0);
    for (const r of readers) expect([...plan.redirect.get(r.id)!.values()]).toEqual([flat.inputs[0]]);
    // a reshape of an activation is left alone
    const other = p.graph.nodes.filter((n) => n.op === 'reshape' && p.graph.values[n.inputs[0]].kind !== 'input');
    for (const n of other) expect(plan.skip.has(n.id)).toBe(false);
    const code = generateCpuModel(ps).files['model.cc'];
    expect(code).not.toMatch(new RegExp(`p0_k${flat.id}_reshape`));
  });
});

describe('syntheticBatch', () => {
  it('gives labels in range and f32 inputs in [-1, 1)', async () => {
    const { model, ps } = await programs('bench/mnist_mlp_b256_adam.model');
    const b = syntheticBatch(ps.train_step, model.numClasses, 1);
    const ints = b.find((a) => a instanceof Int32Array)!;
    const floats = b.find((a) => a instanceof Float32Array)!;
    expect(ints.reduce((m, v) => Math.min(m, v), Infinity)).toBeGreaterThanOrEqual(0);
    expect(ints.reduce((m, v) => Math.max(m, v), -Infinity)).toBe(model.numClasses! - 1);
    expect(floats.reduce((m, v) => Math.max(m, v), -Infinity)).toBeLessThan(1);
    expect(floats.reduce((m, v) => Math.min(m, v), Infinity)).toBeGreaterThanOrEqual(-1);
  });
});

describe('mpsc bench', () => {
  const mpsc = (...args: string[]) => spawnSync(process.execPath, [path.join(ROOT, 'bin', 'mpsc.js'), 'bench', ...args], { cwd: ROOT, env, encoding: 'utf8' });

  it('--json prints median ms, samples/s, GFLOP/s and peak memory of train and eval steps', () => {
    const r = mpsc('bench/mnist_mlp_b256_adam.model', '--device', 'cpu', '--steps', '3', '--warmup', '1', '--threads', '2', '--batch', '32', '--json');
    expect(r.status, r.stderr).toBe(0);
    const o = JSON.parse(r.stdout);
    expect(o).toMatchObject({ device: 'cpu', threads: 2, batch: 32 });
    for (const ph of [o.train, o.eval]) {
      expect(ph.median_ms).toBeGreaterThan(0);
      expect(ph.steps).toBe(3);
      expect(Math.abs(ph.samples_per_s / ((32 * 1000) / ph.median_ms) - 1)).toBeLessThan(0.01); // median_ms is rounded to 3 decimals
      expect(ph.gflops).toBeGreaterThan(0);
    }
    expect(o.flops.train_step).toBeGreaterThan(o.flops.eval);
    expect(o.flops.eval_gemm).toBe(2 * 32 * 784 * 256 + 2 * 32 * 256 * 10);
    expect(o.peak_bytes).toBeGreaterThan(203530 * 4 * 3);
    expect(o.rss_peak_bytes).toBeGreaterThan(o.peak_bytes);
  }, 300_000);

  it('prints a table without --json and rejects a bad --steps', () => {
    const r = mpsc('bench/mnist_mlp_b256_adam.model', '--device', 'reference', '--steps', '1', '--warmup', '0', '--batch', '4');
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/train\s+[\d.]+ ms\/step/);
    expect(r.stdout).toMatch(/eval\s+[\d.]+ ms\/step/);
    expect(r.stdout).toMatch(/GFLOP\/s/);
    const bad = mpsc('bench/mnist_mlp_b256_adam.model', '--steps', '0');
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/--steps must be a positive integer/);
  }, 120_000);
});
