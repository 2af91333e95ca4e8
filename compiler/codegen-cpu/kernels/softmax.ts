/** softmax / log_softmax along an axis and their gradients: parallel over (outer, inner) rows. */
import { tpl } from '../template.js';
import { type KernelCtx, type KernelEmitter, splitAxis } from '../kernel_ctx.js';

const ROWS = (body: string) =>
  tpl(`{{decls}}
  mk::par(ctx, {{outer}} * {{inner}}, 64, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; r++) {
      const int64_t base = (r / {{inner}}) * {{size}} * {{inner}} + (r % {{inner}});
${body}
    }
  });
`);

const SOFTMAX = ROWS(`      float m = -INFINITY;
      for (int64_t j = 0; j < {{size}}; j++) m = std::max(m, x[base + j * {{inner}}]);
      double s = 0.0;
      for (int64_t j = 0; j < {{size}}; j++) s += std::exp(x[base + j * {{inner}}] - m);
{{#if log}}
      const float lse = m + (float)std::log(s);
      for (int64_t j = 0; j < {{size}}; j++) y[base + j * {{inner}}] = x[base + j * {{inner}}] - lse;
{{else}}
      const float inv = (float)(1.0 / s);
      for (int64_t j = 0; j < {{size}}; j++) y[base + j * {{inner}}] = std::exp(x[base + j * {{inner}}] - m) * inv;
{{/if}}`);

const SOFTMAX_GRAD = ROWS(`      double s = 0.0;
{{#if log}}
      for (int64_t j = 0; j < {{size}}; j++) s += dy[base + j * {{inner}}];
      for (int64_t j = 0; j < {{size}}; j++) {
        const int64_t q = base + j * {{inner}};
        dx[q] = dy[q] - std::exp(y[q]) * (float)s;
      }
{{else}}
      for (int64_t j = 0; j < {{size}}; j++) s += (double)dy[base + j * {{inner}}] * y[base + j * {{inner}}];
      for (int64_t j = 0; j < {{size}}; j++) {
        const int64_t q = base + j * {{inner}};
        dx[q] = y[q] * (dy[q] - (float)s);
      }
{{/if}}`);

function geo(k: KernelCtx, shape: number[]) {
  const axis = k.num('axis');
  if (!Number.isInteger(axis) || axis < 0 || axis >= shape.length) k.fail(`axis ${axis} out of range`);
  const [outer, size, inner] = splitAxis(shape, axis);
  return { outer, size, inner };
}

export const softmax: KernelEmitter = (k) =>
  SOFTMAX({ ...geo(k, k.inShape(0)), log: false, decls: `  const float* x = ${k.inPtr(0)};\n  float* y = ${k.outPtr(0)};` });
export const log_softmax: KernelEmitter = (k) =>
  SOFTMAX({ ...geo(k, k.inShape(0)), log: true, decls: `  const float* x = ${k.inPtr(0)};\n  float* y = ${k.outPtr(0)};` });

const gradDecls = (k: KernelCtx) => `  const float* dy = ${k.inPtr(0)};\n  const float* y = ${k.inPtr(1)};\n  float* dx = ${k.outPtr(0)};`;
export const softmax_grad: KernelEmitter = (k) => SOFTMAX_GRAD({ ...geo(k, k.inShape(0)), log: false, decls: gradDecls(k) });
export const log_softmax_grad: KernelEmitter = (k) => SOFTMAX_GRAD({ ...geo(k, k.inShape(0)), log: true, decls: gradDecls(k) });
