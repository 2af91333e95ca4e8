// cuda_thread_emu.h: runs generated CUDA kernels on the CPU for test/cuda_conv_emu.test.ts. Each CUDA
// thread of a block is a fiber (ucontext, its own stack) on one OS thread; blocks run one after
// another. __syncthreads() and the warp-wide mma are real barriers: a fiber arriving at one yields
// until every participant (the block's threads, or the warp's 32 lanes) has arrived, so every
// thread's index arithmetic, predicates and shared-memory traffic run as written, in a fixed
// order. A barrier that not every thread reaches (divergent __syncthreads) is reported, not hung.
// What the kernels do through PTX is emulated here:
//  - mpsc_tf32: cvt.rna.tf32.f32 (round the low 13 mantissa bits to nearest, ties away from zero);
//  - mpsc_mma16x8: mma.sync.aligned.m16n8k8 row.col f32.tf32.tf32.f32, warp-wide: each lane posts
//    its A (4) and B (2) fragment registers, the warp meets, each lane computes its four C elements
//    from the posted fragments (the PTX ISA's m16n8k8 .tf32 fragment layout), and the warp meets
//    again before the slots are reused;
//  - cp.async (the test rewrites each 4-byte copy into a plain load, zero when its size is 0) and its
//    commit / wait (no-ops: the copies are already complete when issued).
// The async copies being synchronous means a missing wait cannot show here; that is the GPU check's job.
#pragma once
#include <ucontext.h>
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
static inline uint3 make_uint3(uint x, uint y, uint z) { return uint3{x, y, z}; }
static uint3 threadIdx, blockIdx, blockDim, gridDim;
using std::min;
using std::max;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__
#define __shared__ static

struct EmuFiber {
  ucontext_t ctx;
  std::vector<char> stack;
  uint3 tid;
  bool done = false;
  int waitBar = -1;        // barrier waited on (-1: none)
  unsigned waitGen = 0;    // that barrier's generation when this fiber arrived
};
struct EmuBarrier { uint need = 0, have = 0; unsigned gen = 0; };

static std::vector<EmuFiber> emu_fibers;
static std::vector<EmuBarrier> emu_bars;  // [0]: the block; [1 + w]: warp w
static ucontext_t emu_sched;
static uint emu_cur = 0;
static std::function<void()> emu_kernel;

static inline uint emu_tidx() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }

static void emu_arrive(int b) {
  EmuBarrier& bar = emu_bars[b];
  if (++bar.have == bar.need) { bar.have = 0; bar.gen++; return; }
  EmuFiber& f = emu_fibers[emu_cur];
  f.waitBar = b;
  f.waitGen = bar.gen;
  swapcontext(&f.ctx, &emu_sched);
}
static inline void __syncthreads() { emu_arrive(0); }

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

static inline void mpsc_mma16x8(float* c, const uint* a, const uint* b) {
  const uint t = emu_tidx(), lane = t % 32u, w = t / 32u;
  EmuFrag& mine = emu_frags[t];
  for (int i = 0; i < 4; i++) mine.a[i] = a[i];
  for (int i = 0; i < 2; i++) mine.b[i] = b[i];
  emu_arrive(1 + int(w));
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
  emu_arrive(1 + int(w));
  for (int q = 0; q < 4; q++) c[q] = out[q];
}

struct StepParams { float lr; int t; uint seed; uint counter; };

static void emu_entry() {
  emu_kernel();
  emu_fibers[emu_cur].done = true;
  swapcontext(&emu_fibers[emu_cur].ctx, &emu_sched);
}

// runs kernel() over the grid, one block at a time, one fiber per thread of the block
template <class F>
static void emu_launch(uint3 grid, uint3 block, F kernel) {
  gridDim = grid;
  blockDim = block;
  emu_kernel = kernel;
  const uint n = block.x * block.y * block.z;
  emu_frags.assign(n, EmuFrag{});
  emu_fibers.resize(n);
  for (auto& f : emu_fibers) f.stack.resize(256 * 1024);
  for (uint bz = 0; bz < grid.z; bz++)
    for (uint by = 0; by < grid.y; by++)
      for (uint bx = 0; bx < grid.x; bx++) {
        blockIdx = uint3{bx, by, bz};
        emu_bars.assign(1 + (n + 31u) / 32u, EmuBarrier{});
        emu_bars[0].need = n;
        for (uint w = 0; w < (n + 31u) / 32u; w++) emu_bars[1 + w].need = std::min(32u, n - 32u * w);
        for (uint t = 0; t < n; t++) {
          EmuFiber& f = emu_fibers[t];
          f.done = false;
          f.waitBar = -1;
          f.tid = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
          getcontext(&f.ctx);
          f.ctx.uc_stack.ss_sp = f.stack.data();
          f.ctx.uc_stack.ss_size = f.stack.size();
          f.ctx.uc_link = nullptr;
          makecontext(&f.ctx, emu_entry, 0);
        }
        for (uint left = n; left > 0;) {
          bool progress = false;
          for (uint t = 0; t < n; t++) {
            EmuFiber& f = emu_fibers[t];
            if (f.done || (f.waitBar >= 0 && emu_bars[f.waitBar].gen == f.waitGen)) continue;
            f.waitBar = -1;
            emu_cur = t;
            threadIdx = f.tid;
            swapcontext(&emu_sched, &f.ctx);
            progress = true;
            if (f.done) left--;
          }
          if (!progress) {
            std::fprintf(stderr, "emu: deadlock in block (%u, %u, %u): a barrier not every thread reaches\n", bx, by, bz);
            std::exit(3);
          }
        }
      }
}
