#!/usr/bin/env bash
# The memory plan (llmc/plan/memplan.h, printed by the trainers' --plan) against the measured peak
# resident set of the same runs on the CPU backend, in two tables:
#   bash dev/bench_plan.sh              one training step (--out none) of every configuration that
#                                       fits this machine's memory (GPT-2 124M and 355M full
#                                       fine-tuning, 774M and 1.5B LoRA and QLoRA; ZeRO 0-3 at 1
#                                       and 2 ranks; recompute 0-2); about 20 minutes on 2 cores
#   bash dev/bench_plan.sh save         runs that write (--out: a checkpoint every 2 steps of 4 and
#                                       the final outputs: model.safetensors, model.bin, GGUF; with
#                                       LoRA the adapter, its GGUF and --merge's merged model): full
#                                       fine-tuning, LoRA, QLoRA and DPO with --ref-model (both
#                                       trainers) at d6 and GPT-2 124M (d12), B = 4, T = 256, beside
#                                       the plan's peak and the disk --plan says the run writes
#                                       against du; about 15 minutes on 2 cores
# each rank's plan beside that rank's max RSS (GNU time). Prints a markdown table (docs/MEMORY.md
# keeps the last one).
# Env: ROWS (a grep pattern over the rows' names, e.g. ROWS=124M), MODELS (where the random-weight
# Hugging Face directories of dN are made once with `convert --model dN`, default
# /tmp/llmc-models: d24, d36, d48 1.4, 3.1 and 6.2 GB), T (sequence length, default 1024; save: 256),
# THREADS (of a one-rank run; ranks get one each).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-step}
MODELS=${MODELS:-/tmp/llmc-models}; THREADS=${THREADS:-2}; ROWS=${ROWS:-.}
if [ "$MODE" = save ]; then T=${T:-256}; else T=${T:-1024}; fi
BIN=build/cpu/bin
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time)"; exit 1; }
make -s BACKEND=cpu "$BIN/train_gpt2" "$BIN/train_lora" "$BIN/convert"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/train.bin" <<'PY'
import struct, sys, random
n = 100000; r = random.Random(0)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[r.randrange(50257) for _ in range(n)]))
PY
model() { # model dN: a Hugging Face directory of it (random weights), made once
  [ -f "$MODELS/$1/config.json" ] || { mkdir -p "$MODELS"; "$BIN/convert" --model "$1" --out "$MODELS/$1" --format hf > /dev/null; }
  echo "$MODELS/$1"
}
# ---- save: runs that write, the plan's peak and disk against the measured ones
save_table() {
  python3 dev/bench_pref.py make-pairs "$tmp/pairs.jsonl" 40
  data/prepare --input "$tmp/pairs.jsonl" --out-dir "$tmp" --name pairs --pack "$T" --val-tokens 0 > /dev/null
  local W=(--save-every 2 --steps 4 --batch-size 4 --seq-len "$T" --threads "$THREADS" --save-gguf q8_0)
  local L=(--merge) P=(--objective dpo --train-data "$tmp/pairs_train_*.bin")
  # name | program | flags (the LoRA and DPO rows read the Hugging Face directory of dN as --model / --ref-model: @dN)
  local rows=(
    "full|train_gpt2|--model dN" "LoRA|train_lora|--model @dN ${L[*]}" "QLoRA|train_lora|--model @dN --qlora ${L[*]}"
    "DPO full, --ref-model|train_gpt2|--model dN --ref-model dN ${P[*]}" "DPO LoRA, --ref-model|train_lora|--model @dN --ref-model @dN ${L[*]} ${P[*]}")
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) | $(nproc) cores | B=4 T=$T, 4 steps, a checkpoint every 2, the final outputs with GGUF q8_0"
  echo
  echo "| model | run | plan MiB (peak while) | measured peak RSS MiB | plan - measured | disk: plan MiB | du MiB |"
  echo "|---|---|---|---|---|---|---|"
  for size in "d6 d6" "124M d12"; do
    read -r sname d <<<"$size"
    for row in "${rows[@]}"; do
      IFS='|' read -r name prog flags <<<"$row"
      grep -qE -- "$ROWS" <<<"$sname $name" || continue
      flags=${flags//@dN/$(model "$d")}; flags=${flags//dN/$d}
      read -ra args <<<"$flags"
      grep -q -- "--train-data" <<<"$flags" || args+=(--train-data "$tmp/train.bin")
      rm -rf "$tmp/out"
      if ! /usr/bin/time -f "%M" -o "$tmp/rss" "$BIN/$prog" "${args[@]}" "${W[@]}" --out "$tmp/out" > "$tmp/run.log" 2>&1; then
        echo "| $sname | $name | | failed | | | |"; tail -5 "$tmp/run.log" >&2; continue
      fi
      du=$(du -sk --apparent-size "$tmp/out" | cut -f1) # (a hard link counted once)
      "$BIN/$prog" "${args[@]}" "${W[@]}" --out "$tmp/plan_out" --plan > "$tmp/plan.log" 2>&1 || :
      [ ! -e "$tmp/plan_out" ] || echo "warning: --plan wrote $tmp/plan_out" >&2
      plan=$(sed -n 's/^  training: .* | peak \([0-9.]*\) MiB resident while \([a-z -]*\) |.*/\1|\2/p' "$tmp/plan.log")
      disk=$(sed -n 's/^disk: .* | --out: about \([0-9.]*\) MiB at the end.*/\1/p' "$tmp/plan.log")
      awk -v s="$sname" -v n="$name" -v p="${plan%%|*}" -v at="${plan#*|}" -v m="$(tail -1 "$tmp/rss")" -v dp="$disk" -v du="$du" \
        'BEGIN {printf "| %s | %s | %.0f (%s) | %.0f | %+.1f%% | %.0f | %.0f |\n", s, n, p, at, m / 1024, 100 * (p * 1024 - m) / m, dp, du / 1024}'
    done
  done
  echo
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg) | $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
}
[ "$MODE" = save ] && { save_table; exit 0; }
LORA=(--lora-rank 16 --lora-alpha 32 --lora-targets all-linear)
# name | ranks | program | flags (the model as dN: LoRA runs take its Hugging Face directory)
ROWLIST=(
  "124M full|1|train_gpt2|--model d12 --batch-size 1"
  "124M full, recompute 1|1|train_gpt2|--model d12 --batch-size 1 --recompute 1"
  "124M full, recompute 2|1|train_gpt2|--model d12 --batch-size 1 --recompute 2"
  "124M full, B 4, fp32 GEMMs|1|train_gpt2|--model d12 --batch-size 4 --dtype fp32"
  "124M full, ZeRO 0|2|train_gpt2|--model d12 --batch-size 1 --zero 0"
  "124M full, ZeRO 1|2|train_gpt2|--model d12 --batch-size 1 --zero 1"
  "124M full, ZeRO 2|2|train_gpt2|--model d12 --batch-size 1 --zero 2"
  "124M full, ZeRO 3|2|train_gpt2|--model d12 --batch-size 1 --zero 3"
  "355M full|1|train_gpt2|--model d24 --batch-size 1"
  "355M full, ZeRO 1|2|train_gpt2|--model d24 --batch-size 1 --zero 1"
  "355M full, ZeRO 3, recompute 2|2|train_gpt2|--model d24 --batch-size 1 --zero 3 --recompute 2"
  "774M LoRA|1|train_lora|--model d36 --batch-size 1 ${LORA[*]}"
  "774M QLoRA|1|train_lora|--model d36 --batch-size 1 --qlora ${LORA[*]}"
  "774M LoRA, ZeRO 2|2|train_lora|--model d36 --batch-size 1 --zero 2 ${LORA[*]}"
  "774M QLoRA, ZeRO 3|2|train_lora|--model d36 --batch-size 1 --zero 3 --qlora ${LORA[*]}"
  "1.5B LoRA|1|train_lora|--model d48 --batch-size 1 ${LORA[*]}"
  "1.5B QLoRA|1|train_lora|--model d48 --batch-size 1 --qlora ${LORA[*]}"
  "1.5B QLoRA, ZeRO 3, recompute 1|2|train_lora|--model d48 --batch-size 1 --zero 3 --recompute 1 --qlora ${LORA[*]}"
)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) | $(nproc) cores | T=$T | one step, --out none"
echo
echo "| run | ranks | plan per rank MiB (peak while) | measured peak RSS per rank MiB | plan - measured |"
echo "|---|---|---|---|---|"
for row in "${ROWLIST[@]}"; do
  IFS='|' read -r name np prog flags <<<"$row"
  grep -qE -- "$ROWS" <<<"$name" || continue
  read -ra args <<<"$flags"
  [ "$prog" = train_lora ] && args[1]=$(model "${args[1]}") # (--model is the first flag)
  args+=(--seq-len "$T")
  rm -f "$tmp"/rss.*
  threads=$THREADS; [ "$np" -gt 1 ] && threads=1
  if ! mpirun -np "$np" bash -c '/usr/bin/time -f "%M" -o "'"$tmp"'/rss.$OMPI_COMM_WORLD_RANK" "$@"' _ "$BIN/$prog" "${args[@]}" \
       --train-data "$tmp/train.bin" --steps 1 --out none --threads "$threads" > "$tmp/run.log" 2>&1; then
    echo "| $name | $np | | failed | |"; tail -5 "$tmp/run.log" >&2; continue
  fi
  # the plan of the same command line, from the trainer itself (--plan: rank 0 prints every rank's peak)
  mpirun -np "$np" "$BIN/$prog" "${args[@]}" --train-data "$tmp/train.bin" --steps 1 --out none --threads "$threads" --plan > "$tmp/plan.log" 2>&1
  for r in $(seq 0 $((np - 1))); do
    if [ "$np" = 1 ]; then plan=$(sed -n 's/^  training: .* | peak \([0-9.]*\) MiB resident while \([a-z ]*\) |.*/\1|while \2/p' "$tmp/plan.log")
    else plan=$(sed -n 's/^ranks: //p' "$tmp/plan.log" | tr ';' '\n' | sed -n "s/^ *$r: peak \([0-9.]*\) MiB (\([a-z ]*\)).*/\1|while \2/p"); fi
    [ -n "$plan" ] || { echo "| $name | $np | no plan | | |"; cat "$tmp/plan.log" >&2; continue; }
    rss=$(( $(tail -1 "$tmp/rss.$r" | grep -o '[0-9]*$') * 1024 ))
    awk -v n="$name" -v np="$np" -v r="$r" -v p="${plan%%|*}" -v m="$rss" -v at="${plan#*|}" \
      'BEGIN {printf "| %s | %s | %.0f (%s) | %.0f | %+.1f%% |\n", n, (np > 1 ? "rank " r " of " np : "1"), p, at, m / 1048576, 100 * (p * 1048576 - m) / m}'
  done
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
