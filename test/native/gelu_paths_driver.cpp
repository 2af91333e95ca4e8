// test/cpu_gelu_paths.test.ts: mk::gelu_fwd / mk::gelu_grad (compiler/codegen-cpu/cpp/mpsc_kernels.hpp) as built
// with the test's flags (with AVX-512: the intrinsic path; with -mno-avx512f: the vector-extension path). Prints
// the input grid and both results as 8-hex-digit float bits, one element a line ("X gelu grad"), after computing
// them over the whole run and over runs of 1, 7, 13 and 37 floats: "SPLIT 1" when every split gave the same bits.
#include "fast/sgemm.h"
#include "fast/conv.h"
#include "fast/winograd.h"
#include "mpsc_kernels.hpp"
#include <cinttypes>

static uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

int main() {
  // 4001 grid points over [-12, 12] (odd length: tails), the far values and the specials the table meets
  std::vector<float> x;
  for (int i = 0; i <= 4000; i++) x.push_back((float)(-12.0 + 24.0 * i / 4000));
  for (float v : {-100.0f, -30.0f, 30.0f, 100.0f, 0.0f, -0.0f, 1e-30f, -1e-30f, 3e38f, -3e38f}) x.push_back(v);
  const int64_t n = (int64_t)x.size();
  std::vector<float> dy(n), y(n), g(n);
  for (int64_t i = 0; i < n; i++) dy[i] = 1.0f - 0.25f * (float)(i % 5);
  mk::gelu_fwd(x.data(), y.data(), n);
  mk::gelu_grad(dy.data(), x.data(), g.data(), n);
  bool same = true;
  for (int64_t run : {1, 7, 13, 37}) {
    std::vector<float> y2(n), g2(n);
    for (int64_t b = 0; b < n; b += run) {
      const int64_t e = std::min(n, b + run);
      mk::gelu_fwd(x.data() + b, y2.data() + b, e - b);
      mk::gelu_grad(dy.data() + b, x.data() + b, g2.data() + b, e - b);
    }
    for (int64_t i = 0; i < n; i++) same = same && bits(y2[i]) == bits(y[i]) && bits(g2[i]) == bits(g[i]);
  }
  // in place (linear's epilogue runs gelu_fwd over its own output): the same bits
  std::vector<float> z = x;
  mk::gelu_fwd(z.data(), z.data(), n);
  for (int64_t i = 0; i < n; i++) same = same && bits(z[i]) == bits(y[i]);
#if defined(__AVX512F__)
  std::printf("PATH avx512\n");
#else
  std::printf("PATH vector\n");
#endif
  std::printf("SPLIT %d\n", same ? 1 : 0);
  for (int64_t i = 0; i < n; i++) std::printf("%08" PRIx32 " %08" PRIx32 " %08" PRIx32 " %08" PRIx32 "\n", bits(x[i]), bits(dy[i]), bits(y[i]), bits(g[i]));
  return 0;
}
