/*
 * native_step_driver.cc: times a generated CPU model's train_step without Node (for machines with
 * a C++ compiler but no Node, e.g. the accelerator host's Xeon). Links the generated model.cc
 * (mpsc_model()) with runtime/cpp/mpsc_runtime.cc; written next to them by
 * `npx tsx bench/gpt_tiny.ts --emit DIR`, whose build.sh compiles it with the backend's flags.
 *   ./step THREADS STEPS WARMUP INT_RANGE [PROGRAM]
 * PROGRAM: train_step (default) or eval (the forward pass bench/compare.sh times as "forward").
 * Parameters are filled with a fixed-seed uniform(-0.1, 0.1) (layernorm-like tensors of rank 1
 * named *.weight with 1), i32 inputs with uniform ints in [0, INT_RANGE); prints one JSON line
 * with the median and min ms per train step, and the process CPU time (user + system, all threads,
 * spinning pool workers included) per timed step: on a shared machine the wall time includes the
 * time the threads waited for a core, the CPU time does not (at 1 thread it is the step's work);
 * and "state": a 64-bit FNV-1a hash of the whole persistent block after the last step (parameters
 * and optimizer state), to check that two builds or two thread counts give the same bits.
 */
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "mpsc_model.h"

static uint32_t rng_state = 12345u;
static uint32_t next_u32() {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 17;
  rng_state ^= rng_state << 5;
  return rng_state;
}

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s THREADS STEPS WARMUP INT_RANGE [PROGRAM]\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[1]), steps = std::atoi(argv[2]), warmup = std::atoi(argv[3]), range = std::atoi(argv[4]);
  const mpsc_model_desc* m = mpsc_model();
  char err[512];
  mpsc_ctx* ctx = mpsc_create(m, threads, err, sizeof err);
  if (!ctx) {
    std::fprintf(stderr, "mpsc_create: %s\n", err);
    return 1;
  }
  for (int i = 0; i < m->n_tensors; i++) {
    const mpsc_tensor_desc& t = m->tensors[i];
    if (t.kind != MPSC_PARAM || t.dtype != MPSC_F32) continue;
    float* p = static_cast<float*>(mpsc_tensor_ptr(ctx, t.name));
    const std::string name = t.name;
    const bool ones = t.rank == 1 && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    for (int64_t j = 0; j < t.numel; j++) p[j] = ones ? 1.0f : ((next_u32() >> 8) * (1.0f / 16777216.0f) - 0.5f) * 0.2f;
  }
  const char* program = argc > 5 ? argv[5] : "train_step";
  const mpsc_program_desc* prog = nullptr;
  int32_t index = -1;
  for (int i = 0; i < m->n_programs; i++)
    if (std::strcmp(m->programs[i].name, program) == 0) prog = &m->programs[index = i];
  if (!prog) {
    std::fprintf(stderr, "no program '%s' in model %s\n", program, m->model_name);
    return 1;
  }
  std::vector<std::vector<int32_t>> ints;
  std::vector<std::vector<float>> floats;
  std::vector<const void*> inputs;
  for (int i = 0; i < prog->n_inputs; i++) {
    const mpsc_tensor_desc& t = prog->inputs[i];
    if (t.dtype == MPSC_I32) {
      ints.emplace_back(t.numel);
      for (auto& v : ints.back()) v = (int32_t)(next_u32() % (uint32_t)range);
      inputs.push_back(ints.back().data());
    } else {
      floats.emplace_back(t.numel);
      for (auto& v : floats.back()) v = (next_u32() >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
      inputs.push_back(floats.back().data());
    }
  }
  std::vector<double> outs(prog->n_outputs > 0 ? prog->n_outputs : 1);
  std::vector<double> ms;
  auto cpu_ms = [] {
    rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-3;
  };
  double cpu0 = 0;
  for (int s = 0; s < warmup + steps; s++) {
    if (s == warmup) cpu0 = cpu_ms();
    mpsc_scalars sc{1e-3f, s + 1, 0u, (uint32_t)s};
    const auto t0 = std::chrono::steady_clock::now();
    if (mpsc_run(ctx, index, inputs.data(), &sc, outs.data()) != 0) {
      std::fprintf(stderr, "run: %s\n", ctx->error);
      return 1;
    }
    const double d = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (s >= warmup) ms.push_back(d);
  }
  const double cpu = (cpu_ms() - cpu0) / steps;
  std::sort(ms.begin(), ms.end());
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0; i < m->persistent_bytes; i++) h = (h ^ ctx->persistent[i]) * 1099511628211ull;
  std::printf("{\"model\":\"%s\",\"threads\":%d,\"%s\":{\"median_ms\":%.3f,\"min_ms\":%.3f,\"cpu_ms\":%.3f,\"steps\":%d},\"loss\":%.5f,\"state\":\"%016llx\"}\n",
              m->model_name, threads, std::strcmp(program, "train_step") == 0 ? "train" : program, ms[ms.size() / 2], ms[0], cpu, steps, outs[0], (unsigned long long)h);
  mpsc_free(ctx);
  return 0;
}
