#!/bin/bash
# The CPU backend's bf16 mode (--dtype bf16: bf16 GEMMs with fp32 accumulation through oneDNN, the
# frozen base of LoRA held in bf16) against the transformers / PEFT / bitsandbytes references:
# the model tests run with their "bf16" argument and the CUDA backend's bf16 tolerances (full
# fine-tuning, LoRA, QLoRA). Skipped where the CPU has no native bf16 (oneDNN would emulate it).
set -u
BUILD=${BUILD:-build/cpu}
if ! grep -qw -e avx512_bf16 -e amx_bf16 /proc/cpuinfo 2>/dev/null; then
  echo "skipped: this CPU has neither AVX512-BF16 nor AMX-BF16"; exit 0
fi
rc=0
for t in test_gpt2 test_lora test_qlora; do
  echo "== $t bf16"
  "$BUILD/test/$t" bf16 || rc=1
done
exit $rc
