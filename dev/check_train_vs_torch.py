#!/usr/bin/env python3
"""Replays a train_gpt2 run in PyTorch, step for step, to check a full-size run (real vocabulary,
long sequences, many layers) against transformers beyond the tiny model of the tests.

  ./train_gpt2 --model d6 --train-data SHARD --batch-size 8 --seq-len 128 --steps 1 --lr 0 \
      --out /tmp/init --save-format hf                       # the initial weights, as HF
  ./train_gpt2 --model /tmp/init --train-data SHARD --batch-size 8 --seq-len 128 --steps 6 \
      --lr 1e-3 --warmup-steps 2 --threads 2                 # our losses
  python dev/check_train_vs_torch.py /tmp/init SHARD --steps 6 --lr 1e-3 --warmup 2   # torch's

Same data order (sequential batches of the first shard), AdamW (betas 0.9/0.95, eps 1e-8,
weight decay 0.1 on 2-D tensors), clipping at 1.0, linear warmup then cosine to 0.
Measured here (d6, B=8, T=128, 6 steps at lr 1e-3): every loss agreed to within 2e-4.
"""
import argparse, math
import numpy as np
import torch
from transformers import GPT2LMHeadModel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model"); ap.add_argument("shard")
    ap.add_argument("--batch-size", type=int, default=8); ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=6); ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=2); ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    m = GPT2LMHeadModel.from_pretrained(a.model)
    for mod in m.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    m.train()
    tok = np.fromfile(a.shard, dtype=np.uint16, offset=1024).astype(np.int64)
    B, T = a.batch_size, a.seq_len
    decay = [p for p in m.parameters() if p.dim() >= 2]
    rest = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    for s in range(a.steps):
        if s < a.warmup:
            lr = a.lr * (s + 1) / a.warmup
        else:
            lr = 0.5 * (1 + math.cos(math.pi * (s - a.warmup) / (a.steps - a.warmup))) * a.lr
        for g in opt.param_groups:
            g["lr"] = lr
        buf = torch.from_numpy(tok[s * B * T: s * B * T + B * T + 1])
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
        logits = m(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        opt.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        print(f"step {s + 1} loss {loss.item():.6f} norm {norm.item():.4f} lr {lr:.3e}", flush=True)


if __name__ == "__main__":
    main()
