#!/usr/bin/env bash
# TSan pass of the CUDA-on-CPU harness (make test-tsan): every harness program, built with
# -fsanitize=thread, runs with 2 OS threads taking blocks (CUDA_CPU_THREADS=2) in one fiber order
# (the day's random one: TSan finds an unordered pair of accesses whichever runs first, so a second
# order adds time, not findings; the plain pass tries the others) and must finish without a race
# report; then the mutant without one barrier must be reported as a data race in
# block_sum_kernel in every order. The programs run their quick sets (TEST_QUICK=1): a race is
# between two accesses of one launch, and the quick sets launch every kernel of llmc/cuda (checked
# at the end) at shapes that give each kernel several blocks and warps; the full sets, several
# times longer under TSan, run in the plain and ASan passes. Fibers are TSan fibers: only
# __syncthreads / __syncwarp / atomics / the launch boundary order memory between CUDA threads.
set -u
BUILD="${BUILD:-build/cpu-tsan}"
export CUDA_CPU_THREADS=2 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export TSAN_OPTIONS="halt_on_error=0 exitcode=66 history_size=4 ${TSAN_OPTIONS:-}"
seed=$(( $(date -u +%Y%m%d) % 100000 ))
orders="random:$seed"
logdir="$BUILD/test-logs"; mkdir -p "$logdir"
# g++ 12's TSan runtime cannot map its shadow when the kernel randomizes mmap with many bits
# ("FATAL: ThreadSanitizer: unexpected memory mapping"): then run everything without ASLR.
probe="$BUILD/cuda_cpu/test/cuda_cpu/harness_faults"
export CUDA_CPU_RUN_PREFIX=""
if "$probe" 2>&1 | grep -q 'FATAL: ThreadSanitizer'; then
  CUDA_CPU_RUN_PREFIX="setarch $(uname -m) -R"
  echo "note: TSan needs ASLR off on this kernel: running under '$CUDA_CPU_RUN_PREFIX'"
fi
source "$(dirname "$0")/kernel_names.sh"
pass=0; fail=0; logs=()
for prog in "$@"; do
  for o in $orders; do
    log="$logdir/$(basename "$prog").tsan.${o/:/-}.log"
    start=$(date +%s.%N)
    CUDA_CPU_ORDER=$o TEST_QUICK=1 CUDA_CPU_VERBOSE=1 $CUDA_CPU_RUN_PREFIX "$prog" >"$log" 2>&1; rc=$?
    logs+=("$log")
    secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')
    if [ $rc -eq 0 ] && ! grep -q 'ThreadSanitizer' "$log"; then
      pass=$((pass+1)); echo "PASS  tsan $(basename "$prog") order $o (${secs}s)"
    else
      fail=$((fail+1)); echo "FAIL  tsan $(basename "$prog") order $o (exit $rc) -- $log:"
      grep -A14 -m1 'WARNING: ThreadSanitizer' "$log" | sed 's/^/      /' || tail -n 20 "$log" | sed 's/^/      /'
    fi
  done
done
unrun=$(comm -23 <(kernels_defined) <(kernels_launched "${logs[@]}") | tr '\n' ' ')
if [ -z "$unrun" ]; then pass=$((pass+1)); echo "PASS  tsan: the runs launched every kernel of llmc/cuda"
else fail=$((fail+1)); echo "FAIL  tsan: the quick sets launch no $unrun (mark a case that does quick)"; fi
# the mutants (one barrier deleted): a race report naming the kernel in every order
for m in test_harness_kernels:block_sum_kernel test_harness_wmma:wmma_gemm_kernel; do
  mut="$BUILD/cuda_cpu/mutation/${m%%:*}_nosync"; kernel=${m##*:}
  for o in forward reverse random:$seed; do
    log="$logdir/${m%%:*}_nosync.tsan.${o/:/-}.log"
    CUDA_CPU_ORDER=$o $CUDA_CPU_RUN_PREFIX "$mut" >"$log" 2>&1; rc=$?
    if [ $rc -eq 66 ] && grep -q 'WARNING: ThreadSanitizer: data race' "$log" && grep -q "$kernel" "$log"; then
      pass=$((pass+1)); res=$(grep -q '^FAIL ' "$log" && echo "wrong result too" || echo "result happened to be right")
      echo "PASS  tsan reports the missing __syncthreads in $kernel, order $o ($res)"
    else
      fail=$((fail+1)); echo "FAIL  tsan did not report the missing __syncthreads in $kernel, order $o (exit $rc): $log"
    fi
  done
done
if BUILD="$BUILD" bash test/cuda_cpu/faults.sh tsan; then pass=$((pass+1)); else fail=$((fail+1)); fi
echo "[tsan] $pass passed, $fail failed"
[ $fail -eq 0 ]
