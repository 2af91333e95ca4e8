/**
 * The typed AST of a `.model` file: plain data produced by to_ast.ts from the CST.
 * Every node carries its source span (1-based line/col, end inclusive).
 */
import type { SourceLoc } from '../ir/graph.js';

export type Loc = SourceLoc;

export interface Ident {
  name: string;
  loc: Loc;
}

export interface NumExpr {
  kind: 'num';
  value: number;
  isInt: boolean;
  text: string;
  loc: Loc;
}
export interface StrExpr {
  kind: 'str';
  value: string;
  loc: Loc;
}
export interface BoolExpr {
  kind: 'bool';
  value: boolean;
  loc: Loc;
}
export interface ListExpr {
  kind: 'list';
  items: Expr[];
  loc: Loc;
}
export interface MapEntry {
  key: Ident;
  value: Expr;
}
export interface MapExpr {
  kind: 'map';
  entries: MapEntry[];
  loc: Loc;
}
export interface Arg {
  /** present for `name: value` */
  name?: Ident;
  value: Expr;
}
/**
 * `f(args)`; a bare name `f` is a call with hasParens false: a value reference in an
 * expression, a layer without arguments as a pipe stage. `as NAME` names the instance.
 */
export interface CallExpr {
  kind: 'call';
  callee: Ident;
  args: Arg[];
  hasParens: boolean;
  alias?: Ident;
  loc: Loc;
}
export interface NegExpr {
  kind: 'neg';
  operand: Expr;
  loc: Loc;
}
/** Left-associative chain of one precedence level: `a + b - c` or `a * b / c` (flat, so long chains never recurse). */
export interface ChainExpr {
  kind: 'chain';
  first: Expr;
  rest: { op: '+' | '-' | '*' | '/'; opLoc: Loc; rhs: Expr }[];
  loc: Loc;
}
/** `head -> s1 -> s2`: each stage receives the previous value as its first argument. */
export interface PipeExpr {
  kind: 'pipe';
  head: Expr;
  stages: CallExpr[];
  loc: Loc;
}

export type Expr = NumExpr | StrExpr | BoolExpr | ListExpr | MapExpr | CallExpr | NegExpr | ChainExpr | PipeExpr;

export type Stmt =
  | { kind: 'in'; names: Ident[]; loc: Loc }
  | { kind: 'out'; expr: Expr; loc: Loc }
  /** `a = expr`, or `q, k, v = split(...)` (targets in order; target = targets[0]) */
  | { kind: 'assign'; target: Ident; targets: Ident[]; expr: Expr; loc: Loc }
  /** `repeat N { ... }`; `repeat N as NAME { ... }` names iteration i's instances `NAME.i` */
  | { kind: 'repeat'; count: Expr; alias?: Ident; body: Stmt[]; loc: Loc };

export interface Dim {
  /** an integer size, or a name (only `N`, the batch dimension, is accepted by the checker) */
  value: number | string;
  loc: Loc;
}

export interface InputDecl {
  name: Ident;
  dtype: Ident;
  dims: Dim[];
  loc: Loc;
}

export interface BlockParam {
  name: Ident;
  type: Ident;
  default?: Expr;
}

export interface BlockDecl {
  name: Ident;
  params: BlockParam[];
  body: Stmt[];
  loc: Loc;
}

export interface Section<T> {
  value: T;
  /** the keyword's location (for duplicate-section messages) */
  loc: Loc;
}

export interface ModelFile {
  file: string;
  model: Section<Ident>[];
  inputs: InputDecl[];
  blocks: BlockDecl[];
  network: Section<Stmt[]>[];
  loss: Section<CallExpr>[];
  metrics: Section<CallExpr[]>[];
  optimizer: Section<CallExpr>[];
  schedule: Section<CallExpr>[];
  train: Section<MapExpr>[];
}
