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
 * A linear layer whose operands are both bf16 runs `linear_bf16` instead: dot products of the bf16
 * rows with AVX-512 BF16's VDPBF16PS where the build targets it (this machine's Zen 4 does).
 * Inlined by compiler/codegen-cpu/emit_program.ts after mpsc_kernels.hpp (it uses mk::par).
 */
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

/**
 * sum_k a[k] * b[k] over two bf16 rows, accumulated in f32: AVX-512 BF16's VDPBF16PS (32 products
 * per instruction, in pairs, 16 f32 lanes summed at the end) when the build targets it
 * (__AVX512BF16__), else the widened products one by one. Products of bf16 numbers are exact in
 * f32; the two paths differ only in the order of the f32 sums (and VDPBF16PS treats subnormal
 * inputs as zero).
 */
inline float dot_bf16(const uint16_t* a, const uint16_t* b, int64_t K) {
#if defined(__AVX512BF16__)
  __m512 acc = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(a + k), (__m512bh)_mm512_loadu_si512(b + k));
  if (k < K) {
    const __mmask32 m = (__mmask32)((1ull << (K - k)) - 1);
    acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_maskz_loadu_epi16(m, a + k), (__m512bh)_mm512_maskz_loadu_epi16(m, b + k));
  }
  return _mm512_reduce_add_ps(acc);
#else
  float s = 0.0f;
  for (int64_t k = 0; k < K; k++) s += from_bf16_1(a[k]) * from_bf16_1(b[k]);
  return s;
#endif
}

/** y[m, n] = sum_k x[m, k] w[n, k] (+ bias[n]) (then relu): linear with both operands bf16, f32 out */
inline void linear_bf16(mpsc_ctx* ctx, const uint16_t* x, const uint16_t* w, const float* bias, float* y, int64_t M, int64_t N, int64_t K, bool relu) {
  mk::par(ctx, M, 1, [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; m++) {
      const uint16_t* xr = x + m * K;
      float* yr = y + m * N;
      for (int64_t n = 0; n < N; n++) {
        float v = dot_bf16(xr, w + n * K, K) + (bias ? bias[n] : 0.0f);
        yr[n] = relu ? (v > 0.0f ? v : 0.0f) : v;
      }
    }
  });
}

}  // namespace mh
