/**
 * conv2d (im2col + sgemm per image and group, bias folded in as the GEMM's initial C),
 * conv2d_grad_input (sgemm into a column buffer, then col2im), conv2d_grad_weight (a
 * transposed im2col so the GEMM needs no transposed pack; partial sums over a fixed number
 * of image chunks, combined in chunk order: the same bits for any thread count).
 * 1x1 / stride 1 / no padding skips im2col.
 */
import { tpl } from '../template.js';
import type { KernelCtx, KernelEmitter } from '../kernel_ctx.js';

interface Geo {
  N: number; C: number; H: number; W: number; O: number; KH: number; KW: number;
  sh: number; sw: number; ph: number; pw: number; dlh: number; dlw: number; G: number;
  OH: number; OW: number; Cg: number; Og: number; CKK: number; P: number; direct: boolean;
}

function geometry(k: KernelCtx, xs: number[], ws: number[]): Geo {
  if (xs.length !== 4 || ws.length !== 4) k.fail('conv2d expects x [N,C,H,W] and weight [O,C/g,KH,KW]');
  const [N, C, H, W] = xs;
  const [O, Cg, KH, KW] = ws;
  const [sh, sw] = k.pair('stride', [1, 1]);
  const [ph, pw] = k.pair('padding', [0, 0]);
  const [dlh, dlw] = k.pair('dilation', [1, 1]);
  const G = k.num('groups', 1);
  if (C % G !== 0 || O % G !== 0 || Cg !== C / G) k.fail(`channels ${C}/${O} do not split into ${G} groups of weight in-channels ${Cg}`);
  const OH = Math.floor((H + 2 * ph - dlh * (KH - 1) - 1) / sh) + 1;
  const OW = Math.floor((W + 2 * pw - dlw * (KW - 1) - 1) / sw) + 1;
  const direct = KH === 1 && KW === 1 && sh === 1 && sw === 1 && ph === 0 && pw === 0;
  return { N, C, H, W, O, KH, KW, sh, sw, ph, pw, dlh, dlw, G, OH, OW, Cg, Og: O / G, CKK: Cg * KH * KW, P: OH * OW, direct };
}

const IM2COL_ARGS = '{{Cg}}, {{H}}, {{W}}, {{KH}}, {{KW}}, {{sh}}, {{sw}}, {{ph}}, {{pw}}, {{dlh}}, {{dlw}}, {{OH}}, {{OW}}';

const FORWARD = tpl(`  const float* x = {{x}};
  const float* w = {{w}};
  float* y = {{y}};
  mpsc::parallel_for(ctx, {{N}} * {{G}}, [&](int64_t b, int64_t e) {
{{#unless direct}}
    float* col = mk::scratch(2, {{CKK}} * {{P}});
{{/unless}}
    for (int64_t t = b; t < e; t++) {
      const int64_t n = t / {{G}}, g = t % {{G}};
      const float* xg = x + (n * {{C}} + g * {{Cg}}) * {{H}} * {{W}};
      float* yg = y + (n * {{O}} + g * {{Og}}) * {{P}};
{{#if direct}}
      const float* col = xg;
{{else}}
      mk::im2col(xg, ${IM2COL_ARGS}, col);
{{/if}}
{{#if bias}}
      for (int64_t o = 0; o < {{Og}}; o++) {
        const float bv = {{bias}}[g * {{Og}} + o];
        for (int64_t p = 0; p < {{P}}; p++) yg[o * {{P}} + p] = bv;
      }
{{/if}}
      mk::sgemm(ctx, false, false, {{Og}}, {{P}}, {{CKK}}, w + g * {{Og}} * {{CKK}}, {{CKK}}, col, {{P}}, yg, {{P}}, {{accumulate}});
    }
  });
`);

export const conv2d: KernelEmitter = (k) => {
  const g = geometry(k, k.inShape(0), k.inShape(1));
  const bias = k.hasInput(2) ? k.inPtr(2) : '';
  return FORWARD({ ...g, x: k.inPtr(0), w: k.inPtr(1), y: k.outPtr(0), bias, accumulate: bias ? 'true' : 'false' });
};

const GRAD_INPUT = tpl(`  const float* dy = {{dy}};
  const float* w = {{w}};
  float* dx = {{dx}};
  mpsc::parallel_for(ctx, {{N}} * {{G}}, [&](int64_t b, int64_t e) {
{{#unless direct}}
    float* col = mk::scratch(2, {{CKK}} * {{P}});
{{/unless}}
    for (int64_t t = b; t < e; t++) {
      const int64_t n = t / {{G}}, g = t % {{G}};
      float* dxg = dx + (n * {{C}} + g * {{Cg}}) * {{H}} * {{W}};
      const float* dyg = dy + (n * {{O}} + g * {{Og}}) * {{P}};
{{#if direct}}
      mk::sgemm(ctx, true, false, {{CKK}}, {{P}}, {{Og}}, w + g * {{Og}} * {{CKK}}, {{CKK}}, dyg, {{P}}, dxg, {{P}}, false);
{{else}}
      mk::sgemm(ctx, true, false, {{CKK}}, {{P}}, {{Og}}, w + g * {{Og}} * {{CKK}}, {{CKK}}, dyg, {{P}}, col, {{P}}, false);
      std::memset(dxg, 0, sizeof(float) * {{Cg}} * {{H}} * {{W}});
      mk::col2im(col, ${IM2COL_ARGS}, dxg);
{{/if}}
    }
  });
`);

export const conv2d_grad_input: KernelEmitter = (k) => {
  const g = geometry(k, k.shape('x_shape'), k.inShape(1));
  return GRAD_INPUT({ ...g, dy: k.inPtr(0), w: k.inPtr(1), dx: k.outPtr(0) });
};

const GRAD_WEIGHT = tpl(`  const float* dy = {{dy}};
  const float* x = {{x}};
  float* dw = {{dw}};
  constexpr int64_t WN = {{O}} * {{CKK}};
  // a fixed number of image chunks (not the thread count): the summation order, and so the result, is the same for any --threads
  constexpr int64_t chunks = {{chunks}};
  float* partial = chunks > 1 ? mk::scratch(3, (chunks - 1) * WN) : nullptr;
  mpsc::parallel_for(ctx, chunks, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; c++) {
      float* acc = c == 0 ? dw : partial + (c - 1) * WN;
      std::memset(acc, 0, sizeof(float) * WN);
{{#unless direct}}
      float* col = mk::scratch(2, {{CKK}} * {{P}});
{{/unless}}
      const int64_t n0 = {{N}} * c / chunks, n1 = {{N}} * (c + 1) / chunks;
      for (int64_t n = n0; n < n1; n++) {
        for (int64_t g = 0; g < {{G}}; g++) {
          const float* xg = x + (n * {{C}} + g * {{Cg}}) * {{H}} * {{W}};
          const float* dyg = dy + (n * {{O}} + g * {{Og}}) * {{P}};
{{#if direct}}
          mk::sgemm(nullptr, false, true, {{Og}}, {{CKK}}, {{P}}, dyg, {{P}}, xg, {{P}}, acc + g * {{Og}} * {{CKK}}, {{CKK}}, true);
{{else}}
          mk::im2col_t(xg, ${IM2COL_ARGS}, col);
          mk::sgemm(nullptr, false, false, {{Og}}, {{CKK}}, {{P}}, dyg, {{P}}, col, {{CKK}}, acc + g * {{Og}} * {{CKK}}, {{CKK}}, true);
{{/if}}
        }
      }
    }
  });
  for (int64_t c = 1; c < chunks; c++) {
    const float* p = partial + (c - 1) * WN;
    for (int64_t i = 0; i < WN; i++) dw[i] += p[i];
  }
`);

export const conv2d_grad_weight: KernelEmitter = (k) => {
  const g = geometry(k, k.inShape(1), k.shape('w_shape'));
  return GRAD_WEIGHT({ ...g, chunks: Math.min(8, g.N), dy: k.inPtr(0), x: k.inPtr(1), dw: k.outPtr(0) });
};
