#!/usr/bin/env python3
"""Reference for merging a chain of adapters (test/test_convert.c, convert --adapter A --adapter B):
PEFT's merge_and_unload of each adapter in turn, each loaded onto the model the ones before made
(PeftModel.from_pretrained on the merged model). Adapters: test/ref/lora_tiny/{all_linear, qv,
bias_all} over test/ref/gpt2_tiny, in that order; bias_all also carries biases (PEFT bias="all"),
which replace the merged model's.

Writes test/ref/lora_chain/ref.safetensors: merged_logits, the logits of the merged model on the
input_ids of test/ref/gpt2_tiny/ref.safetensors.

Run from the repo root: python dev/gen_lora_chain_ref.py
"""
import os
import torch
from safetensors.torch import load_file, save_file
from transformers import GPT2LMHeadModel
from peft import PeftModel

BASE = "test/ref/gpt2_tiny"
CHAIN = ["all_linear", "qv", "bias_all"]
OUT = "test/ref/lora_chain/ref.safetensors"


def main():
    x = load_file(os.path.join(BASE, "ref.safetensors"))["input_ids"].long()
    m = GPT2LMHeadModel.from_pretrained(BASE, attn_implementation="eager").eval()
    with torch.no_grad():
        base_logits = m(input_ids=x).logits
        for name in CHAIN:
            m = PeftModel.from_pretrained(m, os.path.join("test/ref/lora_tiny", name)).merge_and_unload().eval()
        logits = m(input_ids=x).logits.contiguous()
    print("chain changes the logits by", (logits - base_logits).abs().max().item())
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    save_file({"merged_logits": logits}, OUT, metadata={"chain": ",".join(CHAIN), "generator": "dev/gen_lora_chain_ref.py",
                                                       "peft": __import__("peft").__version__, "torch": torch.__version__})
    print("wrote", OUT)


if __name__ == "__main__":
    main()
