#!/usr/bin/env bash
# data/prepare killed at random (SIGKILL), then the trainer pointed at what it left. Every outcome
# must be one of:
#   whole    the trainer runs, and the files it read (every NAME_{train,val}_*.bin and the .mask
#            beside each) are byte for byte those of one uninterrupted data/prepare run: the one
#            killed, or an earlier one (a kill before the first file changed);
#   refused  the trainer exits non-zero with one "error:" line naming a file of the folder or the
#            pattern (a shard without its mask, a mask of another shard, part of a split, no
#            files yet), and runs no step.
# Anything else is a bad outcome: training (rc 0) on a folder that is no whole output (without
# masks the data has, a partial or mixed shard set, a changed shard), or a failure without such
# a message.
#
# The runs take turns writing one folder under one name, as a user re-preparing data does: chat
# records with loss masks (ChatML), prompt/completion records in record windows, the same chat
# records packed, and plain text (no masks); small --shard-tokens, so that a run writes many files
# and the kills land among its renames as often as in its tokenizing. The delay before each kill
# is uniform over 1.1x the run's uninterrupted time. Then (with strace) targeted kills: at every
# unlink and every rename of a run over another's output, i.e. in every state the folder passes
# through, between a mask's rename and its shard's among them.
#
# usage: dev/bench_kill_prepare.sh [KILLS]     (random kills, default 60; BIN_DIR: train_gpt2 and
#        prepare, default build/cpu/bin; KEEP=1 keeps the work folder; SEED=n for another sequence;
#        TARGETED=0: no targeted kills; PAIRS="text:chat ...": the runs of the targeted kills)
# Not part of the test suite: it takes about ten minutes. Prints a line per kill and the counts.
set -u
cd "$(dirname "$0")/.."
KILLS="${1:-60}"
BIN_DIR="${BIN_DIR:-build/cpu/bin}"
P="$BIN_DIR/prepare"; G="$BIN_DIR/train_gpt2"
for b in "$P" "$G"; do [ -x "$b" ] || { echo "error: $b not built (make BACKEND=cpu)"; exit 1; }; done
W=$(mktemp -d "${TMPDIR:-/tmp}/llmc-killprep.XXXXXX")
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$W"' EXIT
RANDOM="${SEED:-1}"

python3 - "$W" <<'PY'
import json, random, sys
w = sys.argv[1]
r = random.Random(7)
words = "the a sky sea blue green why how what time river stone light dark north wind tide".split()
say = lambda n: " ".join(r.choice(words) for _ in range(n))
with open(w + "/chat.jsonl", "w") as f:
    for i in range(1500):
        msgs = [{"role": "system", "content": "Be brief."}] if i % 3 == 0 else []
        for t in range(r.randrange(1, 3)):
            msgs += [{"role": "user", "content": say(r.randrange(4, 14)) + "?"},
                     {"role": "assistant", "content": say(r.randrange(2, 10)) + "."}]
        f.write(json.dumps({"messages": msgs}) + "\n")
with open(w + "/sft.jsonl", "w") as f:
    for i in range(1500):
        f.write(json.dumps({"prompt": "Q: " + say(r.randrange(3, 12)) + "?\nA:", "completion": " " + say(r.randrange(1, 8)) + "."}) + "\n")
PY
T=64
flags() { # the data/prepare flags of configuration $1
  case $1 in
    chat)    echo "--input $W/chat.jsonl --chat-template chatml --shard-tokens 2500 --val-frac 0.1";;
    windows) echo "--input $W/sft.jsonl --record-windows $T --shard-tokens 3000 --val-frac 0.1";;
    packed)  echo "--input $W/chat.jsonl --chat-template chatml --pack $T --shard-tokens 2700 --val-frac 0.1";;
    text)    echo "--input data/tinyshakespeare.txt --doc-sep blank --shard-tokens 8000 --val-tokens 8000";;
  esac
}
CONFIGS=(chat windows packed text)
# the files the trainer reads from folder $1 (every .bin and the .mask beside it), with their hashes
digest() {
  (cd "$1" && for b in $(ls | grep -E '^d_(train|val)_[0-9]{6}\.bin$'); do
     echo "$b $(sha256sum < "$b" | cut -c1-16)"
     [ -e "${b%.bin}.mask" ] && echo "${b%.bin}.mask $(sha256sum < "${b%.bin}.mask" | cut -c1-16)"
   done) | sort | sha256sum | cut -c1-16
}
declare -A REF DUR MASKS
for c in "${CONFIGS[@]}"; do
  t0=$(date +%s.%N)
  "$P" $(flags $c) --out-dir "$W/ref_$c" --name d --quiet || { echo "error: reference run $c failed"; exit 1; }
  DUR[$c]=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$(date +%s.%N)")
  REF[$c]=$(digest "$W/ref_$c")
  MASKS[$c]=$(ls "$W/ref_$c" | grep -c '\.mask$')
  echo "reference $c: $(ls "$W/ref_$c" | grep -c '\.bin$') shards, ${MASKS[$c]} masks, ${DUR[$c]:0:5} s"
done

OUT="$W/out"; mkdir -p "$OUT"
declare -A COUNT
bad=0; killed=0; finished=0; lonely=0; n=0
# judge CONFIG HOW: the trainer on what the run of CONFIG left in $OUT; prints and counts the outcome
judge() {
  local c="$1" how="$2" trc d lone whole="" line what err kind r
  n=$((n + 1))
  "$G" --model tiny --train-data "$OUT/d_train_*.bin" --val-data "$OUT/d_val_*.bin" -b 1 -t $T --steps 1 --lr 0 --eval-batches 1 \
    --threads 1 --out none > "$W/train.log" 2>&1; trc=$?
  d=$(digest "$OUT")
  # a shard that says it has a mask (header field 5) with none beside it: each mask is written first
  lone=$(python3 - "$OUT" <<'PY'
import glob, os, struct, sys
print(sum(1 for b in glob.glob(sys.argv[1] + "/d_*_*.bin")
          if struct.unpack("<6i", open(b, "rb").read(24))[5] == 1 and not os.path.exists(b[:-4] + ".mask")))
PY
)
  lonely=$((lonely + lone))
  for r in "${CONFIGS[@]}"; do [ "$d" = "${REF[$r]}" ] && whole=$r; done
  if [ -n "$whole" ]; then [ "${MASKS[$whole]}" = 0 ] && line='| loss masks: off' || line='| loss masks: on ('; fi
  if [ $trc -eq 0 ]; then
    # (the data line must agree on the masks; a trainer that prints none, older than this check, is let off)
    if [ -n "$whole" ] && { grep -qF -- "$line" "$W/train.log" || ! grep -q '^data: .*| loss masks' "$W/train.log"; }; then
      [ "$whole" = "$c" ] && what="whole: this run's output ($c)" || what="whole: an earlier run's output ($whole)"
      COUNT["$what"]=$(( ${COUNT["$what"]:-0} + 1 ))
    else
      what="BAD: trained on a folder that is no whole output ($(grep '^data:' "$W/train.log"))"; bad=$((bad + 1))
      cp -r "$OUT" "$W/bad_$n"
    fi
  else
    err=$(grep -m1 '^error: ' "$W/train.log")
    if [ -n "$err" ] && ! grep -q '^step ' "$W/train.log" && { grep -qF "$OUT/d_" <<<"$err" || grep -qF "no data files match '$OUT/d_" <<<"$err"; }; then
      kind=$(sed -E -e "s|'[^']*'|F|g" -e 's/\(set [0-9a-f]*\)//; s/[0-9]+/N/g' <<<"${err#error: }" | cut -c1-90)
      what="refused: ${err#error: }"
      [ -n "$whole" ] && { what="refused although whole ($whole): ${err#error: }"; kind="although whole: $kind"; }
      COUNT["refused: $kind"]=$(( ${COUNT["refused: $kind"]:-0} + 1 ))
    else
      what="BAD: failed without a clear message (rc $trc): $(tail -2 "$W/train.log" | tr '\n' ' ')"; bad=$((bad + 1))
    fi
  fi
  printf '%4d %-8s %-40s %s\n' "$n" "$c" "$how" "$what" | cut -c1-220
}

# ---- random kills: the runs take turns on one folder, each starting from what the last one left
for ((i = 1; i <= KILLS; i++)); do
  c=${CONFIGS[$((RANDOM % ${#CONFIGS[@]}))]}
  delay=$(python3 -c "import random, sys; random.seed(int(sys.argv[2])); print(f'{random.uniform(0, 1.1 * float(sys.argv[1])):.4f}')" "${DUR[$c]}" "$RANDOM$i")
  "$P" $(flags $c) --out-dir "$OUT" --name d --quiet > "$W/prep.log" 2>&1 &
  pid=$!
  sleep "$delay"
  kill -KILL $pid 2>/dev/null
  wait $pid 2>/dev/null; rc=$?
  if [ $rc -eq 137 ]; then killed=$((killed + 1)); how="killed after ${delay}s"
  elif [ $rc -eq 0 ]; then finished=$((finished + 1)); how="finished before the kill (${delay}s)"
  else echo "error: data/prepare failed (rc $rc): $(cat "$W/prep.log")"; exit 1; fi
  judge "$c" "$how"
done
random_n=$n

# ---- targeted kills (strace's syscall injection): a run of config B over config A's whole
# output, SIGKILLed on entering its k-th unlink, then its k-th rename, for every k: every state
# the folder passes through (PAIRS="A:B ..."; TARGETED=0 skips this)
targeted=0
if [ "${TARGETED:-1}" = 1 ] && command -v strace >/dev/null; then
  for pair in ${PAIRS:-text:chat chat:text packed:windows}; do
    from=${pair%:*}; c=${pair#*:}
    for sc in unlink rename; do
      rm -rf "$OUT" && cp -r "$W/ref_$from" "$OUT"
      strace -f -qq -e trace=$sc -o "$W/trace" "$P" $(flags $c) --out-dir "$OUT" --name d --quiet || { echo "error: traced run failed"; exit 1; }
      calls=$(grep -cE "^[0-9]+ +$sc\(" "$W/trace") # (strace pads the pid)
      for ((k = 1; k <= calls; k++)); do
        rm -rf "$OUT" && cp -r "$W/ref_$from" "$OUT"
        { strace -f -qq -o /dev/null -e trace=$sc -e inject=$sc:signal=KILL:when=$k "$P" $(flags $c) --out-dir "$OUT" --name d --quiet > /dev/null; } 2>/dev/null
        judge "$c" "over $from: at $sc $k of $calls"
        targeted=$((targeted + 1))
      done
    done
  done
elif [ "${TARGETED:-1}" = 1 ]; then
  echo "note: strace not installed: no targeted kills"
fi

echo
echo "data/prepare SIGKILLed $random_n times at random ($killed while running, $finished had finished) and $targeted times at an unlink or rename: $bad bad outcomes"
echo "shards left without the mask their header says they have: $lonely"
for k in "${!COUNT[@]}"; do printf '%5d  %s\n' "${COUNT[$k]}" "$k"; done | sort -rn
[ $bad -eq 0 ]
