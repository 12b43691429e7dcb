#!/usr/bin/env bash
# The main job (scripts/lora_tiny.sh, `make quickstart`), shortened (100 base steps, 40 LoRA
# steps; the job's own defaults are 600 and 300): the LoRA stage ends with a validation loss on
# the fine-tuning target lower than the base model's on the same data (the job's first and last
# evaluation; the job also fails by itself otherwise), both loss plots are PNG files, both samples
# are printed, and the outputs are there: the base as a transformers directory, the adapter and
# its checkpoints as PEFT directories pointing to it, the merged model.
# Not under SAN=1: it checks what training achieves; the trainers' memory safety is covered by the
# other tests there.
source "$(dirname "$0")/lib.sh"
if [ "${SAN:-}" = "1" ]; then echo "SKIP test_quickstart under SAN=1 (a training outcome, checked in the plain pass)"; exit 0; fi
Q="$TMP/qs"
OUT="$Q" BASE_STEPS=100 LORA_STEPS=40 THREADS=2 BIN_DIR="$BIN_DIR" bash scripts/lora_tiny.sh >"$TMP/job.log" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "the job ran (exit 0, $(grep '^time:' "$TMP/job.log"))" || { tail -20 "$TMP/job.log"; bad "the job exited $rc"; }

val_losses() { grep '"val_loss"' "$1" | sed 's/.*"val_loss": *\([-+0-9.eE]*\).*/\1/'; }
before=$(val_losses "$Q/lora/log.jsonl" | head -n 1); after=$(val_losses "$Q/lora/log.jsonl" | tail -n 1)
steps=$(grep '"val_loss"' "$Q/lora/log.jsonl" | sed -n '1p;$p' | sed 's/.*"step": *\([0-9]*\).*/\1/' | tr '\n' ' ')
[ "$steps" = "0 40 " ] && ok "the target is evaluated before LoRA (step 0: the base model) and at the end (step 40)" || bad "eval steps: '$steps'"
awk -v b="$before" -v a="$after" 'BEGIN { exit !(a < b - 0.05) }' \
  && ok "LoRA lowered the target's validation loss: base $before -> $after" || bad "target val loss: base '$before' -> LoRA '$after'"
grep -q "after LoRA (40 steps): " "$TMP/job.log" && ok "the job reports both losses" || bad "no loss report in the job's output"

for p in "$Q/base/loss.png" "$Q/lora/loss.png"; do
  [ "$(head -c 8 "$p" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] && [ "$(stat -c %s "$p")" -gt 1000 ] \
    && ok "loss plot ${p#$Q/} is a PNG ($(stat -c %s "$p") bytes)" || bad "no PNG at $p"
done
grep -q "^== sample of the base model" "$TMP/job.log" && grep -q "^== sample of the fine-tuned model" "$TMP/job.log" \
  && ok "samples of the base and the fine-tuned model printed" || bad "samples missing"

missing=""
for f in base/config.json base/model.safetensors base/vocab.json base/model.bin lora/adapter_config.json lora/adapter_model.safetensors \
         lora/vocab.json lora/merged/config.json lora/adapter_00000040/adapter_config.json; do
  [ -f "$Q/$f" ] || missing="$missing $f"
done
[ -z "$missing" ] && ok "outputs: base/ (transformers), lora/ (PEFT + checkpoint dirs), lora/merged/" || bad "missing:$missing"
grep -qF "\"base_model_name_or_path\": \"$(cd "$Q/base" && pwd -P)\"" "$Q/lora/adapter_config.json" \
  && ok "the adapter's base_model_name_or_path is the base directory (absolute)" || bad "$(grep base_model "$Q/lora/adapter_config.json")"
finish
