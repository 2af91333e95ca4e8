/*
 * amx.h: fp32 GEMM on Intel AMX tiles at fp32 accuracy (split precision, "bf16x6"); included by sgemm.h.
 *
 * Each fp32 operand x is split into three bfloat16 pieces x = x0 + x1 + x2 (x0 = bf16(x) rounded to
 * nearest even, x1 = bf16(x - x0), x2 = bf16(x - x0 - x1); each residual is exact in fp32), which carry
 * its 24 significand bits. A product a * b is then the sum of the six piece products whose weight is at
 * least 2^-16 of the leading one,
 *     a2 b0 + a1 b0 + a1 b1 + a0 b1 + a0 b2 + a0 b0     (per 32-wide K block, in this order),
 * each exact in fp32 (8 x 8 significand bits) and accumulated in fp32 by TDPBF16PS; the dropped terms
 * (a1 b2, a2 b1, a2 b2) are below 2^-24 of |a b|, so the result has the accuracy of an fp32 GEMM (the
 * test compares it with a float64 product: max error / sum |a b| ~1e-7, as for the FMA kernel). This is
 * the CPU twin of 3xTF32 on the GPU's tensor cores: six bf16 tile products (1024 flop per cycle each on
 * one core's AMX unit) beat the AVX-512 FMAs (64 flop per cycle) about 2.7 to 1 at peak.
 *
 * Differences from an fp32 FMA chain, all documented in runtime/cpp/fast/README.md: the bits differ (another order of
 * roundings, the same for every thread count); AMX treats bf16 subnormals as zero, so magnitudes below
 * ~1e-38 (and the third piece of values below ~1e-33) contribute nothing; an infinite or NaN operand keeps
 * its first piece only (its residuals are set to zero) and a finite one at the top of the range is truncated,
 * not rounded to inf; but an inf's first piece also meets the other operand's lower pieces (zero, or of the
 * other sign), so an output that is +-inf in fp32 may come out NaN: non-finite either way.
 *
 * Layout. op(A) (M x K) is packed in groups of 16 rows: per group, per 32-wide K block, the three planes'
 * 16 x 32 bf16 tiles (1 KiB each, 64-byte rows). op(B) (K x N) in groups of 16 columns: per group, per K
 * block, the three planes' tiles in the VNNI layout TDPBF16PS reads (16 rows of K pairs, each row 16
 * columns x 2 bf16). K is zero-padded to a multiple of 32, M and N to multiples of 32.
 * Kernel: a 32 x 32 block of C in four 16 x 16 fp32 tiles through a K chunk (its sum goes to an fp32
 * buffer and back between chunks, exactly), so every C element is the same chain of tile products over the
 * K blocks in order, whatever the split into parts: bitwise identical for every thread count. The finished
 * block is stored to a 32 x 32 buffer and finished into C by sgemm's epilogue code (alpha, beta, bias,
 * relu, post). The loop orders are sgemm.h's detail::amx_block and amx_block_kouter.
 *
 * Availability: compiled where the flags allow AMX-TILE, AMX-BF16 and AVX512-BF16 (-march=native on a
 * Sapphire Rapids or later Xeon; not with -DMPSC_FAST_VW=8) unless -DMPSC_FAST_AMX=0 (MPSC_CPU_AMX=0 for
 * generated models); used when Linux grants the tile state (arch_prctl ARCH_REQ_XCOMP_PERM, once per process)
 * and the product is large enough (amx::pays).
 */
#ifndef MPSC_FAST_AMX_H
#define MPSC_FAST_AMX_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>

#ifndef MPSC_FAST_AMX
#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__linux__) && (!defined(MPSC_FAST_VW) || MPSC_FAST_VW == 16)
#define MPSC_FAST_AMX 1
#else
#define MPSC_FAST_AMX 0
#endif
#endif

#if MPSC_FAST_AMX
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

// GCC 12 reports its own intrinsics' _mm512_undefined_* placeholders as uninitialized once inlined here
#if MPSC_FAST_AMX && defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define MPSC_FAST_AMX_POP 1
#endif

namespace mpsc_fast {
namespace amx {

#if MPSC_FAST_AMX

/** whether this process may use the AMX tile registers (asks Linux once: the tile data state is opt-in) */
inline bool available() {
  static const bool ok = [] {
    const long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
  }();
  return ok;
}

constexpr int64_t TK = 32;     // K per tile product (bf16 elements)
constexpr int64_t TILE = 512;  // bf16 per tile (16 x 32)
constexpr int64_t PLANES = 3;

/** K per chunk of op(A)'s 32-row panels: 32 * KCH * 3 planes * 2 bytes = 24 KiB, L1-resident */
#ifndef MPSC_FAST_AMX_KCH
#define MPSC_FAST_AMX_KCH 128
#endif
constexpr int64_t KCH = MPSC_FAST_AMX_KCH;
static_assert(KCH % TK == 0, "MPSC_FAST_AMX_KCH must be a multiple of 32");

inline int64_t kpad(int64_t K) { return (K + TK - 1) / TK * TK; }
inline int64_t r32(int64_t x) { return (x + 31) / 32 * 32; }
/** columns of op(B), all of K, packed at a time: within ~1.5 MiB of the 2 MiB L2 */
inline int64_t n_chunk(int64_t K) {
  const int64_t per_col = kpad(K) * PLANES * 2;  // bytes
  return std::max<int64_t>(32, (1536 * 1024 / per_col) / 32 * 32);
}

/** a part's workspace: a packed 32-row panel of op(A) (one K chunk), a column chunk of op(B) (all of K),
 *  the block buffer and the running sums of one row of blocks */
struct Workspace {
  uint16_t* a[2];  // the panel chunk the blocks read, and the next one being packed
  uint16_t* b;
  float* cbuf;  // two 32 x 32 blocks: the one stored last and the one being finished
  float* acc;
};
inline int64_t a_elems(int64_t K) { return 32 * kpad(std::min(K, KCH)) * PLANES; }  // one of two buffers
inline int64_t b_cols(int64_t N, int64_t K) { return std::min(r32(N), n_chunk(K)); }
inline int64_t b_elems(int64_t N, int64_t K) { return b_cols(N, K) * kpad(K) * PLANES; }
inline int64_t acc_floats(int64_t N, int64_t K) { return K > KCH ? b_cols(N, K) * 32 : 0; }
/** the K-outer order (transposed op(A)): a chunk of all the part's op(A) rows and op(B) columns, every
 *  block's running sum */
struct WorkspaceK {
  uint16_t* a;
  uint16_t* b;
  float* cbuf;  // as in Workspace
  float* acc;
};
inline size_t workspace_bytes(int64_t M, int64_t N, int64_t K) {
  const size_t panel = (size_t)(2 * a_elems(K) + b_elems(N, K)) * 2 + (size_t)(2048 + acc_floats(N, K)) * 4 + 64;
  const size_t kouter = (size_t)(r32(M) + r32(N)) * KCH * PLANES * 2 + (size_t)(2048 + r32(M) * r32(N)) * 4;
  return std::max(panel, kouter) + 4 * 64;
}
inline Workspace carve(void* ws, int64_t N, int64_t K) {
  auto up = [](uintptr_t p) { return (p + 63) & ~(uintptr_t)63; };
  Workspace w;
  uintptr_t p = up((uintptr_t)ws);
  w.a[0] = (uint16_t*)p;
  p = up(p + (uintptr_t)a_elems(K) * 2);
  w.a[1] = (uint16_t*)p;
  p = up(p + (uintptr_t)a_elems(K) * 2);
  w.b = (uint16_t*)p;
  p = up(p + (uintptr_t)b_elems(N, K) * 2);
  w.cbuf = (float*)p;
  w.acc = (float*)up(p + 2048 * 4);
  return w;
}

inline WorkspaceK carve_kouter(void* ws, int64_t M, int64_t N) {
  auto up = [](uintptr_t p) { return (p + 63) & ~(uintptr_t)63; };
  WorkspaceK w;
  uintptr_t p = up((uintptr_t)ws);
  w.a = (uint16_t*)p;
  p = up(p + (uintptr_t)(r32(M) * KCH * PLANES) * 2);
  w.b = (uint16_t*)p;
  p = up(p + (uintptr_t)(r32(N) * KCH * PLANES) * 2);
  w.cbuf = (float*)p;
  w.acc = (float*)up(p + 2048 * 4);
  return w;
}

/** amx::pays: some dimension of a product the tiles take is at least this long (see there) */
constexpr int64_t AMX_MIN_LONG = 1024;

/**
 * whether sgemm runs this product on the tiles: large enough that the packing (three planes of both
 * operands) and the per-block stores are paid back. Shapes only, so every part and thread count agrees
 * (bench/sgemm_floor.sh, bench/NOTES.md "AMX").
 */
inline bool pays(bool transA, int64_t M, int64_t N, int64_t K) {
  // 2MN / (M + N): flops per packed element (each of op(A)'s M x K and op(B)'s K x N is split once);
  // below ~100 the three-plane packing costs more than the tiles save (LeNet's 64 x 128 x 3136: 85).
  // A transposed op(A) (a grad-weight dY^T X, both operands K-major, K the batch) only with N >= 256: with
  // N = 128 (the GPT's 512 x 128 x 2048 and 384 x 128 x 2048) the FMA kernel was faster inside the
  // 2-thread step here (each part packs all of op(B) and transposes its op(A) rows from memory)
  // The K-outer order keeps every block's running sum (r32(M) x r32(N) floats per part): at most 8 MiB.
  // Some dimension at least 1024 (AMX_MIN_LONG): inside the MLP's step (256 x 256 x 784 and its grad-weight
  // 256 x 784 x 256) the tiles ran 1.5x slower than the FMA kernel on a Xeon at 2 and at 8 threads (bench/NOTES.md
  // phase 27), while the GPT's 2048-row products gained; every product of the reference workloads with a dimension
  // of 1024 or more was measured at least even on the tiles.
  return M >= 32 && N >= 32 && K >= 32 && M * N * K >= (int64_t)1 << 19 && 2 * M * N >= 100 * (M + N) &&
         std::max(M, std::max(N, K)) >= AMX_MIN_LONG && (!transA || (N >= 256 && r32(M) * r32(N) <= (int64_t)1 << 21));
}

typedef __m512 f16v;  // 16 floats

static inline __m512 bf_to_f(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline __m256i to_bf(__m512 x) { return (__m256i)_mm512_cvtneps_pbh(x); }

/** the three bf16 pieces of 16 floats (see the header comment) */
static inline void split3(__m512 x, __m256i& p0, __m256i& p1, __m256i& p2) {
  __m256i h = to_bf(x);
  __m512 hf = bf_to_f(h);
  const __mmask16 xinf = _mm512_fpclass_ps_mask(x, 0x18);  // +-inf
  // a finite x at the top of the range rounds to inf: truncate it instead (still its top 8 bits)
  const __mmask16 ov = _mm512_fpclass_ps_mask(hf, 0x18) & (__mmask16)~xinf;
  if (ov) {
    h = _mm256_mask_mov_epi16(h, ov, _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(x), 16)));
    hf = bf_to_f(h);
  }
  const __mmask16 finite = (__mmask16)~_mm512_fpclass_ps_mask(x, 0x99);  // not NaN, not inf
  const __m512 r = _mm512_maskz_sub_ps(finite, x, hf);
  const __m256i m = to_bf(r);
  const __m512 r2 = _mm512_sub_ps(r, bf_to_f(m));
  p0 = h;
  p1 = m;
  p2 = to_bf(r2);
}

/** interleave the 16-bit elements of a and b: dword i = (a[i], b[i]) */
static inline __m512i pair16(__m256i a, __m256i b) {
  const __m512i idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                       37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  return _mm512_permutex2var_epi16(_mm512_castsi256_si512(a), idx, _mm512_castsi256_si512(b));
}

/** in-register transpose of a 16 x 16 matrix of 32-bit elements */
static inline void transpose16(__m512i r[16]) {
  __m512i a[16], b[16];
  for (int k = 0; k < 8; ++k) {
    a[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    a[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 4; ++k) {
    b[4 * k + 0] = _mm512_unpacklo_epi64(a[4 * k], a[4 * k + 2]);
    b[4 * k + 1] = _mm512_unpackhi_epi64(a[4 * k], a[4 * k + 2]);
    b[4 * k + 2] = _mm512_unpacklo_epi64(a[4 * k + 1], a[4 * k + 3]);
    b[4 * k + 3] = _mm512_unpackhi_epi64(a[4 * k + 1], a[4 * k + 3]);
  }
  for (int m = 0; m < 4; ++m) {
    const __m512i c0 = _mm512_shuffle_i32x4(b[m], b[4 + m], 0x88), c1 = _mm512_shuffle_i32x4(b[m], b[4 + m], 0xDD);
    const __m512i d0 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], 0x88), d1 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], 0xDD);
    r[m] = _mm512_shuffle_i32x4(c0, d0, 0x88);
    r[8 + m] = _mm512_shuffle_i32x4(c0, d0, 0xDD);
    r[4 + m] = _mm512_shuffle_i32x4(c1, d1, 0x88);
    r[12 + m] = _mm512_shuffle_i32x4(c1, d1, 0xDD);
  }
}

/** 16 floats at p, lanes at or past n read as zero (n may be <= 0) */
static inline __m512 load16(const float* p, int64_t n) {
  if (n >= 16) return _mm512_loadu_ps(p);
  if (n <= 0) return _mm512_setzero_ps();
  return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
}

/**
 * One 16 x 32 (rows x K) block of a matrix X whose rows run along K ("K-contiguous": element (r, k) at
 * X[r * ld + k]), rows [0, nr) and K [0, nk) valid, the rest zero, into three row-major tiles
 * (plane q at dst + q * TILE). Used for op(A) = A and, as the transposed-B source, never directly.
 */
static inline void pack_rows_tile(const float* X, int64_t ld, int64_t nr, int64_t nk, uint16_t* dst) {
  for (int r = 0; r < 16; ++r) {
    __m256i p[2][3];
    for (int h = 0; h < 2; ++h) {
      const __m512 x = r < nr ? load16(X + r * ld + 16 * h, nk - 16 * h) : _mm512_setzero_ps();
      split3(x, p[h][0], p[h][1], p[h][2]);
    }
    for (int q = 0; q < 3; ++q) {
      _mm256_store_si256((__m256i*)(dst + q * TILE + r * 32), p[0][q]);
      _mm256_store_si256((__m256i*)(dst + q * TILE + r * 32 + 16), p[1][q]);
    }
  }
}

/**
 * The same 16 x 32 block where the matrix is stored K-major (element (r, k) at X[k * ld + r]): the 32 x 16
 * floats transposed in registers (two 16 x 16 transposes), then split row by row like pack_rows_tile.
 * (Splitting first and transposing the three bf16 planes as K pairs costs half again as many shuffles.)
 */
static inline void pack_cols_tile(const float* X, int64_t ld, int64_t nr, int64_t nk, uint16_t* dst) {
  __m512i v[2][16];
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 16; ++k) {
      const int kk = 16 * h + k;
      v[h][k] = _mm512_castps_si512(kk < nk ? load16(X + kk * ld, nr) : _mm512_setzero_ps());
    }
  transpose16(v[0]);  // v[0][r]: X(r, 0..15)
  transpose16(v[1]);  // v[1][r]: X(r, 16..31)
  for (int r = 0; r < 16; ++r) {
    __m256i p[2][3];
    for (int h = 0; h < 2; ++h) split3(_mm512_castsi512_ps(v[h][r]), p[h][0], p[h][1], p[h][2]);
    for (int q = 0; q < 3; ++q) {
      _mm256_store_si256((__m256i*)(dst + q * TILE + r * 32), p[0][q]);
      _mm256_store_si256((__m256i*)(dst + q * TILE + r * 32 + 16), p[1][q]);
    }
  }
}

/**
 * One VNNI tile group of op(B) (32 K x 16 columns) where B is stored K-major (element (k, j) at
 * B[k * ld + j], B not transposed): row kp of a tile = columns j of K rows 2kp and 2kp+1, interleaved.
 */
static inline void pack_b_kmajor_tile(const float* B, int64_t ld, int64_t nc, int64_t nk, uint16_t* dst) {
  for (int kp = 0; kp < 16; ++kp) {
    __m256i p0[3], p1[3];
    const __m512 x0 = 2 * kp < nk ? load16(B + (2 * kp) * ld, nc) : _mm512_setzero_ps();
    const __m512 x1 = 2 * kp + 1 < nk ? load16(B + (2 * kp + 1) * ld, nc) : _mm512_setzero_ps();
    split3(x0, p0[0], p0[1], p0[2]);
    split3(x1, p1[0], p1[1], p1[2]);
    for (int q = 0; q < 3; ++q) _mm512_store_si512((__m512i*)(dst + q * TILE + kp * 32), pair16(p0[q], p1[q]));
  }
}

/**
 * The same where B is stored column-major for op(B) (transB: element (k, j) at B[j * ld + k]): each
 * column's 32 K values are 16 pairs in order, so a 16 x 16 dword transpose gives the VNNI rows.
 */
static inline void pack_b_nmajor_tile(const float* B, int64_t ld, int64_t nc, int64_t nk, uint16_t* dst) {
  __m512i d[3][16];
  for (int j = 0; j < 16; ++j) {
    __m256i p[2][3];
    for (int h = 0; h < 2; ++h) {
      const __m512 x = j < nc ? load16(B + j * ld + 16 * h, nk - 16 * h) : _mm512_setzero_ps();
      split3(x, p[h][0], p[h][1], p[h][2]);
    }
    // dwords kp = 0..15 of column j: the 32 bf16 of K in order
    for (int q = 0; q < 3; ++q) d[q][j] = _mm512_inserti64x4(_mm512_castsi256_si512(p[0][q]), p[1][q], 1);
  }
  for (int q = 0; q < 3; ++q) {
    transpose16(d[q]);  // d[q][kp] dword j = column j's pair kp
    for (int kp = 0; kp < 16; ++kp) _mm512_store_si512((__m512i*)(dst + q * TILE + kp * 32), d[q][kp]);
  }
}

/**
 * The packers' loop: every (16-wide group g, K block kb) tile triple of a panel of `groups` groups and KB
 * K blocks, each at dst + (g * KB + kb) * PLANES * TILE. A K-contiguous source (rows along K: op(A) = A,
 * op(B) = B^T) goes group by group, each row streamed along K; a K-major source (rows of K: A^T, B) K
 * block by K block, so each source row is read across all groups in one pass (column strips would touch
 * one cache line per row, 4 KiB or more apart, which the hardware prefetcher does not follow).
 */
template <class F>
inline void for_tiles(bool k_major, int64_t groups, int64_t KB, F&& f) {
  if (k_major)
    for (int64_t kb = 0; kb < KB; ++kb)
      for (int64_t g = 0; g < groups; ++g) f(g, kb);
  else
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t kb = 0; kb < KB; ++kb) f(g, kb);
}

/** the tile triple (g, kb) of op(A) rows [i0, ...) over K [0, K) (A already offset to the chunk) at dst */
inline void pack_a_tile(bool transA, const float* A, int64_t lda, int64_t M, int64_t i0, int64_t K, int64_t KB,
                        int64_t g, int64_t kb, uint16_t* dst) {
  const int64_t r0 = i0 + 16 * g, nr = std::min<int64_t>(16, M - r0);
  uint16_t* t = dst + (g * KB + kb) * PLANES * TILE;
  const int64_t k0 = kb * TK, nk = K - k0;
  if (nr <= 0) memset(t, 0, PLANES * TILE * 2);
  else if (transA) pack_cols_tile(A + k0 * lda + r0, lda, nr, nk, t);
  else pack_rows_tile(A + r0 * lda + k0, lda, nr, nk, t);
}

/** packs op(A) rows [i0, i0 + m) (m rounded up to 32 with zero rows) into dst: [group 16][K block][plane] */
inline void pack_a(bool transA, const float* A, int64_t lda, int64_t M, int64_t i0, int64_t m, int64_t K,
                   uint16_t* dst) {
  const int64_t KB = kpad(K) / TK, groups = (m + 31) / 32 * 2;
  for_tiles(transA, groups, KB, [&](int64_t g, int64_t kb) { pack_a_tile(transA, A, lda, M, i0, K, KB, g, kb, dst); });
}

/** packs op(B) columns [j0, j0 + n) (n rounded up to 32 with zero columns): [group 16][K block][plane] */
inline void pack_b(bool transB, const float* B, int64_t ldb, int64_t N, int64_t j0, int64_t n, int64_t K,
                   uint16_t* dst) {
  const int64_t KB = kpad(K) / TK, groups = (n + 31) / 32 * 2;
  for_tiles(!transB, groups, KB, [&](int64_t g, int64_t kb) {
    const int64_t c0 = j0 + 16 * g, nc = std::min<int64_t>(16, N - c0);
    uint16_t* t = dst + (g * KB + kb) * PLANES * TILE;
    const int64_t k0 = kb * TK, nk = K - k0;
    if (nc <= 0) memset(t, 0, PLANES * TILE * 2);
    else if (transB) pack_b_nmajor_tile(B + c0 * ldb + k0, ldb, nc, nk, t);
    else pack_b_kmajor_tile(B + k0 * ldb + c0, ldb, nc, nk, t);
  });
}

struct TileConfig {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

/** configures eight 16 x 64-byte tiles on the calling thread (tmm0-3: C, tmm4-5: A, tmm6-7: B) */
inline void configure() {
  alignas(64) TileConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  // GCC 12 does not model ldtilecfg as reading its 64 bytes and may drop the stores above: a compiler barrier
  __asm__ __volatile__("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

/**
 * Issues one 32 x 32 block of C (in tmm0-3) = cin (32 x 32 floats, row stride 32; zero when cin is null)
 * + the sum over the K blocks of the six piece products; block32_store writes it out. The TMUL runs the
 * products while the core goes on, so the caller finishes the previous block in between.
 * a0 / a1: the two 16-row groups' packed blocks, b0 / b1: the two 16-column groups'; KB K blocks of
 * PLANES tiles each. Products per K block in the order a2b0, a1b0, a1b1, a0b1, a0b2, a0b0 (each pair of
 * consecutive products shares one operand, so 14 tile loads per 24 tile products).
 */
static inline void block32_run(const uint16_t* a0, const uint16_t* a1, const uint16_t* b0, const uint16_t* b1,
                               int64_t KB, const float* cin) {
  if (cin) {
    _tile_loadd(0, cin, 128);
    _tile_loadd(1, cin + 16, 128);
    _tile_loadd(2, cin + 16 * 32, 128);
    _tile_loadd(3, cin + 16 * 32 + 16, 128);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t kb = 0; kb < KB; ++kb) {
    const uint16_t *x0 = a0 + kb * PLANES * TILE, *x1 = a1 + kb * PLANES * TILE;
    const uint16_t *y0 = b0 + kb * PLANES * TILE, *y1 = b1 + kb * PLANES * TILE;
#define MPSC_AMX_T4        \
  _tile_dpbf16ps(0, 4, 6); \
  _tile_dpbf16ps(1, 4, 7); \
  _tile_dpbf16ps(2, 5, 6); \
  _tile_dpbf16ps(3, 5, 7);
    _tile_loadd(4, x0 + 2 * TILE, 64);  // a2 b0
    _tile_loadd(5, x1 + 2 * TILE, 64);
    _tile_loadd(6, y0, 64);
    _tile_loadd(7, y1, 64);
    MPSC_AMX_T4
    _tile_loadd(4, x0 + TILE, 64);  // a1 b0
    _tile_loadd(5, x1 + TILE, 64);
    MPSC_AMX_T4
    _tile_loadd(6, y0 + TILE, 64);  // a1 b1
    _tile_loadd(7, y1 + TILE, 64);
    MPSC_AMX_T4
    _tile_loadd(4, x0, 64);  // a0 b1
    _tile_loadd(5, x1, 64);
    MPSC_AMX_T4
    _tile_loadd(6, y0 + 2 * TILE, 64);  // a0 b2
    _tile_loadd(7, y1 + 2 * TILE, 64);
    MPSC_AMX_T4
    _tile_loadd(6, y0, 64);  // a0 b0
    _tile_loadd(7, y1, 64);
    MPSC_AMX_T4
#undef MPSC_AMX_T4
  }
}
/** the block's four C tiles to cbuf (32 x 32 floats, row stride 32); waits for block32_run's products */
static inline void block32_store(float* cbuf) {
  _tile_stored(0, cbuf, 128);
  _tile_stored(1, cbuf + 16, 128);
  _tile_stored(2, cbuf + 16 * 32, 128);
  _tile_stored(3, cbuf + 16 * 32 + 16, 128);
}

#else  // !MPSC_FAST_AMX

inline bool available() { return false; }
inline bool pays(bool, int64_t, int64_t, int64_t) { return false; }
inline size_t workspace_bytes(int64_t, int64_t, int64_t) { return 0; }

#endif

}  // namespace amx
}  // namespace mpsc_fast

#ifdef MPSC_FAST_AMX_POP
#pragma GCC diagnostic pop
#undef MPSC_FAST_AMX_POP
#endif

#endif
