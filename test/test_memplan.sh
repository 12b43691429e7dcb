#!/usr/bin/env bash
# The memory plan against what each rank allocates (test/test_memplan.c) under mpirun: every case
# at ZeRO 1, 2 and 3 on 2 ranks, three of them on 4 ranks and in shard groups of 2 (under the
# sanitizers a subset with one of each kind).
source "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null 2>&1 || { echo "skip: MPI not installed (apt-get install libopenmpi-dev openmpi-bin)"; exit 0; }
prog="${BUILD:-build/cpu}/test/test_memplan"
[ -x "$prog" ] || { echo "FAIL: $prog is not built (make test-build)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
if [ "${SAN:-}" = "1" ]; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}:fast_unwind_on_malloc=0"
  export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")" && pwd)/lsan_mpi.supp:print_suppressions=0"
fi
ncases=7
one() { # one NP CASE ZERO [GROUP]
  local out
  if out=$(timeout 120 mpirun -np "$1" "$prog" --case "$2" --zero "$3" --shard-group "${4:-0}" 2>&1); then
    ok "np=$1 case $2 zero=$3${4:+ group $4}: $(grep -c '^ok' <<<"$out") ranks agree with the plan ($(grep -m1 -o 'heap [^)]*)' <<<"$out"))"
  else bad "np=$1 case $2 zero=$3${4:+ group $4}"; echo "$out" | grep -v '^ok' | head -20 >&2; fi
}
if [ "${SAN:-}" = "1" ]; then # (the sanitizers make every launch slow: one of each kind)
  for c in 0 3 5; do for z in 1 3; do one 2 "$c" "$z"; done; done
  one 2 6 2; one 4 0 3 2
else
  for c in $(seq 0 $((ncases - 1))); do for z in 1 2 3; do one 2 "$c" "$z"; done; done
  for c in 0 3 5; do for z in 1 3; do one 4 "$c" "$z"; done; one 4 "$c" 3 2; done
fi
finish
