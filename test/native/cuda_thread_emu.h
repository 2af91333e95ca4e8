// cuda_thread_emu.h: runs generated CUDA kernels on the CPU for test/cuda_conv_emu.test.ts and
// test/cuda_gemm_emu.test.ts. Each CUDA
// thread of a block is a fiber (its own stack) on one OS thread; blocks run one after
// another. __syncthreads() and the warp-wide mma are real barriers: a fiber arriving at one yields
// until every participant (the block's threads, or the warp's 32 lanes) has arrived, so every
// thread's index arithmetic, predicates and shared-memory traffic run as written, in a fixed
// order. A barrier that not every thread reaches (divergent __syncthreads) is reported, not hung.
// What the kernels do through PTX is emulated here:
//  - mpsc_tf32: cvt.rna.tf32.f32 (round the low 13 mantissa bits to nearest, ties away from zero; NaN and
//    infinities not added to), mpsc_tf32_rn: cvt.rn.tf32.f32 (ties to even); __float_as_uint (the kernels' integer
//    rounding, conv_cuda.ts MPSC_CONV_ROUND=add, adds half a TF32 ulp to the bits);
//    mpsc_split_tf32: the dialect's 3xTF32 split, hi = tf32(x), lo = tf32(x - hi);
//  - mpsc_mma16x8: mma.sync.aligned.m16n8k8 row.col f32.tf32.tf32.f32, warp-wide: each lane posts
//    its A (4) and B (2) fragment registers, the warp meets, each lane computes its four C elements
//    from the posted fragments (the PTX ISA's m16n8k8 .tf32 fragment layout; each operand's low 13 bits
//    dropped, as the tensor core reads only a .tf32 value's top 19), and the warp meets
//    again before the slots are reused; __shfl_xor_sync (and the dialect's mpsc_warp_sum over it) the same way;
//  - cp.async (mpsc_cp_async4 / 16f / _commit / _wait<N>, the dialect's helpers; 16f checks its alignment): each thread's copies are
//    kept in its commit groups. With emu_cp_late false (the default) a copy lands when it is issued, so a
//    copy into a stage other threads still read, without a barrier between, shows; with emu_cp_late
//    true it lands only at the wait that requires its group (cp.async.wait_group N: all but the N
//    youngest committed groups) or at the thread's end, so a read before its wait sees stale data.
// The fibers, their barriers and their switch: test/native/cuda_fibers.h.
#pragma once
#include "cuda_fibers.h"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

typedef unsigned int uint;
struct uint3 { uint x, y, z; };
struct int2 { int x, y; };
struct float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
static inline uint3 make_uint3(uint x, uint y, uint z) { return uint3{x, y, z}; }
static uint3 threadIdx, blockIdx, blockDim, gridDim;
using std::min;
using std::max;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

// each thread's own state beside its fiber
struct EmuThread {
  uint3 tid;
  struct Copy { float* dst; const float* src; bool ok; };
  std::vector<Copy> open;                 // cp.async copies not yet committed
  std::vector<std::vector<Copy>> groups;  // committed groups, oldest first (emu_cp_late: not landed yet)
};
static std::vector<EmuThread> emu_threads;

static inline uint emu_tidx() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }

static inline void __syncthreads() { emu_arrive(0); }

static bool emu_cp_late = false;
static inline void emu_land(const std::vector<EmuThread::Copy>& g) {
  for (const auto& c : g) *c.dst = c.ok ? *c.src : 0.0f;
}
static inline void mpsc_cp_async4(float* dst, const float* src, bool ok) {
  EmuThread& f = emu_threads[emu_cur];
  if (emu_cp_late) f.open.push_back({dst, src, ok});
  else *dst = ok ? *src : 0.0f;  // lands at issue (emu_land's rule, without a vector per copy)
}
// the 16-byte copy: both addresses must be 16-byte aligned (the hardware faults otherwise): checked
static inline void mpsc_cp_async16f(float* dst, const float* src, bool ok) {
  if (reinterpret_cast<uintptr_t>(dst) % 16u != 0u || (ok && reinterpret_cast<uintptr_t>(src) % 16u != 0u)) {
    std::fprintf(stderr, "mpsc_cp_async16f: misaligned %s\n", reinterpret_cast<uintptr_t>(dst) % 16u ? "destination" : "source");
    std::abort();
  }
  for (int e = 0; e < 4; e++) mpsc_cp_async4(dst + e, src + (ok ? e : 0), ok);
}
static inline void mpsc_cp_async_commit() {
  EmuThread& f = emu_threads[emu_cur];
  f.groups.push_back(std::move(f.open));
  f.open.clear();
}
template <int N>
static inline void mpsc_cp_async_wait() {
  EmuThread& f = emu_threads[emu_cur];
  while (f.groups.size() > size_t(N)) {
    emu_land(f.groups.front());
    f.groups.erase(f.groups.begin());
  }
}
static inline void mpsc_cp_async_wait_all() { mpsc_cp_async_wait<0>(); }

// cvt.rna.tf32.f32 as ptxas emits it for sm_90 (read from an sm_90a cubin: FSETP.GEU |x|, +INF; the add of 0x1000
// predicated on the result being false, i.e. a finite x; LOP3 with 0xffffe000): infinities and NaNs keep their bits
// but the low 13, which are masked off
static inline uint mpsc_tf32(float x) {
  uint b;
  std::memcpy(&b, &x, 4);
  return ((b & 0x7fffffffu) < 0x7f800000u ? b + 0x1000u : b) & 0xffffe000u;
}
// cvt.rn.tf32.f32: to nearest, ties to even; a NaN gives a NaN (here the canonical one; the tensor core reads the top 19 bits)
static inline uint mpsc_tf32_rn(float x) {
  uint b;
  std::memcpy(&b, &x, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return 0x7fffffffu;
  if ((b & 0x7fffffffu) == 0x7f800000u) return b;
  return (b + 0xfffu + ((b >> 13) & 1u)) & 0xffffe000u;
}
static inline float emu_f(uint b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}
// the 3xTF32 split of cuda_dialect.ts (gemm_cuda.ts's kernels): hi = tf32(x), lo = tf32(x - hi)
static inline void mpsc_split_tf32(float x, uint& hi, uint& lo) {
  hi = mpsc_tf32(x);
  lo = mpsc_tf32(x - emu_f(hi));
}
static inline uint __float_as_uint(float x) {
  uint b;
  std::memcpy(&b, &x, 4);
  return b;
}

struct EmuFrag { uint a[4]; uint b[2]; };
static std::vector<EmuFrag> emu_frags;  // [threads in the block]

static inline void mpsc_mma16x8(float* c, const uint* a, const uint* b) {
  const uint t = emu_tidx(), lane = t % 32u, w = t / 32u;
  EmuFrag& mine = emu_frags[t];
  for (int i = 0; i < 4; i++) mine.a[i] = a[i];
  for (int i = 0; i < 2; i++) mine.b[i] = b[i];
  emu_arrive(1 + int(w));
  const EmuFrag* f = &emu_frags[w * 32u];
  // A[r][k]: lane (r % 8) * 4 + k % 4, register (r >= 8) + 2 (k >= 4); B[k][n]: lane n * 4 + k % 4, register (k >= 4)
  // the tensor core reads a .tf32 operand's top 19 bits (sign, exponent, 10 mantissa bits): the low 13 are dropped
  auto A = [&](uint r, uint k) { return emu_f(f[(r % 8u) * 4u + k % 4u].a[(r >= 8u ? 1 : 0) + (k >= 4u ? 2 : 0)] & 0xffffe000u); };
  auto B = [&](uint k, uint n) { return emu_f(f[n * 4u + k % 4u].b[k >= 4u ? 1 : 0] & 0xffffe000u); };
  const uint gq = lane / 4u, tq = lane % 4u;
  float out[4];
  for (uint q = 0; q < 4u; q++) {
    const uint r = gq + (q >= 2u ? 8u : 0u), n = 2u * tq + (q & 1u);
    float s = c[q];
    for (uint k = 0; k < 8u; k++) s += A(r, k) * B(k, n);
    out[q] = s;
  }
  emu_arrive(1 + int(w));
  for (int q = 0; q < 4; q++) c[q] = out[q];
}

// __shfl_xor_sync over the full warp: each lane posts its value, the warp meets, each lane reads its partner's
// (lane ^ o), and the warp meets again before the slots are reused; mpsc_warp_sum / _max are the dialect's butterflies
static std::vector<float> emu_shfl;  // [threads in the block]
static inline float __shfl_xor_sync(uint, float v, int o) {
  const uint t = emu_tidx(), w = t / 32u;
  emu_shfl[t] = v;
  emu_arrive(1 + int(w));
  const float r = emu_shfl[w * 32u + ((t % 32u) ^ uint(o))];
  emu_arrive(1 + int(w));
  return r;
}
static inline float mpsc_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
static inline float mpsc_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

struct StepParams { float lr; int t; uint seed; uint counter; };

// runs kernel() over the grid, one block at a time, one fiber per thread of the block
template <class F>
static void emu_launch(uint3 grid, uint3 block, F kernel) {
  gridDim = grid;
  blockDim = block;
  emu_body = [kernel] {
    kernel();
    // copies never waited for land when the thread ends (the kernel's exit waits for them)
    EmuThread& f = emu_threads[emu_cur];
    f.groups.push_back(std::move(f.open));
    f.open.clear();
    for (const auto& g : f.groups) emu_land(g);
    f.groups.clear();
  };
  const uint n = block.x * block.y * block.z;
  emu_frags.assign(n, EmuFrag{});
  emu_shfl.assign(n, 0.0f);
  emu_threads.resize(n);
  emu_prepare(n);
  for (uint bz = 0; bz < grid.z; bz++)
    for (uint by = 0; by < grid.y; by++)
      for (uint bx = 0; bx < grid.x; bx++) {
        blockIdx = uint3{bx, by, bz};
        for (uint t = 0; t < n; t++) {
          EmuThread& f = emu_threads[t];
          f.open.clear();
          f.groups.clear();
          f.tid = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
        }
        if (!emu_run_block(n, [](uint t) { threadIdx = emu_threads[t].tid; })) {
          std::fprintf(stderr, "emu: deadlock in block (%u, %u, %u): a barrier not every thread reaches\n", bx, by, bz);
          std::exit(3);
        }
      }
}
