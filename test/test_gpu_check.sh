#!/usr/bin/env bash
# scripts/gpu_check.sh end to end without a GPU (--emulated: the harness builds of the GPU
# programs, $BUILD/gpucheck-emu, made by `make gpucheck-emu`):
#   - every section runs and the report (report.md + report.json) has each item with its status:
#     the test programs pass, every training run passes and the deterministic reruns match, the
#     kernel programs pass their checks, nvidia-smi / compute-sanitizer / watchdog (NCCL) items
#     say "emulated";
#   - a run with no time left records every item as skipped for the time budget, a later run with
#     the same --out runs only what is missing, and a third keeps what exists;
#   - a failing or missing program is recorded as failed and the check goes on;
#   - bad options stop it with one message.
source "$(dirname "$0")/lib.sh"
if [ "${SAN:-}" = 1 ]; then
  echo "skip: the emulated GPU check runs in the plain pass (its harness programs run under ASan+UBSan as tests of their own)"; exit 0
fi
EMU="$BUILD/gpucheck-emu"
[ -x "$EMU/test_gpt2_gpu" ] || { bad "$EMU not built (make gpucheck-emu)"; finish; exit 1; }
PY=python3

# field of report.json: q FILE EXPR (a Python expression over r = the report)
q() { "$PY" -c 'import json, sys; r = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# ---- the whole check
t0=$(date +%s)
bash scripts/gpu_check.sh --emulated --bin "$EMU" --out "$TMP/full" > "$TMP/full.log" 2>&1
rc=$?
echo "emulated check: $(( $(date +%s) - t0 ))s"
[ $rc -eq 0 ] && ok "gpu_check.sh --emulated exits 0" || { bad "exit $rc"; tail -n 30 "$TMP/full.log"; }
J="$TMP/full/report.json"
if [ -f "$J" ] && [ -f "$TMP/full/report.md" ]; then ok "report.md and report.json written"; else bad "no report"; finish; exit 1; fi
for h in "## Environment" "## GPU test programs" "## Watchdog, NCCL path" "## Training throughput" "## PyTorch on the same device" "## Kernel programs" "## compute-sanitizer"; do
  grep -qF "$h" "$TMP/full/report.md" || bad "report.md lacks '$h'"
done
ok "report.md has the seven sections"
status_of() { q "$J" "r['items'].get('$1', {}).get('status')"; }

n=$(q "$J" "sum(1 for t in r['tests'] if t['status'] == 'pass')")
[ "$n" = 6 ] && ok "5 GPU test programs and the decoding item pass (harness builds)" || bad "test items passing: $n of 6: $(q "$J" "[(t['program'], t['status'], t['reason']) for t in r['tests'] if t['status'] != 'pass']")"
q "$J" "[t['summary'] for t in r['tests'] if t['program'] == 'generate'][0]" | grep -qE "^generate: cache [0-9.]+ tokens/s, no-cache [0-9.]+ tokens/s \(16 tokens\): all 2 runs passed" \
  && ok "decoding: $(q "$J" "[t['summary'] for t in r['tests'] if t['program'] == 'generate'][0]")" || bad "decoding summary: $(q "$J" "[t for t in r['tests'] if t['program'] == 'generate']")"
[ "$(status_of tests/test_comm_split_gpu)" = skip ] && ok "test_comm_split_gpu (NCCL) skipped: emulated" || bad "test_comm_split_gpu: $(status_of tests/test_comm_split_gpu)"

n=$(q "$J" "sum(1 for t in r['train'] if t['status'] == 'pass' and t.get('ms_per_step') and t.get('steps') == 5)")
[ "$n" = 9 ] && ok "9 training runs (full, lora, qlora x 3 batch sizes) pass with step times" || bad "training runs with results: $n of 9"
for m in full lora qlora; do
  [ "$(status_of "train/${m}_determinism")" = pass ] && ok "$m: the repeated run has identical losses" || bad "$m determinism: $(status_of "train/${m}_determinism")"
done

for k in matmul layernorm gelu encoder classifier adamw bench_ops; do
  [ "$(status_of "kernels/$k")" = pass ] || bad "kernel program $k: $(q "$J" "r['items'].get('kernels/$k')")"
done
n=$(q "$J" "len(r['kernel_times'])"); c=$(q "$J" "sum(1 for c in r['kernel_checks'] if not c['ok'])")
[ "$n" -gt 10 ] && [ "$c" = 0 ] && ok "kernel programs: $n timings parsed, every check within tolerance" || bad "kernel timings $n, failed checks $c"
[ "$(status_of kernels/attention_bench)" = skip ] && ok "attention_bench skipped (cuBLAS baseline)" || bad "attention_bench: $(status_of kernels/attention_bench)"

n=$(q "$J" "sum(1 for t in r['watchdog'] if t['status'] == 'skip' and 'emulated' in t['reason'])")
[ "$n" = 3 ] && ok "3 watchdog cases (NCCL) skipped: emulated" || bad "watchdog cases skipped as emulated: $n: $(q "$J" "r['watchdog']")"
n=$(q "$J" "sum(1 for s in r['sanitize'] if s['status'] == 'skip' and 'emulated' in s['reason'])")
[ "$n" = 14 ] && ok "14 compute-sanitizer items skipped: emulated" || bad "sanitizer items skipped as emulated: $n"
[ "$(status_of env/gpu_info)" = pass ] && [ "$(status_of env/nvidia_smi)" = skip ] && ok "env: gpu_info runs, nvidia-smi skipped" \
  || bad "env: gpu_info $(status_of env/gpu_info), nvidia_smi $(status_of env/nvidia_smi)"
if "$PY" -c 'import torch, transformers, peft' 2>/dev/null; then
  n=$(q "$J" "sum(1 for t in r['torch'] if 'error' not in t and t['ms_per_step'] > 0)")
  [ "$n" = 6 ] && ok "PyTorch (CPU here): 6 results" || bad "PyTorch results: $n of 6: $(q "$J" "r['torch']")"
else
  [ "$(status_of torch/full)" = skip ] && ok "PyTorch not installed: torch section skipped" || bad "torch/full: $(status_of torch/full)"
fi
[ "$(status_of torch/qlora)" = skip ] && ok "torch qlora: skipped (no bitsandbytes)" || bad "torch/qlora: $(status_of torch/qlora)"

# ---- the time budget: nothing fits in 0 s; a second run does only what is missing; a third keeps it
bash scripts/gpu_check.sh --emulated --bin "$EMU" --out "$TMP/budget" --budget 0 > "$TMP/b0.log" 2>&1
J="$TMP/budget/report.json"
n=$(q "$J" "sum(1 for i in r['items'].values() if i['reason'].startswith('time budget'))")
m=$(q "$J" "sum(1 for i in r['items'].values() if not i['reason'].startswith('time budget') and not 'emulated' in i['reason'] and not 'bitsandbytes' in i['reason'] and not 'not installed' in i['reason'])")
u=$(q "$J" "sum(1 for i in r['items'].values() if 'not installed' in i['reason'])")
[ $((n + u)) -gt 30 ] && [ "$m" = 0 ] && ok "--budget 0: $n items skipped for the time budget, nothing run" || bad "--budget 0: $n budget skips, $m other items"
bash scripts/gpu_check.sh --emulated --bin "$EMU" --out "$TMP/budget" --sections env --budget 300 > "$TMP/b1.log" 2>&1
[ "$(status_of env/gpu_info)" = pass ] && [ "$(q "$J" "r['items']['tests/test_gpt2_gpu']['reason'][:11]")" = "time budget" ] \
  && ok "a second run with the same --out ran the selected sections, the rest stays pending" || bad "second run: $(q "$J" "r['summary']")"
lines=$(wc -l < "$TMP/budget/results.jsonl")
bash scripts/gpu_check.sh --emulated --bin "$EMU" --out "$TMP/budget" --sections env > "$TMP/b2.log" 2>&1
[ "$(wc -l < "$TMP/budget/results.jsonl")" = "$lines" ] && grep -q "kept from the earlier run" "$TMP/b2.log" \
  && ok "a third run keeps the results it has" || bad "third run recorded again: $lines -> $(wc -l < "$TMP/budget/results.jsonl") lines"

# ---- failures: a failing program and a missing one are recorded, the others still run
mkdir -p "$TMP/fake"
for p in test_cuda_ops_gpu test_flash_attention_gpu test_lora_gpu; do
  printf '#!/bin/sh\necho "%s: all 1 checks passed"\n' "$p" > "$TMP/fake/$p"
done
printf '#!/bin/sh\necho "FAIL test/test_gpt2.c:1: logits"\nexit 3\n' > "$TMP/fake/test_gpt2_gpu"
chmod +x "$TMP/fake"/*
bash scripts/gpu_check.sh --emulated --bin "$TMP/fake" --out "$TMP/fail" --sections tests > "$TMP/f.log" 2>&1
J="$TMP/fail/report.json"
[ "$(status_of tests/test_gpt2_gpu)" = fail ] && q "$J" "r['items']['tests/test_gpt2_gpu']['reason']" | grep -q "exit 3: FAIL" \
  && ok "a failing test program: fail, with its exit status and first failure" || bad "failing program: $(q "$J" "r['items'].get('tests/test_gpt2_gpu')")"
[ "$(status_of tests/test_qlora_gpu)" = fail ] && q "$J" "r['items']['tests/test_qlora_gpu']['reason']" | grep -q "not in" \
  && ok "a missing test program: fail, named" || bad "missing program: $(q "$J" "r['items'].get('tests/test_qlora_gpu')")"
[ "$(q "$J" "r['summary']['tests']['pass']")" = 3 ] && ok "the other 3 test programs still ran" || bad "others: $(q "$J" "r['summary']['tests']")"

# ---- the watchdog table of a GPU run (emulated runs skip its cases): results and logs as
# test_nccl_watchdog_gpu writes them, two passing cases and one failing
W="$TMP/wdrep"; mkdir -p "$W/logs/watchdog"
printf '%s\n' '$ test_nccl_watchdog_gpu init' 'ok   init: exit 1 after 6.3 s (timeout 5 s), ended without the backstop' \
  '     error: watchdog: STUCK: rank 0 has waited 5.0 s without progress in nccl_init' 'test_nccl_watchdog: all 5 checks passed' > "$W/logs/watchdog/init.log"
printf '%s\n' '$ test_nccl_watchdog_gpu stuck' "FAIL test/test_nccl_watchdog.cu:155: rc == 1: stuck: exit 1124" \
  'test_nccl_watchdog: 1 of 5 checks FAILED' > "$W/logs/watchdog/stuck.log"
printf '%s\n' 'ok   healthy: kernels of 2, 2, 4 s with a 3 s timeout, exit 0 after 11.0 s' 'test_nccl_watchdog: all 2 checks passed' \
  > "$W/logs/watchdog/healthy.log"
for c in stuck:fail init:pass healthy:pass; do
  printf '{"key": "watchdog/%s", "section": "watchdog", "item": "%s", "status": "%s", "reason": "", "seconds": 7.5, "log": "logs/watchdog/%s.log", "mode": "gpu"}\n' \
    "${c%%:*}" "${c%%:*}" "${c#*:}" "${c%%:*}" >> "$W/results.jsonl"
done
"$PY" scripts/gpu_report.py "$W" > /dev/null 2>&1
rows=$(grep -A4 '^| case ' "$W/report.md" | tail -n 3)
if [ "$(cut -d'|' -f2 <<<"$rows" | tr -d ' \n')" = initstuckhealthy ] && grep -q '^| init | pass | 7.5 | init: exit 1 after 6.3 s (timeout 5 s), ended without the backstop |$' <<<"$rows" &&
   grep -q '^| stuck | fail | 7.5 | test_nccl_watchdog: 1 of 5 checks FAILED; FAIL test/test_nccl_watchdog.cu:155' <<<"$rows" &&
   [ "$(q "$W/report.json" "r['summary']['watchdog']['pass'], r['summary']['watchdog']['fail']")" = "(2, 1)" ]; then
  ok "a GPU run's watchdog cases: in the order they run, how each ended or its first failure"
else
  bad "watchdog table: $rows"
fi

# ---- bad options
expect_usage() {  # what, substring, args
  local what=$1 want=$2; shift 2
  local out; out=$(bash scripts/gpu_check.sh "$@" 2>&1 >/dev/null); local rc=$?
  [ $rc -eq 2 ] && grep -qF -- "$want" <<<"$out" && ok "$what -> $out" || bad "$what: exit $rc, '$out'"
}
expect_usage "unknown option" "unknown option '--fast'" --emulated --fast
expect_usage "unknown section" "unknown section 'gpu'" --emulated --bin "$EMU" --sections env,gpu
expect_usage "bad budget" "--budget takes whole seconds" --emulated --budget 5m
expect_usage "missing program folder" "'$TMP/nope' (--bin) does not exist" --emulated --bin "$TMP/nope"
finish
