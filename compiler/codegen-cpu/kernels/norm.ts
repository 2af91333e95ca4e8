/**
 * batchnorm (train / eval / grad) per channel, layernorm (+ grad) over the last dim; layernorm with the
 * residual add before it (`add_in`) and layernorm_grad with the residual-gradient add after it (`add_out`)
 * folded in (compiler/ir/fuse.ts rules 5 and 6, CPU_FUSIONS.addLayernorm): the same f32 sums as the add kernel.
 * layernorm_grad reads dy and x once: fixed blocks of 16 rows each write their dx rows and float partial
 * column sums, which a second short pass adds in block order (thread-count independent).
 */
import { tpl } from '../template.js';
import { type KernelCtx, type KernelEmitter, prod } from '../kernel_ctx.js';

/** x [N,C] or [N,C,H,W] -> (N, C, HW) */
function bnGeo(k: KernelCtx, xs: number[]) {
  if (xs.length !== 2 && xs.length !== 4) k.fail('batchnorm expects [N,C] or [N,C,H,W]');
  const [N, C] = xs;
  const HW = xs.length === 4 ? xs[2] * xs[3] : 1;
  return { N, C, HW, m: N * HW };
}

const BN_TRAIN = tpl(`  const float* x = {{x}};
  const float* w = {{w}};
  const float* bi = {{b}};
  float* rm = {{rm}};
  float* rv = {{rv}};
  float* y = {{y}};
  float* mean = {{mean}};
  float* invstd = {{invstd}};
  mk::par(ctx, {{C}}, 2, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; c++) {
      double s = 0.0;
      for (int64_t n = 0; n < {{N}}; n++) s += mk::sum_f(x + (n * {{C}} + c) * {{HW}}, {{HW}});
      const double mu = s / {{m}};
      double v = 0.0;
      for (int64_t n = 0; n < {{N}}; n++) v += mk::sum_sq_dev(x + (n * {{C}} + c) * {{HW}}, {{HW}}, (float)mu);
      const double var = v / {{m}};
      const float is = (float)(1.0 / std::sqrt(var + {{eps}}));
      const float muf = (float)mu;
      mean[c] = muf;
      invstd[c] = is;
      const float sc = is * w[c], sh = bi[c];
      for (int64_t n = 0; n < {{N}}; n++) {
        const float* p = x + (n * {{C}} + c) * {{HW}};
        float* q = y + (n * {{C}} + c) * {{HW}};
        for (int64_t i = 0; i < {{HW}}; i++) q[i] = (p[i] - muf) * sc + sh;
      }
      rm[c] = (float)((1.0 - {{momentum}}) * rm[c] + {{momentum}} * mu);
      rv[c] = (float)((1.0 - {{momentum}}) * rv[c] + {{momentum}} * var * {{unbias}});
    }
  });
`);

export const batchnorm_train: KernelEmitter = (k) => {
  const g = bnGeo(k, k.inShape(0));
  const eps = k.num('eps', 1e-5), momentum = k.num('momentum', 0.1);
  return BN_TRAIN({
    ...g, eps: String(eps), momentum: String(momentum), unbias: g.m > 1 ? String(g.m / (g.m - 1)) : '1.0',
    x: k.inPtr(0), w: k.inPtr(1), b: k.inPtr(2), rm: k.inPtr(3), rv: k.inPtr(4), y: k.outPtr(0), mean: k.outPtr(1), invstd: k.outPtr(2),
  });
};

const BN_EVAL = tpl(`  const float* x = {{x}};
  const float* w = {{w}};
  const float* bi = {{b}};
  const float* rm = {{rm}};
  const float* rv = {{rv}};
  float* y = {{y}};
  mk::par(ctx, {{N}} * {{C}}, 64, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; r++) {
      const int64_t c = r % {{C}};
      const float is = (float)(1.0 / std::sqrt((double)rv[c] + {{eps}}));
      const float sc = is * w[c], mu = rm[c], sh = bi[c];
      const float* p = x + r * {{HW}};
      float* q = y + r * {{HW}};
      for (int64_t i = 0; i < {{HW}}; i++) q[i] = (p[i] - mu) * sc + sh;
    }
  });
`);

export const batchnorm_eval: KernelEmitter = (k) =>
  BN_EVAL({
    ...bnGeo(k, k.inShape(0)), eps: String(k.num('eps', 1e-5)),
    x: k.inPtr(0), w: k.inPtr(1), b: k.inPtr(2), rm: k.inPtr(3), rv: k.inPtr(4), y: k.outPtr(0),
  });

const BN_GRAD = tpl(`  const float* dy = {{dy}};
  const float* x = {{x}};
{{#if w}}
  const float* w = {{w}};
{{/if}}
  const float* mean = {{mean}};
  const float* invstd = {{invstd}};
  float* dx = {{dx}};
  float* dw = {{dw}};
  float* db = {{db}};
  mk::par(ctx, {{C}}, 2, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; c++) {
      const float mu = mean[c], is = invstd[c];
      double sdy = 0.0, sdyx = 0.0;
      for (int64_t n = 0; n < {{N}}; n++) {
        const float* p = x + (n * {{C}} + c) * {{HW}};
        const float* g = dy + (n * {{C}} + c) * {{HW}};
        sdy += mk::sum_f(g, {{HW}});
        sdyx += mk::dot_dev(g, p, {{HW}}, mu);
      }
      sdyx *= is;
      db[c] = (float)sdy;
      dw[c] = (float)sdyx;
      const float k = w[c] * is / {{m}}, fdb = (float)sdy, fdw = (float)sdyx;
      for (int64_t n = 0; n < {{N}}; n++) {
        const float* p = x + (n * {{C}} + c) * {{HW}};
        const float* g = dy + (n * {{C}} + c) * {{HW}};
        float* q = dx + (n * {{C}} + c) * {{HW}};
        for (int64_t i = 0; i < {{HW}}; i++) q[i] = k * ({{m}} * g[i] - fdb - (p[i] - mu) * is * fdw);
      }
    }
  });
`);

export const batchnorm_grad: KernelEmitter = (k) => {
  const g = bnGeo(k, k.inShape(1));
  return BN_GRAD({
    ...g, m: `${g.m}.0f`,
    dy: k.inPtr(0), x: k.inPtr(1), w: k.hasInput(2) ? k.inPtr(2) : '', mean: k.inPtr(3), invstd: k.inPtr(4), dx: k.outPtr(0), dw: k.outPtr(1), db: k.outPtr(2),
  });
};

/** how many rows of D floats ahead layernorm_grad prefetches: ~2 KiB (its loads alone did not overlap its arithmetic; the forward gained nothing) */
const prefetchRows = (D: number) => Math.max(1, Math.ceil(512 / D));

const LN = tpl(`  const float* x = {{x}};
{{#if w}}
  const float* w = {{w}};
{{/if}}
{{#if b}}
  const float* bi = {{b}};
{{/if}}
  float* y = {{y}};
  float* mean = {{mean}};
  float* rstd = {{rstd}};
{{#if addend}}
  const float* addend = {{addend}};
  float* h = {{h}};
{{/if}}
  mk::par(ctx, {{rows}}, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; r++) {
{{#if addend}}
      // add_in (fuse.ts rule 5): the row of h = x + addend written first (the separate add's f32 sums), then normalised
      float* hr = h + r * {{D}};
      for (int64_t i = 0; i < {{D}}; i++) hr[i] = x[r * {{D}} + i] + addend[r * {{D}} + i];
      const float* p = hr;
{{else}}
      const float* p = x + r * {{D}};
{{/if}}
      // mean and variance as mk::LANES float lanes combined in double (mk::sum_f / sum_sq_dev): a
      // double chain over the row waited ~4 cycles per element
      const float muf = (float)(mk::sum_f(p, {{D}}) / {{D}});
      const double v = mk::sum_sq_dev(p, {{D}}, muf);
      const float rs = (float)(1.0 / std::sqrt(v / {{D}} + {{eps}}));
      mean[r] = muf;
      rstd[r] = rs;
      float* q = y + r * {{D}};
      for (int64_t i = 0; i < {{D}}; i++) q[i] = (p[i] - muf) * rs{{#if w}} * w[i]{{/if}}{{#if b}} + bi[i]{{/if}};
    }
  });
`);

export const layernorm: KernelEmitter = (k) => {
  const xs = k.inShape(0), D = xs[xs.length - 1];
  // weight / bias optional (elementwise_affine=False): the product / sum is left out, not multiplied by 1
  const w = k.hasInput(1) ? k.inPtr(1) : '', b = k.hasInput(2) ? k.inPtr(2) : '';
  // add_in (compiler/ir/fuse.ts rule 5): x + the last input `addend` is normalised and written as the last output
  const add = k.bool('add_in', false) ? { addend: k.inPtr(3), h: k.outPtr(3) } : { addend: '', h: '' };
  return LN({ rows: prod(xs) / D, D, eps: String(k.num('eps', 1e-5)), x: k.inPtr(0), w, b, y: k.outPtr(0), mean: k.outPtr(1), rstd: k.outPtr(2), ...add });
};

const LN_GRAD = tpl(`  const float* dy = {{dy}};
  const float* x = {{x}};
{{#if w}}
  const float* w = {{w}};
{{/if}}
  const float* mean = {{mean}};
  const float* rstd = {{rstd}};
  float* dx = {{dx}};
  float* dw = {{dw}};
  float* db = {{db}};
{{#if addend}}
  const float* addend = {{addend}};
{{/if}}
  // rows in fixed blocks of RB: a block's dx rows, and its float partial column sums of dy * xhat and dy (its
  // rows in order) in part; then each column adds the blocks' partials in block order in double. The blocks do
  // not depend on the thread split: the same bits for any thread count; dy and x are read once
  constexpr int64_t RB = 16, NBLK = ({{rows}} + RB - 1) / RB;
  float* part = mk::scratch(2, NBLK * 2 * {{D}});
  mk::par(ctx, NBLK, 2, [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; blk++) {
      float* __restrict pw = part + blk * 2 * {{D}};
      float* __restrict pb = pw + {{D}};
      for (int64_t i = 0; i < {{D}}; i++) { pw[i] = 0.0f; pb[i] = 0.0f; }
      for (int64_t r = blk * RB; r < std::min<int64_t>({{rows}}, blk * RB + RB); r++) {
        // the rows read {{pf}} rows (~2 KiB) ahead: prefetched (mk::prefetch_row)
        if (r + {{pf}} < {{rows}}) {
          mk::prefetch_row(x + (r + {{pf}}) * {{D}}, {{D}});
          mk::prefetch_row(dy + (r + {{pf}}) * {{D}}, {{D}});
{{#if addend}}
          mk::prefetch_row(addend + (r + {{pf}}) * {{D}}, {{D}});
{{/if}}
        }
        const float* __restrict p = x + r * {{D}};
        const float* __restrict g = dy + r * {{D}};
        const float mu = mean[r], rs = rstd[r];
        // the two row sums as mk::LANES float lanes, combined in double (as mk::sum_f)
        float l1[mk::LANES] = {}, l2[mk::LANES] = {};
        constexpr int64_t nb = {{D}} / mk::LANES * mk::LANES;
        for (int64_t i = 0; i < nb; i += mk::LANES)
          for (int64_t j = 0; j < mk::LANES; j++) {
            const float gx = g[i + j]{{#if w}} * w[i + j]{{/if}};
            l1[j] += gx;
            l2[j] += gx * ((p[i + j] - mu) * rs);
          }
        double s1 = 0.0, s2 = 0.0;
        for (int64_t j = 0; j < mk::LANES; j++) { s1 += l1[j]; s2 += l2[j]; }
        for (int64_t i = nb; i < {{D}}; i++) {
          const float gx = g[i]{{#if w}} * w[i]{{/if}};
          s1 += gx;
          s2 += (double)gx * ((p[i] - mu) * rs);
        }
        const float m1 = (float)(s1 / {{D}}), m2 = (float)(s2 / {{D}});
        for (int64_t i = 0; i < {{D}}; i++) {
          pw[i] += g[i] * ((p[i] - mu) * rs);
          pb[i] += g[i];
        }
        float* __restrict q = dx + r * {{D}};
        for (int64_t i = 0; i < {{D}}; i++) q[i] = rs * (g[i]{{#if w}} * w[i]{{/if}} - m1 - (p[i] - mu) * rs * m2);
{{#if addend}}
        // add_out (fuse.ts rule 6): dx + addend, added to the stored dx row in a second loop (no contraction
        // into the multiply above: the bits of the separate add)
        const float* __restrict ar = addend + r * {{D}};
        for (int64_t i = 0; i < {{D}}; i++) q[i] += ar[i];
{{/if}}
      }
    }
  });
  // dweight / dbias: 64 columns per work item, the blocks' partials added in block order
  mk::par(ctx, ({{D}} + 63) / 64, 2, [&](int64_t b, int64_t e) {
    double sw[64], sb[64];
    for (int64_t cb = b; cb < e; cb++) {
      const int64_t i0 = cb * 64, w = std::min<int64_t>({{D}}, i0 + 64) - i0;
      for (int64_t j = 0; j < w; j++) { sw[j] = 0.0; sb[j] = 0.0; }
      for (int64_t blk = 0; blk < NBLK; blk++) {
        const float* pw = part + blk * 2 * {{D}} + i0;
        const float* pb = pw + {{D}};
        for (int64_t j = 0; j < w; j++) { sw[j] += pw[j]; sb[j] += pb[j]; }
      }
      for (int64_t j = 0; j < w; j++) { dw[i0 + j] = (float)sw[j]; db[i0 + j] = (float)sb[j]; }
    }
  });
`);

export const layernorm_grad: KernelEmitter = (k) => {
  const xs = k.inShape(1), D = xs[xs.length - 1];
  if (k.bool('sum_out', false)) k.fail('the CPU layernorm_grad takes no sum_out (fusions.ts)');
  if (k.node.attrs.half_out !== undefined) k.fail('the CPU layernorm_grad takes no half_out (fusions.ts)');
  return LN_GRAD({
    rows: prod(xs) / D, D, pf: prefetchRows(D), addend: k.bool('add_out', false) ? k.inPtr(5) : '',
    dy: k.inPtr(0), x: k.inPtr(1), w: k.hasInput(2) ? k.inPtr(2) : '', mean: k.inPtr(3), rstd: k.inPtr(4), dx: k.outPtr(0), dw: k.outPtr(1), db: k.outPtr(2),
  });
};

