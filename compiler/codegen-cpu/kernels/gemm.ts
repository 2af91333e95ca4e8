/**
 * linear and matmul through the fast core's sgemm_part (runtime/cpp/fast/sgemm.h): one part per
 * pool thread, each with its own workspace from mk::run_parts; bias (and relu, when
 * compiler/ir/fuse.ts folded the following relu into this node: attr `epilogue`) in the
 * GEMM's epilogue.
 */
import { tpl } from '../template.js';
import { type KernelEmitter, prod, reluEpilogue } from '../kernel_ctx.js';

const LINEAR = tpl(`  const float* x = {{x}};
  const float* w = {{w}};
  float* y = {{y}};
  mpsc_fast::Epilogue ep;
{{#if bias}}
  ep.bias = {{bias}};
  ep.bias_kind = mpsc_fast::BIAS_COL;
{{/if}}
  ep.relu = {{relu}};
  mk::run_parts(ctx, mpsc_fast::sgemm_workspace_bytes({{M}}, {{N}}, {{K}}), [&](int part, int nparts, void* ws) {
    mpsc_fast::sgemm_part(false, true, {{M}}, {{N}}, {{K}}, 1.0f, x, {{K}}, w, {{K}}, 0.0f, y, {{N}}, &ep, part, nparts, ws);
  });
`);

export const linear: KernelEmitter = (k) => {
  const ws = k.inShape(1);
  if (ws.length !== 2) k.fail('weight must be [N,K]');
  const [N, K] = ws;
  const M = prod(k.inShape(0)) / K;
  const bias = k.hasInput(2) ? k.inPtr(2) : '';
  return LINEAR({ x: k.inPtr(0), w: k.inPtr(1), y: k.outPtr(0), bias, M, N, K, relu: String(reluEpilogue(k)) });
};

const MATMUL = tpl(`  const float* a = {{a}};
  const float* b = {{b}};
  float* y = {{y}};
  mk::run_parts(ctx, mpsc_fast::sgemm_workspace_bytes({{M}}, {{N}}, {{K}}), [&](int part, int nparts, void* ws) {
    mpsc_fast::sgemm_part({{tA}}, {{tB}}, {{M}}, {{N}}, {{K}}, 1.0f, a, {{lda}}, b, {{ldb}}, 0.0f, y, {{N}}, nullptr, part, nparts, ws);
  });
`);

export const matmul: KernelEmitter = (k) => {
  const as = k.inShape(0), bs = k.inShape(1);
  if (as.length !== 2 || bs.length !== 2) k.fail('matmul is 2-D only');
  const tA = k.bool('transA', false), tB = k.bool('transB', false);
  const M = tA ? as[1] : as[0], K = tA ? as[0] : as[1];
  const Kb = tB ? bs[1] : bs[0], N = tB ? bs[0] : bs[1];
  if (K !== Kb) k.fail(`inner dims differ (${K} vs ${Kb})`);
  if (k.str('epilogue', '') !== '') k.fail('the CPU matmul takes no epilogue (fusions.ts)');
  return MATMUL({ tA: String(tA), tB: String(tB), M, N, K, a: k.inPtr(0), lda: as[1], b: k.inPtr(1), ldb: bs[1], y: k.outPtr(0) });
};
