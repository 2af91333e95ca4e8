/**
 * Bad data (issue 7), end to end: every broken data file (CSV, IDX, safetensors) stops
 * `mpsc train` with a UserError that names the file and the problem, before anything is
 * compiled or trained (no 'start' / 'step' event, no checkpoint folder); a few also through the
 * real CLI (exit 1, no stack trace). The data loaders' own unit tests are test/data_*.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkFile } from '../compiler/check/index.js';
import { UserError } from '../compiler/errors.js';
import { train, type TrainEvent } from '../runtime/trainer.js';
import { CASES, SPECS } from './fixtures/reliability/bad_data.js';
import { runMpsc } from './fixtures/reliability/proc.js';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-baddata-'));
afterAll(() => fs.rmSync(TMP, { recursive: true, force: true }));

function setup(i: number): { dir: string; spec: string } {
  const c = CASES[i];
  const dir = path.join(TMP, `case${i}`);
  fs.mkdirSync(dir, { recursive: true });
  c.write(dir);
  const spec = path.join(dir, 'bad.model');
  fs.writeFileSync(spec, (c.spec === 'mnist' ? SPECS.mnist : SPECS.csv)(c.data));
  return { dir, spec };
}

describe('bad data files are refused before training, naming the file and the problem', () => {
  CASES.forEach((c, i) => {
    it(c.name, async () => {
      const { dir, spec } = setup(i);
      const events: TrainEvent['kind'][] = [];
      let err: unknown = null;
      try {
        await train(checkFile(spec), { device: 'cpu', checkpointDir: path.join(dir, 'ck'), onEvent: (e) => events.push(e.kind) });
      } catch (e) {
        err = e;
      }
      expect(err, 'training was not refused').toBeInstanceOf(UserError);
      const msg = (err as Error).message;
      if (process.env.MPSC_SHOW_MESSAGES) console.log(`--- ${c.name}\n${msg}`);
      expect(msg, msg).toContain(path.join(dir, c.file));
      expect(msg, msg).toMatch(c.problem);
      expect(events.filter((k) => k === 'start' || k === 'step' || k === 'checkpoint')).toEqual([]);
      expect(fs.existsSync(path.join(dir, 'ck'))).toBe(false);
    }, 60_000);
  });
});

describe('through the CLI', () => {
  it('exit 1 with the message and no stack trace (4 cases)', async () => {
    const picks = ['csv: ragged row', 'idx: wrong image magic', 'st: overlapping ranges', 'st: header length beyond the file'].map((n) => CASES.findIndex((c) => c.name === n));
    expect(picks.every((i) => i >= 0)).toBe(true);
    const runs = await Promise.all(
      picks.map(async (i) => {
        const { dir, spec } = setup(i);
        return { c: CASES[i], dir, r: await runMpsc(['train', spec, '--device', 'cpu', '--checkpoint-dir', path.join(dir, 'ck-cli')], dir) };
      }),
    );
    for (const { c, dir, r } of runs) {
      expect(r.code, `${c.name}\n${r.stderr}`).toBe(1);
      expect(r.stderr).toContain(path.join(dir, c.file));
      expect(r.stderr).toMatch(c.problem);
      expect(r.stderr).not.toMatch(/internal error|^\s+at /m);
      expect(r.stderr).not.toMatch(/^training:|^step \d/m);
    }
  }, 300_000);
});
