#!/bin/sh
# The CUDA backend's correctness sweep on a GPU machine (bench/cuda_check.ts): every kernel case against
# the float64 reference (both GEMM variants, and with cuBLASLt), the cuBLASLt GEMM cases, 20-step parity of every example spec with the CPU backend,
# compute-sanitizer (memcheck, racecheck, synccheck) over one train step of each spec; prints a table last.
# Usage (on the GPU machine, from the project root): bench/cuda_check.sh [kernels] [cublaslt] [parity] [sanitize]
# Logs go to $OUT_DIR (default: a temporary folder). Exit status 1 when a check fails.
set -e
cd "$(dirname "$0")/.."
exec node --import tsx bench/cuda_check.ts "$@"
