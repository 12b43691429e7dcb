#!/usr/bin/env bash
# The trainer's watchdog (--watchdog-timeout, llmc/comm/comm.h) on CPU ranks under mpirun:
#   - a rank stopped with SIGSTOP in the middle of training, default timeout (30 s): every process
#     of the job exits within 60 s of the SIGSTOP, non-zero, with a message naming the stopped
#     rank and the operation (train_gpt2, rank 1 stopped; train_lora with --watchdog-timeout 5,
#     rank 0 stopped);
#   - the whole job suspended (every rank SIGSTOPped) for longer than the timeout and resumed:
#     nobody is to blame, the run finishes normally with the losses of an undisturbed run.
# Run by `make test` (mk/tests.mk); test/test_multihost.sh runs the SIGSTOP case across hosts.
# How a verdict ends one process (message first, _exit, the 15 s backstop) is tested without MPI
# by test/test_watchdog_exit.c; the NCCL path on a GPU by the GPU check's watchdog section.
source "$(dirname "$0")/lib.sh"
san_skip "its verdicts wait on the wall clock; under ASan+UBSan the verdict path runs in test_watchdog_exit and the trainers under mpirun in test_train_mpi.sh"
source "$(dirname "$0")/lib_mpi.sh"
make_shard "$TMP/train.bin" 60000 100 6
LONG=(--model "$MODEL" --train-data "$TMP/train.bin" --batch-size 4 --seq-len 64 --steps 100000 --threads 1 --save-format none)
LORA=(--lora-rank 4 --lora-alpha 8 --lora-targets all-linear)

fault_test "train_gpt2, default timeout, rank 1 stopped" STOP 1 60 "$TMP/stop_full" \
  timeout 120 mpirun -np 2 "$BIN_DIR/train_gpt2" "${LONG[@]}" --out "$TMP/stop_full"
fault_test "train_lora --watchdog-timeout 5, rank 0 stopped" STOP 0 60 "$TMP/stop_lora" \
  timeout 120 mpirun -np 2 "$BIN_DIR/train_lora" "${LONG[@]}" "${LORA[@]}" --watchdog-timeout 5 --out "$TMP/stop_lora"

# The whole job suspended for 8 s (> the 3 s timeout), then resumed: it finishes, losses unchanged.
COMMON=(--model "$MODEL" --train-data "$TMP/train.bin" --batch-size 4 --seq-len 64 --steps 300 --threads 1 --save-format none
        --watchdog-timeout 3)
timeout 120 mpirun -np 2 "$BIN_DIR/train_gpt2" "${COMMON[@]}" --out "$TMP/ref" > "$TMP/ref.log" 2>&1 || { tail "$TMP/ref.log"; bad "undisturbed run failed"; }
timeout 120 mpirun -np 2 "$BIN_DIR/train_gpt2" "${COMMON[@]}" --out "$TMP/susp" > "$TMP/susp.log" 2>&1 &
job=$!
if wait_steps "$TMP/susp.log" 3; then
  pids="$(rank_pid "$TMP/susp" 0) $(rank_pid "$TMP/susp" 1)"
  kill -STOP $pids; sleep 8; kill -CONT $pids
fi
wait $job; rc=$?
if [ $rc -eq 0 ] && [ "$(losses "$TMP/susp")" = "$(losses "$TMP/ref")" ] && [ "$(losses "$TMP/ref" | wc -l)" -eq 300 ]; then
  ok "whole job suspended 8 s with --watchdog-timeout 3 and resumed: finished, 300 losses equal to an undisturbed run"
else
  bad "suspended and resumed job: exit $rc"; tail -20 "$TMP/susp.log"
fi
finish
