#!/usr/bin/env bash
# train_lora --lora-plus-ratio (LoRA+) and --lora-rank 0 --lora-bias all (BitFit) end to end on
# the tiny GPT-2 (test/ref/gpt2_tiny) with small random token shards (the numbers themselves are
# test/test_loraplus.c's, against PEFT and transformers):
# - LoRA+: the ratio changes the training (other losses than ratio 1), is recorded in
#   run_config.json, restored on --resume (an interrupted run ends with the uninterrupted run's
#   adapter, byte for byte) and, given again, reported as an optimizer change;
# - BitFit: no adapter; the output is the model directory (transformers) and model.bin, whose
#   non-bias tensors are the base's bytes and whose biases moved; the checkpoints hold only the
#   biases; resuming ends with the same model; --save-gguf writes the model as GGUF; the plan runs;
# - bad input stops with a message naming the flag, exit 1, and nothing written.
source "$(dirname "$0")/lib.sh"
BIN="$BIN_DIR/train_lora"
D="${BUILD:-build}/loraplus_cli"
tiny_data "$D" 11
export OMP_NUM_THREADS=1
BASE=(--model test/ref/gpt2_tiny --train-data "$D/data/tiny_train_*.bin" -b 2 -t 16 --steps 6 --lr 1e-3 --seed 3 --dtype fp32)
losses() { grep '"train_loss"' "$1/log.jsonl" | sed 's/.*"train_loss": \([^,]*\),.*/\1/' | tr '\n' ' '; }

# ---- LoRA+
LP=("${BASE[@]}" --lora-rank 4 --lora-targets c_attn,mlp.c_fc --lora-bias lora_only --save-every 3)
"$BIN" "${LP[@]}" --out "$D/plain" >"$D/plain.log" 2>&1 || { bad "ratio 1 run exited $?"; tail -5 "$D/plain.log"; }
"$BIN" "${LP[@]}" --lora-plus-ratio 16 --out "$D/lp1" >"$D/lp1.log" 2>&1 || { bad "ratio 16 run exited $?"; tail -5 "$D/lp1.log"; }
grep -q '"lora_plus_ratio": 16' "$D/lp1/run_config.json" && grep -q '"lora_plus_ratio": 1\b' "$D/plain/run_config.json" \
  && ok "run_config.json records the ratio" || bad "run_config.json: $(grep lora_plus "$D/lp1/run_config.json" "$D/plain/run_config.json")"
lp=$(losses "$D/lp1"); pl=$(losses "$D/plain")
[ "$(echo "$lp" | cut -d' ' -f1)" = "$(echo "$pl" | cut -d' ' -f1)" ] && [ "$lp" != "$pl" ] \
  && ok "ratio 16 trains otherwise than ratio 1 from the same first loss: $lp vs $pl" || bad "losses: ratio 16 '$lp', ratio 1 '$pl'"
"$BIN" "${LP[@]}" --lora-plus-ratio 16 --stop-after 3 --out "$D/lp2" >"$D/lp2a.log" 2>&1 || bad "interrupted ratio 16 run exited $?"
"$BIN" --resume --out "$D/lp2" >"$D/lp2b.log" 2>&1 || { bad "resume exited $?"; tail -5 "$D/lp2b.log"; }
cmp -s "$D/lp1/adapter_model.safetensors" "$D/lp2/adapter_model.safetensors" && [ "$(losses "$D/lp2")" = "$lp" ] \
  && ok "--resume restores the ratio: the uninterrupted run's adapter and losses" || bad "resumed LoRA+ run differs: $(losses "$D/lp2") vs $lp"
"$BIN" "${LP[@]}" --lora-plus-ratio 16 --stop-after 3 --out "$D/lp3" >/dev/null 2>&1
"$BIN" --resume --out "$D/lp3" --lora-plus-ratio 4 >"$D/lp3b.log" 2>&1 || bad "resume with another ratio exited $?"
grep -q "resume: --lora-plus-ratio 4 (recorded: 16): applies from the next step on" "$D/lp3b.log" \
  && ok "a new ratio on resume is reported as an optimizer change" || bad "resume with ratio 4: $(grep resume: "$D/lp3b.log")"
cmp -s "$D/lp1/adapter_model.safetensors" "$D/lp3/adapter_model.safetensors" && bad "ratio 4 after step 3 ended like ratio 16" \
  || ok "the new ratio applies (another adapter than ratio 16's)"

# ---- BitFit
BF=("${BASE[@]}" --lora-rank 0 --lora-bias all --save-every 3)
"$BIN" "${BF[@]}" --out "$D/bf1" >"$D/bf1.log" 2>&1 || { bad "BitFit run exited $?"; tail -5 "$D/bf1.log"; }
# the biases of 2 layers (ln_1 64, c_attn 192, attn.c_proj 64, ln_2 64, c_fc 256, mlp.c_proj 64) + ln_f's 64
grep -q "trainable: 1472 parameters" "$D/bf1.log" && grep -q "BitFit: no adapter" "$D/bf1.log" \
  && ok "BitFit trains the 1472 biases and no adapter" || bad "BitFit report: $(grep -E 'lora:|trainable' "$D/bf1.log")"
for f in config.json model.safetensors model.bin adapter_00000003/adapter_model.safetensors; do
  [ -f "$D/bf1/$f" ] || bad "BitFit did not write $f"
done
[ -e "$D/bf1/adapter_config.json" ] || [ -e "$D/bf1/adapter_model.safetensors" ] || [ -e "$D/bf1/adapter_00000003/adapter_config.json" ] \
  && bad "BitFit wrote a PEFT adapter (r = 0 is none)" || ok "no PEFT adapter: the output is the model"
python3 - test/ref/gpt2_tiny/model.safetensors "$D/bf1/model.safetensors" "$D/bf1/adapter_00000006/adapter_model.safetensors" <<'PY' \
  && ok "output: the base's bytes but for the biases, which moved and equal the last checkpoint's" || bad "BitFit's output model"
import json, struct, sys
def tensors(path):  # safetensors: u64 header size, JSON header, data
    b = open(path, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
base, out, ck = tensors(sys.argv[1]), tensors(sys.argv[2]), tensors(sys.argv[3])
ok = True
for k, v in base.items():
    if k not in out: continue  # (lm_head is tied)
    if "bias" in k:
        ck_key = "base_model.model." + k
        ok = ok and out[k] != v and ck.get(ck_key) == out[k]
        if out[k] == v or ck.get(ck_key) != out[k]: print("bias", k, "did not move or differs from the checkpoint")
    elif out[k] != v:
        ok = False; print("frozen", k, "changed")
ok = ok and len(ck) == 13 and all(k.endswith("bias") for k in ck)
print("checkpoint tensors:", len(ck))
sys.exit(0 if ok else 1)
PY
"$BIN" "${BF[@]}" --stop-after 3 --out "$D/bf2" >/dev/null 2>&1 || bad "interrupted BitFit run exited $?"
"$BIN" --resume --out "$D/bf2" >"$D/bf2b.log" 2>&1 || { bad "BitFit resume exited $?"; tail -5 "$D/bf2b.log"; }
cmp -s "$D/bf1/model.safetensors" "$D/bf2/model.safetensors" && [ "$(losses "$D/bf2")" = "$(losses "$D/bf1")" ] \
  && ok "a resumed BitFit run ends with the uninterrupted run's model" || bad "resumed BitFit differs"
"$BIN" "${BF[@]}" --out "$D/bfplan" --plan >"$D/plan.log" 2>&1; rc=$?
[ $rc -eq 0 ] && grep -q "^disk: a checkpoint .* (biases .*final outputs .* (model.safetensors .*, model.bin " "$D/plan.log" \
  && ! grep -q -E "adapter|merged/" "$D/plan.log" && [ ! -e "$D/bfplan" ] \
  && ok "--plan of a BitFit run: no adapter, checkpoints of biases, the model written" || { bad "--plan exit $rc"; grep -E "disk|adapter" "$D/plan.log"; }

# BitFit --save-gguf: the model as GGUF (no GGUF LoRA adapter can hold biases), the weights of
# model.bin; on a base with GPT-2's vocabulary (a GGUF file carries its tokenizer)
"$BIN_DIR/train_gpt2" --model tiny --train-data "$D/data/tiny_train_*.bin" -b 2 -t 16 --steps 1 --save-format hf --out "$D/vbase" >/dev/null 2>&1 \
  || bad "train_gpt2 for a base with a vocabulary exited $?"
"$BIN" --model "$D/vbase" --train-data "$D/data/tiny_train_*.bin" -b 2 -t 16 --steps 2 --lora-rank 0 --lora-bias all --save-gguf f32 \
  --out "$D/bfg" >"$D/bfg.log" 2>&1 || { bad "BitFit --save-gguf exited $?"; tail -5 "$D/bfg.log"; }
"$BIN_DIR/convert" --model "$D/bfg/model-f32.gguf" --out "$D/bfg_back.bin" >/dev/null 2>&1 && cmp -s "$D/bfg_back.bin" "$D/bfg/model.bin" \
  && ok "BitFit --save-gguf: model-f32.gguf holds the weights of model.bin" || bad "BitFit's GGUF missing or other than model.bin"

# ---- bad input: exit 1, the flag named, no output
expect_none() { # name, message, args...
  local name="$1" msg="$2"; shift 2
  rm -rf "$D/bad"
  "$BIN" "$@" --out "$D/bad" >"$D/bad.log" 2>&1
  local rc=$?
  if [ $rc -ne 1 ]; then bad "$name: exit $rc (want 1)"; cat "$D/bad.log"; return; fi
  if ! grep -q -- "$msg" "$D/bad.log"; then bad "$name: message lacks '$msg':"; cat "$D/bad.log"; return; fi
  if [ -e "$D/bad" ]; then bad "$name: wrote $D/bad"; return; fi
  ok "$name -> $(grep -m1 '^error' "$D/bad.log")"
}
expect_none "negative ratio" "\-\-lora-plus-ratio" "${BASE[@]}" --lora-plus-ratio -2
expect_none "ratio 0" "lora-plus-ratio 0: the ratio of two learning rates must be positive" "${BASE[@]}" --lora-plus-ratio 0
expect_none "rank 0 without biases" "lora-rank 0 makes no adapter: only --lora-bias all" "${BASE[@]}" --lora-rank 0
expect_none "rank 0 with lora_only biases" "(got --lora-bias lora_only)" "${BASE[@]}" --lora-rank 0 --lora-bias lora_only
expect_none "ratio with rank 0" "lora-plus-ratio 4 with --lora-rank 0" "${BF[@]}" --lora-plus-ratio 4
expect_none "--merge with rank 0" "merge with --lora-rank 0" "${BF[@]}" --merge
expect_none "DPO with rank 0 and no --ref-model" "objective dpo with --lora-rank 0" "${BF[@]}" --objective dpo

finish
