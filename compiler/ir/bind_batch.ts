/**
 * bind_batch: substitutes the concrete batch size for BATCH (-1).
 *
 * Consumes: a CheckedModel graph (training form) whose value shapes and
 *           shape-valued attrs (`shape`, `x_shape`, `w_shape`, any attr whose
 *           name ends in `shape`) use BATCH (-1) for the batch dimension N.
 * Produces: a new Graph with the same value and node ids (so CheckedModel ids
 *           such as loss/metrics/inputs/params stay valid), every -1 in those
 *           places replaced by `batch`. The input graph is not modified.
 * Invariants: only shapes carry BATCH; other number[] attrs (stride, padding,
 *           axes, ...) never contain -1 and are copied unchanged.
 */
import type { AttrValue, Graph } from './graph.js';
import { BATCH } from '../model.js';

function bindShape(shape: readonly number[], batch: number): number[] {
  return shape.map((d) => (d === BATCH ? batch : d));
}

function isShapeAttr(key: string): boolean {
  return key === 'shape' || key.endsWith('_shape');
}

export function bindBatch(graph: Graph, batch: number): Graph {
  if (!Number.isInteger(batch) || batch < 1) throw new Error(`internal: bindBatch needs a positive integer batch, got ${batch}`);
  return {
    values: graph.values.map((v) => ({ ...v, shape: bindShape(v.shape, batch) })),
    nodes: graph.nodes.map((n) => {
      const attrs: Record<string, AttrValue> = {};
      for (const [k, a] of Object.entries(n.attrs)) attrs[k] = Array.isArray(a) ? (isShapeAttr(k) ? bindShape(a, batch) : [...a]) : a;
      return { ...n, inputs: [...n.inputs], outputs: [...n.outputs], attrs };
    }),
  };
}
