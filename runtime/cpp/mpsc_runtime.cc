/*
 * mpsc_runtime.cc: the host runtime shared by every backend (see mpsc_model.h).
 * Owns: the persistent block, the arena, the thread pool (workers live across runs).
 */
#include "mpsc_model.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

namespace {

thread_local bool tl_in_parallel = false;

int64_t round_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

void* aligned_zeroed(int64_t bytes) {
  size_t n = (size_t)round_up(bytes < 1 ? 1 : bytes, MPSC_BLOCK_ALIGN);
  void* p = std::aligned_alloc(MPSC_BLOCK_ALIGN, n);
  if (p) std::memset(p, 0, n);
  return p;
}

/** a short busy wait (about `us` microseconds) for `ready`, before a caller falls back to a condition variable:
 *  kernels of a step follow each other within microseconds, while a condition-variable wake-up costs tens */
template <class Ready>
inline bool spin_until(Ready&& ready, int us) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  for (int i = 0;; i++) {
    if (ready()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > end) return false;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
}

/** Fixed pool with claimable chunks. A job over [0, n) is cut into jT = min(n, T) chunks at the fixed
 *  boundaries n*t/jT (set by n and T only, so the results never depend on who runs a chunk), and every
 *  participant, the caller included, claims the next unclaimed chunk until none is left. A worker the OS
 *  has not scheduled yet (another process busy on its core) therefore claims nothing and delays nothing:
 *  the caller runs its chunks instead of waiting a time slice for it (issue 16, bug 4).
 *  `claim` packs (job generation << 20 | next chunk), so a worker that wakes late can never claim a chunk
 *  of a newer job with the old job's function; `done` counts finished chunks of the current job.
 *  Workers and the caller spin briefly (SPIN_US) before sleeping on the condition variables.
 *  A spinning worker picks the job up without the mutex: the job's fields are atomics stored before `agen`
 *  (release) and read after it (acquire). A field read while a newer job overwrites it is harmless: `claim`
 *  also holds the job's chunk count, so a chunk is only run after a successful claim of its own job's
 *  generation and count, which can succeed only while that job is unfinished, and a newer job (the only
 *  writer of the fields) starts only after every chunk of this one is done. With 8 threads
 *  every job start used to take the mutex once per worker, one after the other (issue 17: the 8-thread
 *  steps of ~15-140 jobs). The mutex and condition variables remain for sleeping and waking only. */
struct Pool {
  static constexpr int SPIN_US = 100;
  // claim = (generation mod 2^32) << 32 | chunks << 16 | next chunk: T <= 2^16 - 1 threads
  static constexpr int CHUNK_BITS = 16;
  int T;
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable cv_start, cv_done;
  uint64_t generation = 0;  // under mu: the sleepers' predicate
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> agen{0};
  std::atomic<uint64_t> claim{0};
  std::atomic<int> done{0};
  std::atomic<int> sleepers{0};  // workers blocked (or about to block) on cv_start
  std::atomic<bool> caller_waits{false};  // the caller blocked (or about to block) on cv_done
  // the current job (stored before agen moves)
  std::atomic<int64_t> n{0};
  std::atomic<mpsc_range_fn> fn{nullptr};
  std::atomic<void*> arg{nullptr};

  explicit Pool(int threads) : T(threads < 65535 ? threads : 65535) {
    for (int w = 1; w < T; w++) workers.emplace_back([this] { loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop.store(true, std::memory_order_release);
      ++generation;
      agen.fetch_add(1, std::memory_order_release);
    }
    cv_start.notify_all();
    for (auto& t : workers) t.join();
  }
  static uint64_t claimWord(uint64_t gen, int jT) { return (gen & 0xffffffffu) << 32 | (uint64_t)jT << CHUNK_BITS; }
  /** claims and runs chunks of job `gen` (jn, jfn, jarg: its fields as read, trusted only once a claim succeeds) until none is left */
  int work(uint64_t gen, int64_t jn, mpsc_range_fn jfn, void* jarg) {
    int ran = 0;
    const uint64_t mask = (uint64_t(1) << CHUNK_BITS) - 1;
    for (;;) {
      uint64_t c = claim.load(std::memory_order_acquire);
      int t, jT;
      do {
        if ((c >> 32) != (gen & 0xffffffffu)) return ran;
        jT = (int)((c >> CHUNK_BITS) & mask);
        t = (int)(c & mask);
        if (t >= jT) return ran;
      } while (!claim.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire));
      const int64_t b = jn * t / jT, e = jn * (t + 1) / jT;
      if (e > b) jfn(jarg, b, e);
      ran++;
      // the last chunk wakes the caller only if it went to sleep (seq_cst pairs with the caller's store + re-check)
      if (done.fetch_add(1, std::memory_order_seq_cst) + 1 == jT && caller_waits.load(std::memory_order_seq_cst)) {
        std::lock_guard<std::mutex> lk(mu);  // pairs with the caller's predicate check under mu
        cv_done.notify_one();
      }
    }
  }
  void loop() {
    tl_in_parallel = true;
    uint64_t seen = 0;
    for (;;) {
      if (!spin_until([&] { return agen.load(std::memory_order_acquire) != seen; }, SPIN_US)) {
        std::unique_lock<std::mutex> lk(mu);
        sleepers.fetch_add(1, std::memory_order_seq_cst);
        cv_start.wait(lk, [&] { return generation != seen; });
        sleepers.fetch_sub(1, std::memory_order_relaxed);
      }
      if (stop.load(std::memory_order_acquire)) return;
      const uint64_t gen = agen.load(std::memory_order_acquire);
      seen = gen;
      work(gen, n.load(std::memory_order_relaxed), fn.load(std::memory_order_relaxed), arg.load(std::memory_order_relaxed));
    }
  }
  void run(int64_t jn, mpsc_range_fn jfn, void* jarg) {
    const int jT = (int)(jn < T ? jn : T);
    n.store(jn, std::memory_order_relaxed);
    fn.store(jfn, std::memory_order_relaxed);
    arg.store(jarg, std::memory_order_relaxed);
    done.store(0, std::memory_order_relaxed);
    caller_waits.store(false, std::memory_order_relaxed);
    uint64_t gen;
    {
      // under mu only for the sleepers: generation is their predicate; a worker registers as a sleeper under mu
      // before checking it, so either it sees the new generation or the notify below finds it counted
      std::lock_guard<std::mutex> lk(mu);
      gen = ++generation;
      claim.store(claimWord(gen, jT), std::memory_order_release);
      agen.store(gen, std::memory_order_seq_cst);
    }
    if (sleepers.load(std::memory_order_seq_cst) > 0) cv_start.notify_all();
    tl_in_parallel = true;
    work(gen, jn, jfn, jarg);
    tl_in_parallel = false;
    // every chunk is claimed now; wait for the ones other threads are still running
    if (spin_until([&] { return done.load(std::memory_order_acquire) == jT; }, SPIN_US)) return;
    std::unique_lock<std::mutex> lk(mu);
    caller_waits.store(true, std::memory_order_seq_cst);
    cv_done.wait(lk, [&] { return done.load(std::memory_order_seq_cst) == jT; });
  }
};

void set_err(char* err, size_t len, const char* msg) {
  if (err && len) std::snprintf(err, len, "%s", msg);
}

}  // namespace

extern "C" {

mpsc_ctx* mpsc_create(const mpsc_model_desc* model, int32_t threads, char* err, size_t errlen) {
  if (!model) { set_err(err, errlen, "mpsc_create: model is NULL"); return nullptr; }
  if (model->abi_version != MPSC_ABI_VERSION) {
    char m[160];
    std::snprintf(m, sizeof m, "mpsc_create: model ABI version %d, runtime expects %d (rebuild the model)", (int)model->abi_version, MPSC_ABI_VERSION);
    set_err(err, errlen, m);
    return nullptr;
  }
  if (threads <= 0) {
    unsigned hc = std::thread::hardware_concurrency();
    threads = hc ? (int32_t)hc : 1;
  }
  mpsc_ctx* ctx = new (std::nothrow) mpsc_ctx();
  if (!ctx) { set_err(err, errlen, "mpsc_create: out of memory"); return nullptr; }
  ctx->model = model;
  ctx->threads = threads;
  int64_t arena = 0;
  for (int i = 0; i < model->n_programs; i++)
    if (model->programs[i].arena_bytes > arena) arena = model->programs[i].arena_bytes;
  ctx->arena_bytes = arena;
  ctx->persistent = (unsigned char*)aligned_zeroed(model->persistent_bytes);
  ctx->arena = (unsigned char*)aligned_zeroed(arena);
  ctx->tensors = (void**)std::calloc(model->n_tensors > 0 ? model->n_tensors : 1, sizeof(void*));
  if (!ctx->persistent || !ctx->arena || !ctx->tensors) {
    set_err(err, errlen, "mpsc_create: out of memory allocating the model's buffers");
    mpsc_free(ctx);
    return nullptr;
  }
  for (int i = 0; i < model->n_tensors; i++) ctx->tensors[i] = ctx->persistent + model->tensors[i].offset;
  if (threads > 1) {
    try {
      ctx->pool = new Pool(threads);
    } catch (...) {
      set_err(err, errlen, "mpsc_create: could not start worker threads");
      mpsc_free(ctx);
      return nullptr;
    }
  }
  if (model->backend_create) {
    ctx->backend = model->backend_create(ctx);
    if (!ctx->backend) {
      set_err(err, errlen, ctx->error[0] ? ctx->error : "mpsc_create: backend initialisation failed");
      mpsc_free(ctx);
      return nullptr;
    }
  }
  return ctx;
}

int32_t mpsc_tensor_index(const mpsc_model_desc* model, const char* name) {
  for (int i = 0; i < model->n_tensors; i++)
    if (std::strcmp(model->tensors[i].name, name) == 0) return i;
  return -1;
}

void* mpsc_tensor_ptr(mpsc_ctx* ctx, const char* name) {
  int32_t i = mpsc_tensor_index(ctx->model, name);
  return i < 0 ? nullptr : ctx->tensors[i];
}

int mpsc_tensors_to_host(mpsc_ctx* ctx) {
  if (!ctx || !ctx->backend || !ctx->model->backend_to_host) return 0;
  return ctx->model->backend_to_host(ctx, ctx->backend);
}

int mpsc_tensors_from_host(mpsc_ctx* ctx) {
  if (!ctx || !ctx->backend || !ctx->model->backend_from_host) return 0;
  return ctx->model->backend_from_host(ctx, ctx->backend);
}

static bool has_collective(mpsc_ctx* ctx, bool hook) {
  if (hook && ctx->backend) return true;
  std::snprintf(ctx->error, sizeof ctx->error, "the %s backend has no collective library (data-parallel collectives run on the host for it)", ctx->model->backend);
  return false;
}

int32_t mpsc_collective_id(mpsc_ctx* ctx, unsigned char* id, int32_t len) {
  if (!ctx) return -1;
  ctx->error[0] = 0;
  if (!has_collective(ctx, ctx->model->backend_collective_id != nullptr)) return -1;
  return ctx->model->backend_collective_id(ctx, ctx->backend, id, len);
}

int mpsc_collective_init(mpsc_ctx* ctx, int32_t nranks, int32_t rank, const unsigned char* id, int32_t len) {
  if (!ctx) return 1;
  ctx->error[0] = 0;
  if (!has_collective(ctx, ctx->model->backend_collective_init != nullptr)) return 1;
  return ctx->model->backend_collective_init(ctx, ctx->backend, nranks, rank, id, len);
}

int mpsc_allreduce_grads(mpsc_ctx* ctx) {
  if (!ctx) return 1;
  ctx->error[0] = 0;
  if (!has_collective(ctx, ctx->model->backend_allreduce_grads != nullptr)) return 1;
  return ctx->model->backend_allreduce_grads(ctx, ctx->backend);
}

int32_t mpsc_program_index(const mpsc_model_desc* model, const char* name) {
  for (int i = 0; i < model->n_programs; i++)
    if (std::strcmp(model->programs[i].name, name) == 0) return i;
  return -1;
}

int mpsc_run(mpsc_ctx* ctx, int32_t program, const void* const* inputs, const mpsc_scalars* scalars, double* outputs) {
  if (!ctx) return 1;
  ctx->error[0] = 0;
  if (program < 0 || program >= ctx->model->n_programs) {
    std::snprintf(ctx->error, sizeof ctx->error, "mpsc_run: no program with index %d", (int)program);
    return 1;
  }
  return ctx->model->programs[program].run(ctx, inputs, scalars, outputs);
}

const char* mpsc_last_error(const mpsc_ctx* ctx) { return ctx ? ctx->error : "mpsc: no context"; }

void mpsc_free(mpsc_ctx* ctx) {
  if (!ctx) return;
  if (ctx->backend && ctx->model->backend_free) ctx->model->backend_free(ctx, ctx->backend);
  delete static_cast<Pool*>(ctx->pool);
  std::free(ctx->persistent);
  std::free(ctx->arena);
  std::free(ctx->tensors);
  delete ctx;
}

void mpsc_parallel_for(mpsc_ctx* ctx, int64_t n, mpsc_range_fn fn, void* arg) {
  if (n <= 0) return;
  if (!ctx || !ctx->pool || n < 2 || ctx->threads <= 1 || tl_in_parallel) {
    fn(arg, 0, n);
    return;
  }
  static_cast<Pool*>(ctx->pool)->run(n, fn, arg);
}

}  // extern "C"
