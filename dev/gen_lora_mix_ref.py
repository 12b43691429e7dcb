#!/usr/bin/env python3
"""Reference for combining several LoRA adapters into one, as Hugging Face PEFT's
LoraModel.add_weighted_adapter combines them, on the tiny GPT-2 of test/ref/gpt2_tiny (loaded with
GPT2LMHeadModel.from_pretrained) and the input_ids of test/ref/gpt2_tiny/ref.safetensors.

The source adapters are the committed PEFT adapters of test/ref/lora_tiny (dev/gen_lora_ref.py).
Each case loads them into one PeftModel in order (PeftModel.from_pretrained for the first,
load_adapter for the rest), calls add_weighted_adapter(adapters, weights, adapter_name="mix",
combination_type=...), makes "mix" the active adapter and evaluates (eval mode; every source has
lora_dropout 0).

Cases (source scalings s_i: c_attn 8/4 = 2, proj_fc 16/4 = 4, rslora 8/sqrt(4) = 4,
all_linear 4/2 = 2):
  linear               c_attn + proj_fc, weights 0.7, -0.4, "linear" (both rank 4)
  linear_rslora_first  rslora + c_attn, weights 0.5, 1.5, "linear" (both rank 4)
  cat                  c_attn + all_linear, weights 1.25, -0.5, "cat" (ranks 4 and 2)

What PEFT does (peft/tuners/lora/model.py, _check_add_weighted_adapter and add_weighted_adapter):
  * The mixed adapter's config is a copy of the FIRST source's config with r = lora_alpha = R,
    alpha_pattern and rank_pattern emptied and target_modules the union of the sources'. Every
    other field is the first source's, use_rslora included. So its scaling is R / R = 1, or
    R / sqrt(R) = sqrt(R) when the first source has use_rslora (linear_rslora_first: R = 4,
    scaling 2), whatever the other sources use.
  * R: linear needs every source to have one rank (the largest of r and rank_pattern's values is
    what is compared) and R is that rank; cat makes R the SUM of the sources' ranks (each source's
    largest), one R for every module of the mix.
  * Every module that any source adapts gets an A [R, in] and a B [out, R], filled from the
    sources that adapt that module (the others are skipped, they contribute nothing):
      linear: with c_i = w_i s_i (the source's scaling, not the mix's),
              A = sum_i sign(c_i) sqrt(|c_i|) A_i,   B = sum_i sqrt(|c_i|) B_i
              (the sign goes on A only; the sum runs over the sources adapting the module, so for
              a module only one source adapts B A = w s B_i A_i; where two adapt it the product
              has cross terms B_i A_j: linear is NOT the weighted sum of the deltas).
      cat:    A = the rows w_i s_i A_i stacked in the sources' order, B = the columns B_i side by
              side in the same order, both from row / column 0; a module that fewer sources adapt
              (here: every c_proj and c_fc, which only all_linear adapts) fills its first
              sum(r_i of those sources) rows of A and columns of B and keeps ZEROS in the rest
              (R stays 6 there: rows 0..1 = -0.5 * 2 * A_all_linear, rows 2..5 zero).
    The mixed delta is then scaling_mix * B A (B A as above; transposed onto the Conv1D weight,
    fan_in_fan_out, as for any adapter). The cat case has scaling_mix = 1 and so gives exactly
    sum_i w_i s_i B_i A_i (a cat whose first source used rsLoRA would get sqrt(R) too, and with
    it sqrt(R) times that sum). linear_rslora_first has
    scaling_mix = 2, so even its c_proj modules (rslora's alone) get 2 * 0.5 * 4 * B A, twice
    what the source's weighted delta would be: PEFT's result, recorded as it is.
  * Arithmetic: float32 tensors. cat: (A_i * w_i) * s_i, two float32 roundings (w_i, a Python
    float, rounded to float32 by the multiply; s_i = 2 here, exact). linear: sqrt(|w_i s_i|) in
    double, rounded to float32 (torch.tensor), times A_i / B_i in float32, summed in the
    sources' order.

Writes test/ref/lora_mix/<case>/:
  mix/adapter_config.json + mix/adapter_model.safetensors   the mixed adapter alone, as PEFT's
      save_pretrained(<case dir>, selected_adapters=["mix"]) writes it (an adapter not named
      "default" goes into a subdirectory named after it; the README PEFT writes is removed)
  ref.safetensors  logits: the model with "mix" active on the batch; merged_logits: the base with
      mix/ merged in (PeftModel.from_pretrained(base, mix/).merge_and_unload()). Metadata:
      sources (the source adapter dirs, comma list, in order), weights (comma list),
      combination_type, r, lora_alpha, use_rslora, scaling (the mix's; one value, since its
      config has no patterns), source_scalings (comma list, in order), adapted (the modules of the
      mix, comma list), peft / torch versions.
PEFT writes the mix's target_modules (a set) in Python's string-hash order, so the script
re-executes itself with PYTHONHASHSEED=0 to make adapter_config.json reproducible byte for byte;
ref.safetensors is written with its metadata keys sorted for the same reason. The script checks that mix/ reloaded on a fresh base gives the in-memory logits, that merged_logits
agree with logits, and that the mix changes the base's logits.

Run from the repo root: /work/venv-torch/bin/python dev/gen_lora_mix_ref.py
"""
import json, os, shutil, sys
import torch
from safetensors.torch import load_file, save
from transformers import GPT2LMHeadModel
from peft import PeftModel
from peft.tuners.lora import LoraLayer

BASE = "test/ref/gpt2_tiny"
SRC = "test/ref/lora_tiny"
OUT = "test/ref/lora_mix"
CASES = {
    "linear": (["c_attn", "proj_fc"], [0.7, -0.4], "linear"),
    "linear_rslora_first": (["rslora", "c_attn"], [0.5, 1.5], "linear"),
    "cat": (["c_attn", "all_linear"], [1.25, -0.5], "cat"),
}
NAMES = "abcdefgh"


def save_sorted(tensors, path, metadata):
    # safetensors writes __metadata__ in its (Rust) hash map's order, which changes from run to
    # run; rewrite the header with the metadata keys sorted (same tensors, same offsets; the header
    # is padded with spaces to a multiple of 8 bytes, as safetensors pads it) so that the file is
    # the same byte for byte on every run
    b = save(tensors, metadata=metadata)
    n = int.from_bytes(b[:8], "little")
    h = json.loads(b[8:8 + n])
    h["__metadata__"] = dict(sorted(h["__metadata__"].items()))
    hb = json.dumps(h, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(len(hb).to_bytes(8, "little") + hb + b[8 + n:])
    assert all(torch.equal(v, tensors[k]) for k, v in load_file(path).items())


def base_model():
    m = GPT2LMHeadModel.from_pretrained(BASE, attn_implementation="eager")
    m.config.use_cache = False
    return m.eval()


def run_case(case, sources, weights, how, x, base_logits):
    torch.manual_seed(0)  # PEFT initialises the new adapter before zeroing it; keep even that fixed
    dirs = [os.path.join(SRC, s) for s in sources]
    model = PeftModel.from_pretrained(base_model(), dirs[0], adapter_name=NAMES[0])
    for i, d in enumerate(dirs[1:], 1):
        model.load_adapter(d, adapter_name=NAMES[i])
    names = list(NAMES[:len(dirs)])
    model.add_weighted_adapter(adapters=names, weights=weights, adapter_name="mix", combination_type=how)
    model.set_adapter("mix")
    model.eval()
    lm = model.base_model
    scal = {}
    src_scal = [None] * len(names)
    for n, mod in lm.model.named_modules():
        if isinstance(mod, LoraLayer) and "mix" in mod.scaling:
            scal[n] = mod.scaling["mix"]
            for i, a in enumerate(names):
                if a in mod.scaling:
                    assert src_scal[i] in (None, mod.scaling[a]), "a source adapter with several scalings"
                    src_scal[i] = mod.scaling[a]
    assert len(set(scal.values())) == 1, f"the mix has several scalings: {scal}"
    with torch.no_grad():
        logits = model(input_ids=x).logits.contiguous()

    d = os.path.join(OUT, case)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    model.save_pretrained(d, selected_adapters=["mix"])
    md = os.path.join(d, "mix")
    assert os.path.exists(os.path.join(md, "adapter_model.safetensors")), "PEFT did not write the mix into mix/"
    for extra in (os.path.join(d, "README.md"), os.path.join(md, "README.md")):
        if os.path.exists(extra):
            os.remove(extra)
    assert sorted(os.listdir(d)) == ["mix"] and sorted(os.listdir(md)) == ["adapter_config.json", "adapter_model.safetensors"]
    cfg = json.load(open(os.path.join(md, "adapter_config.json")))

    m2 = PeftModel.from_pretrained(base_model(), md).eval()
    with torch.no_grad():
        loaded = m2(input_ids=x).logits
        merged = m2.merge_and_unload()(input_ids=x).logits.contiguous()
    diff = (loaded - logits).abs().max().item()
    assert diff < 1e-6, f"{case}: the saved mix reloads differently ({diff:.3e})"
    effect = (logits - base_logits).abs().max().item()
    assert effect > 1e-3, f"{case}: the mix changes the logits by only {effect:.3e}"
    mdiff = (merged - logits).abs().max().item()
    assert mdiff < 1e-4, f"{case}: merged differs from unmerged by {mdiff:.3e}"

    adapted = sorted(n[:-len(".lora_A.weight")] for n in load_file(os.path.join(md, "adapter_model.safetensors")) if n.endswith("lora_A.weight"))
    scaling = next(iter(scal.values()))
    meta = {"format": "pt", "sources": ",".join(dirs), "weights": ",".join(repr(float(w)) for w in weights),
            "combination_type": how, "r": str(cfg["r"]), "lora_alpha": repr(cfg["lora_alpha"]),
            "use_rslora": str(cfg["use_rslora"]).lower(), "scaling": repr(float(scaling)),
            "source_scalings": ",".join(repr(float(s)) for s in src_scal), "adapted": ",".join(adapted),
            "generator": "dev/gen_lora_mix_ref.py, PEFT add_weighted_adapter on test/ref/gpt2_tiny",
            "peft": __import__("peft").__version__, "torch": torch.__version__}
    save_sorted({"logits": logits, "merged_logits": merged}, os.path.join(d, "ref.safetensors"), meta)
    print(f"{case}: {how} of {','.join(sources)} x {weights}: r {cfg['r']} alpha {cfg['lora_alpha']} "
          f"rslora {cfg['use_rslora']} scaling {scaling} (sources {src_scal}); {len(adapted)} modules; "
          f"effect {effect:.3e}, merged vs unmerged {mdiff:.3e}")


def main():
    # PEFT keeps the mix's target_modules as a set of strings and writes it in the set's order,
    # which follows Python's per-process string hashing: fix the hash seed so that
    # adapter_config.json comes out byte for byte the same on every run.
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, PYTHONHASHSEED="0"))
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    torch.use_deterministic_algorithms(True)
    x = load_file(os.path.join(BASE, "ref.safetensors"))["input_ids"].long()
    with torch.no_grad():
        base_logits = base_model()(input_ids=x).logits
    for case, (sources, weights, how) in CASES.items():
        run_case(case, sources, weights, how, x, base_logits)


if __name__ == "__main__":
    main()
