/**
 * mpsc_half.hpp: the CPU backend's 16-bit float storage (issue 15, `train { precision }`).
 *
 * f16 (IEEE binary16) and bf16 values are stored as raw uint16_t bit patterns and computed on in
 * float: `cast` nodes convert whole tensors (to_f16 / to_bf16 / from_f16 / from_bf16), and a
 * GEMM-family kernel whose operands are 16-bit reads them through `widen`, which converts them
 * exactly into a per-thread float buffer, so the kernel accumulates in f32 as it does in fp32.
 * Rounding is round-to-nearest-even, overflow gives ±inf, NaN stays NaN and subnormals are kept,
 * as compiler/reference/half.ts rounds. f16 <-> f32 uses the F16C instructions when the compiler
 * targets them (__F16C__, checked at build time), which round the same way; bf16 is a bit
 * operation the compiler vectorises (AVX-512 BF16's VCVTNEPS2BF16 flushes subnormals to zero,
 * so it is not used for conversions).
 * A linear layer whose operands are both bf16 runs `linear_bf16` instead: the AMX tiles where sgemm
 * takes the product there, AVX-512 BF16's VDPBF16PS on AMD CPUs that have it (bf16_vnni), else the
 * widened operands through the f32 GEMM core.
 * Inlined by compiler/codegen-cpu/emit_program.ts after mpsc_kernels.hpp (it uses mk::par).
 */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#if defined(__F16C__) || defined(__AVX512BF16__)
#include <immintrin.h>
#endif

namespace mh {

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/** f32 -> bf16, round to nearest even; NaN -> a quiet NaN of the same sign */
inline uint16_t to_bf16_1(float f) {
  uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
inline float from_bf16_1(uint16_t h) { return float_of((uint32_t)h << 16); }

/** f32 -> f16, round to nearest even; >= 65520 in magnitude -> inf; subnormals kept */
inline uint16_t to_f16_1(float f) {
  const uint32_t u = bits_of(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); // 65520 (the midpoint above 65504) and beyond, inf
  if (a >= 0x38800000u) {                                  // a normal f16 (>= 2^-14): rebias, round the 13 dropped bits
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
  }
  // subnormal f16: multiples of 2^-24; the scaling is exact and nearbyint rounds half to even
  return (uint16_t)(sign | (uint32_t)std::nearbyint(float_of(a) * 16777216.0f));
}
inline float from_f16_1(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return float_of(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    const float v = (float)m * 5.9604644775390625e-8f; // m * 2^-24, exact
    return sign ? -v : v;
  }
  return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

inline void to_f16(const float* x, uint16_t* y, int64_t b, int64_t e) {
  int64_t i = b;
#if defined(__F16C__)
  for (; i + 8 <= e; i += 8) _mm_storeu_si128((__m128i*)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < e; i++) y[i] = to_f16_1(x[i]);
}
inline void from_f16(const uint16_t* x, float* y, int64_t b, int64_t e) {
  int64_t i = b;
#if defined(__F16C__)
  for (; i + 8 <= e; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(x + i))));
#endif
  for (; i < e; i++) y[i] = from_f16_1(x[i]);
}
inline void to_bf16(const float* x, uint16_t* y, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; i++) y[i] = to_bf16_1(x[i]);
}
inline void from_bf16(const uint16_t* x, float* y, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; i++) y[i] = from_bf16_1(x[i]);
}

/** a per-thread buffer of at least n floats for widened operand `slot` (0..5), kept across calls */
inline float* widen_buffer(int slot, int64_t n) {
  thread_local std::vector<float> bufs[6];
  std::vector<float>& v = bufs[slot];
  if ((int64_t)v.size() < n) v.resize((size_t)n);
  return v.data();
}

/** the n 16-bit values at x as floats (exact), in widen_buffer(slot) */
inline float* widen(mpsc_ctx* ctx, const uint16_t* x, int64_t n, bool bf16, int slot) {
  float* y = widen_buffer(slot, n);
  mk::par(ctx, n, 1 << 15, [&](int64_t b, int64_t e) {
    if (bf16) from_bf16(x, y, b, e);
    else from_f16(x, y, b, e);
  });
  return y;
}

#if defined(__AVX512BF16__)
/**
 * linear_bf16's AVX-512 BF16 kernel: y = x w^T over bf16 rows by VDPBF16PS, which multiplies the two bf16 of each
 * 32-bit lane of its operands exactly and adds both products to an f32 lane (round to nearest even; subnormal bf16
 * inputs and f32 results flushed to zero). w is packed once per call into panels of 32 columns: per pair of k, two
 * vectors whose lane c holds (w[n0 + c][2p], w[n0 + c][2p + 1]), so a lane of the output row takes one column and no
 * horizontal sum is needed; x's pair (x[m][2p], x[m][2p + 1]) is broadcast as one 32-bit word (for an odd K, the last
 * pair's upper half is zero, as is the panel's). A block of R <= 8 rows x 32 columns keeps 2R accumulators in
 * registers over all of K; rows go to threads in chunks of 64 (the panel sweep re-reads each chunk's rows from L2),
 * and every output element is one fixed chain over the pairs in order: the same bits for any thread count.
 */
namespace vnni {
constexpr int64_t NR = 32;  // columns per panel
constexpr int64_t MR = 8;   // rows per register block
constexpr int64_t ROW_CHUNK = 64;

/** the 32-bit word (row[2p], row[2p + 1]) of a bf16 row of K, the upper half zero past K */
inline uint32_t pair_at(const uint16_t* row, int64_t p, int64_t K) {
  uint32_t v = row[2 * p];
  if (2 * p + 1 < K) std::memcpy(&v, row + 2 * p, 4);
  return v;
}

/** w [N, K] into panels of NR columns x ceil(K / 2) pairs (zero columns past N) */
inline void pack(mpsc_ctx* ctx, const uint16_t* w, int64_t N, int64_t K, uint32_t* out) {
  const int64_t K2 = (K + 1) / 2, panels = (N + NR - 1) / NR;
  mk::par(ctx, panels, 1, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; j++) {
      uint32_t* dst = out + j * K2 * NR;
      for (int64_t c = 0; c < NR; c++) {
        const int64_t n = j * NR + c;
        for (int64_t p = 0; p < K2; p++) dst[p * NR + c] = n < N ? pair_at(w + n * K, p, K) : 0u;
      }
    }
  });
}

/** rows m0 .. m0 + R - 1 of y, panel j (columns j NR .., `cols` of them): the sum over all pairs, then bias and relu */
template <int R>
inline void block(const uint16_t* x, const uint32_t* panel, const float* bias, float* y, int64_t m0, int64_t n0, int64_t cols,
                  int64_t N, int64_t K, bool relu) {
  const int64_t K2 = (K + 1) / 2;
  __m512 acc[R][2];
  for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const uint16_t* rows[R];
  for (int r = 0; r < R; r++) rows[r] = x + (m0 + r) * K;
  const auto step = [&](int64_t p, const uint32_t* v) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(panel + p * NR);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(panel + p * NR + 16);
    for (int r = 0; r < R; r++) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32((int)v[r]);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
    }
  };
  uint32_t v[R];
  const int64_t full = K / 2;  // pairs wholly inside the rows
  for (int64_t p = 0; p < full; p++) {
    for (int r = 0; r < R; r++) std::memcpy(&v[r], rows[r] + 2 * p, 4);
    step(p, v);
  }
  if (K2 > full) {  // odd K: the last element, its pair's upper half zero
    for (int r = 0; r < R; r++) v[r] = rows[r][K - 1];
    step(full, v);
  }
  const __mmask16 m0k = (__mmask16)(cols >= 16 ? 0xffff : (1u << cols) - 1);
  const __mmask16 m1k = (__mmask16)(cols >= 32 ? 0xffff : cols > 16 ? (1u << (cols - 16)) - 1 : 0);
  const __m512 b0v = bias ? _mm512_maskz_loadu_ps(m0k, bias + n0) : _mm512_setzero_ps();
  const __m512 b1v = bias ? _mm512_maskz_loadu_ps(m1k, bias + n0 + 16) : _mm512_setzero_ps();
  for (int r = 0; r < R; r++) {
    __m512 v0 = _mm512_add_ps(acc[r][0], b0v), v1 = _mm512_add_ps(acc[r][1], b1v);
    if (relu) {
      v0 = _mm512_max_ps(v0, _mm512_setzero_ps());
      v1 = _mm512_max_ps(v1, _mm512_setzero_ps());
    }
    float* yr = y + (m0 + r) * N + n0;
    _mm512_mask_storeu_ps(yr, m0k, v0);
    _mm512_mask_storeu_ps(yr + 16, m1k, v1);
  }
}

template <int R>
inline void rows_tail(const uint16_t* x, const uint32_t* panel, const float* bias, float* y, int64_t m0, int64_t rem, int64_t n0,
                      int64_t cols, int64_t N, int64_t K, bool relu) {
  if constexpr (R > 1) {
    if (rem < R) return rows_tail<R - 1>(x, panel, bias, y, m0, rem, n0, cols, N, K, relu);
  }
  block<R>(x, panel, bias, y, m0, n0, cols, N, K, relu);
}

inline void linear(mpsc_ctx* ctx, const uint16_t* x, const uint16_t* w, const float* bias, float* y, int64_t M, int64_t N, int64_t K, bool relu) {
  const int64_t K2 = (K + 1) / 2, panels = (N + NR - 1) / NR;
  thread_local std::vector<uint32_t> packed;
  if ((int64_t)packed.size() < panels * K2 * NR) packed.resize((size_t)(panels * K2 * NR));
  pack(ctx, w, N, K, packed.data());
  const uint32_t* pw = packed.data();
  mk::par(ctx, (M + ROW_CHUNK - 1) / ROW_CHUNK, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; c++) {
      const int64_t r0 = c * ROW_CHUNK, r1 = std::min(M, r0 + ROW_CHUNK);
      for (int64_t j = 0; j < panels; j++) {
        const int64_t n0 = j * NR, cols = std::min(NR, N - n0);
        for (int64_t m = r0; m < r1; m += MR) rows_tail<MR>(x, pw + j * K2 * NR, bias, y, m, r1 - m, n0, cols, N, K, relu);
      }
    }
  });
}
}  // namespace vnni
#endif

/**
 * MPSC_HALF_BF16 (the generated model's #define, MPSC_CPU_BF16 at build time): how linear_bf16 multiplies where the
 * build targets AVX-512 BF16 and the AMX tiles do not take the product: 0 (auto) vnni::linear on AMD CPUs, the
 * widened operands through sgemm on others; 1 vnni::linear; 2 widened. Measured on a Sapphire Rapids Xeon (8 Dec,
 * bench/NOTES.md phase 35): VDPBF16PS there issues at half the rate of the 512-bit FMA (16 against 32 multiply-adds a
 * cycle), and char_gpt's bf16 linears took 31.8 ms a step on the VDPBF16PS kernel against 22.8 widened on the FMA
 * kernel (14.7 on the tiles); Zen 4 runs VDPBF16PS at the FMA's rate with two products a lane (twice its
 * multiply-adds; not measured here: no Zen 4 this session).
 */
#ifndef MPSC_HALF_BF16
#define MPSC_HALF_BF16 0
#endif

/** whether linear_bf16 takes vnni::linear for a product the AMX tiles do not take (MPSC_HALF_BF16) */
inline bool bf16_vnni() {
#if defined(__AVX512BF16__) && MPSC_HALF_BF16 == 0
  static const bool amd = __builtin_cpu_is("amd");
  return amd;
#elif defined(__AVX512BF16__) && MPSC_HALF_BF16 == 1
  return true;
#else
  return false;
#endif
}

/**
 * y[m, n] = sum_k x[m, k] w[n, k] (+ bias[n]) (then relu): linear with both operands bf16, f32 out; products of two
 * bf16 are exact in f32, so every path is f32 accumulation of the exact products, in its own order: the AMX tiles'
 * bf16 products where sgemm takes the product there (detail::use_amx: the build allows AMX, Linux grants the tile
 * state and the product is large enough), vnni::linear's VDPBF16PS where bf16_vnni() says so (AVX-512 BF16, checked at
 * build time: __AVX512BF16__), else both operands widened (exactly) through the f32 GEMM core (sgemm_part).
 */
inline void linear_bf16(mpsc_ctx* ctx, const uint16_t* x, const uint16_t* w, const float* bias, float* y, int64_t M, int64_t N, int64_t K, bool relu) {
#if defined(__AVX512BF16__)
  if (bf16_vnni() && !mpsc_fast::detail::use_amx(false, M, N, K)) return vnni::linear(ctx, x, w, bias, y, M, N, K, relu);
#endif
  const float* xf = widen(ctx, x, M * K, true, 1);
  const float* wf = widen(ctx, w, N * K, true, 2);
  mpsc_fast::Epilogue ep;
  ep.bias = bias;
  ep.bias_kind = bias ? mpsc_fast::BIAS_COL : mpsc_fast::BIAS_NONE;
  ep.relu = relu;
  mk::run_parts(ctx, mpsc_fast::sgemm_workspace_bytes(M, N, K), [&](int part, int nparts, void* ws) {
    mpsc_fast::sgemm_part(false, true, M, N, K, 1.0f, xf, K, wf, K, 0.0f, y, N, &ep, part, nparts, ws);
  });
}

}  // namespace mh
