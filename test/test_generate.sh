#!/usr/bin/env bash
# End-to-end `generate`: a tiny model with the GPT-2 vocabulary (train_gpt2 --model tiny, one
# step) continues a text prompt; a seed reproduces the text (with --top-p, --min-p,
# --repetition-penalty too, whose off values give the defaults' text); the key/value cache gives the text
# of the full recomputation; the vocabulary is found next to the model (the trainer writes it
# there) or in data/gpt2 of the working directory or near the program; a LoRA
# adapter applies; bad flags and a missing vocabulary get their message.
source "$(dirname "$0")/lib.sh"
GEN="$(cd "$BIN_DIR" && pwd)/generate"
ROOT=$(pwd)
make_shard "$TMP/train.bin" 2000 50257 1
"$BIN_DIR/train_gpt2" --model tiny --train-data "$TMP/train.bin" --batch-size 1 --seq-len 32 --steps 1 \
    --save-format hf --out "$TMP/m" --threads 2 > "$TMP/train.log" 2>&1 || { cat "$TMP/train.log"; bad "train_gpt2 tiny failed"; }
M="$TMP/m"
run() { "$GEN" --model "$M" --threads 2 "$@" 2> "$TMP/err"; }
# the texts compared with --no-kv-cache in fp32: the cache then holds what the recomputation
# computes (with bf16 GEMMs it holds bf16 keys and values; test_sampling checks those logits)
F=(--dtype fp32)

out=$(run --prompt "The quick brown fox" -g 16 --seed 7) || { cat "$TMP/err"; bad "generate failed"; }
[[ "$out" == "The quick brown fox"* ]] && [ ${#out} -gt 19 ] && ok "text prompt continued: $(head -c 80 <<<"$out" | tr '\n' ' ')" \
  || bad "output does not continue the prompt: '$out'"
grep --quiet "generated 16 tokens" "$TMP/err" && ok "16 tokens generated" || { cat "$TMP/err"; bad "token count line missing"; }

a=$(run --prompt "The quick brown fox" -g 16 --seed 7 --quiet "${F[@]}"); b=$(run --prompt "The quick brown fox" -g 16 --seed 7 --quiet "${F[@]}")
c=$(run --prompt "The quick brown fox" -g 16 --seed 8 --quiet "${F[@]}")
[ -n "$a" ] && [ "$a" = "$b" ] && ok "same seed, same text" || bad "seed 7 twice: '$a' vs '$b'"
[ "$a" != "$c" ] && ok "another seed, another text" || bad "seeds 7 and 8 gave the same text"
d=$(run --prompt "The quick brown fox" -g 16 --seed 7 --quiet --no-kv-cache "${F[@]}")
[ "$a" = "$d" ] && ok "kv cache == full recomputation (sampled, seed 7)" || bad "cache '$a' vs no cache '$d'"
g1=$(run --prompt "Once upon a time" -g 12 --temperature 0 --quiet "${F[@]}"); g2=$(run --prompt "Once upon a time" -g 12 --top-k 1 --seed 3 --quiet "${F[@]}")
g3=$(run --prompt "Once upon a time" -g 12 --temperature 0 --quiet --no-kv-cache "${F[@]}")
[ -n "$g1" ] && [ "$g1" = "$g2" ] && [ "$g1" = "$g3" ] && ok "greedy: temperature 0 == top-k 1 == no cache" || bad "greedy variants differ: '$g1' '$g2' '$g3'"
# tiny temperatures choose as their limit, greedy, does: --temperature 1e-45 .. 1e-39 passed the
# range check and emitted <|endoftext|> at once (1 / T overflowed to inf, the maximum's scaled logit
# was 0 * inf = NaN). Token by token against the greedy run, up to a tie of the two largest logits
# (where either token is the limit's choice)
echo x > "$TMP/lg0.tmp.4194304"   # (a killed generate's temporary of the same --logits-out)
run --prompt "Once upon a time" -g 12 --temperature 0 --quiet --logits-out "$TMP/lg0" > "$TMP/lg0.out" || bad "greedy --logits-out"
[ ! -e "$TMP/lg0.tmp.4194304" ] && grep -q "^cleanup: removed 1 temporary file .*lg0.tmp.4194304" "$TMP/err" && ! grep -q cleanup "$TMP/lg0.out" && [ ! -e "$TMP/.lock" ] \
  && ok "--logits-out: a killed write's temporary of the file goes (said on stderr, not in the text), no .lock stays" || bad "--logits-out temporaries: $(cat "$TMP/err")"
for t in 1e-45 1e-40 1e-39 1e-38; do
  run --prompt "Once upon a time" -g 12 --temperature $t --seed 3 --quiet --logits-out "$TMP/lgt" > /dev/null || bad "--temperature $t failed"
  paste -d' ' "$TMP/lg0" "$TMP/lgt" | awk '$2 == $3 {exit 0} $1 != $4 {exit 1} END {if (NR != 12) exit 1}' \
    && ok "tiny temperatures act as greedy: --temperature $t chooses greedy's tokens (no <|endoftext|> at once)" \
    || bad "--temperature $t: ids $(cut -d' ' -f1 "$TMP/lgt" | tr '\n' ' ') vs greedy $(cut -d' ' -f1 "$TMP/lg0" | tr '\n' ' ')"
done
# --prompt "" is the empty prompt --help describes (<|endoftext|>): it was refused with
# "--prompt: empty value"
e2=$(run -g 8 --seed 4 --quiet); e1=$(run --prompt "" -g 8 --seed 4 --quiet) && [ -n "$e1" ] && [ "$e1" = "$e2" ] \
  && ok "--prompt \"\" accepted, as --help says: the text of the default <|endoftext|> prompt" || { cat "$TMP/err"; bad "--prompt '': '$e1' vs '$e2'"; }
e3=$(run --prompt= -g 8 --seed 4 --quiet) && [ -n "$e3" ] && [ "$e3" = "$e2" ] && ok "... and --prompt= too" || { cat "$TMP/err"; bad "--prompt=: '$e3'"; }
# --seed's help says what the seed does here (it said "init from scratch, shuffling, dropout")
h=$("$GEN" --help | grep -- '^  --seed ')
grep -q "sampl" <<<"$h" && ! grep -qE "init|shuffl|dropout" <<<"$h" && ok "generate --help: --seed is the sampling's seed" || bad "generate --seed help: $h"
k=$(run --prompt "Once upon a time" -g 12 --top-k 40 --temperature 0.8 --seed 1 --quiet)
[ -n "$k" ] && ok "top-k 40 at temperature 0.8 runs" || bad "top-k sampling printed nothing"
# --top-p, --min-p, --repetition-penalty (test_sampling checks the numbers against transformers):
# at their off values the text of the defaults; on, a seed reproduces the text; bad values refused
P=(--prompt "The quick brown fox" -g 16 --quiet "${F[@]}")
o1=$(run "${P[@]}" --seed 7 --top-p 1 --min-p 0 --repetition-penalty 1)
[ -n "$a" ] && [ "$o1" = "$a" ] && ok "--top-p 1 --min-p 0 --repetition-penalty 1: the defaults' text" || bad "controls off: '$o1' vs '$a'"
for c in "--top-p 0.6" "--min-p 0.2" "--repetition-penalty 1.5" "--top-p 0.9 --min-p 0.05 --repetition-penalty 1.3 --top-k 50"; do
  s1=$(run "${P[@]}" --seed 7 $c) && s2=$(run "${P[@]}" --seed 7 $c) && s3=$(run "${P[@]}" --seed 7 $c --no-kv-cache) \
    && [ -n "$s1" ] && [ "$s1" = "$s2" ] && [ "$s1" = "$s3" ] && ok "$c: seed 7 twice and without the cache, the same text" \
    || { cat "$TMP/err"; bad "$c: '$s1' / '$s2' / no cache '$s3'"; }
done
r1=$(run "${P[@]}" --temperature 0 --repetition-penalty 1.5); r0=$(run "${P[@]}" --temperature 0)
[ -n "$r1" ] && [ "$r1" != "$r0" ] && ok "greedy with --repetition-penalty 1.5 is another text than greedy ('$r0')" || bad "the penalty changed nothing under greedy: '$r1'"
m1=$(run "${P[@]}" --seed 7 --min-p 1); m0=$(run "${P[@]}" --temperature 0)
[ -n "$m1" ] && [ "$m1" = "$m0" ] && ok "--min-p 1 keeps only the most likely token: greedy's text" || bad "--min-p 1: '$m1' vs greedy '$m0'"
run --prompt "Once upon a time" -g 4 --top-p 0.9 --min-p 0.1 --repetition-penalty 1.2 > /dev/null \
  && grep --quiet "top-p 0.9 | min-p 0.1 | repetition penalty 1.2 |" "$TMP/err" && ok "the banner names top-p, min-p and the penalty" \
  || { cat "$TMP/err"; bad "banner without the sampling controls"; }
for v in 0 -0.1 1.5 nan; do expect_fail "--top-p $v" "--top-p" "$GEN" --model "$M" --top-p $v; done
for v in -0.1 1.01 inf; do expect_fail "--min-p $v" "--min-p" "$GEN" --model "$M" --min-p $v; done
for v in 0 -1 inf nan 1e-300 1e300; do expect_fail "--repetition-penalty $v" "--repetition-penalty" "$GEN" --model "$M" --repetition-penalty $v; done
expect_fail "llama.cpp's --repeat-penalty" "--repetition-penalty" "$GEN" --model "$M" --repeat-penalty 1.1
h=$("$GEN" --help)
for f in --top-p --min-p --repetition-penalty; do grep -q -- "^  $f " <<<"$h" && ok "generate --help lists $f" || bad "generate --help lacks $f"; done
# --dtype: the banner says which GEMMs ran (test_sampling checks the bf16 numbers)
for d in fp32 bf16 fp16; do
  want="fp32 (--dtype"; [ $d = bf16 ] && want="bf16 GEMMs"; [ $d = fp16 ] && want="fp16 GEMMs"
  o=$(run --prompt "Once upon a time" -g 8 --dtype $d) && grep --quiet "^dtype: $want" "$TMP/err" \
    && ok "--dtype $d: $(grep '^dtype:' "$TMP/err")" || { cat "$TMP/err"; bad "--dtype $d: no 'dtype: $want' line"; }
done
expect_fail "--dtype fp8" "--dtype" "$GEN" --model "$M" --dtype fp8

# the vocabulary: written next to the model by the trainer (vocab.json + merges.txt), else the
# bundled data/gpt2 in the working directory or near the program; a copy of the program far from
# the repository, on a model directory without tokenizer files, has none
[ -f "$M/vocab.json" ] && [ -f "$M/merges.txt" ] && ok "the trainer wrote vocab.json + merges.txt next to the model" \
  || bad "no tokenizer files in $M: $(ls "$M")"
mkdir -p "$TMP/elsewhere" "$TMP/bin" "$TMP/bare"
cp "$M/config.json" "$M/model.safetensors" "$TMP/bare/"
cp "$GEN" "$TMP/bin/generate"
( cd "$TMP/elsewhere" && expect_fail "no vocabulary anywhere" "no vocabulary found" "$TMP/bin/generate" --model "$TMP/bare" --prompt hi -g 2 )
v=$( cd "$TMP/elsewhere" && "$TMP/bin/generate" --model "$M" --prompt "The quick brown fox" -g 16 --seed 7 --quiet --threads 2 2>"$TMP/err" )
[ "$v" = "$a" ] && ok "vocabulary found next to the model" || { cat "$TMP/err"; bad "vocab next to the model: '$v'"; }
v=$( cd "$TMP/elsewhere" && "$GEN" --model "$TMP/bare" --prompt "The quick brown fox" -g 16 --seed 7 --quiet --threads 2 2>"$TMP/err" )
[ "$v" = "$a" ] && ok "vocabulary found near the program (data/gpt2 of its checkout)" || { cat "$TMP/err"; bad "vocab near the program: '$v'"; }
expect_fail "--vocab missing" "nope" "$GEN" --model "$M" --vocab "$TMP/nope" --prompt hi

# bad flags and inputs
expect_fail "no --model" "--model is required" "$GEN" --prompt hi
expect_fail "negative temperature" "--temperature" "$GEN" --model "$M" --temperature -1
expect_fail "unknown flag" "--bogus" "$GEN" --model "$M" --bogus
expect_fail "too many tokens" "--max-new-tokens" "$GEN" --model "$M" --prompt hi --max-new-tokens 1000
expect_fail "missing model" "$TMP/none" "$GEN" --model "$TMP/none" --vocab data/gpt2
# a model with a smaller vocabulary than the prompt's tokens
expect_fail "prompt outside the model's vocabulary" "outside the model's vocabulary" "$GEN" --model test/ref/gpt2_tiny --vocab data/gpt2 --prompt "Hello"

# a model with a NaN weight (as a diverged run saves): its logits are not finite. generate printed
# token 0 ("!") for every token and exited 0; now it stops before printing one, with an error
"$BIN_DIR/convert" --model test/ref/gpt2_tiny --out "$TMP/nan.bin" > "$TMP/conv.log" 2>&1 || { cat "$TMP/conv.log"; bad "convert to .bin"; }
printf '\x00\x00\xc0\x7f' | dd of="$TMP/nan.bin" bs=1 seek=1024 conv=notrunc 2>/dev/null   # wte[0][0] (after the 1024-byte header) = NaN
for s in "--temperature 0" "--temperature 1 --seed 3"; do
  o=$("$GEN" --model "$TMP/nan.bin" --vocab data/gpt2 --prompt '!#%' -g 8 $s --quiet 2>"$TMP/err"); rc=$?
  [ $rc = 1 ] && [ -z "$o" ] && grep -q "^error: the logits for new token 1 are not finite (logit of token 0 is nan): '$TMP/nan.bin'" "$TMP/err" \
    && ok "NaN logits ($s): no '!!!!!!!!', exit 1: $(grep '^error' "$TMP/err")" || bad "NaN logits ($s): rc $rc, output '$o', $(cat "$TMP/err")"
done

# LoRA: ids < 100 of the GPT-2 vocabulary are single ASCII characters, so the vocab-100 test
# model continues a prompt of them
la=$("$GEN" --model test/ref/gpt2_tiny --adapter test/ref/lora_tiny/all_linear --vocab data/gpt2 --prompt '!#%' -g 10 --seed 2 --quiet "${F[@]}" 2>"$TMP/err") \
  || { cat "$TMP/err"; bad "generate with --adapter failed"; }
lb=$("$GEN" --model test/ref/gpt2_tiny --adapter test/ref/lora_tiny/all_linear --vocab data/gpt2 --prompt '!#%' -g 10 --seed 2 --quiet --no-kv-cache "${F[@]}" 2>"$TMP/err")
[ ${#la} -eq 10 ] && [ "$la" = "$lb" ] && ok "adapter: 10 characters, cache == no cache ('$la')" || bad "adapter: '$la' vs '$lb'"
expect_fail "bad adapter dir" "$TMP/noadapter" "$GEN" --model test/ref/gpt2_tiny --adapter "$TMP/noadapter" --vocab data/gpt2 --prompt '!'

# --chat: the prompt is rendered as data/prepare renders a conversation (ChatML text ==
# transformers' apply_chat_template, test/ref/prepare_chatml_prompt.txt), and the reply ends at the
# template's stop text. A tiny model trained on one ChatML conversation (one record per window)
# answers exactly "Paris." (the <|im_end|> it goes on to write, and everything after, is not printed).
cp=$(run --chat chatml --prompt "Capital of France?" -g 1 --seed 1)
[ "$(head -c "$(stat -c %s test/ref/prepare_chatml_prompt.txt)" <<<"$cp")" = "$(cat test/ref/prepare_chatml_prompt.txt)" ] \
  && grep --quiet "^prompt: 32 tokens" "$TMP/err" && ok "--chat chatml echoes transformers' generation prompt (32 tokens with the leading <|endoftext|>)" \
  || bad "--chat chatml prompt: '$cp' / $(grep '^prompt' "$TMP/err")"
chatml_tiny "$TMP/chatm"
reply=$("$GEN" --model "$TMP/chatm" --chat chatml --prompt "Capital of France?" --temperature 0 -g 30 --quiet --threads 2 2>"$TMP/err")
[ "$reply" = "Paris." ] && ok "--chat chatml: the trained reply 'Paris.' ends at <|im_end|>" || { cat "$TMP/err"; bad "--chat reply: '$reply'"; }
rp="$(cat test/ref/prepare_chatml_prompt.txt; printf x)"   # (x keeps the trailing newline)
raw=$("$GEN" --model "$TMP/chatm" --prompt "<|endoftext|>${rp%x}" --temperature 0 -g 30 --quiet --threads 2 2>"$TMP/err")
[[ "$raw" == "Paris.<|im_end|>"* ]] && ok "without --chat the same model goes on past <|im_end|>: '$(head -c 30 <<<"$raw" | tr '\n' ' ')'" \
  || bad "raw continuation: '$raw'"
expect_fail "--system without --chat" "--system is for --chat" "$GEN" --model "$M" --system hi --prompt hi
expect_fail "--chat without --prompt" "--chat needs --prompt" "$GEN" --model "$M" --chat plain
expect_fail "unknown --chat template" "--chat: 'llama' is not one of: plain, chatml" "$GEN" --model "$M" --chat llama --prompt hi

# the trainers' --sample-* flags: samples during and after training, on stdout and in samples.txt
"$BIN_DIR/train_gpt2" --model tiny --train-data "$TMP/train.bin" --batch-size 1 --seq-len 16 --steps 2 --threads 2 \
    --sample-every 1 --sample-tokens 8 --prompt "Hello there" --out "$TMP/s" > "$TMP/s.log" 2>&1 || { cat "$TMP/s.log"; bad "train_gpt2 --sample-every failed"; }
grep --quiet "^sample (step 1):" "$TMP/s.log" && grep --quiet "^sample (step 2):" "$TMP/s.log" && [ "$(grep -c '^Hello there' "$TMP/s/samples.txt")" = 2 ] \
  && ok "train_gpt2 --sample-every 1: samples at steps 1 and 2, in samples.txt" || { cat "$TMP/s.log"; bad "train_gpt2 samples missing"; }
# the trainers take the same controls, refuse the same bad values, and record them in run_config.json
"$BIN_DIR/train_gpt2" --model tiny --train-data "$TMP/train.bin" --batch-size 1 --seq-len 16 --steps 1 --threads 2 --sample-tokens 6 \
    --top-p 0.8 --min-p 0.05 --repetition-penalty 1.25 --out "$TMP/sp" > "$TMP/sp.log" 2>&1 || { cat "$TMP/sp.log"; bad "train_gpt2 with the sampling controls failed"; }
python3 -c "import json,sys; f=json.load(open(sys.argv[1]))['flags']; sys.exit(not (abs(f['top_p']-0.8)<1e-6 and abs(f['min_p']-0.05)<1e-6 and abs(f['repetition_penalty']-1.25)<1e-6))" \
    "$TMP/sp/run_config.json" && ok "run_config.json records top_p, min_p, repetition_penalty" || bad "run_config.json: $(cat "$TMP/sp/run_config.json")"
expect_fail "train_gpt2 --top-p 0" "--top-p" "$BIN_DIR/train_gpt2" --model tiny --train-data "$TMP/train.bin" --batch-size 1 --seq-len 16 --steps 1 --top-p 0
expect_fail "train_lora --repetition-penalty 0" "--repetition-penalty" "$BIN_DIR/train_lora" --model test/ref/gpt2_tiny --train-data "$TMP/train.bin" \
    --batch-size 1 --seq-len 16 --steps 1 --repetition-penalty 0
# train_lora's final sample (kv cache, adapter, seed) is what generate prints with the saved adapter
LORA=(--model test/ref/gpt2_tiny --train-data "$TMP/train100.bin" --batch-size 2 --seq-len 16 --steps 3 --lr 1e-2 --threads 2
      --lora-targets all-linear --seed 5 --save-format none)
make_shard "$TMP/train100.bin" 2000 100 4
"$BIN_DIR/train_lora" "${LORA[@]}" --sample-tokens 10 --vocab data/gpt2 --prompt '!#%' --out "$TMP/l" > "$TMP/l.log" 2>&1 \
  || { cat "$TMP/l.log"; bad "train_lora --sample-tokens failed"; }
ts=$(grep -A1 "^sample (step 3):" "$TMP/l.log" | tail -1)
gs=$("$GEN" --model test/ref/gpt2_tiny --adapter "$TMP/l" --vocab data/gpt2 --prompt '!#%' -g 10 --seed 5 --quiet --threads 2 2>"$TMP/err")
[ -n "$ts" ] && [ "$ts" = "!#%$gs" ] && ok "train_lora final sample == generate --adapter on the saved adapter ('$ts')" \
  || { cat "$TMP/err"; bad "train_lora sample '$ts' vs generate '!#%$gs'"; }
# a missing vocabulary matters only when sampling is asked for (a copy of the program far from
# the repository finds none)
cp "$BIN_DIR/train_gpt2" "$TMP/bin/train_gpt2"
( cd "$TMP/elsewhere" && expect_fail "train_gpt2 sampling without a vocabulary" "sampling needs a vocabulary" \
    "$TMP/bin/train_gpt2" --model tiny --train-data "$TMP/train.bin" --batch-size 1 --seq-len 16 --steps 1 --sample-tokens 4 )
( cd "$TMP/elsewhere" && "$TMP/bin/train_gpt2" --model tiny --train-data "$TMP/train.bin" --batch-size 1 --seq-len 16 --steps 1 --threads 2 > "$TMP/n.log" 2>&1 ) \
  && ok "no vocabulary needed without sampling" || { cat "$TMP/n.log"; bad "train_gpt2 without sampling failed outside the repo"; }
expect_fail "train_gpt2 --sample-tokens beyond n_positions" "--sample-tokens" "$BIN_DIR/train_gpt2" --model tiny --train-data "$TMP/train.bin" \
    --batch-size 1 --seq-len 16 --steps 1 --sample-tokens 300

echo "test_generate.sh: $checks checks, $fails failed"
[ $fails -eq 0 ]
