#!/usr/bin/env node
// Rewrites test/durations.json (the order vitest.config.ts runs test files in: longest first) from a
// vitest JSON report: `npx vitest run --reporter=json --outputFile=r.json`, then
// `node scripts/test_durations.mjs r.json ["what was measured"]`. A file's duration is its last test's
// end minus the file's start (collection and the modules it imports included), rounded to seconds.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const [report, note] = process.argv.slice(2);
if (!report) {
  console.error('usage: node scripts/test_durations.mjs REPORT.json ["what was measured"]');
  process.exit(2);
}
const r = JSON.parse(fs.readFileSync(report, 'utf8'));
const seconds = {};
for (const f of r.testResults ?? []) {
  const rel = path.relative(root, f.name).split(path.sep).join('/');
  const s = Math.max(0, (f.endTime - f.startTime) / 1000);
  seconds[rel] = Math.round(s);
}
if (Object.keys(seconds).length === 0) {
  console.error(`${report}: no test files in the report`);
  process.exit(1);
}
const sorted = Object.fromEntries(Object.entries(seconds).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])));
const file = path.join(root, 'test/durations.json');
const old = fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : {};
const out = { about: old.about, measured: note ?? `${new Date().toISOString().slice(0, 10)}, ${path.basename(report)}`, seconds: sorted };
fs.writeFileSync(file, JSON.stringify(out, null, 2) + '\n');
console.log(`test/durations.json: ${Object.keys(sorted).length} files, ${Object.values(sorted).reduce((a, b) => a + b, 0)} s in all`);
