// mpsc sample (runtime/sampler.ts, compiler/ir/sample_program.ts): token choice (temperature,
// top-k, seeded draws), the sampling program returning the logits of one position (checked
// against the eval graph's logits in the float64 interpreter), and generation end to end on the
// reference device: streamed text in the vocabulary, deterministic for a seed, greedy at
// temperature 0, and a context longer than the window T.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { checkSource } from '../compiler/check/index.js';
import { bindBatch } from '../compiler/ir/bind_batch.js';
import { evalMode } from '../compiler/ir/eval_mode.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { buildSampleProgram, lossLogits } from '../compiler/ir/sample_program.js';
import { runGraph } from '../compiler/reference/interpret.js';
import { initParams } from '../compiler/train/init.js';
import { uniformStream } from '../data/rng.js';
import { saveTensors } from '../runtime/checkpoint.js';
import { pickToken, sample } from '../runtime/sampler.js';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-sample-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const T = 6;
/** a one-block character LM spec over a 4-character text, `rows` embedding rows and logits */
function lmSpec(name: string, rows: number, head: string): string {
  fs.writeFileSync(path.join(dir, `${name}.txt`), 'abcab cabba acbca '.repeat(20));
  const file = path.join(dir, `${name}.model`);
  fs.writeFileSync(
    file,
    `model ${name}
input tokens: i32[N, ${T}]
input targets: i32[N, ${T}]
network {
  h = (tokens -> embedding(${rows}, 8) as tok) + (tokens -> positions -> embedding(${T}, 8) as pos)
  logits = h -> attention(2, causal: true) as attn -> layernorm as ln -> ${head} as head
}
loss cross_entropy(logits, targets)
optimizer adam(lr: 1e-3)
train { data: text("${name}.txt"), steps: 1, batch: 2 }
`,
  );
  return file;
}
function lm() {
  const file = lmSpec('lm', 4, 'linear(4, tied_to: tok, bias: false)');
  const model = checkSource(fs.readFileSync(file, 'utf8'), file);
  const weights = path.join(dir, 'w.safetensors');
  const init = initParams(model, 3);
  saveTensors(weights, new Map([...init].map(([n, d]) => [n, { shape: model.params.find((p) => p.path === n)!.shape, data: d }])), { vocab: JSON.stringify({ tokenizer: 'char', chars: [' ', 'a', 'b', 'c'] }) });
  return { model, weights, init };
}

describe('pickToken', () => {
  const logits = Float64Array.from([0.1, 2.5, -1, 2.4]);
  it('temperature 0 and top-k 1 take the most likely token', () => {
    expect(pickToken(logits, 0, undefined, () => 0.99)).toBe(1);
    expect(pickToken(logits, 1, 1, () => 0.99)).toBe(1);
  });
  it('draws from softmax(logits / temperature) over the top k', () => {
    const u = uniformStream(5);
    const counts = [0, 0, 0, 0];
    for (let i = 0; i < 20000; i++) counts[pickToken(logits, 1, 2, u)]++;
    expect(counts[0] + counts[2]).toBe(0);
    const p1 = Math.exp(2.5) / (Math.exp(2.5) + Math.exp(2.4));
    expect(counts[1] / 20000).toBeCloseTo(p1, 1);
    const hot = [0, 0, 0, 0];
    for (let i = 0; i < 20000; i++) hot[pickToken(logits, 100, undefined, u)]++;
    for (const c of hot) expect(c / 20000).toBeGreaterThan(0.2); // nearly uniform at a high temperature
  });
});

describe('the sampling program', () => {
  it('returns the logits of the selected position, which only depend on the tokens up to it', () => {
    const { model, init } = lm();
    const set = buildPrograms({ ...model, train: { ...model.train, batch: 1 } }, { batch: 1 });
    const p = buildSampleProgram(set.eval, lossLogits(set.eval)!);
    expect(p.outputs.map((o) => o.name)).toEqual(['logit_0', 'logit_1', 'logit_2', 'logit_3']);
    const run = (tokens: number[], pos: number): number[] => {
      const env = new Map<number, Float64Array>();
      for (const v of p.graph.values) {
        const t = init.get(v.name);
        if (t) env.set(v.id, Float64Array.from(t));
      }
      const sel = new Float64Array(T);
      sel[pos] = 1;
      const names = p.inputs.map((id) => p.graph.values[id].name);
      p.inputs.forEach((id, k) => env.set(id, names[k] === 'tokens' ? Float64Array.from(tokens) : names[k] === 'select' ? sel : new Float64Array(T)));
      runGraph(p.graph, env, { lr: 0, t: 1, seed: 0, counter: 0 });
      return p.outputs.map((o) => env.get(o.value)![0]);
    };
    // the eval graph's own logits at position 2
    const { graph } = evalMode(bindBatch(model.graph, 1));
    const env = new Map<number, Float64Array>();
    for (const v of graph.values) {
      const t = init.get(v.name);
      if (t) env.set(v.id, Float64Array.from(t));
      if (v.kind === 'input') env.set(v.id, v.name === 'tokens' ? Float64Array.from([1, 2, 3, 0, 0, 0]) : new Float64Array(T));
    }
    runGraph(graph, env, { lr: 0, t: 1, seed: 0, counter: 0 });
    const logitsId = graph.values.find((v) => v.name === 'head.out')!.id;
    const want = Array.from(env.get(logitsId)!.subarray(2 * 4, 3 * 4));
    const a = run([1, 2, 3, 0, 0, 0], 2);
    const b = run([1, 2, 3, 3, 1, 2], 2); // later tokens cannot change position 2 (causal)
    for (let c = 0; c < 4; c++) {
      expect(a[c]).toBeCloseTo(want[c], 12);
      expect(b[c]).toBeCloseTo(want[c], 12);
    }
    expect(run([1, 2, 3, 3, 1, 2], 5)).not.toEqual(a);
  });
});

describe('sample() on the reference device', () => {
  it('streams the prompt then tokens of the vocabulary; a seed repeats; temperature 0 is greedy; contexts longer than T slide', async () => {
    const { model, weights } = lm();
    const go = async (o: { seed: number; temperature: number }) => {
      const pieces: string[] = [];
      const r = await sample(model, { weights, prompt: 'ab', tokens: 15, temperature: o.temperature, seed: o.seed, device: 'reference', onText: (s) => pieces.push(s) });
      return { r, pieces };
    };
    const x = await go({ seed: 1, temperature: 1 });
    expect(x.pieces[0]).toBe('ab');
    expect(x.pieces).toHaveLength(16);
    expect(x.r.text).toHaveLength(15);
    expect(x.r.text).toMatch(/^[ abc]{15}$/);
    expect(x.r.tokensPerSecond).toBeGreaterThan(0);
    expect(x.r.window).toBe(T);
    expect((await go({ seed: 1, temperature: 1 })).r.text).toBe(x.r.text);
    const g1 = await go({ seed: 1, temperature: 0 });
    const g2 = await go({ seed: 2, temperature: 0 });
    expect(g1.r.text).toBe(g2.r.text);
  });
});

describe('sample(): an output layer wider than the vocabulary', () => {
  // 4 characters, 6 embedding rows and logits: ids 4 and 5 name no character. Their bias is made
  // the largest, so a sampler that let them compete would pick them (and print 'undefined').
  it('only draws ids of the vocabulary, greedy or not; --top-k above the vocabulary keeps them all, with a note', async () => {
    const file = lmSpec('wide', 6, 'linear(6)');
    const model = checkSource(fs.readFileSync(file, 'utf8'), file);
    const init = initParams(model, 3);
    init.set('head.bias', Float32Array.from([0, 0, 0, 0, 50, 50]));
    const weights = path.join(dir, 'wide.safetensors');
    saveTensors(weights, new Map([...init].map(([n, d]) => [n, { shape: model.params.find((p) => p.path === n)!.shape, data: d }])), { vocab: JSON.stringify({ tokenizer: 'char', chars: [' ', 'a', 'b', 'c'] }) });
    for (const temperature of [0, 1, 5]) {
      const r = await sample(model, { weights, prompt: 'ab', tokens: 12, temperature, seed: 7, device: 'reference', onText: () => {} });
      expect(r.text).toMatch(/^[ abc]{12}$/);
    }
    const k4 = await sample(model, { weights, prompt: 'a', tokens: 8, temperature: 1, topK: 4, seed: 7, device: 'reference', onText: () => {} });
    expect(k4.text).toMatch(/^[ abc]{8}$/);
    // a top-k above the vocabulary keeps every token (nanoGPT's min(k, V)), with a note; never an id past the vocabulary
    const notes: string[] = [];
    const k9 = await sample(model, { weights, prompt: 'a', tokens: 8, temperature: 1, topK: 9, seed: 7, device: 'reference', onText: () => {}, onNote: (m) => notes.push(m) });
    expect(k9.text).toMatch(/^[ abc]{8}$/);
    expect(notes.join('\n')).toMatch(/--top-k 9 is above the vocabulary \(4 tokens\): every token is kept/);
  });

  it('weights of another spec: the mismatch names the spec hashes when the file has them (--weights latest can pick another spec of the same model name)', async () => {
    const wide = checkSource(fs.readFileSync(lmSpec('wide', 6, 'linear(6)'), 'utf8'), path.join(dir, 'wide.model'));
    const { model, init } = lm();
    const vocab = JSON.stringify({ tokenizer: 'char', chars: [' ', 'a', 'b', 'c'] });
    const tensors = new Map([...init].map(([n, d]) => [n, { shape: model.params.find((p) => p.path === n)!.shape, data: d }]));
    const plain = path.join(dir, 'plain.safetensors');
    saveTensors(plain, tensors, { vocab });
    const tagged = path.join(dir, 'tagged.safetensors');
    saveTensors(tagged, tensors, { vocab, model: 'lm', spec_hash: model.sourceHash });
    const go = (weights: string) => sample(wide, { weights, tokens: 2, temperature: 1, seed: 0, device: 'reference', onText: () => {} });
    await expect(go(tagged)).rejects.toThrow(new RegExp(`tok\\.weight: file has \\[4, 8\\], model needs \\[6, 8\\][^]*note: the file was written by mpsc train for another spec \\(spec hash ${model.sourceHash.slice(0, 12)}[^]*model 'lm'[^]*--weights latest`));
    await expect(go(plain)).rejects.toThrow(/tok\.weight: file has \[4, 8\]/);
    await expect(go(plain)).rejects.not.toThrow(/note: the file was written/);
  });
});

describe('mpsc sample: user errors exit 1', () => {
  const mpsc = (...args: string[]) => spawnSync(process.execPath, ['bin/mpsc.js', ...args], { encoding: 'utf8', timeout: 120_000 });
  it('a negative temperature; a spec that does not train on text()', () => {
    const { weights } = lm();
    const t = mpsc('sample', path.join(dir, 'lm.model'), '--weights', weights, '--temperature', '-1');
    expect(t.status).toBe(1);
    expect(t.stderr).toMatch(/--temperature must be a number >= 0, got '-1'/);
    const m = mpsc('sample', 'specs/mnist_mlp.model', '--weights', weights);
    expect(m.status).toBe(1);
    expect(m.stderr).toMatch(/mpsc sample generates text, but this spec trains on mnist\(\) data/);
  });
  it('the default --threads is the other commands\' (physical cores, or $MPSC_THREADS), not every logical core', () => {
    expect(mpsc('sample', '--help').stdout.replace(/\s+/g, ' ')).toContain('default: the physical cores, or $MPSC_THREADS');
    const { weights } = lm();
    const r = spawnSync(process.execPath, ['bin/mpsc.js', 'sample', path.join(dir, 'lm.model'), '--weights', weights, '--device', 'reference', '--tokens', '1'], {
      encoding: 'utf8',
      timeout: 120_000,
      env: { ...process.env, MPSC_THREADS: 'many' },
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain("MPSC_THREADS must be a positive integer (got 'many')");
  });
});
