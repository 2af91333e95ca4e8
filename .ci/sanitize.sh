#!/usr/bin/env bash
# Memory-safety job (issue 7). Builds the generated CPU model and the host runtime with
# AddressSanitizer + UBSan (through MPSC_CXXFLAGS, in a cache folder of its own) and runs, under
# the sanitizer runtimes:
#   1. a short training (3 steps + the final evaluation, which includes an eval_tail batch) of every
#      spec given (default: specs/*.model), each spec's data source swapped for synthetic() data of
#      the same input shapes so the run is a few seconds even with the sanitizers;
#   2. a negative control (test/fixtures/reliability/asan_control.ts): a module with a deliberate
#      heap overflow must abort with an ASan report, or the job fails;
#   3. the boundary probe (test/fixtures/reliability/boundary_probe.ts): bad batches, out-of-range
#      labels / embedding ids and bad tensor writes must be refused before native code reads them.
# Node itself is not instrumented, so the runtimes are preloaded (libasan first); leak detection is
# off because node does not free everything at exit. Any sanitizer report fails the job.
# Usage: .ci/sanitize.sh [SPEC...]          exit 0 clean, 1 on any failure
set -uo pipefail
cd "$(dirname "$0")/.."

asan=$(g++ -print-file-name=libasan.so)
ubsan=$(g++ -print-file-name=libubsan.so)
if [ ! -e "$asan" ] || [ ! -e "$ubsan" ]; then
  echo "sanitize: libasan/libubsan not found next to g++ ($asan, $ubsan)" >&2
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/mpsc-sanitize-XXXXXX")
trap 'rm -rf "$work"' EXIT
export MPSC_CACHE_DIR="${MPSC_SANITIZE_CACHE_DIR:-$PWD/.mpsc-cache/sanitize}"
export MPSC_CXXFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
export CI=1
san_env=(LD_PRELOAD="$asan $ubsan"
  ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:detect_stack_use_after_return=0:exitcode=86"
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=87")

# the modules' builds need no sanitizer runtime in the compilers: cmake (cmake-js finds it on PATH) starts
# without LD_PRELOAD, and so do make, g++ and the linker under it (with libasan preloaded they ran 2-3x slower;
# the module is the same: the flags above instrument it)
if real_cmake=$(command -v cmake); then
  mkdir -p "$work/bin"
  printf '#!/bin/sh\nunset LD_PRELOAD\nexec "%s" "$@"\n' "$real_cmake" > "$work/bin/cmake"
  chmod +x "$work/bin/cmake"
  export PATH="$work/bin:$PATH"
fi

if [ $# -gt 0 ]; then specs=("$@"); else specs=(specs/*.model); fi
failed=0
ran=0

check_log() { # name, exit code, log file
  local name=$1 rc=$2 log=$3
  if [ "$rc" -ne 0 ] || grep -qE 'ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer|SUMMARY: (Address|UndefinedBehavior)Sanitizer' "$log"; then
    echo "sanitize: FAIL $name (exit $rc)"
    grep -E -A30 'ERROR: AddressSanitizer|runtime error:' "$log" | head -60
    tail -20 "$log"
    failed=1
  else
    echo "sanitize: ok   $name"
  fi
}

# the jobs (a spec's training, the probe, the control) run side by side, as many at a time as there are CPUs
# (MPSC_SANITIZE_JOBS overrides): most of each is the instrumented module's build, mostly one compiler process;
# modules of different keys build into separate cache folders, one key's racing builds are settled by a rename
max_jobs=${MPSC_SANITIZE_JOBS:-$(nproc 2>/dev/null || echo 2)}
run_job() { # log file, command...: runs the command in the background (waiting for a free slot first); its status goes to LOG.rc
  local log=$1
  shift
  while [ "$(jobs -rp | wc -l)" -ge "$max_jobs" ]; do wait -n; done
  ( "$@" > "$log" 2>&1; echo $? > "$log.rc" ) &
}

for spec in "${specs[@]}"; do
  name=$(basename "$spec" .model)
  copy="$work/$name.model"
  # same network, loss and optimizer; small synthetic data (test_size 5 with batch 4: one eval batch + an eval_tail of 1)
  sed -E 's/data: *[a-z_]+\([^)]*\)/data: synthetic(train_size: 32, test_size: 5, seed: 1)/' "$spec" > "$copy"
  run_job "$work/$name.log" env "${san_env[@]}" node bin/mpsc.js train "$copy" --device cpu --steps 3 --batch 4 --threads 2 \
    --checkpoint-dir "$work/ck-$name" --log-every 1
done
run_job "$work/probe.log" env "${san_env[@]}" node --import tsx test/fixtures/reliability/boundary_probe.ts
# negative control: a module with a deliberate heap overflow must be caught
run_job "$work/control.log" env "${san_env[@]}" node --import tsx test/fixtures/reliability/asan_control.ts
wait

for spec in "${specs[@]}"; do
  name=$(basename "$spec" .model)
  log="$work/$name.log"
  rc=$(cat "$log.rc" 2>/dev/null || echo 99)
  if [ "$rc" -eq 0 ] && ! grep -q '^step 3/3' "$log"; then rc=3; echo "sanitize: $spec did not reach step 3"; fi
  check_log "train $spec" "$rc" "$log"
  ran=$((ran + 1))
done

log="$work/probe.log"
check_log "boundary probe" "$(cat "$log.rc" 2>/dev/null || echo 99)" "$log"
grep -E '^\{"cases"' "$log" || true

log="$work/control.log"
rc=$(cat "$log.rc" 2>/dev/null || echo 99)
if [ "$rc" -ne 0 ] && grep -q 'ERROR: AddressSanitizer: heap-buffer-overflow' "$log"; then
  echo "sanitize: ok   negative control (a deliberate heap overflow is reported)"
else
  echo "sanitize: FAIL negative control: a deliberate heap overflow was not reported (exit $rc)"
  tail -20 "$log"
  failed=1
fi

# the modules really are instrumented (otherwise a clean run would prove nothing)
# (grep -c reads all of nm's output: with grep -q, nm could die of SIGPIPE and pipefail would miss a module)
instrumented=$(find "$MPSC_CACHE_DIR" -name '*.node' 2>/dev/null | while read -r m; do
  if [ "$(nm -D "$m" 2>/dev/null | grep -c __asan_report)" -gt 0 ]; then echo "$m"; fi
done | wc -l)
if [ "$instrumented" -lt 1 ]; then
  echo "sanitize: FAIL no module in $MPSC_CACHE_DIR references the ASan runtime: MPSC_CXXFLAGS was not applied"
  failed=1
else
  echo "sanitize: $instrumented instrumented module(s) in $MPSC_CACHE_DIR"
fi

echo "sanitize: $ran spec(s) trained + boundary probe, $([ $failed -eq 0 ] && echo clean || echo FAILED)"
exit $failed
