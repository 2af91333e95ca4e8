/**
 * Every Metal kernel (forward, backward, optimizer, and the 16-bit cast / GEMM / attention cases
 * of mixed precision), run through the MSL emulator at several
 * shapes, equals the float64 reference interpreter (max-norm relative error < 1e-4): both the
 * plain tiled GEMM path and the simdgroup-matrix path (simdgroup_float8x8; for 16-bit operands
 * half / bfloat tiles and simdgroup_half8x8 / bfloat8x8 operands into a float accumulator), on one
 * and on two emulator threads, and both paths with the threads of each threadgroup run in
 * descending order.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { OPS, type OpName } from '../compiler/ir/ops.js';
import { GPU_KERNELS } from '../compiler/kernels/registry.js';
import { relError } from '../compiler/reference/fixtures.js';
import { compileEmu, reference, runCases, type EmuBuild, type OpCase } from './metal_harness.js';
import { allOpCases, caseTolerance, fusedCases, halfCases, halfIoCases } from './metal_cases.js';
import { GEMM_OPS } from '../compiler/kernels/gemm.js';

const SCALARS = { lr: 0.05, t: 3, seed: 987654321, counter: 5 };
const fused = fusedCases();
const halves = halfCases();
const cases: OpCase[] = [...allOpCases(), ...fused, ...halves, ...halfIoCases()];
let build: EmuBuild;
const results: Record<string, (Map<number, Float64Array> | string)[]> = {};

beforeAll(() => {
  build = compileEmu(cases.map((c) => c.program));
  results.plain = runCases(build, cases, SCALARS);
  results.mma = runCases(build, cases, SCALARS, { MPSC_METAL_EMU_MMA: '1' });
  results.threads2 = runCases(build, cases, SCALARS, { MPSC_METAL_EMU_THREADS: '2' });
  // the threads of each threadgroup in descending order: a missing barrier whose race the
  // ascending order hides (the writer runs first) shows here
  results.reversed = runCases(build, cases, SCALARS, { MPSC_METAL_EMU_ORDER: 'reverse' });
  results.mma_reversed = runCases(build, cases, SCALARS, { MPSC_METAL_EMU_MMA: '1', MPSC_METAL_EMU_ORDER: 'reverse' });
});

describe('the portable (ucontext) fiber switch', () => {
  it('gives the same results on the barrier- and SIMD-heavy kernels', () => {
    const heavy = cases.filter((c) => ['linear', 'conv2d', 'softmax', 'batchnorm_train', 'cross_entropy', 'grad_norm'].includes(c.program.graph.nodes[0].op));
    const b = compileEmu(heavy.map((c) => c.program), {}, undefined, 'ucontext', undefined, ['-DMTLEMU_UCONTEXT']);
    const got = runCases(b, heavy, SCALARS);
    heavy.forEach((c, i) => {
      const r = got[i];
      if (typeof r === 'string') throw new Error(r);
      const ref = reference(c, SCALARS);
      for (const id of c.check) expect(relError(r.get(id)!, ref.get(id)!), c.program.name).toBeLessThan(1e-4);
    });
  });
});

describe('Metal kernels through the emulator equal the reference interpreter', () => {
  it('fuses a unary into the GEMM kernel before it (one launch per chain)', () => {
    for (const c of fused) {
      const p = build.art.programs[cases.indexOf(c)];
      expect(p.plan.steps.length, c.program.name).toBe(1);
      expect(p.library).toMatch(/fused node 0: unary/);
    }
  });

  it('the matrix-unit GEMM of 16-bit operands uses 16-bit tiles and operands into a float accumulator; the plain one and mixed operands stay float', () => {
    const seen = { half: 0, bfloat: 0, mixed: 0 };
    for (const c of halves) {
      const g = c.program.graph;
      const n = g.nodes.find((x) => GEMM_OPS.includes(x.op));
      if (!n) continue;
      const k = build.art.programs[cases.indexOf(c)].lowered.kernels.find((x) => x.node === n.id)!;
      const [ta, tb] = n.inputs.slice(0, 2).map((v) => g.values[v].dtype);
      const t = ta === tb && ta === 'f16' ? 'half' : ta === tb && ta === 'bf16' ? 'bfloat' : 'float';
      seen[t === 'float' ? 'mixed' : t]++;
      expect(k.body, c.program.name).not.toMatch(/threadgroup (half|bfloat)\*/);
      expect(k.mma!.body, c.program.name).toContain(`threadgroup ${t}* As = `);
      expect(k.mma!.body, c.program.name).toMatch(new RegExp(`simdgroup_${t}8x8 a;[\\s\\S]*simdgroup_multiply_accumulate\\(acc, a, b, acc\\)`));
      expect(k.mma!.body, c.program.name).toContain('simdgroup_float8x8 acc = ');
      expect(k.mma!.tgmem, c.program.name).toBe(t === 'float' ? 3072 : 2048);
    }
    expect(seen.half).toBeGreaterThanOrEqual(6);
    expect(seen.bfloat).toBeGreaterThanOrEqual(6);
    expect(seen.mixed).toBe(1);
  });

  it('covers every op of the catalogue that has a GPU kernel', () => {
    const covered = new Set(cases.map((c) => c.program.graph.nodes[0].op));
    // ops the registry routes to the CPU kernels ('cpu': none today) are covered by test/cpu_kernels.test.ts
    expect(Object.keys(OPS).filter((op) => !covered.has(op) && GPU_KERNELS[op as OpName] !== 'cpu')).toEqual([]);
  });

  for (const variant of ['plain', 'mma', 'threads2', 'reversed', 'mma_reversed']) {
    it.each(cases.map((c, i) => [c.program.name, i] as const))(`${variant}: %s`, (_name, i) => {
      const c = cases[i];
      const ref = reference(c, SCALARS);
      const got = results[variant][i];
      if (typeof got === 'string') throw new Error(got);
      for (const id of c.check) {
        const err = relError(got.get(id)!, ref.get(id)!);
        expect(err, `${c.program.graph.values[id].name}`).toBeLessThan(caseTolerance(c, 1e-4));
      }
    });
  }
});
