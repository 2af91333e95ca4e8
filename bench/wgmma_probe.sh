#!/bin/sh
# Builds and runs bench/wgmma_probe.cu (Hopper wgmma products for a FlashAttention-3-style forward, checked
# against the CPU; see the file's header). Compiles anywhere nvcc is (`--build-only` here, no GPU needed);
# runs on the GPU machine. Usage: bench/wgmma_probe.sh [--build-only]
set -e
here=$(cd "$(dirname "$0")" && pwd)
nvcc=${MPSC_NVCC:-$(command -v nvcc || echo /usr/local/bin/nvcc)}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$nvcc" -O2 -gencode arch=compute_90a,code=sm_90a -std=c++17 -o "$out/wgmma_probe" "$here/wgmma_probe.cu"
[ "$1" = "--build-only" ] && { echo "wgmma_probe: built"; exit 0; }
"$out/wgmma_probe"
