#!/usr/bin/env bash
# The trainers' --save-gguf: train_gpt2 writes OUT/model-TYPE.gguf, train_lora the adapter as
# OUT/adapter-TYPE.gguf and with --merge OUT/merged/model-TYPE.gguf. The GGUF models hold the very
# weights of the run's other outputs (read back through convert and compared byte for byte with
# model.bin / merged/model.bin), the adapter the tensors `convert --to gguf-lora` writes from the
# run's PEFT directory; what a GGUF file cannot carry, or a type that does not exist, is refused at
# start-up, before training, with nothing written.
source "$(dirname "$0")/lib.sh"
T="$BIN_DIR/train_gpt2" L="$BIN_DIR/train_lora" C="$BIN_DIR/convert"
D="${BUILD:-build}/save_gguf"
rm -rf "$D"
tiny_data "$D" 3
export OMP_NUM_THREADS=1
DATA=(--train-data "$D/data/tiny_train_*.bin" -b 2 -t 16 --steps 3 --seed 5)

# ---- train_gpt2: the model as GGUF f32 == model.bin
"$T" --model tiny "${DATA[@]}" --save-gguf f32 --out "$D/full" >"$D/full.log" 2>&1 || { bad "train_gpt2 --save-gguf f32 exited $?"; tail -5 "$D/full.log"; }
if [ -f "$D/full/model-f32.gguf" ]; then
  "$C" --model "$D/full/model-f32.gguf" --out "$D/full_back.bin" >/dev/null 2>&1 && cmp -s "$D/full_back.bin" "$D/full/model.bin" \
    && ok "train_gpt2: model-f32.gguf holds the weights of model.bin" || bad "model-f32.gguf read back differs from model.bin"
else bad "train_gpt2 did not write model-f32.gguf: $(tail -3 "$D/full.log")"; fi
grep -q "saved: .*model-f32.gguf" "$D/full.log" && ok "the GGUF file is named in the run's output" || bad "no 'saved:' line for the GGUF file"

# ---- train_lora on that model (an HF directory with GPT-2's vocabulary), --merge
"$L" --model "$D/full" "${DATA[@]}" --lora-rank 4 --lora-targets c_attn,mlp.c_fc --merge --save-gguf f32 --out "$D/lora" >"$D/lora.log" 2>&1 \
  || { bad "train_lora --save-gguf f32 --merge exited $?"; tail -5 "$D/lora.log"; }
"$C" --model "$D/lora/merged/model-f32.gguf" --out "$D/merged_back.bin" >/dev/null 2>&1 && cmp -s "$D/merged_back.bin" "$D/lora/merged/model.bin" \
  && ok "train_lora --merge: merged/model-f32.gguf holds the weights of merged/model.bin" || bad "merged GGUF differs from merged/model.bin"
mkdir -p "$D/conv"
"$C" --model "$D/full" --adapter "$D/lora" --to gguf-lora --gguf-type f32 --out "$D/conv/adapter-f32.gguf" >/dev/null 2>&1 || bad "convert --to gguf-lora failed"
# the tensor data ends the file: per layer c_attn A 4x64 + B 192x4, c_fc A 4x64 + B 256x4, fp32, 2 layers
n=$(( 2 * ((4 * 64 + 192 * 4) + (4 * 64 + 256 * 4)) * 4 ))
if [ -f "$D/lora/adapter-f32.gguf" ] && cmp -s <(tail -c $n "$D/lora/adapter-f32.gguf") <(tail -c $n "$D/conv/adapter-f32.gguf"); then
  ok "train_lora: adapter-f32.gguf holds the tensors convert writes from the run's PEFT adapter ($n bytes)"
else bad "adapter-f32.gguf missing or its tensors differ from convert's"; fi

# ---- refused at start-up, nothing written
expect_fail "--save-gguf with an adapter that trains biases" "cannot carry" "$L" --model "$D/full" "${DATA[@]}" --lora-bias all --save-gguf f16 --out "$D/no1"
[ -e "$D/no1" ] && bad "a refused run left $D/no1"
expect_fail "--save-gguf q4_0" "--save-gguf" "$T" --model tiny "${DATA[@]}" --save-gguf q4_0 --out "$D/no2"
expect_fail "--save-gguf with --out none" "--save-gguf needs an --out DIR" "$T" --model tiny "${DATA[@]}" --save-gguf f16 --out none
out=$("$T" --model test/ref/gpt2_tiny "${DATA[@]}" --save-gguf f16 --out "$D/no3" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "a GGUF file carries the tokenizer" <<<"$out" && ! grep -q "^step " <<<"$out"; then
  ok "--save-gguf without the model's vocabulary: refused before the first step"
else bad "--save-gguf without a fitting vocabulary: rc $rc: $(tail -3 <<<"$out")"; fi
[ -e "$D/no2" ] || [ -e "$D/no3" ] && bad "a refused run left its --out"
finish
