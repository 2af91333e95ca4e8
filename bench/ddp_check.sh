#!/bin/sh
# Data-parallel training on the GPU machine (bench/ddp_check.py): `check` (one GPU: --gpus 1 through NCCL
# against the single-GPU path, identical losses expected) and `scaling` (a multi-GPU kind: the issue 18
# scaling runs and the N = 2 equality). Prints one verdict line last; exit 1 on a failure.
# Usage (on the GPU machine, from the project root): bench/ddp_check.sh [check] [scaling] [--steps N]
set -e
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
exec python3 bench/ddp_check.py "$@"
