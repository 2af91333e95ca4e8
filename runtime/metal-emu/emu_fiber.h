// metal-emu: the thread model. Every thread of a threadgroup is a fiber on one OS thread;
// a fiber runs until it reaches a threadgroup barrier, a SIMD-group collective or the end of
// the kernel, then the scheduler switches to the next one. A barrier is released only when
// every live thread of the threadgroup (or of the SIMD-group) waits at it, so the generated
// kernels see Metal's semantics: writes before a barrier are visible after it, and a missing
// barrier shows up as a read of stale threadgroup memory.
//
// Context switch: hand-written on x86-64 (callee-saved registers + MXCSR/x87 control word,
// no syscall), ucontext elsewhere.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <atomic>
#include <csetjmp>
#if !defined(__x86_64__) || defined(MTLEMU_UCONTEXT)
#include <ucontext.h>
#endif
#include <unistd.h>

namespace mtlemu {

struct Dim3 { unsigned x, y, z; };

enum FiberState { RUNNING = 0, AT_TG_BARRIER = 1, AT_SIMD = 2, DONE = 3 };

constexpr unsigned SIMD_WIDTH = 32;
constexpr size_t FIBER_STACK = 64 * 1024;

struct Fiber {
#if defined(__x86_64__) && !defined(MTLEMU_UCONTEXT)
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
  int state = DONE;
  unsigned index = 0;   // thread_index_in_threadgroup
  unsigned lane = 0;    // thread_index_in_simdgroup
  unsigned simd = 0;    // simdgroup_index_in_threadgroup
  Dim3 tid{0, 0, 0};    // thread_position_in_threadgroup
  char* stack = nullptr;
};

/** Per-OS-thread scheduler state for the threadgroup being run. */
struct Group {
  std::vector<Fiber> fibers;
  unsigned n = 0;
  bool fibered = false;
  Dim3 tgsize{1, 1, 1};
  Dim3 tgpos{0, 0, 0};
  void (*body)(void*) = nullptr;
  void* arg = nullptr;
#if defined(__x86_64__) && !defined(MTLEMU_UCONTEXT)
  void* sched_sp = nullptr;
#else
  ucontext_t sched_uc;
#endif
  // SIMD-group collective exchange: one 8-byte slot per thread
  std::vector<uint64_t> slot;
  std::vector<uint32_t> simd_mask; // lanes taking part in the current collective, per simdgroup
};

extern thread_local Group* g_group;
extern thread_local Fiber* g_cur;
extern const char* g_kernel_name;

// Errors: the first message is kept in g_error; a thread inside a dispatch jumps back to it
// (t_jmp), which then fails the run; outside a dispatch the process exits with status 3.
inline std::atomic<bool> g_failed{false};
inline char g_error[512];
inline thread_local sigjmp_buf* t_jmp = nullptr;

[[noreturn]] inline void fail_msg(const char* full) {
  bool expected = false;
  if (g_failed.compare_exchange_strong(expected, true)) std::snprintf(g_error, sizeof g_error, "%s", full);
  if (t_jmp) siglongjmp(*t_jmp, 1);
  ssize_t w = write(2, full, std::strlen(full));
  (void)w;
  _exit(3);
}

[[noreturn]] inline void fail(const char* what) {
  char msg[512];
  std::snprintf(msg, sizeof msg, "metal-emu: kernel %s: %s", g_kernel_name ? g_kernel_name : "?", what);
  fail_msg(msg);
}

#if defined(__x86_64__) && !defined(MTLEMU_UCONTEXT)
extern "C" void mtlemu_swap(void** save_sp, void* new_sp);
#endif

inline void yield_to_scheduler() {
  Group* g = g_group;
  Fiber* f = g_cur;
#if defined(__x86_64__) && !defined(MTLEMU_UCONTEXT)
  mtlemu_swap(&f->sp, g->sched_sp);
#else
  swapcontext(&f->uc, &g->sched_uc);
#endif
}

inline void threadgroup_barrier_impl() {
  Group* g = g_group;
  if (!g->fibered) {
    if (g->n > 1) fail("calls threadgroup_barrier but its dispatch plan entry says it has no barriers (plan/kernel mismatch)");
    return;
  }
  g_cur->state = AT_TG_BARRIER;
  yield_to_scheduler();
}

inline void simd_wait() {
  Group* g = g_group;
  if (!g->fibered) {
    if (g->n > 1) fail("calls a SIMD-group function but its dispatch plan entry says it has no barriers (plan/kernel mismatch)");
    return;
  }
  g_cur->state = AT_SIMD;
  yield_to_scheduler();
}

/** Run one SIMD-group collective: every taking-part lane publishes `v`, then `combine` sees all of them. */
template <typename T, typename F>
inline T simd_collective(T v, F combine) {
  static_assert(sizeof(T) <= 8, "simd collective operand too large");
  Group* g = g_group;
  if (!g->fibered) {
    if (g->n > 1) fail("calls a SIMD-group function but its dispatch plan entry says it has no barriers (plan/kernel mismatch)");
    // a single-thread threadgroup: the lane is alone
    T vals[SIMD_WIDTH];
    vals[0] = v;
    return combine(vals, 1u, 0u);
  }
  Fiber* f = g_cur;
  std::memcpy(&g->slot[f->index], &v, sizeof(T));
  simd_wait(); // everyone has published
  unsigned base = f->simd * SIMD_WIDTH;
  uint32_t mask = g->simd_mask[f->simd];
  T vals[SIMD_WIDTH];
  for (unsigned l = 0; l < SIMD_WIDTH; ++l) {
    if (mask & (1u << l)) std::memcpy(&vals[l], &g->slot[base + l], sizeof(T));
    else std::memset(&vals[l], 0, sizeof(T));
  }
  T r = combine(vals, mask, f->lane);
  simd_wait(); // everyone has read before anyone publishes again
  return r;
}

void run_group(Group& g);

} // namespace mtlemu
