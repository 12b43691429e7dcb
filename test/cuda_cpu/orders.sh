#!/usr/bin/env bash
# Reruns every test program that is linked with the CUDA-on-CPU harness in other fiber orders (make test ran them in the
# default forward order): a kernel that depends on the order in which the threads of a block run
# between barriers (a missing __syncthreads / __syncwarp) gives a different result in some order.
# Orders: CUDA_CPU_EXTRA_ORDERS (default "reverse random:<seed>"; the seed changes daily so that
# over time many orders are tried, and it is printed so a failure can be reproduced). The reruns
# take each program's quick set (TEST_QUICK=1: its cases marked quick, which launch every kernel of
# llmc/cuda as the full sets do; the order of a block's threads matters at any shape), the forward
# pass of make test the full sets.
set -u
# Under SAN=1 each program's forward run is already a test of its own: a different fiber order
# changes results only through a race, which the plain pass and TSan (make test-tsan) look for.
if [ "${SAN:-}" = 1 ]; then echo "skip under SAN=1: other fiber orders run in the plain pass (and under TSan)"; exit 0; fi
BUILD="${BUILD:-build/cpu}"
source "$(dirname "$0")/kernel_names.sh"
list="$BUILD/cuda_cpu/tests.list"
[ -f "$list" ] || { echo "missing $list (built by make test-build)"; exit 1; }
seed=$(( $(date -u +%Y%m%d) % 100000 ))
orders="${CUDA_CPU_EXTRA_ORDERS:-reverse random:$seed}"
fail=0; n=0
launched=$(mktemp); trap 'rm -f "$launched"' EXIT
while read -r prog; do
  [ -n "$prog" ] || continue
  case "$prog" in *.sh) continue;; esac
  grep -q -a -F CUDA_CPU_ORDER "$prog" 2>/dev/null || continue   # not linked with the harness
  for o in $orders; do
    n=$((n+1))
    start=$(date +%s.%N)
    if out=$(CUDA_CPU_ORDER="$o" TEST_QUICK=1 CUDA_CPU_VERBOSE=1 "$prog" 2>&1); then
      kernels_launched <<<"$out" >> "$launched"
      printf 'ok   %-60s order %-14s %ss\n' "$prog" "$o" "$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')"
    else
      fail=$((fail+1))
      echo "FAIL $prog with CUDA_CPU_ORDER=$o (reproduce: CUDA_CPU_ORDER=$o TEST_QUICK=1 $prog):"
      grep -v '^cuda_cpu: launch ' <<<"$out" | tail -n 20 | sed 's/^/     /'
    fi
  done
done < "$list"
# the quick sets must keep launching every kernel (else an order bug there would go unseen)
defined=$(kernels_defined)
unrun=$(comm -23 <(echo "$defined") <(sort -u "$launched") | tr '\n' ' ')
[ -z "$unrun" ] && echo "ok   the reruns launched all $(wc -w <<<"$defined") kernels of llmc/cuda" \
  || { fail=$((fail+1)); echo "FAIL the quick sets launch no $unrun: mark a case that does quick"; }
echo "orders.sh: $n runs, $fail failed"
[ "$n" -gt 0 ] && [ "$fail" -eq 0 ]
