#!/usr/bin/env python3
"""Reference files for LoRA+ and BitFit in train_lora, made by PEFT, torch and transformers on the
tiny GPT-2 of test/ref/gpt2_tiny (dev/gen_gpt2_ref.py), on its reference batch.

test/ref/lora_tiny/loraplus/: LoRA+ (PEFT's peft.optimizers.create_loraplus_optimizer).
  adapter_config.json + adapter_model.safetensors  the adapter before training, as PEFT's
      save_pretrained writes it: attn.c_proj + mlp.c_fc, r=4, alpha=8, bias="lora_only",
      modules_to_save=["ln_f"], B ~ 0.05 N(0, 1) and the trained base slices perturbed by
      0.05 N(0, 1) (seeded) so that every parameter group starts away from zero. (Not c_attn's
      bias: the gradient of its key part is zero but for rounding, which AdamW at lr * ratio
      turns into steps of either sign, and no two implementations agree on them.)
  ref.safetensors  train_losses / train_grad_norms of 10 steps of torch.optim.AdamW over the
      groups create_loraplus_optimizer makes (lora_A at lr; lora_B and every 1-D parameter, the
      biases and ln_f, at lr * ratio; weight decay loraplus_weight_decay on lora_A and lora_B, none
      on the 1-D ones), and final.<adapter key>: every trained tensor after the 10 steps
test/ref/lora_tiny/bitfit/: BitFit, transformers' GPT2LMHeadModel with requires_grad False on
  every parameter whose name has no "bias" (every Linear / Conv1D and LayerNorm bias trains: the
  biases of --lora-bias all, ln_f's included).
  ref.safetensors  train_losses / train_grad_norms and final.<transformers name> of every bias
      after 10 AdamW steps; the biases are not decayed (HF Trainer decays no bias), although the
      metadata's weight_decay (what the C test passes) is not zero

Both: constant lr 1e-3, betas (0.9, 0.95), eps 1e-8, clip_grad_norm_ 1.0 over every trained
parameter, the same batch every step, fp32, dropout 0; the metadata holds the hyperparameters.

Run from anywhere: /work/venv-torch/bin/python dev/gen_loraplus_ref.py
`... dev/gen_loraplus_ref.py --check-run build/cpu/loraplus_cli/bf1` (after test/test_loraplus_cli.sh):
transformers loads BitFit's output directory; only its biases differ from the base.
"""
import os
import sys
import torch
from safetensors.torch import save_file, load_file
from transformers import GPT2LMHeadModel
from peft import LoraConfig, get_peft_model
from peft.optimizers import create_loraplus_optimizer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BASE = "test/ref/gpt2_tiny"  # relative (run from the repo root): it is recorded in adapter_config.json
OUT = os.path.join("test", "ref", "lora_tiny")
STEPS, LR, BETAS, EPS, WD, CLIP, RATIO = 10, 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0, 16.0


def base_model():
    m = GPT2LMHeadModel.from_pretrained(BASE, attn_implementation="eager")
    m.config.use_cache = False
    return m


def peft_key(n):
    # parameter name inside the PeftModel -> key in adapter_model.safetensors
    return n.replace("modules_to_save.default.", "").replace(".default", "")


def train(model, opt, params, x, y):
    # STEPS steps on one batch: the losses and the gradient norms before clipping
    V = model.config.vocab_size
    losses, norms = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1), ignore_index=-1)
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(params, CLIP).item())
        opt.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float32), torch.tensor(norms, dtype=torch.float32)


def meta(**extra):
    m = {"format": "pt", "steps": str(STEPS), "lr": str(LR), "beta1": str(BETAS[0]), "beta2": str(BETAS[1]),
         "eps": str(EPS), "weight_decay": str(WD), "grad_clip": str(CLIP),
         "generator": "dev/gen_loraplus_ref.py on test/ref/gpt2_tiny", "peft": __import__("peft").__version__,
         "transformers": __import__("transformers").__version__, "torch": torch.__version__}
    m.update({k: str(v) for k, v in extra.items()})
    return m


def loraplus(x, y):
    torch.manual_seed(2024)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["attn.c_proj", "mlp.c_fc"], lora_dropout=0.0, bias="lora_only",
                     modules_to_save=["ln_f"], task_type="CAUSAL_LM", fan_in_fan_out=True)
    model = get_peft_model(base_model(), cfg)
    g = torch.Generator().manual_seed(2025)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n or (p.requires_grad and "lora_" not in n):
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    d = os.path.join(OUT, "loraplus")
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d)
    if os.path.exists(os.path.join(d, "README.md")):
        os.remove(os.path.join(d, "README.md"))
    model.train()  # (dropout is 0 everywhere: the same function as eval)
    opt = create_loraplus_optimizer(model, torch.optim.AdamW, lr=LR, loraplus_lr_ratio=RATIO,
                                    loraplus_weight_decay=WD, betas=BETAS, eps=EPS)
    groups = [(g["lr"], g["weight_decay"], len(g["params"])) for g in opt.param_groups]
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    losses, norms = train(model, opt, [p for _, p in trained], x, y)
    t = {"train_losses": losses, "train_grad_norms": norms}
    for n, p in trained:
        t["final." + peft_key(n)] = p.detach().clone().contiguous()
    save_file(t, os.path.join(d, "ref.safetensors"), metadata=meta(lora_plus_ratio=RATIO, groups=groups))
    print(f"loraplus: groups (lr, weight_decay, tensors) {groups}; losses {losses[0]:.5f}..{losses[-1]:.5f}")


def bitfit(x, y):
    model = base_model()
    for n, p in model.named_parameters():
        p.requires_grad_("bias" in n)
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    # HF Trainer's grouping: no bias is decayed
    opt = torch.optim.AdamW([{"params": [p for _, p in trained], "weight_decay": 0.0}], lr=LR, betas=BETAS, eps=EPS)
    model.train()
    losses, norms = train(model, opt, [p for _, p in trained], x, y)
    t = {"train_losses": losses, "train_grad_norms": norms}
    for n, p in trained:
        t["final." + n] = p.detach().clone().contiguous()
    d = os.path.join(OUT, "bitfit")
    os.makedirs(d, exist_ok=True)
    n_bias = sum(p.numel() for _, p in trained)
    save_file(t, os.path.join(d, "ref.safetensors"), metadata=meta(n_trained=n_bias, tensors=len(trained)))
    print(f"bitfit: {len(trained)} bias tensors, {n_bias} parameters; losses {losses[0]:.5f}..{losses[-1]:.5f}")


def check_run(run_dir):
    # a train_lora --lora-rank 0 --lora-bias all run (test/test_loraplus_cli.sh's OUT): transformers
    # loads OUT, every parameter but the biases is the base's, and the biases moved
    base = dict(base_model().named_parameters())
    out = GPT2LMHeadModel.from_pretrained(run_dir, attn_implementation="eager")
    frozen, moved = 0.0, []
    for n, p in out.named_parameters():
        d = (p - base[n]).abs().max().item()
        if "bias" in n:
            moved.append(d)
        else:
            frozen = max(frozen, d)
    print(f"{run_dir}: transformers loads it; frozen weights max |diff| {frozen:.3g}; "
          f"{len(moved)} biases moved by {min(moved):.3g}..{max(moved):.3g}")
    return 0 if frozen == 0.0 and len(moved) == 13 and min(moved) > 0 else 1


def main():
    os.chdir(ROOT)
    if len(sys.argv) == 3 and sys.argv[1] == "--check-run":
        return check_run(sys.argv[2])
    torch.use_deterministic_algorithms(True)
    r = load_file(os.path.join(BASE, "ref.safetensors"))
    x, y = r["input_ids"].long(), r["targets"].long()
    loraplus(x, y)
    bitfit(x, y)
    return 0


if __name__ == "__main__":
    sys.exit(main())
