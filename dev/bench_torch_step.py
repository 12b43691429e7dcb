#!/usr/bin/env python3
"""Training steps of GPT-2 in PyTorch on the CPU (transformers GPT2LMHeadModel + torch AdamW, + PEFT
for LoRA and DoRA, + bitsandbytes 4-bit NF4 for QLoRA), for comparison with train_gpt2 / train_lora
on the same model file, machine and thread count (dev/bench_step.sh runs both).

  python dev/bench_torch_step.py --model DIR [--dtype fp32|bf16] [--lora c_attn --rank 8] [--dora]
      [--qlora] [--threads 2] [--steps 4] [--batch-size 4] [--seq-len 256]

--dtype bf16 wraps forward and loss in torch.autocast("cpu", dtype=torch.bfloat16) (the one line a
PyTorch user adds); fp32 is plain eager. --qlora loads the model's linear weights as bitsandbytes
Linear4bit (nf4, double quantization, compute dtype bf16 under --dtype bf16, else fp32). --dora
sets PEFT's use_dora=True on the same LoraConfig (a trained magnitude per output feature).
Prints one line per step, then one "pytorch:" line with the median and minimum ms per step (the
first step is a warm-up and not counted) and the peak RSS.
"""
import argparse, resource, statistics, time
import torch
from transformers import GPT2LMHeadModel


def build(a):
    kw = {}
    if a.qlora:
        from transformers import BitsAndBytesConfig
        kw["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16 if a.dtype == "bf16" else torch.float32)
    model = GPT2LMHeadModel.from_pretrained(a.model, **kw)
    model.config.use_cache = False
    if a.lora:
        from peft import LoraConfig, get_peft_model
        targets = ["c_attn"] if a.lora == "c_attn" else ["c_attn", "c_proj", "c_fc"]
        model = get_peft_model(model, LoraConfig(r=a.rank, lora_alpha=2 * a.rank, target_modules=targets,
                                                 lora_dropout=0.0, fan_in_fan_out=True, task_type="CAUSAL_LM",
                                                 use_dora=a.dora))
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="a transformers GPT-2 directory (what bench_step.sh saves)")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--lora", default=None, help="c_attn or all-linear: train LoRA adapters with PEFT")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--dora", action="store_true", help="PEFT use_dora=True (with --lora)")
    ap.add_argument("--qlora", action="store_true", help="bitsandbytes 4-bit base (with --lora)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = build(a)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0 if a.lora else 0.1)
    x = torch.randint(0, model.config.vocab_size, (a.batch_size, a.seq_len))
    times = []
    for step in range(a.steps + 1):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            out = model(input_ids=x, labels=x)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        if step > 0:
            times.append(dt)
        print(f"step {step}: loss {out.loss.item():.4f} {dt * 1000:.1f} ms", flush=True)
    med, mn = statistics.median(times) * 1000, min(times) * 1000
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ntrain = sum(p.numel() for p in params)
    print(f"pytorch: {med:.1f} ms/step median, {mn:.1f} min, peak RSS {rss:.0f} MiB, trainable {ntrain}, "
          f"{'DoRA, ' if a.dora else ''}dtype {a.dtype}, threads {a.threads}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
