#!/usr/bin/env bash
# What the trainers write loads on its own (llmc/run/run_outputs.h):
#   - train_lora: every checkpoint, mid-run ones too, is a PEFT directory (adapter_config.json,
#     adapter_model.safetensors, tokenizer files) and so is the final OUT; base_model_name_or_path
#     is an absolute path to a transformers directory: OUT/base (config.json, model.safetensors,
#     generation_config.json, tokenizer files, holding exactly --model's weights) when --model is an
#     llm.c .bin, --model itself (resolved) when it is a model directory or its model.safetensors;
#   - the merged model and train_gpt2's final model are complete transformers directories;
#   - generate loads every kind (mid-run llm.c checkpoints, final and merged directories, model.bin,
#     adapters with their own base from any working directory, a 4-bit base + its QLoRA adapter),
#     giving the same text where the weights are the same;
#   - resuming keeps OUT/base and ends with the uninterrupted run's adapter; pruning removes a
#     checkpoint's whole adapter directory.
source "$(dirname "$0")/lib.sh"
TL="$(cd "$BIN_DIR" && pwd)/train_lora"; TG="$(cd "$BIN_DIR" && pwd)/train_gpt2"
GEN="$(cd "$BIN_DIR" && pwd)/generate"; CONV="$(cd "$BIN_DIR" && pwd)/convert"
REPO="$(pwd)"
export OMP_NUM_THREADS=1

run() { local log="$1"; shift; "$@" >"$log" 2>&1 || { tail -5 "$log"; bad "$(basename "$1") exited non-zero (log $log)"; }; }
# greedy continuation, text only
gen() { "$GEN" --temperature 0 --max-new-tokens 8 --quiet "$@" 2>"$TMP/gen.err" || { cat "$TMP/gen.err" >&2; echo "GENERATE FAILED"; }; }
peft_files="adapter_config.json adapter_model.safetensors vocab.json merges.txt tokenizer_config.json special_tokens_map.json"
hf_files="config.json model.safetensors generation_config.json vocab.json merges.txt tokenizer_config.json special_tokens_map.json"
has_files() { local d="$1"; shift; for f in "$@"; do [ -f "$d/$f" ] || { echo "$f"; return 1; }; done; }

# a base with GPT-2's vocabulary as an llm.c file (so the outputs get tokenizer files), and data
"$CONV" --model tiny --seed 3 --out "$TMP/base.bin" >/dev/null 2>&1 || bad "convert tiny failed"
make_shard "$TMP/train.bin" 6000 50257 1; make_shard "$TMP/val.bin" 1000 50257 2
DATA=(--train-data "$TMP/train.bin" --val-data "$TMP/val.bin" -b 2 -t 16 --eval-batches 1)
LORA=(--model "$TMP/base.bin" "${DATA[@]}" --steps 4 --save-every 2 --keep-checkpoints 0 --lr 1e-2 --lora-targets q,v --seed 4)

# ---- train_lora on an llm.c base
run "$TMP/l1.log" "$TL" "${LORA[@]}" --merge --out "$TMP/l1"
for d in "$TMP/l1/adapter_00000002" "$TMP/l1/adapter_00000004" "$TMP/l1"; do
  miss=$(has_files "$d" $peft_files) && ok "PEFT directory: ${d#$TMP/}" || bad "${d#$TMP/} lacks $miss"
done
miss=$(has_files "$TMP/l1/base" $hf_files) && ok "OUT/base is a transformers directory with the tokenizer" || bad "OUT/base lacks $miss"
miss=$(has_files "$TMP/l1/merged" $hf_files model.bin) && ok "OUT/merged is a transformers directory (+ model.bin)" || bad "OUT/merged lacks $miss"
want_base="$(cd "$TMP/l1/base" && pwd -P)"
for d in "$TMP/l1/adapter_00000002" "$TMP/l1"; do
  grep -qF "\"base_model_name_or_path\": \"$want_base\"" "$d/adapter_config.json" \
    && ok "${d#$TMP/}: base_model_name_or_path is the absolute path of OUT/base" \
    || bad "${d#$TMP/}: $(grep base_model "$d/adapter_config.json") (want $want_base)"
done
"$CONV" --model "$TMP/l1/base" --out "$TMP/base_back.bin" >/dev/null 2>&1 && cmp -s "$TMP/base_back.bin" "$TMP/base.bin" \
  && ok "OUT/base holds exactly --model's weights" || bad "OUT/base differs from --model"
cmp -s "$TMP/l1/adapter_00000004/adapter_model.safetensors" "$TMP/l1/adapter_model.safetensors" \
  && ok "the last checkpoint's adapter is the final one" || bad "last checkpoint and final adapter differ"
cmp -s "$TMP/l1/adapter_00000002/adapter_model.safetensors" "$TMP/l1/adapter_model.safetensors" \
  && bad "the step-2 adapter equals the final one (nothing trained?)" || ok "the step-2 adapter is the model of step 2"

# ---- generate, from another working directory
mkdir -p "$TMP/elsewhere"; cd "$TMP/elsewhere"
a=$(gen --adapter "$TMP/l1/adapter_00000002" --prompt "Hello")
b=$(gen --model "$TMP/base.bin" --adapter "$TMP/l1/adapter_00000002" --prompt "Hello")
[ -n "$a" ] && [ "$a" != "GENERATE FAILED" ] && [ "$a" = "$b" ] \
  && ok "generate --adapter OUT/adapter_00000002 alone (its base from adapter_config.json) == with --model base.bin: $(printf %q "$a")" \
  || bad "mid-run adapter: '$a' vs '$b'"
a=$(gen --adapter "$TMP/l1" --prompt "Hello"); b=$(gen --model "$TMP/l1/base" --adapter "$TMP/l1" --prompt "Hello")
[ "$a" != "GENERATE FAILED" ] && [ "$a" = "$b" ] && ok "generate --adapter OUT (final) == with --model OUT/base" || bad "final adapter: '$a' vs '$b'"
a=$(gen --model "$TMP/l1/merged" --prompt "Hello"); b=$(gen --model "$TMP/l1/merged/model.bin" --prompt "Hello")
[ "$a" != "GENERATE FAILED" ] && [ "$a" = "$b" ] && ok "generate: merged directory == merged model.bin" || bad "merged: '$a' vs '$b'"
cd "$REPO"

# ---- resumed: OUT/base is kept, the adapter is the uninterrupted run's
run "$TMP/l2a.log" "$TL" "${LORA[@]}" --stop-after 2 --out "$TMP/l2"
run "$TMP/l2b.log" "$TL" "${LORA[@]}" --resume --out "$TMP/l2"
grep -q "saved: .*/base/" "$TMP/l2b.log" && bad "the resumed run wrote OUT/base again" || ok "the resumed run keeps OUT/base"
cmp -s "$TMP/l2/adapter_model.safetensors" "$TMP/l1/adapter_model.safetensors" \
  && ok "resumed from adapter_00000002/: the uninterrupted run's adapter" || bad "resumed adapter differs"

# ---- pruning removes a checkpoint's adapter directory
run "$TMP/l3.log" "$TL" "${LORA[@]}" --keep-checkpoints 1 --out "$TMP/l3"
[ ! -e "$TMP/l3/adapter_00000002" ] && [ ! -e "$TMP/l3/state_00000002_00000.bin" ] && [ -d "$TMP/l3/adapter_00000004" ] \
  && ok "--keep-checkpoints 1: adapter_00000002/ removed, adapter_00000004/ kept" || bad "prune: $(ls "$TMP/l3")"

# ---- --model a transformers directory (or its model.safetensors): no OUT/base, the directory itself
run "$TMP/l4.log" "$TL" --model "$TMP/l1/base/model.safetensors" "${DATA[@]}" --steps 1 --lora-targets c_attn --out "$TMP/l4"
[ ! -e "$TMP/l4/base" ] && grep -qF "\"base_model_name_or_path\": \"$want_base\"" "$TMP/l4/adapter_config.json" \
  && ok "--model DIR/model.safetensors: base_model_name_or_path is DIR (absolute), no OUT/base" || bad "HF base: $(grep base_model "$TMP/l4/adapter_config.json")"

# ---- train_gpt2: mid-run llm.c checkpoint, final directory and model.bin all load
run "$TMP/g1.log" "$TG" --model "$TMP/base.bin" "${DATA[@]}" --steps 4 --save-every 2 --keep-checkpoints 0 --lr 1e-3 --save-format both --out "$TMP/g1"
miss=$(has_files "$TMP/g1" $hf_files model.bin model_00000002.bin) && ok "train_gpt2 OUT: transformers directory + model.bin + model_00000002.bin" || bad "train_gpt2 OUT lacks $miss"
a=$(gen --model "$TMP/g1" --prompt "Hello"); b=$(gen --model "$TMP/g1/model.bin" --prompt "Hello"); c=$(gen --model "$TMP/g1/model_00000004.bin" --prompt "Hello")
[ "$a" != "GENERATE FAILED" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] && ok "generate: final directory == model.bin == last checkpoint" || bad "train_gpt2 outputs: '$a' / '$b' / '$c'"
[ "$(gen --model "$TMP/g1/model_00000002.bin" --prompt "Hello")" != "GENERATE FAILED" ] && ok "generate loads the mid-run checkpoint model_00000002.bin" || bad "model_00000002.bin"

# ---- QLoRA on a transformers + bitsandbytes 4-bit checkpoint: the adapter points to it
Q4="$REPO/test/ref/qlora_tiny/base_4bit"
make_shard "$TMP/t100.bin" 3000 100 5
run "$TMP/q1.log" "$TL" --model test/ref/qlora_tiny/base_4bit --train-data "$TMP/t100.bin" -b 2 -t 16 --steps 2 --save-every 1 --lr 1e-2 --lora-targets c_attn --out "$TMP/q1"
grep -qF "\"base_model_name_or_path\": \"$(cd "$Q4" && pwd -P)\"" "$TMP/q1/adapter_00000001/adapter_config.json" && [ ! -e "$TMP/q1/base" ] \
  && ok "QLoRA on a 4-bit checkpoint: base_model_name_or_path is that directory" || bad "QLoRA base: $(grep base_model "$TMP/q1/adapter_00000001/adapter_config.json")"
cd "$TMP/elsewhere"
a=$(gen --adapter "$TMP/q1/adapter_00000001" --vocab "$REPO/data/gpt2" --prompt "!")
b=$(gen --model "$Q4" --adapter "$TMP/q1/adapter_00000001" --vocab "$REPO/data/gpt2" --prompt "!")
[ "$a" != "GENERATE FAILED" ] && [ "$a" = "$b" ] && grep -q "bitsandbytes 4-bit" <("$GEN" --adapter "$TMP/q1" --vocab "$REPO/data/gpt2" --prompt "!" --max-new-tokens 1 2>&1) \
  && ok "generate: the 4-bit base + its mid-run QLoRA adapter (base from the adapter) loads" || bad "4-bit + adapter: '$a' vs '$b'"
cd "$REPO"

# ---- generate --adapter alone with a base that is not there: a clear message
sed 's#"base_model_name_or_path": "[^"]*"#"base_model_name_or_path": "/nonexistent/base"#' "$TMP/l1/adapter_config.json" > "$TMP/moved.json"
mkdir -p "$TMP/moved" && cp "$TMP/l1/adapter_model.safetensors" "$TMP/moved/" && mv "$TMP/moved.json" "$TMP/moved/adapter_config.json"
expect_fail "adapter whose base is gone" "pass the base model with --model" "$GEN" --adapter "$TMP/moved" --prompt "Hi"
finish
