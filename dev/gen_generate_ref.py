#!/usr/bin/env python3
"""Reference for generate's JSONL output (test/test_generate_batch.sh): the greedy continuation of a
text prompt by Hugging Face transformers' `generate` (do_sample=False, KV cache, no end-of-sequence
stop) on test/ref/sampling_tiny (the tiny GPT-2 of dev/gen_sampling_ref.py, vocab 100: ids 0..93 are
the GPT-2 vocabulary's one-character tokens "!".."~"), and the mean log-probability of the generated
tokens: log_softmax of transformers' logits at each step (temperature 1, no filtering), gathered at
the chosen token, averaged. The prompt is tokenized by transformers' GPT2Tokenizer on data/gpt2.

Writes test/ref/generate_batch_ref.json:
  prompt, prompt_ids, new_tokens, ids (the greedy ids), text (tokenizer.decode of ids),
  logprobs (per token), mean_logprob

Run from the repo root: /work/venv-torch/bin/python dev/gen_generate_ref.py
"""
import json, os, shutil, tempfile
import torch
from transformers import GPT2LMHeadModel, GPT2Tokenizer
from gen_sampling_ref import greedy_generate  # (dev/ is the script's folder: on sys.path)

MODEL = "test/ref/sampling_tiny"
OUT = "test/ref/generate_batch_ref.json"
PROMPT = "!#%"
NEW = 24


def main():
    # data/gpt2 holds OpenAI's file names (encoder.json, vocab.bpe): copied under transformers' own
    with tempfile.TemporaryDirectory() as d:
        shutil.copy("data/gpt2/encoder.json", os.path.join(d, "vocab.json"))
        shutil.copy("data/gpt2/vocab.bpe", os.path.join(d, "merges.txt"))
        tok = GPT2Tokenizer.from_pretrained(d)
    ids = tok.encode(PROMPT)
    assert max(ids) < 100, ids
    model = GPT2LMHeadModel.from_pretrained(MODEL).eval()
    out = greedy_generate(model, ids, NEW, output_logits=True, return_dict_in_generate=True)
    new = out.sequences[0, len(ids):]
    logits = torch.stack([l[0] for l in out.logits]).double()
    assert new.shape[0] == NEW and torch.equal(logits.argmax(-1), new)
    lp = torch.log_softmax(logits, dim=-1).gather(1, new[:, None])[:, 0]
    ref = {"generator": "dev/gen_generate_ref.py", "model": MODEL, "prompt": PROMPT, "prompt_ids": ids,
           "new_tokens": NEW, "ids": new.tolist(), "text": tok.decode(new.tolist()),
           "logprobs": lp.tolist(), "mean_logprob": lp.mean().item()}
    with open(OUT, "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print(json.dumps({k: ref[k] for k in ("prompt_ids", "ids", "text", "mean_logprob")}))


if __name__ == "__main__":
    main()
