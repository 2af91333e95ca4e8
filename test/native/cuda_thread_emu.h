// cuda_thread_emu.h: runs generated CUDA kernels on the CPU for test/cuda_conv_emu.test.ts, one
// std::thread per CUDA thread of a block (blocks one after another), so that __syncthreads() is a
// real barrier and every thread's index arithmetic, predicates and shared-memory traffic run as
// written. What the kernels do through PTX is emulated here:
//  - mpsc_tf32: cvt.rna.tf32.f32 (round the low 13 mantissa bits to nearest, ties away from zero);
//  - mpsc_mma16x8: mma.sync.aligned.m16n8k8 row.col f32.tf32.tf32.f32, warp-wide: each lane posts
//    its A (4) and B (2) fragment registers, the warp meets at a barrier, each lane computes its four
//    C elements from the posted fragments (the PTX ISA's m16n8k8 .tf32 fragment layout), and the warp
//    meets again before the slots are reused;
//  - cp.async (the test rewrites each 4-byte copy into a plain load, zero when its size is 0) and its
//    commit / wait (no-ops: the copies are already complete when issued).
// The async copies being synchronous means a missing wait cannot show here; that is the GPU check's job.
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
#include <algorithm>

typedef unsigned int uint;
struct uint3 { uint x, y, z; };
static thread_local uint3 threadIdx, blockIdx;
static uint3 blockDim, gridDim;
using std::min;
using std::max;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__
#define __shared__ static

static std::unique_ptr<std::barrier<>> emu_block_bar;
static std::vector<std::unique_ptr<std::barrier<>>> emu_warp_bar;
static inline void __syncthreads() { emu_block_bar->arrive_and_wait(); }

static inline uint mpsc_tf32(float x) {
  uint b;
  std::memcpy(&b, &x, 4);
  return (b + 0x1000u) & 0xffffe000u;
}
static inline float emu_f(uint b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

struct EmuFrag { uint a[4]; uint b[2]; };
static std::vector<EmuFrag> emu_frags;  // [threads in the block]

static inline uint emu_tidx() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }

static inline void mpsc_mma16x8(float* c, const uint* a, const uint* b) {
  const uint t = emu_tidx(), lane = t % 32u, w = t / 32u;
  EmuFrag& mine = emu_frags[t];
  for (int i = 0; i < 4; i++) mine.a[i] = a[i];
  for (int i = 0; i < 2; i++) mine.b[i] = b[i];
  emu_warp_bar[w]->arrive_and_wait();
  const EmuFrag* f = &emu_frags[w * 32u];
  // A[r][k]: lane (r % 8) * 4 + k % 4, register (r >= 8) + 2 (k >= 4); B[k][n]: lane n * 4 + k % 4, register (k >= 4)
  auto A = [&](uint r, uint k) { return emu_f(f[(r % 8u) * 4u + k % 4u].a[(r >= 8u ? 1 : 0) + (k >= 4u ? 2 : 0)]); };
  auto B = [&](uint k, uint n) { return emu_f(f[n * 4u + k % 4u].b[k >= 4u ? 1 : 0]); };
  const uint gq = lane / 4u, tq = lane % 4u;
  float out[4];
  for (uint q = 0; q < 4u; q++) {
    const uint r = gq + (q >= 2u ? 8u : 0u), n = 2u * tq + (q & 1u);
    float s = c[q];
    for (uint k = 0; k < 8u; k++) s += A(r, k) * B(k, n);
    out[q] = s;
  }
  emu_warp_bar[w]->arrive_and_wait();
  for (int q = 0; q < 4; q++) c[q] = out[q];
}

struct StepParams { float lr; int t; uint seed; uint counter; };

// runs kernel(args...) over the grid, one block at a time, one std::thread per thread of the block
template <class F>
static void emu_launch(uint3 grid, uint3 block, F kernel) {
  gridDim = grid;
  blockDim = block;
  const uint n = block.x * block.y * block.z;
  emu_block_bar = std::make_unique<std::barrier<>>(n);
  emu_warp_bar.clear();
  for (uint w = 0; w < (n + 31u) / 32u; w++) emu_warp_bar.push_back(std::make_unique<std::barrier<>>(std::min(32u, n - 32u * w)));
  emu_frags.assign(n, EmuFrag{});
  for (uint bz = 0; bz < grid.z; bz++)
    for (uint by = 0; by < grid.y; by++)
      for (uint bx = 0; bx < grid.x; bx++) {
        std::vector<std::thread> ts;
        for (uint t = 0; t < n; t++)
          ts.emplace_back([=] {
            blockIdx = uint3{bx, by, bz};
            threadIdx = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            kernel();
          });
        for (auto& th : ts) th.join();
      }
}
