#!/usr/bin/env python3
"""Reference files for the file-format tests (test/test_safetensors.c, test/test_model_io.c).

Everything here is written by software nobody on this project wrote (PyTorch, safetensors,
transformers), so the C readers are checked against independent producers:

  test/ref/hf_formats/
    st_py.safetensors        many dtypes / special values / empty and scalar tensors, written
                             by safetensors.torch.save_file, with non-ASCII metadata
    st_py_expect.json        per tensor: dtype, shape and the exact values (floats as fp32 bit
                             patterns after torch's own widening, ints as ints)
    hf_tiny/                 GPT2LMHeadModel.save_pretrained of a tiny random GPT-2 (fp32)
    hf_hub/                  same weights in the Hub's original layout: no "transformer."
                             prefix, h.N.attn.bias causal-mask buffers, a masked_bias, config
                             with n_ctx instead of n_positions
    hf_bf16/                 save_pretrained of the model cast to bfloat16
    hf_f16_sharded/          save_pretrained of the model cast to float16, sharded (index.json)
    expect_f32.bin           the fp32 weights as an llm.c v3 checkpoint written here in Python
                             (Conv1D transposed with torch, vocab padded to 128)
    expect_bf16.bin          the bf16 weights as an llm.c v5 checkpoint (torch's bf16 bits)
    expect_f16.bin           the fp16 weights widened by torch, as llm.c v3

Run with the reference venv:  /opt/refenv/bin/python dev/gen_hf_formats.py
"""
import json
import os
import shutil
import struct

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "ref", "hf_formats")
OUT = os.path.normpath(OUT)

V, T, C, L, NH = 100, 64, 32, 2, 4


def f32_bits(t):
    return [int(x) for x in t.to(torch.float32).contiguous().view(torch.int32).flatten().tolist()]


def gen_st_py():
    g = torch.Generator().manual_seed(7)
    tensors = {}
    tensors["f32_mat"] = torch.randn(3, 5, generator=g)
    tensors["f32_special"] = torch.tensor([0.0, -0.0, 1.0, -2.5, float("inf"), float("-inf"),
                                           3.4028234663852886e38, 1.401298464324817e-45, 1.1754943508222875e-38])
    tensors["f64_vec"] = torch.tensor([1.0 / 3.0, -1e-300, 1e300, 2.0 ** -149, 0.1], dtype=torch.float64)
    # every 97th fp16 bit pattern plus the edge cases (NaNs left out: payload rules differ)
    pats = list(range(0, 65536, 97)) + [0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x8001, 0x3C00]
    pats = [p for p in pats if not ((p & 0x7C00) == 0x7C00 and (p & 0x3FF) != 0)]
    tensors["f16_patterns"] = torch.tensor(np.array(pats, dtype=np.uint16).view(np.float16))
    bpats = list(range(0, 65536, 101)) + [0x0000, 0x8000, 0x0001, 0x7F7F, 0x7F80, 0xFF80, 0x3F80]
    bpats = [p for p in bpats if not ((p & 0x7F80) == 0x7F80 and (p & 0x7F) != 0)]
    tensors["bf16_patterns"] = torch.tensor(np.array(bpats, dtype=np.uint16)).view(torch.bfloat16)
    # fp32 values and torch's own narrowing of them: checks our fp32 -> bf16 / fp16 rounding,
    # with exact ties, values near overflow, subnormal results and NaN
    src = torch.randn(600, generator=g) * torch.exp(torch.randn(600, generator=g) * 4)
    ties = torch.tensor(np.array([0x3F808000, 0x3F818000, 0xBF808000, 0x3F800001, 0x7F7FFFFF, 0x7F7F8000,
                                  0x477FF000, 0x477FEFFF, 0x38800000, 0x387FFFFF, 0x33000000, 0x33000001,
                                  0x33800000, 0x35800000, 0x7FC00000, 0x00000001, 0x80000000],
                                 dtype=np.uint32).view(np.float32))
    sub16 = (torch.rand(200, generator=g) - 0.5) * 2 ** -12  # lands in fp16's subnormal range
    src = torch.cat([src, ties, sub16])
    tensors["f32_src"] = src
    tensors["f32_src_as_bf16"] = src.to(torch.bfloat16)
    tensors["f32_src_as_f16"] = src.to(torch.float16)
    tensors["i64_vec"] = torch.tensor([0, -1, 2147483647, -2147483648, 42], dtype=torch.int64)
    tensors["i64_big"] = torch.tensor([2 ** 40], dtype=torch.int64)
    tensors["i32_mat"] = torch.arange(-6, 6, dtype=torch.int32).reshape(3, 4)
    tensors["i16_vec"] = torch.tensor([-32768, 32767, 0, 5], dtype=torch.int16)
    tensors["i8_vec"] = torch.tensor([-128, 127, 3], dtype=torch.int8)
    tensors["u8_vec"] = torch.tensor([0, 255, 17], dtype=torch.uint8)
    tensors["bool_vec"] = torch.tensor([True, False, True])
    tensors["empty"] = torch.zeros(0, 3)
    tensors["scalar"] = torch.tensor(1.5)
    meta = {"format": "pt", "note": "h\u00e9llo \u2713 \U0001F600"}
    save_file(tensors, os.path.join(OUT, "st_py.safetensors"), metadata=meta)

    expect = {"__metadata__": meta}
    dtypes = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
              torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
              torch.uint8: "U8", torch.bool: "BOOL"}
    for k, t in tensors.items():
        e = {"dtype": dtypes[t.dtype], "shape": list(t.shape)}
        if t.dtype.is_floating_point:
            e["f32_bits"] = f32_bits(t)  # torch's widening (or narrowing, for F64) to fp32
        else:
            e["ints"] = [int(x) for x in t.flatten().tolist()]
        expect[k] = e
    with open(os.path.join(OUT, "st_py_expect.json"), "w") as f:
        json.dump(expect, f, ensure_ascii=True)  # \uXXXX escapes incl. a surrogate pair


def llmc_bin(path, sd, version):
    """llm.c checkpoint from an HF state dict (keys with 'transformer.' prefix)."""
    Vp = ((V + 127) // 128) * 128
    dt = torch.float32 if version == 3 else torch.bfloat16

    def g(k):
        return sd["transformer." + k].to(dt)

    wte = torch.zeros(Vp, C, dtype=dt)
    wte[:V] = g("wte.weight")
    tensors = [wte, g("wpe.weight")]
    per_layer = [("ln_1.weight", False), ("ln_1.bias", False), ("attn.c_attn.weight", True),
                 ("attn.c_attn.bias", False), ("attn.c_proj.weight", True), ("attn.c_proj.bias", False),
                 ("ln_2.weight", False), ("ln_2.bias", False), ("mlp.c_fc.weight", True),
                 ("mlp.c_fc.bias", False), ("mlp.c_proj.weight", True), ("mlp.c_proj.bias", False)]
    for name, transpose in per_layer:
        ts = [g(f"h.{l}.{name}") for l in range(L)]
        if transpose:
            ts = [t.t().contiguous() for t in ts]  # HF Conv1D [in, out] -> llm.c [out, in]
        tensors.append(torch.stack(ts))
    tensors += [g("ln_f.weight"), g("ln_f.bias")]
    header = np.zeros(256, dtype=np.int32)
    header[:8] = [20240326, version, T, V, L, NH, C, Vp]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for t in tensors:
            t = t.contiguous()
            if version == 3:
                f.write(t.numpy().astype("<f4").tobytes())
            else:
                f.write(t.view(torch.int16).numpy().astype("<i2").tobytes())


def gen_models():
    torch.manual_seed(1234)
    cfg = GPT2Config(vocab_size=V, n_positions=T, n_embd=C, n_layer=L, n_head=NH,
                     bos_token_id=V - 1, eos_token_id=V - 1)
    model = GPT2LMHeadModel(cfg).eval()
    # default init leaves layernorms at 1/0 and biases at 0: randomize everything so that a
    # swapped or transposed tensor cannot go unnoticed
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.1 + (1.0 if name.endswith("ln_1.weight") or name.endswith("ln_2.weight")
                                                 or name.endswith("ln_f.weight") else 0.0))
    d = os.path.join(OUT, "hf_tiny")
    model.save_pretrained(d)
    sd = {k: v.clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    llmc_bin(os.path.join(OUT, "expect_f32.bin"), sd, 3)

    # the Hub's original layout: no prefix, causal-mask buffers, n_ctx
    hub = {k[len("transformer."):]: v.contiguous() for k, v in sd.items()}
    for l in range(L):
        hub[f"h.{l}.attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    hub["h.0.attn.masked_bias"] = torch.tensor(-1e4)
    hd = os.path.join(OUT, "hf_hub")
    os.makedirs(hd, exist_ok=True)
    save_file(hub, os.path.join(hd, "model.safetensors"), metadata={"format": "pt"})
    hub_cfg = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
               "n_ctx": T, "n_embd": C, "n_head": NH, "n_layer": L, "vocab_size": V,
               "layer_norm_epsilon": 1e-05, "resid_pdrop": 0.1}
    with open(os.path.join(hd, "config.json"), "w") as f:
        json.dump(hub_cfg, f, indent=2)

    mb = GPT2LMHeadModel(cfg).eval()
    mb.load_state_dict(model.state_dict())
    mb = mb.to(torch.bfloat16)
    mb.save_pretrained(os.path.join(OUT, "hf_bf16"))
    llmc_bin(os.path.join(OUT, "expect_bf16.bin"), {k: v for k, v in mb.state_dict().items()}, 5)

    mh = GPT2LMHeadModel(cfg).eval()
    mh.load_state_dict(model.state_dict())
    mh = mh.to(torch.float16)
    mh.save_pretrained(os.path.join(OUT, "hf_f16_sharded"), max_shard_size="40KB")
    llmc_bin(os.path.join(OUT, "expect_f16.bin"), {k: v.to(torch.float32) for k, v in mh.state_dict().items()}, 3)
    for sub in ["hf_tiny", "hf_bf16", "hf_f16_sharded"]:  # not needed by the tests
        p = os.path.join(OUT, sub, "generation_config.json")
        if os.path.exists(p):
            os.remove(p)
    assert os.path.exists(os.path.join(OUT, "hf_f16_sharded", "model.safetensors.index.json")), "expected a sharded save"


if __name__ == "__main__":
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    gen_st_py()
    gen_models()
    total = 0
    for root, _, files in os.walk(OUT):
        for fn in files:
            total += os.path.getsize(os.path.join(root, fn))
    print(f"wrote {OUT} ({total / 1024:.0f} KiB)")
