#!/usr/bin/env python3
"""Checks that model directories the trainers write load on their own in transformers, from
another working directory: AutoTokenizer.from_pretrained(DIR) gives GPT-2's tokenizer (token
for token equal to tiktoken on the stress strings of dev/gen_tokenizer_ref.py, <|endoftext|> as
eos), and pipeline("text-generation", model=DIR) continues a prompt greedily with the same text
as our ./generate. An adapter directory (train_lora --out) is checked for its tokenizer.

Run (after e.g. ./train_gpt2 ... --save-format hf --out out/ft):
  python3 dev/check_hf_tokenizer.py out/ft [more dirs...] [--prompt TEXT ...]
"""
import os
import subprocess
import sys
import tempfile

import tiktoken  # noqa: F401  (gen_tokenizer_ref builds its encoding with it)
from transformers import AutoTokenizer, pipeline

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "dev"))
from gen_tokenizer_ref import gpt2_encoding, stress_cases  # noqa: E402

PROMPTS = ["The quick brown fox", "ROMEO:\nWhat light", "First Citizen:\nBefore we proceed"]


def check_tokenizer(d, enc):
    tok = AutoTokenizer.from_pretrained(d)
    assert len(tok) == 50257, len(tok)
    assert tok.eos_token == "<|endoftext|>" and tok.eos_token_id == 50256, (tok.eos_token, tok.eos_token_id)
    n = 0
    for text, special in stress_cases():
        if "<|endoftext|>" in text:
            continue  # transformers always reads it as the special token; tiktoken only when asked
        ids = tok(text, add_special_tokens=True)["input_ids"]
        want = enc.encode_ordinary(text)
        assert ids == want, "%r: transformers %r..., tiktoken %r..." % (text[:40], ids[:12], want[:12])
        assert tok.decode(ids) == text, "decode(encode(%r)) differs" % text[:40]
        n += 1
    ids = tok("a<|endoftext|>b")["input_ids"]
    assert ids == [64, 50256, 65], ids
    print("ok   %s: AutoTokenizer (%s) == tiktoken on %d stress strings; <|endoftext|> is id 50256 and eos"
          % (d, type(tok).__name__, n))


def check_pipeline(d, gen_bin, prompts):
    pipe = pipeline("text-generation", model=d, device="cpu")
    for p in prompts:
        hf = pipe(p, max_new_tokens=24, do_sample=False, return_full_text=False)[0]["generated_text"]
        ours = subprocess.run([gen_bin, "--model", d, "--prompt", p, "--temperature", "0", "--max-new-tokens", "24", "--quiet", "--threads", "2", "--dtype", "fp32"],
                              check=True, capture_output=True, text=True).stdout
        ours = ours[:-1] if ours.endswith("\n") else ours  # generate ends its output with a newline
        assert hf == ours, "greedy continuation of %r: transformers %r, generate %r" % (p, hf, ours)
        print("ok   %s: pipeline greedy == ./generate greedy for %r: %r" % (d, p, hf[:50]))


def main():
    args, prompts = sys.argv[1:], list(PROMPTS)
    while "--prompt" in args:
        k = args.index("--prompt")
        prompts.append(args[k + 1])
        del args[k:k + 2]
    dirs = [os.path.abspath(a) for a in args]
    if not dirs:
        sys.exit(__doc__)
    gen_bin = os.path.join(ROOT, "generate")
    enc = gpt2_encoding()
    os.chdir(tempfile.mkdtemp())  # nothing may come from the repository's working directory
    for d in dirs:
        check_tokenizer(d, enc)
        if os.path.exists(os.path.join(d, "config.json")):
            check_pipeline(d, gen_bin, prompts)
        else:
            print("     %s: no config.json (an adapter directory): tokenizer only" % d)


if __name__ == "__main__":
    main()
