/**
 * attrs: the one set of node-attribute readers (number, boolean, string, number[], [h, w]
 * pair), each with an optional default, used by the reference interpreter, the code
 * generators and the op catalogue's rules. A missing attribute without a default, or one of
 * the wrong type, is reported through the caller's `fail` (an internal error naming the
 * node: attributes are written by mpsc, never by users). Relies on graph.ts's AttrValue.
 */
import type { AttrValue } from './graph.js';

export type AttrFail = (msg: string) => never;
type Attrs = Readonly<Record<string, AttrValue | undefined>>;

function get<T>(attrs: Attrs, name: string, fail: AttrFail, dflt: T | undefined, ok: (v: AttrValue) => T | undefined, what: string): T {
  const v = attrs[name];
  if (v === undefined) {
    if (dflt === undefined) fail(`missing attr '${name}'`);
    return dflt;
  }
  const r = ok(v);
  if (r === undefined) fail(`attr '${name}' must be ${what}, got ${JSON.stringify(v)}`);
  return r;
}

export function numAttrOf(attrs: Attrs, name: string, fail: AttrFail, dflt?: number): number {
  return get(attrs, name, fail, dflt, (v) => (typeof v === 'number' ? v : undefined), 'a number');
}

export function boolAttrOf(attrs: Attrs, name: string, fail: AttrFail, dflt?: boolean): boolean {
  return get(attrs, name, fail, dflt, (v) => (typeof v === 'boolean' ? v : undefined), 'a boolean');
}

export function strAttrOf(attrs: Attrs, name: string, fail: AttrFail, dflt?: string): string {
  return get(attrs, name, fail, dflt, (v) => (typeof v === 'string' ? v : undefined), 'a string');
}

export function shapeAttrOf(attrs: Attrs, name: string, fail: AttrFail, dflt?: number[]): number[] {
  return get(attrs, name, fail, dflt, (v) => (Array.isArray(v) ? v : undefined), 'a number[]');
}

/** a window attr `[h, w]`; a single number means the same for both */
export function pairAttrOf(attrs: Attrs, name: string, fail: AttrFail, dflt?: [number, number]): [number, number] {
  return get(attrs, name, fail, dflt, (v): [number, number] | undefined => (typeof v === 'number' ? [v, v] : Array.isArray(v) && v.length === 2 ? [v[0], v[1]] : undefined), '[h, w]');
}
