#!/usr/bin/env bash
# GPT-2 XL (1.5B: d48, random weights in the Hugging Face layout) fine-tuned on this machine's
# CPU with LoRA and with QLoRA (rank 16 on every linear layer): a few steps, the adapter saved,
# then loaded by PEFT on the same base (QLoRA: the base quantized by bitsandbytes) and compared
# with ours token by token (dev/check_xl_peft.py); the time per step, the peak resident set and
# the plan's peak (dev/bench_plan) of each run. A table in markdown (docs/MEMORY.md).
#   bash dev/xl_finetune.sh      Env: MODELS (/tmp/llmc-models), OUT (/tmp/llmc-xl), STEPS (3),
#   T (1024), PY (/work/venv-torch/bin/python: torch, transformers, peft, bitsandbytes)
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=${MODELS:-/tmp/llmc-models}; OUT=${OUT:-/tmp/llmc-xl}; STEPS=${STEPS:-3}; T=${T:-1024}; PY=${PY:-/work/venv-torch/bin/python}
BIN=build/cpu/bin PLAN=build/cpu/dev/bench_plan
make -s BACKEND=cpu "$BIN/train_lora" "$BIN/convert" "$BIN/generate" "$PLAN"
base="$MODELS/d48"
[ -f "$base/config.json" ] || { mkdir -p "$MODELS"; "$BIN/convert" --model d48 --out "$base" --format hf > /dev/null; }
mkdir -p "$OUT"
python3 - "$OUT/train.bin" <<'PY'
import struct, sys, random
n = 20000; r = random.Random(0)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[r.randrange(50257) for _ in range(n)]))
PY
LORA=(--lora-rank 16 --lora-alpha 32 --lora-targets all-linear --batch-size 1 --seq-len "$T")
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) | $(nproc) cores | B=1 T=$T, $STEPS steps"
echo
echo "| run | ms per step (median of steps 2-$STEPS) | tokens/s | peak RSS MiB | plan MiB (peak while) | PEFT on the same base |"
echo "|---|---|---|---|---|---|"
for mode in LoRA QLoRA; do
  extra=(); [ $mode = QLoRA ] && extra=(--qlora)
  d="$OUT/$mode"; rm -rf "$d"
  /usr/bin/time -f "%M" -o "$OUT/$mode.rss" "$BIN/train_lora" --model "$base" "${LORA[@]}" "${extra[@]}" --train-data "$OUT/train.bin" \
    --steps "$STEPS" --lr 1e-3 --warmup-steps 0 --out "$d" > "$OUT/$mode.log" 2>&1 || { tail -5 "$OUT/$mode.log"; exit 1; }
  ms=$(grep -o '"ms": [0-9.]*' "$d/log.jsonl" | tail -n +2 | awk '{print $2}' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  tps=$(awk -v ms="$ms" -v t="$T" 'BEGIN {printf "%.0f", t / (ms / 1000)}')
  rss=$(( $(tail -1 "$OUT/$mode.rss" | grep -o '[0-9]*$') / 1024 ))
  plan=$("$PLAN" --model "$base" "${LORA[@]}" "${extra[@]}" --save --peak)
  at=$("$PLAN" --model "$base" "${LORA[@]}" "${extra[@]}" --save | grep -o 'while [a-z ]*' | head -1)
  peft=$("$PY" dev/check_xl_peft.py --base "$base" --adapter "$d" ${extra:+--qlora} --work "$OUT/${mode}_peft" 2>/dev/null | grep -E '^(ok|FAIL)' |
        sed -E 's/^(ok|FAIL) +[A-Za-z]+ adapter [^,]*, ours on [^ ]* vs //' | tr '\n' ';' || :)
  [ -n "$peft" ] || peft="FAIL (no result)"
  echo "| 1.5B $mode | $ms | $tps | $rss | $((plan / 1048576)) ($at) | $peft |"
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
