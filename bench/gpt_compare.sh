#!/bin/sh
# The CPU train step of the GPT workloads (default gpt_tiny_b32_t64: ../shared/bench/torch_gpt_ref.py's
# GPT, V = 65) side by side: PyTorch eager, PyTorch torch.compile (bench/torch_gpt_ref.py) and mpsc
# (bench/gpt_tiny.ts: the same model built in IR, `mpsc bench`'s timing), all at the same thread count,
# ROUNDS times interleaved, in one run. Prints each round's ms per step and ratio mpsc / best torch, then
# the medians. Target (issue 13): mpsc <= 0.5 x the best of eager and compiled.
# Usage: bench/gpt_compare.sh [--threads 2] [--rounds 3] [--workload gpt_tiny_b32_t64]
# PyTorch: $TORCH_PYTHON, else a venv .venv-bench made on first use from the local wheel index
# (python3 -m venv .venv-bench && .venv-bench/bin/pip install torch==2.13.0+cpu numpy).
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
threads=2 rounds=3 workload=gpt_tiny_b32_t64
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --workload) workload=$2; shift 2 ;;
    *) echo "gpt_compare.sh: unknown argument $1 (--threads N, --rounds N, --workload NAME)" >&2; exit 1 ;;
  esac
done
PY="${TORCH_PYTHON:-}"
if [ -z "$PY" ]; then
  if [ ! -x "$root/.venv-bench/bin/python" ]; then
    python3 -m venv "$root/.venv-bench"
    "$root/.venv-bench/bin/pip" install -q torch==2.13.0+cpu numpy
  fi
  PY="$root/.venv-bench/bin/python"
fi
"$PY" -c 'import torch; print("torch", torch.__version__, "threads", '"$threads"')'
export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
ms_of() { sed -n 's/.* \([0-9.]*\) ms\/step.*/\1/p' | tail -1; }
all=""
i=1
while [ "$i" -le "$rounds" ]; do
  eager=$("$PY" "$here/torch_gpt_ref.py" cpu --only "$workload" | ms_of)
  comp=$("$PY" "$here/torch_gpt_ref.py" cpu --compile --only "$workload" 2>/dev/null | ms_of)
  mpsc=$(cd "$root" && npx tsx bench/gpt_tiny.ts --workload "$workload" --threads "$threads" --steps 20 --warmup 5 | sed -n 's/.*"train":{"median_ms":\([0-9.]*\).*/\1/p')
  line=$(python3 -c "e,c,m=$eager,$comp,$mpsc; b=min(e,c); print(f'round $i: torch eager {e:.1f} ms, compiled {c:.1f} ms, mpsc {m:.1f} ms, mpsc/best torch {m/b:.3f}')")
  echo "$line"
  all="$all $eager,$comp,$mpsc"
  i=$((i + 1))
done
python3 - $all <<'PY'
import statistics, sys
rows = [tuple(map(float, a.split(','))) for a in sys.argv[1:]]
e, c, m = (statistics.median(r[k] for r in rows) for k in range(3))
print(f"median: torch eager {e:.1f} ms, compiled {c:.1f} ms, mpsc {m:.1f} ms; mpsc / best torch = {m / min(e, c):.3f} (target <= 0.5)")
PY
