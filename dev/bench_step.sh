#!/usr/bin/env bash
# Speed and memory of one training step at GPT-2 124M shapes (B=4, T=256): our trainer against
# PyTorch eager (+ PEFT for LoRA) on the same machine, same thread count, same run.
#   bash dev/bench_step.sh [full|lora-c_attn|lora-all-linear] [threads]
# Needs a Python with torch + transformers (+ peft): PYTHON=/path/to/python.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-full}; THREADS=${2:-2}; PY=${PYTHON:-python3}; STEPS=${STEPS:-4}
make -s train_gpt2 train_lora
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/bench.bin" <<'PY'
import struct, sys, random
n = 300000; r = random.Random(0)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[r.randrange(50257) for _ in range(n)]))
PY
# LoRA needs a base model file: a randomly initialised GPT-2 124M (speed does not depend on values)
if [ "$MODE" != full ]; then
  ./train_gpt2 --model d12 --train-data "$tmp/bench.bin" --batch-size 1 --seq-len 8 --steps 1 --lr 0 \
      --save-format llmc --out "$tmp/base" > /dev/null
fi
case "$MODE" in
  full) ours=(./train_gpt2 --model d12); torch_args=() ;;
  lora-c_attn) ours=(./train_lora --model "$tmp/base/model.bin" --lora-targets c_attn --lora-rank 8 --lora-alpha 16); torch_args=(--lora c_attn --rank 8) ;;
  lora-all-linear) ours=(./train_lora --model "$tmp/base/model.bin" --lora-targets all-linear --lora-rank 8 --lora-alpha 16); torch_args=(--lora all-linear --rank 8) ;;
  *) echo "unknown mode $MODE"; exit 2 ;;
esac
/usr/bin/time -v "${ours[@]}" --train-data "$tmp/bench.bin" --batch-size 4 --seq-len 256 --steps $((STEPS + 1)) \
    --threads "$THREADS" --out none > "$tmp/ours.log" 2> "$tmp/ours.time"
grep -E "^(backend|memory|step)" "$tmp/ours.log"
ours_ms=$(grep -E "^step +[0-9]+/" "$tmp/ours.log" | tail -n "$STEPS" | awk '{for(i=1;i<=NF;i++) if($i=="ms") print $(i-1)}' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
ours_rss=$(awk -F: '/Maximum resident/ {printf "%.0f", $2/1024}' "$tmp/ours.time")
OMP_NUM_THREADS=$THREADS /usr/bin/time -v "$PY" dev/bench_torch_step.py --threads "$THREADS" --steps "$STEPS" "${torch_args[@]}" > "$tmp/torch.log" 2> "$tmp/torch.time"
tail -1 "$tmp/torch.log"
torch_ms=$(tail -1 "$tmp/torch.log" | sed -E 's/pytorch: ([0-9.]+) ms.*/\1/')
torch_rss=$(awk -F: '/Maximum resident/ {printf "%.0f", $2/1024}' "$tmp/torch.time")
echo "ours: ${ours_ms} ms/step, peak RSS ${ours_rss} MiB"
awk -v o="$ours_ms" -v t="$torch_ms" -v orss="$ours_rss" -v trss="$torch_rss" \
  'BEGIN{printf "speed ratio (pytorch ms / ours ms): %.2fx | memory ratio (ours / pytorch peak RSS): %.2f\n", t/o, orss/trss}'
