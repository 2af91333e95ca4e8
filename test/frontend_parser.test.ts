import { describe, it, expect } from 'vitest';
import { parseSource } from '../compiler/parser/parse.js';
import type { Expr, ModelFile, Stmt } from '../compiler/parser/ast.js';

function parse(src: string): ModelFile {
  const r = parseSource(src, 'p.model');
  expect(r.diagnostics).toEqual([]);
  return r.ast;
}

/** strip locations for structural comparison */
function strip(x: unknown): unknown {
  if (Array.isArray(x)) return x.map(strip);
  if (x && typeof x === 'object') {
    const o: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(x)) if (k !== 'loc' && k !== 'opLoc') o[k] = strip(v);
    return o;
  }
  return x;
}

function expr(src: string): Expr {
  const ast = parse(`network {\n  y = ${src}\n}`);
  const s = ast.network[0].value[0] as Extract<Stmt, { kind: 'assign' }>;
  return s.expr;
}

const id = (name: string) => ({ name });
const call = (name: string, args: unknown[] = [], hasParens = true, alias?: string) => ({ kind: 'call', callee: id(name), args, hasParens, ...(alias ? { alias: id(alias) } : {}) });
const arg = (value: unknown, name?: string) => (name ? { value, name: id(name) } : { value });
const num = (value: number, isInt = true, text = String(value)) => ({ kind: 'num', value, isInt, text });

describe('parser: sections', () => {
  it('model, inputs with dims and dtypes, comments', () => {
    const ast = parse('# header\nmodel lenet # trailing\ninput image: f32[N, 1, 28, 28]\ninput label: i32[N]\n');
    expect(ast.model[0].value.name).toBe('lenet');
    expect(strip(ast.inputs)).toEqual([
      { name: id('image'), dtype: id('f32'), dims: [{ value: 'N' }, { value: 1 }, { value: 28 }, { value: 28 }] },
      { name: id('label'), dtype: id('i32'), dims: [{ value: 'N' }] },
    ]);
    expect(ast.inputs[0].name.loc).toEqual({ file: 'p.model', line: 3, col: 7, endLine: 3, endCol: 11 });
  });

  it('a byte-order mark and CRLF line ends are whitespace', () => {
    const ast = parse('\uFEFFmodel a\r\ninput x: f32[N, 2]\r\n');
    expect(ast.model[0].value.name).toBe('a');
    expect(ast.inputs[0].name.loc.line).toBe(2);
  });

  it('blocks with typed parameters and defaults, in/out statements', () => {
    const ast = parse('block conv_block(channels: int, k: int = 3) {\n  in x, y\n  out x -> conv2d(channels, k, padding: k / 2)\n}');
    const b = ast.blocks[0];
    expect(b.name.name).toBe('conv_block');
    expect(strip(b.params)).toEqual([
      { name: id('channels'), type: id('int') },
      { name: id('k'), type: id('int'), default: num(3) },
    ]);
    expect(strip(b.body[0])).toEqual({ kind: 'in', names: [id('x'), id('y')] });
    expect(b.body[1].kind).toBe('out');
  });

  it('network with assignments and repeat', () => {
    const ast = parse('network {\n  h = image\n  repeat 2 { h = residual(h, 64) }\n}');
    const body = ast.network[0].value;
    expect(body.map((s) => s.kind)).toEqual(['assign', 'repeat']);
    const r = body[1] as Extract<Stmt, { kind: 'repeat' }>;
    expect(strip(r.count)).toEqual(num(2));
    expect(strip(r.body)).toEqual([{ kind: 'assign', target: id('h'), targets: [id('h')], expr: call('residual', [arg(call('h', [], false)), arg(num(64))]) }]);
  });

  it('repeat ... as NAME and several assigned names', () => {
    const ast = parse('network {\n  repeat 4 as blocks { q, k, v = split(h, 8, 2) }\n  repeat n as more { h = x }\n}');
    const [r, r2] = ast.network[0].value as Extract<Stmt, { kind: 'repeat' }>[];
    expect(r.alias?.name).toBe('blocks');
    expect(strip(r.count)).toEqual(num(4));
    const a = r.body[0] as Extract<Stmt, { kind: 'assign' }>;
    expect(a.targets.map((t) => t.name)).toEqual(['q', 'k', 'v']);
    expect(a.target.name).toBe('q');
    // `n as more`: the alias goes to the repeat, not to the name n
    expect(r2.alias?.name).toBe('more');
    expect(strip(r2.count)).toEqual(call('n', [], false));
  });

  it('loss, metrics list, optimizer, schedule, train map with keyword keys', () => {
    const ast = parse(
      'loss cross_entropy(logits, label, label_smoothing: 0.1)\nmetrics accuracy(logits, label), top_k(logits, label, k: 5) as top5\n' +
        'optimizer sgd(lr: 0.01, nesterov: false)\nschedule cosine(warmup_steps: 100)\n' +
        'train { data: safetensors(train: "a.safetensors", inputs: {image: "x", label: "y"}), epochs: 3 batch: 64 }',
    );
    expect(ast.loss[0].value.callee.name).toBe('cross_entropy');
    expect(ast.metrics[0].value.map((c) => c.alias?.name ?? c.callee.name)).toEqual(['accuracy', 'top5']);
    expect(strip(ast.optimizer[0].value.args)).toEqual([arg(num(0.01, false), 'lr'), arg({ kind: 'bool', value: false }, 'nesterov')]);
    expect(ast.schedule[0].value.callee.name).toBe('cosine');
    const t = ast.train[0].value;
    expect(t.entries.map((e) => e.key.name)).toEqual(['data', 'epochs', 'batch']);
    expect(strip(t.entries[0].value)).toEqual(
      call('safetensors', [
        arg({ kind: 'str', value: 'a.safetensors' }, 'train'),
        arg({ kind: 'map', entries: [{ key: id('image'), value: { kind: 'str', value: 'x' } }, { key: id('label'), value: { kind: 'str', value: 'y' } }] }, 'inputs'),
      ]),
    );
  });
});

describe('parser: expressions', () => {
  it('pipes with bare and called stages and aliases', () => {
    expect(strip(expr('x -> conv_block(32) as stage1 -> relu -> linear(10) as fc'))).toEqual({
      kind: 'pipe',
      head: call('x', [], false),
      stages: [call('conv_block', [arg(num(32))], true, 'stage1'), call('relu', [], false), call('linear', [arg(num(10))], true, 'fc')],
    });
  });

  it('arithmetic precedence: * and / bind tighter than + and -, left to right', () => {
    expect(strip(expr('a + b * 2 - c / 3'))).toEqual({
      kind: 'chain',
      first: call('a', [], false),
      rest: [
        { op: '+', rhs: { kind: 'chain', first: call('b', [], false), rest: [{ op: '*', rhs: num(2) }] } },
        { op: '-', rhs: { kind: 'chain', first: call('c', [], false), rest: [{ op: '/', rhs: num(3) }] } },
      ],
    });
  });

  it('pipe binds looser than arithmetic; parentheses group', () => {
    const e = expr('(h + x) -> relu') as Extract<Expr, { kind: 'pipe' }>;
    expect(e.kind).toBe('pipe');
    expect(e.head.kind).toBe('chain');
    expect(strip(expr('relu(h + x)'))).toEqual(call('relu', [arg({ kind: 'chain', first: call('h', [], false), rest: [{ op: '+', rhs: call('x', [], false) }] })]));
  });

  it('numbers, negatives, strings with escapes, booleans, lists', () => {
    expect(strip(expr('f(1, 2.5, 5e-4, -3, --x, "a\\"b", true, [1, 2])'))).toEqual(
      call('f', [
        arg(num(1)),
        arg(num(2.5, false)),
        arg(num(5e-4, false, '5e-4')),
        arg(num(-3, true, '-3')),
        arg({ kind: 'neg', operand: { kind: 'neg', operand: call('x', [], false) } }),
        arg({ kind: 'str', value: 'a"b' }),
        arg({ kind: 'bool', value: true }),
        arg({ kind: 'list', items: [num(1), num(2)] }),
      ]),
    );
  });

  it('named arguments may be keywords; nested calls', () => {
    expect(strip(expr('linear(10, init: normal(std: 0.02), in: 1)'))).toEqual(
      call('linear', [arg(num(10)), arg(call('normal', [arg(num(0.02, false), 'std')]), 'init'), arg(num(1), 'in')]),
    );
  });

  it('records spans', () => {
    const e = expr('x -> linear(10)') as Extract<Expr, { kind: 'pipe' }>;
    expect(e.stages[0].loc).toEqual({ file: 'p.model', line: 2, col: 12, endLine: 2, endCol: 21 });
  });
});
