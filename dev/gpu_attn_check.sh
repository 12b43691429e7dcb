#!/usr/bin/env bash
# A short GPU check of the attention kernels and the training step around them, for a device
# window of a few minutes (scripts/gpu_check.sh is the whole check; this is its attention subset
# plus two throughput runs). Needs build/gpu-bundle(.tar.xz) from `make gpu-bundle`.
#
#   dev/gpu_attn_check.sh [OUTDIR]      (default: $OUT/attn when the device tool sets $OUT)
#
# In order, each step's log and a line in OUTDIR/summary.txt written as it ends (a call cut off
# at its time limit still brings back what ran):
#   1. the GPU test programs of the attention and the model around it (flash attention vs the CPU
#      backend, PTX fragment rules, ops, GPT-2 vs transformers, LoRA, packing)
#   2. gpu_check's kernels section: attention_bench at T = 512 / 1024 / 2048, Nsight Compute of
#      each attention kernel and of a whole B=16 step, the other kernel programs
#   3. train_gpt2 (d12, random weights) and train_lora (r=8 on c_attn) at B=16, T=1024, 12 steps:
#      ms per step (the median over steps 3-12 is read from the logs)
#   4. compute-sanitizer racecheck and memcheck on the flash attention test's quick subset
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
O=${1:-${OUT:-/tmp}/attn}
B=build/gpu-bundle
mkdir -p "$O"
[ -d "$B" ] || tar -xJf "$B.tar.xz" || { echo "error: no $B and no $B.tar.xz (make gpu-bundle)" >&2; exit 2; }
for d in /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib /usr/local/cuda/lib64; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
S="$O/summary.txt"
note() { echo "$*" | tee -a "$S"; }
step() {  # NAME LIMIT CMD...: run, log to O/NAME.log, one summary line
  local name=$1 limit=$2 t0 rc; shift 2
  t0=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" > "$O/$name.log" 2>&1; rc=$?
  note "$name rc=$rc $(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1fs", e-s}') | $(tail -n 1 "$O/$name.log")"
}

note "== tests"
for t in test_flash_attention_gpu test_ptx_gpu test_cuda_ops_gpu test_gpt2_gpu test_lora_gpu test_pack_gpu; do
  step "$t" 60 "$B/$t"
done

note "== kernels (scripts/gpu_check.sh)"
step gpu_check_kernels 110 scripts/gpu_check.sh --out "$O/gpu-report" --budget 100 --sections kernels
grep -h "^time\|^kernel \|FAIL" "$O"/gpu-report/logs/kernels/attention_bench_t*.log >> "$S" 2>/dev/null

note "== train (B=16, T=1024)"
W=$(mktemp -d)
python3 - "$W/train.bin" <<'PY'
import random, struct, sys
n = 1200000
r = random.Random(0)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[r.randrange(50257) for _ in range(n)]))
PY
RUN=(--train-data "$W/train.bin" --batch-size 16 --seq-len 1024 --total-batch-tokens 16384 --steps 12 --lr 1e-4 --seed 1 --out none)
step train_full_b16 60 "$B/train_gpt2" --model d12 "${RUN[@]}"
step save_base 40 "$B/train_gpt2" --model d12 --train-data "$W/train.bin" --batch-size 1 --seq-len 64 --steps 1 --save-format llmc --out "$W/base"
step train_lora_b16 60 "$B/train_lora" --model "$W/base/model.bin" --lora-targets c_attn --lora-rank 8 "${RUN[@]}"
for r in full lora; do
  grep -E '^step +[0-9]+/' "$O/train_${r}_b16.log" | awk -F'|' 'NR > 2 { for (i = 1; i <= NF; i++) if ($i ~ / ms/) { split($i, a, " "); print a[1] } }' \
    | sort -n | awk -v r="$r" '{ v[NR] = $1 } END { if (NR) printf "%s B=16: median %.1f ms/step (%d steps), %.0f tokens/s\n", r, v[int((NR + 1) / 2)], NR, 16384 / v[int((NR + 1) / 2)] * 1000 }' | tee -a "$S"
done
rm -rf "$W"

note "== sanitize"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in racecheck memcheck; do
  step "${tool}_flash" 60 env FLASH_TEST_QUICK=1 TEST_QUICK=1 bash scripts/gpu_sanitize.sh "$CS" "$tool" "$B/test_flash_attention_gpu"
done
note "== done"
