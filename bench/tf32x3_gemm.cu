// tf32x3_gemm.cu: cuBLASLt fp32 (CUBLAS_COMPUTE_32F) against 3xTF32 (split operands, one
// CUBLAS_COMPUTE_32F_FAST_TF32 call over 3K: compiler/codegen-cuda/tf32x3.ts) at the workloads' GEMM
// shapes, on the GPU: time per call (cudaEvents, mean of REPS after a warm-up; the 3xTF32 times include
// the two split kernels, whose own time is also shown) as one call over 3K and as the backend builds it
// (the 3K in S chunks of at most 1536 as a strided batch, then a kernel summing the S partials in fp32:
// tf32x3.ts chunksOf), and the max-norm relative error of 64 sampled outputs against a float64 dot
// product on the host (plain TF32 over K also timed and checked, for contrast only).
// The split helper is the one the CUDA backend emits (bench/tf32x3_gemm.sh writes it to
// tf32x3_split.h from tf32SplitHelper()). Column-major, as cuBLASLt sees the calls (cublaslt.ts).
// Usage: bench/tf32x3_gemm.sh (builds with nvcc -lcublasLt and runs).
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
typedef unsigned int uint;
#include "tf32x3_split.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); std::exit(1); } } while (0)
#define LT(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { std::fprintf(stderr, "%s: %s\n", #x, cublasLtGetStatusString(s_)); std::exit(1); } } while (0)

// out[(i / block) * 3 block + j block + i % block] = pattern j (0: hi, 1: lo); pattern a: hi hi lo, b: hi lo hi
__global__ void split(const float* __restrict__ x, float* __restrict__ out, size_t count, size_t block, int role_b) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= count) return;
  float hi, lo;
  mpsc_tf32_split(x[i], hi, lo);
  const size_t o = (i / block) * 3 * block + i % block;
  out[o] = hi;
  out[o + block] = role_b ? lo : hi;
  out[o + 2 * block] = role_b ? hi : lo;
}

// the S partial products (stride n) summed in chunk order
__global__ void sum_chunks(const float* __restrict__ p, float* __restrict__ d, size_t n, int S) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = p[i];
  for (int c = 1; c < S; ++c) v += p[c * n + i];
  d[i] = v;
}

/** tf32x3.ts chunksOf: the fewest chunks of at most 1536 that divide 3K */
static int chunksOf(long k3) {
  int S = (int)((k3 + 1535) / 1536);
  while (k3 % S) ++S;
  return S;
}

struct Shape { const char* what; long m, n, k; int ta, tb; };

static const Shape SHAPES[] = {
  // wide_mlp_b1024_adam (train_step's five large calls)
  {"wide_mlp fwd linear0 1024x4096x3072", 4096, 1024, 3072, 1, 0},
  {"wide_mlp fwd linear1 1024x4096x4096", 4096, 1024, 4096, 1, 0},
  {"wide_mlp dX linear1 1024x4096x4096", 4096, 1024, 4096, 0, 0},
  {"wide_mlp dW linear1 4096x4096x1024", 4096, 4096, 1024, 0, 1},
  {"wide_mlp dW linear0 4096x3072x1024", 3072, 4096, 1024, 0, 1},
  // gpt_char_b64_t256 (per block: forward, input gradient folded over 64 batches, weight gradient)
  {"gpt_char fwd qkv 16384x1152x384", 1152, 16384, 384, 1, 0},
  {"gpt_char fwd proj 16384x384x384", 384, 16384, 384, 1, 0},
  {"gpt_char fwd mlp up 16384x1536x384", 1536, 16384, 384, 1, 0},
  {"gpt_char fwd mlp down 16384x384x1536", 384, 16384, 1536, 1, 0},
  {"gpt_char dX mlp up 16384x384x1536", 384, 16384, 1536, 0, 0},
  {"gpt_char dX mlp down 16384x1536x384", 1536, 16384, 384, 0, 0},
  {"gpt_char dW qkv 1152x384x16384", 384, 1152, 16384, 0, 1},
  {"gpt_char dW mlp up 1536x384x16384", 384, 1536, 16384, 0, 1},
  {"gpt_char dW mlp down 384x1536x16384", 1536, 384, 16384, 0, 1},
};

static const size_t WS = 32u << 20;

struct Call { cublasLtMatmulDesc_t desc; cublasLtMatrixLayout_t a, b, d; cublasLtMatmulAlgo_t algo; bool ok; };

static void batched(cublasLtMatrixLayout_t l, int S, int64_t stride) {
  int32_t b = S;
  LT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b));
  LT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
}

/** the call over k (the operands' K extent, K or 3K) in S chunks of k / S (S = 1: one product) */
static Call make(cublasLtHandle_t h, const Shape& s, long k, cublasComputeType_t ct, int S = 1) {
  Call c{};
  const long kc = k / S;
  LT(cublasLtMatmulDescCreate(&c.desc, ct, CUDA_R_32F));
  int32_t ta = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LT(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  // a chunk is the next kc rows of a K-inner operand (leading dim k) or the next kc columns of a K-outer one
  LT(cublasLtMatrixLayoutCreate(&c.a, CUDA_R_32F, s.ta ? kc : s.m, s.ta ? s.m : kc, s.ta ? k : s.m));
  LT(cublasLtMatrixLayoutCreate(&c.b, CUDA_R_32F, s.tb ? s.n : kc, s.tb ? kc : s.n, s.tb ? s.n : k));
  LT(cublasLtMatrixLayoutCreate(&c.d, CUDA_R_32F, s.m, s.n, s.m));
  if (S > 1) {
    batched(c.a, S, s.ta ? kc : kc * s.m);
    batched(c.b, S, s.tb ? kc * s.n : kc);
    batched(c.d, S, s.m * s.n);
  }
  cublasLtMatmulPreference_t pref;
  LT(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = WS;
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t r[1];
  int found = 0;
  c.ok = cublasLtMatmulAlgoGetHeuristic(h, c.desc, c.a, c.b, c.d, c.d, pref, 1, r, &found) == CUBLAS_STATUS_SUCCESS && found > 0;
  if (c.ok) c.algo = r[0].algo;
  cublasLtMatmulPreferenceDestroy(pref);
  return c;
}

/** max |D - ref| / max |ref| over sampled outputs; ref in float64 from the host operands */
static double sampledError(const Shape& s, const std::vector<float>& A, const std::vector<float>& B, const float* dD) {
  double err = 0, scale = 0;
  for (int q = 0; q < 64; ++q) {
    const long i = (q * 7919L) % s.m, j = (q * 104729L) % s.n;
    double ref = 0;
    for (long k = 0; k < s.k; ++k) {
      const double a = s.ta ? A[k + i * s.k] : A[i + k * s.m];
      const double b = s.tb ? B[j + k * s.n] : B[k + j * s.k];
      ref += a * b;
    }
    float d;
    CK(cudaMemcpy(&d, dD + i + j * s.m, 4, cudaMemcpyDeviceToHost));
    err = std::fmax(err, std::fabs(d - ref));
    scale = std::fmax(scale, std::fabs(ref));
  }
  return err / scale;
}

int main(int argc, char** argv) {
  const int REPS = argc > 1 ? std::atoi(argv[1]) : 20;
  cublasLtHandle_t h;
  LT(cublasLtCreate(&h));
  void* ws;
  CK(cudaMalloc(&ws, WS));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::printf("%-40s %8s %8s %8s %8s %8s %8s | %8s %8s %8s %8s\n", "shape (cuBLASLt m x n x k, column-major)", "fp32 ms", "3x ms", "3xS ms", "S", "split ms", "tf32 ms",
              "err fp32", "err 3x", "err 3xS", "err tf32");
  double tot1 = 0, tot3 = 0, tot3s = 0;
  for (const Shape& s : SHAPES) {
    const size_t na = (size_t)s.m * s.k, nb = (size_t)s.k * s.n, nd = (size_t)s.m * s.n;
    std::vector<float> A(na), B(nb);
    uint st = 12345u;
    auto rnd = [&]() { st = st * 1664525u + 1013904223u; return (float)((double)st / 2147483648.0 - 1.0); };
    for (auto& v : A) v = rnd();
    const float bs = 1.0f / std::sqrt((float)s.k);
    for (auto& v : B) v = rnd() * bs;
    const int S = chunksOf(3 * s.k);
    float *dA, *dB, *dD, *sA, *sB, *dP;
    CK(cudaMalloc(&dA, na * 4)); CK(cudaMalloc(&dB, nb * 4)); CK(cudaMalloc(&dD, nd * 4)); CK(cudaMalloc(&dP, S * nd * 4));
    CK(cudaMalloc(&sA, 3 * na * 4)); CK(cudaMalloc(&sB, 3 * nb * 4));
    CK(cudaMemcpy(dA, A.data(), na * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B.data(), nb * 4, cudaMemcpyHostToDevice));
    // cuBLASLt's A is op(A) m x k: K inner when transposed; its B is k x n: K inner when not transposed
    const size_t blockA = s.ta ? s.k : na, blockB = s.tb ? nb : s.k;
    Call c1 = make(h, s, s.k, CUBLAS_COMPUTE_32F), c3 = make(h, s, 3 * s.k, CUBLAS_COMPUTE_32F_FAST_TF32), ct = make(h, s, s.k, CUBLAS_COMPUTE_32F_FAST_TF32);
    Call cs = make(h, s, 3 * s.k, CUBLAS_COMPUTE_32F_FAST_TF32, S);
    if (!c1.ok || !c3.ok || !ct.ok || !cs.ok) { std::printf("%-40s no algorithm\n", s.what); continue; }
    const float one = 1.0f, zero = 0.0f;
    auto run = [&](Call& c, const float* a, const float* b) { LT(cublasLtMatmul(h, c.desc, &one, a, c.a, b, c.b, &zero, dD, c.d, dD, c.d, &c.algo, ws, WS, 0)); };
    auto splits = [&]() {
      split<<<(unsigned)((na + 255) / 256), 256>>>(dA, sA, na, blockA, 1);  // cuBLASLt's A = our b: hi lo hi
      split<<<(unsigned)((nb + 255) / 256), 256>>>(dB, sB, nb, blockB, 0);  // cuBLASLt's B = our a: hi hi lo
    };
    auto time = [&](auto f) {
      f();
      CK(cudaDeviceSynchronize());
      CK(cudaEventRecord(e0));
      for (int r = 0; r < REPS; ++r) f();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      return ms / REPS;
    };
    const float t1 = time([&]() { run(c1, dA, dB); });
    const double err1 = sampledError(s, A, B, dD);
    const float tt = time([&]() { run(ct, dA, dB); });
    const double errt = sampledError(s, A, B, dD);
    const float ts = time([&]() { splits(); });
    const float t3 = time([&]() { splits(); run(c3, sA, sB); });
    const double err3 = sampledError(s, A, B, dD);
    const float t3s = time([&]() {
      splits();
      if (S == 1) run(cs, sA, sB);
      else {
        LT(cublasLtMatmul(h, cs.desc, &one, sA, cs.a, sB, cs.b, &zero, dP, cs.d, dP, cs.d, &cs.algo, ws, WS, 0));
        sum_chunks<<<(unsigned)((nd + 255) / 256), 256>>>(dP, dD, nd, S);
      }
    });
    const double err3s = sampledError(s, A, B, dD);
    CK(cudaGetLastError());
    tot1 += t1;
    tot3 += t3;
    tot3s += t3s;
    std::printf("%-40s %8.3f %8.3f %8.3f %8d %8.3f %8.3f | %8.1e %8.1e %8.1e %8.1e\n", s.what, t1, t3, t3s, S, ts, tt, err1, err3, err3s, errt);
    cudaFree(dA); cudaFree(dB); cudaFree(dD); cudaFree(sA); cudaFree(sB); cudaFree(dP);
  }
  std::printf("total of the shapes above: fp32 %.3f ms, 3xTF32 one call %.3f ms, 3xTF32 in K chunks (as built) %.3f ms\n", tot1, tot3, tot3s);
  return 0;
}
