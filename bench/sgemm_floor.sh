#!/bin/sh
# Measures this machine's sgemm rate with mpsc's fast kernel (runtime/cpp/fast/sgemm.h) at the
# reference workloads' shapes on 1 and 2 threads, plus the tight-FMA-loop peak. Pass --json for scripts.
# Usage: bench/sgemm_floor.sh [--json] [--no-peak] [--no-conv] [--list] [--cold] [--threads 1,2] [FILTER]
# --cold: each GEMM call timed alone with its operands flushed from the caches first (as inside a train step)
set -e
here=$(cd "$(dirname "$0")" && pwd)
out="${TMPDIR:-/tmp}/mpsc_sgemm_floor.$$"
CXX="${CXX:-g++}"
nice "$CXX" -O2 -march=native -std=c++17 -pthread -o "$out" "$here/sgemm_floor.cpp"
"$out" "$@"
rm -f "$out"
