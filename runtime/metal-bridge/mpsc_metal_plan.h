// mpsc_metal_plan.h: the shape of the host tables mpsc generates for the Metal bridge
// (compiler/codegen-metal/bridge_host.ts writes mpsc_metal_plan.inc, which fills them).
#ifndef MPSC_METAL_PLAN_H
#define MPSC_METAL_PLAN_H

#include <stdint.h>
#include "mpsc_model.h"

namespace mpsc_metal_plan {

enum { REGION_ARENA = 0, REGION_PERSISTENT = 1, REGION_INPUT = 2 };
enum { ACCESS_READ = 0, ACCESS_WRITE = 1, ACCESS_READ_WRITE = 2 };

/** one [[buffer(i)]] binding: the i-th entry of a step */
struct MetalBind {
  int32_t region;   // REGION_*; -1 ends the list
  int32_t slot;     // program input index (REGION_INPUT), persistent tensor index, or -1
  int64_t offset;   // byte offset in the arena / persistent block (0 for inputs)
  int64_t bytes;
  int32_t access;   // ACCESS_*
};

typedef int (*MetalCpuFn)(mpsc_ctx* ctx, void* const* ptrs, const mpsc_scalars* sc);

/** a kernel launch, or a CPU fallback step (cpu == true: ends the command buffer) */
struct MetalStep {
  bool cpu;
  const char* kernel;       // plain 16x16-tiled / element-wise kernel
  const char* mma_kernel;   // simdgroup_float8x8 variant for Apple7+ GPUs, or nullptr
  uint32_t groups[3];       // threadgroups per grid (dispatchThreadgroups)
  uint32_t tg[3];           // threads per threadgroup
  uint32_t tgmem;           // bytes of [[threadgroup(0)]] memory
  uint32_t mma_tg[3];
  uint32_t mma_tgmem;
  bool barrier;             // memoryBarrierWithScope:MTLBarrierScopeBuffers before this launch
  int32_t node;             // IR node id (messages)
  const char* op;
  int32_t nbind;
  const MetalBind* binds;   // nbind entries; the StepParams struct goes at index nbind
  MetalCpuFn cpu_fn;        // CPU fallback (compiler/codegen-cpu kernel), or nullptr
};

struct MetalProgram {
  const char* name;
  int32_t batch;
  const char* source;              // the .metal library text (newLibraryWithSource when no .metallib)
  const MetalStep* steps;
  int32_t nsteps;
  int32_t ninputs;
  const mpsc_tensor_desc* inputs;
  int32_t noutputs;
  const char* const* output_names;
  const int64_t* output_offsets;   // arena byte offsets of the scalar outputs (f32)
  int64_t arena_bytes;
  int32_t nlaunches;
  bool uses_bfloat;                // the library has bfloat buffers: compiled as MSL 3.1
};

struct MetalModel {
  const char* name;
  int32_t ntensors;
  const mpsc_tensor_desc* tensors;
  int64_t persistent_bytes;
  int32_t nprograms;
  const MetalProgram* programs;
  bool needs_bfloat;               // some program uses bfloat: the GPU is checked (mpsc_metal_caps.h)
};

extern const MetalModel kModel;

} // namespace mpsc_metal_plan

#endif
