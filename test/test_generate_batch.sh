#!/usr/bin/env bash
# Batched `generate` (llmc/app/generate_batch.c, sample_generate_batch): --num-samples N
# continuations of a prompt decoded together, --prompts JSONL in, JSONL out (stdout or --out),
# --stop. Sample 0 is the one streamed completion of the same seed; greedy rows all equal the one
# greedy text; a seed reproduces the batch and its rows differ; the greedy continuation and its
# mean log-probability are transformers' (test/ref/generate_batch_ref.json, made by
# dev/gen_generate_ref.py, to 1e-4); the finish reasons eos / stop / length; chat messages rendered
# with the template; bad input refused, naming the flag, file and line.
source "$(dirname "$0")/lib.sh"
GEN="$BIN_DIR/generate"
REF=test/ref/generate_batch_ref.json
S=(--model test/ref/sampling_tiny --vocab data/gpt2 --dtype fp32 --threads 2)   # vocab 100: ids 0..93 are "!".."~"
# jq-free JSON checks: python3's standard library
py() { python3 - "$@"; }

# --- sample 0 is today's text; rows of a greedy batch are the greedy text ---
one=$("$GEN" "${S[@]}" --prompt '!#%' -g 20 --seed 5 --quiet 2>"$TMP/err") || { cat "$TMP/err"; bad "streamed generate failed"; }
"$GEN" "${S[@]}" --prompt '!#%' -g 20 --seed 5 --num-samples 1 --out "$TMP/n1.jsonl" --quiet 2>"$TMP/err" || { cat "$TMP/err"; bad "--num-samples 1 failed"; }
"$GEN" "${S[@]}" --prompt '!#%' -g 20 --seed 5 --num-samples 4 --quiet > "$TMP/n4.jsonl" 2>"$TMP/err" || { cat "$TMP/err"; bad "--num-samples 4 failed"; }
"$GEN" "${S[@]}" --prompt '!#%' -g 20 --seed 5 --num-samples 4 --quiet > "$TMP/n4b.jsonl" 2>"$TMP/err"
t1=$(py "$TMP/n1.jsonl" <<<'import json,sys; print(json.loads(open(sys.argv[1]).readline())["text"])')
t4=$(py "$TMP/n4.jsonl" <<<'import json,sys; print(json.loads(open(sys.argv[1]).readline())["text"])')
[ -n "$one" ] && [ "$t1" = "$one" ] && [ "$t4" = "$one" ] && ok "sample 0 (N = 1 and N = 4) is the streamed text of seed 5: '$one'" \
  || bad "sample 0: N=1 '$t1', N=4 '$t4', streamed '$one'"
cmp -s "$TMP/n4.jsonl" "$TMP/n4b.jsonl" && ok "seeded N = 4 reproducible run to run" || bad "N = 4 twice differs: $(diff "$TMP/n4.jsonl" "$TMP/n4b.jsonl")"
py "$TMP/n4.jsonl" <<'PY' && ok "sampled rows differ from each other" || bad "sampled rows: $(cat "$TMP/n4.jsonl")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(0 if len(rows) == 4 and len({r["text"] for r in rows}) == 4 else 1)
PY
g1=$("$GEN" "${S[@]}" --prompt '!#%' -g 24 --temperature 0 --quiet 2>/dev/null)
"$GEN" "${S[@]}" --prompt '!#%' -g 24 --temperature 0 --num-samples 4 --quiet > "$TMP/g4.jsonl" 2>"$TMP/err" || { cat "$TMP/err"; bad "greedy N = 4 failed"; }
py "$TMP/g4.jsonl" "$g1" <<'PY' && ok "greedy N = 4: every row is the one greedy text '$g1'" || bad "greedy rows: $(cat "$TMP/g4.jsonl") vs '$g1'"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(0 if len(rows) == 4 and all(r["text"] == sys.argv[2] and r["sample"] == i for i, r in enumerate(rows)) else 1)
PY

# --- transformers' greedy text and mean log-probability (temperature 1, no filtering) ---
for extra in "--temperature 0" "--top-k 1 --seed 9"; do
  "$GEN" "${S[@]}" --prompt '!#%' -g 24 $extra --num-samples 3 --quiet > "$TMP/ref.jsonl" 2>"$TMP/err" || { cat "$TMP/err"; bad "greedy ($extra) failed"; }
  msg=$(py "$TMP/ref.jsonl" "$REF" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ref = json.load(open(sys.argv[2]))
bad = [r for r in rows if r["text"] != ref["text"] or r["tokens"] != ref["new_tokens"] or r["finish_reason"] != "length"
       or abs(r["mean_logprob"] - ref["mean_logprob"]) > 1e-4]
print("mean_logprob %.9f vs transformers' %.9f" % (rows[0]["mean_logprob"], ref["mean_logprob"]))
sys.exit(1 if bad or len(rows) != 3 else 0)
PY
  ) && ok "greedy ($extra): transformers' text and $msg (1e-4)" || bad "vs $REF ($extra): $msg / $(head -1 "$TMP/ref.jsonl")"
done
# one token: its log-probability alone
"$GEN" "${S[@]}" --prompt '!#%' -g 1 --temperature 0 --out "$TMP/first.jsonl" --quiet 2>/dev/null
py "$TMP/first.jsonl" "$REF" <<'PY' && ok "one token: mean_logprob is transformers' log-probability of it" || bad "first token: $(cat "$TMP/first.jsonl")"
import json, sys
r = json.loads(open(sys.argv[1]).readline()); ref = json.load(open(sys.argv[2]))
sys.exit(0 if r["tokens"] == 1 and abs(r["mean_logprob"] - ref["logprobs"][0]) < 1e-4 else 1)
PY

# --- the fields, and the finish reasons ---
py "$TMP/n4.jsonl" <<'PY' && ok "JSONL fields: index, prompt, sample, text, tokens, finish_reason, mean_logprob" || bad "fields: $(head -1 "$TMP/n4.jsonl")"
import json, sys
for i, l in enumerate(open(sys.argv[1])):
    r = json.loads(l)
    assert list(r) == ["index", "prompt", "sample", "text", "tokens", "finish_reason", "mean_logprob"], list(r)
    assert r["index"] == 0 and r["prompt"] == "!#%" and r["sample"] == i and r["tokens"] == 20
    assert r["finish_reason"] == "length" and isinstance(r["mean_logprob"], float) and r["mean_logprob"] < 0
PY
# bytes that are no UTF-8 (ids 94..99 of the tiny vocabulary are lone continuation bytes 0xa1..0xa6)
# come out as U+FFFD: every line is valid UTF-8 and JSON
"$GEN" "${S[@]}" --prompt '!#%' -g 24 --seed 5 --num-samples 8 --temperature 1.5 --quiet > "$TMP/u.jsonl" 2>"$TMP/err" || { cat "$TMP/err"; bad "T=1.5 run failed"; }
py "$TMP/u.jsonl" <<'PY' && ok "text bytes that are not UTF-8 written as U+FFFD (the JSONL reads back strictly)" || bad "UTF-8: $(head -c 300 "$TMP/u.jsonl")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8", errors="strict")]
sys.exit(0 if len(rows) == 8 and any("\ufffd" in r["text"] for r in rows) else 1)
PY
# --stop: the text up to the stop string, which is removed; the streamed text stops there too
cut=${g1:6:2}; want=${g1%%"$cut"*}
"$GEN" "${S[@]}" --prompt '!#%' -g 24 --temperature 0 --num-samples 2 --stop "$cut" --quiet > "$TMP/stop.jsonl" 2>"$TMP/err" || { cat "$TMP/err"; bad "--stop failed"; }
py "$TMP/stop.jsonl" "$want" <<'PY' && ok "--stop '$cut': text '$want', finish_reason stop, tokens up to the one completing it" || bad "--stop: $(cat "$TMP/stop.jsonl") want '$want'"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(0 if all(r["text"] == sys.argv[2] and r["finish_reason"] == "stop" and r["tokens"] == len(sys.argv[2]) + 2 for r in rows) else 1)
PY
st=$("$GEN" "${S[@]}" --prompt '!#%' -g 24 --temperature 0 --stop "$cut" --quiet 2>/dev/null)
[ "$st" = "$want" ] && ok "--stop on the streamed completion: '$st'" || bad "streamed --stop: '$st' want '$want'"
# several --stop: the completion ends at the first of them in its text, whichever flag came first
late=${g1:9:3}
"$GEN" "${S[@]}" --prompt '!#%' -g 24 --temperature 0 --num-samples 2 --stop "$late" --stop "$cut" --stop "@@@@" --quiet > "$TMP/stop2.jsonl" 2>"$TMP/err" \
  || { cat "$TMP/err"; bad "three --stop failed"; }
cmp -s "$TMP/stop.jsonl" "$TMP/stop2.jsonl" && ok "three --stop (one later in the text, one absent): the same completions as --stop '$cut'" \
  || bad "three --stop: $(cat "$TMP/stop2.jsonl")"
st=$("$GEN" "${S[@]}" --prompt '!#%' -g 24 --temperature 0 --stop "$late" --stop "$cut" --quiet 2>/dev/null)
[ "$st" = "$want" ] && ok "two --stop on the streamed completion: '$st'" || bad "streamed two --stop: '$st' want '$want'"
# eos: a tiny model trained on "<|endoftext|>Hello world." ends its continuation with <|endoftext|>
python3 - "$TMP/eos.bin" <<'PY'
import struct, sys
toks = ([50256, 15496, 995, 13] * 1000)[:4000]   # <|endoftext|> "Hello" " world" "."
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *([20240520, 1, len(toks)] + [0] * 253)))
    f.write(struct.pack("<%dH" % len(toks), *toks))
PY
"$BIN_DIR/train_gpt2" --model tiny --train-data "$TMP/eos.bin" --batch-size 4 --seq-len 32 --steps 30 --lr 1e-2 --warmup-steps 0 \
    --threads 2 --save-format hf --out "$TMP/eosm" > "$TMP/train.log" 2>&1 || { cat "$TMP/train.log"; bad "train_gpt2 on the EOS data failed"; }
"$GEN" --model "$TMP/eosm" --threads 2 --prompt Hello -g 16 --temperature 0 --num-samples 2 --quiet > "$TMP/eos.jsonl" 2>"$TMP/err" || { cat "$TMP/err"; bad "eos run failed"; }
py "$TMP/eos.jsonl" <<'PY' && ok "finish_reason eos: $(head -1 "$TMP/eos.jsonl")" || bad "eos: $(cat "$TMP/eos.jsonl")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(0 if len(rows) == 2 and all(r["finish_reason"] == "eos" and r["tokens"] < 16 and r["text"].endswith(".") for r in rows) else 1)
PY

# --- a prompts file: plain prompts and chat messages, written atomically to --out ---
cat > "$TMP/p.jsonl" <<'EOF'
{"prompt": "!#%"}

{"prompt": "$&"}
EOF
"$GEN" "${S[@]}" --prompts "$TMP/p.jsonl" -g 6 --seed 5 --num-samples 2 --out "$TMP/out.jsonl" > "$TMP/stdout" 2>"$TMP/err" || { cat "$TMP/err"; bad "--prompts failed"; }
py "$TMP/out.jsonl" "$TMP/n4.jsonl" <<'PY' && [ ! -s "$TMP/stdout" ] && [ "$(grep -c '^prompt [12]/2' "$TMP/err")" = 2 ] \
  && ok "--prompts (a blank line skipped) --out: 2 prompts x 2 samples in order, a progress line each, nothing on stdout" || bad "--prompts: $(cat "$TMP/out.jsonl" "$TMP/err")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
first = json.loads(open(sys.argv[2]).readline())
assert [(r["index"], r["sample"], r["prompt"]) for r in rows] == [(0, 0, "!#%"), (0, 1, "!#%"), (1, 0, "$&"), (1, 1, "$&")], rows
assert first["text"].startswith(rows[0]["text"]) and len(rows[0]["text"]) == 6   # the seed-5 text, 6 of its 20 tokens
PY
! ls "$TMP"/out.jsonl.tmp.* > /dev/null 2>&1 && [ ! -e "$TMP/.lock" ] && ok "--out: no temporary and no .lock left" || bad "--out left $(ls -a "$TMP")"
chatml_tiny "$TMP/chatm"
printf '%s\n' '{"messages": [{"role": "user", "content": "Capital of France?"}]}' '{"prompt": "Capital of France?"}' > "$TMP/c.jsonl"
"$GEN" --model "$TMP/chatm" --threads 2 --chat chatml --prompts "$TMP/c.jsonl" --temperature 0 -g 30 --quiet > "$TMP/c.out" 2>"$TMP/err" || { cat "$TMP/err"; bad "--prompts with messages failed"; }
py "$TMP/c.out" <<'PY' && ok "--chat chatml --prompts: messages and a prompt (the user's message) answered 'Paris.', finish_reason stop at <|im_end|>" || bad "chat: $(cat "$TMP/c.out")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 2 and "prompt" not in rows[0] and rows[1]["prompt"] == "Capital of France?", rows
sys.exit(0 if all(r["text"] == "Paris." and r["finish_reason"] == "stop" for r in rows) else 1)
PY

# --- bad input, refused by name before anything is written ---
: > "$TMP/empty.jsonl"; printf '\n  \n' > "$TMP/blank.jsonl"
printf '%s\n' '{"prompt": "!"}' '{"prompt": "!"' > "$TMP/notjson.jsonl"
printf '%s\n' '{"prompt": "!"}' '{"text": "!"}' > "$TMP/nofield.jsonl"
printf '%s\n' '{"prompt": 3}' > "$TMP/notstr.jsonl"
printf '%s\n' '{"messages": [{"role": "user", "content": "hi"}]}' > "$TMP/msgs.jsonl"
long=$(printf 'Hello %.0s' $(seq 40))   # 41 tokens: 40 words and the last space
printf '%s\n' '{"prompt": "!"}' '{"prompt": "!"}' "{\"prompt\": \"$long\"}" > "$TMP/long.jsonl"
expect_fail "empty prompts file" "--prompts '$TMP/empty.jsonl' is empty" "$GEN" "${S[@]}" --prompts "$TMP/empty.jsonl" --out "$TMP/o1"
expect_fail "blank prompts file" "--prompts '$TMP/blank.jsonl' is empty" "$GEN" "${S[@]}" --prompts "$TMP/blank.jsonl"
expect_fail "a line that is not JSON" "--prompts '$TMP/notjson.jsonl' line 2 is not JSON" "$GEN" "${S[@]}" --prompts "$TMP/notjson.jsonl"
expect_fail "a line without prompt or messages" "--prompts '$TMP/nofield.jsonl' line 2 has neither \"prompt\" nor \"messages\"" \
    "$GEN" "${S[@]}" --prompts "$TMP/nofield.jsonl"
expect_fail "a prompt that is not a string" "line 1: \"prompt\" must be a string" "$GEN" "${S[@]}" --prompts "$TMP/notstr.jsonl"
expect_fail "messages without --chat" "line 1 has \"messages\", which need --chat" "$GEN" "${S[@]}" --prompts "$TMP/msgs.jsonl"
ctx=$(py "$TMP/eosm/config.json" <<<'import json,sys; print(json.load(open(sys.argv[1]))["n_positions"])')
expect_fail "a prompt longer than the context" "--prompts '$TMP/long.jsonl' line 3: the prompt is 41 tokens; with --max-new-tokens $((ctx - 30)) it needs $((ctx + 10)) positions, and the model has $ctx" \
    "$GEN" --model "$TMP/eosm" --prompts "$TMP/long.jsonl" -g $((ctx - 30)) --out "$TMP/o2"
[ ! -e "$TMP/o1" ] && [ ! -e "$TMP/o2" ] && ok "refused runs wrote no --out file" || bad "a refused run wrote --out"
expect_fail "--num-samples 0" "--num-samples" "$GEN" "${S[@]}" --prompt '!' --num-samples 0
expect_fail "missing prompts file" "--prompts '$TMP/none.jsonl' does not exist" "$GEN" "${S[@]}" --prompts "$TMP/none.jsonl"
expect_fail "--prompt with --prompts" "--prompt and --prompts" "$GEN" "${S[@]}" --prompt '!' --prompts "$TMP/p.jsonl"
expect_fail "--no-kv-cache with --num-samples" "--no-kv-cache is for one streamed completion" "$GEN" "${S[@]}" --prompt '!' --num-samples 2 --no-kv-cache
expect_fail "--logits-out with --num-samples" "--logits-out is for one streamed completion" "$GEN" "${S[@]}" --prompt '!' --num-samples 2 --logits-out "$TMP/lg2"
expect_fail "--stop empty" "--stop" "$GEN" "${S[@]}" --prompt '!' --stop ""
expect_fail "--score with --num-samples" "--score with --prompts, --num-samples or --stop" "$GEN" "${S[@]}" --score "$TMP/p.jsonl" --num-samples 2

echo "test_generate_batch.sh: $checks checks, $fails failed"
[ $fails -eq 0 ]
