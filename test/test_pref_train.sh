#!/usr/bin/env bash
# Preference objectives in the trainers (--objective dpo|ipo|orpo|simpo), against TRL 1.16's own
# runs of the same batch (test/ref/pref_tiny/ref.safetensors, dev/gen_pref_ref.py; test_pref.c
# checks the pieces): the batch of two packed windows holding four pairs is written as a pair
# shard by test_pref (LLMC_PREF_SHARD), and each trainer trains on it with the reference's
# hyperparameters (lr 1e-3 constant, AdamW betas 0.9 / 0.95, weight decay 0.1, clip 1.0; fp32):
#   - train_lora from the reference's PEFT adapter (the reference: the base with the adapters off)
#     and train_gpt2 (the reference: the model before training, computed once and stored), every
#     objective: the 10 step losses and gradient norms of log.jsonl == TRL's (1e-5; norms 1e-4
#     relative);
#   - the same global batch as 2 ranks x 1 window under mpirun (ZeRO 1, 2 and 3, DPO, both trainers)
#     and as 2 micro-steps of accumulation (ORPO, whose NLL is a mean over the global batch);
#   - --ref-model: train_gpt2 with the reference's other model: the first step's loss and rewards
#     == TRL's with that reference;
#   - evaluation on held-out pairs (the same batch): val_loss and TRL's metrics at step 0 == TRL's;
#   - resume: stopped at step 5 and resumed == TRL's 10 steps, the stored reference read back
#     (refused, naming it, when it is gone);
#   - the CUDA build (emulated on the CPU by the test harness, bf16): DPO in both trainers == TRL
#     within test_pref.c's bf16 tolerances;
#   - bad settings and data: one clear message each.
source "$(dirname "$0")/lib.sh"
BUILD="${BUILD:-build/cpu}"
command -v python3 >/dev/null || { echo "skip: python3 not installed"; exit 0; }
M=test/ref/pref_tiny
D="$TMP/pairs_000000.bin"
LLMC_PREF_SHARD="$D" "$BUILD/test/test_pref" >/dev/null || { bad "test_pref wrote no pair shard"; exit 1; }
COMMON=(--train-data "$D" -t 64 --steps 10 --lr 1e-3 --schedule constant --weight-decay 0.1 --grad-clip 1 --save-format none --dtype fp32 --threads 2)
LORA=("$BIN_DIR/train_lora" --model "$M" --adapter "$M/lora")
FULL=("$BIN_DIR/train_gpt2" --model "$M")

# steps_match LOG SET [FIRST]: log.jsonl's step losses and norms == TRL's <SET>.train_* (FIRST: the
# first step only, from <SET>.metrics, with the rewards); evals: val_loss and val_ metrics at step 0
compare() {
  python3 - "$@" <<'PY'
import json, struct, sys
log, set_, mode = sys.argv[1], sys.argv[2], sys.argv[3]
f = open("test/ref/pref_tiny/ref.safetensors", "rb")
n = struct.unpack("<Q", f.read(8))[0]
h = json.loads(f.read(n))
def get(k):
    a, b = h[k]["data_offsets"]
    f.seek(8 + n + a)
    return struct.unpack("<%df" % ((b - a) // 4), f.read(b - a))
rows = [json.loads(l) for l in open(log)]
steps = [r for r in rows if "train_loss" in r]
names = ["loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected"]
def close(a, b, tol): return abs(a - b) <= tol * max(1.0, abs(b))
if mode in ("steps", "steps_bf16"):  # bf16: test_pref.c's tolerances of the CUDA build's steps
    L, N = get(set_ + ".train_losses"), get(set_ + ".train_grad_norms")
    tl, tn = (1e-5, 1e-4) if mode == "steps" else (5e-3, 5e-2)
    ok = len(steps) == 10 and all(close(r["train_loss"], l, tl) and abs(r["grad_norm"] - x) <= tn * x for r, l, x in zip(steps, L, N))
    print("worst loss %.2g" % max(abs(r["train_loss"] - l) for r, l in zip(steps, L)))
elif mode == "first":  # the first step's metrics
    m, r = get(set_ + ".metrics"), steps[0]
    ok = all(close(r["train_loss" if k == "loss" else k], m[i], 1e-5) for i, k in enumerate(names))
else:  # the evaluation at step 0
    m = get(set_ + ".metrics")
    r = [x for x in rows if "val_loss" in x][0]
    ok = r["step"] == 0 and all(close(r["val_" + k], m[i], 1e-5) for i, k in enumerate(names))
sys.exit(0 if ok else 1)
PY
}

run() { # NAME ARGS...: a run into $TMP/NAME (console in $TMP/NAME.log)
  local name=$1; shift
  rm -rf "$TMP/$name"
  "$@" --out "$TMP/$name" > "$TMP/$name.log" 2>&1 || { bad "$name: exit $? ($(grep -m1 error "$TMP/$name.log"))"; return 1; }
}

# Under SAN=1 DPO (a reference) and SimPO (none); IPO is DPO's path with another loss formula and
# ORPO runs below (acc_orpo): the plain pass compares all four with TRL.
objectives="dpo ipo orpo simpo"; [ "${SAN:-}" = 1 ] && objectives="dpo simpo"
for o in $objectives; do
  run "lora_$o" "${LORA[@]}" -b 2 "${COMMON[@]}" --objective $o &&
    { w=$(compare "$TMP/lora_$o/log.jsonl" "lora.$o" steps) && ok "train_lora --objective $o: 10 steps == TRL + PEFT ($w)" || bad "train_lora $o vs TRL ($w)"; }
  run "full_$o" "${FULL[@]}" -b 2 "${COMMON[@]}" --objective $o &&
    { w=$(compare "$TMP/full_$o/log.jsonl" "full.$o" steps) && ok "train_gpt2 --objective $o: 10 steps == TRL ($w)" || bad "train_gpt2 $o vs TRL ($w)"; }
done
grep -q "reference: the base with the adapters off" "$TMP/lora_dpo.log" && grep -q "reference: the model before training, log-probabilities of 4 pairs" "$TMP/full_dpo.log" &&
  grep -q "reference: none" "$TMP/full_simpo.log" && [ -f "$TMP/full_dpo/ref_logps_train.bin" ] &&
  ok "start-up report: each way of the reference; train_gpt2 stored it in --out" || bad "the reference's report line / ref_logps_train.bin"

if command -v mpirun >/dev/null 2>&1; then
  source "$(dirname "$0")/lib_mpi.sh" # (OpenMPI's settings for tests, its leak suppressions under ASan)
  # Under SAN=1 ZeRO 3 alone (the preference loss's gathers and shards; ZeRO 1 and 2 share its
  # reduce-scatter, which test_train_mpi.sh runs there): the plain pass runs all three.
  zeros="1 2 3"; [ "${SAN:-}" = 1 ] && zeros=3
  for z in $zeros; do
    run "np2_lora_z$z" mpirun -np 2 "${LORA[@]}" -b 1 --zero $z "${COMMON[@]}" --threads 1 --objective dpo &&
      { compare "$TMP/np2_lora_z$z/log.jsonl" lora.dpo steps >/dev/null && ok "mpirun -np 2 train_lora DPO ZeRO $z == one process == TRL" || bad "np2 LoRA DPO ZeRO $z"; }
    run "np2_full_z$z" mpirun -np 2 "${FULL[@]}" -b 1 --zero $z "${COMMON[@]}" --threads 1 --objective dpo &&
      { compare "$TMP/np2_full_z$z/log.jsonl" full.dpo steps >/dev/null && ok "mpirun -np 2 train_gpt2 DPO ZeRO $z == one process == TRL" || bad "np2 full DPO ZeRO $z"; }
  done
else
  echo "skip: mpirun not installed (the 2-rank runs)"
fi
EMU="$BUILD/gpucheck/emu"
if [ -x "$EMU/train_gpt2" ]; then
  for t in lora full; do
    if [ $t = lora ]; then cmd=("$EMU/train_lora" --model "$M" --adapter "$M/lora"); else cmd=("$EMU/train_gpt2" --model "$M"); fi
    run "emu_$t" "${cmd[@]}" -b 2 "${COMMON[@]/fp32/auto}" --objective dpo &&
      { w=$(compare "$TMP/emu_$t/log.jsonl" "$t.dpo" steps_bf16) && ok "the CUDA build ($t, harness, bf16): DPO's 10 steps == TRL within bf16 tolerance ($w)" || bad "CUDA build $t DPO ($w)"; }
  done
else
  echo "skip: $EMU/train_gpt2 not built: the CUDA build's DPO was not run"
fi
run acc_orpo "${FULL[@]}" -b 1 --total-batch-tokens 128 "${COMMON[@]}" --objective orpo &&
  { compare "$TMP/acc_orpo/log.jsonl" full.orpo steps >/dev/null && ok "ORPO in 2 micro-steps of accumulation == TRL (pairs and NLL averaged over the global batch)" || bad "accumulation ORPO"; }

run refm "${FULL[@]}" -b 2 "${COMMON[@]}" --objective dpo --ref-model "$M/ref" &&
  { compare "$TMP/refm/log.jsonl" full.dpo first && grep -q "reference: .*$M/ref, log-probabilities" "$TMP/refm.log" &&
    ok "--ref-model: the first step's loss, rewards and logps == TRL's with that reference" || bad "--ref-model"; }
run eval_simpo "${LORA[@]}" -b 2 "${COMMON[@]}" --objective simpo --val-data "$D" --eval-every 5 &&
  { compare "$TMP/eval_simpo/log.jsonl" lora.simpo eval && grep -q '"val_rewards/accuracies"' "$TMP/eval_simpo/log.jsonl" &&
    grep -q "val loss (simpo)" "$TMP/eval_simpo.log" && ok "evaluation on held-out pairs: val_loss and TRL's metrics at step 0 == TRL's" || bad "pair evaluation"; }
run eval_dpo "${FULL[@]}" -b 2 "${COMMON[@]}" --objective dpo --val-data "$D" --eval-every 5 &&
  { [ -f "$TMP/eval_dpo/ref_logps_val.bin" ] && python3 -c 'import json,sys,math; r=[json.loads(l) for l in open(sys.argv[1]) if "val_loss" in l]; sys.exit(not(abs(r[0]["val_loss"]-math.log(2))<1e-6 and r[-1]["val_loss"]<r[0]["val_loss"]))' "$TMP/eval_dpo/log.jsonl" &&
    ok "train_gpt2 DPO evaluation: log 2 at step 0 (policy == reference), lower at the end; the validation pairs' reference stored" || bad "DPO evaluation"; }

out=$(python3 scripts/plot_loss.py "$TMP/eval_dpo/log.jsonl" 2>&1) && [[ "$out" == *"reward accuracy"* ]] && [ -s "$TMP/eval_dpo/loss.png" ] &&
  ok "plot_loss.py draws the reward accuracy of a preference run: $out" || bad "plot of a preference run: $out"

# resume: 5 steps, stopped, resumed from --out alone
rm -rf "$TMP/res"
"${FULL[@]}" -b 2 "${COMMON[@]}" --objective dpo --save-every 5 --stop-after 5 --out "$TMP/res" > "$TMP/res1.log" 2>&1
head -c 100 "$TMP/res/ref_logps_train.bin" > "$TMP/res/ref_logps_train.bin.tmp.12345" # (what a kill while writing it leaves)
"$BIN_DIR/train_gpt2" --resume --out "$TMP/res" > "$TMP/res2.log" 2>&1 &&
  compare "$TMP/res/log.jsonl" full.dpo steps >/dev/null && grep -q "^reference: log-probabilities read back from --out" "$TMP/res2.log" &&
  [ ! -e "$TMP/res/ref_logps_train.bin.tmp.12345" ] && grep -q "^cleanup: .*ref_logps_train.bin.tmp.12345" "$TMP/res2.log" &&
  ok "DPO stopped at step 5 and resumed from --out alone == TRL's 10 steps (the reference read back; a reference file's temporary, what a kill while writing it leaves, removed)" || bad "DPO resume ($(grep -m1 error "$TMP/res2.log"))"
expect_fail "resume with another objective is refused" "--objective ipo differs from the run's recorded" "$BIN_DIR/train_gpt2" --resume --out "$TMP/res" --objective ipo

# ---- the stored reference (llmc/run/reflogps.h): keyed by what its values depend on, never read
# back when it is not whole or not log-probabilities, and computed again with --recompute-reference
# ref_edit FILE crc|nan|big|pairs: FILE's values or header changed, with their CRC-32Cs matched (a
# crafted file) or (crc) not; model_edit SRC DST nan|short: the model directory SRC copied to DST
# with NaN token embeddings, or with n_positions 32 (wpe cut)
ref_edit() {
  python3 - "$@" <<'PY'
import struct, sys, json
T = []
for b in range(256):
    c = b
    for _ in range(8): c = (c >> 1) ^ (0x82F63B78 & -(c & 1))
    T.append(c)
def crc32c(d):
    c = 0xffffffff
    for x in d: c = T[(c ^ x) & 0xff] ^ (c >> 8)
    return c ^ 0xffffffff
path, mode = sys.argv[1], sys.argv[2]
b = bytearray(open(path, "rb").read())
h, v = list(struct.unpack("<128q", b[:1024])), b[1024:]
if mode == "crc": v[9] ^= 0x5a
if mode in ("nan", "big"): v[0:8] = struct.pack("<d", float("nan") if mode == "nan" else 1e308)
if mode == "pairs": h[2] += 1 << 60   # 2^60 more pairs: their 16 bytes each wrap to the file's in 64 bits
if mode != "crc": h[5] = crc32c(bytes(v))
if h[1] >= 2: h[8] = crc32c(struct.pack("<8q", *h[:8]))
open(path, "wb").write(struct.pack("<128q", *h) + bytes(v))
PY
}
model_edit() {
  python3 - "$@" <<'PY'
import json, os, shutil, struct, sys
src, dst, mode = sys.argv[1:4]
os.makedirs(dst, exist_ok=True)
for f in ("config.json", "generation_config.json"): shutil.copy(os.path.join(src, f), dst)
raw = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n]); meta = head.pop("__metadata__", None)
data = {k: bytearray(raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]]) for k, e in head.items()}
if mode == "nan":
    k = "transformer.wte.weight"
    data[k] = bytearray(b"\xc0\x7f" * (len(data[k]) // 2)) if head[k]["dtype"] == "BF16" else bytearray(struct.pack("<f", float("nan")) * (len(data[k]) // 4))
else:
    k = "transformer.wpe.weight"; rows, cols = head[k]["shape"]
    data[k] = data[k][:len(data[k]) * 32 // rows]; head[k]["shape"] = [32, cols]
    cfg = json.load(open(os.path.join(src, "config.json"))); cfg["n_positions"] = 32
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"))
off, body = 0, b""
for k in sorted(data):
    head[k]["data_offsets"] = [off, off + len(data[k])]; off += len(data[k]); body += bytes(data[k])
if meta is not None: head["__metadata__"] = meta
hj = json.dumps(head).encode()
open(os.path.join(dst, "model.safetensors"), "wb").write(struct.pack("<Q", len(hj)) + hj + body)
PY
}
stopped() { # stopped OUT ARGS...: train_gpt2 DPO stopped at step 5 (a checkpoint) in OUT
  local d=$1; shift
  rm -rf "$d"
  "${FULL[@]}" -b 2 "${COMMON[@]}" --objective dpo --save-every 5 --stop-after 5 --out "$d" "$@" > "$d.log" 2>&1 || bad "the run into $d: $(grep -m1 error "$d.log")"
}
refused() { # refused WHAT "WORDS|WORDS..." ARGS...: the command fails with one message holding every WORDS (error and hint)
  local what=$1 words=$2; shift 2
  local out w miss=""
  out=$("$@" 2>&1 >/dev/null) && { bad "$what: exit 0, expected a refusal"; return; }
  IFS='|' read -ra ws <<<"$words"
  for w in "${ws[@]}"; do grep -qF -- "$w" <<<"$out" || miss="$miss '$w'"; done
  [ -z "$miss" ] && grep -q "^error: " <<<"$out" && ok "$what -> $(grep -m1 '^error: ' <<<"$out")" || bad "$what: message lacks$miss: $out"
}
recovered() { # recovered WHAT OUT: --recompute-reference resumes OUT to TRL's 10 steps
  "$BIN_DIR/train_gpt2" --resume --out "$2" --recompute-reference > "$2.rec.log" 2>&1 && compare "$2/log.jsonl" full.dpo steps >/dev/null &&
    grep -q "^reference: log-probabilities computed" "$2.rec.log" &&
    ok "$1: --recompute-reference computes it again from the starting model; the resumed run == TRL's 10 steps" || bad "$1: recovery ($(grep -m1 error "$2.rec.log"))"
}
R="$TMP/res/ref_logps_train.bin"
# a lost reference, and a damaged one: the refusal names the file and the flag that works, which recovers it
stopped "$TMP/res"; rm -f "$R"
refused "resume without the stored reference" "ref_logps_train.bin' is missing|give --recompute-reference" "$BIN_DIR/train_gpt2" --resume --out "$TMP/res"
recovered "a deleted ref_logps_train.bin" "$TMP/res"
stopped "$TMP/res"; ref_edit "$R" crc
refused "resume with a damaged stored reference" "ref_logps_train.bin': the values' CRC-32C is not the header's|give --recompute-reference" "$BIN_DIR/train_gpt2" --resume --out "$TMP/res"
recovered "a damaged ref_logps_train.bin" "$TMP/res"
refused "--recompute-reference with the adapters-off reference (nothing stored)" "--recompute-reference is for a stored reference" "${LORA[@]}" -b 2 "${COMMON[@]}" --objective dpo --recompute-reference --out none
# crafted files (CRC-32Cs matched): a pair count whose bytes overflow to the file's (2^60 + 4 pairs in
# 64 value bytes), values that are no log-probabilities
for e in pairs nan big; do
  stopped "$TMP/res"; ref_edit "$R" $e
  case $e in pairs) w="1152921504606846980 pairs do not make its 1088 bytes";; *) w="not sums of log-probabilities";; esac
  refused "resume with a crafted ref_logps_train.bin ($e, CRC-32Cs matched)" "ref_logps_train.bin': |$w|give --recompute-reference" "$BIN_DIR/train_gpt2" --resume --out "$TMP/res"
done
# other weights under the same --model path: a new run (killed after the reference pass, before its
# first checkpoint; --resume auto starts it again) computes the reference of the weights it starts
# from (loss log 2, rewards 0 at step 1); a resumed run is refused until the starting model is back
cp -r "$M" "$TMP/mine"
rm -rf "$TMP/kill"
NOSTEPS=(); for ((i = 0; i < ${#COMMON[@]}; i++)); do [ "${COMMON[i]}" = --steps ] && i=$((i + 1)) || NOSTEPS+=("${COMMON[i]}"); done
"$BIN_DIR/train_gpt2" --model "$TMP/mine" -b 2 "${NOSTEPS[@]}" --steps 100000 --objective dpo --out "$TMP/kill" > "$TMP/kill.log" 2>&1 & pid=$!
for _ in $(seq 600); do grep -q "^reference: log-probabilities computed" "$TMP/kill.log" && break; sleep 0.05; done
kill -9 $pid; wait $pid 2>/dev/null
cp "$M/ref/model.safetensors" "$TMP/mine/model.safetensors"
"$BIN_DIR/train_gpt2" --model "$TMP/mine" -b 2 "${NOSTEPS[@]}" --steps 1 --objective dpo --resume auto --out "$TMP/kill" > "$TMP/kill2.log" 2>&1 &&
  python3 -c 'import json,sys,math; r=[json.loads(l) for l in open(sys.argv[1]) if "train_loss" in l][0]; sys.exit(not(abs(r["train_loss"]-math.log(2))<1e-6 and r["rewards/chosen"]==0 and r["rewards/rejected"]==0))' "$TMP/kill/log.jsonl" &&
  grep -q "holds the log-probabilities of other weights" "$TMP/kill2.log" &&
  ok "other weights under --model after a kill: the new run computes their reference (step 1: loss log 2, rewards 0)" ||
  bad "stale reference after a kill and other weights under --model ($(grep -m1 -E 'error|^reference' "$TMP/kill2.log"))"
cp "$M/model.safetensors" "$TMP/mine/model.safetensors"
stopped "$TMP/chg" --model "$TMP/mine"
cp "$M/ref/model.safetensors" "$TMP/mine/model.safetensors"
refused "resume after other weights were put under --model" "holds the log-probabilities of other weights|put back what the run started with|--recompute-reference" "$BIN_DIR/train_gpt2" --resume --out "$TMP/chg"
cp "$M/model.safetensors" "$TMP/mine/model.safetensors"
"$BIN_DIR/train_gpt2" --resume --out "$TMP/chg" > "$TMP/chg2.log" 2>&1 && compare "$TMP/chg/log.jsonl" full.dpo steps >/dev/null &&
  ok "the starting model put back: the resume reads its reference back, == TRL's 10 steps" || bad "resume with the model put back ($(grep -m1 error "$TMP/chg2.log"))"
# a reference whose log-probabilities are not finite: refused once computed, naming it; a LoRA
# run whose reference (the base with the adapters off) is not finite stops naming it
model_edit "$M/ref" "$TMP/nanref" nan; model_edit "$M" "$TMP/nanbase" nan; model_edit "$M/ref" "$TMP/shortref" short
refused "--ref-model with NaN weights" "the reference model --ref-model $TMP/nanref gives pair 0 of --train-data|not finite sums" "${FULL[@]}" -b 2 "${COMMON[@]}" --objective dpo --ref-model "$TMP/nanref" --out none
refused "train_gpt2 from NaN weights (its reference: the model before training)" "the reference model (the model before training) --model $TMP/nanbase" "$BIN_DIR/train_gpt2" --model "$TMP/nanbase" -b 2 "${COMMON[@]}" --objective dpo --out none
refused "train_lora on a NaN base: the non-finite stop names the reference" "the reference (the base with the adapters off) gave log-probabilities that are not finite|--model $TMP/nanbase" \
  "$BIN_DIR/train_lora" --model "$TMP/nanbase" --adapter "$M/lora" -b 2 "${COMMON[@]}" --objective dpo --max-skipped-steps 2 --out "$TMP/nanlora"
refused "--ref-model shorter than --seq-len" "--ref-model $TMP/shortref holds sequences of at most 32 tokens (n_positions), but --seq-len is 64" "${FULL[@]}" -b 2 "${COMMON[@]}" --objective dpo --ref-model "$TMP/shortref" --out none

# data/prepare's own validation split of pairs (the README's example): a split whose windows are not
# a multiple of -b ends in a partial evaluation batch, whose last token (the split's closing one, the
# training split's first) is marked as a chosen record's start; --val-data of it trains in both
# trainers, packed and with --record-windows
P="${PREPARE_BIN:-$BIN_DIR/prepare}"
python3 - "$TMP/split_pairs.jsonl" <<'PY'
import json, random, sys
random.seed(1)
w = "the a king queen lord lady sword crown night day love hate fair foul sweet bitter".split()
with open(sys.argv[1], "w") as f:
    for i in range(200):
        say = lambda: " " + " ".join(random.choice(w) for _ in range(random.randint(2, 6)))
        f.write(json.dumps({"prompt": "Q%d:%s" % (i, say()), "chosen": say(), "rejected": say()}) + "\n")
PY
"$BIN_DIR/convert" --model tiny --out "$TMP/tiny50k" > /dev/null 2>&1 || bad "convert --model tiny"
for lay in "--pack 64" "--record-windows 64"; do
  rm -rf "$TMP/split"
  "$P" --input "$TMP/split_pairs.jsonl" --out-dir "$TMP/split" --name pairs $lay --quiet > "$TMP/split.log" 2>&1 || bad "prepare $lay: $(cat "$TMP/split.log")"
  V="$TMP/split/pairs_val_000000.bin"
  nwin=$(( ($(stat -c %s "$V") - 1024) / 2 / 64 )) # (the closing token: the integer division drops it)
  for tr in "train_lora objective dpo" "train_gpt2 objective dpo" "train_gpt2 objective simpo"; do
    set -- $tr
    run split_$1_$3 "$BIN_DIR/$1" --model "$TMP/tiny50k" --train-data "$TMP/split/pairs_train_*.bin" --val-data "$TMP/split/pairs_val_*.bin" \
      -b 3 -t 64 --steps 2 --eval-every 1 --eval-batches all --objective $3 --save-format none --threads 2 &&
      { [ $((nwin % 3)) -ne 0 ] && grep -q '"val_loss"' "$TMP/split_$1_$3/log.jsonl" &&
        { [ $1/$3 != train_gpt2/dpo ] || python3 -c 'import json,sys,math; r=[json.loads(l) for l in open(sys.argv[1]) if "val_loss" in l]; sys.exit(not(r[0]["step"] == 0 and abs(r[0]["val_loss"]-math.log(2))<1e-6))' "$TMP/split_$1_$3/log.jsonl"; } &&
        ok "data/prepare $lay's validation split ($nwin windows, -b 3: a partial last batch) as --val-data: $1 --objective $3 evaluates it (train_gpt2 dpo: log 2 at step 0, every pair's stored reference)" ||
        bad "$1 $3 on the split of prepare $lay ($nwin windows)"; }
  done
done

# shards replaced by data/prepare during a run (it renames new files over them): the run goes on
# reading the files it checked, and its losses are an undisturbed run's
rm -rf "$TMP/split"
"$P" --input "$TMP/split_pairs.jsonl" --out-dir "$TMP/split" --name pairs --pack 64 --quiet > /dev/null 2>&1
REPL=("$BIN_DIR/train_gpt2" --model "$TMP/tiny50k" --train-data "$TMP/split/pairs_train_*.bin" --val-data "$TMP/split/pairs_val_*.bin"
      -b 3 -t 64 --steps 200 --eval-every 50 --objective dpo --save-format none --threads 2)
run repl_ref "${REPL[@]}"
rm -rf "$TMP/repl"
"${REPL[@]}" --out "$TMP/repl" > "$TMP/repl.log" 2>&1 & pid=$!
for _ in $(seq 1000); do grep -q '"train_loss"' "$TMP/repl/log.jsonl" 2>/dev/null && break; sleep 0.01; done
head -n 100 "$TMP/split_pairs.jsonl" > "$TMP/other_pairs.jsonl"
"$P" --input "$TMP/other_pairs.jsonl" --out-dir "$TMP/split" --name pairs --pack 64 --quiet > /dev/null 2>&1
kill -0 $pid 2>/dev/null && mid=1 || mid=0
wait $pid && [ $mid = 1 ] && cmp -s <(grep -o '"train_loss":[^,]*' "$TMP/repl/log.jsonl") <(grep -o '"train_loss":[^,]*' "$TMP/repl_ref/log.jsonl") &&
  ok "data/prepare replaced the shards during the run: it read the files it checked (200 steps == an undisturbed run's)" ||
  bad "shards replaced during a run (mid-run: $mid; $(grep -m1 error "$TMP/repl.log"))"

# bad settings and data
expect_fail "sft on pair data" "holds preference pairs: supervised fine-tuning (--objective sft)" "${FULL[@]}" -b 2 "${COMMON[@]}" --out none
make_shard "$TMP/plain.bin" 600 100 1
expect_fail "a preference objective on data without pairs" "holds no preference pairs: --objective dpo trains on pairs" "${FULL[@]}" -b 2 "${COMMON[@]}" --train-data "$TMP/plain.bin" --objective dpo --out none
expect_fail "--label-smoothing with ipo" "--label-smoothing 0.1 is for --objective dpo (robust DPO) and simpo, not ipo" "${FULL[@]}" -b 2 "${COMMON[@]}" --objective ipo --label-smoothing 0.1 --out none
expect_fail "--ref-model with simpo" "--ref-model is the reference of --objective dpo and ipo; simpo has none" "${FULL[@]}" -b 2 "${COMMON[@]}" --objective simpo --ref-model "$M/ref" --out none
expect_fail "--beta without a preference objective" "--beta is a setting of a preference objective" "${FULL[@]}" -b 2 "${COMMON[@]}" --beta 0.2 --out none
expect_fail "--beta 0" "--beta 0: beta must be above 0" "${FULL[@]}" -b 2 "${COMMON[@]}" --objective dpo --beta 0 --out none

echo "test_pref_train: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
