/**
 * Spec mutations for the front-end fuzzer: turns seed `.model` files into hostile inputs.
 *
 * Consumes: seed spec texts and a case number. Produces: one mutated input (bytes, since some
 * mutations make invalid UTF-8) plus the names of the mutations applied, deterministically from
 * (seed, case): `makeCase(seeds, seed, i)` always gives the same bytes, so any failure is
 * reproducible from its case number alone.
 *
 * Grammar-aware mutations work on a token list (the `.model` token classes: names, numbers,
 * strings, punctuation, comments, whitespace): delete / duplicate / swap tokens, replace numbers
 * with extreme values, rename identifiers to unicode / reserved / C++ keywords / very long names,
 * replace strings with hostile paths, insert tokens, splice lines of other seeds, deep nesting,
 * very long lines and layer chains, nested `repeat` blow-ups. Byte-level mutations: flipped or
 * inserted random bytes, NUL bytes, invalid UTF-8, truncation, binary garbage, empty file,
 * BOM / CRLF / tabs.
 */

export interface Rng {
  next(): number; // [0, 1)
  int(n: number): number; // [0, n)
  pick<T>(xs: readonly T[]): T;
}

/** mulberry32: small, fast, seeded */
export function rng(seed: number): Rng {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (n) => Math.floor(next() * n),
    pick: (xs) => xs[Math.floor(next() * xs.length)],
  };
}

export interface Tok {
  text: string;
  kind: 'ws' | 'comment' | 'str' | 'num' | 'name' | 'punct' | 'other';
}

const TOKEN_RE = /([ \t\r\n]+)|(#[^\n]*)|("(?:[^"\\\n]|\\.)*"?)|((?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)|([A-Za-z_][A-Za-z0-9_]*)|(->|[+\-*/=:,()[\]{}])|([\s\S])/gy;

export function tokenize(text: string): Tok[] {
  const out: Tok[] = [];
  TOKEN_RE.lastIndex = 0;
  let m: RegExpExecArray | null;
  while (TOKEN_RE.lastIndex < text.length && (m = TOKEN_RE.exec(text)) !== null) {
    const kind: Tok['kind'] = m[1] ? 'ws' : m[2] ? 'comment' : m[3] ? 'str' : m[4] ? 'num' : m[5] ? 'name' : m[6] ? 'punct' : 'other';
    out.push({ text: m[0], kind });
  }
  return out;
}

const join = (ts: Tok[]) => ts.map((t) => t.text).join('');

const NUMBERS = [
  '0', '-1', '-0', '1', '2', '3', '-2147483648', '2147483647', '2147483648', '4294967296', '9007199254740993',
  '99999999999999999999999999', '1e308', '1e309', '-1e309', '1e-320', '1e-400', '0.0', '-0.5', '1.5', '0.999999', '1e', '1e+',
  '.', '..5', '1.2.3', '0x10', '007', '1_000', 'NaN', 'Infinity', '1' + '0'.repeat(400), '65536', '1048577',
];
const UNICODE_NAMES = ['é', '層', 'ﬁ', '𝓍', 'a\u200bb', 'a\u0301', 'ｆｃ', 'Ω', '\u202eevil', 'ß', 'İ', '🙂'];
const RESERVED = ['model', 'input', 'block', 'network', 'loss', 'metrics', 'optimizer', 'schedule', 'train', 'in', 'out', 'repeat', 'as', 'true', 'false', 'N'];
const CXX_WORDS = [
  'int', 'float', 'class', 'return', 'main', 'std', 'NULL', 'nullptr', 'delete', 'new', 'template', 'kernel', 'device', 'thread',
  'constant', 'threadgroup', 'half', 'uint', '__asm__', '_Pragma', 'define', 'include', 'napi_value', 'Napi', 'mpsc', 'this', 'operator',
  'signed', 'register', 'goto', 'x0', '_', '__', 'a__b', 'A', 'Z_9',
];
const HOSTILE_STRINGS = [
  '""', '"../../../../etc/passwd"', '"/dev/zero"', '"a\\"b"', '"a\\\\"', '"*/ #include <x>"', '"\\n#define x"', '"x\\u0000y"', '"%s%s%n"',
  '"\\"); system(\\"rm -rf /\\"); (\\""', '"' + 'A'.repeat(5000) + '"', '"é/層.csv"', '"C:\\\\x\\\\y.csv"', '"a', '"\\', '"${HOME}"', '"$(rm -rf /)"',
  '"a\tb"', '"label"', '"0"',
];
const PUNCT = ['->', '+', '-', '*', '/', '=', ':', ',', '(', ')', '[', ']', '{', '}'];
const GARBAGE_CHARS = [';', '@', '`', '$', '\\', '~', '!', '?', '%', '^', '&', '|', '<', '>', "'", '\u0000', '\u00a0', '\ufeff', '\u2028'];

type TextMutation = (text: string, r: Rng, seeds: readonly string[]) => string;
type ByteMutation = (bytes: Uint8Array, r: Rng) => Uint8Array;

function meaningful(ts: Tok[]): number[] {
  const idx: number[] = [];
  ts.forEach((t, i) => {
    if (t.kind !== 'ws' && t.kind !== 'comment') idx.push(i);
  });
  return idx;
}

function withTokens(f: (ts: Tok[], idx: number[], r: Rng, seeds: readonly string[]) => void): TextMutation {
  return (text, r, seeds) => {
    const ts = tokenize(text);
    const idx = meaningful(ts);
    if (idx.length === 0) return text;
    f(ts, idx, r, seeds);
    return join(ts);
  };
}

function ofKind(ts: Tok[], kind: Tok['kind']): number[] {
  const out: number[] = [];
  ts.forEach((t, i) => t.kind === kind && out.push(i));
  return out;
}

/** a spec's network body lines (between `network {` and the matching `}`), for structural mutations */
function networkSpan(text: string): [number, number] | null {
  const s = text.indexOf('network {');
  if (s < 0) return null;
  let depth = 0;
  for (let i = s + 'network '.length; i < text.length; i++) {
    if (text[i] === '{') depth++;
    else if (text[i] === '}' && --depth === 0) return [s + 'network {'.length, i];
  }
  return null;
}

export const TEXT_MUTATIONS: Record<string, TextMutation> = {
  delete_token: withTokens((ts, idx, r) => {
    ts.splice(r.pick(idx), 1);
  }),
  delete_tokens: withTokens((ts, idx, r) => {
    const i = r.pick(idx);
    ts.splice(i, 1 + r.int(12));
  }),
  duplicate_token: withTokens((ts, idx, r) => {
    const i = r.pick(idx);
    ts.splice(i, 0, { ...ts[i] }, { text: ' ', kind: 'ws' });
  }),
  swap_adjacent: withTokens((ts, idx, r) => {
    const k = r.int(idx.length - 1);
    const [i, j] = [idx[k], idx[k + 1] ?? idx[k]];
    [ts[i], ts[j]] = [ts[j], ts[i]];
  }),
  swap_random: withTokens((ts, idx, r) => {
    const i = r.pick(idx);
    const j = r.pick(idx);
    [ts[i], ts[j]] = [ts[j], ts[i]];
  }),
  replace_number: withTokens((ts, idx, r) => {
    const nums = ofKind(ts, 'num');
    const i = nums.length ? r.pick(nums) : r.pick(idx);
    ts[i] = { text: r.pick(NUMBERS), kind: 'num' };
  }),
  replace_all_numbers: withTokens((ts, _idx, r) => {
    const v = r.pick(NUMBERS);
    for (const i of ofKind(ts, 'num')) ts[i] = { text: v, kind: 'num' };
  }),
  rename_ident: withTokens((ts, idx, r) => {
    const names = ofKind(ts, 'name');
    const i = names.length ? r.pick(names) : r.pick(idx);
    const pool = r.int(4);
    const to =
      pool === 0 ? r.pick(UNICODE_NAMES) : pool === 1 ? r.pick(RESERVED) : pool === 2 ? r.pick(CXX_WORDS) : 'n' + 'x'.repeat(r.pick([64, 255, 1000, 100_000]));
    // rename every occurrence (keeps the spec consistent so later phases see the name), or just one
    const from = ts[i].text;
    if (r.next() < 0.6) {
      for (const k of names) if (ts[k].text === from) ts[k] = { text: to, kind: 'name' };
    } else {
      ts[i] = { text: to, kind: 'name' };
    }
  }),
  replace_string: withTokens((ts, idx, r) => {
    const strs = ofKind(ts, 'str');
    const i = strs.length ? r.pick(strs) : r.pick(idx);
    ts[i] = { text: r.pick(HOSTILE_STRINGS), kind: 'str' };
  }),
  insert_token: withTokens((ts, idx, r) => {
    const all = ts.filter((t) => t.kind !== 'ws' && t.kind !== 'comment');
    const pool = r.int(4);
    const text =
      pool === 0 ? r.pick(PUNCT) : pool === 1 ? r.pick(GARBAGE_CHARS) : pool === 2 ? r.pick(all).text : r.pick([...RESERVED, ...NUMBERS, ...HOSTILE_STRINGS]);
    ts.splice(r.pick(idx), 0, { text, kind: 'other' }, { text: ' ', kind: 'ws' });
  }),
  deep_parens: withTokens((ts, idx, r) => {
    const k = r.pick([10, 100, 1000, 5000, 20000]);
    const nums = ofKind(ts, 'num');
    const i = nums.length ? r.pick(nums) : r.pick(idx);
    ts[i] = { text: '('.repeat(k) + ts[i].text + ')'.repeat(r.next() < 0.8 ? k : r.int(k)), kind: 'other' };
  }),
  deep_open: withTokens((ts, idx, r) => {
    const k = r.pick([100, 1000, 10000, 50000]);
    ts.splice(r.pick(idx), 0, { text: r.pick(['{', '[', '(', '-(', '[[', 'f(']).repeat(k), kind: 'other' });
  }),
  deep_unary_minus: withTokens((ts, idx, r) => {
    const nums = ofKind(ts, 'num');
    const i = nums.length ? r.pick(nums) : r.pick(idx);
    ts[i] = { text: '-'.repeat(r.pick([2, 50, 3000, 30000])) + ts[i].text, kind: 'other' };
  }),
  long_expression: withTokens((ts, idx, r) => {
    const nums = ofKind(ts, 'num');
    const i = nums.length ? r.pick(nums) : r.pick(idx);
    const k = r.pick([10, 1000, 20000]);
    ts[i] = { text: Array.from({ length: k }, () => ts[i].text).join(r.pick([' + ', ' * ', ' / ', ' - '])), kind: 'other' };
  }),
  long_chain: (text, r) => {
    const span = networkSpan(text);
    const k = r.pick([50, 500, 3000]);
    const link = r.pick([' -> relu', ' -> flatten', ' -> dropout(0.1)', ' -> linear(4)', ' ->']);
    if (!span) return text + link.repeat(k);
    const body = text.slice(span[0], span[1]);
    const lines = body.split('\n');
    const li = lines.findIndex((l) => l.includes('->'));
    if (li < 0) return text;
    lines[li] = lines[li] + link.repeat(k);
    return text.slice(0, span[0]) + lines.join('\n') + text.slice(span[1]);
  },
  long_line: (text, r) => {
    const filler = r.pick(['#' + 'c'.repeat(200_000), ' '.repeat(200_000), 'x'.repeat(200_000), '\t'.repeat(50_000)]);
    const lines = text.split('\n');
    lines.splice(r.int(lines.length + 1), 0, filler);
    return lines.join('\n');
  },
  many_lines: (text, r) => text + '\n'.repeat(r.pick([1000, 200_000])) + r.pick(['x', '', '}', 'model m']),
  nested_repeat: (text, r) => {
    const span = networkSpan(text);
    if (!span) return text;
    const depth = r.pick([2, 3, 8, 50]);
    const count = r.pick([2, 10, 1000, 100000]);
    let stmt = 'h = h -> relu';
    for (let d = 0; d < depth; d++) stmt = `repeat ${count} { ${stmt} }`;
    const body = text.slice(span[0], span[1]);
    const lines = body.split('\n');
    const li = Math.max(0, lines.findIndex((l) => l.includes('=')));
    const first = lines[li]?.match(/^\s*(\w+)\s*=/)?.[1] ?? 'h';
    lines.splice(li + 1, 0, '  ' + stmt.replace(/\bh\b/g, first));
    return text.slice(0, span[0]) + lines.join('\n') + text.slice(span[1]);
  },
  huge_repeat_count: (text, r) => text.replace(/repeat \d+/, `repeat ${r.pick(['0', '2147483647', '99999999999', '100000', '-1', '1e9'])}`),
  many_blocks: (text, r) => {
    const k = r.pick([50, 500]);
    let blocks = '';
    for (let i = 0; i < k; i++) blocks += `block b${i}(c: int) {\n  in x\n  out x -> ${i === 0 ? 'relu' : `b${i - 1}(c)`}\n}\n`;
    const at = text.indexOf('network {');
    if (at < 0) return blocks + text;
    return text.slice(0, at) + blocks + text.slice(at).replace(/-> relu/, `-> b${k - 1}(1)`);
  },
  splice_line: (text, r, seeds) => {
    const other = r.pick(seeds).split('\n');
    const lines = text.split('\n');
    lines.splice(r.int(lines.length + 1), 0, r.pick(other));
    return lines.join('\n');
  },
  drop_line: (text, r) => {
    const lines = text.split('\n');
    lines.splice(r.int(lines.length), 1);
    return lines.join('\n');
  },
  duplicate_line: (text, r) => {
    const lines = text.split('\n');
    const i = r.int(lines.length);
    lines.splice(i, 0, lines[i]);
    return lines.join('\n');
  },
  shuffle_lines: (text, r) => {
    const lines = text.split('\n');
    for (let i = lines.length - 1; i > 0; i--) {
      const j = r.int(i + 1);
      [lines[i], lines[j]] = [lines[j], lines[i]];
    }
    return lines.join('\n');
  },
  bom_crlf_tabs: (text, r) => {
    const k = r.int(3);
    return k === 0 ? '\ufeff' + text : k === 1 ? text.replace(/\n/g, '\r\n') : text.replace(/  /g, '\t').replace(/ /g, r.pick(['\t', '\u00a0', '\r', '\v']));
  },
  empty: () => '',
  whitespace_only: (_t, r) => r.pick([' ', '\n\n\n', '\t', '# only a comment', '\r\n']),
};

export const BYTE_MUTATIONS: Record<string, ByteMutation> = {
  flip_bytes: (b, r) => {
    const out = Uint8Array.from(b);
    const n = 1 + r.int(8);
    for (let i = 0; i < n && out.length; i++) out[r.int(out.length)] = r.int(256);
    return out;
  },
  insert_bytes: (b, r) => {
    const at = r.int(b.length + 1);
    const ins = Uint8Array.from({ length: 1 + r.int(16) }, () => r.int(256));
    return concatBytes(b.subarray(0, at), ins, b.subarray(at));
  },
  nul_bytes: (b, r) => {
    const at = r.int(b.length + 1);
    return concatBytes(b.subarray(0, at), new Uint8Array(1 + r.int(4)), b.subarray(at));
  },
  invalid_utf8: (b, r) => {
    const seqs = [[0xff], [0xc3, 0x28], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xe2, 0x82], [0x80], [0xc0, 0xaf], [0xfe, 0xff]];
    const at = r.int(b.length + 1);
    return concatBytes(b.subarray(0, at), Uint8Array.from(r.pick(seqs)), b.subarray(at));
  },
  truncate: (b, r) => b.subarray(0, r.int(b.length + 1)),
  truncate_utf8_tail: (b, r) => concatBytes(b.subarray(0, r.int(b.length + 1)), Uint8Array.of(0xe5, 0xb1)),
  garbage: (_b, r) => Uint8Array.from({ length: r.pick([1, 16, 1000, 100_000]) }, () => r.int(256)),
  garbage_ascii: (_b, r) => Uint8Array.from({ length: r.pick([1, 64, 5000]) }, () => 32 + r.int(95)),
};

function concatBytes(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

export interface FuzzCase {
  index: number;
  /** index into the seed list */
  seed: number;
  mutations: string[];
  bytes: Uint8Array;
}

const TEXT_NAMES = Object.keys(TEXT_MUTATIONS);
const BYTE_NAMES = Object.keys(BYTE_MUTATIONS);

/** Case `index` of run `runSeed`: 1 to 3 stacked mutations of one seed spec (mostly grammar-aware, ~25% byte-level). */
export function makeCase(seeds: readonly string[], runSeed: number, index: number): FuzzCase {
  const r = rng(((runSeed * 0x9e3779b1) ^ (index * 0x85ebca6b)) >>> 0);
  const s = r.int(seeds.length);
  let text = seeds[s];
  const mutations: string[] = [];
  const nText = 1 + (r.next() < 0.35 ? r.int(3) : 0);
  const byteLevel = r.next() < 0.25;
  let bytes: Uint8Array;
  if (byteLevel) {
    if (r.next() < 0.5) {
      const m = r.pick(TEXT_NAMES);
      text = TEXT_MUTATIONS[m](text, r, seeds);
      mutations.push(m);
    }
    bytes = new TextEncoder().encode(text);
    const m = r.pick(BYTE_NAMES);
    bytes = BYTE_MUTATIONS[m](bytes, r);
    mutations.push(m);
  } else {
    for (let k = 0; k < nText; k++) {
      const m = r.pick(TEXT_NAMES);
      text = TEXT_MUTATIONS[m](text, r, seeds);
      mutations.push(m);
    }
    bytes = new TextEncoder().encode(text);
  }
  return { index, seed: s, mutations, bytes };
}
