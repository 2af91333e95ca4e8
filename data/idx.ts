/**
 * mnist("dir"): the standard MNIST IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte,
 * t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte), plain or gzip-compressed (`.gz`), as
 * published at yann.lecun.com and in torchvision's raw folder. Pixels are scaled to [0, 1] (/255).
 * Every header field is validated: magic number, dimensions, truncation, image/label counts.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { UserError } from '../compiler/errors.js';
import type { CheckedModel } from '../compiler/model.js';
import { imageLabelInputs, type DataSplits } from './dataset.js';

const IMAGES_MAGIC = 0x00000803; // u8, 3 dims
const LABELS_MAGIC = 0x00000801; // u8, 1 dim

/** Read `name` or `name.gz` from dir (also accepts torchvision-style `name` with '-idx3-ubyte' dots: t10k-images.idx3-ubyte). */
function readIdxFile(dir: string, name: string): { file: string; bytes: Buffer } {
  const candidates = [name, `${name}.gz`, name.replace(/-idx/, '.idx'), `${name.replace(/-idx/, '.idx')}.gz`];
  for (const c of candidates) {
    const file = path.join(dir, c);
    if (!fs.existsSync(file)) continue;
    let bytes = fs.readFileSync(file);
    if (bytes.length >= 2 && bytes[0] === 0x1f && bytes[1] === 0x8b) {
      try {
        bytes = gunzipSync(new Uint8Array(bytes.buffer as ArrayBuffer, bytes.byteOffset, bytes.byteLength));
      } catch (e) {
        throw new UserError(`${file}: error: the gzip data is corrupt or truncated (${(e as Error).message})\n  help: download the file again`);
      }
    }
    return { file, bytes };
  }
  throw new UserError(
    `${path.join(dir, name)}: error: MNIST file not found (also tried ${name}.gz)\n` +
      `  help: mnist("${dir}") needs train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (plain or .gz) in that folder`,
  );
}

export function parseIdxImages(bytes: Buffer, file: string): { images: Float32Array; count: number; rows: number; cols: number } {
  if (bytes.length < 16) throw new UserError(`${file}: error: truncated IDX image file (${bytes.length} bytes, the header alone is 16)`);
  const magic = bytes.readUInt32BE(0);
  if (magic !== IMAGES_MAGIC) {
    const hint = magic === LABELS_MAGIC ? ' (this looks like a label file)' : '';
    throw new UserError(`${file}: error: wrong magic number 0x${magic.toString(16).padStart(8, '0')} for an IDX image file, expected 0x00000803${hint}`);
  }
  const count = bytes.readUInt32BE(4);
  const rows = bytes.readUInt32BE(8);
  const cols = bytes.readUInt32BE(12);
  const need = 16 + count * rows * cols;
  if (bytes.length < need) {
    throw new UserError(`${file}: error: truncated IDX image file: the header promises ${count} images of ${rows}x${cols} (${need} bytes) but the file has ${bytes.length} bytes\n  help: download the file again`);
  }
  if (bytes.length > need) throw new UserError(`${file}: error: IDX image file has ${bytes.length - need} unexpected trailing bytes after ${count} images of ${rows}x${cols}`);
  const images = new Float32Array(count * rows * cols);
  for (let i = 0; i < images.length; i++) images[i] = bytes[16 + i] / 255;
  return { images, count, rows, cols };
}

export function parseIdxLabels(bytes: Buffer, file: string): { labels: Int32Array; count: number } {
  if (bytes.length < 8) throw new UserError(`${file}: error: truncated IDX label file (${bytes.length} bytes, the header alone is 8)`);
  const magic = bytes.readUInt32BE(0);
  if (magic !== LABELS_MAGIC) {
    const hint = magic === IMAGES_MAGIC ? ' (this looks like an image file)' : '';
    throw new UserError(`${file}: error: wrong magic number 0x${magic.toString(16).padStart(8, '0')} for an IDX label file, expected 0x00000801${hint}`);
  }
  const count = bytes.readUInt32BE(4);
  if (bytes.length < 8 + count) {
    throw new UserError(`${file}: error: truncated IDX label file: the header promises ${count} labels but the file has ${bytes.length - 8}\n  help: download the file again`);
  }
  if (bytes.length > 8 + count) throw new UserError(`${file}: error: IDX label file has ${bytes.length - 8 - count} unexpected trailing bytes after ${count} labels`);
  return { labels: Int32Array.from(bytes.subarray(8, 8 + count)), count };
}

function loadSplit(dir: string, prefix: string, pixels: number): { images: Float32Array; labels: Int32Array; count: number; source: string; labelSource: string } {
  const im = readIdxFile(dir, `${prefix}-images-idx3-ubyte`);
  const lb = readIdxFile(dir, `${prefix}-labels-idx1-ubyte`);
  const images = parseIdxImages(im.bytes, im.file);
  const labels = parseIdxLabels(lb.bytes, lb.file);
  if (images.rows * images.cols !== pixels) {
    throw new UserError(`${im.file}: error: images are ${images.rows}x${images.cols} but the spec's image input takes ${pixels} values per sample`);
  }
  if (images.count !== labels.count) {
    throw new UserError(`${im.file}: error: ${images.count} images but ${lb.file} has ${labels.count} labels\n  help: the image and label files must come from the same split`);
  }
  return { images: images.images, labels: labels.labels, count: images.count, source: im.file, labelSource: lb.file };
}

export function loadIdxMnist(model: CheckedModel, dir: string): DataSplits {
  if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) {
    throw new UserError(`${dir}: error: MNIST data folder not found\n  help: mnist("dir") takes a folder holding the IDX files; use mnist() for the bundled digits`);
  }
  const { image, label } = imageLabelInputs(model, 28 * 28, `mnist("${dir}")`);
  const pixels = 28 * 28;
  const tr = loadSplit(dir, 'train', pixels);
  const te = loadSplit(dir, 't10k', pixels);
  const ds = (s: typeof tr) => ({
    source: s.source,
    count: s.count,
    tensors: new Map<string, Float32Array | Int32Array>([
      [image.name, s.images],
      [label.name, s.labels],
    ]),
    inputSources: { [image.name]: s.source, [label.name]: s.labelSource },
  });
  return { train: ds(tr), test: ds(te) };
}
