/**
 * The report page: one self-contained HTML document (no network access: uPlot's script and
 * stylesheet are inlined from the `uplot` npm package, the data is embedded as JSON).
 *
 * Consumes: RunData of one or more runs, their ChartSpecs (charts.ts) and, per run, the model
 *           section text (model_info.ts).
 * Produces: the HTML text: a header, the charts (uPlot line charts, one per ChartSpec; the points
 *           of a curve are the spec's points, missing x values of other curves are gaps), then per
 *           run its configuration (device, command line, overrides, resolved settings), the spec
 *           text, the model summary and the memory plan.
 *           After drawing, the page sets `window.mpscReport = { charts: [{ id, series: [{ label,
 *           points }] }] }` (points drawn per curve) so a browser test can check what it drew.
 * Relies on: the embedded JSON being safe inside <script> (every `<` is escaped).
 */
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import type { ChartSpec } from './charts.js';
import type { RunData } from './run_data.js';

export interface RunSection {
  run: RunData;
  /** `mpsc check`'s model summary for the run's spec text, or why it could not be made */
  summary: string;
  /** one row per program of the memory plan */
  memory: { program: string; batch: number; arenaBytes: number; persistentBytes: number; inputBytes: number; peakBytes: number }[];
}

let uplotAssets: { js: string; css: string } | null = null;
function uplot(): { js: string; css: string } {
  if (!uplotAssets) {
    const require = createRequire(import.meta.url);
    const js = require.resolve('uplot/dist/uPlot.iife.min.js');
    uplotAssets = { js: fs.readFileSync(js, 'utf8'), css: fs.readFileSync(js.replace(/uPlot\.iife\.min\.js$/, 'uPlot.min.css'), 'utf8') };
  }
  return uplotAssets;
}

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
const jsonForScript = (v: unknown) => JSON.stringify(v).replace(/</g, '\\u003c');

function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 ** 2) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}

function lastValues(run: RunData): string {
  const out: string[] = [];
  for (const split of ['train', 'val', 'test'] as const) {
    const r = run[split][run[split].length - 1];
    if (!r) continue;
    const vals = Object.entries(r)
      .filter(([k, v]) => typeof v === 'number' && !['step', 'epoch', 'lr', 'samples_per_sec'].includes(k))
      .map(([k, v]) => `${k} ${Number(v).toPrecision(4)}`);
    out.push(`<tr><td>${split}</td><td>${r.step ?? ''}</td><td>${r.epoch ?? ''}</td><td>${esc(vals.join(', '))}</td></tr>`);
  }
  return out.length ? `<table><tr><th>last</th><th>step</th><th>epoch</th><th>values</th></tr>${out.join('')}</table>` : '<p>no metrics logged yet</p>';
}

function runSection(s: RunSection, k: number, many: boolean): string {
  const c = s.run.config;
  const rows: [string, string][] = [
    ['run', s.run.id],
    ['model', c.model ?? ''],
    ['spec', c.spec_file ?? ''],
    ['started', c.started_at ?? ''],
    ['device', `${c.device ?? ''}${c.threads ? `, ${c.threads} threads` : ''}`],
    ['command', (c.argv ?? []).join(' ')],
    ['overrides', (c.overrides ?? []).join(' ') || 'none'],
  ];
  if (c.resumed_from) rows.push(['resumed from', c.resumed_from]);
  if (s.run.skippedLines) rows.push(['note', `${s.run.skippedLines} unreadable line(s) of metrics.jsonl skipped`]);
  const mem = s.memory.length
    ? `<table><tr><th>program</th><th>batch</th><th>arena</th><th>persistent</th><th>inputs</th><th>peak</th></tr>${s.memory
        .map((m) => `<tr><td>${m.program}</td><td>${m.batch}</td><td>${bytes(m.arenaBytes)}</td><td>${bytes(m.persistentBytes)}</td><td>${bytes(m.inputBytes)}</td><td>${bytes(m.peakBytes)}</td></tr>`)
        .join('')}</table>`
    : '<p>not available (the spec does not check)</p>';
  return `<section class="run" id="run-${k}">
<h2>${many ? `run ${esc(s.run.id)}` : 'run'}</h2>
<table>${rows.map(([a, b]) => `<tr><th>${esc(a)}</th><td>${esc(b)}</td></tr>`).join('')}</table>
${lastValues(s.run)}
<details open><summary>settings (resolved)</summary><pre>${esc(JSON.stringify(c.settings ?? {}, null, 2))}</pre></details>
<details open><summary>spec</summary><pre>${esc(c.spec_text ?? '(config.json has no spec_text)')}</pre></details>
<details open><summary>model summary</summary><pre>${esc(s.summary)}</pre></details>
<details open><summary>memory plan</summary>${mem}</details>
</section>`;
}

const PAGE_SCRIPT = `
(function () {
  var data = JSON.parse(document.getElementById('mpsc-data').textContent);
  var palette = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2'];
  var dash = { train: [], val: [8, 4], test: [2, 3] };
  var drawn = [];
  data.charts.forEach(function (c) {
    var xs = {};
    c.series.forEach(function (s) { s.x.forEach(function (x) { xs[x] = true; }); });
    var xv = Object.keys(xs).map(Number).sort(function (a, b) { return a - b; });
    var at = {};
    xv.forEach(function (x, i) { at[x] = i; });
    var cols = [xv];
    c.series.forEach(function (s) {
      var col = xv.map(function () { return null; });
      s.x.forEach(function (x, i) { col[at[x]] = s.y[i]; });
      cols.push(col);
    });
    var el = document.createElement('div');
    el.className = 'chart';
    el.id = 'chart-' + c.id;
    document.getElementById('charts').appendChild(el);
    var opts = {
      title: c.title,
      width: 560,
      height: 300,
      scales: { x: { time: false } },
      axes: [{ label: c.xLabel }, { label: c.yLabel }],
      series: [{ label: c.xLabel }].concat(c.series.map(function (s, i) {
        var color = palette[(data.runs > 1 ? s.run : i) % palette.length];
        return { label: s.label, stroke: color, width: 1.5, dash: dash[s.split], spanGaps: true, points: { show: s.x.length < 60 } };
      })),
    };
    var u = new uPlot(opts, cols, el);
    drawn.push({
      id: c.id,
      series: u.series.slice(1).map(function (s, i) {
        return { label: s.label, points: u.data[i + 1].filter(function (v) { return v !== null && v !== undefined; }).length };
      }),
    });
  });
  window.mpscReport = { charts: drawn };
})();
`;

export function renderPage(title: string, charts: ChartSpec[], sections: RunSection[], generatedAt: string): string {
  const { js, css } = uplot();
  const many = sections.length > 1;
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(title)}</title>
<style>${css}</style>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fff; }
h1 { font-size: 1.4em; margin: 0 0 .2em; } h2 { font-size: 1.15em; margin-top: 1.5em; }
#charts { display: flex; flex-wrap: wrap; gap: 1em; }
.chart { border: 1px solid #ddd; padding: .3em; }
table { border-collapse: collapse; margin: .5em 0; } th, td { text-align: left; padding: 2px 10px 2px 0; vertical-align: top; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; font-size: 12px; }
.meta { color: #666; }
</style>
</head>
<body>
<h1>${esc(title)}</h1>
<p class="meta">mpsc training report, generated ${esc(generatedAt)}${many ? ` · ${sections.length} runs overlaid (solid: train, dashed: val, dotted: test)` : ' · solid: train, dashed: val, dotted: test'}</p>
<div id="charts"></div>
${charts.length === 0 ? '<p>no metrics logged yet</p>' : ''}
${sections.map((s, k) => runSection(s, k, many)).join('\n')}
<script id="mpsc-data" type="application/json">${jsonForScript({ runs: sections.length, charts })}</script>
<script>${js}</script>
<script>${PAGE_SCRIPT}</script>
</body>
</html>
`;
}
