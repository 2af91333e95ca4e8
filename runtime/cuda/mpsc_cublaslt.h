// mpsc_cublaslt.h: the CUDA backend's cuBLASLt GEMM calls, behind a small C++ interface that
// does not include cublasLt.h (so the generated host code compiles where cuBLASLt is absent).
// The implementation, mpsc_cublaslt.cpp, is compiled and linked only when CMake finds
// CUDA::cublasLt (then MPSC_CUBLASLT is defined for the generated host code); see
// runtime/native/build.ts and docs/cuda.md.
//
// Consumes: the model's GEMM calls as plain descriptions (compiler/kernels/kernel_types.ts
//           LibraryGemm, emitted by compiler/codegen-cuda/host.ts), the one device allocation and
//           the workspace region the plan reserved in it (one workspace per lane of the graphs).
// Produces: at create, per call the cuBLASLt descriptors and ONE algorithm among
//           cublasLtMatmulAlgoGetHeuristic's candidates, tuned by timing them (MPSC_CUDA_LT_TUNE; the
//           choice remembered in MPSC_CUDA_LT_TUNE_FILE), or the reason there is none (the generated
//           kernel then runs); per step, cublasLtMatmul on the compute stream (capturable: fixed workspace,
//           host-side alpha / beta, no allocation).
#pragma once
#include <cuda_runtime.h>
#include <cstddef>
#include <cstdint>

/** one GEMM call, column-major: D[m x n] = op(A) op(B) (+ bias per row), `batch` strided products */
struct MpscLtGemm {
  int64_t m, n, k;
  int transA, transB;                     // 1: op = transpose
  int64_t rowsA, colsA, lda, rowsB, colsB, ldb, ldd;
  int batch;
  int64_t strideA, strideB, strideD;      // elements
  int abType;                             // MPSC_LT_F32 | MPSC_LT_F16 | MPSC_LT_BF16 (A and B)
  int dType;                              // MPSC_LT_F32, or abType's 16-bit type (autocast's 16-bit output, rounded once)
  int epilogue;                           // MPSC_LT_EPI_DEFAULT | MPSC_LT_EPI_BIAS | MPSC_LT_EPI_BGRADB
  size_t offA, offB, offD, offBias;       // byte offsets in the device allocation (set 0's for batch inputs)
  int node;                               // IR node (messages)
  const char* what;                       // the product, for messages
  int compute;                            // MPSC_LT_COMPUTE_32F | MPSC_LT_COMPUTE_TF32X3 (A, B: 3xTF32 split operands, exact TF32 values)
};

enum { MPSC_LT_F32 = 0, MPSC_LT_F16 = 1, MPSC_LT_BF16 = 2 };
// MPSC_LT_EPI_BGRADB: the bias vector (offBias, D's type) is an output: op(B) summed over k, per column of D (a
// linear's bias gradient beside its weight gradient); where cuBLASLt has no algorithm with it, the call runs
// without it (mpsc_lt_epilogue false) and the generated code sums those columns with its own kernels
enum { MPSC_LT_EPI_DEFAULT = 0, MPSC_LT_EPI_BIAS = 1, MPSC_LT_EPI_BGRADB = 2 };
// MPSC_LT_COMPUTE_TF32X3: CUBLAS_COMPUTE_32F_FAST_TF32 over operands whose values are exact TF32 (the
// 3xTF32 split of compiler/codegen-cuda/tf32x3.ts: k is 3x the product's, A = [b_hi; b_lo; b_hi] and
// B = [a_hi, a_hi, a_lo] along it), so the tensor cores' products are exact; the sum is their fp32 accumulation
enum { MPSC_LT_COMPUTE_32F = 0, MPSC_LT_COMPUTE_TF32X3 = 1 };

struct MpscLt;

/**
 * Creates the handle and every call's descriptors and algorithm. Returns null (with `err` set) only
 * when cuBLASLt itself fails (no handle); a call without an algorithm is not an error: mpsc_lt_ok
 * is false for it and mpsc_lt_note says why.
 */
MpscLt* mpsc_lt_create(const MpscLtGemm* gemms, int count, unsigned char* dev, size_t workspace_offset, size_t workspace_bytes, char* err, size_t errlen);
bool mpsc_lt_ok(const MpscLt* lt, int i);
/** call i applies its epilogue (false for a BGRADB call that runs without it: no algorithm with the epilogue) */
bool mpsc_lt_epilogue(const MpscLt* lt, int i);
/** one line: the chosen algorithm's workspace and waves, or why there is none */
const char* mpsc_lt_note(const MpscLt* lt, int i);
/**
 * call i on stream st with these operand addresses, in workspace `lane` (the workspace region holds one of
 * workspace_bytes per lane of the graphs: calls on two lanes may run at once); false with `err` set on failure
 */
bool mpsc_lt_run(MpscLt* lt, int i, const void* A, const void* B, void* D, cudaStream_t st, int lane, char* err, size_t errlen);
void mpsc_lt_destroy(MpscLt* lt);
