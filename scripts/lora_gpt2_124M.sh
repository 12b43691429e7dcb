#!/usr/bin/env bash
# LoRA fine-tune of GPT-2 124M on tinyshakespeare (the bundled data/tinyshakespeare.txt).
#
#   scripts/lora_gpt2_124M.sh PATH/TO/gpt2            # a transformers model dir (config.json +
#                                                     # model.safetensors), an llm.c gpt2_124M.bin,
#   GPT2_124M=PATH scripts/lora_gpt2_124M.sh          # or a .safetensors file
#
# Defaults follow common PEFT recipes for GPT-2: LoRA r=8, alpha=16 on c_attn (294,912
# trainable parameters, 0.24% of the model), dropout 0.05, lr 2e-4 with warmup and cosine decay,
# 16K tokens per step. Writes OUT (default out/lora_gpt2_124M): adapter_model.safetensors +
# adapter_config.json (PeftModel.from_pretrained loads it on "gpt2"), merged/ (transformers dir
# and llm.c model.bin), checkpoints every 100 steps (re-run with RESUME=1 to continue).
# Environment overrides: OUT, STEPS (1000), B (4), T (1024 on a GPU, 256 on CPU), TOTAL_TOKENS
# (16384), LR (2e-4), RANK (8), ALPHA (16), TARGETS (c_attn), EXTRA (more train_lora flags).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-${GPT2_124M:-}}"
if [ -z "$MODEL" ]; then
  echo "usage: $0 PATH/TO/gpt2   (or GPT2_124M=PATH $0): a GPT-2 124M transformers dir, .safetensors or llm.c .bin" >&2
  exit 1
fi
if [ ! -e "$MODEL" ]; then echo "error: '$MODEL' does not exist" >&2; exit 1; fi
OUT="${OUT:-out/lora_gpt2_124M}"
if nvidia-smi -L >/dev/null 2>&1; then DEFAULT_T=1024; else DEFAULT_T=256; fi
STEPS="${STEPS:-1000}"; B="${B:-4}"; T="${T:-$DEFAULT_T}"; TOTAL_TOKENS="${TOTAL_TOKENS:-16384}"
LR="${LR:-2e-4}"; RANK="${RANK:-8}"; ALPHA="${ALPHA:-16}"; TARGETS="${TARGETS:-c_attn}"
DATA="$OUT/data"

make -j2 train_lora data/prepare
if [ ! -f "$DATA/tinyshakespeare_train_000000.bin" ]; then
  data/prepare --input data/tinyshakespeare.txt --out-dir "$DATA" --doc-sep blank
fi
RESUME_FLAG=()
if [ "${RESUME:-0}" = 1 ]; then RESUME_FLAG=(--resume); fi

# shellcheck disable=SC2086
./train_lora --model "$MODEL" \
  --train-data "$DATA/tinyshakespeare_train_*.bin" --val-data "$DATA/tinyshakespeare_val_*.bin" \
  -b "$B" -t "$T" --total-batch-tokens "$TOTAL_TOKENS" --steps "$STEPS" \
  --lr "$LR" --warmup-steps 50 --schedule cosine --weight-decay 0.0 --grad-clip 1.0 \
  --lora-rank "$RANK" --lora-alpha "$ALPHA" --lora-targets "$TARGETS" --lora-dropout 0.05 \
  --eval-every 100 --eval-batches 16 --save-every 100 --merge --out "$OUT" "${RESUME_FLAG[@]}" ${EXTRA:-}
echo "adapter: $OUT/adapter_model.safetensors + adapter_config.json; merged model: $OUT/merged/"
