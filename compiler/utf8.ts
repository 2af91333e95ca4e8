/**
 * Where a file's bytes stop being UTF-8 text, for user errors that name the place.
 *
 * Consumes: the raw bytes of a file the user gave as text (a .model spec, a text() corpus).
 * Produces: null when the bytes are valid UTF-8 without NUL bytes, else the first problem: its
 *   byte offset, 1-based line (counting '\n') and column (in characters) and a short description
 *   ("byte 0xE9 is not valid UTF-8", "a NUL byte"), for `file:line:col: error: ...` messages.
 * The rules are those of a fatal TextDecoder('utf-8'): no overlong forms, no surrogates
 * (U+D800..U+DFFF), nothing above U+10FFFF, no sequence cut short by the end of the file.
 */
export interface TextProblem {
  offset: number;
  line: number;
  col: number; // 1-based, in characters of the (valid) text before it on its line
  what: string;
}

/** The length of the UTF-8 sequence at b[i], or 0 when it is not a valid one. */
function sequenceLength(b: Uint8Array, i: number): number {
  const c = b[i];
  if (c < 0x80) return 1;
  let len: number;
  let lo = 0x80;
  let hi = 0xbf; // the allowed range of the second byte
  if (c >= 0xc2 && c <= 0xdf) len = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c === 0xe0) lo = 0xa0; // overlong
    if (c === 0xed) hi = 0x9f; // surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c === 0xf0) lo = 0x90; // overlong
    if (c === 0xf4) hi = 0x8f; // above U+10FFFF
  } else return 0;
  if (i + len > b.length) return 0;
  if (b[i + 1] < lo || b[i + 1] > hi) return 0;
  for (let k = 2; k < len; k++) if (b[i + k] < 0x80 || b[i + k] > 0xbf) return 0;
  return len;
}

export function textProblem(b: Uint8Array): TextProblem | null {
  let line = 1;
  let col = 1;
  for (let i = 0; i < b.length; ) {
    const c = b[i];
    if (c === 0) return { offset: i, line, col, what: 'a NUL byte' };
    const len = sequenceLength(b, i);
    if (len === 0) return { offset: i, line, col, what: `byte 0x${c.toString(16).toUpperCase().padStart(2, '0')} is not valid UTF-8` };
    if (c === 0x0a) {
      line++;
      col = 1;
    } else col++;
    i += len;
  }
  return null;
}
