#!/usr/bin/env bash
# Faulty kernels (test/cuda_cpu/harness_faults.cu) must be caught, each with a message that names
# the problem: deadlocks, malformed warp intrinsics, reads of exited lanes (poison), hung kernels,
# leaked device memory and misused ptx.cuh instructions (a cp.async destination read before its
# wait, copies left pending at exit, a misaligned or global ldmatrix row, an mma without the
# whole warp) by the harness itself; shared / global memory overruns by ASan (SAN=1
# build); races between warps and between blocks by TSan (`faults.sh tsan` from make test-tsan).
set -u
BUILD="${BUILD:-build/cpu}"
prog="$BUILD/cuda_cpu/test/cuda_cpu/harness_faults"
[ -x "$prog" ] || { echo "missing $prog (make test-build builds it)"; exit 1; }
mode=plain
[ "${SAN:-}" = "1" ] && mode=asan
[ "${1:-}" = "tsan" ] && mode=tsan
pass=0; fail=0

# expect SCENARIO EXIT(any|nonzero|N) PATTERN...: every pattern must appear in the output
expect() {
  local scen=$1 want=$2; shift 2
  local out rc ok=1
  local limit=300; [ "$scen" = spin ] && limit=1   # the hung kernel is stopped after 1 s
  out=$(CUDA_CPU_TIMEOUT=$limit ${CUDA_CPU_RUN_PREFIX:-} "$prog" "$scen" 2>&1); rc=$?
  case $want in
    nonzero) [ $rc -ne 0 ] || ok=0 ;;
    any) ;;
    *) [ $rc -eq "$want" ] || ok=0 ;;
  esac
  for pat in "$@"; do grep -q -e "$pat" <<<"$out" || ok=0; done
  if [ $ok -eq 1 ]; then
    pass=$((pass+1)); echo "caught  $scen: $(grep -m1 -e "$1" <<<"$out" | cut -c1-150)"
  else
    fail=$((fail+1)); echo "FAIL    $scen (exit $rc; wanted exit $want and: $*):"; tail -n 15 <<<"$out" | sed 's/^/        /'
  fi
}

if [ $mode = tsan ]; then
  export CUDA_CPU_THREADS=2
  expect warp_race 66 'WARNING: ThreadSanitizer: data race' 'warp_race_kernel'
  expect cross_block_race 66 'WARNING: ThreadSanitizer: data race' 'cross_block_race_kernel'
  expect cp_async_no_barrier 66 'WARNING: ThreadSanitizer: data race' 'cp_async_no_barrier_kernel'
  expect ldmatrix_no_barrier 66 'WARNING: ThreadSanitizer: data race' 'ldmatrix_no_barrier_kernel'
else
  expect deadlock nonzero 'DEADLOCK in kernel deadlock_kernel' 'waiting in __shfl_xor_sync' 'waiting in __syncthreads'
  expect bad_mask nonzero 'does not include the calling lane'
  expect mixed_ops nonzero 'different warp ops'
  expect exited_lane 0 'reads of exited lanes are NaN'
  expect spin 124 'kernel spin_kernel has run for more than 1 s'
  expect leak 1 'allocations (1000 bytes) were never freed'
  expect cp_async_early_read 1 'read their cp.async destination before the wait and got poison'
  expect cp_async_pending_exit nonzero 'cp_async_pending_exit_kernel' 'exits with 1 cp.async copies that no cp.async.wait_group completed'
  expect ldmatrix_misaligned nonzero 'ldmatrix_misaligned_kernel, block (0,0,0), thread (3,0,0)' 'not 16-byte aligned'
  expect ldmatrix_global nonzero 'ldmatrix_global_kernel' 'lies in device memory (cudaMalloc): it must be shared memory'
  expect mma_exited_lanes nonzero 'mma.m16n8k16 needs all 32 lanes of the warp; lanes 0xffff0000 have exited'
  if [ $mode = asan ]; then
    expect smem_overrun nonzero 'AddressSanitizer' 'smem_overrun_kernel'
    expect global_overrun nonzero 'AddressSanitizer: heap-buffer-overflow' 'global_overrun_kernel'
  else
    echo "note: shared/global memory overruns are checked in the SAN=1 run, races by make test-tsan"
  fi
fi
echo "faults.sh ($mode): $pass caught, $fail not caught"
[ $fail -eq 0 ]
