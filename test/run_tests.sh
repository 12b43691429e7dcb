#!/usr/bin/env bash
# Runs every test program / script given on the command line and prints one line per test and
# a closing "N passed, N failed" line. Scripts (*.sh) get BIN_DIR (where train_gpt2 etc. live)
# and BUILD (the object/test build directory) in their environment.
set -u
export BIN_DIR="${BIN_DIR:-.}" BUILD="${BUILD:-build}"
if [ "${SAN:-}" = "1" ]; then
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  label="asan+ubsan"
else
  label="plain"
fi
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
passed=0; failed=0; failed_names=()
logdir="${BUILD}/test-logs"; mkdir -p "$logdir"
for t in "$@"; do
  name=$(basename "$t")
  log="$logdir/$name.log"
  start=$(date +%s.%N)
  if [[ "$t" == *.sh ]]; then bash "$t" >"$log" 2>&1; rc=$?
  else "$t" >"$log" 2>&1; rc=$?; fi
  secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')
  if [ $rc -eq 0 ]; then
    passed=$((passed+1)); echo "PASS  $name (${secs}s)"
    grep -E '^(skip|SKIP|note)' "$log" | sed 's/^/      /' || true
  else
    failed=$((failed+1)); failed_names+=("$name"); echo "FAIL  $name (${secs}s, exit $rc) -- last lines of $log:"
    tail -n 25 "$log" | sed 's/^/      /'
  fi
done
echo "[$label] failed: ${failed_names[*]:-none}"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
