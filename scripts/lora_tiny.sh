#!/usr/bin/env bash
# The main job (`make quickstart`): fine-tuning that visibly works, on the CPU, with nothing to
# download, in about two and a half minutes on two cores.
#   1. data: data/tinyshakespeare.txt is cut at the first speech boundary after line SPLIT. The
#      part before is the base model's text, as it is. The rest (the end of Measure for Measure,
#      The Taming of the Shrew, The Tempest: plays and characters the base never sees) is the
#      fine-tuning target, rewritten in a style the base never sees either: every speech on one
#      line, "NAME: verse / verse / verse", as a programme or a script in prose prints it.
#   2. base: train_gpt2 trains a tiny GPT-2 (2 layers, 64 channels, GPT-2's vocabulary) from
#      scratch on the first part (OUT/base: a transformers directory + model.bin). Kept when the
#      job runs again.
#   3. LoRA: train_lora adapts it to the target (adapters on every linear layer, plus the final
#      layernorm), evaluating on the target's held-out tenth: its first evaluation (step 0) is the
#      base model's loss on the target, its last the fine-tuned model's (OUT/lora: the PEFT
#      adapter, a PEFT directory per checkpoint, the merged model).
#   4. report: both losses (the job fails if fine-tuning did not lower the loss), a sample of the
#      base and of the fine-tuned model from the same prompt and seed, the loss plots.
# Environment: OUT (out/lora_tiny), BASE_STEPS (600), LORA_STEPS (300), THREADS (0 = all cores),
# SPLIT (32000), BIN_DIR (take the programs from there instead of building them: tests).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/lora_tiny}"
BASE_STEPS="${BASE_STEPS:-600}"
LORA_STEPS="${LORA_STEPS:-300}"
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
mkdir -p "$DATA"
awk -v cut="$SPLIT" -v base="$DATA/base.txt" -v target="$DATA/target.txt" '
  !held { print > base; if (NR >= cut && $0 == "") held = 1; next }     # up to a blank line after SPLIT
  $0 == "" { if (n) print line "\n" > target; n = 0; next }              # a speech ends
  { line = n == 0 ? $0 : n == 1 ? line " " $0 : line " / " $0; n++ }     # NAME: verse / verse
  END { if (n) print line "\n" > target }' data/tinyshakespeare.txt
"$PREPARE" --input "$DATA/base.txt" --out-dir "$DATA" --doc-sep blank --quiet
"$PREPARE" --input "$DATA/target.txt" --out-dir "$DATA" --doc-sep blank --quiet
echo "data: $(wc -l < "$DATA/base.txt") lines of Shakespeare for the base; the rest, $(grep -c . "$DATA/target.txt") speeches" \
     "in the new style, for fine-tuning, e.g.:"
grep -m1 ' / ' "$DATA/target.txt" | cut -c1-160

# ---- 2. the base model
if [ ! -f "$OUT/base/config.json" ]; then
  rm -rf "$OUT/base"
  "$TRAIN_GPT2" --model tiny --train-data "$DATA/base_train_*.bin" --val-data "$DATA/base_val_*.bin" -b 8 -t 64 \
    --steps "$BASE_STEPS" --lr 3e-3 --warmup-steps 20 --eval-every 100 --eval-batches 8 --save-format both \
    --threads "$THREADS" --out "$OUT/base"
else
  echo "base: $OUT/base is there from an earlier run (delete it to train it again)"
fi

# ---- 3. LoRA on the target (each run of the job fine-tunes anew)
rm -rf "$OUT/lora"
"$TRAIN_LORA" --model "$OUT/base" --train-data "$DATA/target_train_*.bin" --val-data "$DATA/target_val_*.bin" -b 8 -t 64 \
  --steps "$LORA_STEPS" --lr 5e-3 --warmup-steps 10 --eval-every 50 --eval-batches 12 \
  --lora-targets all-linear --lora-rank 16 --lora-alpha 32 --train-ln-f --save-every 100 --merge \
  --threads "$THREADS" --out "$OUT/lora"

# ---- 4. what fine-tuning did
val_losses() { grep '"val_loss"' "$1" | sed 's/.*"val_loss": *\([-+0-9.eE]*\).*/\1/'; }
before=$(val_losses "$OUT/lora/log.jsonl" | head -n 1)
after=$(val_losses "$OUT/lora/log.jsonl" | tail -n 1)
python3 scripts/plot_loss.py "$OUT/base/log.jsonl" --title "base: tiny GPT-2 from scratch on Shakespeare" >/dev/null
python3 scripts/plot_loss.py "$OUT/lora/log.jsonl" --title "LoRA on held-out plays in a new style" >/dev/null
PROMPT="PETRUCHIO:"
echo
sample() { # the prompt and its continuation on stdout; generate's statistics only if it fails
  "$GENERATE" "$@" --prompt "$PROMPT" -n 64 --temperature 0.8 --top-k 40 --seed 42 --threads "$THREADS" 2>"$OUT/sample.err" \
    || { cat "$OUT/sample.err" >&2; exit 1; }
}
echo "== sample of the base model ($OUT/base):"
sample --model "$OUT/base"
echo "== sample of the fine-tuned model (base + adapter $OUT/lora), same prompt and seed:"
sample --adapter "$OUT/lora"
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
