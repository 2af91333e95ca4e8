/**
 * compiler/cfamily/text.ts, the one literal / comment policy of every C-family generator
 * (C++, MSL, CUDA): float literals read back as exactly the float32 value, in every context
 * (negatives parenthesised), with INFINITY / NAN for non-finite values; comments cannot be
 * closed or continued by spec text.
 */
import { describe, expect, it } from 'vitest';
import { commentText, f32Lit, u32Lit } from '../compiler/cfamily/text.js';
import { makeRng } from '../compiler/reference/fixtures.js';

/** the value a C compiler reads from the literal (float suffix, parentheses removed) */
const readBack = (s: string) => Math.fround(Number(s.replace(/^\((.*)\)$/, '$1').replace(/f$/, '')));

describe('f32Lit', () => {
  it('reads back as exactly Math.fround(x), for random magnitudes and signs', () => {
    const rng = makeRng(7);
    for (let k = 0; k < 2000; k++) {
      const x = (rng() - 0.5) * 10 ** Math.floor(rng() * 76 - 38);
      const s = f32Lit(x);
      expect(s, `${x}`).toMatch(/^(\(-)?[0-9]+\.[0-9]+(e[+-][0-9]+)?f\)?$/);
      expect(readBack(s), `${x} -> ${s}`).toBe(Math.fround(x));
    }
  });

  it('spells the special values one way for every backend', () => {
    expect(f32Lit(1)).toBe('1.0f');
    expect(f32Lit(1.75)).toBe('1.75f');
    expect(f32Lit(0.1)).toBe('0.100000001f');
    expect(f32Lit(-0.5)).toBe('(-0.5f)');
    expect(f32Lit(-0)).toBe('(-0.0f)');
    expect(f32Lit(Infinity)).toBe('INFINITY');
    expect(f32Lit(-Infinity)).toBe('(-INFINITY)');
    expect(f32Lit(1e39)).toBe('INFINITY'); // beyond float32
    expect(f32Lit(NaN)).toBe('NAN');
  });

  it('u32Lit refuses what is not a uint32', () => {
    expect(u32Lit(4294967295)).toBe('4294967295u');
    expect(() => u32Lit(-1)).toThrow();
    expect(() => u32Lit(1.5)).toThrow();
  });
});

describe('commentText', () => {
  it('cannot end a block comment, continue a line comment or carry non-ASCII', () => {
    const s = commentText('a */ b /* c \\\nd é');
    expect(s).not.toMatch(/\*\/|\/\*|\\|\n/);
    expect(s).toMatch(/^[\x20-\x7e]*$/);
  });
});
