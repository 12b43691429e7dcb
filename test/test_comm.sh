#!/usr/bin/env bash
# Multi-rank tests of llmc/comm/comm.h: runs $BUILD/test/test_comm (built by `make test-build`) under
# `mpirun -np 1, 2, 4`, with the default staging buffers and with tiny ones (every collective then
# goes through many chunks), and checks that a failing rank (fatal() or SIGKILL in the middle of
# collectives) ends the whole job with a non-zero exit within 30 s. The watchdog: a stopped
# (SIGSTOP), a stuck (spinning) and a deadlocked rank end the whole job, non-zero, with a message
# naming the rank, within the timeout + 15 s, and no process of the job is left; a slow rank
# within the timeout does not, and its peers wait without burning a core.
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

# The watchdog (timeout 2 s here; the trainer's default is 30 s, test_watchdog.sh). np=3: two
# ranks wait for the third. progabs: the absolute path, so that pgrep finds only this job.
progabs="$(cd "$(dirname "$prog")" && pwd)/$(basename "$prog")"
check_watchdog() { # name want-pattern args...
  local name=$1 pat=$2; shift 2
  local t0=$(date +%s.%N)
  env timeout 60 mpirun -np 3 --oversubscribe "$progabs" "$@" >"$log" 2>&1; local rc=$?
  local secs=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')
  local left=$(pgrep -f "$progabs $*" | wc -l)
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || awk -v s="$secs" 'BEGIN{exit !(s >= 17)}'; then
    fail "watchdog, $name: exit $rc after ${secs}s (want non-zero within 2 + 15 s)"; tail -n 30 "$log"
  elif ! grep -q "error: watchdog: .*$pat" "$log"; then
    fail "watchdog, $name: exit $rc but no message matching '$pat'"; tail -n 30 "$log"
  elif [ "$left" -ne 0 ]; then
    fail "watchdog, $name: $left process(es) of the job still running"; pkill -9 -f "$progabs $*"
  else
    echo "ok   watchdog, $name: whole job exited $rc after ${secs}s: $(grep -m1 -o "$pat" "$log")"
  fi
}
check_watchdog "SIGSTOP of rank 1" "STUCK: rank 1 did not answer a status query" --hang-rank 1 2
check_watchdog "rank 2 spinning outside collectives" "STUCK: rank 2 is busy outside collectives for [0-9.]* s in 'spinning forever'" --stuck-rank 2 2
check_watchdog "deadlock" "DEADLOCK: every rank waits in a collective" --deadlock 2
# one rank (no peers to ask): its own stuck loop
t0=$(date +%s.%N)
timeout 60 "$progabs" --stuck-rank 0 2 >"$log" 2>&1; rc=$?
secs=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "^error: watchdog: STUCK: rank 0 is busy outside collectives" "$log"; then
  echo "ok   watchdog, one process spinning: exited $rc after ${secs}s"
else fail "watchdog, one process spinning: exit $rc after ${secs}s"; tail -n 20 "$log"; fi
# one process whose steps slow down 2.8x as the machine's load rises (a shared CPU): the limit
# grows with the slowest step (3x), so the watchdog does not end a run that still progresses
timeout 60 "$progabs" --load-swing 1.6 2 >"$log" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "not ended" "$log"; then
  echo "ok   watchdog, one process whose steps slow 2.8x (1.6 s, then 4.5 s; timeout 2 s): not ended"
else fail "watchdog, one process whose steps slow 2.8x: exit $rc"; tail -n 20 "$log"; fi
# a rank slower than usual but within the timeout, or in an unbounded operation (a checkpoint
# write) for longer than the timeout: the others wait for it, asleep, and nobody is ended
for slow in "3 10" "5 unbounded 2"; do
  run 3 "${leakenv[@]}" -- --slow-rank 1 $slow; rc=$?  # (leak-checked: the watchdog's start and stop)
  npass=$(grep -c "all [0-9]* checks passed" "$log")
  what="slow rank (--slow-rank 1 $slow)"
  if [ $rc -ne 0 ] || [ "$npass" -ne 3 ]; then
    fail "watchdog, $what: exit $rc, $npass of 3 ranks passed"; tail -n 30 "$log"
  else
    echo "ok   watchdog, $what: no abort; $(grep -m1 -o 'waited.*core)' "$log")"
  fi
done

if [ $fails -ne 0 ]; then echo "test_comm.sh: $fails FAILED"; exit 1; fi
echo "test_comm.sh: all passed"
