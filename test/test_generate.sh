#!/usr/bin/env bash
# End-to-end `generate`: a tiny model with the GPT-2 vocabulary (train_gpt2 --model tiny, one
# step) continues a text prompt; a seed reproduces the text; the key/value cache gives the text
# of the full recomputation; the vocabulary is found next to the model or in data/gpt2; a LoRA
# adapter applies; bad flags and a missing vocabulary get their message.
source "$(dirname "$0")/lib.sh"
GEN="$(cd "$BIN_DIR" && pwd)/generate"
ROOT=$(pwd)
make_shard "$TMP/train.bin" 2000 50257 1
"$BIN_DIR/train_gpt2" --model tiny --train-data "$TMP/train.bin" --batch-size 1 --seq-len 32 --steps 1 \
    --save-format hf --out "$TMP/m" --threads 2 > "$TMP/train.log" 2>&1 || { cat "$TMP/train.log"; bad "train_gpt2 tiny failed"; }
M="$TMP/m"
run() { "$GEN" --model "$M" --threads 2 "$@" 2> "$TMP/err"; }

out=$(run --prompt "The quick brown fox" -n 16 --seed 7) || { cat "$TMP/err"; bad "generate failed"; }
[[ "$out" == "The quick brown fox"* ]] && [ ${#out} -gt 19 ] && ok "text prompt continued: $(head -c 80 <<<"$out" | tr '\n' ' ')" \
  || bad "output does not continue the prompt: '$out'"
grep -q "generated 16 tokens" "$TMP/err" && ok "16 tokens generated" || { cat "$TMP/err"; bad "token count line missing"; }

a=$(run --prompt "The quick brown fox" -n 16 --seed 7 -q); b=$(run --prompt "The quick brown fox" -n 16 --seed 7 -q)
c=$(run --prompt "The quick brown fox" -n 16 --seed 8 -q)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "same seed, same text" || bad "seed 7 twice: '$a' vs '$b'"
[ "$a" != "$c" ] && ok "another seed, another text" || bad "seeds 7 and 8 gave the same text"
d=$(run --prompt "The quick brown fox" -n 16 --seed 7 -q --no-kv-cache)
[ "$a" = "$d" ] && ok "kv cache == full recomputation (sampled, seed 7)" || bad "cache '$a' vs no cache '$d'"
g1=$(run --prompt "Once upon a time" -n 12 --temperature 0 -q); g2=$(run --prompt "Once upon a time" -n 12 --top-k 1 --seed 3 -q)
g3=$(run --prompt "Once upon a time" -n 12 --temperature 0 -q --no-kv-cache)
[ -n "$g1" ] && [ "$g1" = "$g2" ] && [ "$g1" = "$g3" ] && ok "greedy: temperature 0 == top-k 1 == no cache" || bad "greedy variants differ: '$g1' '$g2' '$g3'"
k=$(run --prompt "Once upon a time" -n 12 --top-k 40 --temperature 0.8 --seed 1 -q)
[ -n "$k" ] && ok "top-k 40 at temperature 0.8 runs" || bad "top-k sampling printed nothing"

# the vocabulary: next to the model, or data/gpt2 relative to the working directory
mkdir -p "$TMP/elsewhere"
( cd "$TMP/elsewhere" && expect_fail "no vocabulary anywhere" "no vocabulary found" "$GEN" --model "$M" --prompt hi -n 2 )
cp "$ROOT"/data/gpt2/* "$M"/
v=$( cd "$TMP/elsewhere" && "$GEN" --model "$M" --prompt "The quick brown fox" -n 16 --seed 7 -q --threads 2 2>"$TMP/err" )
[ "$v" = "$a" ] && ok "vocabulary found next to the model" || { cat "$TMP/err"; bad "vocab next to the model: '$v'"; }
expect_fail "--vocab missing" "nope" "$GEN" --model "$M" --vocab "$TMP/nope" --prompt hi

# bad flags and inputs
expect_fail "no --model" "--model is required" "$GEN" --prompt hi
expect_fail "negative temperature" "--temperature" "$GEN" --model "$M" --temperature -1
expect_fail "unknown flag" "--bogus" "$GEN" --model "$M" --bogus
expect_fail "too many tokens" "--max-new-tokens" "$GEN" --model "$M" --prompt hi --max-new-tokens 1000
expect_fail "missing model" "$TMP/none" "$GEN" --model "$TMP/none" --vocab data/gpt2
# a model with a smaller vocabulary than the prompt's tokens
expect_fail "prompt outside the model's vocabulary" "outside the model's vocabulary" "$GEN" --model test/ref/gpt2_tiny --vocab data/gpt2 --prompt "Hello"

# LoRA: ids < 100 of the GPT-2 vocabulary are single ASCII characters, so the vocab-100 test
# model continues a prompt of them
la=$("$GEN" --model test/ref/gpt2_tiny --adapter test/ref/lora_tiny/all_linear --vocab data/gpt2 --prompt '!#%' -n 10 --seed 2 -q 2>"$TMP/err") \
  || { cat "$TMP/err"; bad "generate with --adapter failed"; }
lb=$("$GEN" --model test/ref/gpt2_tiny --adapter test/ref/lora_tiny/all_linear --vocab data/gpt2 --prompt '!#%' -n 10 --seed 2 -q --no-kv-cache 2>"$TMP/err")
[ ${#la} -eq 10 ] && [ "$la" = "$lb" ] && ok "adapter: 10 characters, cache == no cache ('$la')" || bad "adapter: '$la' vs '$lb'"
expect_fail "bad adapter dir" "$TMP/noadapter" "$GEN" --model test/ref/gpt2_tiny --adapter "$TMP/noadapter" --vocab data/gpt2 --prompt '!'

echo "test_generate.sh: $checks checks, $fails failed"
[ $fails -eq 0 ]
