#!/usr/bin/env python3
"""Checks that a model directory written by our model_save_hf loads in transformers.

test/test_model_io.c loads test/ref/hf_formats/hf_tiny (saved by transformers), writes it back with
model_save_hf to $BUILD/test-tmp/test_model_io/hf_saved, and leaves it there. This script loads
that directory with GPT2LMHeadModel.from_pretrained and requires:
  - no missing / unexpected / mismatched keys and no warnings about the config or the weights,
  - every parameter equal (bit for bit) to the original transformers model's,
  - identical logits for a random batch (same weights, same code: exact equality),
  - lm_head tied to wte.
It also opens $BUILD/test-tmp/test_safetensors/written.safetensors (several dtypes, a scalar, an
empty tensor, custom metadata; written by test_safetensors.c) with the Python safetensors library
and checks its contents.
Run after `make test` (or after running build/cpu/test/test_model_io):
  /opt/refenv/bin/python dev/check_hf_saved.py [dir]
"""
import logging
import os
import sys
import warnings

import torch
from transformers import GPT2LMHeadModel
from transformers.utils import logging as hf_logging

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
saved = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "test-tmp", "test_model_io", "hf_saved")
orig = os.path.join(ROOT, "test", "ref", "hf_formats", "hf_tiny")


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


def check_st_writer():
    from safetensors import safe_open
    p = os.path.join(ROOT, "build", "test-tmp", "test_safetensors", "written.safetensors")
    with safe_open(p, "pt") as f:
        meta = f.metadata()
        assert meta == {"format": "pt", "who": 'test "quoted"'}, meta
        a, b, s, z, filled = (f.get_tensor(k) for k in ("a", "b.bf16", "scalar", "zero", "filled"))
    assert a.dtype == torch.float32 and a.shape == (2, 3) and a.flatten().tolist()[:5] == [1.0, -2.0, 3.5, 0.0, -0.0], a
    assert b.dtype == torch.bfloat16 and b.float().tolist()[:2] == [1.0, -2.0] and torch.isinf(b[2]), b
    assert s.shape == () and s.item() == 3.5, s
    assert z.shape == (0, 5), z.shape
    assert filled.dtype == torch.int32 and torch.equal(filled, torch.arange(7, 7 + filled.numel(), dtype=torch.int32))
    print(f"OK: Python safetensors reads {p} (5 tensors, metadata) as written")


def main():
    check_st_writer()
    cap = Capture()
    hf_logging.get_logger().addHandler(cap)  # the "transformers" root logger
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        model, info = GPT2LMHeadModel.from_pretrained(saved, output_loading_info=True)
    model.eval()
    ref = GPT2LMHeadModel.from_pretrained(orig).eval()
    problems = []
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(k):
            problems.append(f"{k}: {info[k]}")
    msgs = cap.records + [str(x.message) for x in w]
    if msgs:
        problems.append("warnings while loading: " + " | ".join(msgs))
    sd, rsd = model.state_dict(), ref.state_dict()
    if set(sd) != set(rsd):
        problems.append(f"state dict keys differ: {set(sd) ^ set(rsd)}")
    for k in rsd:
        if k in sd and not torch.equal(sd[k], rsd[k]):
            problems.append(f"{k} differs")
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        problems.append("lm_head is not tied to wte")
    cfg = model.config
    print(f"config: model_type={cfg.model_type} n_embd={cfg.n_embd} n_layer={cfg.n_layer} n_head={cfg.n_head} "
          f"n_positions={cfg.n_positions} vocab_size={cfg.vocab_size} act={cfg.activation_function} "
          f"eps={cfg.layer_norm_epsilon} tie={cfg.tie_word_embeddings} dtype={getattr(cfg, 'dtype', None)}")
    torch.manual_seed(0)
    idx = torch.randint(0, cfg.vocab_size, (2, 16))
    with torch.no_grad():
        a, b = model(idx).logits, ref(idx).logits
    if not torch.equal(a, b):
        problems.append(f"logits differ (max abs {(a - b).abs().max().item():.3g})")
    if problems:
        print("FAIL: " + "\n  ".join(problems))
        sys.exit(1)
    print(f"OK: transformers loads {saved}: {len(sd)} tensors equal to the original, logits identical, lm_head tied")


if __name__ == "__main__":
    main()
