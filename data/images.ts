/**
 * Image files (PNG, JPEG) -> samples of one f32 image input, for `mpsc predict`.
 *
 * Decoding: pngjs (PNG) and jpeg-js (JPEG), both pure JavaScript, to 8-bit RGBA. Alpha is
 * composited over black (MNIST digits are white on black). Channels: 1 (grayscale,
 * 0.299 R + 0.587 G + 0.114 B as PIL's "L") or 3 (RGB), as the input's shape says. Size: resized
 * to the input's H x W by area averaging (each output pixel is the mean of the source pixels
 * it covers, fractional at the edges), so no aliasing when shrinking. Values: pixel / 255, then
 * what the spec's data source does to its pixels: mnist() standardises with the MNIST mean/std
 * when `normalize` is on; csv(normalize: k) divides the raw 0..255 value by k instead.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import jpeg from 'jpeg-js';
import { PNG } from 'pngjs';
import { UserError } from '../compiler/errors.js';
import type { CheckedModel, InputDecl } from '../compiler/model.js';
import { MNIST_MEAN, MNIST_STD } from './load.js';
import { sampleShape } from './dataset.js';

export const IMAGE_EXTENSIONS = ['.png', '.jpg', '.jpeg'];

export interface Rgba {
  width: number;
  height: number;
  data: Uint8Array;
}

export function decodeImage(file: string): Rgba {
  let bytes: Buffer;
  try {
    bytes = fs.readFileSync(file);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    throw new UserError(`${file}: error: ${err.code === 'ENOENT' ? 'image file not found' : `cannot read the image (${err.message})`}`);
  }
  const ext = path.extname(file).toLowerCase();
  try {
    if (ext === '.png') {
      const png = PNG.sync.read(bytes);
      return { width: png.width, height: png.height, data: new Uint8Array(png.data.buffer, png.data.byteOffset, png.data.byteLength) };
    }
    const img = jpeg.decode(bytes, { useTArray: true, formatAsRGBA: true, maxMemoryUsageInMB: 512 });
    return { width: img.width, height: img.height, data: img.data };
  } catch (e) {
    throw new UserError(`${file}: error: cannot decode the ${ext === '.png' ? 'PNG' : 'JPEG'} image (${(e as Error).message})`);
  }
}

/** the image layout an input takes: [C, H, W], or [H*W] for mnist() ([784] = 28 x 28) */
export function imageLayout(model: CheckedModel, input: InputDecl): { c: number; h: number; w: number } {
  const s = sampleShape(input);
  if (s.length === 3 && (s[0] === 1 || s[0] === 3)) return { c: s[0], h: s[1], w: s[2] };
  if (s.length === 1 && model.train.data.kind === 'mnist' && s[0] === 784) return { c: 1, h: 28, w: 28 };
  throw new UserError(
    `${model.file}: error: image files need an image input of shape [N, 1, H, W] or [N, 3, H, W], but '${input.name}' is f32[N, ${s.join(', ')}]\n` +
      `  help: pass the inputs as a safetensors or CSV file instead`,
  );
}

/** the value of one 0..255 pixel as the spec's data source would give it */
export function pixelTransform(model: CheckedModel): (v255: number) => number {
  const src = model.train.data;
  if (src.kind === 'mnist') return src.normalize ? (v) => (v / 255 - MNIST_MEAN) / MNIST_STD : (v) => v / 255;
  if (src.kind === 'csv' && src.normalize !== null) {
    const k = src.normalize;
    return (v) => v / k;
  }
  return (v) => v / 255;
}

/** Area-average resize of one channel plane (float) from sw x sh to dw x dh. */
export function resizeArea(src: Float64Array, sw: number, sh: number, dw: number, dh: number): Float64Array {
  const out = new Float64Array(dw * dh);
  const sx = sw / dw;
  const sy = sh / dh;
  for (let oy = 0; oy < dh; oy++) {
    const y0 = oy * sy;
    const y1 = y0 + sy;
    for (let ox = 0; ox < dw; ox++) {
      const x0 = ox * sx;
      const x1 = x0 + sx;
      let sum = 0;
      let area = 0;
      for (let y = Math.floor(y0); y < Math.min(sh, Math.ceil(y1)); y++) {
        const wy = Math.min(y + 1, y1) - Math.max(y, y0);
        if (wy <= 0) continue;
        for (let x = Math.floor(x0); x < Math.min(sw, Math.ceil(x1)); x++) {
          const wx = Math.min(x + 1, x1) - Math.max(x, x0);
          if (wx <= 0) continue;
          sum += src[y * sw + x] * wx * wy;
          area += wx * wy;
        }
      }
      out[oy * dw + ox] = area > 0 ? sum / area : 0;
    }
  }
  return out;
}

/** Decode, convert and resize image files into the samples of `input` (row-major [N, C, H, W]). */
export function loadImages(model: CheckedModel, input: InputDecl, files: string[]): Float32Array {
  const { c, h, w } = imageLayout(model, input);
  const tf = pixelTransform(model);
  const out = new Float32Array(files.length * c * h * w);
  files.forEach((file, n) => {
    const img = decodeImage(file);
    const planes: Float64Array[] = [];
    const npx = img.width * img.height;
    if (c === 1) planes.push(new Float64Array(npx));
    else for (let k = 0; k < 3; k++) planes.push(new Float64Array(npx));
    for (let i = 0; i < npx; i++) {
      const a = img.data[i * 4 + 3] / 255;
      const r = img.data[i * 4] * a;
      const g = img.data[i * 4 + 1] * a;
      const b = img.data[i * 4 + 2] * a;
      if (c === 1) planes[0][i] = 0.299 * r + 0.587 * g + 0.114 * b;
      else {
        planes[0][i] = r;
        planes[1][i] = g;
        planes[2][i] = b;
      }
    }
    planes.forEach((p, k) => {
      const plane = img.width === w && img.height === h ? p : resizeArea(p, img.width, img.height, w, h);
      const base = (n * c + k) * h * w;
      for (let i = 0; i < h * w; i++) out[base + i] = tf(plane[i]);
    });
  });
  return out;
}
