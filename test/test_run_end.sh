#!/usr/bin/env bash
# How runs end and what they report: a run whose last steps are not finite exits non-zero and
# leaves the last good model and checkpoint as they were, and a diverging run keeps its newest good
# checkpoint and names it (issue 29 item 2); a log.jsonl that cannot be written stops the run; --keep-best keeps the model of the best
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
[ $rc -eq 1 ] && grep -q "the newest good checkpoint is step 3: continue from it with \`train_gpt2 --resume --out $TMP/good\`" "$TMP/good2.log" && [ "$before" = "$after" ] \
  && [ "$(ls "$TMP/good" | grep -c '^DONE_')" = 1 ] && ok "resumed run ending non-finite: exit 1, the step-3 model and checkpoint untouched" \
  || { bad "resumed non-finite end: exit $rc"; tail -3 "$TMP/good2.log"; }

# ---- issue 29 item 2, "a run that diverges prunes its good checkpoints": resumed with --lr 1
# --grad-clip 0 --beta2 0 --eps 1e-30, a step with a finite loss leaves weights near 1e27 and
# every step after it is NaN; the checkpoints of those steps were written and the good ones pruned.
# Now: no checkpoint after a non-finite step, the newest good one survives pruning, one the
# non-finite steps showed bad is removed, and the error names the good one and the command.
finite_model() { # finite_model FILE: every weight of an llm.c .bin is finite
  python3 - "$1" <<'PY'
import array, math, sys
b = open(sys.argv[1], "rb").read()
a = array.array("f"); a.frombytes(b[1024:])
sys.exit(0 if all(math.isfinite(x) for x in a) else 1)
PY
}
"$G" "${RUN[@]}" --dtype fp32 --steps 36 --save-every 2 --out "$TMP/dv" > "$TMP/dv1.log" 2>&1 || { tail -3 "$TMP/dv1.log"; bad "the run to resume failed"; }
good=$(cd "$TMP/dv" && sha256sum DONE_00000036 model_00000036.bin state_00000036_00000.bin)
"$G" --resume --out "$TMP/dv" --steps 60 --lr 1 --grad-clip 0 --beta2 0 --eps 1e-30 > "$TMP/dv2.log" 2>&1; rc=$?
kept=$(ls "$TMP/dv" | sed -n 's/^DONE_0*\([0-9][0-9]*\)$/\1/p' | sort -n | tail -1)
named=$(sed -n 's/.*the newest good checkpoint is step \([0-9]*\): continue from it with `train_gpt2 --resume --out .*/\1/p' "$TMP/dv2.log")
[ $rc -eq 1 ] && grep -q '"skipped": true' "$TMP/dv/log.jsonl" && ok "the resumed run diverged (exit 1)" || { bad "divergence: exit $rc"; tail -3 "$TMP/dv2.log"; }
[ "$good" = "$(cd "$TMP/dv" && sha256sum DONE_00000036 model_00000036.bin state_00000036_00000.bin 2>&1)" ] \
  && ok "the last good checkpoint (step 36, where the run resumed) survives pruning, byte for byte" || bad "step 36 pruned or changed: $(ls "$TMP/dv")"
allfinite=1
for m in "$TMP"/dv/model_*.bin; do finite_model "$m" || allfinite=0; done
bad_after=$(python3 - "$TMP/dv/log.jsonl" $(ls "$TMP/dv" | sed -n 's/^DONE_0*\([0-9][0-9]*\)$/\1/p') <<'PY'
import json, sys
steps = {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "train_loss" in r: steps[r["step"]] = not r.get("skipped", False)
# a kept checkpoint S is good: the step after it was finite (or it is where this invocation began)
print(sum(1 for s in map(int, sys.argv[2:]) if s != 36 and not steps.get(s + 1, False)))
PY
)
[ $allfinite = 1 ] && [ "$bad_after" = 0 ] && ok "every checkpoint left holds finite weights and was followed by a finite step (none of the NaN steps' checkpoints)" \
  || { bad "a poisoned checkpoint was kept: finite $allfinite, $bad_after bad"; ls "$TMP/dv"; }
[ -n "$named" ] && [ "$named" = "$kept" ] && ok "the error names the newest good checkpoint (step $named) and the resume command" \
  || { bad "error names '$named', newest kept '$kept'"; grep '^error' "$TMP/dv2.log"; }
"$G" --resume --out "$TMP/dv" --steps $((kept + 3)) --lr 1e-4 --grad-clip 1 --beta2 0.95 --eps 1e-8 > "$TMP/dv3.log" 2>&1 \
  && grep -q "resumed: step $kept" "$TMP/dv3.log" && ! grep -q "non-finite" "$TMP/dv3.log" \
  && ok "the named command continues from step $kept with finite steps" || { bad "continuing from $kept"; tail -3 "$TMP/dv3.log"; }
# weights that overflow: no checkpoint of a non-finite state, at any save point
"$G" "${RUN[@]}" "${DIVERGE[@]}" --dtype fp32 --steps 30 --save-every 1 --keep-checkpoints 0 --out "$TMP/ov" > "$TMP/ov.log" 2>&1
allfinite=1; n=0
for m in "$TMP"/ov/model_*.bin; do [ -e "$m" ] || continue; n=$((n + 1)); finite_model "$m" || allfinite=0; done
[ $allfinite = 1 ] && grep -q "^checkpoint: step [0-9]* not written: the last [0-9]* steps* had a non-finite" "$TMP/ov.log" \
  && ok "overflowing weights: $n checkpoints kept, all finite; the save points after non-finite steps said why they wrote none" \
  || { bad "a non-finite checkpoint was written ($n)"; grep checkpoint "$TMP/ov.log" | tail -3; }

# ---- issue 29 item 8, "write errors on log.jsonl are ignored" (rc 0, lines lost): a log on a full
# device (/dev/full) stops the run with the file and the reason
if [ -c /dev/full ]; then
  mkdir -p "$TMP/full"; ln -s /dev/full "$TMP/full/log.jsonl"
  expect_fail "write errors on log.jsonl no longer ignored: the run stops, naming the file" "cannot write '$TMP/full/log.jsonl': No space left on device" \
    "$G" "${RUN[@]}" --steps 4 --out "$TMP/full"
else echo "skip: no /dev/full: the log write error check did not run"; fi

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
