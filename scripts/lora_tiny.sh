#!/usr/bin/env bash
# A small LoRA run that works anywhere (CPU, no downloads, a few minutes on 2 cores), on the
# bundled tinyshakespeare text:
#   1. tokenize data/tinyshakespeare.txt into llm.c shards (data/prepare);
#   2. pretrain a tiny GPT-2 (2 layers, 64 channels, GPT-2 vocabulary) from scratch for a few
#      hundred steps with train_gpt2, so that there is a base model to adapt;
#   3. train a q/v LoRA adapter (plus mlp.c_fc) on it with train_lora and merge it.
# Outputs under OUT (default out/lora_tiny): base/model.bin, lora/adapter_model.safetensors +
# adapter_config.json (loads in PEFT), lora/merged/ (transformers dir + llm.c model.bin).
# Environment: OUT, BASE_STEPS (300), LORA_STEPS (100), THREADS (0 = all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/lora_tiny}"
BASE_STEPS="${BASE_STEPS:-300}"
LORA_STEPS="${LORA_STEPS:-100}"
THREADS="${THREADS:-0}"
DATA="$OUT/data"

make -j2 train_gpt2 train_lora generate data/prepare
if [ ! -f "$DATA/tinyshakespeare_train_000000.bin" ]; then
  data/prepare --input data/tinyshakespeare.txt --out-dir "$DATA" --doc-sep blank
fi
TRAIN="$DATA/tinyshakespeare_train_*.bin"
VAL="$DATA/tinyshakespeare_val_*.bin"

if [ ! -f "$OUT/base/model.bin" ]; then
  ./train_gpt2 --model tiny --train-data "$TRAIN" --val-data "$VAL" -b 8 -t 64 --steps "$BASE_STEPS" \
    --lr 3e-3 --warmup-steps 20 --eval-every 100 --eval-batches 4 --save-format llmc --threads "$THREADS" \
    --out "$OUT/base"
fi

./train_lora --model "$OUT/base/model.bin" --train-data "$TRAIN" --val-data "$VAL" -b 8 -t 64 \
  --steps "$LORA_STEPS" --lr 3e-3 --warmup-steps 10 --eval-every 50 --eval-batches 4 \
  --lora-targets q,v,mlp.c_fc --lora-rank 8 --lora-alpha 16 --lora-dropout 0.05 \
  --save-every 50 --merge --threads "$THREADS" --out "$OUT/lora"
echo "adapter: $OUT/lora/adapter_model.safetensors + adapter_config.json; merged model: $OUT/lora/merged/"
# what the fine-tuned model writes (base + adapter, sampled with the KV cache)
./generate --model "$OUT/base/model.bin" --adapter "$OUT/lora" --prompt "ROMEO:" --max-new-tokens 48 \
  --temperature 0.8 --top-k 40 --seed 42 --threads "$THREADS"
