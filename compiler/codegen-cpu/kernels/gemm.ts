/** linear and matmul: the packed, tiled mk::sgemm (transposes via flags). */
import { tpl } from '../template.js';
import { type KernelEmitter, prod } from '../kernel_ctx.js';

const LINEAR = tpl(`  const float* x = {{x}};
  const float* w = {{w}};
  float* y = {{y}};
{{#if bias}}
  const float* b = {{bias}};
  for (int64_t i = 0; i < {{M}}; i++) std::memcpy(y + i * {{N}}, b, {{N}} * sizeof(float));
{{/if}}
  mk::sgemm(ctx, false, true, {{M}}, {{N}}, {{K}}, x, {{K}}, w, {{K}}, y, {{N}}, {{accumulate}});
`);

export const linear: KernelEmitter = (k) => {
  const ws = k.inShape(1);
  if (ws.length !== 2) k.fail('weight must be [N,K]');
  const [N, K] = ws;
  const M = prod(k.inShape(0)) / K;
  const bias = k.hasInput(2) ? k.inPtr(2) : '';
  return LINEAR({ x: k.inPtr(0), w: k.inPtr(1), y: k.outPtr(0), bias, M, N, K, accumulate: bias ? 'true' : 'false' });
};

const MATMUL = tpl(`  mk::sgemm(ctx, {{tA}}, {{tB}}, {{M}}, {{N}}, {{K}}, {{a}}, {{lda}}, {{b}}, {{ldb}}, {{y}}, {{N}}, false);
`);

export const matmul: KernelEmitter = (k) => {
  const as = k.inShape(0), bs = k.inShape(1);
  if (as.length !== 2 || bs.length !== 2) k.fail('matmul is 2-D only');
  const tA = k.bool('transA', false), tB = k.bool('transB', false);
  const M = tA ? as[1] : as[0], K = tA ? as[0] : as[1];
  const Kb = tB ? bs[1] : bs[0], N = tB ? bs[0] : bs[1];
  if (K !== Kb) k.fail(`inner dims differ (${K} vs ${Kb})`);
  return MATMUL({ tA: String(tA), tB: String(tB), M, N, K, a: k.inPtr(0), lda: as[1], b: k.inPtr(1), ldb: bs[1], y: k.outPtr(0) });
};
