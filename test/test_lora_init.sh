#!/usr/bin/env bash
# train_lora --init end to end on the tiny GPT-2 (test/ref/gpt2_tiny) with small random token
# shards: every initialisation starts from the base's function (the first step's loss is the
# default init's, whose B = 0), --init pissa writes OUT/init_adapter/ (PEFT's initial adapter,
# init_lora_weights true), checkpoints whose adapter_config.json says init_lora_weights "pissa",
# and a final adapter converted to a plain rank-2r LoRA of the original base (r 4, lora_alpha 8,
# init_lora_weights true) that --merge, convert and generate read; convert reads the checkpoint
# form as PEFT does (the same merged model) but not as a GGUF LoRA adapter, and refuses an
# "olora" one; run_config.json records the
# init; an interrupted run resumed ends with a byte-identical adapter and the same losses; bad
# values and combinations stop with one message naming the flag, exit 1, and write no --out.
source "$(dirname "$0")/lib.sh"
BIN="$BIN_DIR/train_lora"
D="${BUILD:-build}/lora_init_cli"
tiny_data "$D" 3

export OMP_NUM_THREADS=1
COMMON=(--model test/ref/gpt2_tiny --train-data "$D/data/tiny_train_*.bin" -b 2 -t 16 --steps 6 --lr 1e-3 --dtype fp32
        --lora-rank 2 --lora-alpha 4 --lora-targets c_attn,c_proj --save-every 3 --seed 5)

first_loss() { grep -m1 '"train_loss"' "$1/log.jsonl" | sed 's/.*"train_loss": \([^,]*\),.*/\1/'; }
losses() { grep '"train_loss"' "$1/log.jsonl" | sed 's/.*"train_loss": \([^,]*\),.*/\1/' | tr '\n' ' '; }

# ---- every init keeps the base's function at step 0
for init in default gaussian pissa olora; do
  "$BIN" "${COMMON[@]}" --init "$init" --out "$D/$init" >"$D/$init.log" 2>&1 || { bad "--init $init exited $?"; tail -20 "$D/$init.log"; }
done
l0=$(first_loss "$D/default")
for init in gaussian pissa olora; do
  li=$(first_loss "$D/$init")
  python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= 1e-5 * abs(b) else 1)" "$li" "$l0" \
    && ok "--init $init: first loss $li = the base's $l0" || bad "--init $init: first loss $li, the base's (default init) $l0"
done
[ "$(losses "$D/pissa")" != "$(losses "$D/default")" ] && ok "pissa trains differently from the default init" || bad "pissa's losses are the default's"
grep -q '"init": "pissa"' "$D/pissa/run_config.json" && ok "run_config.json records init pissa" || bad "run_config.json lacks the init"

# ---- what a PiSSA run writes
P="$D/pissa"
for f in init_adapter/adapter_config.json init_adapter/adapter_model.safetensors adapter_00000003/adapter_config.json adapter_config.json; do
  [ -f "$P/$f" ] || bad "--init pissa did not write $f"
done
grep -q '"init_lora_weights": true' "$P/init_adapter/adapter_config.json" && grep -q '"r": 2,' "$P/init_adapter/adapter_config.json" \
  && ok "init_adapter/: the initial adapter, init_lora_weights true" || bad "init_adapter/adapter_config.json: $(cat "$P/init_adapter/adapter_config.json")"
grep -q '"init_lora_weights": "pissa"' "$P/adapter_00000003/adapter_config.json" \
  && ok "checkpoint adapter: init_lora_weights \"pissa\" (the factors of the residual base)" || bad "checkpoint config lacks init pissa"
grep -q '"r": 4,' "$P/adapter_config.json" && grep -q '"lora_alpha": 8,' "$P/adapter_config.json" && grep -q '"init_lora_weights": true' "$P/adapter_config.json" \
  && ok "final adapter: a plain rank-4 LoRA of the original base (lora_alpha 8)" || bad "final adapter config: $(cat "$P/adapter_config.json")"
"$BIN_DIR/convert" --model test/ref/gpt2_tiny --adapter "$P" --out "$D/merged_final" >/dev/null 2>&1 \
  && ok "convert merges the final adapter" || bad "convert --adapter on the final pissa adapter failed"
# the checkpoint form (init_lora_weights "pissa") is read as PEFT reads it: the base rewritten to the
# PiSSA residual first; merged, the last checkpoint is the final adapter's model
"$BIN_DIR/convert" --model test/ref/gpt2_tiny --adapter "$P/adapter_00000006" --out "$D/merged_ckpt" >/dev/null 2>&1 \
  && ok "convert merges the checkpoint form" || bad "convert --adapter on the pissa checkpoint failed"
val_of() { # model dir -> the val loss train_lora reports for it at step 0 (fp32)
  "$BIN" --model "$1" --train-data "$D/data/tiny_train_*.bin" --val-data "$D/data/tiny_val_*.bin" -b 2 -t 16 --steps 1 \
    --lr 0 --dtype fp32 --eval-every 1 --lora-rank 2 --lora-alpha 4 --out "$2" >"$2.log" 2>&1 || bad "eval of $1 exited $?"
  grep '"val_loss"' "$2/log.jsonl" | head -1 | sed 's/.*"val_loss": \([^,}]*\).*/\1/'
}
close() { python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= 1e-5 * abs(b) else 1)" "$1" "$2"; }
vf=$(val_of "$D/merged_final" "$D/eval_final"); vc=$(val_of "$D/merged_ckpt" "$D/eval_ckpt")
close "$vc" "$vf" && ok "the merged checkpoint form's val loss $vc = the merged final adapter's $vf" || bad "merged checkpoint $vc, final $vf"
# train_lora --adapter on the checkpoint form (--lr 0: nothing moves) saves it converted: the same model
"$BIN" --model test/ref/gpt2_tiny --train-data "$D/data/tiny_train_*.bin" -b 2 -t 16 --steps 1 --lr 0 --dtype fp32 \
  --adapter "$P/adapter_00000006" --merge --out "$D/cont" >"$D/cont.log" 2>&1 || { bad "--adapter on the pissa checkpoint exited $?"; tail -5 "$D/cont.log"; }
grep -q '"r": 4,' "$D/cont/adapter_config.json" && grep -q '"init_lora_weights": true' "$D/cont/adapter_config.json" \
  && ok "continued from the checkpoint form: saved as a plain rank-4 LoRA" || bad "continued adapter config: $(grep -E '"r"|init_lora' "$D/cont/adapter_config.json")"
vk=$(val_of "$D/cont/merged" "$D/eval_cont")
close "$vk" "$vf" && ok "continued from the checkpoint form: merged val loss $vk = $vf" || bad "continued: merged val loss $vk, want $vf"
expect_fail "convert --to gguf-lora of the checkpoint form" "GGUF LoRA adapter cannot carry" \
  "$BIN_DIR/convert" --model test/ref/gpt2_tiny --adapter "$P/adapter_00000006" --to gguf-lora --out "$D/ckpt.gguf"
expect_fail "convert on an olora checkpoint (PEFT's olora on GPT-2 is not ours)" 'init_lora_weights "olora"' \
  "$BIN_DIR/convert" --model test/ref/gpt2_tiny --adapter "$D/olora/adapter_00000003" --out "$D/conv_olora"

# ---- --merge: the merged model's loss on the data equals the adapted model's last eval
"$BIN" "${COMMON[@]}" --init olora --val-data "$D/data/tiny_val_*.bin" --eval-every 6 --merge --out "$D/olora_merge" >"$D/olora_merge.log" 2>&1 \
  || { bad "--init olora --merge exited $?"; tail -20 "$D/olora_merge.log"; }
v_run=$(grep '"val_loss"' "$D/olora_merge/log.jsonl" | tail -1 | sed 's/.*"val_loss": \([^,}]*\).*/\1/')
v_merged=$(val_of "$D/olora_merge/merged" "$D/merged_eval")
close "$v_merged" "$v_run" && ok "olora --merge: the merged model's val loss $v_merged = the run's $v_run" || bad "merged val loss $v_merged, the run's $v_run"

# ---- interrupted, resumed: the same adapter and losses (the residual base from init_adapter/)
"$BIN" "${COMMON[@]}" --init pissa --stop-after 3 --out "$D/pissa2" >"$D/pissa2a.log" 2>&1 || bad "pissa2 (first part) exited $?"
"$BIN" "${COMMON[@]}" --init pissa --resume --out "$D/pissa2" >"$D/pissa2b.log" 2>&1 || { bad "pissa2 (resume) exited $?"; tail -20 "$D/pissa2b.log"; }
grep -q "resumed: step 3" "$D/pissa2b.log" || bad "resume did not start at step 3"
cmp -s "$P/adapter_model.safetensors" "$D/pissa2/adapter_model.safetensors" \
  && ok "resumed pissa run ends with a byte-identical adapter" || bad "resumed pissa adapter differs from the uninterrupted run's"
[ "$(losses "$P")" = "$(losses "$D/pissa2")" ] && ok "resumed pissa run: the same losses" || bad "losses differ: '$(losses "$P")' vs '$(losses "$D/pissa2")'"
expect_fail "resume with another --init" "init" "$BIN" "${COMMON[@]}" --init olora --resume --out "$D/pissa2"
mv "$D/pissa2/init_adapter" "$D/pissa2/init_moved"
expect_fail "resume without init_adapter/" "init_adapter/adapter_model.safetensors" "$BIN" "${COMMON[@]}" --init pissa --resume --out "$D/pissa2"
mv "$D/pissa2/init_moved" "$D/pissa2/init_adapter"

# ---- bad values and combinations: refused by name, nothing written
nothing_written() { [ ! -e "$D/$1" ] && ok "$1: no --out written" || bad "$1: --out was created"; }
expect_fail "--init unknown" "--init" "$BIN" "${COMMON[@]}" --init kaiming --out "$D/bad1"; nothing_written bad1
expect_fail "--init pissa --qlora" "--qlora" "$BIN" "${COMMON[@]}" --init pissa --qlora --out "$D/bad2"; nothing_written bad2
expect_fail "--init olora on q,v" "--lora-targets c_attn" "$BIN" "${COMMON[@]}" --init olora --lora-targets q,v --out "$D/bad3"; nothing_written bad3
expect_fail "--init gaussian --adapter" "--adapter" "$BIN" "${COMMON[@]}" --init gaussian --adapter "$P" --out "$D/bad4"; nothing_written bad4
expect_fail "--init pissa --save-gguf" "--merge" "$BIN" "${COMMON[@]}" --init pissa --save-gguf f32 --out "$D/bad5"; nothing_written bad5
expect_fail "--init pissa --objective dpo" "--ref-model" "$BIN" "${COMMON[@]}" --init pissa --objective dpo --out "$D/bad7"; nothing_written bad7
grep -q "init pissa" "$D/pissa.log" && ok "the report names the init" || bad "the report does not name the init: $(grep 'lora:' "$D/pissa.log")"
expect_fail "--init pissa with BitFit (--lora-rank 0)" "BitFit" "$BIN" "${COMMON[@]}" --init pissa --lora-rank 0 --lora-bias all --out "$D/bad8"; nothing_written bad8
expect_fail "--init pissa rank above the weight's" "--lora-rank" "$BIN" "${COMMON[@]}" --init pissa --lora-rank 65 --out "$D/bad6"; nothing_written bad6

finish
