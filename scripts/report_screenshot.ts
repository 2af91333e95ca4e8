/**
 * The report screenshot of the docs: rebuilds a run folder's report.html (runtime/report) and
 * saves a screenshot of it, taken in headless chromium by the page loader of the report test
 * (scripts/report_page.ts). Fails when the page logs an error or asks for the network.
 *
 * Usage: npx tsx scripts/report_screenshot.ts RUN_DIR [OUT.png]   (default: docs/report.png)
 */
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { writeReport } from '../runtime/report/index.js';
import { launchChromium, openReport } from './report_page.js';

const [runDir, out = 'docs/report.png'] = process.argv.slice(2);
if (!runDir) {
  process.stderr.write('usage: npx tsx scripts/report_screenshot.ts RUN_DIR [OUT.png]\n');
  process.exit(1);
}
const file = resolve(writeReport(resolve(runDir)));
const browser = await launchChromium();
try {
  const { page, errors, requests } = await openReport(browser, file, { width: 1280, height: 1400 });
  if (errors.length > 0 || requests.length > 0) throw new Error(`the page logged ${errors.join('; ') || 'no error'} and requested ${requests.join(', ') || 'nothing'}`);
  writeFileSync(out, await page.screenshot({ fullPage: false }));
  process.stdout.write(`wrote ${out} (${file})\n`);
} finally {
  await browser.close();
}
