#!/bin/sh
# Every cuBLASLt heuristic algorithm at gpt_tiny's fp32 GEMM shapes, timed against heuristic #0 (the one
# runtime/cuda/mpsc_cublaslt.cpp takes), on the GPU machine (bench/cublaslt_algos.cu). Seconds on an H200.
# Usage (from the project root): bench/cublaslt_algos.sh
set -e
cd "$(dirname "$0")/.."
dir="${TMPDIR:-/tmp}/mpsc_cublaslt_algos.$$"
mkdir -p "$dir"
"${NVCC:-nvcc}" -O2 -std=c++17 -x cu bench/cublaslt_algos.cu -o "$dir/cublaslt_algos" -lcublasLt
"$dir/cublaslt_algos"
