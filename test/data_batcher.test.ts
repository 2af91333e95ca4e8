import { describe, it, expect } from 'vitest';
import { createBatcher, epochOrder, trainBatchesPerEpoch } from '../data/batcher.js';
import type { Dataset } from '../data/dataset.js';

function ds(count: number): Dataset {
  const x = new Float32Array(count * 2);
  const y = new Int32Array(count);
  for (let i = 0; i < count; i++) {
    x[2 * i] = i;
    x[2 * i + 1] = -i;
    y[i] = i;
  }
  return { source: 'test', count, tensors: new Map<string, Float32Array | Int32Array>([['x', x], ['y', y]]) };
}

describe('batcher', () => {
  it('shuffle false: batch i = samples [i*B, (i+1)*B), in the requested input order', () => {
    const d = ds(10);
    const b = createBatcher(d, ['y', 'x'], 4);
    const order = epochOrder(10, false, 123, 5);
    expect([...b.fill(order, 4)[0]]).toEqual([4, 5, 6, 7]);
    expect([...b.fill(order, 4)[1]]).toEqual([4, -4, 5, -5, 6, -6, 7, -7]);
  });
  it('last partial batch wraps to the start of the epoch order (drop_last false), or is dropped', () => {
    expect(trainBatchesPerEpoch(10, 4, false)).toBe(3);
    expect(trainBatchesPerEpoch(10, 4, true)).toBe(2);
    const b = createBatcher(ds(10), ['y'], 4);
    expect([...b.fill(epochOrder(10, false, 0, 0), 8)[0]]).toEqual([8, 9, 0, 1]);
  });
  it('seeded shuffle: a permutation, reproducible per (seed, epoch), different across epochs and seeds', () => {
    const a = epochOrder(1000, true, 42, 0);
    expect([...a].sort((p, q) => p - q)).toEqual([...Array(1000).keys()]);
    expect([...epochOrder(1000, true, 42, 0)]).toEqual([...a]);
    expect([...epochOrder(1000, true, 42, 1)]).not.toEqual([...a]);
    expect([...epochOrder(1000, true, 43, 0)]).not.toEqual([...a]);
    let fixed = 0;
    for (let i = 0; i < 1000; i++) if (a[i] === i) fixed++;
    expect(fixed).toBeLessThan(20);
  });
  it('reuses its buffers (no allocation per batch)', () => {
    const b = createBatcher(ds(10), ['x'], 2);
    const o = epochOrder(10, true, 1, 0);
    const first = b.fill(o, 0)[0];
    const second = b.fill(o, 2)[0];
    expect(second).toBe(first);
  });
});
