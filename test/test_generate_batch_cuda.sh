#!/usr/bin/env bash
# Batched `generate` on the CUDA backend, run by the CUDA-on-CPU harness (mk/gpucheck.mk): the
# shared prefill's cache copy (scale_copy on the device) and the N-row decoding steps. On the same
# backend, every greedy row is the streamed greedy text, sample 0 is the streamed sample of the seed
# and the sampled rows differ; the greedy mean log-probability is transformers' within bf16
# rounding (test/ref/generate_batch_ref.json, dev/gen_generate_ref.py).
source "$(dirname "$0")/lib.sh"
BUILD="${BUILD:-build/cpu}"
CUDA_GEN="$BUILD/gpucheck/emu/generate"
[ -x "$CUDA_GEN" ] || { bad "$CUDA_GEN not built (make gpucheck-emu)"; finish; exit 1; }
S=(--model test/ref/sampling_tiny --vocab data/gpt2 --prompt '!#%' -g 24 --quiet)
g1=$("$CUDA_GEN" "${S[@]}" --temperature 0 2>"$TMP/err") || { cat "$TMP/err"; bad "streamed greedy failed"; }
"$CUDA_GEN" "${S[@]}" --temperature 0 --num-samples 3 > "$TMP/g.jsonl" 2>"$TMP/err" || { cat "$TMP/err"; bad "greedy --num-samples 3 failed"; }
s1=$("$CUDA_GEN" "${S[@]}" --seed 5 2>/dev/null)
"$CUDA_GEN" "${S[@]}" --seed 5 --num-samples 3 > "$TMP/s.jsonl" 2>"$TMP/err" || { cat "$TMP/err"; bad "sampled --num-samples 3 failed"; }
msg=$(python3 - "$TMP/g.jsonl" "$TMP/s.jsonl" "$g1" "$s1" test/ref/generate_batch_ref.json <<'PY'
import json, sys
g = [json.loads(l) for l in open(sys.argv[1])]
s = [json.loads(l) for l in open(sys.argv[2])]
ref = json.load(open(sys.argv[5]))
errs = []
if len(g) != 3 or any(r["text"] != sys.argv[3] for r in g): errs.append("greedy rows %s vs streamed %r" % ([r["text"] for r in g], sys.argv[3]))
if any(abs(r["mean_logprob"] - ref["mean_logprob"]) > 2e-2 for r in g): errs.append("mean_logprob %r vs transformers' %r" % (g[0]["mean_logprob"], ref["mean_logprob"]))
if len(s) != 3 or s[0]["text"] != sys.argv[4]: errs.append("sample 0 %r vs streamed %r" % (s[0]["text"] if s else None, sys.argv[4]))
if len({r["text"] for r in s}) != 3: errs.append("sampled rows repeat: %s" % [r["text"] for r in s])
print("; ".join(errs) if errs else "mean_logprob %.6f vs transformers' %.6f" % (g[0]["mean_logprob"], ref["mean_logprob"]))
sys.exit(1 if errs else 0)
PY
) && ok "CUDA backend (harness): greedy rows == streamed greedy, sample 0 == streamed sample, rows differ; $msg" || bad "CUDA batch: $msg"
finish
