/**
 * Expansion: runs the network section (and the blocks it instantiates, `repeat` loops,
 * integer arithmetic, argument binding) into a flat list of layer instances, each with
 * its stable parameter path, bound arguments and the value ids it reads. No shapes yet.
 *
 * Paths: `as NAME` names an instance; otherwise `<layer><ordinal>` with one counter per
 * layer type per scope (the ordinal counts named instances too, so naming one layer never
 * renumbers the others). Inside a block instance the path is `<instance>.<layer>`; an
 * unnamed block instance is `<block><ordinal>`.
 */
import type * as A from '../parser/ast.js';
import type { DType } from '../ir/graph.js';
import { BATCH } from '../model.js';
import { closestNames, errorAt, suggestion, type Diagnostic } from '../diagnostics.js';
import { arith, bindArgs, convert, describeVal, literalVal, unreachable, type ArgSpec, type PositionalArg, type Val } from './args.js';
import { LAYERS, layersWithRole, type LayerDef, type LayerRole } from './layers.js';
import { MAX_INT } from '../parser/to_ast.js';

export const MAX_LAYERS = 50_000;
export const MAX_BLOCK_DEPTH = 32;
export const MAX_REPEAT = 100_000;
/** statements and repeat iterations executed while expanding */
export const MAX_STEPS = 500_000;

export interface FlatInput {
  name: string;
  dtype: DType;
  shape: number[];
  loc: A.Loc;
}

export interface FlatLayer {
  type: string;
  role: LayerRole;
  path: string;
  inputs: number[];
  args: Record<string, unknown>;
  loc: A.Loc;
}

export interface Expanded {
  inputs: FlatInput[];
  /** layer k writes value id inputs.length + k */
  layers: FlatLayer[];
  /** the network's names after its last statement */
  names: Map<string, Val | null>;
  /** some input declaration was rejected (data-source checks are skipped) */
  inputErrors: boolean;
  /** `name = tensor` assignments, in execution order */
  assigned: { name: string; id: number; loc: A.Loc }[];
}

interface Scope {
  prefix: string;
  vars: Map<string, { val: Val | null; kind: 'input' | 'value' | 'param'; loc: A.Loc }>;
  counters: Map<string, number>;
  blockStack: string[];
  /** which table calls resolve against */
  role: LayerRole;
}

interface BlockInfo {
  decl: A.BlockDecl;
  ins: A.Ident[];
  out: A.Stmt | null;
}

class Abort extends Error {}

const PARAM_TYPES: Record<string, ArgSpec['type']> = { int: 'int', float: 'float', bool: 'bool', string: 'string' };

export class Expander {
  readonly inputs: FlatInput[] = [];
  readonly layers: FlatLayer[] = [];
  readonly blocks = new Map<string, BlockInfo>();
  readonly paths = new Map<string, A.Loc>();
  /** inputs whose declaration failed: known names (no 'undefined name' cascade) without a value */
  readonly badInputs = new Set<string>();
  private steps = 0;
  /** every `name = tensor` executed (for unused-value warnings) */
  readonly assigned: { name: string; id: number; loc: A.Loc }[] = [];
  constructor(readonly diags: Diagnostic[]) {}

  err(loc: A.Loc, message: string, hint?: string): null {
    this.diags.push(errorAt(loc, message, hint));
    return null;
  }

  // ------------------------------------------------------------------ declarations

  declareInputs(decls: A.InputDecl[]): void {
    const seen = new Map<string, A.Loc>();
    for (const d of decls) {
      if (seen.has(d.name.name)) {
        const f = seen.get(d.name.name)!;
        this.err(d.name.loc, `duplicate input '${d.name.name}'`, `it is first declared at ${f.line}:${f.col}`);
        continue;
      }
      seen.set(d.name.name, d.name.loc);
      let ok = true;
      const dtype = d.dtype.name;
      if (dtype !== 'f32' && dtype !== 'i32') {
        ok = !!this.err(d.dtype.loc, `unknown dtype '${dtype}'`, suggestion(dtype, ['f32', 'i32']) ?? 'use f32 (data) or i32 (class labels, token ids)');
      }
      const shape: number[] = [];
      let per = 1;
      if (d.dims.length === 0) ok = !!this.err(d.loc, `input '${d.name.name}' needs at least the batch dim: ${dtype}[N]`);
      d.dims.forEach((dim, i) => {
        if (i === 0) {
          if (dim.value !== 'N') ok = !!this.err(dim.loc, `the first dim of input '${d.name.name}' must be N (the batch dimension), got ${dim.value}`, `write ${dtype}[N, ...]`);
          shape.push(BATCH);
          return;
        }
        if (typeof dim.value === 'string') {
          ok = !!this.err(dim.loc, `unknown dimension '${dim.value}'`, dim.value === 'N' ? 'N (the batch) may only be the first dim' : 'only the first dim (N, the batch) is symbolic; give the size as an integer');
          return;
        }
        if (dim.value < 1) ok = !!this.err(dim.loc, `dimension ${dim.value} of input '${d.name.name}' must be at least 1`);
        per *= dim.value;
        shape.push(dim.value);
      });
      if (per > MAX_INT) ok = !!this.err(d.loc, `input '${d.name.name}' has ${per} elements per sample, more than the limit ${MAX_INT}`);
      if (!ok) {
        this.badInputs.add(d.name.name);
        continue;
      }
      this.inputs.push({ name: d.name.name, dtype: dtype as DType, shape, loc: d.name.loc });
    }
  }

  declareBlocks(decls: A.BlockDecl[]): void {
    for (const b of decls) {
      const name = b.name.name;
      if (this.blocks.has(name)) {
        const f = this.blocks.get(name)!.decl.name.loc;
        this.err(b.name.loc, `duplicate block '${name}'`, `it is first declared at ${f.line}:${f.col}`);
        continue;
      }
      if (LAYERS[name]) {
        this.err(b.name.loc, `block '${name}' has the name of a built-in ${LAYERS[name].role}`, 'pick another name');
        continue;
      }
      const seen = new Set<string>();
      for (const p of b.params) {
        if (seen.has(p.name.name)) this.err(p.name.loc, `duplicate parameter '${p.name.name}' in block '${name}'`);
        seen.add(p.name.name);
        if (!PARAM_TYPES[p.type.name]) this.err(p.type.loc, `unknown parameter type '${p.type.name}'`, suggestion(p.type.name, Object.keys(PARAM_TYPES)) ?? 'use int, float, bool or string');
      }
      const ins: A.Ident[] = [];
      let out: A.Stmt | null = null;
      for (const s of b.body) {
        if (s.kind === 'in') {
          for (const n of s.names) {
            if (seen.has(n.name)) this.err(n.loc, `duplicate name '${n.name}' in block '${name}'`);
            seen.add(n.name);
            ins.push(n);
          }
        } else if (s.kind === 'out') {
          if (out) this.err(s.loc, `block '${name}' has more than one 'out'`, 'a block returns one value; combine them or use two blocks');
          else out = s;
        } else if (s.kind === 'repeat') this.noInOut(s.body, name);
      }
      if (ins.length === 0) this.err(b.name.loc, `block '${name}' has no 'in'`, 'declare its tensor inputs with: in x');
      if (!out) this.err(b.name.loc, `block '${name}' has no 'out'`, 'end it with: out <expression>');
      this.blocks.set(name, { decl: b, ins, out });
    }
  }

  private noInOut(body: A.Stmt[], block: string): void {
    for (const s of body) {
      if (s.kind === 'in' || s.kind === 'out') this.err(s.loc, `'${s.kind}' inside 'repeat' is not allowed`, `put it directly in block '${block}'`);
      else if (s.kind === 'repeat') this.noInOut(s.body, block);
    }
  }

  // ------------------------------------------------------------------ statements

  networkScope(): Scope {
    const vars: Scope['vars'] = new Map();
    this.inputs.forEach((inp, i) => vars.set(inp.name, { val: { t: 'tensor', id: i }, kind: 'input', loc: inp.loc }));
    for (const n of this.badInputs) vars.set(n, { val: null, kind: 'input', loc: { file: '', line: 1, col: 1 } });
    return { prefix: '', vars, counters: new Map(), blockStack: [], role: 'layer' };
  }

  /** Run statements; returns the value of `out` (blocks) when one was executed. */
  exec(body: A.Stmt[], scope: Scope, inBlock: boolean): { out: Val | null; found: boolean } {
    let result: { out: Val | null; found: boolean } = { out: null, found: false };
    for (const s of body) {
      if (++this.steps > MAX_STEPS) {
        this.err(s.loc, `the network takes more than ${MAX_STEPS} statements to expand`, "lower a 'repeat' count");
        throw new Abort();
      }
      switch (s.kind) {
        case 'in':
          if (!inBlock) this.err(s.loc, "'in' is only allowed inside a block", "the network's inputs are the 'input' lines");
          break;
        case 'out':
          if (!inBlock) {
            this.err(s.loc, "'out' is only allowed inside a block", 'name the value instead: logits = ...');
            break;
          }
          result = { out: this.eval(s.expr, scope), found: true };
          break;
        case 'assign': {
          const name = s.target.name;
          const prev = scope.vars.get(name);
          if (prev && prev.kind !== 'value') {
            this.err(s.target.loc, `cannot assign to ${prev.kind === 'input' ? 'input' : 'block parameter'} '${name}'`, 'pick another name');
            this.eval(s.expr, scope);
            break;
          }
          if (LAYERS[name] || this.blocks.has(name)) {
            this.err(s.target.loc, `'${name}' is the name of a ${LAYERS[name] ? LAYERS[name].role : 'block'}`, 'pick another name');
            this.eval(s.expr, scope);
            break;
          }
          const v = this.eval(s.expr, scope);
          if (v !== null && v.t !== 'tensor') this.err(s.expr.loc, `'${name}' must be a tensor, got ${describeVal(v)}`);
          scope.vars.set(name, { val: v, kind: 'value', loc: s.target.loc });
          if (v !== null && v.t === 'tensor') this.assigned.push({ name, id: v.id, loc: s.target.loc });
          break;
        }
        case 'repeat': {
          const c = this.eval(s.count, scope);
          if (c === null) break;
          if (c.t !== 'int' || c.v < 0 || c.v > MAX_REPEAT) {
            this.err(s.count.loc, `repeat count must be an integer in [0, ${MAX_REPEAT}], got ${describeVal(c)}`);
            break;
          }
          const errorsBefore = this.diags.length;
          for (let i = 0; i < c.v; i++) {
            if (++this.steps > MAX_STEPS) {
              this.err(s.loc, `the network takes more than ${MAX_STEPS} statements to expand`, "lower a 'repeat' count");
              throw new Abort();
            }
            const r = this.exec(s.body, scope, inBlock);
            if (r.found) result = r;
            if (this.diags.length > errorsBefore) break; // the next iterations would repeat the same errors
          }
          break;
        }
      }
    }
    return result;
  }

  // ------------------------------------------------------------------ expressions

  eval(e: A.Expr, scope: Scope): Val | null {
    switch (e.kind) {
      case 'num':
      case 'str':
      case 'bool':
        return literalVal(e);
      case 'list': {
        const items: Val[] = [];
        for (const it of e.items) {
          const v = this.eval(it, scope);
          if (v === null) return null;
          if (v.t === 'tensor') return this.err(it.loc, 'a list cannot hold tensors');
          items.push(v);
        }
        return { t: 'list', items };
      }
      case 'map':
        return this.err(e.loc, 'a map is not allowed here');
      case 'neg': {
        const v = this.eval(e.operand, scope);
        if (v === null) return null;
        if (v.t === 'tensor') return this.layer(LAYERS.neg, [v], [], [], undefined, scope, e.loc);
        return arith('-', { t: 'int', v: 0 }, v, e.loc, this.diags);
      }
      case 'chain': {
        let acc = this.eval(e.first, scope);
        for (const r of e.rest) {
          const rhs = this.eval(r.rhs, scope);
          if (acc === null || rhs === null) {
            acc = null;
            continue;
          }
          if (acc.t === 'tensor' || rhs.t === 'tensor') {
            if (acc.t !== 'tensor' || rhs.t !== 'tensor') {
              acc = this.err(r.opLoc, `'${r.op}' needs two tensors or two numbers, got ${describeVal(acc)} and ${describeVal(rhs)}`);
              continue;
            }
            if (r.op === '/') {
              acc = this.err(r.opLoc, "'/' is not defined on tensors", "tensors support '+', '-' and '*'");
              continue;
            }
            const def = LAYERS[r.op === '+' ? 'add' : r.op === '-' ? 'sub' : 'mul'];
            acc = this.layer(def, [acc, rhs], [], [], undefined, scope, { ...e.first.loc, endLine: r.rhs.loc.endLine, endCol: r.rhs.loc.endCol });
            continue;
          }
          acc = arith(r.op, acc, rhs, r.opLoc, this.diags);
        }
        return acc;
      }
      case 'pipe': {
        let v = this.eval(e.head, scope);
        for (const st of e.stages) {
          if (v === null) {
            // keep checking the stages' names, without cascading shape errors
            this.call(st, scope, { val: { t: 'int', v: 0 }, loc: e.head.loc }, true);
            continue;
          }
          if (v.t !== 'tensor') {
            v = this.err(e.head.loc, `'->' needs a tensor on its left, got ${describeVal(v)}`);
            continue;
          }
          v = this.call(st, scope, { val: v, loc: e.head.loc }, false);
        }
        return v;
      }
      case 'call':
        if (!e.hasParens && !e.alias) {
          const b = scope.vars.get(e.callee.name);
          if (b) return b.val;
          if (this.callable(e.callee.name, scope)) {
            const what = this.blocks.has(e.callee.name) ? 'block' : LAYERS[e.callee.name].role;
            return this.err(e.callee.loc, `${what} '${e.callee.name}' needs an input`, `write 'x -> ${e.callee.name}' or '${e.callee.name}(x)'`);
          }
          return this.err(e.callee.loc, `undefined name '${e.callee.name}'`, suggestion(e.callee.name, scope.vars.keys()));
        }
        return this.call(e, scope, null, false);
    }
    return unreachable(e);
  }

  private callable(name: string, scope: Scope): boolean {
    const d = LAYERS[name];
    if (d && !d.internal) return d.role === scope.role;
    return scope.role === 'layer' && this.blocks.has(name);
  }

  /** A call (or a pipe stage): layer, block, loss or metric. `dry` only checks that the callee exists. */
  call(c: A.CallExpr, scope: Scope, piped: PositionalArg | null, dry: boolean): Val | null {
    const name = c.callee.name;
    if (!this.callable(name, scope)) {
      if (scope.vars.has(name)) return this.err(c.callee.loc, `'${name}' is a value, not a ${scope.role}`, c.alias ? "'as' names a layer instance: put it after a layer call" : undefined);
      const cands = [...layersWithRole(scope.role).map((d) => d.name), ...(scope.role === 'layer' ? this.blocks.keys() : [])];
      const other = LAYERS[name] && !LAYERS[name].internal ? ` ('${name}' is a ${LAYERS[name].role})` : '';
      return this.err(c.callee.loc, `unknown ${scope.role} '${name}'${other}`, scope.role === 'layer' ? suggestion(name, cands) ?? `closest layers: ${closestNames(name, cands, 4).join(', ')} (all layers: docs/language.md)` : suggestion(name, cands) ?? `${scope.role === 'loss' ? 'losses' : 'metrics'}: ${cands.join(', ')}`);
    }
    if (dry) return null;
    const positional: PositionalArg[] = piped ? [piped] : [];
    let ok = true;
    for (const a of c.args) {
      if (a.name) continue;
      const v = this.eval(a.value, scope);
      if (v === null) ok = false;
      else positional.push({ val: v, loc: a.value.loc });
    }
    if (!ok) return null;
    const named = c.args.filter((a) => a.name);
    const block = this.blocks.get(name);
    if (block) return this.instantiate(block, positional, named, c, scope);
    return this.layer(LAYERS[name], [], positional, named, c.alias, scope, c.loc, c);
  }

  private instancePath(type: string, alias: A.Ident | undefined, scope: Scope, loc: A.Loc): string | null {
    const n = scope.counters.get(type) ?? 0;
    scope.counters.set(type, n + 1);
    const path = scope.prefix + (alias ? alias.name : `${type}${n}`);
    const prev = this.paths.get(path);
    if (prev) {
      return this.err(
        alias ? alias.loc : loc,
        `duplicate layer name '${path}'`,
        prev.line === (alias ?? { loc }).loc.line && prev.col === (alias ?? { loc }).loc.col ? "this name is used again by a 'repeat'; leave out 'as' inside repeat" : `'${path}' is first used at ${prev.line}:${prev.col}`,
      );
    }
    this.paths.set(path, alias ? alias.loc : loc);
    return path;
  }

  private tensorArgs(def: { what: string; count: number | 'many'; names: string[] }, positional: PositionalArg[], loc: A.Loc): { tensors: Val[]; rest: PositionalArg[] } | null {
    let k = 0;
    while (k < positional.length && positional[k].val.t === 'tensor') k++;
    const want = def.count;
    if (want === 'many' ? k < 2 : k < want) {
      const need = want === 'many' ? 'at least 2 tensor inputs' : `${want} tensor input${want === 1 ? '' : 's'} (${def.names.join(', ')})`;
      return this.err(positional[k]?.loc ?? loc, `${def.what} needs ${need}, got ${k === 0 ? 'none' : k}`, k === 0 && want === 1 ? `write 'x -> ${def.what.split(' ')[0]}(...)' or pass the input first` : undefined);
    }
    if (want !== 'many' && k > want) return this.err(positional[want].loc, `${def.what} takes ${want} tensor input${want === 1 ? '' : 's'}, got ${k}`);
    for (let i = k; i < positional.length; i++)
      if (positional[i].val.t === 'tensor') return this.err(positional[i].loc, `tensor inputs of ${def.what} must come before its other arguments`);
    return { tensors: positional.slice(0, k).map((p) => p.val), rest: positional.slice(k) };
  }

  /**
   * One layer instance. From a call (`c` given) the tensor inputs are the leading tensor
   * positionals; from an operator (`a + b`, `-a`; no `c`) they are `operands`.
   */
  layer(def: LayerDef, operands: Val[], positional: PositionalArg[], named: A.Arg[], alias: A.Ident | undefined, scope: Scope, loc: A.Loc, c?: A.CallExpr): Val | null {
    if (this.layers.length >= MAX_LAYERS) {
      this.err(loc, `the network expands to more than ${MAX_LAYERS} layers`, "lower a 'repeat' count");
      throw new Abort();
    }
    const path = scope.role === 'layer' ? this.instancePath(def.name, alias, scope, c?.callee.loc ?? loc) : this.headPath(def, alias, loc);
    const what = `${def.name} '${path ?? alias?.name ?? def.name}'`;
    let tensors: Val[];
    let rest: PositionalArg[];
    if (c === undefined) {
      tensors = operands;
      rest = [];
    } else {
      const split = this.tensorArgs({ what, count: def.inputs, names: def.inputNames }, positional, loc);
      if (split === null) return null;
      ({ tensors, rest } = split);
    }
    const args = bindArgs({ what, diags: this.diags, evalExpr: (e) => this.eval(e, scope) }, def.args, rest, named, c?.loc ?? loc);
    if (args === null || path === null) return null;
    const id = this.inputs.length + this.layers.length;
    this.layers.push({ type: def.name, role: def.role, path, inputs: tensors.map((t) => (t as { id: number }).id), args, loc: c ? { ...c.callee.loc, endLine: c.loc.endLine, endCol: c.loc.endCol } : loc });
    return { t: 'tensor', id };
  }

  /** Paths of losses and metrics: `loss`; a metric's `as` name or its type. */
  private headPath(def: LayerDef, alias: A.Ident | undefined, loc: A.Loc): string | null {
    const path = def.role === 'loss' ? 'loss' : (alias?.name ?? def.name);
    if (this.inputs.some((i) => i.name === path)) return this.err(alias?.loc ?? loc, `metric name '${path}' is also an input name`, "name the metric with 'as'");
    if (this.paths.has(path)) {
      const p = this.paths.get(path)!;
      return this.err(alias?.loc ?? loc, `duplicate metric name '${path}'`, `'${path}' is first used at ${p.line}:${p.col}; name this one with 'as'`);
    }
    this.paths.set(path, alias?.loc ?? loc);
    return path;
  }

  private instantiate(b: BlockInfo, positional: PositionalArg[], named: A.Arg[], c: A.CallExpr, scope: Scope): Val | null {
    const name = b.decl.name.name;
    if (scope.blockStack.includes(name)) {
      return this.err(c.callee.loc, `block '${name}' uses itself: ${[...scope.blockStack.slice(scope.blockStack.indexOf(name)), name].join(' -> ')}`, 'blocks cannot be recursive');
    }
    if (scope.blockStack.length >= MAX_BLOCK_DEPTH) return this.err(c.callee.loc, `blocks nested deeper than ${MAX_BLOCK_DEPTH} levels`);
    const path = this.instancePath(name, c.alias, scope, c.callee.loc);
    const what = `block ${name} '${path ?? name}'`;
    const split = this.tensorArgs({ what, count: b.ins.length, names: b.ins.map((i) => i.name) }, positional, c.loc);
    if (split === null) return null;
    const specs: ArgSpec[] = b.decl.params.map((p) => ({ name: p.name.name, type: PARAM_TYPES[p.type.name] ?? 'int', default: p.default ? DEFER : undefined, doc: `${p.type.name} parameter of block ${name}` }));
    const bound = bindArgs({ what, diags: this.diags, evalExpr: (e) => this.eval(e, scope) }, specs, split.rest, named, c.loc);
    if (bound === null || path === null || !b.out) return null;
    const inner: Scope = { prefix: path + '.', vars: new Map(), counters: new Map(), blockStack: [...scope.blockStack, name], role: 'layer' };
    for (const p of b.decl.params) {
      const spec = specs.find((s) => s.name === p.name.name)!;
      let v: Val | null;
      if (bound[p.name.name] === DEFER) {
        const d = this.eval(p.default!, inner);
        if (d === null) return null;
        const conv = convert(spec, d, p.default!.loc, { what, diags: this.diags, evalExpr: () => null });
        if (conv === undefined) return null;
        v = toVal(spec.type, conv);
      } else v = toVal(spec.type, bound[p.name.name]);
      inner.vars.set(p.name.name, { val: v, kind: 'param', loc: p.name.loc });
    }
    b.ins.forEach((id, i) => inner.vars.set(id.name, { val: split.tensors[i], kind: 'value', loc: id.loc }));
    const r = this.exec(b.decl.body, inner, true);
    return r.out;
  }

  // ------------------------------------------------------------------ heads

  /** Loss and metric lines: calls resolved against the loss / metric tables, names against the network. */
  head(c: A.CallExpr, names: Scope['vars'], role: 'loss' | 'metric'): number | null {
    const scope: Scope = { prefix: '', vars: names, counters: new Map(), blockStack: [], role };
    if (!c.hasParens && this.callable(c.callee.name, scope)) return this.err(c.loc, `${role} '${c.callee.name}' needs its inputs: ${c.callee.name}(${LAYERS[c.callee.name].inputNames.join(', ')})`);
    const v = this.call({ ...c, hasParens: true }, scope, null, false);
    return v === null ? null : this.inputs.length + this.layers.length - 1;
  }

  run(ast: A.ModelFile): Expanded | null {
    try {
      this.declareInputs(ast.inputs);
      this.declareBlocks(ast.blocks);
      const scope = this.networkScope();
      if (ast.network.length === 0) this.err({ file: ast.file, line: 1, col: 1 }, 'the spec has no network section', 'add: network { logits = image -> ... }');
      for (const n of ast.network.slice(1)) this.err(n.loc, 'duplicate network section', 'put every statement in one network { ... }');
      if (ast.network.length > 0) this.exec(ast.network[0].value, scope, false);
      for (const l of ast.loss.slice(1)) this.err(l.loc, "duplicate 'loss' line", 'a spec has one loss');
      if (ast.loss.length > 0) this.head(ast.loss[0].value, scope.vars, 'loss');
      for (const m of ast.metrics) for (const c of m.value) this.head(c, scope.vars, 'metric');
      const names = new Map<string, Val | null>();
      for (const [k, v] of scope.vars) names.set(k, v.val);
      return { inputs: this.inputs, layers: this.layers, names, inputErrors: this.badInputs.size > 0, assigned: this.assigned };
    } catch (e) {
      if (e instanceof Abort) return null;
      throw e;
    }
  }
}

const DEFER = Symbol('default');

function toVal(type: ArgSpec['type'], v: unknown): Val {
  if (type === 'int') return { t: 'int', v: v as number };
  if (type === 'float') return { t: 'float', v: v as number };
  if (type === 'bool') return { t: 'bool', v: v as boolean };
  return { t: 'str', v: v as string };
}

export function expand(ast: A.ModelFile, diags: Diagnostic[]): Expanded | null {
  return new Expander(diags).run(ast);
}
