#!/usr/bin/env bash
# The main job (`make quickstart`): fine-tuning that visibly works, on the CPU, with nothing to
# download (how long it takes depends on the CPU and its load: README.md; --plan predicts a step).
#   1. data: data/tinyshakespeare.txt is cut at the first speech boundary after line SPLIT. The
#      part before is the base model's text, as it is but for one speech in ten (of two verses or
#      more) written in the new style: every speech on one line, "NAME: verse / verse / verse", as
#      a programme or a script in prose prints it. The rest (the end of Measure for Measure, The
#      Taming of the Shrew, The Tempest: plays and characters the base never sees) is the
#      fine-tuning target: its speeches of two verses or more, all in the new style.
#   2. base: train_gpt2 trains a tiny GPT-2 (2 layers, 64 channels, GPT-2's vocabulary) from
#      scratch on the first part (OUT/base: a transformers directory + model.bin). Kept when the
#      job runs again on the same text.
#   3. LoRA: train_lora adapts it to the target (adapters on every linear layer, plus the final
#      layernorm), evaluating on the target's held-out tenth: its first evaluation (step 0) is the
#      base model's loss on the target, its last the fine-tuned model's (OUT/lora: the PEFT
#      adapter, a PEFT directory per checkpoint, the merged model).
#   4. report: a sample of the base and of the fine-tuned model from the same prompt and seed, how
#      many of 40 samples (seeds 1-40) of each have a " / " on their first line, both losses (the
#      job fails if fine-tuning did not lower the loss), the loss plots.
# Environment: OUT (out/lora_tiny), BASE_STEPS (1500), LORA_STEPS (450), THREADS (0 = all cores),
# SPLIT (32000), STYLE_SEEDS (40: the samples counted in step 4), BIN_DIR (take the programs from
# there instead of building them: tests), BASE_ONLY
# (1: stop after step 2, the data and the base: scripts/pref_tiny.sh starts from them).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/lora_tiny}"
BASE_STEPS="${BASE_STEPS:-1500}"
LORA_STEPS="${LORA_STEPS:-450}"
STYLE_EVERY=10   # the base sees the new style in one speech in this many (step 1)
THREADS="${THREADS:-0}"
SPLIT="${SPLIT:-32000}"
DATA="$OUT/data"
SECONDS=0

if [ -n "${BIN_DIR:-}" ]; then
  TRAIN_GPT2="$BIN_DIR/train_gpt2"; TRAIN_LORA="$BIN_DIR/train_lora"; GENERATE="$BIN_DIR/generate"; PREPARE="$BIN_DIR/prepare"
else
  make -j2 train_gpt2 train_lora generate data/prepare
  TRAIN_GPT2=./train_gpt2; TRAIN_LORA=./train_lora; GENERATE=./generate; PREPARE=data/prepare
fi
command -v python3 >/dev/null || { echo "error: python3 is needed for the loss plot (apt-get install python3)" >&2; exit 1; }

# ---- 1. data
# A speech is a speaker's line ("NAME:") and its verses, up to a blank line; "NAME: verse / verse"
# is the new style. The base sees it in one speech in STYLE_EVERY (of those with two verses or
# more; the rest keep the play's layout), so that it knows the token " /", as any pretrained
# model would: trained on the plays alone it never sees " /", whose tied embedding then stays
# where every unseen token's is pushed (cosine 0.999 with their mean), and adapters on the linear
# layers cannot make a model emit a token it cannot tell from 39,500 others (at the target's verse
# ends -log p(" /") was 15.9 for such a base and still 12.8 after LoRA: the fine-tuned speeches
# stayed one verse long). The target keeps the speeches of two verses or more: a one-verse speech
# has no " / " to show, and with them more than half the fine-tuned samples ended after one verse.
mkdir -p "$DATA"
awk -v cut="$SPLIT" -v every="$STYLE_EVERY" -v base="$DATA/base.txt" -v target="$DATA/target.txt" '
  function one_line(   s, i) { s = v[0]; for (i = 1; i < n; i++) s = s (i == 1 ? " " : " / ") v[i]; return s "\n" }
  function end_speech(   i) {
    if (held) { if (n >= 3) print one_line() > target }
    else if (n >= 3 && ++k % every == 0) print one_line() > base
    else { for (i = 0; i < n; i++) print v[i] > base; print "" > base }    # as it is (a blank line alone too)
    n = 0 }
  $0 != "" { v[n++] = $0; next }
  { end_speech(); if (NR >= cut) held = 1 }                                 # the base ends at a blank line after SPLIT
  END { if (n) end_speech() }' data/tinyshakespeare.txt
"$PREPARE" --input "$DATA/base.txt" --out-dir "$DATA" --doc-sep blank --quiet
"$PREPARE" --input "$DATA/target.txt" --out-dir "$DATA" --doc-sep blank --quiet
echo "data: $(wc -l < "$DATA/base.txt") lines of Shakespeare for the base ($(grep -c ' / ' "$DATA/base.txt") speeches in the new style);" \
     "the rest, $(grep -c . "$DATA/target.txt") speeches in the new style, for fine-tuning, e.g.:"
grep -m1 ' / ' "$DATA/target.txt" | cut -c1-160

# ---- 2. the base model (kept when the job runs again on the same text with the same steps);
# --shuffle, as for LoRA below: the text is plays in a row, and the validation split its end
stamp="text $(cksum < "$DATA/base.txt" | cut -d' ' -f1), $BASE_STEPS steps"
if [ ! -f "$OUT/base/config.json" ] || [ "$(cat "$OUT/base/job_stamp.txt" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$OUT/base"
  "$TRAIN_GPT2" --model tiny --train-data "$DATA/base_train_*.bin" --val-data "$DATA/base_val_*.bin" -b 8 -t 64 \
    --steps "$BASE_STEPS" --lr 3e-3 --warmup-steps 20 --shuffle --eval-every 100 --eval-batches 8 --save-format both \
    --threads "$THREADS" --out "$OUT/base"
  echo "$stamp" > "$OUT/base/job_stamp.txt"
else
  echo "base: $OUT/base is there from an earlier run on the same text (delete it to train it again)"
fi

[ "${BASE_ONLY:-0}" = 1 ] && exit 0

# ---- 3. LoRA on the target (each run of the job fine-tunes anew). --shuffle: the target is three
# plays in a row, the held-out tenth the end of the last; in order, the evaluations rise and fall
# with the play the last steps saw.
rm -rf "$OUT/lora"
"$TRAIN_LORA" --model "$OUT/base" --train-data "$DATA/target_train_*.bin" --val-data "$DATA/target_val_*.bin" -b 8 -t 64 \
  --steps "$LORA_STEPS" --lr 1e-2 --warmup-steps 10 --shuffle --eval-every 50 --eval-batches all \
  --lora-targets all-linear --lora-rank 16 --lora-alpha 32 --train-ln-f --save-every 100 --merge \
  --threads "$THREADS" --out "$OUT/lora"

# ---- 4. what fine-tuning did
val_losses() { grep '"val_loss"' "$1" | sed 's/.*"val_loss": *\([-+0-9.eE]*\).*/\1/'; }
before=$(val_losses "$OUT/lora/log.jsonl" | head -n 1)
after=$(val_losses "$OUT/lora/log.jsonl" | tail -n 1)
python3 scripts/plot_loss.py "$OUT/base/log.jsonl" --title "base: tiny GPT-2 from scratch on Shakespeare" >/dev/null
python3 scripts/plot_loss.py "$OUT/lora/log.jsonl" --title "LoRA on held-out plays in a new style" >/dev/null
NAME="PETRUCHIO:"
echo
source scripts/tiny_samples.sh # (sample, styled)
echo "== sample of the base model ($OUT/base):"
printf '%s' "$NAME"; sample 42 --model "$OUT/base"
echo "== sample of the fine-tuned model (base + adapter $OUT/lora), same prompt and seed:"
printf '%s' "$NAME"; sample 42 --adapter "$OUT/lora"
base_styled=$(styled --model "$OUT/base")
lora_styled=$(styled --adapter "$OUT/lora")
echo "samples with ' / ' on the first line (seeds 1-$STYLE_SEEDS): base model $base_styled/$STYLE_SEEDS, fine-tuned $lora_styled/$STYLE_SEEDS"
rm -f "$OUT/sample.err"
echo
awk -v b="$before" -v a="$after" -v n="$LORA_STEPS" 'BEGIN {
  printf "validation loss on the fine-tuning target (held-out plays, new style):\n"
  printf "  base model:             %.4f (perplexity %.0f)\n", b, exp(b)
  printf "  after LoRA (%d steps): %.4f (perplexity %.0f)\n", n, a, exp(a) }'
echo "outputs: $OUT/base (transformers dir + model.bin), $OUT/lora (PEFT adapter; adapter_*/: checkpoints; merged/: merged model)"
echo "loss plots: $OUT/base/loss.png, $OUT/lora/loss.png"
echo "time: ${SECONDS} s"
if ! awk -v b="$before" -v a="$after" 'BEGIN { exit !(a < b) }'; then
  echo "error: fine-tuning did not lower the validation loss on the target ($before -> $after)" >&2
  exit 1
fi
