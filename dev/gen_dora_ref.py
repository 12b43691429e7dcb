#!/usr/bin/env python3
"""Reference files for DoRA (PEFT LoraConfig(use_dora=True)) and QDoRA (DoRA over the bitsandbytes
4-bit NF4 base), made by PEFT, transformers, torch and bitsandbytes on CPU with the tiny GPT-2 of
test/ref/gpt2_tiny (dev/gen_gpt2_ref.py), on its reference batch (input_ids / targets [2, 16]).

What PEFT 0.21.2 computes (read in peft/tuners/lora/dora.py and variants.py, DoraLinearLayer and
DoraLinearVariant; every run checks PEFT's logits, gradients and merge against our own writing of
these formulas, own_forward() and dora_merge(), and that the gradients differ without the detach):
  * every adapted layer gets one extra trainable parameter, the magnitude m, 1-D with one entry
    per OUTPUT feature. GPT-2's Conv1D stores W as [in, out] and PEFT adapts it with
    fan_in_fan_out=True, so the norm is taken per row of W transposed to [out, in] (llm.c's
    orientation): n[o] = || W[o, :] + s (B A)[o, :] ||_2, s = lora_alpha / r (use_rslora:
    lora_alpha / sqrt(r)). The 4-bit base (Linear4bit, fan_in_fan_out=False, W already [out, in])
    uses the same rows of dequant(quant(W)).
  * at get_peft_model time m is set to n of the adapter as it is then (B = 0: the row norms of W).
  * n is DETACHED: no gradient flows through the norm into A or B; m, A and B get gradients through
    the scale m / n and the LoRA path only.
  * with lora_dropout 0 (and in eval mode whatever the dropout) the layer computes
        y = (m / n) * (W x + s B A x) + b
    (PEFT forms it as base(x) + (m/n - 1) (W x) + (m/n) s B A x, with the bias taken out of base(x)
    before scaling: the bias is not scaled).
  * merge_and_unload() writes W' = (m / n) * (W + s B A) row by row (rows = output features), the
    bias unchanged.
  * save_pretrained writes the magnitude as `<module>.lora_magnitude_vector` (no ".weight": the
    parameter inside the model is `<module>.lora_magnitude_vector.default.weight`), e.g.
    base_model.model.transformer.h.0.attn.c_attn.lora_magnitude_vector, shape [out]; lora_A / lora_B
    are written as for plain LoRA. adapter_config.json differs from a plain LoRA's only in
    "use_dora": true (and whatever the set itself configures).

Weight decay, as HF Trainer does it (transformers 5.24, Trainer.get_decay_parameter_names: every
parameter not inside an nn.LayerNorm and whose lower-cased name matches none of bias, layernorm,
rmsnorm, (^|.)norm($|.), _norm($|.)): the name `...lora_magnitude_vector.default.weight` matches
none of them, so the magnitude IS decayed although it is 1-D, as lora_A and lora_B are; base biases
trained by bias="lora_only" are not. This script asks that very function for the split (the
metadata key "not_decayed" lists what it leaves out) and builds Trainer's two AdamW groups from it.
LoRA+ (peft.optimizers.create_loraplus_optimizer): lora_A at lr; lora_B and every other 1-D
parameter at lr * ratio, decayed by loraplus_weight_decay when the name is in its decay list
(outside LayerNorm layers and without "bias" in the name), else not; so the magnitude lands in
the lr * ratio group ("groupB") and IS decayed there. The metadata key "groups" lists each group as
(lr, weight_decay, tensors, kinds of tensor).

Writes, for each set, test/ref/dora_tiny/<set>/ (and test/ref/qdora_tiny/<set>/ for the QDoRA sets):
  adapter_config.json + adapter_model.safetensors  the adapter before training, as PEFT's
      save_pretrained writes it, with non-trivial values, drawn in named_parameters order from one
      seeded generator: PEFT's init for A, then B ~ 0.05 N(0, 1), m multiplied by (1 + 0.05 N(0, 1))
      (so m differs from n and every gradient is exercised) and trained base slices (biases)
      + 0.05 N(0, 1)
  ref.safetensors
      logits          [2, 16, 100] of the adapted model in eval mode
      loss            [1] mean cross entropy over the targets (-1 ignored)
      grad.<key>      the gradient of loss for every adapter tensor (<key> as in
                      adapter_model.safetensors: lora_A.weight, lora_B.weight,
                      lora_magnitude_vector, and base_layer.bias where trained)
      grad.wte        the gradient reaching the tied embedding (lm_head plus the input path through
                      every adapted layer), read only, never stepped
      merged_logits   dora_tiny: logits of PeftModel.from_pretrained(base, dir).merge_and_unload();
                      qdora_tiny: logits of the fp32 GPT-2 whose Conv1D weights are
                      dequant(quant(W)) with the adapter merged by the DoRA formula above (what a
                      --qlora --merge writes; dev/gen_qlora_ref.py's definition), checked against
                      PEFT's own merge onto that fp32 model
      train_losses / train_grad_norms  [10] the loss and the gradient norm before clipping of each
                      of 10 AdamW steps
      final.<key>     every trained tensor after the 10 steps
  metadata: the hyperparameters, r, lora_alpha, scaling, use_rslora, bias, the decay split, the
      optimizer groups, versions.
QDoRA sets reuse test/ref/qlora_tiny/base_4bit: the 4-bit base is built exactly as
dev/gen_qlora_ref.py builds it (from_pretrained with BitsAndBytesConfig nf4, double quant, compute
dtype fp32: transformers quantizes the transposed Conv1D weight, [out, in], in 64-blocks along in;
lm_head stays fp32) and checked tensor by tensor against that file; no copy is written.

The 10 steps: torch.optim.AdamW(lr 1e-3, betas (0.9, 0.95), eps 1e-8), weight decay 0.1 on what
Trainer decays (above; LoRA+ set: create_loraplus_optimizer's groups, loraplus_weight_decay 0.1,
ratio 16), clip_grad_norm_(1.0) over every trained tensor, constant LR, the same batch every step,
lora_dropout 0, fp32, base frozen.

Sets (dora_tiny): c_attn (r=4, lora_alpha=8); all_linear (r=2, lora_alpha=4, "all-linear");
rslora_bias (c_attn + both c_proj, r=4, alpha=8, use_rslora: s = 4, bias="lora_only": the biases
of the adapted layers train, undecayed. Caveat: the key third of c_attn's bias, [64:128], has a
zero gradient in exact arithmetic (softmax is invariant to a constant added to every key's score);
its grad.* is rounding noise (~1e-11 here, against 5e-6..6e-3 for the q and v thirds) and its
final.* moves by AdamW steps on that noise (~2e-6 in the 10 steps; the q and v thirds ~1e-2));
loraplus (attn.c_proj + mlp.c_fc, r=4, alpha=8, LoRA+ ratio 16).
Sets (qdora_tiny): c_attn (r=4, alpha=8); all_linear (r=2, alpha=4: c_attn, c_proj, c_fc, every
Linear4bit of the blocks, as dev/gen_qlora_ref.py's all_linear).

Run from the repo root: /work/venv-torch/bin/python dev/gen_dora_ref.py [--sets NAME,...]
(NAME: a dora_tiny set, or qdora:<set>). One PyTorch thread throughout (bitsandbytes' double-quant
offset is a torch.mean, see dev/gen_nf4_ref.py), torch.use_deterministic_algorithms, every draw
seeded (torch.manual_seed(3000 + len(set)) before get_peft_model, the generator for B, m and the
biases seeded with that + 1; QDoRA 4000 + len(set)); bitsandbytes' AVX512-BF16 CPU shortcut
switched off as in dev/gen_qlora_ref.py. Two runs write the same bytes.

Reverse direction: `/work/venv-torch/bin/python dev/gen_dora_ref.py --check-c DIR` loads every
adapter directory under DIR (adapter_config.json + adapter_model.safetensors, and the logits of our
merged model in merged_logits.safetensors next to them, key "logits") with PeftModel.from_pretrained
on the same base (the 4-bit base when base_model_name_or_path names a bitsandbytes checkpoint such
as test/ref/qlora_tiny/base_4bit, test/ref/gpt2_tiny otherwise) and prints the max abs difference
between PEFT's logits and ours; exits 1 above 1e-4 (or when the adapter hardly changes the logits).
`... --check-c DIR --4bit`: every adapter there on the 4-bit base (gpt2_tiny quantized as above,
the bytes of test/ref/qlora_tiny/base_4bit), whatever its base_model_name_or_path says.
The script re-executes itself once with PYTHONHASHSEED=0: PEFT writes the modules "all-linear"
expands to in the order of a Python set of strings, which the hash seed decides.
"""
import json
import os
import struct
import sys
import tempfile

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    # PEFT expands "all-linear" into a set of module names and writes it into adapter_config.json in
    # the set's order, which depends on the string hash seed: fix the seed so the file is the same on
    # every run
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import torch  # noqa: E402

torch.set_num_threads(1)

from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from peft.optimizers import create_loraplus_optimizer  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import GPT2LMHeadModel, Trainer  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BASE = "test/ref/gpt2_tiny"  # relative (run from the repo root): it is recorded in adapter_config.json
BASE_4BIT = "test/ref/qlora_tiny/base_4bit"
OUT = os.path.join("test", "ref", "dora_tiny")
QOUT = os.path.join("test", "ref", "qdora_tiny")
STEPS, LR, BETAS, EPS, WD, CLIP, RATIO = 10, 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0, 16.0
LINEARS = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")

SETS = {
    "c_attn": dict(r=4, lora_alpha=8, target_modules=["c_attn"]),
    "all_linear": dict(r=2, lora_alpha=4, target_modules="all-linear"),
    "rslora_bias": dict(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj"], use_rslora=True, bias="lora_only"),
    "loraplus": dict(r=4, lora_alpha=8, target_modules=["attn.c_proj", "mlp.c_fc"], loraplus=True),
}
QSETS = {
    "c_attn": dict(r=4, lora_alpha=8, target_modules=["c_attn"]),
    "all_linear": dict(r=2, lora_alpha=4, target_modules=["c_attn", "c_proj", "c_fc"]),
}


def base_model():
    m = GPT2LMHeadModel.from_pretrained(BASE, attn_implementation="eager")
    m.config.use_cache = False
    return m


def qbase(path=BASE):
    """The 4-bit base as dev/gen_qlora_ref.py builds it (path: gpt2_tiny, quantized on load, or an
    already quantized checkpoint)."""
    import bitsandbytes as bnb
    from transformers import BitsAndBytesConfig
    qcfg = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch.float32)
    kw = {} if is_4bit_dir(path) else {"quantization_config": qcfg}
    m = GPT2LMHeadModel.from_pretrained(path, device_map="cpu", dtype=torch.float32, attn_implementation="eager", **kw)
    m.config.use_cache = False
    assert isinstance(m.transformer.h[0].attn.c_attn, bnb.nn.Linear4bit)
    for mod in m.modules():  # the fp32 path (dequantize + fp32 linear), see dev/gen_qlora_ref.py
        if isinstance(mod, bnb.nn.Linear4bit):
            mod.support_avx512bf16_for_cpu = False
    return m


def is_4bit_dir(path):
    cfg = os.path.join(path, "config.json")
    return os.path.exists(cfg) and "quantization_config" in json.load(open(cfg))


def check_base_4bit():
    # the 4-bit base built here is byte for byte test/ref/qlora_tiny/base_4bit (reused, not copied)
    ref = load_file(os.path.join(BASE_4BIT, "model.safetensors"))
    with tempfile.TemporaryDirectory() as d:
        qbase().save_pretrained(d)
        ours = load_file(os.path.join(d, "model.safetensors"))
    assert sorted(ours) == sorted(ref), "4-bit base: other tensors than test/ref/qlora_tiny/base_4bit"
    bad = [k for k in ref if ours[k].dtype != ref[k].dtype or not torch.equal(ours[k], ref[k])]
    assert not bad, f"4-bit base differs from test/ref/qlora_tiny/base_4bit in {bad}"


def dequant_fp32_model():
    """The fp32 GPT-2 whose Conv1D weights are bitsandbytes' dequant(quant(W)) (transposed back)."""
    import bitsandbytes.functional as F
    q = qbase()
    f = GPT2LMHeadModel.from_pretrained(BASE, attn_implementation="eager")
    with torch.no_grad():
        for l, blk in enumerate(q.transformer.h):
            for name in LINEARS:
                lin = blk.get_submodule(name)
                W = F.dequantize_4bit(lin.weight.data, lin.weight.quant_state)  # [out, in]
                f.transformer.h[l].get_submodule(name).weight.copy_(W.t())      # Conv1D [in, out]
    return f


def save_st(t, path, meta):
    # save_file, then the header rewritten with the metadata keys sorted (safetensors writes them in
    # a hash map's order, which changes from run to run): the same bytes on every run
    save_file(t, path, metadata=meta)
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    hdr["__metadata__"] = dict(sorted(hdr["__metadata__"].items()))
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
    back = load_file(path)
    assert sorted(back) == sorted(t) and all(torch.equal(back[k], t[k]) for k in t)


def peft_key(n):
    # parameter name inside the PeftModel -> key in adapter_model.safetensors
    return n.replace(".lora_magnitude_vector.default.weight", ".lora_magnitude_vector").replace(".default", "")


def kind(n):
    for k in ("lora_A", "lora_B", "lora_magnitude_vector"):
        if k in n:
            return k
    return "bias" if n.endswith("bias") else n


def make_model(base, spec, seed, fan_in_fan_out):
    torch.manual_seed(seed)
    spec = {k: v for k, v in spec.items() if k != "loraplus"}
    cfg = LoraConfig(use_dora=True, lora_dropout=0.0, bias=spec.pop("bias", "none"), task_type="CAUSAL_LM",
                     fan_in_fan_out=fan_in_fan_out, **spec)
    model = get_peft_model(base, cfg)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            elif "lora_magnitude_vector" in n:
                p.mul_(1 + 0.05 * torch.randn(p.shape, generator=g))
            elif p.requires_grad and "lora_" not in n:
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model


def save_adapter(model, d):
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d)
    if os.path.exists(os.path.join(d, "README.md")):  # our loader never needs it
        os.remove(os.path.join(d, "README.md"))
    return load_file(os.path.join(d, "adapter_model.safetensors"))


def scaling_of(spec):
    return spec["lora_alpha"] / (spec["r"] ** 0.5 if spec.get("use_rslora") else spec["r"])


def dora_merge(f, sd, s):
    """Merge the DoRA adapter of state dict sd (adapter_model.safetensors keys) into the fp32 GPT-2 f,
    our formula: W' = (m / ||W + s B A||_row) * (W + s B A), W as [out, in]; the bias as sd has it."""
    with torch.no_grad():
        for l in range(len(f.transformer.h)):
            for mod in LINEARS:
                key = f"base_model.model.transformer.h.{l}.{mod}."
                if key + "lora_A.weight" not in sd:
                    continue
                conv = f.transformer.h[l].get_submodule(mod)
                V = conv.weight.t() + s * (sd[key + "lora_B.weight"] @ sd[key + "lora_A.weight"])  # [out, in]
                Wm = (sd[key + "lora_magnitude_vector"] / torch.linalg.norm(V, dim=1)).view(-1, 1) * V
                conv.weight.copy_(Wm.t())
                if key + "base_layer.bias" in sd:
                    conv.bias.copy_(sd[key + "base_layer.bias"])
    return f.eval()


def own_forward(f, sd, s, x, y, detach=True):
    """Loss and gradients of the DoRA model written out by hand: every adapted Conv1D of the fp32
    GPT-2 f computes (m / n) * (x W + s x A^T B^T) + b, n = ||W + s B A||_row (W as [out, in]),
    n detached or not."""
    P = {k: v.clone().requires_grad_(True) for k, v in sd.items()}
    for l in range(len(f.transformer.h)):
        for mod in LINEARS:
            key = f"base_model.model.transformer.h.{l}.{mod}."
            if key + "lora_A.weight" not in P:
                continue
            conv = f.transformer.h[l].get_submodule(mod)
            W = conv.weight.detach().t()
            A, B, m = P[key + "lora_A.weight"], P[key + "lora_B.weight"], P[key + "lora_magnitude_vector"]
            b = P.get(key + "base_layer.bias", conv.bias.detach())

            def fwd(h, W=W, A=A, B=B, m=m, b=b):
                n = torch.linalg.norm(W + s * B @ A, dim=1)
                n = n.detach() if detach else n
                return (m / n) * (h @ W.t() + s * (h @ A.t()) @ B.t()) + b
            conv.forward = fwd
    logits = f.eval()(input_ids=x).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-1)
    loss.backward()
    return logits.detach(), {k: p.grad for k, p in P.items()}


def rel_err(a, b):
    return max(((a[k] - b[k]).abs().max() / b[k].abs().max()).item() for k in b)


def run_set(name, spec, x, y, quant):
    seed = (4000 if quant else 3000) + len(name)
    model = make_model(qbase() if quant else base_model(), spec, seed, not quant)
    d = os.path.join(QOUT if quant else OUT, name)
    saved = save_adapter(model, d)
    cfg = json.load(open(os.path.join(d, "adapter_config.json")))
    assert cfg["use_dora"] is True and cfg["fan_in_fan_out"] is (not quant)
    s = scaling_of(spec)
    V = model.config.vocab_size
    model.eval()
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert sorted(peft_key(n) for n, _ in trained) == sorted(saved), "trained tensors vs the saved adapter's keys"
    for n, p in model.named_parameters():
        if "lora_magnitude_vector" in n:
            assert p.ndim == 1 and p.requires_grad
    wte = model.base_model.model.transformer.wte.weight
    wte.requires_grad_(True)  # only to read the gradient reaching the embedding; never stepped

    def loss_fn():
        logits = model(input_ids=x).logits
        return logits, torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1), ignore_index=-1)

    logits, loss = loss_fn()
    loss.backward()
    t = {"logits": logits.detach().contiguous(), "loss": loss.detach().reshape(1), "grad.wte": wte.grad.detach().clone()}
    for n, p in trained:
        t["grad." + peft_key(n)] = p.grad.detach().clone().contiguous()
    wte.requires_grad_(False)
    wte.grad = None
    grads = {k[5:]: v for k, v in t.items() if k.startswith("grad.") and k != "grad.wte"}
    own_logits, own = own_forward(dequant_fp32_model() if quant else base_model(), saved, s, x, y)
    _, undetached = own_forward(dequant_fp32_model() if quant else base_model(), saved, s, x, y, detach=False)
    d_logits, d_grads, d_undet = (own_logits - t["logits"]).abs().max().item(), rel_err(own, grads), rel_err(undetached, grads)
    assert d_logits < 1e-5 and d_grads < 1e-5 and d_undet > 1e-2, \
        f"{name}: PEFT vs (m/n)(Wx + sBAx) + b: logits {d_logits}, gradients {d_grads}, {d_undet} with n not detached"

    # merged_logits (the adapter before training)
    if quant:
        ours = dora_merge(dequant_fp32_model(), saved, s)
        peft_merged = PeftModel.from_pretrained(dequant_fp32_model(), d).merge_and_unload().eval()
    else:
        ours = dora_merge(base_model(), saved, s)
        peft_merged = PeftModel.from_pretrained(base_model(), d).merge_and_unload().eval()
    with torch.no_grad():
        t["merged_logits"] = (ours if quant else peft_merged)(input_ids=x).logits.contiguous()
        other = (peft_merged if quant else ours)(input_ids=x).logits
    d_formula = (t["merged_logits"] - other).abs().max().item()
    d_unmerged = (t["merged_logits"] - t["logits"]).abs().max().item()
    assert d_formula < 1e-5, f"{name}: PEFT's DoRA merge and W' = m/||W+sBA|| (W+sBA) differ by {d_formula}"
    assert d_unmerged < 1e-4, f"{name}: merged vs unmerged logits differ by {d_unmerged}"

    # optimizer: HF Trainer's decay split, or LoRA+ groups
    decay = set(Trainer.get_decay_parameter_names(None, model))
    not_decayed = [peft_key(n) for n, _ in trained if n not in decay]
    assert all(kind(k) == "bias" for k in not_decayed), not_decayed  # the magnitude is decayed
    if spec.get("loraplus"):
        opt = create_loraplus_optimizer(model, torch.optim.AdamW, lr=LR, loraplus_lr_ratio=RATIO,
                                        loraplus_weight_decay=WD, betas=BETAS, eps=EPS)
    else:
        opt = torch.optim.AdamW([{"params": [p for n, p in trained if n in decay], "weight_decay": WD},
                                 {"params": [p for n, p in trained if n not in decay], "weight_decay": 0.0}],
                                lr=LR, betas=BETAS, eps=EPS)
    names = {id(p): n for n, p in trained}
    groups = [(g_["lr"], g_["weight_decay"], len(g_["params"]), sorted({kind(names[id(p)]) for p in g_["params"]}))
              for g_ in opt.param_groups]
    assert sum(gr[2] for gr in groups) == len(trained)
    for g_ in opt.param_groups:
        for p in g_["params"]:
            if kind(names[id(p)]) == "lora_magnitude_vector":
                assert g_["weight_decay"] == WD and g_["lr"] == (LR * RATIO if spec.get("loraplus") else LR)

    every = [p for _, p in trained]
    losses, norms = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        _, l_ = loss_fn()
        l_.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(every, CLIP).item())
        opt.step()
        losses.append(l_.item())
    t["train_losses"] = torch.tensor(losses, dtype=torch.float32)
    t["train_grad_norms"] = torch.tensor(norms, dtype=torch.float32)
    for n, p in trained:
        t["final." + peft_key(n)] = p.detach().clone().contiguous()

    n_trainable = sum(p.numel() for n, p in trained if "lora_" in n)
    meta = {"format": "pt", "steps": str(STEPS), "lr": str(LR), "beta1": str(BETAS[0]), "beta2": str(BETAS[1]),
            "eps": str(EPS), "weight_decay": str(WD), "grad_clip": str(CLIP), "use_dora": "true",
            "r": str(spec["r"]), "lora_alpha": str(spec["lora_alpha"]), "scaling": str(s),
            "use_rslora": str(bool(spec.get("use_rslora"))).lower(), "bias": spec.get("bias", "none"),
            "n_trainable": str(n_trainable), "n_extra": str(sum(p.numel() for n, p in trained if "lora_" not in n)),
            "n_magnitude": str(sum(p.numel() for n, p in trained if "lora_magnitude_vector" in n)),
            "decay": "HF Trainer.get_decay_parameter_names (lora_A, lora_B, lora_magnitude_vector decayed)",
            "not_decayed": ",".join(not_decayed), "groups": str(groups),
            "optimizer": "peft create_loraplus_optimizer(AdamW)" if spec.get("loraplus") else "AdamW, Trainer's two groups",
            "generator": "dev/gen_dora_ref.py: PEFT use_dora on " + ("transformers load_in_4bit nf4 double-quant fp32 compute, CPU" if quant else BASE),
            "peft": __import__("peft").__version__, "transformers": __import__("transformers").__version__,
            "torch": torch.__version__}
    if spec.get("loraplus"):
        meta["lora_plus_ratio"] = str(RATIO)
    if quant:
        import bitsandbytes as bnb
        meta["bitsandbytes"] = bnb.__version__
    save_st(t, os.path.join(d, "ref.safetensors"), meta)
    print(f"{'qdora' if quant else 'dora'} {name}: loss {loss.item():.6f} trainable {n_trainable} + {meta['n_extra']} base; "
          f"losses {losses[0]:.5f}..{losses[-1]:.5f}; groups (lr, wd, tensors, kinds) {groups}; "
          f"PEFT vs own forward: logits {d_logits:.2e}, gradients {d_grads:.2e} (rel; n not detached: {d_undet:.2e}); "
          f"merge: PEFT vs formula {d_formula:.2e}, merged vs unmerged {d_unmerged:.2e}")


def check_c(export_dir, force_4bit=False):
    worst = 0.0
    x = load_file(os.path.join(BASE, "ref.safetensors"))["input_ids"].long()
    for name in sorted(os.listdir(export_dir)):
        d = os.path.join(export_dir, name)
        if not os.path.exists(os.path.join(d, "adapter_config.json")):
            continue
        cfg = json.load(open(os.path.join(d, "adapter_config.json")))
        bp = cfg.get("base_model_name_or_path") or BASE
        quant = force_4bit or is_4bit_dir(bp)
        mk = (lambda: qbase(BASE if force_4bit else bp)) if quant else base_model
        model = PeftModel.from_pretrained(mk(), d).eval()
        with torch.no_grad():
            logits = model(input_ids=x).logits
            effect = (mk().eval()(input_ids=x).logits - logits).abs().max().item()
        ours = load_file(os.path.join(d, "merged_logits.safetensors"))["logits"]
        diff = (logits - ours).abs().max().item()
        if effect < 1e-3:  # PEFT must really have applied the adapter
            print(f"{name}: the adapter changes the logits by only {effect:.3e}")
            diff = float("inf")
        worst = max(worst, diff)
        print(f"{name}: PEFT-loaded C adapter vs C merged model: max abs logit diff {diff:.3e} (adapter effect "
              f"{effect:.3e}; base {'4-bit ' if quant else ''}{bp}, use_dora {cfg.get('use_dora')}, targets "
              f"{cfg['target_modules']}, r {cfg['r']}, use_rslora {cfg.get('use_rslora')}, bias {cfg.get('bias')})")
    print(f"worst {worst:.3e}")
    return 0 if worst < 1e-4 else 1


def main():
    args = sys.argv[1:]
    if args[:1] == ["--check-c"] and len(args) in (2, 3) and args[2:] in ([], ["--4bit"]):
        d = os.path.abspath(args[1])
        os.chdir(ROOT)
        return check_c(d, force_4bit=len(args) == 3)
    os.chdir(ROOT)
    torch.use_deterministic_algorithms(True)
    r = load_file(os.path.join(BASE, "ref.safetensors"))
    x, y = r["input_ids"].long(), r["targets"].long()
    only = args[1].split(",") if len(args) == 2 and args[0] == "--sets" else None
    for name, spec in SETS.items():
        if only is None or name in only:
            run_set(name, spec, x, y, quant=False)
    todo = [n for n in QSETS if only is None or "qdora:" + n in only]
    if todo:
        check_base_4bit()
    for name in todo:
        run_set(name, QSETS[name], x, y, quant=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
