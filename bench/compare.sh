#!/bin/sh
# Runs PyTorch (/usr/bin/python3, OMP_NUM_THREADS=T) and `mpsc bench --threads T --json` side by side on the
# reference workloads and prints torch ms, mpsc ms and the ratio mpsc/torch per workload (train step and forward).
# Usage: bench/compare.sh [--threads 2] [--rounds 1] [--steps N] [--json] [workload ...]
# Needs Debian's torch: apt-get install python3-torch libopenblas0-pthread
set -e
here=$(cd "$(dirname "$0")" && pwd)
PY="${TORCH_PYTHON:-/usr/bin/python3}"
if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "compare.sh: $PY cannot import torch (apt-get install python3-torch libopenblas0-pthread)" >&2
  exit 1
fi
exec "$PY" "$here/compare.py" --python "$PY" "$@"
