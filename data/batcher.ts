/**
 * Batches: the sample order of each epoch and the assembly of batches into preallocated
 * typed arrays (the hot loop only copies rows; nothing is allocated per step).
 *
 * Order: with shuffle, epoch e uses a Fisher-Yates permutation seeded by (seed, e), so the
 * order is a pure function of (seed, epoch): resuming needs only the epoch and the position
 * in it. Without shuffle, file order: batch i = samples [i*B, (i+1)*B).
 * Training batches are always full (programs have a static batch size): drop_last drops the
 * last partial batch of an epoch; otherwise it is completed with the first samples of the
 * epoch's order (so every sample is seen every epoch).
 * Evaluation uses file order: full batches, then one tail batch of count % B samples.
 */
import type { Batch } from '../runtime/session.js';
import type { DataArray, Dataset } from './dataset.js';
import { mix32, randBelow, uint32Stream } from './rng.js';

export function trainBatchesPerEpoch(count: number, batch: number, dropLast: boolean): number {
  return dropLast ? Math.floor(count / batch) : Math.ceil(count / batch);
}

export function epochOrder(count: number, shuffle: boolean, seed: number, epoch: number): Uint32Array {
  const order = new Uint32Array(count);
  for (let i = 0; i < count; i++) order[i] = i;
  if (!shuffle) return order;
  const next = uint32Stream(mix32((seed >>> 0) ^ mix32(epoch + 1)));
  for (let i = count - 1; i > 0; i--) {
    const j = randBelow(next, i + 1);
    const t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  return order;
}

/** Assembles batches of `batch` samples for the given inputs (in program input order) into reused arrays. */
export interface Batcher {
  readonly batch: number;
  /**
   * fill the batch made of order[start .. start+batch) (wrapping to the start of order) and return it;
   * text windows with random starts (data/text.ts) draw window k of the epoch from (seed, epoch, k)
   */
  fill(order: Uint32Array, start: number, epoch?: number): Batch;
}

/** The start of training window `k` of `epoch`: uniform in [0, len - T - 1], a pure function of (seed, epoch, k). */
export function randomWindowStart(seed: number, epoch: number, k: number, len: number, T: number): number {
  const next = uint32Stream(mix32((seed >>> 0) ^ mix32((epoch + 1) >>> 0)) ^ mix32((k + 0x5bd1e995) >>> 0));
  return randBelow(next, len - T);
}

function createWindowBatcher(ds: Dataset, inputNames: string[], batch: number, seed: number): Batcher {
  const w = ds.windows!;
  const bufs = inputNames.map(() => new Int32Array(batch * w.T));
  const shift = inputNames.map((n) => {
    if (n === w.tokens) return 0;
    if (n === w.targets) return 1;
    throw new Error(`internal: text windows have no input '${n}'`);
  });
  return {
    batch,
    fill(order: Uint32Array, start: number, epoch = 0): Batch {
      const n = order.length;
      for (let b = 0; b < batch; b++) {
        const s = w.random ? randomWindowStart(seed, epoch, start + b, w.ids.length, w.T) : order[(start + b) % n] * w.T;
        for (let k = 0; k < bufs.length; k++) bufs[k].set(w.ids.subarray(s + shift[k], s + shift[k] + w.T), b * w.T);
      }
      return bufs;
    },
  };
}

export function createBatcher(ds: Dataset, inputNames: string[], batch: number, seed = 0): Batcher {
  if (ds.windows) return createWindowBatcher(ds, inputNames, batch, seed);
  const srcs: DataArray[] = inputNames.map((n) => {
    const a = ds.tensors.get(n);
    if (!a) throw new Error(`internal: dataset ${ds.source} has no array for input '${n}'`);
    return a;
  });
  const pers = srcs.map((a) => a.length / ds.count);
  const bufs: DataArray[] = srcs.map((a, i) => (a instanceof Float32Array ? new Float32Array(batch * pers[i]) : new Int32Array(batch * pers[i])));
  return {
    batch,
    fill(order: Uint32Array, start: number): Batch {
      const n = order.length;
      for (let k = 0; k < srcs.length; k++) {
        const src = srcs[k];
        const dst = bufs[k];
        const per = pers[k];
        for (let b = 0; b < batch; b++) {
          const s = order[(start + b) % n];
          if (per === 1) dst[b] = src[s];
          else dst.set(src.subarray(s * per, (s + 1) * per), b * per);
        }
      }
      return bufs;
    },
  };
}
