/**
 * runtime/bench.ts benchVariants (bench/cuda_env_ab.ts's A/B in one process): each variant's session is opened under
 * its environment, which is restored afterwards; every variant gets a figure per round; the variant parser refuses
 * what is not MPSC_VAR=value. Run on the reference device (the mechanics are the device's business only at open).
 */
import { describe, expect, it } from 'vitest';
import path from 'node:path';
import { checkFile } from '../compiler/check/index.js';
import { benchVariants } from '../runtime/bench.js';
import { parseVariant } from '../bench/cuda_env_ab.js';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');

describe('benchVariants', () => {
  it('times each variant in every round and restores the environment', async () => {
    const m = checkFile(path.join(ROOT, 'specs/mnist_mlp.model'));
    delete process.env.MPSC_TEST_AB_SWITCH;
    const res = await benchVariants(m, [parseVariant('a'), parseVariant('b:MPSC_TEST_AB_SWITCH=4,0,3;MPSC_CUDA_CE_UNROLL=16')], { device: 'reference', rounds: 2, steps: 2, warmup: 1, batch: 8 });
    expect(res.map((r) => r.name)).toEqual(['a', 'b']);
    expect(res[1].env).toEqual({ MPSC_TEST_AB_SWITCH: '4,0,3', MPSC_CUDA_CE_UNROLL: '16' });
    for (const r of res) {
      expect(r.rounds).toHaveLength(2);
      expect(r.rounds.every((x) => x > 0)).toBe(true);
      expect(r.median_ms).toBeGreaterThan(0);
    }
    expect(process.env.MPSC_TEST_AB_SWITCH).toBeUndefined();
  }, 60_000);

  it('refuses a variant that is not NAME[:MPSC_VAR=value;...]', () => {
    expect(() => parseVariant('x:FOO=1')).toThrow(/not MPSC_VAR=value/);
    expect(() => parseVariant('x y')).toThrow(/variant name/);
    expect(parseVariant('x:MPSC_A=1;MPSC_B=2,3')).toEqual({ name: 'x', env: { MPSC_A: '1', MPSC_B: '2,3' } });
  });
});
