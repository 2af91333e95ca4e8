/**
 * Compile-time values and argument binding shared by layers, losses, optimizers,
 * schedules, train settings and data sources: positional + named arguments against a
 * list of ArgSpecs (types, defaults, ranges), with did-you-mean for unknown names.
 */
import type * as A from '../parser/ast.js';
import { errorAt, suggestion, type Diagnostic } from '../diagnostics.js';
import { MAX_INT } from '../parser/to_ast.js';
import type { InitSpec } from '../model.js';

export type Val =
  | { t: 'int'; v: number }
  | { t: 'float'; v: number }
  | { t: 'bool'; v: boolean }
  | { t: 'str'; v: string }
  | { t: 'list'; items: Val[] }
  | { t: 'tensor'; id: number };

export type ArgType = 'int' | 'float' | 'bool' | 'string' | 'pair' | 'ints' | 'str_or_int' | 'strmap' | 'init' | 'call' | 'map';

export interface ArgSpec {
  name: string;
  type: ArgType;
  /** JS value used when the argument is absent; undefined = required; null = "none" */
  default?: unknown;
  min?: number;
  max?: number;
  /** min/max are exclusive bounds */
  minExclusive?: boolean;
  maxExclusive?: boolean;
  /** the last spec may collect every remaining positional argument into a list (reshape) */
  variadic?: boolean;
  doc: string;
}

export interface BindCtx {
  /** what is being called, for messages: `linear 'fc1'`, `optimizer sgd` */
  what: string;
  diags: Diagnostic[];
  /** evaluates a named argument's expression to a constant (or tensor) */
  evalExpr: (e: A.Expr) => Val | null;
  /** what the arguments are called in messages (default 'argument'; the train section says 'key') */
  argWord?: string;
}

export function describeVal(v: Val): string {
  switch (v.t) {
    case 'int':
      return `integer ${v.v}`;
    case 'float':
      return `number ${v.v}`;
    case 'bool':
      return `bool ${v.v}`;
    case 'str':
      return `string ${JSON.stringify(v.v)}`;
    case 'list':
      return 'a list';
    case 'tensor':
      return 'a tensor';
  }
}

const TYPE_WORDS: Record<ArgType, string> = {
  int: 'an integer',
  float: 'a number',
  bool: 'true or false',
  string: 'a string',
  pair: 'an integer or [h, w]',
  ints: 'a list of integers',
  str_or_int: 'a string or an integer',
  strmap: 'a map {name: "string", ...}',
  init: 'an initializer such as xavier_uniform() or normal(std: 0.02)',
  call: 'a call such as mnist()',
  map: 'a map {key: value, ...}',
};

/** Integer/float arithmetic with integer results kept exact (`/` on integers floors). */
export function arith(op: '+' | '-' | '*' | '/', a: Val, b: Val, loc: A.Loc, diags: Diagnostic[]): Val | null {
  const num = (v: Val) => v.t === 'int' || v.t === 'float';
  if (!num(a) || !num(b)) {
    diags.push(errorAt(loc, `'${op}' needs two numbers or two tensors, got ${describeVal(a)} and ${describeVal(b)}`));
    return null;
  }
  const x = (a as { v: number }).v;
  const y = (b as { v: number }).v;
  if (a.t === 'int' && b.t === 'int') {
    if (op === '/' && y === 0) {
      diags.push(errorAt(loc, 'division by zero'));
      return null;
    }
    const r = op === '+' ? x + y : op === '-' ? x - y : op === '*' ? x * y : Math.floor(x / y);
    if (Math.abs(r) > MAX_INT) {
      diags.push(errorAt(loc, `integer result ${r} is too large (the limit is ${MAX_INT})`));
      return null;
    }
    return { t: 'int', v: r };
  }
  const r = op === '+' ? x + y : op === '-' ? x - y : op === '*' ? x * y : x / y;
  if (!Number.isFinite(r)) {
    diags.push(errorAt(loc, `arithmetic result is not a finite number`));
    return null;
  }
  return { t: 'float', v: r };
}

/** The value of a literal (number, string, boolean), or null for any other expression. */
export function literalVal(e: A.Expr): Val | null {
  switch (e.kind) {
    case 'num':
      return e.isInt ? { t: 'int', v: e.value } : { t: 'float', v: e.value };
    case 'str':
      return { t: 'str', v: e.value };
    case 'bool':
      return { t: 'bool', v: e.value };
    default:
      return null;
  }
}

/** Evaluate an expression made only of constants (settings sections). */
export function constEval(e: A.Expr, diags: Diagnostic[]): Val | null {
  switch (e.kind) {
    case 'num':
    case 'str':
    case 'bool':
      return literalVal(e);
    case 'list': {
      const items: Val[] = [];
      for (const it of e.items) {
        const v = constEval(it, diags);
        if (v === null) return null;
        items.push(v);
      }
      return { t: 'list', items };
    }
    case 'neg': {
      const v = constEval(e.operand, diags);
      if (v === null) return null;
      return arith('-', { t: 'int', v: 0 }, v, e.loc, diags);
    }
    case 'chain': {
      let acc = constEval(e.first, diags);
      for (const r of e.rest) {
        if (acc === null) return null;
        const rhs = constEval(r.rhs, diags);
        if (rhs === null) return null;
        acc = arith(r.op, acc, rhs, r.opLoc, diags);
      }
      return acc;
    }
    case 'call':
      if (!e.hasParens && !e.alias) {
        diags.push(errorAt(e.loc, `'${e.callee.name}' is not a value here`, 'use a number, a string, true/false or a list'));
        return null;
      }
      diags.push(errorAt(e.loc, `a call to '${e.callee.name}' is not allowed here`, 'use a number, a string, true/false or a list'));
      return null;
    case 'map':
      diags.push(errorAt(e.loc, 'a map is not allowed here'));
      return null;
    case 'pipe':
      diags.push(errorAt(e.loc, "'->' is only allowed in the network and in blocks"));
      return null;
  }
  return unreachable(e);
}

function inRange(spec: ArgSpec, x: number): boolean {
  if (spec.min !== undefined && (spec.minExclusive ? !(x > spec.min) : !(x >= spec.min))) return false;
  if (spec.max !== undefined && (spec.maxExclusive ? !(x < spec.max) : !(x <= spec.max))) return false;
  return true;
}

function rangeText(spec: ArgSpec): string {
  if (spec.min !== undefined && spec.max !== undefined) return `in ${spec.minExclusive ? '(' : '['}${spec.min}, ${spec.max}${spec.maxExclusive ? ')' : ']'}`;
  if (spec.min !== undefined) return spec.minExclusive ? `> ${spec.min}` : `>= ${spec.min}`;
  return spec.maxExclusive ? `< ${spec.max}` : `<= ${spec.max}`;
}

/** Convert one evaluated value to the JS value of spec's type, or report and return undefined. */
export function convert(spec: ArgSpec, v: Val, loc: A.Loc, ctx: BindCtx): unknown {
  const bad = () => {
    ctx.diags.push(errorAt(loc, `${ctx.argWord ?? 'argument'} '${spec.name}' of ${ctx.what} expects ${TYPE_WORDS[spec.type]}, got ${describeVal(v)}`));
    return undefined;
  };
  const range = (x: number) => {
    if (inRange(spec, x)) return true;
    ctx.diags.push(errorAt(loc, `${ctx.argWord ?? 'argument'} '${spec.name}' of ${ctx.what} must be ${rangeText(spec)}, got ${x}`));
    return false;
  };
  switch (spec.type) {
    case 'int':
      if (v.t !== 'int') return bad();
      return range(v.v) ? v.v : undefined;
    case 'float':
      if (v.t !== 'int' && v.t !== 'float') return bad();
      return range(v.v) ? v.v : undefined;
    case 'bool':
      return v.t === 'bool' ? v.v : bad();
    case 'string':
      return v.t === 'str' ? v.v : bad();
    case 'str_or_int':
      if (v.t === 'str') return v.v;
      if (v.t === 'int') return range(v.v) ? v.v : undefined;
      return bad();
    case 'pair': {
      let p: number[];
      if (v.t === 'int') p = [v.v, v.v];
      else if (v.t === 'list' && v.items.length === 2 && v.items.every((i) => i.t === 'int')) p = v.items.map((i) => (i as { v: number }).v);
      else return bad();
      return p.every((x) => range(x)) ? p : undefined;
    }
    case 'ints': {
      if (v.t !== 'list' || !v.items.every((i) => i.t === 'int')) return bad();
      const xs = v.items.map((i) => (i as { v: number }).v);
      return xs.every((x) => range(x)) ? xs : undefined;
    }
    default:
      return bad();
  }
}

export interface PositionalArg {
  val: Val;
  loc: A.Loc;
}

/**
 * Bind positional and named arguments to specs. Returns the argument record (every spec
 * name present, defaults filled in) or null when anything was wrong (already reported).
 */
export function bindArgs(ctx: BindCtx, specs: ArgSpec[], positional: PositionalArg[], named: A.Arg[], callLoc: A.Loc): Record<string, unknown> | null {
  const out: Record<string, unknown> = {};
  const given = new Map<string, A.Loc>();
  let ok = true;
  const variadic = specs.length > 0 && specs[specs.length - 1].variadic ? specs[specs.length - 1] : null;
  const fixed = variadic ? specs.length - 1 : specs.length;
  const positionalSpecs = specs.filter((s) => s.type !== 'init' && s.type !== 'strmap' && s.type !== 'call' && s.type !== 'map');
  for (let i = 0; i < positional.length; i++) {
    const p = positional[i];
    if (variadic && i >= fixed) {
      const list = (out[variadic.name] as unknown[] | undefined) ?? [];
      const c = convert({ ...variadic, type: 'int' }, p.val, p.loc, ctx);
      if (c === undefined) ok = false;
      list.push(c);
      out[variadic.name] = list;
      given.set(variadic.name, p.loc);
      continue;
    }
    if (i >= positionalSpecs.length || (variadic === null && i >= fixed)) {
      const n = Math.min(positionalSpecs.length, fixed);
      ctx.diags.push(
        errorAt(p.loc, `${ctx.what} takes ${n === 0 ? 'no' : `at most ${n}`} positional argument${n === 1 ? '' : 's'} here, got ${describeVal(p.val)}`, n > 0 ? `arguments in order: ${positionalSpecs.map((s) => s.name).join(', ')}` : undefined),
      );
      ok = false;
      continue;
    }
    const spec = positionalSpecs[i];
    const c = convert(spec, p.val, p.loc, ctx);
    if (c === undefined) ok = false;
    out[spec.name] = c;
    given.set(spec.name, p.loc);
  }
  for (const a of named) {
    const key = a.name!;
    const spec = specs.find((s) => s.name === key.name);
    if (!spec) {
      ctx.diags.push(errorAt(key.loc, `${ctx.what} has no ${ctx.argWord ?? 'argument'} '${key.name}'`, suggestion(key.name, specs.map((s) => s.name)) ?? (specs.length ? `its ${ctx.argWord ?? 'argument'}s are: ${specs.map((s) => s.name).join(', ')}` : `it takes no arguments`)));
      ok = false;
      continue;
    }
    if (given.has(key.name)) {
      ctx.diags.push(errorAt(key.loc, `${ctx.argWord ?? 'argument'} '${key.name}' of ${ctx.what} is given twice`));
      ok = false;
      continue;
    }
    given.set(key.name, key.loc);
    if (spec.type === 'init') {
      const init = parseInit(a.value, ctx);
      if (init === null) ok = false;
      out[spec.name] = init;
      continue;
    }
    if (spec.type === 'call' || spec.type === 'map') {
      if (a.value.kind !== spec.type) {
        ctx.diags.push(errorAt(a.value.loc, `${ctx.argWord ?? 'argument'} '${spec.name}' of ${ctx.what} expects ${TYPE_WORDS[spec.type]}`));
        ok = false;
      }
      out[spec.name] = a.value;
      continue;
    }
    if (spec.type === 'strmap') {
      const m = parseStrMap(a.value, spec, ctx);
      if (m === null) ok = false;
      out[spec.name] = m;
      continue;
    }
    const v = ctx.evalExpr(a.value);
    if (v === null) {
      ok = false;
      continue;
    }
    if (variadic && spec === variadic) {
      const c = convert({ ...spec, type: 'ints' }, v, a.value.loc, ctx);
      if (c === undefined) ok = false;
      out[spec.name] = c;
      continue;
    }
    const c = convert(spec, v, a.value.loc, ctx);
    if (c === undefined) ok = false;
    out[spec.name] = c;
  }
  for (const s of specs) {
    if (given.has(s.name)) continue;
    if (s.default === undefined) {
      ctx.diags.push(errorAt(callLoc, `${ctx.what} is missing ${ctx.argWord ?? 'argument'} '${s.name}'`, `${s.name}: ${s.doc}`));
      ok = false;
    } else out[s.name] = s.default;
  }
  return ok ? out : null;
}

function parseStrMap(e: A.Expr, spec: ArgSpec, ctx: BindCtx): Record<string, string> | null {
  if (e.kind !== 'map') {
    ctx.diags.push(errorAt(e.loc, `argument '${spec.name}' of ${ctx.what} expects ${TYPE_WORDS.strmap}`));
    return null;
  }
  const out: Record<string, string> = {};
  for (const en of e.entries) {
    if (en.value.kind !== 'str') {
      ctx.diags.push(errorAt(en.value.loc, `map value for '${en.key.name}' must be a string`));
      return null;
    }
    if (en.key.name in out) {
      ctx.diags.push(errorAt(en.key.loc, `key '${en.key.name}' is given twice`));
      return null;
    }
    out[en.key.name] = en.value.value;
  }
  return out;
}

// ------------------------------------------------------------------ initializers

const NONLIN: ArgSpec = { name: 'nonlinearity', type: 'string', default: 'leaky_relu', doc: "'relu', 'leaky_relu' or 'linear'" };
export const INITS: Record<string, { args: ArgSpec[]; doc: string; make: (a: Record<string, unknown>) => InitSpec }> = {
  xavier_uniform: { args: [{ name: 'gain', type: 'float', default: 1, min: 0, doc: 'scale factor' }], doc: 'U(-a, a), a = gain*sqrt(6/(fan_in+fan_out))', make: (a) => ({ kind: 'xavier_uniform', gain: a.gain as number }) },
  xavier_normal: { args: [{ name: 'gain', type: 'float', default: 1, min: 0, doc: 'scale factor' }], doc: 'N(0, std), std = gain*sqrt(2/(fan_in+fan_out))', make: (a) => ({ kind: 'xavier_normal', gain: a.gain as number }) },
  kaiming_uniform: {
    args: [{ name: 'a', type: 'float', default: 0, min: 0, doc: 'negative slope for leaky_relu' }, NONLIN],
    doc: 'U(-b, b), b = gain*sqrt(3/fan_in)',
    make: (a) => ({ kind: 'kaiming_uniform', a: a.a as number, nonlinearity: a.nonlinearity as 'relu' }),
  },
  kaiming_normal: {
    args: [{ name: 'a', type: 'float', default: 0, min: 0, doc: 'negative slope for leaky_relu' }, NONLIN],
    doc: 'N(0, std), std = gain/sqrt(fan_in)',
    make: (a) => ({ kind: 'kaiming_normal', a: a.a as number, nonlinearity: a.nonlinearity as 'relu' }),
  },
  normal: {
    args: [
      { name: 'mean', type: 'float', default: 0, doc: 'mean' },
      { name: 'std', type: 'float', default: 1, min: 0, doc: 'standard deviation' },
    ],
    doc: 'N(mean, std^2)',
    make: (a) => ({ kind: 'normal', mean: a.mean as number, std: a.std as number }),
  },
  uniform: {
    args: [
      { name: 'a', type: 'float', default: 0, doc: 'lower bound' },
      { name: 'b', type: 'float', default: 1, doc: 'upper bound' },
    ],
    doc: 'U(a, b)',
    make: (a) => ({ kind: 'uniform', a: a.a as number, b: a.b as number }),
  },
  zeros: { args: [], doc: 'all 0', make: () => ({ kind: 'zeros' }) },
  ones: { args: [], doc: 'all 1', make: () => ({ kind: 'ones' }) },
  constant: { args: [{ name: 'value', type: 'float', doc: 'the value' }], doc: 'all value', make: (a) => ({ kind: 'constant', value: a.value as number }) },
};

function parseInit(e: A.Expr, ctx: BindCtx): InitSpec | null {
  if (e.kind !== 'call') {
    ctx.diags.push(errorAt(e.loc, `argument 'init' of ${ctx.what} expects ${TYPE_WORDS.init}`));
    return null;
  }
  const def = INITS[e.callee.name];
  if (!def) {
    ctx.diags.push(errorAt(e.callee.loc, `unknown initializer '${e.callee.name}'`, suggestion(e.callee.name, Object.keys(INITS)) ?? `initializers: ${Object.keys(INITS).join(', ')}`));
    return null;
  }
  const sub: BindCtx = { ...ctx, what: `initializer ${e.callee.name}` };
  const positional: PositionalArg[] = [];
  for (const a of e.args.filter((x) => !x.name)) {
    const v = ctx.evalExpr(a.value);
    if (v === null) return null;
    positional.push({ val: v, loc: a.value.loc });
  }
  const args = bindArgs(sub, def.args, positional, e.args.filter((x) => x.name), e.loc);
  if (args === null) return null;
  if ('nonlinearity' in args && !['relu', 'leaky_relu', 'linear'].includes(args.nonlinearity as string)) {
    ctx.diags.push(errorAt(e.loc, `nonlinearity of ${e.callee.name} must be 'relu', 'leaky_relu' or 'linear', got '${args.nonlinearity}'`));
    return null;
  }
  return def.make(args);
}

export function unreachable(x: never): never {
  throw new Error(`internal: unexpected ${JSON.stringify(x)}`);
}
