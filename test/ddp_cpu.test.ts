/**
 * Data-parallel training on the host (issue 18): `mpsc train --ranks N` (runtime/ddp: the launcher,
 * its store's all-reduce, the trainer's rank hooks) in child processes, as a user runs it.
 *  - N = 2 on --device cpu equals N = 1 with the same global batch (losses per step, final weights)
 *    within float tolerance; only rank 0 writes (one metrics line per step, one checkpoint folder);
 *  - grad_accum and an odd N (3) on the reference device; --resume with a different N;
 *  - a rank killed mid-run: the others stop within seconds, the launcher says which rank died, exit 1;
 *  - SIGINT (and SIGTERM) to the launcher: one agreed stop, rank 0's checkpoint, exit 130 (143), and the run resumes;
 *  - the user errors of --ranks / --gpus (batch not divisible, wrong device, no GPU here), and batch
 *    norm: per-replica statistics train, sync_batchnorm: true is refused.
 */
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readCheckpointFile } from '../runtime/checkpoint.js';
import { FRAME, FrameReader, REDUCE_OP, encodeFrame, reduceInRankOrder, reducePayload, reduceValues } from '../runtime/ddp/wire.js';

const ROOT = path.resolve(__dirname, '..');
const BIN = path.join(ROOT, 'bin', 'mpsc.js');
let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-ddp-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function mpsc(...args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [BIN, ...args], { cwd: dir, encoding: 'utf8', timeout: 240_000, env: { ...process.env, CI: '1' } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const MLP = `model ddp_mlp
input x: f32[N, 6]
input label: i32[N]
network {
  logits = x -> linear(16) as fc1 -> relu -> linear(3) as fc2
}
loss cross_entropy(logits, label)
metrics accuracy(logits, label)
optimizer adam(lr: 0.01)
train { data: synthetic(train_size: 120, test_size: 30, seed: 4), epochs: 1, batch: 12, grad_clip: 1.0 }
`;
let spec: string;
beforeAll(() => {
  spec = path.join(dir, 'ddp_mlp.model');
  fs.writeFileSync(spec, MLP);
});

const trainLosses = (file: string) =>
  fs.readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l)).filter((l) => l.split === 'train').map((l) => [l.step, l.loss] as [number, number]);

function weights(file: string): Map<string, Float32Array> {
  const st = readCheckpointFile(file);
  const out = new Map<string, Float32Array>();
  for (const [k, t] of st.tensors) if (t.dtype === 'F32') out.set(k, new Float32Array(t.data.slice().buffer));
  return out;
}

function expectClose(a: [number, number][], b: [number, number][], rel: number): void {
  expect(b.map((x) => x[0])).toEqual(a.map((x) => x[0]));
  for (let i = 0; i < a.length; i++) expect(Math.abs(a[i][1] - b[i][1]), `step ${a[i][0]}: ${a[i][1]} vs ${b[i][1]}`).toBeLessThanOrEqual(rel * Math.abs(a[i][1]));
}

describe('runtime/ddp/wire.ts', () => {
  it('frames survive any split of the byte stream; payloads round-trip', () => {
    const big = reducePayload(REDUCE_OP.AVG_F32, Float32Array.from({ length: 50_000 }, (_, i) => i * 0.5));
    const bytes = Buffer.concat([encodeFrame(FRAME.REDUCE, 7, big), encodeFrame(FRAME.BCAST, 8, Uint8Array.of(1, 2, 3)), encodeFrame(FRAME.ABORT, 0, new Uint8Array(0))]);
    for (const step of [1, 3, 4, 9, 777, bytes.length]) {
      const r = new FrameReader();
      const got = [];
      for (let i = 0; i < bytes.length; i += step) got.push(...r.push(bytes.subarray(i, i + step)));
      expect(got.map((f) => [f.type, f.seq, f.payload.length])).toEqual([[FRAME.REDUCE, 7, big.length], [FRAME.BCAST, 8, 3], [FRAME.ABORT, 0, 0]]);
      const v = reduceValues(got[0].payload);
      expect(v.op).toBe(REDUCE_OP.AVG_F32);
      expect(v.values[49_999]).toBe(49_999 * 0.5);
    }
  });

  it('reductions: rank order in float64, one result for every rank; max passes NaN', () => {
    const parts = [Float32Array.of(1e8, 1, 0.1), Float32Array.of(1, -1e8, 0.2), Float32Array.of(-1e8, 1e8, 0.3)];
    const avg = reduceInRankOrder(REDUCE_OP.AVG_F32, parts);
    expect(avg).toBeInstanceOf(Float32Array);
    // float64 sums keep the small terms a float32 sum would drop
    expect(Array.from(avg)).toEqual(Array.from(Float32Array.of(1 / 3, 1 / 3, (Math.fround(0.1) + Math.fround(0.2) + Math.fround(0.3)) / 3)));
    expect(Array.from(reduceInRankOrder(REDUCE_OP.AVG_F32, [Float32Array.of(0.1, -7)]))).toEqual(Array.from(Float32Array.of(0.1, -7))); // one rank: a copy
    expect(Array.from(reduceInRankOrder(REDUCE_OP.MAX_F64, [Float64Array.of(1, NaN, 0), Float64Array.of(2, 5, 0)]))).toEqual([2, NaN, 0]);
    expect(Array.from(reduceInRankOrder(REDUCE_OP.SUM_F64, [Float64Array.of(1, Infinity), Float64Array.of(2, 1)]))).toEqual([3, Infinity]);
  });
});

describe('mpsc train --ranks N', () => {
  it('--device cpu: N = 2 equals N = 1 at the same global batch (losses, final weights); only rank 0 writes', () => {
    const run = (tag: string, extra: string[]) => {
      const r = mpsc('train', spec, '--device', 'cpu', '--threads', '1', '--steps', '8', '--log-every', '1', '--seed', '3', '--run-dir', path.join(dir, tag), '--json', ...extra);
      expect(r.code, r.stderr).toBe(0);
      return { out: JSON.parse(r.stdout.trim()), stderr: r.stderr };
    };
    const one = run('one', []);
    const two = run('two', ['--ranks', '2']);
    expect(two.stderr).toContain('data-parallel: 2 ranks (--ranks), global batch 12 = 2 x 6');
    expect(two.stderr).not.toContain('[rank 1]'); // the other ranks print nothing
    const l1 = trainLosses(path.join(dir, 'one', 'metrics.jsonl'));
    const l2 = trainLosses(path.join(dir, 'two', 'metrics.jsonl'));
    expect(l1.length).toBe(8);
    expectClose(l1, l2, 1e-5);
    expect(two.out.test_loss).toBeCloseTo(one.out.test_loss, 4);
    const w1 = weights(one.out.checkpoint);
    const w2 = weights(two.out.checkpoint);
    // the data-parallel checkpoint also holds the gradient accumulators, zero after each update
    const extra = [...w2.keys()].filter((k) => !w1.has(k)).sort();
    expect(extra).toEqual(['fc1.bias.grad', 'fc1.weight.grad', 'fc2.bias.grad', 'fc2.weight.grad']);
    for (const k of extra) expect(w2.get(k)!.every((v) => v === 0)).toBe(true);
    let worst = 0;
    for (const [k, a] of w1) {
      const b = w2.get(k)!;
      for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
    }
    expect(worst).toBeLessThan(1e-5);
    // rank 0 alone wrote the run folder: exactly one checkpoint series, config says 8 steps once
    expect(fs.readdirSync(path.join(dir, 'two')).filter((f) => f.startsWith('checkpoint-'))).toEqual(['checkpoint-8.safetensors']);
    // either checkpoint resumes the other kind of run (one process <-> ranks)
    const r2 = mpsc('train', spec, '--device', 'cpu', '--threads', '1', '--steps', '10', '--log-every', '1', '--resume', two.out.checkpoint, '--run-dir', path.join(dir, 'two-on-one'));
    expect(r2.code, r2.stderr).toBe(0);
    const r1 = mpsc('train', spec, '--device', 'cpu', '--threads', '1', '--steps', '10', '--log-every', '1', '--resume', one.out.checkpoint, '--run-dir', path.join(dir, 'one-on-two'), '--ranks', '2');
    expect(r1.code, r1.stderr).toBe(0);
    expectClose(trainLosses(path.join(dir, 'two-on-one', 'metrics.jsonl')), trainLosses(path.join(dir, 'one-on-two', 'metrics.jsonl')), 1e-5);
  }, 300_000);

  it('reference: grad_accum 2 over 3 ranks equals 1 rank; --resume with a different N continues the same run', () => {
    const common = ['--device', 'reference', '--batch', '6', '--seed', '5', '--log-every', '1', '--set', 'train.grad_accum=2'];
    const r1 = mpsc('train', spec, ...common, '--steps', '8', '--run-dir', path.join(dir, 'acc1'));
    expect(r1.code, r1.stderr).toBe(0);
    const r3 = mpsc('train', spec, ...common, '--steps', '8', '--run-dir', path.join(dir, 'acc3'), '--ranks', '3');
    expect(r3.code, r3.stderr).toBe(0);
    const l1 = trainLosses(path.join(dir, 'acc1', 'metrics.jsonl'));
    expectClose(l1, trainLosses(path.join(dir, 'acc3', 'metrics.jsonl')), 1e-6);
    // the evaluation split over 3 ranks (15 eval batches of 2) gives the one-process test loss and accuracy
    const testLine = (d: string) => fs.readFileSync(path.join(dir, d, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l)).filter((l) => l.split === 'test').at(-1);
    expect(testLine('acc3').loss).toBeCloseTo(testLine('acc1').loss, 6);
    expect(testLine('acc3').accuracy).toBe(testLine('acc1').accuracy);
    // 4 steps on 2 ranks, then resumed on 3 ranks up to step 8: the losses of the uninterrupted run
    const a = mpsc('train', spec, ...common, '--steps', '4', '--run-dir', path.join(dir, 'res'), '--ranks', '2');
    expect(a.code, a.stderr).toBe(0);
    const b = mpsc('train', spec, ...common, '--steps', '8', '--resume', path.join(dir, 'res'), '--ranks', '3');
    expect(b.code, b.stderr).toBe(0);
    expect(b.stderr).toContain('resuming from');
    expectClose(l1, trainLosses(path.join(dir, 'res', 'metrics.jsonl')), 1e-6);
  }, 300_000);

  it('a rank killed mid-run: the others stop within seconds, the launcher names the rank, exit 1', async () => {
    const child = spawn(process.execPath, [BIN, 'train', spec, '--device', 'reference', '--ranks', '3', '--batch', '6', '--steps', '1000000', '--log-every', '1000', '--run-dir', path.join(dir, 'kill')], {
      cwd: dir,
      env: { ...process.env, CI: '1' },
    });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    // wait until training runs, then kill rank 1 (found by its RANK in /proc)
    const t0 = Date.now();
    while (!stderr.includes('training:') && Date.now() - t0 < 120_000) await new Promise((r) => setTimeout(r, 100));
    expect(stderr).toContain('training:');
    const kids = spawnSync('pgrep', ['-P', String(child.pid)], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean).map(Number);
    const rank1 = kids.find((p) => fs.readFileSync(`/proc/${p}/environ`, 'utf8').split('\0').includes('RANK=1'));
    expect(rank1).toBeDefined();
    const killedAt = Date.now();
    process.kill(rank1!, 'SIGKILL');
    const code = await exited;
    expect(Date.now() - killedAt).toBeLessThan(10_000);
    expect(code).toBe(1);
    expect(stderr).toContain('mpsc: rank 1 died (killed by SIGKILL); stopping the other ranks');
    expect(stderr).toMatch(/rank 0 stopped: rank 1 died/);
    for (const p of kids) expect(fs.existsSync(`/proc/${p}/environ`) && !fs.readFileSync(`/proc/${p}/stat`, 'utf8').includes(') Z ')).toBe(false);
  }, 180_000);

  // SIGTERM (a job scheduler's stop) is forwarded to the ranks as the first Ctrl-C: a graceful stop, exit 143
  for (const [sig, exitCode] of [['SIGINT', 130], ['SIGTERM', 143]] as const) {
    it(`${sig} to the launcher: the ranks stop at one step, rank 0 writes the checkpoint, exit ${exitCode}; the run resumes`, async () => {
      const runDir = path.join(dir, `int-${sig}`);
      const child = spawn(process.execPath, [BIN, 'train', spec, '--device', 'reference', '--ranks', '2', '--batch', '6', '--steps', '1000000', '--log-every', '1000', '--run-dir', runDir], {
        cwd: dir,
        env: { ...process.env, CI: '1' },
      });
      let stderr = '';
      let stdout = '';
      child.stderr.on('data', (d) => (stderr += d));
      child.stdout.on('data', (d) => (stdout += d));
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      const t0 = Date.now();
      while (!stderr.includes('training:') && Date.now() - t0 < 120_000) await new Promise((r) => setTimeout(r, 100));
      await new Promise((r) => setTimeout(r, 500));
      child.kill(sig);
      expect(await exited).toBe(exitCode);
      const m = stdout.match(/interrupted at step (\d+); checkpoint saved/);
      expect(m, stdout + stderr).not.toBeNull();
      expect(fs.existsSync(path.join(runDir, `checkpoint-${m![1]}.safetensors`))).toBe(true);
      expect(stderr).not.toContain('[rank 1]'); // rank 1 stopped quietly at the same step
      const r = mpsc('train', spec, '--device', 'reference', '--batch', '6', '--steps', String(Number(m![1]) + 2), '--resume', runDir, '--ranks', '2');
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).toContain(`resuming from ${path.join(runDir, `checkpoint-${m![1]}.safetensors`)}`);
    }, 180_000);
  }

  it('user errors: a batch that does not split, the wrong device for the flag, no GPU here', () => {
    const odd = mpsc('train', spec, '--device', 'reference', '--ranks', '5', '--steps', '1');
    expect(odd.code).toBe(1);
    expect(odd.stderr).toContain('batch 12 cannot be split over --ranks 5');
    expect(odd.stderr).toContain('help: use a batch that is a multiple of 5 (--batch 15');
    const both = mpsc('train', spec, '--ranks', '2', '--gpus', '2', '--steps', '1');
    expect(both.code).toBe(1);
    expect(both.stderr).toContain('give either --gpus');
    const cudaRanks = mpsc('train', spec, '--device', 'cuda', '--ranks', '2', '--steps', '1');
    expect(cudaRanks.code).toBe(1);
    expect(cudaRanks.stderr).toContain('on CUDA GPUs use --gpus N');
    const cpuGpus = mpsc('train', spec, '--device', 'cpu', '--gpus', '2', '--steps', '1');
    expect(cpuGpus.code).toBe(1);
    expect(cpuGpus.stderr).toContain('--gpus runs on CUDA GPUs, not --device cpu');
    const noGpu = mpsc('train', spec, '--gpus', '1', '--steps', '1');
    expect(noGpu.code).toBe(1);
    expect(noGpu.stderr).toMatch(/shows no CUDA GPU|built without NCCL/);
    // batch norm: per-replica statistics run; sync_batchnorm is refused with more than one rank
    const bn = path.join(ROOT, 'test', 'fixtures', 'train', 'bn_dropout.model');
    const per = mpsc('train', bn, '--device', 'reference', '--ranks', '2', '--steps', '2', '--run-dir', path.join(dir, 'bn'));
    expect(per.code, per.stderr).toBe(0);
    const sync = mpsc('train', bn, '--device', 'reference', '--ranks', '2', '--steps', '2', '--set', 'train.sync_batchnorm=true');
    expect(sync.code).toBe(1);
    expect(sync.stderr).toContain('sync_batchnorm: true is not supported yet');
    expect(sync.stderr).toContain('help: remove sync_batchnorm');
  }, 180_000);
});
