// Test helper: the nvcc target flags every CUDA compile of the tests uses.
//
// The CMake build of a generated model targets CMAKE_CUDA_ARCHITECTURES 90a on Hopper (runtime/cuda/session.ts
// cudaArchitecture): one compute_90a PTX and its sm_90a code. nvcc 13's `-arch=sm_90a` also compiles a generic
// compute_90 PTX (a second cicc and ptxas pass per file) that no build of mpsc makes; these flags compile exactly
// the build's target, about 29% less compile time per file (bench/NOTES.md, CI time round 2).
export const NVCC_SM90A: readonly string[] = ['-gencode', 'arch=compute_90a,code=sm_90a'];

/**
 * A compile that checks a host-code variant (-DMPSC_CUBLASLT or not, -DMPSC_NCCL, graph-lane priorities) of generated
 * sources whose kernels the same test (or the one it names) compiles with NVCC_SM90A alone: the device code still goes
 * through cicc and ptxas for sm_90a (a kernel that does not compile still fails) but unoptimised, which took ~60% less
 * CPU time for char_gpt at bf16 (user 13.7 -> 5.6 s; bench/NOTES.md phase 33). Register and spill checks never use it.
 */
export const NVCC_HOST_VARIANT: readonly string[] = [...NVCC_SM90A, '-Xcicc', '-O0', '-Xptxas', '-O0'];

/**
 * A compile whose test asks only that nvcc accepts the text without a warning (test/cuda_dialect.test.ts: the shared
 * kernels of every example spec and op case in the CUDA dialect): NVCC_HOST_VARIANT's unoptimised cicc and ptxas, which
 * still parse, type-check and assemble every kernel for sm_90a (70 -> 47 s for that test on the 2-core machine,
 * bench/NOTES.md phase 34). The optimised compiles of the example specs' CUDA sources are test/cuda_codegen.test.ts's.
 */
export const NVCC_COMPILE_CHECK: readonly string[] = NVCC_HOST_VARIANT;
