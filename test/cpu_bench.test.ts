/**
 * issue 6: the FLOP counter (compiler/ir/flops.ts), what the CPU backend fuses on the example
 * workloads (compiler/ir/fuse.ts with codegen-cpu/fusions.ts) and `mpsc bench` (cli/bench.ts,
 * runtime/bench.ts). The pass on its own: test/ir_fuse.test.ts.
 */
import { spawnSync } from 'node:child_process';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { checkFile } from '../compiler/check/index.js';
import { countFlops } from '../compiler/ir/flops.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { cpuPrograms, generateCpuModel } from '../compiler/codegen-cpu/emit_program.js';
import { planInputReshapeAliases } from '../compiler/codegen-cpu/alias_reshape.js';
import type { Program } from '../compiler/ir/graph.js';
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

describe('CPU fusions (compiler/ir/fuse.ts with CPU_FUSIONS, planned after fusing)', () => {
  const fusedNodes = (p: Program) => p.graph.nodes.filter((n) => n.attrs.epilogue !== undefined || n.attrs.relu_grad !== undefined || n.attrs.relu_in !== undefined);

  it('folds the MLP relu into fc1, and its relu-grad, reading the relu output, into the grad-input product before it', async () => {
    const { ps } = await programs('bench/mnist_mlp_b256_adam.model');
    const p = cpuPrograms(ps).train_step;
    expect(p.graph.nodes.some((n) => n.op === 'unary' && n.attrs.fn === 'relu')).toBe(false);
    const fc1 = p.graph.nodes.find((n) => n.op === 'linear' && n.attrs.epilogue === 'relu')!;
    // rule 12: no unary_grad left; the matmul writing its g masks its store with fc1's relu output (its last input)
    expect(p.graph.nodes.some((n) => n.op === 'unary_grad')).toBe(false);
    const dx = p.graph.nodes.find((n) => n.op === 'matmul' && n.attrs.grad_fn === 'relu')!;
    expect(dx.inputs.at(-1)).toBe(fc1.outputs[0]);
    const code = generateCpuModel(ps).files['model.cc'];
    expect(code).toMatch(new RegExp(`train_step node ${dx.id}: matmul \\+ relu-grad \\(fused\\)`));
    expect(code).toMatch(/ep\.mask = /);
    expect(fusedNodes(cpuPrograms(ps).eval).map((n) => [n.op, n.attrs.epilogue])).toEqual([['linear', 'relu']]);
  });

  it('LeNet: every conv / linear relu folded (eval too), and the generated code says what it fused', async () => {
    const { ps } = await programs('bench/mnist_cnn_b64_sgdm.model');
    for (const p of [cpuPrograms(ps).train_step, cpuPrograms(ps).eval]) {
      expect(p.graph.nodes.filter((n) => n.op === 'unary').map((n) => n.attrs.fn)).toEqual([]);
      expect(p.graph.nodes.filter((n) => n.attrs.epilogue === 'relu').map((n) => n.op)).toEqual(['conv2d', 'conv2d', 'linear']);
    }
    const code = generateCpuModel(ps).files['model.cc'];
    expect(code).toMatch(/train_step node \d+: conv2d \+ relu \(fused\)/);
    expect(code).toMatch(/eval node 2: conv2d \+ relu \(fused\)/);
    expect(code).toMatch(/train_step node \d+: linear \+ relu \(fused\)/);
    const off = generateCpuModel(ps, { fuse: false }).files['model.cc'];
    expect(off).not.toMatch(/\(fused\)/);
    // MPSC_CPU_AMX=0 (amx: false): the generated source turns the AMX path off before the fast core is included
    const noAmx = generateCpuModel(ps, { amx: false }).files['model.cc'];
    expect(noAmx).toMatch(/^#define MPSC_FAST_AMX 0 .*\n#include "mpsc_kernels.hpp"$/m);
    expect(code).not.toMatch(/MPSC_FAST_AMX/);
    // MPSC_CPU_MR=12 (mr: 12): the 16-lane kernel's 12-row tile, only where the build has AVX-512
    const mr12 = generateCpuModel(ps, { mr: 12 }).files['model.cc'];
    expect(mr12).toMatch(/^#if defined\(__AVX512F__\)\n#define MPSC_FAST_MR 12 .*\n#endif\n#include "mpsc_kernels.hpp"$/m);
    expect(code).not.toMatch(/MPSC_FAST_MR/);
    // MPSC_CPU_FMA_GRID=0 (fmaGrid: false): the FMA path's one-axis split; the default leaves sgemm.h's grid on
    const noGrid = generateCpuModel(ps, { fmaGrid: false }).files['model.cc'];
    expect(noGrid).toMatch(/^#define MPSC_FAST_FMA_GRID 0 .*\n#include "mpsc_kernels.hpp"$/m);
    expect(code).not.toMatch(/MPSC_FAST_FMA_GRID/);
  });

  it('folds the relu-grad after the global-avgpool grad of the seed CNN, masked by the fused relu output', async () => {
    const { ps } = await programs('bench/seed_cnn_b32_64px_adam.model');
    const p = cpuPrograms(ps).train_step;
    const P = p.graph.nodes.find((n) => n.op === 'global_avgpool_grad')!;
    expect(P.attrs.relu_grad).toBe(true);
    const conv2 = p.graph.nodes.filter((n) => n.op === 'conv2d')[1];
    expect(conv2.attrs.epilogue).toBe('relu');
    expect(P.inputs[1]).toBe(conv2.outputs[0]);
    expect(p.graph.nodes.some((n) => n.op === 'unary_grad' && n.inputs[0] === P.outputs[0])).toBe(false);
    // element-wise in the mask: planned in place over it
    expect(p.plan!.offsets[P.outputs[0]]).toBe(p.plan!.offsets[P.inputs[1]]);
    const code = generateCpuModel(ps).files['model.cc'];
    expect(code).toMatch(/train_step node \d+: global_avgpool_grad \+ relu-grad \(fused\)/);
  });

  it('folds both LeNet relu-grads into their 2x2 max-pool grads, in place over the pool input (the mask)', async () => {
    const { ps } = await programs('bench/mnist_cnn_b64_sgdm.model');
    const p = cpuPrograms(ps).train_step;
    const pools = p.graph.nodes.filter((n) => n.op === 'maxpool2d_grad');
    expect(pools.length).toBe(2);
    const code = generateCpuModel(ps).files['model.cc'];
    for (const P of pools) {
      const [, x, mask] = P.inputs;
      expect(P.attrs.relu_grad).toBe(true);
      expect(mask).toBe(x);
      expect(p.plan!.offsets[P.outputs[0]]).toBe(p.plan!.offsets[x]);
      expect(code).toMatch(new RegExp(`train_step node ${P.id}: maxpool2d_grad \\+ relu-grad \\(fused\\)`));
    }
    // fc1's relu-grad (no pool to fold into) went into fc2's grad-input product, masked by fc1's fused relu output
    expect(p.graph.nodes.filter((n) => n.op === 'unary_grad')).toEqual([]);
    const masked = p.graph.nodes.filter((n) => n.attrs.grad_fn === 'relu');
    expect(masked.map((n) => [n.op, p.graph.nodes.find((m) => m.outputs.includes(n.inputs.at(-1)!))!.op])).toEqual([['matmul', 'linear']]);
  });

  it('folds a relu whose producer is not a GEMM into the global_avgpool reading it (ResNet: after the residual add)', async () => {
    const { ps } = await programs('specs/resnet_small.model');
    for (const p of [cpuPrograms(ps).train_step, cpuPrograms(ps).eval]) {
      const G = p.graph.nodes.find((n) => n.op === 'global_avgpool')!;
      expect(G.attrs.relu_in).toBe(true);
      expect(p.graph.nodes.find((n) => n.outputs.includes(G.inputs[0]))!.op).toBe('binary');
    }
    expect(generateCpuModel(ps).files['model.cc']).toMatch(/eval node \d+: global_avgpool of relu \(fused\)/);
  });
});

describe('CPU residual adds in the layernorms (fuse.ts rules 5 and 6)', () => {
  it('GPT tiny: every residual add of the train step goes into a layernorm (forward) or layernorm_grad (backward)', async () => {
    const { ps } = await programs('bench/gpt_tiny_b32_t64.model');
    const plain = ps.train_step.graph.nodes, p = cpuPrograms(ps).train_step;
    const adds = plain.filter((n) => n.op === 'binary' && n.attrs.fn === 'add').length;
    expect(p.graph.nodes.filter((n) => n.op === 'binary').length).toBe(0);
    const lns = p.graph.nodes.filter((n) => n.op === 'layernorm'), grads = p.graph.nodes.filter((n) => n.op === 'layernorm_grad');
    expect(lns.filter((n) => n.attrs.add_in === true).length + grads.filter((n) => n.attrs.add_out === true).length).toBe(adds);
    expect(grads.some((n) => n.attrs.sum_out !== undefined)).toBe(false);
    const code = generateCpuModel(ps).files['model.cc'];
    expect(code).toMatch(/train_step node \d+: layernorm of the residual add \(fused\)/);
    expect(code).toMatch(/train_step node \d+: layernorm_grad \+ residual-gradient add \(fused\)/);
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
      // the mean of three steps: at least the fastest, and its sum at least the median plus twice the fastest
      expect(ph.mean_ms).toBeGreaterThanOrEqual(ph.min_ms);
      expect(3 * ph.mean_ms).toBeGreaterThanOrEqual(ph.median_ms + 2 * ph.min_ms - 0.005); // each rounded to 3 decimals
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
