#!/usr/bin/env python3
"""Reference files for the model and training tests, produced by Hugging Face transformers.

Writes test/ref/gpt2_tiny/:
  config.json + model.safetensors  a tiny GPT-2 (random init, seed 1234) saved by
                                   GPT2LMHeadModel.save_pretrained: the C tests load it as users
                                   would load any transformers checkpoint
  ref.safetensors                  input_ids, targets (with ignored positions = -1), logits,
                                   loss, grad.<HF name> for every parameter, and train_losses:
                                   the loss before each of 10 AdamW steps on that batch
Hyperparameters of the 10 steps (also stored in the file's metadata):
  torch.optim.AdamW(lr=1e-3, betas=(0.9, 0.95), eps=1e-8), weight decay 0.1 on 2-D tensors only,
  clip_grad_norm_(1.0) before each step, constant learning rate, the same batch every step.
The loss is the mean cross-entropy over targets != -1 (torch cross_entropy, ignore_index=-1).

Run with a Python that has torch, transformers and safetensors:  python dev/gen_gpt2_ref.py
"""
import json, os, sys
import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "ref", "gpt2_tiny")
B, T = 2, 16
STEPS, LR, BETAS, EPS, WD, CLIP = 10, 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0


def main():
    torch.manual_seed(1234)
    torch.use_deterministic_algorithms(True)
    cfg = GPT2Config(vocab_size=100, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5,
                     bos_token_id=99, eos_token_id=99)
    cfg._attn_implementation = "eager"
    model = GPT2LMHeadModel(cfg)
    # GPT-2's init leaves biases at zero and layernorms at one; perturb them so that the tests
    # would notice a swapped or ignored bias / layernorm parameter.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.05 * torch.randn_like(p))
    model.train()
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(OUT)  # config.json + model.safetensors, as transformers writes them

    g = torch.Generator().manual_seed(42)
    x = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    y = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    y[0, 3] = -1  # ignored targets (loss mask)
    y[1, 0] = -1
    y[1, 15] = -1

    def loss_fn():
        logits = model(input_ids=x).logits
        return logits, torch.nn.functional.cross_entropy(
            logits.reshape(-1, cfg.vocab_size), y.reshape(-1), ignore_index=-1)

    logits, loss = loss_fn()
    loss.backward()
    tensors = {
        "input_ids": x.to(torch.int32).contiguous(),
        "targets": y.to(torch.int32).contiguous(),
        "logits": logits.detach().contiguous(),
        "loss": loss.detach().reshape(1),
    }
    for name, p in model.named_parameters():
        tensors["grad." + name] = p.grad.detach().clone().contiguous()

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    losses, norms = [], []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        _, loss = loss_fn()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
        print(f"step {step}: loss {loss.item():.6f} grad norm {norm.item():.6f}")
    tensors["train_losses"] = torch.tensor(losses, dtype=torch.float32)
    tensors["train_grad_norms"] = torch.tensor(norms, dtype=torch.float32)
    meta = {"format": "pt", "B": str(B), "T": str(T), "steps": str(STEPS), "lr": str(LR),
            "beta1": str(BETAS[0]), "beta2": str(BETAS[1]), "eps": str(EPS),
            "weight_decay": str(WD), "grad_clip": str(CLIP),
            "generator": "dev/gen_gpt2_ref.py, transformers GPT2LMHeadModel",
            "transformers": __import__("transformers").__version__, "torch": torch.__version__}
    save_file(tensors, os.path.join(OUT, "ref.safetensors"), metadata=meta)
    print("loss", tensors["loss"].item(), "->", OUT)


if __name__ == "__main__":
    sys.exit(main())
