/**
 * The report's charts as plain data: which curves each chart shows and their points.
 *
 * Consumes: RunData of one or more runs (run_data.ts).
 * Produces: `ChartSpec[]`, in page order:
 *   - the loss and each metric against the optimizer step: train (logged steps), val and test
 *     (each evaluation);
 *   - the same against the epoch: train as the mean of the epoch's logged values, val and test
 *     as the epoch's last evaluation;
 *   - the learning rate and the throughput (samples/s) against the step (train lines).
 *   With several runs every curve's label starts with its run-id (an overlay for comparison).
 *   A chart without any point is left out.
 * Relies on: the metrics.jsonl fields of the run-folder contract (docs/workflow.md).
 */
import { metricNames, type MetricRecord, type RunData } from './run_data.js';

export interface SeriesSpec {
  label: string;
  run: number;
  split: 'train' | 'val' | 'test';
  x: number[];
  y: number[];
}

export interface ChartSpec {
  id: string;
  title: string;
  xLabel: 'step' | 'epoch';
  yLabel: string;
  log?: boolean;
  series: SeriesSpec[];
}

const SPLITS = ['train', 'val', 'test'] as const;

function points(recs: MetricRecord[], xKey: 'step' | 'epoch', yKey: string): { x: number[]; y: number[] } {
  const x: number[] = [];
  const y: number[] = [];
  for (const r of recs) {
    const xv = r[xKey];
    const yv = r[yKey];
    if (typeof xv === 'number' && typeof yv === 'number' && Number.isFinite(yv)) {
      x.push(xv);
      y.push(yv);
    }
  }
  return { x, y };
}

/** per epoch: the mean (train) or the last value (evaluations) */
function perEpoch(recs: MetricRecord[], yKey: string, how: 'mean' | 'last'): { x: number[]; y: number[] } {
  const by = new Map<number, number[]>();
  for (const r of recs) {
    const e = r.epoch;
    const v = r[yKey];
    if (typeof e !== 'number' || typeof v !== 'number' || !Number.isFinite(v)) continue;
    if (!by.has(e)) by.set(e, []);
    by.get(e)!.push(v);
  }
  const x = [...by.keys()].sort((a, b) => a - b);
  const y = x.map((e) => {
    const vs = by.get(e)!;
    return how === 'mean' ? vs.reduce((s, v) => s + v, 0) / vs.length : vs[vs.length - 1];
  });
  return { x, y };
}

export function buildCharts(runs: RunData[]): ChartSpec[] {
  const many = runs.length > 1;
  const label = (k: number, what: string) => (many ? `${runs[k].id} ${what}` : what);
  const names = ['loss', ...new Set(runs.flatMap(metricNames))];
  const charts: ChartSpec[] = [];
  for (const xLabel of ['step', 'epoch'] as const) {
    for (const name of names) {
      const series: SeriesSpec[] = [];
      runs.forEach((run, k) => {
        for (const split of SPLITS) {
          const p = xLabel === 'step' ? points(run[split], 'step', name) : perEpoch(run[split], name, split === 'train' ? 'mean' : 'last');
          if (p.x.length > 0) series.push({ label: label(k, `${split} ${name}`), run: k, split, ...p });
        }
      });
      if (series.length > 0) charts.push({ id: `${name}_${xLabel}`, title: `${name} by ${xLabel}`, xLabel, yLabel: name, series });
    }
  }
  for (const [key, title, yLabel] of [['lr', 'learning rate', 'lr'], ['samples_per_sec', 'throughput', 'samples/s']] as const) {
    const series: SeriesSpec[] = [];
    runs.forEach((run, k) => {
      const p = points(run.train, 'step', key);
      if (p.x.length > 0) series.push({ label: label(k, yLabel), run: k, split: 'train', ...p });
    });
    if (series.length > 0) charts.push({ id: `${key}_step`, title: `${title} by step`, xLabel: 'step', yLabel, series });
  }
  return charts;
}
