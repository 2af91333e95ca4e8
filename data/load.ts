/**
 * Load the train and test splits the spec's `data` source names, validated against the
 * spec's inputs. Relative paths are resolved from the spec file's folder (then the current
 * directory, when only that has the file).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { CheckedModel, DataSource } from '../compiler/model.js';
import { validateDataset, type DataSplits, type Dataset } from './dataset.js';
import { loadBundledMnist } from './mnist_bundled.js';
import { loadIdxMnist } from './idx.js';
import { loadCsv } from './csv.js';
import { loadSafetensorsData } from './safetensors_source.js';
import { loadSynthetic } from './synthetic.js';
import { loadText } from './text.js';

export function resolveDataPath(model: CheckedModel, p: string): string {
  if (path.isAbsolute(p)) return p;
  const fromSpec = path.resolve(path.dirname(model.file), p);
  if (fs.existsSync(fromSpec)) return fromSpec;
  const fromCwd = path.resolve(p);
  return fs.existsSync(fromCwd) ? fromCwd : fromSpec;
}

function loadSource(model: CheckedModel, src: DataSource): DataSplits {
  switch (src.kind) {
    case 'mnist': {
      const splits = src.dir === null ? loadBundledMnist(model) : loadIdxMnist(model, resolveDataPath(model, src.dir));
      if (src.normalize) for (const ds of [splits.train, splits.test]) if (ds) standardiseMnistImages(ds);
      return splits;
    }
    case 'csv':
      return {
        train: loadCsv(model, resolveDataPath(model, src.train), src),
        test: src.test === null ? null : loadCsv(model, resolveDataPath(model, src.test), src),
      };
    case 'safetensors':
      return {
        train: loadSafetensorsData(model, resolveDataPath(model, src.train), src.inputs),
        test: src.test === null ? null : loadSafetensorsData(model, resolveDataPath(model, src.test), src.inputs),
      };
    case 'synthetic':
      return loadSynthetic(model, src);
    case 'text':
      return loadText(model, src, src.file === null ? null : resolveDataPath(model, src.file));
  }
}

/** The MNIST training-set pixel mean and std (torchvision's usual Normalize((0.1307,), (0.3081,))). */
export const MNIST_MEAN = 0.1307;
export const MNIST_STD = 0.3081;

/** In place: the f32 image tensor of an mnist() split, (x - mean) / std. The arrays are fresh per load. */
function standardiseMnistImages(ds: Dataset): void {
  for (const t of ds.tensors.values()) {
    if (!(t instanceof Float32Array)) continue;
    const scale = 1 / MNIST_STD;
    const shift = -MNIST_MEAN / MNIST_STD;
    for (let i = 0; i < t.length; i++) t[i] = t[i] * scale + shift;
  }
}

/** Load and validate both splits (labels in range, finite features, shapes). */
export function loadData(model: CheckedModel, src: DataSource = model.train.data): DataSplits {
  const splits = loadSource(model, src);
  validateDataset(model, splits.train);
  if (splits.test) validateDataset(model, splits.test);
  return splits;
}
