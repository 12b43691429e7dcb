#!/usr/bin/env python3
"""Reference for packed fine-tuning (test/test_pack.c), produced by Hugging Face transformers:
every record of a packed batch run alone through GPT2LMHeadModel.

Writes test/ref/pack_tiny/:
  config.json + model.safetensors  a small GPT-2 (random init, seed 4321; biases and layernorms
                                   perturbed so a swapped or ignored one shows) with 128
                                   positions and one head of 64 (GPT-2's head size), saved by
                                   save_pretrained in bf16 (half the bytes; the values are
                                   exactly representable, and the reference below computes with
                                   them in fp32)
  ref.safetensors  input_ids, targets (-1: not trained), doc_start: a packed batch of B = 2
                   windows of T = 128 (each position's doc_start: where its record starts in its
                   window); logits [B, T, V] and losses [B, T] (0 where not trained), each
                   position's from its record run alone (positions 0.. of the record, attending
                   to the record only); loss: their mean over the trained targets.
The windows, as data/prepare --pack writes them: every record starts with <|endoftext|> (id 99
here), the first target of a record is the token after it; the tail of a window is padding, a
record of its own whose targets are not trained.
  window 0: records of 1, 70 (positions 1..70: across the 64-position tile edge) and 30 tokens,
            27 of padding (the padding's first token is the 30-token record's trained stop)
  window 1: records of 40, 24 and 64 tokens (the last starts exactly on the tile edge) filling
            the window; the last position's target is the closing <|endoftext|>
Targets a record does not train: the first 10 of the 70-token record (a prompt), the first 5
of the 40-token record.

Run with a Python that has torch and transformers:  python dev/gen_pack_ref.py
"""
import os
import sys
import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "ref", "pack_tiny")
T, V, EOT = 128, 100, 99
WINDOWS = [[1, 70, 30], [40, 24, 64]]      # record lengths; the rest of a window is padding
PROMPTS = {(0, 1): 10, (1, 0): 5}         # (window, record) -> untrained targets at its start


def make_model():
    torch.manual_seed(4321)
    cfg = GPT2Config(vocab_size=V, n_positions=T, n_embd=64, n_layer=2, n_head=1,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5,
                     bos_token_id=EOT, eos_token_id=EOT)
    cfg._attn_implementation = "eager"
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.05 * torch.randn_like(p))
        model.to(torch.bfloat16)
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(OUT)
    return model.float().eval()  # the saved values, exactly, in fp32


def make_batch():
    """input_ids, targets, doc_start (B x T) and the runs (window, record or -1 for padding,
    start, length)."""
    g = torch.Generator().manual_seed(7)
    ids = torch.full((len(WINDOWS), T), EOT, dtype=torch.long)
    tgt = torch.full((len(WINDOWS), T), -1, dtype=torch.long)
    doc = torch.zeros((len(WINDOWS), T), dtype=torch.long)
    runs = []
    for w, lens in enumerate(WINDOWS):
        t = 0
        for r, n in enumerate(lens):
            ids[w, t + 1:t + n] = torch.randint(0, EOT, (n - 1,), generator=g)
            runs.append((w, r, t, n))
            t += n
        if t < T:
            runs.append((w, -1, t, T - t))  # padding: a record of its own, never trained
    for w, r, t0, n in runs:
        doc[w, t0:t0 + n] = t0
        if r < 0:
            continue
        for t in range(t0, t0 + n):  # the target of a position: the next token in the window
            tgt[w, t] = ids[w, t + 1] if t + 1 < T else EOT
        tgt[w, t0:t0 + PROMPTS.get((w, r), 0)] = -1
    return ids, tgt, doc, runs


def main():
    model = make_model()
    ids, tgt, doc, runs = make_batch()
    logits = torch.zeros((len(WINDOWS), T, V))
    with torch.no_grad():
        for w, _, t0, n in runs:  # each record alone: its own positions 0..n-1, nothing else to see
            logits[w, t0:t0 + n] = model(input_ids=ids[w:w + 1, t0:t0 + n]).logits[0]
    losses = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), ignore_index=-1,
                                               reduction="none").reshape(tgt.shape)
    valid = (tgt >= 0).sum()
    tensors = {
        "input_ids": ids.to(torch.int32).contiguous(),
        "targets": tgt.to(torch.int32).contiguous(),
        "doc_start": doc.to(torch.int32).contiguous(),
        "logits": logits.contiguous(),
        "losses": losses.contiguous(),
        "loss": (losses.sum() / valid).reshape(1),
    }
    meta = {"format": "pt", "generator": "dev/gen_pack_ref.py, transformers GPT2LMHeadModel, each record alone",
            "transformers": __import__("transformers").__version__, "torch": torch.__version__}
    save_file(tensors, os.path.join(OUT, "ref.safetensors"), metadata=meta)
    print("records (window, start, length):", [(w, t0, n) for w, r, t0, n in runs if r >= 0], "valid targets", int(valid),
          "loss", tensors["loss"].item(), "->", OUT)


if __name__ == "__main__":
    sys.exit(main())
