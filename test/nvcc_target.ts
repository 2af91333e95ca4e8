// Test helper: the nvcc target flags every CUDA compile of the tests uses.
//
// The CMake build of a generated model targets CMAKE_CUDA_ARCHITECTURES 90a on Hopper (runtime/cuda/session.ts
// cudaArchitecture): one compute_90a PTX and its sm_90a code. nvcc 13's `-arch=sm_90a` also compiles a generic
// compute_90 PTX (a second cicc and ptxas pass per file) that no build of mpsc makes; these flags compile exactly
// the build's target, about 29% less compile time per file (bench/NOTES.md, CI time round 2).
export const NVCC_SM90A: readonly string[] = ['-gencode', 'arch=compute_90a,code=sm_90a'];
