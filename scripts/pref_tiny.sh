#!/usr/bin/env bash
# Preference fine-tuning that visibly works, on the CPU, in a few minutes on two cores: DPO teaches
# the tiny Shakespeare model of the main job (scripts/lora_tiny.sh) which of two ways to lay out a
# speech it should prefer, from pairs alone.
#   1. data and base: lora_tiny.sh's first two steps (BASE_ONLY=1): a tiny GPT-2 (2 layers, 64
#      channels) trained from scratch on most of data/tinyshakespeare.txt, in which one speech in
#      ten is written on one line ("NAME: verse / verse"), the rest in the play's layout; the
#      held-out plays' speeches, all on one line, in OUT/data/target.txt.
#   2. pairs: each held-out speech of two or three verses becomes {"prompt": "NAME:", "chosen":
#      " verse / verse", "rejected": "\nverse\nverse"}: the same words, chosen on one line,
#      rejected in the play's layout (what the base writes nine times in ten); a tenth of them
#      held out. data/prepare --pack 128: whole pairs in windows of 128 tokens, each record
#      attending to itself.
#   3. DPO: train_lora --objective dpo --beta 0.5 (the reference: the base with the adapters off;
#      at TRL's 0.1 the chosen speeches lose 20 nats of likelihood on the way, at 0.5 four), evaluating
#      on the held-out pairs: TRL's rewards/accuracies (chosen's implicit reward above rejected's)
#      and rewards/margins. At step 0 the policy is the reference, every reward is 0 and no pair
#      counts as won (TRL's rule), so the accuracy starts at 0; the job fails below 0.9 at the end.
#   4. report: the held-out accuracy and margin before and after, a sample of the base and of the
#      tuned model from the same prompt and seed, and how many of 40 samples (seeds 1-40) of each
#      go on from the name on its line (the chosen completions' first step), and put a speech of
#      several verses on one line (" / " on the first line).
# Environment: OUT (out/pref_tiny), BASE_STEPS (1500), DPO_STEPS (60), LR (5e-4), BETA (0.5), OBJECTIVE (dpo;
# ipo and simpo reach 1.0 as well; orpo, whose odds-ratio term weighs 0.1 beside the chosen
# speeches' NLL, reaches 0.34 in 60 steps while 30 of its 40 samples take the style: the job then
# fails its 0.9), THREADS (0 = all cores), BIN_DIR (take the programs from there: tests).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/pref_tiny}"
DPO_STEPS="${DPO_STEPS:-60}"
LR="${LR:-5e-4}"
BETA="${BETA:-0.5}"
OBJECTIVE="${OBJECTIVE:-dpo}"
THREADS="${THREADS:-0}"
SECONDS=0

# ---- 1. the data and the base (kept when the job runs again with the same text and steps)
OUT="$OUT" BASE_ONLY=1 THREADS="$THREADS" bash scripts/lora_tiny.sh
if [ -n "${BIN_DIR:-}" ]; then
  TRAIN_LORA="$BIN_DIR/train_lora"; GENERATE="$BIN_DIR/generate"; PREPARE="$BIN_DIR/prepare"
else
  TRAIN_LORA=./train_lora; GENERATE=./generate; PREPARE=data/prepare
fi

# ---- 2. preference pairs from the held-out speeches (JSON strings: \ and " escaped)
P="$OUT/pairs"
rm -rf "$P"; mkdir -p "$P"
awk -F' / ' -v train="$P/train.jsonl" -v val="$P/val.jsonl" '
  function js(s) { gsub(/\\/, "&&", s); gsub(/"/, "\\\"", s); return s }   # ("&&": the match twice, in every awk)
  NF >= 2 && NF <= 3 && length($0) <= 170 {
    colon = index($1, ": "); if (colon < 2) next
    name = substr($1, 1, colon); first = substr($1, colon + 2)
    chosen = " " first; rejected = "\\n" js(first)
    for (i = 2; i <= NF; i++) { chosen = chosen " / " $i; rejected = rejected "\\n" js($i) }
    line = sprintf("{\"prompt\": \"%s\", \"chosen\": \"%s\", \"rejected\": \"%s\"}", js(name), js(chosen), rejected)
    print line > (++n % 10 == 0 ? val : train) }' "$OUT/data/target.txt"
"$PREPARE" --input "$P/train.jsonl" --out-dir "$P" --name pref --pack 128 --val-tokens 0 --quiet
"$PREPARE" --input "$P/val.jsonl" --out-dir "$P" --name prefval --pack 128 --val-tokens 0 --quiet
echo "pairs: $(wc -l < "$P/train.jsonl") for training, $(wc -l < "$P/val.jsonl") held out, e.g.:"
head -n 1 "$P/train.jsonl"

# ---- 3. DPO with LoRA on every linear layer
rm -rf "$OUT/dpo"
"$TRAIN_LORA" --model "$OUT/base" --train-data "$P/pref_train_*.bin" --val-data "$P/prefval_train_*.bin" -b 8 -t 128 \
  --objective "$OBJECTIVE" --beta "$BETA" --steps "$DPO_STEPS" --lr "$LR" --warmup-steps 10 --shuffle --eval-every 10 --eval-batches all \
  --lora-targets all-linear --lora-rank 16 --lora-alpha 32 --threads "$THREADS" --out "$OUT/dpo"

# ---- 4. what preference tuning did
metric() { # KEY: its values at each evaluation, in order
  python3 -c 'import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if sys.argv[2] in r: print(r[sys.argv[2]])' "$OUT/dpo/log.jsonl" "$1"
}
accs=$(metric val_rewards/accuracies); margins=$(metric val_rewards/margins); lpc=$(metric val_logps/chosen); lpr=$(metric val_logps/rejected)
acc0=${accs%%$'\n'*}; acc1=${accs##*$'\n'}; mar0=${margins%%$'\n'*}; mar1=${margins##*$'\n'}
python3 scripts/plot_loss.py "$OUT/dpo/log.jsonl" --title "$OBJECTIVE on one-line vs play-layout speeches" >/dev/null
NAME="PETRUCHIO:"
source scripts/tiny_samples.sh # (sample, styled)
echo
echo "== sample of the base model ($OUT/base):"
printf '%s' "$NAME"; sample 42 --model "$OUT/base"
echo "== sample of the preference-tuned model (base + adapter $OUT/dpo), same prompt and seed:"
printf '%s' "$NAME"; sample 42 --adapter "$OUT/dpo"
read -r base_styled base_line < <(SAME_LINE=1 styled --model "$OUT/base")
read -r tuned_styled tuned_line < <(SAME_LINE=1 styled --adapter "$OUT/dpo")
rm -f "$OUT/sample.err"
echo
echo "samples going on from the name on its line (seeds 1-$STYLE_SEEDS): base model $base_line/$STYLE_SEEDS, preference-tuned $tuned_line/$STYLE_SEEDS"
echo "samples with the speech on one line (' / ' on the first line; seeds 1-$STYLE_SEEDS): base model $base_styled/$STYLE_SEEDS, preference-tuned $tuned_styled/$STYLE_SEEDS"
awk -v a0="$acc0" -v a1="$acc1" -v m0="$mar0" -v m1="$mar1" -v n="$DPO_STEPS" -v o="$OBJECTIVE" \
    -v c0="${lpc%%$'\n'*}" -v c1="${lpc##*$'\n'}" -v r0="${lpr%%$'\n'*}" -v r1="${lpr##*$'\n'}" 'BEGIN {
  printf "held-out pairs (%s, TRL'"'"'s metrics):\n", o
  printf "  step 0 (the base):   rewards/accuracies %.3f, rewards/margins %.4f, logps chosen %.2f, rejected %.2f\n", a0, m0, c0, r0
  printf "  after %d steps:     rewards/accuracies %.3f, rewards/margins %.4f, logps chosen %.2f, rejected %.2f\n", n, a1, m1, c1, r1 }'
echo "outputs: $OUT/dpo (PEFT adapter, log.jsonl, loss.png)"
echo "time: ${SECONDS} s"
if ! awk -v a="$acc1" 'BEGIN { exit !(a >= 0.9) }'; then
  echo "error: the held-out reward accuracy ended at $acc1, below 0.9: preference tuning did not take" >&2
  exit 1
fi
