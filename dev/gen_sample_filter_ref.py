#!/usr/bin/env python3
"""Reference for the sampling controls of test/test_sampling.c (test_filter_reference,
test_penalty_reference): what Hugging Face transformers does with --temperature, --top-k,
--top-p, --min-p and --repetition-penalty.

1. Fixed logits vectors (V 50 .. 1000: a peaked, a flat, one with ties at the top-k and top-p
   boundaries, negative logits under the repetition penalty) run through the logits processors
   that transformers' own GenerationMixin._get_logits_processor builds for do_sample=True with
   those settings (so the order is the library's: repetition penalty, temperature, top-k, top-p,
   min-p), then softmax. The kept set is where the processed score is not -inf.
2. Greedy generation (do_sample=False) with repetition_penalty on test/ref/sampling_tiny and
   test/ref/gpt2_tiny: transformers applies the penalty before the argmax for greedy too.

Writes test/ref/sample_filter_ref.safetensors:
  <case>.logits   f32 (V,)   the logits
  <case>.seq      int32 (n,) the sequence so far (prompt and generated ids) the penalty looks at
  <case>.params   f32 (5,)   temperature, top_k, top_p, min_p, repetition_penalty
  <case>.kept     int32 (V,) 1 where the token survives every processor
  <case>.probs    f32 (V,)   the final probabilities (0 outside the kept set)
  greedy.<m>.ids  int32 (N,) greedy ids with repetition_penalty greedy.<m>.penalty (f32 (1,))
  prompt          int32 (P,) the prompt of the greedy cases
The case names are listed, comma-separated, in the metadata "cases"; the greedy ones in "greedy".

Where top-p's boundary falls inside a group of tied tokens, which of them transformers keeps is the
order torch.sort (not a stable sort) leaves equal values in: here ids 7, 21, 40 of the four tied
7, 13, 21, 40. Those cases are named in the metadata "topp_tie_cases"; for them the test holds
the number kept and the probabilities (as a sorted list), not the ids.

Every case is checked here for margins: no probability lies within 1e-5 (relative) of a top-p or
min-p boundary except by an exact tie, so a correct implementation in float or double arithmetic
keeps exactly the same set.

Run from the repo root: /work/venv-torch/bin/python dev/gen_sample_filter_ref.py
"""

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import GPT2LMHeadModel, GenerationConfig, LogitsProcessorList
from gen_sampling_ref import greedy_generate  # (dev/ is the script's folder: on sys.path)

STRADDLE = [] # cases where top-p cuts a group of tied tokens
OUT = "test/ref/sample_filter_ref.safetensors"
PROMPT = [5, 17, 42, 3, 88, 11, 64]
NEW = 24
MODEL = "test/ref/sampling_tiny"
GREEDY = {"r1_5": 1.5, "r0_8": 0.8} # (gpt2_tiny's logits are too close to 0 for a penalty to change its greedy text)


def make_cases():
    """(name, logits, seq, T, top_k, top_p, min_p, R): each vector from its own numpy seed."""
    cases = []
    r = np.random.default_rng(11)
    peaked = r.normal(0.0, 1.0, 200)
    peaked[37] += 7.0
    peaked[150] += 5.5
    cases.append(("peaked", peaked, [1], 0.7, 0, 0.995, 0.0, 1.0))
    r = np.random.default_rng(12)
    flat = r.normal(0.0, 0.1, 1000)
    cases.append(("flat", flat, [1], 1.3, 0, 0.5, 0.0, 1.0))
    # ties: values on a grid of 0.5, so the top-k boundary (k = 10) falls inside a tie group
    r = np.random.default_rng(13)
    ties = np.round(r.normal(0.0, 1.5, 64) * 2.0) / 2.0
    cases.append(("ties_topk", ties, [1], 1.0, 10, 1.0, 0.0, 1.0))
    cases.append(("ties_all", ties, [1], 0.8, 12, 0.7, 0.1, 1.0))
    # four tied maxima and a flat rest: the top-p boundary falls inside the tie group
    tp = np.zeros(50)
    tp[[7, 13, 21, 40]] = 3.0
    cases.append(("ties_topp", tp, [1], 1.0, 0, 0.4, 0.0, 1.0))
    cases.append(("ties_topp_tiny", tp, [1], 1.0, 0, 0.05, 0.0, 1.0)) # min_tokens_to_keep: one of the maxima
    cases.append(("ties_minp_one", tp, [1], 1.0, 0, 1.0, 1.0, 1.0))   # min-p 1: the tied maxima
    r = np.random.default_rng(14)
    mp = r.normal(0.0, 2.0, 500)
    cases.append(("minp", mp, [1], 1.0, 0, 1.0, 0.05, 1.0))
    cases.append(("minp_hot", mp, [1], 1.7, 0, 1.0, 0.2, 1.0))
    # the repetition penalty: logits of both signs, a sequence with repeats (each id once)
    r = np.random.default_rng(15)
    pen = r.normal(0.0, 3.0, 300)
    order = np.argsort(-pen)
    seq = [int(order[0]), int(order[1]), int(order[0]), int(order[-1]), 5, 5, 5, int(order[2]), 299, 0, int(order[0])]
    seq += [int(i) for i in np.nonzero(pen < 0)[0][:6]] + [int(i) for i in np.nonzero(pen > 0)[0][10:16]]
    cases.append(("penalty", pen, seq, 1.0, 0, 1.0, 0.0, 1.5))
    cases.append(("penalty_lt1", pen, seq, 1.0, 0, 0.8, 0.0, 0.7))
    cases.append(("penalty_all", pen, seq, 0.9, 50, 0.95, 0.02, 1.5))
    cases.append(("topk_only", pen, [1], 1.2, 7, 1.0, 0.0, 1.0))
    return cases


def processors(model, T, top_k, top_p, min_p, R, n_seq):
    gc = GenerationConfig(do_sample=True, temperature=float(T), top_k=int(top_k), top_p=float(top_p),
                          min_p=float(min_p) if min_p > 0 else None, repetition_penalty=float(R))
    return model._get_logits_processor(generation_config=gc, input_ids_seq_length=n_seq,
                                       logits_processor=LogitsProcessorList(), device="cpu", model_kwargs={})


def check_margins(name, scores_before_topp, probs_final, top_p, min_p):
    """No token near a boundary, ties aside (see the module docstring)."""
    if min_p > 0 and min_p < 1:
        p = probs_final[probs_final > 0]
        # min-p compares the probabilities after top-p: near min_p * max means a fragile set
        q = torch.softmax(scores_before_topp, -1)
        rel = (q / (min_p * q.max()) - 1.0).abs()
        rel = rel[q > 0]
        assert rel.min() > 1e-5, (name, "min-p margin", rel.min().item())
    if top_p < 1:
        q = torch.softmax(scores_before_topp, -1).double()
        vals, idx = torch.sort(q, descending=True)
        above = torch.cumsum(vals, 0) - vals
        uniq = torch.unique(vals)
        # distinct probabilities: the mass above each must not sit on top_p
        for v in uniq:
            a = above[vals == v]
            if v == 0:
                continue
            d = (a - top_p).abs().min().item()
            assert d > 1e-5, (name, "top-p margin", d)


def straddles(before, kept):
    """A group of tied scores that top-p cut in two (some kept, some not)."""
    for v in torch.unique(before[torch.isfinite(before)]):
        k = kept[before == v]
        if k.any() and not k.all():
            return True
    return False


def run_case(model, name, logits, seq, T, top_k, top_p, min_p, R):
    x = torch.tensor(logits, dtype=torch.float32)[None, :]
    ids = torch.tensor([seq], dtype=torch.long)
    procs = processors(model, T, top_k, top_p, min_p, R, len(seq))
    scores = x.clone()
    before_topp = None
    for p in procs:
        topp = type(p).__name__ == "TopPLogitsWarper"
        if topp:
            before_topp = scores.clone()
        scores = p(ids, scores)
        if topp and straddles(before_topp[0], torch.isfinite(scores[0])):
            STRADDLE.append(name)
    names = [type(p).__name__ for p in procs]
    kept = torch.isfinite(scores[0]).to(torch.int32)
    probs = torch.softmax(scores[0], -1)
    check_margins(name, before_topp[0] if before_topp is not None else scores[0], probs, top_p, min_p)
    print(f"{name}: V {x.shape[1]}, {' > '.join(names)}: kept {int(kept.sum())}")
    return {f"{name}.logits": x[0].contiguous(), f"{name}.seq": torch.tensor(seq, dtype=torch.int32),
            f"{name}.params": torch.tensor([T, top_k, top_p, min_p, R], dtype=torch.float32),
            f"{name}.kept": kept.contiguous(), f"{name}.probs": probs.float().contiguous()}


def greedy(model, penalty):
    out = greedy_generate(model, PROMPT, NEW, repetition_penalty=penalty)
    return out[0, len(PROMPT):].to(torch.int32).contiguous()


def main():
    t = {"prompt": torch.tensor(PROMPT, dtype=torch.int32)}
    any_model = GPT2LMHeadModel.from_pretrained(MODEL).eval()
    cases = make_cases()
    for c in cases:
        t.update(run_case(any_model, *c))
    # the tie case recorded what torch does at a tie on the top-p boundary
    print("ties_topp kept ids:", torch.nonzero(t["ties_topp.kept"]).flatten().tolist(),
          "ties_topp_tiny:", torch.nonzero(t["ties_topp_tiny.kept"]).flatten().tolist())
    plain = greedy(any_model, 1.0)
    for key, pen in GREEDY.items():
        ids = greedy(any_model, pen)
        assert not torch.equal(ids, plain), (key, "the penalty changed nothing")
        t[f"greedy.{key}.ids"] = ids
        t[f"greedy.{key}.penalty"] = torch.tensor([pen], dtype=torch.float32)
        print(f"greedy {key} R={pen}: {ids.tolist()} (R=1: {plain.tolist()})")
    save_file(t, OUT, metadata={"generator": "dev/gen_sample_filter_ref.py", "cases": ",".join(c[0] for c in cases),
                                "greedy": ",".join(GREEDY),
                                "topp_tie_cases": ",".join(STRADDLE)})
    print("wrote", OUT)


if __name__ == "__main__":
    main()
