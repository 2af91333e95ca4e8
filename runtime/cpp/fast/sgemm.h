/*
 * sgemm.h: portable blocked single-precision GEMM for the CPU backend (header-only, C++17).
 *
 *   C = alpha * op(A) * op(B) + beta * C        (row-major; op(X) = X or X^T)
 *   then, optionally: C += bias (per row or per column of C), C = max(C, 0)
 *
 *   op(A) is M x K: A is M x K (lda >= K) or, with transA, K x M (lda >= M).
 *   op(B) is K x N: B is K x N (ldb >= N) or, with transB, N x K (ldb >= K).
 *   C is M x N (ldc >= N). With beta == 0, C is not read (it may hold NaN garbage).
 *
 * Design (Goto / BLIS): A is packed into MC x KC blocks of MR-row micro-panels, B into
 * KC x NC blocks of NR-column micro-panels, and an MR x NR register-tiled micro-kernel
 * (GCC/clang vector extensions: g++ -march=native emits AVX2/AVX-512 FMAs, clang on arm64
 * emits NEON fmla) accumulates over KC. Edge tiles are zero-padded in the packed panels
 * and masked on store, so any M, N, K >= 0 works. A plain (not transposed) A is not packed: the
 * micro-kernel broadcasts from its rows in place (detail::direct_a).
 *
 * Threading without owning threads: sgemm_part(..., part, nparts, ws) computes a disjoint
 * share of C (a contiguous range of MR-row tiles or NR-column tiles, whichever axis has
 * more tiles). Run part = 0..nparts-1 on the caller's own pool, one per thread, each with
 * its own workspace. Every element of C is computed by the same sequence of operations
 * whatever nparts is, so results are bitwise identical for any thread count.
 *
 * Narrow outputs: with beta == 0, no a_sums and N below one micro-tile (detail::swap_pays), a part
 * computes its share of C^T = op(B)^T op(A)^T into its workspace and copies it back transposed
 * (a 256 x 10 product: 8 tiles of 32 columns instead of 32 tiles three-quarters padding). Each
 * element is the same fused multiply-add chain with its factors swapped: the same bits.
 *
 * Row blocks outer: a plain A over several K blocks with a small op(B) (detail::ic_outer) runs each row
 * block through all K blocks before the next, op(B) packed once; same bits (see gemm_block).
 *
 * Workspace: sgemm_workspace_bytes(M, N, K) bytes per concurrently running part, 64-byte
 * aligned (pass it as ws). Pass ws = nullptr to use a thread_local buffer that grows once
 * and is then reused (no allocation per call in steady state).
 */
#ifndef MPSC_FAST_SGEMM_H
#define MPSC_FAST_SGEMM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "amx.h"

// Without AVX (e.g. a portable x86-64 build) GCC warns that 32-byte vector arguments change the
// ABI; these helpers are internal and inlined, so the warning is noise.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace mpsc_fast {

/**
 * vector width in floats: 16 (one zmm) where the compile flags allow AVX-512, else 8 (two NEON q
 * registers on arm64, one ymm with AVX2). -DMPSC_FAST_VW=8 forces the narrow kernel.
 * micro-tile: MR rows x NR = 2*VW columns of C held in registers (AVX-512: 8 x 32 in 16 zmm;
 * otherwise 6 x 16 in 12 vectors).
 */
#ifndef MPSC_FAST_VW
#if defined(__AVX512F__)
#define MPSC_FAST_VW 16
#else
#define MPSC_FAST_VW 8
#endif
#endif
constexpr int64_t VW = MPSC_FAST_VW;
static_assert(VW == 8 || VW == 16, "MPSC_FAST_VW must be 8 or 16");
#ifndef MPSC_FAST_MR
#define MPSC_FAST_MR (MPSC_FAST_VW == 16 ? 8 : 6)
#endif
constexpr int64_t MR = MPSC_FAST_MR;
constexpr int64_t NR = 2 * VW;
#ifndef MPSC_FAST_MC
#define MPSC_FAST_MC 144
#endif
#ifndef MPSC_FAST_KC
#define MPSC_FAST_KC 256
#endif
#ifndef MPSC_FAST_NC
#define MPSC_FAST_NC 2048
#endif
constexpr int64_t MC = MPSC_FAST_MC;
constexpr int64_t KC = MPSC_FAST_KC;
constexpr int64_t NC = MPSC_FAST_NC;
static_assert(MC % MR == 0, "MC must be a multiple of MR");

enum BiasKind : int { BIAS_NONE = 0, BIAS_ROW = 1, BIAS_COL = 2 };

/**
 * fused epilogue applied once the full K sum is in C: C += bias, then relu if asked, then the mask, then post.
 * mask (optional, with row stride ld_mask): C[i][j] = mask[i][j] > 0 ? C[i][j] : 0, relu's gradient at the mask
 * (its input or output) applied to the product as its store (compiler/ir/fuse.ts rule 12, `grad_fn: relu`): the
 * select of the separate unary_grad pass, so the same bits.
 * post (optional): an element-wise function applied in place to each finished run of C (the rows
 * of a micro-tile, NR floats or fewer at edges, while they are still in L1); it must give each
 * element's result from that element alone, so the split into runs does not change any bits
 * (the generated kernels pass a loop over the same scalar formula the unary kernel uses).
 */
struct Epilogue {
  const float* bias = nullptr;  // BIAS_ROW: bias[i] for row i (M values); BIAS_COL: bias[j] (N values)
  int bias_kind = BIAS_NONE;
  bool relu = false;
  void (*post)(float* x, int64_t n) = nullptr;
  const float* mask = nullptr;  // M x N, row stride ld_mask
  int64_t ld_mask = 0;
};

namespace detail {

typedef float v8f __attribute__((vector_size(32)));
/** one register of VW floats (the micro-kernel's unit) */
typedef float vf __attribute__((vector_size(VW * 4)));

static inline v8f load8(const float* p) {
  v8f v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void store8(float* p, v8f v) { memcpy(p, &v, sizeof v); }
static inline v8f splat8(float x) { return v8f{x, x, x, x, x, x, x, x}; }
static inline vf loadv(const float* p) {
  vf v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void storev(float* p, vf v) { memcpy(p, &v, sizeof v); }
#if MPSC_FAST_VW == 16
static inline vf splatv(float x) { return vf{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }
#else
static inline vf splatv(float x) { return vf{x, x, x, x, x, x, x, x}; }
#endif
/** copies the NR floats of one packed panel row */
static inline void copy_nr(float* __restrict d, const float* __restrict s) {
  storev(d, loadv(s));
  storev(d + VW, loadv(s + VW));
}
#if defined(__clang__) && defined(__has_builtin)
#if __has_builtin(__builtin_elementwise_max)
#define MPSC_FAST_HAS_ELEMENTWISE_MAX 1
#endif
#endif
static inline vf maxv(vf a, vf b) {
#ifdef MPSC_FAST_HAS_ELEMENTWISE_MAX
  return __builtin_elementwise_max(a, b);  // clang (Apple arm64: NEON fmax)
#else
  return a > b ? a : b;  // GCC vector conditional
#endif
}

/** x where m > 0, else 0 (relu's gradient at m): the comparison's all-ones / zero lanes as a bit mask, which GCC
 *  and Clang both take for vector_size types (no vector ?:, which older Clang lacks) */
typedef int32_t vmask __attribute__((vector_size(VW * 4)));
static inline vf select_pos(vf m, vf x) {
  return (vf)((vmask)x & (vmask)(m > splatv(0.0f)));
}

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/**
 * depth of the K blocks of a K-long product: K split into ceil(K/KC) blocks of equal depth (the
 * last may be shorter), e.g. 288 -> 144 + 144 rather than 256 + 32, so no block is a short tail
 * that pays a full pass over C. Always <= KC; depends on K only, so results do not depend on nparts.
 */
inline int64_t kc_step(int64_t K) {
  if (K <= KC) return K > 0 ? K : 1;
  const int64_t nb = (K + KC - 1) / KC;
  return (K + nb - 1) / nb;
}

/** floats of packed A and packed B for one part (each rounded to 16 floats = 64 bytes) */
inline int64_t packed_a_floats(int64_t M, int64_t K) {
  return round_up(round_up(std::min(M, MC), MR) * std::min(K, KC), 16);
}
inline int64_t packed_b_floats(int64_t N, int64_t K) {
  return round_up(std::min(K, KC) * round_up(std::min(N, NC), NR), 16);
}

/** in-register transpose of an 8 x 8 block: r[i][j] -> r[j][i] */
static inline void transpose8x8(v8f r[8]) {
  v8f t[8], u[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; i += 4) {
    u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 4; ++i) {
    r[i] = __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    r[i + 4] = __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

/** KC readable zeros (stand-in rows for the padding of partial panels) */
inline const float* zero_row() {
  static const float z[KC + 8] = {};
  return z;
}

/**
 * Packs `width` rows (<= 8) into columns [0, width) of a panel with row stride ld:
 * dst[k * ld + r] = rows[r][k] for k < kc (kc <= KC); rows[r] may be zero_row().
 * 8 x 8 blocks are transposed in registers; a kc % 8 tail is the block of the last 8 columns
 * again (it rewrites some columns with the same values: no scalar or gathered tail), and only a
 * kc < 8 panel is copied one value at a time.
 */
inline void pack_block8(const float* const rows[8], int64_t width, int64_t k, float* __restrict dst, int64_t ld) {
  v8f r[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = load8(rows[i] + k);
  transpose8x8(r);
  if (width == 8) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) store8(dst + (k + i) * ld, r[i]);
  } else {
    for (int i = 0; i < 8; ++i) memcpy(dst + (k + i) * ld, &r[i], (size_t)width * sizeof(float));
  }
}

inline void pack_rows8(const float* const rows[8], int64_t width, int64_t kc, float* __restrict dst, int64_t ld) {
  if (kc < 8) {
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t i = 0; i < width; ++i) dst[k * ld + i] = rows[i][k];
    return;
  }
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8) pack_block8(rows, width, k, dst, ld);
  if (k < kc) pack_block8(rows, width, kc - 8, dst, ld);
}

/**
 * Packs the first nrows rows (row r at src[r]) of a panel of `ld` columns (MR or NR):
 * dst[k * ld + r] = src[r][k] for r < nrows, 0 for nrows <= r < ld.
 */
template <class RowPtr>
inline void pack_rows(RowPtr&& src, int64_t nrows, int64_t ld, int64_t kc, float* __restrict dst) {
  for (int64_t r0 = 0; r0 < ld; r0 += 8) {
    const float* rows[8];
    for (int64_t i = 0; i < 8; ++i) rows[i] = r0 + i < nrows ? src(r0 + i) : zero_row();
    pack_rows8(rows, std::min<int64_t>(8, ld - r0), kc, dst + r0, ld);
  }
}

/**
 * Software prefetch (hints only: no value depends on it). Inside a training step a GEMM's operands are
 * often in no cache: C's rows were last touched a whole step earlier (each store then waits for a
 * read-for-ownership miss), and A is an activation that has left L2; one core of the 2-vCPU Xeon
 * streams only ~5 GB/s from memory. Before each micro-tile gemm_driver (with prefetch: sgemm's products)
 * hints the C rows of the tile PF_AHEAD tiles later into L2 in the first K block (its stores'
 * read-for-ownership then hits; later K blocks re-read what it wrote) and, for a plain A read in
 * place, on the first column of tiles of a block (the only one whose A rows come from memory) that
 * tile's MR rows of A over the K block into L1. -DMPSC_FAST_PREFETCH=0 turns it off (A/B measurements).
 * always_inline: GCC's IPA otherwise finds a function of prefetches alone "const" and drops its calls.
 */
#ifndef MPSC_FAST_PREFETCH
#define MPSC_FAST_PREFETCH 1
#endif
/** micro-tiles ahead (in the driver's order) whose C and A rows are prefetched */
constexpr int64_t PF_AHEAD = 2;

/** hint the cache lines of the n floats at p into L2 (LOC 2: prefetcht1) or L1 (LOC 3: prefetcht0) */
template <int LOC>
__attribute__((always_inline)) static inline void prefetch_run(const float* p, int64_t n) {
#if MPSC_FAST_PREFETCH
  const char* c = reinterpret_cast<const char*>(p);
  const char* end = c + n * sizeof(float);
  for (; c < end; c += 64) __builtin_prefetch(c, 0, LOC);
  if (n > 0) __builtin_prefetch(end - 1, 0, LOC);  // the last line of an unaligned run
#else
  (void)p, (void)n;
#endif
}

/** source rows per group of pack_split_rows (see there) */
constexpr int64_t SPLIT_ROWS = 8;

/**
 * Packs kc source rows of n floats (row p at src + p*ld) into panels of W columns:
 * dst[panel][p][c] = src[p][panel*W + c], zero past n. The rows go in groups of SPLIT_ROWS: each
 * group is split into the panels one panel at a time, so each panel gets SPLIT_ROWS * W contiguous
 * floats while the group's rows (read once each, in order) stay in L1. Walking one whole row across
 * all panels instead writes one run to every panel per row, and the panels are kc * W floats apart:
 * for kc = 256 a multiple of 4 KiB, so the 18 A panels of an MC block (or 25 B panels of 784
 * columns) all map to one 12-way L1 set and every row's runs evict each other.
 */
template <int64_t W>
inline void pack_split_rows(const float* src, int64_t ld, int64_t n, int64_t kc, float* __restrict dst) {
  const int64_t full = n / W * W;
  for (int64_t p0 = 0; p0 < kc; p0 += SPLIT_ROWS) {
    const int64_t p1 = std::min(kc, p0 + SPLIT_ROWS);
    int64_t j = 0;
    for (; j < full; j += W) {
      float* d = dst + j * kc;
      for (int64_t p = p0; p < p1; ++p) memcpy(d + p * W, src + p * ld + j, W * sizeof(float));
    }
    if (j < n) {
      float* d = dst + j * kc;
      for (int64_t p = p0; p < p1; ++p) {
        int64_t c = 0;
        for (; c < n - j; ++c) d[p * W + c] = src[p * ld + j + c];
        for (; c < W; ++c) d[p * W + c] = 0.0f;
      }
    }
  }
}

/**
 * pack op(A)[i0 .. i0+mc, p0 .. p0+kc] into MR-row micro-panels: dst[panel][p][r]. A transposed
 * (K x M in memory): row p of A holds column p of every panel (pack_split_rows); otherwise the
 * panels' rows are K-contiguous and go through 8 x 8 transposes.
 */
inline void pack_a(bool transA, const float* A, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                   float* __restrict dst) {
  if (transA) return pack_split_rows<MR>(A + p0 * lda + i0, lda, mc, kc, dst);
  for (int64_t ir = 0; ir < mc; ir += MR) {
    const int64_t mr = std::min(MR, mc - ir);
    pack_rows([&](int64_t r) { return A + (i0 + ir + r) * lda + p0; }, mr, MR, kc, dst + ir * kc);
  }
}

/**
 * pack op(B)[p0 .. p0+kc, j0 .. j0+nc] into NR-column micro-panels: dst[panel][p][c]. B not
 * transposed (K x N): pack_split_rows; transposed (N x K): column c of a panel is row (j0 + jr + c)
 * of B, contiguous in p, through 8 x 8 transposes.
 */
inline void pack_b(bool transB, const float* B, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                   float* __restrict dst) {
  if (!transB) return pack_split_rows<NR>(B + p0 * ldb + j0, ldb, nc, kc, dst);
  for (int64_t jr = 0; jr < nc; jr += NR) {
    const int64_t nr = std::min(NR, nc - jr);
    pack_rows([&](int64_t c) { return B + (j0 + jr + c) * ldb + p0; }, nr, NR, kc, dst + jr * kc);
  }
}

/** store modes of the micro-kernel */
struct StoreArgs {
  float alpha;
  float beta;   // used only when first
  bool first;   // first KC block: C = alpha*acc + beta*C (C not read when beta == 0)
  bool last;    // last KC block: apply the epilogue
  Epilogue epi;
  int64_t row0;  // absolute row / column of the tile in C (to index the bias)
  int64_t col0;
};

/** finish one row of a full tile: v = alpha*acc + (beta or 1)*C, epilogue, store */
static inline void finish_row(float* c, vf a0, vf a1, const StoreArgs& s, int64_t r) {
  vf va = splatv(s.alpha);
  vf x0 = a0 * va, x1 = a1 * va;
  if (!s.first) {
    x0 += loadv(c);
    x1 += loadv(c + VW);
  } else if (s.beta != 0.0f) {
    vf vb = splatv(s.beta);
    x0 += vb * loadv(c);
    x1 += vb * loadv(c + VW);
  }
  if (s.last) {
    if (s.epi.bias_kind == BIAS_ROW) {
      vf b = splatv(s.epi.bias[s.row0 + r]);
      x0 += b;
      x1 += b;
    } else if (s.epi.bias_kind == BIAS_COL) {
      x0 += loadv(s.epi.bias + s.col0);
      x1 += loadv(s.epi.bias + s.col0 + VW);
    }
    if (s.epi.relu) {
      vf z = splatv(0.0f);
      x0 = maxv(x0, z);
      x1 = maxv(x1, z);
    }
    if (s.epi.mask) {
      const float* m = s.epi.mask + (s.row0 + r) * s.epi.ld_mask + s.col0;
      x0 = select_pos(loadv(m), x0);
      x1 = select_pos(loadv(m + VW), x1);
    }
  }
  storev(c, x0);
  storev(c + VW, x1);
}

/** the same formula, one element at a time, for edge tiles */
static inline void finish_scalar(float* c, float acc, const StoreArgs& s, int64_t r, int64_t col) {
  float x = acc * s.alpha;
  if (!s.first) x += *c;
  else if (s.beta != 0.0f) x += s.beta * *c;
  if (s.last) {
    if (s.epi.bias_kind == BIAS_ROW) x += s.epi.bias[s.row0 + r];
    else if (s.epi.bias_kind == BIAS_COL) x += s.epi.bias[s.col0 + col];
    if (s.epi.relu) x = x > 0.0f ? x : 0.0f;
    if (s.epi.mask) x = s.epi.mask[(s.row0 + r) * s.epi.ld_mask + s.col0 + col] > 0.0f ? x : 0.0f;
  }
  *c = x;
}

/**
 * MR x NR micro-kernel: acc = sum_p a[p][0..MR) (outer) b[p][0..NR), then finish into C.
 * b: a packed panel (kc steps of NR floats). a: with DIRECT_A false, a packed panel (kc steps of MR
 * floats); with DIRECT_A true, op(A)'s rows as stored (row r at a + r * lda, K-contiguous; rows r >= mr
 * read row mr - 1, whose products the edge store drops). mr, nr: valid part of the tile.
 * Every element is one fused multiply-add chain over p in order, whatever VW, MR and the A layout are.
 */
template <bool DIRECT_A>
static inline void micro_kernel(int64_t kc, const float* __restrict a, int64_t lda, const float* __restrict b,
                                float* c, int64_t ldc, int64_t mr, int64_t nr, const StoreArgs& s) {
  vf acc0[MR], acc1[MR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) acc0[r] = acc1[r] = splatv(0.0f);
  if (DIRECT_A) {
    const float* row[MR];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) row[r] = a + (r < mr ? r : mr - 1) * lda;
    for (int64_t p = 0; p < kc; ++p) {
      const vf b0 = loadv(b), b1 = loadv(b + VW);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const vf x = splatv(row[r][p]);
        acc0[r] += x * b0;
        acc1[r] += x * b1;
      }
      b += NR;
    }
  } else {
    for (int64_t p = 0; p < kc; ++p) {
      const vf b0 = loadv(b), b1 = loadv(b + VW);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const vf x = splatv(a[r]);
        acc0[r] += x * b0;
        acc1[r] += x * b1;
      }
      a += MR;
      b += NR;
    }
  }
  if (mr == MR && nr == NR) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) finish_row(c + r * ldc, acc0[r], acc1[r], s, r);
    // post after every row is stored: no accumulator is live across the call
    if (s.last && s.epi.post)
      for (int r = 0; r < MR; ++r) s.epi.post(c + r * ldc, NR);
    return;
  }
  float t[MR * NR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    storev(t + r * NR, acc0[r]);
    storev(t + r * NR + VW, acc1[r]);
  }
  for (int64_t r = 0; r < mr; ++r)
    for (int64_t j = 0; j < nr; ++j) finish_scalar(c + r * ldc + j, t[r * NR + j], s, r, j);
  if (s.last && s.epi.post)
    for (int64_t r = 0; r < mr; ++r) s.epi.post(c + r * ldc, nr);
}

/** C[m0..m1, n0..n1) with K == 0 or alpha == 0: C = beta*C, then the epilogue */
inline void scale_only(int64_t m0, int64_t m1, int64_t n0, int64_t n1, float beta, float* C, int64_t ldc,
                       const Epilogue& e) {
  for (int64_t i = m0; i < m1; ++i) {
    float* c = C + i * ldc;
    for (int64_t j = n0; j < n1; ++j) {
      float x = beta == 0.0f ? 0.0f : beta * c[j];
      if (e.bias_kind == BIAS_ROW) x += e.bias[i];
      else if (e.bias_kind == BIAS_COL) x += e.bias[j];
      if (e.relu) x = x > 0.0f ? x : 0.0f;
      if (e.mask) x = e.mask[i * e.ld_mask + j] > 0.0f ? x : 0.0f;
      c[j] = x;
    }
    if (e.post && n1 > n0) e.post(c + n0, n1 - n0);
  }
}

inline float* thread_workspace(int64_t floats) {
  static thread_local std::vector<float> buf;
  if ((int64_t)buf.size() < floats + 16) buf.resize((size_t)(floats + 16));
  uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
  return reinterpret_cast<float*>((p + 63) & ~uintptr_t(63));
}

/**
 * The blocked loop nest on C[m0..m1, n0..n1) (Goto order: jc, pc, ic, jr, ir).
 * packB(pc, kc, jc, nc) -> packed KC x NC block of op(B) (NR-column panels, zero-padded);
 * packA(ic, mc, pc, kc) -> packed MC x KC block of op(A) (MR-row panels, zero-padded), or, with
 * direct_lda > 0, a pointer to op(A)[ic, pc] in a row-major A of row stride direct_lda (not packed).
 * Callers supply packers that read plain matrices, prepacked blocks, or generate im2col rows.
 * With prefetch (gemm_block: sgemm's products; the convolutions' callers, whose outputs are mostly workspace
 * blocks, were not measured with it and leave it off) each micro-tile first prefetches C (and a direct A)
 * rows of the tile PF_AHEAD later (see prefetch_run).
 * ic_outer: the row blocks outer and the K blocks inner, every K block of op(B) packed first (packB must
 * then place block pc at its block 0's pointer + pc * round_up(nc, NR)); the same bits (see gemm_block).
 */
template <class PackA, class PackB>
inline void gemm_driver(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, int64_t nc_max, float alpha,
                        float beta, float* C, int64_t ldc, const Epilogue& e, PackA&& packA, PackB&& packB,
                        int64_t direct_lda = 0, bool ic_outer = false, bool prefetch = false) {
  const int64_t step = kc_step(K);
  const int64_t n_pc = (K + step - 1) / step, n_ic = (m1 - m0 + MC - 1) / MC;
  for (int64_t jc = n0; jc < n1; jc += nc_max) {
    const int64_t nc = std::min(nc_max, n1 - jc), ncr = round_up(nc, NR);
    const float* Bp = nullptr;
    if (ic_outer)  // every K block packed first: block pc at Bp + pc * ncr (the packer's contract in this order)
      for (int64_t pc = 0; pc < K; pc += step) {
        const float* b = packB(pc, std::min(step, K - pc), jc, nc);
        if (pc == 0) Bp = b;
      }
    // the (pc, ic) blocks, pc outer (Goto) or, with ic_outer, ic outer
    for (int64_t q = 0; q < n_pc * n_ic; ++q) {
      const int64_t pi = ic_outer ? q % n_pc : q / n_ic, ii = ic_outer ? q / n_pc : q % n_ic;
      const int64_t pc = pi * step, kc = std::min(step, K - pc);
      const float* Bb = ic_outer ? Bp + pc * ncr : (ii == 0 ? (Bp = packB(pc, kc, jc, nc)) : Bp);
      {
        const int64_t ic = m0 + ii * MC;
        const int64_t mc = std::min(MC, m1 - ic);
        const float* Ap = packA(ic, mc, pc, kc);
        StoreArgs s{alpha, beta, pc == 0, pc + kc >= K, e, 0, 0};
        // (ir2, jr2): the tile PF_AHEAD later in the order the tiles run (jr outer, ir inner)
        const int64_t n_ir = (mc + MR - 1) / MR;
        int64_t ir2 = PF_AHEAD % n_ir * MR, jr2 = PF_AHEAD / n_ir * NR;
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int64_t nr = std::min(NR, nc - jr);
          s.col0 = jc + jr;
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int64_t mr = std::min(MR, mc - ir);
            s.row0 = ic + ir;
            float* c = C + (ic + ir) * ldc + (jc + jr);
            if (MPSC_FAST_PREFETCH && prefetch && jr2 < nc) {
              const int64_t rows2 = std::min(MR, mc - ir2), cols2 = std::min(NR, nc - jr2);
              // C from memory in the first K block only: later blocks re-read what that block wrote
              if (pc == 0)
                for (int64_t r = 0; r < rows2; ++r) prefetch_run<2>(C + (ic + ir2 + r) * ldc + (jc + jr2), cols2);
              if (direct_lda > 0 && jr2 == 0)
                for (int64_t r = 0; r < rows2; ++r) prefetch_run<3>(Ap + (ir2 + r) * direct_lda, kc);
              if ((ir2 += MR) >= mc) ir2 = 0, jr2 += NR;
            }
            if (direct_lda > 0) micro_kernel<true>(kc, Ap + ir * direct_lda, direct_lda, Bb + jr * kc, c, ldc, mr, nr, s);
            else micro_kernel<false>(kc, Ap + ir * kc, 0, Bb + jr * kc, c, ldc, mr, nr, s);
          }
        }
      }
    }
  }
}

/**
 * sums[i] += A[p * lda + i] for p = p0 .. p1 - 1 in order, i in [i0, i1) (double accumulators). Rows go
 * 8 at a time with each column's sum in a register across them (one load and store of sums per 8 rows
 * instead of per row); every sum still adds its rows one by one in order, so the bits do not change.
 */
inline void add_column_sums(const float* A, int64_t lda, int64_t p0, int64_t p1, int64_t i0, int64_t i1, double* sums) {
  double* __restrict acc = sums;
  for (int64_t p = p0; p < p1; p += 8) {
    const float* __restrict r = A + p * lda;
    if (p1 - p >= 8) {
      for (int64_t i = i0; i < i1; ++i) {
        double a = acc[i];
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) a += r[q * lda + i];
        acc[i] = a;
      }
    } else {
      for (int64_t i = i0; i < i1; ++i) {
        double a = acc[i];
        for (int64_t q = 0; q < p1 - p; ++q) a += r[q * lda + i];
        acc[i] = a;
      }
    }
  }
}

/**
 * whether gemm_block reads op(A) = A (not transposed, row stride lda) in place instead of packing it:
 * the micro-kernel broadcasts from MR row streams, each K-contiguous, and the packing pass (a read and a
 * write of every A block per column block, 8-15% of the GPT's N = 128 products) is gone. Not when the
 * rows are a multiple of 4 KiB apart (all MR streams in one L1 set), and not with the column sums
 * (transposed A only). Packed or not, each element is the same chain: the choice does not change bits.
 */
inline bool direct_a(bool transA, int64_t lda) { return !transA && lda % 1024 != 0; }

/** at most this many bytes of packed op(B) (all its K blocks for one column block) for the ic-outer order */
constexpr int64_t IC_OUTER_B_BYTES = 512 * 1024;
/** floats of every K block of op(B) packed for one column block of up to NC columns */
inline int64_t packed_b_all_floats(int64_t N, int64_t K) { return round_up(K * round_up(std::min(N, NC), NR), 16); }
/**
 * whether gemm_block runs a product of several K blocks ic outer, pc inner (see there): a plain A read in
 * place (direct_a), K deeper than one block and all of op(B)'s K blocks small enough to stay packed
 * (IC_OUTER_B_BYTES). Shapes and layout only, so the choice is the same for every part.
 */
inline bool ic_outer(bool transA, int64_t lda, int64_t N, int64_t K) {
  return direct_a(transA, lda) && kc_step(K) < K && packed_b_all_floats(N, K) * (int64_t)sizeof(float) <= IC_OUTER_B_BYTES;
}

/** the blocked GEMM on the sub-block C[m0..m1, n0..n1), packing from plain matrices into ws (op(A) read
 *  in place where direct_a says so); with a_sums, also the column sums [s0, s1) of A as stored (see sgemm_part).
 *  ic_outer_order (the caller's ic_outer on the whole product, ws sized by sgemm_workspace_bytes): a plain A of
 *  several K blocks runs ic outer, pc inner (see below) */
inline void gemm_block(bool transA, bool transB, int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K,
                       float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                       int64_t ldc, const Epilogue& e, float* ws, double* a_sums = nullptr, int64_t s0 = 0,
                       int64_t s1 = 0, bool ic_outer_order = false) {
  float* Ap = ws;
  float* Bp = ws + packed_a_floats(m1 - m0, K);
  int64_t cur_jc = n0;
  const bool direct = direct_a(transA, lda);
  // ic outer, pc inner, every K block of op(B) packed once per column block: each row block of the in-place
  // A is read whole (its rows K-contiguous, streamed from memory once) and its C block stays in L2 across
  // the K blocks, where pc outer re-read all of C and fetched each A row once per K block. Every C element
  // still adds the K blocks in order with the same first / last stores: the same bits
  const bool by_rows = ic_outer_order && direct && kc_step(K) < K;
  gemm_driver(
      m0, m1, n0, n1, K, NC, alpha, beta, C, ldc, e,
      [&](int64_t ic, int64_t mc, int64_t pc, int64_t kc) {
        if (direct) return A + ic * lda + pc;
        pack_a(transA, A, lda, ic, mc, pc, kc, Ap);
        // the first column block packs every (ic, pc) block once, pc in increasing order: each sum
        // runs over the rows p of A in order, while they are in L1 from the packing
        if (a_sums && cur_jc == n0) add_column_sums(A, lda, pc, pc + kc, std::max(ic, s0), std::min(ic + mc, s1), a_sums);
        return (const float*)Ap;
      },
      [&](int64_t pc, int64_t kc, int64_t jc, int64_t nc) {
        cur_jc = jc;
        float* dst = by_rows ? Bp + pc * round_up(nc, NR) : Bp;
        pack_b(transB, B, ldb, pc, kc, jc, nc, dst);
        return (const float*)dst;
      },
      direct ? lda : 0, by_rows, true);
}

/** floats of a whole op(A) (M x K) packed once by pack_a_all */
inline int64_t packed_a_all_floats(int64_t M, int64_t K) { return round_up(round_up(M, MR) * K, 16); }

/**
 * Packs all of op(A) (M x K) so gemm_driver can reuse it: block (ic, pc) lives at
 * dst + ic*K + round_up(mc, MR)*pc (K blocks of kc_step(K); every block but the last in each
 * direction is full).
 */
inline void pack_a_all(bool transA, const float* A, int64_t lda, int64_t M, int64_t K, float* dst) {
  for (int64_t ic = 0; ic < M; ic += MC) {
    const int64_t mc = std::min(MC, M - ic);
    for (int64_t pc = 0; pc < K; pc += kc_step(K)) {
      const int64_t kc = std::min(kc_step(K), K - pc);
      pack_a(transA, A, lda, ic, mc, pc, kc, dst + ic * K + round_up(mc, MR) * pc);
    }
  }
}
inline const float* packed_a_block(const float* all, int64_t K, int64_t ic, int64_t mc, int64_t pc) {
  return all + ic * K + round_up(mc, MR) * pc;
}

/** one part's share of C (M x N) and of a_sums' columns (see sgemm_part) */
struct PartRange {
  int64_t m0, m1, n0, n1, s0, s1;
};
/**
 * split one axis into nparts contiguous micro-tile ranges. Every part packs all of the other
 * operand, so when both axes have a tile per part, split N (every part packs A, M x K, or reads a
 * plain A in place: direct_a) when M <= N and M otherwise; else the axis with more tiles.
 * s0, s1: the part sums the columns [s0, s1) of A: its own rows of C when M is split, an equal share
 * of all M otherwise (every part packs all of A then); every part has a share, even one without tiles.
 * tm x tn: the tile the ranges are made of (the FMA kernel's MR x NR; the AMX path's 32 x 32 blocks)
 */
/** part_range's axis: N when both axes have a tile per part and M <= N, else the axis with more tiles (mt, nt) */
inline bool split_n_axis(int64_t M, int64_t N, int64_t mt, int64_t nt, int nparts) {
  return mt >= nparts && nt >= nparts ? M <= N : nt >= mt;
}
inline PartRange part_range(int64_t M, int64_t N, int part, int nparts, int64_t tm = MR, int64_t tn = NR) {
  PartRange r{0, M, 0, N, 0, M};
  if (nparts <= 1) return r;
  const int64_t mt = (M + tm - 1) / tm, nt = (N + tn - 1) / tn;
  if (split_n_axis(M, N, mt, nt, nparts)) {
    r.n0 = std::min(N, nt * part / nparts * tn);
    r.n1 = std::min(N, nt * (part + 1) / nparts * tn);
    r.s0 = M * part / nparts;
    r.s1 = M * (part + 1) / nparts;
  } else {
    r.m0 = std::min(M, mt * part / nparts * tm);
    r.m1 = std::min(M, mt * (part + 1) / nparts * tm);
    r.s0 = r.m0;
    r.s1 = std::max(r.m0, r.m1);
  }
  return r;
}

/**
 * part `part`'s rectangle in the cheapest pm x pn grid of tm x tn tiles (pm * pn = nparts, both axes split, pm rows
 * of parts) whose cost(pm, pn) is below `bar`; `line` (the one-axis split) where no grid is
 */
template <class Cost>
inline PartRange grid_part(int64_t M, int64_t N, int part, int nparts, int64_t tm, int64_t tn, int64_t bar, Cost&& cost,
                           const PartRange& line) {
  const int64_t mt = (M + tm - 1) / tm, nt = (N + tn - 1) / tn;
  int64_t best_pm = 0, best_cost = bar;
  for (int64_t pm = 2; pm < nparts; ++pm) {
    if (nparts % pm != 0 || pm > mt || nparts / pm > nt) continue;
    const int64_t c = cost(pm, nparts / pm);
    if (c < best_cost) best_pm = pm, best_cost = c;
  }
  if (best_pm == 0) return line;
  const int64_t pm = best_pm, pn = nparts / pm, pi = part / pn, pj = part % pn;
  PartRange r{0, M, 0, N, 0, 0};
  r.m0 = std::min(M, mt * pi / pm * tm);
  r.m1 = std::min(M, mt * (pi + 1) / pm * tm);
  r.n0 = std::min(N, nt * pj / pn * tn);
  r.n1 = std::min(N, nt * (pj + 1) / pn * tn);
  return r;
}

#ifndef MPSC_FAST_AMX_GRID
#define MPSC_FAST_AMX_GRID 1
#endif
/**
 * The AMX path's parts (plain op(A)) as a pm x pn grid of whole 32 x 32 blocks, pm * pn = nparts, where
 * part_range's 1D split makes every part pack all of the other operand (8 parts over 256 x 256: each packs all
 * 256 rows of op(A) for its 32 columns). Per part, in units of one block's products over all K: ~2 per 32-row
 * panel of op(A) or 32-column panel of op(B) packed (three bf16 planes: ~0.3 ns an element against ~9.5 ns per
 * K step of a block's six tile products) plus one per block: cost(pm, pn) = 2 (bm + bn) + bm bn with
 * bm = ceil(mt / pm), bn = ceil(nt / pn). A grid replaces part_range's split only where it is strictly cheaper
 * (8 parts: the MLP's 256 x 256 x 784 forward 2 x 4; the GPT's 2048-row products keep their row split).
 * Shapes and nparts only; each element is the same chain of tile products whatever its part, so every grid
 * gives the same bits. MPSC_FAST_AMX_GRID=0 at build time (MPSC_CPU_AMX_GRID=0 for generated models):
 * part_range's split always.
 */
inline PartRange part_grid(int64_t M, int64_t N, int part, int nparts) {
  const PartRange line = part_range(M, N, part, nparts, 32, 32);
  if (nparts <= 3) return line;  // 2 and 3 parts: no grid but the 1D ones
  const int64_t mt = (M + 31) / 32, nt = (N + 31) / 32;
  auto cost = [&](int64_t pm, int64_t pn) {
    const int64_t bm = (mt + pm - 1) / pm, bn = (nt + pn - 1) / pn;
    return 2 * (bm + bn) + bm * bn;
  };
  // part_range's own choice, as a 1 x nparts or nparts x 1 grid, is the one to beat
  const int64_t line_cost = split_n_axis(M, N, mt, nt, nparts) ? cost(1, nparts) : cost(nparts, 1);
  return grid_part(M, N, part, nparts, 32, 32, line_cost, cost, line);
}

#ifndef MPSC_FAST_FMA_GRID
#define MPSC_FAST_FMA_GRID 1
#endif
/**
 * The FMA path's parts (no column sums) as a pm x pn grid of whole MR x NR tiles, pm * pn = nparts, where that
 * moves at most half the floats per part of part_range's one-axis split. Per K step a part reads its rows of op(A)
 * (once in place, direct_a; twice when packed: read and write) and packs its columns of op(B) (read and write):
 * cost(pm, pn) = (direct ? 1 : 2) rows + 2 cols, rows = ceil(mt / pm) MR, cols = ceil(nt / pn) NR. The case it is
 * for: few rows and columns over a long K, where the one-axis split gives each part a few rows and all of op(B) to
 * pack (LeNet's 64 x 128 x 3136 fc1 at 8 parts: each part packed all 128 columns, 1.6 MB, for 6.4 MFLOP; 2 x 4
 * parts pack 32 each, cost 264 -> 96). Measured on the Xeon at 8 threads (bench/NOTES.md phase 28): that product
 * 222 -> 609 GFLOP/s alone, its kernel in LeNet's step 0.199 -> 0.147 ms. Where the gain is smaller (the MLP's
 * 256 x 256 x 784 forward, 320 -> 256: 668 -> 751 GFLOP/s alone, no gain inside the step) the one-axis split
 * stays; 2 and 3 parts always keep it. Shapes and nparts only; every element is the same chain over K whatever its
 * part and tile (the splits fall on MR x NR tile boundaries), so every grid gives the same bits.
 * MPSC_FAST_FMA_GRID=0 at build time (MPSC_CPU_FMA_GRID=0 for generated models): part_range's split always.
 */
inline PartRange part_grid_fma(bool direct, int64_t M, int64_t N, int part, int nparts) {
  const PartRange line = part_range(M, N, part, nparts);
  if (nparts <= 3) return line;
  const int64_t mt = (M + MR - 1) / MR, nt = (N + NR - 1) / NR;
  auto cost = [&](int64_t pm, int64_t pn) {
    return (direct ? 1 : 2) * ((mt + pm - 1) / pm) * MR + 2 * ((nt + pn - 1) / pn) * NR;
  };
  const int64_t line_cost = split_n_axis(M, N, mt, nt, nparts) ? cost(1, nparts) : cost(nparts, 1);
  // a grid must cost at most half the one-axis split
  return grid_part(M, N, part, nparts, MR, NR, line_cost / 2 + 1, cost, line);
}

/**
 * whether C = op(A) op(B) (M x N) is cheaper as the transposed product C^T = op(B)^T op(A)^T (N x M):
 * N narrower than one micro-tile (NR columns, most of every tile padding, e.g. a 256 x 10 classifier
 * output) and at least a quarter fewer MR x NR micro-tiles that way. Shapes only, so the choice is the
 * same for every part and thread count.
 */
inline bool swap_pays(int64_t M, int64_t N) {
  if (N >= NR) return false;
  const int64_t direct = (M + MR - 1) / MR;  // one column of tiles
  const int64_t swapped = ((N + MR - 1) / MR) * ((M + NR - 1) / NR);
  return swapped * 4 <= direct * 3;
}

#if MPSC_FAST_AMX
static_assert(VW == 16, "the AMX path finishes its 32-column rows with the 16-lane finish_row");

/** a finished 32 x 32 block (cbuf, row stride 32; mr x nr of it valid) into C by sgemm's finish code */
inline void amx_finish(float* c, int64_t ldc, const float* cbuf, int64_t mr, int64_t nr, const StoreArgs& s) {
  if (nr == 32)
    for (int64_t r = 0; r < mr; ++r) finish_row(c + r * ldc, loadv(cbuf + r * 32), loadv(cbuf + r * 32 + 16), s, r);
  else
    for (int64_t r = 0; r < mr; ++r)
      for (int64_t j = 0; j < nr; ++j) finish_scalar(c + r * ldc + j, cbuf[r * 32 + j], s, r, j);
  if (s.epi.post)
    for (int64_t r = 0; r < mr; ++r) s.epi.post(c + r * ldc, nr);
}

/**
 * A finished block waiting for its store into C: the drivers finish block j - 1 after issuing block j's
 * tile products (the core's bias, activation and store into C, with its cache misses, overlap the TMUL's
 * work) and store block j to the other half of cbuf.
 */
struct AmxPending {
  float* c = nullptr;
  const float* buf = nullptr;
  int64_t row0 = 0, col0 = 0, mr = 0, nr = 0;
  int flip = 0;
  void set(float* c_, const float* buf_, int64_t row0_, int64_t col0_, int64_t mr_, int64_t nr_) {
    c = c_, buf = buf_, row0 = row0_, col0 = col0_, mr = mr_, nr = nr_;
  }
  void flush(int64_t ldc, StoreArgs& s) {
    if (!c) return;
    s.row0 = row0;
    s.col0 = col0;
    amx_finish(c, ldc, buf, mr, nr, s);
    c = nullptr;
  }
  /**
   * the end of a block whose products block32_run issued: before the last K chunk its sum goes to acc;
   * in the last, the previous block is finished (while the TMUL runs this one) and this one is stored to
   * the other half of cbuf (two 32 x 32 blocks) to be finished next
   */
  void store(bool last, float* acc, float* cbuf, float* c_, int64_t row0_, int64_t col0_, int64_t mr_, int64_t nr_,
             int64_t ldc, StoreArgs& s) {
    if (!last) {
      amx::block32_store(acc);
      return;
    }
    flush(ldc, s);
    float* cb = cbuf + (flip ^= 1) * 1024;
    set(c_, cb, row0_, col0_, mr_, nr_);
    amx::block32_store(cb);
  }
};

/**
 * C[m0..m1, n0..n1) (m0, n0 multiples of 32) on the AMX tiles (amx.h), op(A) = A not transposed (a transposed
 * one takes amx_block_kouter). op(B) is packed into three bf16
 * planes, all of K, by column chunks that stay in L2 (amx::n_chunk); op(A) one 32-row panel and K chunk of
 * amx::KCH at a time (24 KiB, L1; two buffers): the next chunk is packed a share at a time between the
 * current one's blocks, while the TMUL runs them, and the next panel's source rows are prefetched (inside a
 * training step they come from memory). Each 32 x 32 block of C keeps its sum in
 * the tiles through a K chunk; between chunks it goes to a row-of-blocks buffer and back (exact fp32), so
 * every element is the same chain of tile products over the K blocks in order, whatever the split.
 * After the last chunk sgemm's own finish code (alpha, beta, bias, relu, post) stores the block.
 */
inline void amx_block(bool transB, int64_t M, int64_t N, int64_t K, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                      float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                      int64_t ldc, const Epilogue& e, void* ws) {
  const amx::Workspace w = amx::carve(ws, N, K);
  amx::configure();
  const int64_t KBall = amx::kpad(K) / amx::TK, bgroup = KBall * amx::PLANES * amx::TILE;
  const int64_t nch_max = amx::n_chunk(K), nchunks = (K + amx::KCH - 1) / amx::KCH;
  const int64_t items = (m1 - m0 + 31) / 32 * nchunks;  // (panel, K chunk) pairs, K chunks inner
  StoreArgs s{alpha, beta, true, true, e, 0, 0};
  // item t's panel chunk: rows ib, K [k0, k0 + kc), packed into w.a[t & 1] tile triple by tile triple
  struct Item {
    int64_t ib, k0, kc, KB, tiles;
  };
  auto item = [&](int64_t t) {
    const int64_t ib = m0 + t / nchunks * 32, k0 = t % nchunks * amx::KCH, kc = std::min(amx::KCH, K - k0);
    const int64_t KB = amx::kpad(kc) / amx::TK;
    return Item{ib, k0, kc, KB, 2 * KB};
  };
  auto pack_tiles = [&](const Item& it, int64_t from, int64_t to, uint16_t* dst) {
    for (int64_t i = from; i < to; ++i)
      amx::pack_a_tile(false, A + it.k0, lda, M, it.ib, it.kc, it.KB, i / it.KB, i % it.KB, dst);
  };
  for (int64_t jc = n0; jc < n1; jc += nch_max) {
    const int64_t nc = std::min(nch_max, n1 - jc), nblocks = (nc + 31) / 32;
    amx::pack_b(transB, B, ldb, N, jc, nc, K, w.b);
    pack_tiles(item(0), 0, item(0).tiles, w.a[0]);
    for (int64_t t = 0; t < items; ++t) {
      const Item it = item(t);
      const int64_t ib = it.ib, k0 = it.k0, KB = it.KB, mr = std::min<int64_t>(32, m1 - ib);
      const int64_t agroup = KB * amx::PLANES * amx::TILE;
      const bool first = k0 == 0, last = k0 + it.kc >= K;
      const uint16_t* a = w.a[t & 1];
      // the next item's panel chunk is packed a share at a time between this item's blocks, while the
      // TMUL runs them; the next panel's source rows are prefetched into L2 at the start of a panel
      const bool has_next = t + 1 < items;
      const Item nx = has_next ? item(t + 1) : it;
      const int64_t share = has_next ? (nx.tiles + nblocks - 1) / nblocks : 0;
      int64_t packed = 0;
      if (first && ib + 32 < m1) {
        const int64_t nxt = std::min<int64_t>(32, m1 - ib - 32);
        for (int64_t r = 0; r < nxt; ++r) prefetch_run<2>(A + (ib + 32 + r) * lda, K);
      }
      AmxPending pend;
      for (int64_t jb = jc; jb < jc + nc; jb += 32) {
        const int64_t nr = std::min<int64_t>(32, jc + nc - jb);
        float* c = C + ib * ldc + jb;
        if (last)
          for (int64_t r = 0; r < mr; ++r) prefetch_run<3>(c + r * ldc, nr);
        const uint16_t* b = w.b + (jb - jc) / 16 * bgroup + k0 / amx::TK * amx::PLANES * amx::TILE;
        // this block's running sum between K chunks: 32 x 32 floats in the row-of-blocks buffer
        float* acc = w.acc + (jb - jc) / 32 * 1024;
        amx::block32_run(a, a + agroup, b, b + bgroup, KB, first ? nullptr : acc);
        if (has_next) {
          const int64_t to = std::min(nx.tiles, packed + share);
          pack_tiles(nx, packed, to, w.a[(t + 1) & 1]);
          packed = to;
        }
        pend.store(last, acc, w.cbuf, c, ib, jb, mr, nr, ldc, s);
      }
      pend.flush(ldc, s);
      if (has_next) pack_tiles(nx, packed, nx.tiles, w.a[(t + 1) & 1]);
    }
  }
  _tile_release();
}

/**
 * The same product with the K chunks outer, for a transposed op(A) (stored K x M: the grad-weights dY^T X):
 * per chunk of amx::KCH, the chunk's rows of A and of B are contiguous in memory, so all of this part's
 * op(A) rows and op(B) columns are packed from them at once (a 32-column panel of a K x M matrix would read
 * two cache lines from each of K rows); every block's running sum lives in a buffer of the part's C
 * between chunks. Same bits as amx_block (the same chain per element).
 */
inline void amx_block_kouter(bool transB, int64_t M, int64_t N, int64_t K, int64_t m0, int64_t m1, int64_t n0,
                             int64_t n1, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                             float beta, float* C, int64_t ldc, const Epilogue& e, void* ws) {
  const amx::WorkspaceK w = amx::carve_kouter(ws, M, N);
  amx::configure();
  const int64_t nb_total = (n1 - n0 + 31) / 32;
  StoreArgs s{alpha, beta, true, true, e, 0, 0};
  for (int64_t k0 = 0; k0 < K; k0 += amx::KCH) {
    const int64_t kc = std::min(amx::KCH, K - k0), KB = amx::kpad(kc) / amx::TK;
    const int64_t group = KB * amx::PLANES * amx::TILE;
    const bool first = k0 == 0, last = k0 + kc >= K;
    amx::pack_b(transB, transB ? B + k0 : B + k0 * ldb, ldb, N, n0, n1 - n0, kc, w.b);
    amx::pack_a(true, A + k0 * lda, lda, M, m0, m1 - m0, kc, w.a);
    for (int64_t ib = m0; ib < m1; ib += 32) {
      const uint16_t* a = w.a + (ib - m0) / 16 * group;
      const int64_t mr = std::min<int64_t>(32, m1 - ib);
      AmxPending pend;
      for (int64_t jb = n0; jb < n1; jb += 32) {
        const int64_t nr = std::min<int64_t>(32, n1 - jb);
        float* c = C + ib * ldc + jb;
        if (last)
          for (int64_t r = 0; r < mr; ++r) prefetch_run<3>(c + r * ldc, nr);
        const uint16_t* b = w.b + (jb - n0) / 16 * group;
        float* acc = w.acc + (((ib - m0) / 32) * nb_total + (jb - n0) / 32) * 1024;
        amx::block32_run(a, a + group, b, b + group, KB, first ? nullptr : acc);
        pend.store(last, acc, w.cbuf, c, ib, jb, mr, nr, ldc, s);
      }
      pend.flush(ldc, s);
    }
  }
  _tile_release();
}
#endif

/** whether sgemm_part runs this product on the AMX tiles (shapes and machine only: every part agrees) */
inline bool use_amx(bool transA, int64_t M, int64_t N, int64_t K) {
  return amx::pays(transA, M, N, K) && amx::available();
}

}  // namespace detail

/** bytes of workspace one part needs (64-byte aligned), for any part / nparts of this shape */
inline size_t sgemm_workspace_bytes(int64_t M, int64_t N, int64_t K) {
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  int64_t floats = detail::packed_a_floats(M, K) + detail::packed_b_floats(N, K);
  // the ic-outer order (detail::ic_outer, which also depends on the layout) keeps all of op(B)'s K blocks
  if (detail::kc_step(K) < K && detail::packed_b_all_floats(N, K) * (int64_t)sizeof(float) <= detail::IC_OUTER_B_BYTES)
    floats = std::max(floats, detail::packed_a_floats(M, K) + detail::packed_b_all_floats(N, K));
  // the transposed product (see detail::swap_pays) packs the other way round and keeps C^T after the packing
  if (detail::swap_pays(M, N))
    floats = std::max(floats, detail::packed_a_floats(N, K) + detail::packed_b_floats(M, K) + detail::round_up(M * N, 16));
  // the AMX path (amx.h): bf16 planes of this part's op(A) rows and of one column chunk of op(B)
  // (transA only narrows use_amx, so the plain case covers both)
  if (detail::use_amx(false, M, N, K)) floats = std::max(floats, (int64_t)(amx::workspace_bytes(M, N, K) + 3) / 4);
  return (size_t)floats * sizeof(float);
}

/**
 * The share `part` (0 <= part < nparts) of C = alpha*op(A)*op(B) + beta*C (+ epilogue).
 * Parts are disjoint and together cover C; run them concurrently, each with its own ws
 * (sgemm_workspace_bytes(M, N, K) bytes, 64-byte aligned) or ws = nullptr (thread_local).
 * epi may be nullptr (no epilogue).
 * a_sums (optional, transA only, M doubles the caller zeroed): a_sums[i] += sum over p = 0..K-1 in order of
 * A[p * lda + i], i.e. the column sums of A as stored (K x M), taken while A is packed (a linear's bias
 * gradient next to its grad-weight product dY^T X); the parts add disjoint ranges of i, each in one pass.
 */
inline void sgemm_part(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                       int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                       const Epilogue* epi, int part, int nparts, void* ws, double* a_sums = nullptr) {
  if (M <= 0 || N <= 0) return;
  if (nparts < 1) nparts = 1;
  const Epilogue e = epi ? *epi : Epilogue{};
  double* sums = a_sums && transA ? a_sums : nullptr;
  if (beta == 0.0f && !sums && !e.mask && K > 0 && alpha != 0.0f && detail::swap_pays(M, N)) {
    // C^T = op(B)^T op(A)^T into the workspace (N x M), then this part's rectangle copied back transposed.
    // Every element is the same fused multiply-add chain over p (the products' factors swap places), the
    // same bias, relu and post: the bits of the direct product
    const detail::PartRange r = detail::part_range(N, M, part, nparts);
    if (r.m0 >= r.m1 || r.n0 >= r.n1) return;
    float* w = ws ? static_cast<float*>(ws)
                  : detail::thread_workspace((int64_t)(sgemm_workspace_bytes(M, N, K) / sizeof(float)));
    float* T = w + detail::packed_a_floats(N, K) + detail::packed_b_floats(M, K);
    Epilogue et = e;
    if (e.bias_kind == BIAS_ROW) et.bias_kind = BIAS_COL;
    else if (e.bias_kind == BIAS_COL) et.bias_kind = BIAS_ROW;
    detail::gemm_block(!transB, !transA, r.m0, r.m1, r.n0, r.n1, K, alpha, B, ldb, A, lda, 0.0f, T, M, et, w);
    for (int64_t i = r.n0; i < r.n1; ++i)
      for (int64_t j = r.m0; j < r.m1; ++j) C[i * ldc + j] = T[j * M + i];
    return;
  }
#if MPSC_FAST_AMX
  if (K > 0 && alpha != 0.0f && detail::use_amx(transA, M, N, K)) {
    // whole 32 x 32 blocks; a plain op(A) on a grid of parts where MPSC_FAST_AMX_GRID (no column sums there)
    const detail::PartRange r = MPSC_FAST_AMX_GRID && !transA ? detail::part_grid(M, N, part, nparts)
                                                              : detail::part_range(M, N, part, nparts, 32, 32);
    // the column sums in one pass, rows in order: the same chain as the FMA path's per-block passes
    if (sums) detail::add_column_sums(A, lda, 0, K, r.s0, r.s1, sums);
    if (r.m0 >= r.m1 || r.n0 >= r.n1) return;
    void* w = ws ? ws : detail::thread_workspace((int64_t)(sgemm_workspace_bytes(M, N, K) / sizeof(float)));
    if (transA)
      detail::amx_block_kouter(transB, M, N, K, r.m0, r.m1, r.n0, r.n1, alpha, A, lda, B, ldb, beta, C, ldc, e, w);
    else
      detail::amx_block(transB, M, N, K, r.m0, r.m1, r.n0, r.n1, alpha, A, lda, B, ldb, beta, C, ldc, e, w);
    return;
  }
#endif
  // a 2D grid of parts where MPSC_FAST_FMA_GRID and it moves less (no column sums there: they follow part_range's rows)
  const detail::PartRange r = MPSC_FAST_FMA_GRID && !sums ? detail::part_grid_fma(detail::direct_a(transA, lda), M, N, part, nparts)
                                                          : detail::part_range(M, N, part, nparts);
  const int64_t m0 = r.m0, m1 = r.m1, n0 = r.n0, n1 = r.n1, s0 = r.s0, s1 = r.s1;
  if (m0 >= m1 || n0 >= n1 || K <= 0 || alpha == 0.0f) {
    if (sums) detail::add_column_sums(A, lda, 0, K, s0, s1, sums);
    if (m0 >= m1 || n0 >= n1) return;
    detail::scale_only(m0, m1, n0, n1, beta, C, ldc, e);
    return;
  }
  float* w = ws ? static_cast<float*>(ws)
                : detail::thread_workspace((int64_t)(sgemm_workspace_bytes(M, N, K) / sizeof(float)));
  // ic_outer on the whole N (the workspace is sized for it), not on this part's columns
  detail::gemm_block(transA, transB, m0, m1, n0, n1, K, alpha, A, lda, B, ldb, beta, C, ldc, e, w, sums, s0, s1,
                     detail::ic_outer(transA, lda, N, K));
}

/** the whole product on the calling thread (thread_local workspace when ws is nullptr) */
inline void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                  const Epilogue* epi = nullptr, void* ws = nullptr) {
  sgemm_part(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epi, 0, 1, ws);
}

}  // namespace mpsc_fast

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif
