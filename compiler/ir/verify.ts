/**
 * verify: checks a Graph against the invariants stated in graph.ts and the op
 * catalogue in ops.ts. Every pass's output is run through it in tests, and
 * programs.ts verifies every Program it builds (a failure is a bug in mpsc).
 *
 * Consumes: a Graph (any stage after bind_batch: shapes must be static).
 * Produces: a list of problems (empty when the graph is well formed), or throws
 *           an internal Error listing them (`verifyGraph`).
 * Checks:
 *  - values[i].id === i, nodes[i].id === i
 *  - every op is in OPS; input count matches (optional inputs may be -1,
 *    variadic ops take >= 2 inputs, grad_norm >= 1); output count matches
 *  - every referenced value id exists; dtypes/shapes are static (integer dims >= 1)
 *  - SSA: each non-persistent, non-input value is written by exactly one node,
 *    before any node reads it; persistent values and inputs are never node outputs
 *  - `mutates` inputs are persistent values
 *  - persistent values and inputs have unique names (programs share them by name)
 *  - shapes and dtypes agree with each op's rule in ops.ts (output shapes of
 *    linear / conv2d / pools / reshape / concat / losses / backward ops, matching
 *    parameter / gradient / optimizer-state shapes, i32 labels and ids)
 */
import { OPS } from './ops.js';
import { isPersistent, numel, type Graph, type Node, type Value } from './graph.js';

export function graphProblems(graph: Graph): string[] {
  const problems: string[] = [];
  const { values, nodes } = graph;
  const persistentNames = new Map<string, number>();
  values.forEach((v, i) => {
    if (v.id !== i) problems.push(`value at index ${i} has id ${v.id}`);
    if (v.dtype !== 'f32' && v.dtype !== 'i32') problems.push(`value %${i} (${v.name}) has unknown dtype ${v.dtype}`);
    if (!Array.isArray(v.shape) || v.shape.some((d) => !Number.isInteger(d) || d < 1)) {
      problems.push(`value %${i} (${v.name}) has a non-static shape [${v.shape}]`);
    }
    if (isPersistent(v) || v.kind === 'input') {
      const prev = persistentNames.get(v.name);
      if (prev !== undefined) problems.push(`values %${prev} and %${i} share the persistent/input name '${v.name}'`);
      else persistentNames.set(v.name, i);
    }
  });
  const writtenBy = new Array<number>(values.length).fill(-1);
  const validId = (id: number) => Number.isInteger(id) && id >= 0 && id < values.length;
  nodes.forEach((n, i) => {
    const where = `node #${i} (${n.op})`;
    if (n.id !== i) problems.push(`node at index ${i} has id ${n.id}`);
    const def = OPS[n.op];
    if (!def) {
      problems.push(`${where}: unknown op`);
      return;
    }
    const variadic = def.inputs.includes('...');
    if (variadic) {
      const min = n.op === 'grad_norm' ? 1 : 2;
      if (n.inputs.length < min) problems.push(`${where}: needs at least ${min} inputs, has ${n.inputs.length}`);
      if (n.inputs.some((id) => id === -1)) problems.push(`${where}: variadic inputs cannot be absent (-1)`);
    } else if (n.inputs.length !== def.inputs.length) {
      problems.push(`${where}: expects ${def.inputs.length} inputs (${def.inputs.join(', ')}), has ${n.inputs.length}`);
    }
    n.inputs.forEach((id, k) => {
      if (id === -1) {
        if (variadic || !def.inputs[k]?.endsWith('?')) problems.push(`${where}: required input ${def.inputs[k] ?? k} is absent`);
        return;
      }
      if (!validId(id)) {
        problems.push(`${where}: input ${k} refers to unknown value ${id}`);
        return;
      }
      const v = values[id];
      if (!isPersistent(v) && v.kind !== 'input' && (writtenBy[id] === -1 || writtenBy[id] >= i)) {
        problems.push(`${where}: reads %${id} (${v.name}) before it is written`);
      }
    });
    for (const m of def.mutates ?? []) {
      const id = n.inputs[m];
      if (id === -1 || id === undefined || !validId(id)) continue;
      if (!isPersistent(values[id])) problems.push(`${where}: mutates %${id} (${values[id].name}) which is not persistent (${values[id].kind})`);
    }
    if (n.outputs.length !== def.outputs.length) {
      problems.push(`${where}: expects ${def.outputs.length} outputs, has ${n.outputs.length}`);
    }
    for (const id of n.outputs) {
      if (!validId(id)) {
        problems.push(`${where}: output refers to unknown value ${id}`);
        continue;
      }
      const v = values[id];
      if (isPersistent(v) || v.kind === 'input') problems.push(`${where}: writes ${v.kind} value %${id} (${v.name}); only 'mutates' may change it`);
      if (writtenBy[id] !== -1) problems.push(`${where}: writes %${id} (${v.name}) already written by node #${writtenBy[id]}`);
      else writtenBy[id] = i;
    }
  });
  values.forEach((v, i) => {
    if (!isPersistent(v) && v.kind !== 'input' && writtenBy[i] === -1) problems.push(`value %${i} (${v.name}, ${v.kind}) is never written`);
  });
  if (problems.length === 0) for (const n of nodes) problems.push(...shapeProblems(graph, n));
  return problems;
}

const fmt = (s: readonly number[]) => `[${s.join(',')}]`;
const eq = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((d, i) => d === b[i]);

function broadcast(a: readonly number[], b: readonly number[]): number[] | null {
  const n = Math.max(a.length, b.length);
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const x = a[a.length - n + i] ?? 1;
    const y = b[b.length - n + i] ?? 1;
    if (x !== y && x !== 1 && y !== 1) return null;
    out.push(Math.max(x, y));
  }
  return out;
}

function pair(a: unknown): [number, number] {
  return Array.isArray(a) && a.length === 2 ? [a[0], a[1]] : [NaN, NaN];
}

/** Shape/dtype rule of one node (ops.ts); assumes ids are valid (checked before). */
function shapeProblems(graph: Graph, n: Node): string[] {
  const out: string[] = [];
  const where = `node #${n.id} (${n.op}${n.path ? ` at ${n.path}` : ''})`;
  const V = (id: number): Value | undefined => (id >= 0 ? graph.values[id] : undefined);
  const S = (id: number) => V(id)?.shape ?? [];
  const ins = n.inputs;
  const y = n.outputs.length > 0 ? S(n.outputs[0]) : [];
  const want = (cond: boolean, msg: string) => {
    if (!cond) out.push(`${where}: ${msg}`);
  };
  const sameAs = (id: number, shape: readonly number[], what: string) => want(eq(S(id), shape), `${what} has shape ${fmt(S(id))}, expected ${fmt(shape)}`);
  const f32 = (id: number, what: string) => want(V(id)?.dtype === 'f32', `${what} must be f32`);
  const i32 = (id: number, what: string) => want(V(id)?.dtype === 'i32', `${what} must be i32`);
  const attrShape = (k: string) => (Array.isArray(n.attrs[k]) ? (n.attrs[k] as number[]) : []);
  switch (n.op) {
    case 'unary':
    case 'softmax':
    case 'log_softmax':
    case 'dropout':
      sameAs(n.outputs[0], S(ins[0]), 'output');
      break;
    case 'unary_grad':
    case 'softmax_grad':
    case 'log_softmax_grad':
      sameAs(ins[1], S(ins[0]), 'second input');
      sameAs(n.outputs[0], S(ins[0]), 'output');
      break;
    case 'dropout_grad':
      sameAs(n.outputs[0], S(ins[0]), 'output');
      break;
    case 'binary': {
      const b = broadcast(S(ins[0]), S(ins[1]));
      want(b !== null, `shapes ${fmt(S(ins[0]))} and ${fmt(S(ins[1]))} do not broadcast`);
      if (b) sameAs(n.outputs[0], b, 'output');
      break;
    }
    case 'linear': {
      const [x, w] = [S(ins[0]), S(ins[1])];
      want(x.length === 2 && w.length === 2 && x[1] === w[1], `x ${fmt(x)} and weight ${fmt(w)} do not match ([M,K] and [N,K])`);
      if (ins[2] >= 0) sameAs(ins[2], [w[0]], 'bias');
      sameAs(n.outputs[0], [x[0], w[0]], 'output');
      break;
    }
    case 'matmul': {
      const [a, b] = [S(ins[0]), S(ins[1])];
      const ta = n.attrs.transA === true, tb = n.attrs.transB === true;
      const [m, ka] = ta ? [a[1], a[0]] : [a[0], a[1]];
      const [kb, nn] = tb ? [b[1], b[0]] : [b[0], b[1]];
      want(a.length === 2 && b.length === 2 && ka === kb, `inner dimensions of ${fmt(a)} and ${fmt(b)} do not match`);
      sameAs(n.outputs[0], [m, nn], 'output');
      break;
    }
    case 'conv2d': {
      const [x, w] = [S(ins[0]), S(ins[1])];
      const [sh, sw] = pair(n.attrs.stride), [ph, pw] = pair(n.attrs.padding), [dh, dw] = pair(n.attrs.dilation);
      const g = n.attrs.groups as number;
      want(x.length === 4 && w.length === 4, 'x and weight must be 4-D');
      want(Number.isInteger(g) && g >= 1 && x[1] % g === 0 && w[0] % g === 0 && w[1] * g === x[1], `channels: x ${fmt(x)}, weight ${fmt(w)}, groups ${g}`);
      if (ins[2] >= 0) sameAs(ins[2], [w[0]], 'bias');
      const oh = Math.floor((x[2] + 2 * ph - dh * (w[2] - 1) - 1) / sh) + 1;
      const ow = Math.floor((x[3] + 2 * pw - dw * (w[3] - 1) - 1) / sw) + 1;
      sameAs(n.outputs[0], [x[0], w[0], oh, ow], 'output');
      break;
    }
    case 'maxpool2d':
    case 'avgpool2d': {
      const x = S(ins[0]);
      const [kh, kw] = pair(n.attrs.kernel), [sh, sw] = pair(n.attrs.stride), [ph, pw] = pair(n.attrs.padding);
      want(x.length === 4, 'x must be 4-D');
      sameAs(n.outputs[0], [x[0], x[1], Math.floor((x[2] + 2 * ph - kh) / sh) + 1, Math.floor((x[3] + 2 * pw - kw) / sw) + 1], 'output');
      break;
    }
    case 'global_avgpool':
      sameAs(n.outputs[0], [S(ins[0])[0], S(ins[0])[1], 1, 1], 'output');
      break;
    case 'reshape':
      sameAs(n.outputs[0], attrShape('shape'), 'output');
      want(numel(S(ins[0])) === numel(y), `${fmt(S(ins[0]))} -> ${fmt(y)} changes the element count`);
      break;
    case 'batchnorm_train':
    case 'batchnorm_eval': {
      const c = [S(ins[0])[1]];
      sameAs(n.outputs[0], S(ins[0]), 'output');
      for (let k = 1; k < 5; k++) sameAs(ins[k], c, `input ${k}`);
      if (n.op === 'batchnorm_train') for (let k = 1; k < 3; k++) sameAs(n.outputs[k], c, `output ${k}`);
      break;
    }
    case 'layernorm': {
      const x = S(ins[0]);
      sameAs(n.outputs[0], x, 'output');
      for (let k = 1; k < 3; k++) sameAs(ins[k], [x[x.length - 1]], `input ${k}`);
      for (let k = 1; k < 3; k++) sameAs(n.outputs[k], x.slice(0, -1), `output ${k}`);
      break;
    }
    case 'batchnorm_grad':
    case 'layernorm_grad':
      sameAs(ins[1], S(ins[0]), 'x');
      sameAs(n.outputs[0], S(ins[0]), 'dx');
      sameAs(n.outputs[1], S(ins[2]), 'dweight');
      sameAs(n.outputs[2], S(ins[2]), 'dbias');
      break;
    case 'embedding':
      i32(ins[0], 'ids');
      sameAs(n.outputs[0], [...S(ins[0]), S(ins[1])[1]], 'output');
      break;
    case 'embedding_grad':
      i32(ins[1], 'ids');
      sameAs(n.outputs[0], attrShape('w_shape'), 'dweight');
      break;
    case 'concat': {
      const axis = n.attrs.axis as number;
      const first = S(ins[0]);
      let total = 0;
      for (const id of ins) {
        const s = S(id);
        want(s.length === first.length && s.every((d, i) => i === axis || d === first[i]), `input ${fmt(s)} does not match ${fmt(first)} outside axis ${axis}`);
        total += s[axis] ?? 0;
      }
      sameAs(n.outputs[0], first.map((d, i) => (i === axis ? total : d)), 'output');
      break;
    }
    case 'slice': {
      const x = S(ins[0]);
      const axis = n.attrs.axis as number, start = n.attrs.start as number, len = n.attrs.length as number;
      want(start >= 0 && start + len <= (x[axis] ?? 0), `slice ${start}+${len} out of range of ${fmt(x)} on axis ${axis}`);
      sameAs(n.outputs[0], x.map((d, i) => (i === axis ? len : d)), 'output');
      break;
    }
    case 'sum_to': {
      const axes = n.attrs.axes;
      if (Array.isArray(axes)) sameAs(n.outputs[0], S(ins[0]).filter((_, i) => !axes.includes(i)), 'output');
      else {
        const b = broadcast(y, S(ins[0]));
        want(b !== null && eq(b, S(ins[0])), `${fmt(S(ins[0]))} cannot be summed to ${fmt(y)}`);
      }
      sameAs(n.outputs[0], attrShape('shape'), 'output');
      break;
    }
    case 'conv2d_grad_input':
    case 'avgpool2d_grad':
    case 'global_avgpool_grad':
      sameAs(n.outputs[0], attrShape('x_shape'), 'dx');
      break;
    case 'maxpool2d_grad':
      sameAs(n.outputs[0], S(ins[1]), 'dx');
      break;
    case 'conv2d_grad_weight':
      sameAs(n.outputs[0], attrShape('w_shape'), 'dw');
      break;
    case 'cross_entropy':
    case 'nll':
    case 'accuracy':
    case 'top_k':
    case 'cross_entropy_grad':
    case 'nll_grad': {
      const x = S(ins[0]);
      want(x.length === 2, `logits must be [N,C], got ${fmt(x)}`);
      i32(ins[1], 'label');
      sameAs(ins[1], [x[0]], 'label');
      sameAs(n.outputs[0], n.op.endsWith('_grad') ? x : [], 'output');
      break;
    }
    case 'mse':
    case 'bce_with_logits':
    case 'mse_grad':
    case 'bce_with_logits_grad':
      f32(ins[1], 'target');
      sameAs(ins[1], S(ins[0]), 'target');
      sameAs(n.outputs[0], n.op.endsWith('_grad') ? S(ins[0]) : [], 'output');
      break;
    case 'grad_accumulate':
      sameAs(ins[1], S(ins[0]), 'g');
      break;
    case 'grad_norm':
    case 'clip_coef':
      sameAs(n.outputs[0], [], 'output');
      break;
    case 'sgd_update':
    case 'adam_update': {
      const p = S(ins[0]);
      const last = ins.length - 1;
      for (let k = 1; k < last; k++) if (ins[k] >= 0) sameAs(ins[k], p, `input ${k}`);
      if (ins[last] >= 0) sameAs(ins[last], [], 'gscale');
      break;
    }
  }
  return out;
}

/** Throws an internal Error (a bug in mpsc) listing every problem. `what` names the graph in the message. */
export function verifyGraph(graph: Graph, what = 'graph'): void {
  const problems = graphProblems(graph);
  if (problems.length > 0) {
    throw new Error(`internal: invalid IR in ${what}:\n  ${problems.slice(0, 20).join('\n  ')}${problems.length > 20 ? `\n  ... and ${problems.length - 20} more` : ''}`);
  }
}
