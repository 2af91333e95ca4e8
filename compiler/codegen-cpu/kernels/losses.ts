/**
 * Losses (mean-reduced, accumulated in double; the class losses' exps in float, ROW_EXPS), their gradients, and metrics (accuracy,
 * top_k); class losses over logits [N, ..., C] (every position a row) with ignore_index. Labels are checked against the class range (a clear error, never an out-of-bounds read).
 * cross_entropy / nll and their gradients split the rows across the pool (same bits for any thread count).
 */
import { f32Lit } from '../../cfamily/text.js';
import { tpl } from '../template.js';
import { type KernelCtx, type KernelEmitter, PAR_MIN, prod } from '../kernel_ctx.js';

// ignored positions (ignore_index) are skipped before the range check; count = positions that count
const LABEL_CHECK = `      const int32_t lab = label[n];
{{#if ignore}}
      if (lab == {{ignore}}) continue;
{{/if}}
      if (lab < 0 || lab >= {{C}}) { bad = n; continue; }
      count++;`;
const LABEL_ERR = `  if (bad >= 0) {
    std::snprintf(ctx->error, sizeof ctx->error, "label %d in row %lld of the batch is outside the class range [0, {{C}})", (int)label[bad], (long long)bad);
    return 1;
  }`;

// every class-loss kernel: the labels checked (count = positions that count)
const LABELS = `  int64_t bad = -1, count = 0;
  for (int64_t n = 0; n < {{N}}; n++) {
${LABEL_CHECK}
  }
${LABEL_ERR}
`;
// the loss: the counted rows' losses (rl) summed in row order
const LOSS_TOTAL = `  double total = 0.0;
  for (int64_t n = 0; n < {{N}}; n++) {
{{#if ignore}}
    if (label[n] == {{ignore}}) continue;
{{/if}}
    total += rl[n];
  }
  out[0] = (float)(total / (double)count);
`;
// a gradient row: d (an ignored row's gradient is zero) and the logits it reads
const GRAD_ROW = `    for (int64_t n = b; n < e; n++) {
      const int32_t lab = label[n];
      float* d = dx + n * {{C}};
{{#if ignore}}
      if (lab == {{ignore}}) { for (int64_t c = 0; c < {{C}}; c++) d[c] = 0.0f; continue; }
{{/if}}
      const float* row = x + n * {{C}};
`;
// the gradient of a row from its exps ex and their sum s
const GRAD_STORE = `      const double inv = 1.0 / s;
      for (int64_t c = 0; c < {{C}}; c++) {
        const double p = (double)ex[c] * inv;
        d[c] = (float)((p - (c == lab ? 1.0 - {{ls}} : 0.0) - {{ls}} / {{C}}) / cnt);
      }
`;

/** logits [N, ..., C] as N rows (every position) of C, and ignore_index as a C literal ('' when absent) */
function nc(k: KernelCtx, i: number) {
  const s = k.inShape(i);
  if (s.length < 2) k.fail(`expected [N, ..., C], got [${s}]`);
  const C = s[s.length - 1], ii = k.node.attrs.ignore_index;
  // rows per part: at least PAR_MIN element-wise elements' worth of work (a logit costs LOGIT_COST of them),
  // so only batches too small to pay for a pool wake-up stay on the calling thread
  const minRows = Math.max(2, Math.ceil(PAR_MIN / (C * LOGIT_COST)));
  return { N: prod(s) / C, C, ignore: ii === undefined ? '' : `(${k.num('ignore_index')})`, minRows };
}

/**
 * work of one logit of a class loss in element-wise elements (PAR_MIN's unit), set when each logit took a double
 * exp (~7 ns on the 2-vCPU Xeon) against ~0.2 ns per element of a vectorised pass. With PAR_MIN alone the MNIST MLP's
 * 256 x 10 logits ran serially: 21 + 19 us per step, 11 + 12 us split over 2 threads (bench/NOTES.md phase 7). With
 * ROW_EXPS a logit costs ~1.5 ns per thread (GPT tiny, Zen 4): this splits smaller batches than it needs to; the
 * MNIST MLP's loss kernels take ~10 us either way.
 */
const LOGIT_COST = 32;

// a row's exps e^(x - m) in float by mk::exp_v into the thread's scratch `ex` (slot 1), a loop the compiler
// vectorises; the sums over them and over the logits in double lanes (mk::sum_d8). A double std::exp per logit and
// one serial double sum kept the loops scalar: 3.2 ns a logit at 2 threads here (Zen 4), 0.43 ms of the GPT tiny's
// 18.8 ms forward (65 classes x 2048 rows), now 0.77 ns; at GPT-2's 50304 classes x 16 x 1024 tokens that is ~2.6 s
// -> ~0.6 s a step. exp_v's relative error is < 2e-7 (mpsc_kernels.hpp), inside a float's rounding.
const ROW_EXPS = `      for (int64_t c = 0; c < {{C}}; c++) ex[c] = mk::exp_v(row[c] - m);
`;

// Rows in parallel (mk::par over rows, at least PAR_MIN / LOGIT_COST logits): the forward writes each
// counted row's loss into the caller's scratch (slot 3) and sums them afterwards in row order, and
// the gradient keeps a row's exps in the thread's scratch (slot 1) instead of computing them twice:
// the same operations in the same order as one serial loop, so the same bits for any thread count.
const CE = tpl(`  const float* x = {{x}};
  const int32_t* label = {{label}};
  float* out = {{out}};
${LABELS}  double* rl = (double*)mk::scratch(3, 2 * {{N}});
  mk::par(ctx, {{N}}, {{minRows}}, [&](int64_t b, int64_t e) {
{{#unless nll}}
    float* ex = mk::scratch(1, {{C}});
{{/unless}}
    for (int64_t n = b; n < e; n++) {
      const int32_t lab = label[n];
{{#if ignore}}
      if (lab == {{ignore}}) continue;
{{/if}}
      const float* row = x + n * {{C}};
{{#if nll}}
      rl[n] = -((double)row[lab]);
{{else}}
      float m = -INFINITY;
      for (int64_t c = 0; c < {{C}}; c++) m = std::max(m, row[c]);
${ROW_EXPS}      const double s = mk::sum_d8(ex, {{C}}), sumx = mk::sum_d8(row, {{C}});
      const double lse = m + std::log(s);
      rl[n] = -(1.0 - {{ls}}) * (row[lab] - lse) - {{ls}} / {{C}} * (sumx - {{C}} * lse);
{{/if}}
    }
  });
${LOSS_TOTAL}`);

const CE_GRAD = tpl(`  const float* x = {{x}};
  const int32_t* label = {{label}};
  float* dx = {{dx}};
${LABELS}  const double cnt = (double)count;
  mk::par(ctx, {{N}}, {{minRows}}, [&](int64_t b, int64_t e) {
{{#unless nll}}
    float* ex = mk::scratch(1, {{C}});
{{/unless}}
${GRAD_ROW}{{#if nll}}
      (void)row;
      for (int64_t c = 0; c < {{C}}; c++) d[c] = 0.0f;
      d[lab] = (float)(-1.0 / cnt);
{{else}}
      float m = -INFINITY;
      for (int64_t c = 0; c < {{C}}; c++) m = std::max(m, row[c]);
${ROW_EXPS}      const double s = mk::sum_d8(ex, {{C}});
${GRAD_STORE}{{/if}}
    }
  });
`);

export const cross_entropy: KernelEmitter = (k) =>
  CE({ ...nc(k, 0), ls: String(k.num('label_smoothing', 0)), nll: false, x: k.inPtr(0), label: k.inPtr(1), out: k.outPtr(0) });
export const nll: KernelEmitter = (k) => CE({ ...nc(k, 0), ls: '0.0', nll: true, x: k.inPtr(0), label: k.inPtr(1), out: k.outPtr(0) });
export const cross_entropy_grad: KernelEmitter = (k) =>
  CE_GRAD({ ...nc(k, 0), ls: String(k.num('label_smoothing', 0)), nll: false, x: k.inPtr(0), label: k.inPtr(1), dx: k.outPtr(0) });
export const nll_grad: KernelEmitter = (k) => CE_GRAD({ ...nc(k, 0), ls: '0.0', nll: true, x: k.inPtr(0), label: k.inPtr(1), dx: k.outPtr(0) });

// cross_entropy and its gradient over the same logits and labels as one kernel (emit_program.ts pairs them):
// each row's exps once for both, the loss's row terms read before the row's gradient is stored (the plan may
// put dx over x); the operations of CE and CE_GRAD in their order, so the bits of the two kernels.
const CE_WITH_GRAD = tpl(`  const float* x = {{x}};
  const int32_t* label = {{label}};
  float* out = {{out}};
  float* dx = {{dx}};
${LABELS}  const double cnt = (double)count;
  double* rl = (double*)mk::scratch(3, 2 * {{N}});
  mk::par(ctx, {{N}}, {{minRows}}, [&](int64_t b, int64_t e) {
    float* ex = mk::scratch(1, {{C}});
${GRAD_ROW}      float m = -INFINITY;
      for (int64_t c = 0; c < {{C}}; c++) m = std::max(m, row[c]);
${ROW_EXPS}      const double s = mk::sum_d8(ex, {{C}}), sumx = mk::sum_d8(row, {{C}});
      const double lse = m + std::log(s);
      rl[n] = -(1.0 - {{ls}}) * (row[lab] - lse) - {{ls}} / {{C}} * (sumx - {{C}} * lse);
${GRAD_STORE}    }
  });
${LOSS_TOTAL}`);

/**
 * the body of one kernel for a cross_entropy node and the cross_entropy_grad node right after it, when the
 * two read the same f32 logits and labels with the same attributes; null otherwise (each keeps its kernel)
 */
export function crossEntropyWithGrad(loss: KernelCtx, grad: KernelCtx): string | null {
  if (loss.node.op !== 'cross_entropy' || grad.node.op !== 'cross_entropy_grad') return null;
  if (loss.node.inputs.length !== 2 || grad.node.inputs.length !== 2) return null;
  if (loss.node.inputs[0] !== grad.node.inputs[0] || loss.node.inputs[1] !== grad.node.inputs[1]) return null;
  if (loss.inDtype(0) !== 'f32') return null;
  const ls = k2s(loss), ii = loss.node.attrs.ignore_index;
  if (ls !== k2s(grad) || ii !== grad.node.attrs.ignore_index) return null;
  return CE_WITH_GRAD({ ...nc(loss, 0), ls, x: loss.inPtr(0), label: loss.inPtr(1), out: loss.outPtr(0), dx: grad.outPtr(0) });
}
const k2s = (k: KernelCtx) => String(k.num('label_smoothing', 0));

const PAIR_MEAN = tpl(`  const float* x = {{x}};
  const float* t = {{t}};
  float* out = {{out}};
  double s = 0.0;
  for (int64_t i = 0; i < {{n}}; i++) {
    const double v = x[i], tv = t[i];
    s += {{expr}};
  }
  out[0] = (float)(s / {{n}});
`);

const PAIR_GRAD = tpl(`  const float* x = {{x}};
  const float* t = {{t}};
  float* dx = {{dx}};
  mk::par(ctx, {{n}}, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      const float v = x[i], tv = t[i];
      dx[i] = {{expr}};
    }
  });
`);

const pair = (k: KernelCtx) => ({ x: k.inPtr(0), t: k.inPtr(1), n: prod(k.inShape(0)) });
export const mse: KernelEmitter = (k) => PAIR_MEAN({ ...pair(k), out: k.outPtr(0), expr: '(v - tv) * (v - tv)' });
export const bce_with_logits: KernelEmitter = (k) =>
  PAIR_MEAN({ ...pair(k), out: k.outPtr(0), expr: 'std::max(v, 0.0) - v * tv + std::log1p(std::exp(-std::fabs(v)))' });
export const mse_grad: KernelEmitter = (k) => {
  const n = prod(k.inShape(0));
  return PAIR_GRAD({ ...pair(k), dx: k.outPtr(0), expr: `(v - tv) * ${f32Lit(2 / n)}` });
};
export const bce_with_logits_grad: KernelEmitter = (k) => {
  const n = prod(k.inShape(0));
  return PAIR_GRAD({ ...pair(k), dx: k.outPtr(0), expr: `(mk::sigmoid(v) - tv) / ${f32Lit(n)}` });
};

const METRIC = tpl(`  const float* x = {{x}};
  const int32_t* label = {{label}};
  float* out = {{out}};
  int64_t bad = -1, hits = 0, count = 0;
  for (int64_t n = 0; n < {{N}}; n++) {
${LABEL_CHECK}
      const float* row = x + n * {{C}};
{{#if topk}}
      int64_t greater = 0;
      for (int64_t c = 0; c < {{C}}; c++) greater += row[c] > row[lab];
      hits += greater < {{k}};
{{else}}
      int64_t arg = 0;
      for (int64_t c = 1; c < {{C}}; c++) if (row[c] > row[arg]) arg = c;
      hits += arg == lab;
{{/if}}
  }
${LABEL_ERR}
  out[0] = (float)((double)hits / (double)count);
`);

export const accuracy: KernelEmitter = (k) => METRIC({ ...nc(k, 0), topk: false, k: 1, x: k.inPtr(0), label: k.inPtr(1), out: k.outPtr(0) });
export const top_k: KernelEmitter = (k) => METRIC({ ...nc(k, 0), topk: true, k: k.num('k'), x: k.inPtr(0), label: k.inPtr(1), out: k.outPtr(0) });
