/**
 * The trainer's readback policy on an asynchronous device (runtime/trainer.ts): on cuda a train
 * step's outputs are read (Session.run with read true, which waits for the GPU) only at logged,
 * evaluated and checkpointed steps; between them run() is called with read false. Checked with the
 * reference session presented as 'cuda' (openSession mocked), so no GPU is needed: which steps
 * read, that logged losses are the real ones, and that the NaN check still stops the run.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { ProgramSet } from '../compiler/ir/graph.js';
import type { RunOptions, Session } from '../runtime/session.js';
import { UserError } from '../compiler/errors.js';
import { tinyClassifier } from './fixtures/train/models.js';

/** train_step calls: [step (1-based, counted per call), read flag] */
const calls: { step: number; read: boolean }[] = [];
vi.mock('../runtime/device.js', async (orig) => {
  const real = await orig<typeof import('../runtime/device.js')>();
  const { createReferenceSession } = await import('../runtime/reference_session.js');
  return {
    ...real,
    openSession: async (_device: string, programs: ProgramSet) => {
      const inner = await createReferenceSession(programs);
      const session: Session = {
        ...inner,
        device: 'cuda',
        run(program, inputs, scalars, opts?: RunOptions) {
          if (program === 'train_step') calls.push({ step: scalars.t, read: opts?.read !== false });
          const out = inner.run(program, inputs, scalars);
          return opts?.read === false ? out.map(() => NaN) : out;
        },
      };
      return { session, device: 'cuda', note: 'device: cuda (mocked: the reference session)' };
    },
  };
});
const { train } = await import('../runtime/trainer.js');

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-deferred-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const tiny = (o = {}) => tinyClassifier({ features: [6], classes: 3, data: { kind: 'synthetic', train_size: 100, test_size: 37, seed: 4 }, batch: 8, ...o });

describe('trainer readback on an asynchronous device (cuda)', () => {
  it('reads a step\'s outputs only when it is logged, evaluated or checkpointed; logged losses are finite', async () => {
    calls.length = 0;
    const f = path.join(dir, 'metrics.jsonl');
    // 13 steps per epoch (100 samples, batch 8): epoch ends at 13 and 26 evaluate and checkpoint
    await train(tiny(), { device: 'cuda', checkpointDir: path.join(dir, 'a'), steps: 30, logEvery: 10, metricsFile: f });
    const read = calls.filter((c) => c.read).map((c) => c.step);
    expect(read).toEqual([1, 10, 13, 20, 26, 30]);
    expect(calls.filter((c) => !c.read)).toHaveLength(30 - read.length);
    const logged = fs.readFileSync(f, 'utf8').trim().split('\n').map((l) => JSON.parse(l)).filter((l) => l.split === 'train');
    expect(logged.map((l) => l.step)).toEqual([1, 10, 20, 30]);
    for (const l of logged) expect(Number.isFinite(l.loss)).toBe(true);
  });

  it('still stops on a NaN loss, at the first step it reads', async () => {
    calls.length = 0;
    const m = tiny({ optimizer: { kind: 'sgd', lr: 1, momentum: 0, nesterov: false, weight_decay: -1e100 } });
    const err = await train(m, { device: 'cuda', checkpointDir: path.join(dir, 'nan'), steps: 30, logEvery: 10 }).catch((e) => e);
    expect(err).toBeInstanceOf(UserError);
    const at = Number(/at step (\d+)/.exec((err as Error).message)![1]);
    expect(calls.filter((c) => c.read).map((c) => c.step)).toContain(at);
  });
});
