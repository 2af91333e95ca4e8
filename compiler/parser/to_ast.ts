/**
 * CST -> typed AST (ast.ts). Runs only on sections that parsed without errors; literal
 * problems (an integer too large, a malformed string) become diagnostics.
 */
import type { CstNode, IToken, CstElement } from 'chevrotain';
import type * as A from './ast.js';
import { errorAt, type Diagnostic } from '../diagnostics.js';

export const MAX_INT = 2147483647;

type Children = Record<string, CstElement[] | undefined>;

export class AstBuilder {
  constructor(readonly file: string, readonly diags: Diagnostic[]) {}

  tokLoc(t: IToken): A.Loc {
    return { file: this.file, line: t.startLine ?? 1, col: t.startColumn ?? 1, endLine: t.endLine ?? t.startLine ?? 1, endCol: t.endColumn ?? t.startColumn ?? 1 };
  }

  nodeLoc(n: CstNode): A.Loc {
    const l = n.location!;
    return { file: this.file, line: l.startLine ?? 1, col: l.startColumn ?? 1, endLine: l.endLine ?? l.startLine ?? 1, endCol: l.endColumn ?? l.startColumn ?? 1 };
  }

  span(a: A.Loc, b: A.Loc): A.Loc {
    return { file: this.file, line: a.line, col: a.col, endLine: b.endLine ?? b.line, endCol: b.endCol ?? b.col };
  }

  ident(t: IToken): A.Ident {
    return { name: t.image, loc: this.tokLoc(t) };
  }

  /** Fill one section of the file from its CST (`section` rule). */
  section(cst: CstNode, out: A.ModelFile): void {
    const c = cst.children as Children;
    const [kind] = Object.keys(c);
    const node = (c[kind] as CstNode[])[0];
    const k = node.children as Children;
    const kwLoc = (name: string) => this.tokLoc(tok(k, name));
    switch (kind) {
      case 'modelDecl':
        out.model.push({ value: this.ident(tok(k, 'Ident')), loc: kwLoc('Kw_model') });
        break;
      case 'inputDecl':
        out.inputs.push({
          name: this.ident(tok(k, 'name')),
          dtype: this.ident(tok(k, 'dtype')),
          dims: nodes(k, 'dim').map((d) => this.dim(d)),
          loc: this.nodeLoc(node),
        });
        break;
      case 'blockDecl':
        out.blocks.push({
          name: this.ident(tok(k, 'Ident')),
          params: nodes(k, 'blockParam').map((p) => {
            const pk = p.children as Children;
            const bp: A.BlockParam = { name: this.ident(tok(pk, 'name')), type: this.ident(tok(pk, 'type')) };
            if (pk.expr) bp.default = this.expr(nodes(pk, 'expr')[0]);
            return bp;
          }),
          body: this.body(nodes(k, 'body')[0]),
          loc: this.nodeLoc(node),
        });
        break;
      case 'networkDecl':
        out.network.push({ value: this.body(nodes(k, 'body')[0]), loc: kwLoc('Kw_network') });
        break;
      case 'lossDecl':
        out.loss.push({ value: this.call(nodes(k, 'call')[0]), loc: kwLoc('Kw_loss') });
        break;
      case 'metricsDecl':
        out.metrics.push({ value: nodes(k, 'call').map((n) => this.call(n)), loc: kwLoc('Kw_metrics') });
        break;
      case 'optimizerDecl':
        out.optimizer.push({ value: this.call(nodes(k, 'call')[0]), loc: kwLoc('Kw_optimizer') });
        break;
      case 'scheduleDecl':
        out.schedule.push({ value: this.call(nodes(k, 'call')[0]), loc: kwLoc('Kw_schedule') });
        break;
      case 'trainDecl':
        out.train.push({ value: this.map(nodes(k, 'map')[0]), loc: kwLoc('Kw_train') });
        break;
      default:
        throw new Error(`internal: unknown section '${kind}'`);
    }
  }

  dim(n: CstNode): A.Dim {
    const k = n.children as Children;
    if (k.Int) {
      const t = tok(k, 'Int');
      return { value: this.int(t), loc: this.tokLoc(t) };
    }
    const t = tok(k, 'Ident');
    return { value: t.image, loc: this.tokLoc(t) };
  }

  int(t: IToken): number {
    const v = Number(t.image);
    if (!(v <= MAX_INT)) {
      this.diags.push(errorAt(this.tokLoc(t), `integer ${t.image.length > 20 ? t.image.slice(0, 20) + '...' : t.image} is too large (the limit is ${MAX_INT})`));
      return 0;
    }
    return v;
  }

  body(n: CstNode): A.Stmt[] {
    return nodes(n.children as Children, 'stmt').map((s) => this.stmt(s));
  }

  stmt(n: CstNode): A.Stmt {
    const k = n.children as Children;
    const loc = this.nodeLoc(n);
    if (k.Kw_in) return { kind: 'in', names: toks(k, 'Ident').map((t) => this.ident(t)), loc };
    if (k.Kw_out) return { kind: 'out', expr: this.expr(nodes(k, 'expr')[0]), loc };
    if (k.Kw_repeat) {
      let count = this.expr(nodes(k, 'expr')[0]);
      let alias = k.repeatAlias ? this.ident(tok(k, 'repeatAlias')) : undefined;
      // `repeat n as blocks`: the call rule takes `as blocks` as an alias of the name `n`
      if (!alias && count.kind === 'call' && !count.hasParens && count.alias) {
        alias = count.alias;
        count = { ...count, alias: undefined, loc: count.callee.loc };
      }
      return { kind: 'repeat', count, ...(alias ? { alias } : {}), body: this.body(nodes(k, 'body')[0]), loc };
    }
    const targets = toks(k, 'Ident').map((t) => this.ident(t));
    return { kind: 'assign', target: targets[0], targets, expr: this.expr(nodes(k, 'expr')[0]), loc };
  }

  expr(n: CstNode): A.Expr {
    const k = n.children as Children;
    const head = this.additive(nodes(k, 'additive')[0]);
    const stages = (k.stage ?? []) as CstNode[];
    if (stages.length === 0) return head;
    const calls = stages.map((s) => this.call(s));
    return { kind: 'pipe', head, stages: calls, loc: this.nodeLoc(n) };
  }

  additive(n: CstNode): A.Expr {
    const k = n.children as Children;
    return this.chain(n, nodes(k, 'term').map((t) => this.term(t)), [...toks(k, 'Plus'), ...toks(k, 'Minus')]);
  }

  term(n: CstNode): A.Expr {
    const k = n.children as Children;
    return this.chain(n, nodes(k, 'unary').map((u) => this.unary(u)), [...toks(k, 'Star'), ...toks(k, 'Slash')]);
  }

  chain(n: CstNode, operands: A.Expr[], ops: IToken[]): A.Expr {
    if (ops.length === 0) return operands[0];
    ops.sort((a, b) => a.startOffset - b.startOffset);
    return {
      kind: 'chain',
      first: operands[0],
      rest: ops.map((o, i) => ({ op: o.image as '+' | '-' | '*' | '/', opLoc: this.tokLoc(o), rhs: operands[i + 1] })),
      loc: this.nodeLoc(n),
    };
  }

  unary(n: CstNode): A.Expr {
    const k = n.children as Children;
    let e = this.primary(nodes(k, 'primary')[0]);
    let minus = toks(k, 'Minus').sort((a, b) => b.startOffset - a.startOffset);
    // a run of '-' before a non-number: two negations cancel, so keep one or two (same parity,
    // same errors for a string or a bool) instead of thousands of nested 'neg' nodes that the
    // recursive evaluators would overflow the stack on (fuzz case: 19,328 '-' before a string)
    if (e.kind !== 'num' && minus.length > 2) minus = minus.length % 2 === 0 ? [minus[0], minus[minus.length - 1]] : [minus[minus.length - 1]];
    for (const m of minus) {
      const loc = this.span(this.tokLoc(m), e.loc);
      if (e.kind === 'num') e = { kind: 'num', value: -e.value, isInt: e.isInt, text: '-' + e.text, loc };
      else e = { kind: 'neg', operand: e, loc };
    }
    return e;
  }

  primary(n: CstNode): A.Expr {
    const k = n.children as Children;
    if (k.Int) {
      const t = tok(k, 'Int');
      return { kind: 'num', value: this.int(t), isInt: true, text: t.image, loc: this.tokLoc(t) };
    }
    if (k.Float) {
      const t = tok(k, 'Float');
      const v = Number(t.image);
      if (!Number.isFinite(v)) this.diags.push(errorAt(this.tokLoc(t), `number ${t.image.slice(0, 20)} is out of range`));
      return { kind: 'num', value: Number.isFinite(v) ? v : 0, isInt: false, text: t.image, loc: this.tokLoc(t) };
    }
    if (k.Str) {
      const t = tok(k, 'Str');
      return { kind: 'str', value: unquote(t.image), loc: this.tokLoc(t) };
    }
    if (k.Kw_true) return { kind: 'bool', value: true, loc: this.tokLoc(tok(k, 'Kw_true')) };
    if (k.Kw_false) return { kind: 'bool', value: false, loc: this.tokLoc(tok(k, 'Kw_false')) };
    if (k.list) {
      const l = nodes(k, 'list')[0];
      return { kind: 'list', items: nodes(l.children as Children, 'expr').map((e) => this.expr(e)), loc: this.nodeLoc(l) };
    }
    if (k.map) return this.map(nodes(k, 'map')[0]);
    if (k.expr) return this.expr(nodes(k, 'expr')[0]);
    return this.call(nodes(k, 'call')[0]);
  }

  call(n: CstNode): A.CallExpr {
    const k = n.children as Children;
    const c: A.CallExpr = {
      kind: 'call',
      callee: this.ident(tok(k, 'callee')),
      args: nodes(k, 'arg').map((a) => {
        const ak = a.children as Children;
        const arg: A.Arg = { value: this.expr(nodes(ak, 'expr')[0]) };
        if (ak.key) arg.name = this.ident(tok(ak, 'key'));
        return arg;
      }),
      hasParens: k.LParen !== undefined,
      loc: this.nodeLoc(n),
    };
    if (k.alias) c.alias = this.ident(tok(k, 'alias'));
    return c;
  }

  map(n: CstNode): A.MapExpr {
    const k = n.children as Children;
    return {
      kind: 'map',
      entries: nodes(k, 'mapEntry').map((e) => {
        const ek = e.children as Children;
        return { key: this.ident(tok(ek, 'key')), value: this.expr(nodes(ek, 'expr')[0]) };
      }),
      loc: this.nodeLoc(n),
    };
  }
}

function tok(k: Children, name: string): IToken {
  const v = k[name];
  if (!v || v.length === 0) throw new Error(`internal: CST has no token '${name}'`);
  return v[0] as IToken;
}
function toks(k: Children, name: string): IToken[] {
  return [...((k[name] ?? []) as IToken[])];
}
function nodes(k: Children, name: string): CstNode[] {
  return (k[name] ?? []) as CstNode[];
}

function unquote(s: string): string {
  return s.slice(1, -1).replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c === 't' ? '\t' : c));
}
