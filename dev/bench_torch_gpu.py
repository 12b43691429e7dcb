#!/usr/bin/env python3
"""Training throughput of GPT-2 in PyTorch on a GPU, next to train_gpt2 / train_lora at the same
shapes (scripts/gpu_check.sh runs both). transformers' GPT2LMHeadModel, randomly initialised,
fp32 parameters and AdamW state, bf16 autocast, attention by torch's scaled_dot_product_attention
(attn_implementation="sdpa"); with --mode lora, PEFT LoRA on c_attn (r, alpha = 2r, no dropout)
over the frozen base. QLoRA is not measured here: bitsandbytes is not installed on the GPU
machines this check targets.

  python3 dev/bench_torch_gpu.py --configs full:8,full:16,lora:8 --seq-len 1024 --steps 12 --warmup 2

One JSON object per configuration on stdout, prefixed "torch_result ": mode, batch, seq_len,
ms_per_step (median of the timed steps; each step = forward + backward + clip + AdamW, ending with
torch.cuda.synchronize), tok_per_s, tflops and mfu (the model FLOPs of llmc/base/mfu.h: 6 N + 6 L C T
per token, 4 N_base + 6 N_adapter + 6 L C T with a frozen base; mfu against --peak-tflops),
peak_alloc_mib / peak_reserved_mib (torch.cuda.max_memory_allocated / reserved), the losses of
the first and last steps, or "error" (e.g. out of memory). Without a GPU it runs on the CPU (for
the check's --emulated mode), with --layers/--channels/--heads/--vocab for a small model.
"""
import argparse, json, statistics, sys, time


def flops_per_token(n_base, base_frozen, n_adapter, L, C, T):
    return (4.0 if base_frozen else 6.0) * n_base + 6.0 * n_adapter + 6.0 * L * C * T


def run_config(torch, a, mode, B, dev):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=a.layers, n_embd=a.channels, n_head=a.heads, vocab_size=a.vocab, n_positions=max(1024, a.seq_len),
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=a.vocab - 1, eos_token_id=a.vocab - 1,
                     attn_implementation="sdpa")
    model = GPT2LMHeadModel(cfg).to(dev)
    attn = getattr(model.config, "_attn_implementation", None)
    n_base = sum(p.numel() for p in model.parameters())
    n_adapter = 0
    if mode == "lora":
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=a.rank, lora_alpha=2 * a.rank, target_modules=["c_attn"],
                                                 lora_dropout=0.0, fan_in_fan_out=True, task_type="CAUSAL_LM"))
        n_adapter = sum(p.numel() for p in model.parameters() if p.requires_grad)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0 if mode == "lora" else 0.1)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, a.vocab, (B, a.seq_len), generator=g).to(dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for step in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        with torch.autocast(device_type=dev, dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if step >= a.warmup:
            times.append(dt)
    ms = statistics.median(times) * 1000.0
    tok = B * a.seq_len
    fpt = flops_per_token(n_base, mode == "lora", n_adapter, a.layers, a.channels, a.seq_len)
    tflops = fpt * tok / (ms / 1000.0) / 1e12
    r = {"mode": mode, "batch": B, "seq_len": a.seq_len, "ms_per_step": round(ms, 3), "tok_per_s": round(tok / (ms / 1000.0), 1),
         "tflops": round(tflops, 3), "mfu": round(tflops / a.peak_tflops, 4) if a.peak_tflops > 0 else None,
         "attn": attn, "n_params": n_base, "n_trainable": n_adapter if mode == "lora" else n_base,
         "loss_first": losses[0], "loss_last": losses[-1]}
    if dev == "cuda":
        r["peak_alloc_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        r["peak_reserved_mib"] = round(torch.cuda.max_memory_reserved() / 2**20, 1)
    del model, opt, params, x
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="full:8,full:16,full:32,lora:8,lora:16,lora:32", help="MODE:BATCH,... (MODE full or lora)")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10, help="timed steps (after --warmup untimed ones)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rank", type=int, default=8, help="LoRA rank (alpha = 2 * rank)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--channels", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="the device's peak bf16 TFLOP/s (0: mfu null)")
    a = ap.parse_args()
    import torch
    import transformers
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__, "device": dev,
            "device_name": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu"}
    try:
        import peft
        info["peft"] = peft.__version__
    except ImportError:
        info["peft"] = None
    print("torch_info " + json.dumps(info), flush=True)
    for item in a.configs.split(","):
        mode, b = item.split(":")
        try:
            r = run_config(torch, a, mode, int(b), dev)
        except Exception as e:  # out of memory, a missing peft: record it and go on
            r = {"mode": mode, "batch": int(b), "seq_len": a.seq_len, "error": f"{type(e).__name__}: {str(e)[:200]}"}
        if dev == "cuda":
            torch.cuda.empty_cache()
        print("torch_result " + json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
