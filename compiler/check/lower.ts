/**
 * Lowering: expanded layers + their shape plans -> the forward IR Graph (training form,
 * BATCH for N), with parameter declarations, layer summaries, loss and metric outputs.
 */
import { GraphBuilder } from '../ir/graph.js';
import type { InputDecl, LayerSummary, ParamDecl } from '../model.js';
import type { Expanded } from './expand_blocks.js';
import type { Inferred } from './shapes.js';
import { numel } from '../ir/graph.js';

export interface Lowered {
  graph: GraphBuilder['graph'];
  inputs: InputDecl[];
  params: ParamDecl[];
  layers: LayerSummary[];
  loss: { kind: string; value: number } | null;
  metrics: { name: string; value: number }[];
  /** graph value id of each expanded value (inputs first, then layer k at inputs.length + k) */
  valueIds: number[];
}

export function lower(x: Expanded, inf: Inferred): Lowered {
  const b = new GraphBuilder();
  const ids: number[] = [];
  const inputs: InputDecl[] = x.inputs.map((i) => {
    const v = b.value(i.name, i.dtype, i.shape, 'input');
    ids.push(v);
    return { name: i.name, value: v, dtype: i.dtype, shape: [...i.shape], loc: i.loc };
  });
  const params: ParamDecl[] = [];
  const layers: LayerSummary[] = [];
  let loss: Lowered['loss'] = null;
  const metrics: Lowered['metrics'] = [];
  x.layers.forEach((l, k) => {
    const plan = inf.plans[k];
    if (!plan) throw new Error(`internal: layer '${l.path}' has no shape plan after checking`);
    const pins = plan.params.map((p) => {
      if (p === null) return -1;
      const path = `${l.path}.${p.name}`;
      const v = b.value(path, 'f32', p.shape, p.kind);
      params.push({ path, value: v, shape: [...p.shape], kind: p.kind, init: p.init, layer: l.path, layerType: l.type, loc: l.loc });
      return v;
    });
    const isHead = l.role !== 'layer';
    const outs = [
      { name: isHead ? l.path : `${l.path}.out`, dtype: plan.out.dtype, shape: plan.out.shape, kind: isHead ? ('output' as const) : ('activation' as const) },
      ...(plan.extra ?? []).map((e) => ({ name: `${l.path}.${e.suffix}`, shape: e.shape })),
    ];
    const [out] = b.emit(plan.op, [...l.inputs.map((i) => ids[i]), ...pins], outs, plan.attrs, l.path, l.loc);
    ids.push(out);
    if (l.role === 'loss') loss = { kind: l.type, value: out };
    else if (l.role === 'metric') metrics.push({ name: l.path, value: out });
    else
      layers.push({
        path: l.path,
        type: l.type,
        outShape: [...plan.out.shape],
        outDtype: plan.out.dtype,
        params: plan.params.reduce((s, p) => s + (p && p.kind === 'param' ? numel(p.shape) : 0), 0),
        loc: l.loc,
      });
  });
  return { graph: b.graph, inputs, params, layers, loss, metrics, valueIds: ids };
}
