/**
 * reduce: GPU kernels of the ops that reduce with SIMD-group reductions and shared memory:
 * softmax / log_softmax (+ grads), cross_entropy_grad (one threadgroup per row),
 * batchnorm_train / batchnorm_grad (one threadgroup per channel), layernorm (+ grad),
 * and the scalar losses / metrics / grad_norm (one threadgroup for everything).
 * Consumes IR nodes; produces KernelSpecs (bodies from rows.ts, in the context's dialect).
 * cross_entropy, cross_entropy_grad, layernorm and layernorm_grad read (and write) 16-bit logits / x /
 * dlogits / y / dy / dx too (common.ts readF / writeF; fuse.ts rule 4).
 */
import type { Graph, Node } from '../ir/graph.js';
import type { Dialect } from './dialect.js';
import type { KernelSpec, LowerCtx } from './kernel_types.js';
import { argOf, blockKernel, elementwise, numAttr, numel, readF, rowThreads, shapeOf, writeF } from './common.js';
import { type Io, chanBatchnorm, chanBatchnormGrad, reduceAll, rowCrossEntropyGrad, rowLayernorm, rowLayernormGrad, rowNllGrad, rowSoftmax, rowSoftmaxGrad } from './rows.js';

/** a class loss / metric node's rows: logits [..., C] as R rows of C, and its ignore_index (if any) */
function classRows(g: Graph, n: Node): { R: number; C: number; ignore?: number } {
  const xs = shapeOf(g, n.inputs[0]), C = xs[xs.length - 1];
  return { R: numel(xs) / C, C, ignore: n.attrs.ignore_index === undefined ? undefined : numAttr(n, 'ignore_index') };
}

const B = '    ';
/** inputs per grad_norm kernel: + the output + the params struct stays within Metal's 31 bindings */
export const GRAD_NORM_CHUNK = 29;

/** access to the buffers of these values by name (16-bit ones widened / rounded) */
function ioOf(d: Dialect, g: Graph, named: Record<string, number>): Io {
  return {
    rd: (name, idx) => readF(d, g, named[name], name, idx),
    wr: (name, idx, v) => writeF(d, g, named[name], name, idx, v),
  };
}

export function lowerReduce(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] | null {
  const ins = n.inputs, outs = n.outputs;
  const a = (v: number, name: string, acc: 'r' | 'w' | 'rw' = 'r') => argOf(g, name, v, acc);
  const d = ctx.d, u32 = (k: number) => d.u(k);
  const has = (k: number) => ins.length > k && ins[k] >= 0;
  const io = (named: Record<string, number>): Io => ioOf(d, g, named);
  switch (n.op) {
    case 'softmax': case 'log_softmax': case 'softmax_grad': case 'log_softmax_grad': {
      const xs = shapeOf(g, ins[0]), axis = numAttr(n, 'axis');
      const Ln = xs[axis], inner = numel(xs.slice(axis + 1)), rows = numel(xs) / Ln;
      const T = rowThreads(Ln);
      const view = { L: u32(Ln), inner: u32(inner), rowSpan: u32(Ln * inner), log: n.op.startsWith('log') };
      if (n.op.endsWith('_grad'))
        return [blockKernel(ctx, g, n, [a(ins[0], 'dy'), a(ins[1], 'y'), a(outs[0], 'dx', 'w')], rows, T, (s) => rowSoftmaxGrad(d, s, view))];
      return [blockKernel(ctx, g, n, [a(ins[0], 'x'), a(outs[0], 'y', 'w')], rows, T, (s) => rowSoftmax(d, s, view))];
    }
    case 'cross_entropy_grad': case 'nll_grad': {
      // one threadgroup per position (row of C); the kept count is summed by each threadgroup
      // (nll_grad without ignore_index: one thread per element)
      const { R, C, ignore } = classRows(g, n);
      if (n.op === 'nll_grad') {
        if (ignore === undefined)
          return [elementwise(ctx, g, n, [a(ins[1], 'label'), a(outs[0], 'dlogp', 'w')], R * C,
            `  dlogp[i] = int(i % ${u32(C)}) == label[i / ${u32(C)}] ? ${d.f(-1 / R)} : ${d.f(0)};\n`)];
        return [blockKernel(ctx, g, n, [a(ins[1], 'label'), a(outs[0], 'dlogp', 'w')], R, rowThreads(Math.max(C, R)),
          (s) => rowNllGrad(d, s, { C, R, ignore }))];
      }
      const ls = numAttr(n, 'label_smoothing', 0);
      return [blockKernel(ctx, g, n, [a(ins[0], 'logits'), a(ins[1], 'label'), a(outs[0], 'dlogits', 'w')], R, rowThreads(ignore === undefined ? C : Math.max(C, R)),
        (s) => rowCrossEntropyGrad(d, s, { C, ls, R, ignore }, io({ logits: ins[0], dlogits: outs[0] })))];
    }
    case 'layernorm': {
      // a residual add folded in (fuse.ts rule 5) has only CUDA's warp-per-row kernel (codegen-cuda/layernorm_cuda.ts)
      if (n.attrs.add_in === true) throw new Error(`internal: node ${n.id}: the shared layernorm kernel has no folded residual add (add_in)`);
      const xs = shapeOf(g, ins[0]);
      const D = xs[xs.length - 1], rows = numel(xs) / D;
      const weight = has(1), bias = has(2);
      const args = [a(ins[0], 'x'), ...(weight ? [a(ins[1], 'w')] : []), ...(bias ? [a(ins[2], 'b')] : []), a(outs[0], 'y', 'w'), a(outs[1], 'mean', 'w'), a(outs[2], 'rstd', 'w')];
      return [blockKernel(ctx, g, n, args, rows, rowThreads(D), (s) => rowLayernorm(d, s, { D, eps: numAttr(n, 'eps', 1e-5), weight, bias }, io({ x: ins[0], y: outs[0] })))];
    }
    case 'layernorm_grad': {
      if (n.attrs.add_out === true) throw new Error(`internal: node ${n.id}: the shared layernorm_grad kernels have no folded residual-gradient add (add_out)`);
      const { D, rows } = layernormRows(g, n);
      const dxK = layernormGradDx(ctx, g, n);
      // one thread per feature d: sums over the rows
      const body =
        `  float sw = ${d.f(0)}, sb = ${d.f(0)};\n` +
        `  for (uint r = 0u; r < ${u32(rows)}; ++r) {\n    const uint e = r * ${u32(D)} + i;\n` +
        `    sb += ${readF(d, g, ins[0], 'dy', 'e')};\n    sw += ${readF(d, g, ins[0], 'dy', 'e')} * (${readF(d, g, ins[1], 'x', 'e')} - mean[r]) * rstd[r];\n  }\n  ${writeF(d, g, outs[1], 'dweight', 'i', 'sw')}\n  ${writeF(d, g, outs[2], 'dbias', 'i', 'sb')}\n`;
      const dwK = elementwise(ctx, g, n,
        [a(ins[0], 'dy'), a(ins[1], 'x'), a(ins[3], 'mean'), a(ins[4], 'rstd'), a(outs[1], 'dweight', 'w'), a(outs[2], 'dbias', 'w')],
        D, body, ' [dweight, dbias]');
      return [dxK, dwK];
    }
    case 'batchnorm_train': {
      const xs = shapeOf(g, ins[0]);
      const C = xs[1], S = numel(xs.slice(2)), m = xs[0] * S;
      const mom = numAttr(n, 'momentum', 0.1);
      return [blockKernel(ctx, g, n,
        [a(ins[0], 'x'), a(ins[1], 'w'), a(ins[2], 'b'), a(ins[3], 'rmean', 'rw'), a(ins[4], 'rvar', 'rw'),
          a(outs[0], 'y', 'w'), a(outs[1], 'mean', 'w'), a(outs[2], 'invstd', 'w')],
        C, rowThreads(m), (s) => chanBatchnorm(d, s, { C, N: xs[0], S, eps: numAttr(n, 'eps', 1e-5), momentum: mom }))];
    }
    case 'batchnorm_grad': {
      const xs = shapeOf(g, ins[1]);
      const C = xs[1], S = numel(xs.slice(2)), m = xs[0] * S;
      return [blockKernel(ctx, g, n,
        [a(ins[0], 'dy'), a(ins[1], 'x'), a(ins[2], 'w'), a(ins[3], 'mean'), a(ins[4], 'invstd'),
          a(outs[0], 'dx', 'w'), a(outs[1], 'dweight', 'w'), a(outs[2], 'dbias', 'w')],
        C, rowThreads(m), (s) => chanBatchnormGrad(d, s, { C, N: xs[0], S }))];
    }
  }
  return lowerScalarReduce(ctx, g, n);
}

/** a layernorm(_grad) node's rows: x [..., D] as `rows` rows of D */
export function layernormRows(g: Graph, n: Node): { D: number; rows: number } {
  const xs = shapeOf(g, n.inputs[n.op === 'layernorm_grad' ? 1 : 0]);
  const D = xs[xs.length - 1];
  return { D, rows: numel(xs) / D };
}

/** layernorm_grad's dx kernel: one threadgroup per row (the weight and bias gradients are separate kernels) */
export function layernormGradDx(ctx: LowerCtx, g: Graph, n: Node): KernelSpec {
  const ins = n.inputs, a = (v: number, name: string, acc: 'r' | 'w' = 'r') => argOf(g, name, v, acc);
  const { D, rows } = layernormRows(g, n);
  const weight = ins.length > 2 && ins[2] >= 0;
  return blockKernel(ctx, g, n,
    [a(ins[0], 'dy'), a(ins[1], 'x'), ...(weight ? [a(ins[2], 'w')] : []), a(ins[3], 'mean'), a(ins[4], 'rstd'), a(n.outputs[0], 'dx', 'w')],
    rows, rowThreads(D), (s) => rowLayernormGrad(ctx.d, s, { D, weight }, ioOf(ctx.d, g, { dy: ins[0], x: ins[1], dx: n.outputs[0] })), ' [dx]');
}

function lowerScalarReduce(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] | null {
  const ins = n.inputs, outs = n.outputs;
  const a = (v: number, name: string, acc: 'r' | 'w' | 'rw' = 'r') => argOf(g, name, v, acc);
  const d = ctx.d, u32 = (k: number) => d.u(k), f32 = (x: number) => d.f(x);
  const exp = (x: string) => d.math('exp', x), log = (x: string) => d.math('log', x);
  let loops: { count: string; item: string }[];
  let finish: string;
  let args;
  let T: number;
  let counted = false;
  /** a class loss / metric: the row item only for kept labels, which it counts; the mean over the kept rows */
  const classLoop = (item: string, out: string) => {
    const { R, ignore } = classRows(g, n);
    if (ignore === undefined) return { loops: [{ count: u32(R), item }], finish: `${B}${out}[0] = total / ${f32(R)};`, T: rowThreads(R), counted: false };
    return {
      loops: [{ count: u32(R), item: `${B}if (label[j] != ${ignore}) {\n${B}cnt += ${f32(1)};\n${item}\n${B}}` }],
      finish: `${B}${out}[0] = total / count;`, T: rowThreads(R), counted: true,
    };
  };
  switch (n.op) {
    case 'cross_entropy': {
      const { C } = classRows(g, n);
      const ls = numAttr(n, 'label_smoothing', 0);
      const x = (idx: string) => readF(d, g, ins[0], 'logits', idx);
      args = [a(ins[0], 'logits'), a(ins[1], 'label'), a(outs[0], 'loss', 'w')];
      ({ loops, finish, T, counted } = classLoop(
        `${B}const uint base = j * ${u32(C)};\n${B}float m = ${f32(-Infinity)};\n` +
        `${B}for (uint c = 0u; c < ${u32(C)}; ++c) m = ${d.math('max', 'm', x('base + c'))};\n` +
        (ls
          ? `${B}float s = ${f32(0)}, sx = ${f32(0)};\n` +
            `${B}for (uint c = 0u; c < ${u32(C)}; ++c) { s += ${exp(`${x('base + c')} - m`)}; sx += ${x('base + c')}; }\n`
          : `${B}float s = ${f32(0)};\n` +
            `${B}for (uint c = 0u; c < ${u32(C)}; ++c) s += ${exp(`${x('base + c')} - m`)};\n`) +
        `${B}const float lse = m + ${log('s')};\n` +
        `${B}part += -${f32(1 - ls)} * (${x('base + uint(label[j])')} - lse)` + (ls ? ` - ${f32(ls / C)} * (sx - ${f32(C)} * lse);` : ';'),
        'loss'));
      break;
    }
    case 'nll': {
      const { C } = classRows(g, n);
      args = [a(ins[0], 'logp'), a(ins[1], 'label'), a(outs[0], 'loss', 'w')];
      ({ loops, finish, T, counted } = classLoop(`${B}part -= logp[j * ${u32(C)} + uint(label[j])];`, 'loss'));
      break;
    }
    case 'mse': case 'bce_with_logits': {
      const cnt = numel(shapeOf(g, ins[0]));
      args = [a(ins[0], 'x'), a(ins[1], 't'), a(outs[0], 'loss', 'w')];
      loops = [{
        count: u32(cnt),
        item: n.op === 'mse'
          ? `${B}const float d = x[j] - t[j];\n${B}part += d * d;`
          : `${B}const float v = x[j];\n${B}part += ${d.math('max', 'v', f32(0))} - v * t[j] + ${log(`${f32(1)} + ${exp(`-${d.math('abs', 'v')}`)}`)};`,
      }];
      finish = `${B}loss[0] = total / ${f32(cnt)};`;
      T = rowThreads(cnt);
      break;
    }
    case 'accuracy': case 'top_k': {
      const { C } = classRows(g, n);
      args = [a(ins[0], 'logits'), a(ins[1], 'label'), a(outs[0], 'acc', 'w')];
      // 16-bit logits (fuse.ts rule 4) widened as read: CUDA's __nv_bfloat16 / __half compared with a float is ambiguous
      const lg = (i: string) => readF(d, g, ins[0], 'logits', i);
      const item = n.op === 'accuracy'
        ? `${B}const uint base = j * ${u32(C)};\n${B}uint bi = 0u;\n${B}float best = ${lg('base')};\n` +
          `${B}for (uint c = 1u; c < ${u32(C)}; ++c) if (${lg('base + c')} > best) { best = ${lg('base + c')}; bi = c; }\n` +
          `${B}part += int(bi) == label[j] ? ${f32(1)} : ${f32(0)};`
        : `${B}const uint base = j * ${u32(C)};\n${B}const float xl = ${lg('base + uint(label[j])')};\n${B}uint above = 0u;\n` +
          `${B}for (uint c = 0u; c < ${u32(C)}; ++c) if (${lg('base + c')} > xl) ++above;\n` +
          `${B}part += above < ${u32(numAttr(n, 'k'))} ? ${f32(1)} : ${f32(0)};`;
      ({ loops, finish, T, counted } = classLoop(item, 'acc'));
      break;
    }
    case 'grad_norm': {
      // chunks of at most GRAD_NORM_CHUNK inputs (Metal's 31 buffer bindings): each kernel adds its
      // sum of squares to norm[0] (the first one sets it), the last one takes the square root
      const chunks: number[][] = [];
      for (let k = 0; k < ins.length; k += GRAD_NORM_CHUNK) chunks.push(ins.slice(k, k + GRAD_NORM_CHUNK));
      return chunks.map((chunk, ci) => {
        const first = ci === 0, last = ci === chunks.length - 1;
        const kargs = [...chunk.map((v, k) => a(v, `g${k}`)), a(outs[0], 'norm', first ? 'w' : 'rw')];
        const kloops = chunk.map((v, k) => ({ count: u32(numel(shapeOf(g, v))), item: `${B}part += g${k}[j] * g${k}[j];` }));
        const sum = first ? 'total' : 'norm[0] + total';
        const kfinish = `${B}norm[0] = ${last ? d.math('sqrt', sum) : sum};`;
        return blockKernel(ctx, g, n, kargs, 1, 256, (s) => reduceAll(d, s, { loops: kloops, finish: kfinish }), chunks.length > 1 ? ` [inputs ${ci * GRAD_NORM_CHUNK}..${ci * GRAD_NORM_CHUNK + chunk.length - 1}]` : '');
      });
    }
    default:
      return null;
  }
  return [blockKernel(ctx, g, n, args, 1, T, (s) => reduceAll(d, s, { loops, finish, counted }))];
}

