// bench/cublaslt_algos.cu: cuBLASLt fp32 (CUBLAS_COMPUTE_32F) at gpt_tiny's GEMM shapes: every heuristic algorithm timed
// (back-to-back launches, events), against heuristic #0 (what mpsc_cublaslt.cpp takes). Column-major m x n x k.
// Usage: bench/cublaslt_algos.sh (GPU machine; needs cuBLASLt). Not run yet: written 5 Dec with no device left;
// the question it answers is issue 14's gpt_tiny: would a per-shape algorithm choice beat heuristic #0.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cstdio>
#define CK(x) do { auto e_ = (x); if ((int)e_ != 0) { std::printf("error %d at %s:%d\n", (int)e_, __FILE__, __LINE__); return 1; } } while (0)
int main() {
  cublasLtHandle_t h; CK(cublasLtCreate(&h));
  size_t wsb = 32u << 20; void* ws; CK(cudaMalloc(&ws, wsb));
  float *A, *B, *D; CK(cudaMalloc(&A, 64u << 20)); CK(cudaMalloc(&B, 64u << 20)); CK(cudaMalloc(&D, 64u << 20));
  CK(cudaMemset(A, 0, 64u << 20)); CK(cudaMemset(B, 0, 64u << 20));
  cudaStream_t st; CK(cudaStreamCreate(&st));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  struct S { int m, n, k; } shapes[] = {{384, 2048, 128}, {128, 2048, 128}, {512, 2048, 128}, {128, 2048, 512}, {65, 2048, 128},
                                        {128, 2048, 384}, {128, 384, 2048}, {128, 512, 2048}, {512, 128, 2048}, {128, 128, 2048}};
  const char* tn[] = {"N", "T"};
  double sum0 = 0, sumb = 0;
  for (auto s : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        if (ta && tb) continue;
        cublasLtMatmulDesc_t desc; CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        int32_t a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &a, sizeof a));
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &b, sizeof b));
        cublasLtMatrixLayout_t la, lb, ld;
        CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, ta ? s.k : s.m, ta ? s.m : s.k, ta ? s.k : s.m));
        CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, tb ? s.n : s.k, tb ? s.k : s.n, tb ? s.n : s.k));
        CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, s.m, s.n, s.m));
        cublasLtMatmulPreference_t pref; CK(cublasLtMatmulPreferenceCreate(&pref));
        uint64_t w = wsb; CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, sizeof w));
        cublasLtMatmulHeuristicResult_t res[32]; int found = 0;
        CK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 32, res, &found));
        float alpha = 1, beta = 0; double t0 = -1, best = 1e9; int bi = -1;
        for (int i = 0; i < found; ++i) {
          bool bad = false;
          for (int r = 0; r < 5; ++r) if (cublasLtMatmul(h, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &res[i].algo, ws, wsb, st) != CUBLAS_STATUS_SUCCESS) bad = true;
          if (bad) continue;
          CK(cudaEventRecord(e0, st));
          for (int r = 0; r < 50; ++r) cublasLtMatmul(h, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &res[i].algo, ws, wsb, st);
          CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1));
          float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
          double us = ms * 1000 / 50;
          if (i == 0) t0 = us;
          if (us < best) { best = us; bi = i; }
        }
        sum0 += t0; sumb += best;
        std::printf("%4d x %4d x %4d %s%s: %2d algos, heuristic #0 %6.2f us, best #%d %6.2f us (%.2fx)\n", s.m, s.n, s.k, tn[ta], tn[tb], found, t0, bi, best, t0 / best);
        cublasLtMatmulPreferenceDestroy(pref); cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(ld); cublasLtMatmulDescDestroy(desc);
      }
  std::printf("sum over the shapes: heuristic #0 %.1f us, best %.1f us (%.2fx)\n", sum0, sumb, sum0 / sumb);
  return 0;
}
