#!/usr/bin/env python3
"""Reference files for llmc/ops/nf4.c, produced by bitsandbytes (CPU backend) and transformers.

Writes test/ref/nf4/:
  nf4_ref.safetensors   quantize_4bit(quant_type="nf4", blocksize=64) of several inputs with
                        compress_statistics False and True: packed bytes, absmax, nested absmax
                        codes / scales / offset, the decoded absmax and dequantize_4bit output;
                        bitsandbytes' NF4 table and dynamic 8-bit map; torch.mean() of a few
                        vectors (bitsandbytes' double-quantization offset is a torch.mean).
  hf_fp32/              a tiny random GPT-2 (transformers save_pretrained, fp32)
  hf_4bit/              the same model loaded with BitsAndBytesConfig(load_in_4bit, nf4,
                        double quant) on CPU and saved: the keys a 4-bit checkpoint holds
  hf_4bit_dequant.safetensors   bitsandbytes' dequantization of one of its weights

Run with the reference venv:  /opt/refenv/bin/python dev/gen_nf4_ref.py
Everything runs on one CPU thread: PyTorch's mean (the double-quant offset) depends on the
thread count for inputs of 32768 or more blocks, and the C code reproduces the one-thread order.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch

torch.set_num_threads(1)

import bitsandbytes as bnb  # noqa: E402
import bitsandbytes.functional as F  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "ref", "nf4")


def quantize_case(name, x, tensors, store_input_dtype=torch.float32, dequant_rows=None):
    """x: fp32 tensor (any shape). Adds the case's reference tensors to `tensors`."""
    x = x.contiguous()
    flat_n = x.numel()
    if store_input_dtype == torch.float32:
        tensors[f"{name}.input"] = x.clone()
    else:
        xs = x.to(store_input_dtype)
        assert torch.equal(xs.float(), x), "input must be exactly representable in its storage dtype"
        tensors[f"{name}.input"] = xs
    p, s = F.quantize_4bit(x, blocksize=64, quant_type="nf4", compress_statistics=False)
    pd, sd = F.quantize_4bit(x, blocksize=64, quant_type="nf4", compress_statistics=True)
    assert torch.equal(p, pd), "the packed codes do not depend on compress_statistics"
    assert p.numel() == (flat_n + 1) // 2
    y = F.dequantize_4bit(p, s)
    yd = F.dequantize_4bit(pd, sd)
    assert y.dtype == torch.float32 and yd.dtype == torch.float32
    # the fp32 absmax that dequantize_4bit uses for the nested form
    absmax_dq = F.dequantize_blockwise(sd.absmax, sd.state2) + sd.offset
    rows = y.reshape(y.shape[0], -1) if y.dim() > 1 else y.reshape(1, -1)
    rows_d = yd.reshape(rows.shape)
    if dequant_rows is not None:
        rows, rows_d = rows[:dequant_rows], rows_d[:dequant_rows]
    tensors[f"{name}.packed"] = p.reshape(-1).clone()
    tensors[f"{name}.absmax"] = s.absmax.clone()
    tensors[f"{name}.dequant"] = rows.reshape(-1).clone()
    tensors[f"{name}.dq.absmax_q"] = sd.absmax.clone()
    tensors[f"{name}.dq.nested_absmax"] = sd.state2.absmax.clone()
    tensors[f"{name}.dq.offset"] = sd.offset.reshape(1).clone()
    tensors[f"{name}.dq.absmax"] = absmax_dq.clone()
    tensors[f"{name}.dq.dequant"] = rows_d.reshape(-1).clone()
    assert sd.state2.blocksize == 256 and sd.blocksize == 64
    assert torch.equal(sd.state2.code, F.create_dynamic_map())


def formula_vector(n, scale, shift):
    """x[i] = (((i * 2654435761) mod 100003) / 100003 - shift) * s(i / 64), with a per-64-block
    scale s(b) = ((b * 7919) mod 101 + 1) * scale, every step an fp32 op (the C test recomputes it)."""
    i = np.arange(n, dtype=np.uint64)
    k = ((i * np.uint64(2654435761)) % np.uint64(100003)).astype(np.float32)
    v = k / np.float32(100003)
    b = ((i // np.uint64(64)) * np.uint64(7919)) % np.uint64(101) + np.uint64(1)
    s = b.astype(np.float32) * np.float32(scale)
    return ((v - np.float32(shift)) * s).astype(np.float32)


def edge_input(gen):
    blocks = []
    blocks.append(torch.zeros(64))                                    # all-zero block
    blocks.append(torch.full((64,), 0.5))                             # constant blocks
    blocks.append(torch.full((64,), -3.0))
    blocks.append(torch.randn(64, generator=gen) * 1e30)              # huge magnitudes
    blocks.append(torch.randn(64, generator=gen) * 1e-30)             # tiny
    blocks.append(torch.randn(64, generator=gen) * 1e-40)             # fp32 subnormals
    code = F.get_4bit_type("nf4", device="cpu")
    mids = (code[:-1] + code[1:]) / 2
    # values exactly on the midpoints (absmax 1 and absmax 2: both scale exactly), and their
    # fp32 neighbours on either side
    for scale in (1.0, 2.0):
        b = torch.zeros(64)
        b[0] = scale
        m = mids * scale
        b[1:16] = m
        b[16:31] = torch.nextafter(m, torch.full_like(m, float("inf")))
        b[31:46] = torch.nextafter(m, torch.full_like(m, float("-inf")))
        b[46] = -scale
        b[47:64] = torch.randn(17, generator=gen) * scale * 0.3
        blocks.append(b)
    b = torch.randn(64, generator=gen) * 1e-3                          # one dominant element
    b[17] = -5.0
    blocks.append(b)
    b = torch.randn(64, generator=gen)                                 # +-absmax both present
    b[3], b[40] = 2.75, -2.75
    blocks.append(b)
    blocks.append(torch.randn(64, generator=gen) * 3.3)
    blocks.append(torch.randn(37, generator=gen) * 0.1)               # partial, odd length
    return torch.cat(blocks)


def main():
    os.makedirs(OUT, exist_ok=True)
    gen = torch.Generator().manual_seed(1234)
    t = {}
    t["nf4_code"] = F.get_4bit_type("nf4", device="cpu").clone()
    t["dynamic_map"] = F.create_dynamic_map().clone()

    quantize_case("normal", torch.randn(40, 64, generator=gen) * 0.02, t)
    quantize_case("edge", edge_input(gen), t)
    for n in (1, 63, 65, 1000):
        quantize_case(f"len{n}", torch.randn(n, generator=gen) * 0.05, t)
    # a real-shaped slice (128 rows of a 768-wide GPT-2 matrix): 1536 blocks, 6 nested blocks.
    # Stored as bf16 to keep the file small (bf16 values are exact in fp32); only the first 16
    # rows of the dequantized output are stored, the decoded absmax covers the rest.
    w = (torch.randn(128, 768, generator=gen) * 0.02).to(torch.bfloat16).float()
    quantize_case("real", w, t, store_input_dtype=torch.bfloat16, dequant_rows=16)

    # torch.mean of fp32 vectors of assorted lengths (vector / scalar / multi-level paths)
    for n in (1, 3, 7, 8, 9, 15, 16, 31, 33, 100, 257, 1000, 4099, 9001):
        v = torch.randn(n, generator=gen).abs() * 0.05
        t[f"mean.{n}.input"] = v
        t[f"mean.{n}.mean"] = v.mean().reshape(1)

    # PyTorch's mean with several threads (bitsandbytes' offset for tensors of >= 32768 blocks)
    # and a GPT-2 c_fc-sized quantization (3072 x 768: 36864 blocks) under 1, 2, 4 and 16 threads.
    # The inputs come from a formula the C test recomputes exactly, so only results are stored.
    for n in (40000, 65537, 200001):
        v = formula_vector(n, 0.001, 0.0)
        means = []
        for threads in (1, 2, 3, 4, 16):
            torch.set_num_threads(threads)
            means.append(torch.from_numpy(v).mean().item())
        torch.set_num_threads(1)
        t[f"mtmean.{n}"] = torch.tensor(means, dtype=torch.float32)
        print(f"torch.mean of {n} values with 1, 2, 3, 4, 16 threads:", means)
    w = torch.from_numpy(formula_vector(3072 * 768, 0.001, 0.5)).reshape(3072, 768)
    offsets = []
    for threads in (1, 2, 4, 16):
        torch.set_num_threads(threads)
        _, sd = F.quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=True)
        offsets.append(sd.offset.item())
        if threads == 2:
            t["big.t2.absmax_q"] = sd.absmax.clone()
            t["big.t2.nested_absmax"] = sd.state2.absmax.clone()
    torch.set_num_threads(1)
    t["big.offsets"] = torch.tensor(offsets, dtype=torch.float32)
    print("c_fc-sized offsets for 1, 2, 4, 16 PyTorch threads:", offsets)

    t = {k: v.contiguous() for k, v in t.items()}
    save_file(t, os.path.join(OUT, "nf4_ref.safetensors"), metadata={
        "generator": "dev/gen_nf4_ref.py",
        "bitsandbytes": bnb.__version__,
        "torch": torch.__version__,
    })

    gen_hf()
    print("bitsandbytes", bnb.__version__, "torch", torch.__version__)
    total = 0
    for root, _, files in os.walk(OUT):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    print(f"wrote {OUT} ({total / 1024:.0f} KiB)")


def gen_hf():
    import transformers
    from transformers import BitsAndBytesConfig, GPT2Config, GPT2LMHeadModel

    fp32_dir = os.path.join(OUT, "hf_fp32")
    q_dir = os.path.join(OUT, "hf_4bit")
    for d in (fp32_dir, q_dir):
        shutil.rmtree(d, ignore_errors=True)
    torch.manual_seed(4321)
    cfg = GPT2Config(n_layer=1, n_head=2, n_embd=64, vocab_size=64, n_positions=16,
                     bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg)
    model.save_pretrained(fp32_dir)
    qcfg = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                              bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch.float32)
    q = GPT2LMHeadModel.from_pretrained(fp32_dir, quantization_config=qcfg, device_map="cpu",
                                        dtype=torch.float32)
    lin = q.transformer.h[0].attn.c_attn
    assert isinstance(lin, bnb.nn.Linear4bit), type(lin)
    q.save_pretrained(q_dir)
    for d in (fp32_dir, q_dir):  # keep only what the tests read
        for f in os.listdir(d):
            if f not in ("model.safetensors", "config.json"):
                os.remove(os.path.join(d, f))
    deq = F.dequantize_4bit(lin.weight.data, lin.weight.quant_state)
    save_file({"transformer.h.0.attn.c_attn.weight": deq.contiguous()},
              os.path.join(OUT, "hf_4bit_dequant.safetensors"),
              metadata={"transformers": transformers.__version__, "bitsandbytes": bnb.__version__})
    # print the packed quant_state blob of one weight for the record
    from safetensors import safe_open
    with safe_open(os.path.join(q_dir, "model.safetensors"), "pt") as f:
        blob = f.get_tensor("transformer.h.0.attn.c_attn.weight.quant_state.bitsandbytes__nf4")
        print("quant_state:", bytes(blob.tolist()).decode())
        print("4-bit checkpoint keys of c_attn:",
              sorted(k for k in f.keys() if "h.0.attn.c_attn" in k))


if __name__ == "__main__":
    sys.exit(main())
