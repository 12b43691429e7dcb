#!/usr/bin/env python3
"""Reference for the scoring test (test/test_scorer.c): the log-probability of given completions
under a model, computed by Hugging Face transformers on each sequence alone (one forward, fp32,
log_softmax of the logits, the scored tokens' entries summed in float64). Models: test/ref/
sampling_tiny (a GPT-2 with large random weights, vocab 100) and test/ref/gpt2_tiny with the PEFT
adapter test/ref/lora_tiny/all_linear (PeftModel.from_pretrained).

Writes test/ref/score_ref.safetensors:
  ids      int32 (total,)  the sequences, one after another
  lens     int32 (S,)      each sequence's length
  firsts   int32 (S,)      the index of its first scored token (the tokens before it: the prompt)
  mask     uint8 (total,)  a second selection of scored tokens: t >= first with mask[t] set
                           (spans, as a conversation's trained replies)
  <case>   float64 (S,)    sum over scored tokens t (t >= first) of log p(ids[t] | ids[:t])
  <case>.masked float64 (S,) the same over the tokens the mask selects
for case in: base (sampling_tiny), lora (gpt2_tiny + all_linear).

Run from the repo root: python dev/gen_score_ref.py
"""
import random
import torch
from safetensors.torch import save_file
from transformers import GPT2LMHeadModel
from peft import PeftModel

OUT = "test/ref/score_ref.safetensors"


def sequences():
    rng = random.Random(5)
    seqs = []
    # lengths from 2 (one scored token) to 60 (the models hold 64 positions); prompts of 1..20
    for n in [2, 3, 9, 17, 33, 60, 5, 24, 12, 41]:
        first = rng.randrange(1, min(n, 21))
        ids = [rng.randrange(100) for _ in range(n)]
        mask = [0] * n
        t = first
        while t < n:  # spans of 1..6 scored tokens, gaps of 0..4
            k = rng.randrange(1, 7)
            mask[t:t + k] = [1] * len(mask[t:t + k])
            t += k + rng.randrange(0, 5)
        seqs.append((ids, first, mask))
    return seqs


def score(model, seqs, masked):
    out = []
    with torch.no_grad():
        for ids, first, mask in seqs:
            logits = model(input_ids=torch.tensor([ids])).logits[0].float()
            lp = torch.log_softmax(logits[:-1], dim=-1)
            tgt = torch.tensor(ids[1:])
            tok = lp.gather(1, tgt[:, None])[:, 0].double()
            sel = [t for t in range(first, len(ids)) if not masked or mask[t]]
            out.append(sum(tok[t - 1].item() for t in sel))
    return torch.tensor(out, dtype=torch.float64)


def main():
    torch.manual_seed(0)
    seqs = sequences()
    base = GPT2LMHeadModel.from_pretrained("test/ref/sampling_tiny").eval()
    tiny = GPT2LMHeadModel.from_pretrained("test/ref/gpt2_tiny").eval()
    lora = PeftModel.from_pretrained(tiny, "test/ref/lora_tiny/all_linear").eval()
    save_file({
        "ids": torch.tensor([t for ids, _, _ in seqs for t in ids], dtype=torch.int32),
        "mask": torch.tensor([b for _, _, mask in seqs for b in mask], dtype=torch.uint8),
        "lens": torch.tensor([len(ids) for ids, _, _ in seqs], dtype=torch.int32),
        "firsts": torch.tensor([f for _, f, _ in seqs], dtype=torch.int32),
        "base": score(base, seqs, False),
        "base.masked": score(base, seqs, True),
        "lora": score(lora, seqs, False),
        "lora.masked": score(lora, seqs, True),
    }, OUT)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
