#!/bin/sh
# cuBLASLt fp32 vs 3xTF32 (compiler/codegen-cuda/tf32x3.ts) at the workloads' GEMM shapes on the GPU machine:
# time per call (3xTF32 with its two split kernels, and the splits alone; plain TF32 for contrast) and the
# max-norm relative error of sampled outputs against float64 (bench/tf32x3_gemm.cu). About 1 minute on an H200.
# Usage (from the project root, after `source .device-env/enter.sh`): bench/tf32x3_gemm.sh [REPS]
set -e
cd "$(dirname "$0")/.."
dir="${TMPDIR:-/tmp}/mpsc_tf32x3_gemm.$$"
mkdir -p "$dir"
node --import tsx -e "import('./compiler/codegen-cuda/tf32x3.ts').then((m) => process.stdout.write(m.tf32SplitHelper()))" > "$dir/tf32x3_split.h"
"${NVCC:-nvcc}" -O2 -std=c++17 -arch=sm_90a -I "$dir" bench/tf32x3_gemm.cu -o "$dir/tf32x3_gemm" -lcublasLt
"$dir/tf32x3_gemm" "$@"
rm -rf "$dir"
