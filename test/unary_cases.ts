/**
 * Test inputs for the element-wise functions of compiler/ir/scalar_fns.ts, derived from the
 * table itself (so a new function is covered without editing a list): each fn's attribute
 * variants (the defaults, and every attr moved off its default), its kinks (the points where
 * one of its comparisons flips, solved from the expressions) and sample points around them.
 * Used by test/reference_scalar_fns.test.ts, test/cpu_kernels.test.ts and
 * tools/torch_unary_fixture.ts.
 */
import { type SExpr, type UnaryFn, UNARY_FNS_TABLE, evalScalar } from '../compiler/ir/scalar_fns.js';

/** the defaults, then (when the fn has attrs) each attr at 1.5*default + 0.25 */
export function attrVariants(fn: UnaryFn): Record<string, number>[] {
  const dflt = { ...(UNARY_FNS_TABLE[fn].attrs as Record<string, number>) };
  if (Object.keys(dflt).length === 0) return [dflt];
  return [dflt, Object.fromEntries(Object.entries(dflt).map(([k, v]) => [k, 1.5 * v + 0.25]))];
}

function comparisons(e: SExpr, out: SExpr[] = []): SExpr[] {
  switch (e.k) {
    case 'cmp': out.push(e); comparisons(e.a, out); comparisons(e.b, out); break;
    case 'neg': comparisons(e.a, out); break;
    case 'bin': comparisons(e.a, out); comparisons(e.b, out); break;
    case 'select': comparisons(e.c, out); comparisons(e.a, out); comparisons(e.b, out); break;
    case 'call': for (const a of e.args) comparisons(a, out); break;
    default: break;
  }
  return out;
}

/** the x where a comparison of fwd or grad flips, for comparisons linear in x (all of the table's are) */
export function kinks(fn: UnaryFn, attrs: Record<string, number>): number[] {
  const d = UNARY_FNS_TABLE[fn];
  const found = new Set<number>();
  for (const c of [...comparisons(d.fwd), ...comparisons(d.grad)]) {
    if (c.k !== 'cmp') continue;
    const h = (x: number) => evalScalar(c.a, { vars: { x, g: 1 }, attrs }) - evalScalar(c.b, { vars: { x, g: 1 }, attrs });
    const h0 = h(0), h1 = h(1), h2 = h(2);
    if (Math.abs(h2 - 2 * h1 + h0) > 1e-9 * (1 + Math.abs(h0)) || h1 === h0) {
      throw new Error(`${fn}: a comparison is not linear in x; give the test another way to find its kink`);
    }
    found.add(-h0 / (h1 - h0));
  }
  return [...found].sort((a, b) => a - b);
}

/**
 * Points to evaluate a fn at: its kinks (exactly, where the fn's subgradient choice shows),
 * kink +- 1e-3, a grid over [-4, 4] stretched to 2 past the outermost kinks, and far values
 * (+-30, +-100: saturation, no overflow).
 */
export function samplePoints(fn: UnaryFn, attrs: Record<string, number>): { exact: number[]; smooth: number[] } {
  const ks = kinks(fn, attrs);
  const lo = Math.min(-4, ...ks.map((k) => k - 2)), hi = Math.max(4, ...ks.map((k) => k + 2));
  const grid = Array.from({ length: 23 }, (_, i) => lo + ((hi - lo) * (i + 0.37)) / 23);
  const smooth = [...grid, ...ks.flatMap((k) => [k - 1e-3, k + 1e-3]), -30, 30, -100, 100];
  return { exact: ks, smooth };
}
