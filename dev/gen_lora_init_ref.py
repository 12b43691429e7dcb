#!/usr/bin/env python3
"""Reference files for train_lora --init pissa / olora (test/test_lora_init.c), produced by Hugging
Face PEFT on the tiny GPT-2 of test/ref/gpt2_tiny (its batch: gpt2_tiny/ref.safetensors).

Adapters: targets c_attn + c_proj (attn.c_proj and mlp.c_proj: a weight taller than wide, a square
one and a wide one), r=2, lora_alpha=4 (scaling 2), on both layers.

test/ref/lora_init/<init>/ref.safetensors, for init pissa and olora:
  A.<l>.<module>, B.<l>.<module>   PEFT's initial lora_A [r, in] / lora_B [out, r]
  ba.<l>.<module>                  scaling * B A [out, in]: what the base loses (W_res = W - ba)
  logits                           the initialised model's logits on the batch (the base's: PiSSA
                                   and OLoRA keep the function at init)
PiSSA is PEFT's own get_peft_model(init_lora_weights="pissa") on the GPT-2 (fan_in_fan_out=True:
PEFT factors the [out, in] transpose of each Conv1D weight). PEFT's olora_init does not transpose
a fan_in_fan_out weight (on GPT-2 it fails on every non-square Conv1D and does not keep the
function on the square one), so the OLoRA reference is PEFT's olora_init on an nn.Linear holding
each weight in the [out, in] layout: what PEFT computes for the same layer of a Linear model.

test/ref/lora_init/pissa/ also holds the conversion to a plain LoRA, as PEFT's documented flow
writes it:
  init/        the initial adapter saved with init_lora_weights=True (PEFT's
               path_initial_model_for_weight_conversion directory)
  trained.safetensors   lora_A / lora_B after a stand-in for training (each moved by 0.05 N(0, 1))
  converted/   save_pretrained(..., path_initial_model_for_weight_conversion=init/): rank 4,
               lora_alpha 8, init_lora_weights true, an adapter of the original base
  converted_logits (in ref.safetensors): PeftModel.from_pretrained(original base, converted/)
               on the batch, which equal the trained PiSSA model's (trained_logits)
  peft_pissa/  the trained adapter as PEFT's plain save_pretrained writes it (init_lora_weights
               "pissa": PEFT, loading it on the original base, runs PiSSA on it again first)

`python dev/gen_lora_init_ref.py --check DIR`: PEFT loads the adapter directory DIR (train_lora's
output, a converted plain LoRA) on test/ref/gpt2_tiny and prints its logits' max difference from
DIR/../logits.safetensors when present, else its config.

Run from the repository root: /work/venv-torch/bin/python dev/gen_lora_init_ref.py
"""
import copy, json, os, shutil, sys
import torch
from safetensors.torch import save_file, load_file
from safetensors import safe_open
from transformers import GPT2LMHeadModel
from peft import LoraConfig, get_peft_model, PeftModel

BASE = "test/ref/gpt2_tiny"
OUT = os.path.join("test", "ref", "lora_init")
R, ALPHA, TARGETS = 2, 4, ["c_attn", "c_proj"]
MODULES = ["attn.c_attn", "attn.c_proj", "mlp.c_proj"]


def base_model():
    m = GPT2LMHeadModel.from_pretrained(BASE, attn_implementation="eager")
    m.config.use_cache = False
    m.eval()
    return m


def batch():
    with safe_open(os.path.join(BASE, "ref.safetensors"), "pt") as f:
        return f.get_tensor("input_ids").long()


def module(model, l, name):
    blk = model.transformer.h[l]
    a, b = name.split(".")
    return getattr(getattr(blk, a), b)


def pissa_ref(x):
    torch.manual_seed(0)
    base = base_model()
    cfg = LoraConfig(r=R, lora_alpha=ALPHA, target_modules=TARGETS, lora_dropout=0.0, fan_in_fan_out=True,
                     init_lora_weights="pissa", task_type="CAUSAL_LM")
    pm = get_peft_model(base, cfg)
    pm.eval()
    out = {}
    for l in range(base.config.n_layer):
        for name in MODULES:
            lay = module(pm.base_model.model, l, name)
            A, B = lay.lora_A["default"].weight.detach(), lay.lora_B["default"].weight.detach()
            out[f"A.{l}.{name}"] = A.clone().contiguous()
            out[f"B.{l}.{name}"] = B.clone().contiguous()
            out[f"ba.{l}.{name}"] = (lay.scaling["default"] * (B @ A)).contiguous()
    with torch.no_grad():
        out["logits"] = pm(x).logits[0:].contiguous()
    return pm, out


def olora_ref(x):
    base = base_model()
    out = {}
    m = copy.deepcopy(base)
    for l in range(base.config.n_layer):
        for name in MODULES:
            conv = module(base, l, name)
            W = conv.weight.detach().t().contiguous()  # Conv1D [in, out] -> [out, in]
            holder = torch.nn.Module()
            holder.lin = torch.nn.Linear(W.shape[1], W.shape[0], bias=False)
            with torch.no_grad():
                holder.lin.weight.copy_(W)
            wrapped = get_peft_model(holder, LoraConfig(r=R, lora_alpha=ALPHA, target_modules=["lin"], lora_dropout=0.0,
                                                        init_lora_weights="olora"))
            lay = wrapped.base_model.model.lin
            A, B = lay.lora_A["default"].weight.detach(), lay.lora_B["default"].weight.detach()
            ba = lay.scaling["default"] * (B @ A)
            out[f"A.{l}.{name}"] = A.clone().contiguous()
            out[f"B.{l}.{name}"] = B.clone().contiguous()
            out[f"ba.{l}.{name}"] = ba.contiguous()
            # the model with the residual base plus the adapter: PEFT's rewritten weight + B A
            res = lay.base_layer.weight.detach()
            with torch.no_grad():
                module(m, l, name).weight.copy_((res + ba).t())
    with torch.no_grad():
        out["logits"] = m(x).logits.contiguous()
    return out


def strip_readme(d):
    p = os.path.join(d, "README.md")
    if os.path.exists(p):
        os.remove(p)


def conversion(pm, x, ref):
    d = os.path.join(OUT, "pissa")
    init_dir, conv_dir = os.path.join(d, "init"), os.path.join(d, "converted")
    for p in (init_dir, conv_dir):
        shutil.rmtree(p, ignore_errors=True)
    pm.peft_config["default"].init_lora_weights = True  # PEFT's example: the initial adapter as a plain one
    pm.save_pretrained(init_dir)
    pm.peft_config["default"].init_lora_weights = "pissa"
    g = torch.Generator().manual_seed(7)
    trained = {}
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_" in n:
                p.add_(0.05 * torch.randn(p.shape, generator=g))
                trained[n.replace(".default", "")] = p.detach().clone().contiguous()
        trained_logits = pm(x).logits
    save_file(trained, os.path.join(d, "trained.safetensors"))
    ref["trained_logits"] = trained_logits.contiguous()
    peft_dir = os.path.join(d, "peft_pissa")
    shutil.rmtree(peft_dir, ignore_errors=True)
    pm.save_pretrained(peft_dir)  # PEFT's own form: the trained factors, init_lora_weights "pissa"
    strip_readme(peft_dir)
    pm.save_pretrained(conv_dir, path_initial_model_for_weight_conversion=init_dir)
    strip_readme(init_dir)
    strip_readme(conv_dir)
    plain = PeftModel.from_pretrained(base_model(), conv_dir)
    plain.eval()
    with torch.no_grad():
        ref["converted_logits"] = plain(x).logits.contiguous()
    print("pissa converted: max |logits - trained pissa logits| =", (ref["converted_logits"] - trained_logits).abs().max().item())


def meta(extra):
    import peft, transformers
    m = {"r": str(R), "lora_alpha": str(ALPHA), "targets": ",".join(TARGETS), "peft": peft.__version__,
         "transformers": transformers.__version__, "torch": torch.__version__, "generator": "dev/gen_lora_init_ref.py"}
    m.update(extra)
    return m


def check(d):
    plain = PeftModel.from_pretrained(base_model(), d)
    plain.eval()
    print("loaded", d, "r =", plain.peft_config["default"].r, "init_lora_weights =", plain.peft_config["default"].init_lora_weights)
    lp = os.path.join(d, "..", "logits.safetensors")
    if os.path.exists(lp):
        ours = load_file(lp)["logits"]
        with torch.no_grad():
            theirs = plain(batch()).logits
        print("max |PEFT logits - ours| =", (theirs.reshape(ours.shape) - ours).abs().max().item())


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
        return
    x = batch()
    base = base_model()
    with torch.no_grad():
        l0 = base(x).logits
    pm, ref = pissa_ref(x)
    print("pissa: max |init logits - base logits| =", (ref["logits"] - l0).abs().max().item())
    conversion(pm, x, ref)
    os.makedirs(os.path.join(OUT, "pissa"), exist_ok=True)
    save_file(ref, os.path.join(OUT, "pissa", "ref.safetensors"), metadata=meta({"init": "pissa"}))
    oref = olora_ref(x)
    print("olora: max |init logits - base logits| =", (oref["logits"] - l0).abs().max().item())
    os.makedirs(os.path.join(OUT, "olora"), exist_ok=True)
    save_file(oref, os.path.join(OUT, "olora", "ref.safetensors"), metadata=meta({"init": "olora"}))


if __name__ == "__main__":
    main()
