#!/usr/bin/env python3
"""transformers' side of dev/bench_generate.sh: greedy generation on the CPU, the prompt repeated in
N rows, tokens/s over REPS timed runs after one warm-up (the median and the minimum time).

  python dev/bench_generate.py MODEL_DIR PROMPT NEW N REPS THREADS DTYPE [compile]

DTYPE fp32 or bf16 (the weights and the compute); static cache (cache_implementation="static"),
with compile also torch.compile of the forward. No end-of-sequence stop: exactly NEW tokens a row.
Prints one line: "transformers DTYPE N=N: median T s, min T s, X tokens/s (median), Y (best)".
"""
import statistics, sys, time
import torch
from transformers import GPT2LMHeadModel, GPT2TokenizerFast


def main():
    path, prompt, new, n, reps, threads, dtype = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
    comp = len(sys.argv) > 8 and sys.argv[8] == "compile"
    torch.set_num_threads(threads)
    tok = GPT2TokenizerFast.from_pretrained(path)
    model = GPT2LMHeadModel.from_pretrained(path, torch_dtype=torch.bfloat16 if dtype == "bf16" else torch.float32).eval()
    if comp:
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    ids = tok(prompt, return_tensors="pt").input_ids.repeat(n, 1)
    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, eos_token_id=None, pad_token_id=0,
              cache_implementation="static", attention_mask=torch.ones_like(ids))
    times = []
    with torch.inference_mode():
        for r in range(reps + 1):
            t0 = time.perf_counter()
            out = model.generate(ids, **kw)
            dt = time.perf_counter() - t0
            assert out.shape[1] == ids.shape[1] + new, out.shape
            if r: times.append(dt)
    med, best = statistics.median(times), min(times)
    print(f"transformers {dtype}{' compiled' if comp else ''} N={n}: median {med:.3f} s, min {best:.3f} s, "
          f"{n * new / med:.1f} tokens/s (median), {n * new / best:.1f} (best)")


if __name__ == "__main__":
    main()
