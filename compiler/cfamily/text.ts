/**
 * cfamily/text: the one home of the literal, comment and string spellings shared by every
 * C-family generator (codegen-cpu's C++, the GPU kernel language's dialects: MSL, CUDA).
 * Consumes numbers and spec strings; produces source text. Relies on nothing but the C
 * grammar (and `INFINITY` / `NAN`, which <cmath>, <metal_stdlib> and CUDA's math headers all
 * define), so every backend spells the same value the same way.
 *
 * Generated identifiers are always generated names (k12, p_train_step, t3_shape); spec
 * strings only ever reach generated source inside comments (commentText) or string literals
 * (cString), never as identifiers.
 */

/**
 * A float literal that reads back as exactly Math.fround(x). One policy for every backend:
 * integers as `N.0f`, other values with 9 significant digits (trailing zeros dropped), negatives (and -0) in
 * parentheses so the literal is safe after any operator, infinities as `INFINITY` /
 * `(-INFINITY)` and NaN as `NAN`.
 */
export function f32Lit(x: number): string {
  if (Number.isNaN(x)) return 'NAN';
  if (x === Infinity) return 'INFINITY';
  if (x === -Infinity) return '(-INFINITY)';
  const f = Math.fround(x);
  if (!Number.isFinite(f)) return f > 0 ? 'INFINITY' : '(-INFINITY)';
  if (f === 0) return Object.is(f, -0) ? '(-0.0f)' : '0.0f';
  const a = Math.abs(f);
  let s: string;
  if (Number.isInteger(a) && a < 1e15) s = `${a}.0`;
  else {
    // 9 significant digits read back exactly; trailing zeros of the mantissa are dropped
    const [m, exp] = a.toPrecision(9).split('e');
    let mant = m.includes('.') ? m.replace(/0+$/, '') : m;
    if (mant.endsWith('.') || !mant.includes('.')) mant = `${mant.replace(/\.$/, '')}.0`;
    s = exp === undefined ? mant : `${mant}e${exp}`;
  }
  return f < 0 ? `(-${s}f)` : `${s}f`;
}

/** An unsigned 32-bit literal (`12u`). */
export function u32Lit(n: number): string {
  if (!Number.isInteger(n) || n < 0 || n > 0xffffffff) throw new Error(`internal: ${n} is not a uint32`);
  return `${n}u`;
}

/**
 * A C string literal (with quotes) for any string: everything outside printable ASCII, and
 * `"`, `\` and `?` (no trigraphs), becomes an octal escape of its UTF-8 bytes, so no spec
 * name can break out of the literal.
 */
export function cString(s: string): string {
  let out = '"';
  for (const byte of Buffer.from(s, 'utf8')) {
    const printable = byte >= 0x20 && byte < 0x7f && byte !== 0x22 && byte !== 0x5c && byte !== 0x3f;
    out += printable ? String.fromCharCode(byte) : '\\' + byte.toString(8).padStart(3, '0');
  }
  return out + '"';
}

/**
 * Text safe inside a one-line `//` or block comment: printable ASCII only (anything else
 * becomes `?`), no comment delimiters, no backslash (which would continue a `//` line).
 */
export function commentText(s: string): string {
  return s.replace(/[^\x20-\x7e]/g, '?').replace(/\*\//g, '*_/').replace(/\/\*/g, '/_*').replace(/\\/g, '/');
}
