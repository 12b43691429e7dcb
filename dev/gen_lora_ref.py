#!/usr/bin/env python3
"""Reference files for the LoRA tests, produced by Hugging Face PEFT on the tiny GPT-2 of
test/ref/gpt2_tiny (made by dev/gen_gpt2_ref.py; loaded here with from_pretrained).

For each target set below, writes test/ref/lora_tiny/<set>/:
  adapter_config.json + adapter_model.safetensors   the adapter as PEFT's save_pretrained writes
      it, with a NON-trivial B (PEFT init for A, then B ~ 0.05 N(0, 1), seeded) so that every
      gradient and the merge are exercised
  ref.safetensors  logits (eval, no dropout) of the adapted model on gpt2_tiny's batch, loss,
      grad.<adapter key> for every lora_A / lora_B, grad.wte (the gradient reaching the tied
      embedding: lm_head plus the input path through every frozen layer and every adapter),
      merged_logits (PeftModel.merge_and_unload()), train_losses / train_grad_norms of 10 AdamW
      steps, and for the c_attn set accum.* (a 4x larger batch and its gradients, for the
      gradient-accumulation test)
Hyperparameters of the 10 steps (also in each file's metadata): torch.optim.AdamW(lr=1e-3,
betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1) on every LoRA parameter (all of them are 2-D, and
HF Trainer decays every 2-D parameter), clip_grad_norm_(1.0), constant LR, the same batch every
step, lora_dropout 0 (exact). The base model is frozen. Base biases / ln_f trained by bias= or
modules_to_save (the bias_* sets) are 1-D and not decayed (HF Trainer excludes biases and
LayerNorm weights from decay); they are perturbed (0.05 N(0, 1)) before saving so the adapter
file's values differ from the base's.

Sets: c_attn (r=4, alpha=8); proj_fc (attn.c_proj + mlp.c_fc + mlp.c_proj, r=4, alpha=16);
all_linear (r=2, alpha=4); rslora (c_attn + both c_proj, r=4, alpha=8, use_rslora);
layers (c_attn + c_fc on layer 1 only, r=3, alpha=6); bias_lnf (c_attn, r=2, bias="lora_only",
modules_to_save=["ln_f"]); bias_all (mlp.c_fc + attn.c_proj, r=2, alpha=2, bias="all"); qv (our q/v-only split, r=2, alpha=4:
exactly one c_attn adapter of rank 4 with B zero in the k rows and off its blocks; PEFT has no
such split, so the reference trains that c_attn adapter with a gradient hook that zeroes B's
gradient outside the blocks, which is the definition of separate q and v adapters).

CONFIG_SETS (exclude, patterns): adapters whose structure only adapter_config.json can describe
(exclude_modules; rank_pattern / alpha_pattern keys PEFT reads as regular expressions); their
ref.safetensors holds logits and merged_logits only, and the metadata key "adapted" the modules
PEFT adapted.

Reverse direction: `python dev/gen_lora_ref.py --check-c build/lora_export` loads every adapter
that test/test_lora.c wrote there (after its 10 training steps) with PeftModel.from_pretrained on
the same base and compares PEFT's logits with the logits of our merged model (merged_logits.
safetensors written next to it by the C test). Prints the max abs difference.

`python dev/gen_lora_ref.py --check-run build/lora_cli/run1` (after test/test_lora_cli.sh): the
merged transformers dir that train_lora --merge wrote and PEFT on its adapter give the same logits.

Run: /opt/refenv/bin/python dev/gen_lora_ref.py [--sets NAME,...]   (only those sets)
"""
import json, os, sys
import torch
from safetensors.torch import save_file, load_file
from transformers import GPT2LMHeadModel
from peft import LoraConfig, get_peft_model, PeftModel

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BASE = "test/ref/gpt2_tiny"  # relative (run from the repo root): it is recorded in adapter_config.json
OUT = os.path.join("test", "ref", "lora_tiny")
STEPS, LR, BETAS, EPS, WD, CLIP = 10, 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0

SETS = {
    "c_attn": dict(r=4, lora_alpha=8, target_modules=["c_attn"]),
    "proj_fc": dict(r=4, lora_alpha=16, target_modules=["attn.c_proj", "mlp.c_fc", "mlp.c_proj"]),
    "all_linear": dict(r=2, lora_alpha=4, target_modules="all-linear"),
    "rslora": dict(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj"], use_rslora=True),
    "layers": dict(r=3, lora_alpha=6, target_modules=["c_attn", "c_fc"], layers_to_transform=[1], layers_pattern="h"),
    "qv": dict(r=2, lora_alpha=4, target_modules=["c_attn"], rank_pattern={"c_attn": 4}, alpha_pattern={"c_attn": 8}),
    "bias_lnf": dict(r=2, lora_alpha=4, target_modules=["c_attn"], bias="lora_only", modules_to_save=["ln_f"]),
    "bias_all": dict(r=2, lora_alpha=2, target_modules=["mlp.c_fc", "attn.c_proj"], bias="all"),
}
QV_R = 2
# Sets whose structure only adapter_config.json can describe (no --lora-* flags give it), for the
# loader alone: exclude_modules (names, matched as PEFT matches them), and rank_pattern /
# alpha_pattern keys read as PEFT reads them (regular expressions: '^' anchors the whole name,
# '.' is any character; the first key that matches wins). test/ref/lora_tiny/<set>/ref.safetensors
# holds only logits and merged_logits (PeftModel.from_pretrained(...).merge_and_unload()).
CONFIG_SETS = {
    "exclude": dict(r=2, lora_alpha=4, target_modules=["c_attn", "c_fc", "c_proj"],
                    exclude_modules=["h.1.mlp.c_fc", "transformer.h.0.attn.c_proj"]),
    "patterns": dict(r=2, lora_alpha=4, target_modules=["c_attn", "mlp.c_proj"],
                     rank_pattern={"^transformer.h.0.attn.c_attn": 4}, alpha_pattern={"h.1.mlp.c_proj": 16, "c_attn": 2}),
}


def base_model():
    m = GPT2LMHeadModel.from_pretrained(BASE, attn_implementation="eager")
    m.config.use_cache = False
    return m


def qv_mask(out, r, C):
    # B [3C, 2r]: columns 0..r belong to q (rows 0..C), r..2r to v (rows 2C..3C)
    m = torch.zeros(out, 2 * r)
    m[0:C, 0:r] = 1
    m[2 * C:3 * C, r:2 * r] = 1
    return m


def make_model(name, spec, seed):
    torch.manual_seed(seed)
    base = base_model()
    spec = dict(spec)
    cfg = LoraConfig(lora_dropout=0.0, bias=spec.pop("bias", "none"), task_type="CAUSAL_LM", fan_in_fan_out=True, **spec)
    model = get_peft_model(base, cfg)
    g = torch.Generator().manual_seed(seed + 1)
    masks = {}
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
                if name == "qv":
                    mk = qv_mask(p.shape[0], QV_R, p.shape[0] // 3)
                    p.mul_(mk)
                    masks[n] = mk
            elif p.requires_grad and "lora_" not in n:
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    for n, p in model.named_parameters():
        if n in masks:
            p.register_hook(lambda grad, mk=masks[n]: grad * mk)
    return model


def peft_key(n):
    # parameter name inside the PeftModel -> key in adapter_model.safetensors
    return n.replace("modules_to_save.default.", "").replace(".default", "")


def run_set(name, spec, x, y, xa, ya):
    model = make_model(name, spec, 1000 + len(name))
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d)
    # Our loader never needs the README PEFT writes next to the adapter.
    if os.path.exists(os.path.join(d, "README.md")):
        os.remove(os.path.join(d, "README.md"))
    V = model.config.vocab_size
    model.eval()
    wte = model.base_model.model.transformer.wte.weight
    wte.requires_grad_(True)  # only to read the gradient reaching the embedding; never stepped

    def loss_fn(xx, yy):
        logits = model(input_ids=xx).logits
        return logits, torch.nn.functional.cross_entropy(logits.reshape(-1, V), yy.reshape(-1), ignore_index=-1)

    logits, loss = loss_fn(x, y)
    loss.backward()
    t = {"logits": logits.detach().contiguous(), "loss": loss.detach().reshape(1),
         "grad.wte": wte.grad.detach().clone()}
    lora_params = [(n, p) for n, p in model.named_parameters() if "lora_" in n]
    extra_params = [(n, p) for n, p in model.named_parameters() if p.requires_grad and "lora_" not in n and "wte" not in n]
    for n, p in lora_params + extra_params:
        t["grad." + peft_key(n)] = p.grad.detach().clone().contiguous()
    n_trainable = sum(p.numel() for _, p in lora_params)
    n_extra = sum(p.numel() for _, p in extra_params)
    if name == "c_attn":
        model.zero_grad(set_to_none=True)
        _, la = loss_fn(xa, ya)
        la.backward()
        t["accum.input_ids"] = xa.to(torch.int32).contiguous()
        t["accum.targets"] = ya.to(torch.int32).contiguous()
        t["accum.loss"] = la.detach().reshape(1)
        for n, p in lora_params:
            t["accum.grad." + peft_key(n)] = p.grad.detach().clone().contiguous()
    wte.requires_grad_(False)
    wte.grad = None

    # 10 AdamW steps on the LoRA parameters (all 2-D, all decayed)
    opt = torch.optim.AdamW([{"params": [p for _, p in lora_params], "weight_decay": WD},
                             {"params": [p for _, p in extra_params], "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    every = [p for _, p in lora_params + extra_params]
    losses, norms = [], []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        _, l = loss_fn(x, y)
        l.backward()
        nrm = torch.nn.utils.clip_grad_norm_(every, CLIP)
        opt.step()
        losses.append(l.item()); norms.append(nrm.item())
    t["train_losses"] = torch.tensor(losses, dtype=torch.float32)
    t["train_grad_norms"] = torch.tensor(norms, dtype=torch.float32)

    # merged model: reload the saved (pre-training) adapter and merge it into the base
    m2 = PeftModel.from_pretrained(base_model(), d).merge_and_unload()
    m2.eval()
    with torch.no_grad():
        t["merged_logits"] = m2(input_ids=x).logits.contiguous()
    meta = {"format": "pt", "steps": str(STEPS), "lr": str(LR), "beta1": str(BETAS[0]), "beta2": str(BETAS[1]),
            "eps": str(EPS), "weight_decay": str(WD), "grad_clip": str(CLIP), "n_trainable": str(n_trainable), "n_extra": str(n_extra),
            "generator": "dev/gen_lora_ref.py, PEFT get_peft_model on test/ref/gpt2_tiny",
            "peft": __import__("peft").__version__, "torch": torch.__version__}
    save_file(t, os.path.join(d, "ref.safetensors"), metadata=meta)
    print(f"{name}: loss {loss.item():.6f} trainable {n_trainable} + {n_extra} base losses {losses[0]:.5f}..{losses[-1]:.5f}")


def run_config_set(name, spec, x):
    model = make_model(name, spec, 1000 + len(name))
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d)
    if os.path.exists(os.path.join(d, "README.md")):
        os.remove(os.path.join(d, "README.md"))
    model.eval()
    m2 = PeftModel.from_pretrained(base_model(), d).eval()
    with torch.no_grad():
        t = {"logits": model(input_ids=x).logits.contiguous(), "loaded_logits": m2(input_ids=x).logits.contiguous()}
        t["merged_logits"] = m2.merge_and_unload()(input_ids=x).logits.contiguous()
    assert (t["logits"] - t["loaded_logits"]).abs().max().item() < 1e-6, "PEFT's saved adapter reloads differently"
    adapted = sorted(n[:-len(".lora_A.weight")] for n in load_file(os.path.join(d, "adapter_model.safetensors")) if "lora_A" in n)
    meta = {"format": "pt", "adapted": ",".join(adapted), "generator": "dev/gen_lora_ref.py, PEFT get_peft_model on test/ref/gpt2_tiny",
            "peft": __import__("peft").__version__, "torch": torch.__version__}
    save_file(t, os.path.join(d, "ref.safetensors"), metadata=meta)
    print(f"{name}: {len(adapted)} adapted modules: {', '.join(a.replace('base_model.model.transformer.', '') for a in adapted)}")


def check_c(export_dir):
    worst = 0.0
    for name in sorted(os.listdir(export_dir)):
        d = os.path.join(export_dir, name)
        if not os.path.exists(os.path.join(d, "adapter_config.json")):
            continue
        x = load_file(os.path.join(BASE, "ref.safetensors"))["input_ids"].long()
        model = PeftModel.from_pretrained(base_model(), d)
        model.eval()
        with torch.no_grad():
            logits = model(input_ids=x).logits
        ours = load_file(os.path.join(d, "merged_logits.safetensors"))["logits"]
        diff = (logits - ours).abs().max().item()
        with torch.no_grad():
            effect = (base_model()(input_ids=x).logits - logits).abs().max().item()
        if effect < 1e-3:  # PEFT must really have applied the adapter
            print(f"{name}: the adapter changes the logits by only {effect:.3e}")
            diff = float("inf")
        worst = max(worst, diff)
        cfg = json.load(open(os.path.join(d, "adapter_config.json")))
        print(f"{name}: PEFT-loaded C adapter vs C merged model: max abs logit diff {diff:.3e} "
              f"(adapter effect {effect:.3e}; targets {cfg['target_modules']}, r {cfg['r']}, rank_pattern {cfg['rank_pattern']})")
    print(f"worst {worst:.3e}")
    return 0 if worst < 1e-4 else 1


def check_run(run_dir):
    # a train_lora --merge run on the tiny base: transformers loads OUT/merged, PEFT loads OUT's
    # adapter on the base; both must give the same logits
    x = load_file(os.path.join(BASE, "ref.safetensors"))["input_ids"].long()
    merged = GPT2LMHeadModel.from_pretrained(os.path.join(run_dir, "merged"), attn_implementation="eager").eval()
    peft = PeftModel.from_pretrained(base_model(), run_dir).eval()
    with torch.no_grad():
        a, b = merged(input_ids=x).logits, peft(input_ids=x).logits
        effect = (base_model()(input_ids=x).logits - b).abs().max().item()
    diff = (a - b).abs().max().item()
    print(f"{run_dir}: transformers on merged/ vs PEFT on the adapter: max abs logit diff {diff:.3e} (adapter effect {effect:.3e})")
    return 0 if diff < 1e-4 and effect > 1e-4 else 1


def main():
    os.chdir(ROOT)
    if len(sys.argv) == 3 and sys.argv[1] == "--check-c":
        return check_c(sys.argv[2])
    if len(sys.argv) == 3 and sys.argv[1] == "--check-run":
        return check_run(sys.argv[2])
    torch.use_deterministic_algorithms(True)
    r = load_file(os.path.join(BASE, "ref.safetensors"))
    x, y = r["input_ids"].long(), r["targets"].long()
    g = torch.Generator().manual_seed(7)
    xa = torch.randint(0, 100, (4, x.shape[1]), generator=g)
    ya = torch.randint(0, 100, (4, x.shape[1]), generator=g)
    ya[0, 2] = -1; ya[2, 5:9] = -1; ya[3, 0] = -1
    only = sys.argv[2].split(",") if len(sys.argv) == 3 and sys.argv[1] == "--sets" else None
    for name, spec in SETS.items():
        if only is None or name in only:
            run_set(name, spec, x, y, xa, ya)
    for name, spec in CONFIG_SETS.items():
        if only is None or name in only:
            run_config_set(name, spec, x)
    return 0


if __name__ == "__main__":
    sys.exit(main())
