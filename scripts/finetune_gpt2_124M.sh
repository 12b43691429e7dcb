#!/usr/bin/env bash
# Full fine-tune of GPT-2 124M on tinyshakespeare.
#   bash scripts/finetune_gpt2_124M.sh [HF model dir or llm.c .bin]   (default: ./gpt2)
# Get the checkpoint first, e.g. `huggingface-cli download gpt2 --local-dir gpt2`.
# With several GPUs/sockets: NP=4 bash scripts/finetune_gpt2_124M.sh gpt2
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-gpt2}; NP=${NP:-1}; OUT=${OUT:-out/ft_gpt2_124M}
[ -e "$MODEL" ] || { echo "error: model '$MODEL' not found (download it first, see the header of this script)"; exit 1; }
make -s train_gpt2 data/prepare
[ -f data/shakespeare/tinyshakespeare_train_000000.bin ] || \
  data/prepare --input data/tinyshakespeare.txt --out-dir data/shakespeare --doc-sep blank --val-tokens 32768
launch=(); [ "$NP" -gt 1 ] && launch=(mpirun -np "$NP")
"${launch[@]}" ./train_gpt2 --model "$MODEL" \
  --train-data "data/shakespeare/tinyshakespeare_train_*.bin" --val-data "data/shakespeare/tinyshakespeare_val_*.bin" \
  --batch-size 4 --seq-len 256 --total-batch-tokens 16384 --steps 300 --lr 5e-5 --warmup-steps 20 \
  --schedule cosine --final-lr-frac 0.1 --weight-decay 0.1 --eval-every 50 --eval-batches 8 \
  --save-every 100 --zero 1 --out "$OUT" ${RESUME:+--resume}
