#!/usr/bin/env bash
# dev/cuda/bench_ops (the CUDA op benchmark) at its small size under the CUDA-on-CPU harness: every
# op it times runs on buffers it sized itself, so an undersized buffer (as encoder_backward's dwte
# once was) is an out-of-bounds access that the harness or, under SAN=1, ASan reports. Built by
# mk/harness.mk.
set -u
BUILD="${BUILD:-build/cpu}"
prog="$BUILD/cuda_cpu/dev/cuda/bench_ops"
[ -x "$prog" ] || { echo "FAIL: $prog not built"; exit 1; }
out=$("$prog" --small 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: bench_ops --small exited with $rc"; exit 1; }
n=$(grep -cE '^time  bench_ops \| .* \| [0-9.]+ ms \| ([0-9.]+|-) GB/s \| ([0-9.]+|-) TFLOP/s$' <<<"$out")
[ "$n" -ge 16 ] || { echo "FAIL: expected a timing line for each of the 16 ops, got $n"; exit 1; }
echo "bench_ops --small: $n ops ran under the harness"
