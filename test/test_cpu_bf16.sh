#!/bin/bash
# The CPU backend's bf16 mode (--dtype bf16: bf16 GEMMs with fp32 accumulation, through oneDNN, the
# frozen base of LoRA held in bf16):
# - the model tests with their "bf16" argument against the transformers / PEFT / bitsandbytes
#   references with the CUDA backend's bf16 tolerances (full fine-tuning, LoRA, QLoRA, the
#   preference objectives against TRL);
# - the trainers: --dtype auto / fp32 / bf16 as the banner reports them (auto with LLMC_CPU_BF16=0
#   too), a LoRA run in bf16 with its merged export, and --profile's table.
# The model tests are skipped where the CPU has no native bf16 (its bf16 GEMMs widen to fp32:
# test_ops checks that path).
source "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build/cpu}
native=0
grep -qw -e avx512_bf16 -e amx_bf16 /proc/cpuinfo 2>/dev/null && native=1

if [ $native = 1 ]; then
  for t in test_gpt2 test_lora test_qlora test_pref; do
    if "$BUILD/test/$t" bf16 > "$TMP/$t.log" 2>&1; then ok "$t bf16: $(tail -1 "$TMP/$t.log")"
    else bad "$t bf16"; grep FAIL "$TMP/$t.log" | head -5 >&2; fi
  done
else
  echo "skip: the model tests in bf16 (this CPU has neither AVX512-BF16 nor AMX-BF16)"
fi

# the OpenMP wait setting made before main() follows --dtype (test_ops checks it; its plain run
# checks the auto case)
"$BUILD/test/test_ops" --dtype fp32 > "$TMP/ops_fp32.log" 2>&1 && grep -q "OMP_WAIT_POLICY=passive (fp32 GEMMs)" "$TMP/ops_fp32.log" \
  && ok "--dtype fp32: $(grep 'before main' "$TMP/ops_fp32.log" | sed 's/^ok *//')" || { bad "test_ops --dtype fp32"; grep -E "FAIL|before" "$TMP/ops_fp32.log" >&2; }

MODEL=test/ref/gpt2_tiny
make_shard "$TMP/t.bin" 3000 100 3
RUN=(--model "$MODEL" --train-data "$TMP/t.bin" -b 2 -t 16 --steps 3 --threads 2 --out none)
"$BIN_DIR/train_gpt2" "${RUN[@]}" > "$TMP/auto.log" 2>&1 || bad "train_gpt2 --dtype auto failed"
if [ $native = 1 ] && [ "${LLMC_CPU_BF16:-}" != 0 ]; then want="dtype: bf16 GEMMs, fp32 accumulation (auto: the CPU has"; else want="dtype: fp32 (auto: "; fi
grep -q "^$want" "$TMP/auto.log" && ok "auto: $(grep '^dtype' "$TMP/auto.log")" || bad "auto banner: $(grep '^dtype' "$TMP/auto.log")"
# LLMC_CPU_BF16=0: auto is fp32 on any CPU, as on one without bf16, and says why (issue 44 item 20: a
# way to run the suite as an fp32-only CPU does); --dtype bf16 still means bf16; a value other
# than 0 or 1 is refused
LLMC_CPU_BF16=0 "$BIN_DIR/train_gpt2" "${RUN[@]}" > "$TMP/off.log" 2>&1 && grep -q "^dtype: fp32 (auto: LLMC_CPU_BF16=0 in the environment; the CPU has" "$TMP/off.log" \
  && ok "LLMC_CPU_BF16=0: $(grep '^dtype' "$TMP/off.log")" || bad "LLMC_CPU_BF16=0: $(grep -E '^dtype|error' "$TMP/off.log")"
LLMC_CPU_BF16=0 "$BIN_DIR/train_gpt2" "${RUN[@]}" --dtype bf16 > "$TMP/off16.log" 2>&1 && grep -q "^dtype: bf16 GEMMs, fp32 accumulation (--dtype: " "$TMP/off16.log" \
  && ok "LLMC_CPU_BF16=0 --dtype bf16: $(grep '^dtype' "$TMP/off16.log")" || bad "LLMC_CPU_BF16=0 --dtype bf16: $(grep -E '^dtype|error' "$TMP/off16.log")"
expect_fail "LLMC_CPU_BF16=yes" "LLMC_CPU_BF16='yes' in the environment" env LLMC_CPU_BF16=yes "$BIN_DIR/train_gpt2" "${RUN[@]}"
# (and the OpenMP wait setting made before main() follows it: test_ops' check of the auto case)
LLMC_CPU_BF16=0 "$BUILD/test/test_ops" > "$TMP/ops_off.log" 2>&1 && grep -q "OMP_WAIT_POLICY=passive (fp32 GEMMs)" "$TMP/ops_off.log" \
  && ok "LLMC_CPU_BF16=0, before main(): $(grep 'before main' "$TMP/ops_off.log" | sed 's/^ok *//')" || { bad "test_ops under LLMC_CPU_BF16=0"; grep -E "FAIL|before" "$TMP/ops_off.log" >&2; }
"$BIN_DIR/train_gpt2" "${RUN[@]}" --dtype fp32 --profile > "$TMP/fp32.log" 2>&1 || bad "train_gpt2 --dtype fp32 failed"
grep -q "^dtype: fp32 (--dtype: " "$TMP/fp32.log" && ok "--dtype fp32 in the banner" || bad "fp32 banner: $(grep '^dtype' "$TMP/fp32.log")"
# --profile: a table of ops over the steps after the first, the GEMMs by shape, shares adding up
if grep -q "^profile: time per step by op over 2 steps (fp32 GEMMs)" "$TMP/fp32.log" &&
   grep -qE "^  matmul_forward 64->256 " "$TMP/fp32.log" && grep -qE "^  attention_backward " "$TMP/fp32.log" &&
   awk '/^profile:/ {p=1; next} p && /%$/ {s += $NF + 0} END {exit !(s > 99 && s < 101)}' "$TMP/fp32.log"; then
  ok "--profile: the step split by op ($(grep -c '%$' "$TMP/fp32.log") rows)"
else bad "--profile table"; sed -n '/^profile/,$p' "$TMP/fp32.log" | head -8 >&2; fi
if [ $native = 1 ]; then
  "$BIN_DIR/train_lora" "${RUN[@]/none/$TMP/lora}" --dtype bf16 --lora-targets c_attn --merge > "$TMP/lora.log" 2>&1 \
    || { bad "train_lora --dtype bf16 failed"; tail -3 "$TMP/lora.log" >&2; }
  grep -q "^merged: adapter merged in fp32 into the base read again from .*$MODEL " "$TMP/lora.log" && [ -s "$TMP/lora/merged/model.bin" ] \
    && ok "train_lora --dtype bf16 --merge: merged in fp32 from the base's file" || bad "bf16 merge: $(grep -i merge "$TMP/lora.log")"
fi
finish
