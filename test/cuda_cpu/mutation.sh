#!/usr/bin/env bash
# Mutation check of the harness: test_harness_kernels.cu with the first __syncthreads() of its
# tree reduction deleted (the line marked MUTATION-TARGET, removed by sed into $BUILD) must give
# a wrong block_sum in at least one fiber order, while the intact program passes in all of them.
# A missing barrier passes in some orders (reverse: the writers run before the readers), so
# several orders are tried; make test-tsan additionally requires a TSan race report in every one.
set -u
BUILD="${BUILD:-build}"
orig="$BUILD/cuda_cpu/test/cuda_cpu/test_harness_kernels"
mut="$BUILD/cuda_cpu/mutation/test_harness_kernels_nosync"
for p in "$orig" "$mut"; do [ -x "$p" ] || { echo "missing $p (make test-build builds it)"; exit 1; }; done
src="$BUILD/cuda_cpu/mutation/test_harness_kernels_nosync.cu"
n_orig=$(grep -c '__syncthreads()' test/cuda_cpu/test_harness_kernels.cu)
n_mut=$(grep -c '__syncthreads()' "$src")
[ "$n_mut" -eq $((n_orig - 1)) ] || { echo "mutant should have exactly one __syncthreads() less ($n_orig vs $n_mut)"; exit 1; }
caught=0; missed=""; bad=0
for o in forward reverse random:1 random:2 random:3; do
  if ! CUDA_CPU_ORDER=$o "$orig" >/dev/null 2>&1; then echo "FAIL intact program fails in order $o"; bad=1; fi
  out=$(CUDA_CPU_ORDER=$o "$mut" 2>&1); rc=$?
  if [ $rc -ne 0 ] && grep -q '^FAIL block_sum' <<<"$out"; then
    caught=$((caught+1)); echo "caught  order $o: $(grep -m1 '^FAIL block_sum' <<<"$out" | cut -c1-110)"
  elif [ $rc -ne 0 ]; then
    echo "FAIL mutant failed in order $o for another reason (exit $rc):"; tail -n 5 <<<"$out"; bad=1
  else
    missed="$missed $o"; echo "passes  order $o (the race is invisible in this order)"
  fi
done
echo "mutation.sh: missing barrier caught in $caught of 5 orders; passed in:${missed:- none}"
[ $bad -eq 0 ] && [ $caught -ge 1 ]
