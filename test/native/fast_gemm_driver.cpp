// fast_gemm_driver.cpp: checks runtime/cpp/fast (sgemm.h, conv.h) against naive double-precision loops.
// Driven by test/fast_gemm.test.ts. Prints one line per case:
//   CASE <kind> <name> err=<max|got-ref| / max|ref|> same=<1 if nparts = 2, 3, 4, 8 match nparts = 1 bit for bit>
// and a final line "DONE <cases>". Parts run concurrently on std::threads, each with its own workspace.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../../runtime/cpp/fast/conv.h"

using namespace mpsc_fast;

static int g_cases = 0;
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand() {  // uniform [-1, 1)
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (float)((g_rng >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}
static std::vector<float> rnd(size_t n) {
  std::vector<float> v(n);
  for (auto& x : v) x = frand();
  return v;
}

static double rel_err(const std::vector<float>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double e = std::fabs((double)got[i] - ref[i]);
    if (!(e <= num)) num = std::isnan(e) ? INFINITY : e;
    den = std::max(den, std::fabs(ref[i]));
  }
  return den > 0 ? num / den : num;
}

static void report(const char* kind, const std::string& name, double err, bool same) {
  ++g_cases;
  printf("CASE %s %s err=%.3e same=%d\n", kind, name.c_str(), err, same ? 1 : 0);
}

/** runs f(part, nparts, ws) for every part on its own thread, each with a fresh aligned workspace */
template <class F>
static void run_parts(int nparts, size_t ws_bytes, F f) {
  // each part's block is followed by 256 guard bytes of a canary pattern: a kernel that writes past
  // the scratch size it declared (conv2d_scratch_bytes / sgemm_workspace_bytes) stops the driver
  const uint32_t canary = 0x7fc0dead;
  const size_t guard = 64;
  std::vector<std::vector<uint32_t>> ws(nparts, std::vector<uint32_t>(ws_bytes / 4 + 16 + guard, canary));
  std::vector<float*> at(nparts);
  for (int p = 0; p < nparts; ++p) at[p] = (float*)(((uintptr_t)ws[p].data() + 63) & ~uintptr_t(63));
  std::vector<std::thread> th;
  for (int p = 0; p < nparts; ++p) th.emplace_back([&, p] { f(p, nparts, (void*)at[p]); });
  for (auto& t : th) t.join();
  for (int p = 0; p < nparts; ++p) {
    const uint32_t* end = (const uint32_t*)((const char*)at[p] + ws_bytes);
    const uint32_t* stop = ws[p].data() + ws[p].size();
    for (const uint32_t* q = end; q < stop; ++q)
      if (*q != canary) {
        fprintf(stderr, "scratch overflow: a part wrote %zu bytes past its %zu-byte scratch\n",
                (size_t)((const char*)q - (const char*)end) + 4, ws_bytes);
        exit(3);
      }
  }
}

// ---------------------------------------------------------------- sgemm

static void check_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta, int epi_kind,
                       bool relu, int pad) {
  const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  const int64_t arows = ta ? K : M, brows = tb ? N : K;
  std::vector<float> A = rnd((size_t)std::max<int64_t>(1, arows * lda)), B = rnd((size_t)std::max<int64_t>(1, brows * ldb));
  std::vector<float> C0 = rnd((size_t)std::max<int64_t>(1, M * ldc));
  if (beta == 0.0f) for (auto& c : C0) c = NAN;  // must not be read
  std::vector<float> bias = rnd((size_t)std::max<int64_t>(M, N));
  Epilogue e;
  e.bias = epi_kind ? bias.data() : nullptr;
  e.bias_kind = epi_kind;
  e.relu = relu;
  std::vector<double> ref((size_t)(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t p = 0; p < K; ++p)
        s += (double)(ta ? A[p * lda + i] : A[i * lda + p]) * (double)(tb ? B[j * ldb + p] : B[p * ldb + j]);
      double v = alpha * s + (beta == 0.0f ? 0.0 : beta * (double)C0[i * ldc + j]);
      if (epi_kind == BIAS_ROW) v += bias[i];
      if (epi_kind == BIAS_COL) v += bias[j];
      if (relu) v = v > 0 ? v : 0;
      ref[i * N + j] = v;
    }
  std::vector<float> first;
  bool same = true;
  double err = 0;
  // a transposed A: its column sums (a_sums, a linear's bias gradient next to its grad-weight) start from a
  // value and must be exactly the sequential chain in double, K in order, for every part count
  std::vector<double> sums_ref(ta ? (size_t)M : 0);
  for (size_t i = 0; i < sums_ref.size(); ++i) {
    double v = 0.25 * (double)i;
    for (int64_t p = 0; p < K; ++p) v += A[p * lda + i];
    sums_ref[i] = v;
  }
  bool sums_same = true;
  for (int nparts : {1, 2, 3, 4, 8}) {
    std::vector<float> C = C0;
    std::vector<double> sums(sums_ref.size());
    for (size_t i = 0; i < sums.size(); ++i) sums[i] = 0.25 * (double)i;
    run_parts(nparts, sgemm_workspace_bytes(M, N, K), [&](int p, int np, void* ws) {
      sgemm_part(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, &e, p, np, ws,
                 ta ? sums.data() : nullptr);
    });
    if (ta && memcmp(sums.data(), sums_ref.data(), sums.size() * sizeof(double)) != 0) sums_same = false;
    std::vector<float> got((size_t)(M * N));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) got[i * N + j] = C[i * ldc + j];
    // padding columns of C (j >= N) must be untouched
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = N; j < ldc; ++j)
        if (!(C[i * ldc + j] == C0[i * ldc + j] || (std::isnan(C[i * ldc + j]) && std::isnan(C0[i * ldc + j]))))
          err = INFINITY;
    err = std::max(err, rel_err(got, ref));
    if (nparts == 1) first = got;
    else if (memcmp(first.data(), got.data(), got.size() * 4) != 0) same = false;
  }
  // also the thread_local-workspace entry point
  {
    std::vector<float> C = C0;
    sgemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, &e);
    std::vector<float> got((size_t)(M * N));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) got[i * N + j] = C[i * ldc + j];
    if (memcmp(first.data(), got.data(), got.size() * 4) != 0) same = false;
  }
  char name[200];
  snprintf(name, sizeof name, "%s%s_%lldx%lldx%lld_a%g_b%g_epi%d%s_pad%d", ta ? "T" : "N", tb ? "T" : "N",
           (long long)M, (long long)N, (long long)K, alpha, beta, epi_kind, relu ? "relu" : "", pad);
  report("sgemm", name, err, same);
  if (ta) report("sgemm_sums", name, 0.0, sums_same);
  // the direct blocked product (gemm_block on all of C) gives sgemm_part's bits; "_swap" in the name: a
  // shape sgemm_part computes as the transposed product (detail::swap_pays, which depends on MR / NR)
  if (beta == 0.0f && K > 0 && alpha != 0.0f) {
    std::vector<float> C = C0;
    std::vector<float> ws((size_t)(detail::packed_a_floats(M, K) + detail::packed_b_floats(N, K)));
    detail::gemm_block(ta, tb, 0, M, 0, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, e, ws.data());
    bool same_direct = true;
    for (int64_t i = 0; i < M; ++i)
      if (memcmp(&C[i * ldc], &first[i * N], N * 4) != 0) same_direct = false;
    if (detail::swap_pays(M, N)) strncat(name, "_swap", sizeof name - strlen(name) - 1);
    if (detail::use_amx(ta, M, N, K)) {
      // sgemm_part ran on the AMX tiles (split bf16 products, amx.h), gemm_block on the FMA kernel: other
      // bits, so compare accuracy instead: the tiles' error within 4x the FMA kernel's (floor 2e-7)
      std::vector<float> got((size_t)(M * N));
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) got[i * N + j] = C[i * ldc + j];
      const double fma_err = rel_err(got, ref);
      strncat(name, "_amx", sizeof name - strlen(name) - 1);
      report("sgemm_amx", name, err, err <= std::max(4 * fma_err, 2e-7));
      return;
    }
    report("sgemm_direct", name, err, same_direct);
  }
}

// non-finite and huge operands: every element must be finite where the float64 reference is and non-finite
// where it is not, NaN where it is NaN, and the finite ones within the usual error. On the FMA kernel an inf
// stays +-inf as well; on the AMX tiles (amx.h) an inf operand's first bf16 piece meets the other operand's
// lower pieces (zero, or of the other sign), so +-inf outputs may come out NaN: non-finite either way. A finite
// value at the top of the range must not become inf (its first piece is truncated, not rounded)
static void check_gemm_special(bool ta, bool tb) {
  const int64_t M = 1024, N = 128, K = 64, lda = ta ? M : K, ldb = tb ? K : N;  // M >= 1024: on the tiles (amx::pays) where not ta
  std::vector<float> A = rnd((size_t)(M * K)), B = rnd((size_t)(K * N));
  auto a = [&](int64_t i, int64_t p) -> float& { return ta ? A[p * lda + i] : A[i * lda + p]; };
  auto b = [&](int64_t p, int64_t j) -> float& { return tb ? B[j * ldb + p] : B[p * ldb + j]; };
  a(0, 5) = INFINITY;
  a(1, 7) = -INFINITY;
  a(2, 3) = NAN;
  for (int64_t p = 0; p < K; ++p) a(3, p) = (p % 2 ? -3.3e38f : 3.39e38f);  // near FLT_MAX: RNE to bf16 overflows
  for (int64_t j = 0; j < N; ++j) b(9, j) = j % 5 == 0 ? 0.0f : b(9, j) * 1e-3f;  // row 3 x row 9 stays finite
  for (int64_t p = 0; p < K; ++p)
    if (p != 9) b(p, 0) = 0.0f;  // column 0: only k = 9, so inf * 0 (k = 5, 7) is NaN there, as in fp32
  for (int64_t p = 0; p < K; ++p) a(3, p) = p == 9 ? 3.4e38f : a(3, p) * 1e-30f;  // row 3: one huge term
  // (3.4e38 is above 0x7F7F8000 = 3.3961e38, where rounding to bf16 would give inf)
  std::vector<double> ref((size_t)(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < K; ++p) acc += (double)a(i, p) * (double)b(p, j);
      ref[i * N + j] = acc;
    }
  std::vector<float> C((size_t)(M * N));
  sgemm(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), N);
  const bool amx = detail::use_amx(ta, M, N, K);
  bool same = true;
  double err = 0, den = 0;
  for (size_t q = 0; q < ref.size(); ++q) {
    const double r = ref[q], g = C[q];
    if (!std::isfinite(r) || !std::isfinite(g)) {
      if (std::isfinite(r) || std::isfinite(g) || (std::isnan(r) && !std::isnan(g))) same = false;
      if (!amx && std::isinf(r) && g != r) same = false;  // the FMA kernel keeps the sign of an inf
      continue;
    }
    if (std::fabs(r) > 1e30) {  // the huge row: relative to itself
      err = std::max(err, std::fabs(g - r) / std::fabs(r) * 1e-2);
      continue;
    }
    err = std::max(err, std::fabs(g - r));
    den = std::max(den, std::fabs(r));
  }
  char name[64];
  snprintf(name, sizeof name, "%s%s_inf_nan_huge%s", ta ? "T" : "N", tb ? "T" : "N", amx ? "_amx" : "");
  report("sgemm_special", name, den > 0 ? err / den : err, same);
}

// ---------------------------------------------------------------- conv (naive double references)

struct Ref {
  const Conv2dShape& s;
  int64_t Cg, Og;
  explicit Ref(const Conv2dShape& sh) : s(sh), Cg(sh.C / sh.groups), Og(sh.O / sh.groups) {}
  // calls f(n, o, oh, ow, c, kh, kw, xindex) for every valid (non-padding) tap
  template <class F>
  void taps(F f) const {
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t o = 0; o < s.O; ++o) {
        const int64_t g = o / Og;
        for (int64_t oh = 0; oh < s.OH; ++oh)
          for (int64_t ow = 0; ow < s.OW; ++ow)
            for (int64_t cg = 0; cg < Cg; ++cg)
              for (int64_t kh = 0; kh < s.KH; ++kh)
                for (int64_t kw = 0; kw < s.KW; ++kw) {
                  const int64_t ih = oh * s.sh - s.ph + kh * s.dh, iw = ow * s.sw - s.pw + kw * s.dw;
                  if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
                  const int64_t c = g * Cg + cg;
                  f(((n * s.O + o) * s.OH + oh) * s.OW + ow, ((o * Cg + cg) * s.KH + kh) * s.KW + kw,
                    ((n * s.C + c) * s.H + ih) * s.W + iw);
                }
      }
  }
};

static void check_conv(const char* label, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH, int64_t KW,
                       int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
  const Conv2dShape s = conv2d_shape(N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, groups);
  if (detail::wino_grad_weight_ok(s)) printf("WINODWCASE %s\n", label);
  if (detail::dw_t_chunks(s)) printf("DWTCASE %s\n", label);
  const size_t nx = (size_t)(N * C * H * W), nw = (size_t)(O * (C / groups) * KH * KW), ny = (size_t)(N * O * s.OH * s.OW);
  std::vector<float> x = rnd(nx), w = rnd(nw), bias = rnd((size_t)O), dy = rnd(ny);
  Ref r(s);
  std::vector<double> y_ref(ny, 0.0), dx_ref(nx, 0.0), dw_ref(nw, 0.0), db_ref((size_t)O, 0.0);
  r.taps([&](int64_t yi, int64_t wi, int64_t xi) {
    y_ref[yi] += (double)w[wi] * x[xi];
    dx_ref[xi] += (double)w[wi] * dy[yi];
    dw_ref[wi] += (double)dy[yi] * x[xi];
  });
  const int64_t P = s.OH * s.OW;
  std::vector<double> yb_ref(ny);
  for (size_t i = 0; i < ny; ++i) {
    const int64_t o = (int64_t)(i / P) % O;
    double v = y_ref[i] + bias[o];
    yb_ref[i] = v > 0 ? v : 0;
    db_ref[o] += dy[i];
  }
  char base[200];
  snprintf(base, sizeof base, "%s_N%lldC%lldH%lldW%lldO%lldK%lldx%lld_s%lld,%lld_p%lld,%lld_d%lld,%lld_g%lld", label,
           (long long)N, (long long)C, (long long)H, (long long)W, (long long)O, (long long)KH, (long long)KW,
           (long long)sh, (long long)sw, (long long)ph, (long long)pw, (long long)dh, (long long)dw, (long long)groups);

  auto check = [&](const char* pass, size_t n_out, const std::vector<double>& ref, ConvPass cp,
                   const std::function<void(float*, int, int, void*)>& f, int phases = 1,
                   const std::function<void(int)>& set_phase = nullptr) {
    std::vector<float> first;
    bool same = true;
    double err = 0;
    for (int nparts = 1; nparts <= 3; ++nparts) {
      std::vector<float> out(n_out, NAN);  // outputs are fully written, never read
      for (int ph = 0; ph < phases; ++ph) {
        if (set_phase) set_phase(ph);
        run_parts(nparts, cp == CONV_GRAD_BIAS ? 0 : conv2d_scratch_bytes(s, cp),
                  [&](int p, int np, void* ws) { f(out.data(), p, np, ws); });
      }
      err = std::max(err, rel_err(out, ref));
      if (nparts == 1) first = out;
      else if (memcmp(first.data(), out.data(), out.size() * 4) != 0) same = false;
    }
    report(pass, base, err, same);
  };
  check("conv_fwd", ny, y_ref, CONV_FORWARD, [&](float* out, int p, int np, void* ws) {
    conv2d_forward_part(s, x.data(), w.data(), nullptr, false, out, p, np, ws);
  });
  check("conv_fwd_bias_relu", ny, yb_ref, CONV_FORWARD, [&](float* out, int p, int np, void* ws) {
    conv2d_forward_part(s, x.data(), w.data(), bias.data(), true, out, p, np, ws);
  });
  check("conv_grad_input", nx, dx_ref, CONV_GRAD_INPUT, [&](float* out, int p, int np, void* ws) {
    conv2d_grad_input_part(s, dy.data(), w.data(), out, p, np, ws);
  });
  // grad-weight in its phases, all parts of one phase before the next, with one shared block
  // (canary-guarded like the scratch) for the batch chunks' partial sums
  const size_t shared_bytes = conv2d_grad_weight_shared_bytes(s);
  const int phases = conv2d_grad_weight_phases(s);
  const uint32_t canary = 0x7fc0dead;
  std::vector<uint32_t> shared(shared_bytes / 4 + 64, canary);
  int phase = 0;
  check("conv_grad_weight", nw, dw_ref, CONV_GRAD_WEIGHT, [&](float* out, int p, int np, void* ws) {
    conv2d_grad_weight_part(s, dy.data(), x.data(), out, p, np, ws, phase, shared_bytes ? (float*)shared.data() : nullptr);
  }, phases, [&](int ph) { phase = ph; });
  for (size_t i = shared_bytes / 4; i < shared.size(); ++i)
    if (shared[i] != canary) {
      fprintf(stderr, "shared block overflow: grad-weight wrote past its %zu shared bytes\n", shared_bytes);
      exit(3);
    }
  check("conv_grad_bias", (size_t)O, db_ref, CONV_GRAD_BIAS, [&](float* out, int p, int np, void*) {
    conv2d_grad_bias_part(s, dy.data(), out, p, np);
  });
}


// relu's gradient in the product's store (Epilogue::mask, compiler/ir/fuse.ts rule 12 on the CPU): bit for bit the
// product followed by the separate pass's select (mask > 0 ? c : 0), for 1, 2, 3, 4 and 8 parts; the mask has its own
// row stride, zeros and negative values; on the AMX tiles where the shape takes them
static void check_gemm_mask(bool ta, bool tb, int64_t M, int64_t N, int64_t K) {
  const int64_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N + 1, ldm = N + 3;
  std::vector<float> A = rnd((size_t)std::max<int64_t>(1, (ta ? K : M) * lda));
  std::vector<float> B = rnd((size_t)std::max<int64_t>(1, (tb ? N : K) * ldb));
  std::vector<float> mask = rnd((size_t)(M * ldm));
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = i % 7 == 0 ? 0.0f : mask[i] - 0.5f;
  std::vector<float> plain((size_t)(M * ldc), 0.0f);
  sgemm(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, plain.data(), ldc, nullptr);
  std::vector<float> want((size_t)(M * N));
  std::vector<double> ref((size_t)(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const float g = plain[i * ldc + j], m = mask[i * ldm + j];
      want[i * N + j] = m > 0.0f ? g : 0.0f;
      double s = 0;
      for (int64_t p = 0; p < K; ++p)
        s += (double)(ta ? A[p * lda + i] : A[i * lda + p]) * (double)(tb ? B[j * ldb + p] : B[p * ldb + j]);
      ref[i * N + j] = m > 0.0f ? s : 0.0;
    }
  Epilogue e;
  e.mask = mask.data();
  e.ld_mask = ldm;
  bool same = true;
  double err = 0;
  for (int nparts : {1, 2, 3, 4, 8}) {
    std::vector<float> C((size_t)(M * ldc), NAN);
    run_parts(nparts, sgemm_workspace_bytes(M, N, K), [&](int p, int np, void* ws) {
      sgemm_part(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), ldc, &e, p, np, ws);
    });
    std::vector<float> got((size_t)(M * N));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) got[i * N + j] = C[i * ldc + j];
    if (memcmp(got.data(), want.data(), got.size() * 4) != 0) same = false;
    err = std::max(err, rel_err(got, ref));
  }
  char name[120];
  snprintf(name, sizeof name, "%s%s_%lldx%lldx%lld%s", ta ? "T" : "N", tb ? "T" : "N", (long long)M, (long long)N,
           (long long)K, detail::use_amx(ta, M, N, K) ? "_amx" : detail::swap_pays(M, N) ? "_noswap" : "");
  report("sgemm_mask", name, err, same);
}

int main() {
  // sgemm: every trans combination, odd sizes incl. 1, blocks larger than MC / KC / NC; plain A is read in
  // place (rows clamped at the edge tile) except when its rows are 4 KiB apart
  const int64_t sizes[][3] = {{1, 1, 1},  {1, 17, 5},   {7, 1, 3},   {13, 29, 31}, {6, 16, 256}, {6, 16, 1},
                              {50, 70, 300}, {150, 40, 20}, {5, 2100, 9}, {37, 3, 513}, {2, 2, 0},
                              {9, 40, 1024}};  // rows 4 KiB apart: A packed, not read in place (detail::direct_a)
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (auto& sz : sizes) check_gemm(ta, tb, sz[0], sz[1], sz[2], 1.0f, 0.0f, BIAS_NONE, false, 0);
  // alpha / beta, padded leading dimensions, epilogues
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      check_gemm(ta, tb, 19, 35, 41, 0.5f, 2.0f, BIAS_NONE, false, 3);
      check_gemm(ta, tb, 19, 35, 300, -1.5f, 1.0f, BIAS_ROW, true, 1);
      check_gemm(ta, tb, 23, 33, 17, 1.0f, 0.0f, BIAS_COL, false, 2);
      check_gemm(ta, tb, 23, 48, 270, 1.0f, 0.0f, BIAS_COL, true, 0);
      check_gemm(ta, tb, 12, 32, 64, 1.0f, 0.0f, BIAS_ROW, false, 0);
      check_gemm(ta, tb, 9, 10, 11, 0.0f, 0.25f, BIAS_ROW, true, 1);
      check_gemm(ta, tb, 9, 10, 0, 1.0f, 0.5f, BIAS_COL, false, 0);
    }
  // relu's gradient in the store: every transpose with edges, the MLP's 256 x 256 x 10 grad-input, a narrow output
  // (the transposed product's shape: the mask keeps it direct), a shape for the AMX tiles where they run
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) check_gemm_mask(ta, tb, 19, 35, 41);
  check_gemm_mask(false, false, 256, 256, 10);
  check_gemm_mask(false, true, 256, 10, 256);
  check_gemm_mask(false, true, 1030, 260, 90);
  // workload-like shapes
  check_gemm(false, true, 64, 128, 3136, 1.0f, 0.0f, BIAS_COL, true, 0);
  check_gemm(true, false, 64, 128, 700, 1.0f, 0.0f, BIAS_ROW, false, 0);  // a packed op(A) on part_grid_fma's 2 x 4 grid at 8 parts
  check_gemm(true, false, 256, 784, 64, 1.0f, 0.0f, BIAS_NONE, false, 0);
  // narrow outputs (N < one micro-tile: the transposed product), e.g. the MLP's 256 -> 10 classifier
  check_gemm(false, true, 256, 10, 256, 1.0f, 0.0f, BIAS_COL, false, 0);
  check_gemm(false, true, 157, 10, 300, 1.0f, 0.0f, BIAS_COL, true, 1);
  check_gemm(true, false, 61, 7, 33, -0.5f, 0.0f, BIAS_ROW, true, 2);
  check_gemm(true, true, 203, 17, 5, 1.0f, 0.0f, BIAS_NONE, false, 0);
  check_gemm(false, false, 1000, 3, 600, 1.0f, 0.0f, BIAS_COL, false, 0);
  // products large enough for the AMX tiles where the machine has them (detail::use_amx): every transpose,
  // edges in M, N and K (not multiples of 16 / 32), alpha / beta, padded strides, both bias kinds and relu
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      // (N >= 256: a transposed A takes the tiles only from there; some dimension >= 1024: amx::pays)
      check_gemm(ta, tb, 1030, 260, 90, 1.0f, 0.0f, BIAS_NONE, false, 0);
      check_gemm(ta, tb, 1029, 257, 33, -0.75f, 1.5f, BIAS_ROW, true, 3);
      check_gemm(ta, tb, 160, 272, 1100, 1.0f, 0.0f, BIAS_COL, true, 1);  // several K chunks, a short last one
      check_gemm(ta, tb, 1100, 256, 300, 1.0f, 0.0f, BIAS_ROW, false, 0);  // many 32-row panels
    }
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) check_gemm_special(ta, tb);
  check_gemm(false, true, 2048, 384, 128, 1.0f, 0.0f, BIAS_COL, false, 0);  // the GPT's q/k/v projection
  check_gemm(true, false, 128, 512, 2048, 1.0f, 0.0f, BIAS_NONE, false, 0);  // a GPT grad-weight
  printf("AMX %d %d %d %d\n", (int)detail::use_amx(false, 2048, 384, 128), (int)detail::use_amx(false, 64, 128, 3136),
         (int)detail::use_amx(true, 512, 128, 2048), (int)detail::use_amx(false, 256, 256, 784));
  // detail::part_grid (the AMX path's 2D split of parts, MPSC_FAST_AMX_GRID): for every shape and part count the
  // parts' rectangles cover C exactly once, in whole 32 x 32 blocks but at C's edges
  {
    int bad = 0, two_d = 0;
    const int64_t dims[] = {1, 31, 32, 33, 64, 100, 256, 257, 784, 1100};
    for (int64_t M : dims)
      for (int64_t N : dims)
        for (int np = 1; np <= 16; ++np) {
          std::vector<int> cover((size_t)(M * N), 0);
          for (int p = 0; p < np; ++p) {
            const detail::PartRange r = detail::part_grid(M, N, p, np);
            if (r.m0 % 32 || r.n0 % 32 || (r.m1 % 32 && r.m1 != M) || (r.n1 % 32 && r.n1 != N)) ++bad;
            if (r.m1 - r.m0 < M && r.n1 - r.n0 < N && r.m1 > r.m0 && r.n1 > r.n0) ++two_d;
            for (int64_t i = r.m0; i < r.m1; ++i)
              for (int64_t j = r.n0; j < r.n1; ++j) ++cover[(size_t)(i * N + j)];
          }
          for (int c : cover) bad += c != 1;
        }
    printf("GRID %d %d\n", bad, two_d);
  }
  // detail::part_grid_fma (the FMA path's 2D split, MPSC_FAST_FMA_GRID): the same cover, in whole MR x NR tiles; the
  // 2D counts of LeNet's fc1 (a grid: 8) and the MLP's forward (not: 0) at 8 parts, direct A
  {
    int bad = 0, two_d = 0;
    const int64_t dims[] = {1, 7, 8, 9, 31, 32, 33, 64, 100, 256, 257, 784, 1100};
    for (int64_t M : dims)
      for (int64_t N : dims)
        for (int np = 1; np <= 16; ++np)
          for (int direct = 0; direct < 2; ++direct) {
            std::vector<int> cover((size_t)(M * N), 0);
            for (int p = 0; p < np; ++p) {
              const detail::PartRange r = detail::part_grid_fma(direct, M, N, p, np);
              if (r.m0 % MR || r.n0 % NR || (r.m1 % MR && r.m1 != M) || (r.n1 % NR && r.n1 != N)) ++bad;
              for (int64_t i = r.m0; i < r.m1; ++i)
                for (int64_t j = r.n0; j < r.n1; ++j) ++cover[(size_t)(i * N + j)];
            }
            for (int c : cover) bad += c != 1;
          }
    const int64_t grids[2][2] = {{256, 256}, {64, 128}};
    for (const auto& s : grids)
      for (int p = 0; p < 8; ++p) {
        const detail::PartRange r = detail::part_grid_fma(true, s[0], s[1], p, 8);
        two_d += r.m1 - r.m0 < s[0] && r.n1 - r.n0 < s[1];
      }
    printf("GRIDFMA %d %d\n", bad, two_d);
  }

  // conv2d: N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, groups
  check_conv("basic", 2, 3, 8, 9, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  check_conv("stride2", 2, 3, 9, 8, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1);
  check_conv("mixed", 1, 2, 7, 11, 3, 5, 3, 1, 2, 2, 0, 1, 1, 1);
  check_conv("dilation2", 2, 3, 10, 10, 4, 3, 3, 1, 1, 2, 2, 2, 2, 1);
  check_conv("dil_stride", 2, 2, 13, 12, 3, 3, 2, 2, 3, 1, 2, 2, 3, 1);
  check_conv("groups2", 2, 4, 8, 8, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2);
  check_conv("depthwise", 2, 4, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4);
  check_conv("depthwise_x2", 3, 4, 7, 6, 8, 3, 3, 2, 1, 1, 1, 1, 1, 4);
  check_conv("one_channel", 3, 1, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1);  // dW split over o (Og >= Kd)
  check_conv("pointwise", 2, 6, 5, 7, 4, 1, 1, 1, 1, 0, 0, 1, 1, 1);
  check_conv("pointwise_g2", 2, 6, 5, 7, 4, 1, 1, 1, 1, 0, 0, 1, 1, 2);
  check_conv("pointwise_s2", 2, 4, 7, 7, 3, 1, 1, 2, 2, 0, 0, 1, 1, 1);
  check_conv("pad_only_rows", 1, 2, 4, 4, 2, 1, 1, 1, 1, 2, 2, 1, 1, 1);
  check_conv("valid_1x1out", 2, 3, 3, 3, 5, 3, 3, 1, 1, 0, 0, 1, 1, 1);
  check_conv("chunked", 1, 64, 20, 20, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  check_conv("chunked_g2", 2, 16, 40, 40, 16, 3, 3, 1, 1, 1, 1, 1, 1, 2);
  check_conv("batch1", 1, 3, 6, 6, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  check_conv("pointwise_wide_g2", 2, 4, 5, 5, 40, 1, 1, 1, 1, 0, 0, 1, 1, 2);  // dW split over o, groups
  check_conv("wide_out", 2, 32, 6, 7, 150, 3, 3, 1, 1, 1, 1, 1, 1, 1);  // O > MC, Kd > KC
  // stride 1 takes the wide GEMM path when C/groups*KH*KW > 32 (several row bands per image in
  // chunked_g2), the direct kernels below that; padding beyond the window keeps grad-input on col2im
  check_conv("wide_dil_pad_g2", 2, 12, 8, 10, 8, 3, 3, 1, 1, 2, 1, 2, 1, 2);
  check_conv("direct_bigpad", 2, 4, 5, 5, 3, 2, 2, 1, 1, 2, 2, 1, 1, 1);
  // grad-weight in batch chunks of unequal size (10 images: Q = 8 chunks of 1-2, or 3 of 3-4 with
  // -DMPSC_FAST_CONV_DW_CHUNKS=3), partial sums added in a second phase
  check_conv("batch_chunks", 10, 8, 7, 9, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  // the chunks computed transposed (dW^T = col dy^T, col read in place from per-kw shifted copies): LeNet's
  // 32 -> 64; two K blocks (P = 289 > KC), two 256-column blocks of o and a partial channel tile (Cg = 20);
  // dilation 2 with OW != W (row-by-row copies); two groups
  check_conv("dwt_lenet", 4, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  check_conv("dwt_blocks", 3, 20, 17, 17, 300, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  check_conv("dwt_dil", 3, 16, 9, 11, 64, 3, 3, 1, 1, 2, 1, 2, 2, 1);
  check_conv("dwt_g2", 3, 32, 8, 8, 64, 3, 3, 1, 1, 1, 1, 1, 1, 2);
  // Winograd F(2x2, 3x3) (winograd.h: 3x3, stride 1, C*O/(C+O) >= 16; chunked and wide_out above take
  // it for the forward and grad-input too, with C = 32 and 64 -> 32): odd output sizes (cut last
  // tile row / column), padding 0 and 2 (grad-input padding 2 and 0), blocks of tiles that start
  // mid-row and span images, the seed CNN's 64 -> 128 layer
  check_conv("wino_odd", 3, 64, 9, 11, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  check_conv("wino_pad0", 2, 65, 10, 13, 70, 3, 3, 1, 1, 0, 0, 1, 1, 1);
  check_conv("wino_pad2", 2, 64, 7, 6, 96, 3, 3, 1, 1, 2, 2, 1, 1, 1);
  check_conv("wino_blocks", 5, 64, 30, 29, 80, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  check_conv("wino_seed", 2, 64, 16, 16, 128, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  // grad-weight by F(2x2, 3x3) (wino_odd, _pad0, _pad2 have under 32 tiles per batch chunk: wide
  // path): batch chunks of 4 small images (9 tiles each, so a block of tiles spans images), odd O
  // and C (a partial micro-panel), one image (one chunk)
  check_conv("wino_dw_span", 32, 64, 5, 6, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  check_conv("wino_dw_odd", 3, 67, 20, 7, 77, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  check_conv("wino_dw_n1", 1, 64, 11, 13, 64, 3, 3, 1, 1, 0, 2, 1, 1, 1);
  // the forward's channel rule C*O/(C+O) >= 16: seed 64 -> 128 and LeNet 32 -> 64 take it, 16 -> 32 does not
  printf("WINO %d %d %d\n", (int)detail::wino_conv_ok(conv2d_shape(2, 64, 16, 16, 128, 3, 3, 1, 1, 1, 1, 1, 1, 1)),
         (int)detail::wino_conv_ok(conv2d_shape(4, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1)),
         (int)detail::wino_conv_ok(conv2d_shape(4, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1)));
  {
    const Conv2dShape seed = conv2d_shape(32, 64, 64, 64, 128, 3, 3, 1, 1, 1, 1, 1, 1, 1);
    printf("WINODW %d %d %lld\n", (int)detail::wino_grad_weight_ok(seed),
           (int)detail::wino_grad_weight_ok(conv2d_shape(4, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1)),
           (long long)conv2d_grad_weight_chunks(seed));
  }
  printf("DWCHUNKS batch_chunks %lld\n", (long long)conv2d_grad_weight_chunks(conv2d_shape(10, 8, 7, 9, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1)));
  printf("DONE %d\n", g_cases);
  return 0;
}
