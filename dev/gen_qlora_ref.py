#!/usr/bin/env python3
"""Reference files for the QLoRA tests, produced by transformers + bitsandbytes + PEFT on CPU with
the tiny GPT-2 of test/ref/gpt2_tiny (2 layers, C=64: every row of every linear weight is a whole
number of 64-weight NF4 blocks).

QLoRA setup (the one the QLoRA paper and PEFT's docs use): GPT2LMHeadModel.from_pretrained with
BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
bnb_4bit_compute_dtype=torch.float32). transformers replaces every GPT-2 Conv1D (c_attn, c_proj,
c_fc) by a bitsandbytes Linear4bit and quantizes the TRANSPOSED Conv1D weight, i.e. the [out, in]
matrix (llm.c orientation), in blocks of 64 along `in`; lm_head (tied to wte) stays fp32. LoRA
goes on top with get_peft_model (fan_in_fan_out=False: the layers are Linear4bit now).

Writes test/ref/qlora_tiny/:
  base_4bit/   the quantized base as save_pretrained writes it (config.json + model.safetensors):
               the C test checks that quantizing gpt2_tiny's fp32 weights gives these bytes
               exactly, and loads it as a 4-bit checkpoint
  <set>/       adapter_config.json + adapter_model.safetensors (PEFT init for A, B ~ 0.05 N(0,1))
               and ref.safetensors: logits, loss, grad.<adapter key> of every lora_A / lora_B,
               train_losses / train_grad_norms of 10 AdamW steps (lr 1e-3, betas (0.9, 0.95),
               eps 1e-8, weight decay 0.1 on the 2-D LoRA parameters, clip 1.0, constant LR, the
               same batch each step: dev/gen_lora_ref.py's hyperparameters), and merged_logits:
               the logits of the fp32 GPT-2 whose linear weights are dequant(quant(W)) + the
               merged adapter (what train_lora --qlora --merge writes)
Sets: c_attn (r=4, alpha=8), all_linear (r=2, alpha=4: every Linear4bit of the blocks).

Run from the repo root: /opt/refenv/bin/python dev/gen_qlora_ref.py
bitsandbytes' AVX512-BF16 inference shortcut is switched off (see qbase()). One PyTorch thread (bitsandbytes' double-quant offset is a torch.mean; see dev/gen_nf4_ref.py).
"""
import os
import shutil

import torch

torch.set_num_threads(1)

import bitsandbytes as bnb  # noqa: E402
import bitsandbytes.functional as F  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import BitsAndBytesConfig, GPT2LMHeadModel  # noqa: E402

BASE = "test/ref/gpt2_tiny"
OUT = os.path.join("test", "ref", "qlora_tiny")
STEPS, LR, BETAS, EPS, WD, CLIP = 10, 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
SETS = {
    "c_attn": dict(r=4, lora_alpha=8, target_modules=["c_attn"]),
    "all_linear": dict(r=2, lora_alpha=4, target_modules=["c_attn", "c_proj", "c_fc"]),
}
QCFG = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                          bnb_4bit_compute_dtype=torch.float32)


def qbase():
    m = GPT2LMHeadModel.from_pretrained(BASE, quantization_config=QCFG, device_map="cpu", dtype=torch.float32,
                                        attn_implementation="eager")
    m.config.use_cache = False
    assert isinstance(m.transformer.h[0].attn.c_attn, bnb.nn.Linear4bit)
    # bitsandbytes 0.50 on a CPU with AVX512-BF16, in eval mode and for an input that needs no
    # gradient, repacks the weight and runs its own bf16 GEMM (gemv_4bit), whatever
    # bnb_4bit_compute_dtype says: logits then differ from the fp32 computation by ~1e-3
    # relative. Keep the path compute_dtype=float32 describes (dequantize_4bit + fp32 linear),
    # which is also what training (inputs that need gradients) runs.
    for mod in m.modules():
        if isinstance(mod, bnb.nn.Linear4bit):
            mod.support_avx512bf16_for_cpu = False
    return m


def dequant_fp32_model():
    """The fp32 GPT-2 whose Conv1D weights are bitsandbytes' dequant(quant(W)) (transposed back)."""
    q = qbase()
    f = GPT2LMHeadModel.from_pretrained(BASE, attn_implementation="eager")
    with torch.no_grad():
        for l, blk in enumerate(q.transformer.h):
            for name in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
                lin = blk.get_submodule(name)
                W = F.dequantize_4bit(lin.weight.data, lin.weight.quant_state)  # [out, in]
                f.transformer.h[l].get_submodule(name).weight.copy_(W.t())      # Conv1D [in, out]
    return f


def run_set(name, spec, x, y):
    torch.manual_seed(2000 + len(name))
    model = get_peft_model(qbase(), LoraConfig(lora_dropout=0.0, bias="none", task_type="CAUSAL_LM", **spec))
    g = torch.Generator().manual_seed(2001 + len(name))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d)
    if os.path.exists(os.path.join(d, "README.md")):
        os.remove(os.path.join(d, "README.md"))
    model.eval()
    V = model.config.vocab_size

    def loss_fn():
        logits = model(input_ids=x).logits
        return logits, torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1), ignore_index=-1)

    logits, loss = loss_fn()
    loss.backward()
    t = {"logits": logits.detach().contiguous(), "loss": loss.detach().reshape(1)}
    lora_params = [(n, p) for n, p in model.named_parameters() if "lora_" in n]
    assert all(p.requires_grad for _, p in lora_params)
    assert not any(p.requires_grad for n, p in model.named_parameters() if "lora_" not in n)
    for n, p in lora_params:
        t["grad." + n.replace(".default", "")] = p.grad.detach().clone().contiguous()

    # merged model: dequant(quant(W)) + scaling * B A, as an fp32 GPT-2 (before training)
    f = dequant_fp32_model()
    sd = dict(model.named_parameters())
    with torch.no_grad():
        for l in range(len(f.transformer.h)):
            for mod in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
                key = f"base_model.model.transformer.h.{l}.{mod}.lora_%s.default.weight"
                if key % "A" not in sd:
                    continue
                scaling = spec["lora_alpha"] / spec["r"]
                delta = scaling * (sd[key % "B"] @ sd[key % "A"])  # [out, in]
                f.transformer.h[l].get_submodule(mod).weight.add_(delta.t())
        f.eval()
        t["merged_logits"] = f(input_ids=x).logits.contiguous()

    opt = torch.optim.AdamW([p for _, p in lora_params], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    losses, norms = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        _, l_ = loss_fn()
        l_.backward()
        nrm = torch.nn.utils.clip_grad_norm_([p for _, p in lora_params], CLIP)
        opt.step()
        losses.append(l_.item()); norms.append(nrm.item())
    t["train_losses"] = torch.tensor(losses, dtype=torch.float32)
    t["train_grad_norms"] = torch.tensor(norms, dtype=torch.float32)
    meta = {"format": "pt", "steps": str(STEPS), "lr": str(LR), "beta1": str(BETAS[0]), "beta2": str(BETAS[1]),
            "eps": str(EPS), "weight_decay": str(WD), "grad_clip": str(CLIP),
            "n_trainable": str(sum(p.numel() for _, p in lora_params)),
            "generator": "dev/gen_qlora_ref.py: transformers load_in_4bit nf4 double-quant fp32 compute + PEFT LoRA, CPU",
            "bitsandbytes": bnb.__version__, "peft": __import__("peft").__version__, "torch": torch.__version__}
    save_file(t, os.path.join(d, "ref.safetensors"), metadata=meta)
    print(f"{name}: loss {loss.item():.6f} steps {losses[0]:.5f}..{losses[-1]:.5f}")


def main():
    ref = load_file(os.path.join(BASE, "ref.safetensors"))
    x = ref["input_ids"].long()
    y = ref["targets"].long()
    qd = os.path.join(OUT, "base_4bit")
    shutil.rmtree(qd, ignore_errors=True)
    qbase().save_pretrained(qd)
    for fn in os.listdir(qd):
        if fn not in ("model.safetensors", "config.json"):
            os.remove(os.path.join(qd, fn))
    for name, spec in SETS.items():
        run_set(name, spec, x, y)


if __name__ == "__main__":
    main()
