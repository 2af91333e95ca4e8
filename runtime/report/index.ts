/**
 * Training report pages (issue 16).
 *   writeReport(runDir): `<runDir>/report.html` for one run folder (the trainer calls it after
 *     each evaluation and at the end; `mpsc report RUN_DIR` too).
 *   writeComparison(runDirs, outFile): one page overlaying several runs (`mpsc report A B ...`).
 * Consumes: run folders (run_data.ts). Produces: the page (html.ts) written atomically (a reader
 * never sees half a page). Per run, the model section comes from checking the spec text that
 * config.json records (so a report still builds after the spec file changed or moved); a spec
 * that no longer checks shows its errors there instead of failing the report.
 */
import * as path from 'node:path';
import { checkSource } from '../../compiler/check/index.js';
import { UserError } from '../../compiler/errors.js';
import { renderSummary, summarize } from '../../compiler/check/summary.js';
import { plannedPeakBytes } from '../../compiler/ir/print_ir.js';
import { buildPrograms } from '../../compiler/ir/programs.js';
import { programsOf } from '../../compiler/ir/graph.js';
import { writeFileAtomic } from '../checkpoint.js';
import { buildCharts } from './charts.js';
import { renderPage, type RunSection } from './html.js';
import { readRun, type RunData } from './run_data.js';

/** model sections by spec file + text + batch: the trainer rewrites the page after every evaluation of one run */
const modelSections = new Map<string, Omit<RunSection, 'run'>>();

function section(run: RunData): RunSection {
  const c = run.config;
  if (typeof c.spec_text !== 'string') return { run, summary: 'config.json has no spec_text', memory: [] };
  const key = JSON.stringify([c.spec_file, c.spec_text, c.settings?.train?.batch]);
  let m = modelSections.get(key);
  if (!m) {
    m = modelSection(c.spec_text, c.spec_file ?? `${c.model ?? 'model'}.model`, Number((c.settings?.train as { batch?: unknown } | undefined)?.batch));
    if (modelSections.size >= 8) modelSections.delete(modelSections.keys().next().value!);
    modelSections.set(key, m);
  }
  return { run, ...m };
}

function modelSection(specText: string, specFile: string, settingsBatch: number): Omit<RunSection, 'run'> {
  try {
    const model = checkSource(specText, specFile);
    const batch = settingsBatch > 0 ? settingsBatch : model.train.batch;
    const m = { ...model, train: { ...model.train, batch } };
    const summary = renderSummary(summarize(m, m.loss ? plannedPeakBytes(m) : null));
    const memory: RunSection['memory'] = [];
    if (m.loss) {
      const set = buildPrograms(m, { batch });
      for (const p of programsOf(set)) {
        if (p.plan) memory.push({ program: p.name, batch: p.batch, arenaBytes: p.plan.arenaBytes, persistentBytes: p.plan.persistentBytes, inputBytes: p.plan.inputBytes, peakBytes: p.plan.peakBytes });
      }
    }
    return { summary, memory };
  } catch (e) {
    if (!(e instanceof UserError)) throw e;
    return { summary: `the recorded spec does not check now:\n${e.message}`, memory: [] };
  }
}

function page(runs: RunData[]): string {
  const title = runs.length === 1 ? `${runs[0].config.model ?? 'model'} · run ${runs[0].id}` : `${[...new Set(runs.map((r) => r.config.model ?? 'model'))].join(', ')} · ${runs.length} runs`;
  return renderPage(title, buildCharts(runs), runs.map(section), new Date().toISOString());
}

/** Write `<runDir>/report.html`; returns its path. */
export function writeReport(runDir: string): string {
  const out = path.join(runDir, 'report.html');
  writeFileAtomic(out, new TextEncoder().encode(page([readRun(runDir)])));
  return out;
}

/** Write one page overlaying several runs to outFile; returns its path. */
export function writeComparison(runDirs: string[], outFile: string): string {
  const runs = runDirs.map(readRun);
  writeFileAtomic(outFile, new TextEncoder().encode(page(runs)));
  return outFile;
}
