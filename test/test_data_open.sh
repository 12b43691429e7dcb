#!/usr/bin/env bash
# What the trainer refuses when it opens its data, before the first step, and how it evaluates a
# validation split that does not fill whole batches:
#   - a token id >= the model's vocabulary is refused at start-up with the file, token and byte
#     offset (it was found when its batch came: at step 49 of 80, after two checkpoints);
#   - a glob that matches part of a data/prepare output (a shard missing, or one of an earlier
#     run in its place: what an interrupted data/prepare leaves) is refused; naming the files one
#     by one trains on the part on purpose;
#   - a validation split smaller than a global batch is evaluated (it was refused: "fewer than one
#     global batch"), and a split's last partial batch counts each of its targets once: the val
#     loss equals the per-token mean of runs over whole batches of the same tokens.
source "$(dirname "$0")/lib.sh"
G="$BIN_DIR/train_gpt2"
MODEL=test/ref/gpt2_tiny
P="${PREPARE_BIN:-$BIN_DIR/prepare}"
field() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" "$1"; } # values of a log.jsonl field, one a line

# ---- a token out of range: refused at start-up, not at step 49 of 80 after checkpoints 20 and 40
make_shard "$TMP/t.bin" 6000 100 1
python3 - "$TMP" <<'PY'
import struct, sys
d = sys.argv[1]
s = bytearray(open(d + "/t.bin", "rb").read())
at = 48 * 64 + 10  # token 10 of batch 49 at -b 2 -t 32
s[1024 + 2 * at:1024 + 2 * at + 2] = struct.pack("<H", 100)
open(d + "/late.bin", "wb").write(bytes(s))
PY
RUN=(--model "$MODEL" -b 2 -t 32 --threads 2 --lr 1e-3)
"$G" "${RUN[@]}" --train-data "$TMP/late.bin" --steps 80 --save-every 20 --out "$TMP/late" > "$TMP/late.log" 2>&1; rc=$?
if [ $rc -ne 0 ] && grep -qF "error: '$TMP/late.bin': token id 100 at token 3082 (byte offset 7188) is out of range for the model's vocabulary (100)" "$TMP/late.log" \
   && ! grep -q "^step " "$TMP/late.log" && ! ls "$TMP/late" 2>/dev/null | grep -q DONE_; then
  ok "token out of range refused at open: before step 1, no checkpoint, file + token + byte offset named"
else
  bad "token out of range refused at open (rc $rc): $(grep -m1 '^error' "$TMP/late.log"); steps run: $(grep -c '^step ' "$TMP/late.log"); $(ls "$TMP/late" 2>/dev/null | tr '\n' ' ')"
fi

# ---- a glob over part of a data/prepare output
if [ -x "$P" ]; then
  "$P" --input data/tinyshakespeare.txt --out-dir "$TMP/d" --name s --doc-sep blank --shard-tokens 100000 --val-tokens 2000 --quiet || bad "prepare"
  n=$(ls "$TMP"/d/s_train_*.bin | wc -l)
  # (the GPT-2 vocabulary's ids do not fit the tiny model's 100; "tiny" is a small model with GPT-2's)
  "$G" --model tiny -b 2 -t 32 --threads 2 --steps 1 --train-data "$TMP/d/s_train_*.bin" --val-data "$TMP/d/s_val_*.bin" --out "$TMP/whole" > "$TMP/whole.log" 2>&1 \
    && ok "a whole data/prepare output ($n train shards) trains" || { bad "whole output"; tail -3 "$TMP/whole.log"; }
  mkdir -p "$TMP/part" && cp "$TMP"/d/s_train_00000[013].bin "$TMP/part/"
  expect_fail "partial shard set refused (shard 3 of $n missing)" \
    "'$TMP/part/s_train_000000.bin' is shard 1 of $n of a data/prepare output (set " \
    "$G" --model tiny -b 2 -t 32 --threads 2 --steps 1 --train-data "$TMP/part/s_train_*.bin" --out "$TMP/refused2"
  grep -qF "but shard 3 ('$TMP/part/s_train_000002.bin') is not among the files '$TMP/part/s_train_*.bin' matches" <<<"$("$G" --model tiny -b 2 -t 32 --steps 1 --train-data "$TMP/part/s_train_*.bin" --out none 2>&1)" \
    && ok "the missing shard is named" || bad "missing shard not named"
  "$G" --model tiny -b 2 -t 32 --threads 2 --steps 1 --train-data "$TMP/part/s_train_000000.bin,$TMP/part/s_train_000001.bin" --out "$TMP/named" > "$TMP/named.log" 2>&1 \
    && ok "part of a set named file by file trains" || { bad "named files"; tail -3 "$TMP/named.log"; }
  # an earlier output's shard where this one's should be: another --shard-tokens, same name
  "$P" --input data/tinyshakespeare.txt --out-dir "$TMP/d2" --name s --doc-sep blank --shard-tokens 90000 --val-tokens 2000 --quiet || bad "prepare 2"
  mkdir -p "$TMP/mix" && cp "$TMP"/d/s_train_*.bin "$TMP/mix/" && cp "$TMP/d2/s_train_000001.bin" "$TMP/mix/"
  expect_fail "shard sets of two data/prepare runs mixed refused" "belongs to another one: '$TMP/mix/s_train_*.bin' mixes two data/prepare runs" \
    "$G" --model tiny -b 2 -t 32 --threads 2 --steps 1 --train-data "$TMP/mix/s_train_*.bin" --out "$TMP/refused3"
else
  bad "$P not built: the shard set checks were not run"
fi

# ---- validation: partial batches. V: 97 tokens = one batch of 2 x 32 and a partial one (32
# targets of 64). References over whole batches only: X = tokens 0..64 (-b 2: 64 targets), Y =
# tokens 64..96 (-b 1: 32 targets; its rows see the same tokens as V's second batch's first row).
make_shard "$TMP/train.bin" 3000 100 4
python3 - "$TMP" <<'PY'
import random, struct, sys
d = sys.argv[1]
rng = random.Random(9)
v = [rng.randrange(100) for _ in range(64)] + [7, 8, 9, 10] * 8 + [11]   # a repetitive second part: another loss
def w(name, t):
    with open(f"{d}/{name}.bin", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(t), *([0] * 253))); f.write(struct.pack("<%dH" % len(t), *t))
w("V", v); w("X", v[:65]); w("Y", v[64:])
PY
E=(--model "$MODEL" --train-data "$TMP/train.bin" -t 32 --threads 2 --steps 1 --lr 0 --eval-batches all --dtype fp32)
"$G" "${E[@]}" -b 2 --val-data "$TMP/V.bin" --out "$TMP/eV" > "$TMP/eV.log" 2>&1 || { bad "eval V failed: $(grep -m1 error "$TMP/eV.log")"; }
"$G" "${E[@]}" -b 2 --val-data "$TMP/X.bin" --out "$TMP/eX" > "$TMP/eX.log" 2>&1 || bad "eval X failed"
"$G" "${E[@]}" -b 1 --val-data "$TMP/Y.bin" --out "$TMP/eY" > "$TMP/eY.log" 2>&1 || bad "eval Y failed"
"$G" "${E[@]}" -b 2 --val-data "$TMP/Y.bin" --out "$TMP/eY2" > "$TMP/eY2.log" 2>&1; rc=$?
lv=$(field "$TMP/eV/log.jsonl" val_loss | tail -1); lx=$(field "$TMP/eX/log.jsonl" val_loss | tail -1)
ly=$(field "$TMP/eY/log.jsonl" val_loss | tail -1); ly2=$(field "$TMP/eY2/log.jsonl" val_loss | tail -1)
grep -qF "| val: $TMP/V.bin (2 batches, one partial: each target counts once)" "$TMP/eV.log" \
  && ok "the data line says the validation split has a partial batch" || bad "data line: $(grep '^data' "$TMP/eV.log")"
python3 - "$lv" "$lx" "$ly" <<'PY' && ok "partial validation batch weighted per token: $lv = (64 x $lx + 32 x $ly) / 96" || bad "partial validation batch: V $lv, X $lx, Y $ly"
import sys
v, x, y = map(float, sys.argv[1:4])
want, by_batch = (64 * x + 32 * y) / 96, (x + y) / 2
print(f"  V {v:.8f}  per token {want:.8f}  mean of batch means {by_batch:.8f}")
sys.exit(0 if abs(v - want) <= 2e-6 * abs(want) and abs(by_batch - want) > 1e-3 else 1)
PY
[ $rc -eq 0 ] && python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if abs(a - b) <= 2e-6 * abs(b) else 1)" "$ly2" "$ly" \
  && ok "validation split smaller than a global batch evaluated (33 tokens at -b 2 -t 32): $ly2 = the -b 1 loss $ly" \
  || bad "validation split smaller than a global batch (rc $rc): '$ly2' vs '$ly' $(grep -m1 error "$TMP/eY2.log")"
# the training data still needs one whole global batch
expect_fail "training shard smaller than a global batch still refused" "fewer than one global batch" "$G" --model "$MODEL" -b 2 -t 32 --steps 1 --train-data "$TMP/Y.bin" --out "$TMP/refused4"
finish
