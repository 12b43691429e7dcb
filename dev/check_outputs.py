#!/usr/bin/env python3
"""Loads what the trainers wrote with transformers and PEFT, from another working directory, and
checks that each output continues prompts greedily as our ./generate does:

  - a model directory (train_gpt2's OUT, train_lora's OUT/merged, OUT/base): AutoTokenizer +
    AutoModelForCausalLM (generate(), greedy) and pipeline("text-generation", model=DIR);
  - an adapter directory (train_lora's OUT, and the mid-run OUT/adapter_SSSSSSSS): PEFT's
    AutoPeftModelForCausalLM.from_pretrained(DIR), which loads the base from the adapter's
    base_model_name_or_path, with AutoTokenizer.from_pretrained(DIR); ours is
    ./generate --adapter DIR with no --model (the same base, found the same way).

Nothing is passed to the loaders but the directory: they run in a fresh temporary working
directory, so a relative path or a file of the repository cannot help them.

Which ./generate (--bin DIR, default the repository's) decides the comparison; its backend is read
from the banner it prints:
  - the CPU build runs in fp32 (--dtype fp32), as transformers does: the texts must be equal.
  - the CUDA build computes in bf16 and has no fp32 mode (it refuses --dtype fp32). Its output is
    compared with transformers' fp32 greedy run step by step, with a bf16 tolerance on the
    logits: while transformers' margin between its two most likely tokens exceeds
    2^-5 max(1, |top1|) (eight bf16 ulps of the logit), the CUDA build must choose the same token
    and give it a logit within that tolerance (generate --logits-out); at a closer call the two
    roundings may rightly choose differently: where they choose alike the comparison goes on,
    where they part the CUDA build is run again on the prompt and transformers' tokens up to that
    step (when they tokenize back to the same ids) and the comparison goes on from there (a small
    model's greedy text is full of close calls; stopping at the first compared too little), and
    each directory must have --min-compared steps (default 8) compared over its prompts. The other way, comparing
    with the CPU build in fp32, would need a CPU build in the GPU bundle (OpenBLAS and the rest on
    the GPU machine) and would check the files but not the GPU's inference; this way the files a
    GPU run wrote and the CUDA inference path are both checked. pipeline() is compared with
    AutoModelForCausalLM exactly (both are transformers in fp32).

Run after `make quickstart` (its outputs: OUT/base, OUT/lora, OUT/lora/merged, the newest
OUT/lora/adapter_*), or on any directories:
  python3 dev/check_outputs.py [out/lora_tiny] [--bin DIR]
  python3 dev/check_outputs.py --dirs DIR [DIR ...] [--prompt TEXT ...] [--tokens N]
The ML stack (torch, transformers, peft) is imported only to run the checks, so the comparison
rules can be tested without it (test/test_gpu_check.sh).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = ["ROMEO:", "PETRUCHIO: Good morrow, Kate", "First Citizen:\nBefore we proceed"]
TOL_FRAC = 2.0 ** -5   # of max(1, |top1|): eight bf16 ulps


def margin_compare(ref, ours):
    """ref, ours: per step (id, top1, top2), the reference's in fp32. Returns (compared, error):
    the steps compared before the first close call of the reference that ours decided the other
    way (a close call both decided alike is compared and the texts go on), and what disagreed
    among them (None: nothing)."""
    compared = 0
    for i, (rid, r1, r2) in enumerate(ref):
        tol = TOL_FRAC * max(1.0, abs(r1))
        if r1 - r2 <= tol and (i >= len(ours) or ours[i][0] != rid):
            break  # a close call the two roundings decided differently: the texts part here
        if i >= len(ours):
            return compared, "step %d: ours ended after %d tokens, the reference goes on with %d" % (i + 1, len(ours), rid)
        oid, o1 = ours[i][0], ours[i][1]
        if oid != rid:
            return compared, "step %d: ours chose %d, the reference %d with a margin of %.4f (tolerance %.4f)" % (i + 1, oid, rid, r1 - r2, tol)
        if abs(o1 - r1) > tol:
            return compared, "step %d: token %d's logit %.4f, the reference's %.4f (tolerance %.4f)" % (i + 1, oid, o1, r1, tol)
        compared += 1
    else:
        if len(ours) > len(ref):
            return compared, "ours goes on after the reference's %d tokens" % len(ref)
    return compared, None


class Generate:
    """Our ./generate: its backend (from the banner), and greedy continuations."""

    def __init__(self, bin_dir):
        self.path = os.path.join(bin_dir, "generate")
        self.backend = None

    def detect(self, args):
        p = subprocess.run([self.path] + args + ["--prompt", "a", "--max-new-tokens", "1", "--temperature", "0", "--threads", "2"],
                           capture_output=True, text=True)
        for line in p.stderr.splitlines():
            if "| backend " in line:
                self.backend = line.split("| backend ", 1)[1].split()[0]
        if p.returncode != 0 or self.backend not in ("cpu", "cuda"):
            sys.exit("%s: could not tell its backend (exit %d): %s" % (self.path, p.returncode, p.stderr[-400:]))
        return self.backend

    def run(self, args, prompt, n):
        """(text, [(id, top1, top2) per generated token])"""
        with tempfile.TemporaryDirectory() as d:
            trace = os.path.join(d, "logits.txt")
            cmd = [self.path] + args + ["--prompt", prompt, "--temperature", "0", "--max-new-tokens", str(n), "--quiet", "--threads", "2",
                                        "--logits-out", trace]
            if self.backend == "cpu":
                cmd += ["--dtype", "fp32"]  # transformers generates in fp32
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            rows = [(int(a), float(b), float(c)) for a, b, c in (l.split() for l in open(trace) if l.strip())]
        return (out[:-1] if out.endswith("\n") else out), rows  # generate ends its output with a newline


def greedy(model, tok, prompt, n):
    """transformers' greedy continuation: (text, [(id, top1, top2) per generated token])"""
    import torch
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=tok.eos_token_id,
                             output_logits=True, return_dict_in_generate=True)
    new = out.sequences[0, ids.shape[1]:].tolist()
    rows = []
    for t, logits in zip(new, out.logits):
        top = torch.topk(logits[0].float(), 2).values.tolist()
        rows.append((t, top[0], top[1]))
    text_ids = new[:-1] if new and new[-1] == tok.eos_token_id else new  # ./generate does not print <|endoftext|>
    return tok.decode(text_ids), rows


def resync_compare(ref, run_from):
    """margin_compare over the whole reference: where ours parts from it at a close call, ours is
    run again from the reference's first k tokens (run_from(k): ours' rows continuing them, None
    where that prefix cannot be given as text) and the comparison goes on from there.
    Returns (compared, error) as margin_compare does, steps numbered from the prompt."""
    k, total = 0, 0
    while k < len(ref):
        ours = run_from(k)
        if ours is None:
            break
        c, err = margin_compare(ref[k:], ours)
        if err is not None:
            return total + c, "from the reference's first %d tokens, %s" % (k, err) if k else err
        total += c
        k += c + 1  # step k + c: a close call decided the other way (or the end)
    return total, None


def compare(where, hf, us, gen, tok, prompt, args):
    """One prompt: the same text (fp32 CPU build), or the margin comparison (CUDA build), picked
    up again after each close call the two decided differently. Returns the steps compared."""
    if gen.backend == "cpu":
        assert hf[0] == us[0], "%s: transformers %r, generate %r" % (where, hf[0], us[0])
        return len(hf[1])
    ids = [r[0] for r in hf[1]]
    base = tok(prompt).input_ids

    def run_from(k):
        if k == 0:
            return us[1]
        text = prompt + tok.decode(ids[:k])
        if tok(text).input_ids != base + ids[:k] or tok.eos_token_id in ids[:k]:
            return None  # the prefix would not tokenize back to the same ids
        return gen.run(args, text, len(ids) - k)[1]

    compared, err = resync_compare(hf[1], run_from)
    assert err is None, "%s: %s (transformers %r, generate %r)" % (where, err, hf[0], us[0])
    return compared


def check_model_dir(d, prompts, n, gen):
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d).eval()
    pipe = pipeline("text-generation", model=d, device="cpu")
    total = 0
    for p in prompts:
        hf = greedy(model, tok, p, n)
        pl = pipe(p, max_new_tokens=n, do_sample=False, return_full_text=False)[0]["generated_text"]
        assert hf[0] == pl, "%s, %r: AutoModelForCausalLM %r, pipeline %r" % (d, p, hf[0], pl)
        us = gen.run(["--model", d], p, n)
        k = compare("%s, %r" % (d, p), hf, us, gen, tok, p, ["--model", d])
        total += k
        print("ok   %s: AutoModelForCausalLM == pipeline, ./generate (%s) agrees over %d steps: greedy %r -> %r"
              % (d, gen.backend, k, p, us[0][:48]))
    return total


def check_adapter_dir(d, prompts, n, gen):
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoTokenizer
    base = json.load(open(os.path.join(d, "adapter_config.json")))["base_model_name_or_path"]
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoPeftModelForCausalLM.from_pretrained(d).eval()
    total = 0
    for p in prompts:
        hf = greedy(model, tok, p, n)
        us = gen.run(["--adapter", d], p, n)
        k = compare("%s, %r" % (d, p), hf, us, gen, tok, p, ["--adapter", d])
        total += k
        print("ok   %s (base %s): AutoPeftModelForCausalLM, ./generate --adapter (%s) agrees over %d steps: greedy %r -> %r"
              % (d, base, gen.backend, k, p, us[0][:48]))
    return total


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
    ap.add_argument("--bin", default=ROOT, help="the folder of the ./generate to compare with (default: the repository's)")
    ap.add_argument("--min-compared", type=int, default=8,
                    help="a CUDA build: steps each directory must have compared before transformers' close calls")
    a = ap.parse_args()
    import torch
    dirs = [os.path.abspath(d) for d in (a.dirs or quickstart_dirs(a.out))]
    prompts = a.prompt or PROMPTS
    gen = Generate(os.path.abspath(a.bin))
    torch.set_num_threads(2)
    os.chdir(tempfile.mkdtemp())  # nothing may come from the repository's working directory
    for d in dirs:
        adapter = os.path.exists(os.path.join(d, "adapter_config.json"))
        if gen.backend is None:
            gen.detect(["--adapter" if adapter else "--model", d])
        total = (check_adapter_dir if adapter else check_model_dir)(d, prompts, a.tokens, gen)
        if gen.backend == "cuda" and total < a.min_compared:
            sys.exit("FAIL outputs: %s: only %d steps could be compared (close calls come early): at least %d are needed"
                     % (d, total, a.min_compared))
    print("all %d outputs load in transformers / PEFT and continue like ./generate (%s build)" % (len(dirs), gen.backend))


if __name__ == "__main__":
    main()
