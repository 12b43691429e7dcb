#!/usr/bin/env bash
# Nothing a user keeps in --out is lost or silently changed (issue 29, items 1, 3, 4), each check
# named after the failure it guards:
#   - "start-up cleanup deletes input": a user's model_00005000.bin (adapter_00000450/) kept in
#     --out and passed as --model (--adapter) was removed as a leftover of an interrupted save;
#     now cleanup removes only what the save protocol's own PENDING record names;
#   - "no lock on --out": two programs on one --out both ran, interleaving log.jsonl and taking
#     each other's records and checkpoints; now the second is refused with the first's pid and
#     command, a lock left by a killed run is taken over, and under mpirun every rank agrees;
#   - "training in place overwrites the input": train_gpt2 --model X --out X replaced
#     X/model.safetensors; now refused, as is any run that would write over its --model or
#     --adapter in --out (a checkpoint of the step the input is named after, a final output);
#   - "other programs ignore the lock" (issue 44, item 6): convert --out wrote config.json and
#     model.safetensors into a running train_gpt2's --out; now convert, data/prepare --out-dir and
#     generate --logits-out are refused there with the trainer's pid and command, a trainer started
#     while one of them writes is refused with its pid, two of them writing different files share a
#     folder, two writing the same file do not, and the .lock a writer made goes when it ends.
source "$(dirname "$0")/lib.sh"
G="$BIN_DIR/train_gpt2"; L="$BIN_DIR/train_lora"; CONV="$BIN_DIR/convert"
MODEL=test/ref/gpt2_tiny
make_shard "$TMP/t.bin" 20000 100 1
RUN=(--train-data "$TMP/t.bin" -b 2 -t 32 --threads 1 --lr 1e-3)
digest() { (cd "$1" && find . -type f ! -name .lock | sort | xargs sha256sum); }   # a directory's files and contents
listing() { (cd "$1" && ls -A); }

# wait_step DIR PID: until DIR/log.jsonl shows a step (at most 60 s) while PID runs
wait_step() {
  for _ in $(seq 600); do grep -q '"train_loss"' "$1/log.jsonl" 2>/dev/null && return 0; kill -0 "$2" 2>/dev/null || return 1; sleep 0.1; done
  return 1
}

"$CONV" --model "$MODEL" --out "$TMP/own.bin" > /dev/null 2>&1 || bad "convert failed"

# ---- item 1: a user's checkpoint-named files in --out, passed as inputs, survive and train
d="$TMP/u"; mkdir -p "$d"; cp "$TMP/own.bin" "$d/model_00005000.bin"
: > "$d/PENDING_00000002"; echo junk > "$d/model_00000002.bin" # (an interrupted save of step 2, as the protocol records it)
before=$(sha256sum < "$d/model_00005000.bin")
if "$G" --model "$d/model_00005000.bin" "${RUN[@]}" --steps 4 --save-every 2 --out "$d" > "$d.log" 2>&1; then
  [ "$(sha256sum < "$d/model_00005000.bin")" = "$before" ] && [ -f "$d/DONE_00000004" ] \
    && ok "start-up cleanup no longer deletes input: model_00005000.bin in --out, passed as --model, survives and trains" \
    || bad "model_00005000.bin: $(listing "$d")"
  grep -q "^cleanup: removed 1 leftover file .*: model_00000002.bin$" "$d.log" && ok "... while the interrupted save of step 2 it recorded is removed" \
    || bad "cleanup: $(grep cleanup "$d.log")"
else tail -3 "$d.log"; bad "training from model_00005000.bin in --out failed"; fi

"$L" --model "$MODEL" "${RUN[@]}" --lora-rank 2 --steps 2 --out "$TMP/ad" > /dev/null 2>&1 || bad "adapter run failed"
d="$TMP/ua"; mkdir -p "$d/adapter_00000450"; cp "$TMP/ad/adapter_config.json" "$TMP/ad/adapter_model.safetensors" "$d/adapter_00000450/"
before=$(digest "$d/adapter_00000450")
if "$L" --model "$MODEL" --adapter "$d/adapter_00000450" "${RUN[@]}" --steps 4 --save-every 2 --out "$d" > "$d.log" 2>&1; then
  [ "$(digest "$d/adapter_00000450")" = "$before" ] && [ -f "$d/DONE_00000004" ] && ! grep -q cleanup "$d.log" \
    && ok "start-up cleanup no longer deletes input: adapter_00000450/ in --out, passed as --adapter, survives and trains" \
    || bad "adapter_00000450: $(listing "$d")"
else tail -3 "$d.log"; bad "training from adapter_00000450/ in --out failed"; fi

# ---- item 4: a run never writes over its own --model / --adapter
d="$TMP/inplace"; cp -r "$MODEL" "$d"
before=$(listing "$d"; digest "$d")
expect_fail "training in place no longer overwrites the input: --model X --out X refused" "--model $d is the --out directory itself" \
  "$G" --model "$d" "${RUN[@]}" --steps 2 --out "$d"
expect_fail "train_lora --model X --out X refused" "--model $d is the --out directory itself" "$L" --model "$d" "${RUN[@]}" --steps 2 --out "$d"
expect_fail "train_lora --adapter X --out X refused" "--adapter $TMP/ad is the --out directory itself" \
  "$L" --model "$MODEL" --adapter "$TMP/ad" "${RUN[@]}" --steps 2 --out "$TMP/ad"
[ "$before" = "$(listing "$d"; digest "$d")" ] && ok "the refused runs left X as it was (no lock file, no record)" || bad "X changed: $(listing "$d")"
d="$TMP/ck"; mkdir -p "$d"; cp "$TMP/own.bin" "$d/model_00000004.bin"; cp "$TMP/own.bin" "$d/model.bin"
expect_fail "a run reaching the step of its --model's checkpoint name refused" "would be replaced by the checkpoint of step 4" \
  "$G" --model "$d/model_00000004.bin" "${RUN[@]}" --steps 10 --out "$d"
expect_fail "--model OUT/model.bin refused (the final model goes there)" "would be replaced: the run writes the final model (--save-format llmc)" \
  "$G" --model "$d/model.bin" "${RUN[@]}" --steps 2 --out "$d"
"$G" --model "$d/model_00000004.bin" "${RUN[@]}" --steps 3 --save-format hf --out "$d" > "$d.log" 2>&1 && cmp -s "$d/model_00000004.bin" "$TMP/own.bin" \
  && cmp -s "$d/model.bin" "$TMP/own.bin" && ok "the same inputs are fine when the run writes neither (3 steps, --save-format hf)" || { tail -3 "$d.log"; bad "run beside its inputs"; }

# ---- item 3: one program at a time in a run directory
d="$TMP/lk"
"$G" --model "$MODEL" "${RUN[@]}" --steps 100000 --out "$d" > "$d.a.log" 2>&1 &
a=$!
if wait_step "$d" $a; then
  expect_fail "no lock on --out: a second program (train_lora) on the same --out is refused, naming the first's pid and command" \
    "--out $d is in use by process $a ($G --model $MODEL" "$L" --model "$MODEL" "${RUN[@]}" --steps 5 --out "$d"
  expect_fail "... and a --resume of the same run too" "is in use by process $a" "$G" --resume --out "$d"
  n1=$(grep -c '"train_loss"' "$d/log.jsonl"); sleep 0.5; n2=$(grep -c '"train_loss"' "$d/log.jsonl")
  kill -0 $a 2>/dev/null && [ "$n2" -gt "$n1" ] && python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$d/log.jsonl" \
    && ok "the first run goes on undisturbed ($n1 -> $n2 steps logged, every line valid JSON)" || bad "the first run was disturbed"
  grep -q "process $a on .*--out $d" "$d/.lock" && ok "the lock file names the holder" || bad "lock file: $(cat "$d/.lock")"
  kill -9 $a; wait $a 2>/dev/null
  # a lock left by a killed run is free again: the next run takes it over and says so
  "$G" --model "$MODEL" "${RUN[@]}" --steps 3 --out "$d.2" > /dev/null 2>&1 # (a plain run in another --out: unaffected)
  if "$L" --model "$MODEL" "${RUN[@]}" --lora-rank 2 --steps 2 --out "$d" > "$d.b.log" 2>&1; then
    grep -q "^note: '$d/.lock' names a run that did not end cleanly (killed?); it is gone, so this run takes its place: process $a on " "$d.b.log" \
      && ok "a lock left by a SIGKILLed run is recognised and taken over" || bad "stale lock note: $(grep note "$d.b.log")"
    [ ! -s "$d/.lock" ] && ok "a run that ends cleanly clears the lock file's text" || bad "lock file after a clean end: $(cat "$d/.lock")"
  else tail -3 "$d.b.log"; bad "the run after a killed holder failed"; fi
else cat "$d.a.log"; bad "the first run did not start"; kill -9 $a 2>/dev/null; fi

# ---- item 6 of issue 44: the other programs that write into a folder take its lock too
PREP="${PREPARE_BIN:-data/prepare}"; GEN="$BIN_DIR/generate"
d="$TMP/w"
"$G" --model "$MODEL" "${RUN[@]}" --steps 100000 --out "$d" > "$d.a.log" 2>&1 &
a=$!
if wait_step "$d" $a; then
  before=$(listing "$d" | grep -v -e log.jsonl -e '_0000' | tr '\n' ' ')
  for c in "convert --out $d/x.bin" "convert --to hf --out $d" "data/prepare --out-dir $d" "generate --logits-out $d/l.txt"; do
    case $c in
      "convert --out"*) cmd=("$CONV" --model "$MODEL" --out "$d/x.bin"); flag=--out ;;
      "convert --to"*) cmd=("$CONV" --model "$MODEL" --to hf --out "$d"); flag=--out ;;
      data*) cmd=("$PREP" --input test/ref/prepare_sft.jsonl --out-dir "$d" --val-tokens 0); flag=--out-dir ;;
      *) cmd=("$GEN" --model "$MODEL" --vocab data/gpt2 --prompt '!' -g 2 --logits-out "$d/l.txt"); flag=--logits-out ;;
    esac
    expect_fail "other programs ignore the lock: $c into a running trainer's --out is refused with its pid and command" \
      "$flag $d is in use by process $a ($G --model $MODEL" "${cmd[@]}"
  done
  after=$(listing "$d" | grep -v -e log.jsonl -e '_0000' | tr '\n' ' ')
  [ "$before" = "$after" ] && kill -0 $a && ok "... and wrote nothing there; the trainer goes on ($after)" || bad "the trainer's --out changed: $before -> $after"
  kill -9 $a; wait $a 2>/dev/null
else cat "$d.a.log"; bad "the trainer did not start"; kill -9 $a 2>/dev/null; fi
# a writer holds the lock while it writes (stopped there with SIGSTOP): a trainer started meanwhile
# is refused with the writer's pid; a writer of another file goes ahead, one of the same file is
# refused; the writer's own .lock goes when it ends
d="$TMP/cw"; mkdir -p "$d"
"$CONV" --model d6 --out "$d/big.bin" > "$d.log" 2>&1 &
c=$!
for _ in $(seq 1000); do grep -qs "process $c " "$d/.lock" && break; sleep 0.01; done
if kill -STOP $c 2>/dev/null && grep -qs "process $c " "$d/.lock"; then
  expect_fail "a trainer started while convert writes into its --out is refused with convert's pid" "--out $d is in use by process $c ($CONV --model d6" \
    "$G" --model "$MODEL" "${RUN[@]}" --steps 2 --out "$d"
  "$CONV" --model "$MODEL" --out "$d/small.bin" > "$d.b.log" 2>&1 && [ -f "$d/small.bin" ] \
    && ok "two converts writing different files share a folder" || { cat "$d.b.log"; bad "a second convert of another file"; }
  expect_fail "two converts writing the same file: the second is refused" "--out $d is in use by process $c" "$CONV" --model "$MODEL" --out "$d/big.bin"
  kill -CONT $c; wait $c && [ -f "$d/big.bin" ] && [ ! -e "$d/.lock" ] && ok "the stopped convert completes, and the .lock it made is gone" \
    || bad "after the stopped convert: $(cat "$d.log"; listing "$d")"
else kill -CONT $c 2>/dev/null; wait $c; bad "convert d6 did not hold the lock while it ran: $(cat "$d.log")"; fi
# a killed writer's .lock (marked) goes with the next writer; a trainer takes it over like a killed run's
d="$TMP/kw"; mkdir -p "$d"
"$CONV" --model d6 --out "$d/big.bin" > /dev/null 2>&1 &
c=$!
for _ in $(seq 1000); do grep -qs "process $c " "$d/.lock" && break; sleep 0.01; done
kill -9 $c; wait $c 2>/dev/null
[ -s "$d/.lock" ] && "$CONV" --model "$MODEL" --out "$d/small.bin" > /dev/null 2>&1 && [ ! -e "$d/.lock" ] \
  && ok "the .lock of a SIGKILLed convert goes when the next writer ends" || bad "killed convert's lock: $(listing "$d")"
# killed between making the .lock and writing its text (strace kills it at that pwrite): the empty
# file stayed for good (dev/bench_kill.sh convert found it); an empty .lock says nothing and goes too
if command -v strace > /dev/null 2>&1; then
  d="$TMP/ew"; mkdir -p "$d"
  strace -f -qq -o /dev/null -e trace=pwrite64 -e inject=pwrite64:signal=SIGKILL:when=1 "$CONV" --model "$MODEL" --out "$d/a.bin" > /dev/null 2>&1
  if [ -e "$d/.lock" ] && [ ! -s "$d/.lock" ]; then
    "$CONV" --model "$MODEL" --out "$d/a.bin" > /dev/null 2>&1 && [ ! -e "$d/.lock" ] \
      && ok "the empty .lock of a convert killed before its text went in goes when the next writer ends" || bad "empty lock: $(listing "$d")"
  else echo "skip: the first pwrite64 of convert was not the lock's text here: $(listing "$d")"; fi
fi
d="$TMP/pw"; mkdir -p "$d"
"$PREP" --input test/ref/prepare_sft.jsonl --out-dir "$d" --val-tokens 0 --quiet && [ ! -e "$d/.lock" ] && [ -f "$d/prepare_sft_train_000000.bin" ] \
  && ok "data/prepare leaves no .lock in the data folder" || bad "data/prepare left: $(listing "$d")"

# ---- the same under mpirun: the job holds the lock; a second job or process is refused by rank 0
if command -v mpirun >/dev/null 2>&1; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
  if [ "${SAN:-}" = "1" ]; then # MPI's own allocations, as in test_train_mpi.sh
    export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}:fast_unwind_on_malloc=0"
    export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")" && pwd)/lsan_mpi.supp:print_suppressions=0"
  fi
  d="$TMP/mlk"
  # (mpirun passes SIGTERM on to the ranks and SIGKILLs them 1 s later by default: time for the
  # checkpoint on a loaded machine, README)
  OMPI_MCA_odls_base_sigkill_timeout=5 timeout 120 mpirun -np 2 "$G" --model "$MODEL" "${RUN[@]}" --steps 100000 --out "$d" > "$d.a.log" 2>&1 &
  job=$!
  if wait_step "$d" $job; then
    out=$(timeout 60 mpirun -np 2 "$L" --model "$MODEL" "${RUN[@]}" --steps 5 --out "$d" 2>&1); rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "^error: --out $d is in use by process [0-9]* (.*train_gpt2" <<<"$out" \
      && [ "$(grep -c '^error: --out' <<<"$out")" = 1 ] && ok "mpirun: a second 2-rank job on the same --out is refused with one message (exit $rc)" \
      || bad "mpirun second job: exit $rc: $out"
    expect_fail "mpirun: a single process on the job's --out is refused" "is in use by process" "$G" --resume --out "$d"
    kill -0 $job 2>/dev/null && ok "mpirun: the job goes on" || bad "mpirun: the job ended"
    kill -TERM $job; wait $job 2>/dev/null
    for _ in $(seq 100); do pgrep -f -- "--out $d" > /dev/null || break; sleep 0.1; done
    "$G" --model "$MODEL" "${RUN[@]}" --steps 100000 --stop-after 1 --resume auto --out "$d" > "$d.c.log" 2>&1 \
      && ok "mpirun: once the job has ended its --out is free again" || { tail -3 "$d.c.log"; tail -5 "$d.a.log"; bad "after the mpirun job"; }
  else cat "$d.a.log"; bad "mpirun: the job did not start"; fi
else
  echo "skip: MPI not installed: the mpirun checks did not run"
fi
finish
