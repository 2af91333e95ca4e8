#!/bin/sh
# The CUDA backend's cuBLASLt GEMM calls on the GPU machine (the `cublaslt` part of bench/cuda_check.ts):
# every linear / matmul case (odd shapes, all transposes, strided and shared batches, bias, fused unary fns
# run after the call, long K) built with cuBLASLt linked, against the float64 reference (fp32: 1e-4), with
# the path each case took (cuBLASLt's heuristic algorithm, or why its generated kernel ran); a table last.
# Usage (on the GPU machine, from the project root, after `source .device-env/enter.sh`): bench/cublaslt_check.sh
# Logs go to $OUT_DIR (default: a temporary folder). Exit status 1 when a case fails.
set -e
cd "$(dirname "$0")/.."
exec node --import tsx bench/cuda_check.ts cublaslt
