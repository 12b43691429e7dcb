#!/usr/bin/env bash
# Interrupted runs end the way shells expect: SIGINT during training finishes the step, writes a
# checkpoint and ends the process with status 130 (SIGTERM: 143, SIGHUP: 129, SIGPIPE: 141; issue
# 29 item 8: SIGHUP and SIGPIPE ended a run with no checkpoint), so `train && generate` stops; the
# checkpoint loads and the run continues from it. A signal while startup is blocked (a FIFO as
# --train-data, which blocks until a writer appears) ends the process at once, non-zero, with
# nothing written: not even the --out directory the run had made for its lock.
source "$(dirname "$0")/lib.sh"
G="$BIN_DIR/train_gpt2"
MODEL=test/ref/gpt2_tiny
make_shard "$TMP/t.bin" 20000 100 1
RUN=(--model "$MODEL" --train-data "$TMP/t.bin" -b 2 -t 32 --lr 1e-3 --threads 1)

# start "$@" in the background; wait (up to 60 s) for its log.jsonl to show a step
wait_for_step() { # dir pid
  for _ in $(seq 600); do grep -q '"train_loss"' "$1/log.jsonl" 2>/dev/null && return 0; kill -0 "$2" 2>/dev/null || return 1; sleep 0.1; done
  return 1
}

code() { case $1 in INT) echo 130;; TERM) echo 143;; HUP) echo 129;; PIPE) echo 141;; esac; }
for sig in INT TERM HUP; do
  want=$(code $sig)
  d="$TMP/run_$sig"
  "$G" "${RUN[@]}" --steps 100000 --out "$d" > "$d.log" 2>&1 &
  pid=$!
  wait_for_step "$d" $pid || { bad "SIG$sig: the run did not start"; cat "$d.log"; continue; }
  kill -$sig $pid
  wait $pid; rc=$?
  step=$(ls "$d" | sed -n 's/^DONE_0*\([0-9][0-9]*\)$/\1/p' | tail -1)
  [ $rc -eq $want ] && ok "SIG$sig during training: exit status $rc" || { bad "SIG$sig: exit status $rc, want $want"; tail -5 "$d.log"; }
  [ -n "$step" ] && grep -q "interrupted by SIG$sig at step $step: checkpoint written" "$d.log" \
    && ok "SIG$sig: checkpoint of step $step written before exiting" || { bad "SIG$sig: no checkpoint"; tail -5 "$d.log"; }
done
# SIGPIPE: the console is a pipe whose reader goes away after the first step line
d="$TMP/run_PIPE"
{ "$G" "${RUN[@]}" --steps 100000 --out "$d" 2> "$d.log"; echo $? > "$d.rc"; } | grep -m1 -q '^step'
rc=$(cat "$d.rc"); step=$(ls "$d" | sed -n 's/^DONE_0*\([0-9][0-9]*\)$/\1/p' | tail -1)
[ "$rc" = 141 ] && [ -n "$step" ] && [ ! -s "$d.log" ] && "$G" --resume --out "$d" --steps $((step + 1)) > "$d.cont" 2>&1 && grep -q "resumed: step $step" "$d.cont" \
  && ok "SIGPIPE (reader of the console gone) no longer ends a run without a checkpoint: exit 141, checkpoint of step $step, resumes" \
  || { bad "SIGPIPE: exit $rc, checkpoint '$step'"; cat "$d.log"; tail -3 "$d.cont"; }
# the SIGINT checkpoint loads: as a model, and as the point the run continues from
d="$TMP/run_INT"; step=$(ls "$d" | sed -n 's/^DONE_0*\([0-9][0-9]*\)$/\1/p' | tail -1)
"$G" --resume --out "$d" --steps $((step + 2)) > "$TMP/cont.log" 2>&1 && grep -q "resumed: step $step" "$TMP/cont.log" \
  && grep -q "step *$((step + 2))/$((step + 2))" "$TMP/cont.log" && ok "the run continues from the interrupted step $step" \
  || { bad "resuming the interrupted run failed"; tail "$TMP/cont.log"; }
"$G" --model "$d/$(printf 'model_%08d.bin' "$step")" --train-data "$TMP/t.bin" -b 2 -t 32 --steps 1 --threads 1 --out "$TMP/load" > "$TMP/load.log" 2>&1 \
  && ok "the interrupted run's checkpoint loads as a model" || { bad "checkpoint model does not load"; tail "$TMP/load.log"; }

# ---- startup blocked on a FIFO: the signal ends it promptly, nothing written
mkfifo "$TMP/fifo.bin"
for sig in TERM INT HUP; do
  want=$(code $sig)
  "$G" --model "$MODEL" --train-data "$TMP/fifo.bin" -b 2 -t 32 --steps 5 --threads 1 --out "$TMP/fifo_$sig" > "$TMP/fifo_$sig.log" 2>&1 &
  pid=$!
  sleep 2 # model loaded, blocked in open() of the FIFO
  kill -0 $pid 2>/dev/null || { bad "FIFO SIG$sig: the run ended before the signal"; cat "$TMP/fifo_$sig.log"; continue; }
  start=$(date +%s.%N)
  kill -$sig $pid
  for _ in $(seq 50); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $pid 2>/dev/null; then
    bad "FIFO SIG$sig: still running 5 s after the signal"; kill -9 $pid; wait $pid
    continue
  fi
  wait $pid; rc=$?
  secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')
  [ $rc -eq $want ] && ok "SIG$sig while blocked on a FIFO at startup: exit $rc after ${secs}s" || { bad "FIFO SIG$sig: exit $rc, want $want"; cat "$TMP/fifo_$sig.log"; }
  if [ -e "$TMP/fifo_$sig" ]; then bad "FIFO SIG$sig: the interrupted startup wrote $(ls "$TMP/fifo_$sig")"; else ok "FIFO SIG$sig: nothing written"; fi
  grep -q "interrupted while starting up" "$TMP/fifo_$sig.log" && ok "FIFO SIG$sig: says it was interrupted while starting up" || bad "FIFO SIG$sig: no message"
done
finish
