// cuda_fibers.h: the thread model of the CPU emulators of CUDA kernels (test/native/cuda_thread_emu.h for the
// conv and GEMM kernels, test/native/cuda_warp_shim.h for the flash attention kernels). Each CUDA thread of a
// block is a fiber (its own stack) on one OS thread; blocks run one after another. A fiber runs until it
// arrives at a barrier (barrier 0: the block's __syncthreads; 1 + w: warp w's collectives) that not every
// participant has reached yet, then yields; the scheduler resumes, in thread order, every fiber whose barrier
// has been released since, so every thread's index arithmetic, predicates and shared-memory traffic run as
// written, in a fixed order. A barrier that not every thread reaches (divergent __syncthreads) is reported,
// not hung.
// Fibers switch by a few instructions on x86-64 (emu_switch: the callee-saved registers pushed, the stack
// pointer swapped), else (or with -DEMU_UCONTEXT) by ucontext's swapcontext, which also saves and restores
// the signal mask with a system call at every switch: the same fibers in the same order, only the cost differs
// (the conv cases switch tens of millions of times).
#pragma once
#if defined(__x86_64__) && defined(__GNUC__) && !defined(EMU_UCONTEXT)
#define EMU_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

struct EmuFiber {
#if EMU_ASM_SWITCH
  void* sp = nullptr;      // the fiber's saved stack pointer while it is not running
#else
  ucontext_t ctx;
#endif
  std::vector<char> stack;
  bool done = false;
  int waitBar = -1;        // barrier waited on (-1: none)
  unsigned waitGen = 0;    // that barrier's generation when this fiber arrived
};
struct EmuBarrier { unsigned need = 0, have = 0; unsigned gen = 0; };

inline std::vector<EmuFiber> emu_fibers;
inline std::vector<EmuBarrier> emu_bars;  // [0]: the block; [1 + w]: warp w
inline unsigned emu_cur = 0;             // the running fiber (the thread's index in its block)
inline std::function<void()> emu_body;  // what every fiber runs (the kernel, and what the emulator adds at its end)
static void emu_entry();

#if EMU_ASM_SWITCH
// saves the callee-saved registers (System V x86-64) on the current stack, stores the stack pointer in
// *from, loads `to` and pops what the other side pushed; a fresh fiber's stack returns into emu_entry
__attribute__((naked, noinline)) static void emu_switch(void** /*from*/, void* /*to*/) {
  asm("pushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n\t"
      "movq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n\t"
      "popq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n\tret\n\t");
}
inline void* emu_sched_sp;
static inline void emu_to_sched(EmuFiber& f) { emu_switch(&f.sp, emu_sched_sp); }
static inline void emu_to_fiber(EmuFiber& f) { emu_switch(&emu_sched_sp, f.sp); }
static inline void emu_fiber_init(EmuFiber& f) {
  // from the 16-byte aligned top: a null return address for emu_entry (entered with rsp = 8 mod 16, as
  // after a call), emu_entry's address for emu_switch's ret, six zero registers for its pops
  void** sp = reinterpret_cast<void**>((reinterpret_cast<uintptr_t>(f.stack.data()) + f.stack.size()) & ~uintptr_t(15));
  *--sp = nullptr;
  *--sp = reinterpret_cast<void*>(&emu_entry);
  for (int i = 0; i < 6; i++) *--sp = nullptr;
  f.sp = sp;
}
#else
inline ucontext_t emu_sched;
static inline void emu_to_sched(EmuFiber& f) { swapcontext(&f.ctx, &emu_sched); }
static inline void emu_to_fiber(EmuFiber& f) { swapcontext(&emu_sched, &f.ctx); }
static inline void emu_fiber_init(EmuFiber& f) {
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.data();
  f.ctx.uc_stack.ss_size = f.stack.size();
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, emu_entry, 0);
}
#endif

// arrives at barrier b; yields until its last participant arrives
static void emu_arrive(int b) {
  EmuBarrier& bar = emu_bars[b];
  if (++bar.have == bar.need) { bar.have = 0; bar.gen++; return; }
  EmuFiber& f = emu_fibers[emu_cur];
  f.waitBar = b;
  f.waitGen = bar.gen;
  emu_to_sched(f);
}

static void emu_entry() {
  emu_body();
  emu_fibers[emu_cur].done = true;
  emu_to_sched(emu_fibers[emu_cur]);  // never resumed
}

// fibers (256 KiB stacks) for blocks of n threads
static void emu_prepare(unsigned n) {
  emu_fibers.resize(n);
  for (auto& f : emu_fibers) f.stack.resize(256 * 1024);
}

// runs one block of n fibers (emu_prepare(n) first) until every one has ended; resume(t) is called before
// fiber t runs (to set threadIdx); false on a deadlock (a barrier that not every thread reaches)
template <class Resume>
static bool emu_run_block(unsigned n, Resume resume) {
  emu_bars.assign(1 + (n + 31u) / 32u, EmuBarrier{});
  emu_bars[0].need = n;
  for (unsigned w = 0; w < (n + 31u) / 32u; w++) emu_bars[1 + w].need = std::min(32u, n - 32u * w);
  for (unsigned t = 0; t < n; t++) {
    EmuFiber& f = emu_fibers[t];
    f.done = false;
    f.waitBar = -1;
    emu_fiber_init(f);
  }
  for (unsigned left = n; left > 0;) {
    bool progress = false;
    for (unsigned t = 0; t < n; t++) {
      EmuFiber& f = emu_fibers[t];
      if (f.done || (f.waitBar >= 0 && emu_bars[f.waitBar].gen == f.waitGen)) continue;
      f.waitBar = -1;
      emu_cur = t;
      resume(t);
      emu_to_fiber(f);
      progress = true;
      if (f.done) left--;
    }
    if (!progress) return false;
  }
  return true;
}
