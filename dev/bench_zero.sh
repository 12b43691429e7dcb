#!/usr/bin/env bash
# Step time and peak memory per rank of full fine-tuning at GPT-2 124M shapes (d12) on CPU ranks,
# for ZeRO 0/1/2/3 at 1, 2 and 4 ranks (oversubscribed when the machine has fewer cores), the
# same global batch in every run (--total-batch-tokens): a table in markdown.
#   bash dev/bench_zero.sh            (B=1, T=64, 256 tokens per step, 3 timed steps after one warm-up)
# Env: STEPS, B, T, TOKENS, NPS ("1 2 4"), STAGES ("0 1 2 3"), THREADS (per rank, default 1).
# Peak memory: the largest max-RSS of the ranks (GNU time), which includes the start-up, when every
# rank holds the whole model once (llmc/dist/fsdp.h: the shards are cut from a loaded replica). The
# memory report's total (params, grads, optimizer, buffers, activations at steady state) is shown
# too. Take the figures on a quiet machine: the load average is printed with the table.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-3}; B=${B:-1}; T=${T:-64}; TOKENS=${TOKENS:-256}; NPS=${NPS:-"1 2 4"}; STAGES=${STAGES:-"0 1 2 3"}
THREADS=${THREADS:-1}
command -v mpirun >/dev/null || { echo "needs mpirun (OpenMPI)"; exit 1; }
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time)"; exit 1; }
make -s train_gpt2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/bench.bin" <<'PY'
import struct, sys, random
n = 200000; r = random.Random(0)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[r.randrange(50257) for _ in range(n)]))
PY
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) | $(nproc) cores | B=$B T=$T, $TOKENS tokens per step, $THREADS thread(s) per rank, median of $STEPS steps"
echo
echo "| ZeRO | ranks | step ms (median) | peak RSS per rank MiB | report total MiB (rank 0) |"
echo "|---|---|---|---|---|"
for np in $NPS; do
  for z in $STAGES; do
    log="$tmp/z${z}_np$np"
    # each rank appends its line to a file of its own (in the job's output the ranks' lines can interleave)
    if ! mpirun -np "$np" /usr/bin/time -a -o "$log.rss" -f "maxrss_kb %M" ./train_gpt2 --model d12 --train-data "$tmp/bench.bin" \
         --batch-size "$B" --seq-len "$T" --total-batch-tokens "$TOKENS" --steps $((STEPS + 1)) --lr 1e-5 \
         --threads "$THREADS" --zero "$z" --out none > "$log" 2>&1; then
      echo "| $z | $np | failed | | |"; tail -5 "$log" >&2; continue
    fi
    ms=$(grep -E '^step +[0-9]+/' "$log" | tail -n +2 | grep -oE '[0-9.]+ ms' | awk '{print $1}' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    rss=$(grep -o 'maxrss_kb [0-9]*' "$log.rss" | awk '$2 > m {m = $2} END {printf "%.0f", m / 1024}')
    total=$(grep -o 'total [0-9.]* MiB' "$log" | head -1 | awk '{print $2}')
    echo "| $z | $np | $ms | $rss | $total |"
  done
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
