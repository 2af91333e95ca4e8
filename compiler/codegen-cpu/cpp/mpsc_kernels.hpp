/*
 * mpsc_kernels.hpp: shared building blocks of the generated CPU kernels (compiler/codegen-cpu).
 * Copied verbatim next to the generated model.cc. Shapes are passed in by the generated
 * per-node functions, which bake them in as constants.
 *
 *  - philox4x32-10 exactly as compiler/ir/philox.ts.
 *  - reductions, 2x2 max pooling rows, small math.
 *  - run_parts / part_scratch: drive the fast GEMM / conv core (runtime/cpp/fast, namespace
 *    mpsc_fast), which emit_program.ts prepends to this header, on the runtime's pool.
 *  - attention_fwd_tile / attention_bwd_head: blocked (flash-attention) scaled dot-product
 *    attention over (query tile, key tile) pairs with the online softmax, so a head's T x S
 *    scores never exist whole (only one ATT_BC x ATT_BR tile, transposed, in a thread's scratch);
 *    the products on the register-blocked micro-kernel att_mk, the softmax lane-wise (exp_av).
 */
#ifndef MPSC_KERNELS_HPP
#define MPSC_KERNELS_HPP

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "mpsc_model.h"
#include "mpsc_parallel.hpp"

namespace mk {

// always inlined where it matters: in a large generated model.cc GCC otherwise stops inlining small helpers
// once its unit-growth limit is reached, and a loop that calls them stays scalar (see exp_v / erf_v)
#if defined(__GNUC__)
#define MK_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define MK_ALWAYS_INLINE inline
#endif

/** a GCC vector V (float or int lanes) loaded from / stored to memory of any alignment (one unaligned move) */
template <class V>
MK_ALWAYS_INLINE V vload(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
MK_ALWAYS_INLINE void vstore(void* p, const V& v) { std::memcpy(p, &v, sizeof v); }

/** run f(b, e) over [0, n), in parallel when n is at least `min_parallel` */
template <class F>
inline void par(mpsc_ctx* ctx, int64_t n, int64_t min_parallel, F&& f) {
  if (n <= 0) return;
  if (n < min_parallel || mpsc::threads(ctx) == 1) f((int64_t)0, n);
  else mpsc::parallel_for(ctx, n, f);
}

/**
 * Broadcast offsets: the linear index i over dims[0..n) (row-major) split into its per-dim indices,
 * each multiplied by that dim's stride in a (sa) and in b (sb); the sums are a's and b's offsets.
 */
inline void bcast_offsets(int64_t i, int n, const int64_t* dims, const int64_t* sa, const int64_t* sb, int64_t& oa, int64_t& ob) {
  oa = 0;
  ob = 0;
  for (int d = n - 1; d >= 0; d--) {
    const int64_t idx = i % dims[d];
    i /= dims[d];
    oa += idx * sa[d];
    ob += idx * sb[d];
  }
}

/** asks for the cache lines of p[0..n) (a row read soon: the row kernels' loads alone did not overlap their arithmetic) */
inline void prefetch_row(const float* p, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(p + i);
}

/** a per-thread scratch buffer of at least n floats (kept across calls) */
inline float* scratch(int slot, int64_t n) {
  thread_local std::vector<float> bufs[4];
  std::vector<float>& b = bufs[slot];
  if ((int64_t)b.size() < n) b.resize((size_t)n);
  return b.data();
}

/**
 * Scratch for the fast core's per-part workspaces (runtime/cpp/fast): one 64-byte aligned block
 * per calling thread, grown on first use and reused by every later kernel and step (the kernels of
 * a program run one after another on the calling thread, so they can share it).
 */
inline char* part_scratch(size_t bytes) {
  struct Block {
    char* p = nullptr;
    size_t n = 0;
    ~Block() { std::free(p); }
  };
  thread_local Block b;
  if (b.n < bytes) {
    std::free(b.p);
    b.n = (bytes + 4095) / 4096 * 4096;
    b.p = static_cast<char*>(std::aligned_alloc(64, b.n));
    if (!b.p) b.n = 0;
  }
  return b.p;
}

/**
 * Runs f(part, nparts, scratch) for part = 0..nparts-1 (nparts = the context's thread count) on the
 * pool, each part with its own `per_part`-byte block of part_scratch. The fast core's results are
 * the same bits for any nparts, so the thread count does not change training.
 */
template <class F>
inline void run_parts(mpsc_ctx* ctx, size_t per_part, F&& f) {
  const int np = (int)mpsc::threads(ctx);
  const size_t stride = (per_part + 63) / 64 * 64;
  char* base = part_scratch(stride * (size_t)np + 64);
  if (np == 1) {
    f(0, 1, (void*)base);
    return;
  }
  mpsc::parallel_for(ctx, np, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; p++) f((int)p, np, (void*)(base + (size_t)p * stride));
  });
}

/**
 * conv2d grad-weight through the fast core in its one or two phases (mpsc_fast::
 * conv2d_grad_weight_phases: batch chunks summed by the parts, then the chunks added in order),
 * every part of a phase finished before the next starts; the chunks' partial sums live in a
 * scratch block of the calling thread (slot 3), reused by every call.
 */
inline void conv_grad_weight(mpsc_ctx* ctx, const mpsc_fast::Conv2dShape& s, const float* dy, const float* x,
                             float* dw) {
  const size_t shared_bytes = mpsc_fast::conv2d_grad_weight_shared_bytes(s);
  float* shared = shared_bytes ? scratch(3, (int64_t)(shared_bytes / sizeof(float))) : nullptr;
  const size_t per_part = mpsc_fast::conv2d_scratch_bytes(s, mpsc_fast::CONV_GRAD_WEIGHT);
  const int phases = mpsc_fast::conv2d_grad_weight_phases(s);
  for (int phase = 0; phase < phases; ++phase)
    run_parts(ctx, phase == 0 ? per_part : 0, [&](int part, int nparts, void* ws) {
      mpsc_fast::conv2d_grad_weight_part(s, dy, x, dw, part, nparts, ws, phase, shared);
    });
}

// ------------------------------------------------------------------ profile (MPSC_PROFILE=1, or =all)
/**
 * per-kernel wall time, summed over runs, printed to stderr at process exit (generated run_* call these).
 * MPSC_PROFILE_CLOCK=cpu times with the calling thread's CPU clock instead: with --threads 1 on a shared
 * machine that is each kernel's own work, without the time the thread waited for a core.
 */
struct ProfEntry {
  const char* name = nullptr;
  double ms = 0;
  int64_t calls = 0;
};
inline std::vector<ProfEntry>& prof_table() {
  // never destroyed: prof_dump runs from atexit, after the destructors of statics built later
  static std::vector<ProfEntry>* t = new std::vector<ProfEntry>();
  return *t;
}
inline void prof_dump() {
  std::vector<ProfEntry> t = prof_table();
  double total = 0;
  for (auto& e : t) total += e.ms;
  std::sort(t.begin(), t.end(), [](const ProfEntry& a, const ProfEntry& b) { return a.ms > b.ms; });
  std::fprintf(stderr, "mpsc profile: %.1f ms in kernels%s\n", total, std::getenv("MPSC_PROFILE_CLOCK") ? " (MPSC_PROFILE_CLOCK)" : "");
  // MPSC_PROFILE=all lists every kernel, any other value the 30 slowest
  const char* v = std::getenv("MPSC_PROFILE");
  const size_t shown = v && std::strcmp(v, "all") == 0 ? t.size() : 30;
  for (size_t i = 0; i < t.size() && i < shown; i++)
    if (t[i].name) std::fprintf(stderr, "  %9.2f ms %5.1f%% %6lld calls  %s\n", t[i].ms, total > 0 ? 100 * t[i].ms / total : 0.0, (long long)t[i].calls, t[i].name);
}
inline bool prof_on() {
  static const bool on = [] {
    const char* v = std::getenv("MPSC_PROFILE");
    const bool b = v && *v && *v != '0';
    if (b) std::atexit(prof_dump);
    return b;
  }();
  return on;
}
inline double prof_now() {
  static const bool cpu = [] {
    const char* v = std::getenv("MPSC_PROFILE_CLOCK");
    return v && std::strcmp(v, "cpu") == 0;
  }();
  if (cpu) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
inline void prof_add(int slot, const char* name, double t0) {
  auto& t = prof_table();
  if ((int)t.size() <= slot) t.resize((size_t)slot + 1);
  t[(size_t)slot].name = name;
  t[(size_t)slot].ms += prof_now() - t0;
  t[(size_t)slot].calls += 1;
}

// ------------------------------------------------------------------ philox (compiler/ir/philox.ts)
inline uint32_t philox_first(uint32_t seed, uint32_t stream, uint32_t c0, uint32_t c1) {
  uint32_t k0 = seed, k1 = stream, x0 = c0, x1 = c1, x2 = 0, x3 = 0;
  for (int r = 0; r < 10; r++) {
    const uint64_t p0 = (uint64_t)0xd2511f53u * x0;
    const uint64_t p1 = (uint64_t)0xcd9e8d57u * x2;
    const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    const uint32_t n0 = hi1 ^ x1 ^ k0;
    const uint32_t n2 = hi0 ^ x3 ^ k1;
    x0 = n0; x1 = lo1; x2 = n2; x3 = lo0;
    k0 += 0x9e3779b9u;
    k1 += 0xbb67ae85u;
  }
  return x0;
}

// ------------------------------------------------------------------ reductions
// 16 float lanes (vectorisable without reassociation flags), combined in double: fast and
// accurate for the row lengths of normalisation and bias-gradient sums; the order is fixed.
constexpr int64_t LANES = 16;

inline double sum_f(const float* __restrict p, int64_t n) {
  float lane[LANES] = {};
  const int64_t nb = n > 0 ? n / LANES * LANES : 0;
  for (int64_t i = 0; i < nb; i += LANES)
    for (int64_t j = 0; j < LANES; j++) lane[j] += p[i + j];
  double s = 0.0;
  for (int64_t j = 0; j < LANES; j++) s += lane[j];
  for (int64_t i = nb; i < n; i++) s += p[i];
  return s;
}

/**
 * the sum of n floats in double: 8 double lanes (lane j adds elements j, j + 8, ... in order), then the lanes in
 * order and the tail: a fixed order that the compiler vectorises (the class losses' row sums of exps and logits)
 */
inline double sum_d8(const float* __restrict p, int64_t n) {
  double lane[8] = {};
  const int64_t nb = n > 0 ? n / 8 * 8 : 0;
  for (int64_t i = 0; i < nb; i += 8)
    for (int64_t j = 0; j < 8; j++) lane[j] += (double)p[i + j];
  double s = 0.0;
  for (int64_t j = 0; j < 8; j++) s += lane[j];
  for (int64_t i = nb; i < n; i++) s += (double)p[i];
  return s;
}

/**
 * sum_f of four rows at once: the same bits as four sum_f calls (same lanes, same order), with four
 * independent accumulator chains in flight (sum_f alone waits on one chain of vector adds)
 */
inline void sum_f4(const float* __restrict p0, const float* __restrict p1, const float* __restrict p2, const float* __restrict p3, int64_t n,
                   double* out) {
  typedef float lanes_t __attribute__((vector_size(4 * LANES)));
  lanes_t a0 = {}, a1 = {}, a2 = {}, a3 = {};
  const int64_t nb = n > 0 ? n / LANES * LANES : 0;
  for (int64_t i = 0; i < nb; i += LANES) {
    lanes_t v0, v1, v2, v3;
    std::memcpy(&v0, p0 + i, sizeof v0);
    std::memcpy(&v1, p1 + i, sizeof v1);
    std::memcpy(&v2, p2 + i, sizeof v2);
    std::memcpy(&v3, p3 + i, sizeof v3);
    a0 += v0;
    a1 += v1;
    a2 += v2;
    a3 += v3;
  }
  float l0[LANES], l1[LANES], l2[LANES], l3[LANES];
  std::memcpy(l0, &a0, sizeof l0);
  std::memcpy(l1, &a1, sizeof l1);
  std::memcpy(l2, &a2, sizeof l2);
  std::memcpy(l3, &a3, sizeof l3);
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  for (int64_t j = 0; j < LANES; j++) {
    s0 += l0[j];
    s1 += l1[j];
    s2 += l2[j];
    s3 += l3[j];
  }
  for (int64_t i = nb; i < n; i++) {
    s0 += p0[i];
    s1 += p1[i];
    s2 += p2[i];
    s3 += p3[i];
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
}

/** sum of (p[i] - mu)^2 */
inline double sum_sq_dev(const float* __restrict p, int64_t n, float mu) {
  float lane[LANES] = {};
  const int64_t nb = n > 0 ? n / LANES * LANES : 0;
  for (int64_t i = 0; i < nb; i += LANES)
    for (int64_t j = 0; j < LANES; j++) {
      const float d = p[i + j] - mu;
      lane[j] += d * d;
    }
  double s = 0.0;
  for (int64_t j = 0; j < LANES; j++) s += lane[j];
  for (int64_t i = nb; i < n; i++) {
    const double d = (double)p[i] - mu;
    s += d * d;
  }
  return s;
}

/** sum of g[i] * (x[i] - mu) */
inline double dot_dev(const float* __restrict g, const float* __restrict x, int64_t n, float mu) {
  float lane[LANES] = {};
  const int64_t nb = n > 0 ? n / LANES * LANES : 0;
  for (int64_t i = 0; i < nb; i += LANES)
    for (int64_t j = 0; j < LANES; j++) lane[j] += g[i + j] * (x[i + j] - mu);
  double s = 0.0;
  for (int64_t j = 0; j < LANES; j++) s += lane[j];
  for (int64_t i = nb; i < n; i++) s += (double)g[i] * (x[i] - mu);
  return s;
}

// ------------------------------------------------------------------ 2x2 / stride-2 max pooling
// One output row from one pair of input rows, with 8- (or 4-) float vectors (GCC / Clang vector
// extensions: even / odd lanes split by shuffles). The last vector of a row may overlap the one
// before it (outputs are recomputed and rewritten with the same bits), so the output must not
// alias the inputs; the memory plan guarantees that (a node's outputs never alias its inputs).
// Same comparisons as the scalar kernels in pool.ts: forward m = max(m, v) from -inf in the order
// (0,0) (0,1) (1,0) (1,1); gradient to the first maximum in that order (NaN: as the scalar code).
// 8-float vectors where AVX registers hold them; otherwise (SSE, NEON) 4-float vectors only
#if defined(__AVX__)
#define MK_MP8 1
typedef float mp_f8 __attribute__((vector_size(32)));
typedef int32_t mp_i8 __attribute__((vector_size(32)));
#else
#define MK_MP8 0
#endif
typedef float mp_f4 __attribute__((vector_size(16)));
typedef int32_t mp_i4 __attribute__((vector_size(16)));


#if MK_MP8
/** even / odd floats of p[0, 16) */
inline void mp_split(const float* p, mp_f8& ev, mp_f8& od) {
  const mp_f8 lo = vload<mp_f8>(p), hi = vload<mp_f8>(p + 8);
#if defined(__clang__)
  ev = __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14);
  od = __builtin_shufflevector(lo, hi, 1, 3, 5, 7, 9, 11, 13, 15);
#else
  ev = __builtin_shuffle(lo, hi, mp_i8{0, 2, 4, 6, 8, 10, 12, 14});
  od = __builtin_shuffle(lo, hi, mp_i8{1, 3, 5, 7, 9, 11, 13, 15});
#endif
}
#endif
inline void mp_split(const float* p, mp_f4& ev, mp_f4& od) {
  const mp_f4 lo = vload<mp_f4>(p), hi = vload<mp_f4>(p + 4);
#if defined(__clang__)
  ev = __builtin_shufflevector(lo, hi, 0, 2, 4, 6);
  od = __builtin_shufflevector(lo, hi, 1, 3, 5, 7);
#else
  ev = __builtin_shuffle(lo, hi, mp_i4{0, 2, 4, 6});
  od = __builtin_shuffle(lo, hi, mp_i4{1, 3, 5, 7});
#endif
}
/** p[2i] = ev[i], p[2i+1] = od[i] */
#if MK_MP8
inline void mp_merge(float* p, mp_f8 ev, mp_f8 od) {
#if defined(__clang__)
  vstore(p, (mp_f8)__builtin_shufflevector(ev, od, 0, 8, 1, 9, 2, 10, 3, 11));
  vstore(p + 8, (mp_f8)__builtin_shufflevector(ev, od, 4, 12, 5, 13, 6, 14, 7, 15));
#else
  vstore(p, __builtin_shuffle(ev, od, mp_i8{0, 8, 1, 9, 2, 10, 3, 11}));
  vstore(p + 8, __builtin_shuffle(ev, od, mp_i8{4, 12, 5, 13, 6, 14, 7, 15}));
#endif
}
#endif
inline void mp_merge(float* p, mp_f4 ev, mp_f4 od) {
#if defined(__clang__)
  vstore(p, (mp_f4)__builtin_shufflevector(ev, od, 0, 4, 1, 5));
  vstore(p + 4, (mp_f4)__builtin_shufflevector(ev, od, 2, 6, 3, 7));
#else
  vstore(p, __builtin_shuffle(ev, od, mp_i4{0, 4, 1, 5}));
  vstore(p + 4, __builtin_shuffle(ev, od, mp_i4{2, 6, 3, 7}));
#endif
}

template <class V>
inline void mp2_fwd_vec(const float* x0, const float* x1, float* y) {
  V a, b, c, d;
  mp_split(x0, a, b);
  mp_split(x1, c, d);
  V m = V{} - INFINITY;
  m = m < a ? a : m;  // std::max(m, v)
  m = m < b ? b : m;
  m = m < c ? c : m;
  m = m < d ? d : m;
  vstore(y, m);
}
inline void mp2_fwd_one(const float* x0, const float* x1, float* y) {
  float m = -INFINITY;
  m = std::max(m, x0[0]);
  m = std::max(m, x0[1]);
  m = std::max(m, x1[0]);
  m = std::max(m, x1[1]);
  *y = m;
}
/**
 * The gradient of L 2x2 windows (rows x0, x1, columns [0, 2L)) for dy[0, L): r = dx of row 0 (even,
 * odd lanes), of row 1 (even, odd); the first maximum in (x0[0], x0[1], x1[0], x1[1]) order takes
 * dy. With Relu (a relu-grad folded in, fuse_relu_grad.ts: the mask is the pool input itself), dy
 * only where the window maximum is > 0: the bits of the unfused relu-grad's `mask > 0 ? g : 0`.
 */
template <class V, bool Relu>
inline void mp2_grad_vec(const float* x0, const float* x1, const float* dy, V (&r)[4]) {
  V a, b, c, d;
  mp_split(x0, a, b);
  mp_split(x1, c, d);
  const V z = V{};
  V m = a;
  const auto s1 = b > m;
  m = s1 ? b : m;
  const auto s2 = c > m;
  m = s2 ? c : m;
  const auto s3 = d > m;
  m = s3 ? d : m;
  const V g = Relu ? (m > z ? vload<V>(dy) : z) : vload<V>(dy);
  r[0] = (s1 | s2 | s3) ? z : g;
  r[1] = (s1 & ~(s2 | s3)) ? g : z;
  r[2] = (s2 & ~s3) ? g : z;
  r[3] = s3 ? g : z;
}
template <class V>
inline void mp2_grad_store(float* d0, float* d1, const V (&r)[4]) {
  mp_merge(d0, r[0], r[1]);
  mp_merge(d1, r[2], r[3]);
}
template <bool Relu>
inline void mp2_grad_one(const float* x0, const float* x1, const float* dy, float* d0, float* d1) {
  const float a = x0[0], b = x0[1], c = x1[0], d = x1[1];
  float m = a;
  const bool s1 = b > m;
  m = s1 ? b : m;
  const bool s2 = c > m;
  m = s2 ? c : m;
  const bool s3 = d > m;
  m = s3 ? d : m;
  const float g = Relu ? (m > 0.0f ? *dy : 0.0f) : *dy;
  d0[0] = (s1 | s2 | s3) ? 0.0f : g;
  d0[1] = (s1 & !(s2 | s3)) ? g : 0.0f;
  d1[0] = (s2 & !s3) ? g : 0.0f;
  d1[1] = s3 ? g : 0.0f;
}

/** y[0, OW) = 2x2 maxima of input rows x0, x1 (reads x0[0, 2*OW), x1[0, 2*OW)) */
template <int64_t OW>
inline void maxpool2x2_row(const float* x0, const float* x1, float* y) {
#if MK_MP8
  if constexpr (OW >= 8) {
    for (int64_t o = 0; o + 8 <= OW; o += 8) mp2_fwd_vec<mp_f8>(x0 + 2 * o, x1 + 2 * o, y + o);
    if constexpr (OW % 8 != 0) mp2_fwd_vec<mp_f8>(x0 + 2 * (OW - 8), x1 + 2 * (OW - 8), y + OW - 8);
    return;
  }
#endif
  if constexpr (OW >= 4) {
    for (int64_t o = 0; o + 4 <= OW; o += 4) mp2_fwd_vec<mp_f4>(x0 + 2 * o, x1 + 2 * o, y + o);
    if constexpr (OW % 4 != 0) mp2_fwd_vec<mp_f4>(x0 + 2 * (OW - 4), x1 + 2 * (OW - 4), y + OW - 4);
  } else {
    for (int64_t o = 0; o < OW; o++) mp2_fwd_one(x0 + 2 * o, x1 + 2 * o, y + o);
  }
}

/** the vector rows of maxpool2x2_grad_row: OW >= L */
template <class V, int64_t OW, bool Relu>
inline void mp2_grad_rows(const float* x0, const float* x1, const float* dy, float* d0, float* d1) {
  constexpr int64_t L = sizeof(V) / sizeof(float), ot = OW - L;
  V t[4] = {};
  if constexpr (OW % L != 0) mp2_grad_vec<V, Relu>(x0 + 2 * ot, x1 + 2 * ot, dy + ot, t);
  for (int64_t o = 0; o + L <= OW; o += L) {
    V r[4];
    mp2_grad_vec<V, Relu>(x0 + 2 * o, x1 + 2 * o, dy + o, r);
    mp2_grad_store(d0 + 2 * o, d1 + 2 * o, r);
  }
  if constexpr (OW % L != 0) mp2_grad_store(d0 + 2 * ot, d1 + 2 * ot, t);
}

/**
 * d0[0, 2*OW), d1[0, 2*OW) = gradient of the 2x2 maxima of rows x0, x1 for dy[0, OW) (Relu: with the
 * relu-grad folded in, see mp2_grad_vec). d0, d1 may be x0, x1 (in place): every chunk of windows is
 * loaded before it is stored, and the last chunk (which overlaps the one before it when the vector
 * width does not divide OW) is loaded before the rows are written and stored after them, rewriting
 * the shared windows with the same bits.
 */
template <int64_t OW, bool Relu = false>
inline void maxpool2x2_grad_row(const float* x0, const float* x1, const float* dy, float* d0, float* d1) {
#if MK_MP8
  if constexpr (OW >= 8) return mp2_grad_rows<mp_f8, OW, Relu>(x0, x1, dy, d0, d1);
#endif
  if constexpr (OW >= 4) {
    mp2_grad_rows<mp_f4, OW, Relu>(x0, x1, dy, d0, d1);
  } else {
    for (int64_t o = 0; o < OW; o++) mp2_grad_one<Relu>(x0 + 2 * o, x1 + 2 * o, dy + o, d0 + 2 * o, d1 + 2 * o);
  }
}

// ------------------------------------------------------------------ optimizer updates
// Element-wise over one contiguous range, with restrict pointers and scalars by value: the generated
// kernels call these from inside an mk::par lambda, where pointers and constants captured by reference
// kept GCC from vectorising (it had to assume a store through p could change them: scalar code).
// The arithmetic is the per-element formula kernels/optim.ts had inline, in the same order; the vector
// body and the scalar tail contract to FMAs alike, so any split gives the same bits. (Against the old
// scalar loop, AdamW's bits moved: GCC now contracts p * decay - update into one fused multiply-subtract.)
// A loop with std::sqrt vectorises only without errno (the backend builds with -fno-math-errno,
// runtime/native/build.ts DEFAULT_CXXFLAGS; sqrtps rounds exactly as sqrtss).

/** the constants of one Adam / AdamW step (bias corrections from t and lr, computed once per kernel) */
struct AdamStep {
  float b1, b2, eps, step, sqrt_bc2;
};

inline AdamStep adam_step(double lr, int64_t t, double b1d, double b2d, float b1, float b2, float eps) {
  const double bc1 = 1.0 - std::pow(b1d, (double)t), bc2 = 1.0 - std::pow(b2d, (double)t);
  return AdamStep{b1, b2, eps, (float)(lr / bc1), (float)std::sqrt(bc2)};
}

/**
 * p, m, v over [0, n) from grad (times gs). decoupled: p *= decay first (AdamW); otherwise g += wd * p.
 */
template <bool Decoupled>
inline void adam_range(float* __restrict p, const float* __restrict grad, float* __restrict m, float* __restrict v, int64_t n,
                       float gs, float wd, float decay, AdamStep s) {
  const float b1 = s.b1, b2 = s.b2, eps = s.eps, step = s.step, sqrt_bc2 = s.sqrt_bc2;
  for (int64_t i = 0; i < n; i++) {
    float g = grad[i] * gs;
    if (Decoupled) p[i] *= decay;
    else g += wd * p[i];
    m[i] = b1 * m[i] + (1.0f - b1) * g;
    v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    p[i] -= step * m[i] / (std::sqrt(v[i]) / sqrt_bc2 + eps);
  }
}

/** one tensor of a multi-tensor Adam step: its own pointers, length and weight decay */
struct AdamSeg {
  float* p;
  const float* grad;
  float* m;
  float* v;
  int64_t n;
  float wd, decay;
};

/**
 * Adam over several tensors as one index space [0, sum of n): one pool wake-up for all of them
 * (the parts split the concatenation; element-wise, so the bits do not depend on the split).
 */
template <bool Decoupled, int NSeg>
inline void adam_multi(mpsc_ctx* ctx, const AdamSeg (&seg)[NSeg], float gs, AdamStep s, int64_t min_parallel) {
  int64_t start[NSeg + 1];
  start[0] = 0;
  for (int j = 0; j < NSeg; j++) start[j + 1] = start[j] + seg[j].n;
  par(ctx, start[NSeg], min_parallel, [&](int64_t b, int64_t e) {
    int j = 0;
    while (start[j + 1] <= b) j++;
    for (; j < NSeg && start[j] < e; j++) {
      const int64_t lo = std::max(b, start[j]) - start[j], hi = std::min(e, start[j + 1]) - start[j];
      const AdamSeg& q = seg[j];
      adam_range<Decoupled>(q.p + lo, q.grad + lo, q.m + lo, q.v + lo, hi - lo, gs, q.wd, q.decay, s);
    }
  });
}

/** SGD over [0, n): g = grad * gs + wd * p; with momentum buf = mu * buf + g, then g = buf (or g + mu * buf: nesterov) */
template <bool Momentum, bool Nesterov>
inline void sgd_range(float* __restrict p, const float* __restrict grad, float* __restrict buf, int64_t n, float gs, float wd,
                      float momentum, float lr) {
  for (int64_t i = 0; i < n; i++) {
    float g = grad[i] * gs + wd * p[i];
    if (Momentum) {
      buf[i] = momentum * buf[i] + g;
      g = Nesterov ? g + momentum * buf[i] : buf[i];
    }
    p[i] -= lr * g;
  }
}

/** acc += scale * g over [0, n) */
inline void accumulate_range(float* __restrict acc, const float* __restrict g, int64_t n, float scale) {
  for (int64_t i = 0; i < n; i++) acc[i] += scale * g[i];
}

// ------------------------------------------------------------------ small math
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

/**
 * exp and erf for the element-wise kernels (compiler/codegen-cpu/scalar_cpp.ts renders the table's
 * exp / erf as these): straight-line float arithmetic the compiler vectorises (a std::exp / std::erf
 * call keeps a loop scalar). exp_v: x = n ln2 + r, |r| <= ln2/2, degree-6 Taylor polynomial of e^r
 * (relative error < 2e-7), times 2^n from the exponent bits; 0 below -87.33 (under FLT_MIN), inf
 * above 88.72, NaN passes through. erf_v: odd; |x| < 0.5: x * its Taylor series to x^12 (error
 * < 1e-9); else 1 - t P(t) exp(-x^2) with t = 1/(1 + 0.3275911 |x|) (Abramowitz & Stegun 7.1.26,
 * absolute error < 1.5e-7); NaN passes through.
 * Both are always inlined: in a large generated model.cc GCC otherwise stops inlining them once its
 * unit-growth limit is reached, and a loop that calls them stays scalar (the gelu kernels ran 4-5x slower).
 */
MK_ALWAYS_INLINE float exp_v(float x) {
  const float xc = std::min(std::max(x, -87.0f), 88.5f);
  const float n = std::nearbyint(xc * 1.44269504088896341f);
  const float r = (xc - n * 0.693145751953125f) - n * 1.42860682030941723e-06f;
  const float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.66666672e-01f + r * (4.16666679e-02f + r * (8.33333377e-03f + r * 1.38888892e-03f)))));
  const int32_t bits = ((int32_t)n + 126) << 23;  // 2^(n-1): n in [-125, 128]
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const float y = p * scale * 2.0f;
  return x < -87.3365479f ? 0.0f : x > 88.7228394f ? INFINITY : x != x ? x : y;
}

MK_ALWAYS_INLINE float erf_v(float x) {
  const float a = std::fabs(x), a2 = x * x;
  const float small = x * (1.12837917f + a2 * (-0.376126389f + a2 * (0.112837917f + a2 * (-0.0268661706f + a2 * (5.22397891e-03f + a2 * (-8.54832702e-04f + a2 * 1.20553447e-04f))))));
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  const float tail = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f)))) * exp_v(-a2);
  const float big = std::copysign(1.0f - tail, x);
  return a < 0.5f ? small : x != x ? x : big;
}

/**
 * gelu and its gradient over a run of floats (the unary / unary_grad kernels of fn gelu and linear's
 * gelu epilogue call these instead of the table's formula; same function, so the fused and separate
 * passes give the same bits). With z = x/sqrt(2), a = |z|, t = 1/(1 + p a), e = exp(-z^2):
 *   1 + erf(z) = z < 0 ? T : 2 - T,  T = t P(t) e   (erfc(a), Abramowitz & Stegun 7.1.26)
 *   gelu(x) = 0.5 x (1 + erf(z)),  gelu'(x) = 0.5 (1 + erf(z)) + x e / sqrt(2 pi)
 * so the gradient shares e with erf, and no small-|z| series is needed (A&S's bound is absolute,
 * |erf error| < 1.5e-7, and 1 + erf is formed without cancellation: near z = 0 it is 2 - T ~ 1, for
 * z < 0 it is T itself). Max error against float64 on a dense grid over [-12, 12] (bench/NOTES.md phase
 * 11b; test/cpu_kernels.test.ts gelu_grid bounds it): gelu 4.2e-7 (at x = 3.1), gelu' 3.0e-7 (at x = 0.05:
 * the polynomial's alternating terms near t = 1 round), every path below.
 * AVX-512: 16 lanes, t from rcp14 + one Newton step (relative error ~1e-7, no division), exp from a
 * degree-6 polynomial on |r| <= ln2/2 scaled by vscalefps (underflows to 0 below e^-104 without a
 * special case), the run's tail by masked loads and stores: every element takes the same arithmetic
 * wherever it sits in the run, so the bits do not depend on how a run is split (threads, GEMM tiles).
 * Elsewhere: the same formulas on 8-float GCC / Clang vectors (a true division; see there).
 * NaN passes through (x is a factor of both results); x, y may be the same array.
 */
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 -Wall: the AVX-512 intrinsics' own _mm512_undefined_ps() passthroughs read as maybe-uninitialized;
// 8-float vectors without AVX change the (never used: always inlined) return ABI
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#if defined(__AVX512F__)
namespace gelu_detail {
/** the shared part: opef = 1 + erf(x/sqrt2) and e = exp(-x^2/2) for 16 lanes */
MK_ALWAYS_INLINE void core16(__m512 x, __m512& opef, __m512& e) {
  const __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(0.707106781186547524f));
  const __m512 a = _mm512_abs_ps(z);
  // e = exp(-z^2): n = round(-z^2 log2 e), r = -z^2 - n ln2 (two-part ln2), e = 2^n p(r)
  const __m512 nz2 = _mm512_max_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), z), z), _mm512_set1_ps(-104.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(nz2, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), nz2);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-06f), r);
  __m512 p = _mm512_set1_ps(1.38888892e-03f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.33333377e-03f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.16666679e-02f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.66666672e-01f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  e = _mm512_scalef_ps(p, n);
  // t = 1/d, d = 1 + p a in [1, 4.3]: |z| clamped at 10 (erfc(10) = 0 in float; keeps d finite for x = inf)
  const __m512 d = _mm512_fmadd_ps(_mm512_min_ps(a, _mm512_set1_ps(10.0f)), _mm512_set1_ps(0.3275911f), _mm512_set1_ps(1.0f));
  const __m512 t0 = _mm512_rcp14_ps(d);
  const __m512 t = _mm512_fmadd_ps(t0, _mm512_fnmadd_ps(d, t0, _mm512_set1_ps(1.0f)), t0);
  __m512 q = _mm512_set1_ps(1.061405429f);
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-1.453152027f));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(1.421413741f));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-0.284496736f));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(0.254829592f));
  const __m512 T = _mm512_mul_ps(_mm512_mul_ps(q, t), e);
  const __mmask16 neg = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ);
  opef = _mm512_mask_blend_ps(neg, _mm512_sub_ps(_mm512_set1_ps(2.0f), T), T);
}

MK_ALWAYS_INLINE __m512 fwd16(__m512 v) {
  __m512 opef, e;
  core16(v, opef, e);
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), v), opef);
}
MK_ALWAYS_INLINE __m512 grad16(__m512 g, __m512 v) {
  __m512 opef, e;
  core16(v, opef, e);
  return _mm512_mul_ps(g, _mm512_fmadd_ps(_mm512_mul_ps(v, e), _mm512_set1_ps(0.398942280401432678f), _mm512_mul_ps(_mm512_set1_ps(0.5f), opef)));
}
}  // namespace gelu_detail

// whole vectors by plain loads and stores, the tail by masked ones (the same arithmetic): masked throughout
// ran 0.42 / 0.47 ns per element (forward / gradient, 64K floats in L2), this 0.36 / 0.42. The inputs are
// prefetched GELU_PF floats ahead within the run: from memory (1M floats, cold) 0.92 / 1.05 -> 0.63 / 0.70 ms,
// the loads alone did not overlap the arithmetic (short runs, linear's epilogue rows of 32, prefetch nothing)
constexpr int64_t GELU_PF = 512;
inline void gelu_fwd(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (i + GELU_PF < n) _mm_prefetch(reinterpret_cast<const char*>(x + i + GELU_PF), _MM_HINT_T0);
    _mm512_storeu_ps(y + i, gelu_detail::fwd16(_mm512_loadu_ps(x + i)));
  }
  if (i < n) {
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, gelu_detail::fwd16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

inline void gelu_grad(const float* dy, const float* x, float* dx, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (i + GELU_PF < n) {
      _mm_prefetch(reinterpret_cast<const char*>(x + i + GELU_PF), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(dy + i + GELU_PF), _MM_HINT_T0);
    }
    _mm512_storeu_ps(dx + i, gelu_detail::grad16(_mm512_loadu_ps(dy + i), _mm512_loadu_ps(x + i)));
  }
  if (i < n) {
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(dx + i, m, gelu_detail::grad16(_mm512_maskz_loadu_ps(m, dy + i), _mm512_maskz_loadu_ps(m, x + i)));
  }
}
#else
// the same formulas on 8-float vectors (GCC / Clang vector extensions; plain float loops with the ?: selects stay
// scalar under GCC's default -ftrapping-math without AVX-512 masks): n by the 1.5 * 2^23 rounding trick, 2^n from
// the exponent bits with the argument clamped at -87 (e = 0 below -87.33, as exp_v), t by a true division; the
// tail through a zero-padded vector, so every element takes the same arithmetic
namespace gelu_detail {
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
MK_ALWAYS_INLINE v8f splat(float a) { return v8f{a, a, a, a, a, a, a, a}; }
MK_ALWAYS_INLINE void core8(v8f x, v8f& opef, v8f& e) {
  const v8f z = x * 0.707106781186547524f;
  const v8f a = z < 0.0f ? -z : z;
  const v8f nz = -(z * z);
  const v8f nc = nz < -87.0f ? splat(-87.0f) : nz;
  const v8f n = (nc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  v8f r = nc - n * 0.693145751953125f;
  r = r - n * 1.42860682030941723e-06f;
  const v8f p = 1.0f + r * (1.0f + r * (0.5f + r * (1.66666672e-01f + r * (4.16666679e-02f + r * (8.33333377e-03f + r * 1.38888892e-03f)))));
  const v8i bits = (__builtin_convertvector(n, v8i) + 127) << 23;
  v8f scale;
  std::memcpy(&scale, &bits, sizeof scale);
  e = nz < -87.3365479f ? splat(0.0f) : p * scale;
  const v8f t = 1.0f / (1.0f + 0.3275911f * (a < 10.0f ? a : splat(10.0f)));
  const v8f T = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f)))) * e;
  opef = z < 0.0f ? T : 2.0f - T;
}
MK_ALWAYS_INLINE v8f fwd8(v8f v) {
  v8f opef, e;
  core8(v, opef, e);
  return 0.5f * v * opef;
}
MK_ALWAYS_INLINE v8f grad8(v8f g, v8f v) {
  v8f opef, e;
  core8(v, opef, e);
  return g * (0.5f * opef + v * e * 0.398942280401432678f);
}
}  // namespace gelu_detail

inline void gelu_fwd(const float* x, float* y, int64_t n) {
  using gelu_detail::v8f;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8f v;
    std::memcpy(&v, x + i, sizeof v);
    v = gelu_detail::fwd8(v);
    std::memcpy(y + i, &v, sizeof v);
  }
  if (i < n) {
    v8f v = {};
    std::memcpy(&v, x + i, sizeof(float) * (n - i));
    v = gelu_detail::fwd8(v);
    std::memcpy(y + i, &v, sizeof(float) * (n - i));
  }
}

inline void gelu_grad(const float* dy, const float* x, float* dx, int64_t n) {
  using gelu_detail::v8f;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8f g, v;
    std::memcpy(&g, dy + i, sizeof g);
    std::memcpy(&v, x + i, sizeof v);
    v = gelu_detail::grad8(g, v);
    std::memcpy(dx + i, &v, sizeof v);
  }
  if (i < n) {
    v8f g = {}, v = {};
    std::memcpy(&g, dy + i, sizeof(float) * (n - i));
    std::memcpy(&v, x + i, sizeof(float) * (n - i));
    v = gelu_detail::grad8(g, v);
    std::memcpy(dx + i, &v, sizeof(float) * (n - i));
  }
}
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// ------------------------------------------------------------------ blocked attention
// Layout: a tile of scores is held transposed, st[j][i] (key j, query i), with the queries across the
// lanes of a vector, so every per-query step of the softmax (mask, running max, exp, row sum, the online
// rescale, lse / delta) is a lane-wise vector operation with no horizontal reduction. The products are
// register-blocked micro-kernels over L1-resident tiles, like the sgemm's (runtime/cpp/fast):
//  - att_lanes: S^T = K Q^T (and, backward, dP^T = V dO^T): JB keys x ATT_BR queries of accumulators; per d
//    the query tile's transposed row Q^T[d] is loaded as vectors and each key's k[d] broadcast;
//  - att_rows: row-major outputs O += P V, dQ += dS K, dV += P^T dO, dK += dS^T Q: IB rows x D columns of
//    accumulators; per step one row of the right operand is loaded as vectors and each output row's
//    coefficient (an element of st) broadcast.
// Tile sizes: ATT_BR queries (2 vectors of ATT_AW lanes) x ATT_BC keys. The head size D and the operands'
// row strides (D, or 3C / C when q, k, v are read in place from a packed projection) are template
// arguments (shapes are static), so every loop over D has a constant trip count, and the code (so the
// bits) of a layout never depends on runtime pointer checks. Every output element is one thread's fixed
// chain (over d for a score; over keys in increasing order, tile by tile, for O and dQ; over queries in
// increasing order, tile by tile, for dK and dV), so results are the same bits for any thread count.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
// internal always-inlined vector helpers: GCC's note that vector arguments change the ABI without AVX is
// noise. Not popped: the helpers are templates, instantiated (and so warned about) at the end of the
// translation unit, where the diagnostic state in force is the one that counts.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#if defined(__AVX512F__)
constexpr int64_t ATT_AW = 16;  // lanes of one vector (zmm)
#else
constexpr int64_t ATT_AW = 8;   // ymm, or two NEON q registers
#endif
constexpr int64_t ATT_NV = 2, ATT_BR = ATT_NV * ATT_AW, ATT_BC = 64;
/** accumulator vectors one micro-kernel keeps in registers (32 zmm / 16 ymm in all) */
constexpr int64_t ATT_ACC = ATT_AW == 16 ? 16 : 12;

template <int64_t W>
struct attv {
  typedef float f __attribute__((vector_size(W * 4)));
  typedef int32_t i __attribute__((vector_size(W * 4)));
};
using avf = attv<ATT_AW>::f;
using avi = attv<ATT_AW>::i;

/** x in every lane (an initializer list of copies: one broadcast, where a lane-by-lane loop became masked inserts) */
template <class V, class S, size_t... L>
MK_ALWAYS_INLINE V att_splat_(S x, std::index_sequence<L...>) { return V{((void)L, x)...}; }
template <class V, class S>
MK_ALWAYS_INLINE V att_splat(S x) { return att_splat_<V>(x, std::make_index_sequence<sizeof(V) / sizeof(S)>()); }

/** exp_v lane-wise: the same reduction, polynomial and limits; n rounded to nearest by adding and subtracting 1.5 * 2^23 */
MK_ALWAYS_INLINE avf exp_av(const avf& x) {
  const avf lo = att_splat<avf>(-87.0f), hi = att_splat<avf>(88.5f), magic = att_splat<avf>(12582912.0f);  // 1.5 * 2^23
  avf xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const avf n = (xc * 1.44269504088896341f + magic) - magic;  // round to nearest: |n| <= 128
  const avf r = (xc - n * 0.693145751953125f) - n * 1.42860682030941723e-06f;
  const avf p = 1.0f + r * (1.0f + r * (0.5f + r * (1.66666672e-01f + r * (4.16666679e-02f + r * (8.33333377e-03f + r * 1.38888892e-03f)))));
  const avi bits = (__builtin_convertvector(n, avi) + 126) << 23;  // 2^(n-1)
  avf sc;
  std::memcpy(&sc, &bits, sizeof sc);
  avf y = p * sc * 2.0f;
  y = x < att_splat<avf>(-87.3365479f) ? att_splat<avf>(0.0f) : y;
  y = x > att_splat<avf>(88.7228394f) ? att_splat<avf>(INFINITY) : y;
  return x != x ? x : y;
}

/** first key hidden from query t (exclusive end of its visible keys): S, or t + 1 + (S - T) when causal */
inline int64_t att_key_end(bool causal, int64_t t, int64_t T, int64_t S) { return causal ? std::min(S, t + 1 + S - T) : S; }

/** att_lanes / att_rows call tick() after each block of rows (AttPrefetch paces its prefetches so); by default nothing */
struct AttNoTick {
  void operator()() const {}
};

/** what att_mk starts its accumulators from */
enum AttInit : int { ATT_ZERO = 0, ATT_LOAD = 1, ATT_RESCALE = 2 };

/**
 * The micro-kernel of every attention product: R rows x ND vectors of W lanes of c in registers,
 * c[r][n W ..] = (0, or c's values, or c's values times rs[r]) + sum over k in [k0, k1) in order of
 * a[r ar + k ak] (broadcast) * b[k ldb + n W ..] (loaded as vectors); c rows ldc floats apart.
 */
template <int64_t R, int64_t ND, int64_t W, int init>
MK_ALWAYS_INLINE void att_mk(float* c, int64_t ldc, const float* rs, const float* a, int64_t ar, int64_t ak, const float* b, int64_t ldb,
                             int64_t k0, int64_t k1) {
  using V = typename attv<W>::f;
  V acc[R][ND];
#pragma GCC unroll 16
  for (int64_t r = 0; r < R; r++) {
    const V s = att_splat<V>(init == ATT_RESCALE ? rs[r] : 1.0f);
#pragma GCC unroll 16
    for (int64_t n = 0; n < ND; n++) {
      if constexpr (init == ATT_ZERO) acc[r][n] = att_splat<V>(0.0f);
      else if constexpr (init == ATT_LOAD) acc[r][n] = vload<V>(c + r * ldc + n * W);
      else acc[r][n] = vload<V>(c + r * ldc + n * W) * s;
    }
  }
  for (int64_t k = k0; k < k1; k++) {
    V bv[ND];
#pragma GCC unroll 16
    for (int64_t n = 0; n < ND; n++) bv[n] = vload<V>(b + k * ldb + n * W);
#pragma GCC unroll 16
    for (int64_t r = 0; r < R; r++) {
      const V x = att_splat<V>(a[r * ar + k * ak]);
#pragma GCC unroll 16
      for (int64_t n = 0; n < ND; n++) acc[r][n] += x * bv[n];
    }
  }
#pragma GCC unroll 16
  for (int64_t r = 0; r < R; r++)
#pragma GCC unroll 16
    for (int64_t n = 0; n < ND; n++) vstore(c + r * ldc + n * W, acc[r][n]);
}

/**
 * Lanes product: c[j][i] = sum over d in order of a[j][d] * bt[d][i] for the rows j of a (D floats,
 * lda apart) and the ATT_BR lanes i of bt's rows (row stride ldb); c rows ATT_BR floats apart. Rows
 * [0, n0) for every lane; rows [n0, n) only for the last vector's lanes (the first vectors' queries do not
 * see those keys: on the causal diagonal; their c lanes are left as they were). Blocks of the most rows
 * the registers hold, then single rows.
 */
template <int64_t D, class Tick = AttNoTick>
inline void att_lanes(const float* a, int64_t lda, const float* bt, int64_t ldb, float* c, int64_t n0, int64_t n, Tick&& tick = Tick()) {
  constexpr int64_t JB = ATT_ACC / ATT_NV, JL = ATT_ACC, L = (ATT_NV - 1) * ATT_AW;
  n0 = std::min(n0, n);
  int64_t j = 0;
  for (; j + JB <= n0; j += JB) {
    att_mk<JB, ATT_NV, ATT_AW, ATT_ZERO>(c + j * ATT_BR, ATT_BR, nullptr, a + j * lda, lda, 1, bt, ldb, 0, D);
    tick();
  }
  for (; j < n0; j++) att_mk<1, ATT_NV, ATT_AW, ATT_ZERO>(c + j * ATT_BR, ATT_BR, nullptr, a + j * lda, lda, 1, bt, ldb, 0, D);
  for (; j + JL <= n; j += JL) {
    att_mk<JL, 1, ATT_AW, ATT_ZERO>(c + j * ATT_BR + L, ATT_BR, nullptr, a + j * lda, lda, 1, bt + L, ldb, 0, D);
    tick();
  }
  for (; j < n; j++) att_mk<1, 1, ATT_AW, ATT_ZERO>(c + j * ATT_BR + L, ATT_BR, nullptr, a + j * lda, lda, 1, bt + L, ldb, 0, D);
}

/** vector width along a row of D floats for att_rows: the widest of ATT_AW, 8, 4, 1 that divides D */
constexpr int64_t att_dw(int64_t D) { return D % ATT_AW == 0 ? ATT_AW : D % 8 == 0 ? 8 : D % 4 == 0 ? 4 : 1; }

/**
 * Rows product: for the n rows r of c (D floats each, ldc apart), c[r][:] = c[r][:] (times rs[r] when
 * rescale) + sum over k in [k0, k1) in order of p[r pr + k pk] * b[k][:] (b rows of D floats, ldb apart).
 * Blocks of the most rows the registers hold, then single rows; range(first, last) gives a block's
 * [k0, k1) (the caller's bounds: the coefficients outside a row's own range are zeros).
 */
/** rows per att_rows block: as many as the accumulator registers hold */
template <int64_t D>
constexpr int64_t att_rows_ib() { return std::max<int64_t>(1, ATT_ACC / (D / att_dw(D))); }

template <int64_t D, bool rescale, class Range, class Tick = AttNoTick>
inline void att_rows(float* c, int64_t ldc, const float* rs, const float* p, int64_t pr, int64_t pk, const float* b, int64_t ldb, int64_t n,
                     Range range, Tick&& tick = Tick()) {
  constexpr int64_t W = att_dw(D), ND = D / W, IB = att_rows_ib<D>();
  constexpr int init = rescale ? ATT_RESCALE : ATT_LOAD;
  int64_t r = 0;
  for (; r + IB <= n; r += IB) {
    const std::pair<int64_t, int64_t> k = range(r, r + IB - 1);
    att_mk<IB, ND, W, init>(c + r * ldc, ldc, rescale ? rs + r : nullptr, p + r * pr, pr, pk, b, ldb, k.first, k.second);
    tick();
  }
  for (; r < n; r++) {
    const std::pair<int64_t, int64_t> k = range(r, r);
    att_mk<1, ND, W, init>(c + r * ldc, ldc, rescale ? rs + r : nullptr, p + r * pr, pr, pk, b, ldb, k.first, k.second);
  }
}

/** 64-byte aligned start inside a scratch block of at least n + 16 floats */
inline float* att_align(float* p) { return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63)); }

/**
 * dst[d ld + t] = src[t ss + d] * mul for t < rows, d < D (a tile of rows transposed: queries across the
 * lanes): 8 x 8 blocks transposed in registers (mpsc_fast's transpose8x8), the rest one value at a time
 */
template <int64_t D>
inline void att_transpose(const float* src, int64_t ss, int64_t rows, float* dst, int64_t ld, float mul) {
  using mpsc_fast::detail::v8f;
  const int64_t nb = D % 8 == 0 ? rows / 8 : 0;  // 8 x 8 blocks of rows
  for (int64_t b = 0; b < nb; b++)
    for (int64_t d = 0; d < D; d += 8) {
      v8f r[8];
      for (int64_t i = 0; i < 8; i++) r[i] = vload<v8f>(src + (8 * b + i) * ss + d) * mul;
      mpsc_fast::detail::transpose8x8(r);
      for (int64_t i = 0; i < 8; i++) vstore(dst + (d + i) * ld + 8 * b, r[i]);
    }
  for (int64_t t = 8 * nb; t < rows; t++)
    for (int64_t d = 0; d < D; d++) dst[d * ld + t] = src[t * ss + d] * mul;
}

/** prefetch the cache lines of the floats [p, p + n) into L2 (rw 1: for writing) */
template <int rw>
MK_ALWAYS_INLINE void att_prefetch(const float* p, int64_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), e = reinterpret_cast<uintptr_t>(p + n);
  for (uintptr_t l = a & ~uintptr_t(63); l < e; l += 64) __builtin_prefetch(reinterpret_cast<const void*>(l), rw, 2);
}

/**
 * the work a thread does next (packed layout, rows 3C floats apart: each row of a head a separate miss),
 * its rows prefetched into L2 between the blocks of this item's products (AttPrefetch), so its misses
 * overlap this item's arithmetic.
 * AttNextTile: the next (head, query tile) of the forward; AttNext: the next head of the backward.
 */
struct AttNextTile {
  const float *q, *k, *v;
  float* o;
  int64_t t0, t1;
};
struct AttNext {
  const float *dO, *q, *k, *v, *o;
  float *dq, *dk, *dv;
};

/**
 * Rows of the next work item to prefetch into L2 (packed layout), issued a few at a time between the blocks
 * of this item's products (as att_lanes / att_rows's tick), so the misses overlap the arithmetic instead of
 * queueing behind each other: pace(blocks) spreads them evenly over about that many ticks, rest() issues
 * whatever is left.
 */
class AttPrefetch {
  struct Stream {
    const float* p;
    int64_t stride, rows;
    bool write;
  };
  Stream s_[8];
  int n_ = 0, cur_ = 0;
  int64_t row_ = 0, per_ = 0, cols_;

 public:
  explicit AttPrefetch(int64_t cols) : cols_(cols) {}
  /** rows [0, rows) of p, stride floats apart (write: to be written) */
  void add(const float* p, int64_t stride, int64_t rows, bool write) { s_[n_++] = Stream{p, stride, rows, write}; }
  void pace(int64_t blocks) {
    int64_t total = 0;
    for (int i = 0; i < n_; i++) total += s_[i].rows;
    per_ = (total + std::max<int64_t>(1, blocks) - 1) / std::max<int64_t>(1, blocks);
  }
  void operator()() {
    for (int64_t i = 0; i < per_ && cur_ < n_; i++) {
      const Stream& st = s_[cur_];
      if (st.write) att_prefetch<1>(st.p + row_ * st.stride, cols_);
      else att_prefetch<0>(st.p + row_ * st.stride, cols_);
      if (++row_ == st.rows) {
        row_ = 0;
        cur_++;
      }
    }
  }
  void rest() {
    per_ = INT64_MAX;
    (*this)();
  }
};

/**
 * Forward of one (head, query tile): q [T][D], k and v [S][D] of one head, rows sq / sk / sv floats
 * apart (D for separate [N,H,T,D] tensors; 3C when read in place from a packed [N,T,3C] projection),
 * o [T][D] rows so apart; queries t0..t1-1 (at most ATT_BR).
 * Per key tile: st = (scale Q) K^T transposed (att_lanes; keys no query of the tile sees are not
 * computed, keys only the last vector's queries see computed for it alone), hidden keys masked to -inf,
 * the running max m, rescale corr = exp(m_old - m_new), P = exp(st - m) and the row sums l as lane-wise
 * vectors, then acc = acc * corr + P V (att_rows, each row block up to the last key its last row sees).
 * o = acc / l, lse = m + log l. next (or null): the item the thread does next, its rows prefetched into
 * L2 between the blocks of this one's products. ws: attention_fwd_ws(D) floats.
 */
template <int64_t D, int64_t sq = D, int64_t sk = D, int64_t sv = D, int64_t so = D>
inline void attention_fwd_tile(const float* q, const float* k, const float* v, float* o, float* lse, int64_t T, int64_t S,
                               float scale, bool causal, int64_t t0, int64_t t1, float* ws, const AttNextTile* next = nullptr) {
  float* st = att_align(ws);          // [ATT_BC][ATT_BR] scores, then probabilities, transposed
  float* qt = st + ATT_BC * ATT_BR;   // [D][ATT_BR] the query tile transposed, times scale; zero past t1
  float* acc = qt + D * ATT_BR;       // [ATT_BR][D] the unnormalised outputs
  const int64_t nr = t1 - t0;
  att_transpose<D>(q + t0 * sq, sq, nr, qt, ATT_BR, scale);
  for (int64_t d = 0; d < D; d++)
    for (int64_t i = nr; i < ATT_BR; i++) qt[d * ATT_BR + i] = 0.0f;
  std::memset(acc, 0, sizeof(float) * ATT_BR * D);
  // each lane's key end (the lanes past t1 copy the last row's: finite scores of zero, never read)
  alignas(64) int32_t lim_s[ATT_BR];
  alignas(64) float corr_s[ATT_BR];
  for (int64_t i = 0; i < ATT_BR; i++) lim_s[i] = (int32_t)att_key_end(causal, t0 + std::min(i, nr - 1), T, S);
  avi lim[ATT_NV];
  avf m[ATT_NV], l[ATT_NV];
  for (int64_t u = 0; u < ATT_NV; u++) {
    lim[u] = vload<avi>(lim_s + u * ATT_AW);
    m[u] = att_splat<avf>(-INFINITY);
    l[u] = att_splat<avf>(0.0f);
  }
  const int64_t kend = att_key_end(causal, t1 - 1, T, S);  // keys past it hidden from every row
  const int64_t kall = att_key_end(causal, t0, T, S);      // keys before it seen by every row
  // the next item's rows, prefetched between the blocks of this one's products (paced over about as many blocks)
  AttPrefetch pf(D);
  if (next) {
    const int64_t nkend = att_key_end(causal, next->t1 - 1, T, S);
    pf.add(next->q + next->t0 * sq, sq, next->t1 - next->t0, false);
    pf.add(next->k, sk, nkend, false);
    pf.add(next->v, sv, nkend, false);
    pf.add(next->o + next->t0 * so, so, next->t1 - next->t0, true);
    int64_t blocks = 0;
    for (int64_t u0 = 0; u0 < kend; u0 += ATT_BC) blocks += std::min(ATT_BC, kend - u0) / (ATT_ACC / ATT_NV) + nr / att_rows_ib<D>();
    pf.pace(blocks);
  }
  const auto tick = [&pf, next] {
    if (next) pf();
  };
  for (int64_t u0 = 0; u0 < kend; u0 += ATT_BC) {
    const int64_t nc = std::min(ATT_BC, kend - u0);
    const float* kt = k + u0 * sk;
    const float* vt = v + u0 * sv;
    // keys the first vectors' queries see (the last vector's see all nc)
    const int64_t n0 = causal ? std::min(nc, std::max<int64_t>(0, att_key_end(causal, t0 + std::min(nr, ATT_BR - ATT_AW) - 1, T, S) - u0)) : nc;
    att_lanes<D>(kt, sk, qt, ATT_BR, st, n0, nc, tick);
    // mask (only a tile some row does not see whole) and the new running max
    avf mn[ATT_NV];
    for (int64_t u = 0; u < ATT_NV; u++) mn[u] = m[u];
    if (u0 + nc > kall) {
      const avf ninf = att_splat<avf>(-INFINITY);
      for (int64_t j = 0; j < nc; j++)
        for (int64_t u = 0; u < ATT_NV; u++) {
          avf s = vload<avf>(st + j * ATT_BR + u * ATT_AW);
          s = att_splat<avi>((int32_t)(u0 + j)) < lim[u] ? s : ninf;
          vstore(st + j * ATT_BR + u * ATT_AW, s);
          mn[u] = mn[u] < s ? s : mn[u];
        }
    } else {
      for (int64_t j = 0; j < nc; j++)
        for (int64_t u = 0; u < ATT_NV; u++) {
          const avf s = vload<avf>(st + j * ATT_BR + u * ATT_AW);
          mn[u] = mn[u] < s ? s : mn[u];
        }
    }
    // every row sees key 0 (causal needs S >= T), so mn is finite after the first tile
    avf rsum[ATT_NV];
    for (int64_t u = 0; u < ATT_NV; u++) {
      const avf c = exp_av(m[u] - mn[u]);  // 0 on the first tile (m = -inf)
      vstore(corr_s + u * ATT_AW, c);
      l[u] *= c;
      m[u] = mn[u];
      rsum[u] = att_splat<avf>(0.0f);
    }
    for (int64_t j = 0; j < nc; j++)
      for (int64_t u = 0; u < ATT_NV; u++) {
        const avf pj = exp_av(vload<avf>(st + j * ATT_BR + u * ATT_AW) - mn[u]);
        vstore(st + j * ATT_BR + u * ATT_AW, pj);
        rsum[u] += pj;
      }
    for (int64_t u = 0; u < ATT_NV; u++) l[u] += rsum[u];
    // acc rows: rescale, then P V up to the last key the block's last row sees (later keys' P are 0)
    att_rows<D, true>(acc, D, corr_s, st, 1, ATT_BR, vt, sv, nr, [&](int64_t, int64_t ilast) {
      return std::pair<int64_t, int64_t>(0, std::max<int64_t>(0, std::min(nc, att_key_end(causal, t0 + ilast, T, S) - u0)));
    }, tick);
  }
  alignas(64) float l_s[ATT_BR], m_s[ATT_BR];
  for (int64_t u = 0; u < ATT_NV; u++) {
    vstore(l_s + u * ATT_AW, l[u]);
    vstore(m_s + u * ATT_AW, m[u]);
  }
  pf.rest();
  for (int64_t i = 0; i < nr; i++) {
    const float inv = 1.0f / l_s[i];
    for (int64_t d = 0; d < D; d++) o[(t0 + i) * so + d] = acc[i * D + d] * inv;
    lse[t0 + i] = m_s[i] + std::log(l_s[i]);
  }
}

/** floats of scratch attention_fwd_tile needs */
inline int64_t attention_fwd_ws(int64_t D) { return 16 + ATT_BC * ATT_BR + 2 * D * ATT_BR; }

/**
 * Backward of one head, blocked like the forward: for each key tile (its dk, dv rows owned here) and
 * each query tile that sees it, st = (scale Q) K^T and dP^T = V dO^T (att_lanes, transposed: queries
 * across the lanes), P = exp(st - lse) (0 where hidden) and dS = scale P (dP - delta) with delta[t] =
 * do[t].o[t] lane-wise, then dv += P^T do, dk += dS^T q, dq += dS k (att_rows, skipping the rows /
 * keys where P is 0 by causality). dq, dk, dv are overwritten. Rows sq / sk / sv / so floats apart
 * (as the forward's), read and written in place: the micro-kernels' broadcast and row operands come
 * from L2 where strided rows alias in L1, which measured cheaper than copying the head to contiguous
 * rows and back (phase 11a v6). ws: attention_bwd_ws(T, D) floats.
 */
template <int64_t D, int64_t sq = D, int64_t sk = D, int64_t sv = D, int64_t so = D>
inline void attention_bwd_head_c(const float* dO, const float* q, const float* k, const float* v, const float* o, const float* lse,
                                 float* dq, float* dk, float* dv, int64_t T, int64_t S, float scale, bool causal, float* ws,
                                 AttPrefetch* pf = nullptr) {
  const int64_t Tv = (T + ATT_AW - 1) / ATT_AW * ATT_AW, Tp = Tv + ATT_BR;  // whole vectors; room for a last query tile
  float* pt = att_align(ws);          // [ATT_BC][ATT_BR] P, transposed
  float* dst = pt + ATT_BC * ATT_BR;  // [ATT_BC][ATT_BR] dP, then dS, transposed
  float* qt = dst + ATT_BC * ATT_BR;  // [D][Tp] q * scale transposed, zero past T
  float* gt = qt + D * Tp;            // [D][Tp] do transposed, zero past T
  float* ot = gt + D * Tp;            // [D][Tv] o transposed (for delta), zero past T
  float* lp = ot + D * Tv;            // [Tp] lse, zero past T
  float* dl = lp + Tp;                // [Tp] delta, zero past T
  for (int64_t t = 0; t < T; t++) std::memset(dq + t * sq, 0, sizeof(float) * D);
  for (int64_t u = 0; u < S; u++) {
    std::memset(dk + u * sk, 0, sizeof(float) * D);
    std::memset(dv + u * sv, 0, sizeof(float) * D);
  }
  att_transpose<D>(q, sq, T, qt, Tp, scale);
  att_transpose<D>(dO, so, T, gt, Tp, 1.0f);
  att_transpose<D>(o, so, T, ot, Tv, 1.0f);
  for (int64_t d = 0; d < D; d++) {
    std::fill(qt + d * Tp + T, qt + (d + 1) * Tp, 0.0f);
    std::fill(gt + d * Tp + T, gt + (d + 1) * Tp, 0.0f);
    std::fill(ot + d * Tv + T, ot + (d + 1) * Tv, 0.0f);
  }
  for (int64_t t = 0; t < Tp; t++) lp[t] = t < T ? lse[t] : 0.0f;
  // delta[t] = sum over d in order of do[t][d] o[t][d], the rows across the lanes
  for (int64_t t = 0; t < Tv; t += ATT_AW) {
    avf s = att_splat<avf>(0.0f);
    for (int64_t d = 0; d < D; d++) s += vload<avf>(gt + d * Tp + t) * vload<avf>(ot + d * Tv + t);
    vstore(dl + t, s);
  }
  std::fill(dl + Tv, dl + Tp, 0.0f);
  const auto tick = [pf] {
    if (pf) (*pf)();
  };
  if (pf) {  // the blocks of products ahead, to pace the prefetches
    int64_t blocks = 0;
    for (int64_t u0 = 0; u0 < S; u0 += ATT_BC)
      for (int64_t t0 = causal ? std::max<int64_t>(0, u0 - (S - T)) : 0; t0 < T; t0 += ATT_BR) {
        const int64_t nr = std::min(ATT_BR, T - t0), jn = std::min(std::min(ATT_BC, S - u0), att_key_end(causal, t0 + nr - 1, T, S) - u0);
        blocks += 2 * (jn / (ATT_ACC / ATT_NV)) + (2 * jn + nr) / att_rows_ib<D>();
      }
    pf->pace(blocks);
  }
  alignas(64) int32_t lim_s[ATT_BR];
  for (int64_t u0 = 0; u0 < S; u0 += ATT_BC) {
    const int64_t nc = std::min(ATT_BC, S - u0);
    const float* kt = k + u0 * sk;
    // the first query that sees key u0: t + 1 + S - T > u0
    const int64_t tfirst = causal ? std::max<int64_t>(0, u0 - (S - T)) : 0;
    for (int64_t t0 = tfirst; t0 < T; t0 += ATT_BR) {
      const int64_t nr = std::min(ATT_BR, T - t0);
      const int64_t jn = std::min(nc, att_key_end(causal, t0 + nr - 1, T, S) - u0);  // keys any row of the tile sees
      // keys the first vectors' queries see (the last vector's see all jn)
      const int64_t n0 = causal ? std::min(jn, std::max<int64_t>(0, att_key_end(causal, t0 + std::min(nr, ATT_BR - ATT_AW) - 1, T, S) - u0)) : jn;
      att_lanes<D>(kt, sk, qt + t0, Tp, pt, n0, jn, tick);
      att_lanes<D>(v + u0 * sv, sv, gt + t0, Tp, dst, n0, jn, tick);
      // lanes past T: key end 0, so P = dS = 0 there
      for (int64_t i = 0; i < ATT_BR; i++) lim_s[i] = i < nr ? (int32_t)att_key_end(causal, t0 + i, T, S) : 0;
      for (int64_t u = 0; u < ATT_NV; u++) {
        const avi lim = vload<avi>(lim_s + u * ATT_AW);
        const avf L = vload<avf>(lp + t0 + u * ATT_AW), dlt = vload<avf>(dl + t0 + u * ATT_AW);
        const int64_t jv = u < ATT_NV - 1 ? n0 : jn;  // keys past jv: not computed for these lanes, P = dS = 0
        for (int64_t j = 0; j < jv; j++) {
          float* pj = pt + j * ATT_BR + u * ATT_AW;
          float* sj = dst + j * ATT_BR + u * ATT_AW;
          const avf p = att_splat<avi>((int32_t)(u0 + j)) < lim ? exp_av(vload<avf>(pj) - L) : att_splat<avf>(0.0f);
          vstore(pj, p);
          vstore(sj, p * (vload<avf>(sj) - dlt) * scale);
        }
        for (int64_t j = jv; j < jn; j++) {
          vstore(pt + j * ATT_BR + u * ATT_AW, att_splat<avf>(0.0f));
          vstore(dst + j * ATT_BR + u * ATT_AW, att_splat<avf>(0.0f));
        }
      }
      // dv[u] += sum_t P[t,u] do[t], dk[u] += sum_t dS[t,u] q[t]: from the first row that sees the block's first key
      const auto qrange = [&](int64_t j, int64_t) {
        return std::pair<int64_t, int64_t>(causal ? std::min(nr, std::max<int64_t>(0, u0 + j - (S - T) - t0)) : 0, int64_t(nr));
      };
      att_rows<D, false>(dv + u0 * sv, sv, nullptr, pt, ATT_BR, 1, dO + t0 * so, so, jn, qrange, tick);
      att_rows<D, false>(dk + u0 * sk, sk, nullptr, dst, ATT_BR, 1, q + t0 * sq, sq, jn, qrange, tick);
      // dq[t] += sum_u dS[t,u] k[u]: up to the last key the block's last row sees
      att_rows<D, false>(dq + t0 * sq, sq, nullptr, dst, 1, ATT_BR, kt, sk, nr, [&](int64_t, int64_t ilast) {
        return std::pair<int64_t, int64_t>(0, std::max<int64_t>(0, std::min(jn, att_key_end(causal, t0 + ilast, T, S) - u0)));
      }, tick);
    }
  }
}

/** floats of scratch attention_bwd_head needs */
inline int64_t attention_bwd_ws(int64_t T, int64_t D) {
  const int64_t Tv = (T + ATT_AW - 1) / ATT_AW * ATT_AW, Tp = Tv + ATT_BR;
  return 16 + 2 * ATT_BC * ATT_BR + (2 * D + 2) * Tp + D * Tv;
}

/**
 * attention_bwd_head_c with the prefetches of `next` (the operands of the head the thread does next, or
 * null): their rows are fetched into L2 a few at a time between the blocks of this head's products
 * (AttPrefetch), so the misses on the next head's strided rows overlap this head's arithmetic.
 * ws: attention_bwd_ws(T, D) floats.
 */
template <int64_t D, int64_t sq = D, int64_t sk = D, int64_t sv = D, int64_t so = D>
inline void attention_bwd_head(const float* dO, const float* q, const float* k, const float* v, const float* o, const float* lse,
                               float* dq, float* dk, float* dv, int64_t T, int64_t S, float scale, bool causal, float* ws,
                               const AttNext* next = nullptr) {
  AttPrefetch pf(D);
  if (next) {
    pf.add(next->q, sq, T, false);
    pf.add(next->dO, so, T, false);
    pf.add(next->o, so, T, false);
    pf.add(next->k, sk, S, false);
    pf.add(next->v, sv, S, false);
    pf.add(next->dq, sq, T, true);
    pf.add(next->dk, sk, S, true);
    pf.add(next->dv, sv, S, true);
  }
  attention_bwd_head_c<D, sq, sk, sv, so>(dO, q, k, v, o, lse, dq, dk, dv, T, S, scale, causal, ws, next ? &pf : nullptr);
  pf.rest();
}

}  // namespace mk

#endif
