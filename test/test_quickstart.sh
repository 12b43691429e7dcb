#!/usr/bin/env bash
# The main job (scripts/lora_tiny.sh, `make quickstart`) as a user runs it (its own step counts, 2
# threads; its time depends on the machine and its load: README.md): the LoRA stage ends with a
# validation loss on the fine-tuning target well below the base model's on the same data (the
# job's first and last evaluation; the job also fails by itself otherwise) and not above its
# lowest one, both loss plots are PNG files, and the outputs are there: the base as a transformers
# directory, the adapter and its checkpoints as PEFT directories pointing to it, the merged model.
# What a person reads is the samples: the fine-tuned model's go on from the speaker's name on the
# same line with " / " between verses, the base model's (same prompts and seeds) do not. One sample
# of a tiny model is a draw, and the draw differs between machines: the job is seeded and
# deterministic for a given build and CPU (bit for bit the same with 1 or 2 threads), but fp32 and
# bf16 GEMMs, and AMX and AVX512-BF16 kernels, sum in other orders (issue 44 item 20: the job's
# seeded fine-tuned sample, "PETRUCHIO: You are.", was one verse long on a 2-core AMX Xeon). So no check
# here reads one sample: over seeds 1-40 the fine-tuned model has a " / " on the first line in 29
# of them on that AMX Xeon, 35 with bf16 GEMMs on a 2-core AVX512-BF16 Xeon and 31 there with fp32
# GEMMs (LLMC_CPU_BF16=0, docs/CPU.md), the base in none there, and the test asks for at least 20
# and at most 3. The validation loss is nearly flat over the last 150 steps (5.176 -> 5.165 on the
# AVX512-BF16 machine, flat from step 250 on the AMX one), so the test asks that it end within
# 0.02 of its lowest, not that it still fall.
# Not under SAN=1: it checks what training achieves; the trainers' memory safety is covered by the
# other tests there.
source "$(dirname "$0")/lib.sh"
san_skip "a training outcome"
Q="$TMP/qs"
LORA_STEPS=450   # the job's default
OUT="$Q" THREADS=2 BIN_DIR="$BIN_DIR" bash scripts/lora_tiny.sh >"$TMP/job.log" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "the job ran (exit 0, $(grep '^time:' "$TMP/job.log"))" || { tail -20 "$TMP/job.log"; bad "the job exited $rc"; }

val_losses() { grep '"val_loss"' "$1" | sed 's/.*"val_loss": *\([-+0-9.eE]*\).*/\1/'; }
before=$(val_losses "$Q/lora/log.jsonl" | head -n 1); after=$(val_losses "$Q/lora/log.jsonl" | tail -n 1)
previous=$(val_losses "$Q/lora/log.jsonl" | tail -n 2 | head -n 1)
steps=$(grep '"val_loss"' "$Q/lora/log.jsonl" | sed -n '1p;$p' | sed 's/.*"step": *\([0-9]*\).*/\1/' | tr '\n' ' ')
[ "$steps" = "0 $LORA_STEPS " ] && ok "the target is evaluated before LoRA (step 0: the base model) and at the end (step $LORA_STEPS)" \
  || bad "eval steps: '$steps'"
[ -n "$before" ] && [ -n "$after" ] && awk -v b="$before" -v a="$after" 'BEGIN { exit !(a < b - 0.15) }' \
  && ok "LoRA lowered the target's validation loss: base $before -> $after" || bad "target val loss: base '$before' -> LoRA '$after'"
lowest=$(val_losses "$Q/lora/log.jsonl" | sort -g | head -n 1)
[ -n "$lowest" ] && [ -n "$after" ] && awk -v l="$lowest" -v a="$after" 'BEGIN { exit !(a <= l + 0.02) }' \
  && ok "the target's validation loss ends at its lowest (within 0.02): $after, lowest $lowest (the last 50 steps: $previous -> $after)" \
  || bad "the validation loss rose at the end: $after against its lowest $lowest"
grep -q "after LoRA ($LORA_STEPS steps): " "$TMP/job.log" && ok "the job reports both losses" || bad "no loss report in the job's output"

for p in "$Q/base/loss.png" "$Q/lora/loss.png"; do
  [ "$(head -c 8 "$p" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] && [ "$(stat -c %s "$p")" -gt 1000 ] \
    && ok "loss plot ${p#$Q/} is a PNG ($(stat -c %s "$p") bytes)" || bad "no PNG at $p"
done
# the samples: the base's, the lines between the two headers, and the fine-tuned one's, printed;
# what they are like is counted over 40 seeds (see above)
base_sample=$(sed -n '/^== sample of the base model/,/^== sample of the fine-tuned/{/^==/!p}' "$TMP/job.log")
lora_first=$(sed -n '/^== sample of the fine-tuned model/{n;p;q}' "$TMP/job.log")
[[ "$base_sample" == "PETRUCHIO:"* && "$lora_first" == "PETRUCHIO:"* ]] && ok "samples of the base and the fine-tuned model printed from the prompt" \
  || bad "samples missing: '$(head -n 1 <<<"$base_sample")' / '$lora_first'"
counts=$(sed -n "s|^samples with ' / ' on the first line (seeds 1-40): base model \([0-9]*\)/40, fine-tuned \([0-9]*\)/40$|\1 \2|p" "$TMP/job.log")
read -r base_n lora_n <<<"$counts"
[ -n "$counts" ] && [ "$lora_n" -ge 20 ] && [ "$base_n" -le 3 ] \
  && ok "samples with ' / ' on the first line, seeds 1-40: fine-tuned $lora_n, base $base_n (>= 20 and <= 3 asked)" \
  || bad "samples with ' / ' on the first line, seeds 1-40: '$counts' (fine-tuned >= 20, base <= 3 expected)"

missing=""
for f in base/config.json base/model.safetensors base/vocab.json base/model.bin lora/adapter_config.json lora/adapter_model.safetensors \
         lora/vocab.json lora/merged/config.json lora/adapter_$(printf %08d $LORA_STEPS)/adapter_config.json; do
  [ -f "$Q/$f" ] || missing="$missing $f"
done
[ -z "$missing" ] && ok "outputs: base/ (transformers), lora/ (PEFT + checkpoint dirs), lora/merged/" || bad "missing:$missing"
grep -qF "\"base_model_name_or_path\": \"$(cd "$Q/base" && pwd -P)\"" "$Q/lora/adapter_config.json" \
  && ok "the adapter's base_model_name_or_path is the base directory (absolute)" || bad "$(grep base_model "$Q/lora/adapter_config.json")"
finish
