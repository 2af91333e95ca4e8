import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { UserError } from '../compiler/errors.js';
import { buildPrograms } from '../compiler/ir/programs.js';
import { createReferenceSession } from '../runtime/reference_session.js';
import {
  batchnormLayers,
  listCheckpoints,
  loadIntoSession,
  metadataToInfo,
  pruneCheckpoints,
  readCheckpointFile,
  resolveCheckpoint,
  saveCheckpoint,
  type CheckpointInfo,
} from '../runtime/checkpoint.js';
import type { Session } from '../runtime/session.js';
import { tinyClassifier } from './fixtures/train/models.js';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-ckpt-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** An independent minimal safetensors parser (does not share code with runtime/safetensors.ts). */
function parseIndependently(file: string): { header: Record<string, any>; data: Buffer } {
  const b = fs.readFileSync(file);
  const n = Number(b.readBigUInt64LE(0));
  const header = JSON.parse(b.subarray(8, 8 + n).toString('utf8'));
  return { header, data: b.subarray(8 + n) };
}
function f32At(data: Buffer, [b, e]: [number, number]): number[] {
  const out: number[] = [];
  for (let o = b; o < e; o += 4) out.push(data.readFloatLE(o));
  return out;
}

const model = tinyClassifier({ features: [4], classes: 3, data: { kind: 'synthetic', train_size: 64, test_size: 16, seed: 1 }, batch: 8 });
// the same model as seen by checkpoint code, with a batchnorm layer's running stats declared (num_batches_tracked)
const withBn = {
  ...model,
  params: [...model.params, { path: 'bn0.running_mean', value: 0, shape: [3], kind: 'state' as const, init: { kind: 'zeros' as const }, layer: 'bn0', layerType: 'batchnorm' }],
};
const info = (step: number): CheckpointInfo => ({
  step,
  epoch: 1,
  batchInEpoch: 3,
  counter: 11,
  model: 'tiny',
  specHash: model.sourceHash,
  dataSha256: 'd'.repeat(64),
  seed: 5,
  totalSteps: 100,
  batch: 8,
  gradAccum: 1,
  shuffle: true,
  dropLast: false,
  device: 'reference',
});

async function session(): Promise<Session> {
  const s = await createReferenceSession(buildPrograms(model, { batch: 8 }));
  for (const n of s.tensorNames()) {
    const len = s.tensorShape(n).reduce((a, b) => a * b, 1);
    s.write(n, Float32Array.from({ length: len }, (_, i) => (i + 1) * 0.25 * (n.length % 7) - 1.5));
  }
  return s;
}

describe('checkpoint files', () => {
  it('an independent parser reads names, shapes, dtypes, values and metadata', async () => {
    const s = await session();
    const f = path.join(dir, 'indep', 'checkpoint-7.safetensors');
    saveCheckpoint(f, s, withBn, info(7));
    const { header, data } = parseIndependently(f);
    const names = Object.keys(header).filter((k) => k !== '__metadata__').sort();
    expect(names).toEqual(['bn0.num_batches_tracked', ...s.tensorNames()].sort());
    expect(names).toContain('fc.weight');
    expect(names).toContain('fc.weight.momentum_buffer');
    for (const n of s.tensorNames()) {
      expect(header[n].dtype).toBe('F32');
      expect(header[n].shape).toEqual(s.tensorShape(n));
      expect(f32At(data, header[n].data_offsets)).toEqual([...s.read(n)]);
    }
    expect(header['fc.weight'].shape).toEqual([3, 4]);
    const nbt = header['bn0.num_batches_tracked'];
    expect(nbt.dtype).toBe('I64');
    expect(nbt.shape).toEqual([]);
    expect(Number(data.readBigInt64LE(nbt.data_offsets[0]))).toBe(11);
    const md = header.__metadata__;
    expect(md.step).toBe('7');
    expect(md.spec_hash).toBe(model.sourceHash);
    expect(md.seed).toBe('5');
    expect(md.counter).toBe('11');
    expect(typeof md.tensors_sha256).toBe('string');
    expect(metadataToInfo(readCheckpointFile(f).metadata, f)).toEqual({ ...info(7), trainSeconds: 0 });
    expect(batchnormLayers(withBn)).toEqual(['bn0']);
    s.close();
  });

  it('Python (stdlib json + struct, no mpsc code) reads the same names, shapes, dtypes and values', async () => {
    const s = await session();
    const f = path.join(dir, 'py', 'checkpoint-3.safetensors');
    saveCheckpoint(f, s, withBn, info(3));
    const py = [
      'import json, struct, sys',
      'b = open(sys.argv[1], "rb").read()',
      'n = struct.unpack("<Q", b[:8])[0]',
      'h = json.loads(b[8:8 + n])',
      'd = b[8 + n:]',
      'out = {}',
      'ends = 0',
      'for k, v in h.items():',
      '    if k == "__metadata__": continue',
      '    s, e = v["data_offsets"]',
      '    ends = max(ends, e)',
      '    fmt = {"F32": "f", "I64": "q"}[v["dtype"]]',
      '    out[k] = {"dtype": v["dtype"], "shape": v["shape"], "values": list(struct.unpack("<%d%s" % ((e - s) // struct.calcsize(fmt), fmt), d[s:e]))}',
      'assert ends == len(d), "data block not fully covered"',
      'print(json.dumps({"tensors": out, "metadata": h["__metadata__"]}))',
    ].join('\n');
    const r = spawnSync('python3', ['-c', py, f], { encoding: 'utf8' });
    if (r.error) return; // no python3 on this machine: the TypeScript parser above still checks the format
    expect(r.stderr).toBe('');
    const got = JSON.parse(r.stdout) as { tensors: Record<string, { dtype: string; shape: number[]; values: number[] }>; metadata: Record<string, string> };
    expect(Object.keys(got.tensors).sort()).toEqual(['bn0.num_batches_tracked', ...s.tensorNames()].sort());
    for (const n of s.tensorNames()) {
      expect(got.tensors[n].dtype).toBe('F32');
      expect(got.tensors[n].shape).toEqual(s.tensorShape(n));
      expect(got.tensors[n].values).toEqual([...s.read(n)]);
    }
    expect(got.tensors['bn0.num_batches_tracked']).toEqual({ dtype: 'I64', shape: [], values: [11] });
    expect(got.metadata.step).toBe('3');
    s.close();
  });

  it('a leftover temp file is ignored; a truncated newest checkpoint is reported and the previous one loads', async () => {
    const s = await session();
    const d = path.join(dir, 'atomic');
    saveCheckpoint(path.join(d, 'checkpoint-10.safetensors'), s, model, info(10));
    saveCheckpoint(path.join(d, 'checkpoint-20.safetensors'), s, model, info(20));
    fs.writeFileSync(path.join(d, '.checkpoint-30.safetensors.tmp-123-456'), 'partial');
    expect(fs.readdirSync(d).filter((f) => f.includes('tmp')).length).toBe(1);
    expect(listCheckpoints(d).map((c) => c.step)).toEqual([20, 10]);
    expect(resolveCheckpoint(d)).toBe(path.join(d, 'checkpoint-20.safetensors'));
    // truncate the newest
    const f20 = path.join(d, 'checkpoint-20.safetensors');
    const bytes = fs.readFileSync(f20);
    fs.writeFileSync(f20, new Uint8Array(bytes).subarray(0, bytes.length - 10));
    expect(() => readCheckpointFile(f20)).toThrowError(/checkpoint-20\.safetensors.*(truncated|past the end)/);
    const notes: string[] = [];
    expect(resolveCheckpoint(d, notes)).toBe(path.join(d, 'checkpoint-10.safetensors'));
    expect(notes.join('\n')).toContain('checkpoint-20.safetensors');
    // the previous one still loads into a session
    const st = readCheckpointFile(path.join(d, 'checkpoint-10.safetensors'));
    loadIntoSession(s, st, 'x', { required: new Set(s.tensorNames()), purpose: '--resume' });
    s.close();
  });

  it('a flipped data byte is detected by the checksum', async () => {
    const s = await session();
    const f = path.join(dir, 'corrupt.safetensors');
    saveCheckpoint(f, s, model, info(1));
    const b = new Uint8Array(fs.readFileSync(f));
    b[b.length - 3] ^= 0x40;
    fs.writeFileSync(f, b);
    expect(() => readCheckpointFile(f)).toThrowError(/corrupt\.safetensors.*corrupt/);
    s.close();
  });

  it('keeps only the newest checkpoints', async () => {
    const s = await session();
    const d = path.join(dir, 'prune');
    for (const step of [1, 2, 3, 4, 5]) saveCheckpoint(path.join(d, `checkpoint-${step}.safetensors`), s, model, info(step));
    pruneCheckpoints(d, 2);
    expect(listCheckpoints(d).map((c) => c.step)).toEqual([5, 4]);
    s.close();
  });

  it('removes the temporary files of dead writers, never those of a live one', () => {
    const d = path.join(dir, 'prune-tmp');
    fs.mkdirSync(d, { recursive: true });
    const dead = spawnSync(process.execPath, ['-e', '0']).pid!; // exited before we look
    const deadTmp = `.checkpoint-7.safetensors.tmp-${dead}-1700000000000`;
    const liveTmp = `.checkpoint-8.safetensors.tmp-${process.pid}-1700000000001`;
    fs.writeFileSync(path.join(d, deadTmp), 'partial');
    fs.writeFileSync(path.join(d, liveTmp), 'partial');
    pruneCheckpoints(d, 3);
    expect(fs.readdirSync(d).sort()).toEqual([liveTmp]);
  });

  it('loading lists every mismatching tensor in one error', async () => {
    const s = await session();
    const other = tinyClassifier({ features: [5], classes: 3, data: model.train.data, batch: 8 });
    const s2 = await createReferenceSession(buildPrograms(other, { batch: 8 }));
    const f = path.join(dir, 'other.safetensors');
    saveCheckpoint(f, s2, other, info(1));
    let err: unknown;
    try {
      loadIntoSession(s, readCheckpointFile(f), f, { required: new Set(['fc.weight', 'fc.bias', 'extra.weight']), purpose: '--init-from' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(UserError);
    const msg = (err as Error).message;
    expect(msg).toContain('other.safetensors');
    expect(msg).toContain('fc.weight: file has [3, 5], model needs [3, 4]');
    expect(msg).toContain('fc.weight.momentum_buffer: file has [3, 5]');
    expect(msg).toContain('extra.weight');
    s.close();
    s2.close();
  });
});
