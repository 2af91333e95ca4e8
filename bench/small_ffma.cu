// small_ffma.cu: gpt_tiny's small fp32 products (M = 2048 rows, N 65..512, K 65..512) on the GPU, a cp.async-pipelined
// FFMA kernel of small tiles against cuBLASLt's fp32 call (CUBLAS_COMPUTE_32F, heuristic #0, what mpsc_cublaslt.cpp
// takes), each timed the way the training step runs them: R dependent launches captured in one CUDA graph and replayed
// (us per launch; an empty kernel's chain gives the graph's per-node floor). Every variant is checked against a float64
// product on the host (max |err| / max |ref|).
// Kernel (row-major C[M x N] = A B + bias): BM x BN tile, a 4x4 register block per thread, KS k-groups per block (the
// block's BK = 32 step split between them, summed through shared memory at the end in group order), operands staged by
// cp.async in a 3-stage ring in their global order (k-contiguous: [rows][BK + 4]; row-contiguous: [BK][rows + 4]); each
// 4-k step reads 8 float4 (conflict-free: k-contiguous rows strided by the thread grid, row-contiguous ones by 4).
// Usage: bench/small_ffma.sh (GPU machine; needs cuBLASLt).
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#ifndef NO_LT  // NO_LT: the kernels alone (compile checks where cuBLASLt is not installed)
#include <cublasLt.h>
#endif
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); std::exit(1); } } while (0)
#ifndef NO_LT
#define LT(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cublasLtGetStatusString(s_)); std::exit(1); } } while (0)

#endif
__device__ __forceinline__ void cp16(float* dst, const float* src, int bytes) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp4(float* dst, const float* src, int bytes) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

constexpr int BK = 32, STAGES = 3;

/**
 * One operand's tile (rows x BK) of stage k0 into shared memory. KC: k-contiguous in global memory (X[row * ld + k]),
 * staged [rows][BK + 4]; else row-contiguous (X[k * ld + row]), staged [BK][rows + 4]. VEC: 16-byte copies (ld and the
 * base 16-byte aligned); else 4-byte ones. Out-of-range elements are zero-filled (src-size 0).
 */
template <int ROWS, bool KC, bool VEC, int T>
__device__ __forceinline__ void stage_tile(float* s, const float* __restrict__ g, int ld, int r0, int rlim, int k0, int klim, int tid) {
  constexpr int LD = KC ? BK + 4 : ROWS + 4;
  constexpr int OUTER = KC ? ROWS : BK, INNER = KC ? BK : ROWS;  // smem [OUTER][INNER]
  const int olim = KC ? rlim - r0 : klim - k0, ilim = KC ? klim - k0 : rlim - r0;
  const int obase = KC ? r0 : k0, ibase = KC ? k0 : r0;
  if (VEC) {
    constexpr int Q = INNER / 4, CH = OUTER * Q;
#pragma unroll
    for (int c = tid; c < CH; c += T) {
      const int o = c / Q, i = 4 * (c % Q);
      int valid = o < olim ? ilim - i : 0;
      valid = valid < 0 ? 0 : (valid > 4 ? 4 : valid);
      const float* src = valid ? g + (size_t)(obase + o) * ld + ibase + i : g;
      cp16(s + o * LD + i, src, 4 * valid);
    }
  } else {
    constexpr int CH = OUTER * INNER;
#pragma unroll 4
    for (int c = tid; c < CH; c += T) {
      const int o = c / INNER, i = c % INNER;
      const bool ok = o < olim && i < ilim;
      cp4(s + o * LD + i, ok ? g + (size_t)(obase + o) * ld + ibase + i : g, ok ? 4 : 0);
    }
  }
}

template <int BM, int BN, int KS, bool AKC, bool BKC, bool AV, bool BV>
__global__ void __launch_bounds__((BM / 4) * (BN / 4) * KS)
small_ffma(const float* __restrict__ A, int lda, const float* __restrict__ B, int ldb, const float* __restrict__ bias,
           float* __restrict__ C, int M, int N, int K) {
  constexpr int TX = BN / 4, TY = BM / 4, NT = TX * TY, T = NT * KS;
  constexpr int A_LD = AKC ? BK + 4 : BM + 4, A_SZ = AKC ? BM * A_LD : BK * A_LD;
  constexpr int B_LD = BKC ? BK + 4 : BN + 4, B_SZ = BKC ? BN * B_LD : BK * B_LD;
  constexpr int KG = BK / KS;  // k per group per stage
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  float* As = sm;
  float* Bs = sm + STAGES * A_SZ;
  const int tid = threadIdx.x, grp = tid / NT, t = tid % NT, tm = t / TX, tn = t % TX;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int nk = (K + BK - 1) / BK;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < nk) {
      stage_tile<BM, AKC, AV, T>(As + s * A_SZ, A, lda, m0, M, s * BK, K, tid);
      stage_tile<BN, BKC, BV, T>(Bs + s * B_SZ, B, ldb, n0, N, s * BK, K, tid);
    }
    cp_commit();
  }
  for (int kt = 0; kt < nk; ++kt) {
    cp_wait<STAGES - 2>();
    __syncthreads();
    {
      const int nx = kt + STAGES - 1;
      if (nx < nk) {
        stage_tile<BM, AKC, AV, T>(As + (nx % STAGES) * A_SZ, A, lda, m0, M, nx * BK, K, tid);
        stage_tile<BN, BKC, BV, T>(Bs + (nx % STAGES) * B_SZ, B, ldb, n0, N, nx * BK, K, tid);
      }
      cp_commit();
    }
    const float* as = As + (kt % STAGES) * A_SZ;
    const float* bs = Bs + (kt % STAGES) * B_SZ;
#pragma unroll
    for (int kb = grp * KG; kb < grp * KG + KG; kb += 4) {
      float a[4][4], b[4][4];  // a[i][kk], b[kk][j]
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const float4 va = AKC ? *reinterpret_cast<const float4*>(as + (tm + TY * x) * A_LD + kb)
                              : *reinterpret_cast<const float4*>(as + (kb + x) * A_LD + 4 * tm);
        if (AKC) { a[x][0] = va.x; a[x][1] = va.y; a[x][2] = va.z; a[x][3] = va.w; }
        else { a[0][x] = va.x; a[1][x] = va.y; a[2][x] = va.z; a[3][x] = va.w; }
        const float4 vb = BKC ? *reinterpret_cast<const float4*>(bs + (tn + TX * x) * B_LD + kb)
                              : *reinterpret_cast<const float4*>(bs + (kb + x) * B_LD + 4 * tn);
        if (BKC) { b[0][x] = vb.x; b[1][x] = vb.y; b[2][x] = vb.z; b[3][x] = vb.w; }
        else { b[x][0] = vb.x; b[x][1] = vb.y; b[x][2] = vb.z; b[x][3] = vb.w; }
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i][kk], b[kk][j], acc[i][j]);
    }
  }
  cp_wait<0>();
  if (KS > 1) {
    __syncthreads();  // every group done with the stages: reuse them for the partial sums
    float* part = sm;  // [KS - 1][16][NT]
    if (grp > 0) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) part[((grp - 1) * 16 + i * 4 + j) * NT + t] = acc[i][j];
    }
    __syncthreads();
    if (grp > 0) return;
#pragma unroll
    for (int g = 1; g < KS; ++g)
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += part[((g - 1) * 16 + i * 4 + j) * NT + t];
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = m0 + (AKC ? tm + TY * i : 4 * tm + i);
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + (BKC ? tn + TX * j : 4 * tn + j);
      if (n < N) C[(size_t)m * N + n] = acc[i][j] + (bias ? bias[n] : 0.0f);
    }
  }
}

template <int BM, int BN, int KS, bool AKC, bool BKC, bool AV, bool BV>
static size_t smem_of() {
  const int A_SZ = AKC ? BM * (BK + 4) : BK * (BM + 4), B_SZ = BKC ? BN * (BK + 4) : BK * (BN + 4);
  return (size_t)STAGES * (A_SZ + B_SZ) * 4;
}

struct Prob {
  const char* what;
  int M, N, K;
  bool akc, bkc;  // A k-contiguous (X [M][K]); B k-contiguous (W [N][K], a linear's weight) or row-contiguous (W [K][N])
  bool bias;
};

using Launch = void (*)(const Prob&, const float*, const float*, const float*, float*, cudaStream_t);

template <int BM, int BN, int KS, bool AKC, bool BKC, bool AV, bool BV>
static void launch_t(const Prob& p, const float* A, const float* B, const float* bias, float* C, cudaStream_t st) {
  const size_t sm = smem_of<BM, BN, KS, AKC, BKC, AV, BV>();
  static bool set = false;
  if (!set) {
    CK(cudaFuncSetAttribute(small_ffma<BM, BN, KS, AKC, BKC, AV, BV>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    set = true;
  }
  const int lda = AKC ? p.K : p.M, ldb = BKC ? p.K : p.N;
  dim3 grid((p.N + BN - 1) / BN, (p.M + BM - 1) / BM);
  small_ffma<BM, BN, KS, AKC, BKC, AV, BV><<<grid, (BM / 4) * (BN / 4) * KS, sm, st>>>(A, lda, B, ldb, bias, C, p.M, p.N, p.K);
}

template <int BM, int BN, int KS>
static Launch pick(const Prob& p) {
  const bool av = (p.akc ? p.K : p.M) % 4 == 0, bv = (p.bkc ? p.K : p.N) % 4 == 0;
#define L(a, b, x, y) if (p.akc == a && p.bkc == b && av == x && bv == y) return launch_t<BM, BN, KS, a, b, x, y>;
  L(true, true, true, true) L(true, true, false, true) L(true, true, true, false) L(true, true, false, false)
  L(true, false, true, true) L(true, false, false, true) L(true, false, true, false) L(true, false, false, false)
#undef L
  return nullptr;
}

struct Variant { const char* name; Launch (*get)(const Prob&); };
static const Variant VARIANTS[] = {
  {"32x64 ks1", pick<32, 64, 1>},
  {"32x64 ks2", pick<32, 64, 2>},
  {"32x32 ks2", pick<32, 32, 2>},
  {"32x32 ks4", pick<32, 32, 4>},
  {"64x64 ks1", pick<64, 64, 1>},
  {"64x32 ks2", pick<64, 32, 2>},
  {"16x64 ks2", pick<16, 64, 2>},
};

static const Prob PROBS[] = {
  {"fwd qkv    2048x384x128", 2048, 384, 128, true, true, true},
  {"fwd proj   2048x128x128", 2048, 128, 128, true, true, true},
  {"fwd fc     2048x512x128", 2048, 512, 128, true, true, true},
  {"fwd fc2    2048x128x512", 2048, 128, 512, true, true, true},
  {"fwd head   2048x65x128", 2048, 65, 128, true, true, false},
  {"dX head    2048x128x65", 2048, 128, 65, true, false, false},
  {"dX fc2     2048x512x128", 2048, 512, 128, true, false, false},
  {"dX fc      2048x128x512", 2048, 128, 512, true, false, false},
  {"dX proj    2048x128x128", 2048, 128, 128, true, false, false},
  {"dX qkv     2048x128x384", 2048, 128, 384, true, false, false},
};

__global__ void empty_kernel(float* p) { if (p && threadIdx.x == 1234567) p[0] = 1.0f; }

#ifndef NO_LT
// cuBLASLt's call for the row-major product: column-major D[N x M] = op(B^T) A^T
struct LtCall {
  cublasLtMatmulDesc_t desc; cublasLtMatrixLayout_t la, lb, ld; cublasLtMatmulAlgo_t algo; bool bias;
};
static LtCall lt_make(cublasLtHandle_t h, const Prob& p, const float* bias, size_t ws) {
  LtCall c{};
  LT(cublasLtMatmulDescCreate(&c.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t ta = p.bkc ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;  // cuBLASLt's A = our B, its B = our A
  LT(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LT(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (p.bias) {
    const uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
    LT(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    LT(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  // our B: k-contiguous W [N][K] is column-major K x N (op T -> N x K); row-contiguous W [K][N] is column-major N x K
  if (p.bkc) LT(cublasLtMatrixLayoutCreate(&c.la, CUDA_R_32F, p.K, p.N, p.K));
  else LT(cublasLtMatrixLayoutCreate(&c.la, CUDA_R_32F, p.N, p.K, p.N));
  LT(cublasLtMatrixLayoutCreate(&c.lb, CUDA_R_32F, p.K, p.M, p.K));  // our A [M][K]: column-major K x M
  LT(cublasLtMatrixLayoutCreate(&c.ld, CUDA_R_32F, p.N, p.M, p.N));
  cublasLtMatmulPreference_t pref;
  LT(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t w = ws;
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, sizeof w));
  cublasLtMatmulHeuristicResult_t res[1];
  int found = 0;
  LT(cublasLtMatmulAlgoGetHeuristic(h, c.desc, c.la, c.lb, c.ld, c.ld, pref, 1, res, &found));
  if (!found) { std::fprintf(stderr, "no cuBLASLt algorithm for %s\n", p.what); std::exit(1); }
  c.algo = res[0].algo;
  cublasLtMatmulPreferenceDestroy(pref);
  return c;
}

#endif
/** us per launch of `fn` captured R times back to back in one graph, median of 7 replays of the graph */
template <typename F>
static double graph_us(cudaStream_t st, int R, F fn) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int r = 0; r < R; ++r) fn();
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int w = 0; w < 3; ++w) CK(cudaGraphLaunch(ge, st));
  std::vector<double> t;
  for (int rep = 0; rep < 7; ++rep) {
    CK(cudaEventRecord(e0, st));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms * 1000.0 / R);
  }
  std::sort(t.begin(), t.end());
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  const int R = argc > 1 ? std::atoi(argv[1]) : 40;
#ifndef NO_LT
  cublasLtHandle_t h;
  LT(cublasLtCreate(&h));
#endif
  const size_t ws = 32u << 20;
  void* wsp;
  CK(cudaMalloc(&wsp, ws));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  float *A, *B, *bias, *C;
  const size_t cap = 2048 * 512;
  CK(cudaMalloc(&A, cap * 4));
  CK(cudaMalloc(&B, 512 * 512 * 4));
  CK(cudaMalloc(&bias, 512 * 4));
  CK(cudaMalloc(&C, cap * 4));
  std::vector<float> ha(cap), hb(512 * 512), hbias(512), hc(cap);
  unsigned s = 12345u;
  auto rnd = [&]() { s = s * 1664525u + 1013904223u; return ((s >> 8) & 0xffff) / 32768.0f - 1.0f; };
  for (auto& x : ha) x = rnd();
  for (auto& x : hb) x = rnd();
  for (auto& x : hbias) x = rnd();
  CK(cudaMemcpy(A, ha.data(), cap * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(B, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(bias, hbias.data(), 512 * 4, cudaMemcpyHostToDevice));
  const double floor_us = graph_us(st, R, [&]() { empty_kernel<<<132, 128, 0, st>>>(C); });
  std::printf("graph floor (empty kernel, 132 blocks): %.2f us per node; R = %d launches per graph\n", floor_us, R);
  std::printf("%-26s %8s", "product", "cuBLASLt");
  for (const auto& v : VARIANTS) std::printf(" %10s", v.name);
  std::printf("   worst rel err\n");
  double sum_lt = 0, sum_best = 0;
  std::vector<double> sum_v(sizeof VARIANTS / sizeof VARIANTS[0], 0.0);
  for (const auto& p : PROBS) {
    // float64 reference
    std::vector<double> ref((size_t)p.M * p.N);
    double rmax = 0;
    for (int m = 0; m < p.M; ++m)
      for (int n = 0; n < p.N; ++n) {
        double acc = p.bias ? hbias[n] : 0.0;
        for (int k = 0; k < p.K; ++k) acc += (double)ha[(size_t)m * p.K + k] * (p.bkc ? hb[(size_t)n * p.K + k] : hb[(size_t)k * p.N + n]);
        ref[(size_t)m * p.N + n] = acc;
        rmax = std::fmax(rmax, std::fabs(acc));
      }
    auto check = [&]() {
      CK(cudaMemcpy(hc.data(), C, (size_t)p.M * p.N * 4, cudaMemcpyDeviceToHost));
      double e = 0;
      for (size_t i = 0; i < ref.size(); ++i) e = std::fmax(e, std::fabs(hc[i] - ref[i]));
      return e / rmax;
    };
#ifndef NO_LT
    LtCall c = lt_make(h, p, bias, ws);
    const float one = 1.0f, zero = 0.0f;
    auto lt = [&]() {
      LT(cublasLtMatmul(h, c.desc, &one, B, c.la, A, c.lb, &zero, C, c.ld, C, c.ld, &c.algo, wsp, ws, st));
    };
    CK(cudaMemset(C, 0, cap * 4));
    lt();
    CK(cudaStreamSynchronize(st));
    double worst = check();
    const double tlt = graph_us(st, R, lt);
#else
    double worst = 0;
    const double tlt = 1e9;
#endif
    std::printf("%-26s %8.2f", p.what, tlt);
    double best = tlt;
    for (size_t vi = 0; vi < sum_v.size(); ++vi) {
      Launch L = VARIANTS[vi].get(p);
      auto run = [&]() { L(p, A, B, p.bias ? bias : nullptr, C, st); };
      CK(cudaMemset(C, 0, cap * 4));
      run();
      CK(cudaStreamSynchronize(st));
      CK(cudaGetLastError());
      worst = std::fmax(worst, check());
      const double tv = graph_us(st, R, run);
      sum_v[vi] += tv;
      best = std::fmin(best, tv);
      std::printf(" %10.2f", tv);
    }
    sum_lt += tlt;
    sum_best += best;
    std::printf("   %.2e\n", worst);
  }
  std::printf("%-26s %8.2f", "sum", sum_lt);
  for (double x : sum_v) std::printf(" %10.2f", x);
  std::printf("   (best per product %.2f)\n", sum_best);
  return 0;
}
