/**
 * The issue-13 ops of the reference interpreter against PyTorch's float64 values
 * (test/fixtures/torch_tensor_ops.json, written by tools/torch_tensor_ops_fixture.py with the
 * inputs it used): fused attention (o, lse and the three gradients; causal with S = T and with
 * S > T, and non-causal), cross_entropy over [N, T, C] with ignore_index (all ignored: NaN),
 * torch.max(dim)'s gradient on ties (the first maximum), broadcasting matmul and its gradients,
 * layernorm without weight / bias. And the fused attention against the hand-written one
 * (matmul transB, affine, causal masked_fill -inf, softmax, matmul), forward and gradients.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { makeRng, randomTensor, relError, runOp } from '../compiler/reference/fixtures.js';

interface Fx { name: string; op: string; attrs?: Record<string, number | boolean>; shapes: Record<string, number[]>; [k: string]: unknown }
const FIX = JSON.parse(readFileSync(new URL('./fixtures/torch_tensor_ops.json', import.meta.url), 'utf8')) as { cases: Fx[] };
const arr = (c: Fx, k: string) => Float64Array.from(c[k] as number[]);
const f = (shape: number[], data: Float64Array) => ({ shape, data });
const TOL = 1e-12;

describe('issue-13 ops: reference = PyTorch (float64)', () => {
  for (const c of FIX.cases.filter((x) => x.op === 'attention')) {
    it(`${c.name}: attention and attention_grad`, () => {
      const qs = c.shapes.q, ks = c.shapes.k, [N, H, T] = qs;
      const attrs = c.attrs!;
      const [o, lse] = runOp('attention', [f(qs, arr(c, 'q')), f(ks, arr(c, 'k')), f(ks, arr(c, 'v'))], [qs, [N, H, T]], attrs);
      expect(relError(o, arr(c, 'o'))).toBeLessThan(TOL);
      expect(relError(lse, arr(c, 'lse'))).toBeLessThan(TOL);
      const [dq, dk, dv] = runOp('attention_grad', [f(qs, arr(c, 'do')), f(qs, arr(c, 'q')), f(ks, arr(c, 'k')), f(ks, arr(c, 'v')), f(qs, o), f([N, H, T], lse)], [qs, ks, ks], attrs);
      expect(relError(dq, arr(c, 'dq'))).toBeLessThan(TOL);
      expect(relError(dk, arr(c, 'dk'))).toBeLessThan(TOL);
      expect(relError(dv, arr(c, 'dv'))).toBeLessThan(TOL);
    });
  }

  for (const c of FIX.cases.filter((x) => x.op === 'cross_entropy')) {
    it(`${c.name}: cross_entropy over [N, T, C]`, () => {
      const xs = c.shapes.x, ys = xs.slice(0, -1);
      const ins = [f(xs, arr(c, 'x')), { shape: ys, data: arr(c, 'y'), dtype: 'i32' as const }];
      const [loss] = runOp('cross_entropy', ins, [[]], c.attrs!);
      if (c.loss === 'nan') {
        expect(Number.isNaN(loss[0])).toBe(true);
        return;
      }
      expect(Math.abs(loss[0] - (c.loss as number))).toBeLessThan(TOL);
      const [dx] = runOp('cross_entropy_grad', ins, [xs], c.attrs!);
      expect(relError(dx, arr(c, 'dx'))).toBeLessThan(TOL);
    });
  }

  it('torch.max(dim) on ties: the gradient goes to the first maximal element', () => {
    const c = FIX.cases.find((x) => x.name === 'max_dim_ties')!;
    const xs = c.shapes.x;
    const [y] = runOp('reduce', [f(xs, arr(c, 'x'))], [[xs[0]]], { fn: 'max', axes: [1], keepdim: false });
    expect(Array.from(y)).toEqual(c.y);
    const [dx] = runOp('reduce_max_grad', [f([xs[0]], arr(c, 'dy')), f(xs, arr(c, 'x'))], [xs], { axes: [1], keepdim: false });
    expect(Array.from(dx)).toEqual(c.dx);
  });

  it('broadcasting matmul and its gradients (autodiff rule: swapped transposes + sum_to)', () => {
    const c = FIX.cases.find((x) => x.name === 'matmul_bcast')!;
    const as = c.shapes.a, bs = c.shapes.b, ys = c.shapes.y;
    const a = f(as, arr(c, 'a')), b = f(bs, arr(c, 'b')), dy = f(ys, arr(c, 'dy'));
    const [y] = runOp('matmul', [a, b], [ys], { transA: false, transB: false });
    expect(relError(y, arr(c, 'y'))).toBeLessThan(TOL);
    const ga = runOp('matmul', [dy, b], [[...ys.slice(0, -2), as[2], as[3]]], { transA: false, transB: true })[0];
    const gb = runOp('matmul', [a, dy], [[...ys.slice(0, -2), bs[1], bs[2]]], { transA: true, transB: false })[0];
    const [da] = runOp('sum_to', [f([...ys.slice(0, -2), as[2], as[3]], ga)], [as], { shape: as });
    const [db] = runOp('sum_to', [f([...ys.slice(0, -2), bs[1], bs[2]], gb)], [bs], { shape: bs });
    expect(relError(da, arr(c, 'da'))).toBeLessThan(TOL);
    expect(relError(db, arr(c, 'db'))).toBeLessThan(TOL);
  });

  it('layernorm without weight and bias', () => {
    const c = FIX.cases.find((x) => x.name === 'layernorm_noaffine')!;
    const xs = c.shapes.x, r = xs.slice(0, -1);
    const [y, mean, rstd] = runOp('layernorm', [f(xs, arr(c, 'x')), null, null], [xs, r, r], { eps: 1e-5 });
    expect(relError(y, arr(c, 'y'))).toBeLessThan(1e-10);
    const [dx] = runOp('layernorm_grad', [f(xs, arr(c, 'dy')), f(xs, arr(c, 'x')), null, f(r, mean), f(r, rstd)], [xs, [xs[1]], [xs[1]]]);
    expect(relError(dx, arr(c, 'dx'))).toBeLessThan(1e-10);
  });
});

describe('fused attention = the hand-written composition (reference)', () => {
  for (const [T, S, causal] of [[5, 5, true], [3, 7, true], [4, 6, false]] as const) {
    it(`T ${T}, S ${S}, causal ${causal}`, () => {
      const rng = makeRng(T * 10 + S);
      const N = 2, H = 3, D = 4, scale = 0.5;
      const qs = [N, H, T, D], ks = [N, H, S, D], ss = [N, H, T, S];
      const q = f(qs, randomTensor(qs, rng)), k = f(ks, randomTensor(ks, rng)), v = f(ks, randomTensor(ks, rng));
      const [o] = runOp('attention', [q, k, v], [qs, [N, H, T]], { causal, scale });
      const [s] = runOp('matmul', [q, k], [ss], { transA: false, transB: true });
      const [sc] = runOp('unary', [f(ss, s)], [ss], { fn: 'affine', scale, shift: 0 });
      const [m] = causal ? runOp('masked_fill', [f(ss, sc), null], [ss], { value: -Infinity, causal: true }) : [sc];
      const [p] = runOp('softmax', [f(ss, m)], [ss], { axis: 3 });
      const [o2] = runOp('matmul', [f(ss, p), v], [qs], { transA: false, transB: false });
      expect(relError(o, o2)).toBeLessThan(1e-14);
    });
  }
});
