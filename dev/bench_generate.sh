#!/usr/bin/env bash
# Generation speed on the CPU, ours against transformers' generate (and llama.cpp where its
# llama-bench is given), in one run on the same machine, thread count and model: a randomly
# initialised GPT-2 124M (convert --model d12: speed does not depend on the values), greedy, a
# fixed prompt, NEW tokens a row, at N = 1, 8 and 64 rows (ours: generate --num-samples N, the
# prompt prefilled once; transformers: the prompt repeated in N rows, static cache).
#   bash dev/bench_generate.sh [threads]          (default 2)
#   NEW=64 REPS=3 PYTHON=python3 (torch + transformers) NS="1 8 64" DTYPES="auto fp32 q8_0"
#   (q8_0: ours on the model's Q8_0 GGUF file, generate --weights q8_0: llama.cpp's 8-bit blocks)
#   COMPILE=1 also times transformers with torch.compile; LLAMA_BENCH=path/to/llama-bench also
#   times llama.cpp on our own GGUF f16 and Q8_0 files of the model (batch 1: its token generation test).
# Prints per setting the median and the best tokens/s, then the ratios (ours / theirs, > 1: we
# are faster) against the faster of transformers' fp32 and bf16 at each N, and N = 8 against
# our batch 1 (the aggregate).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}; PY=${PYTHON:-python3}; NEW=${NEW:-64}; REPS=${REPS:-3}; NS=${NS:-1 8 64}; DTYPES=${DTYPES:-auto fp32 q8_0}
PROMPT="The quick brown fox jumps over the lazy dog because"
make -s generate convert
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
./convert --model d12 --seed 1 --out "$tmp/d12" > /dev/null
[ -f "$tmp/d12/vocab.json" ] || { echo "error: the model has no tokenizer files (data/gpt2 missing?)" >&2; exit 1; }
./convert --model "$tmp/d12" --out "$tmp/d12_q8_0.gguf" --gguf-type q8_0 > /dev/null
res="$tmp/results"; : > "$res"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $THREADS threads; $NEW new tokens"
# ours: REPS runs a setting, tokens/s from generate's own timing (the decoding, not the load)
for dt in $DTYPES; do
  for n in $NS; do
    rates=()
    for r in $(seq "$REPS"); do
      if [ "$dt" = q8_0 ]; then how=(--model "$tmp/d12_q8_0.gguf" --weights q8_0); else how=(--model "$tmp/d12" --weights dense --dtype "$dt"); fi
      ./generate "${how[@]}" --prompt "$PROMPT" -g "$NEW" --temperature 0 --num-samples "$n" --threads "$THREADS" \
        > /dev/null 2> "$tmp/err" || { cat "$tmp/err"; exit 1; }
      rates+=("$(sed -n 's/^generated .*(\([0-9.]*\) tokens\/s).*/\1/p' "$tmp/err" | tail -1)")
    done
    printf '%s\n' "${rates[@]}" | sort -g | awk -v d="$dt" -v n="$n" '{a[NR]=$1} END {m=a[int((NR+1)/2)]; printf "ours %s N=%s: %.1f tokens/s (median), %.1f (best)\n", d, n, m, a[NR]}' | tee -a "$res"
  done
done
if "$PY" -c 'import torch, transformers' 2>/dev/null; then
  for dt in fp32 bf16; do
    for n in $NS; do "$PY" dev/bench_generate.py "$tmp/d12" "$PROMPT" "$NEW" "$n" "$REPS" "$THREADS" $dt 2>/dev/null | tee -a "$res"; done
    [ "${COMPILE:-0}" = 1 ] && "$PY" dev/bench_generate.py "$tmp/d12" "$PROMPT" "$NEW" 1 "$REPS" "$THREADS" $dt compile 2>/dev/null | tee -a "$res"
  done
else
  echo "transformers: torch or transformers not installed for $PY, not timed"
fi
if [ -n "${LLAMA_BENCH:-}" ]; then
  ./convert --model "$tmp/d12" --out "$tmp/d12.gguf" --gguf-type f16 > /dev/null
  for q in f16 q8_0; do
    f="$tmp/d12.gguf"; [ $q = q8_0 ] && f="$tmp/d12_q8_0.gguf"
    "$LLAMA_BENCH" -m "$f" -p 0 -n "$NEW" -t "$THREADS" -r "$REPS" -o csv 2>/dev/null | tail -1 \
      | awk -F, -v q=$q '{gsub(/"/, ""); printf "llama.cpp %s N=1: %.1f tokens/s (mean of its runs)\n", q, $(NF-1)}' | tee -a "$res"
  done
fi
echo "ratios (median tokens/s):"
awk '
  /^ours/ { d = $2; split($3, k, "="); n = k[2]; sub(":", "", n); v = $4; ours[d, n] = v; ns[n] = 1
            if (!(n in best) || v > best[n]) best[n] = v
            if (d != "q8_0" && (!(n in dense) || v > dense[n])) dense[n] = v }
  /^transformers/ && !/compiled/ { split($3, k, "="); n = k[2]; sub(":", "", n); v = $(NF - 4); if (!(n in hf) || v > hf[n]) hf[n] = v }
  /^llama.cpp/ { ll[$2] = $4 }
  END {
    for (n in best) if (n in hf) printf "  N=%s: ours %.1f / transformers %.1f = %.2fx\n", n, best[n], hf[n], best[n] / hf[n]
    if (("f16" in ll) && (1 in dense)) printf "  N=1: ours dense %.1f / llama.cpp f16 %.1f = %.2fx\n", dense[1], ll["f16"], dense[1] / ll["f16"]
    if (("q8_0" in ll) && (("q8_0", 1) in ours)) printf "  N=1: ours q8_0 %.1f / llama.cpp q8_0 %.1f = %.2fx\n", ours["q8_0", 1], ll["q8_0"], ours["q8_0", 1] / ll["q8_0"]
    for (n in ns) if ((("q8_0", n) in ours) && (n in dense)) printf "  N=%s: ours q8_0 / ours dense (best of the dtypes) = %.2fx\n", n, ours["q8_0", n] / dense[n]
    if ((1 in best) && (8 in best)) printf "  ours N=8 aggregate / N=1 (best setting each): %.2fx\n", best[8] / best[1]
  }' "$res"
