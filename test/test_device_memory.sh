#!/usr/bin/env bash
# Out of device memory is a clear start-up error of the CUDA trainers: before the model takes any
# of its memory they compare what the memory report will list (+ a reserve of 1/16 of the device
# for workspaces and libraries) with the GPU's free memory, and refuse with both figures and the
# flags to change. Tested on the harness builds of train_gpt2 / train_lora (mk/gpucheck.mk) with a
# small fake device (CUDA_CPU_MEM_BYTES: cudaMemGetInfo reports it less what is allocated,
# cudaMalloc fails past it):
#   - full, LoRA and QLoRA: on a device of a quarter of their need, exit 1 with the need (equal to
#     the memory report's total of the same run on a large device), the free memory, the flags
#     (--batch-size, --recompute, --zero); no CUDA error, nothing written in --out;
#   - the hint holds: a device between the needs of --recompute 0 and --recompute 2 refuses the
#     first and trains with the second, to the end;
#   - the attention backward's scratch is in both (the report's activations name it): the figure
#     of llmc/cuda/README.md's formula, the same under --deterministic 0 (the attention has one,
#     deterministic, backward since the atomic-dQ mode was removed), whose need is again its
#     report's total (test/test_gpt2.c checks the bytes themselves against what
#     the harness' device lost when the activations were allocated);
#   - so are the LoRA layers' scratch buffers (the report names them), with and without dropout.
set -u
BUILD="${BUILD:-build/cpu}"
. "$(dirname "$0")/lib.sh"
need_harness_trainers
make_shard "$TMP/train.bin" 20000 100 1
common=(--train-data "$TMP/train.bin" --batch-size 16 --seq-len 64 --steps 2 --lr 1e-3 --warmup-steps 0)

run() {  # MODE CAP [args...]: one run on a device of CAP bytes (0: the default, 64 GiB free)
  local mode=$1 cap=$2 prog; shift 2
  local args=(--model test/ref/gpt2_tiny)
  case "$mode" in
    full) prog=train_gpt2 ;;
    lora) prog=train_lora; args+=(--lora-targets c_attn,mlp.c_fc --lora-rank 4) ;;
    qlora) prog=train_lora; args+=(--qlora --lora-targets c_attn --lora-rank 4) ;;
  esac
  if [ "$cap" = 0 ]; then "$EMU/$prog" "${args[@]}" "${common[@]}" "$@"
  else CUDA_CPU_MEM_BYTES=$cap "$EMU/$prog" "${args[@]}" "${common[@]}" "$@"; fi
}
mib_bytes() { awk -v m="$1" 'BEGIN { printf "%d", m * 1048576 }'; }

for mode in full lora qlora; do
  log="$TMP/$mode.log"
  run $mode 0 --out none > "$log" 2>&1 || { bad "$mode: the run on a large device failed: $(tail -n 3 "$log")"; continue; }
  total=$(sed -n 's/^memory (this rank): .*| total \([0-9.]*\) MiB$/\1/p' "$log")
  [ -n "$total" ] || { bad "$mode: no memory report total"; continue; }
  cap=$(( $(mib_bytes "$total") / 4 ))
  out="$TMP/out_$mode"
  run $mode "$cap" --out "$out" > "$log" 2>&1; rc=$?
  err=$(grep -m1 '^error: ' "$log")
  free=$(sed -n 's/.*the GPU has \([0-9.]*\) MiB free of \([0-9.]*\) MiB$/\1 \2/p' <<<"$err")
  want_total=$(awk -v c="$cap" 'BEGIN { printf "%.1f", c / 1048576 }')
  if [ $rc = 1 ] && grep -q "needs $total MiB of device memory (.*: the memory report's total)" <<<"$err" \
     && [ "${free#* }" = "$want_total" ] && awk -v f="${free%% *}" -v c="$want_total" 'BEGIN { exit !(f > 0 && f <= c) }' \
     && grep -q "hint: lower --batch-size, raise --recompute .*--zero" "$log" && ! grep -qi "cuda error\|cudaError" "$log" \
     && [ ! -e "$out" ]; then
    ok "$mode: a device of $want_total MiB refused at start-up: $(cut -c1-150 <<<"$err")..."
  else
    bad "$mode: exit $rc on a device of $cap bytes (report total $total MiB): $(head -c 600 "$log")"
  fi
done

# the hint: --recompute 2 fits a device that --recompute 0 does not
need() { run full 1000000 --recompute "$1" --out none 2>&1 | sed -n 's/.*needs \([0-9.]*\) MiB .* + \([0-9.]*\) MiB for workspaces.*/\1/p'; }
n0=$(need 0); n2=$(need 2)
if [ -n "$n0" ] && [ -n "$n2" ] && awk -v a="$n0" -v b="$n2" 'BEGIN { exit !(b < a) }'; then
  # a device of C bytes fits a need N when N + C/16 <= C (what the harness allocated before is small)
  cap=$(awk -v a="$n0" -v b="$n2" 'BEGIN { printf "%d", (a + b) / 2 * 1048576 * 16 / 15 }')
  run full "$cap" --recompute 0 --out none > "$TMP/r0.log" 2>&1; r0=$?
  run full "$cap" --recompute 2 --out none > "$TMP/r2.log" 2>&1; r2=$?
  [ $r0 = 1 ] && grep -q "^error: rank 0 needs $n0 MiB" "$TMP/r0.log" && [ $r2 = 0 ] && grep -q "^summary: finished at step 2 of 2" "$TMP/r2.log" \
    && ok "a device of $((cap / 1024)) KiB: --recompute 0 ($n0 MiB) refused, --recompute 2 ($n2 MiB) trains to the end" \
    || bad "recompute: exit $r0 / $r2: $(grep -m1 '^error' "$TMP/r0.log") / $(tail -n 2 "$TMP/r2.log")"
else
  bad "the needs of --recompute 0 and 2: '$n0' '$n2'"
fi
# the attention scratch of gpt2_tiny (C 64, NH 4, HS 16) at B 16, T 64: D and lse rows, 8 bytes a
# head and position (T padded to 64), + one 64 x 64 bf16 dS tile a head (nt = 1), in either mode
for det in 1 0; do
  log="$TMP/det$det.log"
  run full 0 --deterministic $det --out none > "$log" 2>&1 || { bad "--deterministic $det: the run failed: $(tail -n 3 "$log")"; continue; }
  want=$(awk 'BEGIN { B = 16; T = 64; C = 64; NH = 4; b = 8 * B * NH * T + B * NH * 64 * 64 * 2;
                                printf "%.2f", b / 1048576 }')
  got=$(sed -n 's/^memory (this rank): .*attention scratch \([0-9.]*\) MiB incl.) | total \([0-9.]*\) MiB$/\1 \2/p' "$log")
  need=$(run full 1000000 --deterministic $det --out none 2>&1 | sed -n 's/.*needs \([0-9.]*\) MiB of device memory.*/\1/p')
  [ "${got% *}" = "$want" ] && [ "$need" = "${got#* }" ] \
    && ok "--deterministic $det: the report's activations hold the attention scratch, $want MiB, and the refusal's need is the report's total, $need MiB" \
    || bad "--deterministic $det: attention scratch / total '$got' (want $want MiB, and the need '$need')"
done
# the adapters' scratch of the linear layers (llmc/model/linear.c) is in both: bf16 on the CUDA
# build, for B T = 1024 rows of c_attn (64 -> 192) and mlp.c_fc (64 -> 256) at rank 4: h and dh
# (rows x 4 each), and with dropout the dropped-out input and its gradient (rows x 64 each; one
# element each without)
for p in 0 0.1; do
  log="$TMP/lora_dropout$p.log"
  run lora 0 --lora-dropout $p --out none > "$log" 2>&1 || { bad "lora --lora-dropout $p: the run failed: $(tail -n 3 "$log")"; continue; }
  want=$(awk -v p=$p 'BEGIN { n = 1024; printf "%.2f", (2 * (p > 0 ? n * 64 : 1) + 2 * n * 4) * 2 / 1048576 }')
  got=$(sed -n 's/^memory (this rank): .*adapter scratch \([0-9.]*\) MiB incl.) | total \([0-9.]*\) MiB$/\1 \2/p' "$log")
  need=$(run lora 1000000 --lora-dropout $p --out none 2>&1 | sed -n 's/.*needs \([0-9.]*\) MiB of device memory.*/\1/p')
  [ "${got% *}" = "$want" ] && [ "$need" = "${got#* }" ] \
    && ok "lora --lora-dropout $p: the report's activations hold the adapters' scratch, $want MiB, and the refusal's need is the report's total, $need MiB" \
    || bad "lora --lora-dropout $p: adapter scratch / total '$got' (want $want MiB, and the need '$need')"
done
finish
