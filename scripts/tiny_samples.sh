# Sampling the tiny models of the CPU examples (sourced by scripts/lora_tiny.sh and
# scripts/pref_tiny.sh; they set GENERATE, NAME, THREADS and OUT). STYLE_SEEDS (40): styled's
# seeds, 1 to it (fewer where only the job's path is checked: the GPU check's emulated run, whose
# harness programs take ~1.4 s a sample).
# Every speech the models trained on follows an <|endoftext|> (data/prepare --doc-sep blank puts
# one before each, and every JSONL record starts with one), so the prompt does too; the samples are
# printed from the name on. At temperature 0.6 (top 40) the tiny models' text is still varied, and
# a speech is cut short after its first verse less often than at 0.8.
sample() { # SEED ARGS...: the continuation of the prompt; generate's messages only if it fails
  local seed=$1; shift
  "$GENERATE" "$@" --prompt "<|endoftext|>$NAME" --max-new-tokens 64 --temperature 0.6 --top-k 40 --seed "$seed" --threads "$THREADS" --quiet \
    2>"$OUT/sample.err" || { cat "$OUT/sample.err" >&2; exit 1; }
}
STYLE_SEEDS="${STYLE_SEEDS:-40}"
styled() { # ARGS...: how many of the samples with seeds 1-STYLE_SEEDS have " / " on their first line; with
           # SAME_LINE=1 also (after a space) how many go on from the name on its line
  local n=0 m=0 seed out
  for seed in $(seq 1 "$STYLE_SEEDS"); do
    out=$(sample "$seed" "$@") || exit 1
    if [[ "${out%%$'\n'*}" == *" / "* ]]; then n=$((n + 1)); fi
    if [[ "${out%%$'\n'*}" == *[![:space:]]* ]]; then m=$((m + 1)); fi
  done
  if [ "${SAME_LINE:-0}" = 1 ]; then echo "$n $m"; else echo "$n"; fi
}
