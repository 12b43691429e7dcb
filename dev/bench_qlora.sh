#!/usr/bin/env bash
# Memory and speed of train_lora --qlora against plain LoRA on the CPU backend at GPT-2 124M
# shapes: a random d12 base (saved once with train_gpt2 --model d12 --steps 1 --lr 0), B=4,
# T=256, LoRA r=8 on c_attn, the same synthetic token shard for both.
#   bash dev/bench_qlora.sh [threads] [steps]
# Prints per mode: the trainer's memory report, the median step time, the process's peak RSS
# (VmHWM: includes loading the checkpoint) and its RSS while training (VmRSS after step 2), and
# the ratios QLoRA / LoRA.
# Measured here (2 shared cores, 3 timed steps, 2 threads), GPT-2 124M, B=4, T=256, r=8 c_attn:
#   memory report: params 476.0 MiB (LoRA) vs 202.7 MiB (QLoRA: NF4 base 41.8 MiB at 4.127
#   bits/weight + 9.0 MiB dequant scratch + 150.8 MiB of fp32 embeddings / layernorms / biases),
#   total 1372.6 vs 1099.4 MiB (activations 893.3 MiB in both);
#   peak RSS 1396 vs 1123 MiB (0.80); RSS while training the same (0.80);
#   step time 12.1 vs 13.6 s in one run, 19.2 vs 17.0 s in another (the machine is shared: the
#   dequantization, 2 x 85M weights per step, is within that noise).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}; STEPS=${2:-4}
make -s train_gpt2 train_lora
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/bench.bin" <<'PY'
import struct, sys, random
n = 100000; r = random.Random(0)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[r.randrange(50257) for _ in range(n)]))
PY
./train_gpt2 --model d12 --train-data "$tmp/bench.bin" -b 1 -t 64 --steps 1 --lr 0 --save-format llmc --threads "$THREADS" \
    --out "$tmp/base" > "$tmp/base.log"
BASE="$tmp/base/model.bin"; [ -f "$BASE" ] || { echo "no base model written"; cat "$tmp/base.log"; exit 1; }

run() { # name, extra flags...
  local name=$1; shift
  ./train_lora --model "$BASE" --train-data "$tmp/bench.bin" -b 4 -t 256 --steps $((STEPS + 1)) --lora-rank 8 \
      --lora-targets c_attn --threads "$THREADS" --out none "$@" > "$tmp/$name.log" 2>&1 &
  local pid=$! rss=0 hwm=0
  while kill -0 $pid 2>/dev/null; do
    if grep -qE "^step +2/" "$tmp/$name.log" 2>/dev/null && [ "$rss" = 0 ]; then
      rss=$(awk '/VmRSS/ {print int($2/1024)}' /proc/$pid/status 2>/dev/null || echo 0)
    fi
    local h
    h=$(awk '/VmHWM/ {print int($2/1024)}' /proc/$pid/status 2>/dev/null || true)
    [ -n "$h" ] && hwm=$h  # (a zombie's status has no VmHWM line)
    sleep 0.2
  done
  wait $pid
  local ms
  ms=$(grep -E "^step +[0-9]+/" "$tmp/$name.log" | tail -n "$STEPS" | awk '{for(i=1;i<=NF;i++) if($i=="ms") print $(i-1)}' \
       | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
  grep -E "^(qlora|memory)" "$tmp/$name.log" | sed "s/^/$name: /"
  echo "$name: median step ${ms} ms | peak RSS ${hwm} MiB | RSS while training ${rss} MiB"
  eval "${name}_ms=$ms ${name}_hwm=$hwm ${name}_rss=$rss"
}
run lora
run qlora --qlora
awk -v a="$qlora_hwm" -v b="$lora_hwm" -v c="$qlora_rss" -v d="$lora_rss" -v e="$qlora_ms" -v f="$lora_ms" \
  'BEGIN{printf "qlora / lora: peak RSS %.2f | RSS while training %.2f | step time %.2f\n", a/b, c/d, e/f}'
