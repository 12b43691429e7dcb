#!/usr/bin/env bash
# End-to-end train_gpt2: runs, logs, saves; resume is exact (10 steps straight == 5 steps, stop,
# resume with --out alone, 5 steps, loss for loss); outputs reload.
source "$(dirname "$0")/lib.sh"
MODEL=test/ref/gpt2_tiny
make_shard "$TMP/d_train_000.bin" 6000 100 1
make_shard "$TMP/d_train_001.bin" 3000 100 2
make_shard "$TMP/d_val_000.bin" 2000 100 3
COMMON=(--model "$MODEL" --train-data "$TMP/d_train_*.bin" --val-data "$TMP/d_val_000.bin"
        --batch-size 2 --seq-len 32 --total-batch-tokens 128 --steps 10 --lr 3e-3 --warmup-steps 2
        --schedule cosine --final-lr-frac 0.1 --eval-every 4 --eval-batches 2 --threads 2 --shuffle)

"$BIN_DIR/train_gpt2" "${COMMON[@]}" --out "$TMP/a" > "$TMP/a.log" 2>&1 || { cat "$TMP/a.log"; bad "straight run failed"; }
"$BIN_DIR/train_gpt2" "${COMMON[@]}" --out "$TMP/b" --stop-after 5 > "$TMP/b1.log" 2>&1 || { cat "$TMP/b1.log"; bad "first half failed"; }
[ -f "$TMP/b/DONE_00000005" ] && ok "checkpoint at step 5 complete" || bad "no DONE_00000005"
# the run directory records the settings: --out alone resumes
"$BIN_DIR/train_gpt2" --resume --out "$TMP/b" > "$TMP/b2.log" 2>&1 || { cat "$TMP/b2.log"; bad "resumed half failed"; }
grep -q "resumed: step 5" "$TMP/b2.log" && ok "resumed at step 5" || bad "resume message missing"

strip() { sed -E 's/, "ms": [0-9.]+, "tok_per_s": [0-9.]+, "tflops": [0-9.]+, "mfu": [0-9.a-z]+, "elapsed_s": [0-9.]+//' "$1"; }
if diff <(strip "$TMP/a/log.jsonl") <(strip "$TMP/b/log.jsonl") > "$TMP/diff"; then
  ok "resume is exact: $(grep -c train_loss "$TMP/a/log.jsonl") step losses and $(grep -c val_loss "$TMP/a/log.jsonl") val losses identical"
else
  cat "$TMP/diff"; bad "resumed run differs from the straight run"
fi
first=$(grep -m1 train_loss "$TMP/a/log.jsonl" | sed -E 's/.*"train_loss": ([0-9.e+-]+).*/\1/')
last=$(grep train_loss "$TMP/a/log.jsonl" | tail -1 | sed -E 's/.*"train_loss": ([0-9.e+-]+).*/\1/')
awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < a)}' && ok "loss falls: $first -> $last" || bad "loss did not fall: $first -> $last"

for f in config.json model.safetensors model.bin; do
  [ -s "$TMP/a/$f" ] && ok "final $f written" || bad "final $f missing"
done
# the saved model continues training from where it ended (loads in both formats)
"$BIN_DIR/train_gpt2" --model "$TMP/a/model.bin" --train-data "$TMP/d_train_000.bin" --batch-size 2 --seq-len 32 --steps 1 --threads 2 --out "$TMP/c" > "$TMP/c.log" 2>&1 \
  && ok "final llm.c model.bin loads" || { cat "$TMP/c.log"; bad "model.bin does not load"; }
"$BIN_DIR/train_gpt2" --model "$TMP/a" --train-data "$TMP/d_train_000.bin" --batch-size 2 --seq-len 32 --steps 1 --threads 2 --out "$TMP/d" > "$TMP/d.log" 2>&1 \
  && ok "final HF dir loads" || { cat "$TMP/d.log"; bad "HF dir does not load"; }
l1=$(grep -m1 "step    1/1" "$TMP/c.log" | awk '{print $5}'); l2=$(grep -m1 "step    1/1" "$TMP/d.log" | awk '{print $5}')
[ -n "$l1" ] && [ "$l1" = "$l2" ] && ok "both saved formats give the same loss ($l1)" || bad "saved formats disagree: '$l1' vs '$l2'"

# training from scratch with a size descriptor
"$BIN_DIR/train_gpt2" --model tiny --train-data "$TMP/d_train_000.bin" --batch-size 1 --seq-len 16 --steps 2 --threads 2 --out "$TMP/e" > "$TMP/e.log" 2>&1 \
  && ok "from-scratch tiny model trains" || { cat "$TMP/e.log"; bad "from-scratch run failed"; }
# prompt/completion data end to end: data/prepare writes shards + loss masks, the trainer reads
# them, and the masks change what counts (prompt tokens carry no loss)
PREP="${PREPARE_BIN:-data/prepare}"
if [ -x "$PREP" ]; then
  python3 - "$TMP/sft.jsonl" <<'PY'
import json, sys, random
r = random.Random(3)
with open(sys.argv[1], "w") as f:
    for i in range(300):
        q = " ".join(r.choice(["why", "is", "the", "sky", "blue", "what", "time", "it"]) for _ in range(8))
        f.write(json.dumps({"prompt": "Q: " + q + "?\nA:", "completion": " because " + q.split()[0] + "."}) + "\n")
PY
  "$PREP" --input "$TMP/sft.jsonl" --out-dir "$TMP/sft" --name sft --val-frac 0.2 --quiet
  ls "$TMP"/sft/sft_train_000000.mask "$TMP"/sft/sft_val_000000.mask >/dev/null 2>&1 && ok "data/prepare wrote loss masks" || bad "no mask files"
  S=(--model tiny --train-data "$TMP/sft/sft_train_*.bin" --val-data "$TMP/sft/sft_val_*.bin" --batch-size 2 --seq-len 32 --steps 1 --lr 0 --eval-batches 4 --threads 2)
  "$BIN_DIR/train_gpt2" "${S[@]}" --out "$TMP/sft_masked" > "$TMP/sftm.log" 2>&1 || { tail "$TMP/sftm.log"; bad "training on masked shards failed"; }
  "$PREP" --input "$TMP/sft.jsonl" --out-dir "$TMP/sft_nomask" --name sft --val-frac 0.2 --train-on-inputs --quiet # the same tokens, all trained
  S2=("${S[@]}"); S2[3]="$TMP/sft_nomask/sft_train_*.bin"; S2[5]="$TMP/sft_nomask/sft_val_*.bin"
  "$BIN_DIR/train_gpt2" "${S2[@]}" --out "$TMP/sft_unmasked" > "$TMP/sftu.log" 2>&1 || { tail "$TMP/sftu.log"; bad "training on unmasked shards failed"; }
  vm=$(grep -o '"val_loss": [0-9.e+-]*' "$TMP/sft_masked/log.jsonl" | head -1); vu=$(grep -o '"val_loss": [0-9.e+-]*' "$TMP/sft_unmasked/log.jsonl" | head -1)
  [ -n "$vm" ] && [ -n "$vu" ] && [ "$vm" != "$vu" ] && ok "masked val loss ($vm) differs from unmasked ($vu)" || bad "masks did not change the loss: '$vm' vs '$vu'"
else
  echo "note: $PREP not built; JSONL end-to-end check skipped"
fi
finish
