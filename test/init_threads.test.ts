/**
 * runtime/init_threads.ts: a large model's initial parameters filled on worker threads, slice by slice, are the
 * same bits as initParams on one thread (each element's Philox draws depend only on its index); a model too small
 * for workers, one thread, or a shape error take the calling thread, which reports the user's error.
 */
import { describe, expect, it } from 'vitest';
import path from 'node:path';
import { checkFile } from '../compiler/check/index.js';
import { initParams } from '../compiler/train/init.js';
import { initParamsThreaded, MIN_THREADED } from '../runtime/init_threads.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');

function sameBits(a: Map<string, Float32Array>, b: Map<string, Float32Array>): void {
  expect([...a.keys()]).toEqual([...b.keys()]);
  for (const [k, v] of a) {
    const w = b.get(k)!;
    expect(w.length, k).toBe(v.length);
    expect(Buffer.from(w.buffer, w.byteOffset, w.byteLength).equals(Buffer.from(v.buffer, v.byteOffset, v.byteLength)), k).toBe(true);
  }
}

describe('initial parameters on worker threads', () => {
  it('char_gpt (normal embeddings, uniform linears, ones / zeros) in slices of 4096 on 3 workers: the one-thread bits', () => {
    const m = checkFile(path.join(ROOT, 'specs/char_gpt.model'));
    const used = { workers: -1 };
    const threaded = initParamsThreaded(m, 11, { threads: 3, minElements: 0, slice: 4096, used });
    // the workers filled them (not the fallback)
    expect(used.workers).toBe(3);
    sameBits(initParams(m, 11), threaded);
    // another seed differs
    expect(initParamsThreaded(m, 12, { threads: 3, minElements: 0, slice: 4096 }).get('tok.weight')).not.toEqual(threaded.get('tok.weight'));
  }, 60_000);

  it('small models and one thread stay on the calling thread', () => {
    const m = checkFile(path.join(ROOT, 'specs/mnist_mlp.model'));
    const used = { workers: -1 };
    sameBits(initParams(m, 5), initParamsThreaded(m, 5, { used }));
    expect(used.workers).toBe(0);
    expect(MIN_THREADED).toBeGreaterThan(m.params.reduce((n, p) => n + p.shape.reduce((a, b) => a * b, 1), 0));
    initParamsThreaded(m, 5, { threads: 1, minElements: 0, slice: 1024, used });
    expect(used.workers).toBe(0);
  });
});
