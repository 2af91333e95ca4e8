#!/bin/sh
# gpt_tiny's small fp32 products: a cp.async-pipelined FFMA kernel's tile variants against cuBLASLt's fp32 call, each
# timed as R dependent launches in one CUDA graph (bench/small_ffma.cu says how). About 30 s on an H100.
# Usage (GPU machine, from the project root): bench/small_ffma.sh [R]
set -e
cd "$(dirname "$0")/.."
dir="${TMPDIR:-/tmp}/mpsc_small_ffma.$$"
mkdir -p "$dir"
"${NVCC:-nvcc}" -O3 -std=c++17 -arch=sm_90a bench/small_ffma.cu -o "$dir/small_ffma" -lcublasLt
"$dir/small_ffma" "$@"
rm -rf "$dir"
