#!/usr/bin/env python3
"""Reference for --dtype fp16: torch.autocast("cpu", float16) + torch.amp.GradScaler on the tiny GPT-2.

Writes test/ref/gpt2_tiny/fp16.safetensors: the model of test/ref/gpt2_tiny (dev/gen_gpt2_ref.py)
trained for 12 AdamW steps on the batch of its ref.safetensors, as HF Trainer's fp16 mode does it:
the forward under autocast(float16), scaler.scale(loss).backward(), scaler.unscale_(),
clip_grad_norm_(1.0), scaler.step(), scaler.update(). The scaler starts at 2^INIT_LOG2 with a
growth interval of 3, so that the first steps overflow fp16 (skipped, the scale halved each time)
and the scale grows again after 3 clean steps. Stored per step: train_losses, train_grad_norms
(of the unscaled gradients; inf on a skipped step), loss_scales (the scale the step ran with),
skipped (1: the optimizer step was skipped). AdamW hyperparameters as in dev/gen_gpt2_ref.py.

Run with a Python that has torch, transformers and safetensors:  python dev/gen_fp16_ref.py
"""
import math, os, sys
import torch
from safetensors.torch import load_file, save_file
from transformers import GPT2LMHeadModel

DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "ref", "gpt2_tiny")
STEPS, LR, BETAS, EPS, WD, CLIP = 12, 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
INIT_LOG2, INTERVAL = int(os.environ.get("INIT_LOG2", "24")), 3


def main():
    torch.use_deterministic_algorithms(True)
    model = GPT2LMHeadModel.from_pretrained(DIR, attn_implementation="eager")
    model.train()
    ref = load_file(os.path.join(DIR, "ref.safetensors"))
    x, y = ref["input_ids"].long(), ref["targets"].long()
    V = model.config.vocab_size
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** INIT_LOG2, growth_interval=INTERVAL)
    losses, norms, scales, skipped = [], [], [], []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1), ignore_index=-1)
        scale = scaler.get_scale()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        before = [p.detach().clone() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        skip = int(all(torch.equal(b, p.detach()) for b, p in zip(before, model.parameters())))
        losses.append(loss.item()); norms.append(norm.item()); scales.append(scale); skipped.append(skip)
        print(f"step {step}: loss {loss.item():.6f} grad norm {norm.item():.6f} scale {scale:g} skipped {skip}")
    tensors = {
        "train_losses": torch.tensor(losses, dtype=torch.float32),
        "train_grad_norms": torch.tensor([n if math.isfinite(n) else math.inf for n in norms], dtype=torch.float32),
        "loss_scales": torch.tensor(scales, dtype=torch.float32),
        "skipped": torch.tensor(skipped, dtype=torch.float32),
    }
    meta = {"format": "pt", "steps": str(STEPS), "lr": str(LR), "beta1": str(BETAS[0]), "beta2": str(BETAS[1]),
            "eps": str(EPS), "weight_decay": str(WD), "grad_clip": str(CLIP),
            "init_scale": str(2.0 ** INIT_LOG2), "growth_interval": str(INTERVAL),
            "generator": "dev/gen_fp16_ref.py, transformers GPT2LMHeadModel, torch.autocast(cpu, float16) + GradScaler",
            "transformers": __import__("transformers").__version__, "torch": torch.__version__}
    save_file(tensors, os.path.join(DIR, "fp16.safetensors"), metadata=meta)


if __name__ == "__main__":
    sys.exit(main())
