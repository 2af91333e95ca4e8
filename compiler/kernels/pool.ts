/**
 * pool: GPU kernels of max / average pooling forward and backward (one thread per output
 * element; the backward kernels gather over the windows covering an input element, so no
 * atomics), and global average pooling (one threadgroup per plane, SIMD-group reduction).
 * Consumes IR nodes; produces KernelSpecs.
 */
import type { Graph, Node } from '../ir/graph.js';
import { windowOut } from '../ir/shapes.js';
import type { KernelSpec, LowerCtx } from './kernel_types.js';
import { argOf, blockKernel, elementwise, numel, pairAttr, rowThreads, shapeOf } from './common.js';
import { chanMean } from './rows.js';

const I = '  ';

export function lowerPool(ctx: LowerCtx, g: Graph, n: Node): KernelSpec[] | null {
  const d = ctx.d, f32 = (x: number) => d.f(x), u32 = (k: number) => d.u(k);
  switch (n.op) {
    case 'maxpool2d': case 'avgpool2d': case 'maxpool2d_grad': case 'avgpool2d_grad': break;
    case 'global_avgpool': {
      const xs = shapeOf(g, n.inputs[0]);
      const HW = xs[2] * xs[3], T = rowThreads(HW);
      return [blockKernel(ctx, g, n, [argOf(g, 'x', n.inputs[0], 'r'), argOf(g, 'y', n.outputs[0], 'w')], xs[0] * xs[1], T, (s) => chanMean(d, s, { HW }))];
    }
    default: return null;
  }
  const [KH, KW] = pairAttr(n, 'kernel');
  const [SH, SW] = pairAttr(n, 'stride', [KH, KW]);
  const [PH, PW] = pairAttr(n, 'padding', [0, 0]);
  const fwd = n.op === 'maxpool2d' || n.op === 'avgpool2d';
  const xs = fwd ? shapeOf(g, n.inputs[0]) : n.op === 'maxpool2d_grad' ? shapeOf(g, n.inputs[1]) : (n.attrs.x_shape as number[]);
  const [, , H, W] = xs;
  const OH = windowOut(H, KH, SH, PH), OW = windowOut(W, KW, SW, PW);
  const isMax = n.op.startsWith('max');
  // scan of window (oh, ow) over valid positions: defines ih, iw, v
  const scan = (inner: string) =>
    `${I}for (uint kh = 0u; kh < ${u32(KH)}; ++kh) {\n` +
    `${I}  const int ih = int(oh * ${u32(SH)} + kh) - ${PH};\n${I}  if (ih < 0 || ih >= ${H}) continue;\n` +
    `${I}  for (uint kw = 0u; kw < ${u32(KW)}; ++kw) {\n` +
    `${I}    const int iw = int(ow * ${u32(SW)} + kw) - ${PW};\n${I}    if (iw < 0 || iw >= ${W}) continue;\n` +
    inner + `${I}  }\n${I}}\n`;
  if (fwd) {
    const body =
      `${I}const uint ow = i % ${u32(OW)}, oh = (i / ${u32(OW)}) % ${u32(OH)}, p = i / ${u32(OH * OW)};\n` +
      (isMax ? `${I}float best = ${f32(-Infinity)};\n${I}bool seen = false;\n` : `${I}float s = ${f32(0)};\n`) +
      scan(isMax
        ? `${I}    const float v = x[(p * ${u32(H)} + uint(ih)) * ${u32(W)} + uint(iw)];\n${I}    if (!seen || v > best) { best = v; seen = true; }\n`
        : `${I}    s += x[(p * ${u32(H)} + uint(ih)) * ${u32(W)} + uint(iw)];\n`) +
      (isMax ? `${I}y[i] = best;\n` : `${I}y[i] = s / ${f32(KH * KW)};\n`);
    return [elementwise(ctx, g, n, [argOf(g, 'x', n.inputs[0], 'r'), argOf(g, 'y', n.outputs[0], 'w')], xs[0] * xs[1] * OH * OW, body)];
  }
  if (n.attrs.relu_grad === true) return [maxpoolGradRelu2x2(ctx, g, n, xs, OH, OW)];
  // backward: thread per input element (h, w); windows oh in [ohLo, ohHi] cover it
  let body =
    `${I}const uint w = i % ${u32(W)}, h = (i / ${u32(W)}) % ${u32(H)}, p = i / ${u32(H * W)};\n` +
    `${I}const int hp = int(h) + ${PH}, wp = int(w) + ${PW};\n` +
    `${I}const int ohLo = hp >= ${KH} ? (hp - ${KH} + ${SH}) / ${SH} : 0, ohHi = ${d.imin(`hp / ${SH}`, `${OH - 1}`)};\n` +
    `${I}const int owLo = wp >= ${KW} ? (wp - ${KW} + ${SW}) / ${SW} : 0, owHi = ${d.imin(`wp / ${SW}`, `${OW - 1}`)};\n` +
    `${I}float acc = ${f32(0)};\n` +
    `${I}for (int ohi = ohLo; ohi <= ohHi; ++ohi) {\n${I}  for (int owi = owLo; owi <= owHi; ++owi) {\n` +
    `${I}    const uint oh = uint(ohi), ow = uint(owi);\n`;
  if (isMax) {
    body +=
      `${I}    int bestAt = -1;\n${I}    float best = ${f32(0)};\n` +
      scan(`${I}    const float v = x[(p * ${u32(H)} + uint(ih)) * ${u32(W)} + uint(iw)];\n${I}    if (bestAt < 0 || v > best) { best = v; bestAt = ih * ${W} + iw; }\n`)
        .split('\n').map((l) => (l ? '    ' + l : l)).join('\n') +
      `${I}    if (bestAt == int(h * ${u32(W)} + w)) acc += dy[(p * ${u32(OH)} + oh) * ${u32(OW)} + ow];\n`;
  } else {
    body += `${I}    acc += dy[(p * ${u32(OH)} + oh) * ${u32(OW)} + ow];\n`;
  }
  body += `${I}  }\n${I}}\n${I}dx[i] = ${isMax ? 'acc' : `acc / ${f32(KH * KW)}`};\n`;
  const args = isMax
    ? [argOf(g, 'dy', n.inputs[0], 'r'), argOf(g, 'x', n.inputs[1], 'r'), argOf(g, 'dx', n.outputs[0], 'w')]
    : [argOf(g, 'dy', n.inputs[0], 'r'), argOf(g, 'dx', n.outputs[0], 'w')];
  return [elementwise(ctx, g, n, args, numel(xs), body)];
}

/**
 * maxpool2d_grad with a folded relu-grad whose mask is the pool input (fuse.ts rule 2: 2x2 windows,
 * stride 2, no padding): one thread per 2x2 cell of the input, which is one window or, past the last
 * full window of an odd height / width, the cell's edge elements no window covers (their dx is 0).
 * The thread reads its window of x before it writes that window of dx, so dx may take x's buffer
 * (ops.ts inPlace; memory_plan.ts places them at one offset). dx = the window's first maximum
 * (row-major, as the unfused kernel scans) gets dy where x > 0 (the relu's output: the mask), else 0.
 */
function maxpoolGradRelu2x2(ctx: LowerCtx, g: Graph, n: Node, xs: number[], OH: number, OW: number): KernelSpec {
  const d = ctx.d, f32 = (x: number) => d.f(x), u32 = (k: number) => d.u(k);
  const [NB, C, H, W] = xs;
  const ok = (a: unknown, v: number) => Array.isArray(a) ? a.every((e) => e === v) : a === v;
  if (n.inputs[2] !== n.inputs[1] || !ok(n.attrs.kernel, 2) || !ok(n.attrs.stride, 2) || !(n.attrs.padding === undefined || ok(n.attrs.padding, 0)))
    throw new Error(`internal: maxpool2d_grad node ${n.id} carries relu_grad but is not the 2x2 / stride-2 / unpadded form over its own input (fuse.ts rule 2)`);
  const CH = Math.ceil(H / 2), CW = Math.ceil(W / 2);
  const body =
    `${I}const uint cw = i % ${u32(CW)}, ch = (i / ${u32(CW)}) % ${u32(CH)}, p = i / ${u32(CH * CW)};\n` +
    `${I}const uint at = (p * ${u32(H)} + 2u * ch) * ${u32(W)} + 2u * cw;\n` +
    `${I}if (ch < ${u32(OH)} && cw < ${u32(OW)}) {\n` +
    `${I}  const float v0 = x[at], v1 = x[at + 1u], v2 = x[at + ${u32(W)}], v3 = x[at + ${u32(W + 1)}];\n` +
    `${I}  uint b = 0u;\n${I}  float best = v0;\n` +
    `${I}  if (v1 > best) { best = v1; b = 1u; }\n${I}  if (v2 > best) { best = v2; b = 2u; }\n${I}  if (v3 > best) { best = v3; b = 3u; }\n` +
    `${I}  const float gv = dy[(p * ${u32(OH)} + ch) * ${u32(OW)} + cw];\n` +
    `${I}  dx[at] = b == 0u && v0 > ${f32(0)} ? gv : ${f32(0)};\n` +
    `${I}  dx[at + 1u] = b == 1u && v1 > ${f32(0)} ? gv : ${f32(0)};\n` +
    `${I}  dx[at + ${u32(W)}] = b == 2u && v2 > ${f32(0)} ? gv : ${f32(0)};\n` +
    `${I}  dx[at + ${u32(W + 1)}] = b == 3u && v3 > ${f32(0)} ? gv : ${f32(0)};\n` +
    `${I}} else {\n` +
    `${I}  // an edge cell of an odd height / width: no window covers it\n` +
    `${I}  for (uint e = 0u; e < 4u; ++e)\n` +
    `${I}    if (2u * ch + e / 2u < ${u32(H)} && 2u * cw + e % 2u < ${u32(W)}) dx[at + (e / 2u) * ${u32(W)} + e % 2u] = ${f32(0)};\n` +
    `${I}}\n`;
  const args = [argOf(g, 'dy', n.inputs[0], 'r'), argOf(g, 'x', n.inputs[1], 'r'), argOf(g, 'dx', n.outputs[0], 'w')];
  return elementwise(ctx, g, n, args, NB * C * CH * CW, body, ' [2x2 windows, fused relu-grad: mask = x]');
}
