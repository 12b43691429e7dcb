#!/usr/bin/env bash
# train_lora --dora (DoRA, PEFT use_dora) end to end on the tiny GPT-2 (test/ref/gpt2_tiny) with
# small random token shards; the numbers against PEFT and bitsandbytes are test_lora's,
# test_loraplus's and test_qlora's:
# - the report says DoRA, run_config.json records it, the adapter is PEFT's use_dora one (a
#   lora_magnitude_vector of the layer's outputs beside every lora_A / lora_B);
# - an interrupted run resumes to the uninterrupted run's adapter and losses, byte for byte; a run
#   without --dora does not resume with it;
# - --merge writes convert --model BASE --adapter DIR's merge, byte for byte; QDoRA (--qlora) trains
#   and merges;
# - generate with the adapter (its norms computed once) scores a text as the merged model does;
#   over a Q8_0 GGUF base --weights q8_0 is refused and auto runs the base dense;
# - refusals, each naming the flag: --dora with --lora-rank 0, a q/k/v split, --init pissa,
#   --save-gguf without --merge (also for a DoRA --adapter DIR); convert --to gguf-lora of a DoRA adapter.
source "$(dirname "$0")/lib.sh"
BIN="$BIN_DIR/train_lora"
D="${BUILD:-build}/dora_cli"
tiny_data "$D" 13
export OMP_NUM_THREADS=1
BASE=(--model test/ref/gpt2_tiny --train-data "$D/data/tiny_train_*.bin" -b 2 -t 16 --steps 6 --lr 1e-2 --seed 3 --dtype fp32)
DR=("${BASE[@]}" --lora-rank 4 --lora-targets c_attn,mlp.c_fc --dora --save-every 3)
losses() { grep '"train_loss"' "$1/log.jsonl" | sed 's/.*"train_loss": \([^,]*\),.*/\1/' | tr '\n' ' '; }

"$BIN" "${DR[@]}" --merge --out "$D/d1" >"$D/d1.log" 2>&1 || { bad "--dora run exited $?"; tail -5 "$D/d1.log"; }
grep -q "DoRA" "$D/d1.log" && grep -q '"dora": true' "$D/d1/run_config.json" \
  && ok "the report and run_config.json say DoRA" || bad "DoRA not reported: $(grep -m1 'lora' "$D/d1.log")"
python3 - "$D/d1/adapter_config.json" "$D/d1/adapter_model.safetensors" <<'PY' \
  && ok "the adapter is PEFT's use_dora: a magnitude of each layer's outputs beside lora_A / lora_B" || bad "the DoRA adapter's files"
import json, struct, sys
cfg = json.load(open(sys.argv[1]))
b = open(sys.argv[2], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
mags = {k: v["shape"] for k, v in h.items() if k.endswith(".lora_magnitude_vector")}
outs = {"attn.c_attn": 192, "mlp.c_fc": 256}
want = {"base_model.model.transformer.h.%d.%s.lora_magnitude_vector" % (l, m): [o] for l in range(2) for m, o in outs.items()}
print("use_dora", cfg["use_dora"], "magnitudes", mags)
sys.exit(0 if cfg["use_dora"] is True and mags == want and len(h) - ("__metadata__" in h) == 3 * len(want) else 1)
PY

# resume
"$BIN" "${DR[@]}" --merge --stop-after 3 --out "$D/d2" >"$D/d2a.log" 2>&1 || bad "interrupted --dora run exited $?"
"$BIN" --resume --out "$D/d2" >"$D/d2b.log" 2>&1 || { bad "resume exited $?"; tail -5 "$D/d2b.log"; }
cmp -s "$D/d1/adapter_model.safetensors" "$D/d2/adapter_model.safetensors" && [ "$(losses "$D/d2")" = "$(losses "$D/d1")" ] \
  && ok "--resume: the uninterrupted run's adapter and losses" || bad "resumed DoRA run differs: $(losses "$D/d2") vs $(losses "$D/d1")"
"$BIN" "${BASE[@]}" --lora-rank 4 --lora-targets c_attn,mlp.c_fc --save-every 3 --stop-after 3 --out "$D/p1" >/dev/null 2>&1 || bad "plain LoRA run exited $?"
expect_fail "a plain LoRA run resumed with --dora" "--dora" "$BIN" --resume --out "$D/p1" --dora

# merge
"$BIN_DIR/convert" --model test/ref/gpt2_tiny --adapter "$D/d1" --out "$D/d1_convert.bin" >"$D/convert.log" 2>&1 || bad "convert --adapter of a DoRA adapter failed"
cmp -s "$D/d1/merged/model.bin" "$D/d1_convert.bin" \
  && ok "--merge: merged/model.bin is convert --model BASE --adapter DIR's, byte for byte" || bad "--merge differs from convert's DoRA merge"
cmp -s "$D/d1/merged/model.bin" "$D/d2/merged/model.bin" && ok "the resumed run merges to the same bytes" || bad "the resumed run's merge differs"
"$BIN" "${DR[@]}" --qlora --merge --out "$D/q1" >"$D/q1.log" 2>&1 && [ -f "$D/q1/merged/model.bin" ] && grep -q "DoRA" "$D/q1.log" \
  && ok "QDoRA (--qlora --dora) trains and merges" || { bad "QDoRA run exited $?"; tail -5 "$D/q1.log"; }

# generate: the adapter over its base scores a text as the merged model does (a model of GPT-2's vocabulary)
make_shard "$D/gpt2vocab.bin" 2000 50257 5
"$BIN_DIR/train_gpt2" --model tiny --train-data "$D/gpt2vocab.bin" -b 1 -t 32 --steps 1 --save-format hf --out "$D/g0" >"$D/g0.log" 2>&1 \
  || { bad "train_gpt2 tiny exited $?"; tail -5 "$D/g0.log"; }
"$BIN" --model "$D/g0" --train-data "$D/gpt2vocab.bin" -b 1 -t 32 --steps 3 --lr 1e-2 --lora-targets all-linear --dora --merge \
  --save-format hf --dtype fp32 --out "$D/g1" >"$D/g1.log" 2>&1 || { bad "train_lora --dora on GPT-2's vocabulary exited $?"; tail -5 "$D/g1.log"; }
echo '{"text": "The quick brown fox jumps over the lazy dog, and the dog does not mind."}' >"$D/s.jsonl"
"$BIN_DIR/generate" --model "$D/g0" --adapter "$D/g1" --score "$D/s.jsonl" --dtype fp32 >"$D/s_adapter.jsonl" 2>"$D/s_adapter.err" || bad "generate --adapter --score: $(tail -2 "$D/s_adapter.err")"
"$BIN_DIR/generate" --model "$D/g1/merged" --score "$D/s.jsonl" --dtype fp32 >"$D/s_merged.jsonl" 2>"$D/s_merged.err" || bad "generate --score of the merged model: $(tail -2 "$D/s_merged.err")"
"$BIN_DIR/generate" --model "$D/g0" --score "$D/s.jsonl" --dtype fp32 >"$D/s_base.jsonl" 2>/dev/null || bad "generate --score of the base"
python3 - "$D/s_adapter.jsonl" "$D/s_merged.jsonl" "$D/s_base.jsonl" <<'PY' \
  && ok "generate --adapter (DoRA) scores the text as the merged model does, and not as the base" || bad "DoRA scores: $(cat "$D/s_adapter.jsonl" "$D/s_merged.jsonl" "$D/s_base.jsonl")"
import json, sys
a, m, b = (json.loads(open(p).readline())["logprob"] for p in sys.argv[1:4])
print("adapter %.6f merged %.6f base %.6f" % (a, m, b))
sys.exit(0 if abs(a - m) < 1e-4 * abs(m) and abs(a - b) > 1e-3 else 1)
PY
# over a Q8_0 base: --weights q8_0 refused (the norms need the dense weight), auto runs dense
"$BIN_DIR/convert" --model "$D/g0" --out "$D/g0_q8.gguf" --gguf-type q8_0 >"$D/q8.log" 2>&1 || bad "convert to Q8_0 GGUF: $(tail -2 "$D/q8.log")"
expect_fail "generate --weights q8_0 under a DoRA adapter" "DoRA adapter over Q8_0" \
  "$BIN_DIR/generate" --model "$D/g0_q8.gguf" --adapter "$D/g1" --prompt hi -g 2 --weights q8_0
"$BIN_DIR/generate" --model "$D/g0_q8.gguf" --adapter "$D/g1" --prompt hi -g 2 >/dev/null 2>"$D/q8auto.err" && grep -q "dtype" "$D/q8auto.err" \
  && ! grep -q "in Q8_0" "$D/q8auto.err" && ok "--weights auto under a DoRA adapter over a Q8_0 file: dense" || bad "auto with DoRA: $(tail -3 "$D/q8auto.err")"

# refusals
expect_fail "--dora with --lora-rank 0" "--dora with --lora-rank 0" "$BIN" "${BASE[@]}" --lora-rank 0 --lora-bias all --dora --out "$D/bad1"
expect_fail "--dora with a q/k/v split" "--dora decomposes whole layers" "$BIN" "${BASE[@]}" --lora-targets q,v --dora --out "$D/bad2"
expect_fail "--dora with --init pissa" "--dora with --init pissa" "$BIN" "${BASE[@]}" --init pissa --dora --out "$D/bad3"
expect_fail "--dora --save-gguf without --merge" "has no DoRA magnitude" "$BIN" "${BASE[@]}" --dora --save-gguf f16 --out "$D/bad4"
expect_fail "--adapter of a DoRA adapter, --save-gguf without --merge (at start, before training)" "the adapter is DoRA" \
  "$BIN" --model "$D/g0" --train-data "$D/gpt2vocab.bin" -b 1 -t 32 --steps 2 --adapter "$D/g1" --save-gguf f16 --out "$D/bad5"
for b in bad1 bad2 bad3 bad4 bad5; do [ -e "$D/$b" ] && bad "$b: the refused run wrote $D/$b"; done
expect_fail "convert --to gguf-lora of a DoRA adapter" "no magnitude vector" \
  "$BIN_DIR/convert" --model test/ref/gpt2_tiny --adapter "$D/d1" --to gguf-lora --out "$D/d1.gguf"
[ -e "$D/d1.gguf" ] && bad "the refused convert wrote $D/d1.gguf"
finish
