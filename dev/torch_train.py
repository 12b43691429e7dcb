import numpy as np, torch, math, sys
from transformers import GPT2LMHeadModel
torch.set_num_threads(2)
m = GPT2LMHeadModel.from_pretrained(sys.argv[1]); m.train()
for mod in m.modules():
    if hasattr(mod, "p"): pass
m.config.resid_pdrop = m.config.embd_pdrop = m.config.attn_pdrop = 0.0
for mod in m.modules():
    if isinstance(mod, torch.nn.Dropout): mod.p = 0.0
tok = np.fromfile(sys.argv[2], dtype=np.uint16, offset=1024).astype(np.int64)
B, T, steps, lr0, warm = 8, 128, int(sys.argv[3]), float(sys.argv[4]), 2
decay = [p for p in m.parameters() if p.dim() >= 2]; nod = [p for p in m.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nod, "weight_decay": 0.0}], lr=lr0, betas=(0.9, 0.95), eps=1e-8)
for s in range(steps):
    lr = lr0 * (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / (steps - warm))) * lr0
    for g in opt.param_groups: g["lr"] = lr
    buf = torch.from_numpy(tok[s * B * T: s * B * T + B * T + 1])
    x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
    logits = m(input_ids=x).logits
    loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    opt.zero_grad(); loss.backward()
    n = torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step()
    print(f"step {s+1} loss {loss.item():.6f} norm {n.item():.4f} lr {lr:.3e}", flush=True)
