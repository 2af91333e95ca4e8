/**
 * elementwise: GPU kernels of the IR nodes computed one output element per thread (no
 * barriers): unary/binary (with broadcasting), reshape, dropout, slice, concat, embedding,
 * batchnorm_eval, loss gradients that need no row statistics, sum_to. Consumes IR nodes;
 * produces KernelSpecs whose bodies are written in the lowering context's dialect. unary,
 * unary_grad, binary, reshape, dropout(_grad), slice, concat and sum_to read and write 16-bit
 * values too (widened on load, rounded on store: common.ts readF / writeF; fuse.ts rule 4).
 */
import type { Graph, Node } from '../ir/graph.js';
import { dropoutThreshold } from '../ir/philox.js';
import { BINARY_FNS_TABLE, UNARY_FNS_TABLE, isBinaryFn, isUnaryFn, unaryFnAttrs, type UnaryFn } from '../ir/scalar_fns.js';
import type { Dialect } from './dialect.js';
import type { KernelSpec, LowerCtx } from './kernel_types.js';
import { broadcastStrides } from '../ir/shapes.js';
import { argOf, elementwise, label, numAttr, numel, readF, scalarExpr, shapeOf, stridedIndex, stridesOf, writeF, EW_THREADS, ceilDiv } from './common.js';

const I = '  ';
/** inputs per concat kernel: + the output + the params struct stays within Metal's 31 bindings */
export const CONCAT_CHUNK = 29;

/** y = f(x) of the unary fn of node n (scalar-math table), x spelled `x` */
export function unaryFwd(ctx: LowerCtx, n: Node, x: string): string {
  const fn = unaryFnOf(n);
  return scalarExpr(ctx, UNARY_FNS_TABLE[fn].fwd, { x }, unaryFnAttrs(fn, (name, dflt) => numAttr(n, name, dflt)));
}

/** the gradient expression of node n's unary fn (a unary_grad, or a node carrying its fn), at x = `v` and incoming gradient `d` */
export function unaryGradExpr(ctx: LowerCtx, n: Node): string {
  const fn = unaryFnOf(n);
  return scalarExpr(ctx, UNARY_FNS_TABLE[fn].grad, { x: 'v', g: 'd' }, unaryFnAttrs(fn, (name, dflt) => numAttr(n, name, dflt)));
}

function unaryFnOf(n: Node): UnaryFn {
  const fn = String(n.attrs.fn);
  if (!isUnaryFn(fn)) throw new Error(`internal: node ${n.id} has unknown unary fn '${fn}'`);
  return fn;
}

/** index of an operand of shape `sh` broadcast to `out`, from output flat index i (statements defining `name`) */
export function broadcastIndex(d: Dialect, out: number[], sh: number[], name: string): string {
  return stridedIndex(d, 'i', out, broadcastStrides(sh, out), name, I);
}

export function lowerElementwise(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] | null {
  const ins = n.inputs, outs = n.outputs;
  const a = (k: number, name: string, acc: 'r' | 'w' | 'rw' = 'r') => argOf(g, name, k, acc);
  const d = ctx.d, f32 = (x: number) => d.f(x), u32 = (k: number) => d.u(k);
  /** element idx of input value id (named `name`) as float; the statement storing v into output k */
  const rd = (id: number, name: string, idx: string) => readF(d, g, id, name, idx);
  const wr = (k: number, name: string, idx: string, v: string) => writeF(d, g, outs[k], name, idx, v);
  switch (n.op) {
    case 'unary': {
      const body = `${I}const float v = ${rd(ins[0], 'x', 'i')};\n${I}${wr(0, 'y', 'i', unaryFwd(ctx, n, 'v'))}\n`;
      return [elementwise(ctx, g, n, [a(ins[0], 'x'), a(outs[0], 'y', 'w')], numel(shapeOf(g, outs[0])), body)];
    }
    case 'unary_grad': {
      const expr = unaryGradExpr(ctx, n);
      const body = `${I}const float ${/\bv\b/.test(expr) ? `v = ${rd(ins[1], 'x', 'i')}, ` : ''}d = ${rd(ins[0], 'dy', 'i')};\n${I}${wr(0, 'dx', 'i', expr)}\n`;
      return [elementwise(ctx, g, n, [a(ins[0], 'dy'), a(ins[1], 'x'), a(outs[0], 'dx', 'w')], numel(shapeOf(g, outs[0])), body)];
    }
    case 'binary': {
      const out = shapeOf(g, outs[0]);
      const fn = String(n.attrs.fn);
      if (!isBinaryFn(fn)) throw new Error(`internal: node ${n.id} has unknown binary fn '${fn}'`);
      const body = broadcastIndex(d, out, shapeOf(g, ins[0]), 'ia') + broadcastIndex(d, out, shapeOf(g, ins[1]), 'ib') +
        `${I}${wr(0, 'y', 'i', scalarExpr(ctx, BINARY_FNS_TABLE[fn].fwd, { a: rd(ins[0], 'a', 'ia'), b: rd(ins[1], 'b', 'ib') }, {}))}\n`;
      return [elementwise(ctx, g, n, [a(ins[0], 'a'), a(ins[1], 'b'), a(outs[0], 'y', 'w')], numel(out), body)];
    }
    case 'reshape':
      return [elementwise(ctx, g, n, [a(ins[0], 'x'), a(outs[0], 'y', 'w')], numel(shapeOf(g, outs[0])), `${I}${wr(0, 'y', 'i', rd(ins[0], 'x', 'i'))}\n`)];
    case 'dropout':
    case 'dropout_grad': {
      ctx.helpers.add('philox');
      const p = numAttr(n, 'p');
      const src = n.op === 'dropout' ? 'x' : 'dy', dst = n.op === 'dropout' ? 'y' : 'dx';
      const body =
        `${I}const uint h = mpsc_philox(sp.seed, ${u32(numAttr(n, 'stream'))}, i, sp.counter);\n` +
        `${I}${wr(0, dst, 'i', `h >= ${u32(dropoutThreshold(p))} ? ${rd(ins[0], src, 'i')} / ${f32(1 - p)} : ${f32(0)}`)}\n`;
      return [elementwise(ctx, g, n, [a(ins[0], src), a(outs[0], dst, 'w')], numel(shapeOf(g, outs[0])), body)];
    }
    case 'slice': {
      const xs = shapeOf(g, ins[0]), axis = numAttr(n, 'axis'), start = numAttr(n, 'start'), len = numAttr(n, 'length');
      const inner = numel(xs.slice(axis + 1));
      const body =
        `${I}const uint inn = i % ${u32(inner)}, l = (i / ${u32(inner)}) % ${u32(len)}, o = i / ${u32(inner * len)};\n` +
        `${I}${wr(0, 'y', 'i', rd(ins[0], 'x', `(o * ${u32(xs[axis])} + ${u32(start)} + l) * ${u32(inner)} + inn`))}\n`;
      return [elementwise(ctx, g, n, [a(ins[0], 'x'), a(outs[0], 'y', 'w')], numel(shapeOf(g, outs[0])), body)];
    }
    case 'concat': {
      // one kernel per chunk of at most CONCAT_CHUNK inputs (Metal's 31 buffer bindings), each
      // writing the slab of y its inputs cover
      const ys = shapeOf(g, outs[0]), axis = numAttr(n, 'axis');
      const inner = numel(ys.slice(axis + 1)), YL = ys[axis], outer = numel(ys.slice(0, axis));
      const kernels: KernelSpec[] = [];
      let start = 0;
      for (let c0 = 0; c0 < ins.length; c0 += CONCAT_CHUNK) {
        const chunk = ins.slice(c0, c0 + CONCAT_CHUNK);
        const CL = chunk.reduce((s, v) => s + shapeOf(g, v)[axis], 0);
        let body = `${I}const uint inn = i % ${u32(inner)}, l = (i / ${u32(inner)}) % ${u32(CL)}, o = i / ${u32(inner * CL)};\n` +
          `${I}const uint at = (o * ${u32(YL)} + ${u32(start)} + l) * ${u32(inner)} + inn;\n`;
        let s0 = 0;
        chunk.forEach((v, k) => {
          const L = shapeOf(g, v)[axis];
          body += `${I}${k === 0 ? '' : 'else '}if (l < ${u32(s0 + L)}) ${wr(0, 'y', 'at', rd(v, `x${k}`, `(o * ${u32(L)} + l - ${u32(s0)}) * ${u32(inner)} + inn`))}\n`;
          s0 += L;
        });
        const args = [...chunk.map((v, k) => a(v, `x${k}`)), a(outs[0], 'y', 'w')];
        const what = ins.length > CONCAT_CHUNK ? ` [inputs ${c0}..${c0 + chunk.length - 1}]` : '';
        kernels.push(elementwise(ctx, g, n, args, outer * CL * inner, body, what));
        start += CL;
      }
      return kernels;
    }
    case 'global_avgpool_grad': {
      const xs = n.attrs.x_shape as number[];
      const HW = xs[2] * xs[3];
      const v = `dy[i / ${u32(HW)}] / ${f32(HW)}`;
      // a folded relu-grad (fuse.ts rule 2): the mask gates each element (dx may be the mask's buffer: each thread reads its element first)
      if (n.attrs.relu_grad === true)
        return [elementwise(ctx, g, n, [a(ins[0], 'dy'), a(ins[1], 'mask'), a(outs[0], 'dx', 'w')], numel(xs), `${I}dx[i] = mask[i] > ${f32(0)} ? ${v} : ${f32(0)};\n`, ' + fused relu-grad')];
      return [elementwise(ctx, g, n, [a(ins[0], 'dy'), a(outs[0], 'dx', 'w')], numel(xs), `${I}dx[i] = ${v};\n`)];
    }
    case 'embedding': {
      const D = shapeOf(g, ins[1])[1];
      return [elementwise(ctx, g, n, [a(ins[0], 'ids'), a(ins[1], 'w'), a(outs[0], 'y', 'w')], numel(shapeOf(g, outs[0])),
        `${I}y[i] = w[uint(ids[i / ${u32(D)}]) * ${u32(D)} + i % ${u32(D)}];\n`)];
    }
    case 'embedding_grad': {
      const [V, D] = n.attrs.w_shape as number[];
      const J = numel(shapeOf(g, ins[1]));
      const body =
        `${I}const int v = int(i / ${u32(D)});\n${I}const uint d = i % ${u32(D)};\n${I}float acc = ${f32(0)};\n` +
        `${I}for (uint j = 0u; j < ${u32(J)}; ++j) if (ids[j] == v) acc += dy[j * ${u32(D)} + d];\n${I}dw[i] = acc;\n`;
      return [elementwise(ctx, g, n, [a(ins[0], 'dy'), a(ins[1], 'ids'), a(outs[0], 'dw', 'w')], V * D, body)];
    }
    case 'batchnorm_eval': {
      const xs = shapeOf(g, ins[0]);
      const C = xs[1], S = numel(xs.slice(2));
      const eps = numAttr(n, 'eps', 1e-5);
      const body = `${I}const uint c = (i / ${u32(S)}) % ${u32(C)};\n${I}y[i] = (x[i] - rm[c]) / ${d.math('sqrt', `rv[c] + ${f32(eps)}`)} * w[c] + b[c];\n`;
      return [elementwise(ctx, g, n, [a(ins[0], 'x'), a(ins[1], 'w'), a(ins[2], 'b'), a(ins[3], 'rm'), a(ins[4], 'rv'), a(outs[0], 'y', 'w')], numel(xs), body)];
    }
    case 'mse_grad': {
      const cnt = numel(shapeOf(g, ins[0]));
      return [elementwise(ctx, g, n, [a(ins[0], 'pred'), a(ins[1], 'target'), a(outs[0], 'dpred', 'w')], cnt, `${I}dpred[i] = (pred[i] - target[i]) * ${f32(2 / cnt)};\n`)];
    }
    case 'bce_with_logits_grad': {
      const cnt = numel(shapeOf(g, ins[0]));
      return [elementwise(ctx, g, n, [a(ins[0], 'x'), a(ins[1], 't'), a(outs[0], 'dx', 'w')], cnt,
        `${I}dx[i] = (${f32(1)} / (${f32(1)} + ${d.math('exp', '-x[i]')}) - t[i]) * ${f32(1 / cnt)};\n`)];
    }
    case 'sum_to': return [lowerSumTo(ctx, g, n)];
  }
  return null;
}

/**
 * The dims of a sum_to node, innermost first: the kept ones (the output's, row-major) and the
 * reduced ones, each with its size and x stride (dialect literals); RN terms per output, count outputs.
 * `innerReduced`: x's innermost dim is summed over (consecutive terms are adjacent in memory).
 */
export function sumToDims(d: Dialect, g: Graph, n: Node) {
  const xs = shapeOf(g, n.inputs[0]), ys = shapeOf(g, n.outputs[0]);
  const st = stridesOf(xs);
  const reduced = new Array(xs.length).fill(false);
  if (Array.isArray(n.attrs.axes)) {
    for (const ax of n.attrs.axes as number[]) reduced[ax] = true;
  } else {
    const off = xs.length - ys.length;
    for (let k = 0; k < xs.length; k++) reduced[k] = k < off || (ys[k - off] === 1 && xs[k] !== 1);
  }
  const kept: { size: string; stride: string }[] = [], red: { size: string; stride: string }[] = [];
  let RN = 1;
  for (let k = xs.length - 1; k >= 0; k--) {
    const e = { size: d.u(xs[k]), stride: d.u(st[k]) };
    if (reduced[k]) { red.push(e); RN *= xs[k]; } else kept.push(e);
  }
  const inner = xs.length - 1;
  return { kept, red, RN, count: numel(ys), innerReduced: inner >= 0 && reduced[inner] && xs[inner] > 1 };
}

/** sum_to's terms per partial sum: longer sums go in blocks of this many, the blocks' sums then added in order */
export const SUM_TO_BLOCK = 256;

function lowerSumTo(ctx: LowerCtx, g: Graph, n: Node): KernelSpec {
  const u32 = (k: number) => ctx.d.u(k), f0 = ctx.d.f(0);
  const { kept, red, RN, count } = sumToDims(ctx.d, g, n);
  const term = (indent: string) =>
    `${indent}uint q = t, off = base;\n` +
    red.map((k) => `${indent}{ const uint c = q % ${k.size}; q /= ${k.size}; off += c * ${k.stride}; }\n`).join('');
  const x = readF(ctx.d, g, n.inputs[0], 'x', 'off');
  // up to SUM_TO_BLOCK terms one after another; more in blocks of SUM_TO_BLOCK, each block's sum added to the
  // total in order: the rounding error grows with the block length plus the number of blocks, not with RN (a
  // global pool's bias gradient over 2 x 183 x 183 pixels drifted 2e-4 from float64 in one sequential sum)
  const loop = RN <= SUM_TO_BLOCK
    ? `  float acc = ${f0};\n  for (uint t = ${u32(0)}; t < ${u32(RN)}; ++t) {\n` + term('    ') + `    acc += ${x};\n  }\n`
    : `  float acc = ${f0};\n  for (uint t0 = ${u32(0)}; t0 < ${u32(RN)}; t0 += ${u32(SUM_TO_BLOCK)}) {\n` +
      `    const uint t1 = t0 + ${u32(SUM_TO_BLOCK)} < ${u32(RN)} ? t0 + ${u32(SUM_TO_BLOCK)} : ${u32(RN)};\n` +
      `    float part = ${f0};\n    for (uint t = t0; t < t1; ++t) {\n` + term('      ') + `      part += ${x};\n    }\n    acc += part;\n  }\n`;
  const body =
    `  // y[i] = sum of x over the reduced dims (${RN} terms per output${RN > SUM_TO_BLOCK ? `, in blocks of ${SUM_TO_BLOCK}` : ''})\n  uint rem = i, base = ${u32(0)};\n` +
    kept.map((k) => `  { const uint c = rem % ${k.size}; rem /= ${k.size}; base += c * ${k.stride}; }\n`).join('') +
    loop + `  ${writeF(ctx.d, g, n.outputs[0], 'y', 'i', 'acc')}\n`;
  return elementwise(ctx, g, n, [argOf(g, 'x', n.inputs[0], 'r'), argOf(g, 'y', n.outputs[0], 'w')], count, body);
}
