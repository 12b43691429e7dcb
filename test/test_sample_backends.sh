#!/usr/bin/env bash
# Sampling with a LoRA adapter on the CUDA path gives the CPU path's greedy tokens, for as long as
# the logits let two roundings agree. `generate --adapter` of the CPU build (--dtype fp32) and of
# the harness build of the CUDA backend (mk/gpucheck.mk: bf16 activations and GEMM operands, every
# kernel run on the CPU) continue the same prompts with the same adapter, each writing per token
# its id and its two largest logits (--logits-out). Token by token, while the CPU's margin
# top1 - top2 exceeds a bf16 tolerance, the CUDA path must choose the same token; at the first
# step where it does not, the comparison stops (two roundings may then rightly differ, and the
# contexts with them), and at least MIN_STEPS steps must have been compared.
#
# The tolerance: the CUDA path rounds each GEMM's operands and every stored activation to bf16
# (2^-8 relative); through two blocks and the lm_head a logit of size L moves by a few such ulps,
# so 2^-5 max(1, |top1|) (eight of them) separates a real difference from rounding (measured here:
# at most ~2^-8 |top1|).
#
# The model: `tiny` (2 layers, 64 channels, GPT-2's vocabulary) trained for a few seconds on two
# paragraphs repeated in random order, so its logits are peaked; the adapter (rank 8, every linear
# layer) trained on one of them, enough to change the base's greedy tokens (checked: an adapter
# that did nothing would test nothing).
source "$(dirname "$0")/lib.sh"
BUILD="${BUILD:-build/cpu}"
CUDA_GEN="$BUILD/gpucheck/emu/generate"
PREP="${PREPARE_BIN:-data/prepare}"
[ -x "$CUDA_GEN" ] || { bad "$CUDA_GEN not built (make gpucheck-emu)"; finish; exit 1; }
MIN_STEPS=16; N=32

python3 - "$TMP" <<'PY'
import random, sys
a = ("the sun rose over the hills and the birds sang in the old trees while the river ran past the mill and "
     "into the grey sea where the boats waited for the wind to turn")
b = ("ROMEO: the night is long / and the moon is high over the quiet city / JULIET: then stay a while / "
     "the morning is far and the streets are empty / ROMEO: I will stay until the bells ring")
r = random.Random(1)
open(sys.argv[1] + "/ab.txt", "w").write("".join(r.choice([a, b]) + "\n" for _ in range(600)))
open(sys.argv[1] + "/b.txt", "w").write((b + "\n") * 300)
PY
"$PREP" --input "$TMP/ab.txt" --out-dir "$TMP/ab" > /dev/null && "$PREP" --input "$TMP/b.txt" --out-dir "$TMP/b" > /dev/null \
  || { bad "data/prepare failed"; finish; exit 1; }
train=(--batch-size 8 --seq-len 32 --seed 1 --threads 2 --dtype fp32)
"$BIN_DIR/train_gpt2" --model tiny --train-data "$TMP/ab/ab_train_*.bin" --steps 100 --lr 5e-3 --warmup-steps 5 \
    --save-format hf --out "$TMP/base" "${train[@]}" > "$TMP/base.log" 2>&1 \
  && "$BIN_DIR/train_lora" --model "$TMP/base" --train-data "$TMP/b/b_train_*.bin" --steps 20 --lr 2e-3 --warmup-steps 2 \
    --lora-rank 8 --lora-targets all-linear --out "$TMP/lora" "${train[@]}" > "$TMP/lora.log" 2>&1 \
  || { bad "training the base or the adapter failed: $(tail -n 3 "$TMP/base.log" "$TMP/lora.log")"; finish; exit 1; }

changed=0
for prompt in "the sun rose" "ROMEO: the night"; do
  gen=(--prompt "$prompt" --max-new-tokens $N --temperature 0 --quiet)
  "$BIN_DIR/generate" --model "$TMP/base" "${gen[@]}" --dtype fp32 --threads 2 --logits-out "$TMP/base.txt" > /dev/null 2>&1 \
    && "$BIN_DIR/generate" --adapter "$TMP/lora" "${gen[@]}" --dtype fp32 --threads 2 --logits-out "$TMP/cpu.txt" > "$TMP/cpu.out" 2> "$TMP/cpu.err" \
    && "$CUDA_GEN" --adapter "$TMP/lora" "${gen[@]}" --logits-out "$TMP/cuda.txt" > "$TMP/cuda.out" 2> "$TMP/cuda.err" \
    || { bad "'$prompt': generate failed: $(tail -n 3 "$TMP/cpu.err" "$TMP/cuda.err")"; continue; }
  # compared steps, the first differing token among them (0: none), the first close call (0:
  # none), the largest |top1 difference| over the compared steps
  read -r compared differ close worst < <(paste "$TMP/cpu.txt" "$TMP/cuda.txt" | awk '
    { tol = ($2 > 1 ? $2 : ($2 < -1 ? -$2 : 1)) / 32
      if ($2 - $3 <= tol) { near = NR; exit }
      n++; if ($1 != $4 && !differ) differ = NR
      d = $5 - $2; if (d < 0) d = -d; if (d > worst) worst = d }
    END { printf "%d %d %d %.4f\n", n, differ, near, worst }')
  lines=$(wc -l < "$TMP/cpu.txt")
  if [ "$lines" = $N ] && [ "$(wc -l < "$TMP/cuda.txt")" = $N ] && [ "$differ" = 0 ] && [ "$compared" -ge $MIN_STEPS ]; then
    ok "'$prompt' + adapter: CUDA path (harness) == CPU, $compared of $N greedy tokens compared ($([ "$close" = 0 ] && echo "no close call" || echo "stopped at the close call of step $close")), top-1 logits within $worst"
  else
    bad "'$prompt' + adapter: $lines / $(wc -l < "$TMP/cuda.txt") tokens, $compared compared (at least $MIN_STEPS), first different token at step $differ, close call at $close: CPU '$(cat "$TMP/cpu.out")' CUDA '$(cat "$TMP/cuda.out")'"
  fi
  [ "$(cut -d' ' -f1 "$TMP/base.txt")" != "$(cut -d' ' -f1 "$TMP/cpu.txt")" ] && changed=$((changed + 1))
done
[ $changed -ge 1 ] && ok "the adapter changes the base's greedy tokens (for $changed of 2 prompts)" \
  || bad "the adapter changes no greedy token of the base: the comparison would not test it"
finish
