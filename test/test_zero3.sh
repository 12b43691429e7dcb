#!/usr/bin/env bash
# ZeRO-3 / FSDP (--zero 3, llmc/dist/fsdp.h) under mpirun with 1, 2 and 4 ranks (oversubscribed):
#   - full fine-tuning and LoRA give the losses of one process at ZeRO 0 with the same global batch
#     (also with --zero3-keep, recompute 2 and gradient accumulation);
#   - the memory report: per-rank parameter shard = total / N plus padding, gather buffers = two
#     blocks and the head (which holds this rank's piece of it); a --memory-budget (the plan's
#     buffers at their largest) one process cannot meet is met by 4 ranks at ZeRO 3;
#   - the trace: the number of all-gathers / reduce-scatters per step is the formula's (tiny, 2
#     blocks, and d6, 6 blocks), and each unit's gather is started before the previous unit's
#     forward compute ends (prefetch);
#   - resume re-shards: ZeRO 3 with 4 ranks -> ZeRO 1 with 2 ranks, ZeRO 1 (2 ranks) -> ZeRO 3 (4);
#   - hybrid sharding (--shard-group), the optimizer offload (--offload-optimizer);
#   - QLoRA (the NF4 base sharded in its packed form) and LoRA training base tensors (--lora-bias,
#     --train-ln-f): losses of one process at np 1, 2, 4, hybrid and --zero3-keep; NF4 bytes per
#     rank = total / N + two blocks' gather buffers; the saved adapter and merged model; resume
#     from ZeRO 3 (4 ranks) at ZeRO 2 (2 ranks).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_mpi.sh"
train_setup # MODEL: L = 2 blocks, 3 units
L=2
LORAB=("${LORA[@]}")                                         # adapters, their layers' biases trained
LORA=(--lora-rank 4 --lora-alpha 8 --lora-targets all-linear) # adapters only

run() { # run NP DIR PROG ARGS...: mpirun, log in DIR.log
  local np=$1 d=$2 prog=$3; shift 3
  timeout 180 mpirun -np "$np" "$BIN_DIR/$prog" "$@" --out "$d" > "$d.log" 2>&1 || { tail -20 "$d.log"; bad "$prog np=$np $* failed"; }
}

# Under SAN=1 (ASan+UBSan, several times slower) the runs that repeat a path with other sizes are
# left to the plain pass: np 1 (no collective) of the losses and of the traces.
LOSS_NPS="1 2 4" TRACE_NPS="1 2"
[ "${SAN:-}" = 1 ] && LOSS_NPS="2 4" TRACE_NPS=2
# ---- losses: np 1, 2, 4 against one process at ZeRO 0
for prog in train_gpt2 train_lora; do
  extra=(); [ $prog = train_lora ] && extra=("${LORA[@]}")
  "$BIN_DIR/$prog" "${COMMON[@]}" "${extra[@]}" --out "$TMP/${prog}_ref" > "$TMP/${prog}_ref.log" 2>&1 || { cat "$TMP/${prog}_ref.log"; bad "$prog: reference failed"; }
  for np in $LOSS_NPS; do
    run $np "$TMP/${prog}_np$np" $prog "${COMMON[@]}" "${extra[@]}" --zero 3
    cmp_losses "$prog np=$np zero=3 matches one process" "$TMP/${prog}_ref" "$TMP/${prog}_np$np" 1e-5
  done
done
run 2 "$TMP/keep" train_gpt2 "${COMMON[@]}" --zero 3 --zero3-keep
cmp_losses "train_gpt2 np=2 zero=3 --zero3-keep matches one process" "$TMP/train_gpt2_ref" "$TMP/keep" 1e-5
run 4 "$TMP/rc4" train_gpt2 "${COMMON[@]}" --zero 3 --recompute 2 --grad-clip 0.5
"$BIN_DIR/train_gpt2" "${COMMON[@]}" --recompute 2 --grad-clip 0.5 --out "$TMP/rc_ref" > "$TMP/rc_ref.log" 2>&1 || bad "recompute reference failed"
cmp_losses "train_gpt2 np=4 zero=3 recompute 2, clip 0.5 matches one process" "$TMP/rc_ref" "$TMP/rc4" 1e-5

# ---- hybrid sharding: 4 ranks in 2 groups of 2 (sharded within a group, replicated across groups)
run 4 "$TMP/hyb" train_gpt2 "${COMMON[@]}" --zero 3 --shard-group 2
cmp_losses "train_gpt2 np=4 zero=3 --shard-group 2 matches one process" "$TMP/train_gpt2_ref" "$TMP/hyb" 1e-5
run 4 "$TMP/hybl" train_lora "${COMMON[@]}" "${LORA[@]}" --zero 3 --shard-group 2
cmp_losses "train_lora np=4 zero=3 --shard-group 2 matches one process" "$TMP/train_lora_ref" "$TMP/hybl" 1e-5
# bf16 GEMMs (--dtype auto on a CPU with AVX512-BF16) hold LoRA's frozen base in bf16 outside the
# units at ZeRO 0-2; at ZeRO 3 it must stay in the units, sharded, as with fp32 GEMMs
if grep -qw -e avx512_bf16 -e amx_bf16 /proc/cpuinfo 2>/dev/null; then
  run 2 "$TMP/lora_bf16" train_lora "${COMMON[@]/fp32/bf16}" "${LORA[@]}" --zero 3 --steps 2
  a=$(grep -o 'parameter elements [0-9]*' "$TMP/train_lora_np2.log"); b=$(grep -o 'parameter elements [0-9]*' "$TMP/lora_bf16.log")
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "train_lora --dtype bf16 np=2 zero=3: the frozen base is sharded in the units ($b, as with fp32)" ||
    bad "train_lora --dtype bf16 at ZeRO 3 shards '$b', fp32 '$a'"
else echo "skip: LoRA with bf16 GEMMs at ZeRO 3 (this CPU has neither AVX512-BF16 nor AMX-BF16)"; fi
line=$(grep '^zero3:' "$TMP/hyb.log")
shard=$(sed -E 's/.*parameter shard ([0-9]+) elements.*/\1/' <<<"$line")
shard2=$(grep '^zero3:' "$TMP/train_gpt2_np2.log" | sed -E 's/.*parameter shard ([0-9]+) elements.*/\1/')
grep -q "sharded over 2 ranks x 2 groups" <<<"$line" && [ "$shard" = "$shard2" ] && ok "--shard-group 2 of 4 ranks: 2 groups, parameter shard $shard elements = that of 2 ranks" || bad "hybrid memory report: $line (2 ranks: $shard2)"
expect_fail "--shard-group that does not divide the ranks" "does not divide the 4 ranks" \
  timeout 60 mpirun -np 4 "$BIN_DIR/train_gpt2" "${COMMON[@]}" --zero 3 --shard-group 3 --out none

# ---- evaluation (forward only, through the units) and --keep-best (rank 0 gathers the model)
make_shard "$TMP/val.bin" 4000 100 9
EV=("${COMMON[@]}" --val-data "$TMP/val.bin" --eval-every 2 --keep-best)
run 4 "$TMP/ev0" train_gpt2 "${EV[@]}" --zero 0
run 4 "$TMP/ev3" train_gpt2 "${EV[@]}" --zero 3
vl() { grep -o '"val_loss": [0-9.e+-]*' "$1/log.jsonl" | awk '{print $2}'; }
if [ -n "$(vl "$TMP/ev0")" ] && [ "$(vl "$TMP/ev0")" = "$(vl "$TMP/ev3")" ] && [ -s "$TMP/ev3/best/best.json" ]; then
  ok "np=4: the validation losses at ZeRO 3 equal ZeRO 0's ($(vl "$TMP/ev3" | wc -l) evaluations), best/ saved"
else bad "ZeRO 3 evaluation: $(vl "$TMP/ev3" | tr '\n' ' ') vs ZeRO 0 $(vl "$TMP/ev0" | tr '\n' ' ')"; fi

# ---- the final model a ZeRO-3 run saves (rank 0 gathers the units) equals the one-process one
python3 - "$TMP/train_gpt2_ref/model_00000006.bin" "$TMP/train_gpt2_np4/model_00000006.bin" <<'PY' && ok "ZeRO-3 np=4 saved model matches one process (max |diff| < 1e-4)" || bad "ZeRO-3 saved model differs"
import struct, sys
a, b = (open(p, "rb").read()[1024:] for p in sys.argv[1:3])
n = len(a) // 4
x, y = struct.unpack(f"{n}f", a), struct.unpack(f"{n}f", b)
d = max(abs(p - q) for p, q in zip(x, y))
print(f"max |diff| {d:.2e} over {n} floats", end=" ")
sys.exit(0 if len(a) == len(b) and d < 1e-4 else 1)
PY

# ---- memory report: parameter shard = total / N (+ padding to 64 elements per unit); gather
# buffers: two of the largest block and the head's (its unit, the largest, padded), which holds
# this rank's piece of the head (params per rank below a replica's: d6 below)
for np in 2 4; do
  line=$(grep '^zero3:' "$TMP/train_gpt2_np$np.log")
  total=$(sed -E 's/.*parameter elements ([0-9]+).*/\1/' <<<"$line")
  shard=$(sed -E 's/.*parameter shard ([0-9]+) elements.*/\1/' <<<"$line")
  nbuf=$(sed -E 's/.*gather buffers ([0-9]+) x up to ([0-9]+) elements \(([0-9]+) in all\).*/\1 \2 \3/' <<<"$line")
  read -r nb unit all <<<"$nbuf"
  lo=$(( (total + np - 1) / np )); hi=$(( lo + (L + 1) * 64 ))
  head=$(( unit ))          # the head is the largest unit
  block=$(( (all - head) / 2 ))
  if [ "$shard" -ge "$lo" ] && [ "$shard" -le "$hi" ] && [ "$nb" = 3 ] && [ $(( block * L + head )) -le $(( total + (L + 1) * 64 * np )) ] &&
     [ "$block" -lt "$head" ]; then
    ok "np=$np: parameter shard $shard elements in [total/N, total/N + units*64] = [$lo, $hi], gather buffers $nb: 2 x $block (blocks) + $head (the head)"
  else bad "np=$np memory report: $line"; fi
done
# the budget (--memory-budget limits the plan's buffers at their largest, start-up included):
# between one process's at ZeRO 0 and the largest of 4 ranks' at ZeRO 3 (--plan lists each rank's;
# with --out none, so that rank 0 gathers no model to save)
need1=$(sed -n 's/^memory plan (this rank): .*| buffers at most \([0-9.]*\) MiB .*/\1/p' "$TMP/train_gpt2_ref.log" | head -1)
need4=$(timeout 60 mpirun -np 4 "$BIN_DIR/train_gpt2" "${COMMON[@]}" --zero 3 --out none --plan 2>&1 | sed -n 's/^ranks: //p' | grep -o 'buffers [0-9.]*' \
        | awk '$2 > m {m = $2} END {print m}')
budget=$(awk -v a="$need1" -v b="$need4" 'BEGIN {printf "%.2f", (a + b) / 2}')
awk -v a="$need1" -v b="$need4" 'BEGIN {exit !(b > 0 && b < a)}' && ok "a ZeRO-3 rank of 4 needs $need4 MiB, one process at ZeRO 0 $need1 MiB" || bad "ZeRO 3 needs '$need4' MiB per rank, not less than one process's '$need1' MiB"
if "$BIN_DIR/train_gpt2" "${COMMON[@]}" --memory-budget "$budget" --out none > "$TMP/budget1.log" 2>&1; then bad "one process fits --memory-budget $budget"
else grep -q "more than --memory-budget" "$TMP/budget1.log" && ok "one process exceeds --memory-budget $budget MiB: $(grep -o 'needs [0-9.]* MiB' "$TMP/budget1.log")" || bad "no budget message"; fi
timeout 180 mpirun -np 4 "$BIN_DIR/train_gpt2" "${COMMON[@]}" --zero 3 --memory-budget "$budget" --out none > "$TMP/budget4.log" 2>&1
grep -q "summary: finished" "$TMP/budget4.log" && ok "4 ranks at ZeRO 3 train within --memory-budget $budget MiB" || { tail -5 "$TMP/budget4.log"; bad "ZeRO-3 run over the budget"; }

# ---- collectives per step and prefetch order (LLMC_FSDP_TRACE=1: rank 0 prints each step's events)
# 4 micro-steps per step at np=1 (128 tokens / 32), 2 at np=2; the tiny model (2 blocks) and d6 (6)
for np in $TRACE_NPS; do
  M=$(( 4 / np ))
  for model in tiny d6; do
    Lm=$L; [ $model = d6 ] && Lm=6
    margs=("${COMMON[@]}"); [ $model = d6 ] && margs=("${COMMON[@]/$MODEL/d6}")
    LLMC_FSDP_TRACE=1 run $np "$TMP/trace$model$np" train_gpt2 "${margs[@]}" --zero 3 --steps 2
    LLMC_FSDP_TRACE=1 run $np "$TMP/tracek$model$np" train_gpt2 "${margs[@]}" --zero 3 --zero3-keep --steps 2
    python3 - "$TMP/trace$model$np.log" "$TMP/tracek$model$np.log" $Lm $M <<'PY' && ok "$model np=$np: $M micro-steps: $(( 2 * Lm - 1 + (M - 1) * (2 * Lm - 4) )) all-gathers (keep: $(( Lm + 1 ))), $(( M * (Lm + 1) )) reduce-scatters per step; every block's next unit gathered before its compute ends" || bad "$model np=$np trace"
import re, sys
L, M = int(sys.argv[3]), int(sys.argv[4])
def steps(path):
    return [l for l in open(path) if l.startswith("fsdp: step")]
bad = 0
# reshard mode: forward H (which stays in its own slot), 0..L-1; backward L-3..0 (L-1 and L-2 are
# still in the two shared slots): 2L - 1 in the first micro-step; the later ones find blocks 0
# and 1 still there from the backward before: 2L - 4
for path, want_g in ((sys.argv[1], 2 * L - 1 + (M - 1) * (2 * L - 4)), (sys.argv[2], L + 1)):
    for line in steps(path):
        g, s = map(int, re.search(r"(\d+) all-gathers, (\d+) reduce-scatters", line).groups())
        if g != want_g or s != M * (L + 1): print("counts", path, line); bad = 1
    if len(steps(path)) != 2: print("steps", path); bad = 1
# prefetch: in every forward, the gather of unit l+1 (H after the last block) starts before block l releases
ev = steps(sys.argv[1])[0].split("trace:")[1].split()
pos = {}
for i, e in enumerate(ev): pos.setdefault(e, []).append(i)
for l in range(L):
    nxt = f"G{l + 1}" if l + 1 < L else "GH"
    # the first release of block l (forward of the first micro-step) comes after that gather
    first_R = pos[f"R{l}"][0]
    if not any(i < first_R for i in pos.get(nxt, [])): print("no prefetch of", nxt, "before", f"R{l}", ev[:30]); bad = 1
sys.exit(bad)
PY
  done
done
unset margs

# QLoRA: a block's gather is two all-gathers (its float part, its NF4 bytes), the head's one; the
# frozen base does not change, so a later step finds blocks 0 and 1, and the head, still there
# from the step before (tiny: 2 blocks, so nothing is gathered again)
for np in 1 2; do
  M=$(( 4 / np ))
  LLMC_FSDP_TRACE=1 run $np "$TMP/traceq$np" train_lora "${COMMON[@]}" "${LORA[@]}" --qlora --zero 3 --steps 2
  g1=$(( 2 * L - 1 + (2 * L - 2) + (M - 1) * 2 * (2 * L - 4) )); g2=$(( M * 2 * (2 * L - 4) ))
  got=$(grep '^fsdp: step' "$TMP/traceq$np.log" | sed -E 's/.*: ([0-9]+) all-gathers, ([0-9]+) reduce-scatters.*/\1 \2/' | tr '\n' ' ')
  [ "$got" = "$g1 0 $g2 0 " ] && ok "QLoRA np=$np: $M micro-steps: $g1 all-gathers in the first step, $g2 in the next, no reduce-scatter" ||
    bad "QLoRA np=$np collectives: '$got', want '$g1 0 $g2 0 '"
done
# a rank's parameters (its blocks' pieces, the blocks' two buffers, the head's buffer) below a
# replica's at d6 (6 blocks) on 2 ranks: (P - H) / 2 + H + 2 Bmax < P (llmc/dist/fsdp.h)
line=$(grep '^zero3:' "$TMP/traced62.log")
total=$(sed -E 's/.*parameter elements ([0-9]+).*/\1/' <<<"$line")
params=$(grep -o 'params [0-9.]* MiB' "$TMP/traced62.log" | awk '{print $2}')
awk -v a="$params" -v t="$total" 'BEGIN {exit !(a > 0 && a < t * 4 / 1048576)}' &&
  ok "d6 np=2: params $params MiB per rank, below a replica's $(awk -v t="$total" 'BEGIN {printf "%.1f", t * 4 / 1048576}') MiB" ||
  bad "d6 np=2: params $params MiB per rank, a replica $total elements"

# ---- resume re-shards between stages and rank counts
R=("${COMMON[@]}" --save-every 3)
run 4 "$TMP/ra" train_gpt2 "${R[@]}" --zero 3 --stop-after 3
cp -r "$TMP/ra" "$TMP/rb"; cp -r "$TMP/ra" "$TMP/rc"
run 4 "$TMP/ra" train_gpt2 "${R[@]}" --zero 3 --resume
cmp_losses "ZeRO 3 np=4: resume is exact" "$TMP/train_gpt2_np4" "$TMP/ra" 0
run 2 "$TMP/rb" train_gpt2 "${R[@]}" --zero 1 --resume
grep -q "re-sharded: 4 ranks -> 2 ranks (ZeRO 3 -> 1)" "$TMP/rb.log" && ok "re-shard message ZeRO 3 (4 ranks) -> ZeRO 1 (2 ranks)" || bad "no re-shard message"
cmp_losses "resume ZeRO 3 np=4 -> ZeRO 1 np=2 matches" "$TMP/train_gpt2_ref" "$TMP/rb" 1e-5
"$BIN_DIR/train_gpt2" "${R[@]}" --zero 0 --resume --out "$TMP/rc" > "$TMP/rc.log" 2>&1 || bad "ZeRO 3 -> one process failed"
cmp_losses "resume ZeRO 3 np=4 -> one process matches" "$TMP/train_gpt2_ref" "$TMP/rc" 1e-5
run 2 "$TMP/rd" train_gpt2 "${R[@]}" --zero 1 --stop-after 3
run 4 "$TMP/rd" train_gpt2 "${R[@]}" --zero 3 --resume
cmp_losses "resume ZeRO 1 np=2 -> ZeRO 3 np=4 matches" "$TMP/train_gpt2_ref" "$TMP/rd" 1e-5

run 4 "$TMP/re" train_gpt2 "${R[@]}" --zero 3 --shard-group 2 --stop-after 3
run 2 "$TMP/re" train_gpt2 "${R[@]}" --zero 2 --resume
cmp_losses "resume ZeRO 3 4 ranks in 2 groups -> ZeRO 2 np=2 matches" "$TMP/train_gpt2_ref" "$TMP/re" 1e-5
grep -q "note: --shard-group is ignored at --zero 2" "$TMP/re.log" && ok "the recorded --shard-group is noted as ignored at ZeRO 2" || bad "no note on the recorded --shard-group"

# ---- the optimizer offload (AdamW state on the host, the update on the CPU: llmc/model/adamw_host.c,
# pipelined in pieces; the CUDA backend's case runs under the harness in
# test/cuda/test_offload_cuda.cu)
LLMC_OFFLOAD_TRACE=1 "$BIN_DIR/train_gpt2" "${COMMON[@]}" --offload-optimizer --out "$TMP/off1" > "$TMP/off1.log" 2>&1 ||
  bad "--offload-optimizer failed"
cmp_losses "--offload-optimizer: the losses of the backend's update, exactly" "$TMP/train_gpt2_ref" "$TMP/off1" 0
grep -q "^optimizer offload: .* per step 0.9 MiB to the host (gradients and parameters), 0.4 MiB back (parameters)" "$TMP/off1.log" &&
  ok "offload report: $(grep -o 'per step.*' "$TMP/off1.log")" || bad "offload report: $(grep '^optimizer offload' "$TMP/off1.log")"
# the pipeline (LLMC_OFFLOAD_TRACE: Dk piece k's copies to the host issued, Uk its CPU update done,
# uk its parameters' copy back issued): every piece once, in order, and each piece's copies to the
# host issued before the previous piece's update ended, its parameters' copy back before the next
# piece's update ended
trace=$(grep -m1 '^offload trace step 2:' "$TMP/off1.log" | cut -d: -f2)
if awk -v t="$trace" 'BEGIN {
      n = split(t, ev, " "); for (i = 1; i <= n; i++) { k = substr(ev[i], 2) + 0; c = substr(ev[i], 1, 1); if ((c, k) in at) exit 1; at[c, k] = i; if (k + 1 > np) np = k + 1 }
      if (np < 3 || n != 3 * np) exit 1
      for (k = 0; k < np; k++) {
        if (!((("D", k) in at) && (("U", k) in at) && (("u", k) in at))) exit 1
        if (!(at["D", k] < at["U", k] && at["U", k] < at["u", k])) exit 1
        if (k >= 1 && !(at["D", k] < at["U", k - 1])) exit 1      # came down during the update before
        if (k + 1 < np && !(at["u", k] < at["U", k + 1])) exit 1  # goes up during the update after
      }
      exit 0 }'; then
  ok "offload pipeline: $(wc -w <<<"$trace") events, each piece's copies issued before the previous piece's update ended"
else bad "offload pipeline order: '$trace'"; fi
run 4 "$TMP/off4" train_gpt2 "${R[@]}" --zero 3 --offload-optimizer --stop-after 3
run 2 "$TMP/off4" train_gpt2 "${R[@]}" --zero 1 --offload-optimizer --resume
cmp_losses "--offload-optimizer at ZeRO 3 np=4, resumed at ZeRO 1 np=2, matches one process" "$TMP/train_gpt2_ref" "$TMP/off4" 1e-5

# ---- QLoRA (the NF4 base sharded as bytes, llmc/dist/fsdp_nf4.c) and LoRA training base tensors (kept
# whole on every rank outside the units)
QL=("${LORA[@]}" --qlora)
BA=("${LORA[@]}" --lora-bias all)
LN=("${LORA[@]}" --train-ln-f)
QB=("${QL[@]}" "${LORAB[@]:6}" --train-ln-f) # QLoRA with lora_only biases and ln_f
for v in QL BA LN QB; do
  declare -n args=$v
  "$BIN_DIR/train_lora" "${COMMON[@]}" "${args[@]}" --out "$TMP/${v}_ref" > "$TMP/${v}_ref.log" 2>&1 || { tail "$TMP/${v}_ref.log"; bad "$v: reference failed"; }
  nps="2 4"; [ $v = QL ] && nps="1 2 4"
  for np in $nps; do
    run $np "$TMP/${v}_np$np" train_lora "${COMMON[@]}" "${args[@]}" --zero 3
    cmp_losses "train_lora ${args[*]:6} np=$np zero=3 matches one process" "$TMP/${v}_ref" "$TMP/${v}_np$np" 1e-5
  done
  unset -n args
done
run 4 "$TMP/QL_hyb" train_lora "${COMMON[@]}" "${QL[@]}" --zero 3 --shard-group 2
cmp_losses "train_lora --qlora np=4 zero=3 --shard-group 2 matches one process" "$TMP/QL_ref" "$TMP/QL_hyb" 1e-5
run 2 "$TMP/QL_keep" train_lora "${COMMON[@]}" "${QL[@]}" --zero 3 --zero3-keep --recompute 2
cmp_losses "train_lora --qlora np=2 zero=3 --zero3-keep --recompute 2 matches one process" "$TMP/QL_ref" "$TMP/QL_keep" 1e-5
run 4 "$TMP/BA_hyb" train_lora "${COMMON[@]}" "${BA[@]}" --train-ln-f --zero 3 --shard-group 2
"$BIN_DIR/train_lora" "${COMMON[@]}" "${BA[@]}" --train-ln-f --out "$TMP/BAL_ref" > "$TMP/BAL_ref.log" 2>&1 || bad "reference failed"
cmp_losses "train_lora --lora-bias all --train-ln-f np=4 zero=3 --shard-group 2 matches one process" "$TMP/BAL_ref" "$TMP/BA_hyb" 1e-5

# the NF4 bytes per rank: the pieces = total / N (+ padding to 64 bytes per unit), and the gather
# buffers two blocks' (the head's buffer holds no NF4 bytes); the floatX part as for the dense units
for np in 2 4; do
  line=$(grep '^zero3: NF4' "$TMP/QL_np$np.log")
  read -r total shard nb unit all < <(sed -E 's/.*NF4 base ([0-9]+) bytes.*NF4 shard ([0-9]+) bytes, NF4 gather buffers ([0-9]+) x up to ([0-9]+) bytes \(([0-9]+) in all\).*/\1 \2 \3 \4 \5/' <<<"$line")
  lo=$(( (total + np - 1) / np )); hi=$(( lo + L * 64 ))
  if [ -n "$total" ] && [ "$total" -gt 0 ] && [ "$shard" -ge "$lo" ] && [ "$shard" -le "$hi" ] && [ "$nb" = 3 ] && [ "$all" = $((2 * unit)) ] && [ "$unit" -le $(( (total / L + 63) / 64 * 64 + np * 64 )) ]; then
    ok "np=$np: NF4 shard $shard bytes in [total/N, total/N + units*64] = [$lo, $hi] of $total, gather buffers 2 x $unit bytes (two blocks; the head's holds none)"
  else bad "np=$np NF4 memory report: $line"; fi
done
grep -q "gradient elements per rank [0-9]* (+ [1-9][0-9]* in buckets)" "$TMP/train_gpt2_np2.log" &&
  ok "ZeRO 3 full training: the report counts FSDP's gradient buckets ($(grep -o '(+ [0-9]* in buckets)' "$TMP/train_gpt2_np2.log"))" ||
  bad "bucket count at ZeRO 3: $(grep '^zero:' "$TMP/train_gpt2_np2.log")"

# what a run saves: the adapter (with the trained biases and ln_f) and the merged model (rank 0
# gathers the units, the NF4 bytes too) equal one process's
for v in QL BA; do
  declare -n args=$v
  "$BIN_DIR/train_lora" "${COMMON[@]/none/hf}" "${args[@]}" --train-ln-f --merge --out "$TMP/${v}_sv1" > "$TMP/${v}_sv1.log" 2>&1 || bad "$v: save reference failed"
  run 4 "$TMP/${v}_sv4" train_lora "${COMMON[@]/none/hf}" "${args[@]}" --train-ln-f --merge --zero 3
  unset -n args
  python3 - "$TMP/${v}_sv1" "$TMP/${v}_sv4" <<'PY' && ok "$v: ZeRO 3 np=4 adapter and merged model match one process" || bad "$v: saved outputs differ"
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); d = b[8 + n:]
    return {k: struct.unpack(f"{(v['data_offsets'][1] - v['data_offsets'][0]) // 4}f", d[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__" and v["dtype"] == "F32"}
bad = 0
for f in ("adapter_model.safetensors", "merged/model.safetensors"):
    a, b = (tensors(f"{d}/{f}") for d in sys.argv[1:3])
    d = max(max(abs(x - y) for x, y in zip(a[k], b[k])) for k in a) if a.keys() == b.keys() and a else 1.0
    extra = sum(1 for k in a if "bias" in k or "ln_f" in k) if f.startswith("adapter") else len(a)
    print(f"{f}: {len(a)} tensors ({extra} {'bias / ln_f' if f.startswith('adapter') else 'in all'}), max |diff| {d:.1e}", end="; ")
    bad |= d > 1e-4 or extra == 0
sys.exit(bad)
PY
done

# resume: QLoRA and trained base tensors at ZeRO 3 with 4 ranks, continued exactly at ZeRO 3 and at
# ZeRO 2 with 2 ranks
for v in QL QB; do
  declare -n args=$v
  R=("${COMMON[@]}" "${args[@]}" --save-every 3)
  run 4 "$TMP/${v}_ra" train_lora "${R[@]}" --zero 3 --stop-after 3
  cp -r "$TMP/${v}_ra" "$TMP/${v}_rb"
  run 4 "$TMP/${v}_ra" train_lora "${R[@]}" --zero 3 --resume
  cmp_losses "$v: ZeRO 3 np=4 resume is exact" "$TMP/${v}_np4" "$TMP/${v}_ra" 0
  run 2 "$TMP/${v}_rb" train_lora "${R[@]}" --zero 2 --resume
  grep -q "re-sharded: 4 ranks -> 2 ranks (ZeRO 3 -> 2)" "$TMP/${v}_rb.log" && cmp_losses "$v: resume ZeRO 3 np=4 -> ZeRO 2 np=2 matches one process" "$TMP/${v}_ref" "$TMP/${v}_rb" 1e-5 ||
    bad "$v: no re-shard message"
  unset -n args
done
finish
