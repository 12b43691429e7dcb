# PyTorch eager baseline for dev/bench_step.c: one GPT-2 124M training step (forward, loss,
# backward, AdamW) at the same shapes, on the CPU, fp32. Random init and random tokens: speed
# does not depend on the values. Usage: /opt/refenv/bin/python dev/bench_torch_step.py [threads] [B] [T] [steps]
import sys, time
import torch
from transformers import GPT2Config, GPT2LMHeadModel

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
B = int(sys.argv[2]) if len(sys.argv) > 2 else 4
T = int(sys.argv[3]) if len(sys.argv) > 3 else 256
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 3
torch.set_num_threads(threads)
torch.manual_seed(0)
cfg = GPT2Config(n_positions=1024, n_embd=768, n_layer=12, n_head=12, vocab_size=50257)
model = GPT2LMHeadModel(cfg)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
x = torch.randint(0, cfg.vocab_size, (B, T))
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, GPT-2 124M, B={B} T={T}")
best = float("inf")
best_cpu = float("inf")
for step in range(steps):
    t0 = time.perf_counter()
    c0 = time.process_time()
    loss = model(x, labels=x).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    dt = time.perf_counter() - t0
    dc = time.process_time() - c0   # CPU-seconds of all threads (see dev/bench_step.c)
    best = min(best, dt)
    best_cpu = min(best_cpu, dc)
    print(f"step {step}: loss {loss.item():.4f}, {dt * 1e3:.0f} ms ({dc:.1f} CPU-s)", flush=True)
print(f"best: step {best * 1e3:.0f} ms ({B * T / best:.0f} tokens/s)")
print(f"CPU time: {best_cpu:.1f} CPU-s per step = {best_cpu / threads * 1e3:.0f} ms per step on {threads} dedicated cores")
