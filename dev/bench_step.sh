#!/usr/bin/env bash
# Speed and memory of a training step at GPT-2 124M shapes (B=4, T=256), ours against PyTorch, in
# one run on the same model file (a randomly initialised GPT-2 124M saved as a transformers
# directory: speed does not depend on the values), the same machine and thread count:
#   ours --dtype fp32, ours --dtype bf16, PyTorch fp32 eager, PyTorch bf16 torch.autocast
# for full fine-tuning (train_gpt2 / GPT2LMHeadModel + AdamW), LoRA r=8 on c_attn (train_lora /
# + PEFT) and QLoRA r=8 on c_attn (train_lora --qlora / + PEFT + bitsandbytes NF4); all runs these
# three. dora runs the lora mode's four runs and, each after its LoRA run, the same with DoRA
# (train_lora --dora / LoraConfig(use_dora=True)), for the cost of DoRA's step over LoRA's.
#   bash dev/bench_step.sh [full|lora|qlora|dora|all] [threads]   (default: all, 2 threads)
#   STEPS=4 (timed steps after one warm-up step), PYTHON=python3 (torch, transformers, peft,
#   bitsandbytes)
# Prints per run the median and minimum ms per step and the peak RSS, then ratios (PyTorch time /
# ours: > 1 means we are faster; our RSS / PyTorch's), the load average before and after each
# run (take figures only when it stays below 1), and the share of the GEMM limit our bf16 step
# reaches: the step's GEMMs timed alone (dev/bench_gemm, oneDNN bf16) / our bf16 step (DoRA's
# against the LoRA step's GEMMs: its one extra product, B A for the row norms, is left out). dora
# also prints DoRA step / LoRA step, ours and PyTorch's, per dtype.
# Our programs run with OPENBLAS_CORETYPE removed from the environment, so they pick the OpenBLAS
# kernels they pick by default (llmc/cpu/backend.c).
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT=${1:-all}; THREADS=${2:-2}; PY=${PYTHON:-python3}; STEPS=${STEPS:-4}
make -s train_gpt2 train_lora bench-cpu
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$PY" - "$tmp/data.bin" <<'PY'
import struct, sys, random
n = 300000; r = random.Random(0)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[r.randrange(50257) for _ in range(n)]))
PY
env -u OPENBLAS_CORETYPE ./train_gpt2 --model d12 --train-data "$tmp/data.bin" --batch-size 1 --seq-len 8 --steps 1 \
    --lr 0 --save-format hf --out "$tmp/base" > /dev/null
model="$tmp/base"
load() { cut -d' ' -f1 /proc/loadavg; }
stats() { sort -n | awk '{a[NR]=$1} END {printf "%.1f %.1f", a[int((NR+1)/2)], a[1]}'; }   # median min
rss_mib() { awk -F: '/Maximum resident/ {printf "%.0f", $2/1024}' "$1"; }

# ours: name, then the program and its flags
ours() {
  local name=$1; shift
  local l0; l0=$(load)
  env -u OPENBLAS_CORETYPE /usr/bin/time -v "$@" --model "$model" --train-data "$tmp/data.bin" --batch-size 4 --seq-len 256 \
      --steps $((STEPS + 1)) --threads "$THREADS" --out none > "$tmp/$name.log" 2> "$tmp/$name.time"
  local ms; ms=$(grep -E "^step +[0-9]+/" "$tmp/$name.log" | tail -n "$STEPS" | sed -E 's/.*\| ([0-9.]+) ms \|.*/\1/' | stats)
  printf "%-24s %s %s load %s -> %s\n" "$name" "$ms" "$(rss_mib "$tmp/$name.time")" "$l0" "$(load)" | tee -a "$tmp/table"
}
# pytorch: name, then bench_torch_step.py's flags
torch_run() {
  local name=$1; shift
  local l0; l0=$(load)
  OMP_NUM_THREADS=$THREADS /usr/bin/time -v "$PY" dev/bench_torch_step.py --model "$model" --threads "$THREADS" \
      --steps "$STEPS" "$@" > "$tmp/$name.log" 2> "$tmp/$name.time" || { tail -5 "$tmp/$name.time"; return 1; }
  local ms; ms=$(grep -E "^step [1-9]" "$tmp/$name.log" | sed -E 's/.* ([0-9.]+) ms$/\1/' | stats)
  printf "%-24s %s %s load %s -> %s\n" "$name" "$ms" "$(rss_mib "$tmp/$name.time")" "$l0" "$(load)" | tee -a "$tmp/table"
}

lora=(--lora-targets c_attn --lora-rank 8 --lora-alpha 16)
echo "run                      median_ms min_ms peak_rss_MiB   (threads $THREADS, $STEPS timed steps, B=4 T=256)"
if [ "$WHAT" = full ] || [ "$WHAT" = all ]; then
  ours full_ours_fp32 ./train_gpt2 --dtype fp32
  ours full_ours_bf16 ./train_gpt2 --dtype bf16
  torch_run full_torch_fp32 --dtype fp32
  torch_run full_torch_bf16 --dtype bf16
fi
if [ "$WHAT" = lora ] || [ "$WHAT" = all ]; then
  ours lora_ours_fp32 ./train_lora "${lora[@]}" --dtype fp32
  ours lora_ours_bf16 ./train_lora "${lora[@]}" --dtype bf16
  torch_run lora_torch_fp32 --dtype fp32 --lora c_attn --rank 8
  torch_run lora_torch_bf16 --dtype bf16 --lora c_attn --rank 8
fi
if [ "$WHAT" = dora ]; then
  ours lora_ours_fp32 ./train_lora "${lora[@]}" --dtype fp32
  ours dora_ours_fp32 ./train_lora "${lora[@]}" --dora --dtype fp32
  ours lora_ours_bf16 ./train_lora "${lora[@]}" --dtype bf16
  ours dora_ours_bf16 ./train_lora "${lora[@]}" --dora --dtype bf16
  torch_run lora_torch_fp32 --dtype fp32 --lora c_attn --rank 8
  torch_run dora_torch_fp32 --dtype fp32 --lora c_attn --rank 8 --dora
  torch_run lora_torch_bf16 --dtype bf16 --lora c_attn --rank 8
  torch_run dora_torch_bf16 --dtype bf16 --lora c_attn --rank 8 --dora
fi
if [ "$WHAT" = qlora ] || [ "$WHAT" = all ]; then
  ours qlora_ours_fp32 ./train_lora "${lora[@]}" --qlora --dtype fp32
  ours qlora_ours_bf16 ./train_lora "${lora[@]}" --qlora --dtype bf16
  torch_run qlora_torch_fp32 --dtype fp32 --lora c_attn --rank 8 --qlora
  torch_run qlora_torch_bf16 --dtype bf16 --lora c_attn --rank 8 --qlora
fi

# ratios: PyTorch median (min) / ours, RSS ours / PyTorch
echo
echo "ratios (PyTorch time / ours: median (min); our peak RSS / PyTorch's):"
awk '{ split($1, p, "_"); key = p[1] "_" p[2] "_" p[3]; med[key] = $2; mn[key] = $3; rss[key] = $4 }
END {
  split("full lora qlora dora", modes, " ")
  for (i = 1; i <= 4; i++) { m = modes[i]
    if (!((m "_ours_bf16") in med)) continue
    for (o = 1; o <= 2; o++) { od = o == 1 ? "fp32" : "bf16"; ok = m "_ours_" od
      for (t = 1; t <= 2; t++) { td = t == 1 ? "fp32" : "bf16"; tk = m "_torch_" td
        if (!(tk in med) || !(ok in med)) continue
        printf "  %-5s ours %s vs PyTorch %s%s: %.2fx (%.2fx)   RSS %.2f\n", m, od, td, td == "bf16" ? " autocast" : " eager",
               med[tk] / med[ok], mn[tk] / mn[ok], rss[ok] / rss[tk] } } } }' "$tmp/table"
if [ "$WHAT" = dora ]; then
  echo
  echo "DoRA step / LoRA step (median (min); PyTorch = PEFT use_dora=True / False):"
  awk '{ med[$1] = $2; mn[$1] = $3 }
  END {
    split("ours_fp32 ours_bf16 torch_fp32 torch_bf16", runs, " ")
    for (i = 1; i <= 4; i++) { r = runs[i]
      if (!(("dora_" r) in med) || !(("lora_" r) in med)) continue
      printf "  %-22s %.2fx (%.2fx)\n", r == "ours_fp32" ? "ours fp32" : r == "ours_bf16" ? "ours bf16" : \
             r == "torch_fp32" ? "PyTorch fp32 eager" : "PyTorch bf16 autocast",
             med["dora_" r] / med["lora_" r], mn["dora_" r] / mn["lora_" r] } }' "$tmp/table"
fi

# the GEMM limit: the step's GEMMs alone at oneDNN bf16 speed, against our bf16 step's minimum
env -u OPENBLAS_CORETYPE build/cpu/dev/bench_gemm "$THREADS" 3 > "$tmp/gemm.txt"
full_lim=$(awk '/^step GEMM seconds/ {print $NF}' "$tmp/gemm.txt")
lora_lim=$(awk '/^LoRA step GEMM seconds/ {print $NF}' "$tmp/gemm.txt")
echo
echo "GEMM limit (dev/bench_gemm, oneDNN bf16): full step ${full_lim} s, LoRA step ${lora_lim} s"
awk -v f="$full_lim" -v l="$lora_lim" '$1 ~ /_ours_bf16$/ { lim = ($1 ~ /^full/) ? f : l
  printf "  %-16s %.0f%% of the GEMM limit (%.2f s of GEMMs at the limit in a %.2f s step)\n", $1, 100 * lim * 1000 / $3, lim, $3 / 1000 }' "$tmp/table"
