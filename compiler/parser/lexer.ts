/**
 * The `.model` lexer (chevrotain). Keywords are reserved at statement level but may be
 * used as argument and map keys (`safetensors(train: "a.safetensors")`): every keyword
 * and Ident share the `Name` category.
 */
import { createToken, Lexer, type TokenType } from 'chevrotain';

export const WhiteSpace = createToken({ name: 'WhiteSpace', pattern: /[ \t\r\n\uFEFF]+/, group: Lexer.SKIPPED });
export const Comment = createToken({ name: 'Comment', pattern: /#[^\n]*/, group: Lexer.SKIPPED });

export const Name = createToken({ name: 'Name', pattern: Lexer.NA });
export const Ident = createToken({ name: 'Ident', pattern: /[A-Za-z_][A-Za-z0-9_]*/, categories: [Name], label: 'a name' });

function keyword(word: string): TokenType {
  return createToken({ name: `Kw_${word}`, pattern: new RegExp(word), longer_alt: Ident, categories: [Name], label: `'${word}'` });
}

export const Model = keyword('model');
export const Input = keyword('input');
export const Block = keyword('block');
export const Network = keyword('network');
export const Loss = keyword('loss');
export const Metrics = keyword('metrics');
export const Optimizer = keyword('optimizer');
export const Schedule = keyword('schedule');
export const Train = keyword('train');
export const In = keyword('in');
export const Out = keyword('out');
export const Repeat = keyword('repeat');
export const As = keyword('as');
export const True = keyword('true');
export const False = keyword('false');

export const Float = createToken({
  name: 'Float',
  pattern: /(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+/,
  label: 'a number',
});
export const Int = createToken({ name: 'Int', pattern: /\d+/, longer_alt: Float, label: 'an integer' });
export const Str = createToken({ name: 'Str', pattern: /"(?:[^"\\\n]|\\.)*"/, label: 'a string' });

export const Arrow = createToken({ name: 'Arrow', pattern: /->/, label: "'->'" });
export const Plus = createToken({ name: 'Plus', pattern: /\+/, label: "'+'" });
export const Minus = createToken({ name: 'Minus', pattern: /-/, label: "'-'" });
export const Star = createToken({ name: 'Star', pattern: /\*/, label: "'*'" });
export const Slash = createToken({ name: 'Slash', pattern: /\//, label: "'/'" });
export const Equals = createToken({ name: 'Equals', pattern: /=/, label: "'='" });
export const Colon = createToken({ name: 'Colon', pattern: /:/, label: "':'" });
export const Comma = createToken({ name: 'Comma', pattern: /,/, label: "','" });
export const LParen = createToken({ name: 'LParen', pattern: /\(/, label: "'('" });
export const RParen = createToken({ name: 'RParen', pattern: /\)/, label: "')'" });
export const LBrack = createToken({ name: 'LBrack', pattern: /\[/, label: "'['" });
export const RBrack = createToken({ name: 'RBrack', pattern: /\]/, label: "']'" });
export const LBrace = createToken({ name: 'LBrace', pattern: /\{/, label: "'{'" });
export const RBrace = createToken({ name: 'RBrace', pattern: /\}/, label: "'}'" });

export const KEYWORDS = [Model, Input, Block, Network, Loss, Metrics, Optimizer, Schedule, Train, In, Out, Repeat, As, True, False];

export const allTokens: TokenType[] = [
  WhiteSpace,
  Comment,
  Name,
  ...KEYWORDS,
  Ident,
  Float,
  Int,
  Str,
  Arrow,
  Plus,
  Minus,
  Star,
  Slash,
  Equals,
  Colon,
  Comma,
  LParen,
  RParen,
  LBrack,
  RBrack,
  LBrace,
  RBrace,
];

export const modelLexer = new Lexer(allTokens, { positionTracking: 'full', ensureOptimizations: false });
