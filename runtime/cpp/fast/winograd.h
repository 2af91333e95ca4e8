/*
 * winograd.h: 3x3 stride-1 convolutions by Winograd's minimal filtering F(2x2, 3x3) (Lavin & Gray,
 * "Fast Algorithms for Convolutional Neural Networks", 2015), used by conv.h for the forward pass,
 * the grad-input (a forward convolution of dy with the flipped, transposed weights) and the
 * grad-weight (wino_dw_chunk / wino_dw_finish below).
 *
 * Each 2x2 block of outputs ("tile") of one output channel is A^T [ sum_c (G g_oc G^T) . (B^T d_c B) ] A,
 * with d_c the 4x4 input patch under the tile and . the elementwise product of 4x4 matrices. So the
 * 16 positions xi of the 4x4 transformed domain are 16 independent GEMMs
 *     M[xi] (O x tiles) = U[xi] (O x C) * V[xi] (C x tiles)
 * with 2.25x fewer multiply-adds than the direct convolution (16 per tile instead of 4 * 9). The
 * transforms only add and halve (entries 0, +-1, +-1/2), so the rounding stays close to the direct
 * sum's; conv.h uses it where the channels make the GEMMs outweigh the transforms (wino_ok).
 *
 * Work is split into blocks of Tb consecutive tiles (global order: image, tile row, tile column),
 * sized so a block's V (16 x C x Tb) and M (16 x O x Tb) stay in L2. Per block: input transform
 * into V, 16 GEMMs (U pre-packed once per call and part), output transform (+ bias, relu) into y.
 * Parts take whole blocks; every output is computed by one block in one fixed order, so results
 * are the same bits for any nparts.
 */
#ifndef MPSC_FAST_WINOGRAD_H
#define MPSC_FAST_WINOGRAD_H

#include "sgemm.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#ifndef MPSC_FAST_WINOGRAD
#define MPSC_FAST_WINOGRAD 1
#endif
/** floats of one block's V + M that should stay in L2 (sets the tiles per block) */
#ifndef MPSC_FAST_WINO_BLOCK_FLOATS
#define MPSC_FAST_WINO_BLOCK_FLOATS (96 * 1024)
#endif

namespace mpsc_fast {
namespace detail {

/** geometry of the F(2x2, 3x3) tiling of a convolution with output OH x OW */
struct Wino {
  int64_t th, tw;   // tile rows / columns per image: ceil(OH/2), ceil(OW/2)
  int64_t T;        // tiles in the batch: N * th * tw
  int64_t Tb;       // tiles per block (a multiple of NR)
  int64_t Tbs;      // row stride of V / M in floats (Tb + slack for 8-lane stores and reads)
  int64_t blocks;   // ceil(T / Tb)
  int64_t rowlen;   // floats of one deinterleaved input row (E or Od): tw + 1 + 8, rounded up to 8
};

inline Wino wino_dims(int64_t N, int64_t C, int64_t O, int64_t OH, int64_t OW) {
  Wino w;
  w.th = (OH + 1) / 2;
  w.tw = (OW + 1) / 2;
  w.T = N * w.th * w.tw;
  const int64_t per_tile = 16 * (C + O);
  w.Tb = std::max<int64_t>(NR, (int64_t)MPSC_FAST_WINO_BLOCK_FLOATS / per_tile / NR * NR);
  w.Tb = std::min(w.Tb, round_up(std::max<int64_t>(w.T, 1), NR));
  w.Tbs = w.Tb + 16;
  w.blocks = (w.T + w.Tb - 1) / w.Tb;
  w.rowlen = round_up(w.tw + 1 + 8, 8);
  return w;
}

/**
 * floats between the 16 matrices xi of V, M or D (rows of Tbs floats each): rows * Tbs plus one
 * cache line, so the 16 stores of a transform, one per xi, fall in different L1 sets (without the
 * line the stride is a multiple of 4 KiB for the seed CNN's shapes: 16 streams into one 12-way set)
 */
inline int64_t wino_xs(const Wino& w, int64_t rows) { return rows * w.Tbs + 16; }

/**
 * The shapes Winograd takes: a 3x3 kernel, stride 1, dilation 1, one group, padding <= 2 (the
 * grad-input's padding 2 - p is then one too), and channels where the GEMMs outweigh the
 * transforms: per tile the GEMMs cost 16*C*O multiply-adds, the transforms ~C + O loads and
 * stores of 16 values each, so C*O/(C + O) >= 16 (32 -> 32, LeNet's 32 -> 64, 64 -> 128 qualify).
 * The bound was 32 until 5 Dec; on the AMD EPYC of bench/NOTES.md phase 17 LeNet's 32 -> 64 forward
 * then ran 4.1 -> 2.2-2.8 ms and its grad-input 4.0 -> 2.4-3.0 (1 thread), resnet_small's 32 -> 32
 * layers' step 157-168 -> 134-152 ms CPU. The grad-weight keeps 32 (conv.h wino_grad_weight_ok).
 */
inline bool wino_ok(int64_t N, int64_t C, int64_t O, int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t dh,
                    int64_t dw, int64_t groups, int64_t ph, int64_t pw, int64_t OH, int64_t OW) {
  return MPSC_FAST_WINOGRAD && N > 0 && KH == 3 && KW == 3 && sh == 1 && sw == 1 && dh == 1 && dw == 1 &&
         groups == 1 && ph >= 0 && ph <= 2 && pw >= 0 && pw <= 2 && C * O >= 16 * (C + O) && OH > 0 && OW > 0;
}

/** floats of one part's scratch: packed U (16 x O x C), U before packing, V, M, a packed B block, input rows */
inline int64_t wino_floats(int64_t N, int64_t C, int64_t O, int64_t OH, int64_t OW) {
  const Wino w = wino_dims(N, C, O, OH, OW);
  return 16 * packed_a_all_floats(O, C) + round_up(16 * O * C, 16) + round_up(16 * wino_xs(w, C), 16) +
         round_up(16 * wino_xs(w, O) + 16, 16) + round_up(kc_step(C) * w.Tb, 16) + round_up(2 * w.rowlen * (2 * w.th + 3), 16);
}

/**
 * U[xi] = G g G^T for every (o, c), packed as 16 GEMM A operands (O x C each). With `flipped`,
 * g_oc[kh][kw] = w[c][o][2-kh][2-kw] (w is the weight of the convolution this one is the
 * grad-input of, [C][O][3][3]); else g_oc = w[o][c].
 */
inline void wino_weights(const float* w, bool flipped, int64_t C, int64_t O, float* Ug, float* Up) {
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c) {
      float g[9];
      if (flipped)
        for (int k = 0; k < 9; ++k) g[k] = w[(c * O + o) * 9 + (8 - k)];
      else
        for (int k = 0; k < 9; ++k) g[k] = w[(o * C + c) * 9 + k];
      float t[4][3];  // G g
      for (int j = 0; j < 3; ++j) {
        t[0][j] = g[j];
        t[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
        t[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
        t[3][j] = g[6 + j];
      }
      for (int i = 0; i < 4; ++i) {  // (G g) G^T
        const float a = t[i][0], b = t[i][1], cc = t[i][2];
        float* u = Ug + (i * 4) * O * C + o * C + c;
        u[0] = a;
        u[O * C] = 0.5f * (a + b + cc);
        u[2 * O * C] = 0.5f * (a - b + cc);
        u[3 * O * C] = cc;
      }
    }
  for (int xi = 0; xi < 16; ++xi) pack_a_all(false, Ug + xi * O * C, C, O, C, Up + xi * packed_a_all_floats(O, C));
}

static inline v8f relu8(v8f v) {
  const v8f z = splat8(0.0f);
  return v > z ? v : z;  // lane-wise select (GCC and clang vector extensions)
}

/**
 * dst[i] = mask[i] > 0 ? src[i] : 0 for i < n (a relu-grad folded into a store; dst may be src):
 * the select of unary_grad relu, so the same bits as the separate pass
 */
inline void mask_store(float* dst, const float* src, const float* mask, int64_t n) {
  const v8f z = splat8(0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(dst + i, load8(mask + i) > z ? load8(src + i) : z);
  for (; i < n; ++i) dst[i] = mask[i] > 0.0f ? src[i] : 0.0f;
}

/** stores the first n (<= 16) floats of the 16 in (a, b) at dst */
static inline void store_n(float* dst, v8f a, v8f b, int64_t n) {
  if (n == 16) {
    store8(dst, a);
    store8(dst + 8, b);
    return;
  }
  if (n >= 8) {
    store8(dst, a);
    for (int64_t i = 8; i < n; ++i) dst[i] = b[i - 8];
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = a[i];
}

/** calls f(n, ty, tx0, tx1, tloc) for the runs of tiles of one tile row inside tiles [t0, t1) */
template <class F>
inline void wino_runs(const Wino& w, int64_t t0, int64_t t1, F&& f) {
  int64_t t = t0;
  while (t < t1) {
    const int64_t n = t / (w.th * w.tw), rem = t % (w.th * w.tw), ty = rem / w.tw, tx = rem % w.tw;
    const int64_t tx1 = std::min(w.tw, tx + (t1 - t));
    f(n, ty, tx, tx1, t - t0);
    t += tx1 - tx;
  }
}

/**
 * V[xi][c][tloc] = (B^T d B)[xi] for the tiles [t0, t1) and every channel (image n's C x H x W planes
 * at x + n*C*H*W). Per image and channel, the zero-padded input rows under the block's tile rows are
 * copied once, deinterleaved (E[k] = padded column 2k, Od[k] = 2k + 1), so the transform runs 8
 * tiles of a row at a time with plain vector loads; each copied row serves two tile rows.
 */
inline void wino_input(const float* x, int64_t C, int64_t H, int64_t W, int64_t ph, int64_t pw, const Wino& w,
                       int64_t t0, int64_t t1, float* V, float* rows) {
  const int64_t per_img = w.th * w.tw, L = w.rowlen;  // L: floats of one deinterleaved row (E or Od)
  float* pad = rows;                                   // one zero-padded input row: 2 * L floats
  float* plane = rows + 2 * L;                         // deinterleaved rows: row q at plane + 2*q*L (E), + L (Od)
  for (int64_t n = t0 / per_img; n * per_img < t1; ++n) {
    const int64_t a = std::max(t0, n * per_img) - n * per_img, b = std::min(t1, (n + 1) * per_img) - n * per_img;
    const int64_t ya = a / w.tw, yb = (b - 1) / w.tw + 1;  // tile rows of this image in the block
    const int64_t iy0 = 2 * ya - ph, nrows = 2 * (yb - ya) + 2;
    for (int64_t c = 0; c < C; ++c) {
      const float* xc = x + (n * C + c) * H * W;
      for (int64_t q = 0; q < nrows; ++q) {
        float* e = plane + 2 * q * L;
        float* od = e + L;
        const int64_t iy = iy0 + q;
        if (iy < 0 || iy >= H) {
          memset(e, 0, (size_t)(2 * L) * sizeof(float));
          continue;
        }
        // padded row: pw zeros, the W values, zeros; then split into even / odd columns
        const int64_t cols = std::min(W, 2 * L - pw);
        memset(pad, 0, (size_t)(2 * L) * sizeof(float));
        memcpy(pad + pw, xc + iy * W, (size_t)cols * sizeof(float));
        int64_t k = 0;
        for (; k + 8 <= L; k += 8) {
          const v8f lo = load8(pad + 2 * k), hi = load8(pad + 2 * k + 8);
          store8(e + k, __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14));
          store8(od + k, __builtin_shufflevector(lo, hi, 1, 3, 5, 7, 9, 11, 13, 15));
        }
        for (; k < L; ++k) e[k] = pad[2 * k], od[k] = pad[2 * k + 1];
      }
      for (int64_t ty = ya; ty < yb; ++ty) {
        const int64_t tx0 = ty == ya ? a % w.tw : 0, tx1 = ty == yb - 1 ? (b - 1) % w.tw + 1 : w.tw;
        const int64_t tloc = n * per_img + ty * w.tw + tx0 - t0;
        const float* r0 = plane + 2 * (2 * (ty - ya)) * L;  // the tile row's 4 input rows, 2L apart (E, Od)
        for (int64_t k = tx0; k < tx1; k += 8) {
          v8f col[4][4];  // col[r][j]: (d B)[r][j] for 8 tiles
          for (int r = 0; r < 4; ++r) {
            const float* e = r0 + 2 * r * L;
            const float* od = e + L;
            const v8f e0 = load8(e + k), e1 = load8(e + k + 1), o0 = load8(od + k), o1 = load8(od + k + 1);
            col[r][0] = e0 - e1;
            col[r][1] = o0 + e1;
            col[r][2] = e1 - o0;
            col[r][3] = o0 - o1;
          }
          float* dst = V + c * w.Tbs + tloc + (k - tx0);
          const int64_t xs = wino_xs(w, C);  // V stride between xi
          for (int j = 0; j < 4; ++j) {
            store8(dst + (0 * 4 + j) * xs, col[0][j] - col[2][j]);
            store8(dst + (1 * 4 + j) * xs, col[1][j] + col[2][j]);
            store8(dst + (2 * 4 + j) * xs, col[2][j] - col[1][j]);
            store8(dst + (3 * 4 + j) * xs, col[1][j] - col[3][j]);
          }
        }
      }
    }
  }
}

/**
 * y tiles of [t0, t1) = A^T M A (+ bias[o], relu) from M[xi][o][tloc]; y is [N][O][OH][OW] and
 * the last tile row / column is cut to OH / OW. With `mask` (y's shape): y = mask > 0 ? value : 0.
 */
inline void wino_output(const float* M, int64_t O, int64_t OH, int64_t OW, const Wino& w, int64_t t0, int64_t t1,
                        const float* bias, bool relu, float* y, const float* mask = nullptr) {
  const int64_t xs = wino_xs(w, O);  // M stride between xi
  wino_runs(w, t0, t1, [&](int64_t n, int64_t ty, int64_t tx0, int64_t tx1, int64_t tloc) {
    const int64_t oy = 2 * ty;
    for (int64_t o = 0; o < O; ++o) {
      const v8f b = splat8(bias ? bias[o] : 0.0f);
      float* yo = y + ((n * O + o) * OH + oy) * OW;
      for (int64_t k = tx0; k < tx1; k += 8) {
        const float* m = M + o * w.Tbs + tloc + (k - tx0);
        v8f s0[4], s1[4];  // A^T m over rows, per column j
        for (int j = 0; j < 4; ++j) {
          const v8f m0 = load8(m + (0 * 4 + j) * xs), m1 = load8(m + (1 * 4 + j) * xs);
          const v8f m2 = load8(m + (2 * 4 + j) * xs), m3 = load8(m + (3 * 4 + j) * xs);
          s0[j] = m0 + m1 + m2;
          s1[j] = m1 - m2 - m3;
        }
        const v8f q[4] = {s0[0] + s0[1] + s0[2] + b, s0[1] - s0[2] - s0[3] + b, s1[0] + s1[1] + s1[2] + b,
                          s1[1] - s1[2] - s1[3] + b};
        // interleave the two columns of each output row: (y00, y01) of tile 0, then of tile 1, ...
        v8f r[4] = {__builtin_shufflevector(q[0], q[1], 0, 8, 1, 9, 2, 10, 3, 11),
                    __builtin_shufflevector(q[0], q[1], 4, 12, 5, 13, 6, 14, 7, 15),
                    __builtin_shufflevector(q[2], q[3], 0, 8, 1, 9, 2, 10, 3, 11),
                    __builtin_shufflevector(q[2], q[3], 4, 12, 5, 13, 6, 14, 7, 15)};
        if (relu)
          for (auto& v : r) v = relu8(v);
        const int64_t ox = 2 * k, cnt = std::min<int64_t>(2 * std::min<int64_t>(8, tx1 - k), OW - ox);
        if (mask && cnt == 16) {  // 8 whole tiles: the select on the vectors
          const float* mo = mask + (yo - y) + ox;
          const v8f z = splat8(0.0f);
          r[0] = load8(mo) > z ? r[0] : z;
          r[1] = load8(mo + 8) > z ? r[1] : z;
          if (oy + 1 < OH) {
            r[2] = load8(mo + OW) > z ? r[2] : z;
            r[3] = load8(mo + OW + 8) > z ? r[3] : z;
          }
        } else if (mask) {
          // the tile row's two output rows through a 16-float buffer each, then the masked store
          alignas(32) float t[16];
          const float* mo = mask + (yo - y);
          store8(t, r[0]);
          store8(t + 8, r[1]);
          mask_store(yo + ox, t, mo + ox, cnt);
          if (oy + 1 < OH) {
            store8(t, r[2]);
            store8(t + 8, r[3]);
            mask_store(yo + OW + ox, t, mo + OW + ox, cnt);
          }
          continue;
        }
        store_n(yo + ox, r[0], r[1], cnt);
        if (oy + 1 < OH) store_n(yo + OW + ox, r[2], r[3], cnt);
      }
    }
  });
}

/**
 * y = conv(x, w) (+ bias, relu) by F(2x2, 3x3) for wino_ok shapes (x [N][C][H][W], padding ph, pw,
 * output O x OH x OW), share `part` of nparts: whole blocks of tiles. `flipped` as wino_weights.
 */
inline void wino_forward_part(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t ph, int64_t pw,
                              int64_t OH, int64_t OW, const float* x, const float* wt, bool flipped,
                              const float* bias, bool relu, float* y, int part, int nparts, void* scratch,
                              const float* mask = nullptr) {
  const Wino w = wino_dims(N, C, O, OH, OW);
  int64_t b0, b1;
  if (nparts < 1) nparts = 1;
  b0 = w.blocks * part / nparts;
  b1 = w.blocks * (part + 1) / nparts;
  if (b0 >= b1) return;
  const int64_t pa = packed_a_all_floats(O, C);
  float* Up = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
  float* Ug = Up + 16 * pa;
  float* V = Ug + round_up(16 * O * C, 16);
  float* M = V + round_up(16 * wino_xs(w, C), 16);
  float* Bp = M + round_up(16 * wino_xs(w, O) + 16, 16);
  float* rows = Bp + round_up(kc_step(C) * w.Tb, 16);
  wino_weights(wt, flipped, C, O, Ug, Up);
  for (int64_t bi = b0; bi < b1; ++bi) {
    const int64_t t0 = bi * w.Tb, t1 = std::min(w.T, t0 + w.Tb), nt = t1 - t0;
    wino_input(x, C, H, W, ph, pw, w, t0, t1, V, rows);
    // columns [nt, round_up(nt, NR)) of the last block's V are read by the packing: make them 0
    const int64_t ntr = round_up(nt, NR);
    if (ntr > nt)
      for (int xi = 0; xi < 16; ++xi)
        for (int64_t c = 0; c < C; ++c) memset(V + xi * wino_xs(w, C) + c * w.Tbs + nt, 0, (size_t)(ntr - nt) * sizeof(float));
    for (int xi = 0; xi < 16; ++xi) {
      const float* Vx = V + xi * wino_xs(w, C);
      const float* Ux = Up + xi * pa;
      gemm_driver(
          0, O, 0, nt, C, w.Tb, 1.0f, 0.0f, M + xi * wino_xs(w, O), w.Tbs, Epilogue{},
          [&](int64_t ic, int64_t mc, int64_t pc, int64_t) { return packed_a_block(Ux, C, ic, mc, pc); },
          [&](int64_t pc, int64_t kc, int64_t jc, int64_t nc) {
            for (int64_t jr = 0; jr < nc; jr += NR) {
              float* d = Bp + jr * kc;
              const float* src = Vx + pc * w.Tbs + jc + jr;
              for (int64_t r = 0; r < kc; ++r) copy_nr(d + r * NR, src + r * w.Tbs);
            }
            return (const float*)Bp;
          });
    }
    wino_output(M, O, OH, OW, w, t0, t1, bias, relu, y, mask);
  }
}

/*
 * Grad-weight by F(2x2, 3x3), the transpose of the forward's identity: with y_tile = A^T [(G g G^T) .
 * (B^T d B)] A, sum_tile <dy, y> = sum_xi (A dy A^T)[xi] (G g G^T)[xi] (B^T d B)[xi], so
 *     dW[o][c] = G^T [ sum_tiles (A dy_o A^T) . (B^T d_c B) ] G
 * with dy_o the 2x2 block of dy under the tile (0 past OH / OW). The sums over tiles are again 16
 * GEMMs, now with the tiles as K: Mw[xi] (O x C) += D[xi] (O x tiles) * V[xi]^T (tiles x C), D the
 * transformed dy, V the forward's transformed input (wino_input). 2.25x fewer multiply-adds than the
 * direct grad-weight; the output transform G^T M G (entries 1, +-1/2) runs once per (o, c) at the end.
 * Threading (conv.h conv2d_grad_weight_part): phase 0 sums fixed batch chunks (a function of the
 * shape) into one Mw per chunk, phase 1 adds the chunks' Mw in order and transforms; so the bits do
 * not depend on nparts.
 */
#ifndef MPSC_FAST_WINO_DW_BLOCK_FLOATS
#define MPSC_FAST_WINO_DW_BLOCK_FLOATS (192 * 1024)
#endif

/** the F(2x2, 3x3) tiling of a grad-weight: wino_dims with blocks of about MPSC_FAST_WINO_DW_BLOCK_FLOATS of V + D */
inline Wino wino_dw_dims(int64_t N, int64_t C, int64_t O, int64_t OH, int64_t OW) {
  Wino w = wino_dims(N, C, O, OH, OW);
  w.Tb = std::max<int64_t>(NR, (int64_t)MPSC_FAST_WINO_DW_BLOCK_FLOATS / (16 * (C + O)) / NR * NR);
  w.Tb = std::min(std::min(w.Tb, KC / NR * NR), round_up(std::max<int64_t>(w.T, 1), NR));  // one K block per GEMM
  w.Tbs = w.Tb + 16;
  w.blocks = (w.T + w.Tb - 1) / w.Tb;
  return w;
}

/** floats of one xi's packed D: MR-row panels of O rows, up to Tb tiles */
inline int64_t wino_dpanel_floats(const Wino& w, int64_t O) { return round_up(round_up(O, MR) * w.Tb, 16) + 16; }

/** floats of one part's grad-weight scratch: V, D, packed A and B blocks, input rows */
inline int64_t wino_dw_floats(int64_t N, int64_t C, int64_t O, int64_t OH, int64_t OW) {
  const Wino w = wino_dw_dims(N, C, O, OH, OW);
  return round_up(16 * wino_xs(w, C) + 16, 16) + 16 * wino_dpanel_floats(w, O) + 
         packed_b_floats(C, w.Tb) + round_up(2 * w.rowlen * (2 * w.th + 3), 16);
}

/** floats of one chunk's transformed sums Mw (16 x O x C) */
inline int64_t wino_dw_chunk_floats(int64_t C, int64_t O) { return round_up(16 * O * C, 16); }

/**
 * D[xi] = (A dy A^T)[xi] for the tiles [t0, t1) and every output channel (dy [N][O][OH][OW]), written
 * as the GEMMs' packed A operand: D + xi * wino_dpanel_floats, MR-row panels of nt = t1 - t0 tiles
 * (row o of the panel at [tile][o % MR]; rows past O hold copies, their products are dropped). 8 tiles of a tile row at a time: their 16
 * columns of the two dy rows, loaded straight from dy and split into even / odd columns (through a
 * zero-padded copy only at the row's end, or a zero row past OH), for the panel's channels into
 * a staging block in L1, then 8 x 8 transposes put each tile's MR values together.
 */
inline void wino_dy(const float* dy, int64_t O, int64_t OH, int64_t OW, const Wino& w, int64_t t0, int64_t t1,
                    float* D) {
  const int64_t nt = t1 - t0, xs = wino_dpanel_floats(w, O);
  auto cols = [&](const float* row, int64_t k, v8f& e, v8f& od) {
    const int64_t c0 = 2 * k;
    v8f lo, hi;
    if (!row) {
      e = od = splat8(0.0f);
      return;
    }
    if (c0 + 16 <= OW) {
      lo = load8(row + c0);
      hi = load8(row + c0 + 8);
    } else {
      float t[16] = {};
      for (int64_t i = 0; i < 16 && c0 + i < OW; ++i) t[i] = row[c0 + i];
      lo = load8(t);
      hi = load8(t + 8);
    }
    e = __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14);
    od = __builtin_shufflevector(lo, hi, 1, 3, 5, 7, 9, 11, 13, 15);
  };
  constexpr int64_t MRS = (MR + 7) / 8 * 8;  // the panel's rows in whole groups of 8 (MR = 6, 8, 12, 14)
  alignas(64) float stage[16][MRS][8];  // [xi][row of the panel][tile]
  wino_runs(w, t0, t1, [&](int64_t n, int64_t ty, int64_t tx0, int64_t tx1, int64_t tloc) {
    const int64_t oy = 2 * ty;
    for (int64_t o0 = 0; o0 < O; o0 += MR) {
      const int64_t mr = std::min(MR, O - o0);
      float* panel = D + o0 * nt;  // panel o0 / MR: nt tiles of MR floats
      for (int64_t k = tx0; k < tx1; k += 8) {
        for (int64_t r = 0; r < mr; ++r) {
          // the tile [[a, b], [c, d]] of 8 tiles: A [[a, b], [c, d]] = rows (a, b), (a+c, b+d), (a-c, b-d),
          // (-c, -d), and each row (p, q) times A^T = (p, p + q, p - q, -q)
          const float* r0 = dy + ((n * O + o0 + r) * OH + oy) * OW;
          v8f a, b, c, d;
          cols(r0, k, a, b);
          cols(oy + 1 < OH ? r0 + OW : nullptr, k, c, d);
          const v8f p[4] = {a, a + c, a - c, -c}, q[4] = {b, b + d, b - d, -d};
          for (int i = 0; i < 4; ++i) {
            store8(stage[i * 4 + 0][r], p[i]);
            store8(stage[i * 4 + 1][r], p[i] + q[i]);
            store8(stage[i * 4 + 2][r], p[i] - q[i]);
            store8(stage[i * 4 + 3][r], -q[i]);
          }
        }
        // 8 x 8 transposes: each tile's mr values together (rows past O copy row 0: the GEMM drops them)
        const int64_t cnt = std::min<int64_t>(8, tx1 - k);
        float* dst = panel + (tloc + (k - tx0)) * MR;
        for (int xi = 0; xi < 16; ++xi)
          for (int64_t g = 0; g < MR; g += 8) {  // rows g .. g + 7 of the panel
            v8f blk[8];
#pragma GCC unroll 8
            for (int r = 0; r < 8; ++r) blk[r] = load8(stage[xi][g + r < mr ? g + r : 0]);
            transpose8x8(blk);
            if (MR == 8 && cnt == 8) {
#pragma GCC unroll 8
              for (int j = 0; j < 8; ++j) store8(dst + xi * xs + j * 8, blk[j]);
            } else {
              const size_t bytes = (size_t)std::min<int64_t>(8, MR - g) * sizeof(float);
              for (int64_t j = 0; j < cnt; ++j) memcpy(dst + xi * xs + j * MR + g, &blk[j], bytes);
            }
          }
      }
    }
  });
}

/**
 * Mw (16 x O x C, [xi][o][c]) = sum over the tiles of images [n0, n1) of D[xi] V[xi]^T, blocks of
 * Tb tiles in order (a function of the shape and the chunk only). Mw fully written.
 */
inline void wino_dw_chunk(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t ph, int64_t pw, int64_t OH,
                          int64_t OW, const float* x, const float* dy, int64_t n0, int64_t n1, float* Mw,
                          void* scratch) {
  const Wino w = wino_dw_dims(N, C, O, OH, OW);
  float* V = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
  float* D = V + round_up(16 * wino_xs(w, C) + 16, 16);
  float* Bp = D + 16 * wino_dpanel_floats(w, O);
  float* rows = Bp + packed_b_floats(C, w.Tb);
  const int64_t per_img = w.th * w.tw, ta = n0 * per_img, tb = n1 * per_img;
  if (tb <= ta) {
    memset(Mw, 0, (size_t)(16 * O * C) * sizeof(float));
    return;
  }
  for (int64_t t0 = ta; t0 < tb; t0 += w.Tb) {
    const int64_t t1 = std::min(tb, t0 + w.Tb), nt = t1 - t0;
    wino_input(x, C, H, W, ph, pw, w, t0, t1, V, rows);
    wino_dy(dy, O, OH, OW, w, t0, t1, D);
    for (int xi = 0; xi < 16; ++xi) {
      const float* Dx = D + xi * wino_dpanel_floats(w, O);
      const float* Vx = V + xi * wino_xs(w, C);
      gemm_driver(
          0, O, 0, C, nt, NC, 1.0f, t0 == ta ? 0.0f : 1.0f, Mw + xi * O * C, C, Epilogue{},
          [&](int64_t ic, int64_t mc, int64_t pc, int64_t kc) {
            (void)mc, (void)pc;  // one K block (nt <= Tb <= KC): D is packed whole
            return Dx + ic * kc;
          },
          [&](int64_t pc, int64_t kc, int64_t jc, int64_t nc) {
            pack_b(true, Vx, w.Tbs, pc, kc, jc, nc, Bp);
            return (const float*)Bp;
          });
    }
  }
}

/**
 * dw[o][c] (3 x 3) = G^T (Mw_0 + Mw_1 + ... + Mw_{Q-1}) G for the (o, c) pairs [i0, i1) (index o*C + c),
 * the Q chunks' sums (each wino_dw_chunk_floats apart from Mw) added in chunk order.
 */
inline void wino_dw_finish(const float* Mw, int64_t Q, int64_t C, int64_t O, int64_t i0, int64_t i1, float* dw) {
  const int64_t cs = wino_dw_chunk_floats(C, O), oc = O * C;
  for (int64_t i = i0; i < i1; ++i) {
    float m[16];
    for (int xi = 0; xi < 16; ++xi) {
      float acc = Mw[xi * oc + i];
      for (int64_t q = 1; q < Q; ++q) acc += Mw[q * cs + xi * oc + i];
      m[xi] = acc;
    }
    float t[3][4];  // G^T m: rows (m0 + (m1 + m2)/2, (m1 - m2)/2, (m1 + m2)/2 + m3)
    for (int j = 0; j < 4; ++j) {
      const float m0 = m[j], m1 = m[4 + j], m2 = m[8 + j], m3 = m[12 + j];
      t[0][j] = m0 + 0.5f * (m1 + m2);
      t[1][j] = 0.5f * (m1 - m2);
      t[2][j] = 0.5f * (m1 + m2) + m3;
    }
    float* out = dw + i * 9;
    for (int r = 0; r < 3; ++r) {  // (G^T m) G
      const float a = t[r][0], b = t[r][1], c = t[r][2], d = t[r][3];
      out[r * 3 + 0] = a + 0.5f * (b + c);
      out[r * 3 + 1] = 0.5f * (b - c);
      out[r * 3 + 2] = 0.5f * (b + c) + d;
    }
  }
}

}  // namespace detail
}  // namespace mpsc_fast

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif
