#!/usr/bin/env bash
# generate with several adapters (--adapter A --adapter B, PEFT's add_weighted_adapter; the
# numbers against PEFT are test_lora_mix's), on a tiny model of GPT-2's vocabulary:
# - an adapter twice at weights 0.5, 0.5 (cat: the exact weighted sum) scores a text as the adapter
#   alone does; at 1, -1 as the base does; linear at 0.25, 0.25 as the adapter alone (PEFT's linear
#   sums A and B apart, each term by sqrt(0.25 scaling): the sums are sqrt(scaling) A and
#   sqrt(scaling) B, whose product is the adapter's own change);
# - two different adapters score otherwise than either;
# - refusals: weights without a second adapter, the wrong number of weights, a DoRA adapter in the
#   combination, --adapter-combine linear over two ranks.
source "$(dirname "$0")/lib.sh"
GEN="$BIN_DIR/generate"
TR="$BIN_DIR/train_lora"
D="$TMP"
make_shard "$D/data.bin" 2000 50257 5
"$BIN_DIR/train_gpt2" --model tiny --train-data "$D/data.bin" -b 1 -t 32 --steps 1 --save-format hf --out "$D/base" >"$D/base.log" 2>&1 \
  || { bad "train_gpt2 tiny exited $?"; tail -5 "$D/base.log"; }
L=(--model "$D/base" --train-data "$D/data.bin" -b 1 -t 32 --steps 3 --lr 1e-2 --dtype fp32)
"$TR" "${L[@]}" --lora-targets c_attn --out "$D/a" >"$D/a.log" 2>&1 || { bad "adapter a exited $?"; tail -5 "$D/a.log"; }
"$TR" "${L[@]}" --lora-targets all-linear --seed 9 --out "$D/b" >"$D/b.log" 2>&1 || { bad "adapter b exited $?"; tail -5 "$D/b.log"; }
"$TR" "${L[@]}" --lora-targets c_attn --lora-rank 2 --out "$D/r2" >/dev/null 2>&1 || bad "adapter r2 exited $?"
"$TR" "${L[@]}" --lora-targets c_attn --dora --out "$D/d" >/dev/null 2>&1 || bad "DoRA adapter exited $?"
echo '{"text": "The quick brown fox jumps over the lazy dog, and the dog does not mind."}' >"$D/s.jsonl"
score() { "$GEN" --model "$D/base" --score "$D/s.jsonl" --dtype fp32 "$@" 2>"$D/err" | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["logprob"])' \
  || { bad "generate $*: $(tail -2 "$D/err")"; echo nan; }; }
same() { python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= 1e-4 * abs(b) else 1)" "$1" "$2"; }
base=$(score); a=$(score --adapter "$D/a"); b=$(score --adapter "$D/b")
half=$(score --adapter "$D/a" --adapter "$D/a" --adapter-weights 0.5,0.5)
same "$half" "$a" && ! same "$a" "$base" && ok "cat: a x 0.5 + a x 0.5 scores as a ($half, a $a, base $base)" || bad "cat 0.5 + 0.5: $half, a $a, base $base"
none=$(score --adapter "$D/a" --adapter "$D/a" --adapter-weights 1,-1)
same "$none" "$base" && ok "cat: a - a scores as the base ($none)" || bad "cat a - a: $none, base $base"
lin=$(score --adapter "$D/a" --adapter "$D/a" --adapter-weights 0.25,0.25 --adapter-combine linear)
same "$lin" "$a" && ok "linear: a x 0.25 + a x 0.25 scores as a ($lin)" || bad "linear: $lin, a $a"
ab=$(score --adapter "$D/a" --adapter "$D/b")
! same "$ab" "$a" && ! same "$ab" "$b" && ok "a + b scores otherwise than a or b ($ab)" || bad "a + b: $ab, a $a, b $b"
grep -q "adapter $D/a x 1 + $D/b x 1 (cat)" "$D/err" && ok "the banner names the combination" || bad "banner: $(grep -m1 adapter "$D/err")"

expect_fail "--adapter-weights with one adapter" "--adapter-weights / --adapter-combine with 1 --adapter" "$GEN" --model "$D/base" --adapter "$D/a" --adapter-weights 1 --prompt hi
expect_fail "two adapters, one weight" "is not 2 comma-separated numbers" "$GEN" --model "$D/base" --adapter "$D/a" --adapter "$D/b" --adapter-weights 0.5 --prompt hi
expect_fail "a DoRA adapter in the combination" "is DoRA" "$GEN" --model "$D/base" --adapter "$D/a" --adapter "$D/d" --prompt hi
expect_fail "linear over two ranks" "needs adapters of one rank" "$GEN" --model "$D/base" --adapter "$D/a" --adapter "$D/r2" --adapter-combine linear --prompt hi
finish
