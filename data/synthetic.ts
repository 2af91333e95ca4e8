/**
 * synthetic(train_size: 512, test_size: 128, seed: 1): seeded, learnable data for tests and demos.
 * Feature inputs are standard normal. A fixed random linear map W (drawn from the seed) of the
 * concatenated features gives the targets: class labels = argmax(W x) (numClasses outputs) for an
 * i32 label input, W x itself for an f32 target. Train and test samples come from one stream
 * (train first), so both follow the same distribution and a model can fit them.
 * i32 feature inputs (token ids, e.g. a language model's [N, T] tokens) are uniform over the rows
 * of the embedding they index, and an i32 label with several positions ([N, T] targets) gets
 * uniform random classes per position (shape-correct data for benchmarks and sanitizer runs,
 * not learnable).
 */
import { UserError } from '../compiler/errors.js';
import type { CheckedModel } from '../compiler/model.js';
import { embeddingIdRanges, inputRoles, sampleSize, type DataArray, type DataSplits, type Dataset } from './dataset.js';
import { mix32, normalStream, randBelow, uint32Stream } from './rng.js';

export interface SyntheticSpec {
  train_size: number;
  test_size: number;
  seed: number;
}

export function loadSynthetic(model: CheckedModel, spec: SyntheticSpec): DataSplits {
  const roles = inputRoles(model);
  // i32 features (token ids) are uniform over the rows of the embedding they index
  const idFeatures = roles.features.filter((f) => f.dtype === 'i32');
  const rows = embeddingIdRanges(model);
  for (const f of idFeatures) {
    if (!rows.has(f.name)) throw new UserError(`${model.file}: error: synthetic() makes i32 features only for token ids read by an embedding; input '${f.name}' is not`);
  }
  const floats = roles.features.filter((f) => f.dtype === 'f32');
  const d = floats.reduce((s, f) => s + sampleSize(f), 0);
  let outs = 0;
  // an i32 label with several positions ([N, T]): uniform random classes per position
  let perPosition = false;
  if (roles.label) {
    if (roles.label.dtype === 'i32') {
      if (model.numClasses === null || model.numClasses < 2) {
        throw new UserError(`${model.file}: error: synthetic() class labels need a classification loss with a known number of classes`);
      }
      perPosition = sampleSize(roles.label) !== 1;
      outs = model.numClasses;
    } else {
      outs = sampleSize(roles.label);
    }
  }
  const idRand = uint32Stream(mix32(spec.seed ^ 0x1d5));
  const wRand = normalStream(mix32(spec.seed ^ 0x5eed));
  const w = new Float64Array(outs * d);
  for (let i = 0; i < w.length; i++) w[i] = wRand() / Math.sqrt(d);
  const xRand = normalStream(mix32(spec.seed));
  const make = (count: number, source: string): Dataset => {
    const feats = floats.map((f) => new Float32Array(count * sampleSize(f)));
    const ids = idFeatures.map((f) => {
      const a = new Int32Array(count * sampleSize(f));
      const hi = rows.get(f.name)!.vocab;
      for (let i = 0; i < a.length; i++) a[i] = randBelow(idRand, hi);
      return a;
    });
    const lab: DataArray | null = roles.label ? (roles.label.dtype === 'i32' ? new Int32Array(count * (perPosition ? sampleSize(roles.label) : 1)) : new Float32Array(count * outs)) : null;
    if (perPosition && lab) for (let i = 0; i < lab.length; i++) lab[i] = randBelow(idRand, outs);
    const x = new Float64Array(d);
    for (let s = 0; s < count; s++) {
      let k = 0;
      floats.forEach((f, fi) => {
        const per = sampleSize(f);
        for (let j = 0; j < per; j++) {
          const v = Math.fround(xRand());
          feats[fi][s * per + j] = v;
          x[k++] = v;
        }
      });
      if (!lab || perPosition) continue;
      let best = 0;
      let bestV = -Infinity;
      for (let o = 0; o < outs; o++) {
        let acc = 0;
        for (let j = 0; j < d; j++) acc += w[o * d + j] * x[j];
        if (lab instanceof Float32Array) lab[s * outs + o] = acc;
        else if (acc > bestV) {
          bestV = acc;
          best = o;
        }
      }
      if (lab instanceof Int32Array) lab[s] = best;
    }
    const tensors = new Map<string, DataArray>();
    floats.forEach((f, i) => tensors.set(f.name, feats[i]));
    idFeatures.forEach((f, i) => tensors.set(f.name, ids[i]));
    if (roles.label && lab) tensors.set(roles.label.name, lab);
    return { source, count, tensors };
  };
  const train = make(spec.train_size, `synthetic(seed ${spec.seed}) train split`);
  const test = spec.test_size > 0 ? make(spec.test_size, `synthetic(seed ${spec.seed}) test split`) : null;
  return { train, test };
}
