#!/usr/bin/env python3
"""Reference logits of GPT-2 models with the head configurations of every GPT-2 size, produced by
Hugging Face transformers, for test/test_gpt2_sizes.c.

GPT-2 medium, large and XL have n_embd 1024 / 1280 / 1600 with n_head 16 / 20 / 25 (every head 64
wide). For each of the three (and the small model's 768 / 12), a one-layer GPT2LMHeadModel with a
96-token vocabulary and 32 positions gets weights from a formula exact in integer arithmetic, so
that the C test writes the same model in the Hugging Face layout without the file being committed
(the XL-wide layer alone is 120 MB):
    element j (flat, in the tensor's Hugging Face layout, Conv1D weights [in, out]) of tensor t:
    v = ((j * 7919 + t * 104729) mod 2003 - 1001) / 1001 * 0.02, in double, rounded to fp32;
    t = 1000 * (index of the tensor in llm.c's order: wte, wpe, ln_1.w, ln_1.b, c_attn.w, c_attn.b,
    attn.c_proj.w, attn.c_proj.b, ln_2.w, ln_2.b, c_fc.w, c_fc.b, mlp.c_proj.w, mlp.c_proj.b,
    ln_f.w, ln_f.b) + layer; layernorm weights are 1 + v.
Writes test/ref/gpt2_sizes/ref.safetensors: input_ids [1, 8] and logits_<n_embd> [1, 8, 96] (fp32,
eager attention).

Run with a Python that has torch, transformers and safetensors:  python dev/gen_sizes_ref.py
"""
import os
import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "ref", "gpt2_sizes")
SIZES = [(768, 12), (1024, 16), (1280, 20), (1600, 25)]
V, NPOS, L = 96, 32, 1
TOKENS = [3, 17, 95, 0, 42, 42, 7, 60]
ORDER = ["wte.weight", "wpe.weight", "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
         "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
         "mlp.c_proj.weight", "mlp.c_proj.bias", "ln_f.weight", "ln_f.bias"]


def values(t, shape, layernorm_weight):
    n = 1
    for d in shape:
        n *= d
    j = torch.arange(n, dtype=torch.int64)
    k = (j * 7919 + t * 104729) % 2003 - 1001
    v = k.double() / 1001.0 * 0.02
    if layernorm_weight:
        v = 1.0 + v
    return v.float().reshape(shape)


def tensor_id(name):
    # "transformer.h.0.attn.c_attn.weight" -> (4, 0); "transformer.wte.weight" -> (0, 0)
    rest = name[len("transformer."):]
    layer = 0
    if rest.startswith("h."):
        _, l, rest = rest.split(".", 2)
        layer = int(l)
    return ORDER.index(rest), layer


def main():
    torch.use_deterministic_algorithms(True)
    out = {"input_ids": torch.tensor([TOKENS], dtype=torch.int32)}
    for C, NH in SIZES:
        cfg = GPT2Config(vocab_size=V, n_positions=NPOS, n_embd=C, n_layer=L, n_head=NH, resid_pdrop=0.0, embd_pdrop=0.0,
                         attn_pdrop=0.0, activation_function="gelu_new", layer_norm_epsilon=1e-5)
        cfg._attn_implementation = "eager"
        model = GPT2LMHeadModel(cfg).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name == "lm_head.weight":
                    continue  # (tied to wte)
                i, layer = tensor_id(name)
                p.copy_(values(1000 * i + layer, tuple(p.shape), ORDER[i].startswith("ln") and ORDER[i].endswith("weight")))
            logits = model(torch.tensor([TOKENS])).logits
        out[f"logits_{C}"] = logits.float().contiguous()
        print(f"n_embd {C} n_head {NH}: logits |max| {logits.abs().max().item():.4f}")
    os.makedirs(OUT, exist_ok=True)
    save_file(out, os.path.join(OUT, "ref.safetensors"), metadata={
        "generator": "dev/gen_sizes_ref.py", "torch": torch.__version__,
        "transformers": __import__("transformers").__version__})


if __name__ == "__main__":
    main()
