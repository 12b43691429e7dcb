#!/usr/bin/env bash
# scripts/plot_loss.py: from a log.jsonl (a synthetic one, and one a real train_gpt2 run wrote) it
# writes a valid PNG. The file is checked here without the script's code: the signature, IHDR
# (size, 8-bit RGB), the CRC of every chunk, IEND last, the zlib stream inflating to exactly one
# filter byte + one row of pixels per row, and ink of each series' colour (train, val, lr).
# Bad input gets its message and writes nothing.
source "$(dirname "$0")/lib.sh"
PLOT=scripts/plot_loss.py

# check_png FILE W H [min_blue min_orange min_green]: prints what is wrong, nothing if all is well
check_png() {
  python3 - "$@" <<'PY'
import struct, sys, zlib
path, w, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
need = [int(x) for x in sys.argv[4:7]] if len(sys.argv) > 4 else [0, 0, 0]
data = open(path, "rb").read()
if data[:8] != b"\x89PNG\r\n\x1a\n":
    sys.exit("bad signature")
pos, chunks = 8, []
while pos < len(data):
    n, = struct.unpack(">I", data[pos:pos + 4])
    kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
    crc, = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
    if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
        sys.exit("bad CRC in chunk %r" % kind)
    chunks.append((kind, body))
    pos += 12 + n
kinds = [k for k, _ in chunks]
if kinds[0] != b"IHDR" or kinds[-1] != b"IEND" or b"IDAT" not in kinds:
    sys.exit("chunk order %r" % kinds)
W, H, depth, colour, comp, filt, inter = struct.unpack(">IIBBBBB", chunks[0][1])
if (W, H, depth, colour, comp, filt, inter) != (w, h, 8, 2, 0, 0, 0):
    sys.exit("IHDR %r, want %dx%d 8-bit RGB" % ((W, H, depth, colour, comp, filt, inter), w, h))
raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
if len(raw) != H * (1 + 3 * W):
    sys.exit("pixel data is %d bytes, want %d" % (len(raw), H * (1 + 3 * W)))
rows = [raw[y * (1 + 3 * W):(y + 1) * (1 + 3 * W)] for y in range(H)]
if any(r[0] != 0 for r in rows):
    sys.exit("a row uses a filter the writer does not claim")
count = {}
for r in rows:
    for x in range(W):
        c = r[1 + 3 * x:4 + 3 * x]
        count[c] = count.get(c, 0) + 1
got = [count.get(bytes(c), 0) for c in ((31, 119, 180), (255, 127, 14), (44, 160, 44))]
if any(g < n for g, n in zip(got, need)):
    sys.exit("too little ink: train/val/lr pixels %r, want at least %r" % (got, need))
PY
}

# 1. a synthetic log: 200 steps, an eval every 40, a resumed stretch logged twice, a cut last line
python3 - "$TMP/run" <<'PY'
import json, math, os, sys
d = sys.argv[1]; os.makedirs(d)
with open(os.path.join(d, "log.jsonl"), "w") as f:
    for s in list(range(1, 151)) + list(range(121, 201)):
        f.write(json.dumps({"step": s, "train_loss": 3 + 2 * math.exp(-s / 40), "lr": 3e-4 * min(1, s / 10), "grad_norm": 1.0}) + "\n")
        if s % 40 == 0:
            f.write(json.dumps({"step": s, "val_loss": 3.3 + 2 * math.exp(-s / 40)}) + "\n")
    f.write('{"step": 201, "train_lo')
PY
out=$(python3 "$PLOT" "$TMP/run/log.jsonl" 2>"$TMP/err") && ok "plot_loss.py ran: $out" || { cat "$TMP/err"; bad "plot_loss.py failed"; }
msg=$(check_png "$TMP/run/loss.png" 900 640 300 100 300 2>&1) && ok "loss.png: valid PNG, 900x640 RGB, CRCs, pixel rows, ink of train/val/lr" || bad "loss.png: $msg"
grep -q "1 line(s) are not JSON" "$TMP/err" && ok "the cut last line is reported and skipped" || bad "no note on the cut line: $(cat "$TMP/err")"
python3 "$PLOT" "$TMP/run" -o "$TMP/small.png" --width 400 --height 300 --title "Small" >/dev/null 2>&1 \
  && msg=$(check_png "$TMP/small.png" 400 300 1 1 1 2>&1) && ok "a run directory, -o, --width/--height, --title" || bad "small plot: $msg"
[ -z "$(find "$TMP" -name '*.tmp.*')" ] && ok "no temporary files left" || bad "temporary file left"

# 2. the log a real run writes
if [ -x "$BIN_DIR/train_gpt2" ]; then
  make_shard "$TMP/train.bin" 4000 50257 1; make_shard "$TMP/val.bin" 1000 50257 2
  "$BIN_DIR/train_gpt2" --model tiny --train-data "$TMP/train.bin" --val-data "$TMP/val.bin" --batch-size 2 --seq-len 32 --steps 6 \
      --eval-every 2 --eval-batches 2 --threads 2 --save-format none --out "$TMP/real" > "$TMP/train.log" 2>&1 || { cat "$TMP/train.log"; bad "train_gpt2 failed"; }
  python3 "$PLOT" "$TMP/real/log.jsonl" >/dev/null 2>"$TMP/err" && msg=$(check_png "$TMP/real/loss.png" 900 640 50 20 50 2>&1) \
    && ok "train_gpt2's log.jsonl plots: valid PNG with train, val and lr" || { cat "$TMP/err"; bad "real run plot: $msg"; }
else
  echo "skip: $BIN_DIR/train_gpt2 not built: the plot of a real run's log was not made"
fi

# 3. bad input: one message, non-zero exit, nothing written
plot_fails() {
  local what="$1" want="$2"; shift 2
  local out; out=$(python3 "$PLOT" "$@" 2>&1); local rc=$?
  [ $rc -ne 0 ] && grep -qF -- "$want" <<<"$out" && ok "$what -> $out" || bad "$what (rc $rc): $out"
}
plot_fails "missing log" "not found" "$TMP/nope/log.jsonl"
printf '{"step": 1, "grad_norm": 2.0}\n' > "$TMP/empty.jsonl"
plot_fails "log without losses" "holds no train_loss or val_loss values" "$TMP/empty.jsonl" -o "$TMP/none.png"
plot_fails "absurd size" "--width must be in" "$TMP/run/log.jsonl" -o "$TMP/none.png" --width 10
[ ! -e "$TMP/none.png" ] && ok "failed runs wrote no PNG" || bad "a failed run wrote $TMP/none.png"
finish
