/**
 * Shape inference: runs each expanded layer's shape rule (layers.ts) in order. A layer
 * whose input already failed is skipped silently, so one mistake gives one message.
 */
import { errorAt, type Diagnostic } from '../diagnostics.js';
import { MAX_INT } from '../parser/to_ast.js';
import type { Expanded } from './expand_blocks.js';
import { LAYERS, type LayerPlan } from './layers.js';
import { fmtTensor, sampleNumel, type TensorInfo } from './shape_util.js';

export interface Inferred {
  /** per flat value id (inputs, then one per layer); null when unknown because of an error */
  infos: (TensorInfo | null)[];
  /** per layer */
  plans: (LayerPlan | null)[];
}

export function inferShapes(x: Expanded, diags: Diagnostic[]): Inferred {
  const infos: (TensorInfo | null)[] = x.inputs.map((i) => ({ dtype: i.dtype, shape: i.shape }));
  const plans: (LayerPlan | null)[] = [];
  let stream = 0;
  /** parameter shapes by full path, for weight tying */
  const paramShapes = new Map<string, number[]>();
  for (const l of x.layers) {
    const ins = l.inputs.map((id) => infos[id]);
    let plan: LayerPlan | null = null;
    if (ins.every((t) => t !== null)) {
      const what = `${l.type} '${l.path}'`;
      plan = LAYERS[l.type].infer(ins as TensorInfo[], l.args, {
        what,
        nextStream: () => stream++,
        paramShape: (path) => paramShapes.get(path) ?? null,
        fail: (message, hint) => {
          diags.push(errorAt(l.loc, message, hint));
          return null;
        },
      });
      if (plan) {
        const big = [plan.out.shape, ...plan.params.map((p) => p?.shape ?? [])].find((s) => sampleNumel(s) > MAX_INT);
        if (big) {
          diags.push(errorAt(l.loc, `${what} produces a tensor of ${sampleNumel(big)} elements per sample (${fmtTensor({ dtype: 'f32', shape: big })}), more than the limit ${MAX_INT}`));
          plan = null;
        }
      }
    }
    if (plan) for (const p of plan.params) if (p && !p.tiedTo) paramShapes.set(`${l.path}.${p.name}`, p.shape);
    plans.push(plan);
    infos.push(plan ? plan.out : null);
  }
  return { infos, plans };
}
