#!/usr/bin/env bash
# LoRA+, BitFit and DoRA (with dropout) on the CUDA backend: the harness builds of train_lora (mk/gpucheck.mk: the real
# trainer on the CUDA kernels, bf16 storage with fp32 master weights) train the tiny GPT-2 as the
# CPU backend does in fp32, step losses within 2e-3 (bf16; measured 4e-4), and the LoRA+ ratio
# reaches the CUDA optimizer (its losses leave plain LoRA's). test/test_loraplus.c holds the CPU
# numbers to PEFT and transformers.
set -u
BUILD="${BUILD:-build/cpu}"
. "$(dirname "$0")/lib.sh"
need_harness_trainers
D="$TMP"
tiny_data "$D" 3
export OMP_NUM_THREADS=1
A=(--model test/ref/gpt2_tiny --train-data "$D/data/tiny_train_*.bin" -b 2 -t 16 --steps 6 --lr 1e-3 --seed 3 --save-format none)
losses() { grep -o '"train_loss": [0-9.e+-]*' "$1/log.jsonl" | awk '{print $2}'; }
# close WHAT DIR_A DIR_B TOL: the same number of steps, every loss within TOL
close() {
  if [ "$(losses "$2" | wc -l)" -eq 6 ] &&
     paste <(losses "$2") <(losses "$3") | awk -v t="$4" 'NF!=2 {bad=1} {d=$1-$2; if (d<0) d=-d; if (d>t) bad=1; if (d>m) m=d} END {printf "max diff %.2e ", m; exit bad}'; then
    ok "$1"
  else bad "$1"; paste <(losses "$2") <(losses "$3") >&2; fi
}
run() { # NAME ARGS...: the CPU run (fp32) and the CUDA one
  local n="$1"; shift
  "$BIN_DIR/train_lora" "${A[@]}" --dtype fp32 "$@" --out "$D/cpu_$n" >"$D/cpu_$n.log" 2>&1 || { bad "$n on the CPU exited $?"; tail -5 "$D/cpu_$n.log"; }
  "$EMU/train_lora" "${A[@]}" "$@" --out "$D/cuda_$n" >"$D/cuda_$n.log" 2>&1 || { bad "$n on CUDA exited $?"; tail -5 "$D/cuda_$n.log"; }
  grep -q "^backend: cuda" "$D/cuda_$n.log" || bad "$n: the harness build did not run the CUDA backend"
}
run lp --lora-bias lora_only --lora-plus-ratio 16
run plain --lora-bias lora_only
run bitfit --lora-rank 0 --lora-bias all
run dora --lora-targets c_attn,mlp.c_fc --dora --lora-dropout 0.1
close "LoRA+ (ratio 16, biases at 16 x lr) on CUDA = the CPU's" "$D/cpu_lp" "$D/cuda_lp" 2e-3
close "BitFit on CUDA = the CPU's" "$D/cpu_bitfit" "$D/cuda_bitfit" 2e-3
close "DoRA with dropout (the trainer's CUDA path, PEFT's dropout form) on CUDA = the CPU's" "$D/cpu_dora" "$D/cuda_dora" 2e-3
paste <(losses "$D/cuda_lp") <(losses "$D/cuda_plain") | awk '{d=$1-$2; if (d<0) d=-d; if (d>m) m=d} END {exit !(m > 1e-2)}' \
  && ok "LoRA+ on CUDA leaves plain LoRA's losses" || bad "LoRA+ on CUDA trains as plain LoRA: $(losses "$D/cuda_lp" | tr '\n' ' ')"
finish
