#!/usr/bin/env bash
# LoRA fine-tuning with several ranks under mpirun (one process per GPU, or per CPU core group).
#   NP=4 bash scripts/multirank_lora.sh [model]   (default model: ./gpt2, a HF GPT-2 directory)
# The global batch (--total-batch-tokens) is the same whatever NP is; each rank reads its own
# slice of it. --zero 1 shards the AdamW state, --zero 2 also the gradients.
#
# Multi-node (docs/MULTINODE.md: hostfiles, network interfaces, NCCL variables, the watchdog): the
# binary and the data must be at the same path on every node; list the nodes in a hostfile
# (`node1 slots=8`, one line per node) and run
#   mpirun -np 16 --hostfile hosts -x PATH -x LD_LIBRARY_PATH ./train_lora ...
# On GPUs NCCL moves the gradients (bootstrapped through MPI); on CPUs MPI does. Rank 0 writes the
# logs and the model; every rank writes its optimizer shard, and a checkpoint counts only when the
# DONE_ marker exists, so put --out on a filesystem all nodes share. A rank that hangs ends the
# whole job after --watchdog-timeout seconds (default 30) beyond 3x the slowest step, naming it.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-gpt2}; NP=${NP:-4}; OUT=${OUT:-out/lora_np$NP}
[ -e "$MODEL" ] || { echo "error: model '$MODEL' not found (e.g. huggingface-cli download gpt2 --local-dir gpt2)"; exit 1; }
make -s train_lora data/prepare
[ -f data/shakespeare/tinyshakespeare_train_000000.bin ] || \
  data/prepare --input data/tinyshakespeare.txt --out-dir data/shakespeare --doc-sep blank --val-tokens 32768
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
mpirun -np "$NP" ./train_lora --model "$MODEL" \
  --train-data "data/shakespeare/tinyshakespeare_train_*.bin" --val-data "data/shakespeare/tinyshakespeare_val_*.bin" \
  --lora-rank 8 --lora-alpha 16 --lora-targets all-linear \
  --batch-size 4 --seq-len 256 --total-batch-tokens $((4 * 256 * NP * 2)) --steps 200 --lr 2e-4 --warmup-steps 10 \
  --eval-every 50 --save-every 100 --zero 2 --threads 1 --out "$OUT"
