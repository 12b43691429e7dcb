#!/usr/bin/env bash
# --dtype fp16 in the trainers (on the CPU: fp16 GEMM operands and products emulated, dynamic loss
# scaling with torch.amp.GradScaler's rules; test_gpt2 holds the numerics and the scale's
# trajectory to torch's): the banner; a scale started high enough that the first steps overflow
# (each skipped, the scale halved, the step line and log.jsonl say so), regrowth after
# --loss-scale-window clean steps; the scale and its count in the checkpoint (a run stopped and
# resumed logs the same losses and scales as one that ran through); a run whose scale collapses
# stops with a message that names it; --loss-scale-init below 1 refused; train_lora in fp16.
source "$(dirname "$0")/lib.sh"
G="$BIN_DIR/train_gpt2"
MODEL=test/ref/gpt2_tiny
make_shard "$TMP/t.bin" 4000 100 5
RUN=(--model "$MODEL" --train-data "$TMP/t.bin" -b 2 -t 16 --threads 2 --steps 12 --dtype fp16 --loss-scale-init 16777216 --loss-scale-window 3)
field() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" "$1"; } # values of a log.jsonl field, one a line

"$G" "${RUN[@]}" --out "$TMP/a" > "$TMP/a.log" 2>&1 || { bad "train_gpt2 --dtype fp16 failed"; tail -3 "$TMP/a.log" >&2; }
grep -q "^dtype: fp16 GEMMs, fp32 accumulation, dynamic loss scaling" "$TMP/a.log" && ok "banner: $(grep '^dtype' "$TMP/a.log" | cut -c1-80)" \
  || bad "banner: $(grep '^dtype' "$TMP/a.log")"
grep -q "^step    1/12 .* | scale 1.67772e+07, overflow (1 skipped)" "$TMP/a.log" \
  && grep -q "^step 1: the gradients overflow fp16 at loss scale 1.67772e+07: update skipped, the scale halved to 8.38861e+06" "$TMP/a.log" \
  && ok "step 1 overflows at 2^24: skipped, the scale halved, on the step line and in a note" || bad "step 1: $(grep -m2 -E '^step +1' "$TMP/a.log")"
# log.jsonl: every step's scale follows GradScaler's rules from the skips (x0.5 after a skipped
# step, x2 after 3 clean ones in a row), some steps skipped and some taken, the count of skips
paste -d' ' <(field "$TMP/a/log.jsonl" loss_scale) <(field "$TMP/a/log.jsonl" skipped_steps) > "$TMP/a.scales"
if awk 'BEGIN { s = 16777216; ok = 1 }
        { if ($1 + 0 != s) ok = 0; grew += $1 + 0 > last && NR > 1; last = $1 + 0
          if ($2 > prev) { s /= 2; run = 0 } else if (++run == 3) { s *= 2; run = 0 }; prev = $2 }
        END { exit !(ok && NR == 12 && prev > 0 && prev < 12 && grew > 0) }' "$TMP/a.scales"; then
  ok "log.jsonl: 12 scales by GradScaler's rules (halved after each skip, doubled after 3 clean steps), $(tail -1 "$TMP/a.scales" | cut -d' ' -f2) skipped: $(cut -d' ' -f1 "$TMP/a.scales" | tr '\n' ' ')"
else bad "log.jsonl scales: $(tr '\n' ' ' < "$TMP/a.scales")"; fi
# stopped after 9 steps (a checkpoint of the scale and of its count of 2 clean steps) and resumed:
# the same log
"$G" "${RUN[@]}" --out "$TMP/b" --save-every 9 --stop-after 9 > "$TMP/b1.log" 2>&1 || bad "stop-after run failed"
"$G" --resume --out "$TMP/b" > "$TMP/b2.log" 2>&1 || { bad "resume failed"; tail -3 "$TMP/b2.log" >&2; }
if [ "$(field "$TMP/a/log.jsonl" train_loss)" = "$(field "$TMP/b/log.jsonl" train_loss)" ] &&
   [ "$(field "$TMP/a/log.jsonl" loss_scale)" = "$(field "$TMP/b/log.jsonl" loss_scale)" ] &&
   [ "$(field "$TMP/a/log.jsonl" skipped_steps)" = "$(field "$TMP/b/log.jsonl" skipped_steps)" ]; then
  ok "stopped at step 9 and resumed: the same 12 losses, scales and skips as the run through"
else bad "resume differs: $(field "$TMP/b/log.jsonl" loss_scale | tr '\n' ' ')"; fi
# the scale collapses: weights that grow x99 a step make every gradient overflow
"$G" "${RUN[@]/16777216/4}" --lr 10 --weight-decay 10 --max-skipped-steps 1000 --steps 40 --out "$TMP/c" > "$TMP/c.log" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "^error: the fp16 loss scale collapsed to 0.5 at step [0-9]*: the gradients overflow fp16 even unscaled.*--dtype bf16 or fp32" "$TMP/c.log" \
  && ok "a collapsed scale stops the run (exit 1): $(grep -m1 '^error' "$TMP/c.log" | cut -c1-100)..." || { bad "collapse: exit $rc"; tail -3 "$TMP/c.log" >&2; }
expect_fail "--loss-scale-init 0.5" "--loss-scale-init" "$G" "${RUN[@]/16777216/0.5}" --out none
"$BIN_DIR/train_lora" --model "$MODEL" --train-data "$TMP/t.bin" -b 2 -t 16 --threads 2 --steps 3 --dtype fp16 --out none > "$TMP/l.log" 2>&1 \
  && grep -q "^step    3/3 .* | scale 65536 (0 skipped)" "$TMP/l.log" && ok "train_lora --dtype fp16: 3 steps at scale 65536" \
  || { bad "train_lora --dtype fp16"; tail -3 "$TMP/l.log" >&2; }
finish
