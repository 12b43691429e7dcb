#!/usr/bin/env bash
# data/prepare end to end: shard headers and sizes, exact tokens against tiktoken's ids
# (test/ref/tok_shakespeare.u16), document separation, the JSONL loss-mask layout against
# test/ref/prepare_sft_expected.txt (both written by dev/gen_tokenizer_ref.py), train/val split,
# multi-shard output, stale-file removal, and the error messages for bad input.
# Record schemas and chat templates: Alpaca (a JSON array) and ShareGPT records rendered with the
# plain and ChatML templates give exactly the tokens and assistant masks of transformers'
# apply_chat_template (test/ref/prepare_*_expected.txt, dev/gen_prepare_ref.py); field and role
# mapping; record windows (one record per window, padding untrained, window length in the header,
# a trainer with another --seq-len refused); packed records (--pack: tokens and masks with their
# record-start bit against dev/gen_prepare_ref.py's packing of test/ref/prepare_pack.jsonl, in
# order, best-fit and with --overlong drop; headers; the efficiency line; the split; the errors;
# the trainers on packed data, CPU and CUDA (its harness build): the same loss, gradient norm and
# validation loss as one record per window, and another --seq-len refused). Preference pairs
# (test/ref/prepare_pref.jsonl: TRL's string and message forms, explicit and implicit prompts):
# tokens and masks (chosen / rejected record starts) against dev/gen_prepare_ref.py, which takes
# each pair's pieces from TRL (extract_prompt, apply_chat_template), packed, one a window and with
# --overlong drop; header field 10 and mask version 3; the split at a pair; the warning for
# identical completions; errors naming file and line; --show marking the records.
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
mask_ok() { # mask_ok FILE [VERSION]
  local f="$1" b="${1%.mask}.bin" n; n=$(hdr "$f" 2)
  [ "$(hdr "$f" 0)" = 20261122 ] && [ "$(hdr "$f" 1)" = "${2:-1}" ] && [ "$(stat -c %s "$f")" = $((1024 + n)) ] && [ "$n" = "$(hdr "$b" 2)" ]
}
# run prepare expecting failure with a message matching a pattern (expect_fail: extended regular
# expression; expect_failF: a fixed string, for any command)
expect_fail() {
  local what="$1" pat="$2"; shift 2
  local out; out=$("$P" "$@" 2>&1); local rc=$?
  if [ $rc -ne 0 ] && grep -qE -- "$pat" <<<"$out"; then ok "$what"
  else bad "$what (rc $rc): $out"; fi
}
expect_failF() {
  local what="$1" pat="$2"; shift 2
  local out; out=$("$@" 2>&1); local rc=$?
  if [ $rc -ne 0 ] && grep -qF -- "$pat" <<<"$out" && grep -q '^error: ' <<<"$out"; then ok "$what"
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
expect_failF "unknown record" "none of the fields \"chosen\"/\"rejected\", \"messages\", \"conversations\", \"instruction\", \"prompt\"/\"completion\", \"text\" (it has \"foo\")" "$P" --input "$T/bad6.jsonl" --out-dir "$T/x"
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
# --- 6. record schemas and chat templates: tokens and masks exactly as transformers renders them
same_as_ref() { # same_as_ref DIR/NAME_train_000000 REF_FILE
  [ "$(toks "$1.bin" | tr '\n' ' ' | sed 's/ $//')" = "$(sed -n 1p "$2")" ] && \
  [ "$(masks "$1.mask" | tr '\n' ' ' | sed 's/ $//')" = "$(sed -n 2p "$2")" ]
}
for tpl in plain chatml; do
  "$P" --input test/ref/prepare_alpaca.json --out-dir "$T/al$tpl" --name al --val-tokens 0 --chat-template $tpl --quiet || bad "prepare alpaca $tpl"
  check "Alpaca (JSON array, auto-detected), $tpl: tokens and mask == apply_chat_template" same_as_ref "$T/al$tpl/al_train_000000" test/ref/prepare_alpaca_${tpl}_expected.txt
  "$P" --input test/ref/prepare_sharegpt.jsonl --out-dir "$T/sg$tpl" --name sg --val-tokens 0 --chat-template $tpl --quiet || bad "prepare sharegpt $tpl"
  check "ShareGPT (from/value, human/gpt/system), $tpl: tokens and mask == apply_chat_template" same_as_ref "$T/sg$tpl/sg_train_000000" test/ref/prepare_sharegpt_${tpl}_expected.txt
done
"$P" --input test/ref/prepare_sharegpt.jsonl --out-dir "$T/sgx" --name sg --val-tokens 0 --chat-template chatml --schema sharegpt --quiet || bad "--schema sharegpt"
check "--schema sharegpt == auto-detected" same_as_ref "$T/sgx/sg_train_000000" test/ref/prepare_sharegpt_chatml_expected.txt
expect_failF "--schema alpaca on ShareGPT records" "prepare_sharegpt.jsonl' line 1: the record has no \"instruction\" field" "$P" \
  --input test/ref/prepare_sharegpt.jsonl --out-dir "$T/x" --schema alpaca
# the same conversations under other names: --field and --role map them
python3 - "$T" <<'PY'
import json, sys
t = sys.argv[1]
recs = [json.loads(l) for l in open("test/ref/prepare_sharegpt.jsonl", encoding="utf-8")]
names = {"system": "sys", "human": "customer", "gpt": "bot"}
with open(t + "/renamed.jsonl", "w") as f:
    for r in recs:
        f.write(json.dumps({"dialog": [{"speaker": names[m["from"]], "says": m["value"]} for m in r["conversations"]]}) + "\n")
alp = json.load(open("test/ref/prepare_alpaca.json", encoding="utf-8"))
with open(t + "/alpaca_lines.json", "w") as f:  # what HF datasets' to_json writes: one record per line
    for r in alp:
        f.write(json.dumps({"task": r["instruction"], "context": r["input"], "answer": r["output"], **({"system": r["system"]} if "system" in r else {})}) + "\n")
with open(t + "/qa.jsonl", "w") as f:
    f.write(json.dumps({"question": "Is the sky blue?\nAnswer:", "answer": " Yes, on a clear day."}) + "\n")
PY
"$P" --input "$T/renamed.jsonl" --out-dir "$T/rn" --name sg --val-tokens 0 --chat-template chatml --quiet \
  --field messages=dialog,role=speaker --field content=says --role sys=system,customer=user --role bot=assistant || bad "prepare with --field/--role"
check "--field messages=dialog,role=speaker,content=says --role ...: same tokens and mask as ShareGPT" same_as_ref "$T/rn/sg_train_000000" test/ref/prepare_sharegpt_chatml_expected.txt
"$P" --input "$T/alpaca_lines.json" --out-dir "$T/al2" --name al --val-tokens 0 --field instruction=task,input=context,output=answer --quiet \
  || bad "prepare JSON lines in a .json file"
check "a .json file of JSON lines (HF to_json) with renamed Alpaca fields == the Alpaca array" same_as_ref "$T/al2/al_train_000000" test/ref/prepare_alpaca_plain_expected.txt
"$P" --input "$T/qa.jsonl" --out-dir "$T/qa" --name qa --val-tokens 0 --field prompt=question,completion=answer --quiet || bad "prepare --field prompt=question"
# (qa.jsonl is the first record of prepare_sft.jsonl under other names: its 17 tokens are the reference's first)
check "--field prompt=question,completion=answer reads prompt/completion" \
  eval '[ "$(toks "$T/qa/qa_train_000000.bin" | tr "\n" " " | sed "s/ $//")" = "$(sed -n 1p test/ref/prepare_sft_expected.txt | cut -d" " -f1-17)" ] &&
        [ "$(masks "$T/qa/qa_train_000000.mask" | tr "\n" " " | sed "s/ $//")" = "$(sed -n 2p test/ref/prepare_sft_expected.txt | cut -d" " -f1-17)" ]'
expect_failF "unknown role names --role" "line 1: message 0 has unknown role 'sys'" "$P" --input "$T/renamed.jsonl" --out-dir "$T/x" --field messages=dialog,role=speaker,content=says
expect_failF "bad --field" "--field: unknown field 'question'" "$P" --input "$T/qa.jsonl" --out-dir "$T/x" --field question=prompt
expect_failF "bad --role" "--role: 'robot' is not a role" "$P" --input "$T/qa.jsonl" --out-dir "$T/x" --role bot=robot
expect_failF "bad --chat-template" "--chat-template: unknown template 'llama'" "$P" --input "$T/qa.jsonl" --out-dir "$T/x" --chat-template llama
expect_failF "bad --schema" "--schema: unknown schema 'csv'" "$P" --input "$T/qa.jsonl" --out-dir "$T/x" --schema csv
expect_failF "--chat-template with text input" "they were given with text input" "$P" --input "$T/f1.txt" --out-dir "$T/x" --chat-template chatml
# JSON files: an array is read as records; what is not records gets its message
printf '[{"text": "one"},\n "two"]\n' > "$T/arr_bad.json"
expect_failF "array element that is not a record" "arr_bad.json' array element 1: expected a JSON object (a record), got string" "$P" --input "$T/arr_bad.json" --out-dir "$T/x"
printf '[{"text": "one"},\n {"text": "two"}\n' > "$T/arr_cut.json"
expect_failF "truncated JSON array" "arr_cut.json': malformed JSON" "$P" --input "$T/arr_cut.json" --out-dir "$T/x"
printf '"just a string"\n' > "$T/str.json"
expect_failF "JSON that holds no records" "str.json' holds a JSON string, not records" "$P" --input "$T/str.json" --out-dir "$T/x"
printf '[\n  {"text": "one"}\n]\n' > "$T/arr.jsonl"
expect_failF "a JSON array in a .jsonl file" "read with --format json" "$P" --input "$T/arr.jsonl" --out-dir "$T/x"
"$P" --input "$T/arr.jsonl" --format json --out-dir "$T/arrj" --val-tokens 0 --quiet && ok "--format json reads an array from any file name" || bad "--format json on arr.jsonl"
printf '[]' > "$T/empty.json"
expect_failF "empty JSON array" "empty.json': no records" "$P" --input "$T/empty.json" --out-dir "$T/x"

# --- 7. record windows: one record per window of T tokens, padding untrained
"$P" --input test/ref/prepare_sft.jsonl --out-dir "$T/w" --name w --val-tokens 0 --record-windows 24 > "$T/w.log" || bad "prepare --record-windows"
check "windows: tokens and mask == the documented rule on tiktoken's ids" same_as_ref "$T/w/w_train_000000" test/ref/prepare_windows_expected.txt
check "window length 24 in the shard and mask headers" eval '[ "$(hdr "$T/w/w_train_000000.bin" 3)" = 24 ] && [ "$(hdr "$T/w/w_train_000000.mask" 3)" = 24 ]'
check "stream shards keep header field 3 at 0" [ "$(hdr "$T/e/sft_train_000000.bin" 3)" = 0 ]
wt=($(toks "$T/w/w_train_000000.bin")); wm=($(masks "$T/w/w_train_000000.mask"))
nwin=$(( (${#wt[@]} - 1) / 24 )); okw=1
for ((k = 0; k < nwin; k++)); do [ "${wt[$((k*24))]}" = 50256 ] && [ "${wm[$((k*24))]}" = 0 ] || okw=0; done
check "each of the $nwin windows starts with an untrained <|endoftext|> (no record spans two windows)" [ $okw = 1 ] 
check "summary: 1 truncated, 1 dropped (no trained token)" grep -q "1 record(s) truncated, 0 dropped as too long, 1 dropped with no trained token" "$T/w.log"
"$P" --input test/ref/prepare_sft.jsonl --out-dir "$T/w2" --name w --val-tokens 0 --record-windows 24 --overlong drop --quiet || bad "--overlong drop"
check "--overlong drop: the conversation longer than 24 tokens is left out" [ "$(hdr "$T/w2/w_train_000000.bin" 2)" = $(( (nwin - 1) * 24 + 1 )) ]
"$P" --input test/ref/prepare_sft.jsonl --out-dir "$T/w3" --name w --val-tokens 30 --record-windows 24 --shard-tokens 50 --quiet || bad "windows + split + shards"
v3=$(hdr "$T/w3/w_val_000000.bin" 2); n3=0; for f in "$T"/w3/w_train_*.bin; do n3=$((n3 + $(hdr "$f" 2) - 1)); done
check "windows: val is whole windows + 1 ($v3 tokens), shards hold 2 windows + 1" \
  eval '[ "$v3" = 25 ] && [ "$(hdr "$T/w3/w_train_000000.bin" 2)" = 49 ] && [ $((v3 - 1 + n3)) = $((nwin * 24)) ]'
printf 'First paragraph of the text.\n\nA second, longer paragraph of text that goes on.\n' > "$T/paras.txt"
"$P" --input "$T/paras.txt" --doc-sep blank --out-dir "$T/wt" --name p --val-tokens 0 --record-windows 16 --quiet || bad "text windows"
pm=$(masks "$T/wt/p_train_000000.mask" | tr '\n' ' ')
# the paragraphs are 7 and 12 tokens (tiktoken): EOT, text, trained closing EOT, untrained padding
check "text documents in windows: 2 windows + 1, with a mask (padding untrained): $pm" \
  eval '[ "$(hdr "$T/wt/p_train_000000.bin" 2)" = 33 ] && [ "$pm" = "0 1 1 1 1 1 1 1 1 0 0 0 0 0 0 0 0 1 1 1 1 1 1 1 1 1 1 1 1 1 0 0 0 " ]'
expect_failF "--record-windows with --doc-sep none" "--record-windows with --doc-sep none" "$P" --input "$T/paras.txt" --doc-sep none --out-dir "$T/x" --record-windows 16
expect_failF "--overlong without windows" "--overlong given without --record-windows" "$P" --input "$T/qa.jsonl" --out-dir "$T/x" --overlong drop
expect_failF "no record fits" "no record fits a window" "$P" --input "$T/qa.jsonl" --out-dir "$T/x" --field prompt=question,completion=answer --record-windows 4 --overlong drop
# the hint says what helps: records cut before their completion under the default --overlong
# truncate were told to "use --overlong truncate"
printf '{"prompt": "one two three four five six seven eight nine ten", "completion": " yes"}\n' > "$T/longp.jsonl"
for w in "--record-windows 4" "--pack 4"; do
  out=$("$P" --input "$T/longp.jsonl" --out-dir "$T/x" $w --val-tokens 0 2>&1); rc=$?
  check "no record fits ($w, completions cut off under the default truncate): the hint names what helps, not the default ($(grep hint <<<"$out"))" \
    eval '[ $rc -ne 0 ] && grep -qF "hint: raise ${w% *}: the trained tokens (completions, assistant turns) lie beyond the first 4 tokens or are empty (or train on the prompts too with --train-on-inputs)" <<<"$out" && ! grep -q overlong <<<"$out"'
done
out=$("$P" --input "$T/qa.jsonl" --out-dir "$T/x" --field prompt=question,completion=answer --record-windows 4 --overlong drop 2>&1)
check "... and records dropped as too long: raise the window or truncate them" grep -qF "hint: raise --record-windows, or use --overlong truncate (the default" <<<"$out"
# the trainer takes the windows only with the matching --seq-len
TRAIN="${BIN_DIR}/train_gpt2"
if [ -x "$TRAIN" ]; then
  "$TRAIN" --model tiny --train-data "$T/w/w_train_*.bin" --batch-size 2 --seq-len 24 --steps 1 --threads 2 --out "$T/wtrain" > "$T/wtrain.log" 2>&1 \
    && ok "train_gpt2 --seq-len 24 trains on 24-token windows" || { cat "$T/wtrain.log"; bad "train on windows"; }
  expect_failF "train_gpt2 refuses another --seq-len" "holds one record per window of 24 tokens (data/prepare --record-windows 24), but --seq-len is 16" \
    "$TRAIN" --model tiny --train-data "$T/w/w_train_*.bin" --batch-size 1 --seq-len 16 --steps 1 --threads 2
else
  echo "skip: $TRAIN not built: the trainer's --seq-len check was not run"
fi
# --- 8. packed records: whole records in windows of T tokens, each window's records marked
for v in inorder bestfit drop; do
  case $v in inorder) fl=();; bestfit) fl=(--pack-order best-fit);; drop) fl=(--overlong drop);; esac
  "$P" --input test/ref/prepare_pack.jsonl --out-dir "$T/pk$v" --name pk --val-tokens 0 --pack 24 "${fl[@]}" > "$T/pk$v.log" || bad "prepare --pack ($v)"
  check "--pack 24 ${fl[*]}: tokens and mask (record starts + 2) == the documented packing" same_as_ref "$T/pk$v/pk_train_000000" test/ref/prepare_pack_${v}_expected.txt
done
pk="$T/pkinorder/pk_train_000000"
check "packed: window length 24 and packed flag in the shard header, version 2 mask" \
  eval '[ "$(hdr "$pk.bin" 3)" = 24 ] && [ "$(hdr "$pk.bin" 4)" = 1 ] && [ "$(hdr "$pk.mask" 3)" = 24 ] && [ "$(hdr "$pk.mask" 4)" = 1 ] && mask_ok "$pk.mask" 2 && shard_ok "$pk.bin"'
check "record windows and streams keep header field 4 at 0" eval '[ "$(hdr "$T/w/w_train_000000.bin" 4)" = 0 ] && [ "$(hdr "$T/e/sft_train_000000.bin" 4)" = 0 ]'
pt=($(toks "$pk.bin")); pm=($(masks "$pk.mask"))
nwin=$(( (${#pt[@]} - 1) / 24 )); okw=1
for ((k = 0; k < nwin; k++)); do [ "${pt[$((k*24))]}" = 50256 ] && [ $(( ${pm[$((k*24))]} & 2 )) = 2 ] || okw=0; done
check "each of the $nwin packed windows starts a record with <|endoftext|>" [ $okw = 1 ]
check "summary: cut and dropped records" grep -q "packed windows of 24 tokens: 1 record(s) truncated, 0 dropped as too long, 1 dropped with no trained token" "$T/pkinorder.log"
# 11 records of 3..24 tokens (96 tokens, 74 trained targets: the reference's mask) in 5 windows
# (120 slots); one per window, 11 windows (264 slots)
ntr=$(sed -n 2p test/ref/prepare_pack_inorder_expected.txt | tr ' ' '\n' | tail -n +2 | awk '{s += $1 % 2} END {print s}')
check "summary: packing efficiency (record tokens and trained targets per window slot; $ntr trained)" eval \
  '[ "$ntr" = 74 ] && grep -qF "pack: 11 records in 5 windows of 24 tokens (in order): 80.0% of the window slots hold record tokens, 61.7% are trained targets" "$T/pkinorder.log" &&
   grep -qF "pack: one record per window (--record-windows 24) would take 11 windows: 36.4% record tokens, 28.0% trained targets" "$T/pkinorder.log"'
"$P" --input test/ref/prepare_pack.jsonl --out-dir "$T/pkv" --name pk --val-tokens 40 --pack 24 --shard-tokens 50 --quiet || bad "--pack + split + shards"
vt=$(hdr "$T/pkv/pk_val_000000.bin" 2); n2=0; for f in "$T"/pkv/pk_train_*.bin; do n2=$((n2 + $(hdr "$f" 2) - 1)); mask_ok "${f%.bin}.mask" 2 || bad "$f: mask"; done
check "--pack with a split: val is whole windows + 1 ($vt tokens), train shards 2 windows + 1" \
  eval '[ $(( (vt - 1) % 24 )) = 0 ] && [ "$(hdr "$T/pkv/pk_train_000000.bin" 2)" = 49 ] && [ $(( (vt - 1 + n2) % 24 )) = 0 ] && [ "$(toks "$T/pkv/pk_val_000000.bin" | head -1)" = 50256 ]'
"$P" --input "$T/paras.txt" --doc-sep blank --out-dir "$T/pt" --name p --val-tokens 0 --pack 24 --quiet || bad "text --pack"
pm=$(masks "$T/pt/p_train_000000.mask" | tr '\n' ' ')
# the paragraphs (7 and 12 tokens after their EOT) in one window: starts marked, the stop between
# them trained, the padding's first token (the second's stop) too, the rest of it not
check "text documents packed: one window + 1, masks $pm" \
  eval '[ "$(hdr "$T/pt/p_train_000000.bin" 2)" = 25 ] && [ "$pm" = "2 1 1 1 1 1 1 1 3 1 1 1 1 1 1 1 1 1 1 1 1 3 0 0 0 " ]'
expect_failF "--pack with --record-windows" "--record-windows and --pack are mutually exclusive" "$P" --input test/ref/prepare_pack.jsonl --out-dir "$T/x" --pack 24 --record-windows 24
expect_failF "--pack-order without --pack" "--pack-order given without --pack" "$P" --input test/ref/prepare_pack.jsonl --out-dir "$T/x" --pack-order best-fit
expect_failF "bad --pack-order" "--pack-order: unknown value 'random' (use in-order or best-fit)" "$P" --input test/ref/prepare_pack.jsonl --out-dir "$T/x" --pack 24 --pack-order random
expect_failF "--pack with --doc-sep none" "--pack with --doc-sep none" "$P" --input "$T/paras.txt" --doc-sep none --out-dir "$T/x" --pack 16
expect_failF "--pack: no record fits" "no record fits a window" "$P" --input "$T/qa.jsonl" --out-dir "$T/x" --field prompt=question,completion=answer --pack 4 --overlong drop
expect_failF "--pack: a validation split needs two records" "a validation split needs two records" "$P" --input "$T/qa.jsonl" --out-dir "$T/x" --field prompt=question,completion=answer --pack 32
# The same records one per window (11 windows) and packed (5): one step over all of them and an
# evaluation give the same loss, gradient norm and validation loss (each record as if alone).
"$P" --input test/ref/prepare_pack.jsonl --out-dir "$T/pkw" --name pk --val-tokens 0 --record-windows 24 --quiet || bad "prepare pkw"
packed_as_alone() { # packed_as_alone NAME PROGRAM RTOL [flags...]
  local name="$1" prog="$2" rtol="$3" v d bs; shift 3
  local o="$T/pk_${name//[^a-zA-Z0-9]/_}"
  for v in w pk; do
    [ $v = w ] && { d="$T/pkw"; bs=11; } || { d="$T/pkinorder"; bs=5; }
    "$prog" --model tiny --train-data "$d/pk_train_*.bin" --val-data "$d/pk_train_*.bin" --batch-size $bs --seq-len 24 --steps 1 \
      --eval-every 1 --eval-batches all --lr 0 "$@" --out "${o}_$v" > "${o}_$v.log" 2>&1 || { cat "${o}_$v.log"; bad "$name on $v"; }
  done
  check "$name on packed windows == one record per window: step loss, gradient norm, validation loss (within $rtol)" \
    python3 - "${o}_w/log.jsonl" "${o}_pk/log.jsonl" "$rtol" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
pairs = [(x[k], y[k]) for x, y in zip(a, b) for k in ("train_loss", "grad_norm", "val_loss") if k in x]
print("  (record windows, packed):", pairs)
sys.exit(0 if len(pairs) == 4 and all(abs(x - y) <= float(sys.argv[3]) * abs(x) for x, y in pairs) else 1)
PY
}
if [ -x "$TRAIN" ]; then
  packed_as_alone train_gpt2 "$TRAIN" 2e-6 --threads 2
  expect_failF "train_gpt2 refuses another --seq-len for packed windows" "holds records packed into windows of 24 tokens (data/prepare --pack 24), but --seq-len is 16" \
    "$TRAIN" --model tiny --train-data "$T/pkinorder/pk_train_*.bin" --batch-size 1 --seq-len 16 --steps 1 --threads 2
fi
# the CUDA build (here its harness build: the attention kernels with the record starts, the
# encoder with the positions), within bf16
EMU_TRAIN="$BUILD/gpucheck/emu/train_gpt2"
if [ -x "$EMU_TRAIN" ]; then packed_as_alone "train_gpt2 of the CUDA build" "$EMU_TRAIN" 2e-3
else echo "skip: $EMU_TRAIN not built: the CUDA build was not run on packed data"; fi
# the vocabulary without --vocab: data/gpt2 of the working directory, else near the program
mkdir -p "$T/elsewhere" "$T/bin"; ROOT=$(pwd); PABS=$(cd "$(dirname "$P")" && pwd)/$(basename "$P")
( cd "$T/elsewhere" && "$PABS" --input "$ROOT/$T/f1.txt" --out-dir out --val-tokens 0 --quiet ) \
  && [ "$(toks "$T/elsewhere/out/f1_train_000000.bin" | tr '\n' ' ')" = "$(toks "$T/c/two_train_000000.bin" | head -5 | tr '\n' ' ')" ] \
  && ok "run from another directory: the vocabulary is found near the program" || bad "prepare from another directory"
FAR=$(mktemp -d "${TMPDIR:-/tmp}/llmc-prepare.XXXXXX"); mkdir -p "$FAR/bin"; cp "$P" "$FAR/bin/prepare"
( cd "$FAR" && expect_failF "a copy far from the repository finds no vocabulary" "the GPT-2 vocabulary (data/gpt2) is neither in the working directory nor near this program" \
    "$FAR/bin/prepare" --input "$ROOT/$T/f1.txt" --out-dir "$ROOT/$T/x" )
rm -rf "$FAR"
check "failed runs wrote nothing" [ -z "$(ls "$T/x" 2>/dev/null)" ]
# --- 9. what makes a data/prepare output trustworthy: header fields 5-10 (mask stated, place in
# the split, CRC-32Cs, the split's id: checked here with a CRC-32C written in Python), each mask
# renamed into place before its shard, an earlier output removed before anything is written
# (.bin files first), temporary files of killed runs removed
python3 - "$T" <<'PY' && ok "header fields 5-10: mask stated, shard k of n, CRC-32C of the tokens / mask bytes, one id per split; a mask repeats its shard's fields 3-9" || bad "header fields 5-10"
import glob, struct, sys
T = sys.argv[1]
tab = []
for i in range(256):
    c = i
    for _ in range(8): c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    tab.append(c)
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b: c = (c >> 8) ^ tab[(c ^ x) & 0xFF]
    return c ^ 0xFFFFFFFF
def hdr(p):
    b = open(p, "rb").read()
    return list(struct.unpack("<256i", b[:1024])), b[1024:]
u = lambda x: x & 0xFFFFFFFF
okay = True
def want(c, what):
    global okay
    if not c: print("  FAIL", what); okay = False
for d, name, masked in [(T + "/w3", "w", 1), (T + "/pkv", "pk", 1), (T + "/e", "sft", 0)]:  # (e: the text run over the JSONL)
    for split in ("val", "train"):
        files = sorted(glob.glob(f"{d}/{name}_{split}_*.bin"))
        sets = set()
        for k, f in enumerate(files):
            h, body = hdr(f)
            want(h[5] == masked and h[6] == k and h[7] == len(files), f"{f}: fields 5-7 {h[5:8]}")
            want(u(h[8]) == crc32c(body), f"{f}: field 8 is not the tokens' CRC-32C")
            want(h[11:] == [0] * 245, f"{f}: fields 11.. not zero")
            sets.add(h[9])
            m = f[:-4] + ".mask"
            if masked:
                mh, mb = hdr(m)
                want(mh[3:10] == h[3:10] and u(mh[10]) == crc32c(mb) and mh[11:] == [0] * 245, f"{m}: fields 3-10")
        want(len(files) == 0 or len(sets) == 1, f"{d} {split}: one id per split, not {sets}")
    if glob.glob(f"{d}/{name}_val_*.bin"):
        want(hdr(glob.glob(f"{d}/{name}_val_*.bin")[0])[0][9] != hdr(glob.glob(f"{d}/{name}_train_*.bin")[0])[0][9], f"{d}: val and train share an id")
sys.exit(0 if okay else 1)
PY
if command -v strace >/dev/null; then
  "$P" --input test/ref/prepare_pack.jsonl --out-dir "$T/ord" --name o --val-tokens 40 --pack 24 --shard-tokens 50 --quiet || bad "prepare ord"
  # (LeakSanitizer cannot run under ptrace)
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" strace -f -e trace=rename,renameat,renameat2,unlink,unlinkat -o "$T/ord.trace" \
    "$P" --input test/ref/prepare_sft.jsonl --out-dir "$T/ord" --name o \
    --val-tokens 20 --shard-tokens 30 --quiet || bad "prepare under strace"
  python3 - "$T/ord.trace" <<'PY' && ok "every .mask renamed into place before its .bin; the earlier output unlinked first, .bin files before masks" || bad "write order"
import re, sys
ev = []
for line in open(sys.argv[1]):
    m = re.search(r'(rename\w*|unlink\w*)\(.*?"([^"]+)"(?:, (?:AT_FDCWD, )?"([^"]+)")?', line)
    if m and " = 0" in line: ev.append((m.group(1)[:6], (m.group(3) or m.group(2)).rsplit("/", 1)[-1]))
ev = [e for e in ev if e[1] != ".lock"] # (the lock file data/prepare made goes at its end)
ren = [f for k, f in ev if k == "rename"]
unl = [i for i, (k, f) in enumerate(ev) if k == "unlink"]
ok = len(ren) >= 6 and all(f.endswith(".mask") == (i % 2 == 0) for i, f in enumerate(ren)) and all(ren[i][:-5] == ren[i + 1][:-4] for i in range(0, len(ren), 2))
first_ren = min(i for i, (k, f) in enumerate(ev) if k == "rename")
ul = [ev[i][1] for i in unl]
ok = ok and len(ul) >= 6 and max(unl) < first_ren and all(not f.endswith(".mask") for f in ul[:ul.index(next(f for f in ul if f.endswith(".mask")))]) \
     and all(f.endswith(".mask") for f in ul[[f.endswith(".mask") for f in ul].index(True):])
print("  renames:", " ".join(ren)); print("  unlinks:", " ".join(ul))
sys.exit(0 if ok else 1)
PY
else
  echo "skip: strace not installed: the order of data/prepare's renames was not checked"
fi
# the temporaries of killed runs of this --name, whatever pid they name: one of a process that
# lives (a pid reused, or another host's) is no one's write either while this run holds the lock
# of the name (llmc/run/runlock.h); another --name's stay
sleep 0.01 & deadpid=$!; wait $deadpid
: > "$T/ord/o_train_000007.bin.tmp.$deadpid"; : > "$T/ord/o_train_000000.mask.tmp.$deadpid"; : > "$T/ord/o_train_000001.bin.tmp.$$"
: > "$T/ord/p_train_000000.bin.tmp.$deadpid"
"$P" --input test/ref/prepare_sft.jsonl --out-dir "$T/ord" --name o --val-tokens 0 > "$T/ord.log" || bad "prepare over temporary files"
check "temporary files of killed runs of the name removed, a live pid's too (a pid proves nothing: the lock does), another name's kept, and said" eval \
  '[ ! -e "$T/ord/o_train_000007.bin.tmp.$deadpid" ] && [ ! -e "$T/ord/o_train_000000.mask.tmp.$deadpid" ] && [ ! -e "$T/ord/o_train_000001.bin.tmp.$$" ] &&
   [ -e "$T/ord/p_train_000000.bin.tmp.$deadpid" ] && grep -q "^cleanup: removed 3 temporary files of writes that did not finish (a killed run) in .*o_train_000001.bin.tmp.$$" "$T/ord.log" &&
   grep -q "^removed the [0-9]* file(s) of an earlier '"'"'o'"'"' output" "$T/ord.log"'
rm -f "$T/ord/p_train_000000.bin.tmp.$deadpid"
# one data/prepare of a name at a time in a folder (stopped while it holds the lock): another of
# the same --name is refused with its pid, one of another --name goes ahead; no .lock stays
mkdir -p "$T/lk"
"$P" --input $(for _ in $(seq 12); do echo data/tinyshakespeare.txt; done) --out-dir "$T/lk" --name big --val-tokens 0 --quiet &
pp=$!
for _ in $(seq 1000); do grep -qs "process $pp " "$T/lk/.lock" && break; sleep 0.01; done
if kill -STOP $pp 2>/dev/null && grep -qs "process $pp " "$T/lk/.lock"; then
  expect_failF "a second data/prepare of the same --name in the folder is refused with the first's pid" "--out-dir $T/lk is in use by process $pp (" \
    "$P" --input test/ref/prepare_sft.jsonl --out-dir "$T/lk" --name big --val-tokens 0
  check "one of another --name in the same folder goes ahead" "$P" --input test/ref/prepare_sft.jsonl --out-dir "$T/lk" --name small --val-tokens 0 --quiet
  kill -CONT $pp; wait $pp
  check "the stopped data/prepare completes and its .lock goes" eval '[ -f "$T/lk/big_train_000000.bin" ] && [ ! -e "$T/lk/.lock" ]'
else kill -CONT $pp 2>/dev/null; wait $pp; bad "data/prepare did not hold the lock while it ran"; fi

# --- 10. --show: the text of a shard with its trained targets marked, as the trainer reads it
"$P" --input test/ref/prepare_sft.jsonl --out-dir "$T/sh" --name sft --val-tokens 0 --quiet || bad "prepare for --show"
"$P" --show "$T/sh/sft_train_000000.bin" --tokens 0 > "$T/show.txt" || bad "--show"
# expected: the documented rules applied to the JSONL records (plain template): prompts, headers,
# system and user turns untrained, completions and assistant bodies trained, each record's
# <|endoftext|> trained when the token before it is, the first token of a shard never
python3 - "$T/show.txt" <<'PY' && ok "--show: the text with the trained targets between [[ and ]] == the records under the documented mask rules" || bad "--show text"
import json, sys
E = "<|endoftext|>"
pieces = []
for line in open("test/ref/prepare_sft.jsonl", encoding="utf-8"):
    if not line.strip(): continue
    r = json.loads(line)
    pieces.append([E, None])
    if "messages" in r:
        for m in r["messages"]:
            pieces += [[m["role"].capitalize() + ":", 0], [" " + m["content"] + "\n", int(m["role"] == "assistant")]]
    elif "text" in r: pieces.append([r["text"], 1])
    else: pieces += [[r["prompt"], 0], [r["completion"], 1]]
pieces.append([E, None])
prev = 0
for p in pieces:
    if p[1] is None: p[1] = prev
    if p[0]: prev = p[1]
pieces[0][1] = 0
out = ""
for text, tr in pieces:
    if text: out += ("[[" + text + "]]") if tr else text
out = out.replace("]][[", "")
got = open(sys.argv[1], encoding="utf-8").read().split("\n", 3)
print("  ", got[0]); print("  ", got[1])
ok = got[0].startswith("# ") and "91 tokens, a token stream, shard 1 of 1 of its split" in got[0] and got[1].startswith("# loss mask: ") and got[3] == out + "\n"
if not ok: print(repr(got[3])); print(repr(out + "\n"))
sys.exit(0 if ok else 1)
PY
"$P" --show "$T/sh/sft_train_000000.bin" --tokens 0 --ids > "$T/ids.txt" || bad "--show --ids"
check "--show --ids: ids == tiktoken's, label = id where the reference mask trains it (-100 elsewhere and at token 0)" python3 - "$T/ids.txt" <<'PY'
import sys
ids, mask = (list(map(int, l.split())) for l in open("test/ref/prepare_sft_expected.txt").read().splitlines()[:2])
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1], errors="surrogateescape") if not l.startswith("#")]
sys.exit(0 if [int(r[1]) for r in rows] == ids and [int(r[2]) for r in rows] == [i if m and k else -100 for k, (i, m) in enumerate(zip(ids, mask))]
         and [int(r[0]) for r in rows] == list(range(len(ids))) else 1)
PY
"$P" --show "$T/sh/sft_train_000000.bin" --from 5 --tokens 3 --ids | grep -v '^#' | cut -f1 | tr '\n' ' ' > "$T/ids3.txt"
check "--show --from 5 --tokens 3: tokens 5, 6, 7" [ "$(cat "$T/ids3.txt")" = "5 6 7 " ]
"$P" --show "$pk.bin" --ids --tokens 0 | grep -c 'start$' > "$T/starts.txt"
nstart=$(masks "$pk.mask" | awk '$1 >= 2' | wc -l)
"$P" --show "$pk.bin" --tokens 0 > "$T/pkshow.txt"
check "--show on packed windows: a line per window ($(grep -c '^# window' "$T/pkshow.txt")), a 'start' per record start ($nstart)" \
  eval '[ "$(grep -c "^# window" "$T/pkshow.txt")" = 5 ] && [ "$(cat "$T/starts.txt")" = "$nstart" ] && head -1 "$T/pkshow.txt" | grep -q "records packed into windows of 24 tokens"'
cp "$T/sh/sft_train_000000.bin" "$T/sh/lone.bin"
expect_failF "--show refuses a shard without the mask it says it has" "'$T/sh/lone.bin' was written with a loss mask, but its mask '$T/sh/lone.mask' is missing" "$P" --show "$T/sh/lone.bin"
expect_failF "--show takes only its flags" "'--val-frac' is not a --show flag" "$P" --show "$T/sh/sft_train_000000.bin" --val-frac 0.1
expect_failF "--tokens without --show" "--tokens goes with --show" "$P" --input "$T/f1.txt" --out-dir "$T/x" --tokens 5
expect_failF "--show --from past the end" "--from 500: '$T/sh/sft_train_000000.bin' has 91 tokens" "$P" --show "$T/sh/sft_train_000000.bin" --from 500

# --- 11. preference pairs: two records a pair, whole in one window, their starts marked
for v in pack windows drop; do
  case $v in pack) fl=(--pack 96);; windows) fl=(--record-windows 96);; drop) fl=(--pack 96 --overlong drop);; esac
  "$P" --input test/ref/prepare_pref.jsonl --out-dir "$T/pr$v" --name pr --val-tokens 0 --chat-template chatml "${fl[@]}" > "$T/pr$v.log" || bad "prepare pairs ($v)"
  check "pairs, ${fl[*]}: tokens and mask (starts + 2, chosen + 4, rejected + 8) == TRL's pieces laid out as documented" \
    same_as_ref "$T/pr$v/pr_train_000000" test/ref/prepare_pref_${v}_expected.txt
done
pr="$T/prpack/pr_train_000000"
check "pairs: header field 10 = 1, packed, mask version 3 repeating fields 3-9" \
  eval '[ "$(hdr "$pr.bin" 10)" = 1 ] && [ "$(hdr "$pr.bin" 4)" = 1 ] && [ "$(hdr "$pr.bin" 3)" = 96 ] && [ "$(hdr "$pr.mask" 1)" = 3 ]'
check "pairs: the summary counts pairs, the cut one, the identical one (warning naming file and line)" \
  eval 'grep -q "8 preference pairs in" "$T/prpack.log" && grep -q "packed windows of 96 tokens: 1 pair(s) truncated, 0 dropped as too long" "$T/prpack.log" &&
        grep -q "prepare_pref.jsonl'"'"' line 6: chosen and rejected are the same" "$T/prpack.log" && grep -q "1 dropped as too long" "$T/prdrop.log" &&
        grep -q "one a window of 96 tokens" "$T/prwindows.log"'
"$P" --show "$pr.bin" --tokens 0 > "$T/prshow.txt"
check "--show on pairs: a '# chosen' and a '# rejected' line per pair (8 each)" \
  eval '[ "$(grep -c "^# chosen" "$T/prshow.txt")" = 8 ] && [ "$(grep -c "^# rejected" "$T/prshow.txt")" = 8 ] && head -1 "$T/prshow.txt" | grep -q "8 preference pairs in windows of 96 tokens"'
"$P" --input test/ref/prepare_pref.jsonl --out-dir "$T/prv" --name pr --val-tokens 30 --chat-template chatml --pack 96 --quiet || bad "pairs + split"
check "pairs: validation ends at a pair (both splits start with a chosen record)" \
  eval '[ "$(masks "$T/prv/pr_val_000000.mask" | head -1)" = 6 ] && [ "$(masks "$T/prv/pr_train_000000.mask" | head -1)" = 6 ]'
printf '{"prompt": "a", "chosen": "", "rejected": " b"}\n' > "$T/pe1.jsonl"
expect_failF "an empty chosen completion names file and line" "'$T/pe1.jsonl' line 1: \"chosen\" is empty" "$P" --input "$T/pe1.jsonl" --out-dir "$T/x" --pack 32
printf '{"prompt": "a", "chosen": " x"}\n' > "$T/pe2.jsonl"
expect_failF "a missing rejected names file and line" "'$T/pe2.jsonl' line 1: the preference record has no \"rejected\" field" "$P" --input "$T/pe2.jsonl" --out-dir "$T/x" --pack 32
printf '{"q": "a", "good": " x", "bad": " y"}\n' > "$T/pe3.jsonl"
"$P" --input "$T/pe3.jsonl" --out-dir "$T/pe3" --field prompt=q,chosen=good,rejected=bad --pack 16 --val-tokens 0 --quiet
check "--field renames prompt, chosen and rejected" [ "$(hdr "$T/pe3/pe3_train_000000.bin" 10)" = 1 ]
printf '{"chosen": [{"role": "user", "content": "q"}, {"role": "user", "content": "x"}], "rejected": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "y"}]}\n' > "$T/pe4.jsonl"
expect_failF "a completion must start with the assistant" "'$T/pe4.jsonl' line 1: \"chosen\" starts with a user message" "$P" --input "$T/pe4.jsonl" --out-dir "$T/x" --pack 32
printf '{"prompt": "a", "chosen": " x", "rejected": [{"role": "assistant", "content": "y"}]}\n' > "$T/pe5.jsonl"
expect_failF "strings beside messages" "must both be strings or both lists of messages" "$P" --input "$T/pe5.jsonl" --out-dir "$T/x" --pack 32
expect_failF "pairs need windows" "'test/ref/prepare_pref.jsonl' line 1: preference pairs need --pack or --record-windows" "$P" --input test/ref/prepare_pref.jsonl --out-dir "$T/x"
expect_failF "pairs and other records do not mix" "line 1: a preference pair among records that are not preference pairs" "$P" --input test/ref/prepare_sft.jsonl test/ref/prepare_pref.jsonl --out-dir "$T/x" --pack 96
expect_failF "--train-on-inputs with pairs" "--train-on-inputs with preference pairs" "$P" --input test/ref/prepare_pref.jsonl --out-dir "$T/x" --pack 96 --train-on-inputs
check "failed pair runs wrote nothing" [ -z "$(ls "$T/x" 2>/dev/null)" ]

# --- 11. --shuffle --seed S: validation's records drawn at random (Hugging Face's
# train_test_split(shuffle=True, seed=S)); it was always the first records, with no option.
# Same seed, same split; another seed, another; every record on exactly one side, whole, each side
# in input order; and the shards are exactly those of the same records given in that order
# (validation's first), unshuffled: tokens, masks and the boundary <|endoftext|> as in any split
python3 -c "
import json
for i in range(40): print(json.dumps({'prompt': 'Question %d?' % i, 'completion': ' Answer number %d.' % i}))" > "$T/sh.jsonl"
shown() { "$P" --show "$1" --tokens 0 | grep -v '^#' | sed 's/\[\[//g; s/\]\]//g'; }
sides_ok() { # sides_ok DIR NAME: each record once, whole, on one side; each side ascending; prints the validation ids
  python3 - "$(shown "$1/$2_val_000000.bin")" "$(shown "$1/$2_train_000000.bin")" <<'PY'
import re, sys
sides = []
for text in sys.argv[1:3]:
    recs = [r for r in text.replace("\n", "").split("<|endoftext|>") if r]
    ids = []
    for r in recs:
        m = re.fullmatch(r"Question (\d+)\? Answer number (\d+)\.", r)
        if not m or m.group(1) != m.group(2): sys.exit("a record cut or mixed: %r" % r)
        ids.append(int(m.group(1)))
    if ids != sorted(ids): sys.exit("a side out of input order: %s" % ids)
    sides.append(ids)
if sorted(sides[0] + sides[1]) != list(range(40)): sys.exit("records missing or twice: %s | %s" % tuple(sides))
print(" ".join(map(str, sides[0])))
PY
}
for mode in "" "--record-windows 16" "--pack 32"; do
  for sd in 1 1b 2; do
    "$P" --input "$T/sh.jsonl" --out-dir "$T/sh$sd" --val-frac 0.25 --shuffle --seed ${sd%b} $mode --quiet || bad "--shuffle --seed $sd $mode failed"
  done
  v1=$(sides_ok "$T/sh1" sh); r1=$?; v2=$(sides_ok "$T/sh2" sh); r2=$?
  [ $r1 = 0 ] && [ $r2 = 0 ] && [ "$v1" != "$(seq -s' ' 0 9)" ] \
    && ok "--shuffle ${mode:-(a stream)}: every record once, whole, on one side, each side in input order; validation $v1 | $v2" \
    || bad "--shuffle $mode: $v1 | $v2"
  check "--shuffle ${mode:-(a stream)}: the same seed gives the same split" eval 'cmp -s "$T/sh1/sh_val_000000.bin" "$T/sh1b/sh_val_000000.bin" && cmp -s "$T/sh1/sh_train_000000.mask" "$T/sh1b/sh_train_000000.mask"'
  check "--shuffle ${mode:-(a stream)}: another seed, another split" eval '[ -n "$v1" ] && [ "$v1" != "$v2" ]'
done
"$P" --input "$T/sh.jsonl" --out-dir "$T/sh1" --val-frac 0.25 --shuffle --seed 1 > "$T/sh1.log"
python3 - "$T/sh.jsonl" "$(sides_ok "$T/sh1" sh)" > "$T/sh_order.jsonl" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
val = [int(v) for v in sys.argv[2].split()]
for i in val + [i for i in range(len(lines)) if i not in val]: print(lines[i])
PY
nv=$(hdr "$T/sh1/sh_val_000000.bin" 2)
"$P" --input "$T/sh_order.jsonl" --out-dir "$T/sho" --name sh --val-tokens "$nv" --quiet
same_shards() { local f; for f in val_000000.bin val_000000.mask train_000000.bin train_000000.mask; do cmp -s "$1/sh_$f" "$2/sh_$f" || return 1; done; }
check "--shuffle: the shards are those of the records in that order, unshuffled (tokens, masks, the split's <|endoftext|>)" same_shards "$T/sh1" "$T/sho"
check "--shuffle: the summary says how validation was chosen" grep -q "^split: validation is 10 of the 40 records, drawn at random (--shuffle, --seed 1); each side in input order" "$T/sh1.log"
"$P" --input "$T/sh.jsonl" --out-dir "$T/sh0" --val-frac 0.25 > "$T/sh0.log"
check "without --shuffle validation is the first records (the default, unchanged), and the summary says so" eval \
  '[ "$(sides_ok "$T/sh0" sh)" = "$(seq -s" " 0 9)" ] && grep -q "^split: validation is the first 10 of the 40 records (--shuffle draws them at random)" "$T/sh0.log"'
"$P" --input test/ref/prepare_pref.jsonl --out-dir "$T/shp" --pack 96 --val-frac 0.3 --shuffle --seed 3 --quiet \
  && check "--shuffle with preference pairs: validation takes whole pairs (chosen and rejected records, the last token training's first, a chosen one: $(masks "$T/shp/prepare_pref_val_000000.mask" | awk '{c += int($1 / 4) % 2; r += int($1 / 8) % 2} END {print c + 0, r + 0}'))" eval \
       '[ "$(masks "$T/shp/prepare_pref_val_000000.mask" | awk "{c += int(\$1 / 4) % 2; r += int(\$1 / 8) % 2} END {print (c == r + 1 && r > 0)}")" = 1 ]' \
  || bad "--shuffle with pairs failed"
# the README's example output, --out-dir data/mine in the checkout, showed as untracked in git
if command -v git > /dev/null && git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  check "the README's --out-dir data/mine is ignored by git (it showed as untracked)" git check-ignore -q data/mine/my_text_train_000000.bin
  check "... while data/gpt2 (the bundled vocabulary) is not" eval '! git check-ignore -q data/gpt2/encoder.json'
fi
expect_failF "--seed without --shuffle" "--seed is the seed of --shuffle" "$P" --input "$T/sh.jsonl" --out-dir "$T/x" --seed 3
expect_failF "--shuffle with --doc-sep none" "--shuffle with --doc-sep none" "$P" --input "$T/f1.txt" --out-dir "$T/x" --doc-sep none --shuffle

# --help works and exits 0
check "--help" bash -c "'$P' --help | grep -q -- '--val-frac'"

echo "test_prepare: $((checks - fails)) of $checks checks passed"
[ $fails -eq 0 ]
