#!/bin/sh
# One model's CUDA train step under several build environments (generator switches, fusions off, ...), A/B in one
# process with interleaved rounds: the tool behind bench/NOTES.md's env-switch measurements. See bench/cuda_env_ab.ts.
# Usage (GPU machine, after `source .device-env/enter.sh`):
#   bench/cuda_env_ab.sh (SPEC | --workload W) [--precision bf16] [--rounds 3] [--steps 30] [--warmup 5] NAME[:VAR=value;VAR=value] ...
# e.g. bench/cuda_env_ab.sh bench/gpt2_124m_b16_t1024.model base 'ce16:MPSC_CUDA_CE_UNROLL=16'
set -e
cd "$(dirname "$0")/.."
exec node --import tsx bench/cuda_env_ab.ts "$@"
