#!/usr/bin/env bash
# Checkpoint integrity end to end (issue 14, items 3, 5, 6, 8): a flipped byte, a truncated file,
# an empty marker in a checkpoint are refused at --resume with a message naming the file, and
# nothing is written; deleting the damaged checkpoint's marker resumes from the previous one
# (losses equal to the straight run); leftover temporaries and what an interrupted save's PENDING
# marker names are removed at start, files that only look like a checkpoint's are not (issue 29,
# item 1); a checkpoint beyond --steps, layer_norm_epsilon <= 0 and loss-mask bytes other than 0/1
# are refused; the same under mpirun with 2 ranks (ZeRO-1).
source "$(dirname "$0")/lib.sh"
T="$BIN_DIR/train_gpt2"
L="$BIN_DIR/train_lora"
MODEL=test/ref/gpt2_tiny
make_shard "$TMP/train.bin" 4000 100 3
RUN=(--model "$MODEL" --train-data "$TMP/train.bin" --batch-size 2 --seq-len 16 --steps 6 --lr 1e-3 --save-every 2
     --threads 1 --save-format none --keep-checkpoints 3)

flip() { # flip PATH OFFSET: xor one byte with 0x10
  python3 - "$1" "$2" <<'PY'
import sys
p, off = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, "rb").read()); b[off] ^= 0x10; open(p, "wb").write(bytes(b))
PY
}
losses() { grep -o '"train_loss": [0-9.e+-]*' "$1" | awk '{print $2}'; }
state_of() { (cd "$1" && sha256sum $(ls | sort) | sha256sum); }

"$T" "${RUN[@]}" --out "$TMP/straight" > "$TMP/straight.log" 2>&1 || { cat "$TMP/straight.log"; bad "straight run failed"; }
"$T" "${RUN[@]}" --out "$TMP/base" --stop-after 4 > "$TMP/base.log" 2>&1 || { cat "$TMP/base.log"; bad "base run failed"; }
if grep -q '"crc32c"' "$TMP/base/DONE_00000004" && [ "$(grep -c '"name"' "$TMP/base/DONE_00000004")" = 2 ]; then
  ok "DONE_00000004 is a manifest of 2 files with CRC-32C"
else bad "DONE_00000004 is not a manifest: $(cat "$TMP/base/DONE_00000004")"; fi

# ---- damaged checkpoints: refused with the file named, nothing written
damaged() { # damaged WHAT WANT SETUP...: copy base, apply SETUP (eval'd in the copy), resume must fail
  local what="$1" want="$2" setup="$3" d="$TMP/dmg_$RANDOM"
  cp -r "$TMP/base" "$d"
  (cd "$d" && eval "$setup")
  local before; before=$(state_of "$d")
  expect_fail "$what" "$want" "$T" "${RUN[@]}" --out "$d" --resume
  [ "$(state_of "$d")" = "$before" ] && ok "$what: nothing written" || bad "$what: the directory changed"
}
damaged "flipped byte in the model" "model_00000004.bin': checksum mismatch" "flip model_00000004.bin 5000"
damaged "flipped byte in the optimizer state" "state_00000004_00000.bin': checksum mismatch" "flip state_00000004_00000.bin 300000"
damaged "flipped optimizer step in the state header" "state_00000004_00000.bin': checksum mismatch" "flip state_00000004_00000.bin 40"
damaged "truncated model" "model_00000004.bin' has" "truncate -s -100 model_00000004.bin"
damaged "missing state file" "state_00000004_00000.bin' is missing" "rm state_00000004_00000.bin"
damaged "empty DONE marker" "DONE_00000004': empty" ": > DONE_00000004"
d="$TMP/dmg_hint"; cp -r "$TMP/base" "$d"; flip "$d/model_00000004.bin" 2000
expect_fail "hint names the previous checkpoint" "resume from the previous one (step 2)" "$T" "${RUN[@]}" --out "$d" --resume

# ---- recovery: drop the damaged checkpoint's marker; the run resumes from the previous one and
# writes step 4 again over the damaged files (no record names them as an interrupted save)
rm "$d/DONE_00000004"
if "$T" "${RUN[@]}" --out "$d" --resume > "$d.log" 2>&1; then
  grep -q "resumed: step 2" "$d.log" && ok "resumed from step 2 after the damaged step 4 was dropped" || bad "did not resume at step 2"
  ! grep -q "cleanup" "$d.log" && "$T" "${RUN[@]}" --out "$d" --resume --steps 7 > "$d.2.log" 2>&1 && grep -q "resumed: step 6" "$d.2.log" \
    && ok "step 4's files were left to the save of step 4, which replaced them (the checkpoints verify)" || bad "after recovery: $(grep cleanup "$d.log")"
  if [ "$(losses "$TMP/straight/log.jsonl" | tail -4)" = "$(losses "$d/log.jsonl" | sed -n 3,6p)" ]; then
    ok "steps 3-6 after recovery equal the straight run"
  else bad "losses after recovery differ"; fi
else cat "$d.log"; bad "recovery resume failed"; fi

# ---- leftovers of killed runs: temporaries (also in merged/) and an interrupted save (its PENDING
# marker names step 8); a file with a checkpoint's name that no record names is not the run's
d="$TMP/left"; cp -r "$TMP/base" "$d"; mkdir -p "$d/merged"
head -c 1048576 /dev/zero > "$d/model_00000006.bin.tmp.4242"
: > "$d/state_00000006_00000.bin.tmp.4242"; : > "$d/merged/model.safetensors.tmp.77"
: > "$d/PENDING_00000008"; : > "$d/model_00000008.bin"; : > "$d/state_00000008_00000.bin"
echo mine > "$d/state_00000010_00000.bin"; echo mine > "$d/notes.txt.tmp.12"
if "$T" "${RUN[@]}" --out "$d" --resume > "$d.log" 2>&1; then
  grep -q "cleanup: removed 5 leftover files.*(1.0 MiB)" "$d.log" && ok "5 leftovers (1.0 MiB) reported" || bad "cleanup message: $(grep cleanup "$d.log")"
  left=$(find "$d" -name '*.tmp.[0-9]*' ! -name 'notes.txt.tmp.12' -o -name '*_00000008*' | wc -l)
  [ "$left" = 0 ] && ok "leftovers removed at resume" || bad "$left leftovers remain"
  [ "$(cat "$d/state_00000010_00000.bin" "$d/notes.txt.tmp.12")" = "$(printf 'mine\nmine')" ] && ok "files no record names are left alone" || bad "a file not the run's was removed"
  rm -f "$d/notes.txt.tmp.12" # (expect_fail below looks for temporaries under $TMP)
  [ -f "$d/DONE_00000006" ] && ok "the resumed run completed" || bad "no final checkpoint"
else cat "$d.log"; bad "resume with leftovers failed"; fi
d="$TMP/fresh"; mkdir -p "$d"; : > "$d/model_00000002.bin.tmp.1"; : > "$d/PENDING_00000002"; : > "$d/state_00000002_00000.bin"
"$T" "${RUN[@]}" --steps 1 --out "$d" > "$d.log" 2>&1 || { cat "$d.log"; bad "new run in a directory with leftovers failed"; }
[ ! -e "$d/model_00000002.bin.tmp.1" ] && [ ! -e "$d/state_00000002_00000.bin" ] && [ ! -e "$d/PENDING_00000002" ] && ok "a new run removes leftovers too" || bad "new run left leftovers"

# ---- header fields against the run
expect_fail "checkpoint beyond --steps" "beyond the run's 3 steps" "$T" "${RUN[@]}" --steps 3 --out "$TMP/base" --resume

# ---- LoRA checkpoints: the adapter is covered
"$L" "${RUN[@]}" --lora-rank 2 --out "$TMP/lora" --stop-after 2 > "$TMP/lora.log" 2>&1 || { cat "$TMP/lora.log"; bad "lora run failed"; }
grep -q adapter_00000002/adapter_model.safetensors "$TMP/lora/DONE_00000002" && ok "LoRA manifest lists the adapter's tensors" || bad "LoRA manifest"
# an adapter directory of an interrupted save (its PENDING marker, no DONE marker) is removed at
# resume; one no record names (a user's adapter_00000450/) stays
cp -r "$TMP/lora" "$TMP/lora_orphan"
cp -r "$TMP/lora/adapter_00000002" "$TMP/lora_orphan/adapter_00000003"; : > "$TMP/lora_orphan/PENDING_00000003"
cp -r "$TMP/lora/adapter_00000002" "$TMP/lora_orphan/adapter_00000450"
if "$L" "${RUN[@]}" --lora-rank 2 --out "$TMP/lora_orphan" --resume > "$TMP/lora_orphan.log" 2>&1; then
  grep -q "cleanup: removed 1 leftover file.*adapter_00000003" "$TMP/lora_orphan.log" && [ ! -e "$TMP/lora_orphan/adapter_00000003" ] \
    && [ -s "$TMP/lora_orphan/adapter_00000450/adapter_model.safetensors" ] \
    && ok "an interrupted save's adapter directory is removed at resume; adapter_00000450/ is kept" || bad "orphan adapter dir: $(grep cleanup "$TMP/lora_orphan.log"); $(ls "$TMP/lora_orphan")"
else cat "$TMP/lora_orphan.log"; bad "LoRA resume with an orphan adapter directory failed"; fi
flip "$TMP/lora/adapter_00000002/adapter_model.safetensors" 500
expect_fail "flipped byte in the adapter" "adapter_00000002/adapter_model.safetensors': checksum mismatch" "$L" "${RUN[@]}" --lora-rank 2 --out "$TMP/lora" --resume

# ---- item 8: layer_norm_epsilon in config.json, loss-mask bytes
for eps in 0 -1e-05 1e999 '"1e-5"'; do
  d="$TMP/eps_$RANDOM"; mkdir -p "$d"; cp "$MODEL/model.safetensors" "$d/"
  python3 - "$MODEL/config.json" "$d/config.json" "$eps" <<'PY'
import sys, re
s = open(sys.argv[1]).read()
s = re.sub(r'"layer_norm_epsilon": [^,}\n]*', '"layer_norm_epsilon": ' + sys.argv[3], s)
open(sys.argv[2], "w").write(s)
PY
  expect_fail "layer_norm_epsilon $eps" "config.json': layer_norm_epsilon must be a positive finite number" \
    "$T" "${RUN[@]}" --model "$d" --steps 1
done
python3 - "$TMP" <<'PY'
import struct, sys
d = sys.argv[1]
n = 4000
mask = bytearray([1] * n); mask[50] = 2
with open(d + "/train.mask", "wb") as f:
    f.write(struct.pack("<256i", *([20261122, 1, n] + [0] * 253))); f.write(bytes(mask))
PY
expect_fail "loss-mask byte 2" "train.mask': mask byte 2 at byte offset 1074 (token 50) is not in 0..1" "$T" "${RUN[@]}" --steps 2 --out "$TMP/mask"

# ---- two ranks: the manifest gathers both state files; a damaged rank-1 file ends the job
if command -v mpirun >/dev/null 2>&1; then
  rm -f "$TMP/train.mask"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
  if [ "${SAN:-}" = "1" ]; then # MPI's own allocations, as in test_train_mpi.sh
    export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}:fast_unwind_on_malloc=0"
    export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")" && pwd)/lsan_mpi.supp:print_suppressions=0"
  fi
  MPI=(--model "$MODEL" --train-data "$TMP/train.bin" --batch-size 1 --seq-len 16 --total-batch-tokens 32 --steps 4 --lr 1e-3 --save-every 2 --threads 1 --save-format none --zero 1)
  if timeout 120 mpirun -np 2 "$T" "${MPI[@]}" --out "$TMP/mpi" --stop-after 2 > "$TMP/mpi.log" 2>&1; then
    grep -q state_00000002_00001.bin "$TMP/mpi/DONE_00000002" && ok "2-rank manifest lists both state files" || bad "2-rank manifest"
    cp -r "$TMP/mpi" "$TMP/mpi_bad"; flip "$TMP/mpi_bad/state_00000002_00001.bin" 1500
    out=$(timeout 120 mpirun -np 2 "$T" "${MPI[@]}" --out "$TMP/mpi_bad" --resume 2>&1); rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "state_00000002_00001.bin': checksum mismatch" <<<"$out"; then
      ok "2 ranks: damaged rank-1 state refused (exit $rc)"
    else bad "2 ranks: damaged state not refused (exit $rc): $out"; fi
    "$T" "${MPI[@]}" --out "$TMP/mpi" --resume > "$TMP/mpi1.log" 2>&1 && grep -q "re-sharded: 2 ranks -> 1 ranks" "$TMP/mpi1.log" \
      && ok "the 2-rank checkpoint verifies and re-shards in one process" || { tail "$TMP/mpi1.log"; bad "1-process resume of the 2-rank checkpoint"; }
  else cat "$TMP/mpi.log"; bad "2-rank run failed"; fi
else
  echo "skip: MPI not installed: the 2-rank checks did not run"
fi
finish
