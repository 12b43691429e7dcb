#!/usr/bin/env bash
# TSan mutation check of the flash attention kernels (make test-tsan, see mk/harness.mk): each
# mutant (llmc/cuda/attention.cu and its attention_*.cuh kernels without the barrier marked
# "(MUTATION-TARGET <name>)") runs one shape (FLASH_TEST_QUICK=1) with 2 OS threads in two fiber
# orders and must be reported as a data race inside a flash attention kernel every time.
set -u
BUILD="${BUILD:-build/cpu-tsan}"
export CUDA_CPU_THREADS=2 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 FLASH_TEST_QUICK=1
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 history_size=4"
logdir="$BUILD/test-logs"; mkdir -p "$logdir"
fail=0; n=0
for m in "$@"; do
  prog="$BUILD/flash/mutants/test_flash_$m"
  [ -x "$prog" ] || { echo "FAIL missing $prog"; fail=1; continue; }
  for o in forward reverse; do
    n=$((n+1))
    log="$logdir/flash_mutant_$m.${o}.log"
    CUDA_CPU_ORDER=$o "$prog" >"$log" 2>&1; rc=$?
    if [ $rc -eq 66 ] && grep -q 'WARNING: ThreadSanitizer: data race' "$log" && grep -q 'flash_attention_' "$log"; then
      echo "PASS  tsan reports the race of mutant $m in order $o"
    else
      echo "FAIL  tsan did not report mutant $m in order $o (exit $rc): $log"; fail=1
    fi
  done
done
echo "check_flash_mutants: $n runs, $fail failed"
[ $fail -eq 0 ]
