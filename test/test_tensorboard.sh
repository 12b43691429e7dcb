#!/usr/bin/env bash
# --tensorboard DIR (llmc/run/tfevents.c, llmc/run/runlog.c): the trainers' TensorBoard event
# files hold the numbers of log.jsonl, each step once, before and after a resume and after a crash
# left events past the checkpoint (cut back as log.jsonl is), read by our record reader
# (test_tfevents dump: every record's length and CRCs checked) and, where the python of TB_PYTHON
# (default python3) has the `tensorboard` package, by its EventAccumulator (skipped, loudly,
# where it has not); test/check_tfevents.py compares both with log.jsonl. The values of a resumed
# run are the straight run's; --tensorboard given first on resuming starts a file at the checkpoint.
# train_lora with --dtype fp16 (the loss scale), DPO (TRL's metrics),
# a directory that holds another run's file, a directory that cannot be made.
source "$(dirname "$0")/lib.sh"
G="$BIN_DIR/train_gpt2"; L="$BIN_DIR/train_lora"
DUMP="${BUILD:-build/cpu}/test/test_tfevents"
TB_PYTHON="${TB_PYTHON:-python3}"
[ -x "$DUMP" ] || { echo "FAIL: $DUMP not built"; exit 1; }
MODEL=test/ref/gpt2_tiny
make_shard "$TMP/t_000.bin" 6000 100 1
make_shard "$TMP/v_000.bin" 2000 100 3
C=(--model "$MODEL" --train-data "$TMP/t_000.bin" --val-data "$TMP/v_000.bin" -b 2 -t 32 --threads 2 --steps 8 --lr 3e-3
   --eval-every 2 --eval-batches 2 --save-every 4)
events() { ls "$1"/events.out.tfevents.* 2>/dev/null; }
# check NAME OUT TB: the event file of TB against OUT/log.jsonl, with our reader and with tensorboard's
check() {
  local f; f=$(events "$3")
  [ "$(wc -l <<<"$f")" = 1 ] && [ -n "$f" ] || { bad "$1: $(wc -l <<<"$f") event files in $3: $f"; return; }
  if "$DUMP" dump "$f" > "$TMP/$1.dump" 2> "$TMP/$1.err" && out=$(python3 test/check_tfevents.py dump "$TMP/$1.dump" "$2/log.jsonl"); then
    ok "$1, our reader: $out"
  else bad "$1, our reader: $(cat "$TMP/$1.err") $out"; fi
  if [ "$have_tb" = 1 ]; then
    out=$("$TB_PYTHON" test/check_tfevents.py accumulator "$3" "$2/log.jsonl" 2>&1) && ok "$1, EventAccumulator: $out" || bad "$1, EventAccumulator: $out"
  fi
}
have_tb=0
if "$TB_PYTHON" -c "import tensorboard" 2>/dev/null; then have_tb=1
else echo "SKIP: $TB_PYTHON has no tensorboard package (pip install tensorboard; TB_PYTHON=...): EventAccumulator's reading is not checked"; fi

# ---- a straight run, and the same run stopped at step 4 and resumed
"$G" "${C[@]}" --out "$TMP/s" --tensorboard "$TMP/s_tb" > "$TMP/s.log" 2>&1 || { tail -3 "$TMP/s.log"; bad "straight run failed"; }
grep -q "^tensorboard: events in $TMP/s_tb/events.out.tfevents.[0-9]*\.[^/]*$" "$TMP/s.log" && ok "the run names its event file" \
  || bad "no event file named: $(grep -m1 tensorboard "$TMP/s.log")"
check straight "$TMP/s" "$TMP/s_tb"
"$G" "${C[@]}" --out "$TMP/k" --tensorboard "$TMP/k_tb" --stop-after 4 > /dev/null 2>&1 || bad "first part failed"
"$G" --resume --out "$TMP/k" > "$TMP/k2.log" 2>&1 || { tail -3 "$TMP/k2.log"; bad "resume failed"; }
grep -q "^tensorboard: continuing $(events "$TMP/k_tb")$" "$TMP/k2.log" && ! grep -q "dropped from" "$TMP/k2.log" \
  && ok "the resumed run continues its event file (--tensorboard from run_config.json), nothing dropped" \
  || bad "resume: $(grep tensorboard "$TMP/k2.log")"
check resumed "$TMP/k" "$TMP/k_tb"
# the numbers that do not depend on the clock: the straight run's
same() { grep -E " (train/(loss|learning_rate|grad_norm|epoch)|eval/(loss|ppl))" "$1"; }
[ -n "$(same "$TMP/straight.dump")" ] && diff <(same "$TMP/straight.dump") <(same "$TMP/resumed.dump") > /dev/null \
  && ok "the resumed run's losses, lr, norms, epochs and evaluations are the straight run's: $(same "$TMP/resumed.dump" | wc -l) scalars" \
  || bad "resumed values differ: $(diff <(same "$TMP/straight.dump") <(same "$TMP/resumed.dump") | head -3)"

# ---- --tensorboard given first on resuming (a harmless change): a new file from the next step on
"$G" "${C[@]}" --out "$TMP/n" --stop-after 4 > /dev/null 2>&1 || bad "first part (no --tensorboard) failed"
"$G" --resume --out "$TMP/n" --tensorboard "$TMP/n_tb" > "$TMP/n2.log" 2>&1 || { tail -3 "$TMP/n2.log"; bad "resume with --tensorboard failed"; }
nf=$(events "$TMP/n_tb")
[ -n "$nf" ] && "$DUMP" dump "$nf" > "$TMP/n.dump" && [ "$(grep -v '^version' "$TMP/n.dump" | cut -d' ' -f1 | sort -n | uniq | tr '\n' ' ')" = "4 5 6 7 8 " ] \
  && ok "--tensorboard added on resume: a new file, steps 4 (its evaluation again) to 8" || bad "added on resume: $(cut -d' ' -f1 "$TMP/n.dump" 2>/dev/null | uniq | tr '\n' ' ')"

# ---- a crash after step 8 with the checkpoint of step 4: the event file of the whole run left
# behind, its last record cut short; the resumed run drops what follows the checkpoint
"$G" "${C[@]}" --out "$TMP/c" --tensorboard "$TMP/c_tb" --stop-after 4 > /dev/null 2>&1 || bad "first part (crash) failed"
cf=$(events "$TMP/c_tb")
cp "$(events "$TMP/s_tb")" "$cf"; cp "$TMP/s/log.jsonl" "$TMP/c/log.jsonl"
head -c 30 "$cf" >> "$cf" # (a record cut short)
"$G" --resume --out "$TMP/c" > "$TMP/c2.log" 2>&1 || { tail -3 "$TMP/c2.log"; bad "resume after the crash failed"; }
grep -q "^tensorboard: [0-9]* bytes ([0-9]* events) logged after the checkpoint of step 4 dropped from $cf$" "$TMP/c2.log" \
  && ok "after a crash: $(grep -m1 '^tensorboard:' "$TMP/c2.log" | cut -d' ' -f2-)" || bad "crash: $(grep tensorboard "$TMP/c2.log")"
check crashed "$TMP/c" "$TMP/c_tb"
diff <(same "$TMP/straight.dump") <(same "$TMP/crashed.dump") > /dev/null && ok "after the crash, the straight run's values, each once" \
  || bad "crash values differ: $(diff <(same "$TMP/straight.dump") <(same "$TMP/crashed.dump") | head -3)"

# ---- train_lora, --dtype fp16 (train/loss_scale, train/skipped_steps); a directory that holds
# another run's file is said to
"$L" "${C[@]}" --steps 3 --dtype fp16 --out "$TMP/l" --tensorboard "$TMP/s_tb" > "$TMP/l.log" 2>&1 || { tail -3 "$TMP/l.log"; bad "train_lora failed"; }
grep -q "^warning: --tensorboard $TMP/s_tb holds the event file of another run" "$TMP/l.log" && ok "a directory with another run's event file: warned" \
  || bad "no warning: $(grep tensorboard "$TMP/l.log")"
lf=$(ls -t "$TMP"/s_tb/events.out.tfevents.* | head -1); mkdir -p "$TMP/l_tb"; mv "$lf" "$TMP/l_tb/"
check lora_fp16 "$TMP/l" "$TMP/l_tb"
grep -q " train/loss_scale 65536$" "$TMP/lora_fp16.dump" && grep -q " train/skipped_steps " "$TMP/lora_fp16.dump" \
  && ok "--dtype fp16: train/loss_scale and train/skipped_steps" || bad "fp16 scalars: $(grep -c loss_scale "$TMP/lora_fp16.dump")"
# ---- a preference objective: TRL's metrics as train/rewards/..., eval/rewards/... (full
# fine-tuning's DPO on test_pref's pair shard)
D="$TMP/pairs_000000.bin"
if LLMC_PREF_SHARD="$D" "${BUILD:-build/cpu}/test/test_pref" > /dev/null 2>&1; then
  "$G" --model test/ref/pref_tiny --train-data "$D" --val-data "$D" -b 2 -t 64 --steps 2 --objective dpo --dtype fp32 --threads 2 \
    --save-format none --out "$TMP/p" --tensorboard "$TMP/p_tb" > "$TMP/p.log" 2>&1 || { tail -3 "$TMP/p.log"; bad "the DPO run failed"; }
  check dpo "$TMP/p" "$TMP/p_tb"
  grep -q "^2 train/rewards/accuracies " "$TMP/dpo.dump" && grep -q "^2 train/logps/rejected " "$TMP/dpo.dump" && grep -q "^2 eval/rewards/margins " "$TMP/dpo.dump" \
    && ok "dpo: TRL's metrics, train/rewards/accuracies ... eval/rewards/margins" || bad "dpo tags: $(cut -d' ' -f2 "$TMP/dpo.dump" | sort -u | tr '\n' ' ')"
else bad "test_pref wrote no pair shard"; fi
# ---- a --tensorboard that cannot be made
touch "$TMP/afile"
expect_fail "--tensorboard on a file" "afile" "$G" "${C[@]}" --steps 1 --out "$TMP/bad" --tensorboard "$TMP/afile/tb"
finish
