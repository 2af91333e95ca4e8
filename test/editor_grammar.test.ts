// editors/vscode (issue 16): the TextMate grammar is the generated one (its word lists equal the
// compiler's tables), and vscode-textmate + vscode-oniguruma tokenise every example spec with every
// character in a real scope (no text left to the root scope, nothing in an `invalid` scope); a
// negative control shows a non-ASCII identifier does get an invalid scope.
import { describe, it, expect, beforeAll } from 'vitest';
import { readFileSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import * as oniguruma from 'vscode-oniguruma';
import vsctm from 'vscode-textmate';
import { buildGrammar, grammarWords, SCOPE } from '../editors/vscode/grammar.js';
import { layersWithRole } from '../compiler/check/layers.js';
import { KEYWORDS } from '../compiler/parser/lexer.js';

const GRAMMAR_FILE = 'editors/vscode/syntaxes/mpsc-model.tmLanguage.json';
let grammar: vsctm.IGrammar;

beforeAll(async () => {
  const require = createRequire(import.meta.url);
  const wasm = readFileSync(require.resolve('vscode-oniguruma/release/onig.wasm'));
  await oniguruma.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
  const registry = new vsctm.Registry({
    onigLib: Promise.resolve({ createOnigScanner: (p: string[]) => new oniguruma.OnigScanner(p), createOnigString: (s: string) => new oniguruma.OnigString(s) }),
    loadGrammar: async (scope: string) => (scope === SCOPE ? vsctm.parseRawGrammar(readFileSync(GRAMMAR_FILE, 'utf8'), GRAMMAR_FILE) : null),
  });
  grammar = (await registry.loadGrammar(SCOPE))!;
});

function tokenize(text: string): { text: string; scopes: string[]; line: number }[] {
  const out: { text: string; scopes: string[]; line: number }[] = [];
  let stack = vsctm.INITIAL;
  text.split('\n').forEach((line, k) => {
    const r = grammar.tokenizeLine(line, stack);
    for (const t of r.tokens) out.push({ text: line.slice(t.startIndex, t.endIndex), scopes: t.scopes, line: k + 1 });
    stack = r.ruleStack;
  });
  return out;
}

describe('editors/vscode grammar', () => {
  it('the grammar file is the generated one (regenerate: npx tsx scripts/gen_vscode_grammar.ts)', () => {
    expect(JSON.parse(readFileSync(GRAMMAR_FILE, 'utf8'))).toEqual(buildGrammar());
  });

  it("its word lists are the compiler's tables", () => {
    const w = grammarWords();
    expect(w['support.function.layer.mpsc-model']).toEqual(layersWithRole('layer').map((d) => d.name).sort());
    expect(w['support.function.loss.mpsc-model']).toEqual(layersWithRole('loss').map((d) => d.name).sort());
    expect(w['support.function.metric.mpsc-model']).toEqual(layersWithRole('metric').map((d) => d.name).sort());
    expect([...w['keyword.control.mpsc-model'], ...w['constant.language.boolean.mpsc-model']].sort()).toEqual(KEYWORDS.map((t) => t.name.replace(/^Kw_/, '')).sort());
  });

  const specs = readdirSync('specs').filter((f) => f.endsWith('.model')).map((f) => `specs/${f}`);
  for (const f of specs) {
    it(`${f}: every character in a scope, none invalid`, () => {
      const toks = tokenize(readFileSync(f, 'utf8'));
      const bad = toks.filter((t) => t.text.trim() !== '' && (t.scopes.length < 2 || t.scopes.some((s) => s.startsWith('invalid'))));
      expect(bad.map((t) => `${f}:${t.line}: '${t.text}' ${t.scopes.join(' ')}`)).toEqual([]);
    });
  }

  it('scopes the parts of a line as expected; a non-ASCII name and an open string are invalid', () => {
    const toks = tokenize('  h = image -> conv2d(32, 3, padding: 1) -> relu  # stem\noptimizer adam(lr: 1e-3)\nx = "a.csv"');
    const scopeOf = (text: string) => toks.find((t) => t.text === text)?.scopes[1];
    expect(scopeOf('conv2d')).toBe('support.function.layer.mpsc-model');
    expect(scopeOf('relu')).toBe('support.function.layer.mpsc-model');
    expect(scopeOf('adam')).toBe('support.function.optimizer.mpsc-model');
    expect(scopeOf('optimizer')).toBe('keyword.control.mpsc-model');
    expect(scopeOf('1e-3')).toBe('constant.numeric.float.mpsc-model');
    expect(scopeOf('32')).toBe('constant.numeric.integer.mpsc-model');
    expect(scopeOf('->')).toBe('keyword.operator.arrow.mpsc-model');
    expect(scopeOf('# stem')).toBe('comment.line.number-sign.mpsc-model');
    expect(scopeOf('"a.csv"')).toBe('string.quoted.double.mpsc-model');
    expect(scopeOf('image')).toBe('variable.other.mpsc-model');
    const bad = tokenize('größe = image -> relu\nx = "open');
    expect(bad.filter((t) => t.scopes.some((s) => s.startsWith('invalid'))).map((t) => t.text)).toEqual(['größe', '"open']);
  });
});
