// mpsc_nccl.h: the CUDA backend's NCCL calls for data-parallel training (runtime/ddp, issue 18),
// behind a small C++ interface that does not include nccl.h (so the generated host code compiles
// where NCCL is absent). The implementation, mpsc_nccl.cpp, is compiled and linked only where CMake
// finds nccl.h and libnccl (then MPSC_NCCL is defined for the generated host code); see
// runtime/native/build.ts and docs/cuda.md.
//
// Consumes: the group's size, this process's rank and the unique id rank 0 made (shared by the
//           launcher, runtime/ddp); the device addresses and lengths of the gradient accumulators.
// Produces: a communicator (ncclCommInitRank) and, per optimizer step, one NCCL group of in-place
//           ncclAvg all-reduces on the compute stream, in the order given (deterministic).
// Relies on: the process sees exactly its own GPU (CUDA_VISIBLE_DEVICES set by the launcher), and
//           NCCL_NVLS_ENABLE=0 in the environment (NVLink multicast off).
#pragma once
#include <cuda_runtime.h>
#include <cstddef>
#include <cstdint>

struct MpscNccl;

/** NCCL's version as major.minor.patch (ncclGetVersion), for messages */
void mpsc_nccl_version(char* out, size_t outlen);
/** a new unique id into `out` (at most len bytes); returns its length, or -1 with `err` set */
int mpsc_nccl_unique_id(unsigned char* out, int len, char* err, size_t errlen);
/** joins the group (blocks until all nranks joined); null with `err` set on failure */
MpscNccl* mpsc_nccl_init(int nranks, int rank, const unsigned char* id, int len, char* err, size_t errlen);
/** averages n float tensors over the ranks, in place, as one NCCL group on stream st; false with `err` set */
bool mpsc_nccl_allreduce_avg(MpscNccl* c, float* const* ptrs, const int64_t* counts, int n, cudaStream_t st, char* err, size_t errlen);
/** frees the communicator (ncclCommAbort after a failed call, else ncclCommDestroy); null is a no-op */
void mpsc_nccl_destroy(MpscNccl* c);
