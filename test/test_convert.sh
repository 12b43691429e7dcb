#!/usr/bin/env bash
# The convert program, byte for byte against files transformers wrote (test/ref/hf_formats: the
# model directories saved by save_pretrained and the same weights written as llm.c files by the
# generator script, dev/gen_hf_formats.py):
#   hf_tiny (F32) -> llm.c fp32 == expect_f32.bin; hf_bf16 -> llm.c bf16 == expect_bf16.bin;
#   hf_f16_sharded (an index, two shards) -> llm.c fp32 == expect_f16.bin (fp16 widened);
# round trips are exact: fp32 .bin -> HF -> fp32 .bin, bf16 .bin -> HF -> bf16 .bin, HF dir ->
# .bin -> HF dir (same model.safetensors and config.json); an HF output carries config.json,
# generation_config.json and the tokenizer files; base + adapter merged by convert == train_lora
# --merge's merged model. Bad input: one message, non-zero exit, nothing written.
source "$(dirname "$0")/lib.sh"
CONV="$BIN_DIR/convert"
REF=test/ref/hf_formats
export OMP_NUM_THREADS=1

conv() { local rc=0; "$CONV" "$@" >"$TMP/conv.log" 2>&1 || rc=$?; [ $rc -eq 0 ] || { cat "$TMP/conv.log"; bad "convert $* exited $rc"; }; return $rc; }
same() { cmp -s "$1" "$2" && ok "$3" || bad "$3: $1 and $2 differ"; }

# ---- transformers' files -> llm.c, against the Python-written expectations
conv --model $REF/hf_tiny --out "$TMP/tiny.bin" && same "$TMP/tiny.bin" $REF/expect_f32.bin "hf_tiny (F32 safetensors dir) -> llm.c fp32 == expect_f32.bin"
conv --model $REF/hf_bf16 --out "$TMP/bf16.bin" --format llmc-bf16 && same "$TMP/bf16.bin" $REF/expect_bf16.bin "hf_bf16 -> llm.c bf16 == expect_bf16.bin (torch's bf16 bits)"
conv --model $REF/hf_f16_sharded/model.safetensors.index.json --out "$TMP/f16.bin" \
  && same "$TMP/f16.bin" $REF/expect_f16.bin "hf_f16_sharded (index + 2 shards, F16) -> llm.c fp32 == expect_f16.bin"
conv --model $REF/hf_tiny/model.safetensors --out "$TMP/tiny_file.bin" && same "$TMP/tiny_file.bin" $REF/expect_f32.bin "a lone .safetensors file -> llm.c"

# ---- round trips
conv --model $REF/expect_f32.bin --out "$TMP/hf32" && conv --model "$TMP/hf32" --out "$TMP/back32.bin" \
  && same "$TMP/back32.bin" $REF/expect_f32.bin "fp32 .bin -> HF dir -> fp32 .bin: identical bytes"
conv --model $REF/expect_bf16.bin --out "$TMP/hf16" && conv --model "$TMP/hf16" --out "$TMP/back16.bin" --format llmc-bf16 \
  && same "$TMP/back16.bin" $REF/expect_bf16.bin "bf16 .bin -> HF dir (F32) -> bf16 .bin: identical bytes"
conv --model "$TMP/hf32" --out "$TMP/again.bin" && conv --model "$TMP/again.bin" --out "$TMP/hf32b" \
  && same "$TMP/hf32/model.safetensors" "$TMP/hf32b/model.safetensors" "HF dir -> .bin -> HF dir: same model.safetensors" \
  && same "$TMP/hf32/config.json" "$TMP/hf32b/config.json" "... and the same config.json"
conv --model $REF/expect_f32.bin --out "$TMP/fmt_dir.bin" --format hf && [ -f "$TMP/fmt_dir.bin/config.json" ] \
  && ok "--format hf overrides the .bin name" || bad "--format hf with a .bin name"

# ---- an HF output loads on its own: config, weights, generation config, tokenizer (for a model
# with GPT-2's vocabulary; the 100-token test models get a note instead)
conv --model tiny --seed 11 --out "$TMP/hf_init"
missing=""
for f in config.json model.safetensors generation_config.json vocab.json merges.txt tokenizer_config.json special_tokens_map.json; do
  [ -f "$TMP/hf_init/$f" ] || missing="$missing $f"
done
[ -z "$missing" ] && ok "HF output has config.json, model.safetensors, generation_config.json and the tokenizer files" \
  || bad "HF output lacks:$missing"
cmp -s "$TMP/hf_init/vocab.json" data/gpt2/encoder.json && cmp -s "$TMP/hf_init/merges.txt" data/gpt2/vocab.bpe \
  && ok "tokenizer files are the bundled GPT-2 vocabulary" || bad "tokenizer files differ from data/gpt2"
conv --model $REF/expect_f32.bin --out "$TMP/hf_v100" && grep -q "note: no tokenizer files in $TMP/hf_v100: the vocabulary 'data/gpt2' has 50257 tokens, the model 100" "$TMP/conv.log" \
  && [ ! -e "$TMP/hf_v100/vocab.json" ] && ok "a 100-token model: no tokenizer files, with the reason" || bad "vocab-100 model: $(cat "$TMP/conv.log")"

# ---- a size descriptor: the trainers' initialization (seeded)
conv --model tiny --seed 11 --out "$TMP/init11.bin" && conv --model tiny --seed 11 --out "$TMP/init11b.bin" \
  && same "$TMP/init11.bin" "$TMP/init11b.bin" "tiny --seed 11 twice: the same weights"
if [ -x "$BIN_DIR/train_gpt2" ]; then
  # train_gpt2 with lr 0 keeps its initialization: its final model.bin is the same file
  make_shard "$TMP/tr.bin" 2000 50257 1
  "$BIN_DIR/train_gpt2" --model tiny --seed 11 --train-data "$TMP/tr.bin" -b 1 -t 16 --steps 1 --lr 0 --weight-decay 0 \
      --save-format llmc --out "$TMP/init_run" >"$TMP/init_run.log" 2>&1 || { cat "$TMP/init_run.log"; bad "train_gpt2 lr 0 failed"; }
  same "$TMP/init11.bin" "$TMP/init_run/model.bin" "tiny --seed 11 == train_gpt2 --model tiny --seed 11 at lr 0"
fi

# ---- base + adapter merged == train_lora --merge's merged model (the same merge, from files)
if [ -x "$BIN_DIR/train_lora" ]; then
  make_shard "$TMP/lt.bin" 3000 100 2
  # (--dtype bf16 merges the same: the merge reads the fp32 base again from its file, test_lora_cli.sh)
  "$BIN_DIR/train_lora" --model test/ref/gpt2_tiny --train-data "$TMP/lt.bin" -b 2 -t 16 --steps 3 --lr 1e-2 --lora-targets q,v,mlp.c_fc \
      --lora-bias all --merge --dtype fp32 --out "$TMP/lora" >"$TMP/lora.log" 2>&1 || { cat "$TMP/lora.log"; bad "train_lora failed"; }
  conv --model test/ref/gpt2_tiny --adapter "$TMP/lora" --out "$TMP/merged.bin" \
    && same "$TMP/merged.bin" "$TMP/lora/merged/model.bin" "convert --adapter (q,v,c_fc + biases) == train_lora --merge (same bytes)"
  grep -q "^converted: .*(merged)" "$TMP/conv.log" && ok "$(grep '^converted' "$TMP/conv.log")" || bad "no merge in: $(cat "$TMP/conv.log")"
fi

# ---- a chain of adapters in one command == merged one command at a time (test_convert: == PEFT's)
L=test/ref/lora_tiny
conv --model test/ref/gpt2_tiny --adapter $L/all_linear --out "$TMP/chain1.bin" \
  && conv --model "$TMP/chain1.bin" --adapter $L/bias_all --out "$TMP/chain2.bin" \
  && conv --model test/ref/gpt2_tiny --adapter $L/all_linear --adapter $L/bias_all --out "$TMP/chain.bin" \
  && same "$TMP/chain.bin" "$TMP/chain2.bin" "convert --adapter A --adapter B == A merged, then B (same bytes)"
grep -q "^converted: .*all_linear (merged) + adapter .*bias_all (merged)" "$TMP/conv.log" && ok "the source names both merges" \
  || bad "chain source: $(cat "$TMP/conv.log")"
expect_fail "--to gguf-lora of two adapters" "needs one --adapter (2 given)" "$BIN_DIR/convert" --model test/ref/gpt2_tiny \
  --adapter $L/all_linear --adapter $L/qv --to gguf-lora --out "$TMP/two.gguf"

# ---- GGUF (llama.cpp): the files the suite writes are the very files dev/gen_gguf_ref.py ran in
# llama.cpp (test/ref/gguf/files.sha256; the adapter's but for general.description, which names it
# instead of giving its path: dev/gen_gguf_ref.py; test_gguf compares the logits); round trips through GGUF
GG=test/ref/gguf
if command -v sha256sum >/dev/null; then
  for t in f32 f16 bf16 q8_0; do
    conv --model tiny --seed 11 --out "$TMP/tiny_$t.gguf" --gguf-type $t
  done
  conv --model tiny --seed 11 --adapter $GG/lora_tiny --to gguf-lora --gguf-type f32 --out "$TMP/lora_f32.gguf"
  (cd "$TMP" && sha256sum -c --quiet "$OLDPWD/$GG/files.sha256") >"$TMP/sha.log" 2>&1 \
    && ok "GGUF f32/f16/bf16/q8_0 of tiny seed 11 and the LoRA adapter: byte-identical to the files llama.cpp was checked on" \
    || bad "GGUF files differ from the ones llama.cpp checked: $(cat "$TMP/sha.log")"
else
  conv --model tiny --seed 11 --out "$TMP/tiny_f32.gguf" --gguf-type f32
  echo "skip: sha256sum not installed: GGUF bytes not compared with llama.cpp's"
fi
conv --model "$TMP/tiny_f32.gguf" --out "$TMP/tiny_gguf.bin" && same "$TMP/tiny_gguf.bin" "$TMP/init11.bin" "GGUF f32 -> llm.c: the same weights"
conv --model "$TMP/tiny_gguf.bin" --out "$TMP/tiny_auto.gguf" --gguf-type f32 && grep -q "(GGUF f32)" "$TMP/conv.log" \
  && ok "--out NAME.gguf picks GGUF" || bad "auto GGUF: $(cat "$TMP/conv.log")"
conv --model "$TMP/tiny_f32.gguf" --out "$TMP/hf_from_gguf" && conv --model "$TMP/hf_from_gguf" --out "$TMP/hf_back.bin" \
  && same "$TMP/hf_back.bin" "$TMP/init11.bin" "GGUF -> HF dir -> llm.c: the same weights"
# a lone .safetensors file (--out NAME.safetensors writes one file, not a directory)
# (test/ref/pack_tiny: head size 64, the size a lone file's loaders infer)
conv --model test/ref/pack_tiny --out "$TMP/pack.bin" && conv --model "$TMP/pack.bin" --out "$TMP/lone.safetensors" \
  && [ -f "$TMP/lone.safetensors" ] && conv --model "$TMP/lone.safetensors" --out "$TMP/lone_back.bin" \
  && same "$TMP/lone_back.bin" "$TMP/pack.bin" "--out x.safetensors writes one safetensors file that loads back to the same model"
expect_fail "lone safetensors of a model whose head size is not 64" "n_head" "$CONV" --model test/ref/gpt2_tiny --out "$TMP/x5.safetensors"
expect_fail "gguf without --adapter for gguf-lora" "--to gguf-lora needs one --adapter (0 given)" "$CONV" --model tiny --to gguf-lora --out "$TMP/x6.gguf"
expect_fail "GGUF of a model without a fitting vocabulary" "a GGUF file carries the tokenizer" "$CONV" --model test/ref/gpt2_tiny --out "$TMP/x7.gguf"
expect_fail "GGUF LoRA adapter on the wrong base" "wrong base model" "$CONV" --model $REF/hf_hub --adapter test/ref/lora_tiny/qv --to gguf-lora --out "$TMP/x8.gguf"
expect_fail "GGUF LoRA of an adapter that trains biases" "cannot carry" "$CONV" --model test/ref/gpt2_tiny --adapter test/ref/lora_tiny/bias_all --to gguf-lora --out "$TMP/x9.gguf"
expect_fail "a GGUF adapter passed as a model" "not a model" "$CONV" --model "$TMP/lora_f32.gguf" --out "$TMP/x10.bin"
head -c 100000 "$TMP/tiny_f32.gguf" > "$TMP/trunc.gguf"
expect_fail "a truncated GGUF" "truncated" "$CONV" --model "$TMP/trunc.gguf" --out "$TMP/x11.bin"
expect_fail "unknown --gguf-type" "--gguf-type" "$CONV" --model tiny --out "$TMP/x12.gguf" --gguf-type q4_0
for x in x5.safetensors x6.gguf x7.gguf x8.gguf x9.gguf x10.bin x11.bin x12.gguf; do
  [ ! -e "$TMP/$x" ] || bad "refused run left $x behind"
done

# ---- what killed conversions leave (issue 44, item 13): a convert SIGKILLed while it writes left
# NAME.tmp.<pid> files that no later run removed (505 MB after 4 kills); now the next convert of
# that output removes them, whatever pid they name (pids are reused, and another host's mean
# nothing here: holding the lock of the name, llmc/run/runlock.h, is what says nobody writes
# them), and says so; another output's temporaries stay
d="$TMP/killed"; mkdir -p "$d"
"$CONV" --model d6 --out "$d/big.bin" > /dev/null 2>&1 &
c=$!
for _ in $(seq 2000); do ls "$d" | grep -q '^big.bin.tmp.' && break; sleep 0.01; done
kill -9 $c; wait $c 2>/dev/null
echo x > "$d/big.bin.tmp.$$"; echo y > "$d/other.bin.tmp.99999"   # (a live pid: this shell's)
n=$(ls "$d" | grep -c '^big.bin.tmp.')
conv --model tiny --seed 11 --out "$d/big.bin" && [ -z "$(ls "$d" | grep '^big.bin.tmp.')" ] && [ -f "$d/other.bin.tmp.99999" ] \
  && grep -q "^cleanup: removed $n temporary files of writes that did not finish (a killed run) in '$d' (.* MiB): .*big.bin.tmp.$c" "$TMP/conv.log" \
  && grep -q "big.bin.tmp.$$" "$TMP/conv.log" && cmp -s "$d/big.bin" "$TMP/init11.bin" \
  && ok "a killed convert's temporaries go with the next convert of that output ($n: the killed one's, a reused pid's), which says so; others' stay" \
  || bad "after a killed convert: $(ls "$d" | tr '\n' ' '): $(cat "$TMP/conv.log")"
rm -f "$d/other.bin.tmp.99999" # (expect_fail below looks for temporaries in $TMP)
mkdir -p "$d/hf"; echo z > "$d/hf/model.safetensors.tmp.12345"; echo z > "$d/hf/config.json.tmp.7"
conv --model tiny --seed 11 --out "$d/hf" && [ -z "$(ls "$d/hf" | grep '\.tmp\.')" ] && grep -q "^cleanup: removed 2 temporary files" "$TMP/conv.log" \
  && ok "... and a transformers directory's (model.safetensors, config.json)" || bad "hf temporaries: $(ls "$d/hf"): $(cat "$TMP/conv.log")"
[ ! -e "$d/.lock" ] && [ ! -e "$d/hf/.lock" ] && ok "convert leaves no .lock in the folders it wrote" || bad "a .lock left: $(ls -A "$d" "$d/hf")"

# ---- convert never writes a file a trainer would take for its checkpoint (issue 44, item 6):
# a model_00000050.bin planted in a run's --out was overwritten by the resumed run without a word
for n in model_00000050.bin state_00000050_00000.bin DONE_00000050 PENDING_00000050 adapter_00000050 adapter_00000050/model.bin; do
  expect_fail "convert --out ${n} (a training checkpoint's name) refused" "has the name of a training checkpoint's entry" \
    "$CONV" --model $REF/hf_tiny --out "$TMP/$n" --to llmc
done
conv --model $REF/hf_tiny --out "$TMP/model_50.bin" && conv --model $REF/hf_tiny --out "$TMP/model_00000050.safetensors" --to llmc \
  && ok "names that only resemble one are fine (model_50.bin, model_00000050.safetensors)"

# ---- --seed's help says what the seed does in convert (it said "init from scratch, shuffling, dropout")
h=$("$CONV" --help | grep -- '^  --seed ')
grep -q "initiali" <<<"$h" && ! grep -qE "shuffl|dropout|sampl" <<<"$h" && ok "convert --help: --seed is the size descriptor's initialization seed" \
  || bad "convert --seed help: $h"

# ---- bad input: one message, non-zero exit, nothing written
expect_fail "no --model" "--model is required" "$CONV" --out "$TMP/x.bin"
expect_fail "no --out" "--out is required" "$CONV" --model $REF/hf_tiny
expect_fail "missing model" "does not exist" "$CONV" --model "$TMP/nope.bin" --out "$TMP/x1.bin"
expect_fail "llm.c output onto a directory" "is a directory" "$CONV" --model $REF/hf_tiny --out "$TMP/hf32" --format llmc
expect_fail "HF output onto a file" "is a file" "$CONV" --model $REF/hf_tiny --out "$TMP/tiny.bin" --format hf
expect_fail "unknown format" "--format" "$CONV" --model $REF/hf_tiny --out "$TMP/x2" --format onnx
expect_fail "a vocabulary of another size" "the model 100" "$CONV" --model test/ref/gpt2_tiny --out "$TMP/x3" --vocab data/gpt2
expect_fail "an adapter for another model" "wrong base model" "$CONV" --model $REF/hf_hub --adapter test/ref/lora_tiny/qv --out "$TMP/x4.bin"
[ ! -e "$TMP/x1.bin" ] && [ ! -e "$TMP/x2" ] && [ ! -e "$TMP/x3" ] && [ ! -e "$TMP/x4.bin" ] && same "$TMP/tiny.bin" $REF/expect_f32.bin "refused runs wrote nothing and changed nothing"
finish
