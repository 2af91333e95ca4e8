/**
 * msl_text: literal and name formatting for generated Metal / C++ source.
 * Generated identifiers are always generated names (k12, p_train_step); spec strings only
 * ever appear inside comments (commentSafe) or string literals (cString) and JSON.
 */

/** A float literal that reads back as exactly Math.fround(x) (9 significant digits). */
export function f32(x: number): string {
  if (Number.isNaN(x)) return 'NAN';
  if (x === Infinity) return 'INFINITY';
  if (x === -Infinity) return '(-INFINITY)';
  const f = Math.fround(x);
  if (f === 0) return Object.is(f, -0) ? '(-0.0f)' : '0.0f';
  let s = f.toPrecision(9);
  if (!/[.e]/.test(s)) s += '.0';
  if (/e/.test(s) && !/\./.test(s.split('e')[0])) s = s.replace('e', '.0e');
  return f < 0 ? `(${s}f)` : `${s}f`;
}

/** An unsigned literal. */
export function u32(n: number): string {
  if (!Number.isInteger(n) || n < 0 || n > 0xffffffff) throw new Error(`internal: ${n} is not a uint32`);
  return `${n}u`;
}

/** Text safe inside a one-line comment: no newlines, no comment terminators, printable ASCII only. */
export function commentSafe(s: string): string {
  return s.replace(/[^\x20-\x7e]/g, '?').replace(/\*\//g, '*_/').replace(/\/\*/g, '/_*').replace(/\\/g, '/');
}

/** A C/C++ string literal (with quotes) for any string. */
export function cString(s: string): string {
  let out = '"';
  for (const ch of Buffer.from(s, 'utf8')) {
    if (ch === 0x22) out += '\\"';
    else if (ch === 0x5c) out += '\\\\';
    else if (ch >= 0x20 && ch < 0x7f && ch !== 0x3f) out += String.fromCharCode(ch);
    else out += '\\' + ch.toString(8).padStart(3, '0');
  }
  return out + '"';
}
