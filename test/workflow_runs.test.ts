// Issue 16, the daily workflow: run folders, checkpoint retention, best / weights-only files,
// --resume of runs, --set overrides, validation split and early stopping, and the bugs a new
// user hit (checkpoint paths that did not exist, eval on a folder, build --device).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { decodeSafetensors, encodeSafetensors, asU8 } from '../runtime/safetensors.js';
import { lastPerKey } from '../cli/train.js';
import { physicalCoresFromCpuinfo } from '../runtime/threads.js';
import { evalTailBatch, train } from '../runtime/trainer.js';
import { tinyClassifier } from './fixtures/train/models.js';
import { runIdFor } from '../runtime/run_folder.js';
import { checkFile, checkSource } from '../compiler/check/index.js';
import { parseSetArg } from '../compiler/check/overrides.js';

const ROOT = path.resolve(__dirname, '..');
const BIN = path.join(ROOT, 'bin', 'mpsc.js');
const TINY = path.join(ROOT, 'test', 'fixtures', 'train', 'tiny.model');
const BN = path.join(ROOT, 'test', 'fixtures', 'train', 'bn_dropout.model');
let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mpsc-wf-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function mpsc(cwd: string, ...args: string[]): { code: number | null; stdout: string; stderr: string } {
  fs.mkdirSync(cwd, { recursive: true });
  const r = spawnSync(process.execPath, [BIN, ...args], { cwd, encoding: 'utf8', timeout: 120_000, env: { ...process.env, CI: '1' } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}
function json(r: { code: number | null; stdout: string; stderr: string }): any {
  expect(r.stderr.includes('internal error') ? r.stderr : '').toBe('');
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!);
}
function stNames(file: string): string[] {
  return [...decodeSafetensors(asU8(fs.readFileSync(file)), file).tensors.keys()].sort();
}
const lines = (f: string) => fs.readFileSync(f, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
/** the tiny fixture with text replacements ([from, to] pairs), written as `cwd/name`; returns its path */
function tinyVariant(cwd: string, name: string, edits: [string, string][]): string {
  const spec = path.resolve(cwd, name);
  fs.mkdirSync(cwd, { recursive: true });
  fs.writeFileSync(spec, edits.reduce((text, [from, to]) => text.replace(from, to), fs.readFileSync(TINY, 'utf8')));
  return spec;
}

describe('run folders and checkpoints', () => {
  it('issue 16 bug 1: a 5-epoch run then a 1-epoch run each print checkpoint paths that exist, in their own folders; eval and --resume use the right run', () => {
    const cwd = path.join(dir, 'bug1');
    const a = json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--epochs', '5', '--json'));
    const b = json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--epochs', '1', '--json'));
    expect(a.steps).toBe(65);
    expect(b.steps).toBe(13);
    expect(a.run_dir).not.toBe(b.run_dir);
    for (const r of [a, b]) {
      for (const f of [r.checkpoint, r.weights, r.best.file]) expect(fs.existsSync(path.resolve(cwd, f))).toBe(true);
      expect(path.dirname(r.checkpoint)).toBe(r.run_dir);
    }
    expect(b.checkpoint).toBe(path.join(b.run_dir, 'checkpoint-13.safetensors'));
    expect(fs.readdirSync(path.resolve(cwd, b.run_dir)).filter((f) => f.startsWith('checkpoint-'))).toEqual(['checkpoint-13.safetensors']);
    // the default --keep 3: the first run keeps its three newest
    expect(fs.readdirSync(path.resolve(cwd, a.run_dir)).filter((f) => f.startsWith('checkpoint-')).sort()).toEqual(['checkpoint-39.safetensors', 'checkpoint-52.safetensors', 'checkpoint-65.safetensors']);
    // the printed path works with eval; latest is the second run
    const e = json(mpsc(cwd, 'eval', TINY, '--weights', b.checkpoint, '--device', 'reference', '--json'));
    expect(e.test_loss).toBeCloseTo(b.test_loss, 5);
    expect(fs.realpathSync(path.resolve(cwd, 'runs', 'tiny', 'latest'))).toBe(fs.realpathSync(path.resolve(cwd, b.run_dir)));
    // --resume of the first run's folder continues the first run (step 65), in its folder
    const r = json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--resume', a.run_dir, '--epochs', '6', '--json'));
    expect(r.steps).toBe(78);
    expect(r.run_dir).toBe(a.run_dir);
    expect(r.checkpoint).toBe(path.join(a.run_dir, 'checkpoint-78.safetensors'));
    const m = lines(path.resolve(cwd, a.run_dir, 'metrics.jsonl'));
    expect(m.filter((l) => l.split === 'test').map((l) => l.step)).toEqual([13, 26, 39, 52, 65, 78]);
    // train.log: the first run's console, then the resumed part's (with --json the summary is the JSON line)
    const log = fs.readFileSync(path.resolve(cwd, a.run_dir, 'train.log'), 'utf8');
    expect(log).toContain(`"checkpoint":"${a.checkpoint}"`);
    expect(log).toContain(`"checkpoint":"${r.checkpoint}"`);
    expect(log.indexOf('step 65/65')).toBeLessThan(log.indexOf('step 78/78'));
  });

  it('run folder contents: config.json, metrics.jsonl (split, 1-based epochs), train.log, --keep, model.safetensors with torch names only; eval/--resume accept latest', () => {
    const cwd = path.join(dir, 'contents');
    const r = json(mpsc(cwd, 'train', BN, '--device', 'reference', '--keep', '2', '--log-every', '5', '--set', 'optimizer.lr=0.02', '--batch', '10', '--json'));
    const rd = path.resolve(cwd, r.run_dir);
    expect(path.basename(rd)).toMatch(/^\d{8}-\d{6}$/);
    const files = fs.readdirSync(rd).sort();
    expect(files).toEqual(['best.safetensors', 'checkpoint-20.safetensors', 'checkpoint-30.safetensors', 'config.json', 'metrics.jsonl', 'model.safetensors', 'report.html', 'train.log']);
    const cfg = JSON.parse(fs.readFileSync(path.join(rd, 'config.json'), 'utf8'));
    expect(cfg).toMatchObject({ model: 'bn_dropout', spec_file: BN, device: 'reference', overrides: ['optimizer.lr=0.02', 'train.batch=10'] });
    expect(cfg.spec_text).toBe(fs.readFileSync(BN, 'utf8'));
    expect(cfg.settings.optimizer).toMatchObject({ kind: 'adamw', lr: 0.02 });
    expect(cfg.settings.train).toMatchObject({ batch: 10, epochs: 3 });
    expect(cfg.settings.data).toMatchObject({ kind: 'synthetic' });
    expect(typeof cfg.threads).toBe('number');
    expect(cfg.argv).toContain('--keep');
    expect(Number.isNaN(Date.parse(cfg.started_at))).toBe(false);
    // weights only: parameters + buffers under torch's state_dict names, no optimizer state
    expect(stNames(path.join(rd, 'model.safetensors'))).toEqual(
      ['bn1.bias', 'bn1.num_batches_tracked', 'bn1.running_mean', 'bn1.running_var', 'bn1.weight', 'fc1.bias', 'fc1.weight', 'fc2.bias', 'fc2.weight'].sort(),
    );
    expect(stNames(path.join(rd, 'checkpoint-30.safetensors'))).toContain('fc1.weight.exp_avg');
    // metrics: every line has split; epochs as the console prints them
    const m = lines(path.join(rd, 'metrics.jsonl'));
    expect(new Set(m.map((l) => l.split))).toEqual(new Set(['train', 'test']));
    const log = fs.readFileSync(path.join(rd, 'train.log'), 'utf8');
    for (const l of m.filter((x) => x.split === 'train')) {
      expect(l).toHaveProperty('samples_per_sec');
      expect(log).toContain(`step ${l.step}/30  epoch ${l.epoch}/3  loss ${l.loss.toFixed(4)}`);
    }
    expect(m.filter((l) => l.split === 'test').map((l) => [l.step, l.epoch])).toEqual([[10, 1], [20, 2], [30, 3]]);
    expect(log).toContain('device: reference');
    expect(log).toContain(`"weights":"${r.weights}"`);
    // eval and predict take the run folder or latest; the model.safetensors file alone works too
    const e1 = json(mpsc(cwd, 'eval', BN, '--weights', 'latest', '--device', 'reference', '--json'));
    const e2 = json(mpsc(cwd, 'eval', BN, '--weights', r.run_dir, '--device', 'reference', '--json'));
    expect(e1.weights).toBe(path.resolve(rd, 'best.safetensors'));
    expect(e2.test_loss).toBe(e1.test_loss);
    const e3 = json(mpsc(cwd, 'eval', BN, '--weights', path.join(r.run_dir, 'model.safetensors'), '--device', 'reference', '--json'));
    expect(e3.test_loss).toBeCloseTo(r.test_loss, 6);
    // --resume latest continues in the run's folder, with the run's overrides
    const c = mpsc(cwd, 'train', BN, '--device', 'reference', '--resume', 'latest', '--epochs', '4', '--keep', '2', '--json');
    const cj = json(c);
    expect(c.stderr).toContain('resuming with the run\'s settings: --set optimizer.lr=0.02 --set train.batch=10');
    expect(fs.realpathSync(path.resolve(cwd, cj.run_dir))).toBe(fs.realpathSync(rd));
    expect(fs.readdirSync(rd).filter((f) => f.startsWith('checkpoint-')).sort()).toEqual(['checkpoint-30.safetensors', 'checkpoint-40.safetensors']);
    expect(JSON.parse(fs.readFileSync(path.join(rd, 'config.json'), 'utf8')).resumed_from).toBe(path.join(fs.realpathSync(rd), 'checkpoint-30.safetensors'));
  });

  it('after --resume the summary time covers the whole run (the checkpoint carries the seconds so far)', () => {
    const cwd = path.join(dir, 'time');
    const a = json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--steps', '4', '--json'));
    const ck = path.resolve(cwd, a.checkpoint);
    const st = decodeSafetensors(asU8(fs.readFileSync(ck)), ck);
    expect(Number(st.metadata.train_seconds)).toBeGreaterThan(0);
    // pretend the first part took 1000 s (the metadata is outside the checksummed data block)
    const t = new Map([...st.tensors].map(([n, x]) => [n, { shape: x.shape, dtype: x.dtype, data: x.data }]));
    fs.writeFileSync(ck, encodeSafetensors(t as never, { ...st.metadata, train_seconds: '1000' }));
    const b = json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--resume', ck, '--steps', '8', '--json'));
    expect(b.seconds).toBeGreaterThanOrEqual(1000);
    expect(b.seconds).toBeLessThan(1100);
  });

  it('--resume from a checkpoint older than the metrics (a run killed without a checkpoint) rewrites nothing twice: every step once, a torn line dropped', () => {
    const cwd = path.join(dir, 'killed');
    const whole = json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--log-every', '5', '--json'));
    const want = lines(path.resolve(cwd, whole.run_dir, 'metrics.jsonl')).map((l) => `${l.split}@${l.step}`);
    // a run killed at step 20 (after its lines for steps 15 and 20, before a checkpoint) and mid-write
    const r = json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--log-every', '5', '--json'));
    const metrics = path.resolve(cwd, r.run_dir, 'metrics.jsonl');
    fs.writeFileSync(metrics, fs.readFileSync(metrics, 'utf8').split('\n').filter((l) => l && JSON.parse(l).step <= 20).join('\n') + '\n{"split":"tr');
    const resumed = json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--log-every', '5', '--resume', path.join(r.run_dir, 'checkpoint-13.safetensors'), '--json'));
    expect(resumed.run_dir).toBe(r.run_dir);
    expect(lines(metrics).map((l) => `${l.split}@${l.step}`)).toEqual(want);
  });

  it('--run-dir chooses the folder; runs/<model>/latest points at it, nothing is written next to it', () => {
    const cwd = path.join(dir, 'rundir');
    const r = json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--steps', '3', '--run-dir', 'exp/one', '--json'));
    expect(r.run_dir).toBe('exp/one');
    expect(fs.existsSync(path.resolve(cwd, 'exp/one/config.json'))).toBe(true);
    expect(fs.readdirSync(path.resolve(cwd, 'exp'))).toEqual(['one']);
    expect(fs.realpathSync(path.resolve(cwd, 'runs/tiny/latest'))).toBe(fs.realpathSync(path.resolve(cwd, 'exp/one')));
    const e = json(mpsc(cwd, 'eval', TINY, '--weights', 'latest', '--device', 'reference', '--json'));
    expect(e.weights).toBe(path.join(fs.realpathSync(path.resolve(cwd, 'exp/one')), 'best.safetensors'));
  });

  it('--checkpoint-dir keeps working: checkpoints there, shared folders never lose the printed file', () => {
    const cwd = path.join(dir, 'ckdir');
    const ck = path.resolve(cwd, 'ck');
    json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--epochs', '5', '--checkpoint-dir', ck, '--json'));
    const b = json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--epochs', '1', '--checkpoint-dir', ck, '--json'));
    expect(b.checkpoint).toBe(path.join(ck, 'checkpoint-13.safetensors'));
    expect(fs.existsSync(b.checkpoint)).toBe(true);
    expect(fs.existsSync(path.join(ck, 'checkpoint-65.safetensors'))).toBe(true);
  });

  it('--resume of a finished run says there is nothing to resume (exit 0; before its end exit 1) and changes nothing on disk; a later end trains on', () => {
    const cwd = path.join(dir, 'finished');
    const a = json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--steps', '4', '--json'));
    const runDir = path.resolve(cwd, a.run_dir);
    const snapshot = () => fs.readdirSync(runDir).sort().map((f) => [f, fs.statSync(path.join(runDir, f)).mtimeMs, fs.readFileSync(path.join(runDir, f)).toString('base64')]);
    const before = snapshot();
    // latest (with the run's own --steps 4), the folder with --steps 4, and an end before the checkpoint
    for (const [ref, ...more] of [['latest'], [a.run_dir, '--steps', '4'], [a.checkpoint, '--steps', '2']]) {
      const r = mpsc(cwd, 'train', TINY, '--device', 'reference', '--resume', ref, ...more);
      expect(r.stderr).not.toContain('internal error');
      const past = more[1] === '2';
      expect(r.code).toBe(past ? 1 : 0);
      expect(r.stderr).toContain(`checkpoint-4.safetensors: ${past ? 'error' : 'note'}: nothing to resume: `);
      expect(r.stderr).toContain(past ? "the checkpoint is at step 4, past this run's end at step 2" : 'the run finished at step 4, its last step (--steps 4)');
      expect(r.stderr).toContain('help: to train further, give a later end: --steps 17');
    }
    expect(snapshot()).toEqual(before);
    const c = json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--resume', 'latest', '--steps', '6', '--json'));
    expect(c.steps).toBe(6);
    expect(lines(path.join(runDir, 'metrics.jsonl')).filter((l) => l.split === 'test').map((l) => l.step)).toEqual([4, 6]);
  });

  it('a run that fails before writing a checkpoint (bad --save-init path, NaN at step 2) does not become latest: --weights latest and --resume latest still find the good run', () => {
    const cwd = path.join(dir, 'failed');
    fs.mkdirSync(cwd, { recursive: true });
    fs.writeFileSync(path.join(cwd, 'afile'), 'x');
    const good = json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--steps', '3', '--json'));
    const latest = () => fs.realpathSync(path.resolve(cwd, 'runs', 'tiny', 'latest'));
    expect(latest()).toBe(fs.realpathSync(path.resolve(cwd, good.run_dir)));
    const badInit = mpsc(cwd, 'train', TINY, '--device', 'reference', '--steps', '3', '--save-init', 'afile/init.safetensors');
    expect(badInit.code).toBe(1);
    const nan = mpsc(cwd, 'train', tinyVariant(cwd, 'nan.model', [['sgd(lr: 0.1', 'sgd(lr: 1e308']]), '--device', 'reference', '--steps', '3');
    expect(nan.code).toBe(1);
    expect(nan.stderr).toContain('the loss became');
    expect(fs.readdirSync(path.resolve(cwd, 'runs', 'tiny')).filter((f) => f !== 'latest')).toHaveLength(3); // the failed runs keep their folders (config.json, train.log)
    expect(latest()).toBe(fs.realpathSync(path.resolve(cwd, good.run_dir)));
    const e = json(mpsc(cwd, 'eval', TINY, '--weights', 'latest', '--device', 'reference', '--json'));
    expect(e.test_loss).toBeCloseTo(good.test_loss, 5);
    const resumed = json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--resume', 'latest', '--steps', '5', '--json'));
    expect(fs.realpathSync(path.resolve(cwd, resumed.run_dir))).toBe(fs.realpathSync(path.resolve(cwd, good.run_dir)));
  });
});

describe('the report hook', () => {
  it('onRunUpdate runs after each evaluation and at the end; a failing one is a warning, training goes on', async () => {
    const m = tinyClassifier({ features: [6], classes: 3, data: { kind: 'synthetic', train_size: 100, test_size: 37, seed: 4 }, batch: 8 });
    const calls: number[] = [];
    const notes: string[] = [];
    const runDir = path.join(dir, 'hook');
    let evals = 0;
    const r = await train(m, {
      device: 'reference',
      steps: 26,
      runDir,
      onRunUpdate: (d) => {
        expect(d).toBe(runDir);
        calls.push(evals);
        throw new Error('report broke');
      },
      onEvent: (e) => {
        if (e.kind === 'eval') evals++;
        if (e.kind === 'note') notes.push(e.message);
      },
    });
    expect(r.steps).toBe(26);
    expect(calls).toEqual([1, 2, 2]); // after the evaluations at steps 13 and 26, then at the end
    expect(notes.filter((n) => n.startsWith(`warning: updating ${runDir} failed (report broke)`))).toHaveLength(3);
    expect(fs.existsSync(path.join(runDir, 'metrics.jsonl'))).toBe(true);
  });
});

describe('overrides, validation split, early stopping', () => {
  it('data paths given with --set are relative to the current folder, in data.<arg> and in a whole data=<call> alike', () => {
    const data = (spec: string, ...sets: string[]) => checkFile(path.join(ROOT, spec), sets.map((s) => parseSetArg(s))).train.data as unknown as Record<string, unknown>;
    expect(data('test/fixtures/train/tiny.model', 'data=csv(train: "a.csv", test: "b.csv")')).toMatchObject({ kind: 'csv', train: path.resolve('a.csv'), test: path.resolve('b.csv') });
    expect(data('test/fixtures/train/tiny.model', 'data=csv("a.csv")')).toMatchObject({ train: path.resolve('a.csv') });
    expect(data('specs/mnist_mlp.model', 'data=mnist("digits")')).toMatchObject({ kind: 'mnist', dir: path.resolve('digits') });
    expect(data('specs/char_gpt.model', 'data.file=other.txt')).toMatchObject({ kind: 'text', file: path.resolve('other.txt') });
    expect(data('specs/char_gpt.model', 'data=text(file: "book.txt")')).toMatchObject({ file: path.resolve('book.txt') });
  });

  it('--set errors read like spec errors and point at the argument; --lr is optimizer.lr', () => {
    const cwd = path.join(dir, 'set');
    const r = mpsc(cwd, 'train', TINY, '--device', 'reference', '--set', 'optimizer.lrr=3', '--set', 'train.batch=0', '--set', 'lr=1');
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("<--set optimizer.lrr=3>:1:11: error: optimizer sgd has no argument 'lrr'\n  optimizer.lrr=3\n            ^^^\n  hint: did you mean 'lr'?");
    expect(r.stderr).toContain("<--set train.batch=0>:1:13: error: key 'batch' of train must be in [1, 1048576], got 0");
    expect(r.stderr).toContain('hint: did you mean optimizer.lr?');
    expect(r.stderr).not.toContain('internal error');
    const l = mpsc(cwd, 'train', TINY, '--device', 'reference', '--lr', 'fast');
    expect(l.code).toBe(1);
    expect(l.stderr).toContain("<--lr fast>:1:1: error: argument 'lr' of optimizer sgd expects a number, got string \"fast\"");
    const ok = json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--lr', '0.05', '--set', 'schedule=step(step_size: 5)', '--set', 'train.steps=6', '--json'));
    const cfg = JSON.parse(fs.readFileSync(path.resolve(cwd, ok.run_dir, 'config.json'), 'utf8'));
    expect(cfg.settings.optimizer.lr).toBe(0.05);
    expect(cfg.settings.schedule).toMatchObject({ kind: 'step', step_size: 5 });
    expect(cfg.settings.train).toMatchObject({ steps: 6, epochs: null });
    expect(ok.steps).toBe(6);
    const m = lines(path.resolve(cwd, ok.run_dir, 'metrics.jsonl')).filter((x) => x.split === 'train');
    expect(m.at(-1).lr).toBeCloseTo(0.005, 12); // 0.05 * 0.1 after step 5
  });

  it('val_split holds out the last samples; early_stop stops, keeps best.safetensors, and is reported', () => {
    const cwd = path.join(dir, 'val');
    const spec = tinyVariant(cwd, 'v.model', [['epochs: 2, batch: 8 }', 'epochs: 40, batch: 8, eval_every: 2, val_split: 0.25, early_stop: { monitor: "val_accuracy", patience: 2, min_delta: 0.5 } }']]);
    const r = json(mpsc(cwd, 'train', spec, '--device', 'reference', '--json'));
    // 100 samples: 75 train (10 steps per epoch), 25 validation (3 batches of 8 + a tail of 1)
    expect(r.stopped_early).toBe(true);
    expect(r.steps).toBe(6); // evaluations at 2, 4, 6: no gain of 0.5 in accuracy after the first
    expect(r.best.monitor).toBe('val_accuracy');
    expect(fs.existsSync(path.resolve(cwd, r.best.file))).toBe(true);
    const m = lines(path.resolve(cwd, r.run_dir, 'metrics.jsonl'));
    const val = m.filter((l) => l.split === 'val');
    expect(val.map((l) => l.step)).toEqual([2, 4, 6]);
    expect(Math.max(...val.map((l) => l.accuracy))).toBe(r.best.value);
    for (const l of val) expect(l.accuracy * 25).toBeCloseTo(Math.round(l.accuracy * 25), 9); // 25 validation samples
    const start = fs.readFileSync(path.resolve(cwd, r.run_dir, 'train.log'), 'utf8');
    expect(start).toContain('training: 75 samples');
    expect(start).toMatch(/early stopping at step 6: val_accuracy has not improved by more than 0.5 in 2 evaluations/);
    // a bad monitor is a spec error with the choices
    fs.writeFileSync(spec, fs.readFileSync(TINY, 'utf8').replace('batch: 8 }', 'batch: 8, early_stop: { monitor: "val_loss" } }'));
    const bad = mpsc(cwd, 'train', spec, '--device', 'reference');
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("early_stop monitors 'val_loss' but the train section has no val_split");
  });

  it('--resume keeps the monitor state: best.safetensors is not replaced by a worse value, and early stopping stops where the uninterrupted run stops', () => {
    const cwd = path.join(dir, 'resume-best');
    const spec = tinyVariant(cwd, 'es.model', [
      ['x -> linear(3) as fc', 'x -> linear(32) as fc1 -> relu -> linear(3) as fc2'],
      ['sgd(lr: 0.1, momentum: 0.9)', 'sgd(lr: 0.2, momentum: 0.9)'],
      ['epochs: 2, batch: 8 }', 'steps: 60, batch: 8, eval_every: 4, val_split: 0.25, early_stop: { patience: 4 } }'],
    ]);
    const whole = json(mpsc(cwd, 'train', spec, '--device', 'reference', '--json'));
    // val_loss is lowest at step 12, then worse: four evaluations later the run stops
    expect(whole.best.step).toBe(12);
    expect(whole.stopped_early).toBe(true);
    const first = json(mpsc(cwd, 'train', spec, '--device', 'reference', '--steps', '12', '--json'));
    expect(first.best.step).toBe(12);
    const resumed = json(mpsc(cwd, 'train', spec, '--device', 'reference', '--resume', first.run_dir, '--steps', '60', '--json'));
    expect(resumed.steps).toBe(whole.steps);
    expect(resumed.stopped_early).toBe(true);
    expect(resumed.best.step).toBe(12);
    expect(resumed.best.value).toBe(whole.best.value);
    const bestMeta = decodeSafetensors(asU8(fs.readFileSync(path.resolve(cwd, resumed.best.file))), 'best').metadata;
    expect(bestMeta.step).toBe('12');
    expect(bestMeta.monitor_best_step).toBe('12');
  });

  it('val_split and early_stop are checked like every setting', () => {
    const base = fs.readFileSync(TINY, 'utf8');
    const spec = (train: string) => base.replace('batch: 8 }', `batch: 8, ${train} }`);
    const err = (train: string) => {
      try {
        checkSource(spec(train), 's.model');
      } catch (e) {
        return (e as Error).message;
      }
      return '';
    };
    expect(err('val_split: 1')).toContain("key 'val_split' of train must be in [0, 1), got 1");
    expect(err('early_stop: { patiense: 3 }')).toContain("early_stop has no key 'patiense'");
    expect(err('early_stop: { patiense: 3 }')).toContain("did you mean 'patience'?");
    expect(err('early_stop: 3')).toContain("key 'early_stop' of train expects a map {key: value, ...}");
    expect(err('val_split: 0.2, early_stop: { mode: "up" }')).toContain("early_stop mode must be 'min', 'max' or 'auto', got 'up'");
    const t = (train: string) => checkSource(spec(train), 's.model').train;
    expect(t('val_split: 0.2, early_stop: { monitor: "val_accuracy" }').early_stop).toEqual({ monitor: 'val_accuracy', patience: 3, min_delta: 0, mode: 'max' });
    expect(t('early_stop: {}').early_stop).toEqual({ monitor: 'test_loss', patience: 3, min_delta: 0, mode: 'min' });
    expect(t('val_split: 0.1, early_stop: { mode: "max" }').early_stop!.monitor).toBe('val_loss');
  });

  it('helpers: eval tails of val and test share one program; last override per key; run ids; physical cores', () => {
    expect(evalTailBatch(64, [2000, 800])).toBe(16); // tails 16 and 32
    expect(evalTailBatch(8, [37, 25])).toBe(1);
    expect(evalTailBatch(8, [32, 0])).toBeUndefined();
    expect(lastPerKey(['a=1', 'b=2', 'a=3'])).toEqual(['b=2', 'a=3']);
    expect(runIdFor(new Date(Date.UTC(2026, 0, 2, 3, 4, 5)))).toBe('20260102-030405');
    const ht = [0, 1, 2, 3].map((i) => `processor\t: ${i}\nphysical id\t: 0\ncore id\t\t: ${i % 2}\n`).join('\n');
    expect(physicalCoresFromCpuinfo(ht)).toBe(2);
    const two = [0, 1].map((p) => `processor\t: ${p}\nphysical id\t: ${p}\ncore id\t\t: 0\n`).join('\n');
    expect(physicalCoresFromCpuinfo(two)).toBe(2);
    expect(physicalCoresFromCpuinfo('processor : 0\nBogoMIPS : 50\n')).toBeNull();
  });
});

describe('command-line rough edges', () => {
  it('--help teaches: train shows the retention policy and examples, eval has examples, --threads says how to change it', () => {
    const t = mpsc(dir, 'train', '--help').stdout;
    expect(t).toContain('--keep K (default 3)');
    expect(t).toContain('Examples:');
    expect(t).toContain('--set <key=value>');
    expect(t).toMatch(/physical cores, or\s+\$MPSC_THREADS/);
    const e = mpsc(dir, 'eval', '--help').stdout;
    expect(e).toContain('Examples:');
    expect(e).toContain('--weights latest');
    expect(mpsc(dir, 'predict', '--help').stdout).toContain('Examples:');
  });

  it('mpsc --help shows the workflow end to end (train -> report -> predict -> export), and each of those commands has examples', () => {
    const h = mpsc(dir, '--help').stdout;
    const steps = ['mpsc train specs/', 'mpsc report runs/', 'mpsc predict specs/', 'mpsc export specs/lenet.model --weights latest --format onnx', '--format torch'];
    const at = steps.map((s) => h.indexOf(s));
    expect(at.every((i) => i > 0), `${steps.filter((_, k) => at[k] < 0).join(', ')} missing from mpsc --help`).toBe(true);
    expect([...at].sort((a, b) => a - b)).toEqual(at); // in workflow order
    for (const cmd of ['train', 'report', 'predict', 'export']) expect(mpsc(dir, cmd, '--help').stdout, cmd).toContain('Examples:');
  });

  it('eval on a folder without weights is a user error, not EISDIR; build takes --device (and --target as the older name)', () => {
    const empty = path.join(dir, 'empty');
    fs.mkdirSync(empty, { recursive: true });
    const e = mpsc(dir, 'eval', TINY, '--weights', empty, '--device', 'reference');
    expect(e.code).toBe(1);
    expect(e.stderr).not.toContain('EISDIR');
    expect(e.stderr).toContain('no readable checkpoint');
    const none = mpsc(path.join(dir, 'fresh'), 'eval', TINY, '--weights', 'latest', '--device', 'reference');
    expect(none.code).toBe(1);
    expect(none.stderr).toContain("no runs of model 'tiny' yet");
    const b = mpsc(dir, 'build', TINY, '--device', 'cpu', '--no-compile', '-o', path.join(dir, 'b1'));
    expect(b.code).toBe(0);
    expect(fs.existsSync(path.join(dir, 'b1', 'cpu'))).toBe(true);
    const t = mpsc(dir, 'build', TINY, '--target', 'cpu', '--no-compile', '-o', path.join(dir, 'b2'));
    expect(t.code).toBe(0);
    const x = mpsc(dir, 'build', TINY, '--device', 'cpu', '--target', 'metal', '--no-compile');
    expect(x.code).toBe(1);
    expect(x.stderr).toContain('disagree');
    expect(mpsc(dir, 'build', '--help').stdout).toContain('--device <device>');
  });

  it('an output path blocked by a file or a folder is a user error (exit 1) naming it, and a bad --checkpoint-dir / --metrics stops the run before a run folder is made', () => {
    const cwd = path.join(dir, 'blocked');
    fs.mkdirSync(cwd, { recursive: true });
    fs.writeFileSync(path.join(cwd, 'afile'), 'x');
    const user = (r: { code: number | null; stderr: string }, text: string) => {
      expect(r.stderr).not.toContain('internal error');
      expect(r.stderr).toContain(text);
      expect(r.code).toBe(1);
    };
    const train = (...a: string[]) => mpsc(cwd, 'train', TINY, '--device', 'reference', '--steps', '2', ...a);
    user(train('--checkpoint-dir', 'afile/ck'), 'cannot create the checkpoint folder');
    user(train('--metrics', 'afile/m.jsonl'), 'a file stands where the path needs a folder');
    user(train('--metrics', '.'), 'a folder of that name is in the way');
    user(train('--run-dir', 'afile'), 'cannot create the run folder');
    expect(fs.existsSync(path.join(cwd, 'runs'))).toBe(false);
    const ok = json(mpsc(cwd, 'train', TINY, '--device', 'reference', '--steps', '2', '--json'));
    user(train('--save-init', 'afile/init.safetensors'), 'afile');
    user(mpsc(cwd, 'export', TINY, '--weights', ok.run_dir, '--format', 'onnx', '-o', 'afile/x.onnx'), 'afile');
    user(mpsc(cwd, 'export', TINY, '--weights', ok.run_dir, '--format', 'torch', '-o', 'afile/t'), 'cannot create the export folder');
    user(mpsc(cwd, 'report', ok.run_dir, '-o', 'afile/r.html'), 'afile');
    user(mpsc(cwd, 'build', TINY, '--no-compile', '-o', 'afile/b'), 'cannot create the output folder');
  });
});
