#!/usr/bin/env bash
# Host stalls of one CUDA training step: the harness builds of train_gpt2 and train_lora (the
# real trainer on the CUDA backend, mk/gpucheck.mk) count every runtime call that makes the host
# wait for the GPU on a real device (test/cuda_cpu/cuda_cpu.h: CudaCpuSyncCounts), and write the
# totals at exit (CUDA_CPU_SYNC_REPORT). A run of STEPS_LO and one of STEPS_HI optimizer steps
# with 4 micro-steps each differ by exactly STEPS_HI - STEPS_LO steady-state steps (no eval, no
# sampling, no checkpoint), so the difference divided by that is what one step costs.
# One step may wait for the device once (the logged loss and gradient norm, read together) and
# synchronize once (the step timer's end); it copies nothing synchronously to the device (the
# batches go up asynchronously from pinned memory) and allocates nothing.
# Memsets are counted too (not stalls, but passes over memory): backward writes its first
# contribution to each activation gradient instead of zeroing the buffer and adding to it. What
# is left: per micro-step dlnf, which classifier_train adds into (its contract is +=), 4; per step
# the gradients' zeroing (full: the one gradient buffer and the loss/norm accumulators, 2; LoRA:
# dA and dB of 4 adapters and the accumulators, 9). Zeroing every activation gradient before
# filling it cost 58 and 81. A masked run (LoRA on a shard with a loss mask that leaves half of
# each window's targets out, as SFT prompts do: the classifier runs on the rows with a target
# only, their lists uploaded with the batch) waits and allocates no more; per micro-step it zeroes
# the per-row losses and the gathered rows' dx as well, 8 a step.
set -u
BUILD="${BUILD:-build/cpu}"
. "$(dirname "$0")/lib.sh"
need_harness_trainers

make_shard "$TMP/train.bin" 20000 100 1
STEPS_LO=2; STEPS_HI=4   # (the first step may fill caches: both runs include it)
MAX_D2H=1; MAX_SYNC=1; MAX_H2D=0; MAX_ALLOC=0
declare -A MAX_MEMSET=([full]=6 [lora]=13 [masked]=21)
# the same tokens with a mask: in each 16-token stretch the first 8 are never targets
python3 - "$TMP/train.bin" "$TMP/masked.bin" <<'PY'
import shutil, struct, sys
src, dst = sys.argv[1], sys.argv[2]
shutil.copyfile(src, dst)
n = struct.unpack("<3i", open(src, "rb").read(12))[2]
with open(dst[:-4] + ".mask", "wb") as f:
    f.write(struct.pack("<256i", 20261122, 1, n, *([0] * 253)))
    f.write(bytes(0 if j % 16 < 8 else 1 for j in range(n)))
PY

# counts MODE STEPS: "d2h N h2d N sync N alloc N memset N" of one run
counts() {
  local mode=$1 steps=$2 prog args rep="$TMP/sync_$1_$2.txt"
  local common=(--train-data "$TMP/train.bin" --batch-size 1 --seq-len 64 --total-batch-tokens 256 --steps "$steps"
                --lr 1e-3 --warmup-steps 0 --seed 1 --out none)
  case "$mode" in
    full) prog="$EMU/train_gpt2"; args=(--model test/ref/gpt2_tiny) ;;
    lora) prog="$EMU/train_lora"; args=(--model test/ref/gpt2_tiny --lora-targets c_attn,c_fc --lora-rank 4) ;;
    masked) prog="$EMU/train_lora"; args=(--model test/ref/gpt2_tiny --lora-targets c_attn,c_fc --lora-rank 4)
            common[1]="$TMP/masked.bin" ;;
  esac
  rm -f "$rep"
  if ! CUDA_CPU_SYNC_REPORT="$rep" "$prog" "${args[@]}" "${common[@]}" > "$TMP/log_$1_$2.txt" 2>&1; then
    echo "FAIL: $mode run of $steps steps failed:" >&2; tail -5 "$TMP/log_$1_$2.txt" >&2; return 1
  fi
  grep -q "accumulation" "$TMP/log_$1_$2.txt" && grep -q " x 4 accumulation" "$TMP/log_$1_$2.txt" \
    || { echo "FAIL: $mode: expected 4 micro-steps per step:" >&2; grep accumulation "$TMP/log_$1_$2.txt" >&2; return 1; }
  [ "$mode" != masked ] || grep -q "loss masks: on (50.0% of tokens trained)" "$TMP/log_$1_$2.txt" \
    || { echo "FAIL: masked: the run did not train on half the tokens:" >&2; grep "^data:" "$TMP/log_$1_$2.txt" >&2; return 1; }
  cat "$rep"
}

for mode in full lora masked; do
  lo=$(counts $mode $STEPS_LO) || { bad "$mode: run failed"; continue; }
  hi=$(counts $mode $STEPS_HI) || { bad "$mode: run failed"; continue; }
  read -r _ d2h_lo _ h2d_lo _ sync_lo _ alloc_lo _ memset_lo <<<"$lo"
  read -r _ d2h_hi _ h2d_hi _ sync_hi _ alloc_hi _ memset_hi <<<"$hi"
  n=$((STEPS_HI - STEPS_LO))
  d2h=$(( (d2h_hi - d2h_lo) / n )); h2d=$(( (h2d_hi - h2d_lo) / n ))
  sync=$(( (sync_hi - sync_lo) / n )); alloc=$(( (alloc_hi - alloc_lo) / n )); memsets=$(( (memset_hi - memset_lo) / n ))
  line="$mode: per step (4 micro-steps): $d2h device->host copies, $sync syncs, $h2d synchronous host->device copies, $alloc allocations, $memsets memsets"
  if [ "$d2h" -le $MAX_D2H ] && [ "$sync" -le $MAX_SYNC ] && [ "$h2d" -le $MAX_H2D ] && [ "$alloc" -le $MAX_ALLOC ] \
     && [ "$memsets" -le "${MAX_MEMSET[$mode]}" ]; then ok "$line"
  else bad "$line (at most $MAX_D2H, $MAX_SYNC, $MAX_H2D, $MAX_ALLOC, ${MAX_MEMSET[$mode]})"; fi
done
finish
