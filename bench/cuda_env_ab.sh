#!/bin/sh
# One spec's CUDA train step under several environments (generator switches, fusions off, ...), interleaved rounds
# on the GPU machine: the A/B tool behind bench/NOTES.md's env-switch measurements. See bench/cuda_env_ab.py.
# Usage (GPU machine, after `source .device-env/enter.sh`):
#   bench/cuda_env_ab.sh SPEC NAME[:VAR=value;VAR=value] ... [--rounds 3] [--steps 30] [--profile-dir DIR]
# e.g. bench/cuda_env_ab.sh bench/gpt2_124m_b16_t1024.model base 'noln:MPSC_CUDA_FUSE_OFF=remat_ln'
set -e
cd "$(dirname "$0")/.."
exec python3 bench/cuda_env_ab.py "$@"
