#!/bin/sh
# Registers, shared memory and spills per generated CUDA kernel (nvcc -Xptxas -v), for a spec.
# Usage: bench/cuda_ptxas.sh SPEC [ARCH]     e.g. bench/cuda_ptxas.sh specs/lenet.model 90a
# Needs nvcc ($MPSC_NVCC, /usr/local/bin/nvcc or PATH); no GPU. Prints one line per kernel:
#   kernel  registers  shared-bytes  spill-stores  spill-loads  stack-bytes
set -e
spec=${1:?usage: bench/cuda_ptxas.sh SPEC [ARCH]}
arch=${2:-90a}
nvcc=${MPSC_NVCC:-$(command -v nvcc || echo /usr/local/bin/nvcc)}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
node "$root/bin/mpsc.js" build "$spec" --device cuda --no-compile -o "$dir/out" >/dev/null
cp "$dir/out/cuda/src/model_kernels.cuh" "$dir/k.cu"
"$nvcc" -gencode arch=compute_${arch},code=sm_${arch} -fmad=true -c "$dir/k.cu" -o "$dir/k.o" -Xptxas -v 2>"$dir/log"
awk '
  /Compiling entry function/ { k = $0; sub(/.*entry function ./, "", k); sub(/. for .*/, "", k) }
  /bytes stack frame/ { n = split($0, f, /[ ,]+/); for (i = 1; i < n; i++) { if (f[i+1] == "bytes" && f[i+2] == "stack") stack = f[i]; if (f[i+2] == "spill" && f[i+3] == "stores") ss = f[i]; if (f[i+2] == "spill" && f[i+3] == "loads") sl = f[i] } }
  /Used [0-9]+ registers/ { r = $0; sub(/.*Used /, "", r); sub(/ registers.*/, "", r); sm = 0; if (match($0, /[0-9]+ bytes smem/)) { sm = substr($0, RSTART, RLENGTH); sub(/ bytes smem/, "", sm) }
                            printf "%-24s %4s regs %6s B smem  spills %s/%s  stack %s\n", k, r, sm, ss, sl, stack }
' "$dir/log"
