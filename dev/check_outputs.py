#!/usr/bin/env python3
"""Loads what the trainers wrote with transformers and PEFT, from another working directory, and
checks that each output continues prompts greedily with exactly the text our ./generate writes:

  - a model directory (train_gpt2's OUT, train_lora's OUT/merged, OUT/base): AutoTokenizer +
    AutoModelForCausalLM (generate(), greedy) and pipeline("text-generation", model=DIR);
  - an adapter directory (train_lora's OUT, and the mid-run OUT/adapter_SSSSSSSS): PEFT's
    AutoPeftModelForCausalLM.from_pretrained(DIR), which loads the base from the adapter's
    base_model_name_or_path, with AutoTokenizer.from_pretrained(DIR); ours is
    ./generate --adapter DIR with no --model (the same base, found the same way).

Nothing is passed to the loaders but the directory: they run in a fresh temporary working
directory, so a relative path or a file of the repository cannot help them.

Run after `make quickstart` (its outputs: OUT/base, OUT/lora, OUT/lora/merged, the newest
OUT/lora/adapter_*), or on any directories:
  python3 dev/check_outputs.py [out/lora_tiny]
  python3 dev/check_outputs.py --dirs DIR [DIR ...] [--prompt TEXT ...] [--tokens N]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import torch
from peft import AutoPeftModelForCausalLM
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = ["ROMEO:", "PETRUCHIO: Good morrow, Kate", "First Citizen:\nBefore we proceed"]


def ours(args, prompt, n):
    cmd = [os.path.join(ROOT, "generate")] + args + ["--prompt", prompt, "--temperature", "0", "-n", str(n), "-q", "--threads", "2",
           "--dtype", "fp32"]  # transformers generates in fp32
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return out[:-1] if out.endswith("\n") else out  # generate ends its output with a newline


def greedy(model, tok, prompt, n):
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=tok.eos_token_id)
    new = out[0, ids.shape[1]:].tolist()
    if new and new[-1] == tok.eos_token_id:
        new = new[:-1]  # generation stopped at <|endoftext|>, which ./generate does not print
    return tok.decode(new)


def check_model_dir(d, prompts, n):
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d).eval()
    pipe = pipeline("text-generation", model=d, device="cpu")
    for p in prompts:
        hf = greedy(model, tok, p, n)
        pl = pipe(p, max_new_tokens=n, do_sample=False, return_full_text=False)[0]["generated_text"]
        us = ours(["--model", d], p, n)
        assert hf == us == pl, "%s, %r: AutoModelForCausalLM %r, pipeline %r, generate %r" % (d, p, hf, pl, us)
        print("ok   %s: AutoModelForCausalLM == pipeline == ./generate, greedy %r -> %r" % (d, p, us[:48]))


def check_adapter_dir(d, prompts, n):
    base = json.load(open(os.path.join(d, "adapter_config.json")))["base_model_name_or_path"]
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoPeftModelForCausalLM.from_pretrained(d).eval()
    for p in prompts:
        hf = greedy(model, tok, p, n)
        us = ours(["--adapter", d], p, n)
        assert hf == us, "%s, %r: AutoPeftModelForCausalLM %r, generate %r" % (d, p, hf, us)
        print("ok   %s (base %s): AutoPeftModelForCausalLM == ./generate --adapter, greedy %r -> %r" % (d, base, p, us[:48]))


def quickstart_dirs(out):
    lora = os.path.join(out, "lora")
    mid = sorted(glob.glob(os.path.join(lora, "adapter_*[0-9]")))
    if not mid:
        sys.exit("%s holds no mid-run adapter (adapter_SSSSSSSS/): run make quickstart first" % lora)
    return [os.path.join(out, "base"), lora, os.path.join(lora, "merged"), mid[0]]  # the oldest kept: mid-run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", default=os.path.join(ROOT, "out", "lora_tiny"), help="the quickstart's output directory")
    ap.add_argument("--dirs", nargs="+", help="check these directories instead")
    ap.add_argument("--prompt", action="append", help="prompts (default: three)")
    ap.add_argument("--tokens", type=int, default=24, help="tokens to generate")
    a = ap.parse_args()
    dirs = [os.path.abspath(d) for d in (a.dirs or quickstart_dirs(a.out))]
    prompts = a.prompt or PROMPTS
    torch.set_num_threads(2)
    os.chdir(tempfile.mkdtemp())  # nothing may come from the repository's working directory
    for d in dirs:
        if os.path.exists(os.path.join(d, "adapter_config.json")):
            check_adapter_dir(d, prompts, a.tokens)
        else:
            check_model_dir(d, prompts, a.tokens)
    print("all %d outputs load in transformers / PEFT and continue like ./generate" % len(dirs))


if __name__ == "__main__":
    main()
