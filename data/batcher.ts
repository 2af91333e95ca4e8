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
  /** fill the batch made of order[start .. start+batch) (wrapping to the start of order) and return it */
  fill(order: Uint32Array, start: number): Batch;
}

export function createBatcher(ds: Dataset, inputNames: string[], batch: number): Batcher {
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
