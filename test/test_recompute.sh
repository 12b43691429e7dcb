#!/usr/bin/env bash
# train_gpt2 --recompute 0|1|2: the same losses step for step, and the memory report's activation
# figure shrinks with each level (bit-identity of every gradient: test/test_recompute.c).
source "$(dirname "$0")/lib.sh"
make_shard "$TMP/d_000.bin" 3000 100 5
COMMON=(--model test/ref/gpt2_tiny --train-data "$TMP/d_000.bin" --batch-size 4 --seq-len 64 --steps 3 --lr 3e-3 --threads 2)
for k in 0 1 2; do
  "$BIN_DIR/train_gpt2" "${COMMON[@]}" --recompute $k --out "$TMP/r$k" > "$TMP/r$k.log" 2>&1 || { cat "$TMP/r$k.log"; bad "--recompute $k failed"; }
done
losses() { grep -E '^step ' "$1" | awk '{print $2, $5}'; }
act() { grep -m1 'memory (this rank)' "$1" | sed -E 's/.*activations ([0-9.]+) MiB.*/\1/'; }
[ -n "$(losses "$TMP/r0.log")" ] || bad "no step lines in the log"
for k in 1 2; do
  if diff <(losses "$TMP/r0.log") <(losses "$TMP/r$k.log") > /dev/null; then ok "--recompute $k: the same losses as --recompute 0"
  else bad "--recompute $k changes the losses"; diff <(losses "$TMP/r0.log") <(losses "$TMP/r$k.log"); fi
done
grep -q 'recompute 2' "$TMP/r2.log" && ok "memory report states the recompute level" || bad "memory report without the recompute level"
a0=$(act "$TMP/r0.log"); a1=$(act "$TMP/r1.log"); a2=$(act "$TMP/r2.log")
awk -v a="$a0" -v b="$a1" -v c="$a2" 'BEGIN{exit !(a > b && b > c)}' && ok "activations shrink: $a0 > $a1 > $a2 MiB" \
  || bad "activations do not shrink: $a0, $a1, $a2 MiB"
"$BIN_DIR/train_gpt2" "${COMMON[@]}" --recompute 3 > "$TMP/bad.log" 2>&1 && bad "--recompute 3 accepted" || \
  { grep -q -- '--recompute' "$TMP/bad.log" && ok "--recompute 3 refused with a message naming the flag" || { cat "$TMP/bad.log"; bad "no message for --recompute 3"; }; }
finish
