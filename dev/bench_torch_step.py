#!/usr/bin/env python3
"""One training step of GPT-2 in PyTorch eager (transformers GPT2LMHeadModel + torch AdamW), on
the CPU, for comparison with train_gpt2 / train_lora on the same machine and thread count.

  python dev/bench_torch_step.py --threads 2 --steps 5 [--lora c_attn|all-linear --rank 8]

Prints ms per step (median of the timed steps after one warmup step), tokens/s and peak RSS.
"""
import argparse, resource, statistics, time
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--lora", default=None, help="c_attn or all-linear: train LoRA adapters with PEFT")
    ap.add_argument("--rank", type=int, default=8)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=a.layers, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg)
    if a.lora:
        from peft import LoraConfig, get_peft_model
        targets = ["c_attn"] if a.lora == "c_attn" else ["c_attn", "c_proj", "c_fc"]
        model = get_peft_model(model, LoraConfig(r=a.rank, lora_alpha=2 * a.rank, target_modules=targets,
                                                 lora_dropout=0.0, fan_in_fan_out=True, task_type="CAUSAL_LM"))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0 if a.lora else 0.1)
    x = torch.randint(0, cfg.vocab_size, (a.batch_size, a.seq_len))
    times = []
    for step in range(a.steps + 1):
        t0 = time.perf_counter()
        out = model(input_ids=x, labels=x)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        if step > 0:
            times.append(dt)
        print(f"step {step}: loss {out.loss.item():.4f} {dt * 1000:.1f} ms", flush=True)
    ms = statistics.median(times) * 1000
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ntrain = sum(p.numel() for p in params)
    print(f"pytorch: {ms:.1f} ms/step, {a.batch_size * a.seq_len / (ms / 1000):.1f} tok/s, "
          f"peak RSS {rss:.0f} MiB, trainable {ntrain}, threads {a.threads}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
