/**
 * scalar_fns: the element-wise functions of the IR (`unary {fn}` / `unary_grad {fn}`,
 * `binary {fn}`) written ONCE, as plain-data scalar expressions, with PyTorch's exact
 * semantics. Every executor renders or evaluates these expressions; none spells a
 * function's formula itself:
 *   - the reference interpreter evaluates them in float64 (`evalScalar`);
 *   - the CPU backend renders them to C++ float (`renderScalar` with `CPP_SCALAR_LANG`);
 *   - GPU dialects render them through their own `ScalarLang` (MSL, next CUDA).
 *
 * Consumes nothing; produces the tables `UNARY_FNS_TABLE` / `BINARY_FNS_TABLE`, the
 * expression language (`SExpr`, `MathFn`), its evaluator and its renderer. Relies on
 * float64_math.ts for erf / erfc.
 *
 * The expression language (closed on purpose, so every target can spell all of it):
 *   var    `x` the forward input, `g` the incoming gradient dy (only in `grad`),
 *          `a` / `b` the operands of a binary fn;
 *   num    a literal (rendered in the target's compute type, float today);
 *   attr   a numeric attribute of the node, with the default given in the table entry;
 *   bin    + - * / (evaluated left to right as written: the renderer keeps the grouping);
 *   neg    unary minus;
 *   cmp    < <= > >= (false when an operand is NaN, as in C);
 *   select select(c, a, b) = c ? a : b;
 *   call   one of the MathFn below.
 * A `grad` expression is the whole dx = dy * f'(x), written with g, so a function can
 * choose where g goes (for example `select(x > 0, g, 0)` for relu).
 */
import { erf, erfc } from './float64_math.js';

export type ScalarVar = 'x' | 'g' | 'a' | 'b';

/**
 * The math functions an expression may call, with their float64 meaning (what the
 * reference computes). A target maps each to its own library function of the same
 * meaning in its compute type (C++: std::, MSL: precise::).
 *   exp, expm1 (exp(x)-1), log, log1p (log(1+x)), sqrt, tanh, erf, erfc (1-erf(x)),
 *   abs, max(a, b), min(a, b): max / min of two non-NaN values (with a NaN operand the
 *   result is target-dependent: write a `select` when NaN propagation matters).
 */
export type MathFn = 'exp' | 'expm1' | 'log' | 'log1p' | 'sqrt' | 'tanh' | 'erf' | 'erfc' | 'abs' | 'max' | 'min';
export const MATH_FN_ARITY: Record<MathFn, 1 | 2> = {
  exp: 1, expm1: 1, log: 1, log1p: 1, sqrt: 1, tanh: 1, erf: 1, erfc: 1, abs: 1, max: 2, min: 2,
};

export type BinOp = '+' | '-' | '*' | '/';
export type CmpOp = '<' | '<=' | '>' | '>=';

export type SExpr =
  | { k: 'var'; name: ScalarVar }
  | { k: 'num'; v: number }
  | { k: 'attr'; name: string }
  | { k: 'bin'; op: BinOp; a: SExpr; b: SExpr }
  | { k: 'neg'; a: SExpr }
  | { k: 'cmp'; op: CmpOp; a: SExpr; b: SExpr }
  | { k: 'select'; c: SExpr; a: SExpr; b: SExpr }
  | { k: 'call'; fn: MathFn; args: SExpr[] };

export interface UnaryFnDef {
  /** numeric attributes of the fn with their defaults (PyTorch's argument names and defaults) */
  attrs: Record<string, number>;
  /** y = f(x) */
  fwd: SExpr;
  /** dx = g * f'(x), x the forward input (the derivative PyTorch's backward computes, kinks included) */
  grad: SExpr;
  /** one line: the formula and its kinks */
  doc: string;
  /** the PyTorch equivalent */
  torch: string;
}

export interface BinaryFnDef {
  /** y = f(a, b) */
  fwd: SExpr;
  doc: string;
  torch: string;
}

// ------------------------------------------------------------------ builders (for writing the tables)

type E = SExpr | number;
const lift = (e: E): SExpr => (typeof e === 'number' ? { k: 'num', v: e } : e);
const v = (name: ScalarVar): SExpr => ({ k: 'var', name });
const attr = (name: string): SExpr => ({ k: 'attr', name });
const bin = (op: BinOp) => (a: E, b: E): SExpr => ({ k: 'bin', op, a: lift(a), b: lift(b) });
const cmp = (op: CmpOp) => (a: E, b: E): SExpr => ({ k: 'cmp', op, a: lift(a), b: lift(b) });
const add = bin('+'), sub = bin('-'), mul = bin('*'), div = bin('/');
const lt = cmp('<'), le = cmp('<='), gt = cmp('>'), ge = cmp('>=');
const neg = (a: E): SExpr => ({ k: 'neg', a: lift(a) });
const select = (c: SExpr, a: E, b: E): SExpr => ({ k: 'select', c, a: lift(a), b: lift(b) });
const call = (fn: MathFn, ...args: E[]): SExpr => ({ k: 'call', fn, args: args.map(lift) });
const exp = (a: E) => call('exp', a);

const x = v('x'), g = v('g');
/** 1/(1+exp(-e)): accurate in float64 and float for every e (exp overflow gives 0, not NaN) */
const sigmoidOf = (e: E): SExpr => {
  const ne = typeof e !== 'number' && e.k === 'neg' ? e.a : neg(e);
  return div(1, add(1, exp(ne)));
};
/** log(1+exp(e)) without overflow: max(e,0) + log1p(exp(-|e|)) */
const softplusOf = (e: E): SExpr => add(call('max', e, 0), call('log1p', exp(neg(call('abs', e)))));
/** clamp with NaN passing through (as torch.clamp): lo where e < lo, hi where e > hi */
const clampOf = (e: E, lo: E, hi: E): SExpr => select(lt(e, lo), lo, select(gt(e, hi), hi, e));

const SQRT1_2 = Math.SQRT1_2;
const INV_SQRT_2PI = 1 / Math.sqrt(2 * Math.PI);
const onePlusErf = add(1, call('erf', mul(x, SQRT1_2))); // 2*Phi(x), as torch's gelu and its backward spell it
const bx = mul(x, attr('beta'));
const tanhSp = call('tanh', softplusOf(x));

// ------------------------------------------------------------------ the tables

export const UNARY_FNS_TABLE = {
  relu: {
    attrs: {},
    fwd: select(lt(x, 0), 0, x),
    grad: select(gt(x, 0), g, 0),
    doc: "max(x, 0) (NaN passes through); relu'(0) = 0",
    torch: 'torch.relu(x)',
  },
  leaky_relu: {
    attrs: { alpha: 0.01 },
    fwd: select(gt(x, 0), x, mul(attr('alpha'), x)),
    grad: select(gt(x, 0), g, mul(attr('alpha'), g)),
    doc: "x > 0 ? x : alpha*x; leaky_relu'(0) = alpha",
    torch: 'torch.nn.functional.leaky_relu(x, negative_slope=alpha)',
  },
  gelu: {
    attrs: {},
    fwd: mul(mul(0.5, x), onePlusErf),
    grad: mul(g, add(mul(0.5, onePlusErf), mul(mul(x, exp(mul(mul(-0.5, x), x))), INV_SQRT_2PI))),
    doc: 'exact GELU x*Phi(x) = 0.5*x*(1 + erf(x/sqrt(2)))',
    torch: 'torch.nn.functional.gelu(x)',
  },
  sigmoid: {
    attrs: {},
    fwd: sigmoidOf(x),
    // s(x)*(1-s(x)) written s(x)*s(-x): no cancellation in 1-s for large x, two exps
    grad: mul(g, mul(sigmoidOf(x), sigmoidOf(neg(x)))),
    doc: '1/(1 + exp(-x))',
    torch: 'torch.sigmoid(x)',
  },
  tanh: {
    attrs: {},
    fwd: call('tanh', x),
    grad: mul(g, sub(1, mul(call('tanh', x), call('tanh', x)))),
    doc: 'tanh(x)',
    torch: 'torch.tanh(x)',
  },
  neg: {
    attrs: {},
    fwd: neg(x),
    grad: neg(g),
    doc: '-x',
    torch: '-x',
  },
  silu: {
    attrs: {},
    fwd: mul(x, sigmoidOf(x)),
    // s(x) * (1 + x*(1 - s(x))), with 1 - s(x) written as s(-x)
    grad: mul(g, mul(sigmoidOf(x), add(1, mul(x, sigmoidOf(neg(x)))))),
    doc: 'x*sigmoid(x) (also called swish)',
    torch: 'torch.nn.functional.silu(x)',
  },
  relu6: {
    attrs: {},
    fwd: clampOf(x, 0, 6),
    grad: select(le(x, 0), 0, select(ge(x, 6), 0, g)),
    doc: "min(max(x, 0), 6); relu6'(0) = relu6'(6) = 0 (torch's hardtanh backward)",
    torch: 'torch.nn.functional.relu6(x)',
  },
  hardtanh: {
    attrs: { min_val: -1, max_val: 1 },
    fwd: clampOf(x, attr('min_val'), attr('max_val')),
    grad: select(le(x, attr('min_val')), 0, select(ge(x, attr('max_val')), 0, g)),
    doc: 'min(max(x, min_val), max_val); gradient 0 at and outside the bounds',
    torch: 'torch.nn.functional.hardtanh(x, min_val, max_val)',
  },
  hardswish: {
    attrs: {},
    fwd: div(mul(x, clampOf(add(x, 3), 0, 6)), 6),
    // torch's hardswish_backward: 0 for x <= -3, x/3 + 1/2 for -3 < x < 3, 1 for x >= 3
    grad: select(le(x, -3), 0, select(lt(x, 3), mul(g, add(div(x, 3), 0.5)), g)),
    doc: "x*relu6(x + 3)/6; hardswish'(-3) = 0, hardswish'(3) = 1 (torch)",
    torch: 'torch.nn.functional.hardswish(x)',
  },
  softplus: {
    attrs: { beta: 1, threshold: 20 },
    fwd: select(gt(bx, attr('threshold')), x, div(softplusOf(bx), attr('beta'))),
    grad: select(gt(bx, attr('threshold')), g, mul(g, sigmoidOf(bx))),
    doc: 'log(1 + exp(beta*x))/beta, reverting to x where beta*x > threshold',
    torch: 'torch.nn.functional.softplus(x, beta, threshold)',
  },
  elu: {
    attrs: { alpha: 1 },
    fwd: select(gt(x, 0), x, mul(attr('alpha'), call('expm1', x))),
    grad: select(gt(x, 0), g, mul(g, mul(attr('alpha'), exp(x)))),
    doc: "x > 0 ? x : alpha*(exp(x) - 1); elu'(0) = alpha",
    torch: 'torch.nn.functional.elu(x, alpha)',
  },
  mish: {
    attrs: {},
    fwd: mul(x, tanhSp),
    grad: mul(g, add(tanhSp, mul(mul(x, sigmoidOf(x)), sub(1, mul(tanhSp, tanhSp))))),
    doc: 'x*tanh(softplus(x)) (softplus with beta 1 and no threshold, as torch)',
    torch: 'torch.nn.functional.mish(x)',
  },
} satisfies Record<string, UnaryFnDef>;

export type UnaryFn = keyof typeof UNARY_FNS_TABLE;
/** the element-wise unary functions, in table order */
export const UNARY_FNS = Object.keys(UNARY_FNS_TABLE) as UnaryFn[];

export function isUnaryFn(s: string): s is UnaryFn {
  return Object.prototype.hasOwnProperty.call(UNARY_FNS_TABLE, s);
}

const a = v('a'), b = v('b');
export const BINARY_FNS_TABLE = {
  add: { fwd: add(a, b), doc: 'a + b', torch: 'a + b' },
  sub: { fwd: sub(a, b), doc: 'a - b', torch: 'a - b' },
  mul: { fwd: mul(a, b), doc: 'a * b', torch: 'a * b' },
} satisfies Record<string, BinaryFnDef>;

export type BinaryFn = keyof typeof BINARY_FNS_TABLE;
export const BINARY_FNS = Object.keys(BINARY_FNS_TABLE) as BinaryFn[];

export function isBinaryFn(s: string): s is BinaryFn {
  return Object.prototype.hasOwnProperty.call(BINARY_FNS_TABLE, s);
}

/**
 * The attribute values of a unary fn for one node: each attr of the table entry, read
 * with `read(name, default)` (the caller's attribute reader, which reports bad values).
 */
export function unaryFnAttrs(fn: UnaryFn, read: (name: string, dflt: number) => number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, dflt] of Object.entries(UNARY_FNS_TABLE[fn].attrs as Record<string, number>)) out[name] = read(name, dflt);
  return out;
}

// ------------------------------------------------------------------ evaluation (float64)

export interface ScalarEnv {
  vars: Partial<Record<ScalarVar, number>>;
  attrs: Record<string, number>;
}

const MATH64: Record<MathFn, (...a: number[]) => number> = {
  exp: Math.exp, expm1: Math.expm1, log: Math.log, log1p: Math.log1p, sqrt: Math.sqrt, tanh: Math.tanh,
  erf, erfc, abs: Math.abs, max: Math.max, min: Math.min,
};

/** The value of e in float64 (the reference semantics). */
export function evalScalar(e: SExpr, env: ScalarEnv): number {
  switch (e.k) {
    case 'var': {
      const val = env.vars[e.name];
      if (val === undefined) throw new Error(`internal: scalar variable '${e.name}' is not bound`);
      return val;
    }
    case 'num': return e.v;
    case 'attr': {
      const val = env.attrs[e.name];
      if (val === undefined) throw new Error(`internal: scalar attribute '${e.name}' is not bound`);
      return val;
    }
    case 'neg': return -evalScalar(e.a, env);
    case 'bin': {
      const l = evalScalar(e.a, env), r = evalScalar(e.b, env);
      switch (e.op) {
        case '+': return l + r;
        case '-': return l - r;
        case '*': return l * r;
        case '/': return l / r;
      }
      break;
    }
    case 'cmp': {
      const l = evalScalar(e.a, env), r = evalScalar(e.b, env);
      switch (e.op) {
        case '<': return l < r ? 1 : 0;
        case '<=': return l <= r ? 1 : 0;
        case '>': return l > r ? 1 : 0;
        case '>=': return l >= r ? 1 : 0;
      }
      break;
    }
    case 'select': return evalScalar(e.c, env) !== 0 ? evalScalar(e.a, env) : evalScalar(e.b, env);
    case 'call': return MATH64[e.fn](...e.args.map((arg) => evalScalar(arg, env)));
  }
  throw new Error(`internal: bad scalar expression ${JSON.stringify(e)}`);
}

type Compiled = (vars: Partial<Record<ScalarVar, number>>) => number;

/**
 * e as a float64 JS function of its variables, with its attrs bound now: the same values
 * as evalScalar, without walking the tree per element (the reference's loops use it).
 */
export function compileScalar(e: SExpr, attrs: Record<string, number>): Compiled {
  switch (e.k) {
    case 'var': {
      const name = e.name;
      return (vs) => {
        const val = vs[name];
        if (val === undefined) throw new Error(`internal: scalar variable '${name}' is not bound`);
        return val;
      };
    }
    case 'num': { const c = e.v; return () => c; }
    case 'attr': { const c = evalScalar(e, { vars: {}, attrs }); return () => c; }
    case 'neg': { const f = compileScalar(e.a, attrs); return (vs) => -f(vs); }
    case 'bin': {
      const l = compileScalar(e.a, attrs), r = compileScalar(e.b, attrs);
      switch (e.op) {
        case '+': return (vs) => l(vs) + r(vs);
        case '-': return (vs) => l(vs) - r(vs);
        case '*': return (vs) => l(vs) * r(vs);
        case '/': return (vs) => l(vs) / r(vs);
      }
      break;
    }
    case 'cmp': {
      const l = compileScalar(e.a, attrs), r = compileScalar(e.b, attrs);
      switch (e.op) {
        case '<': return (vs) => (l(vs) < r(vs) ? 1 : 0);
        case '<=': return (vs) => (l(vs) <= r(vs) ? 1 : 0);
        case '>': return (vs) => (l(vs) > r(vs) ? 1 : 0);
        case '>=': return (vs) => (l(vs) >= r(vs) ? 1 : 0);
      }
      break;
    }
    case 'select': {
      const c = compileScalar(e.c, attrs), a = compileScalar(e.a, attrs), b = compileScalar(e.b, attrs);
      return (vs) => (c(vs) !== 0 ? a(vs) : b(vs));
    }
    case 'call': {
      const fn = MATH64[e.fn], args = e.args.map((arg) => compileScalar(arg, attrs));
      if (args.length === 1) { const [f0] = args; return (vs) => fn(f0(vs)); }
      return (vs) => fn(...args.map((f) => f(vs)));
    }
  }
  throw new Error(`internal: bad scalar expression ${JSON.stringify(e)}`);
}

// ------------------------------------------------------------------ rendering (C-family targets)

/**
 * The per-target piece of rendering: how a target spells literals, math calls and
 * selects. Operators (+ - * / unary -, < <= > >=) and parentheses are C's and shared by
 * every C-family target, so renderScalar writes those itself.
 */
export interface ScalarLang {
  /** a literal of the compute type (C++ / MSL float: `0.5f`); may be negative (`-3.0f`) */
  lit(v: number): string;
  /** a call of a MathFn; args are already rendered operands */
  call(fn: MathFn, args: string[]): string;
  /** c ? a : b; c, a and b are already parenthesised where needed */
  select(c: string, a: string, b: string): string;
}

// precedence levels (higher binds tighter), C's
const P_SELECT = 1, P_CMP = 6, P_ADD = 7, P_MUL = 8, P_UNARY = 9, P_ATOM = 10;
const BIN_PREC: Record<BinOp, number> = { '+': P_ADD, '-': P_ADD, '*': P_MUL, '/': P_MUL };

interface Rendered { s: string; p: number }

function paren(r: Rendered, min: number): string {
  return r.p >= min ? r.s : `(${r.s})`;
}

/**
 * e rendered as a C-family expression: vars from `vars` (their spelling: `v`, `x[i]`),
 * attrs from `attrs`: a number is the value (a node's attrs are compile-time constants,
 * rendered by lang.lit), a string is a spelling (a kernel parameter, or the name in docs).
 * The grouping of e is kept exactly (a+(b+c) stays parenthesised: float addition is not
 * associative), redundant parentheses are left out.
 */
export function renderScalar(e: SExpr, lang: ScalarLang, vars: Partial<Record<ScalarVar, string>>, attrs: Record<string, number | string>): string {
  const lit = (val: number): Rendered => {
    const s = lang.lit(val);
    return { s, p: s.startsWith('-') ? P_UNARY : P_ATOM };
  };
  const go = (n: SExpr): Rendered => {
    switch (n.k) {
      case 'var': {
        const s = vars[n.name];
        if (s === undefined) throw new Error(`internal: scalar variable '${n.name}' has no spelling`);
        return { s, p: P_ATOM };
      }
      case 'num': return lit(n.v);
      case 'attr': {
        const val = attrs[n.name];
        if (val === undefined) throw new Error(`internal: scalar attribute '${n.name}' is not bound`);
        return typeof val === 'number' ? lit(val) : { s: val, p: P_ATOM };
      }
      case 'neg': return { s: `-${paren(go(n.a), P_UNARY + 1)}`, p: P_UNARY };
      case 'bin': {
        const p = BIN_PREC[n.op];
        return { s: `${paren(go(n.a), p)} ${n.op} ${paren(go(n.b), p + 1)}`, p };
      }
      case 'cmp': return { s: `${paren(go(n.a), P_CMP + 1)} ${n.op} ${paren(go(n.b), P_CMP + 1)}`, p: P_CMP };
      case 'select': return { s: lang.select(paren(go(n.c), P_SELECT + 1), paren(go(n.a), P_SELECT + 1), paren(go(n.b), P_SELECT + 1)), p: P_SELECT };
      case 'call': return { s: lang.call(n.fn, n.args.map((arg) => go(arg).s)), p: P_ATOM };
    }
  };
  return go(e).s;
}

/** The MathFns e calls (a target may need to emit a helper for some, e.g. erfc). */
export function mathFnsUsed(e: SExpr, into: Set<MathFn> = new Set()): Set<MathFn> {
  switch (e.k) {
    case 'var': case 'num': case 'attr': break;
    case 'neg': mathFnsUsed(e.a, into); break;
    case 'bin': case 'cmp': mathFnsUsed(e.a, into); mathFnsUsed(e.b, into); break;
    case 'select': mathFnsUsed(e.c, into); mathFnsUsed(e.a, into); mathFnsUsed(e.b, into); break;
    case 'call': into.add(e.fn); for (const arg of e.args) mathFnsUsed(arg, into); break;
  }
  return into;
}
