// metal-emu: running one dispatch (dispatchThreadgroups) of a generated kernel.
// Included once, by the generated emulator driver, before <metal_stdlib>.
//  - limits: at most 1024 threads per threadgroup, 32 KiB threadgroup memory, 31 buffers
//  - every buffer binding is copied into its own mapping whose end touches a PROT_NONE page
//    (and whose mapping starts after one), so a kernel that reads or writes past the end of a
//    binding faults, and the fault is reported with the kernel, binding index and value name
//  - threadgroup memory gets the same guard
//  - threadgroups run on `threads` OS threads; the threads of one threadgroup run as fibers,
//    in ascending index order, or descending with MPSC_METAL_EMU_ORDER=reverse
#pragma once
#include <atomic>
#include <csignal>
#include <sys/mman.h>
#include <thread>
#include "emu_fiber.h"

namespace mtlemu {

thread_local Group* g_group = nullptr;
thread_local Fiber* g_cur = nullptr;
const char* g_kernel_name = nullptr;

#if defined(__x86_64__) && !defined(MTLEMU_UCONTEXT)
asm(R"(
.text
.globl mtlemu_swap
.type mtlemu_swap,@function
mtlemu_swap:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size mtlemu_swap,.-mtlemu_swap
.section .note.GNU-stack,"",@progbits
.text
)");
#endif

extern "C" inline void mtlemu_fiber_main() {
  Group* g = g_group;
  g->body(g->arg);
  g_cur->state = DONE;
  yield_to_scheduler();
  fail("internal: a finished fiber was resumed");
}

inline void start_fiber(Group& g, Fiber& f) {
  if (!f.stack) {
    f.stack = static_cast<char*>(std::malloc(FIBER_STACK));
    if (!f.stack) fail("out of memory for fiber stacks");
  }
#if defined(__x86_64__) && !defined(MTLEMU_UCONTEXT)
  // stack top aligned to 16; layout (low to high): mxcsr|fpucw, r15 r14 r13 r12 rbx rbp, return address, pad
  uintptr_t top = (reinterpret_cast<uintptr_t>(f.stack) + FIBER_STACK) & ~uintptr_t(15);
  uint64_t* sp = reinterpret_cast<uint64_t*>(top);
  *--sp = 0;                                                   // pad: after `ret`, rsp % 16 == 8 as after a call
  *--sp = reinterpret_cast<uint64_t>(&mtlemu_fiber_main);      // return address
  for (int i = 0; i < 6; ++i) *--sp = 0;                       // rbp rbx r12 r13 r14 r15
  uint32_t csr[2];
  __asm__ volatile("stmxcsr %0" : "=m"(csr[0]));
  __asm__ volatile("fnstcw %0" : "=m"(csr[1]));
  *--sp = (uint64_t(csr[1]) << 32) | csr[0];
  f.sp = sp;
#else
  getcontext(&f.uc);
  f.uc.uc_stack.ss_sp = f.stack;
  f.uc.uc_stack.ss_size = FIBER_STACK;
  f.uc.uc_link = nullptr;
  makecontext(&f.uc, reinterpret_cast<void (*)()>(&mtlemu_fiber_main), 0);
#endif
  (void)g;
  f.state = RUNNING;
}

inline void resume(Group& g, Fiber& f) {
  g_cur = &f;
#if defined(__x86_64__) && !defined(MTLEMU_UCONTEXT)
  mtlemu_swap(&g.sched_sp, f.sp);
#else
  swapcontext(&g.sched_uc, &f.uc);
#endif
}

/** MPSC_METAL_EMU_ORDER=reverse: the threads of a threadgroup run in descending index order
 *  (between barriers, and as plain calls). A missing barrier between a write by one thread and a
 *  read by another shows in the ascending order when the reader has the lower index, in the
 *  descending order when it has the higher one. Read once. */
inline bool reverse_order() {
  static const bool r = [] {
    const char* e = std::getenv("MPSC_METAL_EMU_ORDER");
    return e != nullptr && std::strcmp(e, "reverse") == 0;
  }();
  return r;
}

inline void run_group(Group& g) {
  g_group = &g;
  const bool rev = reverse_order();
  auto fiber = [&](unsigned i) -> Fiber& { return g.fibers[rev ? g.n - 1 - i : i]; };
  if (!g.fibered) {
    for (unsigned i = 0; i < g.n; ++i) {
      Fiber& f = fiber(i);
      f.state = RUNNING;
      g_cur = &f;
      g.body(g.arg);
      f.state = DONE;
    }
    return;
  }
  for (unsigned i = 0; i < g.n; ++i) start_fiber(g, fiber(i));
  unsigned nsimd = (g.n + SIMD_WIDTH - 1) / SIMD_WIDTH;
  for (;;) {
    for (unsigned i = 0; i < g.n; ++i)
      if (fiber(i).state == RUNNING) resume(g, fiber(i));
    unsigned done = 0, attg = 0;
    for (unsigned i = 0; i < g.n; ++i) {
      if (g.fibers[i].state == DONE) ++done;
      else if (g.fibers[i].state == AT_TG_BARRIER) ++attg;
    }
    if (done == g.n) return;
    bool released = false;
    for (unsigned s = 0; s < nsimd; ++s) {
      unsigned alive = 0, waiting = 0;
      uint32_t mask = 0;
      for (unsigned l = 0; l < SIMD_WIDTH && s * SIMD_WIDTH + l < g.n; ++l) {
        const Fiber& f = g.fibers[s * SIMD_WIDTH + l];
        if (f.state != DONE) ++alive;
        if (f.state == AT_SIMD) { ++waiting; mask |= 1u << l; }
      }
      if (alive > 0 && waiting == alive) {
        g.simd_mask[s] = mask;
        for (unsigned l = 0; l < SIMD_WIDTH && s * SIMD_WIDTH + l < g.n; ++l)
          if (g.fibers[s * SIMD_WIDTH + l].state == AT_SIMD) g.fibers[s * SIMD_WIDTH + l].state = RUNNING;
        released = true;
      }
    }
    if (released) continue;
    if (attg > 0 && attg + done == g.n) {
      if (done > 0) {
        char msg[256];
        std::snprintf(msg, sizeof msg,
                      "threadgroup_barrier reached by %u of %u threads of threadgroup (%u,%u,%u); the others had returned "
                      "(a barrier in non-uniform control flow is undefined behaviour on Metal)",
                      attg, g.n, g.tgpos.x, g.tgpos.y, g.tgpos.z);
        fail(msg);
      }
      for (unsigned i = 0; i < g.n; ++i) g.fibers[i].state = RUNNING;
      continue;
    }
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "threads of threadgroup (%u,%u,%u) wait at different barriers / SIMD-group functions (%u at a threadgroup "
                  "barrier, %u finished, of %u): divergent control flow around a barrier or SIMD-group collective",
                  g.tgpos.x, g.tgpos.y, g.tgpos.z, attg, done, g.n);
    fail(msg);
  }
}

// ------------------------------------------------------------------ guarded memory

struct Guarded {
  char* map = nullptr;
  size_t mapLen = 0;
  char* data = nullptr; // data + bytes == start of the trailing PROT_NONE page
  size_t bytes = 0;
  int binding = -1;      // [[buffer(n)]] index, or -1 - n for [[threadgroup(n)]]
  const char* name = nullptr;
};

inline size_t page_size() {
  static size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

inline Guarded guarded_alloc(size_t bytes, int binding, const char* name) {
  size_t ps = page_size();
  size_t body = (bytes + ps - 1) / ps * ps;
  if (body == 0) body = ps;
  Guarded gm;
  gm.mapLen = body + 2 * ps;
  void* m = mmap(nullptr, gm.mapLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) fail("mmap failed for a guarded buffer");
  gm.map = static_cast<char*>(m);
  mprotect(gm.map, ps, PROT_NONE);
  mprotect(gm.map + ps + body, ps, PROT_NONE);
  gm.data = gm.map + ps + body - bytes;
  gm.bytes = bytes;
  gm.binding = binding;
  gm.name = name;
  return gm;
}

inline void guarded_free(Guarded& gm) {
  if (gm.map) munmap(gm.map, gm.mapLen);
  gm.map = nullptr;
}

// regions of the current dispatch, for the fault handler (written before threads start)
inline std::vector<Guarded>& live_regions() {
  static std::vector<Guarded> r;
  return r;
}
inline std::atomic<bool>& regions_lock() {
  static std::atomic<bool> l{false};
  return l;
}

inline void on_fault(int sig, siginfo_t* si, void*) {
  char msg[512];
  uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr);
  for (const Guarded& gm : live_regions()) {
    uintptr_t lo = reinterpret_cast<uintptr_t>(gm.map), hi = lo + gm.mapLen;
    if (a >= lo && a < hi) {
      long long off = static_cast<long long>(a) - static_cast<long long>(reinterpret_cast<uintptr_t>(gm.data));
      if (gm.binding >= 0)
        std::snprintf(msg, sizeof msg,
                      "metal-emu: kernel %s: out-of-bounds access to [[buffer(%d)]] '%s' (%zu bytes): byte offset %lld\n",
                      g_kernel_name ? g_kernel_name : "?", gm.binding, gm.name ? gm.name : "?", gm.bytes, off);
      else
        std::snprintf(msg, sizeof msg,
                      "metal-emu: kernel %s: out-of-bounds access to threadgroup memory [[threadgroup(%d)]] (%zu bytes): byte offset %lld\n",
                      g_kernel_name ? g_kernel_name : "?", -1 - gm.binding, gm.bytes, off);
      fail_msg(msg);
    }
  }
  std::snprintf(msg, sizeof msg, "metal-emu: kernel %s: fatal signal %d at address %p\n",
                g_kernel_name ? g_kernel_name : "?", sig, si->si_addr);
  fail_msg(msg);
}

/** Installs the fault handler for the duration of one dispatch (the previous handlers, e.g. the
 *  host process's own, are restored afterwards by FaultScope's destructor). */
struct FaultScope {
  struct sigaction old_segv{}, old_bus{};
  FaultScope() {
    static thread_local bool alt = false;
    if (!alt) {
      alt = true;
      static thread_local char altstack[64 * 1024];
      stack_t ss{};
      ss.ss_sp = altstack;
      ss.ss_size = sizeof altstack;
      sigaltstack(&ss, nullptr);
    }
    struct sigaction sa{};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
  }
  ~FaultScope() {
    sigaction(SIGSEGV, &old_segv, nullptr);
    sigaction(SIGBUS, &old_bus, nullptr);
  }
};

// ------------------------------------------------------------------ one dispatch

struct Binding {
  char* base;        // host memory of the bound region
  size_t bytes;
  bool write;        // copied back after the dispatch
  const char* name;
};

struct Launch {
  const char* kernel;
  void (*shim)(void*);  // calls the kernel with the current fiber's built-ins
  Dim3 groups;          // threadgroups per grid
  Dim3 tgsize;          // threads per threadgroup
  unsigned tgmem;       // bytes of [[threadgroup(0)]]
  bool fibered;         // uses barriers / SIMD-group functions
};

/** What a shim receives: the device pointers of the bindings, the params struct and threadgroup memory. */
struct ShimArgs {
  char* buf[32];
  const void* params;
  char* tgmem;
};

extern thread_local ShimArgs* g_args;
thread_local ShimArgs* g_args = nullptr;

/** Per-OS-thread copy of the shim args (tgmem differs per thread). */
struct GroupRunner {
  Group g;
  ShimArgs args;
  Guarded tg;
};

/** Runs one dispatch. Returns false (message in g_error) when the kernel broke a rule or faulted. */
inline bool dispatch(const Launch& L, const Binding* bind, unsigned nbind, const void* params, unsigned threads) {
  FaultScope faults;
  g_failed = false;
  g_error[0] = 0;
  g_kernel_name = L.kernel;
  unsigned n = L.tgsize.x * L.tgsize.y * L.tgsize.z;
  const char* limit = n == 0 || n > 1024 ? "threadgroup size must be 1..1024 threads"
                      : L.tgmem > 32768  ? "threadgroup memory exceeds 32 KiB"
                      : nbind > 31       ? "more than 31 buffer bindings"
                                         : nullptr;
  if (limit) {
    std::snprintf(g_error, sizeof g_error, "metal-emu: kernel %s: %s", L.kernel, limit);
    return false;
  }
  std::vector<Guarded>& regs = live_regions();
  regs.clear();
  for (unsigned i = 0; i < nbind; ++i) {
    Guarded gm = guarded_alloc(bind[i].bytes, static_cast<int>(i), bind[i].name);
    std::memcpy(gm.data, bind[i].base, bind[i].bytes);
    regs.push_back(gm);
  }
  unsigned nthreads = threads < 1 ? 1 : threads;
  size_t total = size_t(L.groups.x) * L.groups.y * L.groups.z;
  if (nthreads > total) nthreads = total < 1 ? 1 : static_cast<unsigned>(total);
  std::vector<GroupRunner> runners(nthreads);
  for (unsigned t = 0; t < nthreads; ++t) {
    runners[t].tg = guarded_alloc(L.tgmem, -1, nullptr);
    regs.push_back(runners[t].tg);
  }
  std::atomic<size_t> next{0};
  auto work = [&](unsigned t) {
    GroupRunner& R = runners[t];
    Group& g = R.g;
    g.n = n;
    g.fibered = L.fibered;
    g.tgsize = L.tgsize;
    g.fibers.resize(n);
    g.slot.assign(n, 0);
    g.simd_mask.assign((n + SIMD_WIDTH - 1) / SIMD_WIDTH, 0);
    for (unsigned i = 0; i < n; ++i) {
      Fiber& f = g.fibers[i];
      f.index = i;
      f.lane = i % SIMD_WIDTH;
      f.simd = i / SIMD_WIDTH;
      f.tid = Dim3{i % L.tgsize.x, (i / L.tgsize.x) % L.tgsize.y, i / (L.tgsize.x * L.tgsize.y)};
    }
    for (unsigned i = 0; i < nbind; ++i) R.args.buf[i] = regs[i].data;
    R.args.params = params;
    R.args.tgmem = R.tg.data;
    g.body = L.shim;
    g.arg = &R.args;
    g_args = &R.args;
    sigjmp_buf jb;
    if (sigsetjmp(jb, 1) == 0) {
      t_jmp = &jb;
      for (;;) {
        if (g_failed.load()) break;
        size_t k = next.fetch_add(1);
        if (k >= total) break;
        g.tgpos = Dim3{static_cast<unsigned>(k % L.groups.x), static_cast<unsigned>((k / L.groups.x) % L.groups.y),
                       static_cast<unsigned>(k / (size_t(L.groups.x) * L.groups.y))};
        run_group(g);
      }
    }
    t_jmp = nullptr;
    for (Fiber& f : g.fibers) std::free(f.stack), f.stack = nullptr;
  };
  if (nthreads == 1) {
    work(0);
  } else {
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < nthreads; ++t) ts.emplace_back(work, t);
    for (auto& th : ts) th.join();
  }
  bool ok = !g_failed.load();
  if (ok)
    for (unsigned i = 0; i < nbind; ++i)
      if (bind[i].write) std::memcpy(bind[i].base, regs[i].data, bind[i].bytes);
  for (Guarded& gm : regs) guarded_free(gm);
  regs.clear();
  g_kernel_name = nullptr;
  return ok;
}

} // namespace mtlemu
