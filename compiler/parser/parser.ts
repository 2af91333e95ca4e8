/**
 * The `.model` CstParser (chevrotain). Grammar (EBNF; `{}` repetition, `[]` option):
 *
 *   file       = { section }
 *   section    = modelDecl | inputDecl | blockDecl | networkDecl | lossDecl
 *              | metricsDecl | optimizerDecl | scheduleDecl | trainDecl
 *   modelDecl  = "model" Ident
 *   inputDecl  = "input" Ident ":" Ident "[" [ dim { "," dim } ] "]"
 *   dim        = Int | Ident
 *   blockDecl  = "block" Ident "(" [ param { "," param } ] ")" "{" { stmt } "}"
 *   param      = Ident ":" Ident [ "=" expr ]
 *   networkDecl= "network" "{" { stmt } "}"
 *   stmt       = "in" Ident { "," Ident } | "out" expr | Ident { "," Ident } "=" expr
 *              | "repeat" expr [ "as" Ident ] "{" { stmt } "}"
 *   lossDecl   = "loss" call          metricsDecl = "metrics" call { "," call }
 *   optimizerDecl = "optimizer" call  scheduleDecl = "schedule" call
 *   trainDecl  = "train" map
 *   expr       = additive { "->" stage }
 *   stage      = Ident [ "(" args ")" ] [ "as" Ident ]
 *   additive   = term { ("+" | "-") term }
 *   term       = unary { ("*" | "/") unary }
 *   unary      = { "-" } primary
 *   primary    = Int | Float | Str | "true" | "false" | list | map | "(" expr ")" | call
 *   call       = Ident [ "(" args ")" ] [ "as" Ident ]
 *   args       = [ arg { "," arg } ]       arg = [ Name ":" ] expr
 *   list       = "[" [ expr { "," expr } ] "]"
 *   map        = "{" { Name ":" expr [ "," ] } "}"
 *
 * parse.ts splits the token stream at section keywords and parses each section on its
 * own, so one syntax error per section is reported and the other sections still parse.
 */
import { CstParser, tokenMatcher, type IParserErrorMessageProvider, type IToken, type TokenType, EOF } from 'chevrotain';
import * as T from './lexer.js';

export function describeToken(tok: IToken): string {
  if (tok.tokenType === EOF) return 'the end of the section';
  return `'${tok.image.length > 30 ? tok.image.slice(0, 30) + '...' : tok.image}'`;
}

function labelOf(t: TokenType): string {
  if (t === T.Name) return 'a name';
  return t.LABEL ?? t.name;
}

const RULE_WORDS: Record<string, string> = {
  section: 'a section (model, input, block, network, loss, metrics, optimizer, schedule, train)',
  stmt: "a statement (NAME = ..., in, out, repeat)",
  primary: 'an expression',
  dim: 'a dimension (an integer or N)',
  arg: 'an argument',
  mapEntry: 'KEY: value',
};

const messages: IParserErrorMessageProvider = {
  buildMismatchTokenMessage({ expected, actual }) {
    return `expected ${labelOf(expected)} but found ${describeToken(actual)}`;
  },
  buildNotAllInputParsedMessage({ firstRedundant }) {
    return `unexpected ${describeToken(firstRedundant)}`;
  },
  buildNoViableAltMessage({ actual, ruleName }) {
    return `expected ${RULE_WORDS[ruleName] ?? ruleName} but found ${describeToken(actual[0])}`;
  },
  buildEarlyExitMessage({ actual, ruleName }) {
    return `expected ${RULE_WORDS[ruleName] ?? ruleName} but found ${describeToken(actual[0])}`;
  },
};

export class ModelParser extends CstParser {
  constructor() {
    super(T.allTokens, { recoveryEnabled: false, maxLookahead: 3, nodeLocationTracking: 'full', errorMessageProvider: messages });
    this.performSelfAnalysis();
  }

  section = this.RULE('section', () => {
    this.OR([
      { ALT: () => this.SUBRULE(this.modelDecl) },
      { ALT: () => this.SUBRULE(this.inputDecl) },
      { ALT: () => this.SUBRULE(this.blockDecl) },
      { ALT: () => this.SUBRULE(this.networkDecl) },
      { ALT: () => this.SUBRULE(this.lossDecl) },
      { ALT: () => this.SUBRULE(this.metricsDecl) },
      { ALT: () => this.SUBRULE(this.optimizerDecl) },
      { ALT: () => this.SUBRULE(this.scheduleDecl) },
      { ALT: () => this.SUBRULE(this.trainDecl) },
    ]);
  });

  modelDecl = this.RULE('modelDecl', () => {
    this.CONSUME(T.Model);
    this.CONSUME(T.Ident);
  });

  inputDecl = this.RULE('inputDecl', () => {
    this.CONSUME(T.Input);
    this.CONSUME(T.Ident, { LABEL: 'name' });
    this.CONSUME(T.Colon);
    this.CONSUME2(T.Ident, { LABEL: 'dtype' });
    this.CONSUME(T.LBrack);
    this.MANY_SEP({ SEP: T.Comma, DEF: () => this.SUBRULE(this.dim) });
    this.CONSUME(T.RBrack);
  });

  dim = this.RULE('dim', () => {
    this.OR([{ ALT: () => this.CONSUME(T.Int) }, { ALT: () => this.CONSUME(T.Ident) }]);
  });

  blockDecl = this.RULE('blockDecl', () => {
    this.CONSUME(T.Block);
    this.CONSUME(T.Ident);
    this.CONSUME(T.LParen);
    this.MANY_SEP({ SEP: T.Comma, DEF: () => this.SUBRULE(this.blockParam) });
    this.CONSUME(T.RParen);
    this.SUBRULE(this.body);
  });

  blockParam = this.RULE('blockParam', () => {
    this.CONSUME(T.Ident, { LABEL: 'name' });
    this.CONSUME(T.Colon);
    this.CONSUME2(T.Ident, { LABEL: 'type' });
    this.OPTION(() => {
      this.CONSUME(T.Equals);
      this.SUBRULE(this.expr);
    });
  });

  body = this.RULE('body', () => {
    this.CONSUME(T.LBrace);
    this.MANY(() => this.SUBRULE(this.stmt));
    this.CONSUME(T.RBrace);
  });

  networkDecl = this.RULE('networkDecl', () => {
    this.CONSUME(T.Network);
    this.SUBRULE(this.body);
  });

  stmt = this.RULE('stmt', () => {
    this.OR([
      {
        ALT: () => {
          this.CONSUME(T.In);
          this.AT_LEAST_ONE_SEP({ SEP: T.Comma, DEF: () => this.CONSUME(T.Ident) });
        },
      },
      {
        ALT: () => {
          this.CONSUME(T.Out);
          this.SUBRULE(this.expr);
        },
      },
      {
        ALT: () => {
          this.CONSUME(T.Repeat);
          this.SUBRULE2(this.expr);
          this.OPTION(() => {
            this.CONSUME(T.As);
            this.CONSUME3(T.Ident, { LABEL: 'repeatAlias' });
          });
          this.SUBRULE(this.body);
        },
      },
      {
        ALT: () => {
          this.AT_LEAST_ONE_SEP2({ SEP: T.Comma, DEF: () => this.CONSUME2(T.Ident) });
          this.CONSUME(T.Equals);
          this.SUBRULE3(this.expr);
        },
      },
    ]);
  });

  lossDecl = this.RULE('lossDecl', () => {
    this.CONSUME(T.Loss);
    this.SUBRULE(this.call);
  });

  metricsDecl = this.RULE('metricsDecl', () => {
    this.CONSUME(T.Metrics);
    this.AT_LEAST_ONE_SEP({ SEP: T.Comma, DEF: () => this.SUBRULE(this.call) });
  });

  optimizerDecl = this.RULE('optimizerDecl', () => {
    this.CONSUME(T.Optimizer);
    this.SUBRULE(this.call);
  });

  scheduleDecl = this.RULE('scheduleDecl', () => {
    this.CONSUME(T.Schedule);
    this.SUBRULE(this.call);
  });

  trainDecl = this.RULE('trainDecl', () => {
    this.CONSUME(T.Train);
    this.SUBRULE(this.map);
  });

  expr = this.RULE('expr', () => {
    this.SUBRULE(this.additive);
    this.MANY(() => {
      this.CONSUME(T.Arrow);
      this.SUBRULE(this.call, { LABEL: 'stage' });
    });
  });

  additive = this.RULE('additive', () => {
    this.SUBRULE(this.term);
    this.MANY(() => {
      this.OR([{ ALT: () => this.CONSUME(T.Plus) }, { ALT: () => this.CONSUME(T.Minus) }]);
      this.SUBRULE2(this.term);
    });
  });

  term = this.RULE('term', () => {
    this.SUBRULE(this.unary);
    this.MANY(() => {
      this.OR([{ ALT: () => this.CONSUME(T.Star) }, { ALT: () => this.CONSUME(T.Slash) }]);
      this.SUBRULE2(this.unary);
    });
  });

  unary = this.RULE('unary', () => {
    this.MANY(() => this.CONSUME(T.Minus));
    this.SUBRULE(this.primary);
  });

  primary = this.RULE('primary', () => {
    this.OR([
      { ALT: () => this.CONSUME(T.Int) },
      { ALT: () => this.CONSUME(T.Float) },
      { ALT: () => this.CONSUME(T.Str) },
      { ALT: () => this.CONSUME(T.True) },
      { ALT: () => this.CONSUME(T.False) },
      { ALT: () => this.SUBRULE(this.list) },
      { ALT: () => this.SUBRULE(this.map) },
      {
        ALT: () => {
          this.CONSUME(T.LParen);
          this.SUBRULE(this.expr);
          this.CONSUME(T.RParen);
        },
      },
      { ALT: () => this.SUBRULE(this.call) },
    ]);
  });

  call = this.RULE('call', () => {
    this.CONSUME(T.Ident, { LABEL: 'callee' });
    this.OPTION(() => {
      this.CONSUME(T.LParen);
      this.MANY_SEP({ SEP: T.Comma, DEF: () => this.SUBRULE(this.arg) });
      this.CONSUME(T.RParen);
    });
    this.OPTION2(() => {
      this.CONSUME(T.As);
      this.CONSUME2(T.Ident, { LABEL: 'alias' });
    });
  });

  arg = this.RULE('arg', () => {
    this.OPTION({
      GATE: () => tokenMatcher(this.LA(1), T.Name) && tokenMatcher(this.LA(2), T.Colon),
      DEF: () => {
        this.CONSUME(T.Name, { LABEL: 'key' });
        this.CONSUME(T.Colon);
      },
    });
    this.SUBRULE(this.expr);
  });

  list = this.RULE('list', () => {
    this.CONSUME(T.LBrack);
    this.MANY_SEP({ SEP: T.Comma, DEF: () => this.SUBRULE(this.expr) });
    this.CONSUME(T.RBrack);
  });

  map = this.RULE('map', () => {
    this.CONSUME(T.LBrace);
    this.MANY(() => this.SUBRULE(this.mapEntry));
    this.CONSUME(T.RBrace);
  });

  mapEntry = this.RULE('mapEntry', () => {
    this.CONSUME(T.Name, { LABEL: 'key' });
    this.CONSUME(T.Colon);
    this.SUBRULE(this.expr);
    this.OPTION(() => this.CONSUME(T.Comma));
  });
}

let instance: ModelParser | null = null;
/** The parser is built once (self-analysis is the expensive part) and reused. */
export function modelParser(): ModelParser {
  if (instance === null) instance = new ModelParser();
  return instance;
}
