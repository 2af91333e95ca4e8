/*
 * conv.h: conv2d forward, grad-input, grad-weight and grad-bias for NCHW float tensors,
 * built on sgemm.h (header-only, C++17). Semantics are those of the IR ops conv2d,
 * conv2d_grad_input and conv2d_grad_weight (compiler/ir/ops.ts), i.e. torch's conv2d:
 *
 *   x [N,C,H,W], weight [O,C/groups,KH,KW], bias [O] -> y [N,O,OH,OW]
 *   OH = floor((H + 2ph - dh*(KH-1) - 1)/sh) + 1 (same for OW)
 *
 * Four methods, picked per shape (results are the same bits for any thread count in each):
 *  - 3x3, stride 1, one group, C*O/(C+O) >= 16: Winograd F(2x2, 3x3) (winograd.h) for the forward and
 *    the grad-input (as the forward convolution below); with C*O/(C+O) >= 32 also the grad-weight (the
 *    tiles as the GEMMs' K, summed per batch chunk in the transformed domain, transformed back in a
 *    second phase).
 *  - stride 1, Kd <= 32 (first layers: 1 or 3 input channels): direct kernels. Each output row
 *    (in "wide" columns, below) is accumulated in registers from the padded image; grad-weight is
 *    one dot product per (image, o, p). A GEMM with K = Kd would be bound by writing C.
 *  - stride 1 otherwise: implicit GEMM on "wide" columns. The input is copied with zero padding
 *    into rows of Wp = max(W + pw, OW) floats, so the im2col row p = (c, kh, kw) is a contiguous
 *    slice (offset kh*dh*Wp + kw*dw) and packing a B panel is a plain copy. Output columns with
 *    ow >= OW are computed and dropped (a few %). Forward splits (image, group, band of output
 *    rows); grad-input is the forward convolution of dy with the flipped, transposed weights
 *    (padding (K-1)*d - p), so no col2im scatter; grad-weight is a GEMM over wide columns with
 *    dy = 0 on the dropped ones, or, in batch chunks where its micro-tiles allow (wide_dw_t_ok: LeNet's
 *    32 -> 64), transposed: dW_g^T = col dy^T over the OH*OW real columns, col's rows in (kh, kw, c) order
 *    read in place from one shifted copy of the image per kw, only dy packed.
 *  - any other stride: im2col generated straight into the packed B panels (no col buffer);
 *    grad-input computes a chunk of col (<= 512 KiB) and scatters it back with col2im.
 *   forward:      y_g[n]  (Og x P)  = W_g (Og x Kd) * col (Kd x P)    + bias, relu (fused epilogue)
 *   grad-input:   col     (Kd x P)  = W_g^T * dy_g[n],  dx_g[n] = col2im(col)
 *   grad-weight:  dW_g    (Og x Kd) = sum_n dy_g[n] (Og x P) * col^T (P x Kd)
 *                 (transposed chunks: dW_g^T (Kd x Og) = sum_n col (Kd x P) * dy_g[n]^T (P x Og))
 *   (Kd = C/groups*KH*KW, P = OH*OW)
 *
 * Threading without owning threads: every *_part(..., part, nparts, scratch) function
 * computes a disjoint share of its output; run part = 0..nparts-1 on the caller's pool,
 * each with its own scratch of conv2d_scratch_bytes(shape, pass) bytes (64-byte aligned).
 * Shares: forward splits (image, group, column chunk or row band) items; grad-input splits
 * (image, group[, row band]) items; grad-weight on the Winograd and wide paths sums fixed batch chunks
 * (conv2d_grad_weight_chunks) and adds them in a second phase, elsewhere it splits dW by output
 * channel (Og >= Kd, and always in the direct kernel) or by column p (rows of col); grad-bias
 * splits output channels. Every
 * element is computed by one part in one fixed order, so results are bitwise identical for every
 * nparts.
 */
#ifndef MPSC_FAST_CONV_H
#define MPSC_FAST_CONV_H

#include <type_traits>

#include "sgemm.h"
#include "winograd.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#ifndef MPSC_FAST_CONV_DW_CHUNKS
#define MPSC_FAST_CONV_DW_CHUNKS 8
#endif
#ifndef MPSC_FAST_CONV_DW_SHARED_BYTES
#define MPSC_FAST_CONV_DW_SHARED_BYTES (16 << 20)
#endif

namespace mpsc_fast {

struct Conv2dShape {
  int64_t N, C, H, W;      // input x [N,C,H,W]
  int64_t O, KH, KW;       // weight [O, C/groups, KH, KW]
  int64_t sh, sw, ph, pw;  // stride, zero padding
  int64_t dh, dw;          // dilation
  int64_t groups;
  int64_t OH, OW;          // output spatial size (filled by conv2d_shape)
};

/** fills OH, OW from the other fields (the formula above) */
inline Conv2dShape conv2d_shape(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH, int64_t KW,
                                int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                                int64_t groups) {
  Conv2dShape s{N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, groups, 0, 0};
  s.OH = (H + 2 * ph - dh * (KH - 1) - 1) / sh + 1;
  s.OW = (W + 2 * pw - dw * (KW - 1) - 1) / sw + 1;
  return s;
}

enum ConvPass : int { CONV_FORWARD = 0, CONV_GRAD_INPUT = 1, CONV_GRAD_WEIGHT = 2, CONV_GRAD_BIAS = 3 };

namespace detail {

struct ConvDims {
  int64_t Cg, Og, Kd, P, HW;
  bool direct;  // 1x1, stride 1, no padding: col is x itself
};

inline ConvDims conv_dims(const Conv2dShape& s) {
  ConvDims d;
  d.Cg = s.C / s.groups;
  d.Og = s.O / s.groups;
  d.Kd = d.Cg * s.KH * s.KW;
  d.P = s.OH * s.OW;
  d.HW = s.H * s.W;
  d.direct = s.KH == 1 && s.KW == 1 && s.sh == 1 && s.sw == 1 && s.ph == 0 && s.pw == 0;
  return d;
}

/** floats of the col chunk of grad-input (col2im source); -DMPSC_FAST_CONV_COL_FLOATS=... to tune */
#ifndef MPSC_FAST_CONV_COL_FLOATS
#define MPSC_FAST_CONV_COL_FLOATS 131072
#endif

/** output columns per col chunk: about MPSC_FAST_CONV_COL_FLOATS floats of col, a multiple of NR */
inline int64_t chunk_cols(int64_t rows, int64_t P) {
  const int64_t target = MPSC_FAST_CONV_COL_FLOATS;
  int64_t cols = std::max<int64_t>(NR, target / std::max<int64_t>(rows, 1) / NR * NR);
  return std::max<int64_t>(1, std::min(cols, P));
}

inline int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
inline int64_t align16(int64_t f) { return (f + 15) / 16 * 16; }

/**
 * For unrolled row p = (c, kh, kw) and output row oh: calls run(ow_lo, ow_hi, xrow) where
 * output columns [ow_lo, ow_hi) of [ow0, ow1) read x row `xrow` (nullptr: the whole row is
 * padding) at iw = ow*sw - pw + kw*dw; outside [ow_lo, ow_hi) the window is in padding.
 */
template <class F>
inline void window_rows(const Conv2dShape& s, const float* xc, int64_t kh, int64_t kw, int64_t j0, int64_t j1, F&& run) {
  int64_t j = j0;
  while (j < j1) {
    const int64_t oh = j / s.OW, ow0 = j % s.OW;
    const int64_t ow1 = std::min(s.OW, ow0 + (j1 - j));
    const int64_t ih = oh * s.sh - s.ph + kh * s.dh;
    const int64_t off = kw * s.dw - s.pw;  // iw = ow*sw + off
    if (ih < 0 || ih >= s.H) {
      run(j - j0, ow0, ow1, ow1, ow1, (const float*)nullptr, off);
    } else {
      int64_t lo = std::max(ow0, ceil_div(-off, s.sw));
      int64_t hi = std::min(ow1, floor_div(s.W - 1 - off, s.sw) + 1);
      if (hi < lo) lo = hi = ow1;
      run(j - j0, ow0, lo, hi, ow1, xc + ih * s.W, off);
    }
    j += ow1 - ow0;
  }
}

/** col[(p - p0) * (j1 - j0) + (j - j0)] = x_g[window p at output column j] for p in [p0,p1), j in [j0,j1) */
inline void im2col(const Conv2dShape& s, const float* xg, int64_t p0, int64_t p1, int64_t j0, int64_t j1,
                   float* __restrict col) {
  const int64_t ld = j1 - j0, KK = s.KH * s.KW, HW = s.H * s.W;
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t c = p / KK, kh = (p / s.KW) % s.KH, kw = p % s.KW;
    float* dst = col + (p - p0) * ld;
    window_rows(s, xg + c * HW, kh, kw, j0, j1,
                [&](int64_t at, int64_t ow0, int64_t lo, int64_t hi, int64_t ow1, const float* xr, int64_t off) {
                  float* d = dst + at - ow0;  // d[ow] is output column ow of this output row
                  for (int64_t ow = ow0; ow < lo; ++ow) d[ow] = 0.0f;
                  if (hi > lo) {
                    if (s.sw == 1) {
                      memcpy(d + lo, xr + lo + off, (size_t)(hi - lo) * sizeof(float));
                    } else {
                      for (int64_t ow = lo; ow < hi; ++ow) d[ow] = xr[ow * s.sw + off];
                    }
                  }
                  for (int64_t ow = hi; ow < ow1; ++ow) d[ow] = 0.0f;
                });
  }
}

/** dx_g[window p at output column j] += col[...], the adjoint of im2col over all rows p */
inline void col2im(const Conv2dShape& s, const float* __restrict col, int64_t Kd, int64_t j0, int64_t j1, float* dxg) {
  const int64_t ld = j1 - j0, KK = s.KH * s.KW, HW = s.H * s.W;
  for (int64_t p = 0; p < Kd; ++p) {
    const int64_t c = p / KK, kh = (p / s.KW) % s.KH, kw = p % s.KW;
    const float* src = col + p * ld;
    float* xc = dxg + c * HW;
    window_rows(s, xc, kh, kw, j0, j1,
                [&](int64_t at, int64_t ow0, int64_t lo, int64_t hi, int64_t, const float* xr, int64_t off) {
                  if (hi <= lo) return;
                  float* xrow = const_cast<float*>(xr);
                  const float* sp = src + at - ow0;
                  if (s.sw == 1) {
                    float* xo = xrow + off;
                    for (int64_t ow = lo; ow < hi; ++ow) xo[ow] += sp[ow];
                  } else {
                    for (int64_t ow = lo; ow < hi; ++ow) xrow[ow * s.sw + off] += sp[ow];
                  }
                });
  }
}

/** output-column block of the forward GEMM: a KC x CONV_NC packed B block is 256 KiB (fits L2) */
constexpr int64_t CONV_NC = 256;
/** dW-column block (rows p of col) of the grad-weight GEMM */
constexpr int64_t CONV_NC_W = 512;

/** scatters a row of nc values into row `r` of the NR-column panels of a packed B block (kc rows) */
inline void scatter_row_to_panels(const float* __restrict row, int64_t nc, int64_t kc, int64_t r, float* __restrict dst) {
  int64_t jr = 0;
  for (; jr + NR <= nc; jr += NR) {
    copy_nr(dst + jr * kc + r * NR, row + jr);
  }
  if (jr < nc) {
    float* d = dst + jr * kc + r * NR;
    int64_t c = 0;
    for (; c < nc - jr; ++c) d[c] = row[jr + c];
    for (; c < NR; ++c) d[c] = 0.0f;
  }
}

/** packed B block for the forward GEMM: rows p in [pc, pc+kc) of col, output columns [jc, jc+nc) */
inline void im2col_packed(const Conv2dShape& s, const float* xg, int64_t pc, int64_t kc, int64_t jc, int64_t nc,
                          float* __restrict dst) {
  float row[CONV_NC > KC ? CONV_NC : KC];
  for (int64_t p = pc; p < pc + kc; ++p) {
    im2col(s, xg, p, p + 1, jc, jc + nc, row);
    scatter_row_to_panels(row, nc, kc, p - pc, dst);
  }
}

/**
 * packed B block for the grad-weight GEMM (op(B) = col^T): K index = output column j in [pc, pc+kc),
 * N index = row p in [jc, jc+nc): panel column (p - jc) % NR holds row p of col.
 */
inline void im2col_packed_t(const Conv2dShape& s, const float* xg, int64_t pc, int64_t kc, int64_t jc, int64_t nc,
                            float* __restrict dst) {
  // NR rows p at a time into an L1 tile (NR x kc), then transposed into the panel (pack_rows)
  float tile[NR * KC];
  for (int64_t jr = 0; jr < nc; jr += NR) {
    const int64_t nr = std::min(NR, nc - jr);
    for (int64_t c = 0; c < nr; ++c) im2col(s, xg, jc + jr + c, jc + jr + c + 1, pc, pc + kc, tile + c * kc);
    pack_rows([&](int64_t c) { return (const float*)tile + c * kc; }, nr, NR, kc, dst + jr * kc);
  }
}

/** [b, e) = share `part` of n items */
inline void share(int64_t n, int part, int nparts, int64_t& b, int64_t& e) {
  if (nparts < 1) nparts = 1;
  b = n * part / nparts;
  e = n * (part + 1) / nparts;
}

/**
 * How grad-weight work is shared: parts split the output channels (split_o, Og >= Kd) or the
 * columns p of dW, over all groups; [r0, r1) is this part's range of those groups*Og or groups*Kd.
 */
struct DwShare {
  bool split_o;
  int64_t r0, r1;
};
inline DwShare dw_share(const Conv2dShape& s, const ConvDims& d, bool split_o, int part, int nparts) {
  DwShare sh{split_o, 0, 0};
  share(s.groups * (split_o ? d.Og : d.Kd), part, nparts, sh.r0, sh.r1);
  return sh;
}

/** The block [o0, o1) x [p0, p1) of group g's dW (Og x Kd) inside this part's share; false when empty. */
inline bool dw_block(const ConvDims& d, const DwShare& sh, int64_t g, int64_t& o0, int64_t& o1, int64_t& p0,
                     int64_t& p1) {
  o0 = 0, o1 = d.Og, p0 = 0, p1 = d.Kd;
  if (sh.split_o) {
    o0 = std::max(sh.r0, g * d.Og) - g * d.Og;
    o1 = std::min(sh.r1, (g + 1) * d.Og) - g * d.Og;
  } else {
    p0 = std::max(sh.r0, g * d.Kd) - g * d.Kd;
    p1 = std::min(sh.r1, (g + 1) * d.Kd) - g * d.Kd;
  }
  return p1 > p0 && o1 > o0;
}

inline float* align64(void* p) { return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63)); }

/*
 * The stride-1 "wide" path. For stride 1 the unrolled-window row p = (c, kh, kw) of im2col is a
 * contiguous slice of a zero-padded copy of the input whose rows are Wp = max(W + pw, OW) floats
 * long (pw zeros, then the W values; a row's right padding is the next row's left padding):
 * output column j = oh*Wp + ow ("wide" column) reads position j + kh*dh*Wp + kw*dw. Columns with
 * ow >= OW are computed and dropped (forward), or carry dy = 0 (grad-weight). So packing a GEMM
 * panel is a contiguous copy instead of a gather, and the grad-input is the forward convolution
 * of dy (padded by (K-1)*d - p) with the flipped, transposed weights: no col2im scatter.
 */
struct Wide {
  int64_t Wp;      // padded row length
  int64_t rows;    // output rows per band (forward)
  int64_t bands;   // bands per image
  int64_t halo;    // extra padded input rows a band reads: (KH-1)*dh
  int64_t slack;   // zeroed floats after the last row: (KW-1)*dw
};

inline bool wide_ok(const Conv2dShape& s) { return s.sh == 1 && s.sw == 1 && s.OH > 0 && s.OW > 0; }

/** output columns (wide) a forward band aims at */
#ifndef MPSC_FAST_CONV_BAND_COLS
#define MPSC_FAST_CONV_BAND_COLS 512
#endif

inline Wide wide_dims(const Conv2dShape& s) {
  Wide w;
  w.Wp = std::max(s.W + s.pw, s.OW);
  const int64_t total = s.OH * w.Wp;
  const int64_t nb = std::max<int64_t>(1, (total + MPSC_FAST_CONV_BAND_COLS - 1) / MPSC_FAST_CONV_BAND_COLS);
  w.rows = (s.OH + nb - 1) / nb;
  w.bands = (s.OH + w.rows - 1) / w.rows;
  w.halo = (s.KH - 1) * s.dh;
  w.slack = (s.KW - 1) * s.dw;
  return w;
}

/** floats of one channel of a padded band of `r` output rows (input rows r + halo, then slack) */
inline int64_t wide_plane(const Wide& w, int64_t r) { return align16((r + w.halo) * w.Wp + w.slack); }

/**
 * rows[i] = band + offset of unrolled-window row p = p0 + i (channel c - c0, kh, kw) in a padded
 * band (channel planes `plane` floats apart) + col, for i < n: one division for the first row,
 * then stepping (kw, kh, c), so packing a block costs no integer division per row.
 */
inline void wide_row_ptrs(const Conv2dShape& s, const Wide& w, const float* band, int64_t plane, int64_t c0,
                          int64_t p0, int64_t n, int64_t col, const float** rows) {
  const int64_t KK = s.KH * s.KW;
  int64_t c = p0 / KK, kh = (p0 / s.KW) % s.KH, kw = p0 % s.KW;
  for (int64_t i = 0; i < n; ++i) {
    rows[i] = band + (c - c0) * plane + kh * s.dh * w.Wp + kw * s.dw + col;
    if (++kw == s.KW) {
      kw = 0;
      if (++kh == s.KH) kh = 0, ++c;
    }
  }
}

/**
 * Writes the padded copy of input rows for output rows [oh0, oh0 + r) of channels [c0, c1) of
 * x_g (plane H x W) into dst (channel c at dst + (c - c0) * plane): padded row q holds input row
 * ih = oh0 + q - ph.
 */
inline void wide_fill(const Conv2dShape& s, const Wide& w, const float* xg, int64_t c0, int64_t c1, int64_t oh0,
                      int64_t r, int64_t plane, float* __restrict dst) {
  const int64_t HW = s.H * s.W, nrow = r + w.halo;
  for (int64_t c = c0; c < c1; ++c) {
    float* d = dst + (c - c0) * plane;
    const float* xc = xg + c * HW;
    for (int64_t q = 0; q < nrow; ++q) {
      float* dr = d + q * w.Wp;
      const int64_t ih = oh0 + q - s.ph;
      if (ih < 0 || ih >= s.H) {
        memset(dr, 0, (size_t)w.Wp * sizeof(float));
        continue;
      }
      for (int64_t i = 0; i < s.pw; ++i) dr[i] = 0.0f;
      memcpy(dr + s.pw, xc + ih * s.W, (size_t)s.W * sizeof(float));
      for (int64_t i = s.pw + s.W; i < w.Wp; ++i) dr[i] = 0.0f;
    }
    memset(d + nrow * w.Wp, 0, (size_t)(plane - nrow * w.Wp) * sizeof(float));
  }
}

/** packed B block of the wide forward GEMM: rows p in [pc, pc+kc), wide columns [jc, jc+nc) of a band
 *  (panel by panel, so the packed block is written sequentially) */
inline void wide_packed(const Conv2dShape& s, const Wide& w, const float* band, int64_t plane, int64_t pc, int64_t kc,
                        int64_t jc, int64_t nc, float* __restrict dst) {
  const float* src[KC];
  wide_row_ptrs(s, w, band, plane, 0, pc, kc, jc, src);
  int64_t jr = 0;
  for (; jr + NR <= nc; jr += NR) {
    float* d = dst + jr * kc;
    for (int64_t r = 0; r < kc; ++r) copy_nr(d + r * NR, src[r] + jr);
  }
  if (jr < nc) {
    float* d = dst + jr * kc;
    for (int64_t r = 0; r < kc; ++r) {
      int64_t c = 0;
      for (; c < nc - jr; ++c) d[r * NR + c] = src[r][jr + c];
      for (; c < NR; ++c) d[r * NR + c] = 0.0f;
    }
  }
}

/** the shape of grad-input as a stride-1 forward convolution of dy (valid when wide_grad_input_ok) */
inline Conv2dShape grad_input_as_forward(const Conv2dShape& s) {
  Conv2dShape t = s;
  t.C = s.O;
  t.H = s.OH;
  t.W = s.OW;
  t.O = s.C;
  t.ph = (s.KH - 1) * s.dh - s.ph;
  t.pw = (s.KW - 1) * s.dw - s.pw;
  t.OH = s.H;
  t.OW = s.W;
  return t;
}
inline bool wide_grad_input_ok(const Conv2dShape& s) {
  return wide_ok(s) && (s.KH - 1) * s.dh >= s.ph && (s.KW - 1) * s.dw >= s.pw && s.H > 0 && s.W > 0;
}

/** Winograd F(2x2, 3x3) (winograd.h) for this forward-convolution shape */
inline bool wino_conv_ok(const Conv2dShape& s) {
  return wino_ok(s.N, s.C, s.O, s.KH, s.KW, s.sh, s.sw, s.dh, s.dw, s.groups, s.ph, s.pw, s.OH, s.OW);
}

/**
 * Batch chunks of a Winograd grad-weight: min(N, MPSC_FAST_CONV_DW_CHUNKS), fewer while their
 * transformed sums (16 x O x C each) pass MPSC_FAST_CONV_DW_SHARED_BYTES; 0 when one does not fit
 */
inline int64_t wino_dw_chunks(const Conv2dShape& s) {
  const int64_t cbytes = wino_dw_chunk_floats(s.C, s.O) * (int64_t)sizeof(float);
  if (cbytes > (int64_t)MPSC_FAST_CONV_DW_SHARED_BYTES) return 0;
  int64_t q = std::max<int64_t>(1, std::min<int64_t>(s.N, MPSC_FAST_CONV_DW_CHUNKS));
  while (q > 1 && q * cbytes > (int64_t)MPSC_FAST_CONV_DW_SHARED_BYTES) --q;
  return q;
}

/**
 * Winograd F(2x2, 3x3) for this shape's grad-weight: the forward's rule with C*O/(C + O) >= 32
 * (not 16: LeNet's 32 -> 64 grad-weight ran 3.4-3.6 ms on either path, and the wide one left the
 * 2-thread step 0.5 ms faster), and at least 32 tiles per
 * batch chunk, since every chunk writes and phase 1 reads its 16 x O x C sums: with 16 tiles per
 * chunk (batch 8 of 8 x 8 images, 128 -> 128 channels) the wide path took 1.5 ms and this one 3.1
 * (1 thread); with 64 (batch 16 of 8 x 8, 256 -> 256) 18.2 against 12.1.
 */
inline bool wino_grad_weight_ok(const Conv2dShape& s) {
  if (!wino_conv_ok(s) || s.C * s.O < 32 * (s.C + s.O)) return false;
  const int64_t q = wino_dw_chunks(s);
  return q > 0 && wino_dims(s.N, s.C, s.O, s.OH, s.OW).T >= 32 * q;
}

/** floats of the wide forward's scratch: packed A (+ the flipped weights of one group), band, C tile, packed B */
inline int64_t wide_forward_floats(const Conv2dShape& s, bool flipped) {
  const ConvDims d = conv_dims(s);
  const Wide w = wide_dims(s);
  const int64_t cols = w.rows * w.Wp;
  return packed_a_all_floats(d.Og, d.Kd) + (flipped ? align16(d.Og * d.Kd) : 0) + d.Cg * wide_plane(w, w.rows) +
         align16(d.Og * cols) + align16(std::min(KC, d.Kd) * round_up(cols, NR));
}

/**
 * y = conv2d(x, w) (+bias, relu) for stride 1, share `part` of nparts: items (image, group, band
 * of output rows). With `flipped`, w is the weight of the convolution this one is the grad-input
 * of ([C_this_out... ] = [s.C, s.O/groups, KH, KW] in this call's terms) and is used flipped and
 * transposed: w_this[g*Og + o][c][kh][kw] = w[g*Cg + c][o][KH-1-kh][KW-1-kw].
 */
inline void wide_forward_part(const Conv2dShape& s, const float* x, const float* w, bool flipped, const float* bias,
                              bool relu, float* y, int part, int nparts, void* scratch, const float* mask = nullptr) {
  const ConvDims d = conv_dims(s);
  const Wide wd = wide_dims(s);
  const int64_t cols_max = wd.rows * wd.Wp, plane = wide_plane(wd, wd.rows), KK = s.KH * s.KW;
  float* Apre = align64(scratch);
  float* wflip = Apre + packed_a_all_floats(d.Og, d.Kd);
  float* band = wflip + (flipped ? align16(d.Og * d.Kd) : 0);
  float* Ct = band + d.Cg * plane;
  float* Bp = Ct + align16(d.Og * cols_max);
  int64_t b, e, packed_g = -1;
  share(s.N * s.groups * wd.bands, part, nparts, b, e);
  for (int64_t it = b; it < e; ++it) {
    const int64_t n = it / (s.groups * wd.bands), g = (it / wd.bands) % s.groups, bi = it % wd.bands;
    const int64_t oh0 = bi * wd.rows, r = std::min(wd.rows, s.OH - oh0), cols = r * wd.Wp;
    const float* xg = x + (n * s.C + g * d.Cg) * d.HW;
    if (g != packed_g) {
      if (flipped) {
        // this call's weight row o (= input channel of the original conv), column (c, kh, kw)
        const float* wg = w + g * d.Cg * d.Og * KK;  // original [g*Cg + c][o][.][.] block of group g
        for (int64_t o = 0; o < d.Og; ++o)
          for (int64_t c = 0; c < d.Cg; ++c)
            for (int64_t k = 0; k < KK; ++k) wflip[o * d.Kd + c * KK + k] = wg[(c * d.Og + o) * KK + (KK - 1 - k)];
        pack_a_all(false, wflip, d.Kd, d.Og, d.Kd, Apre);
      } else {
        pack_a_all(false, w + g * d.Og * d.Kd, d.Kd, d.Og, d.Kd, Apre);
      }
      packed_g = g;
    }
    wide_fill(s, wd, xg, 0, d.Cg, oh0, r, plane, band);
    Epilogue ep;
    ep.bias = bias ? bias + g * d.Og : nullptr;
    ep.bias_kind = bias ? BIAS_ROW : BIAS_NONE;
    ep.relu = relu;
    gemm_driver(
        0, d.Og, 0, cols, d.Kd, cols, 1.0f, 0.0f, Ct, cols, ep,
        [&](int64_t ic, int64_t mc, int64_t pc, int64_t) { return packed_a_block(Apre, d.Kd, ic, mc, pc); },
        [&](int64_t pc, int64_t kc, int64_t jc, int64_t nc) {
          wide_packed(s, wd, band, plane, pc, kc, jc, nc, Bp);
          return (const float*)Bp;
        });
    float* yg = y + (n * s.O + g * d.Og) * d.P + oh0 * s.OW;
    const float* mg = mask ? mask + (yg - y) : nullptr;
    for (int64_t o = 0; o < d.Og; ++o)
      for (int64_t q = 0; q < r; ++q) {
        if (mg) mask_store(yg + o * d.P + q * s.OW, Ct + o * cols + q * wd.Wp, mg + o * d.P + q * s.OW, s.OW);
        else memcpy(yg + o * d.P + q * s.OW, Ct + o * cols + q * wd.Wp, (size_t)s.OW * sizeof(float));
      }
  }
}

/** floats of the wide grad-weight's scratch: packed dy block, packed col^T block, padded image of Cg channels */
inline int64_t wide_grad_weight_floats(const Conv2dShape& s) {
  const ConvDims d = conv_dims(s);
  const Wide w = wide_dims(s);
  const int64_t K = s.OH * w.Wp;
  return packed_a_floats(d.Og, K) + align16(std::min(KC, K) * round_up(std::min(CONV_NC_W, d.Kd), NR)) +
         d.Cg * wide_plane(w, s.OH);
}

/**
 * Group g's dW block [o0, o1) x [p0, p1) summed over images [n0, n1) into out (group g's Og x Kd,
 * row stride Kd; zero when the range is empty): per image one GEMM whose K index is the wide
 * column (dy is 0 on the dropped columns) and whose col^T panels are contiguous slices of the
 * padded image.
 */
inline void wide_grad_weight_block(const Conv2dShape& s, const float* dy, const float* x, float* out, int64_t g,
                                   int64_t o0, int64_t o1, int64_t p0, int64_t p1, int64_t n0, int64_t n1,
                                   void* scratch) {
  const ConvDims d = conv_dims(s);
  const Wide wd = wide_dims(s);
  const int64_t K = s.OH * wd.Wp, plane = wide_plane(wd, s.OH), KK = s.KH * s.KW;
  float* Ap = align64(scratch);
  float* Bp = Ap + packed_a_floats(d.Og, K);
  float* img = Bp + align16(std::min(KC, K) * round_up(std::min(CONV_NC_W, d.Kd), NR));
  if (n1 <= n0) {
    for (int64_t o = o0; o < o1; ++o) memset(out + o * d.Kd + p0, 0, (size_t)(p1 - p0) * sizeof(float));
    return;
  }
  const int64_t c0 = p0 / KK, c1 = (p1 - 1) / KK + 1;  // channels the rows p read
  for (int64_t n = n0; n < n1; ++n) {
    wide_fill(s, wd, x + (n * s.C + g * d.Cg) * d.HW, c0, c1, 0, s.OH, plane, img);
    const float* dyg = dy + (n * s.O + g * d.Og) * d.P;
    gemm_driver(
        o0, o1, p0, p1, K, CONV_NC_W, 1.0f, n == n0 ? 0.0f : 1.0f, out, d.Kd, Epilogue{},
        [&](int64_t ic, int64_t mc, int64_t pc, int64_t kc) {
          // MR-row panels of dy in wide columns [pc, pc+kc), transposed 8 x 8 straight from dy's
          // rows one output row (oh) at a time; 0 where ow >= OW
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int64_t mr = std::min(MR, mc - ir);
            float* dst = Ap + ir * kc;
            int64_t k = pc;
            while (k < pc + kc) {
              const int64_t oh = k / wd.Wp, ow = k % wd.Wp;
              const int64_t run = std::min(wd.Wp - ow, pc + kc - k);
              const int64_t valid = std::max<int64_t>(0, std::min(run, s.OW - ow));
              float* dk = dst + (k - pc) * MR;
              if (valid > 0)
                for (int64_t r0 = 0; r0 < MR; r0 += 8) {
                  const float* rows[8];
                  for (int64_t i = 0; i < 8; ++i)
                    rows[i] = r0 + i < mr ? dyg + (ic + ir + r0 + i) * d.P + oh * s.OW + ow : zero_row();
                  pack_rows8(rows, std::min<int64_t>(8, MR - r0), valid, dk + r0, MR);
                }
              for (int64_t t = valid; t < run; ++t)
                for (int64_t r = 0; r < MR; ++r) dk[t * MR + r] = 0.0f;
              k += run;
            }
          }
          return (const float*)Ap;
        },
        [&](int64_t pc, int64_t kc, int64_t jc, int64_t nc) {
          // NR-column panels of col^T: panel column (p - jc) % NR holds row p's slice [pc, pc+kc)
          const float* rows[CONV_NC_W];
          wide_row_ptrs(s, wd, img, plane, c0, jc, nc, pc, rows);
          for (int64_t jr = 0; jr < nc; jr += NR)
            pack_rows([&](int64_t c) { return rows[jr + c]; }, std::min(NR, nc - jr), NR, kc, Bp + jr * kc);
          return (const float*)Bp;
        });
  }
}

/** dw for stride 1 (sum over the batch), share `part` of nparts: parts split dW's rows or columns (dw_share) */
inline void wide_grad_weight_part(const Conv2dShape& s, const float* dy, const float* x, float* dw, int part,
                                  int nparts, void* scratch) {
  const ConvDims d = conv_dims(s);
  const DwShare sh = dw_share(s, d, d.Og >= d.Kd, part, nparts);
  for (int64_t g = 0; g < s.groups; ++g) {
    int64_t o0, o1, p0, p1;
    if (dw_block(d, sh, g, o0, o1, p0, p1))
      wide_grad_weight_block(s, dy, x, dw + g * d.Og * d.Kd, g, o0, o1, p0, p1, 0, s.N, scratch);
  }
}

/**
 * Batch chunks of the grad-weight (phase 0 of conv2d_grad_weight_part when there are more than
 * one): chunk q sums images [N*q/Q, N*(q+1)/Q) into the whole of `out` (dw for chunk 0, a partial
 * dW in the shared block otherwise), so no part packs what another part packs too.
 */
inline void wide_grad_weight_chunk(const Conv2dShape& s, const float* dy, const float* x, float* out, int64_t q,
                                   int64_t Q, void* scratch) {
  const ConvDims d = conv_dims(s);
  for (int64_t g = 0; g < s.groups; ++g)
    wide_grad_weight_block(s, dy, x, out + g * d.Og * d.Kd, g, 0, d.Og, 0, d.Kd, s.N * q / Q, s.N * (q + 1) / Q,
                           scratch);
}

/*
 * The batch chunks' grad-weight transposed (wide_dw_t_ok): per image dW_g^T (Kd x Og) += col (Kd x P) dy^T
 * (P x Og), K = P = OH*OW exactly (no dropped wide columns), col's rows in (kh, kw, c) order:
 * m = (kh*KW + kw)*Cg + c. The image is copied once per kw, shifted by kw*dw - pw and zero-padded, into
 * planes of OH + (KH-1)*dh rows of OW floats (dwt_fill), so row m of col is the contiguous run at row kh*dh
 * of plane (kw, c), and a micro-tile's MR rows (MR channels of one (kh, kw)) are runs `plane` floats apart:
 * the micro-kernel broadcasts them in place (micro_kernel<true>, lda = plane). Only dy is packed (NR-column
 * panels of output channels: dy's rows through 8 x 8 transposes): Og x P floats per image instead of
 * wide_grad_weight_block's Og x OH*Wp of dy plus Kd x OH*Wp of col^T. Each element is one fused multiply-add
 * chain per K block (kc_step(P)), blocks and images added in order; the chunk sums stay transposed in the
 * shared block and wide_dw_t_finish adds them in order into dw's [o][c][kh][kw] order.
 */
/** o columns of dy^T packed at a time (a KC x 256 block: 256 KiB, L2) */
constexpr int64_t CONV_DW_T_NC = 256;

/** the transposed chunks for this shape: at most a quarter more micro-tiles than the untransposed product */
inline bool wide_dw_t_ok(const Conv2dShape& s) {
  if (!wide_ok(s) || s.groups <= 0) return false;
  const ConvDims d = conv_dims(s);
  if (d.Cg <= 0 || d.Og <= 0) return false;
  const int64_t t_tiles = s.KH * s.KW * ((d.Cg + MR - 1) / MR) * ((d.Og + NR - 1) / NR);
  const int64_t tiles = ((d.Og + MR - 1) / MR) * ((d.Kd + NR - 1) / NR);
  return 4 * t_tiles <= 5 * tiles;
}

/** floats of one (kw, c) plane of the shifted copies: OH + (KH-1)*dh rows of OW floats */
inline int64_t dwt_plane(const Conv2dShape& s) { return align16((s.OH + (s.KH - 1) * s.dh) * s.OW); }

/** floats of the transposed grad-weight's scratch: one packed block of dy^T, the KW shifted copies of Cg channels */
inline int64_t wide_dw_t_floats(const Conv2dShape& s) {
  const ConvDims d = conv_dims(s);
  return align16(std::min(KC, d.P) * round_up(std::min(CONV_DW_T_NC, d.Og), NR)) + s.KW * d.Cg * dwt_plane(s);
}

/**
 * plane (kw, c) at dst + (kw*Cg + c)*plane: row q, column ow = x_g[c][q - ph][ow + kw*dw - pw], 0 outside x.
 * With OW == W (the usual "same" padding) a plane is one copy of the channel's rows shifted by kw*dw - pw,
 * then the columns that took a neighbouring row's values zeroed; otherwise row by row. The padding rows are
 * zeroed only with `pad_rows` (the first image of a block: no later fill writes them).
 */
inline void dwt_fill(const Conv2dShape& s, const float* xg, int64_t Cg, int64_t plane, bool pad_rows,
                     float* __restrict dst) {
  const int64_t rows = s.OH + (s.KH - 1) * s.dh, OW = s.OW;
  // input rows [0, ih1) land in plane rows [ph, ph + ih1); the plane's other rows are padding
  const int64_t ih1 = std::max<int64_t>(0, std::min(s.H, rows - s.ph)), q0 = std::min(rows, s.ph);
  for (int64_t kw = 0; kw < s.KW; ++kw) {
    const int64_t sh = kw * s.dw - s.pw;  // iw = ow + sh
    const int64_t lo = std::min(OW, std::max<int64_t>(0, -sh)), hi = std::max(lo, std::min(OW, s.W - sh));
    for (int64_t c = 0; c < Cg; ++c) {
      float* d = dst + (kw * Cg + c) * plane;
      const float* xc = xg + c * s.H * s.W;
      if (pad_rows) {
        memset(d, 0, (size_t)(q0 * OW) * sizeof(float));
        memset(d + (q0 + ih1) * OW, 0, (size_t)((rows - q0 - ih1) * OW) * sizeof(float));
      }
      float* body = d + q0 * OW;
      if (OW == s.W) {
        const int64_t j0 = std::max<int64_t>(0, -sh), j1 = std::max(j0, ih1 * OW - std::max<int64_t>(0, sh));
        memcpy(body + j0, xc + j0 + sh, (size_t)(j1 - j0) * sizeof(float));
        // column by column (a few columns, every row): no library call per row
        for (int64_t i = 0; i < lo; ++i)
          for (int64_t ih = 0; ih < ih1; ++ih) body[ih * OW + i] = 0.0f;
        for (int64_t i = hi; i < OW; ++i)
          for (int64_t ih = 0; ih < ih1; ++ih) body[ih * OW + i] = 0.0f;
      } else {
        for (int64_t ih = 0; ih < ih1; ++ih) {
          float* dr = body + ih * OW;
          for (int64_t i = 0; i < lo; ++i) dr[i] = 0.0f;
          memcpy(dr + lo, xc + ih * s.W + lo + sh, (size_t)(hi - lo) * sizeof(float));
          for (int64_t i = hi; i < OW; ++i) dr[i] = 0.0f;
        }
      }
    }
  }
}

/** group g's dW^T (Kd x Og, rows (kh, kw, c)) summed over images [n0, n1) into out (zero when the range is empty) */
inline void wide_dw_t_block(const Conv2dShape& s, const float* dy, const float* x, float* out, int64_t g, int64_t n0,
                            int64_t n1, void* scratch) {
  const ConvDims d = conv_dims(s);
  const int64_t plane = dwt_plane(s), KK = s.KH * s.KW, step = kc_step(d.P), ctiles = (d.Cg + MR - 1) / MR;
  float* Bp = align64(scratch);
  float* img = Bp + align16(std::min(KC, d.P) * round_up(std::min(CONV_DW_T_NC, d.Og), NR));
  if (n1 <= n0) {
    memset(out, 0, (size_t)(d.Kd * d.Og) * sizeof(float));
    return;
  }
  for (int64_t n = n0; n < n1; ++n) {
    dwt_fill(s, x + (n * s.C + g * d.Cg) * d.HW, d.Cg, plane, n == n0, img);
    const float* dyg = dy + (n * s.O + g * d.Og) * d.P;
    for (int64_t pc = 0; pc < d.P; pc += step) {
      const int64_t kc = std::min(step, d.P - pc);
      StoreArgs st{1.0f, n == n0 ? 0.0f : 1.0f, pc == 0, pc + kc >= d.P, Epilogue{}, 0, 0};
      for (int64_t jc = 0; jc < d.Og; jc += CONV_DW_T_NC) {
        const int64_t nc = std::min(CONV_DW_T_NC, d.Og - jc);
        // NR-column panels of dy^T over [pc, pc+kc): dy's rows, 0 in the columns past Og
        for (int64_t jr = 0; jr < nc; jr += NR)
          pack_rows([&](int64_t r) { return dyg + (jc + jr + r) * d.P + pc; }, std::min(NR, nc - jr), NR, kc,
                    Bp + jr * kc);
        // micro-tiles: panels outer (one kc x NR panel of dy^T stays in L1), then (kh, kw, channel tile); in the
        // first block the next image's x and dy channels are prefetched into L2 a slice per (panel, kk)
        const int64_t slices = pc == 0 && jc == 0 && n + 1 < n1 ? (nc + NR - 1) / NR * KK : 0;
        int64_t slice = 0;
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int64_t nr = std::min(NR, nc - jr);
          st.col0 = jc + jr;
          for (int64_t kk = 0; kk < KK; ++kk) {
            if (slice < slices) {
              const int64_t nx = d.Cg * d.HW, ny = d.Og * d.P, lo = (nx + ny) * slice / slices;
              const int64_t hi = (nx + ny) * ++slice / slices;
              const float* xn = x + ((n + 1) * s.C + g * d.Cg) * d.HW;
              const float* yn = dy + ((n + 1) * s.O + g * d.Og) * d.P;
              if (lo < nx) prefetch_run<2>(xn + lo, std::min(hi, nx) - lo);
              if (hi > nx) prefetch_run<2>(yn + std::max(lo, nx) - nx, hi - std::max(lo, nx));
            }
            const float* a = img + (kk % s.KW) * d.Cg * plane + (kk / s.KW) * s.dh * s.OW + pc;
            for (int64_t t = 0; t < ctiles; ++t) {
              const int64_t c = t * MR, mr = std::min(MR, d.Cg - c), m = kk * d.Cg + c;
              st.row0 = m;
              micro_kernel<true>(kc, a + c * plane, plane, Bp + jr * kc, out + m * d.Og + jc + jr, d.Og, mr, nr, st);
            }
          }
        }
      }
    }
  }
}

/** chunk q of Q (images [N*q/Q, N*(q+1)/Q)) of every group, transposed, into out (O x Kd floats) */
inline void wide_dw_t_chunk(const Conv2dShape& s, const float* dy, const float* x, float* out, int64_t q, int64_t Q,
                            void* scratch) {
  const ConvDims d = conv_dims(s);
  for (int64_t g = 0; g < s.groups; ++g)
    wide_dw_t_block(s, dy, x, out + g * d.Og * d.Kd, g, s.N * q / Q, s.N * (q + 1) / Q, scratch);
}

/** dw's blocks of 16 output channels (units [u0, u1) over groups) = the Q transposed chunks added in order */
inline void wide_dw_t_finish(const Conv2dShape& s, const float* chunks, int64_t Q, int64_t u0, int64_t u1, float* dw) {
  const ConvDims d = conv_dims(s);
  const int64_t KK = s.KH * s.KW, ob = (d.Og + 15) / 16, wsize = s.O * d.Kd;
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t g = u / ob, o0 = u % ob * 16, no = std::min<int64_t>(16, d.Og - o0);
    const float* t0 = chunks + g * d.Og * d.Kd + o0;
    float* dwg = dw + (g * d.Og + o0) * d.Kd;
    for (int64_t m = 0; m < d.Kd; ++m) {
      const int64_t p = m % d.Cg * KK + m / d.Cg;
      float v[16];
      // the chunks of row m added in order; a full block as a constant trip count (one vector per chunk)
      const auto sum = [&](auto cnt) {
        for (int64_t i = 0; i < cnt; ++i) v[i] = t0[m * d.Og + i];
        for (int64_t q = 1; q < Q; ++q)
          for (int64_t i = 0; i < cnt; ++i) v[i] += t0[q * wsize + m * d.Og + i];
      };
      if (no == 16) sum(std::integral_constant<int64_t, 16>{});
      else sum(no);
      for (int64_t i = 0; i < no; ++i) dwg[i * d.Kd + p] = v[i];
    }
  }
}

/*
 * Direct stride-1 kernels for convolutions with a short unrolled window (Kd = C/groups*KH*KW
 * <= 32, e.g. a network's first 1- or 3-channel layer): a GEMM with K = Kd is bound by writing C,
 * so these compute each output row straight from the padded image (one multiply-add pass per
 * window row p over a row of outputs held in L1) and write y once.
 */
#ifndef MPSC_FAST_CONV_DIRECT_KD
#define MPSC_FAST_CONV_DIRECT_KD 32
#endif
inline bool direct_ok(const Conv2dShape& s) {
  return wide_ok(s) && (s.C / s.groups) * s.KH * s.KW <= MPSC_FAST_CONV_DIRECT_KD && s.C / s.groups > 0;
}

/** per-channel floats of the direct kernels' padded image: the wide plane plus 4*VW readable zeros */
inline int64_t direct_plane(const Wide& w, const Conv2dShape& s) { return wide_plane(w, s.OH) + 4 * VW; }
/** wide columns the direct kernels compute: OH*Wp rounded up to 4*VW */
inline int64_t direct_len(const Wide& w, const Conv2dShape& s) { return round_up(s.OH * w.Wp, 4 * VW); }
/** offset of window row p = (c, kh, kw) in the padded image */
inline int64_t direct_off(const Conv2dShape& s, const Wide& w, int64_t plane, int64_t p) {
  const int64_t KK = s.KH * s.KW, c = p / KK, kh = (p / s.KW) % s.KH, kw = p % s.KW;
  return c * plane + kh * s.dh * w.Wp + kw * s.dw;
}

/** out[ob][j] = sum_p wr[ob][p] * img[off[p] + j] for j < len (a multiple of 4*VW), OB rows at once */
template <int OB>
inline void direct_rows(const float* img, const int64_t* off, int64_t Kd, const float* const* wr, int64_t len,
                        float* const* out) {
  for (int64_t j = 0; j < len; j += 4 * VW) {
    vf acc[OB][4];
    for (int ob = 0; ob < OB; ++ob)
      for (int i = 0; i < 4; ++i) acc[ob][i] = splatv(0.0f);
    for (int64_t p = 0; p < Kd; ++p) {
      const float* src = img + off[p] + j;
      const vf x0 = loadv(src), x1 = loadv(src + VW), x2 = loadv(src + 2 * VW), x3 = loadv(src + 3 * VW);
      for (int ob = 0; ob < OB; ++ob) {
        const vf wv = splatv(wr[ob][p]);
        acc[ob][0] += wv * x0;
        acc[ob][1] += wv * x1;
        acc[ob][2] += wv * x2;
        acc[ob][3] += wv * x3;
      }
    }
    for (int ob = 0; ob < OB; ++ob)
      for (int i = 0; i < 4; ++i) storev(out[ob] + j + i * VW, acc[ob][i]);
  }
}

inline int64_t direct_forward_floats(const Conv2dShape& s) {
  const Wide w = wide_dims(s);
  return (s.C / s.groups) * direct_plane(w, s) + 4 * direct_len(w, s) + align16(2 * (s.C / s.groups) * s.KH * s.KW);  // + Kd int64 offsets
}

/** forward for direct_ok shapes, share `part` of nparts: items (image, group); y fully written */
inline void direct_forward_part(const Conv2dShape& s, const float* x, const float* w, const float* bias, bool relu,
                                float* y, int part, int nparts, void* scratch) {
  const ConvDims d = conv_dims(s);
  const Wide wd = wide_dims(s);
  const int64_t plane = direct_plane(wd, s), len = direct_len(wd, s), OW = s.OW;
  float* img = align64(scratch);
  float* rows = img + d.Cg * plane;  // 4 rows of len
  int64_t* off = reinterpret_cast<int64_t*>(rows + 4 * len);
  for (int64_t p = 0; p < d.Kd; ++p) off[p] = direct_off(s, wd, plane, p);
  int64_t b, e;
  share(s.N * s.groups, part, nparts, b, e);
  for (int64_t it = b; it < e; ++it) {
    const int64_t n = it / s.groups, g = it % s.groups;
    wide_fill(s, wd, x + (n * s.C + g * d.Cg) * d.HW, 0, d.Cg, 0, s.OH, plane, img);
    for (int64_t o0 = 0; o0 < d.Og; o0 += 4) {
      const int ob = (int)std::min<int64_t>(4, d.Og - o0);
      const float* wr[4];
      float* out[4];
      for (int i = 0; i < 4; ++i) {
        wr[i] = w + (g * d.Og + o0 + std::min(i, ob - 1)) * d.Kd;
        out[i] = rows + i * len;
      }
      if (ob == 4) direct_rows<4>(img, off, d.Kd, wr, len, out);
      else for (int i = 0; i < ob; ++i) direct_rows<1>(img, off, d.Kd, wr + i, len, out + i);
      for (int i = 0; i < ob; ++i) {
        const int64_t o = g * d.Og + o0 + i;
        const float bo = bias ? bias[o] : 0.0f;
        float* yo = y + (n * s.O + o) * d.P;
        for (int64_t oh = 0; oh < s.OH; ++oh) {
          const float* a = out[i] + oh * wd.Wp;
          float* yr = yo + oh * OW;
          if (relu) {
            for (int64_t ow = 0; ow < OW; ++ow) {
              const float v = a[ow] + bo;
              yr[ow] = v > 0.0f ? v : 0.0f;
            }
          } else {
            for (int64_t ow = 0; ow < OW; ++ow) yr[ow] = a[ow] + bo;
          }
        }
      }
    }
  }
}

inline int64_t direct_grad_weight_floats(const Conv2dShape& s) {
  const ConvDims d = conv_dims(s);
  const Wide w = wide_dims(s);
  return d.Cg * direct_plane(w, s) + 4 * direct_len(w, s) + align16(d.Og * d.Kd * VW) + align16(2 * d.Kd);  // + Kd int64 offsets
}

/** sum of the VW lanes of v in lane order */
inline float lane_sum(vf v) {
  float t = 0.0f;
  for (int i = 0; i < VW; ++i) t += v[i];
  return t;
}

/**
 * dw for direct_ok shapes (sum over the batch), share `part` of nparts: parts split the output
 * channels. Per (image, o, p) a VW-lane dot product of dy (in wide columns, 0 on dropped columns)
 * with the shifted padded image, added lane-wise into a VW-float partial per (o, p) over images in
 * order; the lanes are summed once at the end. Every element has one fixed order whatever nparts is.
 */
inline void direct_grad_weight_part(const Conv2dShape& s, const float* dy, const float* x, float* dw, int part,
                                    int nparts, void* scratch) {
  const ConvDims d = conv_dims(s);
  const Wide wd = wide_dims(s);
  const int64_t plane = direct_plane(wd, s), len = direct_len(wd, s), OW = s.OW;
  float* img = align64(scratch);
  float* dyw = img + d.Cg * plane;  // 4 dy planes in wide columns
  float* acc = dyw + 4 * len;           // [o][p] VW-lane partial sums over images and chunks
  int64_t* off = reinterpret_cast<int64_t*>(acc + align16(d.Og * d.Kd * VW));
  for (int64_t p = 0; p < d.Kd; ++p) off[p] = direct_off(s, wd, plane, p);
  const DwShare sh = dw_share(s, d, true, part, nparts);
  for (int64_t g = 0; g < s.groups; ++g) {
    int64_t o0, o1, p0, p1;
    if (!dw_block(d, sh, g, o0, o1, p0, p1)) continue;
    for (int64_t i = 0; i < (o1 - o0) * d.Kd * VW; ++i) acc[i] = 0.0f;
    for (int64_t n = 0; n < s.N; ++n) {
      wide_fill(s, wd, x + (n * s.C + g * d.Cg) * d.HW, 0, d.Cg, 0, s.OH, plane, img);
      for (int64_t ob = o0; ob < o1; ob += 4) {
        // up to 4 output channels at once: each chunk of the shifted image is loaded once for all 4
        const int64_t nb = std::min<int64_t>(4, o1 - ob);
        for (int64_t i = 0; i < 4; ++i) {
          float* dr = dyw + i * len;
          memset(dr, 0, (size_t)len * sizeof(float));
          if (i >= nb) continue;
          const float* dyo = dy + (n * s.O + g * d.Og + ob + i) * d.P;
          for (int64_t oh = 0; oh < s.OH; ++oh) memcpy(dr + oh * wd.Wp, dyo + oh * OW, (size_t)OW * sizeof(float));
        }
        const float *d0 = dyw, *d1 = dyw + len, *d2 = dyw + 2 * len, *d3 = dyw + 3 * len;
        // columns in chunks of 512 so the 4 dy rows and the image slices stay in L1 across p
        for (int64_t j0 = 0; j0 < len; j0 += 512)
        for (int64_t p = 0; p < d.Kd; ++p) {
          const float* src = img + off[p];
          const int64_t j1 = std::min<int64_t>(len, j0 + 512);
          vf a0 = splatv(0.0f), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
          for (int64_t j = j0; j < j1; j += 2 * VW) {
            const vf x0 = loadv(src + j), x1 = loadv(src + j + VW);
            a0 += loadv(d0 + j) * x0;
            b0 += loadv(d0 + j + VW) * x1;
            a1 += loadv(d1 + j) * x0;
            b1 += loadv(d1 + j + VW) * x1;
            a2 += loadv(d2 + j) * x0;
            b2 += loadv(d2 + j + VW) * x1;
            a3 += loadv(d3 + j) * x0;
            b3 += loadv(d3 + j + VW) * x1;
          }
          const vf sums[4] = {a0 + b0, a1 + b1, a2 + b2, a3 + b3};
          for (int64_t i = 0; i < nb; ++i) {
            float* ap = acc + ((ob + i - o0) * d.Kd + p) * VW;
            storev(ap, loadv(ap) + sums[i]);
          }
        }
      }
    }
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t p = 0; p < d.Kd; ++p) dw[(g * d.Og + o) * d.Kd + p] = lane_sum(loadv(acc + ((o - o0) * d.Kd + p) * VW));
  }
}

}  // namespace detail

/**
 * Bytes of scratch one part of `pass` needs (same for every part and nparts), including its
 * packed GEMM operands; pass a 64-byte-aligned block of at least this size per concurrent part.
 * (CONV_GRAD_BIAS needs none.)
 *   forward:      packed W_g + one packed KC x 256 im2col block
 *   grad-input:   packed W_g^T + a col chunk (<= 512 KiB) + one packed block of dy
 *   grad-weight:  one packed block of dy + one packed KC x 512 im2col^T block
 */
inline size_t conv2d_scratch_bytes(const Conv2dShape& s, ConvPass pass) {
  using namespace detail;
  const ConvDims d = conv_dims(s);
  if (s.N <= 0 || d.P <= 0 || d.Og <= 0 || d.Kd <= 0) return 0;
  int64_t f = 0;
  if (pass == CONV_FORWARD && wino_conv_ok(s)) {
    f = wino_floats(s.N, s.C, s.O, s.OH, s.OW);
  } else if (pass == CONV_GRAD_INPUT && wide_grad_input_ok(s) && wino_conv_ok(grad_input_as_forward(s))) {
    const Conv2dShape t = grad_input_as_forward(s);
    f = wino_floats(t.N, t.C, t.O, t.OH, t.OW);
  } else if (pass == CONV_GRAD_WEIGHT && wino_grad_weight_ok(s)) {
    f = wino_dw_floats(s.N, s.C, s.O, s.OH, s.OW);
  } else if (pass == CONV_FORWARD && direct_ok(s)) {
    f = direct_forward_floats(s);
  } else if (pass == CONV_GRAD_WEIGHT && direct_ok(s)) {
    f = direct_grad_weight_floats(s);
  } else if (pass == CONV_FORWARD && wide_ok(s)) {
    f = wide_forward_floats(s, false);
  } else if (pass == CONV_GRAD_INPUT && wide_grad_input_ok(s)) {
    f = wide_forward_floats(grad_input_as_forward(s), true);
  } else if (pass == CONV_GRAD_WEIGHT && wide_ok(s)) {
    f = wide_grad_weight_floats(s);
    if (wide_dw_t_ok(s)) f = std::max(f, wide_dw_t_floats(s));
  } else if (pass == CONV_FORWARD) {
    f = packed_a_all_floats(d.Og, d.Kd) + align16(std::min(KC, d.Kd) * round_up(std::min(CONV_NC, d.P), NR));
  } else if (pass == CONV_GRAD_INPUT) {
    const int64_t cols = std::min(NC, chunk_cols(d.Kd, d.P));
    f = packed_a_all_floats(d.Kd, d.Og) + (d.direct ? 0 : align16(d.Kd * cols)) +
        align16(std::min(KC, d.Og) * round_up(cols, NR));
  } else if (pass == CONV_GRAD_WEIGHT) {
    f = packed_a_floats(d.Og, d.P) + align16(std::min(KC, d.P) * round_up(std::min(CONV_NC_W, d.Kd), NR));
  }
  return (size_t)f * sizeof(float) + 64;  // + 64: tolerates a scratch pointer that is not 64-byte aligned
}

/** the largest of the three passes' scratch (one buffer per thread serves them all) */
inline size_t conv2d_scratch_bytes_max(const Conv2dShape& s) {
  return std::max(conv2d_scratch_bytes(s, CONV_FORWARD),
                  std::max(conv2d_scratch_bytes(s, CONV_GRAD_INPUT), conv2d_scratch_bytes(s, CONV_GRAD_WEIGHT)));
}

/**
 * y = conv2d(x, w) (+ bias[o]) (then relu if `relu`), share `part` of nparts.
 * bias may be nullptr. y is fully written (not read). im2col rows are generated straight
 * into packed GEMM panels (no col buffer); W_g is packed once per group per call.
 */
inline void conv2d_forward_part(const Conv2dShape& s, const float* x, const float* w, const float* bias, bool relu,
                                float* y, int part, int nparts, void* scratch) {
  using namespace detail;
  const ConvDims d = conv_dims(s);
  if (s.N <= 0 || d.P <= 0 || d.Og <= 0) return;
  if (wino_conv_ok(s))
    return wino_forward_part(s.N, s.C, s.H, s.W, s.O, s.ph, s.pw, s.OH, s.OW, x, w, false, bias, relu, y, part, nparts,
                             scratch);
  if (direct_ok(s)) return direct_forward_part(s, x, w, bias, relu, y, part, nparts, scratch);
  if (wide_ok(s) && d.Kd > 0) return wide_forward_part(s, x, w, false, bias, relu, y, part, nparts, scratch);
  const int64_t ncb = std::min(CONV_NC, d.P), nch = (d.P + ncb - 1) / ncb;
  float* Apre = align64(scratch);
  float* Bp = Apre + packed_a_all_floats(d.Og, d.Kd);
  int64_t b, e, packed_g = -1;
  share(s.N * s.groups * nch, part, nparts, b, e);
  for (int64_t it = b; it < e; ++it) {
    const int64_t n = it / (s.groups * nch), g = (it / nch) % s.groups, ch = it % nch;
    const int64_t j0 = ch * ncb, j1 = std::min(d.P, j0 + ncb);
    const float* xg = x + (n * s.C + g * d.Cg) * d.HW;
    float* yg = y + (n * s.O + g * d.Og) * d.P;
    Epilogue ep;
    ep.bias = bias ? bias + g * d.Og : nullptr;
    ep.bias_kind = bias ? BIAS_ROW : BIAS_NONE;
    ep.relu = relu;
    if (d.Kd <= 0) {
      scale_only(0, d.Og, j0, j1, 0.0f, yg, d.P, ep);
      continue;
    }
    if (g != packed_g) {
      pack_a_all(false, w + g * d.Og * d.Kd, d.Kd, d.Og, d.Kd, Apre);
      packed_g = g;
    }
    gemm_driver(
        0, d.Og, j0, j1, d.Kd, ncb, 1.0f, 0.0f, yg, d.P, ep,
        [&](int64_t ic, int64_t mc, int64_t pc, int64_t) { return packed_a_block(Apre, d.Kd, ic, mc, pc); },
        [&](int64_t pc, int64_t kc, int64_t jc, int64_t nc) {
          im2col_packed(s, xg, pc, kc, jc, nc, Bp);
          return (const float*)Bp;
        });
  }
}

namespace detail {

/** dx = d(conv2d)/dx applied to dy through im2col chunks and col2im, share `part` of nparts. dx fully written. */
inline void im2col_grad_input_part(const Conv2dShape& s, const float* dy, const float* w, float* dx, int part,
                                   int nparts, void* scratch, const float* mask = nullptr) {
  const ConvDims d = conv_dims(s);
  const int64_t cols = std::min(NC, chunk_cols(d.Kd, d.P));
  float* Apre = align64(scratch);
  float* col = Apre + packed_a_all_floats(d.Kd, d.Og);
  float* Bp = col + (d.direct ? 0 : align16(d.Kd * cols));
  int64_t b, e, packed_g = -1;
  share(s.N * s.groups, part, nparts, b, e);
  for (int64_t it = b; it < e; ++it) {
    const int64_t n = it / s.groups, g = it % s.groups;
    float* dxg = dx + (n * s.C + g * d.Cg) * d.HW;
    if (!d.direct || d.P <= 0 || d.Og <= 0) memset(dxg, 0, (size_t)(d.Cg * d.HW) * sizeof(float));
    if (d.P <= 0 || d.Og <= 0) continue;
    if (g != packed_g) {
      pack_a_all(true, w + g * d.Og * d.Kd, d.Kd, d.Kd, d.Og, Apre);  // op(A) = W_g^T, Kd x Og
      packed_g = g;
    }
    for (int64_t j0 = 0; j0 < d.P; j0 += cols) {
      const int64_t j1 = std::min(d.P, j0 + cols);
      // 1x1 / stride 1 / no padding: col is dx itself
      float* out = d.direct ? dxg + j0 : col;
      const int64_t ldo = d.direct ? d.P : j1 - j0;
      gemm_driver(
          0, d.Kd, 0, j1 - j0, d.Og, NC, 1.0f, 0.0f, out, ldo, Epilogue{},
          [&](int64_t ic, int64_t mc, int64_t pc, int64_t) { return packed_a_block(Apre, d.Og, ic, mc, pc); },
          [&](int64_t pc, int64_t kc, int64_t jc, int64_t nc) {
            for (int64_t o = pc; o < pc + kc; ++o)
              scatter_row_to_panels(dy + (n * s.O + g * d.Og + o) * d.P + j0 + jc, nc, kc, o - pc, Bp);
            return (const float*)Bp;
          });
      if (!d.direct) col2im(s, col, d.Kd, j0, j1, dxg);
    }
    if (mask) mask_store(dxg, dxg, mask + (dxg - dx), d.Cg * d.HW);  // after col2im's scatter-adds
  }
}

}  // namespace detail

/**
 * dx = d(conv2d)/dx applied to dy, share `part` of nparts. dx is fully written (not read).
 * Stride 1 with padding <= (K-1)*dilation: the forward convolution of dy with the flipped,
 * transposed weights (wide path); otherwise im2col GEMM chunks scattered back with col2im.
 * With `mask` (x's shape, not overlapping dx): dx = mask > 0 ? dx : 0 as it is stored (a
 * relu-grad folded in: the select of unary_grad relu, so the separate pass's bits).
 */
inline void conv2d_grad_input_part(const Conv2dShape& s, const float* dy, const float* w, float* dx, int part,
                                   int nparts, void* scratch, const float* mask = nullptr) {
  if (detail::wide_grad_input_ok(s) && s.N > 0 && s.O / s.groups > 0 && s.C > 0) {
    const Conv2dShape t = detail::grad_input_as_forward(s);
    if (detail::wino_conv_ok(t))
      return detail::wino_forward_part(t.N, t.C, t.H, t.W, t.O, t.ph, t.pw, t.OH, t.OW, dy, w, true, nullptr, false, dx,
                                       part, nparts, scratch, mask);
    return detail::wide_forward_part(t, dy, w, true, nullptr, false, dx, part, nparts, scratch, mask);
  }
  detail::im2col_grad_input_part(s, dy, w, dx, part, nparts, scratch, mask);
}

namespace detail {

/**
 * dw = d(conv2d)/dw applied to dy (summed over the batch) through im2col, share `part` of
 * nparts. dw is fully written. Per image one GEMM dW_g[o-range, p-range] (+)= dy_g[n] (Og x P) *
 * col^T, with im2col^T generated straight into packed panels. Parts split the axis of dW whose
 * operand costs more to pack, so it is packed once: output channels o when Og >= Kd (e.g. 1- or
 * 3-channel first layers, where a p split would leave each part a sliver of a 9- or 27-wide
 * matrix), else the columns p.
 */
inline void im2col_grad_weight_part(const Conv2dShape& s, const float* dy, const float* x, float* dw, int part,
                                    int nparts, void* scratch) {
  const ConvDims d = conv_dims(s);
  float* Ap = align64(scratch);
  float* Bp = Ap + packed_a_floats(d.Og, d.P);
  const DwShare sh = dw_share(s, d, d.Og >= d.Kd, part, nparts);
  for (int64_t g = 0; g < s.groups; ++g) {
    int64_t o0, o1, p0, p1;
    if (!dw_block(d, sh, g, o0, o1, p0, p1)) continue;
    float* dwg = dw + g * d.Og * d.Kd;  // Og x Kd; this part writes [o0, o1) x [p0, p1)
    if (s.N <= 0 || d.P <= 0) {
      for (int64_t o = o0; o < o1; ++o) memset(dwg + o * d.Kd + p0, 0, (size_t)(p1 - p0) * sizeof(float));
      continue;
    }
    for (int64_t n = 0; n < s.N; ++n) {
      const float* xg = x + (n * s.C + g * d.Cg) * d.HW;
      gemm_driver(
          o0, o1, p0, p1, d.P, CONV_NC_W, 1.0f, n == 0 ? 0.0f : 1.0f, dwg, d.Kd, Epilogue{},
          [&](int64_t ic, int64_t mc, int64_t pc, int64_t kc) {
            // MR-row panels of dy_g[n][ic .. ic+mc, pc .. pc+kc)
            const float* dyg = dy + (n * s.O + g * d.Og) * d.P + pc;
            for (int64_t ir = 0; ir < mc; ir += MR)
              pack_rows([&](int64_t r) { return dyg + (ic + ir + r) * d.P; }, std::min(MR, mc - ir), MR, kc, Ap + ir * kc);
            return (const float*)Ap;
          },
          [&](int64_t pc, int64_t kc, int64_t jc, int64_t nc) {
            im2col_packed_t(s, xg, pc, kc, jc, nc, Bp);
            return (const float*)Bp;
          });
    }
  }
}

}  // namespace detail


/**
 * Batch chunks Q of the grad-weight (a function of the shape only, so the sums do not depend on
 * the thread count). Q > 1 for the stride-1 wide path: each part sums whole chunks of images
 * into a whole dW (dw itself for chunk 0, the shared block for the others) and a second phase
 * adds the chunks in order. Splitting dW's rows or columns instead (Q = 1) has every part pack
 * all of dy or all of the image. Q is at most MPSC_FAST_CONV_DW_CHUNKS and its partial dWs at most
 * MPSC_FAST_CONV_DW_SHARED_BYTES.
 */
inline int64_t conv2d_grad_weight_chunks(const Conv2dShape& s) {
  using namespace detail;
  if (wino_grad_weight_ok(s)) return wino_dw_chunks(s);
  if (direct_ok(s) || !wide_ok(s) || s.C <= 0 || s.N < 2) return 1;
  const int64_t wfloats = s.O * conv_dims(s).Kd;
  int64_t q = std::min<int64_t>(s.N, MPSC_FAST_CONV_DW_CHUNKS);
  while (q > 1 && (q - 1) * wfloats * (int64_t)sizeof(float) > (int64_t)MPSC_FAST_CONV_DW_SHARED_BYTES) --q;
  return q;
}

namespace detail {
/** the grad-weight runs as transposed batch chunks (wide_dw_t_block) */
inline bool dw_t_chunks(const Conv2dShape& s) {
  return !wino_grad_weight_ok(s) && conv2d_grad_weight_chunks(s) > 1 && wide_dw_t_ok(s);
}
}  // namespace detail

/** bytes of the block shared by all parts of a grad-weight call (0 when conv2d_grad_weight_chunks(s) == 1) */
inline size_t conv2d_grad_weight_shared_bytes(const Conv2dShape& s) {
  const int64_t Q = conv2d_grad_weight_chunks(s);
  if (detail::wino_grad_weight_ok(s))
    return (size_t)(Q * detail::wino_dw_chunk_floats(s.C, s.O)) * sizeof(float);
  if (Q <= 1) return 0;
  // the transposed chunks (detail::wide_dw_t_ok) all go there, chunk 0 too; otherwise chunk 0 goes to dw
  return (size_t)((detail::dw_t_chunks(s) ? Q : Q - 1) * s.O * detail::conv_dims(s).Kd) * sizeof(float);
}

/** phases of a grad-weight call: run every part of phase 0, then every part of phase 1 (if 2) */
inline int conv2d_grad_weight_phases(const Conv2dShape& s) {
  return detail::wino_grad_weight_ok(s) || conv2d_grad_weight_chunks(s) > 1 ? 2 : 1;
}

/**
 * dw = d(conv2d)/dw applied to dy (summed over the batch), share `part` of nparts of `phase`
 * (conv2d_grad_weight_phases: all parts of phase 0 must finish before phase 1 starts). dw fully
 * written. `shared`: conv2d_grad_weight_shared_bytes(s) bytes, the same block for every part and
 * both phases (nullptr when 0). Stride 1: direct kernel (C/groups*KH*KW <= 32) or wide GEMM in
 * batch chunks; otherwise im2col GEMM.
 */
inline void conv2d_grad_weight_part(const Conv2dShape& s, const float* dy, const float* x, float* dw, int part,
                                    int nparts, void* scratch, int phase = 0, float* shared = nullptr) {
  const int64_t Q = conv2d_grad_weight_chunks(s);
  if (detail::wino_grad_weight_ok(s)) {
    // phase 0: chunk q's transformed sums at shared + q * cs; phase 1: their sum, transformed, per (o, c)
    const int64_t cs = detail::wino_dw_chunk_floats(s.C, s.O);
    int64_t b, e;
    if (phase == 0) {
      detail::share(Q, part, nparts, b, e);
      for (int64_t q = b; q < e; ++q)
        detail::wino_dw_chunk(s.N, s.C, s.H, s.W, s.O, s.ph, s.pw, s.OH, s.OW, x, dy, s.N * q / Q, s.N * (q + 1) / Q,
                              shared + q * cs, scratch);
    } else {
      detail::share(s.O * s.C, part, nparts, b, e);
      detail::wino_dw_finish(shared, Q, s.C, s.O, b, e, dw);
    }
    return;
  }
  if (detail::dw_t_chunks(s)) {
    // phase 0: chunk q's dW^T at shared + q * wsize; phase 1: their sum in order, transposed into dw, per 16 o's
    const detail::ConvDims d = detail::conv_dims(s);
    const int64_t wsize = s.O * d.Kd;
    int64_t b, e;
    if (phase == 0) {
      detail::share(Q, part, nparts, b, e);
      for (int64_t q = b; q < e; ++q) detail::wide_dw_t_chunk(s, dy, x, shared + q * wsize, q, Q, scratch);
    } else {
      detail::share(s.groups * ((d.Og + 15) / 16), part, nparts, b, e);
      detail::wide_dw_t_finish(s, shared, Q, b, e, dw);
    }
    return;
  }
  if (Q > 1) {
    const int64_t wsize = s.O * detail::conv_dims(s).Kd;
    int64_t b, e;
    if (phase == 0) {
      detail::share(Q, part, nparts, b, e);
      for (int64_t q = b; q < e; ++q)
        detail::wide_grad_weight_chunk(s, dy, x, q == 0 ? dw : shared + (q - 1) * wsize, q, Q, scratch);
    } else {
      // dw = ((chunk 0 + chunk 1) + chunk 2) + ..., split over 16-float blocks
      detail::share((wsize + 15) / 16, part, nparts, b, e);
      const int64_t i0 = b * 16, i1 = std::min(wsize, e * 16);
      for (int64_t q = 1; q < Q; ++q) {
        const float* __restrict src = shared + (q - 1) * wsize;
        float* __restrict dst = dw;
        for (int64_t i = i0; i < i1; ++i) dst[i] += src[i];
      }
    }
    return;
  }
  if (phase != 0) return;
  if (detail::direct_ok(s)) return detail::direct_grad_weight_part(s, dy, x, dw, part, nparts, scratch);
  if (detail::wide_ok(s) && s.C > 0) return detail::wide_grad_weight_part(s, dy, x, dw, part, nparts, scratch);
  detail::im2col_grad_weight_part(s, dy, x, dw, part, nparts, scratch);
}

/** db[o] = sum over n, oh, ow of dy[n,o,oh,ow], share `part` of nparts (split over o). No scratch. */
inline void conv2d_grad_bias_part(const Conv2dShape& s, const float* dy, float* db, int part, int nparts) {
  using namespace detail;
  const int64_t P = s.OH * s.OW;
  int64_t b, e;
  share(s.O, part, nparts, b, e);
  for (int64_t o = b; o < e; ++o) {
    v8f acc = splat8(0.0f);
    float tail = 0.0f;
    for (int64_t n = 0; n < s.N; ++n) {
      const float* r = dy + (n * s.O + o) * P;
      int64_t j = 0;
      for (; j + 8 <= P; j += 8) acc += load8(r + j);
      for (; j < P; ++j) tail += r[j];
    }
    float t = tail;
    for (int l = 0; l < 8; ++l) t += acc[l];
    db[o] = t;
  }
}

}  // namespace mpsc_fast

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif
