// mpsc_metal_bridge.mm: the Metal backend's host side on macOS (Objective-C++, ARC).
//
// Implements the model ABI of mpsc_model.h (the same one the CPU backend and metal-emu
// implement) from the generated tables in mpsc_metal_plan.inc:
//  - MTLDevice discovery: MTLCreateSystemDefaultDevice(), which returns nil in command-line
//    processes that do not load CoreGraphics (CMakeLists.txt links it), else the first device of
//    MTLCopyAllDevices(); Apple7+ GPUs use the simdgroup_float8x8 GEMM variants, older ones the
//    plain 16x16-tiled kernels; a model with bfloat buffers (bf16 precision) needs MSL 3.1 and an
//    Apple6+ or Metal3 GPU (mpsc_metal_caps.h): otherwise creation fails with the reason, which
//    the session turns into a UserError (runtime/metal-bridge/gpu_caps.ts)
//  - per program a library: `mpsc_<program>.metallib` next to this module when the build
//    could run `xcrun metal` (compiled with -fno-fast-math), else newLibraryWithSource from the
//    embedded source with MTLMathModeSafe when built with the macOS 15 SDK and run on macOS 15+
//    (fastMathEnabled = NO otherwise: the SDK guard is compile time, @available run time)
//  - every pipeline state created once at load and cached; its maxTotalThreadsPerThreadgroup
//    is checked against the plan, and its threadExecutionWidth must be 32 (the SIMD-group size
//    the kernels' simd_sum / simdgroup_matrix code and the plan's threadgroup shapes assume)
//  - unified memory: the runtime's persistent block and arena (16 KiB aligned, 16 KiB
//    multiples) are wrapped without copying (newBufferWithBytesNoCopy, shared storage);
//    each program input has one shared buffer the batch is copied into
//  - one command buffer per program run, one concurrent compute encoder, a buffer memory
//    barrier only where the plan says a launch depends on an earlier one; CPU fallback
//    steps end the command buffer, wait for it, run the CPU kernel on the same shared
//    memory, and start the next one
//  - the host waits once per run: the ABI returns the run's loss and metrics, and the
//    persistent tensors are read directly from shared memory
//  - command-buffer errors and timeouts become error messages (ctx->error), never hangs. After
//    a timeout the GPU may still be writing the arena and the persistent block: the session is
//    poisoned (every later run fails at once) and backend_free waits for that command buffer
//    before the runtime frees the memory it wraps
//
// This file was written against Apple's documented API and has never been compiled or run
// by the mpsc authors (no Mac was available): see README.md.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <dlfcn.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mpsc_model.h"
#include "mpsc_metal_caps.h"
#include "mpsc_metal_plan.inc"

using namespace mpsc_metal_plan;

namespace {

struct ProgramState {
  id<MTLLibrary> library = nil;
  std::vector<id<MTLComputePipelineState>> pipelines;  // per step (nil for CPU steps)
  std::vector<id<MTLBuffer>> inputs;                   // per program input
};

struct Backend {
  id<MTLDevice> device = nil;
  std::string device_name;  // owned copy: mpsc_metal_memory hands out its c_str()
  id<MTLCommandQueue> queue = nil;
  id<MTLBuffer> persistent = nil;
  id<MTLBuffer> arena = nil;
  bool mma = false;
  double timeout_s = 120.0;
  std::vector<ProgramState> programs;
  // a command buffer that timed out and may still write the shared memory (see commit_and_wait)
  id<MTLCommandBuffer> in_flight = nil;
  std::string poisoned;  // non-empty: why every run fails
};

int64_t round_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

/** the SIMD-group width the generated kernels are written for */
constexpr NSUInteger kSimdWidth = 32;

/** the system default GPU; command-line processes that do not load CoreGraphics get nil from
 *  MTLCreateSystemDefaultDevice, so fall back to the first device Metal lists */
id<MTLDevice> find_device() {
  id<MTLDevice> d = MTLCreateSystemDefaultDevice();
  if (d) return d;
  NSArray<id<MTLDevice>>* all = MTLCopyAllDevices();
  return all.count > 0 ? all.firstObject : nil;
}

void set_error(mpsc_ctx* ctx, const std::string& msg) {
  std::snprintf(ctx->error, sizeof ctx->error, "%s", msg.c_str());
}

std::string ns_string(NSError* e) {
  if (!e) return "unknown error";
  NSString* d = e.localizedDescription ?: @"";
  return std::string(d.UTF8String ?: "") + " (" + std::string(e.domain.UTF8String ?: "") + " " + std::to_string((long)e.code) + ")";
}

/** directory of this module, where the build put the .metallib files */
std::string module_dir() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&mpsc_model), &info) && info.dli_fname) {
    std::string p = info.dli_fname;
    size_t s = p.rfind('/');
    if (s != std::string::npos) return p.substr(0, s);
  }
  return ".";
}

id<MTLLibrary> load_library(Backend* be, const MetalProgram& P, std::string& err) {
  NSError* e = nil;
  std::string metallib = module_dir() + "/mpsc_" + P.name + ".metallib";
  NSString* path = [NSString stringWithUTF8String:metallib.c_str()];
  if ([[NSFileManager defaultManager] fileExistsAtPath:path]) {
    id<MTLLibrary> lib = [be->device newLibraryWithURL:[NSURL fileURLWithPath:path] error:&e];
    if (lib) return lib;
    err = "cannot load " + metallib + ": " + ns_string(e);
    return nil;
  }
  MTLCompileOptions* opts = [MTLCompileOptions new];
  bool safe_math = false;
  // mathMode / mathFloatingPointFunctions exist only in the macOS 15 SDK (compile-time guard) and
  // only on macOS 15+ (run-time guard)
#if defined(__MAC_OS_X_VERSION_MAX_ALLOWED) && __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000
  if (@available(macOS 15.0, *)) {
    opts.mathMode = MTLMathModeSafe;
    opts.mathFloatingPointFunctions = MTLMathFloatingPointFunctionsPrecise;
    safe_math = true;
  }
#endif
  if (!safe_math) {
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
    opts.fastMathEnabled = NO;
#pragma clang diagnostic pop
  }
  // bfloat buffers (bf16 precision) are MSL 3.1; backend_create has checked the GPU and OS already
#if defined(__MAC_OS_X_VERSION_MAX_ALLOWED) && __MAC_OS_X_VERSION_MAX_ALLOWED >= 140000
  if (P.uses_bfloat) {
    if (@available(macOS 14.0, *)) opts.languageVersion = MTLLanguageVersion3_1;
  }
#endif
  id<MTLLibrary> lib = [be->device newLibraryWithSource:[NSString stringWithUTF8String:P.source] options:opts error:&e];
  if (!lib) err = std::string("the Metal compiler rejected the generated library of program ") + P.name + ": " + ns_string(e);
  return lib;
}

id<MTLComputePipelineState> pipeline(Backend* be, id<MTLLibrary> lib, const char* name, const uint32_t* tg, std::string& err) {
  id<MTLFunction> fn = [lib newFunctionWithName:[NSString stringWithUTF8String:name]];
  if (!fn) {
    err = std::string("kernel ") + name + " is missing from its library";
    return nil;
  }
  NSError* e = nil;
  id<MTLComputePipelineState> pso = [be->device newComputePipelineStateWithFunction:fn error:&e];
  if (!pso) {
    err = std::string("cannot create the pipeline of kernel ") + name + ": " + ns_string(e);
    return nil;
  }
  if (pso.threadExecutionWidth != kSimdWidth) {
    err = std::string("kernel ") + name + " runs SIMD-groups of " + std::to_string((unsigned long)pso.threadExecutionWidth) +
          " threads on this GPU, but the generated kernels assume " + std::to_string((unsigned long)kSimdWidth) +
          " (Apple GPUs); use --device cpu on this machine";
    return nil;
  }
  NSUInteger threads = NSUInteger(tg[0]) * tg[1] * tg[2];
  if (threads > pso.maxTotalThreadsPerThreadgroup) {
    err = std::string("kernel ") + name + " needs " + std::to_string((unsigned long)threads) + " threads per threadgroup but this GPU allows " +
          std::to_string((unsigned long)pso.maxTotalThreadsPerThreadgroup) + " for it";
    return nil;
  }
  return pso;
}

void* backend_create(mpsc_ctx* ctx) {
  @autoreleasepool {
    Backend* be = new Backend();
    be->device = find_device();
    if (!be->device) {
      set_error(ctx, "no Metal device: MTLCreateSystemDefaultDevice() returned nil and MTLCopyAllDevices() is empty (use --device cpu)");
      delete be;
      return nullptr;
    }
    be->device_name = be->device.name.UTF8String ?: "";
    if (kModel.needs_bfloat) {
      // a bf16 program: bfloat needs MSL 3.1 and an Apple6+ or Metal3 GPU (mpsc_metal_caps.h)
      MpscMetalGpu gpu = {be->device_name.c_str(), static_cast<bool>([be->device supportsFamily:MTLGPUFamilyApple6]), false, false};
#if defined(__MAC_OS_X_VERSION_MAX_ALLOWED) && __MAC_OS_X_VERSION_MAX_ALLOWED >= 130000
      if (@available(macOS 13.0, *)) gpu.metal3 = static_cast<bool>([be->device supportsFamily:MTLGPUFamilyMetal3]);
#endif
#if defined(__MAC_OS_X_VERSION_MAX_ALLOWED) && __MAC_OS_X_VERSION_MAX_ALLOWED >= 140000
      if (@available(macOS 14.0, *)) gpu.msl31 = true;
#endif
      char why[512];
      if (mpsc_bfloat_unsupported(gpu, why, sizeof why)) {
        set_error(ctx, why);
        delete be;
        return nullptr;
      }
    }
    const char* nomma = std::getenv("MPSC_METAL_NO_MMA");
    be->mma = [be->device supportsFamily:MTLGPUFamilyApple7] && !(nomma && nomma[0] == '1');
    if (const char* t = std::getenv("MPSC_METAL_TIMEOUT_S")) be->timeout_s = std::atof(t) > 0 ? std::atof(t) : be->timeout_s;
    be->queue = [be->device newCommandQueue];
    // unified memory: wrap the runtime's blocks (16 KiB aligned, lengths multiples of 16 KiB)
    be->persistent = [be->device newBufferWithBytesNoCopy:ctx->persistent
                                                   length:(NSUInteger)kModel.persistent_bytes
                                                  options:MTLResourceStorageModeShared
                                              deallocator:nil];
    int64_t arena_len = round_up(ctx->arena_bytes > 0 ? ctx->arena_bytes : 1, MPSC_BLOCK_ALIGN);
    be->arena = ctx->arena_bytes > 0 ? [be->device newBufferWithBytesNoCopy:ctx->arena
                                                                     length:(NSUInteger)arena_len
                                                                    options:MTLResourceStorageModeShared
                                                                deallocator:nil]
                                     : [be->device newBufferWithLength:16 options:MTLResourceStorageModeShared];
    if (!be->queue || !be->persistent || !be->arena) {
      set_error(ctx, "cannot create the Metal command queue or wrap the shared memory blocks");
      delete be;
      return nullptr;
    }
    be->programs.resize(kModel.nprograms);
    for (int p = 0; p < kModel.nprograms; ++p) {
      const MetalProgram& P = kModel.programs[p];
      ProgramState& S = be->programs[p];
      std::string err;
      S.library = load_library(be, P, err);
      if (!S.library) {
        set_error(ctx, err);
        delete be;
        return nullptr;
      }
      S.pipelines.resize(P.nsteps);
      for (int s = 0; s < P.nsteps; ++s) {
        const MetalStep& st = P.steps[s];
        if (st.cpu) continue;
        const bool use_mma = be->mma && st.mma_kernel;
        S.pipelines[s] = pipeline(be, S.library, use_mma ? st.mma_kernel : st.kernel, use_mma ? st.mma_tg : st.tg, err);
        if (!S.pipelines[s]) {
          set_error(ctx, std::string("program ") + P.name + ": " + err);
          delete be;
          return nullptr;
        }
      }
      for (int i = 0; i < P.ninputs; ++i) {
        id<MTLBuffer> b = [be->device newBufferWithLength:(NSUInteger)(P.inputs[i].numel * 4) options:MTLResourceStorageModeShared];
        if (!b) {
          set_error(ctx, "cannot allocate a Metal input buffer");
          delete be;
          return nullptr;
        }
        S.inputs.push_back(b);
      }
    }
    return be;
  }
}

void backend_free(mpsc_ctx*, void* backend) {
  @autoreleasepool {
    Backend* be = static_cast<Backend*>(backend);
    // the runtime frees the arena and persistent block after this returns: a command buffer that
    // timed out must be finished first (Metal ends a hung one with an error status itself)
    if (be->in_flight) [be->in_flight waitUntilCompleted];
    delete be;
  }
}

/** commits cb and waits for it with a timeout; false (ctx->error set) on a GPU error or timeout.
 *  On a timeout the command buffer may still write the shared memory: it is kept in
 *  be->in_flight and the session is poisoned instead of being reused. */
bool commit_and_wait(mpsc_ctx* ctx, Backend* be, id<MTLCommandBuffer> cb, const MetalProgram& P) {
  dispatch_semaphore_t done = dispatch_semaphore_create(0);
  [cb addCompletedHandler:^(id<MTLCommandBuffer>) {
    dispatch_semaphore_signal(done);
  }];
  [cb commit];
  int64_t ns = static_cast<int64_t>(be->timeout_s * 1e9);
  if (dispatch_semaphore_wait(done, dispatch_time(DISPATCH_TIME_NOW, ns)) != 0) {
    be->in_flight = cb;
    be->poisoned = std::string("the Metal command buffer of program ") + P.name + " did not complete within " +
                   std::to_string((int)be->timeout_s) + " s (a GPU hang, or set MPSC_METAL_TIMEOUT_S for very long steps); the GPU may " +
                   "still be writing the model's memory, so this session cannot run again (free it and create a new one)";
    set_error(ctx, be->poisoned);
    return false;
  }
  if (cb.status == MTLCommandBufferStatusError) {
    set_error(ctx, std::string("the Metal command buffer of program ") + P.name + " failed: " + ns_string(cb.error));
    return false;
  }
  return true;
}

id<MTLBuffer> region_buffer(Backend* be, ProgramState& S, const MetalBind& b) {
  if (b.region == REGION_ARENA) return be->arena;
  if (b.region == REGION_PERSISTENT) return be->persistent;
  return S.inputs[b.slot];
}

template <int PI>
int run_program(mpsc_ctx* ctx, const void* const* inputs, const mpsc_scalars* sc, double* outputs) {
  @autoreleasepool {
    Backend* be = static_cast<Backend*>(ctx->backend);
    const MetalProgram& P = kModel.programs[PI];
    ProgramState& S = be->programs[PI];
    if (!be->poisoned.empty()) {
      set_error(ctx, be->poisoned);
      return 1;
    }
    for (int i = 0; i < P.ninputs; ++i) std::memcpy(S.inputs[i].contents, inputs[i], (size_t)(P.inputs[i].numel * 4));
    id<MTLCommandBuffer> cb = [be->queue commandBuffer];
    id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoderWithDispatchType:MTLDispatchTypeConcurrent];
    for (int s = 0; s < P.nsteps; ++s) {
      const MetalStep& st = P.steps[s];
      if (st.cpu) {
        [enc endEncoding];
        if (!commit_and_wait(ctx, be, cb, P)) return 1;
        void* ptrs[32];
        for (int i = 0; i < st.nbind; ++i) {
          const MetalBind& b = st.binds[i];
          ptrs[i] = static_cast<char*>(region_buffer(be, S, b).contents) + b.offset;
        }
        if (st.cpu_fn(ctx, ptrs, sc) != 0) return 1;
        cb = [be->queue commandBuffer];
        enc = [cb computeCommandEncoderWithDispatchType:MTLDispatchTypeConcurrent];
        continue;
      }
      if (st.barrier) [enc memoryBarrierWithScope:MTLBarrierScopeBuffers];
      const bool use_mma = be->mma && st.mma_kernel;
      [enc setComputePipelineState:S.pipelines[s]];
      for (int i = 0; i < st.nbind; ++i) {
        const MetalBind& b = st.binds[i];
        [enc setBuffer:region_buffer(be, S, b) offset:(NSUInteger)b.offset atIndex:(NSUInteger)i];
      }
      [enc setBytes:sc length:sizeof(mpsc_scalars) atIndex:(NSUInteger)st.nbind];
      const uint32_t mem = use_mma ? st.mma_tgmem : st.tgmem;
      if (mem > 0) [enc setThreadgroupMemoryLength:(NSUInteger)round_up(mem, 16) atIndex:0];
      const uint32_t* tg = use_mma ? st.mma_tg : st.tg;
      [enc dispatchThreadgroups:MTLSizeMake(st.groups[0], st.groups[1], st.groups[2])
          threadsPerThreadgroup:MTLSizeMake(tg[0], tg[1], tg[2])];
    }
    [enc endEncoding];
    if (!commit_and_wait(ctx, be, cb, P)) return 1;
    for (int o = 0; o < P.noutputs; ++o) {
      float v;
      std::memcpy(&v, ctx->arena + P.output_offsets[o], 4);
      outputs[o] = v;
    }
    return 0;
  }
}

constexpr int MAX_PROGRAMS = 4;
const mpsc_run_fn kRuns[MAX_PROGRAMS] = {run_program<0>, run_program<1>, run_program<2>, run_program<3>};

mpsc_program_desc g_programs[MAX_PROGRAMS];
mpsc_model_desc g_model;

const mpsc_model_desc* build_desc() {
  static_assert(sizeof(mpsc_scalars) == 16, "StepParams layout");
  for (int p = 0; p < kModel.nprograms && p < MAX_PROGRAMS; ++p) {
    const MetalProgram& P = kModel.programs[p];
    g_programs[p] = mpsc_program_desc{P.name, P.batch, P.ninputs, P.inputs, P.noutputs, P.output_names, P.arena_bytes, P.nlaunches, kRuns[p]};
  }
  g_model = mpsc_model_desc{MPSC_ABI_VERSION, kModel.name, "metal", kModel.ntensors, kModel.tensors, kModel.persistent_bytes,
                            kModel.nprograms, g_programs, backend_create, backend_free};
  return &g_model;
}

} // namespace

extern "C" const mpsc_model_desc* mpsc_model(void) {
  static const mpsc_model_desc* d = build_desc();
  return d;
}

/** Metal memory, as torch.mps.current_allocated_memory() / driver_allocated_memory() report it:
 *  bytes currently allocated by this device, and the recommended working-set limit. 0 on success.
 *  *device_name stays valid until the session is freed (the backend owns the string). */
extern "C" int mpsc_metal_memory(mpsc_ctx* ctx, int64_t* current_allocated, int64_t* recommended_max, const char** device_name) {
  if (!ctx || !ctx->backend) return 1;
  Backend* be = static_cast<Backend*>(ctx->backend);
  if (current_allocated) *current_allocated = (int64_t)be->device.currentAllocatedSize;
  if (recommended_max) *recommended_max = (int64_t)be->device.recommendedMaxWorkingSetSize;
  if (device_name) *device_name = be->device_name.c_str();
  return 0;
}
