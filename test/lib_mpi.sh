# Helpers for the shell tests that run training jobs under mpirun (sourced after test/lib.sh):
# test_train_mpi.sh, test_zero3.sh, test_watchdog.sh and test_multihost.sh. Sourcing it skips the
# test where MPI is not installed and fails it where train_gpt2 is not built.
command -v mpirun >/dev/null 2>&1 || { echo "skip: MPI not installed (apt-get install libopenmpi-dev openmpi-bin)"; exit 0; }
"$BIN_DIR/train_gpt2" --help >/dev/null 2>&1 || { echo "train_gpt2 not built"; exit 1; }
MODEL=test/ref/gpt2_tiny
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
if [ "${SAN:-}" = "1" ]; then
  # OpenMPI's runtime keeps allocations until exit: leaks with an MPI frame on their stack are
  # suppressed (test/lsan_mpi.supp), which needs full unwinding to see those frames
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}:fast_unwind_on_malloc=0"
  export LSAN_OPTIONS="suppressions=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lsan_mpi.supp:print_suppressions=0"
fi

# rank_pid MARKER RANK: the pid of that rank of the job whose command line contains MARKER
# (mpirun's ranks carry OMPI_COMM_WORLD_RANK in their environment; network namespaces share pids).
rank_pid() {
  local p
  for p in $(pgrep -f -- "$1"); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return 0; }
  done
  return 1
}

# wait_steps LOG N: until the job has logged N steps (at most 60 s)
wait_steps() {
  local i n
  for i in $(seq 600); do
    n=$(grep -c '^step ' "$1" 2>/dev/null) # (nothing while the log does not exist yet)
    [ "${n:-0}" -ge "$2" ] && return 0; sleep 0.1
  done
  return 1
}

# train_setup: the tiny training job the multi-rank tests compare with one process: MODEL, the
# shard $TMP/train.bin, COMMON and LORA (adapters on every linear layer, those layers' biases
# trained). fp32 GEMMs: ranks and one process sum the same gradients in another order, and with
# bf16 GEMMs (--dtype auto on a CPU with AVX512-BF16) a last-bit difference of a master weight can
# flip its bf16 rounding, which the 1e-5 loss tolerance would not allow for.
train_setup() {
  MODEL=test/ref/gpt2_tiny
  make_shard "$TMP/train.bin" 8000 100 5
  COMMON=(--model "$MODEL" --train-data "$TMP/train.bin" --batch-size 1 --seq-len 32 --total-batch-tokens 128
          --steps 6 --lr 3e-3 --warmup-steps 1 --threads 1 --save-format none --dtype fp32)
  LORA=(--lora-rank 4 --lora-alpha 8 --lora-targets all-linear --lora-bias lora_only)
}

losses() { grep -o '"train_loss": [0-9.e+-]*' "$1/log.jsonl" | awk '{print $2}'; }
# cmp_losses WHAT DIR_A DIR_B TOL: the same number of steps, losses equal to TOL
cmp_losses() {
  if [ "$(losses "$2" | wc -l)" -gt 0 ] &&
     paste <(losses "$2") <(losses "$3") | awk -v t="$4" 'NF!=2 {bad=1} {d=$1-$2; if (d<0) d=-d; if (d>t) bad=1; if (d>m) m=d} END {printf "max diff %.2e ", m; exit bad}'; then
    ok "$1 ($(losses "$2" | wc -l) steps)"
  else bad "$1"; paste <(losses "$2") <(losses "$3") >&2; fi
}

# fault_test NAME SIGNAL RANK LIMIT_S OUT COMMAND...: starts COMMAND (an mpirun of a trainer with
# --out OUT and its console output in OUT.log) in the background, sends SIGNAL (KILL or STOP) to
# rank RANK after 3 steps, and checks that every process of the job is gone within LIMIT_S
# seconds, with a non-zero exit; with STOP, also that the watchdog's message names RANK and the
# step. Prints the seconds from the signal to the last process gone.
fault_test() {
  local name=$1 sig=$2 victim=$3 limit=$4 out=$5; shift 5
  "$@" > "$out.log" 2>&1 &
  local job=$!
  if ! wait_steps "$out.log" 3; then bad "$name: the job did not start"; cat "$out.log"; kill "$job"; return; fi
  local pid; pid=$(rank_pid "$out" "$victim")
  if [ -z "$pid" ]; then bad "$name: no pid for rank $victim"; kill "$job"; return; fi
  local t0; t0=$(date +%s.%N)
  kill -"$sig" "$pid"
  wait "$job"; local rc=$?
  while pgrep -f -- "$out" >/dev/null && awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN{exit !(e-s < 90)}'; do sleep 0.2; done
  local secs; secs=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')
  local left; left=$(pgrep -f -- "$out" | wc -l)
  local msg; msg=$(grep -m1 "error: watchdog:" "$out.log")
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ "$left" -ne 0 ] || awk -v s="$secs" -v l="$limit" 'BEGIN{exit !(s >= l)}'; then
    bad "$name: exit $rc, $left processes left ${secs}s after SIG$sig of rank $victim (want all gone, non-zero, within $limit s)"
    tail -20 "$out.log"; pkill -9 -f -- "$out"
  elif [ "$sig" = STOP ] && { ! grep -q "STUCK: rank $victim did not answer a status query" <<<"$msg" || ! grep -q "during 'step [0-9]*'" <<<"$msg"; }; then
    bad "$name: exit $rc but the message does not name rank $victim and the step: $msg"
  else
    ok "$name: every process gone ${secs}s after SIG$sig of rank $victim, exit $rc${msg:+: ${msg:0:230}}"
  fi
}
