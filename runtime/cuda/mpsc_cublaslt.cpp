// mpsc_cublaslt.cpp: the cuBLASLt implementation of mpsc_cublaslt.h (see there for the contract).
// Compiled only where CMake finds CUDA::cublasLt (runtime/native/build.ts). Every call is checked.
// Numerics: CUBLAS_COMPUTE_32F (fp32 FMA), or for MPSC_LT_COMPUTE_TF32X3 calls CUBLAS_COMPUTE_32F_FAST_TF32
// over 3xTF32 split operands (exact TF32 values: exact products, the tensor cores' fp32 accumulation; never plain TF32
// on fp32 data), scale type fp32,
// D (and C, beta 0) fp32 or the operands' 16-bit type (the fp32 result rounded once to nearest even,
// autocast's storage of a product), the bias vector of D's type (cuBLASLt's default; an fp32 bias with a
// 16-bit D has no algorithm on the H200); A and B fp32, or both fp16 / bf16 with the same fp32 accumulation.
// BGRADB calls (an fp32 D) write op(B)'s column sums over k into the bias vector (cuBLASLt's reduction order).
// Algorithm: chosen once at create and kept, among the results of cublasLtMatmulAlgoGetHeuristic for the
// call's descriptors, the workspace the plan reserved and the operands' actual alignments (their offsets in
// the one device allocation, which cudaMalloc aligns to 256 bytes). MPSC_CUDA_LT_TUNE=0: the heuristic's
// first, as cuBLASLt ranks them. Default (tuned): up to TUNE_CANDIDATES of them are each timed on the call's
// own operands (cudaEvents, the eager stream, before any graph capture: the writes land in D and a BGRADB
// call's bias gradient, arena bytes the first step recomputes, as the eager first call below does) and the
// fastest is kept when it beats the first by more than TUNE_MARGIN (else the first: timing noise never
// moves a call off cuBLASLt's own choice). In the default `waves` mode only calls whose first fills at least
// one wave of the GPU are tuned (smaller ones share the SMs with the graph's other lanes; see setup). The choice depends on the call's description only, so it is
// made once per process for repeated shapes (every layer) and, where MPSC_CUDA_LT_TUNE_FILE names a file
// (runtime/cuda/session.ts: the build cache's cublaslt-tune.tsv), once per GPU and cuBLASLt version:
// later processes read it back, so two runs of one spec pick the same algorithms (the same bits).
#include "mpsc_cublaslt.h"
#include <cublasLt.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>

namespace {

struct Call {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo;
  bool ok = false;
  bool epi = true;  // the call applies its epilogue (a BGRADB call may run without it)
  char note[256] = {0};
};

constexpr int TUNE_CANDIDATES = 16;  // results asked of the heuristic when tuning
constexpr double TUNE_MARGIN = 0.97;  // a candidate replaces the heuristic's first only below this fraction of its time

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
  int tune = 2;           // MPSC_CUDA_LT_TUNE: 0 off, 1 every call, 2 (waves, default) calls of at least one wave (setup)
  std::string machine;    // GPU name, SM count, cuBLASLt version: the tuning file's first column
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

// ---- tuning (see the head of this file)

namespace {

std::mutex& tuneMutex() {
  static std::mutex m;
  return m;
}

/** "machine\tcall" -> the chosen candidate's index in the heuristic's list: this process's choices and the file's */
std::unordered_map<std::string, int>& tunedChoices() {
  static std::unordered_map<std::string, int> t;
  return t;
}

const char* tuneFile() {
  const char* f = std::getenv("MPSC_CUDA_LT_TUNE_FILE");
  return f && *f ? f : nullptr;
}

/** the tuning file's lines (machine \t call \t index \t ...) into tunedChoices, once per process; the first line of a key wins */
void readTuneFile() {
  static bool read = false;
  if (read) return;
  read = true;
  const char* f = tuneFile();
  FILE* fp = f ? std::fopen(f, "r") : nullptr;
  if (!fp) return;
  char line[1024];
  while (std::fgets(line, sizeof line, fp)) {
    char* t1 = std::strchr(line, '\t');
    char* t2 = t1 ? std::strchr(t1 + 1, '\t') : nullptr;
    if (!t2) continue;
    tunedChoices().emplace(std::string(line, (size_t)(t2 - line)), std::atoi(t2 + 1));
  }
  std::fclose(fp);
}

/** what the algorithm choice depends on: the call's descriptors, the operands' alignments and the workspace */
std::string callKey(const MpscLtGemm& g, bool epi, uint32_t alA, uint32_t alB, uint32_t alD, size_t ws) {
  char b[512];
  std::snprintf(b, sizeof b, "m%lld n%lld k%lld t%d%d a%lldx%lld/%lld b%lldx%lld/%lld d%lld x%d s%lld,%lld,%lld ab%d d%d e%d%s c%d al%u,%u,%u ws%zu",
                (long long)g.m, (long long)g.n, (long long)g.k, g.transA, g.transB, (long long)g.rowsA, (long long)g.colsA, (long long)g.lda,
                (long long)g.rowsB, (long long)g.colsB, (long long)g.ldb, (long long)g.ldd, g.batch, (long long)g.strideA, (long long)g.strideB,
                (long long)g.strideD, g.abType, g.dType, g.epilogue, epi ? "" : "-off", g.compute, alA, alB, alD, ws);
  return b;
}

}  // namespace

/** mean ms of `reps` back-to-back runs of `algo` on the eager stream, or -1 when a run fails */
static float timeAlgo(MpscLt* lt, const Call* c, const cublasLtMatmulAlgo_t& algo, const void* A, const void* B, void* D, cudaEvent_t e0, cudaEvent_t e1, int reps) {
  const float alpha = 1.0f, beta = 0.0f;
  if (cudaEventRecord(e0, 0) != cudaSuccess) return -1;
  for (int r = 0; r < reps; ++r)
    if (cublasLtMatmul(lt->handle, c->desc, &alpha, A, c->a, B, c->b, &beta, D, c->d, D, c->d, &algo, lt->workspace, lt->workspaceBytes, 0) != CUBLAS_STATUS_SUCCESS)
      return -1;
  float ms = 0;
  if (cudaEventRecord(e1, 0) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) return -1;
  return ms / (float)reps;
}

/**
 * the fastest of the heuristic's `found` results for call c on its own operands, or 0 (the first) unless one beats it
 * by TUNE_MARGIN; us[0] / us[1]: the first's and the chosen one's microseconds (0 when not timed). Clears any CUDA
 * error a failing candidate left.
 */
static int tuneCall(MpscLt* lt, const Call* c, const MpscLtGemm& g, unsigned char* dev, const cublasLtMatmulHeuristicResult_t* res, int found, float us[2]) {
  us[0] = us[1] = 0;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
    if (e0) cudaEventDestroy(e0);
    cudaGetLastError();
    return 0;
  }
  const void* A = dev + g.offA;
  const void* B = dev + g.offB;
  void* D = dev + g.offD;
  float best[TUNE_CANDIDATES];
  // one run each first (loads its kernels; a failing candidate drops out), then the repetitions sized by the first's time
  for (int j = 0; j < found; ++j) best[j] = res[j].state == CUBLAS_STATUS_SUCCESS ? timeAlgo(lt, c, res[j].algo, A, B, D, e0, e1, 1) : -1;
  int chosen = 0;
  if (best[0] > 0) {
    const float one = timeAlgo(lt, c, res[0].algo, A, B, D, e0, e1, 1);
    const int reps = one > 0 ? (int)std::min(50.0f, std::max(2.0f, 0.3f / one)) : 2;  // ~0.3 ms a measurement
    for (int j = 0; j < found; ++j) best[j] = best[j] > 0 ? 1e30f : -1;
    for (int round = 0; round < 2; ++round)  // the candidates interleaved, the best of two rounds each
      for (int j = 0; j < found; ++j) {
        if (best[j] < 0) continue;
        const float t = timeAlgo(lt, c, res[j].algo, A, B, D, e0, e1, reps);
        if (t < 0) best[j] = -1;
        else if (t < best[j]) best[j] = t;
      }
    if (best[0] > 0) {
      for (int j = 1; j < found; ++j)
        if (best[j] > 0 && best[j] < best[chosen] && best[j] < TUNE_MARGIN * best[0]) chosen = j;
      us[0] = best[0] * 1000;
      us[1] = best[chosen] * 1000;
    }
  }
  cudaGetLastError();
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return chosen;
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
    cublasLtMatmulHeuristicResult_t res[TUNE_CANDIDATES];
    const int want = lt->tune ? TUNE_CANDIDATES : 1;
    int found = 0;
    st = cublasLtMatmulAlgoGetHeuristic(lt->handle, c->desc, c->a, c->b, c->d, c->d, pref, want, res, &found);
    if (g.epilogue == MPSC_LT_EPI_BGRADB && !(st == CUBLAS_STATUS_SUCCESS && found > 0 && res[0].state == CUBLAS_STATUS_SUCCESS)) {
      // no algorithm with the bias-gradient epilogue: the plain product, the generated code sums the columns after it
      uint32_t none = CUBLASLT_EPILOGUE_DEFAULT;
      c->epi = false;
      st = cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &none, sizeof none);
      found = 0;
      if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulAlgoGetHeuristic(lt->handle, c->desc, c->a, c->b, c->d, c->d, pref, want, res, &found);
    }
    if (st == CUBLAS_STATUS_SUCCESS && found > 0 && res[0].state == CUBLAS_STATUS_SUCCESS) {
      int chosen = 0;
      float us[2] = {0, 0};
      const char* how = "heuristic algorithm";
      // waves mode (default): a call whose first fills under one wave of the GPU keeps it untimed. Such calls share the GPU
      // with the graph's other lanes, and timings alone, back to back on one stream, did not carry over into the graph:
      // gpt_tiny's (all under one wave) measured 0.732 / 0.697 / 0.716 ms tuned against 0.665-0.695 untuned (phase 20)
      if (lt->tune && found > 1 && !(lt->tune == 2 && res[0].wavesCount < 1.0f)) {
        const std::string key = lt->machine + (lt->tune == 2 ? "" : " all") + "\t" + callKey(g, c->epi, alignmentOf(g.offA), alignmentOf(g.offB), alignmentOf(g.offD), lt->workspaceBytes);
        std::lock_guard<std::mutex> hold(tuneMutex());
        readTuneFile();
        const auto hit = tunedChoices().find(key);
        if (hit != tunedChoices().end() && hit->second >= 0 && hit->second < found && res[hit->second].state == CUBLAS_STATUS_SUCCESS) {
          chosen = hit->second;
          how = "tuned earlier (MPSC_CUDA_LT_TUNE_FILE or this process)";
        } else {
          chosen = tuneCall(lt, c, g, dev, res, found, us);
          how = "tuned";
          tunedChoices()[key] = chosen;
          if (const char* f = tuneFile())
            if (FILE* fp = std::fopen(f, "a")) {  // one line per choice; a file that cannot be written only costs the next process a tuning
              std::fprintf(fp, "%s\t%d\t%.2f\t%.2f\t%d\n", key.c_str(), chosen, us[0], us[1], found);
              std::fclose(fp);
            }
        }
      }
      c->algo = res[chosen].algo;
      c->ok = true;
      char tuned[96] = {0};
      if (us[0] > 0) std::snprintf(tuned, sizeof tuned, ", %.1f us against the first's %.1f", us[1], us[0]);
      std::snprintf(c->note, sizeof c->note, "cuBLASLt%s, %s: candidate %d of %d%s (workspace %zu bytes, %.2f waves)%s", g.compute == MPSC_LT_COMPUTE_TF32X3 ? " 3xTF32" : "",
                    how, chosen + 1, found, tuned, res[chosen].workspaceSize, (double)res[chosen].wavesCount,
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
  const char* tune = std::getenv("MPSC_CUDA_LT_TUNE");
  lt->tune = !tune || !*tune || std::strcmp(tune, "waves") == 0 ? 2 : tune[0] == '0' ? 0 : 1;
  int device = 0;
  cudaDeviceProp prop;
  if (lt->tune && cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
    char m[384];
    std::snprintf(m, sizeof m, "%s, %d SMs, cuBLASLt %zu", prop.name, prop.multiProcessorCount, cublasLtGetVersion());
    for (char* q = m; *q; ++q)
      if (*q == '\t' || *q == '\n') *q = ' ';
    lt->machine = m;
  } else {
    cudaGetLastError();
    lt->tune = 0;
  }
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
