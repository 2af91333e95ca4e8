/**
 * What a per-op kernel emitter sees: one node, its static shapes and attrs, and the C
 * expressions that address its inputs and outputs (arena offset, persistent tensor or
 * input batch pointer, chosen by emit_program.ts). An emitter returns the C++ *body* of
 * the kernel function `static int <fn>(mpsc_ctx* ctx, const void* const* in, const mpsc_scalars* sc)`;
 * the body returns 0, or sets ctx->error and returns 1. A node fused by compiler/ir/fuse.ts
 * says so in its attrs (`epilogue`, `relu_grad` + the `mask` input, `relu_in`); the emitter
 * reads them like any attr.
 */
import type { DType, Graph, Node } from '../ir/graph.js';
import { boolAttrOf, numAttrOf, pairAttrOf, shapeAttrOf, strAttrOf } from '../ir/attrs.js';

export interface KernelCtx {
  graph: Graph;
  node: Node;
  /** C expression of input i's data pointer (`float*` or `int32_t*`), or `nullptr` when absent (-1) */
  inPtr(i: number): string;
  /** C expression of output i's data pointer */
  outPtr(i: number): string;
  hasInput(i: number): boolean;
  inShape(i: number): number[];
  inDtype(i: number): DType;
  outShape(i: number): number[];
  /** attr readers (throw an internal error naming the node when missing and no default) */
  num(name: string, dflt?: number): number;
  bool(name: string, dflt?: boolean): boolean;
  str(name: string, dflt?: string): string;
  pair(name: string, dflt?: [number, number]): [number, number];
  shape(name: string, dflt?: number[]): number[];
  /** true when the two C pointer expressions are the same memory (planned in place) */
  samePlace(a: string, b: string): boolean;
  fail(msg: string): never;
}

export type KernelEmitter = (k: KernelCtx) => string;

/** the attribute readers of a node (compiler/ir/attrs.ts), reporting through `fail` */
export function attrReaders(node: Node, fail: (m: string) => never) {
  const a = node.attrs;
  return {
    num: (name: string, dflt?: number) => numAttrOf(a, name, fail, dflt),
    bool: (name: string, dflt?: boolean) => boolAttrOf(a, name, fail, dflt),
    str: (name: string, dflt?: string) => strAttrOf(a, name, fail, dflt),
    pair: (name: string, dflt?: [number, number]) => pairAttrOf(a, name, fail, dflt),
    shape: (name: string, dflt?: number[]) => shapeAttrOf(a, name, fail, dflt),
  };
}

/**
 * The fused epilogue of a GEMM-family node (compiler/ir/fuse.ts) as the fast core's relu flag:
 * false without one, true for relu; any other fn is not in CPU_FUSIONS (fusions.ts), so it is
 * an internal error here.
 */
export function reluEpilogue(k: KernelCtx): boolean {
  const fn = k.str('epilogue', '');
  if (fn !== '' && fn !== 'relu') k.fail(`the CPU kernels apply only a relu epilogue, not '${fn}'`);
  return fn === 'relu';
}

export function prod(s: readonly number[]): number {
  return s.reduce((a, b) => a * b, 1);
}

/** (outer, size, inner) around an axis */
export function splitAxis(shape: readonly number[], axis: number): [number, number, number] {
  let outer = 1, inner = 1;
  for (let i = 0; i < axis; i++) outer *= shape[i];
  for (let i = axis + 1; i < shape.length; i++) inner *= shape[i];
  return [outer, shape[axis], inner];
}

/** elements per parallel chunk below which a loop runs single-threaded */
export const PAR_MIN = 1 << 15;
