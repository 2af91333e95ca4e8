/** maxpool2d / avgpool2d / global_avgpool and their gradients: parallel over (n, c) planes. */
import { windowOut } from '../../ir/shapes.js';
import { tpl } from '../template.js';
import type { KernelCtx, KernelEmitter } from '../kernel_ctx.js';

function geometry(k: KernelCtx, xs: number[]) {
  if (xs.length !== 4) k.fail('pooling expects [N,C,H,W]');
  const [N, C, H, W] = xs;
  const [KH, KW] = k.pair('kernel');
  const [sh, sw] = k.pair('stride', [KH, KW]);
  const [ph, pw] = k.pair('padding', [0, 0]);
  const OH = windowOut(H, KH, sh, ph), OW = windowOut(W, KW, sw, pw);
  return { NC: N * C, H, W, KH, KW, sh, sw, ph, pw, OH, OW };
}

const WINDOW = `
        const int64_t h0 = oh * {{sh}} - {{ph}}, w0 = ow * {{sw}} - {{pw}};
        const int64_t ha = std::max<int64_t>(h0, 0), hb = std::min<int64_t>(h0 + {{KH}}, {{H}});
        const int64_t wa = std::max<int64_t>(w0, 0), wb = std::min<int64_t>(w0 + {{KW}}, {{W}});`;

const MAXPOOL = tpl(`  const float* x = {{x}};
  float* y = {{y}};
  mpsc::parallel_for(ctx, {{NC}}, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; pl++) {
      const float* xp = x + pl * {{H}} * {{W}};
      float* yp = y + pl * {{OH}} * {{OW}};
      for (int64_t oh = 0; oh < {{OH}}; oh++) for (int64_t ow = 0; ow < {{OW}}; ow++) {${WINDOW}
        float m = -INFINITY;
        for (int64_t h = ha; h < hb; h++) for (int64_t w = wa; w < wb; w++) m = std::max(m, xp[h * {{W}} + w]);
        yp[oh * {{OW}} + ow] = m;
      }
    }
  });
`);

const MAXPOOL_GRAD = tpl(`  const float* dy = {{dy}};
  const float* x = {{x}};
  float* dx = {{dx}};
  mpsc::parallel_for(ctx, {{NC}}, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; pl++) {
      const float* xp = x + pl * {{H}} * {{W}};
      const float* dyp = dy + pl * {{OH}} * {{OW}};
      float* dxp = dx + pl * {{H}} * {{W}};
      std::memset(dxp, 0, sizeof(float) * {{H}} * {{W}});
      for (int64_t oh = 0; oh < {{OH}}; oh++) for (int64_t ow = 0; ow < {{OW}}; ow++) {${WINDOW}
        float m = -INFINITY;
        int64_t arg = -1;
        for (int64_t h = ha; h < hb; h++) for (int64_t w = wa; w < wb; w++) {
          const float v = xp[h * {{W}} + w];
          if (arg < 0 || v > m) { m = v; arg = h * {{W}} + w; }
        }
        if (arg >= 0) dxp[arg] += dyp[oh * {{OW}} + ow];
      }
    }
  });
`);

const AVGPOOL = tpl(`  const float* x = {{x}};
  float* y = {{y}};
  mpsc::parallel_for(ctx, {{NC}}, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; pl++) {
      const float* xp = x + pl * {{H}} * {{W}};
      float* yp = y + pl * {{OH}} * {{OW}};
      for (int64_t oh = 0; oh < {{OH}}; oh++) for (int64_t ow = 0; ow < {{OW}}; ow++) {${WINDOW}
        float s = 0.0f;
        for (int64_t h = ha; h < hb; h++) for (int64_t w = wa; w < wb; w++) s += xp[h * {{W}} + w];
        yp[oh * {{OW}} + ow] = s * (1.0f / ({{KH}} * {{KW}}));
      }
    }
  });
`);

const AVGPOOL_GRAD = tpl(`  const float* dy = {{dy}};
  float* dx = {{dx}};
  mpsc::parallel_for(ctx, {{NC}}, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; pl++) {
      const float* dyp = dy + pl * {{OH}} * {{OW}};
      float* dxp = dx + pl * {{H}} * {{W}};
      std::memset(dxp, 0, sizeof(float) * {{H}} * {{W}});
      for (int64_t oh = 0; oh < {{OH}}; oh++) for (int64_t ow = 0; ow < {{OW}}; ow++) {${WINDOW}
        const float g = dyp[oh * {{OW}} + ow] * (1.0f / ({{KH}} * {{KW}}));
        for (int64_t h = ha; h < hb; h++) for (int64_t w = wa; w < wb; w++) dxp[h * {{W}} + w] += g;
      }
    }
  });
`);

// Tiled windows (stride == kernel, no padding): every window lies inside the plane, so the bounds
// are compile-time constants and the window loops unroll; same scan order and tie rule as above.
const MAXPOOL_TILED = tpl(`  const float* x = {{x}};
  float* y = {{y}};
  mk::par(ctx, {{NC}}, 8, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; pl++) {
      const float* xp = x + pl * {{H}} * {{W}};
      float* yp = y + pl * {{OH}} * {{OW}};
      for (int64_t oh = 0; oh < {{OH}}; oh++) for (int64_t ow = 0; ow < {{OW}}; ow++) {
        const float* win = xp + oh * {{KH}} * {{W}} + ow * {{KW}};
        float m = -INFINITY;
        for (int64_t h = 0; h < {{KH}}; h++) for (int64_t w = 0; w < {{KW}}; w++) m = std::max(m, win[h * {{W}} + w]);
        yp[oh * {{OW}} + ow] = m;
      }
    }
  });
`);

const MAXPOOL_GRAD_TILED = tpl(`  const float* dy = {{dy}};
  const float* x = {{x}};
  float* dx = {{dx}};
  mk::par(ctx, {{NC}}, 8, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; pl++) {
      const float* xp = x + pl * {{H}} * {{W}};
      const float* dyp = dy + pl * {{OH}} * {{OW}};
      float* dxp = dx + pl * {{H}} * {{W}};
{{#if ragged}}
      std::memset(dxp, 0, sizeof(float) * {{H}} * {{W}});
{{/if}}
      for (int64_t oh = 0; oh < {{OH}}; oh++) for (int64_t ow = 0; ow < {{OW}}; ow++) {
        const int64_t base = oh * {{KH}} * {{W}} + ow * {{KW}};
        float m = xp[base];
        int64_t arg = base;
        for (int64_t h = 0; h < {{KH}}; h++) for (int64_t w = 0; w < {{KW}}; w++) {
          const int64_t i = base + h * {{W}} + w;
          const float v = xp[i];
          const bool gt = v > m;  // branch-free select: argmax positions are unpredictable
          dxp[i] = 0.0f;
          m = gt ? v : m;
          arg = gt ? i : arg;
        }
        dxp[arg] = dyp[oh * {{OW}} + ow];
      }
    }
  });
`);

// 2x2 windows, stride 2, no padding (the common case): a pair of input rows per output row, vectorised
// in mpsc_kernels.hpp (maxpool2x2_row / maxpool2x2_grad_row: same comparisons, order and tie rule).
// The gradient writes every dx element once: the rows pooled by the helper, then the zero column /
// row a ragged plane (odd W / H) leaves uncovered.
const MAXPOOL_2X2 = tpl(`  const float* x = {{x}};
  float* y = {{y}};
  mk::par(ctx, {{NC}}, 8, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; pl++) {
      const float* xp = x + pl * {{H}} * {{W}};
      float* yp = y + pl * {{OH}} * {{OW}};
      for (int64_t oh = 0; oh < {{OH}}; oh++) {
        const float* x0 = xp + 2 * oh * {{W}};
        mk::maxpool2x2_row<{{OW}}>(x0, x0 + {{W}}, yp + oh * {{OW}});
      }
    }
  });
`);

// with relu: the relu-grad folded in (compiler/ir/fuse.ts, attr relu_grad); the mask is the pool input
// x itself, and dx is usually x (planned in place: ops.ts inPlace), which maxpool2x2_grad_row allows
const MAXPOOL_GRAD_2X2 = tpl(`  const float* dy = {{dy}};
  const float* x = {{x}};
  float* dx = {{dx}};
  mk::par(ctx, {{NC}}, 8, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; pl++) {
      const float* xp = x + pl * {{H}} * {{W}};
      const float* dyp = dy + pl * {{OH}} * {{OW}};
      float* dxp = dx + pl * {{H}} * {{W}};
      for (int64_t oh = 0; oh < {{OH}}; oh++) {
        const int64_t r = 2 * oh * {{W}};
        mk::maxpool2x2_grad_row<{{OW}}, {{relu}}>(xp + r, xp + r + {{W}}, dyp + oh * {{OW}}, dxp + r, dxp + r + {{W}});
{{#if raggedW}}
        dxp[r + {{W}} - 1] = 0.0f;
        dxp[r + 2 * {{W}} - 1] = 0.0f;
{{/if}}
      }
{{#if raggedH}}
      std::memset(dxp + 2 * {{OH}} * {{W}}, 0, sizeof(float) * {{W}});
{{/if}}
    }
  });
`);

function tiled(g: ReturnType<typeof geometry>): boolean {
  return g.sh === g.KH && g.sw === g.KW && g.ph === 0 && g.pw === 0;
}

/** tiled 2x2 windows with at least one output per plane (H, W >= 2) */
function tiled2x2(g: ReturnType<typeof geometry>): boolean {
  return tiled(g) && g.KH === 2 && g.KW === 2 && g.OH >= 1 && g.OW >= 1;
}

export const maxpool2d: KernelEmitter = (k) => {
  const g = geometry(k, k.inShape(0));
  const vm = { ...g, x: k.inPtr(0), y: k.outPtr(0) };
  if (tiled2x2(g)) return MAXPOOL_2X2(vm);
  return (tiled(g) ? MAXPOOL_TILED : MAXPOOL)(vm);
};
export const maxpool2d_grad: KernelEmitter = (k) => {
  const g = geometry(k, k.inShape(1));
  const relu = k.bool('relu_grad', false);
  const ragged = g.OH * g.KH !== g.H || g.OW * g.KW !== g.W;
  const vm = { ...g, ragged, dy: k.inPtr(0), x: k.inPtr(1), dx: k.outPtr(0) };
  if (tiled2x2(g)) {
    // 2 * OW = W - 1 when W is odd: one uncovered column (likewise one row for odd H)
    if (relu && k.node.inputs[2] !== k.node.inputs[1]) k.fail('a folded relu-grad must take its mask from the pool input');
    return MAXPOOL_GRAD_2X2({ ...vm, raggedW: 2 * g.OW !== g.W, raggedH: 2 * g.OH !== g.H, relu: relu ? 'true' : 'false' });
  }
  if (relu) k.fail('a relu-grad is folded only into 2x2 / stride-2 max-pool grads');
  return (tiled(g) ? MAXPOOL_GRAD_TILED : MAXPOOL_GRAD)(vm);
};
export const avgpool2d: KernelEmitter = (k) => AVGPOOL({ ...geometry(k, k.inShape(0)), x: k.inPtr(0), y: k.outPtr(0) });
export const avgpool2d_grad: KernelEmitter = (k) => AVGPOOL_GRAD({ ...geometry(k, k.shape('x_shape')), dy: k.inPtr(0), dx: k.outPtr(0) });

const GAP = tpl(`  const float* x = {{x}};
  float* y = {{y}};
  mk::par(ctx, {{NC}}, 64, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; pl++) {
      // 8 independent double lanes (vectorised; a fixed order per plane, so any thread count gives the same bits)
      const float* xp = x + pl * {{HW}};
      double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t i = 0;
      for (; i + 8 <= {{HW}}; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += (double)({{#if relu}}xp[i + l] > 0.0f ? xp[i + l] : 0.0f{{else}}xp[i + l]{{/if}});
      double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      for (; i < {{HW}}; i++) s += {{#if relu}}(xp[i] > 0.0f ? xp[i] : 0.0f){{else}}xp[i]{{/if}};
      y[pl] = (float)(s / {{HW}});
    }
  });
`);

const GAP_GRAD = tpl(`  const float* dy = {{dy}};
  float* dx = {{dx}};
{{#if mask}}
  const float* mask = {{mask}};  // relu-grad folded in (compiler/ir/fuse.ts): dx = mask > 0 ? g : 0, possibly in place over mask
{{/if}}
  mk::par(ctx, {{NC}}, 64, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; pl++) {
      const float g = dy[pl] * (1.0f / {{HW}});
{{#if mask}}
      for (int64_t i = 0; i < {{HW}}; i++) dx[pl * {{HW}} + i] = mask[pl * {{HW}} + i] > 0.0f ? g : 0.0f;
{{else}}
      for (int64_t i = 0; i < {{HW}}; i++) dx[pl * {{HW}} + i] = g;
{{/if}}
    }
  });
`);

export const global_avgpool: KernelEmitter = (k) => {
  const [N, C, H, W] = k.inShape(0);
  // relu_in (compiler/ir/fuse.ts): x is the folded relu's input; y never lies over x (memory_plan.ts)
  return GAP({ NC: N * C, HW: H * W, x: k.inPtr(0), y: k.outPtr(0), relu: k.bool('relu_in', false) });
};
export const global_avgpool_grad: KernelEmitter = (k) => {
  const [N, C, H, W] = k.shape('x_shape');
  const relu = k.bool('relu_grad', false);
  if (relu !== k.hasInput(1)) k.fail('relu_grad and the mask input go together');
  return GAP_GRAD({ NC: N * C, HW: H * W, dy: k.inPtr(0), dx: k.outPtr(0), mask: relu ? k.inPtr(1) : '' });
};
