import { describe, it, expect } from 'vitest';
import { decodeSafetensors, encodeSafetensors, tensorToF32 } from '../runtime/safetensors.js';
import { UserError } from '../compiler/errors.js';

/** Build a file from a hand-written header (for lying headers). */
function raw(header: unknown, data: Uint8Array, hlenOverride?: number): Uint8Array {
  const h = new TextEncoder().encode(JSON.stringify(header));
  const out = new Uint8Array(8 + h.length + data.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(hlenOverride ?? h.length), true);
  out.set(h, 8);
  out.set(data, 8 + h.length);
  return out;
}
function fails(buf: Uint8Array, ...parts: string[]): void {
  let err: unknown;
  try {
    decodeSafetensors(buf, 'bad.safetensors');
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(UserError);
  expect((err as Error).message).toContain('bad.safetensors');
  for (const p of parts) expect((err as Error).message).toContain(p);
}

describe('safetensors writer/reader', () => {
  it('round trips F32, I32, I64, scalars and metadata; header is 8-byte aligned', () => {
    const buf = encodeSafetensors(
      {
        'b.weight': { shape: [2, 3], data: Float32Array.of(1, -2, 3.5, 4, 5, 6e-8) },
        a: { shape: [], data: BigInt64Array.of(42n) },
        c: { shape: [2], data: Int32Array.of(-7, 9) },
      },
      { step: '3' },
    );
    const hlen = Number(new DataView(buf.buffer).getBigUint64(0, true));
    expect(hlen % 8).toBe(0);
    const f = decodeSafetensors(buf, 'x');
    expect(f.metadata).toEqual({ step: '3' });
    expect([...f.tensors.keys()]).toEqual(['a', 'b.weight', 'c']);
    expect(f.tensors.get('b.weight')!.dtype).toBe('F32');
    expect([...tensorToF32(f.tensors.get('b.weight')!)]).toEqual([...Float32Array.of(1, -2, 3.5, 4, 5, 6e-8)]);
    expect(f.tensors.get('a')!.dtype).toBe('I64');
    expect(f.tensors.get('a')!.shape).toEqual([]);
    expect([...tensorToF32(f.tensors.get('a')!)]).toEqual([42]);
    expect([...tensorToF32(f.tensors.get('c')!)]).toEqual([-7, 9]);
  });
  it('converts F16 / BF16 / F64', () => {
    const f16 = new Uint16Array([0x3c00, 0xc000, 0x3555]); // 1, -2, ~0.3333
    const bf16 = new Uint16Array([0x3f80, 0xc040]); // 1, -3
    const f = decodeSafetensors(
      raw(
        {
          h: { dtype: 'F16', shape: [3], data_offsets: [0, 6] },
          b: { dtype: 'BF16', shape: [2], data_offsets: [6, 10] },
          d: { dtype: 'F64', shape: [1], data_offsets: [10, 18] },
        },
        new Uint8Array([...new Uint8Array(f16.buffer), ...new Uint8Array(bf16.buffer), ...new Uint8Array(Float64Array.of(0.25).buffer)]),
      ),
      'x',
    );
    const h = tensorToF32(f.tensors.get('h')!);
    expect(h[0]).toBe(1);
    expect(h[1]).toBe(-2);
    expect(h[2]).toBeCloseTo(1 / 3, 3);
    expect([...tensorToF32(f.tensors.get('b')!)]).toEqual([1, -3]);
    expect([...tensorToF32(f.tensors.get('d')!)]).toEqual([0.25]);
  });
  it('rejects lying headers with clear errors naming the file', () => {
    const d = new Uint8Array(16);
    fails(new Uint8Array(5), 'shorter than the 8-byte header length');
    fails(raw({}, d, 10_000), 'header length (10000 bytes) runs past the end');
    fails(raw({ t: { dtype: 'F32', shape: [4], data_offsets: [0, 32] } }, d), "tensor 't'", 'past the end of the data');
    fails(raw({ t: { dtype: 'F32', shape: [3], data_offsets: [0, 16] } }, d), "tensor 't'", 'needs 12 bytes but data_offsets give 16');
    fails(raw({ t: { dtype: 'Q7', shape: [4], data_offsets: [0, 16] } }, d), 'unknown dtype "Q7"');
    fails(
      raw({ a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] }, b: { dtype: 'F32', shape: [2], data_offsets: [4, 12] } }, d),
      "'a' and 'b' have overlapping data ranges",
    );
    fails(raw({ t: { dtype: 'F32', shape: [-1], data_offsets: [0, 4] } }, d), 'not a list of non-negative integers');
    fails(raw({ t: { dtype: 'F32', shape: [1], data_offsets: [8, 4] } }, d), 'data_offsets');
    fails(raw({ __metadata__: { a: 1 } }, d), "__metadata__ value 'a' is not a string");
    const notJson = raw({}, d);
    notJson[8] = 0x41;
    fails(notJson, 'not valid JSON');
  });
  it('another kind of file (text, a torch.save zip) is "not a safetensors file", not "truncated?"', () => {
    const text = new TextEncoder().encode('the quick brown fox jumps over the lazy dog\n'.repeat(4));
    fails(text, 'bad.safetensors: error: this is not a safetensors file', 'written by mpsc train');
    const zip = new Uint8Array(64);
    zip.set([0x50, 0x4b, 0x03, 0x04, 0x14, 0, 0, 0, 0x08]);
    fails(zip, 'this is not a safetensors file', 'torch.save', 'safetensors.torch.save_file');
    // a real header cut short still reads as truncated
    fails(raw({}, new Uint8Array(16), 10_000), 'header length (10000 bytes) runs past the end', 'truncated?');
  });
});
