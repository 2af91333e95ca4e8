// metal-emu: the Metal Shading Language compatibility header.
// With this header reachable as <metal_stdlib> (runtime/metal-emu/include/metal_stdlib), the
// `.metal` text mpsc generates compiles unmodified as C++17 with g++ 12 or clang. It implements
// exactly the MSL subset the generator uses (docs/metal.md lists it):
//  - address spaces `device`, `constant`, `thread`, `threadgroup` (threadgroup memory only as a
//    `[[threadgroup(n)]]` kernel argument: a `volatile` pointer here)
//  - `kernel`, `[[buffer(n)]]`, `[[threadgroup(n)]]` and the built-in attributes (ignored by
//    the C++ compiler: the generated shim passes the built-in values in the right order)
//  - scalar types uint/ushort/uchar, vector types uint2/uint3/int2/float2/float4
//  - the 16-bit storage types with the GPU's rounding on every conversion: `half` is _Float16
//    (IEEE binary16; g++ 12 on x86-64 converts float -> _Float16 in software, round to nearest
//    even, subnormals kept, overflow to inf), `bfloat` a 16-bit struct whose conversion from float
//    rounds to nearest even (NaN stays a quiet NaN); both convert to float exactly, and only
//    explicitly (`half(x)`, `bfloat(x)`, `float(h)`), as the generated kernels write them
//  - metal:: max/min/abs/fabs/clamp/select/as_type/mulhi and metal::precise:: exp/log/sqrt/
//    rsqrt/tanh/pow (computed in float: glibc's correctly rounded-ish float functions)
//  - threadgroup_barrier(mem_flags), simd_sum/simd_max/simd_min/simd_shuffle/
//    simd_shuffle_down/simd_shuffle_xor/simd_broadcast
//  - simdgroup_matrix<float|half|bfloat,8,8> with simdgroup_load/store/multiply_accumulate and
//    make_filled_simdgroup_matrix (every lane holds the whole matrix: results equal Metal's
//    whole-matrix semantics; the per-lane thread_elements() split is not emulated), including the
//    mixed product float8x8 += half8x8 * half8x8 (or bfloat8x8): each product of two 16-bit
//    numbers exact in float, the sums in float in the same order as the float product
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include "emu_fiber.h"

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;
typedef _Float16 half;
static_assert(sizeof(half) == 2, "half must be 16 bits");

// bfloat16: the top 16 bits of a float; from float rounds to nearest, ties to even
struct bfloat {
  uint16_t bits;
  bfloat() : bits(0) {}
  explicit bfloat(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) bits = uint16_t((u >> 16) | 0x40u);  // NaN: keep it a quiet NaN
    else bits = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);           // carries into the exponent: overflow gives inf
  }
  explicit operator float() const {
    const uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  // threadgroup memory is `volatile` here: bfloat tiles are copied in and out of it bit for bit
  bfloat(const volatile bfloat& o) : bits(o.bits) {}
  bfloat(const bfloat& o) = default;
  bfloat& operator=(const bfloat& o) = default;
  void operator=(const bfloat& o) volatile { bits = o.bits; }
};
static_assert(sizeof(bfloat) == 2, "bfloat must be 16 bits");

namespace metal {

template <typename T>
struct vec2 {
  T x, y;
  vec2() : x(0), y(0) {}
  vec2(T a) : x(a), y(a) {}
  vec2(T a, T b) : x(a), y(b) {}
};
template <typename T>
struct vec3 {
  T x, y, z;
  vec3() : x(0), y(0), z(0) {}
  vec3(T a) : x(a), y(a), z(a) {}
  vec3(T a, T b, T c) : x(a), y(b), z(c) {}
};
template <typename T>
struct vec4 {
  T x, y, z, w;
  vec4() : x(0), y(0), z(0), w(0) {}
  vec4(T a) : x(a), y(a), z(a), w(a) {}
  vec4(T a, T b, T c, T d) : x(a), y(b), z(c), w(d) {}
};

template <typename T> inline T max(T a, T b) { return a > b ? a : b; }
template <typename T> inline T min(T a, T b) { return a < b ? a : b; }
inline float fmax(float a, float b) { return std::fmax(a, b); }
inline float fmin(float a, float b) { return std::fmin(a, b); }
inline float abs(float a) { return std::fabs(a); }
inline int abs(int a) { return a < 0 ? -a : a; }
inline float fabs(float a) { return std::fabs(a); }
inline float fma(float a, float b, float c) { return std::fma(a, b, c); }
template <typename T> inline T clamp(T x, T lo, T hi) { return x < lo ? lo : (x > hi ? hi : x); }
template <typename T> inline T select(T a, T b, bool c) { return c ? b : a; }
inline uint mulhi(uint a, uint b) { return static_cast<uint>((uint64_t(a) * uint64_t(b)) >> 32); }
inline bool isnan(float x) { return std::isnan(x); }
inline bool isinf(float x) { return std::isinf(x); }
template <typename T, typename U>
inline T as_type(U v) {
  static_assert(sizeof(T) == sizeof(U), "as_type needs equal sizes");
  T r;
  std::memcpy(&r, &v, sizeof r);
  return r;
}

namespace precise {
inline float exp(float x) { return std::exp(x); }
inline float exp2(float x) { return std::exp2(x); }
inline float log(float x) { return std::log(x); }
inline float sqrt(float x) { return std::sqrt(x); }
inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }
inline float tanh(float x) { return std::tanh(x); }
inline float pow(float x, float y) { return std::pow(x, y); }
inline float divide(float x, float y) { return x / y; }
} // namespace precise

enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
inline mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(int(a) | int(b)); }

inline void threadgroup_barrier(mem_flags) { mtlemu::threadgroup_barrier_impl(); }
inline void simdgroup_barrier(mem_flags) {
  mtlemu::simd_collective<uint32_t>(0u, [](const uint32_t*, uint32_t, unsigned) { return 0u; });
}

template <typename T>
inline T simd_sum(T v) {
  return mtlemu::simd_collective<T>(v, [](const T* a, uint32_t mask, unsigned) {
    T s = T(0);
    for (unsigned l = 0; l < mtlemu::SIMD_WIDTH; ++l)
      if (mask & (1u << l)) s += a[l];
    return s;
  });
}
template <typename T>
inline T simd_max(T v) {
  return mtlemu::simd_collective<T>(v, [v](const T* a, uint32_t mask, unsigned) {
    T s = v;
    for (unsigned l = 0; l < mtlemu::SIMD_WIDTH; ++l)
      if ((mask & (1u << l)) && a[l] > s) s = a[l];
    return s;
  });
}
template <typename T>
inline T simd_min(T v) {
  return mtlemu::simd_collective<T>(v, [v](const T* a, uint32_t mask, unsigned) {
    T s = v;
    for (unsigned l = 0; l < mtlemu::SIMD_WIDTH; ++l)
      if ((mask & (1u << l)) && a[l] < s) s = a[l];
    return s;
  });
}
template <typename T>
inline T simd_shuffle(T v, ushort lane) {
  return mtlemu::simd_collective<T>(v, [v, lane](const T* a, uint32_t mask, unsigned) {
    return (lane < mtlemu::SIMD_WIDTH && (mask & (1u << lane))) ? a[lane] : v;
  });
}
template <typename T>
inline T simd_broadcast(T v, ushort lane) { return simd_shuffle(v, lane); }
template <typename T>
inline T simd_shuffle_down(T v, ushort delta) {
  return mtlemu::simd_collective<T>(v, [v, delta](const T* a, uint32_t mask, unsigned me) {
    unsigned src = me + delta;
    return (src < mtlemu::SIMD_WIDTH && (mask & (1u << src))) ? a[src] : v;
  });
}
template <typename T>
inline T simd_shuffle_xor(T v, ushort m) {
  return mtlemu::simd_collective<T>(v, [v, m](const T* a, uint32_t mask, unsigned me) {
    unsigned src = me ^ m;
    return (src < mtlemu::SIMD_WIDTH && (mask & (1u << src))) ? a[src] : v;
  });
}

// simdgroup matrices: every lane holds the whole matrix
template <typename T, int Cols, int Rows>
struct simdgroup_matrix {
  T e[Rows][Cols];
  simdgroup_matrix() { fill(T()); }
  // Metal: a diagonal matrix with `v` on the diagonal
  explicit simdgroup_matrix(T v) {
    fill(T());
    for (int i = 0; i < Rows && i < Cols; ++i) e[i][i] = v;
  }
  // element-wise (T() is +0 for float, half and bfloat; bfloat is not trivially copyable: no memset)
  void fill(T v) {
    for (int r = 0; r < Rows; ++r)
      for (int c = 0; c < Cols; ++c) e[r][c] = v;
  }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <typename T, int Cols, int Rows>
inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T v) {
  simdgroup_matrix<T, Cols, Rows> m;
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < Cols; ++c) m.e[r][c] = v;
  return m;
}

// origin is (column, row) as in Metal's ulong2 matrix_origin
template <typename T, int Cols, int Rows>
inline void simdgroup_load(simdgroup_matrix<T, Cols, Rows>& d, const volatile T* src, unsigned long elements_per_row = Cols,
                           vec2<unsigned long> origin = vec2<unsigned long>(0, 0), bool transpose = false) {
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < Cols; ++c)
      d.e[r][c] = T(transpose ? src[(origin.y + c) * elements_per_row + origin.x + r]
                              : src[(origin.y + r) * elements_per_row + origin.x + c]);
}
template <typename T, int Cols, int Rows>
inline void simdgroup_store(const simdgroup_matrix<T, Cols, Rows>& s, volatile T* dst, unsigned long elements_per_row = Cols,
                            vec2<unsigned long> origin = vec2<unsigned long>(0, 0), bool transpose = false) {
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < Cols; ++c) {
      if (transpose) dst[(origin.y + c) * elements_per_row + origin.x + r] = s.e[r][c];
      else dst[(origin.y + r) * elements_per_row + origin.x + c] = s.e[r][c];
    }
}
// d = a * b + c, accumulated in float
template <typename T, int K, int M, int N>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<T, N, M>& d, const simdgroup_matrix<T, K, M>& a,
                                          const simdgroup_matrix<T, N, K>& b, const simdgroup_matrix<T, N, M>& c) {
  simdgroup_matrix<T, N, M> r;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float acc = float(c.e[i][j]);
      for (int k = 0; k < K; ++k) acc += float(a.e[i][k]) * float(b.e[k][j]);
      r.e[i][j] = T(acc);
    }
  d = r;
}
// d = a * b + c with 16-bit operands (half or bfloat) and a float accumulator: every product of
// two 16-bit numbers is exact in float, the sums are float, in the order of the float product above
template <typename T, int K, int M, int N, typename = typename std::enable_if<!std::is_same<T, float>::value>::type>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<float, N, M>& d, const simdgroup_matrix<T, K, M>& a,
                                          const simdgroup_matrix<T, N, K>& b, const simdgroup_matrix<float, N, M>& c) {
  // widened once per element (exact; g++ converts _Float16 in software, so not once per product)
  float af[M][K], bf[K][N];
  for (int i = 0; i < M; ++i)
    for (int k = 0; k < K; ++k) af[i][k] = float(a.e[i][k]);
  for (int k = 0; k < K; ++k)
    for (int j = 0; j < N; ++j) bf[k][j] = float(b.e[k][j]);
  simdgroup_matrix<float, N, M> r;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float acc = c.e[i][j];
      for (int k = 0; k < K; ++k) acc += af[i][k] * bf[k][j];
      r.e[i][j] = acc;
    }
  d = r;
}

} // namespace metal

typedef metal::vec2<uint> uint2;
typedef metal::vec3<uint> uint3;
typedef metal::vec4<uint> uint4;
typedef metal::vec2<int> int2;
typedef metal::vec3<int> int3;
typedef metal::vec2<float> float2;
typedef metal::vec4<float> float4;
typedef metal::vec2<unsigned long> ulong2;

// address spaces and function qualifiers: plain C++ here
#define kernel
#define device
#define constant const
#define thread
// `threadgroup` must stay valid inside `[[threadgroup(n)]]` too: a keyword there is an (ignored)
// attribute name, and `volatile` models shared memory faithfully (no value cached across a barrier)
#define threadgroup volatile
