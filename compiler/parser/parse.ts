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

export interface ParseResult {
  ast: ModelFile;
  diagnostics: Diagnostic[];
}

export function parseSource(text: string, file: string): ParseResult {
  const diags: Diagnostic[] = [];
  const builder = new AstBuilder(file, diags);
  const ast: ModelFile = { file, model: [], inputs: [], blocks: [], network: [], loss: [], metrics: [], optimizer: [], schedule: [], train: [] };

  const lexed = T.modelLexer.tokenize(text);
  for (const e of lexed.errors) {
    const ch = text.slice(e.offset, e.offset + 1);
    const loc = { file, line: e.line ?? 1, col: e.column ?? 1 };
    if (ch === '"') diags.push(errorAt(loc, 'unterminated string', 'close the string with " on the same line'));
    else diags.push(errorAt(loc, `unexpected character ${JSON.stringify(ch)}`, ch === ';' ? 'statements need no separator; remove it' : undefined));
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
