/**
 * The element-wise function table (compiler/ir/scalar_fns.ts), for every fn and attribute
 * variant (test/unary_cases.ts derives both, and the kinks, from the table):
 *  - the reference (`unary` / `unary_grad` ops) equals PyTorch in float64, at the kinks too
 *    (test/fixtures/torch_unary_fns.json, written by tools/torch_unary_fixture.ts);
 *  - the gradient matches central differences of the forward, right next to the kinks;
 *  - renderScalar keeps each expression's meaning: rendered to JavaScript (C's precedence
 *    for these operators) and run, it gives evalScalar's values bit for bit.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  MATH_FN_ARITY, type MathFn, type ScalarLang, type UnaryFn, UNARY_FNS, UNARY_FNS_TABLE, evalScalar, renderScalar,
} from '../compiler/ir/scalar_fns.js';
import { erf, erfc } from '../compiler/ir/float64_math.js';
import { runOp } from '../compiler/reference/fixtures.js';
import { attrVariants, samplePoints } from './unary_cases.js';

interface FixtureCase { fn: string; attrs: Record<string, number>; x: number[]; y: number[]; dx: number[] }
const FIXTURE = JSON.parse(readFileSync(new URL('./fixtures/torch_unary_fns.json', import.meta.url), 'utf8')) as { cases: FixtureCase[] };

function ref(fn: UnaryFn, attrs: Record<string, number>, xs: number[], g?: number[]): { y: Float64Array; dx: Float64Array } {
  const shape = [xs.length];
  const x = { shape, data: Float64Array.from(xs) };
  const dy = { shape, data: Float64Array.from(g ?? xs.map(() => 1)) };
  const [y] = runOp('unary', [x], [shape], { fn, ...attrs });
  const [dx] = runOp('unary_grad', [dy, x], [shape], { fn, ...attrs });
  return { y, dx };
}

/** |a - b| <= tol * max(1, |b|) element-wise, NaN only where both are NaN */
function close(a: ArrayLike<number>, b: ArrayLike<number>, tol: number, what: string): void {
  expect(a.length).toBe(b.length);
  for (let i = 0; i < a.length; i++) {
    const ok = (Number.isNaN(a[i]) && Number.isNaN(b[i])) || Math.abs(a[i] - b[i]) <= tol * Math.max(1, Math.abs(b[i]));
    expect(ok, `${what} [${i}]: ${a[i]} vs ${b[i]}`).toBe(true);
  }
}

describe('element-wise fns: reference = PyTorch (float64)', () => {
  for (const fn of UNARY_FNS) {
    for (const attrs of attrVariants(fn)) {
      it(`${fn} ${JSON.stringify(attrs)}`, () => {
        const fc = FIXTURE.cases.find((c) => c.fn === fn && JSON.stringify(c.attrs) === JSON.stringify(attrs));
        expect(fc, `no PyTorch values for ${fn} ${JSON.stringify(attrs)}: run tools/torch_unary_fixture.ts`).toBeDefined();
        const p = samplePoints(fn, attrs);
        // the fixture was made at today's points (kinks included): a changed formula must regenerate it
        expect(fc!.x).toEqual([...p.exact, ...p.smooth]);
        const { y, dx } = ref(fn, attrs, fc!.x);
        close(y, fc!.y, 1e-13, `${fn} y`);
        close(dx, fc!.dx, 1e-13, `${fn} dx`);
      });
    }
  }
});

describe('element-wise fns: gradient = central differences, next to the kinks', () => {
  for (const fn of UNARY_FNS) {
    for (const attrs of attrVariants(fn)) {
      it(`${fn} ${JSON.stringify(attrs)}`, () => {
        // +-1e-3 from a kink with step 1e-6: the difference never straddles it
        const xs = samplePoints(fn, attrs).smooth.filter((x) => Math.abs(x) < 50);
        const g = xs.map((_, i) => 0.5 + 0.1 * (i % 7));
        const h = 1e-6;
        const up = ref(fn, attrs, xs.map((x) => x + h)).y, down = ref(fn, attrs, xs.map((x) => x - h)).y;
        const fd = xs.map((_, i) => (g[i] * (up[i] - down[i])) / (2 * h));
        const { dx } = ref(fn, attrs, xs, g);
        close(dx, fd, 1e-6, `${fn} dx vs FD`);
        expect(Math.max(...fd.map(Math.abs)), 'some gradient signal').toBeGreaterThan(0.1);
      });
    }
  }
});

describe('renderScalar keeps the meaning of every table expression', () => {
  const MATH: Record<MathFn, (...a: number[]) => number> = {
    exp: Math.exp, expm1: Math.expm1, log: Math.log, log1p: Math.log1p, sqrt: Math.sqrt, tanh: Math.tanh,
    erf, erfc, abs: Math.abs, max: Math.max, min: Math.min,
  };
  // literals printed exactly; a negative one as `-3` (the renderer must parenthesise it where C would need it)
  const JS: ScalarLang = {
    lit: (v) => String(v),
    call: (fn, args) => {
      expect(args.length).toBe(MATH_FN_ARITY[fn]);
      return `M.${fn}(${args.join(', ')})`;
    },
    select: (c, a, b) => `${c} ? ${a} : ${b}`,
  };
  for (const fn of UNARY_FNS) {
    for (const attrs of attrVariants(fn)) {
      it(`${fn} ${JSON.stringify(attrs)}`, () => {
        const d = UNARY_FNS_TABLE[fn];
        const fwd = new Function('M', 'x', `return ${renderScalar(d.fwd, JS, { x: 'x' }, attrs)};`);
        const grad = new Function('M', 'x', 'g', `return ${renderScalar(d.grad, JS, { x: 'x', g: 'g' }, attrs)};`);
        const p = samplePoints(fn, attrs);
        for (const x of [...p.exact, ...p.smooth]) {
          expect(fwd(MATH, x)).toBe(evalScalar(d.fwd, { vars: { x }, attrs }));
          expect(grad(MATH, x, 0.75)).toBe(evalScalar(d.grad, { vars: { x, g: 0.75 }, attrs }));
        }
      });
    }
  }

  it('keeps the grouping of non-associative float arithmetic and of unary minus', () => {
    const x = { k: 'var', name: 'x' } as const, g = { k: 'var', name: 'g' } as const;
    const sub = (a: object, b: object) => ({ k: 'bin', op: '-', a, b }) as never;
    const neg = (a: object) => ({ k: 'neg', a }) as never;
    expect(renderScalar(sub(x, sub(g, x)), JS, { x: 'x', g: 'g' }, {})).toBe('x - (g - x)');
    expect(renderScalar(sub(sub(x, g), x), JS, { x: 'x', g: 'g' }, {})).toBe('x - g - x');
    expect(renderScalar(neg(neg(x)), JS, { x: 'x' }, {})).toBe('-(-x)');
    expect(renderScalar(sub(x, { k: 'num', v: -3 }), JS, { x: 'x' }, {})).toBe('x - -3');
  });
});
