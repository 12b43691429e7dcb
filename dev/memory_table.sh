#!/usr/bin/env bash
# docs/MEMORY.md's table: the plan (dev/bench_plan, CUDA backend: bf16, fp32 master weights and
# Adam state, the deterministic attention backward, the device reserve) of every GPT-2 size x full
# fine-tuning / LoRA / QLoRA x ZeRO 0-3 x 1 / 2 / 8 ranks at T = 1024, on a 24 GB and an 80 GB
# GPU, beside DeepSpeed's and accelerate's estimators for the same settings (dev/estimators.py, run
# with PY, a Python that has deepspeed, accelerate and transformers; their columns stay empty
# without one). LoRA / QLoRA: rank 16 on every linear layer.
#   bash dev/memory_table.sh > table.md      (PY=/work/venv-torch/bin/python by default)
set -euo pipefail
cd "$(dirname "$0")/.."
PLAN=build/cpu/dev/bench_plan PY=${PY:-/work/venv-torch/bin/python}
make -s BACKEND=cpu "$PLAN"
est=$(mktemp); trap 'rm -f "$est"' EXIT
{ "$PY" dev/estimators.py 2>/dev/null || :; } | grep "^{" > "$est" || :
gib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1073741824}'; }
estimate() { # estimate SIZE RANKS FIELD: bytes from dev/estimators.py's output, or empty
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d["size"] == sys.argv[2] and d["ranks"] == int(sys.argv[3]): print(d[sys.argv[4]])' "$est" "$1" "$2" "$3"
}
echo "| model | training | ZeRO | 1 rank: GiB at B=1 (largest B on 24 / 80 GB) | 2 ranks | 8 ranks | DeepSpeed GiB (1 / 2 / 8 ranks) | accelerate GiB |"
echo "|---|---|---|---|---|---|---|---|"
for size in "124M d12" "355M d24" "774M d36" "1.5B d48"; do
  read -r name desc <<<"$size"
  for mode in full LoRA QLoRA; do
    flags=(--model "$desc" --backend cuda --seq-len 1024 --batch-size 1 --save)   # (a run that writes its model: ZeRO 3 gathers it on rank 0)
    [ $mode = LoRA ] && flags+=(--lora-rank 16 --lora-alpha 32 --lora-targets all-linear)
    [ $mode = QLoRA ] && flags+=(--qlora --lora-rank 16 --lora-alpha 32 --lora-targets all-linear)
    for z in 0 1 2 3; do
      cells=()
      for np in 1 2 8; do
        peak=$("$PLAN" "${flags[@]}" --zero $z --world $np --gpu-gib 80 --peak)
        b24=$("$PLAN" "${flags[@]}" --zero $z --world $np --gpu-gib 24 --max-batch | cut -d' ' -f1)
        b80=$("$PLAN" "${flags[@]}" --zero $z --world $np --gpu-gib 80 --max-batch | cut -d' ' -f1)
        cells+=("$(gib "$peak") ($b24 / $b80)")
      done
      ds=""; acc=""
      if [ -s "$est" ] && [ $z -ge 2 ]; then
        f=deepspeed_z$z
        ds="$(gib "$(estimate "$name" 1 $f)") / $(gib "$(estimate "$name" 2 $f)") / $(gib "$(estimate "$name" 8 $f)")"
      fi
      if [ -s "$est" ]; then
        if [ $mode = QLoRA ]; then acc="$(gib "$(estimate "$name" 1 accelerate_load_int4)") (int4 load)"
        else acc="$(gib "$(estimate "$name" 1 accelerate_train_bf16)")"; fi
      fi
      echo "| $name | $mode | $z | ${cells[0]} | ${cells[1]} | ${cells[2]} | ${ds:-—} | ${acc:-—} |"
    done
  done
done
