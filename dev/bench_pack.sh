#!/usr/bin/env bash
# Packed fine-tuning against one record per window and a token stream, on chat-style records made
# from the bundled text (dev/pack_data.py: each speech of data/tinyshakespeare.txt as the
# assistant's reply to the speech before it, plain chat template, the pairs of 350..1100
# characters, about 100..300 tokens; scripts/gpu_check.sh runs the same on a GPU). The same
# records are prepared three ways at the same T (data/prepare --pack T, --record-windows T, and the
# default stream) and train_lora trains LoRA r=8 on c_attn of a randomly initialised model (speed
# does not depend on the values) for a few steps of one window.
#   bash dev/bench_pack.sh [model] [T] [threads]          (default: d6 1024 2)
#   STEPS=8 (timed steps after one warm-up step), RUNS=2 (each configuration run that many times)
# Prints per run the median and minimum ms per step, the trained tokens per second at the median
# step (the trained targets of the timed steps, read from the masks, over their time), the peak
# RSS (GNU time), and the load average before and after (take figures only when it stays low);
# then the ratio of packed to record-window trained tokens per second, per run.
# Our programs run with OPENBLAS_CORETYPE removed from the environment, so they pick the OpenBLAS
# kernels they pick by default (llmc/cpu/backend.c).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-d6}; T=${2:-1024}; THREADS=${3:-2}; STEPS=${STEPS:-8}; RUNS=${RUNS:-2}
make -s train_gpt2 train_lora data/prepare
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 dev/pack_data.py records "$tmp/chat.jsonl"
for kind in pack windows stream; do
  case $kind in pack) fl=(--pack "$T");; windows) fl=(--record-windows "$T");; stream) fl=();; esac
  ./data/prepare --input "$tmp/chat.jsonl" --out-dir "$tmp/$kind" --name chat --val-tokens 0 "${fl[@]}" > "$tmp/$kind.prep"
  grep -E "^chat:|^pack:" "$tmp/$kind.prep" | sed "s/^/$kind: /"
done
# the base: the model, randomly initialised, saved by one step at learning rate 0 (train_lora
# adapts a saved model only)
./train_gpt2 --model "$MODEL" --train-data "$tmp/stream/chat_train_*.bin" --batch-size 1 --seq-len 8 --steps 1 --lr 0 \
    --threads "$THREADS" --save-format hf --out "$tmp/base" > /dev/null
load() { cut -d' ' -f1 /proc/loadavg; }
rss_mib() { awk -F: '/Maximum resident/ {printf "%.0f", $2/1024}' "$1"; }
# the trained targets of the timed steps (after the warm-up step), from the shard's mask
trained() { python3 dev/pack_data.py trained "$1" 1 "$T" $((STEPS + 1)) | tail -n "$STEPS" | awk '{s += $1} END {print s}'; }
echo "run              median_ms min_ms trained_tok/s(median) peak_rss_MiB   ($MODEL, LoRA r=8 on c_attn, B=1 T=$T, threads $THREADS, $STEPS timed steps)"
for run in $(seq 1 "$RUNS"); do
  for kind in pack windows stream; do
    l0=$(load)
    env -u OPENBLAS_CORETYPE /usr/bin/time -v ./train_lora --model "$tmp/base" --train-data "$tmp/$kind/chat_train_*.bin" \
        --batch-size 1 --seq-len "$T" --steps $((STEPS + 1)) --lora-rank 8 --lora-alpha 16 --lora-targets c_attn \
        --threads "$THREADS" --out none > "$tmp/$kind.log" 2> "$tmp/$kind.time"
    ms=$(grep -E "^step +[0-9]+/" "$tmp/$kind.log" | tail -n "$STEPS" | sed -E 's/.*\| ([0-9.]+) ms \|.*/\1/' | sort -n)
    med=$(awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}' <<<"$ms"); min=$(head -1 <<<"$ms")
    tr=$(trained "$tmp/$kind/chat_train_000000.mask")
    tps=$(awk -v t="$tr" -v m="$med" -v s="$STEPS" 'BEGIN {printf "%.0f", t / s / (m / 1000)}')
    printf "%-16s %s %s %s %s   load %s -> %s\n" "$kind#$run" "$med" "$min" "$tps" "$(rss_mib "$tmp/$kind.time")" "$l0" "$(load)" | tee -a "$tmp/table"
  done
  awk -v r="$run" '$1 == "pack#"r {p = $4} $1 == "windows#"r {w = $4} END {printf "run %d: packed / record-windows trained tokens per second = %.2f\n", r, p / w}' "$tmp/table"
done
