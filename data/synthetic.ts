/**
 * synthetic(train_size: 512, test_size: 128, seed: 1): seeded, learnable data for tests and demos.
 * Feature inputs are standard normal. A fixed random linear map W (drawn from the seed) of the
 * concatenated features gives the targets: class labels = argmax(W x) (numClasses outputs) for an
 * i32 label input, W x itself for an f32 target. Train and test samples come from one stream
 * (train first), so both follow the same distribution and a model can fit them.
 */
import { UserError } from '../compiler/errors.js';
import type { CheckedModel } from '../compiler/model.js';
import { inputRoles, sampleSize, type DataArray, type DataSplits, type Dataset } from './dataset.js';
import { mix32, normalStream } from './rng.js';

export interface SyntheticSpec {
  train_size: number;
  test_size: number;
  seed: number;
}

export function loadSynthetic(model: CheckedModel, spec: SyntheticSpec): DataSplits {
  const roles = inputRoles(model);
  const d = roles.features.reduce((s, f) => s + sampleSize(f), 0);
  if (roles.features.some((f) => f.dtype !== 'f32')) {
    throw new UserError(`${model.file}: error: synthetic() makes f32 features; input(s) ${roles.features.filter((f) => f.dtype !== 'f32').map((f) => `'${f.name}'`).join(', ')} are not f32`);
  }
  let outs = 0;
  if (roles.label) {
    if (roles.label.dtype === 'i32') {
      if (model.numClasses === null || model.numClasses < 2) {
        throw new UserError(`${model.file}: error: synthetic() class labels need a classification loss with a known number of classes`);
      }
      if (sampleSize(roles.label) !== 1) throw new UserError(`${model.file}: error: synthetic() gives one class label per sample; input '${roles.label.name}' takes ${sampleSize(roles.label)}`);
      outs = model.numClasses;
    } else {
      outs = sampleSize(roles.label);
    }
  }
  const wRand = normalStream(mix32(spec.seed ^ 0x5eed));
  const w = new Float64Array(outs * d);
  for (let i = 0; i < w.length; i++) w[i] = wRand() / Math.sqrt(d);
  const xRand = normalStream(mix32(spec.seed));
  const make = (count: number, source: string): Dataset => {
    const feats = roles.features.map((f) => new Float32Array(count * sampleSize(f)));
    const lab: DataArray | null = roles.label ? (roles.label.dtype === 'i32' ? new Int32Array(count) : new Float32Array(count * outs)) : null;
    const x = new Float64Array(d);
    for (let s = 0; s < count; s++) {
      let k = 0;
      roles.features.forEach((f, fi) => {
        const per = sampleSize(f);
        for (let j = 0; j < per; j++) {
          const v = Math.fround(xRand());
          feats[fi][s * per + j] = v;
          x[k++] = v;
        }
      });
      if (!lab) continue;
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
    roles.features.forEach((f, i) => tensors.set(f.name, feats[i]));
    if (roles.label && lab) tensors.set(roles.label.name, lab);
    return { source, count, tensors };
  };
  const train = make(spec.train_size, `synthetic(seed ${spec.seed}) train split`);
  const test = spec.test_size > 0 ? make(spec.test_size, `synthetic(seed ${spec.seed}) test split`) : null;
  return { train, test };
}
