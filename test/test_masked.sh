#!/usr/bin/env bash
# Loss masks that cannot go missing: a shard data/prepare wrote with a mask is refused without it
# (deleted, or .bin files copied without their .mask: it trained on the prompts too, rc 0, with the
# console of a masked run), and so is a mask beside a shard it does not belong to; the data line
# says whether loss masks are on and what share of the targets they train (computed here from
# the mask files); --train-on-inputs trains every token on purpose.
# Loss masks that leave no target (long SFT prompts): a step whose every target is masked has
# nothing to learn from: it is logged as such, makes no update and is no divergence (12 of them
# in a row once aborted the run as "non-finite loss, lower --lr", after a backward on raw
# logits). An all-masked micro-batch inside a step adds zero loss and zero gradient and nothing
# to the count the loss is divided by. Both checked against exact references: the same run on
# the data without the masked windows gives the same losses, bit for bit.
source "$(dirname "$0")/lib.sh"
G="$BIN_DIR/train_gpt2"
MODEL=test/ref/gpt2_tiny
T=32
# shard.bin + shard.mask from tokens and a per-token mask (mask[j] = 0: token j is never a target)
python3 - "$TMP" $T <<'PY'
import random, struct, sys
d, T = sys.argv[1], int(sys.argv[2])
rng = random.Random(5)
phrases = [[rng.randrange(100) for _ in range(rng.randrange(3, 9))] for _ in range(12)]
toks = []
while len(toks) < 40 * T + 1:
    toks.extend(rng.choice(phrases))
def write(name, t, m):
    with open(f"{d}/{name}.bin", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(t), *([0] * 253))); f.write(struct.pack("<%dH" % len(t), *t))
    with open(f"{d}/{name}.mask", "wb") as f:
        f.write(struct.pack("<256i", 20261122, 1, len(m), *([0] * 253))); f.write(bytes(m))
K = 12  # windows 0..K-1 without a target (window w's targets are tokens w*T+1 .. w*T+T)
n = 40 * T + 1
write("prefix", toks[:n], [0] * (K * T + 1) + [1] * (n - K * T - 1))
write("rest", toks[K * T:n], [1] * (n - K * T))  # the same data from window K on
# every odd window masked, and each even window's last target (the next window's first token)
even = [w for w in range(40) if w % 2 == 0]
m = [1] * n
for w in range(40):
    if w % 2: m[w * T + 1:(w + 1) * T + 1] = [0] * T
    else: m[(w + 1) * T] = 0
write("odd", toks[:n], m)
t2, m2 = [], []
for w in even:  # the even windows alone; each window's first token is no target
    t2 += toks[w * T:(w + 1) * T]; m2 += [0] + [1] * (T - 1)
t2.append(toks[(even[-1] + 1) * T]); m2.append(0)
write("even", t2, m2)
PY
RUN=(--model "$MODEL" -b 1 -t $T --lr 1e-3 --schedule constant --warmup-steps 0 --threads 2)
losses() { grep -o '"train_loss": [^,]*' "$1/log.jsonl" | awk '{print $2}' | tr '\n' ' '; }

# ---- 12 steps without a target, then training
"$G" "${RUN[@]}" --train-data "$TMP/prefix.bin" --steps 16 --out "$TMP/p" > "$TMP/p.log" 2>&1; rc=$?
[ $rc -eq 0 ] && ok "12 steps without a target in a row do not stop the run (--max-skipped-steps 10)" || { bad "exit $rc"; tail -5 "$TMP/p.log"; }
n=$(grep -c '"no_targets": true' "$TMP/p/log.jsonl")
[ "$n" = 12 ] && grep -q "^step   12/16 | no targets: every token of the batch is masked, no update" "$TMP/p.log" \
  && ok "logged as steps without targets (12)" || bad "no-target steps logged: $n"
grep -q "non-finite" "$TMP/p.log" && bad "reported as non-finite: $(grep -m1 non-finite "$TMP/p.log")" || ok "not reported as a divergence"
# no update in those steps: steps 13..16 equal steps 1..4 of a run on the data from window 12 on
"$G" "${RUN[@]}" --train-data "$TMP/rest.bin" --steps 4 --out "$TMP/r" > "$TMP/r.log" 2>&1 || { tail "$TMP/r.log"; bad "reference run failed"; }
a=$(losses "$TMP/p"); b=$(losses "$TMP/r")
[ -n "$b" ] && [ "$a" = "$b" ] && ok "no update without targets: the next 4 losses equal a fresh run's, bit for bit ($b)" || bad "losses '$a' vs '$b'"

# steps without targets are counted in the checkpoint (updates + skipped + no-target steps =
# steps): a run stopped after them resumes to the same losses
"$G" "${RUN[@]}" --train-data "$TMP/prefix.bin" --steps 16 --stop-after 13 --out "$TMP/p2" > "$TMP/p2a.log" 2>&1 || { tail -3 "$TMP/p2a.log"; bad "first part failed"; }
"$G" --resume --out "$TMP/p2" > "$TMP/p2b.log" 2>&1 || { tail -3 "$TMP/p2b.log"; bad "resume after steps without targets failed"; }
a=$(losses "$TMP/p"); b=$(losses "$TMP/p2")
[ -n "$b" ] && [ "$a" = "$b" ] && ok "resumed after 12 steps without targets: the same losses" || bad "losses '$a' vs '$b' after resume"

# ---- an all-masked micro-batch in each step: zero loss, zero gradient, not counted
"$G" "${RUN[@]}" --train-data "$TMP/odd.bin" --total-batch-tokens $((2 * T)) --steps 6 --out "$TMP/o" > "$TMP/o.log" 2>&1 || { tail "$TMP/o.log"; bad "masked micro-batch run failed"; }
"$G" "${RUN[@]}" --train-data "$TMP/even.bin" --steps 6 --out "$TMP/e" > "$TMP/e.log" 2>&1 || { tail "$TMP/e.log"; bad "reference run failed"; }
a=$(losses "$TMP/o"); b=$(losses "$TMP/e")
[ -n "$b" ] && [ "$a" = "$b" ] && ok "an all-masked micro-batch adds nothing: 6 losses equal those without it, bit for bit" || bad "losses '$a' vs '$b'"

# ---- masks that cannot go missing (data/prepare's records, GPT-2 tokens: the built-in tiny model)
P="${PREPARE_BIN:-$BIN_DIR/prepare}"
if [ -x "$P" ]; then
  python3 - "$TMP/sft.jsonl" <<'PY'
import json, random, sys
r = random.Random(3)
with open(sys.argv[1], "w") as f:
    for i in range(200):
        q = " ".join(r.choice(["why", "is", "the", "sky", "blue", "what", "time", "it"]) for _ in range(8))
        f.write(json.dumps({"prompt": "Q: " + q + "?\nA:", "completion": " because " + q.split()[0] + "."}) + "\n")
PY
  "$P" --input "$TMP/sft.jsonl" --out-dir "$TMP/m" --name sft --val-frac 0.2 --quiet || bad "prepare records"
  S=(--model tiny -b 2 -t 32 --steps 1 --threads 2)
  "$G" "${S[@]}" --train-data "$TMP/m/sft_train_*.bin" --val-data "$TMP/m/sft_val_*.bin" --out "$TMP/mo" > "$TMP/mo.log" 2>&1 || { tail -3 "$TMP/mo.log"; bad "masked run failed"; }
  pct=$(python3 - "$TMP"/m/sft_train_*.mask <<'PY'
import sys
t = k = 0
for p in sys.argv[1:]:
    b = open(p, "rb").read()[1024:]
    t += len(b) - 1; k += sum(x & 1 for x in b[1:])  # the targets: every token but a shard's first
print(f"{100 * k / t:.1f}")
PY
)
  grep -q "^data: .* | loss masks: on ($pct% of tokens trained) | val: " "$TMP/mo.log" \
    && ok "the data line says: loss masks: on ($pct% of tokens trained, counted from the mask files)" || bad "data line: $(grep '^data' "$TMP/mo.log")"
  mkdir -p "$TMP/copy" && cp "$TMP"/m/*.bin "$TMP/copy/"
  expect_fail ".bin files copied without their masks refused" "'$TMP/copy/sft_train_000000.bin' was written with a loss mask, but its mask '$TMP/copy/sft_train_000000.mask' is missing" \
    "$G" "${S[@]}" --train-data "$TMP/copy/sft_train_*.bin" --out "$TMP/refused1"
  expect_fail "missing validation mask refused" "'$TMP/copy/sft_val_000000.bin' was written with a loss mask, but its mask" \
    "$G" "${S[@]}" --train-data "$TMP/m/sft_train_*.bin" --val-data "$TMP/copy/sft_val_*.bin" --out "$TMP/refused2"
  cp -r "$TMP/m" "$TMP/m2" && rm "$TMP/m2/sft_train_000000.mask"
  expect_fail "missing mask refused (deleted)" "its mask '$TMP/m2/sft_train_000000.mask' is missing" \
    "$G" "${S[@]}" --train-data "$TMP/m2/sft_train_*.bin" --out "$TMP/refused3"
  cp "$TMP/m/sft_val_000000.mask" "$TMP/m2/sft_train_000000.mask"
  expect_fail "a mask of another size refused" "'$TMP/m2/sft_train_000000.mask' has" \
    "$G" "${S[@]}" --train-data "$TMP/m2/sft_train_*.bin" --out "$TMP/refused4"
  # the same windows of tokens, other masks (prompts trained): a mask of the same size from another run
  "$P" --input "$TMP/sft.jsonl" --out-dir "$TMP/w1" --name sft --val-tokens 0 --record-windows 32 --quiet || bad "prepare windows"
  "$P" --input "$TMP/sft.jsonl" --out-dir "$TMP/w2" --name sft --val-tokens 0 --record-windows 32 --train-on-inputs --quiet || bad "prepare windows 2"
  cp "$TMP/w1/sft_train_000000.mask" "$TMP/w2/"
  expect_fail "a mask of another data/prepare run (same size) refused" "'$TMP/w2/sft_train_000000.mask' does not belong to '$TMP/w2/sft_train_000000.bin'" \
    "$G" "${S[@]}" --train-data "$TMP/w2/sft_train_*.bin" --out "$TMP/refused5"
  # every token trained on purpose: no masks, and the data line says so
  "$P" --input "$TMP/sft.jsonl" --out-dir "$TMP/all" --name sft --val-frac 0.2 --train-on-inputs --quiet || bad "prepare --train-on-inputs"
  [ -z "$(ls "$TMP/all" | grep '\.mask$')" ] && cmp -s "$TMP/all/sft_train_000000.bin" "$TMP/m/sft_train_000000.bin" 2>/dev/null; same=$?
  "$G" "${S[@]}" --train-data "$TMP/all/sft_train_*.bin" --out "$TMP/ao" > "$TMP/ao.log" 2>&1 || { tail -3 "$TMP/ao.log"; bad "--train-on-inputs run failed"; }
  grep -q "^data: .* | loss masks: off$" "$TMP/ao.log" && [ "$(cmp -s <(tail -c +1025 "$TMP/all/sft_train_000000.bin") <(tail -c +1025 "$TMP/m/sft_train_000000.bin"); echo $?)" = 0 ] \
    && ok "--train-on-inputs: the same tokens, no mask, 'loss masks: off'" || bad "--train-on-inputs: $(grep '^data' "$TMP/ao.log")"
  cp "$TMP/m/sft_train_000000.mask" "$TMP/all/"
  expect_fail "a mask beside a shard written without one refused" "'$TMP/all/sft_train_000000.mask' lies beside '$TMP/all/sft_train_000000.bin', which was written without a loss mask" \
    "$G" "${S[@]}" --train-data "$TMP/all/sft_train_*.bin" --out "$TMP/refused6"
else
  bad "$P not built: the mask checks on data/prepare's shards were not run"
fi
finish
