/**
 * Text -> AST. Lexes the whole file, splits the tokens into sections at the section
 * keywords (a keyword followed by ':' is an argument key, not a section), and parses
 * each section on its own so that one syntax error does not hide the others.
 */
import { tokenMatcher, type IToken } from 'chevrotain';
import * as T from './lexer.js';
import { modelParser, describeToken } from './parser.js';
import { AstBuilder } from './to_ast.js';
import type { ModelFile } from './ast.js';
import { errorAt, suggestion, type Diagnostic } from '../diagnostics.js';

const SECTION_KEYWORDS = [T.Model, T.Input, T.Block, T.Network, T.Loss, T.Metrics, T.Optimizer, T.Schedule, T.Train];
const SECTION_NAMES = ['model', 'input', 'block', 'network', 'loss', 'metrics', 'optimizer', 'schedule', 'train'];
/** Deeper bracket nesting is rejected before parsing (keeps recursion far from the stack limit). */
export const MAX_NESTING = 64;

/** Hints for characters the lexer rejects that are easy to type by accident. */
const CHAR_HINTS: Record<string, string> = {
  ';': 'statements need no separator; remove it',
  '\u201C': 'use a straight double quote (") for strings',
  '\u201D': 'use a straight double quote (") for strings',
  "'": 'strings use double quotes ("...")',
  '\u2018': 'strings use straight double quotes ("...")',
  '\u2019': 'strings use straight double quotes ("...")',
  '\u2192': "write the arrow as '->'",
  '\u2212': "write minus as '-'",
  '\u00D7': "write times as '*'",
};

/**
 * Words (outside comments and strings) made of letters, digits and _ with at least one non-ASCII
 * letter: each distinct one with its first position and use count, and the text with every such
 * word's code units replaced by 'x' (same length, so positions stay right).
 */
function nonAsciiNames(text: string): { text: string; names: { name: string; bad: string; line: number; col: number; uses: number }[] } {
  const names = new Map<string, { name: string; bad: string; line: number; col: number; uses: number }>();
  let out = '';
  let line = 1;
  let lineStart = 0;
  let i = 0;
  while (i < text.length) {
    const ch = text[i];
    if (ch === '\n') {
      out += ch;
      line++;
      lineStart = ++i;
    } else if (ch === '#') {
      const end = text.indexOf('\n', i);
      const stop = end < 0 ? text.length : end;
      out += text.slice(i, stop);
      i = stop;
    } else if (ch === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"' && text[j] !== '\n') j += text[j] === '\\' ? 2 : 1;
      const stop = Math.min(text.length, text[j] === '"' ? j + 1 : j);
      out += text.slice(i, stop);
      i = stop;
    } else {
      const m = /^[\p{L}\p{N}_\p{M}]+/u.exec(text.slice(i, i + 200));
      if (m && /[^\x00-\x7F]/.test(m[0])) {
        const w = m[0];
        const seen = names.get(w);
        if (seen) seen.uses++;
        else names.set(w, { name: w, bad: /[^\x00-\x7F]/u.exec(w)![0], line, col: i - lineStart + 1, uses: 1 });
        out += /^\p{N}/u.test(w) ? '_' + 'x'.repeat(w.length - 1) : 'x'.repeat(w.length);
        i += w.length;
      } else if (m) {
        out += m[0];
        i += m[0].length;
      } else {
        out += ch;
        i++;
      }
    }
  }
  return { text: out, names: [...names.values()] };
}

/** An ASCII spelling of a name (accents dropped, ß -> ss), or null when nothing ASCII is left. */
function asciiSpelling(name: string): string | null {
  const s = name.normalize('NFD').replace(/\p{M}/gu, '').replace(/ß/g, 'ss').replace(/æ/g, 'ae').replace(/ø/g, 'o').replace(/[^A-Za-z0-9_]/g, '');
  return /^[A-Za-z_]/.test(s) ? s : null;
}

export interface ParseResult {
  ast: ModelFile;
  diagnostics: Diagnostic[];
}

export function parseSource(text: string, file: string): ParseResult {
  const diags: Diagnostic[] = [];
  const builder = new AstBuilder(file, diags);
  const ast: ModelFile = { file, model: [], inputs: [], blocks: [], network: [], loss: [], metrics: [], optimizer: [], schedule: [], train: [] };

  // names with non-ASCII letters: one error per distinct name, and the lexer sees an ASCII stand-in of
  // the same length so the rest of the file parses without a cascade
  const nonAscii = nonAsciiNames(text);
  for (const n of nonAscii.names) {
    const loc = { file, line: n.line, col: n.col, endLine: n.line, endCol: n.col + n.name.length - 1 };
    const ascii = asciiSpelling(n.name);
    diags.push(errorAt(loc, `name '${n.name}' has a non-ASCII character '${n.bad}'${n.uses > 1 ? ` (and ${n.uses - 1} more use${n.uses > 2 ? 's' : ''} of it)` : ''}`, `names are ASCII letters, digits and _${ascii ? `: rename it, e.g. '${ascii}'` : ''}`));
  }
  const lexed = T.modelLexer.tokenize(nonAscii.text);
  for (const e of lexed.errors) {
    const ch = text.slice(e.offset, e.offset + 1);
    const loc = { file, line: e.line ?? 1, col: e.column ?? 1 };
    if (ch === '"') diags.push(errorAt(loc, 'unterminated string', 'close the string with " on the same line'));
    else diags.push(errorAt(loc, `unexpected character ${JSON.stringify(ch)}${ch.charCodeAt(0) > 127 ? ` (U+${ch.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')})` : ''}`, CHAR_HINTS[ch]));
  }
  if (lexed.tokens.length === 0 && lexed.errors.length === 0 && nonAscii.names.length === 0) {
    diags.push(errorAt({ file, line: 1, col: 1 }, text.trim() === '' ? 'the file is empty' : 'the file has only comments', 'a spec needs a model line, inputs, a network, a loss, an optimizer and a train section: start from specs/mnist_mlp.model (docs/language.md)'));
    return { ast, diagnostics: diags };
  }

  const tokens = lexed.tokens;
  const sections: IToken[][] = [];
  let current: IToken[] | null = null;
  let strayReported = false;
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i];
    const isSection = SECTION_KEYWORDS.some((k) => tokenMatcher(t, k)) && !(i + 1 < tokens.length && tokenMatcher(tokens[i + 1], T.Colon));
    if (isSection) {
      current = [t];
      sections.push(current);
    } else if (current) {
      current.push(t);
    } else if (!strayReported) {
      strayReported = true;
      diags.push(
        errorAt(
          builder.tokLoc(t),
          `expected a section (model, input, block, network, loss, metrics, optimizer, schedule, train) but found ${describeToken(t)}`,
          tokenMatcher(t, T.Ident) ? suggestion(t.image, SECTION_NAMES) : undefined,
        ),
      );
    }
  }

  const parser = modelParser();
  for (const sec of sections) {
    let depth = 0;
    let tooDeep: IToken | null = null;
    for (const t of sec) {
      if (tokenMatcher(t, T.LParen) || tokenMatcher(t, T.LBrack) || tokenMatcher(t, T.LBrace)) {
        if (++depth > MAX_NESTING) {
          tooDeep = t;
          break;
        }
      } else if (tokenMatcher(t, T.RParen) || tokenMatcher(t, T.RBrack) || tokenMatcher(t, T.RBrace)) depth--;
    }
    if (tooDeep) {
      diags.push(errorAt(builder.tokLoc(tooDeep), `brackets nested deeper than ${MAX_NESTING} levels`, 'split the expression into named steps'));
      continue;
    }
    parser.input = sec;
    const cst = parser.section();
    if (parser.errors.length > 0) {
      const e = parser.errors[0];
      const t = e.token;
      const loc = Number.isFinite(t.startLine) ? builder.tokLoc(t) : builder.tokLoc(sec[sec.length - 1]);
      if (!Number.isFinite(t.startLine)) {
        // end of section: point just past its last token
        loc.col = (loc.endCol ?? loc.col) + 1;
        loc.line = loc.endLine ?? loc.line;
        loc.endCol = loc.col;
        loc.endLine = loc.line;
      }
      const near = tokenMatcher(t, T.Ident) ? suggestion(t.image, SECTION_NAMES) : undefined;
      diags.push(errorAt(loc, e.message, near));
      continue;
    }
    builder.section(cst, ast);
  }
  return { ast, diagnostics: diags };
}
