#!/usr/bin/env bash
# Every __global__ kernel in llmc/cuda/*.cu and *.cuh must have been executed by the CUDA-on-CPU
# harness in test_cuda_ops or one of the harness tests in test/cuda/: CI has no GPU, so a kernel
# that has not run under the harness has not run at all. Runs them with the harness' launch log on
# (CUDA_CPU_VERBOSE=1) and compares the launched kernel names with the kernels defined in the
# sources. (Other fiber orders: the harness' orders.sh reruns test_cuda_ops.)
set -u
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build/cpu}"
prog="$BUILD/test/test_cuda_ops"
[ -x "$prog" ] || { echo "FAIL: $prog not built"; exit 1; }
source test/cuda_cpu/kernel_names.sh
defined=$(kernels_defined)
[ -n "$defined" ] || { echo "FAIL: found no __global__ kernels in llmc/cuda/*.cu, *.cuh"; exit 1; }
if [ "${SAN:-}" = "1" ]; then
  echo "skip: kernel coverage is checked in the plain pass (same program, same launches)"; exit 0
fi
log=$(mktemp); one=$(mktemp)
trap 'rm -f "$log" "$one"' EXIT
for p in "$prog" $(ls "$BUILD"/cuda_cpu/test/cuda/test_* 2>/dev/null | grep -v '\.o$'); do
  [ -x "$p" ] || continue
  if ! CUDA_CPU_VERBOSE=1 "$p" >"$one" 2>&1; then
    echo "FAIL: $p failed:"; grep -v '^cuda_cpu: launch ' "$one" | tail -n 20; exit 1
  fi
  cat "$one" >> "$log"
done
ran=$(kernels_launched "$log")
missing=0
for k in $defined; do
  if grep -qx "$k" <<<"$ran"; then echo "ran kernel: $k"; else echo "MISSING $k (defined in llmc/cuda but never launched under the harness)"; missing=1; fi
done
n=$(wc -w <<<"$defined")
[ $missing -eq 0 ] && echo "all $n kernels in llmc/cuda/*.cu, *.cuh ran under the harness"
exit $missing
