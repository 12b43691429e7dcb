#!/usr/bin/env bash
# Mutation check of the harness. Each self-test has one __syncthreads() marked MUTATION-TARGET;
# make builds a copy without it ($BUILD/cuda_cpu/mutation/*_nosync.cu). The intact programs pass
# in every fiber order. The tree reduction without its first barrier must give a wrong result in
# at least one order (it passes in reverse order: the writers run before the readers). The WMMA
# GEMM without the barrier after its k step is printed for information: its race never changes
# the result on the harness, whatever the order; make test-tsan requires a TSan report for both
# mutants in every order, which is why the TSan pass exists.
set -u
BUILD="${BUILD:-build/cpu}"
orders="forward reverse random:1 random:2 random:3"
bad=0
check_mutant() {  # name, required (1: must be caught by a wrong result in some order)
  local name=$1 required=$2
  local orig="$BUILD/cuda_cpu/test/cuda_cpu/$name" mut="$BUILD/cuda_cpu/mutation/${name}_nosync"
  local src="$BUILD/cuda_cpu/mutation/${name}_nosync.cu"
  for p in "$orig" "$mut"; do [ -x "$p" ] || { echo "missing $p (make test-build builds it)"; bad=1; return; }; done
  local n_orig n_mut caught=0 missed="" o out rc
  n_orig=$(grep -c '__syncthreads()' "test/cuda_cpu/$name.cu"); n_mut=$(grep -c '__syncthreads()' "$src")
  [ "$n_mut" -eq $((n_orig - 1)) ] || { echo "$name: mutant must have exactly one __syncthreads() less ($n_orig vs $n_mut)"; bad=1; return; }
  for o in $orders; do
    if ! CUDA_CPU_ORDER=$o "$orig" >/dev/null 2>&1; then echo "FAIL $name (intact) fails in order $o"; bad=1; fi
    out=$(CUDA_CPU_ORDER=$o "$mut" 2>&1); rc=$?
    if [ $rc -ne 0 ] && grep -q '^FAIL ' <<<"$out"; then
      caught=$((caught+1)); echo "caught  $name order $o: $(grep -m1 '^FAIL ' <<<"$out" | cut -c1-100)"
    elif [ $rc -ne 0 ]; then
      echo "FAIL $name mutant failed in order $o for another reason (exit $rc):"; tail -n 5 <<<"$out"; bad=1
    else
      missed="$missed $o"
    fi
  done
  echo "$name without one barrier: wrong result in $caught of 5 orders; right in:${missed:- none}"
  if [ "$required" = 1 ] && [ $caught -eq 0 ]; then echo "FAIL the harness did not notice the missing barrier in $name"; bad=1; fi
}
check_mutant test_harness_kernels 1
check_mutant test_harness_wmma 0
exit $bad
