#!/bin/sh
# A/B of mpsc's CPU speed between two checkouts of mpsc, interleaved in one run (the issue-12 check
# that a refactor did not move the speed): for each round and workload, `mpsc bench --json` of
# checkout A, then of checkout B, same thread count; prints each round's train / forward ms and
# the median ratio B/A per workload.
# Usage: bench/ab_checkouts.sh DIR_A DIR_B [--threads 2] [--rounds 3] [workload ...]
# (workloads: bench/<name>.model of checkout B; default the three CPU reference workloads).
# Both checkouts need node_modules (or run under .device-env/enter.sh on the GPU machine).
set -e
[ $# -ge 2 ] || { echo "usage: bench/ab_checkouts.sh DIR_A DIR_B [--threads T] [--rounds R] [workload ...]" >&2; exit 1; }
A=$(cd "$1" && pwd); B=$(cd "$2" && pwd); shift 2
exec python3 "$B/bench/ab_checkouts.py" "$A" "$B" "$@"
