/**
 * cString: the one way a name from a spec reaches generated C/C++ source: as an escaped
 * C string literal. Everything outside printable ASCII (and `"`, `\`, `?` against trigraphs)
 * becomes an octal escape of its UTF-8 bytes, so no spec name can break out of the literal.
 */
export function cString(s: string): string {
  let out = '"';
  for (const byte of Buffer.from(s, 'utf8')) {
    const printable = byte >= 0x20 && byte < 0x7f && byte !== 0x22 && byte !== 0x5c && byte !== 0x3f;
    out += printable ? String.fromCharCode(byte) : '\\' + byte.toString(8).padStart(3, '0');
  }
  return out + '"';
}

/** a C++ float literal that round-trips the f32 value of x */
export function f32Lit(x: number): string {
  if (!Number.isFinite(x)) throw new Error(`internal: non-finite constant ${x} in generated code`);
  const f = Math.fround(x);
  if (Number.isInteger(f) && Math.abs(f) < 1e15) return `${f}.0f`;
  return `${f.toPrecision(9)}f`;
}

/** text safe inside a `//` comment (one line, no odd characters) */
export function commentText(s: string): string {
  return s.replace(/[^A-Za-z0-9_.,:\[\] =-]/g, '_').slice(0, 120);
}
