# Helpers for the shell tests (sourced). BIN_DIR: where train_gpt2 / train_lora live.
set -u
BIN_DIR="${BIN_DIR:-.}"
# data/prepare of the same build: make exports PREPARE_BIN; a test run alone finds it beside the
# programs (BIN_DIR), or as data/prepare for the programs of the repository's root
if [ -z "${PREPARE_BIN:-}" ]; then
  if [ "$BIN_DIR" = "." ]; then PREPARE_BIN=data/prepare; else PREPARE_BIN="$BIN_DIR/prepare"; fi
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/llmc-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0; checks=0

ok()   { checks=$((checks+1)); echo "ok   $*"; }
bad()  { checks=$((checks+1)); fails=$((fails+1)); echo "FAIL $*" >&2; }

# expect_fail "what" "substring of stderr" cmd args...: the command must exit non-zero and
# print the substring (one clear message), and leave no temporary files in $TMP.
expect_fail() {
  local what="$1" want="$2"; shift 2
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 0 ]; then bad "$what: exit 0, expected failure"; return; fi
  if ! grep -qF -- "$want" <<<"$out"; then bad "$what: message lacks '$want': $out"; return; fi
  if ! grep -q "^error: " <<<"$out"; then bad "$what: no 'error:' line: $out"; return; fi
  if find "$TMP" -name '*.tmp.*' | grep -q .; then bad "$what: temporary file left behind"; return; fi
  ok "$what -> $(grep -m1 '^error: ' <<<"$out")"
}

# make_shard PATH NTOK VOCAB SEED: an llm.c token shard with pseudo-random tokens < VOCAB.
make_shard() {
  python3 - "$@" <<'PY'
import struct, sys, random
path, n, vocab, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
# a little structure (repeated phrases) so that training has something to learn
phrases = [[rng.randrange(vocab) for _ in range(rng.randrange(3, 9))] for _ in range(12)]
toks = []
while len(toks) < n:
    toks.extend(rng.choice(phrases))
toks = toks[:n]
hdr = [20240520, 1, n] + [0] * 253
with open(path, "wb") as f:
    f.write(struct.pack("<256i", *hdr))
    f.write(struct.pack("<%dH" % n, *toks))
PY
}

# tiny_data DIR SEED: DIR emptied, with DIR/data/tiny_train_000000.bin (3000 tokens, seed SEED)
# and DIR/data/tiny_val_000000.bin (600 tokens, seed SEED + 1), tokens < 100: the vocabulary of
# the tiny GPT-2 (test/ref/gpt2_tiny)
tiny_data() {
  rm -rf "$1"; mkdir -p "$1/data"
  make_shard "$1/data/tiny_train_000000.bin" 3000 100 "$2"
  make_shard "$1/data/tiny_val_000000.bin" 600 100 $(($2 + 1))
}

# EMU: the harness builds of the trainers (mk/gpucheck.mk, make gpucheck-emu); a test that needs
# them stops here when they are not built
need_harness_trainers() {
  EMU="${BUILD:-build/cpu}/gpucheck/emu"
  local p
  for p in train_gpt2 train_lora; do [ -x "$EMU/$p" ] || { echo "FAIL: $EMU/$p not built (make gpucheck-emu)"; exit 1; }; done
}

# chatml_tiny DIR: a tiny GPT-2 (GPT-2 vocabulary) that learned one ChatML exchange ("Capital of
# France?" -> "Paris."): 50 copies prepared by data/prepare --chat-template chatml, 60 steps of
# train_gpt2, saved as a transformers directory in DIR.
chatml_tiny() {
  python3 -c "
import json
for _ in range(50): print(json.dumps({'messages': [{'role': 'user', 'content': 'Capital of France?'}, {'role': 'assistant', 'content': 'Paris.'}]}))
" > "$TMP/chat.jsonl"
  "$PREPARE_BIN" --input "$TMP/chat.jsonl" --out-dir "$TMP/chatd" --chat-template chatml --val-tokens 0 --record-windows 48 --quiet \
    || bad "data/prepare --chat-template chatml"
  "$BIN_DIR/train_gpt2" --model tiny --train-data "$TMP/chatd/chat_train_*.bin" --batch-size 4 --seq-len 48 --steps 60 --lr 1e-2 \
    --warmup-steps 0 --threads 2 --save-format hf --out "$1" > "$TMP/chat.log" 2>&1 || { cat "$TMP/chat.log"; bad "train_gpt2 on ChatML data failed"; }
}

# A whole script whose check belongs to the plain pass: under SAN=1 it says why and passes.
san_skip() { [ "${SAN:-}" = 1 ] || return 0; echo "skip under SAN=1: $* (checked in the plain pass)"; exit 0; }
finish() {
  echo "$checks checks, $fails failed"
  [ $fails -eq 0 ]
}
