#!/usr/bin/env bash
# The GPU check's decoding item (scripts/gpu_check.sh, tests section): `generate` on the device,
# greedy, with the key/value cache (the cached attention kernel, one logits row back to the host
# per token) and with the full recomputation per token. Passes when both runs end normally and
# generate every token; prints their speeds. The two texts are not compared: the paths' sums
# differ in the last bits, which bf16 rounding can turn into another greedy choice among the
# near-equal logits of random weights (test_sampling holds the numbers to transformers' on the
# CPU; the harness runs the kernels against the CPU backend).
#   scripts/gpu_generate.sh BIN MODEL TOKENS
set -u
bin=$1 model=$2 n=$3
prompt='!#%'   # token ids below 100: inside the vocabulary of the emulated check's tiny model too
fails=0 speeds=""
for mode in cache no-cache; do
  extra=(); [ $mode = no-cache ] && extra=(--no-kv-cache)
  if ! err=$("$bin/generate" --model "$model" --vocab data/gpt2 --prompt "$prompt" --max-new-tokens "$n" --temperature 0 --seed 1 "${extra[@]}" 2>&1 >/dev/null); then
    echo "$err"; echo "FAIL generate ($mode): exit status non-zero"; fails=$((fails + 1)); continue
  fi
  line=$(grep -m1 '^generated ' <<<"$err")
  echo "$mode: $line"
  if [[ "$line" == "generated $n tokens"* ]]; then speeds="$speeds $mode $(grep -o '[0-9.]* tokens/s' <<<"$line"),"
  else echo "FAIL generate ($mode): not $n tokens: $line"; fails=$((fails + 1)); fi
done
if [ $fails -eq 0 ]; then echo "generate:${speeds%,} ($n tokens): all 2 runs passed"
else echo "generate: $fails of 2 runs FAILED"; exit 1; fi
