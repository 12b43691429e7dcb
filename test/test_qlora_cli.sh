#!/usr/bin/env bash
# train_lora --qlora end to end on the tiny GPT-2 (test/ref/gpt2_tiny) with small random token
# shards: the run prints the NF4 memory report and writes the adapter and the merged model; an
# interrupted run resumed from its checkpoint ends with a byte-identical adapter; the merged model
# (merged into dequant(quant(W))) loads in train_gpt2 and gives the validation loss the QLoRA model
# had at the end, which differs from the original base's; the transformers + bitsandbytes 4-bit
# checkpoint of the same base (test/ref/qlora_tiny/base_4bit) implies --qlora and trains to the
# same losses bit for bit (its quantization is ours); bad combinations are refused.
source "$(dirname "$0")/lib.sh"
BIN="$BIN_DIR/train_lora"
BIN_FULL="$BIN_DIR/train_gpt2"
D="${BUILD:-build}/qlora_cli"
tiny_data "$D" 7

export OMP_NUM_THREADS=1
DATA=(--train-data "$D/data/tiny_train_*.bin" --val-data "$D/data/tiny_val_*.bin" --eval-batches 4)
COMMON=(--model test/ref/gpt2_tiny "${DATA[@]}" -b 2 -t 16 --steps 6 --lr 3e-3
        --lora-rank 4 --lora-alpha 8 --lora-targets all-linear --save-every 3 --seed 5 --qlora)

# ---- a full run with --merge
"$BIN" "${COMMON[@]}" --merge --out "$D/run1" >"$D/run1.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { bad "run1 exited $rc"; tail -20 "$D/run1.log"; }
for f in adapter_model.safetensors adapter_config.json merged/model.safetensors merged/model.bin DONE_00000006; do
  [ -f "$D/run1/$f" ] || bad "run1 did not write $f"
done
# 2 layers x (qkvw 192x64 + attprojw 64x64 + fcw 256x64 + fcprojw 64x256) = 98304 weights
grep -qE "qlora: NF4 base \(double quant, blocks of 64\) 98304 weights in .* = 4\.130 bits/weight" "$D/run1.log" \
  && ok "memory report: $(grep '^qlora:' "$D/run1.log")" || bad "no NF4 memory report: $(grep -i qlora "$D/run1.log")"
grep -q "merged: adapter merged into dequant(quant(W))" "$D/run1.log" && ok "--merge says it merges into dequant(quant(W))" \
  || bad "--merge output line"

# ---- interrupted after 3 steps, resumed: identical final adapter
"$BIN" "${COMMON[@]}" --stop-after 3 --out "$D/run2" >"$D/run2a.log" 2>&1 || bad "run2 (first part) exited $?"
"$BIN" "${COMMON[@]}" --resume --out "$D/run2" >"$D/run2b.log" 2>&1 || { bad "run2 (resume) exited $?"; tail -20 "$D/run2b.log"; }
grep -q "resumed: step 3" "$D/run2b.log" || bad "resume did not start at step 3"
cmp -s "$D/run1/adapter_model.safetensors" "$D/run2/adapter_model.safetensors" \
  && ok "resumed --qlora run ends with a byte-identical adapter" || bad "resumed adapter differs from the uninterrupted run's"

# ---- the merged model in train_gpt2: its val loss (step 0, before any update) is the QLoRA model's final one
vl_of() { sed -n "s/^step $2 | val loss \([0-9.]*\) | .*$/\1/p" "$1" | tail -1; }
q_vl=$(vl_of "$D/run1.log" 6)
"$BIN_FULL" --model "$D/run1/merged/model.bin" "${DATA[@]}" -b 2 -t 16 --steps 1 --lr 0 --eval-every 1 --out "$D/merged_run" >"$D/merged.log" 2>&1 \
  || { bad "train_gpt2 on the merged model exited $?"; tail -5 "$D/merged.log"; }
m_vl=$(vl_of "$D/merged.log" 0)
"$BIN_FULL" --model test/ref/gpt2_tiny "${DATA[@]}" -b 2 -t 16 --steps 1 --lr 0 --eval-every 1 --out "$D/base_run" >"$D/base.log" 2>&1 || bad "train_gpt2 on the base exited $?"
b_vl=$(vl_of "$D/base.log" 0)
if [ -n "$q_vl" ] && [ -n "$m_vl" ] && [ -n "$b_vl" ]; then
  perl -e 'exit !(abs($ARGV[0]-$ARGV[1]) < 2e-5 && abs($ARGV[0]-$ARGV[2]) > 1e-3)' "$q_vl" "$m_vl" "$b_vl" \
    && ok "merged model val loss $m_vl == QLoRA model's $q_vl (original base: $b_vl)" \
    || bad "merged model val loss $m_vl vs QLoRA $q_vl (base $b_vl)"
else bad "val losses missing: qlora '$q_vl' merged '$m_vl' base '$b_vl'"; fi

# ---- a transformers + bitsandbytes 4-bit checkpoint implies --qlora and trains identically
C4=("${COMMON[@]}"); C4[1]=test/ref/qlora_tiny/base_4bit; unset 'C4[${#C4[@]}-1]'  # --model <4bit dir>, no --qlora
"$BIN" "${C4[@]}" --out "$D/run3" >"$D/run3.log" 2>&1 || { bad "4-bit checkpoint run exited $?"; tail -5 "$D/run3.log"; }
grep -q "bitsandbytes 4-bit" "$D/run3.log" && grep -q "^qlora: NF4 base" "$D/run3.log" || bad "4-bit checkpoint not taken as QLoRA"
diff <(grep -o "loss [0-9.]*" "$D/run1.log") <(grep -o "loss [0-9.]*" "$D/run3.log") >/dev/null \
  && cmp -s "$D/run1/adapter_model.safetensors" "$D/run3/adapter_model.safetensors" \
  && ok "4-bit checkpoint run == --qlora run (losses and adapter identical)" || bad "4-bit checkpoint run differs from --qlora"

# ---- generate loads the 4-bit checkpoint: its completions are those of the fp32 model that holds
# exactly dequant(quant(W)) (train_lora --qlora at lr 0 merges a zero adapter into those weights),
# greedy and sampled, token for token
GEN="$BIN_DIR/generate"
"$BIN" --model test/ref/qlora_tiny/base_4bit "${DATA[@]}" -b 2 -t 16 --steps 1 --lr 0 --merge --save-format hf --out "$D/dq" >"$D/dq.log" 2>&1 \
  || { bad "lr 0 --merge run on the 4-bit checkpoint exited $?"; tail -5 "$D/dq.log"; }
G=(--vocab data/gpt2 --prompt '!#%' --max-new-tokens 60 --quiet --threads 1)
same=0; differs=0
for args in "--temperature 0" "--seed 1" "--seed 2" "--seed 3"; do
  g4=$("$GEN" --model test/ref/qlora_tiny/base_4bit "${G[@]}" $args 2>"$D/g4.err") || { bad "generate on the 4-bit checkpoint exited $?"; cat "$D/g4.err"; }
  gd=$("$GEN" --model "$D/dq/merged" "${G[@]}" $args 2>/dev/null)
  go=$("$GEN" --model test/ref/gpt2_tiny "${G[@]}" $args 2>/dev/null)
  [ ${#g4} -eq 60 ] && [ "$g4" = "$gd" ] && same=$((same+1))
  [ "$g4" != "$go" ] && differs=$((differs+1))
done
"$GEN" --model test/ref/qlora_tiny/base_4bit --vocab data/gpt2 --prompt '!' --max-new-tokens 1 2>&1 >/dev/null | grep -q "bitsandbytes 4-bit" || bad "generate does not say it loaded a 4-bit checkpoint"
# (and the NF4 rounding is visible: some completions of the original fp32 base differ)
[ $same -eq 4 ] && [ $differs -ge 1 ] && ok "generate on the 4-bit checkpoint == on its dequantized weights (4 of 4 completions; $differs differ from the fp32 base's)" \
  || bad "4-bit generate: $same of 4 completions equal those of dequant(quant(W)), $differs differ from the fp32 base's"

# ---- bad combinations: refused with a message (lib.sh's expect_fail), nothing written
expect_fail "train_gpt2 has no --qlora" "--qlora" "$BIN_FULL" --model test/ref/gpt2_tiny "${DATA[@]}" --qlora --out "$D/bad1"
[ -e "$D/bad1" ] && bad "refused train_gpt2 run created its --out"
expect_fail "train_gpt2 on a 4-bit checkpoint" "stored 4-bit" "$BIN_FULL" --model test/ref/qlora_tiny/base_4bit "${DATA[@]}" --out "$D/bad3"
[ -e "$D/bad3" ] && bad "refused train_gpt2 run created its --out"
expect_fail "--qlora on a model built from scratch" "from scratch" "$BIN" --model d6 "${DATA[@]}" --qlora --out "$D/bad2"
[ -e "$D/bad2" ] && bad "refused train_lora run created its --out"

finish
