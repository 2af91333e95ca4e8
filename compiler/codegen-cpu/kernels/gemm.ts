/**
 * linear and the batched matmul through the fast core's sgemm_part (runtime/cpp/fast/sgemm.h): one part per
 * pool thread, each with its own workspace from mk::run_parts; bias (and the unary fn that
 * compiler/ir/fuse.ts folded into this node, attr `epilogue`: relu, or any fn through
 * linearEpilogue's post) in the GEMM's epilogue; a matmul's `grad_fn: relu` (rule 12) as the
 * Epilogue's mask, the gradient's x being the node's last input.
 */
import { tpl } from '../template.js';
import { type KernelCtx, type KernelEmitter, prod } from '../kernel_ctx.js';
import { broadcastStrides, matmulDims } from '../../ir/shapes.js';
import { UNARY_FNS_TABLE, isUnaryFn, renderScalar, unaryFnAttrs } from '../../ir/scalar_fns.js';
import { CPP_RANGE_FNS, CPP_SCALAR_LANG } from '../scalar_cpp.js';

/**
 * A linear's fused epilogue (compiler/ir/fuse.ts attr `epilogue`, fusions.ts): relu as the core's
 * vector relu, any other unary fn as `post`, a captureless lambda (sgemm's Epilogue::post) looping
 * the unary kernel's own formula (elementwise.ts, scalar_fns.ts) over a run of floats in place, or
 * calling its run function (scalar_cpp.ts CPP_RANGE_FNS), so the result has the bits of the separate
 * unary pass. post is null without such an epilogue.
 */
export function linearEpilogue(k: KernelCtx): { relu: boolean; post: string | null } {
  const fn = k.str('epilogue', '');
  if (fn === '') return { relu: false, post: null };
  if (fn === 'relu') return { relu: true, post: null };
  if (!isUnaryFn(fn)) return k.fail(`unknown epilogue fn '${fn}'`);
  const run = CPP_RANGE_FNS[fn];
  if (run) return { relu: false, post: `[](float* r, int64_t n) { ${run.fwd}(r, r, n); }` };
  const attrs = unaryFnAttrs(fn, (name, d) => k.num(`epilogue_${name}`, d));
  const expr = renderScalar(UNARY_FNS_TABLE[fn].fwd, CPP_SCALAR_LANG, { x: 'v' }, attrs);
  return { relu: false, post: `[](float* r, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
      const float v = r[i];
      r[i] = ${expr};
    }
  }` };
}

const LINEAR = tpl(`  const float* x = {{x}};
  const float* w = {{w}};
  float* y = {{y}};
  mpsc_fast::Epilogue ep;
{{#if bias}}
  ep.bias = {{bias}};
  ep.bias_kind = mpsc_fast::BIAS_COL;
{{/if}}
  ep.relu = {{relu}};
{{#if post}}
  ep.post = {{post}};
{{/if}}
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
  const epi = linearEpilogue(k);
  return LINEAR({ x: k.inPtr(0), w: k.inPtr(1), y: k.outPtr(0), bias, M, N, K, relu: String(epi.relu), post: epi.post ?? '' });
};

const MATMUL = tpl(`  const float* a = {{a}};
  const float* b = {{b}};
  float* y = {{y}};
{{#if mask}}
  // relu's gradient at the mask in the store (fuse.ts rule 12, grad_fn relu): y = mask > 0 ? a b : 0
  mpsc_fast::Epilogue ep;
  ep.mask = {{mask}};
  ep.ld_mask = {{N}};
{{/if}}
{{#if single}}
  mk::run_parts(ctx, mpsc_fast::sgemm_workspace_bytes({{M}}, {{N}}, {{K}}), [&](int part, int nparts, void* ws) {
    mpsc_fast::sgemm_part({{tA}}, {{tB}}, {{M}}, {{N}}, {{K}}, 1.0f, a, {{lda}}, b, {{ldb}}, 0.0f, y, {{N}}, {{#if mask}}&ep{{else}}nullptr{{/if}}, part, nparts, ws);
  });
{{else}}
  // {{nb}} products; batch offsets of a and b through the broadcast strides (in matrices)
  static const int64_t dims[{{rank}}] = { {{dims}} };
  static const int64_t sa[{{rank}}] = { {{sa}} };
  static const int64_t sb[{{rank}}] = { {{sb}} };
  auto one = [&](int64_t i, int part, int nparts, void* ws) {
    int64_t oa, ob;
    mk::bcast_offsets(i, {{rank}}, dims, sa, sb, oa, ob);
{{#if mask}}
    mpsc_fast::Epilogue epi = ep;
    epi.mask = ep.mask + i * {{sizeY}};
{{/if}}
    mpsc_fast::sgemm_part({{tA}}, {{tB}}, {{M}}, {{N}}, {{K}}, 1.0f, a + oa * {{sizeA}}, {{lda}}, b + ob * {{sizeB}}, {{ldb}}, 0.0f,
                          y + i * {{sizeY}}, {{N}}, {{#if mask}}&epi{{else}}nullptr{{/if}}, part, nparts, ws);
  };
  if ({{nb}} >= 2 * mpsc::threads(ctx)) {
    // many small products: whole products per thread (the same bits as any split: sgemm_part's contract)
    mk::par(ctx, {{nb}}, 2, [&](int64_t b0, int64_t e0) {
      for (int64_t i = b0; i < e0; i++) one(i, 0, 1, nullptr);
    });
  } else {
    for (int64_t i = 0; i < {{nb}}; i++)
      mk::run_parts(ctx, mpsc_fast::sgemm_workspace_bytes({{M}}, {{N}}, {{K}}), [&](int part, int nparts, void* ws) { one(i, part, nparts, ws); });
  }
{{/if}}
`);

export const matmul: KernelEmitter = (k) => {
  const as = k.inShape(0), bs = k.inShape(1);
  const tA = k.bool('transA', false), tB = k.bool('transB', false);
  const d = matmulDims(as, bs, tA, tB);
  if (!d) return k.fail(`op(a) [${as}] and op(b) [${bs}] do not multiply`);
  if (k.str('epilogue', '') !== '') k.fail('the CPU matmul takes no epilogue (fusions.ts)');
  // rule 12 (fusions.ts: relu only): the gradient's x, the last input, masks the store
  const gradFn = k.str('grad_fn', '');
  if (gradFn !== '' && gradFn !== 'relu') k.fail(`the CPU matmul applies only relu's gradient in its store, not '${gradFn}'`);
  const mask = gradFn === 'relu' ? k.inPtr(2) : '';
  const { batch, N, K } = d;
  let M = d.M;
  const nb = prod(batch);
  const vm = { tA: String(tA), tB: String(tB), N, K, a: k.inPtr(0), lda: as[as.length - 1], b: k.inPtr(1), ldb: bs[bs.length - 1], y: k.outPtr(0), mask };
  // a [..., M, K] (not transposed) times a shared 2-D b: one GEMM with the batch folded into M
  if (nb === 1 || (!tA && bs.length === 2 && prod(as.slice(0, -2)) === nb)) {
    M *= nb;
    return MATMUL({ ...vm, M, single: true });
  }
  const sa = broadcastStrides(as.slice(0, -2), batch), sb = broadcastStrides(bs.slice(0, -2), batch);
  return MATMUL({
    ...vm, M, single: false, nb, rank: batch.length, dims: batch.join(', '), sa: sa.join(', '), sb: sb.join(', '),
    sizeA: as[as.length - 2] * as[as.length - 1], sizeB: bs[bs.length - 2] * bs[bs.length - 1], sizeY: M * N,
  });
};

const MATMUL_SUMS = tpl(`  const float* a = {{a}};
  const float* b = {{b}};
  float* y = {{y}};
  // the column sums of a (the next node's sum_to) taken while sgemm packs a, in double, rows in order
  double* sums = (double*)mk::scratch(3, 2 * {{M}});
  std::memset(sums, 0, sizeof(double) * {{M}});
  mk::run_parts(ctx, mpsc_fast::sgemm_workspace_bytes({{M}}, {{N}}, {{K}}), [&](int part, int nparts, void* ws) {
    mpsc_fast::sgemm_part(true, false, {{M}}, {{N}}, {{K}}, 1.0f, a, {{M}}, b, {{N}}, 0.0f, y, {{N}}, nullptr, part, nparts, ws, sums);
  });
  // written after the product: the plan may have put the sum over an operand only the product reads
  float* sum_out = {{sumOut}};
  for (int64_t i = 0; i < {{M}}; i++) sum_out[i] = (float)sums[i];
`);

/**
 * A grad-weight product dW = a^T b (matmul transA, one 2-D GEMM) and the bias gradient next to it, a sum_to
 * over the rows of the same a (columnSumOf: `outer` rows of `mid`), as one kernel: sgemm sums a's columns
 * while packing it (the same row-ordered double sums as SUM_ROWS, so the same bits). null when the pair
 * does not have that form (emit_program.ts then emits the two nodes).
 */
export function matmulWithColumnSum(k: KernelCtx, s: KernelCtx, sum: { outer: number; mid: number }): string | null {
  if (k.node.op !== 'matmul' || k.str('epilogue', '') !== '' || !k.bool('transA', false) || k.bool('transB', false)) return null;
  const as = k.inShape(0), bs = k.inShape(1);
  if (as.length !== 2 || bs.length !== 2 || [0, 1].some((i) => k.inDtype(i) !== 'f32') || s.inDtype(0) !== 'f32') return null;
  const [K, M] = as, N = bs[1];
  if (bs[0] !== K || s.inPtr(0) !== k.inPtr(0) || sum.outer !== K || sum.mid !== M) return null;
  return MATMUL_SUMS({ a: k.inPtr(0), b: k.inPtr(1), y: k.outPtr(0), sumOut: s.outPtr(0), M, N, K });
}
