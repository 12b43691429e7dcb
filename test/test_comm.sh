#!/usr/bin/env bash
# Multi-rank tests of llmc/comm.h: runs $BUILD/test/test_comm (built by `make test-build`) under
# `mpirun -np 1, 2, 4`, with the default staging buffers and with tiny ones (every collective then
# goes through many chunks), and checks that a failing rank (fatal() or SIGKILL in the middle of
# collectives) ends the whole job with a non-zero exit within 30 s.
set -u
BUILD="${BUILD:-build}"
prog="$BUILD/test/test_comm"
skipmsg="skip: MPI not installed (apt-get install libopenmpi-dev openmpi-bin)"
if ! command -v mpirun >/dev/null 2>&1; then echo "$skipmsg"; exit 0; fi
if [ ! -x "$prog" ]; then echo "error: $prog is not built (run make test-build)"; exit 1; fi
if [ "$("$prog" --has-mpi)" != "mpi" ]; then echo "$skipmsg (this build has no MPI)"; exit 0; fi

# mpirun refuses to run as root unless told; CI containers run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Containers often forbid the cross-memory-attach syscalls of the shared-memory transport.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
leakenv=()
if [ "${SAN:-}" = "1" ]; then
  # OpenMPI's runtime keeps allocations until exit; suppress leaks with an MPI library frame on
  # their stack only (test/lsan_mpi.supp). Those frames are visible only with full unwinding, which
  # makes every malloc slow, so leaks are checked in the np=4 and singleton runs (the same code
  # paths as the others); the other runs keep ASan+UBSan but skip the leak check.
  san_base="${ASAN_OPTIONS:-halt_on_error=1}"
  export ASAN_OPTIONS="$san_base:detect_leaks=0"
  export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")" && pwd)/lsan_mpi.supp:print_suppressions=0"
  leakenv=("ASAN_OPTIONS=$san_base:detect_leaks=1:fast_unwind_on_malloc=0")
fi

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
log=$(mktemp); trap 'rm -f "$log"' EXIT

run() { # run NP [env assignments...] -- args
  local np=$1; shift
  local envs=()
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 60 mpirun -np "$np" --oversubscribe "$prog" "$@" >"$log" 2>&1
}

for np in 1 2 4; do
  for scratch in "" 256; do
    what="np=$np${scratch:+ scratch=$scratch bytes}"
    envs=(${scratch:+LLMC_COMM_TEST_SCRATCH=$scratch})
    if [ "$np" = 4 ] && [ -z "$scratch" ] && [ ${#leakenv[@]} -gt 0 ]; then envs+=("${leakenv[@]}"); what+=" leak-checked"; fi
    run "$np" "${envs[@]}" -- ; rc=$?
    npass=$(grep -c "all [0-9]* checks passed" "$log")
    if [ $rc -ne 0 ] || [ "$npass" -ne "$np" ]; then
      fail "collectives $what: exit $rc, $npass of $np ranks passed"; tail -n 30 "$log"
    else
      echo "ok   collectives $what ($(grep -m1 -o 'all [0-9]* checks' "$log") per rank)"
    fi
  done
done

# Started without mpirun, a binary with MPI runs as one rank without touching MPI (test_comm run by
# run_tests.sh covers that); LLMC_COMM=mpi forces MPI_Init as an OpenMPI singleton, which must work.
env "${leakenv[@]}" LLMC_COMM=mpi timeout 60 "$prog" >"$log" 2>&1; rc=$?
if [ $rc -ne 0 ] || ! grep -q "impl mpi" "$log" || ! grep -q "all [0-9]* checks passed" "$log"; then
  fail "singleton (LLMC_COMM=mpi, no mpirun): exit $rc"; tail -n 30 "$log"
else
  echo "ok   singleton MPI without mpirun"
fi

# A failure on one rank must end every rank, non-zero, within 30 s.
check_failure() { # name args... ; expects a message pattern in $want
  local name=$1; shift
  local t0=$(date +%s.%N)
  run 2 -- "$@"; local rc=$?
  local secs=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || awk -v s="$secs" 'BEGIN{exit !(s >= 30)}'; then
    fail "$name: exit $rc after ${secs}s (want non-zero within 30 s)"; tail -n 30 "$log"
  elif ! grep -q "$want" "$log"; then
    fail "$name: exit $rc but the failing rank's message '$want' is missing"; tail -n 30 "$log"
  elif grep -q -e "returned although" -e "kept completing" "$log"; then
    fail "$name: a surviving rank went on past the failure"; tail -n 30 "$log"
  else
    echo "ok   $name: whole job exited $rc after ${secs}s"
  fi
}
want="rank 1 fails on purpose"; check_failure "fatal() on rank 1" --fatal-rank 1
want="killing myself with SIGKILL"; check_failure "SIGKILL of rank 1 mid-collective" --kill-rank 1

if [ $fails -ne 0 ]; then echo "test_comm.sh: $fails FAILED"; exit 1; fi
echo "test_comm.sh: all passed"
