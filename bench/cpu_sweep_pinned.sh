#!/bin/sh
# Issue 17's CPU sweep on a many-core machine (the GPU machine's Xeon): bench/compare.sh at 2 threads and at 8
# threads, run at the same time on disjoint sets of PHYSICAL cores (one logical CPU per core, from
# `lscpu -p=CPU,CORE`), so both fit one device call; each run compares mpsc and PyTorch side by side on its own
# cores, so the ratios stay like-for-like (both share the memory bandwidth with the other run: said in the log).
# With fewer than 10 physical cores, or with --serial, the two runs go one after the other (twice the time, but neither
# run shares the memory system with the other: the 2-thread MLP train step took 1.23 ms in the concurrent sweep on a
# 16-core Xeon and 1.00 ms in a native run alone on another host of that kind, bench/NOTES.md phase 28).
# Usage: bench/cpu_sweep_pinned.sh OUTDIR [--serial] [compare.sh args...]   (logs: OUTDIR/threads2.log, OUTDIR/threads8.log)
set -e
out=$1; shift
serial=0
if [ "${1:-}" = "--serial" ]; then serial=1; shift; fi
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
cpus=$(sh "$here/physical_cpus.sh")
n=$(echo "$cpus" | wc -l)
set2=$(echo "$cpus" | head -n 2 | paste -sd, -)
together=0
if [ "$n" -ge 10 ] && [ "$serial" = 0 ]; then
  together=1
  set8=$(echo "$cpus" | sed -n '3,10p' | paste -sd, -)
else
  set8=$(echo "$cpus" | head -n 8 | paste -sd, -)
fi
echo "physical cores: $n; 2-thread run on CPUs $set2, 8-thread run on CPUs $set8 ($([ $together = 1 ] && echo 'at the same time' || echo 'one after the other'))" | tee "$out/pinning.txt"
if [ "$together" = 1 ]; then
  taskset -c "$set2" sh "$here/compare.sh" --threads 2 "$@" > "$out/threads2.log" 2>&1 &
  p2=$!
  taskset -c "$set8" sh "$here/compare.sh" --threads 8 "$@" > "$out/threads8.log" 2>&1 || echo "8-thread run failed" >&2
  wait $p2 || echo "2-thread run failed" >&2
else
  taskset -c "$set2" sh "$here/compare.sh" --threads 2 "$@" > "$out/threads2.log" 2>&1 || true
  taskset -c "$set8" sh "$here/compare.sh" --threads 8 "$@" > "$out/threads8.log" 2>&1 || true
fi
tail -n 40 "$out/threads2.log" "$out/threads8.log"
