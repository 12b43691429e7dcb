#!/usr/bin/env bash
# How runs end and what they report: a run whose last steps are not finite exits non-zero and
# leaves the last good model and checkpoint as they were; --keep-best keeps the model of the best
# validation loss as its own loadable output; early stopping; --epochs; --eval-batches all (and
# a split smaller than --eval-batches read once, with a warning); perplexity, elapsed time, ETA
# and epoch in the log; the summary; a resumed run's log.jsonl cut back to its checkpoint.
source "$(dirname "$0")/lib.sh"
G="$BIN_DIR/train_gpt2"
MODEL=test/ref/gpt2_tiny
make_shard "$TMP/t_000.bin" 6000 100 1
make_shard "$TMP/v_000.bin" 2000 100 3
make_shard "$TMP/w_000.bin" 2000 100 1 # the training data's phrases: its val loss falls, then rises at this lr
RUN=(--model "$MODEL" --train-data "$TMP/t_000.bin" -b 2 -t 32 --threads 2)
VAL=(--val-data "$TMP/v_000.bin")
# (fp32 GEMMs, here and in the re-evaluation of best/: the --keep-best check needs a run whose best
# val loss is not at its last step, which this lr gives in fp32; bf16 GEMMs, --dtype auto on a CPU
# with AVX512-BF16, take another path)
BEST=(--val-data "$TMP/w_000.bin" --lr 1e-2 --schedule constant --eval-every 2 --eval-batches 4 --dtype fp32)
field() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" "$1"; } # values of a log.jsonl field, one a line

# ---- non-finite at the end: exit 1, no final model, nothing overwritten
DIVERGE=(--lr 10 --weight-decay 10 --max-skipped-steps 1000) # weights grow x99 a step: the loss overflows
"$G" "${RUN[@]}" "${DIVERGE[@]}" --steps 30 --out "$TMP/nan" > "$TMP/nan.log" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "^error: the last [0-9]* steps had a non-finite loss or gradient norm" "$TMP/nan.log" \
  && ok "a run ending in non-finite steps exits 1: $(grep -m1 '^error' "$TMP/nan.log" | cut -c1-110)..." || { bad "non-finite end: exit $rc"; tail -4 "$TMP/nan.log"; }
ls "$TMP/nan" | grep -qE '^(model\.|DONE_)' && bad "non-finite end wrote $(ls "$TMP/nan")" || ok "no final model or checkpoint written from non-finite steps"
grep -q '"train_loss": null\|"grad_norm": null' "$TMP/nan/log.jsonl" && ! grep -qi nan "$TMP/nan/log.jsonl" \
  && ok "non-finite values are null in log.jsonl (valid JSON)" || bad "log.jsonl: $(grep -m1 -i nan "$TMP/nan/log.jsonl")"
"$G" "${RUN[@]}" --steps 3 --out "$TMP/good" > "$TMP/good.log" 2>&1 || bad "good run failed"
before=$(cd "$TMP/good" && sha256sum model.safetensors model.bin DONE_00000003 model_00000003.bin state_00000003_00000.bin)
"$G" --resume --out "$TMP/good" --steps 30 "${DIVERGE[@]}" > "$TMP/good2.log" 2>&1; rc=$?
after=$(cd "$TMP/good" && sha256sum model.safetensors model.bin DONE_00000003 model_00000003.bin state_00000003_00000.bin)
[ $rc -eq 1 ] && grep -q "the newest checkpoint (step 3) is kept" "$TMP/good2.log" && [ "$before" = "$after" ] \
  && [ "$(ls "$TMP/good" | grep -c '^DONE_')" = 1 ] && ok "resumed run ending non-finite: exit 1, the step-3 model and checkpoint untouched" \
  || { bad "resumed non-finite end: exit $rc"; tail -3 "$TMP/good2.log"; }

# ---- --keep-best: OUT/best/ holds the model of the lowest val loss, loadable on its own
"$G" "${RUN[@]}" "${BEST[@]}" --steps 16 --keep-best --out "$TMP/kb" > "$TMP/kb.log" 2>&1 \
  || { tail "$TMP/kb.log"; bad "--keep-best run failed"; }
best=$(grep '"val_loss"' "$TMP/kb/log.jsonl" | sort -t: -k3 -g | head -1)
bstep=$(field "$TMP/kb/best/best.json" step); bval=$(field "$TMP/kb/best/best.json" val_loss)
[ -n "$bstep" ] && [ "$bstep" -gt 0 ] && [ "$bstep" -lt 16 ] && [ "$(echo "$best" | sed 's/{"step": \([0-9]*\),.*/\1/')" = "$bstep" ] && [ "$(echo "$best" | sed 's/.*"val_loss": \([^,]*\),.*/\1/')" = "$bval" ] \
  && ok "best/best.json names the lowest val loss of the log (step $bstep, $bval)" || bad "best.json '$(cat "$TMP/kb/best/best.json")' vs log's best '$best'"
"$G" --model "$TMP/kb/best/model.bin" --train-data "$TMP/t_000.bin" --val-data "$TMP/w_000.bin" -b 2 -t 32 --threads 2 --steps 1 --eval-every 1 --eval-batches 4 --dtype fp32 \
  --out "$TMP/kb_load" > "$TMP/kb_load.log" 2>&1 || bad "best/model.bin does not load"
v0=$(grep '"val_loss"' "$TMP/kb_load/log.jsonl" | head -1 | sed 's/.*"val_loss": \([^,]*\),.*/\1/')
[ -n "$v0" ] && [ "$v0" = "$bval" ] && ok "best/model.bin loads and evaluates to the recorded best val loss, bit for bit" || bad "best model val loss $v0 vs $bval"
[ -s "$TMP/kb/best/model.safetensors" ] && [ -s "$TMP/kb/best/config.json" ] && ok "best/ is a transformers directory too" || bad "best/ lacks the HF files"
grep -q "^summary: .* | best model: $TMP/kb/best/" "$TMP/kb.log" && ok "the summary names best/" || bad "summary: $(grep '^summary' "$TMP/kb.log")"
# an interrupted save of best/ leaves a temporary file: the next run in the directory removes it
touch "$TMP/kb/best/model.bin.tmp.4242"
"$G" --resume --out "$TMP/kb" --steps 17 > "$TMP/kb2.log" 2>&1 && [ ! -e "$TMP/kb/best/model.bin.tmp.4242" ] && grep -q "^cleanup: removed 1 leftover file" "$TMP/kb2.log" \
  && ok "a leftover temporary file in best/ is removed when the run resumes" || { bad "best/ leftover"; grep cleanup "$TMP/kb2.log"; }

# ---- early stopping: the val loss rises after a while
"$G" "${RUN[@]}" "${BEST[@]}" --steps 200 --early-stopping-patience 2 --out "$TMP/es" > "$TMP/es.log" 2>&1; rc=$?
last=$(field "$TMP/es/log.jsonl" step | tail -1)
[ $rc -eq 0 ] && [ "$last" -lt 200 ] && grep -q "^early stopping: 2 evaluations in a row did not improve" "$TMP/es.log" && [ -s "$TMP/es/model.bin" ] \
  && grep -q "^summary: stopped early" "$TMP/es.log" && ok "early stopping ended the run at step $last of 200 (exit 0, final model written)" \
  || { bad "early stopping: exit $rc, last step $last"; tail -5 "$TMP/es.log"; }
# the two evaluations after the best did not beat it
python3 - "$TMP/es/log.jsonl" <<'PY' && ok "stopped after exactly 2 evaluations without a new best" || bad "early stopping decision wrong"
import json, sys
v = [json.loads(l)["val_loss"] for l in open(sys.argv[1]) if "val_loss" in l]
i = v.index(min(v))
sys.exit(0 if len(v) - 1 - i == 2 else 1)
PY

# the best loss and the evaluations since it travel in checkpoints: stopped at step 9 (after the
# evaluation at 8, one without a new best), resumed, the run stops at the same step with the same log
"$G" "${RUN[@]}" "${BEST[@]}" --steps 200 --early-stopping-patience 2 --keep-best --stop-after 9 --out "$TMP/es2" > /dev/null 2>&1
"$G" --resume --out "$TMP/es2" > "$TMP/es2.log" 2>&1
strip() { sed -E 's/, "ms": [0-9.]+, "tok_per_s": [0-9.]+, "tflops": [0-9.]+, "mfu": [0-9.a-z]+, "elapsed_s": [0-9.]+//' "$1"; }
v6=$(grep '"step": 6, "val_loss"' "$TMP/es/log.jsonl" | sed 's/.*"val_loss": \([^,]*\),.*/\1/')
diff <(strip "$TMP/es/log.jsonl") <(strip "$TMP/es2/log.jsonl") > /dev/null && grep -q "^summary: stopped early" "$TMP/es2.log" \
  && [ "$(field "$TMP/es2/best/best.json" step)" = 6 ] && [ "$(field "$TMP/es2/best/best.json" val_loss)" = "$v6" ] \
  && ok "early stopping and the best loss resume exactly (stopped at step 9, resumed: same log, best.json of step 6)" \
  || { bad "early stopping after resume differs"; diff <(strip "$TMP/es/log.jsonl") <(strip "$TMP/es2/log.jsonl") | head -5; cat "$TMP/es2/best/best.json"; }

# ---- --epochs, --eval-batches all, perplexity, elapsed / ETA / epoch
"$G" "${RUN[@]}" "${VAL[@]}" --epochs 0.5 --eval-batches all --out "$TMP/ep" > "$TMP/ep.log" 2>&1 || { tail "$TMP/ep.log"; bad "--epochs run failed"; }
bpe=$(sed -n 's/^data: .*(6000 tokens, \([0-9]*\) batches\/epoch).*/\1/p' "$TMP/ep.log")
want=$(( (bpe + 1) / 2 ))
grep -q "^step *$want/$want | .* | epoch 0.5[0-9] | [0-9:]* elapsed, ETA [0-9:]*$" "$TMP/ep.log" \
  && ok "--epochs 0.5 of $bpe batches = $want steps; console line with epoch, elapsed, ETA" || bad "epochs: $(grep '^step' "$TMP/ep.log" | tail -1)"
grep -q "\"epoch\": 0.5" "$TMP/ep/log.jsonl" && grep -q '"elapsed_s": ' "$TMP/ep/log.jsonl" && ok "log.jsonl has epoch and elapsed_s" || bad "log.jsonl fields"
"$G" "${RUN[@]}" "${VAL[@]}" --steps 1 --eval-batches all --out "$TMP/eall" > "$TMP/eall.log" 2>&1
"$G" "${RUN[@]}" "${VAL[@]}" --steps 1 --eval-batches 32 --out "$TMP/e31" > "$TMP/e31.log" 2>&1
"$G" "${RUN[@]}" "${VAL[@]}" --steps 1 --eval-batches 500 --out "$TMP/e500" > "$TMP/e500.log" 2>&1
a=$(field "$TMP/eall/log.jsonl" val_loss | head -1); b=$(field "$TMP/e31/log.jsonl" val_loss | head -1); c=$(field "$TMP/e500/log.jsonl" val_loss | head -1)
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] && ok "--eval-batches all = 32 = 500 on a 32-batch split (31 + a partial one) ($a)" || bad "val losses all '$a', 32 '$b', 500 '$c'"
grep -q "^warning: --eval-batches 500 is more than the 32 batches of the validation split" "$TMP/e500.log" && ok "a split smaller than --eval-batches warns" \
  || bad "no warning: $(grep -i warn "$TMP/e500.log")"
python3 - "$TMP/ep/log.jsonl" <<'PY' && ok "val_ppl = exp(val_loss)" || bad "perplexity"
import json, math, sys
r = [json.loads(l) for l in open(sys.argv[1]) if "val_loss" in l]
sys.exit(0 if r and all(abs(x["val_ppl"] - math.exp(x["val_loss"])) <= 1e-6 * x["val_ppl"] for x in r) else 1)
PY
grep -q "^step $want | val loss [0-9.]* | perplexity [0-9.]*$" "$TMP/ep.log" && ok "eval lines print the perplexity" || bad "eval line: $(grep 'val loss' "$TMP/ep.log" | head -1)"
grep -q "^summary: finished at step $want of $want | $((want * 64)) tokens seen (0.5[0-9] epochs)" "$TMP/ep.log" \
  && grep -q "^summary: val loss [0-9.]* (perplexity [0-9.]*) at step $want | best " "$TMP/ep.log" && ok "summary: steps, tokens, epochs, final and best val loss" \
  || bad "summary: $(grep '^summary' "$TMP/ep.log")"
expect_fail "--steps and --epochs" "--steps and --epochs both given" "$G" "${RUN[@]}" --steps 3 --epochs 1 --out "$TMP/x"
expect_fail "--keep-best without --val-data" "--keep-best needs --val-data" "$G" "${RUN[@]}" --keep-best --out "$TMP/x"
expect_fail "early stopping without --eval-every" "--early-stopping-patience needs --eval-every" "$G" "${RUN[@]}" "${VAL[@]}" --early-stopping-patience 3 --out "$TMP/x"
expect_fail "bad --eval-batches" "--eval-batches: 'some' is not a count" "$G" "${RUN[@]}" "${VAL[@]}" --eval-batches some --out "$TMP/x"

# ---- without --out: a directory of its own, printed; --out none: nothing written
G_ABS="$(cd "$(dirname "$G")" && pwd)/train_gpt2"; M_ABS="$PWD/$MODEL"
mkdir -p "$TMP/cwd1" "$TMP/cwd2"
( cd "$TMP/cwd1" && "$G_ABS" --model "$M_ABS" --train-data "$TMP/t_000.bin" -b 2 -t 32 --steps 2 --threads 2 > "$TMP/cwd1.log" 2>&1 ) || bad "run without --out failed"
d=$(sed -n 's/^output: \(out\/train_gpt2-[0-9]*-[0-9]*\) (no --out given)$/\1/p' "$TMP/cwd1.log")
[ -n "$d" ] && [ -s "$TMP/cwd1/$d/run_config.json" ] && [ -s "$TMP/cwd1/$d/model.safetensors" ] && grep -q "^summary: outputs in $d/" "$TMP/cwd1.log" \
  && ok "without --out the run gets $d (printed at start and in the summary)" || { bad "default output directory"; tail -3 "$TMP/cwd1.log"; }
( cd "$TMP/cwd2" && "$G_ABS" --model "$M_ABS" --train-data "$TMP/t_000.bin" -b 2 -t 32 --steps 2 --threads 2 --out none > "$TMP/cwd2.log" 2>&1 ) \
  && [ -z "$(ls -A "$TMP/cwd2")" ] && grep -q "^summary: --out none: nothing was written" "$TMP/cwd2.log" && ok "--out none writes nothing" \
  || { bad "--out none wrote $(ls -A "$TMP/cwd2")"; tail -3 "$TMP/cwd2.log"; }

# ---- a crash leaves log lines after the newest checkpoint: the resumed run drops them
C=("${RUN[@]}" "${VAL[@]}" --steps 8 --lr 3e-3 --eval-every 2 --eval-batches 2)
"$G" "${C[@]}" --out "$TMP/s" > /dev/null 2>&1 || bad "straight run failed"
"$G" "${C[@]}" --out "$TMP/k" --stop-after 4 > /dev/null 2>&1 || bad "first part failed"
cp "$TMP/s/log.jsonl" "$TMP/k/log.jsonl" # as if the run had logged up to step 8 before it was killed
"$G" --resume --out "$TMP/k" > "$TMP/k2.log" 2>&1 || bad "resume failed"
diff <(strip "$TMP/s/log.jsonl") <(strip "$TMP/k/log.jsonl") > /dev/null && grep -q "^log.jsonl: [0-9]* bytes logged after the checkpoint of step 4 dropped" "$TMP/k2.log" \
  && ok "resumed run cut the log back to its checkpoint: the log equals the straight run's" || { bad "log after resume differs"; diff <(strip "$TMP/s/log.jsonl") <(strip "$TMP/k/log.jsonl") | head; }
finish
