#!/usr/bin/env bash
# generate --weights q8_0: the linear weights and the lm_head in llama.cpp's Q8_0 blocks.
# - auto picks them for a Q8_0 GGUF model (the report says so), not for an F16 one;
# - a Q8_0 file's blocks are used as they are: its greedy tokens and logits are byte for byte
#   those of its dequantized weights (a .bin) under --weights q8_0, quantized here as llama.cpp
#   quantizes (Q8_0 values quantize back to the same blocks);
# - the products are of the exact block values: token by token (the few-row kernel) the logits, and
#   --score's log-probabilities (many rows: dequantized panels), agree with the dense fp32 run on the
#   same (dequantized) weights to rounding;
# - N samples decoded together give, greedy, the streamed text N times (the few-row kernel's sums
#   are the same for a row whatever rows share its pass);
# - a bad --weights value is refused, naming the flag.
source "$(dirname "$0")/lib.sh"
GEN="$BIN_DIR/generate"
CONV="$BIN_DIR/convert"
"$CONV" --model tiny --seed 5 --out "$TMP/f32.bin" > "$TMP/c.log" 2>&1 || { cat "$TMP/c.log"; bad "convert to .bin"; }
"$CONV" --model "$TMP/f32.bin" --out "$TMP/q8.gguf" --gguf-type q8_0 > "$TMP/c.log" 2>&1 || { cat "$TMP/c.log"; bad "convert to Q8_0 GGUF"; }
"$CONV" --model "$TMP/f32.bin" --out "$TMP/f16.gguf" --gguf-type f16 > "$TMP/c.log" 2>&1 || { cat "$TMP/c.log"; bad "convert to F16 GGUF"; }
run() { "$GEN" --threads 2 --dtype fp32 --prompt "Once upon a time" -g 24 --temperature 0 "$@"; }

run --model "$TMP/q8.gguf" > "$TMP/a.txt" 2> "$TMP/a.err" || { cat "$TMP/a.err"; bad "generate on the Q8_0 file"; }
grep -q "in Q8_0" "$TMP/a.err" && ok "auto: a Q8_0 GGUF model runs on its Q8_0 blocks" || bad "auto did not pick Q8_0: $(grep dtype "$TMP/a.err")"
run --model "$TMP/f16.gguf" > /dev/null 2> "$TMP/b.err" || { cat "$TMP/b.err"; bad "generate on the F16 file"; }
grep -q "dtype" "$TMP/b.err" && ! grep -q "in Q8_0" "$TMP/b.err" && ok "auto: an F16 GGUF model runs dense" || bad "F16 file: $(grep dtype "$TMP/b.err")"

# the same weights dense: the Q8_0 file dequantized (a .bin holds exactly those fp32 values)
"$CONV" --model "$TMP/q8.gguf" --out "$TMP/deq.bin" > "$TMP/c.log" 2>&1 || { cat "$TMP/c.log"; bad "convert the Q8_0 file to .bin"; }
run --model "$TMP/q8.gguf" --logits-out "$TMP/l_file" > "$TMP/t_file" 2> "$TMP/e" || { cat "$TMP/e"; bad "--logits-out on the Q8_0 file"; }
run --model "$TMP/deq.bin" --weights q8_0 --logits-out "$TMP/l_src" > "$TMP/t_src" 2> "$TMP/e" || { cat "$TMP/e"; bad "--weights q8_0 on the dequantized weights"; }
[ -s "$TMP/l_file" ] && cmp -s "$TMP/l_file" "$TMP/l_src" && cmp -s "$TMP/t_file" "$TMP/t_src" \
  && ok "the Q8_0 file's blocks are used as they are: its dequantized values quantized here give its tokens and logits byte for byte" \
  || bad "Q8_0 file vs --weights q8_0 of its dequantized weights: $(diff "$TMP/l_file" "$TMP/l_src" | head -4)"
run --model "$TMP/deq.bin" --weights dense --logits-out "$TMP/l_dense" > /dev/null 2> "$TMP/e" || { cat "$TMP/e"; bad "dense run"; }
python3 - "$TMP/l_file" "$TMP/l_dense" <<'PY' && ok "token by token: the few-row Q8_0 kernel's logits = dense fp32's to rounding" || bad "Q8_0 vs dense logits"
import sys
a = [l.split() for l in open(sys.argv[1])]; b = [l.split() for l in open(sys.argv[2])]
n, worst = 0, 0.0
for x, y in zip(a, b):   # the same tokens up to a near tie (either choice is right there)
    if x[0] != y[0]: break
    n += 1
    worst = max(worst, abs(float(x[1]) - float(y[1])) / max(1.0, abs(float(y[1]))))
    if float(y[1]) - float(y[2]) < 1e-3: break
print("tokens compared", n, "of", len(a), "worst relative difference of the top logit", worst)
sys.exit(0 if len(a) == len(b) == 24 and n >= 1 and worst < 1e-5 else 1)
PY
{ echo '{"text": "Once upon a time there was a quick brown fox that jumped over the lazy dog, and then it ran away into the woods"}'
  echo '{"prompt": "Hello", "completion": " world"}'
  echo '{"text": "A short one."}'; } > "$TMP/s.jsonl"
"$GEN" --model "$TMP/q8.gguf" --dtype fp32 --score "$TMP/s.jsonl" --out "$TMP/s_q8.jsonl" 2> "$TMP/e" || { cat "$TMP/e"; bad "--score on Q8_0"; }
"$GEN" --model "$TMP/deq.bin" --dtype fp32 --score "$TMP/s.jsonl" --out "$TMP/s_dense.jsonl" 2> "$TMP/e" || { cat "$TMP/e"; bad "--score dense"; }
python3 - "$TMP/s_q8.jsonl" "$TMP/s_dense.jsonl" <<'PY' && ok "--score: Q8_0 products = dense fp32 on the dequantized weights, to rounding" || bad "--score Q8_0 vs dense"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]; b = [json.loads(l) for l in open(sys.argv[2])]
worst = max(abs(x["logprob"] - y["logprob"]) / max(1.0, abs(y["logprob"])) for x, y in zip(a, b))
print("records", len(a), "tokens", [x["tokens"] for x in a], "worst relative difference", worst)
sys.exit(0 if len(a) == len(b) == 3 and a[0]["tokens"] >= 16 and all(x["tokens"] == y["tokens"] for x, y in zip(a, b)) and worst < 1e-5 else 1)
PY

"$GEN" --model "$TMP/q8.gguf" --threads 2 --dtype fp32 --prompt "Once upon a time" -g 24 --temperature 0 --num-samples 4 \
    --out "$TMP/n4.jsonl" 2> "$TMP/e" || { cat "$TMP/e"; bad "--num-samples 4 on Q8_0"; }
python3 - "$TMP/n4.jsonl" "$TMP/t_file" <<'PY' && ok "4 greedy samples decoded together = the streamed text, 4 times" || bad "batched Q8_0 samples differ from the stream"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
stream = open(sys.argv[2]).read()
print(len(rows), "samples;", repr(stream[:60]))
sys.exit(0 if len(rows) == 4 and all("Once upon a time" + r["text"] == stream.rstrip("\n") or r["text"] == stream.rstrip("\n") for r in rows) else 1)
PY

expect_fail "--weights q4" "--weights" "$GEN" --model "$TMP/q8.gguf" --prompt hi --weights q4
echo "test_generate_q8.sh: $checks checks, $fails failed"
[ $fails -eq 0 ]
