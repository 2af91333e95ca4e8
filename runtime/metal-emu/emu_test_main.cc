// metal-emu test driver: links a generated model (model_metal_emu.cc) with the shared runtime
// and runs a script of writes and program runs read from a file, dumping results. Also the CUDA
// backend's kernel-check driver (bench/cuda_check.ts links it with model_cuda.cu).
//   emu_test_main IN OUT
// IN  (little-endian): u32 nwrites, {u32 tensor, u32 bytes, data}*, u32 nruns,
//                      {u32 program, f32 lr, i32 t, u32 seed, u32 counter, u32 ninputs, {u32 bytes, data}*}*
// OUT: per run: u32 status (0 ok), then either {u32 len, message} or {u32 nout, f64*nout, u64 arena bytes, arena};
//      then u64 persistent bytes, persistent block.
#include "mpsc_model.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static FILE* in;
static uint32_t rd32() {
  uint32_t v;
  if (std::fread(&v, 4, 1, in) != 1) { std::fprintf(stderr, "emu_test_main: truncated input\n"); std::exit(2); }
  return v;
}
static std::vector<char> rdbytes(uint32_t n) {
  std::vector<char> b(n);
  if (n && std::fread(b.data(), 1, n, in) != n) { std::fprintf(stderr, "emu_test_main: truncated input\n"); std::exit(2); }
  return b;
}

int main(int argc, char** argv) {
  if (argc != 3) { std::fprintf(stderr, "usage: emu_test_main IN OUT\n"); return 2; }
  in = std::fopen(argv[1], "rb");
  FILE* out = std::fopen(argv[2], "wb");
  if (!in || !out) { std::fprintf(stderr, "emu_test_main: cannot open files\n"); return 2; }
  const mpsc_model_desc* m = mpsc_model();
  char err[512];
  const char* th = std::getenv("MPSC_METAL_EMU_THREADS");
  mpsc_ctx* ctx = mpsc_create(m, th ? std::atoi(th) : 1, err, sizeof err);
  if (!ctx) { std::fprintf(stderr, "emu_test_main: %s\n", err); return 2; }
  // a device backend (cuda) keeps the persistent block on the device: sync around host access
  if (mpsc_tensors_to_host(ctx) != 0) { std::fprintf(stderr, "emu_test_main: %s\n", mpsc_last_error(ctx)); return 2; }
  uint32_t nw = rd32();
  for (uint32_t i = 0; i < nw; ++i) {
    uint32_t t = rd32(), n = rd32();
    std::vector<char> b = rdbytes(n);
    std::memcpy(ctx->tensors[t], b.data(), n);
  }
  if (mpsc_tensors_from_host(ctx) != 0) { std::fprintf(stderr, "emu_test_main: %s\n", mpsc_last_error(ctx)); return 2; }
  uint32_t nr = rd32();
  for (uint32_t r = 0; r < nr; ++r) {
    uint32_t p = rd32();
    mpsc_scalars sc;
    uint32_t lr = rd32();
    std::memcpy(&sc.lr, &lr, 4);
    sc.t = static_cast<int32_t>(rd32());
    sc.seed = rd32();
    sc.counter = rd32();
    uint32_t ni = rd32();
    std::vector<std::vector<char>> bufs;
    std::vector<const void*> ptrs;
    for (uint32_t i = 0; i < ni; ++i) bufs.push_back(rdbytes(rd32()));
    for (auto& b : bufs) ptrs.push_back(b.data());
    const mpsc_program_desc& P = m->programs[p];
    std::vector<double> outs(P.n_outputs + 1);
    int rc = mpsc_run(ctx, static_cast<int32_t>(p), ptrs.data(), &sc, outs.data());
    uint32_t st = rc == 0 ? 0 : 1;
    std::fwrite(&st, 4, 1, out);
    if (rc != 0) {
      std::string msg = mpsc_last_error(ctx);
      uint32_t len = static_cast<uint32_t>(msg.size());
      std::fwrite(&len, 4, 1, out);
      std::fwrite(msg.data(), 1, len, out);
      continue;
    }
    uint32_t no = static_cast<uint32_t>(P.n_outputs);
    std::fwrite(&no, 4, 1, out);
    std::fwrite(outs.data(), 8, no, out);
    uint64_t ab = static_cast<uint64_t>(P.arena_bytes);
    std::fwrite(&ab, 8, 1, out);
    std::fwrite(ctx->arena, 1, ab, out);
  }
  if (mpsc_tensors_to_host(ctx) != 0) { std::fprintf(stderr, "emu_test_main: %s\n", mpsc_last_error(ctx)); return 2; }
  uint64_t pb = static_cast<uint64_t>(m->persistent_bytes);
  std::fwrite(&pb, 8, 1, out);
  std::fwrite(ctx->persistent, 1, pb, out);
  std::fclose(out);
  mpsc_free(ctx);
  return 0;
}
