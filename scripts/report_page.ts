/**
 * The report page in a real headless browser: Debian's chromium driven by puppeteer-core, every
 * network request refused. Used by test/workflow_report.test.ts (console errors, points drawn,
 * a screenshot that is not blank) and by scripts/report_screenshot.ts (docs/report.png).
 *
 * Consumes: a report.html written by runtime/report (writeReport / writeComparison).
 * Produces: the open page, the console errors and refused requests it caused, and what each chart
 *           drew (the page's `window.mpscReport`: chart ids and points per series).
 * Relies on: $MPSC_TEST_CHROMIUM or /usr/bin/chromium (.ci/run installs Debian's chromium).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';

export const CHROMIUM = process.env.MPSC_TEST_CHROMIUM ?? '/usr/bin/chromium';

export interface Drawn {
  charts: { id: string; series: { label: string; points: number }[] }[];
}

export function launchChromium(): Promise<Browser> {
  return puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', `--user-data-dir=${mkdtempSync(join(tmpdir(), 'mpsc-chromium-'))}`],
  });
}

/** open a report page offline (absolute path): every request but the file itself is refused and counted */
export async function openReport(browser: Browser, file: string, viewport = { width: 1280, height: 1000 }): Promise<{ page: Page; errors: string[]; requests: string[]; drawn: Drawn }> {
  const page = await browser.newPage();
  const errors: string[] = [];
  const requests: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warn') errors.push(m.text());
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.setRequestInterception(true);
  page.on('request', (r) => {
    if (r.url() === `file://${file}`) void r.continue();
    else {
      requests.push(r.url());
      void r.abort();
    }
  });
  await page.setViewport(viewport);
  await page.goto(`file://${file}`, { waitUntil: 'load' });
  await page.waitForFunction('window.mpscReport !== undefined', { timeout: 10_000 });
  const drawn = (await page.evaluate('window.mpscReport')) as Drawn;
  return { page, errors, requests, drawn };
}
