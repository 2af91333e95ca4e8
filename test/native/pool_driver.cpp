/*
 * pool_driver: stress test of the runtime's thread pool (runtime/cpp/mpsc_runtime.cc), built and run by
 * test/cpu_pool.test.ts. For several thread counts it runs many jobs of assorted sizes back to back and
 * checks that every index of every job is visited exactly once and that each chunk is one of the fixed
 * boundaries n*t/min(n,T) (what keeps results independent of which thread runs a chunk). A busy
 * background thread per core imitates another process competing for the cores.
 * Prints "ok <jobs>" and exits 0, or prints the first failure and exits 1. A watchdog thread reports a job that
 * has not finished after 40 s (thread count, job, n, chunks visited so far) and exits 3, so a hang says where it
 * is instead of running into the test's timeout (a 0.06-0.2 s run here, idle or loaded).
 */
#include "mpsc_model.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

static const mpsc_model_desc* g_model = nullptr;
extern "C" const mpsc_model_desc* mpsc_model(void) { return g_model; }

struct Job {
  int64_t n;
  int T;
  std::vector<std::atomic<int>>* hits;
  std::atomic<int>* bad_bounds;
};

/** exit 1 at once (the noise and watchdog threads are still running: no unwinding past them) */
[[noreturn]] static void fail() {
  std::fflush(stdout);
  std::_Exit(1);
}

static void visit(void* arg, int64_t b, int64_t e) {
  Job* j = static_cast<Job*>(arg);
  const int64_t jT = j->n < j->T ? j->n : j->T;
  bool found = false;
  for (int64_t t = 0; t < jT && !found; t++) found = (j->n * t / jT == b && j->n * (t + 1) / jT == e);
  if (!found) j->bad_bounds->fetch_add(1);
  for (int64_t i = b; i < e; i++) (*j->hits)[(size_t)i].fetch_add(1, std::memory_order_relaxed);
}

int main() {
  mpsc_model_desc model{};
  model.abi_version = MPSC_ABI_VERSION;
  model.model_name = "pool_driver";
  model.backend = "cpu";
  g_model = &model;
  std::atomic<bool> stop_noise{false};
  std::vector<std::thread> noise;
  for (unsigned k = 0; k < std::thread::hardware_concurrency(); k++)
    noise.emplace_back([&] { volatile uint64_t x = 0; while (!stop_noise.load(std::memory_order_relaxed)) x = x + 1; });
  int jobs = 0;
  // the job in flight, for the watchdog: T, rep, n and its hits
  std::atomic<int> cur_T{0}, cur_rep{-1};
  std::atomic<int64_t> cur_n{0};
  std::atomic<std::vector<std::atomic<int>>*> cur_hits{nullptr};
  std::atomic<bool> finished{false};
  std::thread watchdog([&] {
    int last = -2;
    auto since = std::chrono::steady_clock::now();
    while (!finished.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const int now = cur_T.load() * 1000 + cur_rep.load();
      if (now != last) { last = now; since = std::chrono::steady_clock::now(); continue; }
      if (std::chrono::steady_clock::now() - since > std::chrono::seconds(40)) {
        int64_t visited = 0;
        if (auto* h = cur_hits.load()) for (auto& x : *h) visited += x.load() > 0;
        std::printf("stuck: T=%d job %d (n=%lld) unfinished after 40 s, %lld of its indices visited\n", cur_T.load(),
                    cur_rep.load(), (long long)cur_n.load(), (long long)visited);
        std::fflush(stdout);
        std::_Exit(3);
      }
    }
  });
  for (int T : {2, 3, 8}) {
    char err[256] = {0};
    mpsc_ctx* ctx = mpsc_create(&model, T, err, sizeof err);
    if (!ctx) { std::printf("mpsc_create failed: %s\n", err); fail(); }
    std::atomic<int> bad{0};
    for (int rep = 0; rep < 400; rep++) {
      const int64_t n = 1 + (rep * 7919) % 97 + (rep % 5 == 0 ? 5000 : 0);
      std::vector<std::atomic<int>> hits((size_t)n);
      for (auto& h : hits) h.store(0);
      Job j{n, T, &hits, &bad};
      cur_hits.store(&hits);
      cur_n.store(n);
      cur_T.store(T);
      cur_rep.store(rep);
      mpsc_parallel_for(ctx, n, visit, &j);
      cur_hits.store(nullptr);
      jobs++;
      for (int64_t i = 0; i < n; i++)
        if (hits[(size_t)i].load() != 1) {
          std::printf("T=%d job %d (n=%lld): index %lld visited %d times\n", T, rep, (long long)n, (long long)i, hits[(size_t)i].load());
          fail();
        }
      if (bad.load()) { std::printf("T=%d job %d (n=%lld): a chunk outside the fixed boundaries\n", T, rep, (long long)n); fail(); }
    }
    mpsc_free(ctx);
  }
  finished = true;
  watchdog.join();
  stop_noise = true;
  for (auto& t : noise) t.join();
  std::printf("ok %d\n", jobs);
  return 0;
}
