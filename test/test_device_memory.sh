#!/usr/bin/env bash
# Out of device memory is a clear start-up error of the CUDA trainers, decided by the run's plan
# (llmc/plan/plan_run.h, memplan.h) before anything is loaded: the plan's peak (the memory report's
# components + a reserve of 1/16 of the device, at most 512 MiB, for workspaces and libraries)
# against the GPU's free memory. Tested on the harness builds of train_gpt2 / train_lora
# (mk/gpucheck.mk) with a small fake device (CUDA_CPU_MEM_BYTES: cudaMemGetInfo reports it less
# what is allocated, cudaMalloc fails past it):
#   - full, LoRA and QLoRA: on a device of half their need, exit 1 naming the peak, when it
#     comes, the memory report's total (equal to that of the same run on a large device), the
#     reserve and the backend's staging buffer (their sum is the peak), the free memory, and
#     settings that fit; no CUDA error,
#     nothing written in --out; the first setting the refusal names trains to the end on that
#     device; on the large device, after the first step, the memory the run took (cudaMemGetInfo)
#     is the plan's within 1% + 0.25 MiB (the ops' small scratch, which the reserve covers);
#   - --batch-size auto on a device between the needs of B = 6 and B = 7: B = 6 (the largest that
#     fits and divides the 24 sequences of a step), which trains to the end; B = 7 is refused;
#   - the hint holds: a device between the needs of --recompute 0 and --recompute 2 refuses the
#     first and trains with the second, and --recompute auto picks the smallest level that fits;
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
common=(--train-data "$TMP/train.bin" --seq-len 64 --steps 2 --lr 1e-3 --warmup-steps 0)

run() {  # MODE CAP [args...]: one run on a device of CAP bytes (0: the default, 64 GiB free), B = 16 unless given
  local mode=$1 cap=$2 prog; shift 2
  local args=(--model test/ref/gpt2_tiny)
  case "$mode" in
    full) prog=train_gpt2 ;;
    lora) prog=train_lora; args+=(--lora-targets c_attn,mlp.c_fc --lora-rank 4) ;;
    qlora) prog=train_lora; args+=(--qlora --lora-targets c_attn --lora-rank 4) ;;
  esac
  [[ " $* " == *" --batch-size "* ]] || args+=(--batch-size 16)
  if [ "$cap" = 0 ]; then "$EMU/$prog" "${args[@]}" "${common[@]}" "$@"
  else CUDA_CPU_MEM_BYTES=$cap "$EMU/$prog" "${args[@]}" "${common[@]}" "$@"; fi
}
mib_bytes() { awk -v m="$1" 'BEGIN { printf "%d", m * 1048576 }'; }
# the memory report's total of a run as its refusal on a 1 MB device states it (nothing is loaded),
# and what the run needs of a device besides the reserve: that total + the backend's staging
need() { run "$@" --out none 2>&1 | sed -n "s/.*(the memory report's total \([0-9.]*\) MiB: .*/\1/p"; }
need_dev() {
  run "$@" --out none 2>&1 | sed -n "s/.*(the memory report's total \([0-9.]*\) MiB: .*; \([0-9.]*\) MiB of staging).*/\1 \2/p" \
    | awk '{ printf "%.2f", $1 + $2 }'
}

for mode in full lora qlora; do
  log="$TMP/$mode.log"
  run $mode 0 --out none > "$log" 2>&1 || { bad "$mode: the run on a large device failed: $(tail -n 3 "$log")"; continue; }
  total=$(sed -n 's/^memory (this rank): .*| total \([0-9.]*\) MiB$/\1/p' "$log")
  [ -n "$total" ] || { bad "$mode: no memory report total"; continue; }
  # the device memory the run took by its first step (the harness counts every cudaMalloc) against the plan's buffers
  read -r took planned <<<"$(sed -n 's/^memory after step 1: measured \([0-9.]*\) MiB (device memory taken since start-up.* | plan \([0-9.]*\) MiB .*/\1 \2/p' "$log")"
  awk -v m="${took:-0}" -v p="${planned:-0}" 'BEGIN { d = m - p; if (d < 0) d = -d; exit !(p > 0 && d <= 0.01 * p + 0.25) }' \
    && ok "$mode: after step 1 the run took $took MiB of the device, the plan $planned MiB" \
    || bad "$mode: after step 1: '$(grep '^memory after step 1' "$log")'"
  cap=$(( $(mib_bytes "$total") / 2 ))
  out="$TMP/out_$mode"
  run $mode "$cap" --out "$out" > "$log" 2>&1; rc=$?
  err=$(grep -m1 '^error: ' "$log")
  read -r peak rtotal reserve staging <<<"$(sed -n "s/.*needs \([0-9.]*\) MiB of device memory at its peak, while training (the memory report's total \([0-9.]*\) MiB: .*; \([0-9.]*\) MiB for workspaces and libraries; \([0-9.]*\) MiB of staging).*/\1 \2 \3 \4/p" <<<"$err")"
  free=$(sed -n 's/.*the GPU has \([0-9.]*\) MiB free of \([0-9.]*\) MiB$/\1 \2/p' <<<"$err")
  want_total=$(awk -v c="$cap" 'BEGIN { printf "%.1f", c / 1048576 }')
  fits=$(sed -n 's/^ *hint: these settings fit .*: \(--[^|]*\).*/\1/p' "$log" | sed 's/ *$//')
  if [ $rc = 1 ] && [ "$rtotal" = "$total" ] && awk -v p="$peak" -v t="$rtotal" -v r="$reserve" -v s="$staging" 'BEGIN { d = p - t - r - s; exit !(d < 0.16 && d > -0.16) }' \
     && [ "${free#* }" = "$want_total" ] && awk -v f="${free%% *}" -v c="$want_total" 'BEGIN { exit !(f > 0 && f <= c) }' \
     && [ -n "$fits" ] && ! grep -qi "cuda error\|cudaError" "$log" && [ ! -e "$out" ]; then
    ok "$mode: a device of $want_total MiB refused at start-up: $(cut -c1-150 <<<"$err")..."
  else
    bad "$mode: exit $rc on a device of $cap bytes (report total $total MiB): $(head -c 900 "$log")"
  fi
  read -ra fitargs <<<"$fits"
  if run $mode "$cap" "${fitargs[@]}" --out none > "$TMP/fit_$mode.log" 2>&1 && grep -q "^summary: finished at step 2 of 2" "$TMP/fit_$mode.log"; then
    ok "$mode: the refusal's first setting ($fits) trains to the end on that device"
  else bad "$mode: the refusal's setting '$fits': $(grep -m1 '^error' "$TMP/fit_$mode.log")"; fi
done
# Under SAN=1 the refusals and fits above (every path of the trainers these cases take) are the
# memory-safety check; what follows checks the plan's arithmetic, which the plain pass covers.
if [ "${SAN:-}" = 1 ]; then echo "skip under SAN=1: the plan's arithmetic (--batch-size / --recompute auto, scratch figures), checked in the plain pass"; finish; exit; fi

# --batch-size auto on a device between the needs of B = 6 and B = 7 (--memory-margin 0: the
# device's whole free memory; a device of C bytes fits a need N when N + C/16 <= C)
n6=$(need_dev full 1000000 --batch-size 6); n7=$(need_dev full 1000000 --batch-size 7)
if [ -n "$n6" ] && [ -n "$n7" ] && awk -v a="$n6" -v b="$n7" 'BEGIN { exit !(a < b) }'; then
  cap=$(awk -v a="$n6" -v b="$n7" 'BEGIN { printf "%d", (a + b) / 2 * 1048576 * 16 / 15 }')
  run full "$cap" --batch-size auto --total-batch-tokens $((24 * 64)) --memory-margin 0 --out none > "$TMP/auto.log" 2>&1; ra=$?
  run full "$cap" --batch-size 7 --out none > "$TMP/b7.log" 2>&1; r7=$?
  if [ $ra = 0 ] && grep -q "^auto: --batch-size 6: the largest micro-batch that fits and divides the 24 sequences of each rank's step (4 micro-steps); 8 would peak at" "$TMP/auto.log" \
     && grep -q "^batch: 6 x 64 per rank x 1 ranks x 4 accumulation = 1536 tokens/step" "$TMP/auto.log" && grep -q "^summary: finished at step 2 of 2" "$TMP/auto.log" \
     && [ $r7 = 1 ] && grep -q "^error: rank 0 needs .* at --batch-size 7 " "$TMP/b7.log"; then
    ok "--batch-size auto on a device of $((cap / 1024)) KiB: B = 6 ($n6 MiB) trains to the end, B = 7 ($n7 MiB) is refused"
  else bad "--batch-size auto: exit $ra / $r7: $(grep -m3 '^auto\|^error\|^batch' "$TMP/auto.log" | tr '\n' ' ') / $(grep -m1 '^error' "$TMP/b7.log")"; fi
  run full 0 --batch-size auto --out none > "$TMP/auto_nototal.log" 2>&1
  grep -q "^error: --batch-size auto needs --total-batch-tokens" "$TMP/auto_nototal.log" && ok "--batch-size auto without --total-batch-tokens: refused, naming it" \
    || bad "--batch-size auto without --total-batch-tokens: $(head -c 300 "$TMP/auto_nototal.log")"
else
  bad "the needs of B = 6 and 7: '$n6' '$n7'"
fi

# the hint: --recompute 2 fits a device that --recompute 0 does not, and --recompute auto finds it
n0=$(need_dev full 1000000 --recompute 0); n1=$(need_dev full 1000000 --recompute 1); n2=$(need_dev full 1000000 --recompute 2)
if [ -n "$n0" ] && [ -n "$n2" ] && awk -v a="$n0" -v b="$n2" 'BEGIN { exit !(b < a) }'; then
  cap=$(awk -v a="$n0" -v b="$n2" 'BEGIN { printf "%d", (a + b) / 2 * 1048576 * 16 / 15 }')
  want=$(awk -v a="$n1" -v c="$cap" 'BEGIN { print (a * 1048576 * 16 / 15 <= c) ? 1 : 2 }')
  run full "$cap" --recompute 0 --out none > "$TMP/r0.log" 2>&1; r0=$?
  run full "$cap" --recompute 2 --out none > "$TMP/r2.log" 2>&1; r2=$?
  run full "$cap" --recompute auto --memory-margin 0 --out none > "$TMP/ra.log" 2>&1; ra=$?
  [ $r0 = 1 ] && grep -q "^error: rank 0 needs .* at --batch-size 16 --seq-len 64 --recompute 0;" "$TMP/r0.log" && [ $r2 = 0 ] && grep -q "^summary: finished at step 2 of 2" "$TMP/r2.log" \
    && ok "a device of $((cap / 1024)) KiB: --recompute 0 ($n0 MiB) refused, --recompute 2 ($n2 MiB) trains to the end" \
    || bad "recompute: exit $r0 / $r2: $(grep -m1 '^error' "$TMP/r0.log") / $(tail -n 2 "$TMP/r2.log")"
  [ $ra = 0 ] && grep -q "^auto: --recompute $want: the smallest level at which --batch-size fits" "$TMP/ra.log" && grep -q "^summary: finished at step 2 of 2" "$TMP/ra.log" \
    && ok "--recompute auto: level $want (needs $n0 / $n1 / $n2 MiB at 0 / 1 / 2), to the end" || bad "--recompute auto: exit $ra: $(grep -m2 '^auto\|^error' "$TMP/ra.log")"
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
  n=$(need full 1000000 --deterministic $det)
  [ "${got% *}" = "$want" ] && [ "$n" = "${got#* }" ] \
    && ok "--deterministic $det: the report's activations hold the attention scratch, $want MiB, and the refusal's need is the report's total, $n MiB" \
    || bad "--deterministic $det: attention scratch / total '$got' (want $want MiB, and the need '$n')"
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
  n=$(need lora 1000000 --lora-dropout $p)
  [ "${got% *}" = "$want" ] && [ "$n" = "${got#* }" ] \
    && ok "lora --lora-dropout $p: the report's activations hold the adapters' scratch, $want MiB, and the refusal's need is the report's total, $n MiB" \
    || bad "lora --lora-dropout $p: adapter scratch / total '$got' (want $want MiB, and the need '$n')"
done
finish
