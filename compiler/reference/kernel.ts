/**
 * Shared types and attribute readers for the reference interpreter's op families.
 *
 * Every op implementation receives an OpCtx: the node's input arrays (null for an
 * absent optional input), the static shapes of its inputs and outputs (from the
 * graph's values), freshly zero-filled output arrays to fill, its attrs and the
 * step scalars. An op mutates an input array in place only when ops.ts lists that
 * input in `mutates`.
 */
import type { AttrValue, Node, StepScalars } from '../ir/graph.js';
import { boolAttrOf, numAttrOf, pairAttrOf, shapeAttrOf, strAttrOf } from '../ir/attrs.js';

export interface OpCtx {
  node: Node;
  inputs: (Float64Array | null)[];
  inShapes: (number[] | null)[];
  outputs: Float64Array[];
  outShapes: number[][];
  attrs: Record<string, AttrValue>;
  scalars: StepScalars;
}

export type OpImpl = (c: OpCtx) => void;

function where(c: OpCtx): string {
  return `node ${c.node.id} (${c.node.op}${c.node.path ? ` at ${c.node.path}` : ''})`;
}

/** An internal (bug) error that names the node. */
export function fail(c: OpCtx, msg: string): never {
  throw new Error(`internal: reference interpreter, ${where(c)}: ${msg}`);
}

export function input(c: OpCtx, i: number): Float64Array {
  const a = c.inputs[i];
  if (!a) fail(c, `required input ${i} is absent`);
  return a;
}

export function inShape(c: OpCtx, i: number): number[] {
  const s = c.inShapes[i];
  if (!s) fail(c, `required input ${i} is absent`);
  return s;
}

// attribute readers: compiler/ir/attrs.ts, reporting through fail(c, ...)
export const numAttr = (c: OpCtx, name: string, dflt?: number): number => numAttrOf(c.attrs, name, (m) => fail(c, m), dflt);
export const boolAttr = (c: OpCtx, name: string, dflt?: boolean): boolean => boolAttrOf(c.attrs, name, (m) => fail(c, m), dflt);
export const strAttr = (c: OpCtx, name: string, dflt?: string): string => strAttrOf(c.attrs, name, (m) => fail(c, m), dflt);
export const shapeAttr = (c: OpCtx, name: string, dflt?: number[]): number[] => shapeAttrOf(c.attrs, name, (m) => fail(c, m), dflt);
/** A 2-element window attr (`[h, w]`); a single number means the same for both. */
export const pairAttr = (c: OpCtx, name: string, dflt?: [number, number]): [number, number] => pairAttrOf(c.attrs, name, (m) => fail(c, m), dflt);

export function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

export function expectShape(c: OpCtx, what: string, got: readonly number[], want: readonly number[]): void {
  if (!sameShape(got, want)) fail(c, `${what} has shape [${got.join(',')}], expected [${want.join(',')}]`);
}

/** Split a shape around `axis` into (outer, size, inner) element counts. */
export function splitAxis(c: OpCtx, shape: readonly number[], axis: number): [number, number, number] {
  if (!Number.isInteger(axis) || axis < 0 || axis >= shape.length) fail(c, `axis ${axis} out of range for rank ${shape.length}`);
  let outer = 1, inner = 1;
  for (let i = 0; i < axis; i++) outer *= shape[i];
  for (let i = axis + 1; i < shape.length; i++) inner *= shape[i];
  return [outer, shape[axis], inner];
}
