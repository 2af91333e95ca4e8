#!/bin/sh
# mpsc against PyTorch on the CPU, side by side in one run: train step and forward pass of the MLP, LeNet,
# seed CNN and GPT tiny, PyTorch eager and torch.compile, at each thread count of --threads, plus the FLOP
# floor at the machine's measured sgemm rate; one table at the end (bench/compare.py; bench/NOTES.md).
# Usage: bench/compare.sh [--threads 2,8] [--rounds 3] [--steps N] [--no-compile] [--no-forward] [--json] [workload ...]
# PyTorch: $TORCH_PYTHON if set; else .venv-bench/bin/python, made on first use from the machine's local wheel
# index (torch==2.13.0+cpu) when /opt/pypi/simple exists; else python3 when it imports torch (the GPU
# machine's PyTorch 2.11). Debian's python3-torch 1.13 is refused as an anchor unless named in TORCH_PYTHON.
# mpsc: `node bin/mpsc.js bench` (on the GPU machine: `source .device-env/enter.sh` first).
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
PY="${TORCH_PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x "$root/.venv-bench/bin/python" ]; then
    PY="$root/.venv-bench/bin/python"
  elif [ -d /opt/pypi/simple ]; then
    echo "compare.sh: creating .venv-bench with torch 2.13 from the local wheel index (once)" >&2
    python3 -m venv "$root/.venv-bench"
    "$root/.venv-bench/bin/pip" install -q --index-url file:///opt/pypi/simple --find-links /opt/wheels torch==2.13.0+cpu numpy
    PY="$root/.venv-bench/bin/python"
  else
    PY=python3
    if ! "$PY" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null; then
      echo "compare.sh: no PyTorch >= 2 found (set TORCH_PYTHON to a python that imports torch)" >&2
      exit 1
    fi
  fi
fi
if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "compare.sh: $PY cannot import torch (set TORCH_PYTHON, or remove .venv-bench to rebuild it)" >&2
  exit 1
fi
exec "$PY" "$here/compare.py" --python "$PY" "$@"
