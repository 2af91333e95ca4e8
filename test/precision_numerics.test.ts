/**
 * Mixed precision (issue 15), the numerics against PyTorch 2.13 (test/fixtures/torch_precision.json,
 * written by tools/torch_precision_fixture.py):
 *  - the reference's rounding to f16 / bf16 (compiler/reference/half.ts) equals torch's `.to(dtype)`
 *    bit for bit (value and sign) on edge cases (ties to even, the overflow midpoints, subnormals,
 *    NaN, inf, signed zeros) and on random values over each format's range;
 *  - the CPU backend's cast kernels (runtime/cpp/mpsc_half.hpp, F16C where the build targets it)
 *    give the same values (a generated program: cast -> cast back -> accumulate into a gradacc),
 *    and its bf16 x bf16 linears (linear_bf16: AMX tiles, VDPBF16PS or the widened f32 GEMM) equal the
 *    reference's to f32 summation noise; built three times: native flags (the AMX tiles where the CPU
 *    has them, else the default kernel), native flags with MPSC_CPU_BF16=vnni (the VDPBF16PS kernel
 *    where the build targets AVX-512 BF16) and the x86-64 baseline (-O3 alone: the scalar conversions,
 *    the widened GEMM);
 *  - runtime/loss_scaler.ts follows torch.amp.GradScaler step by step on the same inf / NaN
 *    pattern (4100 steps: back-offs, growth after 2000 finite steps, back-off after growth).
 */
import * as os from 'node:os';
import * as path from 'node:path';
import * as fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { GraphBuilder, type HalfDType, type ProgramSet } from '../compiler/ir/graph.js';
import { graphProblems } from '../compiler/ir/verify.js';
import { planMemory } from '../compiler/ir/memory_plan.js';
import { HALF_FORMATS, maxFinite, roundToHalf } from '../compiler/reference/half.js';
import { GRAD_SCALER_DEFAULTS, initialScaler, updateScaler } from '../runtime/loss_scaler.js';
import { createCpuSession } from '../runtime/native/native_session.js';
import { makeRng, relError } from '../compiler/reference/fixtures.js';
import { runProgram } from './ir_helpers.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const FIX = JSON.parse(fs.readFileSync(path.join(HERE, 'fixtures', 'torch_precision.json'), 'utf8'));
const CACHE = process.env.MPSC_CACHE_DIR ?? path.join(os.tmpdir(), 'mpsc-test-cache');

const dec = (v: number | string | null, negative: boolean): number => {
  if (v === null) return NaN;
  if (v === 'inf') return Infinity;
  if (v === '-inf') return -Infinity;
  return v === 0 && negative ? -0 : (v as number);
};
const R = FIX.rounding;
const xs: number[] = R.x.map((v: number | string | null, i: number) => dec(v, R.x_negative[i]));
const want = (d: HalfDType): number[] => R[d].map((v: number | string | null, i: number) => dec(v, R[`${d}_negative`][i]));
const same = (a: number, b: number) => Object.is(a, b) || (Number.isNaN(a) && Number.isNaN(b));

describe('rounding to f16 / bf16 (reference) equals torch', () => {
  for (const d of ['f16', 'bf16'] as const) {
    it(`${d}: ${xs.length} values, edge cases first`, () => {
      const w = want(d);
      const bad = xs.map((x, i) => [x, roundToHalf(x, d), w[i]]).filter(([, got, exp]) => !same(got, exp));
      expect(bad).toEqual([]);
    });
  }

  it('the named edge cases', () => {
    expect(maxFinite(HALF_FORMATS.f16)).toBe(65504);
    expect(roundToHalf(65519.99609375, 'f16')).toBe(65504); // below the midpoint
    expect(roundToHalf(65520, 'f16')).toBe(Infinity); // the midpoint: ties to even = 65536 = overflow
    expect(roundToHalf(2 ** -25, 'f16')).toBe(0); // half the smallest subnormal: tie to even (0)
    expect(roundToHalf(3 * 2 ** -25, 'f16')).toBe(2 ** -23); // tie between 1 and 2 subnormal steps: 2
    expect(roundToHalf(1 + 2 ** -11, 'f16')).toBe(1);
    expect(roundToHalf(1 + 3 * 2 ** -11, 'f16')).toBe(1 + 2 ** -9);
    expect(roundToHalf(1 + 2 ** -8, 'bf16')).toBe(1);
    expect(roundToHalf(2 ** -133, 'bf16')).toBe(2 ** -133); // the smallest bf16 subnormal is kept
    expect(Object.is(roundToHalf(-1e-30, 'f16'), -0)).toBe(true);
    expect(roundToHalf(NaN, 'bf16')).toBeNaN();
  });
});

/**
 * train_step: for each input x<j> of the given lengths and each type, x<j> -> cast(to) -> cast(f32)
 * -> grad_accumulate into `<type>.out<j>`, read back. Inputs shorter than 8 take the scalar path
 * of the conversions (the F16C loop handles 8 at a time).
 */
function castProgram(lengths: number[]): ProgramSet {
  const g = new GraphBuilder();
  const e = new GraphBuilder();
  const ins = lengths.map((n, j) => g.value(`x${j}`, 'f32', [n], 'input'));
  lengths.forEach((n, j) => e.value(`x${j}`, 'f32', [n], 'input'));
  // and linears with both operands bf16 (the CPU's bf16 kernels): [M, K] x [N, K]^T + bias, relu, one per LINS shape
  // (every input declared first, in the same order in both graphs: `ins` holds train_step's value ids for both programs)
  const linIns = LINS.map(([M, N, K], i) => {
    const vs = [g.value(`lin${i}.x`, 'f32', [M, K], 'input'), g.value(`lin${i}.w`, 'f32', [N, K], 'input'), g.value(`lin${i}.b`, 'f32', [N], 'input')];
    e.value(`lin${i}.x`, 'f32', [M, K], 'input'), e.value(`lin${i}.w`, 'f32', [N, K], 'input'), e.value(`lin${i}.b`, 'f32', [N], 'input');
    ins.push(...vs);
    return vs;
  });
  LINS.forEach(([M, N, K], i) => {
    const [lx, lw, lb] = linIns[i];
    const [x16] = g.emit('cast', [lx], [{ name: `lin${i}.x.bf16`, dtype: 'bf16', shape: [M, K] }], { to: 'bf16' });
    const [w16] = g.emit('cast', [lw], [{ name: `lin${i}.w.bf16`, dtype: 'bf16', shape: [N, K] }], { to: 'bf16' });
    const [ly] = g.emit('linear', [x16, w16, lb], [{ name: `lin${i}.y`, shape: [M, N] }], { epilogue: 'relu' });
    g.node('grad_accumulate', [g.value(`lin${i}.out`, 'f32', [M, N], 'gradacc'), ly], [], { scale: 1 });
  });
  lengths.forEach((n, j) => {
    for (const d of ['f16', 'bf16'] as const) {
      const acc = g.value(`${d}.out${j}`, 'f32', [n], 'gradacc');
      const [h] = g.emit('cast', [ins[j]], [{ name: `x${j}.${d}`, dtype: d, shape: [n] }], { to: d });
      const [back] = g.emit('cast', [h], [{ name: `x${j}.${d}.f32`, shape: [n] }], { to: 'f32' });
      g.node('grad_accumulate', [acc, back], [], { scale: 1 });
    }
  });
  expect(graphProblems(g.graph)).toEqual([]);
  const p = (name: 'train_step' | 'eval', graph: typeof g.graph) => {
    const prog = { name, batch: 1, graph, inputs: ins, outputs: [] };
    return { ...prog, plan: planMemory(prog) };
  };
  return { model: 'casts', train_step: p('train_step', g.graph), eval: p('eval', e.graph) };
}

/**
 * the bf16 linears' M, N, K: odd K everywhere (a last pair of one element); 3 x 5: fewer rows and columns than one
 * register block; 70 x 45: a row chunk and 6 rows past it, a panel of 32 columns and 13; 1100 x 70 x 65: large enough
 * for the AMX tiles where the CPU has them (amx::pays), else the VDPBF16PS kernel or the widened f32 GEMM
 */
const LINS: [number, number, number][] = [[3, 5, 75], [70, 45, 33], [1100, 70, 65]];

describe('CPU cast kernels equal torch; the bf16 linear equals the reference', () => {
  // native: F16C and AVX-512 BF16 on this machine; -O3 alone (x86-64 baseline): the scalar conversions, the widened GEMM
  const variants: { cxxflags?: string; bf16?: string }[] = [{}, { bf16: 'vnni' }, { cxxflags: '-O3' }];
  for (const { cxxflags, bf16 } of variants) {
    it(`f16 and bf16, vector and scalar paths (${cxxflags ?? 'native flags'}${bf16 ? `, MPSC_CPU_BF16=${bf16}` : ''})`, async () => {
      // all values (mostly the vector path), then the first 49 (the edge cases) in pieces of 7 (the scalar path)
      const starts = [0, ...Array.from({ length: 7 }, (_, j) => j * 7)];
      const lengths = [xs.length, ...Array(7).fill(7)];
      const programs = castProgram(lengths);
      const before = process.env.MPSC_CPU_BF16;
      if (bf16) process.env.MPSC_CPU_BF16 = bf16;
      let session: Awaited<ReturnType<typeof createCpuSession>>;
      try {
        session = await createCpuSession(programs, { threads: 2, cacheDir: CACHE, cxxflags });
      } finally {
        if (before === undefined) delete process.env.MPSC_CPU_BF16;
        else process.env.MPSC_CPU_BF16 = before;
      }
      try {
        const rng = makeRng(1);
        const lin = LINS.flatMap(([M, N, K]) => [M * K, N * K, N].map((n) => Float32Array.from({ length: n }, () => Math.fround(rng() * 4 - 2))));
        const inputs = [...lengths.map((n, j) => Float32Array.from(xs.slice(starts[j], starts[j] + n))), ...lin];
        session.run('train_step', inputs, { lr: 0, t: 1, seed: 0, counter: 0 });
        const store = new Map([...LINS.map(([M, N], i) => [`lin${i}.out`, new Float64Array(M * N)] as const), ...lengths.map((n, j) => [`f16.out${j}`, new Float64Array(n)] as const), ...lengths.map((n, j) => [`bf16.out${j}`, new Float64Array(n)] as const)]);
        runProgram(programs.train_step, store, inputs.map((a) => Float64Array.from(a)), { lr: 0, t: 1, seed: 0, counter: 0 });
        LINS.forEach((_, i) => {
          const want64 = store.get(`lin${i}.out`)!;
          expect(relError(session.read(`lin${i}.out`), want64), `linear ${LINS[i]}`).toBeLessThan(1e-6);
          expect(want64.some((v) => v === 0) && want64.some((v) => v > 0)).toBe(true); // the relu epilogue acted
        });
        for (const d of ['f16', 'bf16'] as const) {
          const w = want(d);
          lengths.forEach((n, j) => {
            const got = session.read(`${d}.out${j}`);
            // the accumulator starts at +0, so a -0 reads back as +0: zeros compare by value only
            const bad = [...got].map((v, i) => [xs[starts[j] + i], v, w[starts[j] + i]]).filter(([, g2, e2]) => !(same(g2, e2) || (g2 === 0 && e2 === 0)));
            expect(bad, `${d}, input ${j}`).toEqual([]);
          });
        }
      } finally {
        session.close();
      }
    }, 300_000);
  }
});

describe('the fp16 loss scaler follows torch.amp.GradScaler', () => {
  it('defaults', () => {
    const d = FIX.grad_scaler.defaults;
    expect(GRAD_SCALER_DEFAULTS).toEqual({ initScale: d.init_scale, growthFactor: d.growth_factor, backoffFactor: d.backoff_factor, growthInterval: d.growth_interval });
  });
  it(`the same scales and skipped steps over ${FIX.grad_scaler.steps.length} steps`, () => {
    const bad = new Set(Object.keys(FIX.grad_scaler.bad_steps).map(Number));
    let s = initialScaler();
    const rows: [number, boolean, number][] = [];
    FIX.grad_scaler.steps.forEach((_: unknown, step: number) => {
      const used = s.scale;
      s = updateScaler(s, bad.has(step));
      rows.push([used, bad.has(step), s.scale]);
    });
    expect(rows).toEqual(FIX.grad_scaler.steps);
    expect(s.skipped).toBe(bad.size);
  });
});
