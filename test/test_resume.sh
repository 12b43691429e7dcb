#!/usr/bin/env bash
# The run directory records the run: OUT/run_config.json holds the resolved settings, so
# `--resume --out DIR` alone continues a run (train_lora here; train_gpt2 in test_train_cli.sh)
# and reproduces the uninterrupted run loss for loss; flags given with --resume override the
# record where that is safe and are reported (a changed schedule with the learning rate of the
# next step both ways); changes to what the checkpoint means (model, data, batch geometry, LoRA
# structure) are refused naming the flag; the other trainer is told which program to use;
# --resume auto starts a new run when there is nothing to resume, plain --resume refuses; a LoRA
# run whose base model.safetensors was replaced is refused, naming the file (issue 29 item 8).
source "$(dirname "$0")/lib.sh"
BIN_DIR=$(cd "$BIN_DIR" && pwd) # (one run starts in another directory)
L="$BIN_DIR/train_lora"; G="$BIN_DIR/train_gpt2"
MODEL=test/ref/gpt2_tiny
make_shard "$TMP/t_000.bin" 4000 100 1
make_shard "$TMP/v_000.bin" 1500 100 2
make_shard "$TMP/other.bin" 4000 100 3
LORA=(--model "$MODEL" --train-data "$TMP/t_*.bin" --val-data "$TMP/v_000.bin" -b 2 -t 16 --total-batch-tokens 64
      --steps 8 --lr 2e-3 --warmup-steps 2 --lora-rank 4 --lora-alpha 8 --lora-targets q,v --lora-dropout 0.1
      --eval-every 4 --eval-batches 2 --save-every 3 --threads 2 --seed 7)
losses() { grep -o '"train_loss": [^,]*\|"val_loss": [^,]*' "$1/log.jsonl" | tr '\n' ' '; }

# ---- LoRA: stopped after 3 steps, resumed with --out alone
"$L" "${LORA[@]}" --out "$TMP/straight" > "$TMP/s.log" 2>&1 || { tail "$TMP/s.log"; bad "straight LoRA run failed"; }
[ -s "$TMP/straight/run_config.json" ] && grep -q '"program": "train_lora"' "$TMP/straight/run_config.json" \
  && ok "run_config.json records the run" || bad "no run_config.json"
"$L" "${LORA[@]}" --out "$TMP/r" --stop-after 3 > "$TMP/r1.log" 2>&1 || { tail "$TMP/r1.log"; bad "first part failed"; }
"$L" --resume --out "$TMP/r" > "$TMP/r2.log" 2>&1 || { tail "$TMP/r2.log"; bad "resume with --out alone failed"; }
grep -q "resumed: step 3" "$TMP/r2.log" && ! grep -q "^resume: " "$TMP/r2.log" && ok "resumed at step 3, nothing reported as changed" \
  || bad "resume: $(grep -i resum "$TMP/r2.log")"
a=$(losses "$TMP/straight"); b=$(losses "$TMP/r")
[ -n "$a" ] && [ "$a" = "$b" ] && ok "LoRA resume with --out alone is exact: $(wc -w <<<"$a") numbers" || bad "losses differ: '$a' vs '$b'"
cmp -s "$TMP/straight/adapter_model.safetensors" "$TMP/r/adapter_model.safetensors" && ok "same final adapter, byte for byte" \
  || bad "final adapters differ"

# ---- what a resume drops from log.jsonl, and what runs again, said as it is (issue 44 item 19a:
# resuming a finished run said "60 bytes ... dropped (those steps run again)" for the evaluation
# at its last step, and no step ran again)
cp -r "$TMP/straight" "$TMP/fin"
"$L" --resume --out "$TMP/fin" > "$TMP/fin.log" 2>&1 || { tail "$TMP/fin.log"; bad "resuming a finished run failed"; }
grep -q "^log.jsonl: [0-9]* bytes logged after the checkpoint of step 8 dropped: the evaluation at step 8; it runs again$" "$TMP/fin.log" \
  && ! grep -qE "^step +[0-9]+/" "$TMP/fin.log" && [ "$(losses "$TMP/fin")" = "$(losses "$TMP/straight")" ] \
  && ok "a finished run resumed: $(grep '^log.jsonl' "$TMP/fin.log" | cut -d: -f2-) (no step runs, the log is the same)" \
  || bad "resuming a finished run: $(grep -E '^log.jsonl|^step ' "$TMP/fin.log" | head -3)"
# a crash after step 8 with the checkpoint of step 3 (the log of the whole run left behind, the
# last line cut short), resumed as it was, and with a shorter run of other evaluations
for v in same shorter; do
  "$L" "${LORA[@]}" --out "$TMP/crash_$v" --stop-after 3 > /dev/null 2>&1 || bad "first part ($v) failed"
  cp "$TMP/straight/log.jsonl" "$TMP/crash_$v/log.jsonl"
done
printf '{"step": 9, "train_lo' >> "$TMP/crash_same/log.jsonl"
"$L" --resume --out "$TMP/crash_same" > "$TMP/crash_same.log" 2>&1 || bad "resuming after a crash failed"
grep -q "^log.jsonl: [0-9]* bytes logged after the checkpoint of step 3 dropped: steps 4-8, the evaluations at steps 4 and 8 and an unreadable line; they run again$" "$TMP/crash_same.log" \
  && [ "$(losses "$TMP/crash_same")" = "$(losses "$TMP/straight")" ] && ok "after a crash: $(grep '^log.jsonl' "$TMP/crash_same.log" | cut -d: -f2-)" \
  || bad "after a crash: $(grep '^log.jsonl' "$TMP/crash_same.log")"
"$L" --resume --out "$TMP/crash_shorter" --steps 6 --eval-every 5 > "$TMP/crash_shorter.log" 2>&1 || { tail -3 "$TMP/crash_shorter.log"; bad "resuming shorter failed"; }
grep -q "^log.jsonl: [0-9]* bytes logged after the checkpoint of step 3 dropped: steps 4-8 and the evaluations at steps 4 and 8; steps 4-6 run again (this run's --steps 6, --eval-every 5)$" \
  "$TMP/crash_shorter.log" && ok "after a crash, resumed shorter: $(grep '^log.jsonl' "$TMP/crash_shorter.log" | cut -d: -f2-)" \
  || bad "resumed shorter: $(grep '^log.jsonl' "$TMP/crash_shorter.log")"

# ---- what a resume may not change: one clear message naming the flag, exit 1, nothing written
before=$(cd "$TMP/r" && ls -l --time-style=+%s.%N | sha256sum)
expect_fail "changed model refused" "--model $TMP/other differs from the run's recorded $PWD/$MODEL" "$L" --resume --out "$TMP/r" --model "$TMP/other"
expect_fail "changed data refused" "--train-data $TMP/other.bin differs" "$L" --resume --out "$TMP/r" --train-data "$TMP/other.bin"
expect_fail "changed LoRA rank refused" "--lora-rank 8 differs from the run's recorded 4" "$L" --resume --out "$TMP/r" --lora-rank 8
expect_fail "changed LoRA targets refused" "the adapter in the checkpoint has the recorded structure" "$L" --resume --out "$TMP/r" --lora-targets c_attn
expect_fail "changed seq-len refused" "--seq-len 32 differs" "$L" --resume --out "$TMP/r" --seq-len 32
expect_fail "other trainer told which one" "holds a train_lora run (its run_config.json says so), not a train_gpt2 one: resume it with train_lora" \
  "$G" --resume --out "$TMP/r"
# a run directory of an earlier version (no record): the checkpoint tells the trainer
cp -r "$TMP/r" "$TMP/norec" && rm "$TMP/norec/run_config.json"
expect_fail "other trainer, no record" "holds a train_lora run (its checkpoint '$TMP/norec/state_00000008_00000.bin' says so): resume it with train_lora" \
  "$G" --model "$MODEL" --train-data "$TMP/t_*.bin" -b 2 -t 16 --resume --out "$TMP/norec"
# a damaged record: one message naming it
cp -r "$TMP/r" "$TMP/badrec" && sed -i 's/"lora_rank": 4/"lora_rank": "four"/' "$TMP/badrec/run_config.json"
expect_fail "damaged run_config.json" "the run's settings cannot be read: '$TMP/badrec/run_config.json': flags: --lora-rank: not an integer" \
  "$L" --resume --out "$TMP/badrec"
after=$(cd "$TMP/r" && ls -l --time-style=+%s.%N | sha256sum)
[ "$before" = "$after" ] && ok "refused resumes left the run directory as it was" || bad "a refused resume changed the run directory"

# ---- what it may: longer run and another schedule, reported with the learning rate both ways
"$L" --resume --out "$TMP/r" --steps 12 --eval-every 6 --lr 1e-3 > "$TMP/r3.log" 2>&1 || { tail "$TMP/r3.log"; bad "extending the run failed"; }
grep -q "^resume: --steps 12 (recorded: 8)" "$TMP/r3.log" && grep -q "^resume: --lr 0.001 (recorded: 0.002)" "$TMP/r3.log" \
  && grep -q "^resume: --eval-every 6 (recorded: 4)" "$TMP/r3.log" && ok "overrides reported" || bad "overrides: $(grep '^resume' "$TMP/r3.log")"
grep -q "^resume: the schedule changed: the learning rate of step 9 is .* (with the recorded settings: 0.0000e+00); the run ends at step 12 (recorded: 8)" "$TMP/r3.log" \
  && ok "the schedule change says the next step's learning rate both ways" || bad "schedule note: $(grep 'schedule' "$TMP/r3.log")"
grep -q '"steps": 12' "$TMP/r/run_config.json" && grep -q '"lr": 0.001,' "$TMP/r/run_config.json" \
  && ok "run_config.json updated with the overrides" || bad "record not updated"
[ "$(grep -c '"train_loss"' "$TMP/r/log.jsonl")" = 12 ] && ok "12 steps logged" || bad "log has $(grep -c '"train_loss"' "$TMP/r/log.jsonl") steps"

# ---- the record names files by absolute paths: a resume from another directory finds them, and
# the same file named another way (here through a symbolic link) is no change
ln -s "$PWD/test" "$TMP/testlink"
( cd "$TMP" && "$L" --resume --out r --steps 13 --model testlink/ref/gpt2_tiny > "$TMP/r4.log" 2>&1 ) && grep -q "resumed: step 12" "$TMP/r4.log" \
  && grep -q "^resume: --steps 13 (recorded: 12)" "$TMP/r4.log" && [ "$(grep -c '^resume: --' "$TMP/r4.log")" = 1 ] \
  && ok "resumed from another working directory; the model named through a link is the same model" || { bad "resume from elsewhere"; tail -5 "$TMP/r4.log"; }

# ---- issue 29 item 8, "a LoRA run resumes on a base whose model.safetensors was replaced": the
# record keeps the size and CRC-32C of the base's files
cp -r "$MODEL" "$TMP/base"
"$L" "${LORA[@]}" --model "$TMP/base" --out "$TMP/rb" --stop-after 3 > "$TMP/rb1.log" 2>&1 || { tail "$TMP/rb1.log"; bad "LoRA run on a copied base failed"; }
grep -q '"name": "model.safetensors"' "$TMP/rb/run_config.json" && ok "run_config.json records the base's files" || bad "no base_files in the record"
cp "$TMP/base/model.safetensors" "$TMP/base.orig"
python3 - "$TMP/base/model.safetensors" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[-5] ^= 0x40; open(p, "wb").write(bytes(b))
PY
expect_fail "a LoRA run no longer resumes on a replaced base: refused, naming the file" \
  "the base model changed since the run in --out $TMP/rb started: '$TMP/base/model.safetensors' has" "$L" --resume --out "$TMP/rb"
rm "$TMP/base/config.json"
expect_fail "a base file gone: refused, naming it" "'$TMP/base/config.json' is missing" "$L" --resume --out "$TMP/rb"
cp "$MODEL/config.json" "$TMP/base/"; cp "$TMP/base.orig" "$TMP/base/model.safetensors"
"$L" --resume --out "$TMP/rb" > "$TMP/rb2.log" 2>&1 && grep -q "resumed: step 3" "$TMP/rb2.log" && ok "the restored base resumes" || { tail -3 "$TMP/rb2.log"; bad "restored base"; }

# ---- --resume auto and plain --resume with nothing to resume
mkdir -p "$TMP/empty"
"$L" "${LORA[@]}" --steps 2 --out "$TMP/empty" --resume auto > "$TMP/auto.log" 2>&1 && grep -q "resume auto: no checkpoint in $TMP/empty: starting a new run" "$TMP/auto.log" \
  && [ -f "$TMP/empty/DONE_00000002" ] && ok "--resume auto on an empty directory starts a new run" || { tail "$TMP/auto.log"; bad "--resume auto on an empty dir"; }
"$L" "${LORA[@]}" --steps 4 --out "$TMP/empty" --resume auto > "$TMP/auto2.log" 2>&1 && grep -q "resumed: step 2" "$TMP/auto2.log" \
  && ok "--resume auto continues when there is a checkpoint" || { tail "$TMP/auto2.log"; bad "--resume auto with a checkpoint"; }
expect_fail "plain --resume with nothing to resume" "no complete checkpoint" "$L" "${LORA[@]}" --out "$TMP/nothing" --resume
finish
