// msl_strict.h: a declarations-only Metal Shading Language standard library for a strict
// conformance check of mpsc's generated `.metal` files with clang (test/metal_strict.test.ts,
// runtime/metal-strict/strict_check.ts). Nothing here is ever executed or linked.
//
// Consumes: a generated `.metal` file, included unmodified except that strict_check.ts has
//           rewritten each `[[attribute(...)]]` into `MSL_ATTR_attribute(...)` (the MSL
//           attribute `[[threadgroup(0)]]` shares its name with the address-space keyword, which
//           no macro can serve in both places) and made threadgroup arrays declared inside a
//           kernel `static` (clang refuses automatic variables in an address space; Metal
//           allocates them per threadgroup).
// Produces: clang diagnostics only (`clang++ -fsyntax-only -nostdinc -nostdinc++`).
// Relies on: clang's `address_space(N)` type attribute. In C++ clang refuses every implicit
//           conversion between pointers or references of different address spaces, which is
//           Metal's rule for `device`, `constant`, `threadgroup` and `thread` (the default space).
//
// What is declared, with the signatures of Apple's Metal Shading Language Specification
// (chapter 6; "T" below is float unless a comment says otherwise): the scalar and vector types
// mpsc emits, `metal::` / `metal::precise::` / `metal::fast::` math functions, the integer
// functions `mulhi`, `max`, `min`, `abs`, `clamp`, the threadgroup and SIMD-group
// synchronisation and reduction/shuffle functions, 32-bit atomics in device and threadgroup
// memory, and the simdgroup matrix functions with their device / threadgroup overloads. Only what
// mpsc's kernels use or docs/metal.md lists as its MSL subset is declared: a function used
// outside that list fails here on purpose (declare it from the specification, and implement it in
// runtime/metal-emu/metal_compat.h, when the generator starts to use it).
//
// Not Metal, and therefore errors here: `double` (no such type in MSL), anything from the C++
// standard library (`std::`, `<cmath>`, `expf`, `fmaxf`, ...: no header but this one is reachable),
// C math names MSL lacks (`log1p`, `expm1`, `erf`, `erfc`), and address-space conversions.
#pragma once

#if !defined(__clang__) || !defined(__cplusplus)
#error "msl_strict.h is for clang++ -fsyntax-only (see runtime/metal-strict/strict_check.ts)"
#endif

// ---- address spaces (MSL 4.x): thread is the default (private) space --------------------------
#define device __attribute__((address_space(1)))
#define constant __attribute__((address_space(2)))
#define threadgroup __attribute__((address_space(3)))
#define thread
#define kernel __attribute__((annotate("msl_kernel")))

// ---- attributes (MSL 5.2), after strict_check.ts rewrote [[name(args)]] -> MSL_ATTR_name(args) --
#define MSL_ATTR_buffer(index) __attribute__((annotate("msl_buffer")))
#define MSL_ATTR_threadgroup(index) __attribute__((annotate("msl_threadgroup")))
#define MSL_ATTR_thread_position_in_grid __attribute__((annotate("thread_position_in_grid")))
#define MSL_ATTR_threadgroup_position_in_grid __attribute__((annotate("threadgroup_position_in_grid")))
#define MSL_ATTR_thread_position_in_threadgroup __attribute__((annotate("thread_position_in_threadgroup")))
#define MSL_ATTR_thread_index_in_threadgroup __attribute__((annotate("thread_index_in_threadgroup")))
#define MSL_ATTR_thread_index_in_simdgroup __attribute__((annotate("thread_index_in_simdgroup")))
#define MSL_ATTR_simdgroup_index_in_threadgroup __attribute__((annotate("simdgroup_index_in_threadgroup")))
#define MSL_ATTR_threads_per_threadgroup __attribute__((annotate("threads_per_threadgroup")))
#define MSL_ATTR_threadgroups_per_grid __attribute__((annotate("threadgroups_per_grid")))
#define MSL_ATTR_threads_per_simdgroup __attribute__((annotate("threads_per_simdgroup")))

// ---- scalar types (MSL 2.1): long is 64 bits; half is IEEE binary16 -----------------------------
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;
typedef _Float16 half;
// bfloat (MSL 3.1, bf16 buffers): modelled by a second 16-bit float type. clang 14 has no
// arithmetic __bf16 on x86, and a class type cannot live in the address-space-qualified buffers;
// the check sees every use the generator writes (bfloat buffers, float(x), bfloat(x)); the
// rounding of a real bfloat is the emulator's (metal_compat.h) and the bridge's concern.
typedef _Float16 bfloat;

namespace metal {

// ---- vector types (MSL 2.2): vec<T, n> with x, y, z, w; scalar-to-vector conversion is implicit -
template <typename T, int N> struct vec;

#define MSL_VEC_COPY_FROM(AS, ...)                                                                \
  vec(const AS vec& o) : __VA_ARGS__ {}
template <typename T> struct vec<T, 2> {
  T x, y;
  vec() = default;
  vec(T s) : x(s), y(s) {}
  vec(T a, T b) : x(a), y(b) {}
  template <typename U> explicit vec(vec<U, 2> o) : x(T(o.x)), y(T(o.y)) {}
  MSL_VEC_COPY_FROM(device, x(o.x), y(o.y))
  MSL_VEC_COPY_FROM(constant, x(o.x), y(o.y))
  MSL_VEC_COPY_FROM(threadgroup, x(o.x), y(o.y))
  T& operator[](int i) { return i == 0 ? x : y; }
  T operator[](int i) const { return i == 0 ? x : y; }
};
template <typename T> struct vec<T, 3> {
  T x, y, z;
  vec() = default;
  vec(T s) : x(s), y(s), z(s) {}
  vec(T a, T b, T c) : x(a), y(b), z(c) {}
  vec(vec<T, 2> ab, T c) : x(ab.x), y(ab.y), z(c) {}
  template <typename U> explicit vec(vec<U, 3> o) : x(T(o.x)), y(T(o.y)), z(T(o.z)) {}
  MSL_VEC_COPY_FROM(device, x(o.x), y(o.y), z(o.z))
  MSL_VEC_COPY_FROM(constant, x(o.x), y(o.y), z(o.z))
  MSL_VEC_COPY_FROM(threadgroup, x(o.x), y(o.y), z(o.z))
  T& operator[](int i) { return i == 0 ? x : i == 1 ? y : z; }
  T operator[](int i) const { return i == 0 ? x : i == 1 ? y : z; }
};
template <typename T> struct vec<T, 4> {
  T x, y, z, w;
  vec() = default;
  vec(T s) : x(s), y(s), z(s), w(s) {}
  vec(T a, T b, T c, T d) : x(a), y(b), z(c), w(d) {}
  vec(vec<T, 2> ab, vec<T, 2> cd) : x(ab.x), y(ab.y), z(cd.x), w(cd.y) {}
  vec(vec<T, 3> abc, T d) : x(abc.x), y(abc.y), z(abc.z), w(d) {}
  template <typename U> explicit vec(vec<U, 4> o) : x(T(o.x)), y(T(o.y)), z(T(o.z)), w(T(o.w)) {}
  MSL_VEC_COPY_FROM(device, x(o.x), y(o.y), z(o.z), w(o.w))
  MSL_VEC_COPY_FROM(constant, x(o.x), y(o.y), z(o.z), w(o.w))
  MSL_VEC_COPY_FROM(threadgroup, x(o.x), y(o.y), z(o.z), w(o.w))
  T& operator[](int i) { return i == 0 ? x : i == 1 ? y : i == 2 ? z : w; }
  T operator[](int i) const { return i == 0 ? x : i == 1 ? y : i == 2 ? z : w; }
};
#undef MSL_VEC_COPY_FROM

// component-wise arithmetic (declarations: never evaluated)
template <typename T, int N> vec<T, N> operator+(vec<T, N> a, vec<T, N> b);
template <typename T, int N> vec<T, N> operator-(vec<T, N> a, vec<T, N> b);
template <typename T, int N> vec<T, N> operator*(vec<T, N> a, vec<T, N> b);
template <typename T, int N> vec<T, N> operator/(vec<T, N> a, vec<T, N> b);
template <typename T, int N> vec<T, N> operator-(vec<T, N> a);

// ---- math (MSL 6.5): metal::, and the explicit precise:: / fast:: variants for float -----------
#define MSL_MATH_FLOAT_FUNCTIONS                                                                  \
  float exp(float x);                                                                            \
  float exp2(float x);                                                                           \
  float log(float x);                                                                            \
  float log2(float x);                                                                           \
  float sqrt(float x);                                                                           \
  float rsqrt(float x);                                                                          \
  float tanh(float x);                                                                           \
  float pow(float x, float y);                                                                   \
  float powr(float x, float y);                                                                  \
  float divide(float x, float y);                                                                \
  float fmax(float x, float y);                                                                  \
  float fmin(float x, float y);                                                                  \
  float clamp(float x, float minval, float maxval);
MSL_MATH_FLOAT_FUNCTIONS
namespace precise {
MSL_MATH_FLOAT_FUNCTIONS
}
namespace fast {
MSL_MATH_FLOAT_FUNCTIONS
}
#undef MSL_MATH_FLOAT_FUNCTIONS
float fabs(float x);
float abs(float x);
float floor(float x);
float ceil(float x);
float trunc(float x);
float rint(float x);
float round(float x);
float copysign(float x, float y);
float fma(float a, float b, float c);
bool isnan(float x);
bool isinf(float x);
bool isfinite(float x);
bool signbit(float x);
// max / min: floating-point (= fmax / fmin) and integer overloads (MSL 6.3, 6.5)
float max(float x, float y);
float min(float x, float y);
int max(int x, int y);
int min(int x, int y);
uint max(uint x, uint y);
uint min(uint x, uint y);
// integer functions (MSL 6.3): T is int or uint
int abs(int x);
int clamp(int x, int minval, int maxval);
uint clamp(uint x, uint minval, uint maxval);
int mulhi(int x, int y);
uint mulhi(uint x, uint y);
// relational select (MSL 6.4): result = c ? b : a
float select(float a, float b, bool c);
int select(int a, int b, bool c);
uint select(uint a, uint b, bool c);
// reinterpretation (MSL 2.19): source and destination must have the same size
template <typename To, typename From> To as_type(From x) { return __builtin_bit_cast(To, x); }

// ---- synchronisation (MSL 6.9.1) ----------------------------------------------------------------
enum class mem_flags : uint {
  mem_none = 0,
  mem_device = 1,
  mem_threadgroup = 2,
  mem_texture = 4,
  mem_threadgroup_imageblock = 8,
  mem_object_data = 16,
};
mem_flags operator|(mem_flags a, mem_flags b);
void threadgroup_barrier(mem_flags flags);
void simdgroup_barrier(mem_flags flags);

// ---- SIMD-group functions (MSL 6.9.2): T is a 32- or 16-bit scalar (not bool, long, ulong) -------
#define MSL_SIMD_FUNCTIONS(T)                                                                     \
  T simd_sum(T data);                                                                            \
  T simd_max(T data);                                                                            \
  T simd_min(T data);                                                                            \
  T simd_broadcast(T data, ushort broadcast_lane_id);                                            \
  T simd_shuffle(T data, ushort simd_lane_id);                                                   \
  T simd_shuffle_down(T data, ushort delta);                                                     \
  T simd_shuffle_up(T data, ushort delta);
MSL_SIMD_FUNCTIONS(float)
MSL_SIMD_FUNCTIONS(half)
MSL_SIMD_FUNCTIONS(int)
MSL_SIMD_FUNCTIONS(uint)
#undef MSL_SIMD_FUNCTIONS
// simd_shuffle_xor: table 6.14 gives it for Ti, the integer types only
int simd_shuffle_xor(int value, ushort mask);
uint simd_shuffle_xor(uint value, ushort mask);

// ---- atomics (MSL 2.6, 6.15): 32-bit, in device or threadgroup memory; relaxed order only ---------
enum memory_order { memory_order_relaxed, memory_order_seq_cst };
template <typename T> struct _atomic {
  _atomic() = delete;  // atomics live in device / threadgroup buffers, never in thread memory
};
typedef _atomic<int> atomic_int;
typedef _atomic<uint> atomic_uint;
typedef _atomic<float> atomic_float;  // Metal 3: device memory only (no threadgroup overloads)
#define MSL_ATOMIC_FUNCTIONS(AS, A, C)                                                            \
  void atomic_store_explicit(volatile AS A* object, C desired, memory_order order);             \
  C atomic_load_explicit(const volatile AS A* object, memory_order order);                       \
  C atomic_exchange_explicit(volatile AS A* object, C desired, memory_order order);              \
  C atomic_fetch_add_explicit(volatile AS A* object, C operand, memory_order order);             \
  C atomic_fetch_sub_explicit(volatile AS A* object, C operand, memory_order order);             \
  bool atomic_compare_exchange_weak_explicit(volatile AS A* object, thread C* expected, C desired, \
                                             memory_order success, memory_order failure);
#define MSL_ATOMIC_INT_FUNCTIONS(AS, A, C)                                                        \
  MSL_ATOMIC_FUNCTIONS(AS, A, C)                                                                  \
  C atomic_fetch_max_explicit(volatile AS A* object, C operand, memory_order order);             \
  C atomic_fetch_min_explicit(volatile AS A* object, C operand, memory_order order);             \
  C atomic_fetch_and_explicit(volatile AS A* object, C operand, memory_order order);             \
  C atomic_fetch_or_explicit(volatile AS A* object, C operand, memory_order order);              \
  C atomic_fetch_xor_explicit(volatile AS A* object, C operand, memory_order order);
MSL_ATOMIC_INT_FUNCTIONS(device, atomic_int, int)
MSL_ATOMIC_INT_FUNCTIONS(device, atomic_uint, uint)
MSL_ATOMIC_INT_FUNCTIONS(threadgroup, atomic_int, int)
MSL_ATOMIC_INT_FUNCTIONS(threadgroup, atomic_uint, uint)
MSL_ATOMIC_FUNCTIONS(device, atomic_float, float)
#undef MSL_ATOMIC_INT_FUNCTIONS
#undef MSL_ATOMIC_FUNCTIONS

// ---- SIMD-group matrices (MSL 2.3, 6.7; Apple7+): 8x8 of float or half (bfloat: MSL 3.1) ---------
template <typename T, int Cols, int Rows> struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "Metal's SIMD-group matrices are 8x8");
  simdgroup_matrix() = default;
  explicit simdgroup_matrix(T dval);  // a diagonal matrix
};
template <typename T, int Cols, int Rows> simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value);
template <typename T, int Cols, int Rows>
void simdgroup_load(thread simdgroup_matrix<T, Cols, Rows>& d, const threadgroup T* src, ulong elements_per_row = Cols,
                    vec<ulong, 2> matrix_origin = 0, bool transpose_matrix = false);
template <typename T, int Cols, int Rows>
void simdgroup_load(thread simdgroup_matrix<T, Cols, Rows>& d, const device T* src, ulong elements_per_row = Cols,
                    vec<ulong, 2> matrix_origin = 0, bool transpose_matrix = false);
template <typename T, int Cols, int Rows>
void simdgroup_store(thread simdgroup_matrix<T, Cols, Rows> a, threadgroup T* dst, ulong elements_per_row = Cols,
                     vec<ulong, 2> matrix_origin = 0, bool transpose_matrix = false);
template <typename T, int Cols, int Rows>
void simdgroup_store(thread simdgroup_matrix<T, Cols, Rows> a, device T* dst, ulong elements_per_row = Cols,
                     vec<ulong, 2> matrix_origin = 0, bool transpose_matrix = false);
template <typename T, int Cols, int Rows, int K>
void simdgroup_multiply_accumulate(thread simdgroup_matrix<T, Cols, Rows>& d, thread simdgroup_matrix<T, K, Rows>& a,
                                   thread simdgroup_matrix<T, Cols, K>& b, thread simdgroup_matrix<T, Cols, Rows>& c);
// mixed precision: 16-bit operands (half; bfloat, which this header models as the same type) into
// a float accumulator, as Metal accepts (llama.cpp's and Dawn's f16 x f16 -> f32 8x8 products);
// a float x float call does not match it (no ambiguity with the template above)
template <int Cols, int Rows, int K>
void simdgroup_multiply_accumulate(thread simdgroup_matrix<float, Cols, Rows>& d, thread simdgroup_matrix<half, K, Rows>& a,
                                   thread simdgroup_matrix<half, Cols, K>& b, thread simdgroup_matrix<float, Cols, Rows>& c);
template <typename T, int Cols, int Rows, int K>
void simdgroup_multiply(thread simdgroup_matrix<T, Cols, Rows>& d, thread simdgroup_matrix<T, K, Rows>& a,
                        thread simdgroup_matrix<T, Cols, K>& b);

} // namespace metal

typedef metal::vec<uint, 2> uint2;
typedef metal::vec<uint, 3> uint3;
typedef metal::vec<uint, 4> uint4;
typedef metal::vec<int, 2> int2;
typedef metal::vec<int, 3> int3;
typedef metal::vec<int, 4> int4;
typedef metal::vec<ushort, 2> ushort2;
typedef metal::vec<ushort, 3> ushort3;
typedef metal::vec<ulong, 2> ulong2;
typedef metal::vec<float, 2> float2;
typedef metal::vec<float, 3> float3;
typedef metal::vec<float, 4> float4;
typedef metal::vec<half, 2> half2;
typedef metal::vec<half, 4> half4;
typedef metal::simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef metal::simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef metal::simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

// ---- constants (MSL 6.5, table 6.5): float constant expressions ----------------------------------
#define INFINITY __builtin_inff()
#define HUGE_VALF __builtin_huge_valf()
#define NAN __builtin_nanf("")
#define MAXFLOAT 0x1.fffffep+127f
#define M_PI_F 0x1.921fb6p+1f
#define M_LN2_F 0x1.62e430p-1f
#define M_SQRT2_F 0x1.6a09e6p+0f

// ---- not Metal -----------------------------------------------------------------------------------
#define double msl_strict__double_is_not_a_Metal_type
