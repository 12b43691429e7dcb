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
finish
