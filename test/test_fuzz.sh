#!/usr/bin/env bash
# A few seconds of every fuzz harness (test/fuzz/README.md): libFuzzer + ASan + UBSan on the
# parsers of every file format the tool reads, from the committed seed corpora. The harnesses are
# always sanitized, so the SAN=1 pass of `make test` does not run them again.
set -u
if [ "${SAN:-}" = "1" ]; then echo "skip: the fuzzers are sanitized builds already and ran in the plain pass"; exit 0; fi
names="json safetensors gguf model hf_config shard state peft vocab tokenizer tfevents"
if [ ! -x build/fuzz/fuzz_json ]; then
  echo "skip: fuzzers not built: clang with its libFuzzer runtime is needed (Debian: clang, libclang-rt-dev)"; exit 0
fi
secs="${FUZZ_SECONDS:-3}"; fails=0
for n in $names; do bash test/fuzz/run.sh "$n" --seconds "$secs" || fails=$((fails + 1)); done
echo "$fails of $(wc -w <<<"$names") fuzzers reported findings"
[ $fails -eq 0 ]
