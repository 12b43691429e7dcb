#!/usr/bin/env bash
# Every class of bad input gets one clear "error:" message naming the file or flag (fatal() in
# llmc/base/check.h), a non-zero exit, and leaves nothing half-written.
source "$(dirname "$0")/lib.sh"
T="$BIN_DIR/train_gpt2"
MODEL=test/ref/gpt2_tiny
make_shard "$TMP/ok.bin" 3000 100 1
RUN=(--train-data "$TMP/ok.bin" --batch-size 2 --seq-len 16 --steps 1 --threads 1 --out "$TMP/scratch")

# ---- missing files
expect_fail "missing model file" "$TMP/nope.bin" "$T" --model "$TMP/nope.bin" "${RUN[@]}"
expect_fail "missing data" "no data files match" "$T" --model "$MODEL" --train-data "$TMP/none_*.bin" --seq-len 16 --steps 1
# ---- llm.c .bin: wrong magic, truncated, bad version
"$T" --model "$MODEL" "${RUN[@]}" --out "$TMP/run" --save-format llmc >/dev/null 2>&1 || bad "baseline run failed"
cp "$TMP/run/model.bin" "$TMP/good.bin"
python3 - "$TMP" <<'PY'
import sys, struct
d = sys.argv[1]
b = open(d + "/good.bin", "rb").read()
open(d + "/magic.bin", "wb").write(struct.pack("<i", 12345) + b[4:])
open(d + "/trunc.bin", "wb").write(b[:len(b) - 100])
open(d + "/ver.bin", "wb").write(b[:4] + struct.pack("<i", 4) + b[8:])
open(d + "/short.bin", "wb").write(b[:500])
# token shards: wrong magic, size mismatch, out-of-range token id
s = open(d + "/ok.bin", "rb").read()
open(d + "/tmagic.bin", "wb").write(struct.pack("<i", 7) + s[4:])
open(d + "/ttrunc.bin", "wb").write(s[:-10])
toks = bytearray(s); toks[1024 + 2 * 10: 1024 + 2 * 11] = struct.pack("<H", 150)
open(d + "/trange.bin", "wb").write(bytes(toks))
PY
expect_fail "wrong magic .bin" "magic.bin" "$T" --model "$TMP/magic.bin" "${RUN[@]}"
expect_fail "truncated .bin" "trunc.bin" "$T" --model "$TMP/trunc.bin" "${RUN[@]}"
expect_fail "bad version .bin" "ver.bin" "$T" --model "$TMP/ver.bin" "${RUN[@]}"
expect_fail "header-only .bin" "short.bin" "$T" --model "$TMP/short.bin" "${RUN[@]}"
# ---- token shards
expect_fail "shard wrong magic" "tmagic.bin" "$T" --model "$MODEL" --train-data "$TMP/tmagic.bin" --batch-size 2 --seq-len 16 --steps 1 --out "$TMP/scratch"
expect_fail "shard truncated" "ttrunc.bin" "$T" --model "$MODEL" --train-data "$TMP/ttrunc.bin" --batch-size 2 --seq-len 16 --steps 1 --out "$TMP/scratch"
expect_fail "token id out of range" "out of range for the model's vocabulary" "$T" --model "$MODEL" --train-data "$TMP/trange.bin" --batch-size 2 --seq-len 16 --steps 1 --out "$TMP/scratch"
expect_fail "shard smaller than a batch" "fewer than one global batch" "$T" --model "$MODEL" --train-data "$TMP/ok.bin" --batch-size 64 --seq-len 64 --steps 1 --out "$TMP/scratch"
# ---- HF directory: shape / config mismatch, malformed JSON, broken safetensors
mkdir -p "$TMP/hf_shape" "$TMP/hf_json" "$TMP/hf_st"
cp "$MODEL/model.safetensors" "$TMP/hf_shape/"; sed 's/"n_embd": 64/"n_embd": 128/' "$MODEL/config.json" > "$TMP/hf_shape/config.json"
expect_fail "shape mismatch with config" "shape" "$T" --model "$TMP/hf_shape" "${RUN[@]}"
cp "$MODEL/model.safetensors" "$TMP/hf_json/"; head -c 100 "$MODEL/config.json" > "$TMP/hf_json/config.json"
expect_fail "malformed config.json" "config.json" "$T" --model "$TMP/hf_json" "${RUN[@]}"
cp "$MODEL/config.json" "$TMP/hf_st/"; head -c 5000 "$MODEL/model.safetensors" > "$TMP/hf_st/model.safetensors"
expect_fail "truncated safetensors" "model.safetensors" "$T" --model "$TMP/hf_st" "${RUN[@]}"
# ---- flags
expect_fail "unknown flag" "--bogus" "$T" --model "$MODEL" "${RUN[@]}" --bogus 1
expect_fail "batch size 0" "--batch-size" "$T" --model "$MODEL" "${RUN[@]}" --batch-size 0
expect_fail "lr not a number" "--lr" "$T" --model "$MODEL" "${RUN[@]}" --lr abc
expect_fail "unknown schedule" "--schedule" "$T" --model "$MODEL" "${RUN[@]}" --schedule sawtooth
expect_fail "seq-len beyond n_positions" "--seq-len" "$T" --model "$MODEL" "${RUN[@]}" --seq-len 65
expect_fail "total batch not a multiple" "--total-batch-tokens" "$T" --model "$MODEL" "${RUN[@]}" --total-batch-tokens 33
# batch arithmetic in 64 bits: 2 x 16 tokens per micro-step and 2^32 micro-steps once trained
# nothing and exited 0, 2^31 asked for an 18 EB allocation
expect_fail "2^32 micro-steps per step" "--total-batch-tokens 137438953472 needs 4294967296 micro-steps" "$T" --model "$MODEL" "${RUN[@]}" --total-batch-tokens 137438953472
expect_fail "2^31 micro-steps per step" "--total-batch-tokens 68719476736 needs 2147483648 micro-steps" "$T" --model "$MODEL" "${RUN[@]}" --total-batch-tokens 68719476736
expect_fail "missing value" "--steps needs a value" "$T" --model "$MODEL" --train-data "$TMP/ok.bin" --steps
expect_fail "resume without checkpoint" "no complete checkpoint" "$T" --model "$MODEL" "${RUN[@]}" --out "$TMP/empty" --resume
# ---- nothing overwritten: a new run never clobbers an earlier run's directory, and a resumed
# run that fails leaves the previous checkpoint and outputs intact
before=$(cd "$TMP/run" && sha256sum model.bin model_00000001.bin state_00000001_00000.bin log.jsonl | sha256sum)
expect_fail "new run into a checkpointed dir" "holds checkpoints" "$T" --model "$MODEL" "${RUN[@]}" --out "$TMP/run"
python3 - "$TMP" <<'PY'
import sys, struct
d = sys.argv[1]
s = bytearray(open(d + "/ok.bin", "rb").read()); s[1024 + 2 * 40: 1024 + 2 * 41] = struct.pack("<H", 150)
open(d + "/trange2.bin", "wb").write(bytes(s))  # bad token in the second batch, read after resuming at step 1
PY
# the data of the resumed run changes under the same name (a changed --train-data is refused)
cp "$TMP/trange2.bin" "$TMP/ok.bin"
expect_fail "failing resumed run" "out of range" "$T" --resume --out "$TMP/run" --steps 3
after=$(cd "$TMP/run" && sha256sum model.bin model_00000001.bin state_00000001_00000.bin log.jsonl | sha256sum)
[ "$before" = "$after" ] && ok "previous outputs intact after failed runs" || bad "outputs changed by a failed run"
"$T" --help | grep -q -- "--total-batch-tokens" && ok "--help lists the flags" || bad "--help"

# ---- first-hour friction (issue 29)
L="$BIN_DIR/train_lora"; G="$BIN_DIR/generate"; C="$BIN_DIR/convert"
# unknown flags got no "did you mean": underscores for dashes, other tools' names (HF Trainer,
# PEFT, axolotl, llm.c), a unique beginning, typing errors; a suggestion only names a flag the
# program has, and a flag like nothing gets none
expect_fail "--lora_rank: did you mean" "unknown flag '--lora_rank': did you mean --lora-rank?" "$L" --model "$MODEL" "${RUN[@]}" --lora_rank 8
expect_fail "--learning-rate: did you mean" "unknown flag '--learning-rate': did you mean --lr (-l)?" "$T" --model "$MODEL" "${RUN[@]}" --learning-rate 1e-3
expect_fail "--epoch: did you mean" "unknown flag '--epoch': did you mean --epochs?" "$T" --model "$MODEL" "${RUN[@]}" --epoch 1
expect_fail "--gradient_accumulation_steps: did you mean" "did you mean --total-batch-tokens (-d)? (tokens per optimizer step" \
  "$T" --model "$MODEL" "${RUN[@]}" --gradient_accumulation_steps 4
expect_fail "--warmup: did you mean" "did you mean --warmup-steps (-u)?" "$T" --model "$MODEL" "${RUN[@]}" --warmup 2
expect_fail "--bach-size: did you mean" "did you mean --batch-size (-b)?" "$T" --model "$MODEL" "${RUN[@]}" --bach-size 2
expect_fail "--lora-rank in train_gpt2: no LoRA suggestion" "unknown flag '--lora-r'" "$T" --model "$MODEL" "${RUN[@]}" --lora-r 8
"$T" --model "$MODEL" "${RUN[@]}" --lora-r 8 2>&1 | grep -q "did you mean" && bad "train_gpt2 suggested a flag it lacks for --lora-r" \
  || ok "train_gpt2 --lora-r: no suggestion (train_gpt2 has no LoRA flags)"
"$T" --model "$MODEL" "${RUN[@]}" --bogus 1 2>&1 | grep -q "did you mean" && bad "--bogus got a suggestion" || ok "--bogus: no suggestion"
expect_fail "generate --max_tokens: did you mean" "did you mean --max-new-tokens (-g)?" "$G" --model "$MODEL" --max_tokens 4
# short flags: one meaning in every program, llm.c's letters where llm.c has them (-r is
# --recompute there, not the LoRA rank; -q and -n are the trainers', so generate's -q / -n are gone
# and their errors say what they are now)
declare -A SHORT=([-e]=--model [-i]=--train-data [-j]=--val-data [-o]=--out [-b]=--batch-size [-t]=--seq-len
  [-d]=--total-batch-tokens [-x]=--steps [-k]=--schedule [-l]=--lr [-u]=--warmup-steps [-q]=--final-lr-frac
  [-c]=--weight-decay [-v]=--eval-every [-m]=--eval-batches [-n]=--save-every [-nk]=--keep-checkpoints [-z]=--zero
  [-r]=--recompute [-s]=--sample-every [-g]="--sample-tokens --max-new-tokens" [-h]=--help)
nshort=0; badshort=""
for p in "$T" "$L" "$G" "$C"; do
  while read -r a f; do
    nshort=$((nshort + 1)); [[ " ${SHORT[$a]:-} " == *" $f "* ]] || badshort="$badshort $(basename "$p"): $a = $f;"
  done < <("$p" --help | sed -nE 's/^  (-[a-z]+), (--[a-z0-9-]+).*/\1 \2/p')
done
[ -z "$badshort" ] && [ "$nshort" -ge 50 ] && ok "$nshort short flags in 4 programs, each letter one meaning (llm.c's; -g: tokens to generate)" \
  || bad "short flags ($nshort):$badshort"
expect_fail "train_lora -r is --recompute, as in llm.c" "--recompute: 8 is out of range [0, 2] (given as -r)" "$L" --model "$MODEL" "${RUN[@]}" -r 8
expect_fail "generate -q: --quiet now" "unknown flag '-q': did you mean --quiet? (-q is the trainers' --final-lr-frac, as in llm.c)" "$G" --model "$MODEL" -q
expect_fail "generate -n: -g now" "unknown flag '-n': did you mean --max-new-tokens (-g)? (-n is the trainers' --save-every" "$G" --model "$MODEL" -n 4
# --help shows the range every out-of-range error quotes ("run with --help to see every flag and
# its range"): each numeric flag past its maximum gets an error whose range is the one on its line
nr=0; badr=""
for p in "$T" "$L" "$G"; do
  while IFS='|' read -r f lo hi; do
    v=$(awk -v h="$hi" 'BEGIN { printf "%.0f", h + 1 }'); [ "$hi" = 0.999999 ] && v=1
    err=$("$p" "$f" "$v" 2>&1 >/dev/null | head -n 1)
    nr=$((nr + 1)); [[ "$err" == *"$f: "*" is out of range [$lo, $hi]"* ]] || badr="$badr $(basename "$p") $f $v: '$err';"
  done < <("$p" --help | sed -nE 's/^  (-[a-z]+, )?(--[a-z0-9-]+) .* \[([0-9.e+-]+), ([0-9.e+-]+)\]$/\2|\3|\4/p')
done
[ -z "$badr" ] && [ "$nr" -ge 60 ] && ok "$nr numeric flags: --help shows the range their errors quote" || bad "ranges ($nr):$badr"
finish
