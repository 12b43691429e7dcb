#!/usr/bin/env bash
# DPO step time and memory at GPT-2 124M, ours against TRL's DPOTrainer, in one run on the same
# CPU, thread count and model file (a randomly initialised GPT-2 124M saved as a transformers
# directory with its tokenizer: speed does not depend on the values):
#   lora  train_lora --objective dpo, r=8 on c_attn, the reference = the base with the adapters off
#         (one more forward a step)  vs  DPOTrainer + PEFT (the same: the adapter disabled);
#   full  train_gpt2 --objective dpo, the reference's log-probabilities computed once before
#         training  vs  DPOTrainer with precompute_ref_log_probs.
# The pairs: dev/bench_pref.py make-pairs (random words, pairs of about the same shape, ~120
# tokens). Ours packs them (data/prepare --pack 512: about 4 pairs a window, each record attending
# to itself) and trains B windows a step; TRL takes as many pairs a step as B windows hold on
# average (its collator pads each sequence to the longest of the batch, here about its own length). Both at the CPU's best precision: ours --dtype auto (bf16
# GEMMs where the CPU has AVX512-BF16 or AMX), TRL bf16 autocast there (fp32 elsewhere).
#   bash dev/bench_pref.sh [lora|full|all] [threads]      (default all, 2 threads)
#   B=2 (windows a step: 6 pairs), STEPS=4 (timed, after one warm-up step), PYTHON=python3 (torch,
#   transformers, peft, trl, datasets)
# Prints per run the median and minimum ms per step, ms per pair and the peak RSS, then the ratios
# (TRL's time per pair / ours: > 1 means we are faster; our RSS / TRL's). The reference's
# precomputation (full) is not in the step times of either: both do it once before training.
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT=${1:-all}; THREADS=${2:-2}; PY=${PYTHON:-python3}; STEPS=${STEPS:-4}; B=${B:-2}
T=512
make -s train_gpt2 train_lora data/prepare
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$PY" dev/bench_pref.py make-pairs "$tmp/pairs.jsonl" $((5 * B * (STEPS + 2) * 2))
data/prepare --input "$tmp/pairs.jsonl" --out-dir "$tmp" --name pairs --pack $T --val-tokens 0 > "$tmp/prepare.log"
grep -q "in .* windows" "$tmp/prepare.log" || { cat "$tmp/prepare.log"; exit 1; }
per_window=$(sed -n 's/^pack: \([0-9]*\) preference pairs in \([0-9]*\) windows.*/\1 \2/p' "$tmp/prepare.log" | awk '{printf "%.3f", $1 / $2}')
trl_pairs=$(awk -v p="$per_window" -v b="$B" 'BEGIN {printf "%d", p * b + 0.5}')
ONE="$tmp/data.bin"
"$PY" - "$ONE" <<'PY'
import struct, sys
n = 4096
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *([1] * n)))
PY
./train_gpt2 --model d12 --train-data "$ONE" --batch-size 1 --seq-len 8 --steps 1 --lr 0 --save-format hf --out "$tmp/base" > /dev/null
[ -f "$tmp/base/vocab.json" ] || { echo "error: the saved base has no tokenizer files (data/gpt2 missing?)" >&2; exit 1; }
model="$tmp/base"
bf16=""; grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo && bf16="--bf16"
load() { cut -d' ' -f1 /proc/loadavg; }
stats() { sort -n | awk '{a[NR]=$1} END {printf "%.1f %.1f", a[int((NR+1)/2)], a[1]}'; }   # median min
rss_mib() { awk -F: '/Maximum resident/ {printf "%.0f", $2/1024}' "$1"; }
row() { # NAME MEDIAN MIN PAIRS_PER_STEP RSS L0
  printf "%-16s %9s %9s %9.1f %9s   load %s -> %s\n" "$1" "$2" "$3" "$(awk -v m="$2" -v p="$4" 'BEGIN {print m / p}')" "$5" "$6" "$(load)" | tee -a "$tmp/table"
}
ours() { # NAME PROGRAM FLAGS...
  local name=$1; shift
  local l0; l0=$(load)
  env -u OPENBLAS_CORETYPE /usr/bin/time -v "$@" --model "$model" --train-data "$tmp/pairs_train_*.bin" --batch-size "$B" --seq-len $T \
      --objective dpo --steps $((STEPS + 1)) --threads "$THREADS" --out none > "$tmp/$name.log" 2> "$tmp/$name.time"
  local ms; ms=$(grep -E "^step +[0-9]+/" "$tmp/$name.log" | tail -n "$STEPS" | sed -E 's/.*\| ([0-9.]+) ms \|.*/\1/' | stats)
  row "$name" $ms "$(awk -v p="$per_window" -v b="$B" 'BEGIN {print p * b}')" "$(rss_mib "$tmp/$name.time")" "$l0"
}
trl() { # NAME MODE
  local name=$1 l0; l0=$(load)
  OMP_NUM_THREADS=$THREADS /usr/bin/time -v "$PY" dev/bench_pref.py run --model "$model" --data "$tmp/pairs.jsonl" --mode "$2" \
      --pairs "$trl_pairs" --steps "$STEPS" --threads "$THREADS" $bf16 --out "$tmp/trl_out" > "$tmp/$name.log" 2> "$tmp/$name.time" \
      || { tail -5 "$tmp/$name.time"; return 1; }
  local ms; ms=$(grep -E "^step [0-9]+ " "$tmp/$name.log" | tail -n "$STEPS" | sed -E 's/.* ([0-9.]+) ms$/\1/' | stats)
  row "$name" $ms "$trl_pairs" "$(rss_mib "$tmp/$name.time")" "$l0"
}
echo "pairs: $(grep -m1 '^pack:' "$tmp/prepare.log")"
echo "run              median_ms    min_ms  ms/pair  rss_MiB   (threads $THREADS, $STEPS timed steps, ours B=$B x T=$T, TRL $trl_pairs pairs a step${bf16:+, TRL bf16 autocast})"
if [ "$WHAT" = lora ] || [ "$WHAT" = all ]; then
  ours lora_ours ./train_lora --lora-targets c_attn --lora-rank 8 --lora-alpha 16
  trl lora_trl lora
fi
if [ "$WHAT" = full ] || [ "$WHAT" = all ]; then
  ours full_ours ./train_gpt2
  trl full_trl full
fi
grep -h tokens_per_pair "$tmp"/*_trl.log | head -n 1 | sed 's/^/TRL: /'
awk '{ms[$1] = $4; rss[$1] = $5}
  END { for (m in ms) if (m ~ /_ours$/) { t = m; sub(/_ours$/, "_trl", t); if (t in ms)
          printf "%s: TRL / ours time per pair %.2fx, our RSS / TRL %.2fx\n", substr(m, 1, length(m) - 5), ms[t] / ms[m], rss[m] / rss[t] } }' "$tmp/table"
