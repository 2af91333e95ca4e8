// The training report page (issue 16): built from a run folder written per the run-folder contract
// (config.json + metrics.jsonl), loaded in a real headless browser (Debian's chromium, driven by
// puppeteer-core, every network request refused): no console errors, every chart drew the expected
// number of points, a screenshot is not blank. `mpsc report` rebuilds one run and overlays several.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Browser } from 'puppeteer-core';
import { buildCharts } from '../runtime/report/charts.js';
import { writeReport } from '../runtime/report/index.js';
import { readRun } from '../runtime/report/run_data.js';
import { CHROMIUM, launchChromium, openReport } from '../scripts/report_page.js';

const STEPS_PER_EPOCH = 100;

/** A run folder as mpsc train writes it (docs/workflow.md, "run folder"): 2 epochs, logged every 10 steps, val + test at each epoch end. */
function makeRun(root: string, id: string, lr: number, tail = ''): string {
  const dir = join(root, 'runs', 'lenet', id);
  mkdirSync(dir, { recursive: true });
  const spec = readFileSync('specs/lenet.model', 'utf8');
  writeFileSync(join(dir, 'config.json'), JSON.stringify({
    mpsc_version: '0.1.0', model: 'lenet', spec_file: resolve('specs/lenet.model'), spec_text: spec,
    argv: ['train', 'specs/lenet.model', '--set', `optimizer.lr=${lr}`], device: 'cpu', threads: 1,
    settings: { train: { batch: 64, epochs: 2 }, optimizer: { kind: 'sgd', lr, momentum: 0.9 }, schedule: { kind: 'constant' }, data: { kind: 'mnist' } },
    overrides: [`optimizer.lr=${lr}`], started_at: '2026-12-03T10:15:00.000Z',
  }, null, 2));
  const lines: string[] = [];
  for (let step = 10; step <= 2 * STEPS_PER_EPOCH; step += 10) {
    const epoch = Math.ceil(step / STEPS_PER_EPOCH);
    lines.push(JSON.stringify({ split: 'train', step, epoch, loss: 2.3 * Math.exp(-step * lr * 0.3), lr, samples_per_sec: 9000 + step, accuracy: 1 - Math.exp(-step * lr * 0.5) }));
    if (step % STEPS_PER_EPOCH === 0) {
      lines.push(JSON.stringify({ split: 'val', step, epoch, loss: 2.2 * Math.exp(-step * lr * 0.25), accuracy: 0.9 - 0.3 / epoch }));
      lines.push(JSON.stringify({ split: 'test', step, epoch, loss: 2.25 * Math.exp(-step * lr * 0.25), accuracy: 0.88 - 0.3 / epoch }));
    }
  }
  lines.push(JSON.stringify({ split: 'summary', steps: 200, test_loss: 0.4 }));
  writeFileSync(join(dir, 'metrics.jsonl'), lines.join('\n') + '\n' + tail);
  return dir;
}

function mpsc(...args: string[]) {
  return spawnSync(process.execPath, [resolve('bin/mpsc.js'), ...args], { encoding: 'utf8', timeout: 120_000 });
}


describe('report page in headless chromium', () => {
  let browser: Browser;
  const root = mkdtempSync(join(tmpdir(), 'mpsc-report-'));
  beforeAll(async () => {
    expect(existsSync(CHROMIUM), `${CHROMIUM} is missing: .ci/run installs Debian's chromium`).toBe(true);
    browser = await launchChromium();
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
  });

  const load = (file: string) => openReport(browser, file);

  async function nonWhitePixels(png: Uint8Array): Promise<{ nonWhite: number; total: number }> {
    const p = await browser.newPage();
    const b64 = Buffer.from(png).toString('base64');
    const r = (await p.evaluate(async (src: string) => {
      const img = new Image();
      img.src = src;
      await img.decode();
      const c = document.createElement('canvas');
      c.width = img.width;
      c.height = img.height;
      const ctx = c.getContext('2d')!;
      ctx.drawImage(img, 0, 0);
      const d = ctx.getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 0; i < d.length; i += 4) if (d[i] < 240 || d[i + 1] < 240 || d[i + 2] < 240) n++;
      return { nonWhite: n, total: d.length / 4 };
    }, `data:image/png;base64,${b64}`)) as { nonWhite: number; total: number };
    await p.close();
    return r;
  }

  it('one run: loads offline without console errors, draws every point, is not blank', async () => {
    const dir = makeRun(root, '20261203-101500', 0.01, '{"split":"train","step":2'); // a torn last line is skipped
    const file = writeReport(dir);
    expect(file).toBe(join(dir, 'report.html'));
    const html = readFileSync(file, 'utf8');
    expect(html).not.toMatch(/<script[^>]+src=|<link[^>]+href=/); // everything inlined
    const { page, errors, requests, drawn } = await load(file);
    expect(errors).toEqual([]);
    expect(requests).toEqual([]);
    const byId = new Map(drawn.charts.map((c) => [c.id, c.series]));
    // 20 logged train steps, 2 evaluations of val and test; per epoch 2 points each
    expect(byId.get('loss_step')).toEqual([{ label: 'train loss', points: 20 }, { label: 'val loss', points: 2 }, { label: 'test loss', points: 2 }]);
    expect(byId.get('accuracy_step')).toEqual([{ label: 'train accuracy', points: 20 }, { label: 'val accuracy', points: 2 }, { label: 'test accuracy', points: 2 }]);
    expect(byId.get('loss_epoch')).toEqual([{ label: 'train loss', points: 2 }, { label: 'val loss', points: 2 }, { label: 'test loss', points: 2 }]);
    expect(byId.get('lr_step')).toEqual([{ label: 'lr', points: 20 }]);
    expect(byId.get('samples_per_sec_step')).toEqual([{ label: 'samples/s', points: 20 }]);
    // every chart of the data drew all its points
    const want = buildCharts([readRun(dir)]);
    expect(drawn.charts.map((c) => c.id)).toEqual(want.map((c) => c.id));
    drawn.charts.forEach((c, k) => expect(c.series.map((s) => s.points)).toEqual(want[k].series.map((s) => s.x.length)));
    // the page shows the spec, the model summary (as mpsc check prints it) and the memory plan
    const text = (await page.evaluate('document.body.innerText')) as string;
    expect(text).toContain('logits = h -> flatten -> linear(128) -> relu -> linear(10)');
    expect(text).toMatch(/conv2d0\s+conv2d\s+f32\[N, 32, 28, 28\]\s+320/);
    expect(text).toMatch(/train_step\s+64/);
    expect(text).toContain('1 unreadable line(s) of metrics.jsonl skipped');
    const png = await page.screenshot({ fullPage: false });
    const { nonWhite, total } = await nonWhitePixels(png);
    expect(nonWhite / total).toBeGreaterThan(0.02);
    await page.close();
  }, 60_000);

  it('mpsc report A B -o FILE overlays the runs; one folder, latest or runs/<model> rebuilds its report.html; a non-run folder exits 1', async () => {
    const a = makeRun(root, '20261203-110000', 0.01);
    const b = makeRun(root, '20261203-120000', 0.03);
    const out = join(root, 'compare.html');
    const r = mpsc('report', a, b, '-o', out);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(`wrote ${out}\n`);
    const { page, errors, drawn } = await load(out);
    expect(errors).toEqual([]);
    const loss = drawn.charts.find((c) => c.id === 'loss_step')!;
    expect(loss.series.map((s) => s.label)).toEqual([
      '20261203-110000 train loss', '20261203-110000 val loss', '20261203-110000 test loss',
      '20261203-120000 train loss', '20261203-120000 val loss', '20261203-120000 test loss',
    ]);
    expect(loss.series.map((s) => s.points)).toEqual([20, 2, 2, 20, 2, 2]);
    await page.close();

    const one = mpsc('report', a);
    expect(one.status).toBe(0);
    expect(existsSync(join(a, 'report.html'))).toBe(true);
    // `latest` as a symlink: the page names the run it points at
    symlinkSync('20261203-110000', join(root, 'runs', 'lenet', 'latest'));
    expect(mpsc('report', join(root, 'runs', 'lenet', 'latest')).status).toBe(0);
    expect(readFileSync(join(a, 'report.html'), 'utf8')).toContain('<title>lenet · run 20261203-110000</title>');
    rmSync(join(root, 'runs', 'lenet', 'latest'));
    // `latest` as a text file holding the run-id (where symlinks fail)
    writeFileSync(join(root, 'runs', 'lenet', 'latest'), '20261203-120000\n');
    const latest = mpsc('report', join(root, 'runs', 'lenet', 'latest'));
    expect(latest.stdout).toBe(`wrote ${join(b, 'report.html')}\n`);
    // runs/<model> is its latest run, as for --resume (also a `latest` holding a --run-dir's absolute path)
    const model = mpsc('report', join(root, 'runs', 'lenet'));
    expect(model.stderr).toBe('');
    expect(model.stdout).toBe(`wrote ${join(b, 'report.html')}\n`);
    writeFileSync(join(root, 'runs', 'lenet', 'latest'), `${a}\n`);
    expect(mpsc('report', join(root, 'runs', 'lenet')).stdout).toBe(`wrote ${join(a, 'report.html')}\n`);
    rmSync(join(root, 'runs', 'lenet', 'latest'));

    const bad = mpsc('report', root);
    expect(bad.status).toBe(1);
    expect(bad.stderr).toContain('not a run folder (it has no config.json)');
  }, 60_000);

  it('a run without metrics yet, or whose recorded spec no longer checks, still gets a page that says so', () => {
    const dir = join(root, 'runs', 'lenet', '20261203-130000');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ model: 'lenet', spec_file: '/x/lenet.model', spec_text: 'model lenet\nnetwork { y = x -> lineer(3) }\n', settings: {} }));
    const html = readFileSync(writeReport(dir), 'utf8');
    expect(html).toContain('no metrics logged yet');
    expect(html).toContain('the recorded spec does not check now:');
    expect(html).toContain("unknown layer 'lineer'");
  });
});
