#!/usr/bin/env python3
"""An adapter train_lora wrote, loaded by PEFT on the same base, against ours: greedy continuation
of a prompt, step by step the chosen token and the two largest logits (generate --logits-out).

  LoRA:  the base is the fp32 model directory the adapter was trained on; PEFT's
         PeftModel.from_pretrained(GPT2LMHeadModel(base), adapter) vs ./generate --model base
         --adapter adapter --dtype fp32.
  QLoRA: the base is that model quantized by bitsandbytes (load_in_4bit, nf4, double
         quantization: what train_lora --qlora does, bit for bit, test/test_qlora.c), saved with
         save_pretrained into --work; ours: ./generate --model <the saved 4-bit directory>
         --adapter adapter --dtype fp32. Theirs twice: PEFT on the fp32 model whose linear weights
         are bitsandbytes' own dequantization of that 4-bit base (F.dequantize_4bit), in fp32; and
         PEFT on the 4-bit model itself, whose CPU inference kernel computes in bf16 (bitsandbytes'
         backends/cpu: the activations and scales cast to bf16), so with a bf16 tolerance.
The tolerance is |ours - theirs| <= tol * max(1, |top1|) for both logits of every step, tol = 1e-3
between fp32 computations and 2^-5 (eight bf16 ulps, as dev/check_outputs.py) against the bf16
kernel; and the same token at every step whose margin between the two largest logits exceeds it
(after a closer call the sequences may rightly part).

  python dev/check_xl_peft.py --base DIR --adapter DIR [--qlora --work DIR] [--bin build/cpu/bin]
         [--prompt TEXT] [--tokens N]
Needs torch, transformers, peft (and bitsandbytes for --qlora). Exit status 0 when they agree.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
from peft import PeftModel
from transformers import AutoTokenizer, BitsAndBytesConfig, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = 1e-3


def theirs(model, ids, n):
    out, ids = [], torch.tensor([ids])
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=ids).logits[0, -1].float()
            top = torch.topk(logits, 2)
            tok = int(top.indices[0])
            out.append((tok, float(top.values[0]), float(top.values[1])))
            ids = torch.cat([ids, torch.tensor([[tok]])], dim=1)
    return out


def ours(bin_dir, model_dir, adapter, prompt, n, path):
    cmd = [os.path.join(bin_dir, "generate"), "--model", model_dir, "--adapter", adapter, "--prompt", prompt, "--temperature", "0",
           "-n", str(n), "--dtype", "fp32", "--logits-out", path, "-q"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rows = []
    for line in open(path):
        t, a, b = line.split()
        rows.append((int(t), float(a), float(b)))
    return rows


def compare(ref, got, tol_frac):
    """The steps while both continue the same sequence: their two largest logits within the
    tolerance, and the same token chosen where the reference's margin exceeds it (at a closer
    call the two may rightly choose differently: the comparison ends after that step's logits)."""
    worst, steps = 0.0, 0
    for i, (r, g) in enumerate(zip(ref, got)):
        tol = tol_frac * max(1.0, abs(r[1]))
        d = max(abs(r[1] - g[1]), abs(r[2] - g[2]))
        worst = max(worst, d / max(1.0, abs(r[1])))
        if d > tol:
            return False, f"step {i + 1}: logits ours {g[1]:.5f} {g[2]:.5f}, PEFT {r[1]:.5f} {r[2]:.5f}"
        steps += 1
        if r[1] - r[2] <= tol:
            break
        if r[0] != g[0]:
            return False, f"step {i + 1}: token ours {g[0]}, PEFT {r[0]}"
    return steps > 0, f"{steps} steps compared, largest logit difference {worst:.2e} of max(1, |top1|)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--qlora", action="store_true")
    ap.add_argument("--work", default=None)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "cpu", "bin"))
    ap.add_argument("--prompt", default="The quick brown fox")
    ap.add_argument("--tokens", type=int, default=8)
    a = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    work = a.work or tempfile.mkdtemp()
    os.makedirs(work, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(a.base)
    ids = tok(a.prompt)["input_ids"]
    checks = []  # (what, reference model, tolerance)
    model_dir = a.base
    if a.qlora:
        q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                               bnb_4bit_compute_dtype=torch.float32)
        base4 = GPT2LMHeadModel.from_pretrained(a.base, quantization_config=q, device_map="cpu", torch_dtype=torch.float32)
        model_dir = os.path.join(work, "base_4bit")
        base4.save_pretrained(model_dir)
        tok.save_pretrained(model_dir)
        checks.append(("PEFT on the base dequantized by bitsandbytes, fp32", dequantized(a.base, base4), TOL))
        checks.append(("PEFT on bitsandbytes' 4-bit model (its CPU kernel in bf16)", base4, 2.0 ** -5))
    else:
        checks.append(("PEFT, fp32", GPT2LMHeadModel.from_pretrained(a.base, torch_dtype=torch.float32), TOL))
    got = ours(a.bin, model_dir, a.adapter, a.prompt, a.tokens, os.path.join(work, "ours.txt"))
    bad = 0
    for what, base, tol in checks:
        ref = theirs(PeftModel.from_pretrained(base.eval(), a.adapter).eval(), ids, a.tokens)
        ok, how = compare(ref, got, tol)
        bad |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} {'QLoRA' if a.qlora else 'LoRA'} adapter {a.adapter}, ours on {model_dir} vs {what}: {how} "
              f"(tolerance {tol:g} of max(1, |top1|))")
    sys.exit(1 if bad else 0)


def dequantized(fp32_dir, base4):
    """The fp32 GPT-2 whose Conv1D weights are bitsandbytes' dequantization of base4's Linear4bit ones."""
    import bitsandbytes.functional as F
    m = GPT2LMHeadModel.from_pretrained(fp32_dir, torch_dtype=torch.float32)
    mods4 = dict(base4.named_modules())
    with torch.no_grad():
        for name, mod in m.named_modules():
            w4 = getattr(mods4.get(name), "weight", None)
            if w4 is None or getattr(w4, "quant_state", None) is None:
                continue
            w = F.dequantize_4bit(w4.data, w4.quant_state).float()  # [out, in]
            mod.weight.copy_(w.t())  # (every quantized layer of GPT-2 is a Conv1D: [in, out])
    return m


if __name__ == "__main__":
    main()
