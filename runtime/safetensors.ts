/**
 * safetensors files: writer and validating reader.
 *
 * Format (https://github.com/huggingface/safetensors): 8-byte little-endian u64 header
 * length n, then n bytes of UTF-8 JSON `{name: {dtype, shape, data_offsets: [begin, end]},
 * "__metadata__": {string: string}}`, then the data block; offsets are relative to the
 * start of the data block, data is row-major little-endian. Tensors are written in name
 * order, packed, header padded with spaces to a multiple of 8 bytes (as the Python writer does).
 */
import * as fs from 'node:fs';
import { UserError } from '../compiler/errors.js';

export type StDType = 'F64' | 'F32' | 'F16' | 'BF16' | 'I64' | 'I32' | 'I16' | 'I8' | 'U8' | 'BOOL';

const DTYPE_BYTES: Record<StDType, number> = { F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1, U8: 1, BOOL: 1 };

export interface StTensor {
  dtype: StDType;
  shape: number[];
  /** raw little-endian bytes (a view into the file buffer when read) */
  data: Uint8Array;
}

export interface StFile {
  tensors: Map<string, StTensor>;
  metadata: Record<string, string>;
}

/** A tensor to write: f32 / i32 arrays, or I64 given as bigint values. */
export interface StWriteTensor {
  shape: number[];
  data: Float32Array | Int32Array | BigInt64Array | Float64Array | Uint8Array;
  /** required for Uint8Array data (U8/BOOL); otherwise derived from the array type */
  dtype?: StDType;
}

function dtypeOf(t: StWriteTensor): StDType {
  if (t.dtype) return t.dtype;
  if (t.data instanceof Float32Array) return 'F32';
  if (t.data instanceof Int32Array) return 'I32';
  if (t.data instanceof BigInt64Array) return 'I64';
  if (t.data instanceof Float64Array) return 'F64';
  return 'U8';
}

function numelOf(shape: number[]): number {
  let n = 1;
  for (const s of shape) n *= s;
  return n;
}

const littleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Serialise tensors (+ string metadata) into one safetensors byte buffer. */
export function encodeSafetensors(tensors: Map<string, StWriteTensor> | Record<string, StWriteTensor>, metadata: Record<string, string> = {}): Uint8Array {
  if (!littleEndian) throw new Error('internal: big-endian hosts are not supported');
  const entries = (tensors instanceof Map ? [...tensors.entries()] : Object.entries(tensors)).sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) header.__metadata__ = metadata;
  let offset = 0;
  const chunks: Uint8Array[] = [];
  for (const [name, t] of entries) {
    if (name === '__metadata__') throw new Error('internal: a tensor cannot be named __metadata__');
    const dtype = dtypeOf(t);
    const bytes = numelOf(t.shape) * DTYPE_BYTES[dtype];
    if (t.data.byteLength !== bytes) {
      throw new Error(`internal: tensor '${name}' has ${t.data.byteLength} bytes, shape [${t.shape.join(', ')}] ${dtype} needs ${bytes}`);
    }
    header[name] = { dtype, shape: t.shape, data_offsets: [offset, offset + bytes] };
    chunks.push(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength));
    offset += bytes;
  }
  let json = JSON.stringify(header);
  const enc = new TextEncoder();
  const pad = (8 - (enc.encode(json).byteLength % 8)) % 8;
  json += ' '.repeat(pad);
  const hbytes = enc.encode(json);
  const out = new Uint8Array(8 + hbytes.byteLength + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(hbytes.byteLength), true);
  out.set(hbytes, 8);
  let pos = 8 + hbytes.byteLength;
  for (const c of chunks) {
    out.set(c, pos);
    pos += c.byteLength;
  }
  return out;
}

/** A Node Buffer as a plain Uint8Array view (no copy). */
export function asU8(b: Buffer | Uint8Array): Uint8Array {
  return new Uint8Array(b.buffer as ArrayBuffer, b.byteOffset, b.byteLength);
}

/** Parse and validate a safetensors buffer; `file` names the source in error messages. */
export function decodeSafetensors(buf: Uint8Array, file: string): StFile {
  const bad = (what: string) => new UserError(`${file}: error: not a valid safetensors file: ${what}`);
  if (buf.byteLength < 8) throw bad(`the file is ${buf.byteLength} bytes, shorter than the 8-byte header length (truncated?)`);
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const hlen = dv.getBigUint64(0, true);
  if (hlen > BigInt(buf.byteLength - 8) && buf.byteLength > 8 && buf[8] !== 0x7b) {
    // no '{' after the 8 length bytes either: not a cut-short safetensors file but another kind of file
    const zip = buf[0] === 0x50 && buf[1] === 0x4b;
    throw new UserError(
      `${file}: error: this is not a safetensors file (it does not start with an 8-byte header length and a JSON header)\n` +
        (zip
          ? `  help: it is a zip archive, as torch.save writes (.pt/.bin); convert it in Python: safetensors.torch.save_file(torch.load(path), "model.safetensors")`
          : `  help: give a .safetensors file written by mpsc train (a run folder's model.safetensors or a checkpoint) or by safetensors.torch.save_file`),
    );
  }
  if (hlen > BigInt(buf.byteLength - 8)) {
    throw bad(`the header length (${hlen} bytes) runs past the end of the file (${buf.byteLength} bytes; truncated?)`);
  }
  const n = Number(hlen);
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(buf.subarray(8, 8 + n)));
  } catch (e) {
    throw bad(`the header is not valid JSON (${(e as Error).message})`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) throw bad('the header is not a JSON object');
  const dataStart = 8 + n;
  const dataLen = buf.byteLength - dataStart;
  const tensors = new Map<string, StTensor>();
  let metadata: Record<string, string> = {};
  const ranges: { name: string; b: number; e: number }[] = [];
  for (const [name, raw] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw bad('__metadata__ is not an object');
      for (const [k, v] of Object.entries(raw)) {
        if (typeof v !== 'string') throw bad(`__metadata__ value '${k}' is not a string`);
      }
      metadata = raw as Record<string, string>;
      continue;
    }
    if (typeof raw !== 'object' || raw === null) throw bad(`tensor '${name}': entry is not an object`);
    const r = raw as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    if (typeof r.dtype !== 'string' || !(r.dtype in DTYPE_BYTES)) {
      throw bad(`tensor '${name}': unknown dtype ${JSON.stringify(r.dtype)} (known: ${Object.keys(DTYPE_BYTES).join(', ')})`);
    }
    if (!Array.isArray(r.shape) || !r.shape.every((d) => Number.isInteger(d) && d >= 0)) {
      throw bad(`tensor '${name}': shape ${JSON.stringify(r.shape)} is not a list of non-negative integers`);
    }
    const off = r.data_offsets;
    if (!Array.isArray(off) || off.length !== 2 || !off.every((d) => Number.isInteger(d) && d >= 0) || off[0] > off[1]) {
      throw bad(`tensor '${name}': data_offsets ${JSON.stringify(off)} is not [begin, end] with 0 <= begin <= end`);
    }
    const dtype = r.dtype as StDType;
    const shape = r.shape as number[];
    const [b, e] = off as number[];
    if (e > dataLen) throw bad(`tensor '${name}': data_offsets [${b}, ${e}] run past the end of the data (${dataLen} bytes; truncated?)`);
    const want = numelOf(shape) * DTYPE_BYTES[dtype];
    if (e - b !== want) throw bad(`tensor '${name}': shape [${shape.join(', ')}] ${dtype} needs ${want} bytes but data_offsets give ${e - b}`);
    ranges.push({ name, b, e });
    tensors.set(name, { dtype, shape: [...shape], data: new Uint8Array(buf.buffer, buf.byteOffset + dataStart + b, e - b) });
  }
  ranges.sort((x, y) => x.b - y.b || x.e - y.e);
  for (let i = 1; i < ranges.length; i++) {
    if (ranges[i].b < ranges[i - 1].e) throw bad(`tensors '${ranges[i - 1].name}' and '${ranges[i].name}' have overlapping data ranges`);
  }
  return { tensors, metadata };
}

export function readSafetensors(file: string): StFile {
  let buf: Buffer;
  try {
    buf = fs.readFileSync(file);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code === 'ENOENT') throw new UserError(`${file}: error: file not found`);
    throw new UserError(`${file}: error: cannot read the file (${err.message})`);
  }
  return decodeSafetensors(asU8(buf), file);
}

/** Copy raw little-endian bytes into an aligned typed array of their own. */
function aligned(t: StTensor): ArrayBuffer {
  const ab = new ArrayBuffer(t.data.byteLength);
  new Uint8Array(ab).set(t.data);
  return ab;
}

/** the value of IEEE binary16 bits `h` */
export function halfToFloat(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/** Tensor values as float32 (converting from any float or integer dtype). */
export function tensorToF32(t: StTensor): Float32Array {
  const ab = aligned(t);
  switch (t.dtype) {
    case 'F32':
      return new Float32Array(ab);
    case 'F64':
      return Float32Array.from(new Float64Array(ab));
    case 'F16':
      return Float32Array.from(new Uint16Array(ab), halfToFloat);
    case 'BF16': {
      const u = new Uint16Array(ab);
      const out = new Uint32Array(u.length);
      for (let i = 0; i < u.length; i++) out[i] = u[i] << 16;
      return new Float32Array(out.buffer);
    }
    case 'I64':
      return Float32Array.from(new BigInt64Array(ab), (v) => Number(v));
    case 'I32':
      return Float32Array.from(new Int32Array(ab));
    case 'I16':
      return Float32Array.from(new Int16Array(ab));
    case 'I8':
      return Float32Array.from(new Int8Array(ab));
    case 'U8':
    case 'BOOL':
      return Float32Array.from(new Uint8Array(ab));
  }
}

/** Tensor values as float64 numbers (exact for every dtype except I64 beyond 2^53). */
export function tensorToF64(t: StTensor): Float64Array {
  if (t.dtype === 'F64') return new Float64Array(aligned(t));
  if (t.dtype === 'I64') return Float64Array.from(new BigInt64Array(aligned(t)), (v) => Number(v));
  if (t.dtype === 'I32') return Float64Array.from(new Int32Array(aligned(t)));
  return Float64Array.from(tensorToF32(t));
}

export function isFloatDType(d: StDType): boolean {
  return d === 'F64' || d === 'F32' || d === 'F16' || d === 'BF16';
}
