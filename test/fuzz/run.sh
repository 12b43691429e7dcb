#!/usr/bin/env bash
# Runs one fuzz harness (build/fuzz/fuzz_NAME, built by `make fuzz-build`) from its seed corpus.
#   run.sh NAME --seconds S   short run on a copy of the corpus (make test), ends with one summary line
#   run.sh NAME --runs N [--max-seconds S]
#                             long run: N inputs (or until S seconds have passed), in chunks of a
#                             fresh process each (the harnesses leak what a refused parse held,
#                             test/fuzz/fuzz.h), the corpus kept in build/fuzz/corpus/NAME,
#                             findings in build/fuzz/artifacts/NAME
# Exit status non-zero when libFuzzer reports a finding (crash, sanitizer error, leak, timeout, OOM).
set -u
name="$1"; mode="$2"; amount="$3"; budget=0
[ "${4:-}" = "--max-seconds" ] && budget="$5"
bin="build/fuzz/fuzz_$name"
[ -x "$bin" ] || { echo "fuzz $name: $bin not built (make fuzz-build)"; exit 1; }
seeds="test/fuzz/corpus/$name"
leaks=0; chunk=100000
case "$name" in json|safetensors|peft|tokenizer|tfevents) leaks=1; chunk=1000000 ;; esac # no fatal() inside
[ "$name" = vocab ] && chunk=50000 # a refused vocabulary leaves ~30 KB behind: stay under the RSS limit
case "$name" in
  json|hf_config) maxlen=4096 ;; tokenizer) maxlen=1024 ;; peft|gguf) maxlen=32768 ;; *) maxlen=16384 ;;
esac
dict=(); case "$name" in shard|tokenizer|tfevents) ;; *) dict=(-dict=test/fuzz/json.dict) ;; esac
# -detect_leaks follows LeakSanitizer: left on where LSan is off, libFuzzer runs every input that
# mallocs more than it frees (each refusal) a second time to look for a leak it cannot report.
opts=(-max_len=$maxlen -timeout=20 -rss_limit_mb=4096 -close_fd_mask=3 -print_final_stats=1
      -detect_leaks=$leaks "${dict[@]}")
export ASAN_OPTIONS="detect_leaks=$leaks:abort_on_error=0:allocator_may_return_null=0"
# One thread: the inputs are tiny, and idle OpenMP/OpenBLAS workers spin on sched_yield, taking a
# core from the fuzzer (and from anything else on the machine).
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
stat() { grep -o "stat::$1: *[0-9]*" "$2" | tail -1 | awk '{print $2}'; }

if [ "$mode" = "--seconds" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/llmc-fuzz-$name.XXXXXX"); trap 'rm -rf "$work"' EXIT
  cp "$seeds"/* "$work/"
  n0=$(ls "$work" | wc -l)
  "$bin" "${opts[@]}" -max_total_time="$amount" -artifact_prefix="$work/" "$work" > "$work.log" 2>&1; rc=$?
  runs=$(stat number_of_executed_units "$work.log"); eps=$(stat average_exec_per_sec "$work.log")
  if [ $rc -ne 0 ]; then
    tail -40 "$work.log"; echo "fuzz $name: FINDING after ${runs:-?} runs (exit $rc)"; rm -f "$work.log"; exit 1
  fi
  echo "fuzz $name: ${runs:-0} runs in ${amount}s (${eps:-0} exec/s), corpus $n0 -> $(ls "$work" | wc -l), no findings"
  rm -f "$work.log"
  exit 0
fi

corpus="build/fuzz/corpus/$name"; art="build/fuzz/artifacts/$name"; log="build/fuzz/fuzz_$name.log"
mkdir -p "$corpus" "$art"; cp -n "$seeds"/* "$corpus/"; : > "$log"
total=0; start=$(date +%s)
limit=()
while [ "$total" -lt "$amount" ]; do
  n=$(( amount - total < chunk ? amount - total : chunk ))
  if [ "$budget" -gt 0 ]; then
    left=$(( budget - ($(date +%s) - start) )); [ "$left" -gt 0 ] || break
    limit=(-max_total_time="$left")
  fi
  "$bin" "${opts[@]}" -runs="$n" "${limit[@]}" -artifact_prefix="$art/" "$corpus" > "$log.chunk" 2>&1; rc=$?
  cat "$log.chunk" >> "$log"
  got=$(stat number_of_executed_units "$log.chunk"); total=$(( total + ${got:-0} ))
  if [ $rc -ne 0 ]; then tail -40 "$log.chunk"; echo "fuzz $name: FINDING after $total runs (exit $rc), see $art/"; exit 1; fi
  [ "${got:-0}" -gt 0 ] || { echo "fuzz $name: no progress"; exit 1; }
done
rm -f "$log.chunk"
secs=$(( $(date +%s) - start )); [ $secs -gt 0 ] || secs=1
cut=""; [ "$total" -lt "$amount" ] && cut=" (stopped at the ${budget}s limit)"
echo "fuzz $name: $total runs in ${secs}s ($(( total / secs )) exec/s)$cut, corpus $(ls "$corpus" | wc -l) files, findings: $(ls "$art" | wc -l)"
