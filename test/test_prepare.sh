#!/usr/bin/env bash
# data/prepare end to end: shard headers and sizes, exact tokens against tiktoken's ids
# (test/ref/tok_shakespeare.u16), document separation, the JSONL loss-mask layout against
# test/ref/prepare_sft_expected.txt (both written by dev/gen_tokenizer_ref.py), train/val split,
# multi-shard output, stale-file removal, and the error messages for bad input.
set -u
BUILD="${BUILD:-build}"; BIN_DIR="${BIN_DIR:-.}"
if [ -z "${PREPARE_BIN:-}" ]; then
  if [ "$BIN_DIR" = "." ]; then PREPARE_BIN=data/prepare; else PREPARE_BIN="$BUILD/prepare"; fi
fi
P="$PREPARE_BIN"
[ -x "$P" ] || { echo "FAIL: $P not built"; exit 1; }
T="$BUILD/test_prepare"; rm -rf "$T"; mkdir -p "$T"
fails=0; checks=0
ok()   { checks=$((checks+1)); echo "ok   $*"; }
bad()  { checks=$((checks+1)); fails=$((fails+1)); echo "FAIL $*"; }
check() { local what="$1"; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }

# header field k (int32) of a shard / mask file
hdr() { od -An -t d4 -j $((4*$2)) -N 4 "$1" | tr -d ' '; }
toks() { od -An -t u2 -v -j 1024 "$1" | tr -s ' \n' '\n' | sed '/^$/d'; }
masks() { od -An -t u1 -v -j 1024 "$1" | tr -s ' \n' '\n' | sed '/^$/d'; }
# a shard is well formed: magic, version, size = 1024 + 2 * ntok
shard_ok() {
  local f="$1" n; n=$(hdr "$f" 2)
  [ "$(hdr "$f" 0)" = 20240520 ] && [ "$(hdr "$f" 1)" = 1 ] && [ "$(stat -c %s "$f")" = $((1024 + 2*n)) ]
}
mask_ok() {
  local f="$1" b="${1%.mask}.bin" n; n=$(hdr "$f" 2)
  [ "$(hdr "$f" 0)" = 20261122 ] && [ "$(hdr "$f" 1)" = 1 ] && [ "$(stat -c %s "$f")" = $((1024 + n)) ] && [ "$n" = "$(hdr "$b" 2)" ]
}
# run prepare expecting failure with a message matching a pattern
expect_fail() {
  local what="$1" pat="$2"; shift 2
  local out; out=$("$P" "$@" 2>&1); local rc=$?
  if [ $rc -ne 0 ] && grep -qE -- "$pat" <<<"$out"; then ok "$what"
  else bad "$what (rc $rc): $out"; fi
}

# --- 1. text, no separators: the tokens are exactly tiktoken's ids of the whole file
"$P" --input data/tinyshakespeare.txt --out-dir "$T/a" --doc-sep none --val-tokens 1000 --quiet || bad "prepare text"
check "val shard well formed" shard_ok "$T/a/tinyshakespeare_val_000000.bin"
check "train shard well formed" shard_ok "$T/a/tinyshakespeare_train_000000.bin"
check "val has exactly 1000 tokens (no document boundary to snap to)" [ "$(hdr "$T/a/tinyshakespeare_val_000000.bin" 2)" = 1000 ]
cat <(tail -c +1025 "$T/a/tinyshakespeare_val_000000.bin") <(tail -c +1025 "$T/a/tinyshakespeare_train_000000.bin") > "$T/a/all.u16"
check "val + train == tiktoken ids of tinyshakespeare" cmp -s "$T/a/all.u16" test/ref/tok_shakespeare.u16
check "text input writes no mask" [ -z "$(ls "$T/a" | grep '\.mask$')" ]

# --- 2. blank-line documents, llm.c style: EOT first, val snaps to a document boundary
"$P" --input data/tinyshakespeare.txt --out-dir "$T/b" --doc-sep blank --val-tokens 32768 --name shakes --quiet || bad "prepare blank"
v="$T/b/shakes_val_000000.bin"; tr_="$T/b/shakes_train_000000.bin"
vt=$(toks "$v"); trt=$(toks "$tr_")
check "val starts with <|endoftext|>" [ "$(head -1 <<<"$vt")" = 50256 ]
check "val ends with the <|endoftext|> that closes its last document" [ "$(tail -1 <<<"$vt")" = 50256 ]
check "train starts with <|endoftext|>" [ "$(head -1 <<<"$trt")" = 50256 ]
check "train ends with a closing <|endoftext|>" [ "$(tail -1 <<<"$trt")" = 50256 ]
nv=$(hdr "$v" 2)
check "val size near the target ($nv)" eval '[ "$nv" -ge 32000 ] && [ "$nv" -le 33600 ]' 
neot=$(grep -cx 50256 <<<"$trt"$'\n'"$vt")
nblank=$(grep -c '^$' data/tinyshakespeare.txt)
# every paragraph (blank-line separated) is one document: EOTs = paragraphs + final + the shared one
check "one <|endoftext|> per paragraph ($neot)" eval '[ "$neot" -ge "$nblank" ] && [ "$neot" -le $((nblank + 3)) ]' 

# --- 3. several files, one document each; shards of a fixed size; stale files removed
printf 'first file.' > "$T/f1.txt"; printf 'second file.' > "$T/f2.txt"
"$P" --input "$T/f1.txt" "$T/f2.txt" --out-dir "$T/c" --name two --val-tokens 0 --quiet || bad "prepare two files"
ct=$(toks "$T/c/two_train_000000.bin" | tr '\n' ' ')
check "each file is a document: $ct" [ "$(awk '{print $1}' <<<"$ct")" = 50256 ]
check "two documents + closing EOT" [ "$(grep -o 50256 <<<"$ct" | wc -l)" = 3 ]
check "--val-tokens 0 writes no val shard" [ ! -e "$T/c/two_val_000000.bin" ]
"$P" --input data/tinyshakespeare.txt --out-dir "$T/d" --name s --shard-tokens 100000 --quiet || bad "prepare sharded"
ns=$(ls "$T/d" | grep -c '^s_train_.*\.bin$')
sum=0; for f in "$T"/d/s_train_*.bin "$T"/d/s_val_*.bin; do shard_ok "$f" || bad "$f malformed"; sum=$((sum + $(hdr "$f" 2))); done
check "shakespeare in $ns train shards of <= 100000 tokens" eval '[ "$ns" = 4 ] && [ "$(hdr "$T/d/s_train_000000.bin" 2)" = 100000 ]' 
check "shards hold every token ($sum)" [ "$sum" = 338027 ]   # 338025 + EOT first + closing EOT
"$P" --input data/tinyshakespeare.txt --out-dir "$T/d" --name s --quiet || bad "prepare unsharded"
check "a later run removes shards it did not write" [ "$(ls "$T/d" | grep -c '^s_train_')" = 1 ]
check "no temporary files left" [ -z "$(ls "$T/d" | grep tmp)" ]

# --- 4. JSONL: tokens and loss masks exactly as documented (reference from tiktoken)
"$P" --input test/ref/prepare_sft.jsonl --out-dir "$T/e" --name sft --val-tokens 0 --quiet || bad "prepare jsonl"
check "jsonl shard well formed" shard_ok "$T/e/sft_train_000000.bin"
check "jsonl mask well formed" mask_ok "$T/e/sft_train_000000.mask"
check "jsonl tokens match the reference" [ "$(toks "$T/e/sft_train_000000.bin" | tr '\n' ' ' | sed 's/ $//')" = "$(sed -n 1p test/ref/prepare_sft_expected.txt)" ]
check "jsonl mask matches the reference" [ "$(masks "$T/e/sft_train_000000.mask" | tr '\n' ' ' | sed 's/ $//')" = "$(sed -n 2p test/ref/prepare_sft_expected.txt)" ]
# split: val ends with the EOT closing its last record, train starts with the same EOT
"$P" --input test/ref/prepare_sft.jsonl --out-dir "$T/e" --name sft --val-tokens 20 --quiet || bad "prepare jsonl split"
check "jsonl val + mask well formed" mask_ok "$T/e/sft_val_000000.mask"
nv=$(hdr "$T/e/sft_val_000000.bin" 2); ntr=$(hdr "$T/e/sft_train_000000.bin" 2)
check "val is the first record + its closing EOT ($nv tokens)" [ "$nv" = 17 ]
check "val + train share one EOT ($nv + $ntr)" [ $((nv + ntr - 1)) = 91 ]
check "the closing EOT of a completion is trained" [ "$(masks "$T/e/sft_val_000000.mask" | tail -1)" = 1 ]
ref_mask=$(sed -n 2p test/ref/prepare_sft_expected.txt | tr ' ' '\n')
check "train mask is the reference mask from token 16 on" [ "$(masks "$T/e/sft_train_000000.mask")" = "$(tail -n +17 <<<"$ref_mask")" ]
# text after JSONL into the same name: the old masks must go
"$P" --input "$T/f1.txt" --out-dir "$T/e" --name sft --val-tokens 0 --quiet || bad "prepare text over jsonl"
check "text run removes stale masks" [ -z "$(ls "$T/e" | grep '\.mask$')" ]

# --- 5. bad input: clear message, non-zero exit, nothing written
expect_fail "missing input" "input file '$T/nope.txt' not found" --input "$T/nope.txt" --out-dir "$T/x"
expect_fail "missing --out-dir" "out-dir is required" --input "$T/f1.txt"
expect_fail "unknown flag" "unknown flag '--frobnicate'" --input "$T/f1.txt" --out-dir "$T/x" --frobnicate 1
expect_fail "bad --val-frac" "val-frac" --input "$T/f1.txt" --out-dir "$T/x" --val-frac 1.5
expect_fail "val-frac and val-tokens" "mutually exclusive" --input "$T/f1.txt" --out-dir "$T/x" --val-frac 0.2 --val-tokens 5
expect_fail "val takes everything" "leaves no training tokens" --input "$T/f1.txt" --out-dir "$T/x" --val-tokens 1000
printf '{"text": "ok"}\n\n{"text": "unterminated}\n' > "$T/bad1.jsonl"
expect_fail "malformed JSONL names file and line" "bad1.jsonl' line 3: malformed JSON" --input "$T/bad1.jsonl" --out-dir "$T/x"
printf '{"prompt": "only a prompt"}\n' > "$T/bad2.jsonl"
expect_fail "missing completion" "line 1: the record has no \"completion\" field" --input "$T/bad2.jsonl" --out-dir "$T/x"
printf '{"text": 5}\n' > "$T/bad3.jsonl"
expect_fail "text not a string" "\"text\" in the record must be a string, not number" --input "$T/bad3.jsonl" --out-dir "$T/x"
printf '{"messages": [{"role": "robot", "content": "x"}]}\n' > "$T/bad4.jsonl"
expect_fail "unknown role" "unknown role 'robot'" --input "$T/bad4.jsonl" --out-dir "$T/x"
printf '{"messages": [{"role": "user"}]}\n' > "$T/bad5.jsonl"
expect_fail "message without content" "message 0 has no \"content\" field" --input "$T/bad5.jsonl" --out-dir "$T/x"
printf '{"foo": 1}\n' > "$T/bad6.jsonl"
expect_fail "unknown record" "none of \"text\"" --input "$T/bad6.jsonl" --out-dir "$T/x"
printf '["text"]\n' > "$T/bad7.jsonl"
expect_fail "not an object" "expected a JSON object" --input "$T/bad7.jsonl" --out-dir "$T/x"
printf '{"text": "a\xff"}\n' > "$T/bad8.jsonl"
expect_fail "invalid UTF-8 in JSONL" "line 1: malformed JSON" --input "$T/bad8.jsonl" --out-dir "$T/x"
: > "$T/empty.txt"
expect_fail "empty input" "holds no text" --input "$T/empty.txt" --out-dir "$T/x"
printf '\xef\xbb\xbf{"text": "bom"}\r\n{"prompt": "p", "completion": "c"}\r\n' > "$T/bom.jsonl"
"$P" --input "$T/bom.jsonl" --out-dir "$T/bom" --val-tokens 0 --quiet && ok "JSONL with a byte order mark and CRLF lines" || bad "JSONL with BOM/CRLF"
mkdir -p "$T/novocab"
expect_fail "vocabulary not found" "vocabulary not found: looked for encoder.json\+vocab.bpe, vocab.json\+merges.txt, tokenizer.json in '$T/novocab'" --input "$T/f1.txt" --out-dir "$T/x" --vocab "$T/novocab"
mkdir -p "$T/halfvocab"; cp data/gpt2/encoder.json "$T/halfvocab/"
expect_fail "half a vocabulary" "vocabulary incomplete: found '$T/halfvocab/encoder.json' but not '$T/halfvocab/vocab.bpe'" --input "$T/f1.txt" --out-dir "$T/x" --vocab "$T/halfvocab"
mkdir -p "$T/badvocab"; printf '{"a": 0, "b": }' > "$T/badvocab/encoder.json"; cp data/gpt2/vocab.bpe "$T/badvocab/"
expect_fail "malformed encoder.json" "encoder.json': malformed JSON at line 1, column 15" --input "$T/f1.txt" --out-dir "$T/x" --vocab "$T/badvocab"
mkdir -p "$T/badmerges"; cp data/gpt2/encoder.json "$T/badmerges/"; printf '#version: 0.2\nh e\nxyz\n' > "$T/badmerges/vocab.bpe"
expect_fail "malformed merge line" "vocab.bpe' line 3: malformed merge rule 'xyz'" --input "$T/f1.txt" --out-dir "$T/x" --vocab "$T/badmerges"
printf '#version: 0.2\nh e\nQ Z\n' > "$T/badmerges/vocab.bpe"
expect_fail "merge not in vocabulary" "vocab.bpe' line 3: the merged token is not in" --input "$T/f1.txt" --out-dir "$T/x" --vocab "$T/badmerges"
printf '#version: 0.2\nh e\nQZQ X\n' > "$T/badmerges/vocab.bpe"
expect_fail "merge side not in vocabulary" "vocab.bpe' line 3: a side of the merge is not a token" --input "$T/f1.txt" --out-dir "$T/x" --vocab "$T/badmerges"
mkdir -p "$T/tj"; printf '{"model": {"type": "BPE", "vocab": {"a": 0}}}' > "$T/tj/tokenizer.json"
expect_fail "tokenizer.json without merges" "tokenizer.json': no model.merges found" --input "$T/f1.txt" --out-dir "$T/x" --vocab "$T/tj"
printf '{"model": {"type": "WordPiece", "vocab": {}}}' > "$T/tj/tokenizer.json"
expect_fail "tokenizer.json of another kind" "model.type is 'WordPiece', not 'BPE'" --input "$T/f1.txt" --out-dir "$T/x" --vocab "$T/tj/tokenizer.json"
mkdir -p "$T/alpha"; printf '{"a": 0, "\\u4e2d": 1}' > "$T/alpha/vocab.json"; printf '' > "$T/alpha/merges.txt"
expect_fail "token outside the byte alphabet" "token id 1 is written with character U\+4E2D" --input "$T/f1.txt" --out-dir "$T/x" --vocab "$T/alpha"
printf '{"a": 0, "b": 0}' > "$T/alpha/vocab.json"
expect_fail "duplicate token id" "token id 0 appears twice" --input "$T/f1.txt" --out-dir "$T/x" --vocab "$T/alpha/vocab.json"
printf '{"a": 0, "b": 1}' > "$T/alpha/vocab.json"
expect_fail "vocabulary without all 256 bytes" "no token for byte 0x00" --input "$T/f1.txt" --out-dir "$T/x" --vocab "$T/alpha/merges.txt"
check "failed runs wrote nothing" [ -z "$(ls "$T/x" 2>/dev/null)" ]
# --help works and exits 0
check "--help" bash -c "'$P' --help | grep -q -- '--val-frac'"

echo "test_prepare: $((checks - fails)) of $checks checks passed"
[ $fails -eq 0 ]
