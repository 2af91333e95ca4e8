// flash_wgmma_probe: a causal flash-attention forward on Hopper's wgmma (the products of bench/wgmma_probe.cu), at
// GPT-2 small's shape (batch 16, T 1024, 12 heads of 64, q / k / v read in place from the packed [N, T, 3C] bf16
// projection, o into [N, T, C], lse per query), checked against the CPU on three heads and timed: the question it
// answers is whether the attention's forward gets well under the mma.sync kernel's ~155-170 us per layer
// (attention_cuda.ts's 128-row forward, bench/NOTES.md phase 25) before the generator takes on wgmma.
// Structure: a block of one warpgroup (128 threads) per 64-query tile and head, heavy tiles first; Q, and K / V tiles of
// 64 keys double-buffered, in 128-byte-swizzled shared memory by cp.async (16-byte chunks); per key tile S = Q K^T (4
// wgmma from shared memory), the online softmax in base 2 on S's accumulators (each thread: rows 16w + g and + 8),
// P = bf16(S) as register A fragments, O += P V (4 wgmma, V MN-major). Each product group is waited for: the overlap
// comes from the blocks beside it (about 100 registers and 40 KiB, several blocks per SM), not from warp specialisation.
// Build and run (GPU machine): bench/wgmma_probe.sh --flash   (compiles here without a GPU)
#include <cmath>
#include <vector>

#include "wgmma_ops.cuh"

constexpr int NB = 16, T = 1024, H = 12, D = 64, C = H * D, R3 = 3 * C;

__device__ __forceinline__ uint64_t smem_desc(const void* p) {
  const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
/** rows [row0, row0 + 64) x 64 bf16 (row stride R3 elements) into a 128B-swizzled tile, 4 16-byte cp.async per thread */
__device__ __forceinline__ void load_tile(__nv_bfloat16* tile, const __nv_bfloat16* src, int row0) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int e = threadIdx.x + 128 * i, r = e >> 3, c = e & 7;
    const uint32_t dst = (uint32_t)__cvta_generic_to_shared(tile + r * 64 + ((c ^ (r & 7)) << 3));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src + (size_t)(row0 + r) * R3 + c * 8));
  }
}

__global__ void __launch_bounds__(128) flash_fwd(const __nv_bfloat16* __restrict__ qkv, __nv_bfloat16* __restrict__ o,
                                                 float* __restrict__ lse) {
  __shared__ __align__(1024) __nv_bfloat16 sm[5 * 4096];
  __nv_bfloat16* Qs = sm;
  const int qt = gridDim.x - 1 - blockIdx.x, q0 = qt * 64, bh = blockIdx.y, n = bh / H, h = bh % H;
  const __nv_bfloat16* qh = qkv + (size_t)n * T * R3 + h * D;
  const __nv_bfloat16* kh = qh + C;
  const __nv_bfloat16* vh = qh + 2 * C;
  const int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const int r0 = 16 * w + g, r1 = r0 + 8;  // this thread's rows of the tile
  constexpr float SC = 0.125f * 1.4426950408889634f;
  load_tile(Qs, qh, q0);
  load_tile(sm + 4096, kh, 0);
  load_tile(sm + 3 * 4096, vh, 0);
  asm volatile("cp.async.commit_group;\n" ::: "memory");
  float acc[32], s[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  const int nkt = qt + 1;
  for (int kt = 0; kt < nkt; ++kt) {
    const int b = kt & 1;
    __nv_bfloat16* Ks = sm + 4096 * (1 + b);
    __nv_bfloat16* Vs = sm + 4096 * (3 + b);
    __syncthreads();  // every thread is done with the other buffers (iteration kt - 1)
    if (kt + 1 < nkt) {
      load_tile(sm + 4096 * (2 - b), kh, (kt + 1) * 64);
      load_tile(sm + 4096 * (4 - b), vh, (kt + 1) * 64);
      asm volatile("cp.async.commit_group;\n" ::: "memory");
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the copies, seen by the products' async proxy
    __syncthreads();
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_ss(s, smem_desc(Qs + kk * 16), smem_desc(Ks + kk * 16), kk > 0);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    // online softmax: s[4j + e] is row (e < 2 ? r0 : r1), key kt * 64 + 8j + 2t + (e & 1)
    const bool diag = kt == qt;
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 8 * j + 2 * t + (e & 1), r = e < 2 ? r0 : r1;
        float v = s[4 * j + e];
        if (diag && c > r) v = -INFINITY;
        s[4 * j + e] = v;
        if (e < 2) mx0 = fmaxf(mx0, v); else mx1 = fmaxf(mx1, v);
      }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1)); mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1)); mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);  // finite: key 0 <= every query
    const float al0 = exp2f((m0 - mn0) * SC), al1 = exp2f((m1 - mn1) * SC);
    const float c0 = -mn0 * SC, c1 = -mn1 * SC;
    float ls0 = 0.0f, ls1 = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(fmaf(s[4 * j + e], SC, e < 2 ? c0 : c1));
        s[4 * j + e] = p;
        if (e < 2) ls0 += p; else ls1 += p;
      }
    l0 = l0 * al0 + ls0; l1 = l1 * al1 + ls1;
    m0 = mn0; m1 = mn1;
#pragma unroll
    for (int j = 0; j < 8; ++j) { acc[4 * j] *= al0; acc[4 * j + 1] *= al0; acc[4 * j + 2] *= al1; acc[4 * j + 3] *= al1; }
    uint32_t pa[4][4];
    pack_a_bf16(s, pa);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_rs_tb(acc, pa[kk], smem_desc(Vs + kk * 16 * 64), 1);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  }
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1); l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1); l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float i0 = 1.0f / l0, i1 = 1.0f / l1;
  __nv_bfloat16* oh = o + (size_t)n * T * C + h * D;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int c = 8 * j + 2 * t;
    *reinterpret_cast<uint32_t*>(oh + (size_t)(q0 + r0) * C + c) = pack_bf16(acc[4 * j] * i0, acc[4 * j + 1] * i0);
    *reinterpret_cast<uint32_t*>(oh + (size_t)(q0 + r1) * C + c) = pack_bf16(acc[4 * j + 2] * i1, acc[4 * j + 3] * i1);
  }
  if (t == 0) {
    lse[(size_t)bh * T + q0 + r0] = m0 * 0.125f + logf(l0);
    lse[(size_t)bh * T + q0 + r1] = m1 * 0.125f + logf(l1);
  }
}

int main() {
  const size_t nq = (size_t)NB * T * R3, no = (size_t)NB * T * C;
  std::vector<__nv_bfloat16> hqkv(nq);
  std::vector<float> f(nq);
  uint32_t st = 2024;
  for (size_t i = 0; i < nq; ++i) {
    st = st * 1664525u + 1013904223u;
    const float x = ((st >> 8) & 0xFFFF) / 65536.0f * 2.0f - 1.0f;
    hqkv[i] = __float2bfloat16_rn(x);
    f[i] = __bfloat162float(hqkv[i]);
  }
  __nv_bfloat16 *dqkv, *dout; float* dlse;
  CK(cudaMalloc(&dqkv, nq * 2)); CK(cudaMalloc(&dout, no * 2)); CK(cudaMalloc(&dlse, (size_t)NB * H * T * 4));
  CK(cudaMemcpy(dqkv, hqkv.data(), nq * 2, cudaMemcpyHostToDevice));
  const dim3 grid(T / 64, NB * H);
  flash_fwd<<<grid, 128>>>(dqkv, dout, dlse);
  CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> ho(no);
  std::vector<float> hl((size_t)NB * H * T);
  CK(cudaMemcpy(ho.data(), dout, no * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hl.data(), dlse, hl.size() * 4, cudaMemcpyDeviceToHost));
  // the CPU (double) on three heads, every query
  double eo = 0, mo = 0, el = 0;
  const int heads[3] = {0, 101, NB * H - 1};
  std::vector<double> sc(T);
  for (int hi = 0; hi < 3; ++hi) {
    const int bh = heads[hi], n = bh / H, h = bh % H;
    const float* q = f.data() + (size_t)n * T * R3 + h * D;
    for (int i = 0; i < T; ++i) {
      double mx = -1e300;
      for (int j = 0; j <= i; ++j) {
        double a = 0;
        for (int d = 0; d < D; ++d) a += (double)q[(size_t)i * R3 + d] * q[(size_t)j * R3 + C + d];
        sc[j] = a * 0.125; mx = std::fmax(mx, sc[j]);
      }
      double l = 0;
      for (int j = 0; j <= i; ++j) l += std::exp(sc[j] - mx);
      el = std::fmax(el, std::fabs(hl[(size_t)bh * T + i] - (mx + std::log(l))));
      for (int d = 0; d < D; ++d) {
        double a = 0;
        for (int j = 0; j <= i; ++j) a += std::exp(sc[j] - mx) / l * q[(size_t)j * R3 + 2 * C + d];
        const double got = __bfloat162float(ho[((size_t)n * T + i) * C + h * D + d]);
        eo = std::fmax(eo, std::fabs(got - a)); mo = std::fmax(mo, std::fabs(a));
      }
    }
  }
  // bf16 P (FlashAttention's rounding, as attention_cuda.ts) and a bf16 o: within 2e-2 of max|o| (cuda_check's FLASH_TOL)
  const bool ok = eo <= 2e-2 * mo && el <= 1e-3;
  std::printf("flash_wgmma_probe: heads 0, 101, 191 against the CPU: o max err %.3g of max %.3g, lse max err %.3g: %s\n",
              eo, mo, el, ok ? "ok" : "WRONG");
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) flash_fwd<<<grid, 128>>>(dqkv, dout, dlse);
  const int iters = 20;
  CK(cudaEventRecord(e0));
  for (int i = 0; i < iters; ++i) flash_fwd<<<grid, 128>>>(dqkv, dout, dlse);
  CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); CK(cudaGetLastError());
  float ms = 0; CK(cudaEventElapsedTime(&ms, e0, e1));
  const double us = ms * 1e3 / iters, flops = 4.0 * NB * H * (double)T * T * D / 2;  // causal: half the T x T products
  std::printf("RESULT flash_wgmma_probe %s: %.1f us per forward (GPT-2 small's layer), %.1f TFLOP/s causal\n",
              ok ? "ok" : "WRONG", us, flops / (us * 1e-6) / 1e12);
  return ok ? 0 : 1;
}
