/**
 * rows: the bodies of the block-reduction kernels (one threadgroup per row, channel, plane, or
 * one for everything), written once in the kernel language against a Dialect. Consumes the
 * kernel's constants (already literals of that dialect) and its BlockShape; produces body
 * text. Every thread calls mpsc_block_sum / mpsc_block_max (prelude.ts) in uniform control
 * flow. Used by reduce.ts and pool.ts. Bodies that take an `Io` read and write the buffers it
 * names through it (16-bit values widened on load, rounded on store: common.ts readF / writeF).
 */
import type { Dialect } from './dialect.js';
import type { BlockShape } from './common.js';

/** element access of a body's buffers: `rd(name, idx)` a float expression, `wr(name, idx, v)` a statement */
export interface Io {
  rd(name: string, idx: string): string;
  wr(name: string, idx: string, v: string): string;
}

/** softmax / log_softmax over rows of L elements with stride `inner` (x -> y) */
export function rowSoftmax(d: Dialect, s: BlockShape, v: { L: string; inner: string; rowSpan: string; log: boolean }): string {
  const exp = (x: string) => d.math('exp', x);
  const at = `base + l * ${v.inner}`;
  return (
    `  // one threadgroup per row of ${v.L} elements (stride ${v.inner})\n` +
    `  const uint r = tgid.x;\n` +
    `  const uint base = (r / ${v.inner}) * ${v.rowSpan} + r % ${v.inner};\n` +
    `  float m = ${d.f(-Infinity)};\n` +
    `  for (uint l = tidx; l < ${v.L}; l += ${s.T}) m = ${d.math('max', 'm', `x[${at}]`)};\n` +
    `  m = mpsc_block_max(m, tg, lane, sg, ${s.nsg});\n` +
    `  float s = ${d.f(0)};\n` +
    `  for (uint l = tidx; l < ${v.L}; l += ${s.T}) s += ${exp(`x[${at}] - m`)};\n` +
    `  s = mpsc_block_sum(s, tg, lane, sg, ${s.nsg});\n` +
    (v.log
      ? `  const float lse = ${d.math('log', 's')};\n` +
        `  for (uint l = tidx; l < ${v.L}; l += ${s.T}) y[${at}] = x[${at}] - m - lse;\n`
      : `  for (uint l = tidx; l < ${v.L}; l += ${s.T}) y[${at}] = ${exp(`x[${at}] - m`)} / s;\n`)
  );
}

/** their gradients from the forward output y (dy, y -> dx) */
export function rowSoftmaxGrad(d: Dialect, s: BlockShape, v: { L: string; inner: string; rowSpan: string; log: boolean }): string {
  const at = `base + l * ${v.inner}`;
  return (
    `  // one threadgroup per row of ${v.L} elements (stride ${v.inner}); y is the forward output\n` +
    `  const uint r = tgid.x;\n` +
    `  const uint base = (r / ${v.inner}) * ${v.rowSpan} + r % ${v.inner};\n` +
    `  float s = ${d.f(0)};\n` +
    `  for (uint l = tidx; l < ${v.L}; l += ${s.T}) s += dy[${at}]${v.log ? '' : ` * y[${at}]`};\n` +
    `  s = mpsc_block_sum(s, tg, lane, sg, ${s.nsg});\n` +
    `  for (uint l = tidx; l < ${v.L}; l += ${s.T}) {\n` +
    `    const uint e = ${at};\n` +
    (v.log ? `    dx[e] = dy[e] - ${d.math('exp', 'y[e]')} * s;\n` : `    dx[e] = y[e] * (dy[e] - s);\n`) +
    `  }\n`
  );
}

/**
 * cross-entropy gradient for one row of C logits: (softmax - (1-ls)*onehot - ls/C) / count,
 * count = the rows kept under ignore_index (all R without it); an ignored row gets 0. Without
 * label smoothing (ls = 0) the uniform term is not emitted.
 */
export function rowCrossEntropyGrad(d: Dialect, s: BlockShape, v: { C: number; ls: number; R: number; ignore?: number }, io: Io): string {
  const C = d.u(v.C), exp = (x: string) => d.math('exp', x), x = io.rd('logits', 'base + c');
  const target = v.ls
    ? `(int(c) == lab ? ${d.f(1 - v.ls)} : ${d.f(0)}) + ${d.f(v.ls / v.C)}`
    : `int(c) == lab ? ${d.f(1)} : ${d.f(0)}`;
  return (
    `  // one threadgroup per row n of ${C} logits: (softmax - ${v.ls ? '(1-ls)*onehot - ls/C' : 'onehot'}) / count\n` +
    `  const uint n = tgid.x;\n` +
    `  const uint base = n * ${C};\n` +
    keptCount(d, s, v) +
    `  float m = ${d.f(-Infinity)};\n` +
    `  for (uint c = tidx; c < ${C}; c += ${s.T}) m = ${d.math('max', 'm', x)};\n` +
    `  m = mpsc_block_max(m, tg, lane, sg, ${s.nsg});\n` +
    `  float s = ${d.f(0)};\n` +
    `  for (uint c = tidx; c < ${C}; c += ${s.T}) s += ${exp(`${x} - m`)};\n` +
    `  s = mpsc_block_sum(s, tg, lane, sg, ${s.nsg});\n` +
    `  const int lab = label[n];\n` +
    `  for (uint c = tidx; c < ${C}; c += ${s.T}) {\n` +
    `    const float p = ${exp(`${x} - m`)} / s;\n` +
    `    const float target = ${target};\n` +
    (v.ignore === undefined
      ? `    ${io.wr('dlogits', 'base + c', '(p - target) / count')}\n`
      : `    ${io.wr('dlogits', 'base + c', `lab == ${v.ignore} ? ${d.f(0)} : (p - target) / count`)}\n`) +
    `  }\n`
  );
}

/** nll gradient for one row of C under ignore_index: -1/count at the label, 0 elsewhere and on an ignored row */
export function rowNllGrad(d: Dialect, s: BlockShape, v: { C: number; R: number; ignore: number }): string {
  const C = d.u(v.C);
  return (
    `  // one threadgroup per row n of ${C}: -1/count at the label\n` +
    `  const uint n = tgid.x;\n` +
    keptCount(d, s, v) +
    `  const int lab = label[n];\n` +
    `  for (uint c = tidx; c < ${C}; c += ${s.T}) dlogp[n * ${C} + c] = int(c) == lab && lab != ${v.ignore} ? ${d.f(-1)} / count : ${d.f(0)};\n`
  );
}

/** layernorm over rows of D (x, w?, b? -> y, mean, rstd; absent weight 1, absent bias 0) */
export function rowLayernorm(d: Dialect, s: BlockShape, v: { D: number; eps: number; weight: boolean; bias: boolean }, io: Io): string {
  const D = d.u(v.D), Df = d.f(v.D), x = io.rd('x', 'base + d');
  return (
    `  // one threadgroup per row of D = ${D}\n` +
    `  const uint r = tgid.x;\n` +
    `  const uint base = r * ${D};\n` +
    `  float s = ${d.f(0)};\n` +
    `  for (uint d = tidx; d < ${D}; d += ${s.T}) s += ${x};\n` +
    `  const float mu = mpsc_block_sum(s, tg, lane, sg, ${s.nsg}) / ${Df};\n` +
    `  float q = ${d.f(0)};\n` +
    `  for (uint d = tidx; d < ${D}; d += ${s.T}) { const float c = ${x} - mu; q += c * c; }\n` +
    `  const float var = mpsc_block_sum(q, tg, lane, sg, ${s.nsg}) / ${Df};\n` +
    `  const float rs = ${d.f(1)} / ${d.math('sqrt', `var + ${d.f(v.eps)}`)};\n` +
    `  for (uint d = tidx; d < ${D}; d += ${s.T}) ${io.wr('y', 'base + d', `(${x} - mu) * rs${v.weight ? ' * w[d]' : ''}${v.bias ? ' + b[d]' : ''}`)}\n` +
    `  if (tidx == 0u) { mean[r] = mu; rstd[r] = rs; }\n`
  );
}

/** layernorm's dx (dy, x, w?, mean, rstd -> dx; absent weight 1); dy, x and dx through `io` (16-bit ones widened / rounded) */
export function rowLayernormGrad(d: Dialect, s: BlockShape, v: { D: number; weight: boolean }, io: Io): string {
  const D = d.u(v.D), Df = d.f(v.D), w = v.weight ? ' * w[d]' : '';
  const dy = io.rd('dy', 'base + d'), x = io.rd('x', 'base + d');
  return (
    `  // dx for one row of D = ${D} per threadgroup: rstd/D * (D*g - sum(g) - xhat*sum(g*xhat)), g = dy${w ? '*w' : ''}\n` +
    `  const uint r = tgid.x;\n` +
    `  const uint base = r * ${D};\n` +
    `  const float mu = mean[r], rs = rstd[r];\n` +
    `  float s1 = ${d.f(0)}, s2 = ${d.f(0)};\n` +
    `  for (uint d = tidx; d < ${D}; d += ${s.T}) {\n` +
    `    const float g = ${dy}${w};\n` +
    `    s1 += g;\n` +
    `    s2 += g * (${x} - mu) * rs;\n` +
    `  }\n` +
    `  s1 = mpsc_block_sum(s1, tg, lane, sg, ${s.nsg});\n` +
    `  s2 = mpsc_block_sum(s2, tg, lane, sg, ${s.nsg});\n` +
    `  for (uint d = tidx; d < ${D}; d += ${s.T}) {\n` +
    `    const float g = ${dy}${w};\n` +
    `    const float xh = (${x} - mu) * rs;\n` +
    `    ${io.wr('dx', 'base + d', `rs * (g - s1 / ${Df} - xh * s2 / ${Df})`)}\n` +
    `  }\n`
  );
}

/** batchnorm (training) per channel of NCHW-like x: statistics over N and S positions */
export function chanBatchnorm(d: Dialect, s: BlockShape, v: { C: number; N: number; S: number; eps: number; momentum: number }): string {
  const C = d.u(v.C), S = d.u(v.S), m = v.N * v.S, M = d.u(m), Mf = d.f(m);
  const at = `((j / ${S}) * ${C} + c) * ${S} + j % ${S}`;
  const unbias = d.f(m > 1 ? m / (m - 1) : Infinity);
  return (
    `  // one threadgroup per channel c of ${C}: statistics over N = ${d.u(v.N)} and ${S} spatial positions\n` +
    `  const uint c = tgid.x;\n` +
    `  float s = ${d.f(0)};\n` +
    `  for (uint j = tidx; j < ${M}; j += ${s.T}) s += x[${at}];\n` +
    `  const float mu = mpsc_block_sum(s, tg, lane, sg, ${s.nsg}) / ${Mf};\n` +
    `  float q = ${d.f(0)};\n` +
    `  for (uint j = tidx; j < ${M}; j += ${s.T}) { const float d = x[${at}] - mu; q += d * d; }\n` +
    `  const float var = mpsc_block_sum(q, tg, lane, sg, ${s.nsg}) / ${Mf};\n` +
    `  const float is = ${d.f(1)} / ${d.math('sqrt', `var + ${d.f(v.eps)}`)};\n` +
    `  for (uint j = tidx; j < ${M}; j += ${s.T}) {\n` +
    `    const uint e = ${at};\n` +
    `    y[e] = (x[e] - mu) * is * w[c] + b[c];\n` +
    `  }\n` +
    `  if (tidx == 0u) {\n` +
    `    mean[c] = mu;\n` +
    `    invstd[c] = is;\n` +
    `    rmean[c] = ${d.f(1 - v.momentum)} * rmean[c] + ${d.f(v.momentum)} * mu;\n` +
    `    rvar[c] = ${d.f(1 - v.momentum)} * rvar[c] + ${d.f(v.momentum)} * var * ${unbias};\n` +
    `  }\n`
  );
}

/** its gradient: dbias = sum dy, dweight = sum dy*xhat, dx = w*invstd/m * (m*dy - dbias - xhat*dweight) */
export function chanBatchnormGrad(d: Dialect, s: BlockShape, v: { C: number; N: number; S: number }): string {
  const C = d.u(v.C), S = d.u(v.S), m = v.N * v.S, M = d.u(m), Mf = d.f(m);
  const at = `((j / ${S}) * ${C} + c) * ${S} + j % ${S}`;
  return (
    `  // one threadgroup per channel c of ${C}: dbias = sum dy, dweight = sum dy*xhat,\n` +
    `  // dx = w*invstd/m * (m*dy - dbias - xhat*dweight), m = ${M}\n` +
    `  const uint c = tgid.x;\n` +
    `  const float mu = mean[c], is = invstd[c];\n` +
    `  float s1 = ${d.f(0)}, s2 = ${d.f(0)};\n` +
    `  for (uint j = tidx; j < ${M}; j += ${s.T}) {\n` +
    `    const uint e = ${at};\n` +
    `    s1 += dy[e];\n` +
    `    s2 += dy[e] * (x[e] - mu) * is;\n` +
    `  }\n` +
    `  s1 = mpsc_block_sum(s1, tg, lane, sg, ${s.nsg});\n` +
    `  s2 = mpsc_block_sum(s2, tg, lane, sg, ${s.nsg});\n` +
    `  const float k = w[c] * is / ${Mf};\n` +
    `  for (uint j = tidx; j < ${M}; j += ${s.T}) {\n` +
    `    const uint e = ${at};\n` +
    `    dx[e] = k * (${Mf} * dy[e] - s1 - (x[e] - mu) * is * s2);\n` +
    `  }\n` +
    `  if (tidx == 0u) { dbias[c] = s1; dweight[c] = s2; }\n`
  );
}

/** global average pooling: the mean of each (n, c) plane of HW elements */
export function chanMean(d: Dialect, s: BlockShape, v: { HW: number }): string {
  const HW = d.u(v.HW);
  return (
    `  // one threadgroup per (n, c) plane of ${HW} elements: the mean\n` +
    `  const uint p = tgid.x;\n` +
    `  float s = ${d.f(0)};\n` +
    `  for (uint j = tidx; j < ${HW}; j += ${s.T}) s += x[p * ${HW} + j];\n` +
    `  s = mpsc_block_sum(s, tg, lane, sg, ${s.nsg});\n` +
    `  if (tidx == 0u) y[p] = s / ${d.f(v.HW)};\n`
  );
}

/**
 * one threadgroup reduces everything to one scalar: `loops` add to `part`, `finish` (run by
 * thread 0) reads `total`; with `counted`, the loops also add to `cnt` and finish reads its
 * sum as `count` (the positions a class loss keeps under ignore_index).
 */
export function reduceAll(d: Dialect, s: BlockShape, v: { loops: { count: string; item: string }[]; finish: string; counted?: boolean }): string {
  return (
    `  // a single threadgroup of ${s.T} threads reduces everything to one scalar\n` +
    `  float part = ${d.f(0)};\n` +
    (v.counted ? `  float cnt = ${d.f(0)};\n` : '') +
    v.loops.map((l) => `  for (uint j = tidx; j < ${l.count}; j += ${s.T}) {\n${l.item}\n  }\n`).join('') +
    `  const float total = mpsc_block_sum(part, tg, lane, sg, ${s.nsg});\n` +
    (v.counted ? `  const float count = mpsc_block_sum(cnt, tg, lane, sg, ${s.nsg});\n` : '') +
    `  if (tidx == 0u) {\n${v.finish}\n  }\n`
  );
}

/**
 * statements declaring `count`, the number of labels (of R) not equal to ignore_index, summed by
 * the whole threadgroup (every thread calls it); without ignore_index the constant R
 */
export function keptCount(d: Dialect, s: BlockShape, v: { R: number; ignore?: number }): string {
  if (v.ignore === undefined) return `  const float count = ${d.f(v.R)};\n`;
  return (
    `  float cnt = ${d.f(0)};\n` +
    `  for (uint j = tidx; j < ${d.u(v.R)}; j += ${s.T}) if (label[j] != ${v.ignore}) cnt += ${d.f(1)};\n` +
    `  const float count = mpsc_block_sum(cnt, tg, lane, sg, ${s.nsg});\n`
  );
}
