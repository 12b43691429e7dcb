#!/usr/bin/env bash
# LoRA+ (--lora-plus-ratio), BitFit (--lora-rank 0 --lora-bias all) and DoRA (--dora) under mpirun: 2 ranks at
# ZeRO 0, 1, 2 and 3 give the losses of a single process with the same global batch (with LoRA+,
# ZeRO's shards cut across the per-A / per-B optimizer segments; BitFit's trained biases are the
# whole trainable space; DoRA with LoRA+: the magnitudes after each B, in B's segment), and a LoRA+
# run differs from plain LoRA's (the ratio reaches every rank).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_mpi.sh"
train_setup
LP=("${LORA[@]}" --lora-plus-ratio 16)
BF=(--lora-rank 0 --lora-bias all)
DR=("${LORA[@]}" --dora --lora-plus-ratio 4)
for v in lp bf dr; do
  case $v in lp) extra=("${LP[@]}") ;; bf) extra=("${BF[@]}") ;; dr) extra=("${DR[@]}") ;; esac
  "$BIN_DIR/train_lora" "${COMMON[@]}" "${extra[@]}" --out "$TMP/${v}_ref" > "$TMP/${v}_ref.log" 2>&1 || { tail -5 "$TMP/${v}_ref.log"; bad "$v: single process failed"; }
  for z in 0 1 2 3; do
    d="$TMP/${v}_z$z"
    if timeout 120 mpirun -np 2 "$BIN_DIR/train_lora" "${COMMON[@]}" "${extra[@]}" --zero $z --out "$d" > "$d.log" 2>&1; then
      cmp_losses "$v np=2 zero=$z matches one process" "$TMP/${v}_ref" "$d" 1e-5
    else tail -20 "$d.log"; bad "$v np=2 zero=$z failed"; fi
  done
done
timeout 120 mpirun -np 2 "$BIN_DIR/train_lora" "${COMMON[@]}" "${LORA[@]}" --zero 1 --out "$TMP/plain" > "$TMP/plain.log" 2>&1 || bad "plain LoRA np=2 failed"
[ "$(losses "$TMP/plain" | tail -1)" != "$(losses "$TMP/lp_z1" | tail -1)" ] && ok "LoRA+ on 2 ranks trains otherwise than plain LoRA" \
  || bad "LoRA+ on 2 ranks ends with plain LoRA's loss"
finish
