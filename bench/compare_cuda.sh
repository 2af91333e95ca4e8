#!/bin/sh
# mpsc --device cuda vs PyTorch (eager, torch.compile, hand-captured CUDA graph) on the GPU machine, for the
# workloads of issue 14 (bench/*.model); prints ceilings, then ms/step, ratio to the best PyTorch, TFLOP/s.
# Usage (on the GPU machine, from the project root, after `source .device-env/enter.sh`):
#   bench/compare_cuda.sh [--skip-compile] [--steps N] [--profile K] [--torch-ref DIR] [workload ...]
set -e
cd "$(dirname "$0")/.."
exec python3 bench/compare_cuda.py "$@"
