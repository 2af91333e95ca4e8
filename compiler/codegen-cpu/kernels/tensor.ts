/**
 * Tensor algebra on the CPU: permute, pad, broadcast_to (row copies through strides), reduce
 * (sum / mean / max, accumulated in double in row-major order, so any thread count gives the
 * same bits) and the max gradient, masked_fill (mask and / or the causal rule), positions.
 * Semantics: compiler/ir/op_rules/tensor.ts; shapes are static, so strides are baked in.
 */
import { broadcastShapes, broadcastStrides } from '../../ir/shapes.js';
import { reducedShape } from '../../ir/op_rules/tensor.js';
import { f32Lit } from '../../cfamily/text.js';
import { tpl } from '../template.js';
import { STRIDED_WALK } from './elementwise.js';
import { type KernelCtx, type KernelEmitter, prod } from '../kernel_ctx.js';

const stridesOf = (s: readonly number[]) => s.map((_, i) => prod(s.slice(i + 1)));
const list = (a: readonly number[]) => (a.length ? a.join(', ') : '0');

/**
 * Output rows (the last dim of y) in parallel; for row r, `off` = sum of its index times
 * `st` over the leading dims (the source offset of the row). `body` fills yr[0..last).
 */
const ROWS = tpl(`{{{pre}}}
  float* y = {{y}};
  static const int64_t dims[{{rank}}] = { {{dims}} };
  static const int64_t st[{{rank}}] = { {{st}} };
  mk::par(ctx, {{rows}}, 64, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; r++) {
      int64_t off = 0, rem = r;
      for (int64_t d = {{rank}} - 2; d >= 0; d--) {
        const int64_t idx = rem % dims[d];
        rem /= dims[d];
        off += idx * st[d];
{{{perDim}}}
      }
      float* yr = y + r * {{last}};
{{{body}}}
    }
  });
`);

function rows(ys: readonly number[], st: readonly number[], y: string, pre: string, body: string, perDim = '') {
  const r = Math.max(ys.length, 1), dims = ys.length ? ys : [1], s = st.length ? st : [0];
  return ROWS({ pre, y, rank: r, dims: list(dims), st: list(s), rows: prod(dims) / dims[r - 1], last: dims[r - 1], body, perDim });
}

export const permute: KernelEmitter = (k) => {
  const xs = k.inShape(0), perm = k.shape('perm'), ys = perm.map((p) => xs[p]);
  const xst = stridesOf(xs), st = perm.map((p) => xst[p]), inner = st[st.length - 1];
  const body = inner === 1
    ? `      std::memcpy(yr, x + off, sizeof(float) * ${ys[ys.length - 1]});`
    : `      for (int64_t j = 0; j < ${ys[ys.length - 1]}; j++) yr[j] = x[off + j * ${inner}];`;
  return rows(ys, st, k.outPtr(0), `  const float* x = ${k.inPtr(0)};`, body);
};

export const broadcast_to: KernelEmitter = (k) => {
  const xs = k.inShape(0), ys = k.outShape(0), st = broadcastStrides(xs, ys), inner = st[st.length - 1];
  const body = inner === 0
    ? `      for (int64_t j = 0; j < ${ys[ys.length - 1]}; j++) yr[j] = x[off];`
    : `      std::memcpy(yr, x + off, sizeof(float) * ${ys[ys.length - 1]});`;
  return rows(ys, st, k.outPtr(0), `  const float* x = ${k.inPtr(0)};`, body);
};

export const pad: KernelEmitter = (k) => {
  const xs = k.inShape(0), ys = k.outShape(0), pads = k.shape('pads'), r = xs.length;
  const xst = stridesOf(xs);
  // a row of y is inside x when every leading index i_d - before_d is in [0, xs[d]); its source
  // offset is sum (i_d - before_d) * stride_d, written as off (with st = strides) minus the
  // constant sum before_d * stride_d
  const base = xs.slice(0, -1).reduce((s, _, d) => s + pads[2 * d] * xst[d], 0);
  const pre = `  const float* x = ${k.inPtr(0)};
  static const int64_t lo[${r}] = { ${list(pads.filter((_, i) => i % 2 === 0))} };
  static const int64_t xd[${r}] = { ${list(xs)} };`;
  const perDim = '        if (idx < lo[d] || idx >= lo[d] + xd[d]) inside = false;';
  const before = pads[2 * (r - 1)], len = xs[r - 1], last = ys[r - 1], v = f32Lit(k.num('value', 0));
  const body = `      if (!inside) { for (int64_t j = 0; j < ${last}; j++) yr[j] = ${v}; continue; }
      const float* xr = x + (off - ${base});
      for (int64_t j = 0; j < ${before}; j++) yr[j] = ${v};
      std::memcpy(yr + ${before}, xr, sizeof(float) * ${len});
      for (int64_t j = ${before + len}; j < ${last}; j++) yr[j] = ${v};`;
  return rows(ys, xst, k.outPtr(0), pre, body, perDim).replace('int64_t off = 0, rem = r;', 'int64_t off = 0, rem = r;\n      bool inside = true;');
};

/** the reduction: y offset of each x element (row-major over x) via strides 0 on the reduced axes */
function reduceGeo(k: KernelCtx, xs: readonly number[]) {
  const axes = k.shape('axes'), keep = reducedShape(xs, axes, true);
  const kst = stridesOf(keep).map((s, i) => (axes.includes(i) ? 0 : s));
  return { ny: prod(keep), nx: prod(xs), count: prod(axes.map((a) => xs[a])), rank: xs.length, dims: list(xs), sy: list(kst) };
}

const REDUCE = tpl(`  const float* x = {{x}};
  float* y = {{y}};
{{#if max}}
  // first maximum per group (NaN counts as the maximum), as the reference and torch.max(dim)
  int64_t* arg = (int64_t*)mk::scratch(2, 2 * {{ny}});
  for (int64_t i = 0; i < {{ny}}; i++) arg[i] = -1;
${STRIDED_WALK}
  for (int64_t i = 0; i < {{ny}}; i++) y[i] = x[arg[i]];
{{else}}
  double* acc = (double*)mk::scratch(2, 2 * {{ny}});
  for (int64_t i = 0; i < {{ny}}; i++) acc[i] = 0.0;
${STRIDED_WALK}
  for (int64_t i = 0; i < {{ny}}; i++) y[i] = (float)(acc[i]{{#if mean}} / {{count}}.0{{/if}});
{{/if}}
`);

const MAX_VISIT = `    { const int64_t a = arg[off];
      if (a < 0 || (!std::isnan(x[a]) && (std::isnan(x[i]) || x[i] > x[a]))) arg[off] = i; }`;

export const reduce: KernelEmitter = (k) => {
  const fn = k.str('fn'), g = reduceGeo(k, k.inShape(0));
  if (fn !== 'sum' && fn !== 'mean' && fn !== 'max') k.fail(`unknown reduce fn '${fn}'`);
  return REDUCE({ ...g, x: k.inPtr(0), y: k.outPtr(0), max: fn === 'max', mean: fn === 'mean', visit: fn === 'max' ? MAX_VISIT : '    acc[off] += x[i];' });
};

const REDUCE_MAX_GRAD = tpl(`  const float* dy = {{dy}};
  const float* x = {{x}};
  float* dx = {{dx}};
  int64_t* arg = (int64_t*)mk::scratch(2, 2 * {{ny}});
  for (int64_t i = 0; i < {{ny}}; i++) arg[i] = -1;
${STRIDED_WALK}
  std::memset(dx, 0, sizeof(float) * {{nx}});
  for (int64_t i = 0; i < {{ny}}; i++) dx[arg[i]] = dy[i];
`);

export const reduce_max_grad: KernelEmitter = (k) =>
  REDUCE_MAX_GRAD({ ...reduceGeo(k, k.inShape(1)), dy: k.inPtr(0), x: k.inPtr(1), dx: k.outPtr(0), visit: MAX_VISIT });

export const masked_fill: KernelEmitter = (k) => {
  const xs = k.inShape(0), hasMask = k.hasInput(1), ms = hasMask ? k.inShape(1) : xs;
  const ys = broadcastShapes(xs, ms);
  if (!ys) return k.fail('mask does not broadcast');
  const r = ys.length, T = ys[r - 2], S = ys[r - 1], last = ys[r - 1];
  const causal = k.bool('causal', false), invert = k.bool('invert', false), v = f32Lit(k.num('value'));
  const sx = broadcastStrides(xs, ys), sm = broadcastStrides(ms, ys);
  const mt = hasMask && k.inDtype(1) === 'i32' ? 'int32_t' : 'float';
  const pre = `  const float* x = ${k.inPtr(0)};
${hasMask ? `  const ${mt}* mk_ = ${k.inPtr(1)};\n  static const int64_t sm[${r}] = { ${list(sm)} };` : ''}`;
  const perDim = [hasMask ? '        om += idx * sm[d];' : '', causal && r >= 2 ? `        if (d == ${r - 2}) t = idx;` : ''].filter(Boolean).join('\n');
  const conds = [
    hasMask ? `((mk_[om + j * ${sm[r - 1]}] != 0) != ${invert})` : '',
    causal ? `(j > t + ${S - T})` : '',
  ].filter(Boolean).join(' || ');
  const body = `      for (int64_t j = 0; j < ${last}; j++) yr[j] = ${conds} ? ${v} : x[off + j * ${sx[r - 1]}];`;
  return rows(ys, sx, k.outPtr(0), pre, body, perDim).replace('int64_t off = 0, rem = r;', 'int64_t off = 0, rem = r, om = 0, t = 0;\n      (void)om; (void)t;');
};

const POSITIONS = tpl(`  int32_t* pos = {{y}};
  for (int64_t n = 0; n < {{N}}; n++)
    for (int64_t t = 0; t < {{T}}; t++) pos[n * {{T}} + t] = (int32_t)t;
`);

export const positions: KernelEmitter = (k) => {
  const [N, T] = k.inShape(0);
  return POSITIONS({ y: k.outPtr(0), N, T });
};
