/*
 * conv.h: conv2d forward, grad-input, grad-weight and grad-bias for NCHW float tensors,
 * built on sgemm.h (header-only, C++17). Semantics are those of the IR ops conv2d,
 * conv2d_grad_input and conv2d_grad_weight (compiler/ir/ops.ts), i.e. torch's conv2d:
 *
 *   x [N,C,H,W], weight [O,C/groups,KH,KW], bias [O] -> y [N,O,OH,OW]
 *   OH = floor((H + 2ph - dh*(KH-1) - 1)/sh) + 1 (same for OW)
 *
 * Method (implicit GEMM with packing): the GEMM packers generate the unrolled-window rows
 * p = (c, kh, kw) of im2col straight into the packed, cache-blocked B panels, so forward and
 * grad-weight need no col buffer; grad-input computes a chunk of col (<= 512 KiB) and scatters
 * it back with col2im. Padding is handled by computing the valid output range once per
 * (row p, output row) and copying contiguous runs (memcpy when the stride is 1), so for
 * 1-channel 3x3 inputs the im2col costs ~9 copies per output pixel against 2*O*9 flops.
 * Weights are packed once per group per call. The backward passes read dy through a row
 * provider (conv2d_grad_*_part_rows) so a dy producer (relu-grad, pool-grad) can be fused.
 *   forward:      y_g[n]  (Og x P)  = W_g (Og x Kd) * col (Kd x P)    + bias, relu (fused epilogue)
 *   grad-input:   col     (Kd x P)  = W_g^T * dy_g[n],  dx_g[n] = col2im(col)
 *   grad-weight:  dW_g    (Og x Kd) = sum_n dy_g[n] (Og x P) * col^T (P x Kd)
 *   (Kd = C/groups*KH*KW, P = OH*OW)
 *
 * Threading without owning threads: every *_part(..., part, nparts, scratch) function
 * computes a disjoint share of its output; run part = 0..nparts-1 on the caller's pool,
 * each with its own scratch of conv2d_scratch_bytes(shape, pass) bytes (64-byte aligned).
 * Shares: forward splits (image, group, column chunk) items; grad-input splits (image,
 * group) items; grad-weight splits dW by output channel (Og >= Kd) or by column p (rows of col);
 * grad-bias splits output channels. Results are bitwise identical for every nparts.
 */
#ifndef MPSC_FAST_CONV_H
#define MPSC_FAST_CONV_H

#include "sgemm.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
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
    float* d = dst + jr * kc + r * NR;
    store8(d, load8(row + jr));
    store8(d + 8, load8(row + jr + 8));
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
  // 16 rows p at a time into an L1 tile (NR x kc), then written panel-row by panel-row (contiguous stores)
  float tile[NR * KC];
  for (int64_t jr = 0; jr < nc; jr += NR) {
    const int64_t nr = std::min(NR, nc - jr);
    for (int64_t c = 0; c < nr; ++c) im2col(s, xg, jc + jr + c, jc + jr + c + 1, pc, pc + kc, tile + c * kc);
    for (int64_t c = nr; c < NR; ++c) memset(tile + c * kc, 0, (size_t)kc * sizeof(float));
    float* d = dst + jr * kc;
    for (int64_t k = 0; k < kc; ++k) {
      float* dk = d + k * NR;
      for (int64_t c = 0; c < NR; ++c) dk[c] = tile[c * kc + k];
    }
  }
}

/** [b, e) = share `part` of n items */
inline void share(int64_t n, int part, int nparts, int64_t& b, int64_t& e) {
  if (nparts < 1) nparts = 1;
  b = n * part / nparts;
  e = n * (part + 1) / nparts;
}

inline float* align64(void* p) { return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63)); }

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
  if (pass == CONV_FORWARD) {
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

/**
 * The backward passes read dy through a row provider, so a producer of dy (relu-grad,
 * pool-grad, a loss gradient) can be fused into the GEMM packing instead of materialising dy:
 *
 *   const float* dy_rows(int64_t n, int64_t o, int64_t j0, int64_t j1, float* tmp)
 *
 * returns the values dy[n, o, j0 .. j1) (j = oh*OW + ow; o the absolute output channel),
 * either as a pointer into memory or after writing them to tmp[0 .. j1-j0) and returning tmp.
 * It is called concurrently from different parts (it must not write shared state) and may be
 * called more than once for the same row. The plain overloads pass a pointer into dy.
 */
struct DyMemory {
  const float* dy;
  int64_t O, P;
  const float* operator()(int64_t n, int64_t o, int64_t j0, int64_t, float*) const { return dy + (n * O + o) * P + j0; }
};

/** dx = d(conv2d)/dx applied to dy (rows from dy_rows), share `part` of nparts. dx fully written (not read). */
template <class DyRows>
inline void conv2d_grad_input_part_rows(const Conv2dShape& s, DyRows&& dy_rows, const float* w, float* dx, int part,
                                        int nparts, void* scratch) {
  using namespace detail;
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
            float tmp[NC];
            for (int64_t o = pc; o < pc + kc; ++o) {
              const float* r = dy_rows(n, g * d.Og + o, j0 + jc, j0 + jc + nc, tmp);
              scatter_row_to_panels(r, nc, kc, o - pc, Bp);
            }
            return (const float*)Bp;
          });
      if (!d.direct) col2im(s, col, d.Kd, j0, j1, dxg);
    }
  }
}

/** dx = d(conv2d)/dx applied to dy, share `part` of nparts. dx is fully written (not read). */
inline void conv2d_grad_input_part(const Conv2dShape& s, const float* dy, const float* w, float* dx, int part,
                                   int nparts, void* scratch) {
  conv2d_grad_input_part_rows(s, DyMemory{dy, s.O, s.OH * s.OW}, w, dx, part, nparts, scratch);
}

/**
 * dw = d(conv2d)/dw applied to dy (rows from dy_rows, summed over the batch), share `part` of
 * nparts. dw is fully written. Per image one GEMM dW_g[o-range, p-range] (+)= dy_g[n] (Og x P) *
 * col^T, with im2col^T generated straight into packed panels. Parts split the axis of dW whose
 * operand costs more to pack, so it is packed once: output channels o when Og >= Kd (e.g. 1- or
 * 3-channel first layers, where a p split would leave each part a sliver of a 9- or 27-wide
 * matrix), else the columns p.
 */
template <class DyRows>
inline void conv2d_grad_weight_part_rows(const Conv2dShape& s, DyRows&& dy_rows, const float* x, float* dw, int part,
                                         int nparts, void* scratch) {
  using namespace detail;
  const ConvDims d = conv_dims(s);
  float* Ap = align64(scratch);
  float* Bp = Ap + packed_a_floats(d.Og, d.P);
  const bool split_o = d.Og >= d.Kd;
  int64_t r0, r1;
  share(s.groups * (split_o ? d.Og : d.Kd), part, nparts, r0, r1);
  for (int64_t g = 0; g < s.groups; ++g) {
    int64_t o0 = 0, o1 = d.Og, p0 = 0, p1 = d.Kd;
    if (split_o) {
      o0 = std::max(r0, g * d.Og) - g * d.Og;
      o1 = std::min(r1, (g + 1) * d.Og) - g * d.Og;
    } else {
      p0 = std::max(r0, g * d.Kd) - g * d.Kd;
      p1 = std::min(r1, (g + 1) * d.Kd) - g * d.Kd;
    }
    if (p1 <= p0 || o1 <= o0) continue;
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
            float tmp[KC];
            for (int64_t ir = 0; ir < mc; ir += MR) {
              const int64_t mr = std::min(MR, mc - ir);
              float* dpanel = Ap + ir * kc;
              for (int64_t r = 0; r < mr; ++r) {
                const float* src = dy_rows(n, g * d.Og + ic + ir + r, pc, pc + kc, tmp);
                for (int64_t k = 0; k < kc; ++k) dpanel[k * MR + r] = src[k];
              }
              for (int64_t r = mr; r < MR; ++r)
                for (int64_t k = 0; k < kc; ++k) dpanel[k * MR + r] = 0.0f;
            }
            return (const float*)Ap;
          },
          [&](int64_t pc, int64_t kc, int64_t jc, int64_t nc) {
            im2col_packed_t(s, xg, pc, kc, jc, nc, Bp);
            return (const float*)Bp;
          });
    }
  }
}

/** dw = d(conv2d)/dw applied to dy (summed over the batch), share `part` of nparts. dw fully written. */
inline void conv2d_grad_weight_part(const Conv2dShape& s, const float* dy, const float* x, float* dw, int part,
                                    int nparts, void* scratch) {
  conv2d_grad_weight_part_rows(s, DyMemory{dy, s.O, s.OH * s.OW}, x, dw, part, nparts, scratch);
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
