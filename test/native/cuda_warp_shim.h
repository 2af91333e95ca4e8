// cuda_warp_shim: a CPU stand-in for the CUDA built-ins and the mma.ts helpers that the flash attention
// kernels (compiler/codegen-cuda/attention_cuda.ts, attention_tf32x3.ts, attention_f32.ts) use, so that the generated kernel
// text compiles with g++ and runs here (test/cuda_flash_emu.test.ts). Test only; no GPU semantics beyond
// what those kernels need. One fiber per CUDA thread (test/native/cuda_fibers.h), one block at a time;
// __syncthreads is a block barrier; warp collectives (shuffles, mma.sync, ldmatrix) exchange through per-warp
// slots between two warp barriers (every lane of a warp calls them in uniform control flow, as on the GPU). mma.m16n8k16
// and ldmatrix (plain and .trans), and wgmma m64n64k16 over 128B-swizzled tiles, are modelled from the PTX ISA's fragment tables (written independently of the
// generator's index arithmetic; the GPU run, bench/cuda_check.sh, stays the ground truth); cp.async
// copies land at the copy or at the wait (shim_cp_late), the two ends of what the hardware may
// do; __shared__ arrays are function statics (blocks run one after another; test/cuda_flash_emu.test.ts declares
// a kernel's dynamic shared memory `tg` as one of its tgmem bytes).
#include "cuda_fibers.h"
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
typedef unsigned int uint;
struct u3 { unsigned x, y, z; };
struct uint4 { uint x, y, z, w; };
using uint3 = u3;  // the kernel language's tgid / gid (the shim's blockIdx, ... are u3)
static inline uint3 make_uint3(uint a, uint b, uint c) { return {a, b, c}; }
struct float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
static inline uint4 make_uint4(uint a, uint b, uint c, uint d) { return {a, b, c, d}; }
static inline float2 make_float2(float a, float b) { return {a, b}; }
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
struct __nv_bfloat16 { unsigned short b; };
struct __half { unsigned short b; };
static inline float __uint_as_float(uint u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline uint __float_as_uint(float f) { uint u; std::memcpy(&u, &f, 4); return u; }
static inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float(((uint)h.b) << 16); }
static inline float __half2float(__half h) { _Float16 x; std::memcpy(&x, &h.b, 2); return (float)x; }
static inline unsigned short bf16_bits(float f) { uint u = __float_as_uint(f); return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
static inline unsigned short f16_bits(float f) { _Float16 x = (_Float16)f; unsigned short b; std::memcpy(&b, &x, 2); return b; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {bf16_bits(f)}; }
static inline __half __float2half_rn(float f) { return {f16_bits(f)}; }
using std::min; using std::max;
struct StepParams { float lr; int t; uint seed; uint counter; };
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static

inline u3 threadIdx, blockIdx;  // the running fiber's (set as the scheduler resumes it)
inline u3 gridDim, blockDim;
struct Slot { uint a[4]; uint b[2]; float f; const unsigned short* p; };
inline Slot g_slot[32 * 32];
static inline int lane_() { return threadIdx.x & 31; }
static inline int warp_() { return threadIdx.x >> 5; }
static inline void warp_sync() { emu_arrive(1 + warp_()); }
static inline void __syncthreads() { emu_arrive(0); }
static inline Slot& me() { return g_slot[warp_() * 32 + lane_()]; }
static inline Slot& of(int l) { return g_slot[warp_() * 32 + l]; }
static inline float __shfl_xor_sync(uint, float v, int o) {
  me().f = v; warp_sync(); const float r = of(lane_() ^ o).f; warp_sync(); return r;
}
// the dialect's warp reductions (cuda_dialect.ts), for the kernel-language kernels (blockSumsFinish, the class rows)
static inline float mpsc_warp_sum(float v) { for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); return v; }
static inline float mpsc_warp_max(float v) { for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o)); return v; }
// __shfl_sync over the full warp: each lane reads lane src's value
static inline float __shfl_sync(uint, float v, int src) {
  me().f = v; warp_sync(); const float r = of(src & 31).f; warp_sync(); return r;
}
static inline float mpsc_quad_max(float v) { v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1)); return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2)); }
static inline float mpsc_quad_sum(float v) { v += __shfl_xor_sync(0xffffffffu, v, 1); return v + __shfl_xor_sync(0xffffffffu, v, 2); }
static inline uint mpsc_ld32(const unsigned short* p) { uint u; std::memcpy(&u, p, 4); return u; }
static inline uint mpsc_pack_bf16(float lo, float hi) { return (uint)bf16_bits(lo) | ((uint)bf16_bits(hi) << 16); }
static inline uint mpsc_pack_f16(float lo, float hi) { return (uint)f16_bits(lo) | ((uint)f16_bits(hi) << 16); }
static inline float half_of(uint r, int h, bool bf) {
  const unsigned short b = (unsigned short)(h ? r >> 16 : r & 0xffffu);
  return bf ? __bfloat162float({b}) : __half2float({b});
}
// mma.m16n8k16 per the PTX fragment layouts: A (r, k) in lane (r % 8) * 4 + (k % 8) / 2, register (r >= 8) + 2 (k >= 8);
// B (k, n) in lane n * 4 + (k % 8) / 2, register (k >= 8); C (r, c): lane (r % 8) * 4 + c / 2, element 2 (r >= 8) + c % 2
static inline void mma_(float* c, const uint* a, const uint* b, bool bf) {
  std::memcpy(me().a, a, 16); std::memcpy(me().b, b, 8); warp_sync();
  const int g = lane_() >> 2, t = lane_() & 3;
  for (int e = 0; e < 4; ++e) {
    const int r = g + (e >> 1) * 8, n = 2 * t + (e & 1);
    float s = 0.0f;
    for (int k = 0; k < 16; ++k) {
      const Slot& A = of((r % 8) * 4 + (k % 8) / 2);
      const Slot& B = of(n * 4 + (k % 8) / 2);
      s += half_of(A.a[(r >= 8) + 2 * (k >= 8)], k & 1, bf) * half_of(B.b[k >= 8], k & 1, bf);
    }
    c[e] += s;
  }
  warp_sync();
}
static inline void mpsc_mma_bf16(float* c, const uint* a, const uint* b) { mma_(c, a, b, true); }
static inline void mpsc_mma_f16(float* c, const uint* a, const uint* b) { mma_(c, a, b, false); }
// cvt.rna.tf32.f32: the top 19 bits, rounded to nearest with ties away from zero (finite inputs; the kernels feed no inf / NaN)
static inline uint mpsc_tf32(float x) { return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }
// hi alone, lo = 0: plain TF32 (test/cuda_flash_emu.test.ts's negative control puts it in place of mma.ts's mpsc_split_tf32_hl)
static inline void mpsc_split_tf32_hi_only(float x, uint& hi, uint& lo) { hi = mpsc_tf32(x); lo = 0u; }
// mma.m16n8k8 TF32 per the PTX fragment layouts: A (r, k) in lane (r % 8) * 4 + k % 4, register (r >= 8) + 2 (k >= 4);
// B (k, n) in lane n * 4 + k % 4, register (k >= 4); C as m16n8k16. The tensor cores read only an operand's
// TF32 bits (the low 13 are dropped); products of TF32 values are exact, summed here in double, added in fp32
static inline void mpsc_mma16x8(float* c, const uint* a, const uint* b) {
  std::memcpy(me().a, a, 16); std::memcpy(me().b, b, 8); warp_sync();
  const int g = lane_() >> 2, t = lane_() & 3;
  for (int e = 0; e < 4; ++e) {
    const int r = g + (e >> 1) * 8, n = 2 * t + (e & 1);
    double s = 0.0;
    for (int k = 0; k < 8; ++k) {
      const uint x = of((r % 8) * 4 + k % 4).a[(r >= 8) + 2 * (k >= 4)], y = of(n * 4 + k % 4).b[k >= 4];
      s += (double)__uint_as_float(x & 0xffffe000u) * (double)__uint_as_float(y & 0xffffe000u);
    }
    c[e] = (float)((double)c[e] + s);
  }
  warp_sync();
}
// ldmatrix.x4.trans: matrix i's row j at the address of lane 8i + j; lane (g, t) gets (rows 2t, 2t + 1; col g)
static inline void mpsc_ldsm_x4_trans(uint* r, const unsigned short* p) {
  if (((uintptr_t)p) % 16) { std::fprintf(stderr, "ldmatrix row address not 16-byte aligned\n"); std::abort(); }
  me().p = p; warp_sync();
  const int g = lane_() >> 2, t = lane_() & 3;
  for (int i = 0; i < 4; ++i) r[i] = (uint)of(8 * i + 2 * t).p[g] | ((uint)of(8 * i + 2 * t + 1).p[g] << 16);
  warp_sync();
}
// ldmatrix.x4 (not transposed): matrix i's row j at the address of lane 8i + j; lane (g, t) gets (row g; cols 2t, 2t + 1)
static inline void mpsc_ldsm_x4(uint* r, const unsigned short* p) {
  if (((uintptr_t)p) % 16) { std::fprintf(stderr, "ldmatrix row address not 16-byte aligned\n"); std::abort(); }
  me().p = p; warp_sync();
  const int g = lane_() >> 2, t = lane_() & 3;
  for (int i = 0; i < 4; ++i) r[i] = (uint)of(8 * i + g).p[2 * t] | ((uint)of(8 * i + g).p[2 * t + 1] << 16);
  warp_sync();
}
// cp.async lands somewhere between the copy and the wait: shim_cp_late true performs the copies at
// the wait (a read before its wait sees stale data), false at the copy (a write into a buffer that another
// thread still reads, without the barrier between, shows); copies a thread never waits for are dropped
inline bool shim_cp_late = false;
struct PendingCopy { void* dst; const void* src; bool full; unsigned bytes; unsigned group; };
inline std::vector<std::vector<PendingCopy>> shim_pending;  // [thread in the block]: copies not landed yet
inline std::vector<unsigned> shim_commits;                   // [thread in the block]: its commit_group count (a copy's group)
static inline void copy_(const PendingCopy& c) { if (c.full) std::memcpy(c.dst, c.src, c.bytes); else std::memset(c.dst, 0, c.bytes); }
static inline void cp_async_(void* dst, const void* src, bool full, unsigned bytes) {
  if (((uintptr_t)dst) % bytes || ((uintptr_t)src) % bytes) { std::fprintf(stderr, "cp.async of %u bytes not aligned\n", bytes); std::abort(); }
  const PendingCopy c{dst, src, full, bytes, shim_commits[emu_cur]};
  if (shim_cp_late) shim_pending[emu_cur].push_back(c); else copy_(c);
}
static inline void mpsc_cp_async16(unsigned short* dst, const unsigned short* src, bool full) { cp_async_(dst, src, full, 16); }
// cuda_dialect.ts's 4-byte copy (the fp32 3xTF32 kernels' lse / Delta rows)
static inline void mpsc_cp_async4(float* dst, const float* src, bool ok) { cp_async_(dst, src, ok, 4); }
static inline void mpsc_cp_async_commit() { ++shim_commits[emu_cur]; }
static inline void mpsc_cp_async_wait_all() {
  for (const PendingCopy& c : shim_pending[emu_cur]) copy_(c);
  shim_pending[emu_cur].clear();
}
// a thread's pending operations (cp.async copies, wgmma products) of every committed group but the n youngest: run in
// issue order and removed (those of younger or open groups stay)
template <class P, class F> void retire_(std::vector<P>& q, unsigned commits, unsigned n, F run) {
  const unsigned done = commits >= n ? commits - n : 0u;
  std::vector<P> keep;
  for (const P& p : q) if (p.group < done) run(p); else keep.push_back(p);
  q.swap(keep);
}
// cp.async.wait_group N: every committed group but the N youngest landed
template <int N> void mpsc_cp_async_wait() { retire_(shim_pending[emu_cur], shim_commits[emu_cur], N, copy_); }

// wgmma (the wgmma flash kernels, attention_cuda.ts forwardBodyWgmma / gradKVBodyWgmma / gradQBodyWgmma; mma.ts wgmma16Helpers): here the descriptor is
// the tile pointer itself (the GPU's packs a 14-bit shared address, LBO, SBO and the swizzle mode); an operand
// element at byte offset off from it sits at the 128-byte swizzle's place: its address's 16-byte chunk bits [4:6]
// XOR its row bits [7:9] (the tiles are 1024-byte aligned). In fp32, k in order. Computed at the call, or, with
// shim_cp_late (the run where cp.async copies land at their wait), at the wait_group that retires the product's commit
// group: a kernel that reads an accumulator before its wait, or overwrites a shared tile a product in flight still
// reads, then gets wrong results (the register A fragment is taken at the call: keeping its registers until the wait
// is ptxas's part, as it is on the GPU).
static inline unsigned long long mpsc_sw128_desc(const unsigned short* p) { return (unsigned long long)(uintptr_t)p; }
static inline unsigned short* mpsc_sw128_base(float* tg) { return reinterpret_cast<unsigned short*>(((uintptr_t)tg + 1023u) & ~(uintptr_t)1023u); }
static inline float sw128_(unsigned long long desc, size_t off, bool bf) {
  uintptr_t a = (uintptr_t)desc + off;
  if ((uintptr_t)desc % 16) { std::fprintf(stderr, "wgmma descriptor start not 16-byte aligned\n"); std::abort(); }
  a ^= ((a >> 7) & 7u) << 4;
  return half_of(*reinterpret_cast<const unsigned short*>(a), 0, bf);
}
// SS: d (64 x 64, warp w's rows 16w + g and + 8 (w the warp's rank in its warpgroup of 4), n8 tile j's columns 8j + 2t, + 1) (+)= sum over k < 16 of A (m, k)
// at desc_a + 128 m + 2 k times B^T (n, k) at desc_b + 128 n + 2 k (both K-major)
static inline void wgmma_ss_(float (&d)[8][4], unsigned long long da, unsigned long long db, int acc, bool bf) {
  const int w = warp_() & 3, g = lane_() >> 2, t = lane_() & 3;  // the warp's rank in its warpgroup
  for (int j = 0; j < 8; ++j)
    for (int e = 0; e < 4; ++e) {
      const int m = 16 * w + g + 8 * (e >> 1), n = 8 * j + 2 * t + (e & 1);
      float s = 0.0f;
      for (int k = 0; k < 16; ++k) s += sw128_(da, 128 * m + 2 * k, bf) * sw128_(db, 128 * n + 2 * k, bf);
      d[j][e] = (acc ? d[j][e] : 0.0f) + s;
    }
}
// RS: A (the warp's rows, k < 16) from its lanes' m16n8k16 A fragments (mma_'s layout), B (k, n) at desc_b + 128 k + 2 n
// (MN-major: stored [k][n])
static inline void wgmma_rs_(float (&d)[8][4], const uint (&a)[4], unsigned long long db, int acc, bool bf) {
  std::memcpy(me().a, a, 16); warp_sync();
  const int g = lane_() >> 2, t = lane_() & 3;
  for (int j = 0; j < 8; ++j)
    for (int e = 0; e < 4; ++e) {
      const int r = g + 8 * (e >> 1), n = 8 * j + 2 * t + (e & 1);
      float s = 0.0f;
      for (int k = 0; k < 16; ++k) s += half_of(of((r % 8) * 4 + (k % 8) / 2).a[(r >= 8) + 2 * (k >= 8)], k & 1, bf) * sw128_(db, 128 * k + 2 * n, bf);
      d[j][e] = (acc ? d[j][e] : 0.0f) + s;
    }
  warp_sync();
}
// the products of one thread not yet computed (shim_cp_late), with the commit group each belongs to
struct PendingWgmma { bool rs; float (*d)[4]; uint a[4]; unsigned long long da, db; int acc; bool bf; unsigned group; };
inline std::vector<std::vector<PendingWgmma>> shim_wg_pending;
inline std::vector<unsigned> shim_wg_commits;
static inline void wgmma_run_(const PendingWgmma& p) {
  float (&d)[8][4] = *reinterpret_cast<float (*)[8][4]>(p.d);
  if (p.rs) wgmma_rs_(d, p.a, p.db, p.acc, p.bf); else wgmma_ss_(d, p.da, p.db, p.acc, p.bf);
}
static inline void wgmma_issue_(bool rs, float (&d)[8][4], const uint* a, unsigned long long da, unsigned long long db, int acc, bool bf) {
  PendingWgmma p{rs, d, {0u, 0u, 0u, 0u}, da, db, acc, bf, shim_wg_commits[emu_cur]};
  if (a) std::memcpy(p.a, a, 16);
  if (shim_cp_late) shim_wg_pending[emu_cur].push_back(p); else wgmma_run_(p);
}
static inline void mpsc_wgmma_ss_bf16(float (&d)[8][4], unsigned long long da, unsigned long long db, int acc) { wgmma_issue_(false, d, nullptr, da, db, acc, true); }
static inline void mpsc_wgmma_ss_f16(float (&d)[8][4], unsigned long long da, unsigned long long db, int acc) { wgmma_issue_(false, d, nullptr, da, db, acc, false); }
static inline void mpsc_wgmma_rs_tb_bf16(float (&d)[8][4], const uint (&a)[4], unsigned long long db, int acc) { wgmma_issue_(true, d, a, 0, db, acc, true); }
static inline void mpsc_wgmma_rs_tb_f16(float (&d)[8][4], const uint (&a)[4], unsigned long long db, int acc) { wgmma_issue_(true, d, a, 0, db, acc, false); }
static inline void mpsc_fence_proxy_async() {}
static inline void mpsc_wgmma_fence() {}
static inline void mpsc_wgmma_commit() { ++shim_wg_commits[emu_cur]; }
// wgmma.wait_group N: every committed group but the N youngest computed
static inline void mpsc_wgmma_wait0() { retire_(shim_wg_pending[emu_cur], shim_wg_commits[emu_cur], 0, wgmma_run_); }
static inline void mpsc_wgmma_wait1() { retire_(shim_wg_pending[emu_cur], shim_wg_commits[emu_cur], 1, wgmma_run_); }
// (mma.ts's swizzled tile copy, mpsc_sw128_load, is the generator's own text: the test puts it after this file)

template <class F> void launch(u3 grid, u3 block, F f) {
  gridDim = grid; blockDim = block;
  const unsigned n = block.x * block.y * block.z;
  emu_body = f;
  emu_prepare(n);
  shim_pending.resize(n);
  shim_commits.resize(n);
  shim_wg_pending.resize(n);
  shim_wg_commits.resize(n);
  for (unsigned bz = 0; bz < grid.z; ++bz) for (unsigned by = 0; by < grid.y; ++by) for (unsigned bx = 0; bx < grid.x; ++bx) {
    blockIdx = {bx, by, bz};
    for (auto& p : shim_pending) p.clear();
    for (auto& c : shim_commits) c = 0;
    for (auto& p : shim_wg_pending) p.clear();
    for (auto& c : shim_wg_commits) c = 0;
    if (!emu_run_block(n, [](unsigned t) { threadIdx = {t, 0, 0}; })) {
      std::fprintf(stderr, "shim: deadlock in block (%u, %u, %u): a barrier not every thread reaches\n", bx, by, bz);
      std::exit(3);
    }
  }
}

// the test driver's buffers (test/cuda_flash_emu.test.ts): n elements, 64-byte aligned, read from `in` (the
// operands' bytes, in order) or zero; outputs written to `out` as floats
template <class T> T* shim_buffer(size_t n, FILE* in) {
  T* p = static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64));
  if (!p) std::abort();
  if (!in) std::memset(p, 0, n * sizeof(T));
  else if (std::fread(p, sizeof(T), n, in) != n) { std::fprintf(stderr, "shim: short operand file\n"); std::exit(2); }
  return p;
}
static void shim_write(const float* p, size_t n, FILE* out) { std::fwrite(p, 4, n, out); }
// a 16-bit output written as floats (exact), as the tests read every output
static void shim_write(const __nv_bfloat16* p, size_t n, FILE* out) { for (size_t i = 0; i < n; ++i) { const float f = __bfloat162float(p[i]); std::fwrite(&f, 4, 1, out); } }
static void shim_write(const __half* p, size_t n, FILE* out) { for (size_t i = 0; i < n; ++i) { const float f = __half2float(p[i]); std::fwrite(&f, 4, 1, out); } }
