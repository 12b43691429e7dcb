#!/usr/bin/env bash
# ZeRO 3's memory per rank against a replica's: GPT-2 d6 and 124M (d12) shapes, full fine-tuning at
# 2 and 4 ranks, the memory report's parameters and total (the code's own byte counts, steady
# state) and each rank's peak RSS, beside one process at ZeRO 0; with OLD_BIN (the bin/ of
# another build, e.g. the commit before the head's own gather buffer) the same for that build and
# whether its losses are the same bit for bit. A table in markdown (docs/ZERO.md).
#   bash dev/bench_zero3_mem.sh      Env: OLD_BIN, STEPS (3), B (1), T (64), MODELS ("d6 d12"), NPS ("2 4")
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-3}; B=${B:-1}; T=${T:-64}; MODELS=${MODELS:-"d6 d12"}; NPS=${NPS:-"2 4"}; OLD_BIN=${OLD_BIN:-}
BIN=build/cpu/bin
make -s BACKEND=cpu "$BIN/train_gpt2"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/train.bin" <<'PY'
import struct, sys, random
n = 50000; r = random.Random(0)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[r.randrange(50257) for _ in range(n)]))
PY
run() { # run BIN NP MODEL ZERO TAG: report's params and total (rank 0), max peak RSS over the ranks, losses
  rm -f "$tmp"/rss.*
  mpirun -np "$2" bash -c '/usr/bin/time -f "%M" -o "'"$tmp"'/rss.$OMPI_COMM_WORLD_RANK" "$@"' _ "$1/train_gpt2" --model "$3" \
    --train-data "$tmp/train.bin" --batch-size "$B" --seq-len "$T" --steps "$STEPS" --zero "$4" --threads 1 --dtype fp32 \
    --out "$tmp/$5" > "$tmp/$5.log" 2>&1 || { tail -5 "$tmp/$5.log" >&2; return 1; }
  params=$(grep -o 'params [0-9.]* MiB' "$tmp/$5.log" | head -1 | awk '{print $2}')
  total=$(grep -o 'total [0-9.]* MiB' "$tmp/$5.log" | head -1 | awk '{print $2}')
  rss=$(cat "$tmp"/rss.* | grep -o '^[0-9]*$' | sort -n | tail -1)
  echo "$params $total $((rss / 1024))"
}
losses() { grep -o '"train_loss": [0-9.e+-]*' "$tmp/$1/log.jsonl" | awk '{print $2}' | tr '\n' ' '; }
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) | B=$B T=$T, $STEPS steps, fp32, one thread per rank"
echo
echo "| model | ranks | ZeRO | params MiB (report) | total MiB (report) | peak RSS MiB (largest rank) |${OLD_BIN:+ before: params / total / peak RSS | losses as before |}"
echo "|---|---|---|---|---|---|${OLD_BIN:+---|---|}"
for m in $MODELS; do
  read -r p t r < <(run "$BIN" 1 "$m" 0 "${m}_ref")
  echo "| $m | 1 | 0 | $p | $t | $r |${OLD_BIN:+ | |}"
  for np in $NPS; do
    read -r p t r < <(run "$BIN" "$np" "$m" 3 "${m}_$np")
    old=""
    if [ -n "$OLD_BIN" ]; then
      read -r op ot or < <(run "$OLD_BIN" "$np" "$m" 3 "${m}_${np}_old")
      same=$([ "$(losses "${m}_$np")" = "$(losses "${m}_${np}_old")" ] && echo "yes, bit for bit" || echo "NO")
      old=" $op / $ot / $or | $same |"
    fi
    echo "| $m | $np | 3 | $p | $t | $r |$old"
  done
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
