#!/bin/sh
# Per-kernel CPU profiles of workloads' train step and forward pass without Node's timing around them: each
# bench/<workload>.model as a native driver (bench/emit_native.ts: generated model.cc + runtime + driver, built
# with the backend's flags), run at each thread count under `taskset` on the first T physical cores (one logical
# CPU per core, as bench/cpu_sweep_pinned.sh picks them) with MPSC_PROFILE=all (every kernel's total and calls).
# Usage: bench/cpu_profile.sh OUTDIR [--threads 2,8] [--steps 200] [--programs train_step,eval] WORKLOAD...
# Logs: OUTDIR/<workload>_<program>_t<T>.log (the kernel table, then the driver's JSON line); a summary last.
# Needs node (bin/mpsc.js's sources through tsx: on the GPU machine `source .device-env/enter.sh` first) and g++.
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out=$1; shift
threads=2,8; steps=200; programs=train_step,eval
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --programs) programs=$2; shift 2 ;;
    *) break ;;
  esac
done
if [ -z "$out" ] || [ $# -eq 0 ]; then
  echo "usage: bench/cpu_profile.sh OUTDIR [--threads 2,8] [--steps 200] [--programs train_step,eval] WORKLOAD..." >&2
  exit 2
fi
mkdir -p "$out"
cpus=$(sh "$here/physical_cpus.sh")
for w in "$@"; do
  spec="$here/$w.model"
  [ -f "$spec" ] || { echo "cpu_profile: no $spec" >&2; exit 2; }
  dir="$out/native_$w"
  (cd "$root" && node --import tsx bench/emit_native.ts "$spec" "$dir" > /dev/null) && sh "$dir/build.sh"
done
warm=$((steps / 10 + 5))
for w in "$@"; do
  for t in $(echo "$threads" | tr , ' '); do
    set_t=$(echo "$cpus" | head -n "$t" | paste -sd, -)
    for p in $(echo "$programs" | tr , ' '); do
      log="$out/${w}_${p}_t$t.log"
      MPSC_PROFILE=all taskset -c "$set_t" sh "$out/native_$w/run.sh" "$t" "$steps" "$warm" "$p" > "$log" 2>&1 || echo "failed: $log" >&2
    done
  done
done
for f in "$out"/*_t*.log; do
  printf '%s: %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")"
  grep -m 6 'calls' "$f" | sed 's/^/    /'
done
