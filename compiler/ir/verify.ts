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
 *  - every op is in OPS; input count matches (optional inputs may be -1, trailing
 *    optional inputs may be left out, variadic ops take >= 2 inputs, grad_norm >= 1);
 *    output count matches
 *  - fusion attrs (fuse.ts): `epilogue` only on the GEMM family, naming a unary fn, with
 *    `epilogue_<name>` only for that fn's numeric attrs; `relu_grad` only on the pool and conv input
 *    gradients, exactly when the `mask` input is present, the mask an f32 of the output's
 *    shape; `relu_in` only on global_avgpool; `add_in` only on layernorm, exactly when it has the
 *    extra last input `addend` (a float of x's shape) and extra last output (the sum: f32, x's shape);
 *    `add_out` only on layernorm_grad, exactly with the extra last input `addend` (output 0's shape);
 *    `sum_out` only with add_out, exactly with an extra last output (f32 [D]: output 0's column sums), or on
 *    unary_grad or attention_qkv_grad, exactly with output 1 (f32 [D]: output 0's column sums, fuse.ts rules 14, 15; before fwd_out's f(x));
 *    `half_out` ('f16' | 'bf16') only with add_out, exactly with one more extra last output (output 0's shape in
 *    that type: output 0 rounded, fuse.ts rule 11), after sum_out's when both;
 *    `a_sums` only on a matmul {transA: true} of 2-D operands, exactly with an extra last output
 *    (f32 [M]: input 0's column sums, fuse.ts rule 8); `fwd_out` only on unary_grad, exactly with an
 *    extra last output (a float of x's shape: f(x), grad_fwd.ts); `c_sums` only on global_avgpool_grad and conv2d_grad_input, exactly
 *    with an extra last output (f32 [C]: output 0's channel sums, fuse.ts rule 9); `pool_out` only on conv2d, exactly
 *    with an extra last output (f32 [N, C, 1, 1]: output 0's global average pool, rule 10); `grad_fn` (a unary fn, with
 *    `grad_fn_<name>` for its numeric attrs) only on matmul, exactly with an extra last input (f32 of output 0's shape:
 *    the gradient's x, rule 12); `pre_out` only with an epilogue on linear / matmul, exactly with an extra last output
 *    (f32 of output 0's shape: the product before the epilogue, rule 13)
 *  - every referenced value id exists; dtypes/shapes are static (integer dims >= 1)
 *  - SSA: each non-persistent, non-input value is written by exactly one node,
 *    before any node reads it; persistent values and inputs are never node outputs
 *  - `mutates` inputs are persistent values
 *  - persistent values and inputs have unique names (programs share them by name)
 *  - mixed precision (compiler/ir/precision.ts): f16 / bf16 values are activations or gradients
 *    (never inputs, persistent values or outputs); a `cast` writes the type its `to` names; no op
 *    mutates a 16-bit value. Which other ops read or write them is the backend's business
 *    (precision.ts's canonical form has them only at `halfInputs` and casts; a backend's
 *    fuse.ts rule 4 folds casts into the kernels that widen / round as they load / store)
 *  - shapes and dtypes agree with each op's shape rule in the catalogue (ops.ts,
 *    op_rules/*.ts): every output has the shape the rule computes, and the rule's own
 *    checks of its inputs hold (matching parameter / gradient / optimizer-state shapes,
 *    i32 labels and ids, broadcasting, element counts)
 */
import { OPS, type OpDef, type ShapeCtx, isOpName, opDef } from './ops.js';
import { isHalf, isPersistent, type Graph, type Node, type Value } from './graph.js';
import { A_SUMS_OPS, C_SUMS_OPS, POOL_OUT_OPS, ADD_IN_OPS, ADD_OUT_OPS, EPILOGUE_ATTR, FWD_OUT_OPS, EPILOGUE_OPS, GRAD_FN_ATTR, GRAD_FN_OPS, PRE_OUT_OPS, RELU_GRAD_OPS, RELU_IN_OPS, SUM_OUT_OPS } from './fuse.js';
import { UNARY_FNS_TABLE, isUnaryFn } from './scalar_fns.js';
import { pairOf } from './shapes.js';

export function graphProblems(graph: Graph): string[] {
  const problems: string[] = [];
  const { values, nodes } = graph;
  const persistentNames = new Map<string, number>();
  values.forEach((v, i) => {
    if (v.id !== i) problems.push(`value at index ${i} has id ${v.id}`);
    if (!['f32', 'i32', 'f16', 'bf16'].includes(v.dtype)) problems.push(`value %${i} (${v.name}) has unknown dtype ${v.dtype}`);
    if (isHalf(v.dtype) && v.kind !== 'activation' && v.kind !== 'grad') problems.push(`value %${i} (${v.name}) is ${v.kind} but ${v.dtype}: only activations and gradients may be 16-bit`);
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
    if (!isOpName(n.op)) {
      problems.push(`${where}: unknown op`);
      return;
    }
    const def = OPS[n.op];
    // fusion extras after the op's own inputs / outputs: the addend (add_in, add_out: fuse.ts rules 5, 6) and one
    // extra last output (add_in's sum; sum_out, a_sums, fwd_out: rules 7, 8, grad_fwd.ts)
    const addIn = n.attrs.add_in === true && (ADD_IN_OPS as readonly string[]).includes(n.op);
    const addOut = n.attrs.add_out === true && (ADD_OUT_OPS as readonly string[]).includes(n.op);
    const extraOut = (addOut && n.attrs.sum_out === true) || (n.attrs.a_sums === true && (A_SUMS_OPS as readonly string[]).includes(n.op)) ||
      (n.attrs.c_sums === true && (C_SUMS_OPS as readonly string[]).includes(n.op)) || (n.attrs.pool_out === true && (POOL_OUT_OPS as readonly string[]).includes(n.op)) ||
      (n.attrs.fwd_out === true && (FWD_OUT_OPS as readonly string[]).includes(n.op));
    const halfOut = addOut && n.attrs.half_out !== undefined;
    // a unary / attention gradient's column sums (rules 14, 15): output 1, one more extra output beside fwd_out's
    const gradSum = n.attrs.sum_out === true && (SUM_OUT_OPS as readonly string[]).includes(n.op);
    // rule 12's x (an extra last input) and rule 13's product before the epilogue (an extra last output)
    const gradFn = n.attrs[GRAD_FN_ATTR] !== undefined && (GRAD_FN_OPS as readonly string[]).includes(n.op);
    const preOut = n.attrs.pre_out === true && (PRE_OUT_OPS as readonly string[]).includes(n.op);
    const extras = (addIn || extraOut || preOut ? 1 : 0) + (halfOut ? 1 : 0) + (gradSum ? 1 : 0);
    const ins = addIn || addOut || gradFn ? n.inputs.slice(0, -1) : n.inputs, outs = extras ? n.outputs.slice(0, -extras) : n.outputs;
    const variadic = def.inputs.includes('...');
    if (variadic) {
      const min = def.minInputs ?? 2;
      if (n.inputs.length < min) problems.push(`${where}: needs at least ${min} inputs, has ${n.inputs.length}`);
      if (n.inputs.some((id) => id === -1)) problems.push(`${where}: variadic inputs cannot be absent (-1)`);
    } else {
      const required = def.inputs.length - [...def.inputs].reverse().findIndex((name) => !name.endsWith('?'));
      const least = required > def.inputs.length ? 0 : required;
      if (ins.length < least || ins.length > def.inputs.length) {
        problems.push(`${where}: expects ${def.inputs.length} inputs (${def.inputs.join(', ')})${addIn || addOut ? ' and the addend' : ''}, has ${n.inputs.length}`);
      }
    }
    n.inputs.forEach((id, k) => {
      if (id === -1) {
        if (variadic || k >= ins.length || !def.inputs[k]?.endsWith('?')) problems.push(`${where}: required input ${def.inputs[k] ?? k} is absent`);
        return;
      }
      if (!validId(id)) {
        problems.push(`${where}: input ${k} refers to unknown value ${id}`);
        return;
      }
      const v = values[id];
      if (isHalf(v.dtype) && (def.mutates ?? []).includes(k)) problems.push(`${where}: mutates ${v.dtype} value %${id} (${v.name}); updated values are f32`);
      if (!isPersistent(v) && v.kind !== 'input' && (writtenBy[id] === -1 || writtenBy[id] >= i)) {
        problems.push(`${where}: reads %${id} (${v.name}) before it is written`);
      }
    });
    for (const m of def.mutates ?? []) {
      const id = n.inputs[m];
      if (id === -1 || id === undefined || !validId(id)) continue;
      if (!isPersistent(values[id])) problems.push(`${where}: mutates %${id} (${values[id].name}) which is not persistent (${values[id].kind})`);
    }
    if (outs.length !== def.outputs.length) {
      problems.push(`${where}: expects ${def.outputs.length} outputs${addIn || extraOut ? ' and the sum' : ''}, has ${n.outputs.length}`);
    }
    for (const id of n.outputs) {
      if (!validId(id)) {
        problems.push(`${where}: output refers to unknown value ${id}`);
        continue;
      }
      const v = values[id];
      if (isPersistent(v) || v.kind === 'input') problems.push(`${where}: writes ${v.kind} value %${id} (${v.name}); only 'mutates' may change it`);
      if (n.op === 'cast' && v.dtype !== n.attrs.to) problems.push(`${where}: writes ${v.dtype} value %${id} (${v.name}) but casts to ${String(n.attrs.to)}`);
      if (writtenBy[id] !== -1) problems.push(`${where}: writes %${id} (${v.name}) already written by node #${writtenBy[id]}`);
      else writtenBy[id] = i;
    }
  });
  values.forEach((v, i) => {
    if (!isPersistent(v) && v.kind !== 'input' && writtenBy[i] === -1) problems.push(`value %${i} (${v.name}, ${v.kind}) is never written`);
  });
  if (problems.length === 0) for (const n of nodes) problems.push(...shapeProblems(graph, n, opDef(n.op)), ...fusionProblems(graph, n));
  return problems;
}

/** the fusion attrs of fuse.ts on one node; assumes ids are valid (checked before) */
function fusionProblems(graph: Graph, n: Node): string[] {
  const out: string[] = [];
  const where = `node #${n.id} (${n.op}${n.path ? ` at ${n.path}` : ''})`;
  const fn = n.attrs[EPILOGUE_ATTR];
  if (fn !== undefined) {
    if (!(EPILOGUE_OPS as readonly string[]).includes(n.op)) out.push(`${where}: a fused epilogue is only allowed on ${EPILOGUE_OPS.join(', ')}`);
    if (typeof fn !== 'string' || !isUnaryFn(fn)) out.push(`${where}: epilogue '${String(fn)}' is not a unary fn`);
  }
  const fnAttrs: Record<string, number> = typeof fn === 'string' && isUnaryFn(fn) ? UNARY_FNS_TABLE[fn].attrs : {};
  for (const [k, v] of Object.entries(n.attrs)) {
    if (!k.startsWith(`${EPILOGUE_ATTR}_`)) continue;
    const name = k.slice(EPILOGUE_ATTR.length + 1);
    if (!(name in fnAttrs)) out.push(`${where}: attr ${k} does not belong to the epilogue${fn === undefined ? ' (there is none)' : ` '${String(fn)}'`}`);
    else if (typeof v !== 'number') out.push(`${where}: attr ${k} must be a number`);
  }
  const pool = (RELU_GRAD_OPS as readonly string[]).includes(n.op);
  const rg = n.attrs.relu_grad;
  if (rg !== undefined && (!pool || typeof rg !== 'boolean')) out.push(`${where}: relu_grad is only a boolean of ${RELU_GRAD_OPS.join(', ')}`);
  if (pool) {
    const k = opDef(n.op).inputs.indexOf('mask?');
    const mask = n.inputs[k] ?? -1;
    if ((mask >= 0) !== (rg === true)) out.push(`${where}: the mask input is present exactly when relu_grad is true`);
    if (mask >= 0) {
      const m = graph.values[mask], dx = graph.values[n.outputs[0]];
      if (m.dtype !== 'f32' || !eq(m.shape, dx.shape)) out.push(`${where}: mask %${mask} is ${m.dtype}${fmt(m.shape)}, expected f32${fmt(dx.shape)} (the output's shape)`);
    }
  }
  const ri = n.attrs.relu_in;
  if (ri !== undefined && (!(RELU_IN_OPS as readonly string[]).includes(n.op) || typeof ri !== 'boolean')) out.push(`${where}: relu_in is only a boolean of ${RELU_IN_OPS.join(', ')}`);
  const ai = n.attrs.add_in;
  if (ai !== undefined && (!(ADD_IN_OPS as readonly string[]).includes(n.op) || ai !== true)) out.push(`${where}: add_in is only \`true\` on ${ADD_IN_OPS.join(', ')}`);
  else if (ai === true) {
    const x = graph.values[n.inputs[0]];
    if (n.inputs.length !== opDef(n.op).inputs.length + 1) out.push(`${where}: add_in needs every input (-1 for an absent one) and the addend last`);
    for (const [what, id] of [['addend', n.inputs[n.inputs.length - 1]], ['sum', n.outputs[n.outputs.length - 1]]] as const) {
      const v = graph.values[id];
      const ok = v && (what === 'sum' ? v.dtype === 'f32' : v.dtype !== 'i32') && eq(v.shape, x.shape);
      if (!ok) out.push(`${where}: the ${what} %${id} is ${v ? `${v.dtype}${fmt(v.shape)}` : 'absent'}, expected ${what === 'sum' ? 'f32' : 'a float'}${fmt(x.shape)} (x's shape)`);
    }
  }
  const ao = n.attrs.add_out;
  if (ao !== undefined && (!(ADD_OUT_OPS as readonly string[]).includes(n.op) || ao !== true)) out.push(`${where}: add_out is only \`true\` on ${ADD_OUT_OPS.join(', ')}`);
  else if (ao === true) {
    const y = graph.values[n.outputs[0]], r = graph.values[n.inputs[n.inputs.length - 1]];
    if (n.inputs.length !== opDef(n.op).inputs.length + 1) out.push(`${where}: add_out needs every input (-1 for an absent one) and the addend last`);
    else if (!r || r.dtype === 'i32' || !eq(r.shape, y.shape)) out.push(`${where}: the addend is ${r ? `${r.dtype}${fmt(r.shape)}` : 'absent'}, expected a float${fmt(y.shape)} (output 0's shape)`);
  }
  const ho = n.attrs.half_out;
  if (ho !== undefined && (ao !== true || (ho !== 'f16' && ho !== 'bf16'))) out.push(`${where}: half_out is only 'f16' or 'bf16', with add_out`);
  else if (ho !== undefined) {
    const y = graph.values[n.outputs[0]], hv = graph.values[n.outputs[n.outputs.length - 1]];
    if (!hv || hv.dtype !== ho || !eq(hv.shape, y.shape)) out.push(`${where}: the 16-bit copy is ${hv ? `${hv.dtype}${fmt(hv.shape)}` : 'absent'}, expected ${ho}${fmt(y.shape)} (output 0's shape)`);
  }
  const so = n.attrs.sum_out;
  const ownSum = (SUM_OUT_OPS as readonly string[]).includes(n.op);
  if (so !== undefined && ((ao !== true && !ownSum) || so !== true)) out.push(`${where}: sum_out is only \`true\`, with add_out or on ${SUM_OUT_OPS.join(', ')}`);
  else if (so === true) {
    const y = graph.values[n.outputs[0]], sv = graph.values[n.outputs[ownSum ? 1 : n.outputs.length - 1 - (ho !== undefined ? 1 : 0)]];
    if (!sv || sv.dtype !== 'f32' || !eq(sv.shape, y.shape.slice(-1))) out.push(`${where}: the column sums are ${sv ? `${sv.dtype}${fmt(sv.shape)}` : 'absent'}, expected f32${fmt(y.shape.slice(-1))}`);
  }
  const gf = n.attrs[GRAD_FN_ATTR];
  if (gf !== undefined && (!(GRAD_FN_OPS as readonly string[]).includes(n.op) || typeof gf !== 'string' || !isUnaryFn(gf))) out.push(`${where}: grad_fn is only a unary fn's name, on ${GRAD_FN_OPS.join(', ')}`);
  else if (gf !== undefined) {
    const x = graph.values[n.inputs[n.inputs.length - 1]], dx = graph.values[n.outputs[0]];
    if (n.inputs.length !== opDef(n.op).inputs.length + 1) out.push(`${where}: grad_fn needs every input and the gradient's x last`);
    else if (!x || x.dtype !== 'f32' || dx.dtype !== 'f32' || !eq(x.shape, dx.shape)) out.push(`${where}: the gradient's x is ${x ? `${x.dtype}${fmt(x.shape)}` : 'absent'}, expected f32${fmt(dx.shape)} (output 0's shape, f32)`);
    const gAttrs = UNARY_FNS_TABLE[gf as keyof typeof UNARY_FNS_TABLE].attrs;
    for (const [k, v] of Object.entries(n.attrs)) {
      if (!k.startsWith(`${GRAD_FN_ATTR}_`)) continue;
      if (!(k.slice(GRAD_FN_ATTR.length + 1) in gAttrs) || typeof v !== 'number') out.push(`${where}: attr ${k} is not a number attr of '${gf}'`);
    }
  }
  const pre = n.attrs.pre_out;
  if (pre !== undefined && (!(PRE_OUT_OPS as readonly string[]).includes(n.op) || pre !== true || fn === undefined)) out.push(`${where}: pre_out is only \`true\` with an epilogue, on ${PRE_OUT_OPS.join(', ')}`);
  else if (pre === true) {
    const y = graph.values[n.outputs[0]], pv = graph.values[n.outputs[n.outputs.length - 1]];
    if (n.outputs.length !== 2 || !pv || pv.dtype !== 'f32' || !eq(pv.shape, y.shape)) out.push(`${where}: the product before the epilogue is ${pv && n.outputs.length === 2 ? `${pv.dtype}${fmt(pv.shape)}` : 'absent'}, expected f32${fmt(y.shape)} (output 0's shape)`);
  }
  const fo = n.attrs.fwd_out;
  if (fo !== undefined && (!(FWD_OUT_OPS as readonly string[]).includes(n.op) || fo !== true)) out.push(`${where}: fwd_out is only \`true\` on ${FWD_OUT_OPS.join(', ')}`);
  else if (fo === true) {
    const x = graph.values[n.inputs[1]], y = graph.values[n.outputs[n.outputs.length - 1]];
    if (!x || !y || y.dtype === 'i32' || !eq(y.shape, x.shape)) out.push(`${where}: the forward output is ${y ? `${y.dtype}${fmt(y.shape)}` : 'absent'}, expected a float${x ? fmt(x.shape) : ''} (x's shape)`);
  }
  const cs = n.attrs.c_sums;
  if (cs !== undefined && (!(C_SUMS_OPS as readonly string[]).includes(n.op) || cs !== true)) out.push(`${where}: c_sums is only \`true\` on ${C_SUMS_OPS.join(', ')}`);
  else if (cs === true) {
    const y = graph.values[n.outputs[0]], sv = graph.values[n.outputs[n.outputs.length - 1]];
    if (!y || y.shape.length !== 4 || !sv || sv.dtype !== 'f32' || !eq(sv.shape, [y.shape[1]])) {
      out.push(`${where}: the channel sums are ${sv ? `${sv.dtype}${fmt(sv.shape)}` : 'absent'}, expected f32[C] of a 4-D output 0`);
    }
  }
  const po = n.attrs.pool_out;
  if (po !== undefined && (!(POOL_OUT_OPS as readonly string[]).includes(n.op) || po !== true)) out.push(`${where}: pool_out is only \`true\` on ${POOL_OUT_OPS.join(', ')}`);
  else if (po === true) {
    const y = graph.values[n.outputs[0]], pv = graph.values[n.outputs[n.outputs.length - 1]];
    if (!y || y.shape.length !== 4 || y.dtype !== 'f32' || !pv || pv.dtype !== 'f32' || !eq(pv.shape, [y.shape[0], y.shape[1], 1, 1])) {
      out.push(`${where}: the pooled output is ${pv ? `${pv.dtype}${fmt(pv.shape)}` : 'absent'}, expected f32[N, C, 1, 1] of an f32 output 0`);
    }
  }
  const as = n.attrs.a_sums;
  if (as !== undefined && (!(A_SUMS_OPS as readonly string[]).includes(n.op) || as !== true)) out.push(`${where}: a_sums is only \`true\` on ${A_SUMS_OPS.join(', ')}`);
  else if (as === true) {
    const a = graph.values[n.inputs[0]], b = graph.values[n.inputs[1]], sv = graph.values[n.outputs[n.outputs.length - 1]];
    if (n.attrs.transA !== true || n.attrs.transB === true || a?.shape.length !== 2 || b?.shape.length !== 2) out.push(`${where}: a_sums needs transA (not transB) over 2-D operands`);
    else if (!sv || sv.dtype !== 'f32' || !eq(sv.shape, a.shape.slice(1))) out.push(`${where}: the column sums of a are ${sv ? `${sv.dtype}${fmt(sv.shape)}` : 'absent'}, expected f32${fmt(a.shape.slice(1))}`);
  }
  return out;
}

const fmt = (s: readonly number[]) => `[${s.join(',')}]`;
const eq = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((d, i) => d === b[i]);

/** The op's shape rule (ops.ts) run on one node, its output shapes compared; assumes ids are valid (checked before). */
function shapeProblems(graph: Graph, n: Node, def: OpDef): string[] {
  const out: string[] = [];
  const where = `node #${n.id} (${n.op}${n.path ? ` at ${n.path}` : ''})`;
  const V = (id: number | undefined): Value | undefined => (id !== undefined && id >= 0 ? graph.values[id] : undefined);
  const S = (k: number) => V(n.inputs[k])?.shape ?? [];
  const want = (cond: boolean, msg: string) => {
    if (!cond) out.push(`${where}: ${msg}`);
  };
  const ctx: ShapeCtx = {
    count: n.inputs.length,
    in: S,
    has: (k) => V(n.inputs[k]) !== undefined,
    dtype: (k) => V(n.inputs[k])?.dtype,
    attrs: n.attrs,
    shapeAttr: (name) => (Array.isArray(n.attrs[name]) ? (n.attrs[name] as number[]) : []),
    pairAttr: (name) => pairOf(n.attrs[name]) ?? [NaN, NaN],
    want,
    sameAs: (k, shape, what) => want(eq(S(k), shape), `${what} has shape ${fmt(S(k))}, expected ${fmt(shape)}`),
  };
  const shapes = def.shape(ctx);
  n.outputs.forEach((id, k) => {
    const got = V(id)?.shape ?? [];
    if (shapes[k] !== undefined) want(eq(got, shapes[k]), `output ${def.outputs[k]} has shape ${fmt(got)}, expected ${fmt(shapes[k])}`);
  });
  return out;
}

/** Throws an internal Error (a bug in mpsc) listing every problem. `what` names the graph in the message. */
export function verifyGraph(graph: Graph, what = 'graph'): void {
  const problems = graphProblems(graph);
  if (problems.length > 0) {
    throw new Error(`internal: invalid IR in ${what}:\n  ${problems.slice(0, 20).join('\n  ')}${problems.length > 20 ? `\n  ... and ${problems.length - 20} more` : ''}`);
  }
}
