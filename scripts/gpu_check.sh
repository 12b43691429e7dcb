#!/usr/bin/env bash
# One command that validates and benchmarks llmc-ft on an NVIDIA GPU and writes one small report
# (REPORT/report.md + REPORT/report.json, with the logs in REPORT/logs/).
#
# 1. On a CPU machine with this repository and the CUDA toolkit (no GPU needed):
#      make gpu-bundle
#    builds build/gpu-bundle/ (~340 MB) and the same packed as build/gpu-bundle.tar.xz (~11 MB):
#    portable (ARCH=x86-64-v3), MPI-free CUDA binaries of every program the check runs
#    (train_gpt2, train_lora, the GPU test programs, the dev/cuda kernel programs, gpu_info). They
#    need nothing beyond libc/libstdc++, libcudart, libcublasLt, libnccl (and libcublas for
#    attention_bench), which a GPU machine's CUDA toolkit or PyTorch wheels carry.
# 2. Carry the repository's files (the tests read test/ref/, the check reads dev/) and
#    build/gpu-bundle.tar.xz to the GPU machine; the check unpacks it when build/gpu-bundle/ is
#    missing. With the project's device tool, one call:
#      run(command="scripts/gpu_check.sh --out gpu-report; cp -r gpu-report $OUT/",
#          carry=["build/gpu-bundle.tar.xz"])
#    and the same command again (while the machine is warm, gpu-report/ is still there) to run
#    what the budget left out; or carry=["build/gpu-bundle.tar.xz", "gpu-report"] with the
#    report fetched back into ./gpu-report.
# 3. On the GPU machine (NVIDIA driver, CUDA toolkit, python3 with PyTorch; no build, no MPI):
#      scripts/gpu_check.sh [--out DIR] [--budget SECONDS] [--sections LIST]
#    It finds libcudart.so.13 / libcublasLt.so.13 / libcublas.so.13 / libnccl.so.2 in the bundle,
#    $CUDA_HOME and /usr/local/cuda*/ library folders, and Python's nvidia-* wheels (site-packages
#    nvidia/*/lib), puts the folders it found first on LD_LIBRARY_PATH and records them.
#
# Sections, in the order they run (the most valuable first); --sections picks some (comma list):
#   env       nvidia-smi, driver, CUDA runtime / cuBLASLt / NCCL versions (gpu_info), the
#             libraries resolved, PyTorch version, the device's peak bf16 FLOP/s and bandwidth
#   tests     every GPU test program: each op vs the CPU backend (test_cuda_ops_gpu), flash
#             attention in depth vs the CPU backend, GPT-2 vs transformers, LoRA vs PEFT, QLoRA vs
#             bitsandbytes + PEFT, packed records vs transformers run on each record alone
#             (test_*_gpu); the PTX instructions of llmc/cuda/ptx.cuh against the ISA's fragment
#             tables and rules on the hardware (test_ptx_gpu: the same test that checks the
#             harness' emulation of them, so its passing here says the emulation is right);
#             sub-communicators with NCCL attached, the split
#             of --zero 3 --shard-group (test_comm_split_gpu: one process, so a split of one rank
#             whose device calls are copies; ncclCommSplit itself needs mpirun and 2+ GPUs:
#             `mpirun -np 4 build/cuda/test/test_comm_split_gpu 2` in a CUDA build with MPI);
#             decoding: generate greedy with the key/value cache and without it
#             (scripts/gpu_generate.sh: both complete, tokens/s); the user's path: quickstart,
#             the main job (scripts/lora_tiny.sh) with these programs (both validation losses,
#             both samples, its time), and outputs: transformers / PEFT load what it wrote and
#             continue prompts as our generate does (dev/check_outputs.py; needs them installed)
#   watchdog  the watchdog's NCCL path on the one GPU, in one process without MPI
#             (test_nccl_watchdog_gpu, each case a child under a 60 s limit): init, a 2-rank
#             communicator whose second rank never joins, must end (exit 1) naming rank 0 and
#             nccl_init; stuck, a kernel that hangs before an all-reduce on a 1-rank communicator,
#             must end naming rank 0, dev_allreduce and the operation; healthy, slow kernels under
#             the limit before every device collective, must not trip it (results bit-exact).
#             Needs 2 GPUs, not covered: a peer that stops while this rank waits inside an NCCL
#             kernel, and the status queries between ranks (run on CPU ranks by make test).
#   train     train_gpt2 / train_lora / train_lora --qlora (r=8 on c_attn) at GPT-2 124M shapes,
#             T=1024, B in {8, 16, 32}: ms/step, tokens/s, TFLOP/s, MFU, peak device memory; the
#             B=8 runs twice: identical losses and norms step for step (--deterministic 1);
#             one GPT-2 XL (--model d48) full fine-tuning run at T=1024, B=8; GPT-2 355M and 774M
#             (d24, d36) full fine-tuning with --batch-size auto (the plan's largest micro-batch
#             that fits the GPU), two steps each; for every run the plan's device memory beside
#             the measured (cudaMemGetInfo after step 1, nvidia-smi's peak); and packed
#             fine-tuning: chat records (dev/pack_data.py) prepared with --pack 1024,
#             --record-windows 1024 and as a token stream, LoRA r=8 on c_attn, B=16, 8 steps
#             each: trained tokens/s (the targets the masks train) and device memory; and
#             preference tuning: DPO with LoRA (r=8 on c_attn) and full DPO on pairs from the
#             bundled text (dev/pack_data.py pairs) packed into windows of 1024, B=16, 12 steps
#             each: tokens/s, pairs/s, the last step's reward accuracy and margin
#   torch     the same shapes in PyTorch on the same GPU (dev/bench_torch_gpu.py: transformers
#             GPT2LMHeadModel, bf16 autocast, SDPA; + PEFT LoRA; and PyTorch's strongest setting,
#             a nanoGPT-style model under torch.compile with fused AdamW, at B=16), and SDPA forced
#             to its flash and its cuDNN backend at attention_bench's shapes. No QLoRA there: the
#             GPU machines have no bitsandbytes.
#   kernels   the dev/cuda kernel programs (checks vs a CPU reference, GB/s, TFLOP/s vs the peaks);
#             attention_bench at B=16, NH=12, HS=64, T = 512, 1024, 2048, in one table with the
#             torch section's SDPA flash and cuDNN at the same shapes; where Nsight Compute (ncu)
#             is installed, every kernel of a training step timed and split into attention, GEMMs
#             and the rest (ncu_step), and the attention kernels' registers, occupancy,
#             tensor-pipe activity and bank conflicts, the SMs' active share of the kernel's
#             time, the warp-state (stall) breakdown and the XU / FMA / ALU / LSU pipes
#             (ncu_attention); the dK/dV and forward kernels' SASS instructions with the most
#             excessive shared-memory wavefronts and stall samples (ncu_source_*, SourceCounters)
#   sanitize  compute-sanitizer memcheck, initcheck, racecheck, synccheck on the test programs
#             (initcheck on their TEST_QUICK subsets; scripts/gpu_sanitize.sh: a finding inside a
#             cuBLAS / cuBLASLt / NCCL kernel is listed as the library's, one in ours fails)
# Every item records pass / fail / timeout / skip with the reason, and the check goes on after a
# failure; the exit status is 0 when nothing failed or timed out, 1 otherwise (2: bad options). Time on an H100
# (the first run, before the quickstart / outputs / XL / compiled / attention items): about 2 minutes for
# env,tests,train,torch, 5 for sanitize,kernels,watchdog; the new items should add about 2 (the compiled
# model's compilation, d48's initialisation on the host) and outputs another (transformers on the CPU); the
# pack runs (three train_lora start-ups, 8 steps each) should take about half a minute, the two
# --batch-size auto runs (355M, 774M: initialisation on the host, two steps) about one; the DPO runs
# (two start-ups, 12 steps each) about 15 s, the Nsight Compute items of issue 30 (ncu_attention's
# warp-state and pipe metrics: more replays of each kernel; two SourceCounters launches) about one
# minute more than before. An
# item that cannot finish inside --budget (default 360 s: the device call that runs the check is
# usually limited to 420 s, and unpacking the bundle, writing the report and packing it come on
# top) is recorded as skipped for the time budget; running the check again with the same --out
# runs only those (and anything not yet run), keeping the other results (--redo starts over). Each
# command of an item has its own time limit. When the environment names a folder in $OUT (the
# device tool's folder of files that come back), every result is also copied there as it is
# recorded (gpu-check-results.jsonl, and the log of an item that did not pass under
# gpu-check-logs/): a call killed at its time limit still brings back what ran.
#
# Without a GPU (CI: `make test` runs it through test/test_gpu_check.sh):
#      make gpucheck-emu && scripts/gpu_check.sh --emulated     (or: make gpu-check-emulated)
#    runs the same sections against the CUDA-on-CPU harness builds of the same programs (linked
#    under the bundle's names in build/cpu/gpucheck-emu/) at small shapes (the tiny test GPT-2, T=64); nvidia-smi and
#    compute-sanitizer items say "skipped: emulated", PyTorch runs on the CPU if it is installed.
#
# Other options: --bin DIR (the programs; default build/gpu-bundle, emulated build/cpu/gpucheck-emu),
# --report-only (rebuild the report from DIR's results), --python PY (default python3).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

DEVICE_OUT=${OUT:-}  # before the option parsing reuses the name for the report folder
EMULATED=0; BIN=""; OUT=""; BUDGET=360; SECTIONS="env,tests,watchdog,train,torch,kernels,sanitize"; REDO=0; REPORT_ONLY=0
PY=${PYTHON:-python3}
while [ $# -gt 0 ]; do
  case "$1" in
    --emulated) EMULATED=1 ;;
    --bin) BIN="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    --budget) BUDGET="$2"; shift ;;
    --sections) SECTIONS="$2"; shift ;;
    --redo) REDO=1 ;;
    --report-only) REPORT_ONLY=1 ;;
    --python) PY="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: gpu_check.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$BUDGET" in ''|*[!0-9]*) echo "error: gpu_check.sh: --budget takes whole seconds, got '$BUDGET'" >&2; exit 2 ;; esac
for s in ${SECTIONS//,/ }; do
  case "$s" in env|tests|watchdog|train|torch|kernels|sanitize) ;;
    *) echo "error: gpu_check.sh: unknown section '$s' in --sections (env, tests, watchdog, train, torch, kernels, sanitize)" >&2; exit 2 ;;
  esac
done
if [ "$EMULATED" = 1 ]; then BIN=${BIN:-build/cpu/gpucheck-emu}; OUT=${OUT:-build/cpu/gpucheck-emu-report}
else BIN=${BIN:-build/gpu-bundle}; OUT=${OUT:-gpu-report}; fi
BIN_ARG=$BIN
# the bundle travels packed: unpack it next to where it is expected
if [ "$EMULATED" = 0 ] && [[ "$BIN" == *build/gpu-bundle ]] && [ ! -d "$BIN" ] && [ -f "$BIN.tar.xz" ]; then
  echo "gpu_check: unpacking $BIN.tar.xz"
  tar -xJf "$BIN.tar.xz" -C "$(dirname "$(dirname "$BIN")")" || { echo "error: gpu_check.sh: cannot unpack '$BIN.tar.xz'" >&2; exit 2; }
fi
BIN=$(cd "$BIN" 2>/dev/null && pwd) || { echo "error: gpu_check.sh: the program folder '$BIN_ARG' (--bin) does not exist; build it with $( [ "$EMULATED" = 1 ] && echo 'make gpu-check-emulated' || echo 'make gpu-bundle')" >&2; exit 2; }
mkdir -p "$OUT/logs" || { echo "error: gpu_check.sh: cannot create the report folder '$OUT' (--out)" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
RESULTS="$OUT/results.jsonl"
if [ "$REPORT_ONLY" = 1 ]; then exec "$PY" "$ROOT/scripts/gpu_report.py" "$OUT"; fi
if [ "$REDO" = 1 ]; then rm -rf "$OUT/logs" "$RESULTS" "$OUT/runs.jsonl"; mkdir -p "$OUT/logs"; fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpucheck.XXXXXX")
MEM_PID=""
trap 'mem_poll_stop; rm -rf "$WORK"' EXIT
START=$(date +%s); DEADLINE=$((START + BUDGET))
MODE_NAME=$([ "$EMULATED" = 1 ] && echo emulated || echo gpu)

# ---------------------------------------------------------------------------------------------
# recording: one JSON object per item in results.jsonl (the last one of a key wins)
json_str() {  # a JSON string literal of $1 (one line)
  local s=${1//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\t'/ }; s=${s//$'\r'/ }; s=${s//$'\n'/ | }
  printf '"%s"' "$s"
}
record() {  # section item status reason seconds log
  printf '{"key": %s, "section": %s, "item": %s, "status": %s, "reason": %s, "seconds": %s, "log": %s, "mode": %s}\n' \
    "$(json_str "$1/$2")" "$(json_str "$1")" "$(json_str "$2")" "$(json_str "$3")" "$(json_str "$4")" "${5:-0}" \
    "$(json_str "${6:-}")" "$(json_str "$MODE_NAME")" >> "$RESULTS"
  printf '  %-9s %-34s %-8s %s\n' "$1" "$2" "$3" "$4"
  mirror_result "$1" "$2" "$3" "${6:-}"
}
# the copy into the device tool's $OUT (see the header): results so far, and a failed item's log
mirror_result() {  # section item status log
  [ -n "$DEVICE_OUT" ] && [ -d "$DEVICE_OUT" ] && [ -w "$DEVICE_OUT" ] || return 0
  [ "$(cd "$DEVICE_OUT" && pwd)" = "$OUT" ] && return 0
  cp "$RESULTS" "$DEVICE_OUT/gpu-check-results.jsonl" 2>/dev/null
  if [ "$3" != pass ] && [ -n "$4" ] && [ -f "$OUT/$4" ]; then
    mkdir -p "$DEVICE_OUT/gpu-check-logs/$1" && tail -c 200000 "$OUT/$4" > "$DEVICE_OUT/gpu-check-logs/$1/$2.log"
  fi
  return 0
}
# whether section/item already has a result that a new run should keep (not a budget skip)
have_result() {
  [ -f "$RESULTS" ] || return 1
  local last; last=$(grep -F "\"key\": $(json_str "$1/$2")," "$RESULTS" | tail -n 1)
  [ -n "$last" ] && ! grep -q '"reason": "time budget' <<<"$last"
}
left() { echo $((DEADLINE - $(date +%s))); }

# run_item SECTION ITEM EST LIMIT CMD...: run CMD (from the repository root) with a time limit of
# LIMIT seconds (less if the budget ends sooner), log to logs/SECTION/ITEM.log; skipped when a
# result exists or fewer than EST seconds of the budget are left. Returns 0 when it passed.
LAST_LOG=""
run_item() {
  local sec=$1 item=$2 est=$3 limit=$4; shift 4
  local log="logs/$sec/$item.log"
  LAST_LOG="$OUT/$log"
  if have_result "$sec" "$item"; then printf '  %-9s %-34s (kept from the earlier run)\n' "$sec" "$item"; return 0; fi
  local l; l=$(left)
  if [ "$l" -lt "$est" ]; then record "$sec" "$item" skip "time budget: needs ~${est}s, ${l}s left (run again with the same --out)" 0; return 1; fi
  [ "$limit" -gt "$l" ] && limit=$l
  mkdir -p "$OUT/logs/$sec"
  local t0 t1 rc status reason
  t0=$(date +%s.%N)
  echo "\$ $*" | tr '\n' ' ' | cut -c1-600 > "$OUT/$log"; echo >> "$OUT/$log"   # the command, on one line
  timeout -k 10 "$limit" "$@" >> "$OUT/$log" 2>&1; rc=$?
  t1=$(date +%s.%N)
  local secs; secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}')
  if [ $rc -eq 0 ]; then status=pass; reason=""
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then status=timeout; reason="stopped after ${limit}s"
  else status=fail; reason="exit $rc: $(fail_reason "$OUT/$log")"; fi
  # keep logs small: the last 200 KB
  if [ "$(wc -c < "$OUT/$log")" -gt 204800 ]; then tail -c 204800 "$OUT/$log" > "$OUT/$log.tmp" && mv "$OUT/$log.tmp" "$OUT/$log"; fi
  record "$sec" "$item" "$status" "$reason" "$secs" "$log"
  [ $status = pass ]
}
# the line of a failed item's log that says why: a verdict of its own (the sanitizer items, the
# margin checks), else the first failure after the command line
fail_reason() {
  local l; l=$(grep -m1 -E '^FAIL (memcheck|racecheck|synccheck|initcheck|outputs|quickstart)\b' "$1")
  [ -n "$l" ] || l=$(tail -n +2 "$1" | grep -m1 -E 'FAIL|error|ERROR|MISMATCH|Assert|fatal')
  cut -c1-200 <<<"$l"
}
skip_item() { have_result "$1" "$2" || record "$1" "$2" skip "$3" 0; }
want() { [[ ",$SECTIONS," == *",$1,"* ]]; }
prog() { [ -x "$BIN/$1" ]; }

# ---------------------------------------------------------------------------------------------
# libraries (GPU mode): the folders holding the sonames the bundle needs, first on the path
find_libs() {
  local dirs=() d f so
  local py_nv; py_nv=$("$PY" -c 'import nvidia, os; print(" ".join(nvidia.__path__))' 2>/dev/null || true)
  local cands=("$BIN" "$BIN/lib" "${CUDA_HOME:-/usr/local/cuda}/lib64" "${CUDA_HOME:-/usr/local/cuda}/lib"
               /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib)
  for d in /usr/local/cuda-*/lib64 /usr/local/cuda-*/targets/x86_64-linux/lib $py_nv; do [ -d "$d" ] && cands+=("$d"); done
  : > "$OUT/logs/env/libraries.txt"
  for so in libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libnccl.so.2; do
    f=""
    for d in "${cands[@]}"; do
      [ -d "$d" ] || continue
      f=$(find "$d" -maxdepth 3 -name "$so" 2>/dev/null | head -n 1)
      [ -n "$f" ] && break
    done
    if [ -z "$f" ]; then f=$(ldconfig -p 2>/dev/null | awk -v s="$so" '$1 == s {print $NF; exit}'); fi
    if [ -n "$f" ]; then
      echo "$so $(readlink -f "$f")" >> "$OUT/logs/env/libraries.txt"
      d=$(dirname "$f"); [[ " ${dirs[*]} " == *" $d "* ]] || dirs+=("$d")
    else
      echo "$so NOT FOUND" >> "$OUT/logs/env/libraries.txt"
    fi
  done
  local p; p=$(IFS=:; echo "${dirs[*]}")
  export LD_LIBRARY_PATH="$p${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >> "$OUT/logs/env/libraries.txt"
}

find_sanitizer() {
  local c
  for c in compute-sanitizer "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" /usr/local/cuda/bin/compute-sanitizer \
           /usr/local/cuda/compute-sanitizer/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer; do
    if command -v "$c" >/dev/null 2>&1; then command -v "$c"; return 0; fi
  done
  return 1
}

find_ncu() {
  local c
  for c in ncu "${CUDA_HOME:-/usr/local/cuda}/bin/ncu" /usr/local/cuda/bin/ncu /usr/local/cuda-*/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
    if command -v "$c" >/dev/null 2>&1; then command -v "$c"; return 0; fi
  done
  return 1
}

# ---------------------------------------------------------------------------------------------
# shapes: GPT-2 124M on a GPU; the tiny test GPT-2 under the harness
if [ "$EMULATED" = 1 ]; then
  T=64; BATCHES="1 2 4"; STEPS=5; WARMUP=2; VOCAB=100; FULL_MODEL=test/ref/gpt2_tiny; LORA_BASE=test/ref/gpt2_tiny
  GEN_TOKENS=16
  TORCH_SHAPE=(--seq-len 64 --layers 2 --channels 64 --heads 4 --vocab 100 --steps 3 --warmup 1)
  QS_ENV=(BASE_STEPS=20 LORA_STEPS=10 STYLE_SEEDS=2)   # the fewest the job's warm-ups allow; 2 samples
                                         # counted, not 40 (~1.4 s each under the harness)
  OUTPUTS_ARGS=(--min-compared 0)        # so little trained, its choices are all close calls
  XL_MODEL=tiny; XL_B=1                  # the GPT-2 XL run's path on a model the harness can afford
  AUTO_MODELS=tiny; AUTO_SEQS=4          # --batch-size auto's path (the fake device is 80 GB: B = 4)
  PACK_T=256; PACK_B=2; PACK_STEPS=4     # the pack runs' path on the `tiny` descriptor (GPT-2's
  PACK_BASE_MODEL=tiny; PACK_BASE="$WORK/packbase/model.bin"   # vocabulary, as data/prepare's)
  PREF_T=256; PREF_B=2; PREF_STEPS=4     # the DPO runs' path on `tiny` (the pack runs' base), with
  PREF_FULL_MODEL=tiny; PREF_CHARS=360; PREF_PAIRS=20   # few short pairs (the reference's pass)
  TORCH_COMPILED=compiled:2; TORCH_ATTENTION=1,2,16:64,128
  ATTN_SHAPES=""                         # attention_bench cannot run under the harness (cuBLAS)
  EST_TEST=30; EST_TRAIN=10; EST_TORCH=30; EST_KERNEL=20; EST_QS=120; EST_OUTPUTS=60; EST_XL=30; EST_PACK=15; EST_AUTO=10; EST_PREF=20
else
  T=1024; BATCHES="8 16 32"; STEPS=12; WARMUP=2; VOCAB=50257; FULL_MODEL=d12; LORA_BASE="$WORK/base/model.bin"
  GEN_TOKENS=256
  TORCH_SHAPE=(--seq-len 1024 --steps 10 --warmup 2)
  QS_ENV=()                              # the job as `make quickstart` runs it (~5 s on an H100)
  OUTPUTS_ARGS=()
  XL_MODEL=d48; XL_B=8                   # GPT-2 XL, 1.56B parameters: ~49 GB at B=8, T=1024
  AUTO_MODELS="d24 d36"; AUTO_SEQS=120   # 355M / 774M full, --batch-size auto: B 60 / 30 of 120 on 80 GB (the plan)
  PACK_T=1024; PACK_B=16; PACK_STEPS=8   # issue 24's setting, on the LoRA runs' base
  PACK_BASE_MODEL=d12; PACK_BASE="$LORA_BASE"
  PREF_T=1024; PREF_B=16; PREF_STEPS=12  # DPO at the LoRA / full runs' B=16: ~3 pairs a window
  PREF_FULL_MODEL=d12; PREF_CHARS=1100; PREF_PAIRS=1500
  TORCH_COMPILED=compiled:16; TORCH_ATTENTION=16,12,64:512,1024,2048
  ATTN_SHAPES="512 1024 2048"            # attention_bench at B=16, NH=12, HS=64 (GPT-2's heads), causal
  EST_TEST=45; EST_TRAIN=25; EST_TORCH=120; EST_KERNEL=25; EST_QS=30; EST_OUTPUTS=60; EST_XL=90; EST_PACK=20; EST_AUTO=45; EST_PREF=20
fi
export BUILD="$WORK/testout"   # where test programs write their exports (not the repository)
mkdir -p "$BUILD"

echo "gpu_check: $MODE_NAME mode, programs in $BIN, report in $OUT, budget ${BUDGET}s, sections $SECTIONS"
mkdir -p "$OUT/logs/env"
if [ "$EMULATED" = 0 ]; then find_libs; fi
printf '{"mode": %s, "bin": %s, "started": %s, "budget_s": %s, "sections": %s, "host": %s}\n' "$(json_str "$MODE_NAME")" \
  "$(json_str "$BIN")" "$(json_str "$(date -u +%Y-%m-%dT%H:%M:%SZ)")" "$BUDGET" "$(json_str "$SECTIONS")" \
  "$(json_str "$(uname -n)")" >> "$OUT/runs.jsonl"

# ---------------------------------------------------------------------------------------------
section_env() {
  echo "== env"
  run_item env host 1 30 bash -c 'uname -a; echo "cpu: $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2-)"; echo "cores: $(nproc)";
    echo "memory: $(awk "/MemTotal/ {printf \"%.1f GiB\", \$2 / 1048576}" /proc/meminfo)"; echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo none)"'
  if [ "$EMULATED" = 1 ]; then
    skip_item env nvidia_smi "skipped: emulated (no GPU)"
    skip_item env libraries "skipped: emulated (the harness builds link no CUDA library)"
  else
    run_item env nvidia_smi 2 60 bash -c 'nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit,compute_cap,pci.bus_id --format=csv && nvidia-smi'
    run_item env libraries 1 60 bash -c "cat '$OUT/logs/env/libraries.txt'; echo; ldd '$BIN/train_gpt2'; ! grep -q 'NOT FOUND' '$OUT/logs/env/libraries.txt' && ! ldd '$BIN/train_gpt2' | grep -q 'not found'"
  fi
  if prog gpu_info; then run_item env gpu_info 2 60 "$BIN/gpu_info"; else record env gpu_info fail "gpu_info is not in $BIN" 0; fi
  local ns; ns=$(find_sanitizer || true)
  if [ "$EMULATED" = 1 ]; then skip_item env toolkit "skipped: emulated"
  else run_item env toolkit 2 60 bash -c "command -v nvcc >/dev/null && nvcc --version || echo 'nvcc: not on PATH'; ${ns:-echo compute-sanitizer: not found} ${ns:+--version}"; fi
  if ! "$PY" -c 'import torch, transformers' >/dev/null 2>&1; then skip_item env torch "skipped: PyTorch / transformers not installed for $PY"
  else run_item env torch 20 120 "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-"); print("transformers", transformers.__version__)
try:
    import peft; print("peft", peft.__version__)
except ImportError: print("peft not installed")'; fi
}

# ---------------------------------------------------------------------------------------------
TEST_PROGS="test_cuda_ops_gpu test_flash_attention_gpu test_gpt2_gpu test_lora_gpu test_qlora_gpu test_pack_gpu test_ptx_gpu
            test_comm_split_gpu"
section_tests() {
  echo "== tests"
  local p
  for p in $TEST_PROGS; do
    if [ "$EMULATED" = 1 ] && [ "$p" = test_comm_split_gpu ]; then
      skip_item tests "$p" "skipped: emulated (NCCL needs a GPU; make test runs comm_split on CPU ranks: test_comm)"
    elif prog "$p"; then run_item tests "$p" "$EST_TEST" 300 "$BIN/$p"
    else record tests "$p" fail "$p is not in $BIN" 0; fi
  done
  if prog generate; then run_item tests generate "$EST_TEST" 300 bash scripts/gpu_generate.sh "$BIN" "$FULL_MODEL" "$GEN_TOKENS"
  else record tests generate fail "generate is not in $BIN" 0; fi
  user_path
}

# The user's path: the main job (scripts/lora_tiny.sh: data/prepare, a base trained from scratch,
# LoRA on held-out plays, samples of both) with these programs, then transformers and PEFT load
# what it wrote and continue prompts as our generate does (dev/check_outputs.py, which compares a
# CUDA generate with transformers' fp32 run within a bf16 tolerance). The outputs live in the
# work folder of this invocation: an outputs item kept pending needs the quickstart run again.
QS_DIR="$WORK/quickstart"
user_path() {
  local p missing=""
  for p in train_gpt2 train_lora generate prepare; do prog "$p" || missing="$missing $p"; done
  if [ -n "$missing" ]; then record tests quickstart fail "not in $BIN:$missing" 0
  else run_item tests quickstart "$EST_QS" 600 env OUT="$QS_DIR" BIN_DIR="$BIN" "${QS_ENV[@]}" bash scripts/lora_tiny.sh; fi
  if [ ! -f "$QS_DIR/lora/adapter_config.json" ] && ! have_result tests quickstart; then
    have_result tests outputs || record tests outputs skip "time budget: needs the quickstart item's outputs (run again with the same --out)" 0
  elif [ ! -f "$QS_DIR/lora/adapter_config.json" ]; then
    skip_item tests outputs "skipped: no outputs of the quickstart item in this invocation (it failed, or was kept from an earlier run: --redo)"
  elif ! "$PY" -c 'import torch, transformers, peft' >/dev/null 2>&1; then
    skip_item tests outputs "skipped: PyTorch / transformers / PEFT not installed for $PY"
  else
    run_item tests outputs "$EST_OUTPUTS" 600 "$PY" dev/check_outputs.py "$QS_DIR" --bin "$BIN" "${OUTPUTS_ARGS[@]}"
  fi
}

# ---------------------------------------------------------------------------------------------
# the watchdog's NCCL path: one item per case (each ~10-30 s: CUDA and NCCL start-up, a 5 s
# timeout, or 8 s of slow kernels; a case that hangs is killed by the program at 60 s)
WATCHDOG_CASES="init stuck healthy"
section_watchdog() {
  echo "== watchdog"
  local c
  for c in $WATCHDOG_CASES; do
    if [ "$EMULATED" = 1 ]; then
      skip_item watchdog "$c" "skipped: emulated (NCCL needs a GPU; make test runs the exit path on the CPU: test_watchdog_exit)"
    elif prog test_nccl_watchdog_gpu; then run_item watchdog "$c" 30 120 "$BIN/test_nccl_watchdog_gpu" "$c"
    else record watchdog "$c" fail "test_nccl_watchdog_gpu is not in $BIN" 0; fi
  done
}

# ---------------------------------------------------------------------------------------------
# training throughput
ensure_data() {
  [ -f "$WORK/train.bin" ] && return 0
  "$PY" - "$WORK/train.bin" "$VOCAB" <<'PY'
import random, struct, sys
n, vocab = 1200000, int(sys.argv[2])
r = random.Random(0)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[r.randrange(vocab) for _ in range(n)]))
PY
}
FAILED_BASES=""
base_failed() { [[ " $FAILED_BASES " == *" $1 "* ]]; }
save_base() {  # MODEL FILE ITEM: MODEL, randomly initialised, saved as FILE: a frozen base for train_lora
  local model=$1 file=$2 item=$3
  [ -f "$file" ] && return 0
  base_failed "$file" && return 1
  # (recorded, but not kept across runs like the other items: a new run saves it again)
  local log="$OUT/logs/train/$item.log" t0 l; t0=$(date +%s); l=$(left)
  [ "$l" -lt 30 ] && return 1
  timeout -k 10 $((l < 300 ? l : 300)) "$BIN/train_gpt2" --model "$model" --train-data "$WORK/train.bin" --batch-size 1 --seq-len 64 \
      --steps 1 --lr 0 --save-format llmc --out "$(dirname "$file")" > "$log" 2>&1
  if [ -f "$file" ]; then record train "$item" pass "saved for the LoRA runs" $(($(date +%s) - t0)) "logs/train/$item.log"
  else FAILED_BASES="$FAILED_BASES $file"; record train "$item" fail "could not save the LoRA base: $(grep -m1 -E 'error|fatal' "$log" | cut -c1-200)" $(($(date +%s) - t0)) "logs/train/$item.log"; fi
  [ -f "$file" ]
}
# the frozen base of the LoRA runs: a GPT-2 124M (under the harness: the tiny test model's file)
ensure_base() { [ "$EMULATED" = 1 ] || save_base d12 "$LORA_BASE" base_model; }
mem_poll_start() {
  MEM_PID=""
  [ "$EMULATED" = 1 ] && return 0
  command -v nvidia-smi >/dev/null 2>&1 || return 0
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 > "$1.base" 2>/dev/null
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > "$1" 2>/dev/null &
  MEM_PID=$!
}
mem_poll_stop() { [ -n "$MEM_PID" ] && kill "$MEM_PID" 2>/dev/null && wait "$MEM_PID" 2>/dev/null; MEM_PID=""; }
TRAIN_ARGV=()
train_cmd() {  # MODE B: TRAIN_ARGV = the command line of one throughput run
  local mode=$1 b=$2
  local common=(--train-data "$WORK/train.bin" --batch-size "$b" --seq-len "$T" --total-batch-tokens $((b * T)) --steps "$STEPS"
                --lr 1e-4 --warmup-steps 0 --seed 1 --deterministic 1 --out none)
  local lora=(--model "$LORA_BASE" --lora-targets c_attn --lora-rank 8 --lora-alpha 16)
  case "$mode" in
    full) TRAIN_ARGV=("$BIN/train_gpt2" --model "$FULL_MODEL" "${common[@]}") ;;
    xl) TRAIN_ARGV=("$BIN/train_gpt2" --model "$XL_MODEL" "${common[@]}") ;;
    lora) TRAIN_ARGV=("$BIN/train_lora" "${lora[@]}" "${common[@]}") ;;
    qlora) TRAIN_ARGV=("$BIN/train_lora" "${lora[@]}" --qlora "${common[@]}") ;;
  esac
}
train_one() {  # MODE B [ITEM [EST LIMIT]]: one run, with the device memory polled
  local item=${3:-$1_b$2}
  train_cmd "$1" "$2"
  mem_poll_start "$OUT/logs/train/$item.mem"
  run_item train "$item" "${4:-$EST_TRAIN}" "${5:-240}" "${TRAIN_ARGV[@]}"; local rc=$?
  mem_poll_stop
  return $rc
}
mode_pending() {  # MODE: whether any of its runs still needs to run
  local b
  for b in $BATCHES; do have_result train "$1_b$b" || return 0; done
  have_result train "$1_determinism" || return 0
  return 1
}
losses_of() { grep -E '^step +[0-9]+/' "$1" | awk -F'|' '{print $2, $4}'; }
section_train() {
  echo "== train"
  mkdir -p "$OUT/logs/train"
  local missing=""
  prog train_gpt2 || missing="train_gpt2 "
  prog train_lora || missing="$missing train_lora"
  if [ -n "$missing" ]; then record train programs fail "not in $BIN: $missing" 0; return; fi
  ensure_data || { record train data fail "could not write the token shard" 0; return; }
  local mode b
  for mode in full lora qlora; do
    mode_pending "$mode" || { printf '  %-9s %-34s (kept from the earlier run)\n' train "$mode runs"; continue; }
    if [ "$mode" != full ] && ! ensure_base; then
      local why="time budget: no time left to save the LoRA base (run again with the same --out)"
      base_failed "$LORA_BASE" && why="the LoRA base could not be saved (train/base_model)"
      for b in $BATCHES; do have_result train "${mode}_b$b" || record train "${mode}_b$b" skip "$why" 0; done
      continue
    fi
    for b in $BATCHES; do train_one "$mode" "$b"; done
    # determinism: the smallest batch again, the same losses and norms step for step
    b=${BATCHES%% *}
    local a="$OUT/logs/train/${mode}_b$b.log" r="$OUT/logs/train/${mode}_b${b}_repeat.log"
    if have_result train "${mode}_determinism"; then continue; fi
    if train_one "$mode" "$b" "${mode}_b${b}_repeat" && [ -f "$a" ] && grep -q '^step ' "$a"; then
      if [ "$(losses_of "$a")" = "$(losses_of "$r")" ]; then
        record train "${mode}_determinism" pass "B=$b: two runs, identical losses and grad norms over $(losses_of "$a" | wc -l) steps" 0
      else
        record train "${mode}_determinism" fail "B=$b: the two runs differ: $(diff <(losses_of "$a") <(losses_of "$r") | head -n 3 | tr '\n' ' ')" 0
      fi
    elif ! have_result train "${mode}_b${b}_repeat" || ! have_result train "${mode}_b$b"; then
      record train "${mode}_determinism" skip "time budget: the runs of B=$b did not fit (run again with the same --out)" 0
    else
      record train "${mode}_determinism" skip "a run of B=$b did not complete" 0
    fi
  done
  # one GPT-2 XL size (d48) full fine-tuning run: tokens/s, MFU, device memory at a size where
  # the step is all GEMMs and attention (the model is initialised from the seed: no file to carry)
  train_one xl "$XL_B" "xl_b$XL_B" "$EST_XL" 300
  auto_items
  pack_items
  pref_items
}

# The memory plan on the GPU (issue 31): every run above prints the plan's peak device memory
# (the memory report's components + the reserve for workspaces and libraries) and, after its
# first step, the device memory it took since start-up (cudaMemGetInfo) beside the plan's
# buffers; nvidia-smi gives the device peak. At the other GPT-2 sizes (355M and 774M full
# fine-tuning; emulated: `tiny`) --batch-size auto lets the plan choose the largest micro-batch
# that fits the GPU less 5% and divides AUTO_SEQS sequences a step, and the run takes two steps
# with it: a B the plan got wrong fails here with an out-of-memory error.
auto_items() {
  local m
  for m in $AUTO_MODELS; do
    TRAIN_ARGV=("$BIN/train_gpt2" --model "$m" --train-data "$WORK/train.bin" --batch-size auto --seq-len "$T"
                --total-batch-tokens $((AUTO_SEQS * T)) --steps 2 --lr 1e-4 --warmup-steps 0 --seed 1 --out none)
    mem_poll_start "$OUT/logs/train/auto_$m.mem"
    run_item train "auto_$m" "$EST_AUTO" 300 "${TRAIN_ARGV[@]}"
    mem_poll_stop
  done
}

# Packed fine-tuning (issue 24) against one record per window and a token stream: the chat
# records of dev/pack_data.py prepared three ways at PACK_T (data/prepare --pack, --record-windows
# and the default stream) in this invocation's work folder, then LoRA r=8 on c_attn for
# PACK_STEPS steps on each (two of them warm-up). After a run, the targets each of its steps
# trained (from the shard's mask, in the loader's order) go to the end of its log as a
# "pack_trained" line, from which the report computes trained tokens per second.
PACK_KINDS="packed windows stream"
PACK_DIR="$WORK/pack"
PACK_FAILED=0
ensure_pack_data() {  # the three shards (recorded as train/pack_data when made; not kept across runs)
  local kind fl=() missing=0
  for kind in $PACK_KINDS; do [ -f "$PACK_DIR/$kind/chat_train_000000.mask" ] || missing=1; done
  [ $missing = 0 ] && return 0
  [ "$PACK_FAILED" = 1 ] && return 1
  local log="$OUT/logs/train/pack_data.log" t0; t0=$(date +%s)
  [ "$(left)" -lt 20 ] && return 1
  mkdir -p "$PACK_DIR"
  ( "$PY" dev/pack_data.py records "$PACK_DIR/chat.jsonl" || exit 1
    for kind in $PACK_KINDS; do
      case $kind in packed) fl=(--pack "$PACK_T") ;; windows) fl=(--record-windows "$PACK_T") ;; stream) fl=() ;; esac
      echo "\$ prepare ${fl[*]}"
      timeout -k 10 120 "$BIN/prepare" --input "$PACK_DIR/chat.jsonl" --out-dir "$PACK_DIR/$kind" --name chat --val-tokens 0 "${fl[@]}" || exit 1
    done ) > "$log" 2>&1
  local n=0; for kind in $PACK_KINDS; do [ -f "$PACK_DIR/$kind/chat_train_000000.mask" ] && n=$((n + 1)); done
  if [ $n = 3 ]; then record train pack_data pass "$(grep -m1 '^pack: .* windows' "$log" | cut -c1-200)" $(($(date +%s) - t0)) logs/train/pack_data.log
  else PACK_FAILED=1; record train pack_data fail "$(grep -m1 -E 'error|Error' "$log" | cut -c1-200)" $(($(date +%s) - t0)) logs/train/pack_data.log; fi
  [ $n = 3 ]
}
pack_base() {  # the LoRA base of the pack and DPO runs, saved once; false with BASE_WHY saying why not
  BASE_WHY=""
  save_base "$PACK_BASE_MODEL" "$PACK_BASE" "$([ "$EMULATED" = 1 ] && echo pack_base || echo base_model)" && return 0
  BASE_WHY="time budget: no time left to save the LoRA base (run again with the same --out)"
  base_failed "$PACK_BASE" && BASE_WHY="the LoRA base could not be saved"
  return 1
}
train_kept() {  # LABEL PREFIX KIND...: true (and says so) when every train/PREFIX<KIND> has its result from an earlier run
  local label=$1 pre=$2 kind; shift 2
  for kind; do have_result train "$pre$kind" || return 1; done
  printf '  %-9s %-34s (kept from the earlier run)\n' train "$label"
}
# One timed training item, train/PREFIX<KIND>: recorded as skipped (WHY starts with "time budget")
# or failed when WHY is given, else TRAIN_ARGV run with its memory polled; true when it passed.
train_timed_item() {  # PREFIX KIND WHY EST
  local item=$1$2 why=$3 rc
  if [ -n "$why" ]; then record train "$item" "$([[ $why == "time budget"* ]] && echo skip || echo fail)" "$why" 0; return 1; fi
  mem_poll_start "$OUT/logs/train/$item.mem"
  run_item train "$item" "$4" 240 "${TRAIN_ARGV[@]}"; rc=$?
  mem_poll_stop
  return $rc
}
pack_items() {
  local kind why=""
  train_kept "pack runs" pack_ $PACK_KINDS && return
  if ! prog prepare; then why="prepare is not in $BIN"
  elif ! ensure_pack_data; then
    why="time budget: no time left to prepare the records (run again with the same --out)"
    [ "$PACK_FAILED" = 1 ] && why="the records could not be prepared (train/pack_data)"
  elif ! pack_base; then why=$BASE_WHY
  fi
  for kind in $PACK_KINDS; do
    have_result train "pack_$kind" && continue
    TRAIN_ARGV=("$BIN/train_lora" --model "$PACK_BASE" --train-data "$PACK_DIR/$kind/chat_train_*.bin" --batch-size "$PACK_B"
                --seq-len "$PACK_T" --total-batch-tokens $((PACK_B * PACK_T)) --steps "$PACK_STEPS" --lr 1e-4 --warmup-steps 0
                --seed 1 --lora-targets c_attn --lora-rank 8 --lora-alpha 16 --out none)
    if train_timed_item pack_ "$kind" "$why" "$EST_PACK"; then
      echo "pack_trained $("$PY" dev/pack_data.py trained "$PACK_DIR/$kind/chat_train_000000.mask" "$PACK_B" "$PACK_T" "$PACK_STEPS" | paste -sd' ')" >> "$LAST_LOG"
    fi
  done
}

# Preference tuning (docs/PREFERENCE.md) at a GPU-sized batch: DPO with LoRA r=8 on c_attn (the
# reference is the base with the adapters off: one more forward a micro-step, inside the step
# time) and full DPO (the reference's log-probabilities computed once before training, outside
# the step times; the log says how long it took), PREF_B windows of PREF_T tokens a step. The
# pairs come from the bundled text (dev/pack_data.py pairs: a speech and the one before it as the
# prompt, chosen on one line, rejected in the play's layout), packed whole into the windows by
# data/prepare --pack (--overlong drop: a pair never straddles two windows). After a run, the
# pairs each of its steps trained (from the shard's mask, in the loader's order) go to the end
# of its log as a "pref_pairs" line, from which the report computes pairs/s.
PREF_KINDS="lora full"
PREF_DIR="$WORK/pref"
PREF_FAILED=0
ensure_pref_data() {  # the shard (recorded as train/pref_data when made; not kept across runs)
  [ -f "$PREF_DIR/pairs_train_000000.mask" ] && return 0
  [ "$PREF_FAILED" = 1 ] && return 1
  local log="$OUT/logs/train/pref_data.log" t0; t0=$(date +%s)
  [ "$(left)" -lt 20 ] && return 1
  mkdir -p "$PREF_DIR"
  ( "$PY" dev/pack_data.py pairs "$PREF_DIR/pairs.jsonl" "$PREF_CHARS" "$PREF_PAIRS" &&
    timeout -k 10 120 "$BIN/prepare" --input "$PREF_DIR/pairs.jsonl" --out-dir "$PREF_DIR" --name pairs --val-tokens 0 \
      --pack "$PREF_T" --overlong drop ) > "$log" 2>&1
  if [ -f "$PREF_DIR/pairs_train_000000.mask" ]; then
    record train pref_data pass "$(grep -m1 '^pack: .* windows' "$log" | cut -c1-200)" $(($(date +%s) - t0)) logs/train/pref_data.log
  else
    PREF_FAILED=1; record train pref_data fail "$(grep -m1 -E 'error|Error' "$log" | cut -c1-200)" $(($(date +%s) - t0)) logs/train/pref_data.log
  fi
  [ "$PREF_FAILED" = 0 ]
}
pref_cmd() {  # KIND: TRAIN_ARGV = the command line of one DPO run
  local common=(--train-data "$PREF_DIR/pairs_train_*.bin" --batch-size "$PREF_B" --seq-len "$PREF_T"
                --total-batch-tokens $((PREF_B * PREF_T)) --steps "$PREF_STEPS" --lr 1e-5 --warmup-steps 0 --seed 1
                --objective dpo --out none)
  case "$1" in
    lora) TRAIN_ARGV=("$BIN/train_lora" --model "$PACK_BASE" "${common[@]}" --lora-targets c_attn --lora-rank 8 --lora-alpha 16) ;;
    full) TRAIN_ARGV=("$BIN/train_gpt2" --model "$PREF_FULL_MODEL" "${common[@]}") ;;
  esac
}
pref_items() {
  local kind why=""
  train_kept "pref runs" pref_ $PREF_KINDS && return
  if ! prog prepare; then why="prepare is not in $BIN"
  elif ! ensure_pref_data; then
    why="time budget: no time left to prepare the pairs (run again with the same --out)"
    [ "$PREF_FAILED" = 1 ] && why="the pairs could not be prepared (train/pref_data)"
  fi
  for kind in $PREF_KINDS; do
    have_result train "pref_$kind" && continue
    local w=$why
    if [ -z "$w" ] && [ "$kind" = lora ] && ! pack_base; then w=$BASE_WHY; fi
    pref_cmd "$kind"
    if train_timed_item pref_ "$kind" "$w" "$EST_PREF"; then
      echo "pref_pairs $("$PY" dev/pack_data.py pairs-per-step "$PREF_DIR/pairs_train_000000.mask" "$PREF_B" "$PREF_T" "$PREF_STEPS" | paste -sd' ')" >> "$LAST_LOG"
    fi
  done
}

# ---------------------------------------------------------------------------------------------
section_torch() {
  echo "== torch"
  if ! "$PY" -c 'import torch, transformers' >/dev/null 2>&1; then
    local m
    for m in full lora compiled attention; do skip_item torch "$m" "skipped: PyTorch / transformers not installed for $PY"; done
  else
    local peak; peak=$(sed -n 's/^peak_bf16_tflops=\([0-9.]*\)$/\1/p' "$OUT/logs/env/gpu_info.log" 2>/dev/null | head -n 1)
    local mode cfgs b
    for mode in full lora; do
      cfgs=""; for b in $BATCHES; do cfgs="$cfgs${cfgs:+,}$mode:$b"; done
      run_item torch "$mode" "$EST_TORCH" 400 "$PY" dev/bench_torch_gpu.py --configs "$cfgs" "${TORCH_SHAPE[@]}" --peak-tflops "${peak:-0}"
    done
    # PyTorch's strongest setting for the same model (torch.compile, fused AdamW: the first steps
    # compile, untimed), and its attention kernels at the shapes of attention_bench
    run_item torch compiled "$EST_TORCH" 400 "$PY" dev/bench_torch_gpu.py --configs "$TORCH_COMPILED" "${TORCH_SHAPE[@]}" --peak-tflops "${peak:-0}"
    run_item torch attention 30 300 "$PY" dev/bench_torch_gpu.py --configs "" --attention "$TORCH_ATTENTION"
  fi
  skip_item torch qlora "skipped: no bitsandbytes on the GPU machines (PyTorch QLoRA needs it)"
}

# ---------------------------------------------------------------------------------------------
# the dev/cuda kernel programs (default shapes: GPT-2 124M, B=8, T=1024)
kernel_args() {
  if [ "$EMULATED" = 0 ]; then return; fi
  case "$1" in
    gelu) echo 4096 ;; encoder) echo 2 64 ;; layernorm) echo 64 ;; adamw) echo 4096 ;; classifier) echo 4 ;;
    matmul) echo 64 64 96 ;; bench_ops) echo --small ;; attention_bench) echo 1 64 2 64 ;;
  esac
}
KERNEL_PROGS="matmul attention_bench layernorm gelu encoder classifier adamw bench_ops"
# attention_bench at B=16, NH=12, HS=64 for each T: forward and backward TFLOP/s beside the torch
# section's SDPA flash / cuDNN at the same shapes (the report puts them in one table)
attention_items() {
  local t
  if [ "$EMULATED" = 1 ]; then
    for t in 512 1024 2048; do skip_item kernels "attention_bench_t$t" "skipped: emulated (its baseline calls cuBLAS, which the harness cannot run)"; done
    return
  fi
  for t in $ATTN_SHAPES; do
    if prog attention_bench; then run_item kernels "attention_bench_t$t" "$EST_KERNEL" 300 "$BIN/attention_bench" 16 "$t" 12 64
    else record kernels "attention_bench_t$t" fail "attention_bench is not in $BIN" 0; fi
  done
}
# Nsight Compute, where the machine has it: ncu_step times every kernel of a 2-step full
# fine-tuning run at B=16 (the train section's command) and splits the second step into attention
# forward / backward, GEMMs and the rest (scripts/ncu_step.py; ncu's default cache and clock
# control, as in the first H100 run, whose step took 62.8 ms of kernel time, attention 7.7 + 25.5);
# ncu_attention reads the flash kernels' launch and pipe metrics in attention_bench at B=16,
# T=1024 (registers, occupancy, tensor-pipe activity, shared-memory bank conflicts, local memory;
# L2 hit rate, DRAM bytes, instructions and shared-memory wavefronts per HMMA, global stores: the
# three causes llmc/cuda/README.md predicts), those this ncu knows, and what tells where the time
# goes (issue 30):
#   the tail: sm__cycles_active.avg / sm__cycles_elapsed.avg, the mean SM's busy share of the
#     kernel's time (elapsed counts every SM's cycles from the kernel's start to its end, one
#     clock, so its .avg is its .max; the ratio of the two averages is what a tail model predicts:
#     the SMs' busy time over SMs x the kernel's time);
#   why the warps wait: the warp-state breakdown of Nsight Compute's WarpStateStats section, warps
#     per issued instruction in each state (NCU_STALL_REASONS; e.g. math_pipe_throttle: the pipe
#     the next instruction needs is busy, short_scoreboard: waiting on a shared-memory or MUFU
#     result, wait: a fixed-latency dependency, barrier: __syncthreads), with the issue slots used,
#     the warp cycles per issued instruction and the eligible warps per cycle;
#   the pipes beside the tensor pipe: XU (MUFU.EX2 of the softmax), FMA, ALU, LSU (shared-memory
#     and global instructions) and the shared-memory wavefronts, % of peak, and MUFU per HMMA.
# ncu_source_KERNEL (one item per kernel of NCU_SOURCE_KERNELS, its own time limit) saves one
# launch's SourceCounters section (logs/kernels/ncu_source_KERNEL.ncu-rep, for `ncu -i` later),
# exports its SASS source page as CSV (kept gzipped) and prints the instructions with the most
# excessive shared-memory wavefronts (bank conflicts) with their opcode, and those where the warp
# stall samples fall (ncu_step.py source).
NCU_ATTN_KERNELS="forward backward_dkv backward_dq"   # flash_attention_KERNEL_kernel, the order they run
NCU_STALL_REASONS="barrier branch_resolving dispatch_stall drain imc_miss lg_throttle long_scoreboard math_pipe_throttle
  membar mio_throttle misc no_instruction not_selected selected short_scoreboard sleeping tex_throttle wait"
NCU_ATTN_METRICS="gpu__time_duration.sum launch__registers_per_thread launch__shared_mem_per_block_dynamic
  launch__occupancy_limit_registers launch__occupancy_limit_shared_mem sm__warps_active.avg.pct_of_peak_sustained_active
  sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active sm__throughput.avg.pct_of_peak_sustained_elapsed
  l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
  l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum smsp__inst_executed_op_ldsm.sum
  l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum dram__bytes.sum lts__t_sector_hit_rate.pct
  smsp__inst_executed.sum smsp__inst_executed_pipe_tensor_op_hmma.sum l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
  l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum smsp__inst_executed_op_global_st.sum
  sm__cycles_active.avg sm__cycles_elapsed.avg
  smsp__issue_active.avg.pct_of_peak_sustained_active smsp__average_warp_latency_per_inst_issued.ratio
  smsp__warps_eligible.avg.per_cycle_active
  sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active sm__inst_executed_pipe_xu.sum
  sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
  sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active
  l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed
  $(for r in $NCU_STALL_REASONS; do printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio ' "$r"; done)"
NCU_ATTN_LAUNCHES=4   # profiled launches of each attention kernel
NCU_SOURCE_KERNELS="backward_dkv forward"   # one launch each under SourceCounters
ncu_known_metrics() {  # NCU_ATTN_METRICS split by whether this ncu lists them (by the name before the
  local known m        # first '.'; the launch statistics are in every ncu), so that no unknown name
  known=$("$1" --query-metrics 2>/dev/null | awk '{print $1}')   # fails the run: KNOWN and UNKNOWN (comma lists)
  KNOWN=""; UNKNOWN=""
  for m in $NCU_ATTN_METRICS; do
    if [[ $m == launch__* ]] || grep -qxF "${m%%.*}" <<<"$known"; then KNOWN="$KNOWN${KNOWN:+,}$m"
    else UNKNOWN="$UNKNOWN${UNKNOWN:+,}$m"; fi
  done
}
ncu_items() {
  local ncu k
  local items="ncu_step ncu_attention"; for k in $NCU_SOURCE_KERNELS; do items="$items ncu_source_$k"; done
  if [ "$EMULATED" = 1 ]; then
    for i in $items; do skip_item kernels "$i" "skipped: emulated (Nsight Compute needs a GPU)"; done; return
  fi
  if ! ncu=$(find_ncu); then
    for i in $items; do skip_item kernels "$i" "skipped: ncu (Nsight Compute) not found"; done; return
  fi
  ensure_data
  local STEPS=2  # train_cmd's steps: a warm-up step and the one measured
  train_cmd full 16
  mkdir -p "$OUT/logs/kernels"
  local csv="$OUT/logs/kernels/ncu_step.csv"
  run_item kernels ncu_step 90 240 env CSV="$csv" PYTHON="$PY" bash -c '"$@" && "$PYTHON" scripts/ncu_step.py times "$CSV"' ncu \
    "$ncu" --metrics gpu__time_duration.sum --csv --log-file "$csv" "${TRAIN_ARGV[@]}"
  have_result kernels ncu_attention || ncu_known_metrics "$ncu"
  csv="$OUT/logs/kernels/ncu_attention.csv"
  # one ncu run per kernel (forward, dK/dV, dQ), NCU_ATTN_LAUNCHES launches of each: a single
  # --launch-count over all three would take only the forward's launches, which come first
  run_item kernels ncu_attention 90 300 env CSV="$csv" PYTHON="$PY" N="$NCU_ATTN_LAUNCHES" BENCH="$BIN/attention_bench" \
    KERNELS="$NCU_ATTN_KERNELS" UNKNOWN="${UNKNOWN:-}" bash -c '
    "$1" --version | tail -n 1
    [ -z "$UNKNOWN" ] || echo "ncu_unknown_metrics $UNKNOWN"
    for k in $KERNELS; do
      "$@" --kernel-name "regex:flash_attention_${k}_kernel" --launch-count "$N" --csv --log-file "$CSV.$k" \
        "$BENCH" 16 1024 12 64 > /dev/null || exit 1
    done
    first=1
    for k in $KERNELS; do if [ $first = 1 ]; then cat "$CSV.$k"; first=0; else grep -v "^\"ID\"," "$CSV.$k"; fi; rm -f "$CSV.$k"; done > "$CSV" &&
    "$PYTHON" scripts/ncu_step.py metrics "$CSV"' ncu \
    "$ncu" --metrics "${KNOWN:-gpu__time_duration.sum}"
  for k in $NCU_SOURCE_KERNELS; do
    local rep="$OUT/logs/kernels/ncu_source_$k"
    run_item kernels "ncu_source_$k" 30 180 env NCU="$ncu" REP="$rep" K="$k" PYTHON="$PY" BENCH="$BIN/attention_bench" bash -c '
      "$NCU" --section SourceCounters --kernel-name "regex:flash_attention_${K}_kernel" --launch-count 1 -f -o "$REP" \
        "$BENCH" 16 1024 12 64 > /dev/null || exit 1
      # (--print-source: Nsight Compute 2023.1 and later; the SASS view is the default before)
      "$NCU" -i "$REP.ncu-rep" --page source --csv --print-source sass > "$REP.csv" 2> "$REP.err" ||
        "$NCU" -i "$REP.ncu-rep" --page source --csv > "$REP.csv" || { cat "$REP.err"; exit 1; }
      rm -f "$REP.err"
      "$PYTHON" scripts/ncu_step.py source "$REP.csv" && { gzip -f "$REP.csv" 2> /dev/null || true; }'
  done
}
section_kernels() {
  echo "== kernels"
  local p
  for p in $KERNEL_PROGS; do
    if [ "$p" = attention_bench ]; then attention_items; ncu_items; continue; fi
    # shellcheck disable=SC2046
    if prog "$p"; then run_item kernels "$p" "$EST_KERNEL" 300 "$BIN/$p" $(kernel_args "$p")
    else record kernels "$p" fail "$p is not in $BIN" 0; fi
  done
}

# ---------------------------------------------------------------------------------------------
# compute-sanitizer over the test programs (their shapes are small), the most telling first:
# memcheck (out-of-bounds and misaligned accesses, leaks) on every program; racecheck and synccheck
# (shared-memory hazards, barrier misuse) on the programs whose kernels share memory across threads
# (the flash test on its one-shape quick case: racecheck tracks every shared-memory access);
# initcheck (reads of device memory never written) on every program, each on its TEST_QUICK subset
# (one case of each kind: initcheck costs ~100x, and the whole of test_lora_gpu did not fit).
# scripts/gpu_sanitize.sh runs each and sorts the findings: inside cuBLAS / NCCL kernels they are
# listed as the library's and do not fail the item; in our kernels they do.
SAN_ALL="test_cuda_ops_gpu test_flash_attention_gpu test_gpt2_gpu test_lora_gpu test_qlora_gpu test_pack_gpu"
SAN_SHARED="test_cuda_ops_gpu test_flash_attention_gpu"
section_sanitize() {
  echo "== sanitize"
  local tool p cs progs
  cs=$([ "$EMULATED" = 0 ] && find_sanitizer || true)
  for tool in memcheck racecheck synccheck initcheck; do
    case $tool in racecheck|synccheck) progs=$SAN_SHARED ;; *) progs=$SAN_ALL ;; esac
    for p in $progs; do
      if [ "$EMULATED" = 1 ]; then skip_item sanitize "${tool}_$p" "skipped: emulated (compute-sanitizer needs a GPU)"; continue; fi
      if [ -z "$cs" ]; then skip_item sanitize "${tool}_$p" "skipped: compute-sanitizer not found"; continue; fi
      if ! prog "$p"; then record sanitize "${tool}_$p" fail "$p is not in $BIN" 0; continue; fi
      local envs=(PYTHON="$PY")
      [ "$tool" != memcheck ] && [ "$tool" != initcheck ] && [ "$p" = test_flash_attention_gpu ] && envs+=(FLASH_TEST_QUICK=1)
      [ "$tool" = initcheck ] && envs+=(TEST_QUICK=1 FLASH_TEST_QUICK=1)
      run_item sanitize "${tool}_$p" 40 240 env "${envs[@]}" bash scripts/gpu_sanitize.sh "$cs" "$tool" "$BIN/$p"
    done
  done
}

for s in env tests watchdog train torch kernels sanitize; do
  if want "$s"; then "section_$s"; fi
done
mem_poll_stop
echo "gpu_check: $(( $(date +%s) - START ))s; writing the report"
"$PY" "$ROOT/scripts/gpu_report.py" "$OUT"
