#!/usr/bin/env bash
# Issue 15 done-when runs on the CPU: MNIST MLP and LeNet (specs/, 5 epochs each, the bundled digits)
# at precision fp32, fp16 and bf16, one run each; prints the final test accuracy and loss of each and
# the difference to fp32 (target: within 0.3 points). Optionally char_gpt (2000 steps) at fp32 and
# bf16 (target: bf16 test loss within 0.02 of fp32) with --gpt.
#   bash bench/precision_cpu.sh [--threads N] [--gpt] [--specs "mnist_mlp lenet"] [--summarize DIR]
# (--summarize DIR: only print the table of the runs already in DIR)
# Run folders go to a temporary folder (printed); the load average is printed with the results.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2
specs="mnist_mlp lenet"
gpt=0
summarize=0
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --specs) specs="$2"; shift 2 ;;
    --gpt) gpt=1; shift ;;
    --summarize) out="$2"; summarize=1; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 1 ;;
  esac
done
[ "$gpt" = 1 ] && specs="$specs char_gpt"
[ "$summarize" = 1 ] || out=$(mktemp -d /tmp/mpsc-precision-XXXXXX)
echo "runs in $out (threads $threads)"
for s in $specs; do
  [ "$summarize" = 1 ] && break
  for p in fp32 fp16 bf16; do
    [ "$s" = char_gpt ] && [ "$p" = fp16 ] && continue
    t0=$(date +%s)
    ./bin/mpsc.js train "specs/$s.model" --device cpu --threads "$threads" --precision "$p" --run-dir "$out/$s-$p" --json > "$out/$s-$p.json" 2> "$out/$s-$p.log"
    echo "$s $p: $(( $(date +%s) - t0 )) s"
  done
done
node -e '
const fs = require("fs"), path = require("path");
const dir = process.argv[1], specs = process.argv[2].split(" ");
for (const s of specs) {
  const r = {};
  for (const p of ["fp32", "fp16", "bf16"]) {
    const f = path.join(dir, `${s}-${p}.json`);
    if (fs.existsSync(f)) r[p] = JSON.parse(fs.readFileSync(f, "utf8"));
  }
  for (const p of Object.keys(r)) {
    const t = r[p], acc = t.test_accuracy, base = r.fp32;
    const d = p === "fp32" || !base ? "" : acc !== undefined ? `  (${((acc - base.test_accuracy) * 100).toFixed(2)} points vs fp32)` : `  (${(t.test_loss - base.test_loss).toFixed(4)} vs fp32)`;
    console.log(`${s.padEnd(10)} ${p}: test loss ${t.test_loss.toFixed(4)}${acc !== undefined ? `  accuracy ${(acc * 100).toFixed(2)}%` : ""}${d}  (${t.steps} steps, ${t.seconds.toFixed(0)} s of training)`);
  }
}' "$out" "$specs"
echo "load: $(uptime | sed 's/.*load average/load average/')"
