/**
 * Autoregressive sampling from a trained language model (`mpsc sample`).
 *
 * Consumes: a checked model trained on text() (two i32 [N, T] inputs, a class-last loss over
 *   logits [N, T, V]), weights (a checkpoint or weights file, a run folder or `latest`, resolved
 *   by run_folder.ts; its `vocab` metadata gives the tokenizer; a file without it falls back to
 *   the spec's text source), the prompt and sampling options.
 * Produces: the prompt then the generated text, streamed through `onText` one token at a time, and the
 *   timing (tokens/s over the generated tokens).
 * Relies on: compiler/ir/sample_program.ts (the eval program at batch 1 returning one
 *   position's logits). Each token runs the whole static [1, T] window: the context is the
 *   last T tokens (or all of them, at positions 0..L-1, while shorter), so the cost per token
 *   is one T-position forward pass, whatever the length of the text so far (no KV cache).
 *   Sampling: logits / temperature (temperature 0: the argmax), the top_k largest kept,
 *   softmax, one draw from a mulberry32 stream seeded by `seed`. Only the first V logits (V = the
 *   vocabulary size) are candidates: an embedding/output layer wider than the vocabulary has rows
 *   that name no token; a top_k above V keeps all V.
 */
import { UserError } from '../compiler/errors.js';
import type { CheckedModel } from '../compiler/model.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { buildSampleProgram, lossLogits } from '../compiler/ir/sample_program.js';
import { loadData } from '../data/load.js';
import { uniformStream } from '../data/rng.js';
import { checkVocabulary, decodeTokens, encodeText, textInputs, vocabSize, type Vocabulary } from '../data/text.js';
import { loadIntoSession, programTensorTable, readCheckpointFile } from './checkpoint.js';
import { openSession } from './device.js';
import { resolveWeights } from './run_folder.js';
import { weightsLoad } from './trainer.js';

export interface SampleOptions {
  weights: string;
  prompt?: string;
  tokens: number;
  temperature: number;
  topK?: number;
  seed: number;
  device?: string;
  threads?: number;
  onText: (s: string) => void;
  onNote?: (s: string) => void;
}

export interface SampleResult {
  text: string;
  tokens: number;
  seconds: number;
  tokensPerSecond: number;
  device: string;
  window: number;
}

/** The vocabulary of a weights file's metadata, or null when it has none. */
function vocabFromMetadata(md: Record<string, string>, file: string): Vocabulary | null {
  if (md.vocab === undefined) return null;
  try {
    const v = JSON.parse(md.vocab) as Vocabulary;
    if ((v.tokenizer === 'char' && Array.isArray(v.chars) && v.chars.every((c) => typeof c === 'string')) || v.tokenizer === 'byte') return v;
  } catch {
    // reported below
  }
  throw new UserError(`${file}: error: the checkpoint's vocabulary metadata is not valid\n  help: use a checkpoint written by mpsc train`);
}

/** Pick a token id from logits (float64) with temperature and top-k. */
export function pickToken(logits: Float64Array, temperature: number, topK: number | undefined, u: () => number): number {
  const V = logits.length;
  if (temperature === 0) {
    let best = 0;
    for (let c = 1; c < V; c++) if (logits[c] > logits[best]) best = c;
    return best;
  }
  let keep = Array.from({ length: V }, (_, c) => c);
  if (topK !== undefined && topK < V) keep = keep.sort((a, b) => logits[b] - logits[a] || a - b).slice(0, topK);
  let max = -Infinity;
  for (const c of keep) max = Math.max(max, logits[c] / temperature);
  const w = keep.map((c) => Math.exp(logits[c] / temperature - max));
  const total = w.reduce((a, b) => a + b, 0);
  let r = u() * total;
  for (let j = 0; j < keep.length; j++) {
    r -= w[j];
    if (r < 0) return keep[j];
  }
  return keep[keep.length - 1];
}

export async function sample(model0: CheckedModel, o: SampleOptions): Promise<SampleResult> {
  if (model0.train.data.kind !== 'text') {
    throw new UserError(`${model0.file}: error: mpsc sample generates text, but this spec trains on ${model0.train.data.kind}() data\n  help: sample from a language model trained with data: text()`);
  }
  const { T } = textInputs(model0);
  const model: CheckedModel = { ...model0, train: { ...model0.train, batch: 1 } };
  const w = resolveWeights(o.weights, model.name);
  if (w.note) o.onNote?.(w.note);
  const st = readCheckpointFile(w.file);
  const vocab = vocabFromMetadata(st.metadata, w.file) ?? (loadData(model).vocab as Vocabulary);
  checkVocabulary(model, vocab, w.file);
  // the embedding and output layer may have more rows than the vocabulary: ids past it name no
  // token, so only the first V logits take part in the choice
  const V = vocabSize(vocab);
  // a top_k above the vocabulary keeps every token, as nanoGPT's sample.py does (torch.topk(logits, min(k, V)))
  if (o.topK !== undefined && o.topK > V) o.onNote?.(`note: --top-k ${o.topK} is above the vocabulary (${V} tokens): every token is kept`);
  const set = buildPrograms(model, { batch: 1 });
  const logits = lossLogits(set.eval);
  if (logits === null) {
    throw new UserError(`${model.file}: error: mpsc sample needs a cross_entropy or nll loss over logits [N, T, vocabulary]\n  help: end the network with linear(vocabulary) and use loss cross_entropy(logits, targets)`);
  }
  set.eval = buildSampleProgram(set.eval, logits);
  const table = programTensorTable(set);
  const load = weightsLoad(model, table);
  loadIntoSession(table, st, w.file, load);

  const promptText = o.prompt ?? (vocab.tokenizer === 'byte' || vocab.chars!.includes('\n') ? '\n' : vocab.chars![0]);
  if (promptText.length === 0) throw new UserError('error: --prompt is empty\n  help: leave it out to start from a newline');
  const prompt = encodeText(vocab, promptText, 'the prompt (--prompt)');

  const opened = await openSession(o.device ?? 'auto', set, { threads: o.threads, onProgress: o.onNote });
  o.onNote?.(opened.note);
  const session = opened.session;
  try {
    loadIntoSession(session, st, w.file, load);
    const inputNames = set.eval.inputs.map((id) => set.eval.graph.values[id].name);
    const { tokens: tokName } = textInputs(model);
    const tokBuf = new Int32Array(T);
    const zeros = new Int32Array(T);
    const select = new Float32Array(T);
    const batch = inputNames.map((n) => (n === tokName ? tokBuf : n === 'select' ? select : zeros));
    const u = uniformStream(o.seed >>> 0);
    const ctx: number[] = Array.from(prompt);
    const byteDecoder = new TextDecoder('utf-8');
    const out: string[] = [];
    o.onText(promptText);
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < o.tokens; i++) {
      const win = ctx.slice(-T);
      tokBuf.fill(0);
      tokBuf.set(win);
      select.fill(0);
      select[win.length - 1] = 1;
      const lg = session.run('eval', batch, { lr: 0, t: 1, seed: o.seed, counter: 0 });
      const id = pickToken(lg.subarray(0, V), o.temperature, o.topK, u);
      ctx.push(id);
      const piece = vocab.tokenizer === 'byte' ? byteDecoder.decode(new Uint8Array([id]), { stream: true }) : decodeTokens(vocab, [id]);
      out.push(piece);
      o.onText(piece);
    }
    if (vocab.tokenizer === 'byte') {
      const rest = byteDecoder.decode();
      if (rest) {
        out.push(rest);
        o.onText(rest);
      }
    }
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    return { text: out.join(''), tokens: o.tokens, seconds, tokensPerSecond: o.tokens / seconds, device: opened.device, window: T };
  } finally {
    session.close();
  }
}
