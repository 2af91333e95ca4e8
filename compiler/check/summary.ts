/**
 * The model summary `mpsc check` prints: each layer with its path, type, output shape
 * and parameter count, the train precision, then totals. Memory totals here are simple sums (no planning):
 * parameters + gradients + optimizer state + buffers, and every activation of one
 * training batch alive at once (an upper bound of the planned peak).
 */
import { BATCH, type CheckedModel } from '../model.js';
import { numel } from '../ir/graph.js';
import { fmtDims } from './shape_util.js';
import { formatBytes as fmtBytes } from '../ir/print_ir.js';

export interface ModelSummary {
  model: string;
  file: string;
  batch: number;
  inputs: { name: string; dtype: string; shape: string }[];
  layers: { path: string; type: string; outShape: string; params: number }[];
  loss: string | null;
  metrics: string[];
  optimizer: string;
  /** train { precision }: fp32, or fp16 / bf16 with 16-bit copies of the GEMM operands */
  precision: string;
  totals: {
    params: number;
    stateElements: number;
    paramBytes: number;
    gradBytes: number;
    optimizerStateBytes: number;
    bufferBytes: number;
    /** params + grads + optimizer state + buffers */
    persistentBytes: number;
    /** inputs + every forward activation of one training batch, unplanned */
    activationBytes: number;
    /** the memory plan's peak: persistent tensors + the largest program arena + its input batch */
    plannedPeakBytes: number | null;
  };
}

/** optimizer state slots per parameter element */
export function optimizerSlots(m: CheckedModel): number {
  if (m.optimizer.kind === 'sgd') return m.optimizer.momentum > 0 ? 1 : 0;
  return 2;
}

export function summarize(m: CheckedModel, plannedPeakBytes: number | null = null): ModelSummary {
  const batch = m.train.batch;
  const bind = (s: number[]) => s.map((d) => (d === BATCH ? batch : d));
  const params = m.params.filter((p) => p.kind === 'param').reduce((s, p) => s + numel(p.shape), 0);
  const state = m.params.filter((p) => p.kind === 'state').reduce((s, p) => s + numel(p.shape), 0);
  let activation = 0;
  for (const v of m.graph.values) if (v.kind === 'activation' || v.kind === 'input' || v.kind === 'output') activation += numel(bind(v.shape)) * 4;
  const paramBytes = params * 4;
  const opt = paramBytes * optimizerSlots(m);
  const o = m.optimizer;
  return {
    model: m.name,
    file: m.file,
    batch,
    inputs: m.inputs.map((i) => ({ name: i.name, dtype: i.dtype, shape: fmtDims(i.shape) })),
    layers: m.layers.map((l) => ({ path: l.path, type: l.type, outShape: `${l.outDtype}${fmtDims(l.outShape)}`, params: l.params })),
    loss: m.loss?.kind ?? null,
    metrics: m.metrics.map((x) => x.name),
    precision: m.train.precision ?? 'fp32',
    optimizer: o.kind === 'sgd' ? `sgd(lr ${o.lr}, momentum ${o.momentum}${o.nesterov ? ', nesterov' : ''}, weight_decay ${o.weight_decay})` : `${o.kind}(lr ${o.lr}, betas ${o.beta1}/${o.beta2}, weight_decay ${o.weight_decay})`,
    totals: {
      params,
      stateElements: state,
      paramBytes,
      gradBytes: paramBytes,
      optimizerStateBytes: opt,
      bufferBytes: state * 4,
      persistentBytes: paramBytes * 2 + opt + state * 4,
      activationBytes: activation,
      plannedPeakBytes,
    },
  };
}

function group(n: number): string {
  return n.toLocaleString('en-US');
}

export function renderSummary(s: ModelSummary): string {
  const rows = s.layers.map((l) => [l.path, l.type, l.outShape, l.params ? group(l.params) : '-']);
  const head = ['layer', 'type', 'output', 'params'];
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (r: string[]) => r.map((c, i) => (i === 3 ? c.padStart(w[i]) : c.padEnd(w[i]))).join('  ').trimEnd();
  const t = s.totals;
  const out = [
    `model ${s.model} (${s.file})`,
    `inputs: ${s.inputs.map((i) => `${i.name} ${i.dtype}${i.shape}`).join(', ')}   (N = batch ${s.batch})`,
    '',
    line(head),
    line(w.map((n) => '-'.repeat(n))),
    ...rows.map(line),
    '',
    `loss: ${s.loss ?? 'none'}   metrics: ${s.metrics.join(', ') || 'none'}   optimizer: ${s.optimizer}`,
    `precision: ${s.precision === 'fp32' ? 'fp32' : `${s.precision} (PyTorch autocast's storage: products and the activations after them in ${s.precision === 'fp16' ? 'f16' : 'bf16'}, f32 accumulation; f32 losses, norms, master weights, parameter gradients, optimizer state${s.precision === 'fp16' ? '; dynamic loss scaling' : ''}; the storage type of every value: --ir)`}`,
    `parameters: ${group(t.params)}${t.stateElements ? ` (+ ${group(t.stateElements)} buffer elements)` : ''}`,
    `parameters + gradients + optimizer state${t.bufferBytes ? ' + buffers' : ''}: ${fmtBytes(t.persistentBytes)} (${fmtBytes(t.paramBytes)} + ${fmtBytes(t.gradBytes)} + ${fmtBytes(t.optimizerStateBytes)}${t.bufferBytes ? ` + ${fmtBytes(t.bufferBytes)}` : ''})`,
    `activations at batch ${s.batch} (forward, unplanned upper bound): ${fmtBytes(t.activationBytes)}`,
    ...(t.plannedPeakBytes !== null ? [`planned peak memory of a training step (memory plan, all programs): ${fmtBytes(t.plannedPeakBytes)}`] : []),
  ];
  return out.join('\n');
}
