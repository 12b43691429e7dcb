#!/usr/bin/env bash
# `generate --score FILE`: a JSONL file's records scored under a tiny model with the GPT-2
# vocabulary (train_gpt2 --model tiny, one step). The numbers against transformers are
# test_scorer's; here the command line: one line out a record (blank lines skipped, lines named),
# mean = logprob / tokens and perplexity = exp(-mean), a text record equals the prompt/completion
# record of the same text with an empty prompt, a record scores the same alone as among others
# (in one batch or in several), a completion's score is the whole text's minus its prompt's, a
# conversation needs --chat; bad files and flags get their message.
source "$(dirname "$0")/lib.sh"
GEN="$BIN_DIR/generate"
make_shard "$TMP/train.bin" 2000 50257 1
"$BIN_DIR/train_gpt2" --model tiny --train-data "$TMP/train.bin" --batch-size 1 --seq-len 32 --steps 1 \
    --save-format hf --out "$TMP/m" --threads 2 > "$TMP/train.log" 2>&1 || { cat "$TMP/train.log"; bad "train_gpt2 tiny failed"; }
score() { "$GEN" --model "$TMP/m" --threads 2 --score "$@" 2> "$TMP/err"; }

cat > "$TMP/a.jsonl" <<'J'
{"text": "The quick brown fox jumps over the lazy dog."}

{"prompt": "", "completion": "The quick brown fox jumps over the lazy dog."}
{"prompt": "Once upon a time", "completion": " there was a king who had three daughters."}
{"text": "Once upon a time"}
{"text": "Once upon a time there was a king who had three daughters."}
{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."}]}
J
head -6 "$TMP/a.jsonl" > "$TMP/plain.jsonl"
score "$TMP/plain.jsonl" > "$TMP/out.jsonl" || { cat "$TMP/err"; bad "--score failed"; }
grep -q "^scored 5 records" "$TMP/err" && ok "5 records scored: $(grep '^scored' "$TMP/err")" || bad "summary line: $(cat "$TMP/err")"
python3 - "$TMP/out.jsonl" <<'P' && ok "fields, lines, mean and perplexity; text == empty prompt + completion; whole text - prompt == completion" || bad "score output: $(cat "$TMP/out.jsonl")"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["line"] for r in rows] == [1, 3, 4, 5, 6], rows
for r in rows:
    assert set(r) == {"line", "tokens", "logprob", "mean_logprob", "perplexity"}, r
    assert r["tokens"] > 0 and r["logprob"] < 0
    assert abs(r["mean_logprob"] - r["logprob"] / r["tokens"]) <= 1e-12 * abs(r["mean_logprob"])
    assert abs(r["perplexity"] - math.exp(-r["mean_logprob"])) <= 1e-9 * r["perplexity"]
assert rows[0]["logprob"] == rows[1]["logprob"] and rows[0]["tokens"] == rows[1]["tokens"], rows[:2]
# the whole text's tokens are the prompt's then the completion's (" there" starts a new token)
assert rows[4]["tokens"] == rows[3]["tokens"] + rows[2]["tokens"], rows[2:]
assert abs(rows[4]["logprob"] - (rows[3]["logprob"] + rows[2]["logprob"])) <= 1e-4 * abs(rows[4]["logprob"]), rows[2:]
P

# alone vs among others: record 3 (line 4) alone, and all in batches of one record (rows of the
# longest record's positions; a file of 120 copies fills several forwards)
sed -n 4p "$TMP/plain.jsonl" > "$TMP/one.jsonl"
score "$TMP/one.jsonl" > "$TMP/one.out" || bad "--score of one record"
for i in $(seq 120); do cat "$TMP/plain.jsonl"; done > "$TMP/many.jsonl"
score "$TMP/many.jsonl" --quiet > "$TMP/many.out" || bad "--score of 600 records"
python3 - "$TMP/one.out" "$TMP/many.out" "$TMP/out.jsonl" <<'P' && ok "a record alone == among 5 == among 600 in several forwards (to 1e-5)" || bad "batching changes the scores"
import json, sys
one = json.loads(open(sys.argv[1]).read())
many = [json.loads(l) for l in open(sys.argv[2])]
five = [json.loads(l) for l in open(sys.argv[3])]
assert len(many) == 600 and many[-1]["line"] == 720, (len(many), many[-1])
close = lambda a, b: abs(a - b) <= 1e-5 * abs(b)
assert close(one["logprob"], five[2]["logprob"]), (one, five[2])
for k, r in enumerate(many):
    assert r["tokens"] == five[k % 5]["tokens"] and close(r["logprob"], five[k % 5]["logprob"]), (k, r, five[k % 5])
P
! grep -q "^scored" "$TMP/err" && ok "--quiet: no summary" || bad "--quiet printed: $(cat "$TMP/err")"

score "$TMP/a.jsonl" --chat chatml > "$TMP/chat.out" || bad "--score --chat chatml: $(cat "$TMP/err")"
[ "$(wc -l < "$TMP/chat.out")" = 6 ] && [ "$(sed -n 1p "$TMP/chat.out")" = "$(sed -n 1p "$TMP/out.jsonl")" ] \
  && ok "--chat: the conversation scored, the other records as without it" || bad "--chat output: $(cat "$TMP/chat.out")"
expect_fail "a conversation without --chat" "line 7: a conversation" "$GEN" --model "$TMP/m" --score "$TMP/a.jsonl"
: > "$TMP/empty.jsonl"; printf '\n  \n' > "$TMP/blank.jsonl"
expect_fail "an empty file" "holds no records" "$GEN" --model "$TMP/m" --score "$TMP/empty.jsonl"
expect_fail "a file of blank lines" "holds no records" "$GEN" --model "$TMP/m" --score "$TMP/blank.jsonl"
printf '{"text": "a"}\n{"text": \n' > "$TMP/bad.jsonl"
expect_fail "a line that is not JSON" "line 2: not JSON" "$GEN" --model "$TMP/m" --score "$TMP/bad.jsonl"
printf '{"prompt": "a b c", "completion": ""}\n' > "$TMP/none.jsonl"
expect_fail "nothing to score" "line 1: no token to score" "$GEN" --model "$TMP/m" --score "$TMP/none.jsonl"
python3 -c 'import json; print(json.dumps({"text": " x" * 300}))' > "$TMP/long.jsonl"
expect_fail "longer than the model's positions" "take 300 positions; the model has 256" "$GEN" --model "$TMP/m" --score "$TMP/long.jsonl"
printf '{"prompt": "a", "chosen": " b", "rejected": " c"}\n' > "$TMP/pair.jsonl"
expect_fail "a preference pair" "line 1: a preference pair" "$GEN" --model "$TMP/m" --score "$TMP/pair.jsonl"
expect_fail "--score with --prompt" "--score with --prompt" "$GEN" --model "$TMP/m" --score "$TMP/plain.jsonl" --prompt hi
expect_fail "--score of a missing file" "missing.jsonl" "$GEN" --model "$TMP/m" --score "$TMP/missing.jsonl"

echo "test_score.sh: $checks checks, $fails failed"
[ $fails -eq 0 ]
