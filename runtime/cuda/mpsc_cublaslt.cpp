// mpsc_cublaslt.cpp: the cuBLASLt implementation of mpsc_cublaslt.h (see there for the contract).
// Compiled only where CMake finds CUDA::cublasLt (runtime/native/build.ts). Every call is checked.
// Numerics: CUBLAS_COMPUTE_32F (fp32 FMA), or for MPSC_LT_COMPUTE_TF32X3 calls CUBLAS_COMPUTE_32F_FAST_TF32
// over 3xTF32 split operands (exact TF32 values: exact products, the tensor cores' fp32 accumulation; never plain TF32
// on fp32 data), scale type fp32,
// D (and C, beta 0) fp32 or the operands' 16-bit type (the fp32 result rounded once to nearest even,
// autocast's storage of a product), the bias vector of D's type (cuBLASLt's default; an fp32 bias with a
// 16-bit D has no algorithm on the H200); A and B fp32, or both fp16 / bf16 with the same fp32 accumulation.
// BGRADB calls (an fp32 D) write op(B)'s column sums over k into the bias vector (cuBLASLt's reduction order).
// Algorithm: the first result of cublasLtMatmulAlgoGetHeuristic for the call's descriptors, the
// workspace the plan reserved and the operands' actual alignments (their offsets in the one device
// allocation, which cudaMalloc aligns to 256 bytes), chosen once at create and kept.
#include "mpsc_cublaslt.h"
#include <cublasLt.h>
#include <cstdio>
#include <cstdlib>
#include <new>

namespace {

struct Call {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo;
  bool ok = false;
  bool epi = true;  // the call applies its epilogue (a BGRADB call may run without it)
  char note[192] = {0};
};

cudaDataType_t abTypeOf(int t) { return t == MPSC_LT_F16 ? CUDA_R_16F : t == MPSC_LT_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/** the largest power of two (at most 256) dividing a byte offset: the alignment an operand is known to have */
uint32_t alignmentOf(size_t off) {
  uint32_t a = 256;
  while (a > 1 && off % a != 0) a /= 2;
  return a;
}

}  // namespace

struct MpscLt {
  cublasLtHandle_t handle = nullptr;
  unsigned char* workspace = nullptr;
  size_t workspaceBytes = 0;
  int count = 0;
  Call* calls = nullptr;
};

static bool layout(cublasLtMatrixLayout_t* l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int batch, int64_t stride, cublasStatus_t* st) {
  *st = cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld);
  if (*st != CUBLAS_STATUS_SUCCESS) return false;
  if (batch > 1) {
    int32_t n = batch;
    *st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n);
    if (*st == CUBLAS_STATUS_SUCCESS) *st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
    if (*st != CUBLAS_STATUS_SUCCESS) return false;
  }
  return true;
}

/** descriptors and algorithm of one call; false (with c->note saying why) when cuBLASLt has none */
static bool setup(MpscLt* lt, const MpscLtGemm& g, unsigned char* dev, Call* c) {
  // 3xTF32 calls: the fast TF32 compute type over split operands that are exact TF32 values (mpsc_cublaslt.h)
  const cublasComputeType_t compute = g.compute == MPSC_LT_COMPUTE_TF32X3 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasStatus_t st = cublasLtMatmulDescCreate(&c->desc, compute, CUDA_R_32F);
  const char* step = "cublasLtMatmulDescCreate";
  if (st == CUBLAS_STATUS_SUCCESS) {
    int32_t ta = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    step = "cublasLtMatmulDescSetAttribute (transposes)";
    st = cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  }
  if (st == CUBLAS_STATUS_SUCCESS && (g.epilogue == MPSC_LT_EPI_BIAS || g.epilogue == MPSC_LT_EPI_BGRADB)) {
    // BGRADB: the bias pointer is the bias gradient cuBLASLt writes (D's type)
    uint32_t epi = g.epilogue == MPSC_LT_EPI_BIAS ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_BGRADB;
    const void* bias = dev + g.offBias;
    step = g.epilogue == MPSC_LT_EPI_BIAS ? "cublasLtMatmulDescSetAttribute (bias epilogue)" : "cublasLtMatmulDescSetAttribute (BGRADB epilogue)";
    st = cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  }
  const cudaDataType_t ab = abTypeOf(g.abType);
  if (st == CUBLAS_STATUS_SUCCESS) {
    step = "cublasLtMatrixLayoutCreate";
    if (layout(&c->a, ab, g.rowsA, g.colsA, g.lda, g.batch, g.strideA, &st) && layout(&c->b, ab, g.rowsB, g.colsB, g.ldb, g.batch, g.strideB, &st))
      layout(&c->d, abTypeOf(g.dType), g.m, g.n, g.ldd, g.batch, g.strideD, &st);
  }
  cublasLtMatmulPreference_t pref = nullptr;
  if (st == CUBLAS_STATUS_SUCCESS) {
    step = "cublasLtMatmulPreference";
    st = cublasLtMatmulPreferenceCreate(&pref);
    uint64_t ws = lt->workspaceBytes;
    uint32_t alA = alignmentOf(g.offA), alB = alignmentOf(g.offB), alD = alignmentOf(g.offD);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alA, sizeof alA);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alB, sizeof alB);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alD, sizeof alD);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alD, sizeof alD);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    step = "cublasLtMatmulAlgoGetHeuristic";
    cublasLtMatmulHeuristicResult_t res[1];
    int found = 0;
    st = cublasLtMatmulAlgoGetHeuristic(lt->handle, c->desc, c->a, c->b, c->d, c->d, pref, 1, res, &found);
    if (g.epilogue == MPSC_LT_EPI_BGRADB && !(st == CUBLAS_STATUS_SUCCESS && found > 0 && res[0].state == CUBLAS_STATUS_SUCCESS)) {
      // no algorithm with the bias-gradient epilogue: the plain product, the generated code sums the columns after it
      uint32_t none = CUBLASLT_EPILOGUE_DEFAULT;
      c->epi = false;
      st = cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &none, sizeof none);
      found = 0;
      if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulAlgoGetHeuristic(lt->handle, c->desc, c->a, c->b, c->d, c->d, pref, 1, res, &found);
    }
    if (st == CUBLAS_STATUS_SUCCESS && found > 0 && res[0].state == CUBLAS_STATUS_SUCCESS) {
      c->algo = res[0].algo;
      c->ok = true;
      std::snprintf(c->note, sizeof c->note, "cuBLASLt%s, heuristic algorithm (workspace %zu bytes, %.2f waves)%s", g.compute == MPSC_LT_COMPUTE_TF32X3 ? " 3xTF32" : "",
                    res[0].workspaceSize, (double)res[0].wavesCount,
                    g.epilogue != MPSC_LT_EPI_BGRADB ? "" : c->epi ? ", BGRADB epilogue (the bias gradient)" : ", without the BGRADB epilogue (no algorithm with it): the bias gradient as kernels after the call");
    } else if (st == CUBLAS_STATUS_SUCCESS) {
      st = found > 0 ? res[0].state : CUBLAS_STATUS_NOT_SUPPORTED;
    }
  }
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (!c->ok)
    std::snprintf(c->note, sizeof c->note, "generated kernel: cuBLASLt has no algorithm (%s: %s)", step, cublasLtGetStatusString(st));
  return c->ok;
}

MpscLt* mpsc_lt_create(const MpscLtGemm* gemms, int count, unsigned char* dev, size_t workspace_offset, size_t workspace_bytes, char* err, size_t errlen) {
  MpscLt* lt = new (std::nothrow) MpscLt();
  if (!lt) {
    std::snprintf(err, errlen, "out of host memory creating the cuBLASLt calls");
    return nullptr;
  }
  const cublasStatus_t st = cublasLtCreate(&lt->handle);
  if (st != CUBLAS_STATUS_SUCCESS) {
    std::snprintf(err, errlen, "cuBLASLt error in cublasLtCreate: %s", cublasLtGetStatusString(st));
    delete lt;
    return nullptr;
  }
  lt->workspace = dev + workspace_offset;
  lt->workspaceBytes = workspace_bytes;
  lt->count = count;
  lt->calls = new (std::nothrow) Call[count > 0 ? count : 1];
  if (!lt->calls) {
    std::snprintf(err, errlen, "out of host memory creating the cuBLASLt calls");
    mpsc_lt_destroy(lt);
    return nullptr;
  }
  for (int i = 0; i < count; ++i) setup(lt, gemms[i], dev, &lt->calls[i]);
  return lt;
}

bool mpsc_lt_ok(const MpscLt* lt, int i) { return lt && i >= 0 && i < lt->count && lt->calls[i].ok; }

bool mpsc_lt_epilogue(const MpscLt* lt, int i) { return mpsc_lt_ok(lt, i) && lt->calls[i].epi; }

const char* mpsc_lt_note(const MpscLt* lt, int i) { return lt && i >= 0 && i < lt->count ? lt->calls[i].note : "no such cuBLASLt call"; }

bool mpsc_lt_run(MpscLt* lt, int i, const void* A, const void* B, void* D, cudaStream_t st, int lane, char* err, size_t errlen) {
  Call& c = lt->calls[i];
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t s = cublasLtMatmul(lt->handle, c.desc, &alpha, A, c.a, B, c.b, &beta, D, c.d, D, c.d, &c.algo,
                                          lt->workspace + (size_t)lane * lt->workspaceBytes, lt->workspaceBytes, st);
  if (s == CUBLAS_STATUS_SUCCESS) return true;
  std::snprintf(err, errlen, "cuBLASLt error in cublasLtMatmul (call %d): %s", i, cublasLtGetStatusString(s));
  return false;
}

void mpsc_lt_destroy(MpscLt* lt) {
  if (!lt) return;
  for (int i = 0; lt->calls && i < lt->count; ++i) {
    Call& c = lt->calls[i];
    if (c.a) cublasLtMatrixLayoutDestroy(c.a);
    if (c.b) cublasLtMatrixLayoutDestroy(c.b);
    if (c.d) cublasLtMatrixLayoutDestroy(c.d);
    if (c.desc) cublasLtMatmulDescDestroy(c.desc);
  }
  delete[] lt->calls;
  if (lt->handle) cublasLtDestroy(lt->handle);
  delete lt;
}
