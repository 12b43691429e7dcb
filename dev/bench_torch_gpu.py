#!/usr/bin/env python3
"""Training throughput of GPT-2 in PyTorch on a GPU, next to train_gpt2 / train_lora at the same
shapes (scripts/gpu_check.sh runs both), and PyTorch's attention kernels next to ours.

Configurations (--configs MODE:BATCH,...):
  full     transformers' GPT2LMHeadModel, randomly initialised, fp32 parameters and AdamW state,
           bf16 autocast, attention by torch's scaled_dot_product_attention (attn_implementation
           "sdpa"), eager: what a transformers user runs;
  lora     the same with PEFT LoRA on c_attn (r, alpha = 2r, no dropout) over the frozen base;
  compiled PyTorch's strongest setting for the same model: a GPT-2 written as nanoGPT writes it
           (own modules, F.scaled_dot_product_attention with is_causal, tied embeddings, the vocabulary
           padded to a multiple of 128), torch.compile, AdamW with fused=True, bf16 autocast (on a
           CPU, for the check's --emulated mode: eager and unfused; the record says which).
QLoRA is not measured here: bitsandbytes is not installed on the GPU machines this check targets.

  python3 dev/bench_torch_gpu.py --configs full:8,full:16,lora:8,compiled:16 --seq-len 1024 --steps 12 --warmup 2
  python3 dev/bench_torch_gpu.py --configs "" --attention 16,12,64:512,1024,2048

--attention B,NH,HS:T,...: causal scaled_dot_product_attention in bf16 on (B, NH, T, HS) tensors,
forced to the flash backend and to the cuDNN backend (torch.nn.attention.sdpa_kernel), forward and
backward milliseconds and TFLOP/s, counted as dev/cuda/attention_bench counts them (the
T (T + 1) / 2 visible pairs: 4 HS FLOPs each forward, 10 backward); one line per backend and T,
prefixed "torch_attention ", with "error" where a backend cannot run (e.g. on a CPU).

One JSON object per configuration on stdout, prefixed "torch_result ": mode, batch, seq_len,
ms_per_step (median of the timed steps; each step = forward + backward + clip + AdamW, ending with
torch.cuda.synchronize), tok_per_s, tflops and mfu (the model FLOPs of llmc/base/mfu.h: 6 N + 6 L C T
per token, 4 N_base + 6 N_adapter + 6 L C T with a frozen base; mfu against --peak-tflops),
peak_alloc_mib / peak_reserved_mib (torch.cuda.max_memory_allocated / reserved), the losses of
the first and last steps, or "error" (e.g. out of memory). Without a GPU it runs on the CPU (for
the check's --emulated mode), with --layers/--channels/--heads/--vocab for a small model.
The module imports torch only when it runs, so the check can read its records without it.
"""
import argparse, json, math, statistics, sys, time


def flops_per_token(n_base, base_frozen, n_adapter, L, C, T):
    return (4.0 if base_frozen else 6.0) * n_base + 6.0 * n_adapter + 6.0 * L * C * T


def nanogpt(torch, V, maxT, L, C, NH):
    """GPT-2 as nanoGPT writes it: the modules a compiler sees whole."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in self.c_attn(self.ln_1(x)).split(C, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
            x = x + self.c_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(maxT, C)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C)
            self.lm_head = nn.Linear(C, V, bias=False)
            self.lm_head.weight = self.wte.weight  # tied, as GPT-2
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for b in self.h:
                x = b(x)
            logits = self.lm_head(self.ln_f(x))
            # the tokens themselves as targets: a throughput run, the loss's value does not matter
            # (autocast computes cross_entropy in fp32)
            return F.cross_entropy(logits.view(-1, V), idx.view(-1))

    return GPT()


def build_compiled(torch, a, dev):
    """(model, trainable params, optimizer, parameter count at the real vocabulary, extras)"""
    Vp = (a.vocab + 127) // 128 * 128
    model = nanogpt(torch, Vp, max(1024, a.seq_len), a.layers, a.channels, a.heads).to(dev)
    params = list(model.parameters())
    n = sum(p.numel() for p in params) - (Vp - a.vocab) * a.channels  # counted at the real vocabulary
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), fused=dev == "cuda")
    step_model = torch.compile(model) if dev == "cuda" else model
    return step_model, params, opt, n, {"compiled": dev == "cuda", "fused_adamw": dev == "cuda", "padded_vocab": Vp}


def run_config(torch, a, mode, B, dev):
    if mode == "compiled":
        return run_compiled(torch, a, B, dev)
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
    r = train_steps(torch, a, mode, B, dev, lambda x: model(input_ids=x, labels=x).loss, params, opt,
                    flops_per_token(n_base, mode == "lora", n_adapter, a.layers, a.channels, a.seq_len))
    r.update({"attn": attn, "n_params": n_base, "n_trainable": n_adapter if mode == "lora" else n_base})
    del model, opt, params
    return r


def run_compiled(torch, a, B, dev):
    torch.manual_seed(0)
    model, params, opt, n, extra = build_compiled(torch, a, dev)
    r = train_steps(torch, a, "compiled", B, dev, model, params, opt, flops_per_token(n, False, 0, a.layers, a.channels, a.seq_len))
    r.update(extra)
    r.update({"attn": "sdpa (is_causal)", "n_params": n, "n_trainable": n})
    del model, opt, params
    return r


def train_steps(torch, a, mode, B, dev, loss_of, params, opt, fpt):
    """warmup + steps training steps on one fixed batch (forward, backward, clip, AdamW), timed."""
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
            loss = loss_of(x)
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
    tflops = fpt * tok / (ms / 1000.0) / 1e12
    r = {"mode": mode, "batch": B, "seq_len": a.seq_len, "ms_per_step": round(ms, 3), "tok_per_s": round(tok / (ms / 1000.0), 1),
         "tflops": round(tflops, 3), "mfu": round(tflops / a.peak_tflops, 4) if a.peak_tflops > 0 else None,
         "loss_first": losses[0], "loss_last": losses[-1]}
    if dev == "cuda":
        r["peak_alloc_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        r["peak_reserved_mib"] = round(torch.cuda.max_memory_reserved() / 2**20, 1)
    return r


def time_ms(torch, fn, dev, iters):
    """milliseconds per call of fn, after three untimed calls"""
    for _ in range(3):
        fn()
    if dev == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) * 1000.0 / iters


def bench_attention(torch, B, NH, HS, T, backend, dev, iters=20):
    """one torch_attention record: causal SDPA forced to one backend"""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional
    r = {"backend": backend, "B": B, "NH": NH, "HS": HS, "T": T}
    g = torch.Generator(device=dev).manual_seed(0)
    q, k, v, do = (torch.randn(B, NH, T, HS, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_()
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    pairs = B * NH * T * (T + 1) / 2.0
    try:
        with sdpa_kernel(be):
            fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
            fwd_ms = time_ms(torch, fwd, dev, iters)
            both_ms = time_ms(torch, lambda: torch.autograd.grad(fwd(), (q, k, v), do), dev, iters)
    except RuntimeError as e:  # the backend cannot run here (no GPU, an old cuDNN): say so
        r["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:160])
        return r
    bwd_ms = max(both_ms - fwd_ms, 1e-6)
    r.update({"fwd_ms": round(fwd_ms, 4), "bwd_ms": round(bwd_ms, 4), "fwd_tflops": round(4.0 * pairs * HS / (fwd_ms * 1e-3) / 1e12, 2),
              "bwd_tflops": round(10.0 * pairs * HS / (bwd_ms * 1e-3) / 1e12, 2)})
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="full:8,full:16,full:32,lora:8,lora:16,lora:32",
                    help="MODE:BATCH,... (MODE full, lora or compiled; empty: none)")
    ap.add_argument("--attention", default="", help="B,NH,HS:T,T,...: SDPA's flash and cuDNN backends at these shapes")
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
    if a.attention:
        shape, ts = a.attention.split(":")
        B, NH, HS = (int(x) for x in shape.split(","))
        for backend in ("flash", "cudnn"):
            for T in (int(t) for t in ts.split(",")):
                print("torch_attention " + json.dumps(bench_attention(torch, B, NH, HS, T, backend, dev)), flush=True)
    for item in filter(None, a.configs.split(",")):
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
