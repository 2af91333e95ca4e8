#!/bin/sh
# Builds and runs the Hopper wgmma probes (see each file's header): bench/wgmma_probe.cu (the products a
# FlashAttention-3-style forward needs, on one tile, against the CPU; their rate) and, with --flash,
# bench/flash_wgmma_probe.cu (a causal flash forward on those products at GPT-2 small's shape, against the CPU, timed).
# Compiles anywhere nvcc is (`--build-only`, no GPU needed); runs on the GPU machine.
# Usage: bench/wgmma_probe.sh [--flash] [--build-only]
set -e
here=$(cd "$(dirname "$0")" && pwd)
nvcc=${MPSC_NVCC:-$(command -v nvcc || echo /usr/local/bin/nvcc)}
src=wgmma_probe
build_only=0
for a in "$@"; do
  case "$a" in
    --flash) src=flash_wgmma_probe ;;
    --build-only) build_only=1 ;;
    *) echo "usage: bench/wgmma_probe.sh [--flash] [--build-only]" >&2; exit 2 ;;
  esac
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$nvcc" -O2 -gencode arch=compute_90a,code=sm_90a -std=c++17 -o "$out/$src" "$here/$src.cu"
[ "$build_only" = 1 ] && { echo "$src: built"; exit 0; }
"$out/$src"
