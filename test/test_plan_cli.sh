#!/usr/bin/env bash
# The trainers' plan step on the CPU build (llmc/plan/plan_run.h; the GPU side, the refusal and
# --batch-size auto on a fake device: test/test_device_memory.sh):
#   - --plan loads nothing but the model's config: GPT-2 XL's shape (a directory holding only a
#     config.json for train_lora --qlora; d48 for train_gpt2) is planned in well under a second,
#     with its components, the peak, the step's FLOPs, what fits the memory available and a
#     verdict, the data's size from the shards' headers; nothing is written, not even --out;
#   - one accounting: the plan --plan prints for a run is the one the run reports at start-up (the
#     same peak), and after its first step the run's peak resident set is at most the plan's + 3%
#     (the tiny model: the runtime's measured constants dominate; not under ASan, whose shadow
#     memory the plan does not count);
#   - --plan under mpirun lists every rank's peak (ZeRO 3: rank 0 gathers the model to save it);
#   - --batch-size auto records the micro-batch it chose in run_config.json; --resume with
#     --batch-size auto takes the recorded one, and --resume --plan plans the recorded run;
#   - the final gather of ZeRO 3 is skipped when nothing is written (--out none): rank 0's plan
#     has no "saving" phase then;
#   - --plan's exit status: 0 when the run fits, 3 when it does not (a script gates on it);
#   - --memory-budget drives --plan's verdict and what fits, and --batch-size auto / --recompute
#     auto choose within it (no longer a choice the start-up then refuses);
#   - a run that writes (checkpoints, model.safetensors, model.bin, GGUF) peaks at the plan's peak
#     within 3% (the descriptor tiny: 50257 tokens, so that the model's copies are a visible
#     share): the checkpoint's optimizer state goes to its file through one staging buffer;
#   - DPO with --ref-model: the reference model (loaded, scoring every pair once, freed) is in the
#     plan: the run peaks within it;
#   - the disk: --plan says what --out holds at the end (du within 2%), and the final model.bin
#     is the last checkpoint's model file (a hard link: one inode).
source "$(dirname "$0")/lib.sh"
make_shard "$TMP/train.bin" 20000 100 1
XL="$TMP/xl"
mkdir -p "$XL"
cat > "$XL/config.json" <<'EOF'
{"model_type": "gpt2", "n_embd": 1600, "n_head": 25, "n_layer": 48, "n_positions": 1024, "vocab_size": 50257}
EOF

# ---- GPT-2 XL planned from its config alone, fast
for prog in train_lora train_gpt2; do
  if [ $prog = train_lora ]; then args=(--model "$XL" --qlora --lora-rank 16 --lora-targets all-linear); else args=(--model d48); fi
  t0=$(date +%s%N)
  "$BIN_DIR/$prog" "${args[@]}" --plan --batch-size 1 --seq-len 1024 --out "$TMP/never_$prog" > "$TMP/xl_$prog.log" 2>&1; rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  # (the exit status is the verdict's: 0 fits, 3 does not fit this machine)
  if { { [ $rc = 0 ] && grep -q "^verdict: fits" "$TMP/xl_$prog.log"; } || { [ $rc = 3 ] && grep -q "^verdict: does not fit" "$TMP/xl_$prog.log"; }; } \
     && [ $ms -lt 2000 ] && grep -q "^plan: rank 0 of 1 | cpu .* | L=48 C=1600 NH=25 vocab=50257 |" "$TMP/xl_$prog.log" \
     && grep -q "^  parameters  " "$TMP/xl_$prog.log" && grep -q "^  training: .* | peak [0-9.]* MiB resident while " "$TMP/xl_$prog.log" \
     && grep -q "^  step: [0-9.e+-]* TFLOP on this rank" "$TMP/xl_$prog.log" && grep -q "^fits [0-9.]* MiB (" "$TMP/xl_$prog.log" \
     && [ ! -e "$TMP/never_$prog" ]; then
    ok "$prog --plan at GPT-2 XL shapes: $ms ms, nothing written; $(grep -m1 '^  training:' "$TMP/xl_$prog.log" | cut -c1-110)"
  else bad "$prog --plan at GPT-2 XL: exit $rc in $ms ms: $(head -c 600 "$TMP/xl_$prog.log")"; fi
done
grep -q "^  NF4 base  " "$TMP/xl_train_lora.log" && grep -q "^  adapters  " "$TMP/xl_train_lora.log" && grep -q "^  QLoRA  *0 " "$TMP/xl_train_lora.log" \
  && ok "the QLoRA plan lists the NF4 base, the adapters, and what fits for LoRA and QLoRA" || bad "QLoRA plan: $(cat "$TMP/xl_train_lora.log")"

# ---- the data's size, from the headers
"$BIN_DIR/train_gpt2" --model test/ref/gpt2_tiny --train-data "$TMP/train.bin" --batch-size 4 --seq-len 64 --epochs 2 --plan > "$TMP/data.log" 2>&1
# 19999 targets / (4 x 64) = 78 batches an epoch: 78 steps, 156 for two epochs, each at the step's
# FLOPs over the share of the GEMM rate measured now (its figures in GFLOP/s, positive)
grep -q "^data: 20000 tokens in 1 file: 78 steps of 256 tokens an epoch" "$TMP/data.log" \
  && grep -qE "^time: 156 steps x [0-9]+\.[0-9]{3} s = [0-9.]+ h predicted \([1-9][0-9]* GFLOP/s: 43% of this CPU's GEMM rate measured now, [1-9][0-9]* GFLOP/s" "$TMP/data.log" \
  && ok "--plan: $(grep '^data:' "$TMP/data.log"); $(grep '^time:' "$TMP/data.log" | cut -c1-90)" || bad "--plan data: $(cat "$TMP/data.log")"

# ---- one accounting: --plan's figures are the start-up report's, and the measured peak is within them
common=(--model test/ref/gpt2_tiny --train-data "$TMP/train.bin" --batch-size 8 --seq-len 64 --steps 2 --out none)
"$BIN_DIR/train_gpt2" "${common[@]}" --plan > "$TMP/plan.log" 2>&1
"$BIN_DIR/train_gpt2" "${common[@]}" > "$TMP/run.log" 2>&1
pp=$(sed -n 's/^  training: .* | peak \([0-9.]*\) MiB resident while \([a-z ]*\) |.*/\1 \2/p' "$TMP/plan.log")
rp=$(sed -n 's/^memory plan (this rank): peak \([0-9.]*\) MiB resident while \([a-z ]*\) |.*/\1 \2/p' "$TMP/run.log")
read -r meas plan1 <<<"$(sed -n 's/^memory after step 1: measured \([0-9.]*\) MiB (the peak resident set, getrusage) | plan \([0-9.]*\) MiB.*/\1 \2/p' "$TMP/run.log")"
# (under ASan the resident set holds the shadow memory and the allocator's red zones besides)
slack=$([ "${SAN:-}" = 1 ] && echo 100 || echo 1.03)
if [ -n "$pp" ] && [ "$pp" = "$rp" ] && [ -n "$meas" ] && awk -v m="$meas" -v p="$plan1" -v k="$slack" 'BEGIN { exit !(m > 0 && m <= p * k) }'; then
  ok "--plan's peak is the run's (${pp}); after step 1 the peak resident set is $meas MiB, the plan's $plan1 MiB"
else bad "--plan '$pp' vs the run '$rp'; measured '$meas' plan '$plan1'"; fi

# ---- --plan's exit status (a script gates on it) and --memory-budget: the verdict, and auto
tiny=(--model test/ref/gpt2_tiny --train-data "$TMP/train.bin" --seq-len 64 --out none)
"$BIN_DIR/train_gpt2" "${tiny[@]}" --batch-size 4 --plan > "$TMP/fits.log" 2>&1; r_fit=$?
"$BIN_DIR/train_gpt2" "${tiny[@]}" --batch-size 4 --plan --memory-budget 1 > "$TMP/nofit.log" 2>&1; r_no=$?
if [ $r_fit = 0 ] && grep -q "^verdict: fits: " "$TMP/fits.log" && [ $r_no = 3 ] \
   && grep -q "^verdict: does not fit: .*the buffers, [0-9.]* MiB, are [0-9]*% of --memory-budget 1.0 MiB" "$TMP/nofit.log"; then
  ok "--plan exits 0 when the run fits, 3 when it does not (--memory-budget 1: $(grep -o 'the buffers, [0-9.]* MiB' "$TMP/nofit.log"))"
else bad "--plan's exit status: fits $r_fit ($(grep '^verdict' "$TMP/fits.log")), --memory-budget 1 $r_no ($(grep '^verdict' "$TMP/nofit.log"))"; fi
# --batch-size auto within --memory-budget 50: the largest B whose buffers fit it (the memory
# available alone would take a far larger one), and the run starts with it
"$BIN_DIR/train_gpt2" "${tiny[@]}" --batch-size auto --total-batch-tokens 65536 --steps 1 > "$TMP/auto_free.log" 2>&1
"$BIN_DIR/train_gpt2" "${tiny[@]}" --batch-size auto --total-batch-tokens 65536 --memory-budget 50 --steps 1 > "$TMP/auto_b.log" 2>&1; r_ab=$?
"$BIN_DIR/train_gpt2" "${tiny[@]}" --batch-size auto --recompute auto --total-batch-tokens 65536 --memory-budget 50 --plan > "$TMP/auto_bp.log" 2>&1; r_abp=$?
bf=$(sed -n 's/^auto: --batch-size \([0-9]*\): .*/\1/p' "$TMP/auto_free.log")
bb=$(sed -n 's/^auto: --batch-size \([0-9]*\): .*/\1/p' "$TMP/auto_b.log")
buf=$(sed -n 's/^memory plan (this rank): .* | buffers at most \([0-9.]*\) MiB .*/\1/p' "$TMP/auto_b.log")
if [ $r_ab = 0 ] && [ -n "$bb" ] && [ -n "$bf" ] && [ "$bb" -lt "$bf" ] && awk -v b="$buf" 'BEGIN { exit !(b > 0 && b <= 50) }' \
   && grep -q "^summary: finished" "$TMP/auto_b.log" && [ $r_abp = 0 ] && grep -q "^verdict: fits: .*--memory-budget 50.0 MiB" "$TMP/auto_bp.log"; then
  ok "--batch-size auto within --memory-budget 50: B = $bb (buffers $buf MiB; $bf without the budget), and the run starts with it; --plan fits"
else bad "auto with --memory-budget 50: B '$bb' (without '$bf'), exit $r_ab: $(grep -m2 '^error\|^auto' "$TMP/auto_b.log"); plan exit $r_abp: $(grep '^verdict' "$TMP/auto_bp.log")"; fi

# ---- runs that write: the peak resident set within the plan's, the disk as --plan says
# peak_within NAME LOG PLANLOG: the run's peak resident set (GNU time, LOG.rss) against the peak
# --plan printed: at most 3% above, at most 15% below
peak_within() {
  local p m
  p=$(sed -n 's/^  training: .* | peak \([0-9.]*\) MiB resident while \([a-z -]*\) |.*/\1/p' "$3")
  m=$(awk '{ v = $1 } END { printf "%.1f", v / 1024 }' "$2.rss")
  if [ "${SAN:-}" = 1 ]; then ok "$1: (the peak resident set is not checked under the sanitizers)"; return; fi
  if [ -n "$p" ] && awk -v m="$m" -v p="$p" 'BEGIN { exit !(m > 0 && m <= 1.03 * p && m >= 0.85 * p) }'; then
    ok "$1: the peak resident set $m MiB, the plan's $p MiB ($(sed -n 's/^  training: .* resident while \([a-z -]*\) |.*/while \1/p' "$3"))"
  else bad "$1: the peak resident set '$m' MiB, the plan's '$p' MiB: $(grep -m1 '^error' "$2")"; fi
}
if [ -x /usr/bin/time ]; then
  w=(--model tiny --train-data "$TMP/train.bin" --batch-size 4 --seq-len 64 --steps 2 --save-every 1 --save-gguf q8_0 --out "$TMP/w")
  "$BIN_DIR/train_gpt2" "${w[@]}" --plan > "$TMP/w_plan.log" 2>&1
  /usr/bin/time -f %M -o "$TMP/w.log.rss" "$BIN_DIR/train_gpt2" "${w[@]}" > "$TMP/w.log" 2>&1
  peak_within "train_gpt2 writing 2 checkpoints, model.safetensors, model.bin and GGUF" "$TMP/w.log" "$TMP/w_plan.log"
  disk=$(sed -n 's/^disk: .* | --out: about \([0-9.]*\) MiB at the end.*/\1/p' "$TMP/w_plan.log")
  du=$(du -sk --apparent-size "$TMP/w" | awk '{ printf "%.1f", $1 / 1024 }')
  if [ "$(stat -c %i "$TMP/w/model.bin")" = "$(stat -c %i "$TMP/w/model_00000002.bin")" ] && [ -n "$disk" ] \
     && awk -v d="$disk" -v u="$du" 'BEGIN { exit !(u > 0 && d >= 0.98 * u && d <= 1.02 * u) }' && cmp -s "$TMP/w/model.bin" "$TMP/w/model_00000002.bin"; then
    ok "the final model.bin is the last checkpoint's model file (one inode); --plan said --out holds $disk MiB, du $du MiB"
  else bad "disk: --plan '$disk' MiB, du '$du' MiB; inodes $(stat -c %i "$TMP/w/model.bin" "$TMP/w/model_00000002.bin" 2>&1 | tr '\n' ' ')"; fi
  # DPO on tiny with d6 as --ref-model: the reference model is loaded, scores every pair, is freed
  "${PREPARE_BIN:-data/prepare}" --input test/ref/prepare_pref.jsonl --out-dir "$TMP/pp" --name pp --pack 64 --val-tokens 0 > /dev/null 2>&1
  d=(--model tiny --ref-model d6 --objective dpo --train-data "$TMP/pp/pp_train_000000.bin" --batch-size 2 --seq-len 64 --steps 1 --out none)
  "$BIN_DIR/train_gpt2" "${d[@]}" --plan > "$TMP/d_plan.log" 2>&1
  /usr/bin/time -f %M -o "$TMP/d.log.rss" "$BIN_DIR/train_gpt2" "${d[@]}" > "$TMP/d.log" 2>&1
  peak_within "DPO with --ref-model d6 (train_gpt2, tiny)" "$TMP/d.log" "$TMP/d_plan.log"
fi

# ---- ranks: every rank's peak; ZeRO 3 gathers the model on rank 0 only when it writes it
if command -v mpirun >/dev/null 2>&1; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
  z=(--model test/ref/gpt2_tiny --batch-size 2 --seq-len 64 --zero 3 --plan)
  timeout 60 mpirun -np 2 "$BIN_DIR/train_gpt2" "${z[@]}" --out "$TMP/z3" > "$TMP/z3.log" 2>&1
  timeout 60 mpirun -np 2 "$BIN_DIR/train_gpt2" "${z[@]}" --out none > "$TMP/z3none.log" 2>&1
  if grep -q "^ranks: 0: peak [0-9.]* MiB (saving [a-z ]*), buffers [0-9.]* MiB; 1: peak [0-9.]* MiB ([a-z ]*), buffers" "$TMP/z3.log" \
     && grep -q "^  step: .* MiB sent to the other ranks" "$TMP/z3.log" && ! grep -q "saving" "$TMP/z3none.log" && grep -q "^ranks: 0: " "$TMP/z3none.log" \
     && [ "$(grep -c '^plan: rank' "$TMP/z3.log")" = 1 ] && [ ! -e "$TMP/z3" ]; then
    ok "--plan under mpirun (2 ranks, ZeRO 3): $(grep '^ranks:' "$TMP/z3.log" | cut -c1-140)...; with --out none no rank gathers the model"
  else bad "--plan, 2 ranks: $(head -c 400 "$TMP/z3.log") / $(grep '^ranks' "$TMP/z3none.log")"; fi
fi

# ---- --batch-size auto: the choice recorded, and kept by --resume
out="$TMP/auto"
"$BIN_DIR/train_gpt2" --model test/ref/gpt2_tiny --train-data "$TMP/train.bin" --seq-len 64 --batch-size auto --total-batch-tokens 1024 \
  --steps 4 --stop-after 2 --out "$out" > "$TMP/auto1.log" 2>&1
b=$(sed -n 's/^auto: --batch-size \([0-9]*\): .*/\1/p' "$TMP/auto1.log")
rec=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["flags"]["batch_size"])' "$out/run_config.json" 2>/dev/null)
"$BIN_DIR/train_gpt2" --resume --out "$out" --batch-size auto --plan > "$TMP/auto_plan.log" 2>&1; rp=$?
"$BIN_DIR/train_gpt2" --resume --out "$out" --batch-size auto > "$TMP/auto2.log" 2>&1; r2=$?
if [ "$b" = 16 ] && [ "$rec" = 16 ] && [ $rp = 0 ] && grep -q "^plan: .* | B=16 T=64 x 1 micro-steps " "$TMP/auto_plan.log" && ! grep -q "^auto:" "$TMP/auto_plan.log" \
   && [ $r2 = 0 ] && grep -q "^resumed: step 2 " "$TMP/auto2.log" && grep -q "^batch: 16 x 64 " "$TMP/auto2.log" && grep -q "^summary: finished at step 4 of 4" "$TMP/auto2.log"; then
  ok "--batch-size auto: B = 16 recorded in run_config.json; --resume --plan plans it, --resume --batch-size auto continues with it"
else bad "auto and resume: chose '$b', recorded '$rec', plan exit $rp, resume exit $r2: $(grep -m2 '^error\|^plan' "$TMP/auto_plan.log" "$TMP/auto2.log")"; fi
finish
