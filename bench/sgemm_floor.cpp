// sgemm_floor.cpp: this machine's single-precision rate with mpsc's fast sgemm (runtime/cpp/fast),
// at the shapes of the reference workloads, on 1 and 2 threads (or --threads LIST), plus a tight-FMA-loop
// peak estimate. Build and run: bench/sgemm_floor.sh   (one line per measurement; --json for one JSON object)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>
#include <algorithm>
#include <atomic>
#include <functional>

#include "../runtime/cpp/fast/conv.h"

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#endif

using namespace mpsc_fast;
using clk = std::chrono::steady_clock;

static double now_s() { return std::chrono::duration<double>(clk::now().time_since_epoch()).count(); }
static double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef detail::vf vec;  // the micro-kernel's register: 16 floats with AVX-512, else 8

// 12 independent FMA chains of VW lanes per thread: the most a 2-FMA-pipe, 4-cycle-latency core can retire.
static double fma_peak_one(long iters) {
  vec m = detail::splatv(0.9999999f);
  vec c = detail::splatv(1e-8f);
  vec a0 = m + 0.f, a1 = m + 1.f, a2 = m + 2.f, a3 = m + 3.f, a4 = m + 4.f, a5 = m + 5.f;
  vec a6 = m + 6.f, a7 = m + 7.f, a8 = m + 8.f, a9 = m + 9.f, a10 = m + 10.f, a11 = m + 11.f;
  double t = now_s();
  for (long it = 0; it < iters; ++it) {
    a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c; a4 = a4 * m + c; a5 = a5 * m + c;
    a6 = a6 * m + c; a7 = a7 * m + c; a8 = a8 * m + c; a9 = a9 * m + c; a10 = a10 * m + c; a11 = a11 * m + c;
    __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5));
  }
  t = now_s() - t;
  vec s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
  if (s[0] == 12345.f) printf("!");
  return 12.0 * VW * 2 * iters / t / 1e9;
}

static double fma_peak_sample(int threads) {
  const long iters = 100000000;
  std::vector<double> r(threads);
  std::vector<std::thread> th;
  double t = now_s();
  for (int i = 0; i < threads; ++i) th.emplace_back([&, i] { r[i] = fma_peak_one(iters); });
  for (auto& x : th) x.join();
  t = now_s() - t;
  return 12.0 * VW * 2 * iters * threads / t / 1e9;
}

// best of 5 samples: the machine may be shared, the peak is what the core can do when it gets a slot
static double fma_peak(int threads) {
  double best = 0;
  for (int i = 0; i < 5; ++i) best = std::max(best, fma_peak_sample(threads));
  return best;
}


// A persistent pool (workers spin on a generation counter), like the runtime's: no thread start per call.
struct Pool {
  int n;
  std::atomic<long> gen{0};
  std::atomic<int> done{0};
  std::atomic<bool> quit{false};
  std::function<void(int)> job;
  std::vector<std::thread> th;
  explicit Pool(int threads) : n(threads) {
    for (int i = 1; i < n; ++i)
      th.emplace_back([this, i] {
        long seen = 0;
        for (;;) {
          long g;
          while ((g = gen.load(std::memory_order_acquire)) == seen && !quit.load(std::memory_order_relaxed)) std::this_thread::yield();
          if (quit.load()) return;
          seen = g;
          job(i);
          done.fetch_add(1, std::memory_order_acq_rel);
        }
      });
  }
  void run(const std::function<void(int)>& f) {
    job = f;
    done.store(0);
    gen.fetch_add(1, std::memory_order_acq_rel);
    job(0);
    while (done.load(std::memory_order_acquire) != n - 1) std::this_thread::yield();
  }
  ~Pool() {
    quit = true;
    for (auto& t : th) t.join();
  }
};

// one workspace per part, allocated and first touched by the pool thread that runs the part (as the runtime's
// part_scratch: on a multi-socket host its pages then sit on that thread's node, not all on the caller's)
static std::vector<std::vector<float>> own_workspaces(Pool& pool, size_t bytes) {
  std::vector<std::vector<float>> ws(pool.n);
  pool.run([&](int p) { ws[p].assign(bytes / 4 + 16, 0.0f); });
  return ws;
}

struct Shape { const char* name; bool ta, tb; int64_t M, N, K; };

// --cold: every operand written back and evicted from all cache levels before each timed call, as a GEMM
// inside a training step finds them (its output region was last touched a step earlier, its input has left
// L2; bench/NOTES.md phase 11). Returns false where this build has no cache-line flush.
static bool flush_lines(const void* p, size_t bytes) {
#if defined(__x86_64__) || defined(__i386__)
  for (size_t i = 0; i < bytes; i += 64) _mm_clflush((const char*)p + i);
  _mm_mfence();
  return true;
#elif defined(__aarch64__)
  for (size_t i = 0; i < bytes; i += 64) asm volatile("dc civac, %0" ::"r"((const char*)p + i) : "memory");
  asm volatile("dsb sy" ::: "memory");
  return true;
#else
  (void)p, (void)bytes;
  return false;
#endif
}

struct Rate { double median, best; };

// GFLOP/s over `reps` timed samples (median and best), parts run on a persistent pool of `threads`;
// cold: each sample is one call after flush_lines on A, B, C and the workspaces (3x the samples), timed by the
// thread CPU clock at 1 thread (a single call of ~1 ms is too short for wall time on a shared machine)
static Rate time_gemm(const Shape& s, int threads, int reps, bool cold = false) {
  const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
  std::vector<float> A(s.M * s.K), B(s.K * s.N), C(s.M * s.N);
  for (size_t i = 0; i < A.size(); ++i) A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
  for (size_t i = 0; i < B.size(); ++i) B[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
  const size_t wsb = sgemm_workspace_bytes(s.M, s.N, s.K);
  auto aligned = [](std::vector<float>& v) {
    return (void*)(((uintptr_t)v.data() + 63) & ~uintptr_t(63));
  };
  Pool pool(threads);
  std::vector<std::vector<float>> ws = own_workspaces(pool, wsb);
  auto run_once = [&] {
    pool.run([&](int p) {
      sgemm_part(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), s.N, nullptr, p,
                 threads, aligned(ws[p]));
    });
  };
  const double flop = 2.0 * s.M * s.N * s.K;
  // enough inner calls that one sample is >= ~20 ms (thread start cost amortised over large shapes only)
  int inner = std::max(1, (int)(30e9 * 0.03 / flop * threads));
  for (int i = 0; i < 3; ++i) run_once();
  std::vector<double> g;
  if (cold) {
    for (int r = 0; r < 3 * reps; ++r) {
      flush_lines(A.data(), A.size() * 4);
      flush_lines(B.data(), B.size() * 4);
      flush_lines(C.data(), C.size() * 4);
      for (auto& w : ws) flush_lines(w.data(), w.size() * 4);
      double t = threads == 1 ? thread_cpu_s() : now_s();
      run_once();
      g.push_back(flop / ((threads == 1 ? thread_cpu_s() : now_s()) - t) / 1e9);
    }
    std::sort(g.begin(), g.end());
    return Rate{g[g.size() / 2], g.back()};
  }
  for (int r = 0; r < reps; ++r) {
    double t = now_s();
    for (int i = 0; i < inner; ++i) run_once();
    t = now_s() - t;
    g.push_back(flop * inner / t / 1e9);
  }
  std::sort(g.begin(), g.end());
  return Rate{g[g.size() / 2], g.back()};
}


struct ConvCase { const char* name; int64_t N, C, H, W, O, K, pad; };

// GFLOP/s (median, best) of one conv pass over a whole batch, parts on a persistent pool
static Rate time_conv(const ConvCase& c, ConvPass pass, int threads, int reps) {
  const Conv2dShape s = conv2d_shape(c.N, c.C, c.H, c.W, c.O, c.K, c.K, 1, 1, c.pad, c.pad, 1, 1, 1);
  std::vector<float> x(c.N * c.C * c.H * c.W, 0.5f), w(c.O * c.C * c.K * c.K, 0.25f), b(c.O, 0.1f);
  std::vector<float> y(c.N * c.O * s.OH * s.OW, 0.1f), dx(x.size()), dw(w.size());
  const size_t wsb = conv2d_scratch_bytes(s, pass);
  std::vector<float> shared(conv2d_grad_weight_shared_bytes(s) / 4 + 16);
  auto aligned = [](std::vector<float>& v) { return (void*)(((uintptr_t)v.data() + 63) & ~uintptr_t(63)); };
  Pool pool(threads);
  std::vector<std::vector<float>> ws = own_workspaces(pool, wsb);
  auto run_once = [&] {
    pool.run([&](int p) {
      if (pass == CONV_FORWARD) conv2d_forward_part(s, x.data(), w.data(), b.data(), true, y.data(), p, threads, aligned(ws[p]));
      else if (pass == CONV_GRAD_INPUT) conv2d_grad_input_part(s, y.data(), w.data(), dx.data(), p, threads, aligned(ws[p]));
      else conv2d_grad_weight_part(s, y.data(), x.data(), dw.data(), p, threads, aligned(ws[p]), 0, shared.data());
    });
    if (pass == CONV_GRAD_WEIGHT && conv2d_grad_weight_phases(s) > 1)  // the batch chunks' sums, added in order
      pool.run([&](int p) { conv2d_grad_weight_part(s, y.data(), x.data(), dw.data(), p, threads, aligned(ws[p]), 1, shared.data()); });
  };
  const double flop = 2.0 * c.N * c.O * s.OH * s.OW * c.C * c.K * c.K;
  int inner = std::max(1, (int)(30e9 * 0.03 / flop * threads));
  run_once();
  std::vector<double> g;
  for (int r = 0; r < reps; ++r) {
    double t = now_s();
    for (int i = 0; i < inner; ++i) run_once();
    t = now_s() - t;
    g.push_back(flop * inner / t / 1e9);
  }
  std::sort(g.begin(), g.end());
  return Rate{g[g.size() / 2], g.back()};
}

int main(int argc, char** argv) {
  // args: [--json] [--no-peak] [--no-conv] [--list] [--cold] [--threads 1,2] [FILTER]: FILTER runs only the
  // measurements whose name contains it; --list prints the GEMM shapes as JSON and measures nothing; --cold
  // times each GEMM call with its operands flushed from the caches first (flush_lines)
  bool json = false, peak = true, conv = true, list = false, cold = false;
  std::string filter;
  std::vector<int> nthreads = {1, 2};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") json = true;
    else if (a == "--no-peak") peak = false;
    else if (a == "--no-conv") conv = false;
    else if (a == "--list") list = true;
    else if (a == "--cold") {
      cold = true;
      if (!flush_lines(&cold, 1)) {
        fprintf(stderr, "sgemm_floor: --cold needs a cache-line flush, which this build's architecture lacks\n");
        return 1;
      }
    }
    else if (a == "--threads" && i + 1 < argc) {
      nthreads.clear();
      for (const char* p = argv[++i]; *p;) {
        char* end;
        const long t = strtol(p, &end, 10);
        if (end == p || t < 1 || t > 1024) {
          fprintf(stderr, "sgemm_floor: --threads takes a comma-separated list of counts >= 1, e.g. 1,2,8 (got %s)\n", argv[i]);
          return 1;
        }
        nthreads.push_back((int)t);
        p = *end == ',' ? end + 1 : end;
      }
    } else filter = a;
  }
  auto wanted = [&](const std::string& name) { return filter.empty() || name.find(filter) != std::string::npos; };
  // the GEMMs of the reference workloads (train step: forward, grad-input, grad-weight)
  const Shape shapes[] = {
      {"mlp fc1 fwd 256x256x784 (x W^T)", false, true, 256, 256, 784},
      {"mlp fc1 dW 256x784x256 (dY^T X)", true, false, 256, 784, 256},
      {"lenet conv2 fwd 64x196x288 (per image)", false, false, 64, 196, 288},
      {"lenet fc1 fwd 64x128x3136 (x W^T)", false, true, 64, 128, 3136},
      {"lenet fc1 dX 64x3136x128 (dY W)", false, false, 64, 3136, 128},
      {"seed conv2 fwd 128x4096x576 (per image)", false, false, 128, 4096, 576},
      {"seed conv2 dW 128x576x4096 (dY col^T)", false, true, 128, 576, 4096},
      {"seed conv2 dX 576x4096x128 (W^T dY)", true, false, 576, 4096, 128},
      {"gpt fc fwd 2048x512x128 (x W^T)", false, true, 2048, 512, 128},
      {"gpt proj fwd 2048x128x512 (x W^T)", false, true, 2048, 128, 512},
      {"gpt fc dX 2048x128x512 (dY W)", false, false, 2048, 128, 512},
      {"gpt fc dW 512x128x2048 (dY^T X)", true, false, 512, 128, 2048},
      {"gpt qkv fwd 2048x384x128 (x W^T)", false, true, 2048, 384, 128},
      {"square 512x512x512", false, false, 512, 512, 512},
      {"square 1024x1024x1024", false, false, 1024, 1024, 1024},
  };
  if (list) {
    std::string out = "[";
    for (const Shape& s : shapes) {
      char buf[256];
      snprintf(buf, sizeof buf, "%s{\"name\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"ta\":%d,\"tb\":%d}",
               out.size() > 1 ? "," : "", s.name, (long long)s.M, (long long)s.N, (long long)s.K, (int)s.ta, (int)s.tb);
      out += buf;
    }
    printf("%s]\n", out.c_str());
    return 0;
  }
  std::string js = "{\"peak\":{";
  for (int t : nthreads) {
    if (!peak) break;
    double p = fma_peak(t);
    if (!json) printf("fma peak          threads=%d  %8.1f GFLOP/s\n", t, p);
    js += (t != nthreads.front() ? "," : "") + std::string("\"") + std::to_string(t) + "\":" + std::to_string(p);
  }
  js += "},\"sgemm\":[";
  bool firstj = true;
  for (const Shape& s : shapes) {
    if (!wanted(s.name)) continue;
    for (int t : nthreads) {
      Rate g = time_gemm(s, t, 7, cold);
      if (!json) printf("%-42s threads=%d %s median %6.1f  best %6.1f GFLOP/s\n", s.name, t, cold ? "cold" : "    ", g.median, g.best);
      char buf[512];
      snprintf(buf, sizeof buf,
               "%s{\"name\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"ta\":%d,\"tb\":%d,\"threads\":%d,\"gflops\":%.2f,"
               "\"best\":%.2f,\"cold\":%s}",
               firstj ? "" : ",", s.name, (long long)s.M, (long long)s.N, (long long)s.K, (int)s.ta, (int)s.tb, t, g.median,
               g.best, cold ? "true" : "false");
      js += buf;
      firstj = false;
    }
  }
  js += "]";
  // the convolutions of the reference workloads, whole batch, through conv.h
  const ConvCase convs[] = {
      {"lenet conv1 b64 1->32 28x28", 64, 1, 28, 28, 32, 3, 1},
      {"lenet conv2 b64 32->64 14x14", 64, 32, 14, 14, 64, 3, 1},
      {"seed conv1 b32 3->64 64x64", 32, 3, 64, 64, 64, 3, 1},
      {"seed conv2 b32 64->128 64x64", 32, 64, 64, 64, 128, 3, 1},
  };
  const char* pass_names[] = {"fwd", "dX", "dW"};
  js += ",\"conv\":[";
  firstj = true;
  for (const ConvCase& c : convs)
    for (int pass = 0; pass < 3 && conv; ++pass) {
      if (pass == CONV_GRAD_INPUT && c.C <= 3) continue;  // first layers: no grad-input in training
      if (!wanted(std::string(c.name) + " " + pass_names[pass])) continue;
      for (int t : nthreads) {
        Rate g = time_conv(c, (ConvPass)pass, t, 5);
        if (!json) printf("%-34s %-3s     threads=%d  median %6.1f  best %6.1f GFLOP/s\n", c.name, pass_names[pass], t, g.median, g.best);
        char buf[512];
        snprintf(buf, sizeof buf, "%s{\"name\":\"%s\",\"pass\":\"%s\",\"threads\":%d,\"gflops\":%.2f,\"best\":%.2f}",
                 firstj ? "" : ",", c.name, pass_names[pass], t, g.median, g.best);
        js += buf;
        firstj = false;
      }
    }
  js += "]}";
  if (json) printf("%s\n", js.c_str());
  return 0;
}
