/**
 * tensor: GPU kernels of the tensor-algebra ops (compiler/ir/op_rules/tensor.ts), one thread
 * per output element or per reduction group, no barriers: permute, pad, broadcast_to,
 * masked_fill (mask broadcast and / or the causal rule), positions, reduce (sum / mean / max)
 * and reduce_max_grad. Consumes IR nodes; produces KernelSpecs in the context's dialect.
 * permute reads and writes 16-bit values too (common.ts readF / writeF; fuse.ts rule 4).
 * Relies on the reference's semantics (compiler/reference/tensor.ts): reduce max and its
 * gradient take the first maximal element of each group in row-major order, a NaN counting
 * as the maximum.
 */
import type { Graph, Node } from '../ir/graph.js';
import { broadcastShapes, broadcastStrides } from '../ir/shapes.js';
import { reducedShape } from '../ir/op_rules/tensor.js';
import type { Dialect } from './dialect.js';
import type { KernelSpec, LowerCtx } from './kernel_types.js';
import { argOf, boolAttr, elementwise, numAttr, numel, readF, shapeOf, stridedIndex, stridesOf, writeF } from './common.js';

const I = '  ';

function intList(n: Node, key: string): number[] {
  const v = n.attrs[key];
  if (!Array.isArray(v) || v.some((x) => typeof x !== 'number')) throw new Error(`internal: node ${n.id} (${n.op}): attr ${key} must be a number list`);
  return v as number[];
}

/** the kept and the reduced dims of a reduction over `axes` of x (each with size and x stride) */
function reduction(xs: number[], axes: number[]) {
  const st = stridesOf(xs);
  const keptShape = xs.filter((_, k) => !axes.includes(k)), keptStrides = st.filter((_, k) => !axes.includes(k));
  const redShape = axes.map((k) => xs[k]), redStrides = axes.map((k) => st[k]);
  return { keptShape, keptStrides, redShape, redStrides, count: numel(redShape) };
}

/** `base`: the x offset of the first element of group i (the output index) */
function groupBase(d: Dialect, r: ReturnType<typeof reduction>): string {
  return stridedIndex(d, 'i', r.keptShape, r.keptStrides, 'base', I);
}

/** the loop over group i (after groupBase): `t` in row-major order, `off` the x offset of element t */
function groupLoop(d: Dialect, r: ReturnType<typeof reduction>, body: string): string {
  return (
    `${I}for (uint t = 0u; t < ${d.u(r.count)}; ++t) {\n` +
    stridedIndex(d, 't', r.redShape, r.redStrides, 'roff', `${I}  `) +
    `${I}  const uint off = base + roff;\n` +
    body +
    `${I}}\n`
  );
}

/** statements (after groupBase) keeping in `bi` the x offset of the first maximal element (a NaN is the maximum) of the group */
function firstMax(d: Dialect, r: ReturnType<typeof reduction>): string {
  return (
    `${I}uint bi = 0u;\n${I}bool first = true;\n` +
    groupLoop(d, r,
      `${I}  const float v = x[off], b = x[bi];\n` +
      `${I}  if (first || (b == b && (v != v || v > b))) bi = off;\n` +
      `${I}  first = false;\n`)
  );
}

export function lowerTensor(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] | null {
  const ins = n.inputs, outs = n.outputs, d = ctx.d, u = (k: number) => d.u(k);
  const a = (v: number, name: string, acc: 'r' | 'w' = 'r') => argOf(g, name, v, acc);
  const ys = shapeOf(g, outs[0]), count = numel(ys);
  switch (n.op) {
    case 'permute': {
      const xs = shapeOf(g, ins[0]), perm = intList(n, 'perm'), st = stridesOf(xs);
      const body = stridedIndex(d, 'i', ys, perm.map((p) => st[p]), 'src', I) + `${I}${writeF(d, g, outs[0], 'y', 'i', readF(d, g, ins[0], 'x', 'src'))}\n`;
      return [elementwise(ctx, g, n, [a(ins[0], 'x'), a(outs[0], 'y', 'w')], count, body, ` (perm [${perm.join(',')}])`)];
    }
    case 'broadcast_to': {
      const xs = shapeOf(g, ins[0]);
      const body = stridedIndex(d, 'i', ys, broadcastStrides(xs, ys), 'src', I) + `${I}y[i] = x[src];\n`;
      return [elementwise(ctx, g, n, [a(ins[0], 'x'), a(outs[0], 'y', 'w')], count, body)];
    }
    case 'pad': {
      const xs = shapeOf(g, ins[0]), pads = intList(n, 'pads'), st = stridesOf(xs), value = numAttr(n, 'value', 0);
      // walk the output coordinates from the last dim; a coordinate outside the copy of x gives the fill
      let body = `${I}uint rem = i, src = 0u;\n${I}bool inside = true;\n`;
      for (let k = ys.length - 1; k >= 0; k--) {
        body += `${I}{\n${I}  const uint c = rem % ${u(ys[k])};\n`;
        const before = pads[2 * k], outside = [...(before > 0 ? [`c < ${u(before)}`] : []), ...(pads[2 * k + 1] > 0 ? [`c >= ${u(before + xs[k])}`] : [])];
        const at = before > 0 ? `(c - ${u(before)})` : 'c';
        body += outside.length
          ? `${I}  if (${outside.join(' || ')}) inside = false;\n${I}  else src += ${at} * ${u(st[k])};\n`
          : `${I}  src += c * ${u(st[k])};\n`;
        body += (k > 0 ? `${I}  rem /= ${u(ys[k])};\n` : '') + `${I}}\n`;
      }
      body += `${I}y[i] = inside ? x[src] : ${d.f(value)};\n`;
      return [elementwise(ctx, g, n, [a(ins[0], 'x'), a(outs[0], 'y', 'w')], count, body)];
    }
    case 'masked_fill': {
      const xs = shapeOf(g, ins[0]), hasMask = ins.length > 1 && ins[1] >= 0;
      const causal = boolAttr(n, 'causal'), invert = boolAttr(n, 'invert'), value = numAttr(n, 'value');
      const args = [a(ins[0], 'x')];
      let body = stridedIndex(d, 'i', ys, broadcastStrides(xs, ys), 'ix', I);
      const hits: string[] = [];
      if (hasMask) {
        const ms = shapeOf(g, ins[1]);
        if (!broadcastShapes(xs, ms)) throw new Error(`internal: node ${n.id}: mask does not broadcast`);
        args.push(a(ins[1], 'mask'));
        body += stridedIndex(d, 'i', ys, broadcastStrides(ms, ys), 'im', I);
        const zero = g.values[ins[1]].dtype === 'i32' ? '0' : d.f(0);
        hits.push(`(mask[im] ${invert ? '==' : '!='} ${zero})`);
      }
      if (causal) {
        // over the last two dims [T, S]: (t, s) is masked when s > t + (S - T)
        const T = ys[ys.length - 2], S = ys[ys.length - 1];
        body += `${I}const uint s = i % ${u(S)}, t = (i / ${u(S)}) % ${u(T)};\n`;
        hits.push(`s > t + ${u(S - T)}`);
      }
      body += `${I}y[i] = ${hits.join(' || ')} ? ${d.f(value)} : x[ix];\n`;
      args.push(a(outs[0], 'y', 'w'));
      return [elementwise(ctx, g, n, args, count, body, causal ? ' (causal)' : '')];
    }
    case 'positions': {
      const T = ys[1];
      return [elementwise(ctx, g, n, [a(outs[0], 'pos', 'w')], count, `${I}pos[i] = int(i % ${u(T)});\n`)];
    }
    case 'reduce': {
      const xs = shapeOf(g, ins[0]), axes = intList(n, 'axes'), fn = String(n.attrs.fn);
      const r = reduction(xs, axes);
      let body: string;
      if (fn === 'max') body = groupBase(d, r) + firstMax(d, r) + `${I}y[i] = x[bi];\n`;
      else if (fn === 'sum' || fn === 'mean')
        body = groupBase(d, r) + `${I}float acc = ${d.f(0)};\n` + groupLoop(d, r, `${I}  acc += x[off];\n`) +
          `${I}y[i] = ${fn === 'mean' ? `acc / ${d.f(r.count)}` : 'acc'};\n`;
      else throw new Error(`internal: node ${n.id}: unknown reduce fn '${fn}'`);
      return [elementwise(ctx, g, n, [a(ins[0], 'x'), a(outs[0], 'y', 'w')], count, body, ` (${fn} over [${axes.join(',')}])`)];
    }
    case 'reduce_max_grad': {
      // one thread per group: dy to its first maximal element, 0 to the others
      const xs = shapeOf(g, ins[1]), axes = intList(n, 'axes');
      const r = reduction(xs, axes), groups = numel(reducedShape(xs, axes, false));
      const body = groupBase(d, r) + firstMax(d, r) + groupLoop(d, r, `${I}  dx[off] = off == bi ? dy[i] : ${d.f(0)};\n`);
      return [elementwise(ctx, g, n, [a(ins[0], 'dy'), a(ins[1], 'x'), a(outs[0], 'dx', 'w')], groups, body)];
    }
  }
  return null;
}
