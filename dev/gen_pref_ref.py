#!/usr/bin/env python3
"""References for the preference objectives (DPO, IPO, ORPO, SimPO), produced by TRL.

  python dev/gen_pref_ref.py loss    test/ref/pref/loss.safetensors (test/test_prefloss.c)
  python dev/gen_pref_ref.py model   test/ref/pref_tiny/ (test/test_pref.c)

loss: TRL's own loss code given chosen / rejected sequence log-probabilities, for a set of pairs
(lengths 1..40, log-probabilities from -0.002 to -300 a sequence, margins that saturate the
sigmoid both ways) under every objective and a few settings of each:
  dpo, ipo  DPOTrainer._compute_loss (trl/trainer/dpo_trainer.py; its loss is written inline)
            run on a stand-in model that returns the given per-token log-probabilities, with
            precomputed reference log-probabilities (precompute_ref_log_probs); dpo is
            loss_type ["robust"] with label_smoothing (its ["sigmoid"] at 0, also checked)
  orpo      ORPOTrainer.odds_ratio_loss (trl/experimental/orpo) on the average log-probabilities,
            beta = the odds-ratio weight lambda
  simpo     CPOTrainer.cpo_loss (trl/experimental/cpo) with loss_type "simpo" on the average
            log-probabilities (cpo_alpha 0: no NLL)
For each setting <name>: <name>.loss [P] (each pair alone), <name>.gc / <name>.gr [P] (the
derivative of the pair's term w.r.t. the log-probability of one target token of the chosen /
rejected completion: autograd through TRL's code, times P since TRL's loss is the mean over the
pairs), <name>.metrics [10]: TRL's logged means over all P pairs in one batch (loss,
rewards/chosen, rewards/rejected, rewards/accuracies, rewards/margins, logps/chosen,
logps/rejected, and for ORPO log_odds_ratio, log_odds_chosen; 0 where TRL logs none). The pairs:
logp_c, logp_r, n_c, n_r, ref_c, ref_r [P]. Settings in the metadata ("settings": JSON).

model: TRL's trainers on a small GPT-2 (C 32, 2 heads, 2 layers, 64 positions, vocabulary of 100,
<|endoftext|> = 99), written to test/ref/pref_tiny/:
  config.json + model.safetensors       the policy's base (random init, seed 7; 1-D tensors perturbed;
                                        saved in bf16: half the bytes, the values exact in fp32)
  ref/config.json + ref/model.safetensors   a reference model for full fine-tuning: the policy
                                        perturbed (0.02 N(0, 1) on every tensor), bf16 as above
  lora/                                 a PEFT adapter on every linear layer (r 4, alpha 8), B drawn
                                        non-zero (0.05 N(0, 1)) so that A has a gradient
  lora_lnf/                             c_attn (r 2, alpha 4) with modules_to_save ["ln_f"], ln_f
                                        perturbed: the reference (adapters off) uses the base's ln_f
  ref.safetensors                       below
The batch: B = 2 packed windows of T = 64, as data/prepare --pack 64 writes pairs (every record
<|endoftext|> + prompt + completion, the completion's targets and the stop after it trained, a
record attending to itself): window 0 holds pair 0 (a 3-token chosen beside a 20-token rejected
completion) and pair 1 (chosen and rejected differing only in their first token), then padding;
window 1 pairs 2 (prompt of 12, completions of 15 and 9) and 3 (prompt of 2, completions of 1
and 2), then padding. input_ids, targets (-1: not trained), doc_start [B, T]; pairs [P, 5]: c_first,
c_begin, c_end, r_begin, r_end (llmc/model/prefloss.h PrefPair). TRL sees each pair as prompt_ids
= [99] + prompt, chosen_ids / rejected_ids = completion + [99] (its collators pad, we pack).
For each set <s> of (full, lora, lora_lnf) x objective (full and lora: dpo, ipo, orpo, simpo;
lora_lnf: dpo), with TRL's defaults (beta 0.1; ORPO lambda 0.1; SimPO gamma 0.5, cpo_alpha 0):
  <s>.pair_loss [P]   TRL's loss of each pair alone in a batch (ORPO: its NLL mean + its term)
  <s>.metrics [10]    TRL's loss and logged means over the batch (gen loss's order)
  <s>.grad.<name>     every gradient of the batch's loss: full, <HF name> of each parameter; LoRA,
                      the PEFT key of each lora_A / lora_B (and ln_f for lora_lnf)
  <s>.train_losses / .train_grad_norms [10]   10 AdamW steps on the batch (lr 1e-3, betas (0.9,
                      0.95), eps 1e-8, weight decay 0.1 on 2-D tensors, clip_grad_norm_ 1.0; full
                      and lora only): the loss before each step, the norm before clipping
  full.ref_logps [P, 2]  the reference model's chosen / rejected log-probabilities (TRL's)
DPO / IPO references: full fine-tuning, the ref/ model for the gradients and, as TRL's
precompute_ref_log_probs does, the policy before training for the 10 steps; LoRA, the same base
with the adapters off (DPOTrainer with peft_config: a new adapter, whose weights are then set).
DPO and IPO run DPOTrainer._compute_loss; ORPO ORPOTrainer.get_batch_loss_metrics; SimPO
CPOTrainer.get_batch_loss_metrics (loss_type simpo, cpo_alpha 0), each on the real model.

Run: /work/venv-torch/bin/python dev/gen_pref_ref.py loss|model   (torch, transformers, peft, trl)
"""
import json, math, os, sys, types
from collections import defaultdict
import torch
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
torch.set_default_dtype(torch.float64)  # (the loss code runs in the inputs' dtype: compare in double)

# pairs: (logp_c, logp_r, n_c, n_r, ref_c, ref_r)
PAIRS = [
    (-12.5, -14.0, 5, 6, -13.0, -13.5),
    (-3.2, -40.0, 2, 31, -3.0, -38.0),       # very different lengths
    (-25.0, -24.0, 9, 9, -22.0, -26.0),      # chosen less likely than rejected
    (-0.002, -5.0, 1, 3, -0.01, -4.0),       # a chosen completion the model is sure of
    (-300.0, -150.0, 40, 20, -310.0, -140.0),
    (-7.0, -7.0, 4, 4, -7.0, -7.0),          # identical
    (-2.0, -90.0, 3, 12, -60.0, -1.0),       # margin far past the sigmoid's saturation
    (-90.0, -2.0, 12, 3, -1.0, -60.0),       # and the other way
    (-18.3, -18.1, 7, 8, -18.0, -18.9),
    (-1.0, -1.1, 1, 1, -1.05, -1.0),         # single-token completions
]
SETTINGS = [
    ("dpo", "dpo", dict(beta=0.1, label_smoothing=0.0)),
    ("dpo_sigmoid", "dpo", dict(beta=0.1, label_smoothing=0.0, loss_type="sigmoid")),
    ("dpo_b05_ls01", "dpo", dict(beta=0.5, label_smoothing=0.1)),
    ("ipo", "ipo", dict(beta=0.1)),
    ("ipo_b05", "ipo", dict(beta=0.5)),
    ("orpo", "orpo", dict(orpo_lambda=0.1)),
    ("orpo_l025", "orpo", dict(orpo_lambda=0.25)),
    ("simpo", "simpo", dict(beta=0.1, simpo_gamma=0.5, label_smoothing=0.0)),
    ("simpo_b2_g1_ls01", "simpo", dict(beta=2.0, simpo_gamma=1.0, label_smoothing=0.1)),
]


def fake_accelerator():
    return types.SimpleNamespace(device=torch.device("cpu"), gather_for_metrics=lambda x: x, gather=lambda x: x)


def dpo_batch(pairs, loss_type, beta, ls):
    """DPOTrainer._compute_loss on a stand-in model: returns (loss, metrics, d loss / d per-token logps)."""
    from trl import DPOTrainer
    P = len(pairs)
    L = max(max(p[2], p[3]) for p in pairs) + 2  # one prompt token, the completion, padding
    per_tok = torch.zeros(2 * P, L - 1)
    cmask = torch.zeros(2 * P, L, dtype=torch.long)
    for i, (lc, lr, nc, nr, _, _) in enumerate(pairs):
        for row, (lp, n) in ((i, (lc, nc)), (P + i, (lr, nr))):
            cmask[row, 1:1 + n] = 1
            per_tok[row, 0:n] = lp / n  # (the completion's tokens are targets of positions 0..n-1)
    per_tok.requires_grad_(True)

    def model(**kw):
        z = torch.zeros(2 * P, L - 1)
        return types.SimpleNamespace(log_probs=per_tok, entropy=z, mean_logits=z, is_top1=z.bool())
    model.training = True
    me = types.SimpleNamespace(
        model=model, accelerator=fake_accelerator(), aux_loss_enabled=False, ld_alpha=None, precompute_ref_logps=True,
        f_divergence_type="reverse_kl", loss_types=[loss_type], loss_weights=[1.0], beta=beta, label_smoothing=ls,
        use_weighting=False, _metrics={"train": defaultdict(list), "eval": defaultdict(list)}, _total_train_tokens=0, _tp_size=1)
    inputs = {"input_ids": torch.zeros(2 * P, L, dtype=torch.long), "attention_mask": torch.ones(2 * P, L, dtype=torch.long),
              "completion_mask": cmask, "ref_chosen_logps": torch.tensor([p[4] for p in pairs]),
              "ref_rejected_logps": torch.tensor([p[5] for p in pairs])}
    loss = DPOTrainer._compute_loss(me, model, inputs, False)
    loss.backward()
    g = per_tok.grad
    m = me._metrics["train"]
    metrics = [loss.item()] + [m[k][0] for k in ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
                                                "logps/chosen", "logps/rejected")] + [0.0, 0.0, 0.0]
    return loss.item(), metrics, g[:P, 0] * P, g[P:, 0] * P


def avg_batch(kind, pairs, s):
    """ORPOTrainer.odds_ratio_loss / CPOTrainer.cpo_loss (simpo) on average log-probabilities."""
    P = len(pairs)
    ac = torch.tensor([p[0] / p[2] for p in pairs], requires_grad=True)
    ar = torch.tensor([p[1] / p[3] for p in pairs], requires_grad=True)
    if kind == "orpo":
        from trl.experimental.orpo import ORPOTrainer
        me = types.SimpleNamespace(beta=s["orpo_lambda"], accelerator=fake_accelerator())
        losses, rc, rr, ratio, odds = ORPOTrainer.odds_ratio_loss(me, ac, ar)
        per = -losses  # TRL: loss = nll - losses.mean()
        extra = [ratio.item(), odds.item()]
    else:
        from trl.experimental.cpo import CPOTrainer
        me = types.SimpleNamespace(alpha=0.0, beta=s["beta"], label_smoothing=s["label_smoothing"], loss_type="simpo",
                                   simpo_gamma=s["simpo_gamma"], accelerator=fake_accelerator())
        per, rc, rr = CPOTrainer.cpo_loss(me, ac, ar)
        extra = [0.0, 0.0]
    loss = per.mean()
    loss.backward()
    n_c = torch.tensor([float(p[2]) for p in pairs]); n_r = torch.tensor([float(p[3]) for p in pairs])
    acc = (rc > rr).double().mean().item()
    metrics = [loss.item(), rc.mean().item(), rr.mean().item(), acc, (rc - rr).mean().item(), ac.mean().item(),
               ar.mean().item(), 0.0] + extra
    return per.detach(), metrics, ac.grad * P / n_c, ar.grad * P / n_r


def gen_loss():
    out = {}
    cols = list(zip(*PAIRS))
    for k, name in enumerate(("logp_c", "logp_r", "n_c", "n_r", "ref_c", "ref_r")):
        out[name] = torch.tensor(cols[k], dtype=torch.float64)
    for name, kind, s in SETTINGS:
        if kind in ("dpo", "ipo"):
            lt = s.get("loss_type", "robust" if kind == "dpo" else "ipo")
            _, metrics, gc, gr = dpo_batch(PAIRS, lt, s["beta"], s.get("label_smoothing", 0.0))
            per = [dpo_batch([p], lt, s["beta"], s.get("label_smoothing", 0.0))[0] for p in PAIRS]
            per = torch.tensor(per)
        else:
            per, metrics, gc, gr = avg_batch(kind, PAIRS, s)
        out[name + ".loss"] = per.double()
        out[name + ".gc"] = gc.detach().double()
        out[name + ".gr"] = gr.detach().double()
        out[name + ".metrics"] = torch.tensor(metrics, dtype=torch.float64)
        print(f"{name:18s} loss {metrics[0]:.6f} acc {metrics[3]:.2f} margins {metrics[4]:.4f}")
    import trl
    meta = {"format": "pt", "generator": "dev/gen_pref_ref.py loss", "trl": trl.__version__, "torch": torch.__version__,
            "settings": json.dumps([[n, k, s] for n, k, s in SETTINGS]),
            "metrics": "loss,rewards/chosen,rewards/rejected,rewards/accuracies,rewards/margins,logps/chosen,logps/rejected,"
                       "nll_loss,log_odds_ratio,log_odds_chosen"}
    d = os.path.join(ROOT, "test", "ref", "pref")
    os.makedirs(d, exist_ok=True)
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(d, "loss.safetensors"), metadata=meta)
    print("->", os.path.join(d, "loss.safetensors"))


# ---------------------------------------------------------------------------------------------
# model

T_WIN, EOT, V = 64, 99, 100
# (prompt, chosen, rejected) lengths per window; completions without their stop
WINDOWS = [[(5, 3, 20), (6, 4, 4)], [(12, 15, 9), (2, 1, 2)]]
LR, BETAS, EPS, WD, CLIP, STEPS = 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0, 10
MODEL_DIR = os.path.join(ROOT, "test", "ref", "pref_tiny")


def tiny_config():
    from transformers import GPT2Config
    cfg = GPT2Config(vocab_size=V, n_positions=T_WIN, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0, activation_function="gelu_new", layer_norm_epsilon=1e-5, bos_token_id=EOT, eos_token_id=EOT)
    cfg._attn_implementation = "eager"
    return cfg


def save_bf16(model, d):
    """Saved in bf16 (the file), returned in fp32 with exactly those values."""
    model.to(torch.bfloat16)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d)
    return model.float()


def make_models():
    from transformers import GPT2LMHeadModel
    torch.manual_seed(7)
    base = GPT2LMHeadModel(tiny_config())
    with torch.no_grad():
        for p in base.parameters():
            if p.dim() == 1:
                p.add_(0.05 * torch.randn_like(p))
    base = save_bf16(base, MODEL_DIR)
    ref = GPT2LMHeadModel(tiny_config())
    ref.load_state_dict(base.state_dict())
    g = torch.Generator().manual_seed(8)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g, dtype=torch.float32).to(p.dtype))
    ref = save_bf16(ref, os.path.join(MODEL_DIR, "ref"))
    return base, ref


def make_batch():
    """The packed batch and the pairs: ours (positions) and TRL's (token lists)."""
    g = torch.Generator().manual_seed(9)
    rnd = lambda n: torch.randint(0, EOT, (n,), generator=g).tolist()
    toks, trained, starts, pairs, trl = [], [], [], [], []
    for w, win in enumerate(WINDOWS):
        base = w * T_WIN
        t, m, d = [], [], []
        for k, (np_, nc, nr) in enumerate(win):
            prompt, chosen = rnd(np_), rnd(nc)
            rejected = rnd(nr)
            if (w, k) == (0, 1):  # differ only in the first completion token
                rejected = [(chosen[0] + 1) % EOT] + chosen[1:]
            trl.append(([EOT] + prompt, chosen + [EOT], rejected + [EOT]))
            rec = []
            for comp in (chosen, rejected):
                s0 = len(t)
                t += [EOT] + prompt + comp
                m += [1 if s0 > 0 and m and rec else 0] + [0] * np_ + [1] * len(comp)
                rec.append((s0, s0 + 1 + np_, len(t)))
            # (each record's first token is the stop of the one before; fixed below)
            (c0, cb, ce), (r0, rb, re) = rec
            pairs.append([base + c0, base + cb - 1, base + ce, base + rb - 1, base + re])
        pad = T_WIN - len(t)
        assert pad >= 1
        t += [EOT] * pad
        m += [0] * pad
        toks += t
        trained += m
        starts.append(base)
    N = len(toks)
    x = torch.tensor(toks).reshape(len(WINDOWS), T_WIN)
    # targets: the completion tokens and each record's stop (the first token of what follows it)
    y = torch.full((N,), -1, dtype=torch.long)
    for (cf, cb, ce, rb, re) in pairs:
        for a, b in ((cb, ce), (rb, re)):
            for p in range(a, b):
                y[p] = toks[p + 1] if p + 1 < N else -1
    doc = torch.zeros(N, dtype=torch.long)
    st = set([p[0] for p in pairs] + [p[0] + (p[3] - p[0]) - 0 for p in pairs])
    cur = 0
    rec_starts = set()
    for (cf, cb, ce, rb, re) in pairs:
        rec_starts.add(cf); rec_starts.add(ce)  # the rejected record starts where the chosen one's targets end
        rec_starts.add(re)                      # the padding (or the next pair) after the rejected
    for i in range(N):
        t_ = i % T_WIN
        if t_ == 0 or i in rec_starts: cur = t_
        doc[i] = cur
    return x, y.reshape(x.shape), doc.reshape(x.shape), torch.tensor(pairs, dtype=torch.int32), trl


def tokenizer_dir():
    import shutil, tempfile
    d = tempfile.mkdtemp()
    shutil.copy(os.path.join(ROOT, "data", "gpt2", "encoder.json"), os.path.join(d, "vocab.json"))
    shutil.copy(os.path.join(ROOT, "data", "gpt2", "vocab.bpe"), os.path.join(d, "merges.txt"))
    from transformers import GPT2TokenizerFast
    tok = GPT2TokenizerFast(vocab_file=os.path.join(d, "vocab.json"), merges_file=os.path.join(d, "merges.txt"))
    return tok


def dpo_collate(trl_pairs):
    from trl.trainer.dpo_trainer import DataCollatorForPreference
    ex = [{"prompt_ids": p, "chosen_ids": c, "rejected_ids": r} for p, c, r in trl_pairs]
    return DataCollatorForPreference(pad_token_id=EOT)(ex)


def orpo_batch(trl_pairs):
    """The tokenized ORPO/CPO batch (tokenize_row's fields, padded as their collator pads them)."""
    def pad(rows, v):
        L = max(len(r) for r in rows)
        return torch.tensor([r + [v] * (L - len(r)) for r in rows])
    b = {}
    for side, k in (("chosen", 1), ("rejected", 2)):
        ids = [p[0] + p[k] for p in trl_pairs]
        b[side + "_input_ids"] = pad(ids, EOT)
        b[side + "_attention_mask"] = pad([[1] * len(i) for i in ids], 0)
        b[side + "_labels"] = pad([[-100] * len(p[0]) + p[k] for p in trl_pairs], -100)
    return b


def pref_trainer(kind, model, peft_config=None):
    """DPOTrainer (dpo, ipo) on model, or a stand-in self for ORPOTrainer / CPOTrainer's loss code."""
    if kind in ("dpo", "ipo"):
        from datasets import Dataset
        from trl import DPOConfig, DPOTrainer
        import tempfile
        args = DPOConfig(output_dir=tempfile.mkdtemp(), report_to=[], loss_type=["sigmoid" if kind == "dpo" else "ipo"], beta=0.1,
                         max_length=None, precompute_ref_log_probs=peft_config is None, use_cpu=True, bf16=False,
                         gradient_checkpointing=False, disable_dropout=True)
        ds = Dataset.from_dict({"prompt": ["a"], "chosen": [" b"], "rejected": [" c"]})
        tr = DPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer_dir(), peft_config=peft_config)
        tr.model.train()
        return tr
    if kind == "orpo":
        from trl.experimental.orpo import ORPOTrainer as K
        me = types.SimpleNamespace(beta=0.1)
    else:
        from trl.experimental.cpo import CPOTrainer as K
        me = types.SimpleNamespace(beta=0.1, label_smoothing=0.0, loss_type="simpo", simpo_gamma=0.5, cpo_alpha=0.0, alpha=0.0,
                                   pad_token_id=EOT)
    me.accelerator = fake_accelerator()
    me.aux_loss_enabled = False
    me.is_encoder_decoder = False
    me.padding_value = EOT
    me.label_pad_token_id = -100
    for f in ("concatenated_forward", "get_batch_loss_metrics", "odds_ratio_loss", "cpo_loss", "concatenated_inputs", "get_batch_logps"):
        if hasattr(K, f):
            setattr(me, f, types.MethodType(getattr(K, f), me) if f not in ("concatenated_inputs", "get_batch_logps") else getattr(K, f))
    return me


METRIC_KEYS = ["rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected",
               "nll_loss", "log_odds_ratio", "log_odds_chosen"]


def trl_loss(kind, tr, model, trl_pairs, ref_logps=None):
    """(loss tensor, metrics list of 10) of TRL's code on these pairs."""
    if kind in ("dpo", "ipo"):
        batch = dpo_collate(trl_pairs)
        if ref_logps is not None:
            batch["ref_chosen_logps"], batch["ref_rejected_logps"] = ref_logps
        tr._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        loss = tr._compute_loss(model, batch, False)
        m = tr._metrics["train"]
        return loss, [loss.item()] + [m[k][-1] if k in m else 0.0 for k in METRIC_KEYS]
    loss, m = tr.get_batch_loss_metrics(model, orpo_batch(trl_pairs), "train")
    return loss, [loss.item()] + [float(m.get(k, 0.0)) if (kind == "orpo" or k != "nll_loss") else 0.0 for k in METRIC_KEYS]


def ref_logps_of(tr, ref_model, trl_pairs):
    from trl.trainer.utils import add_fused_lm_head
    if ref_model is not tr.model and not getattr(ref_model, "_pref_fused", False):  # (the trainer's model has its head)
        add_fused_lm_head(ref_model)
        ref_model._pref_fused = True
    with torch.no_grad():
        c, r = tr.compute_ref_log_probs(ref_model, dpo_collate(trl_pairs))
    return c.detach(), r.detach()


def lora_setup(kind, base, spec, seed):
    """A PEFT model with B drawn non-zero (and ln_f perturbed for modules_to_save), the trainer."""
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2LMHeadModel
    m = GPT2LMHeadModel(tiny_config())
    m.load_state_dict(base.state_dict())
    cfg = LoraConfig(lora_dropout=0.0, task_type="CAUSAL_LM", fan_in_fan_out=True, **spec)
    if kind in ("dpo", "ipo"):
        tr = pref_trainer(kind, m, peft_config=cfg)
        model = tr.model
    else:
        model = get_peft_model(m, cfg)
        tr = pref_trainer(kind, model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            elif "lora_A" in n:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif "modules_to_save" in n and p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    model.train()
    return model, tr


def grads_of(model, lora):
    out = {}
    for n, p in model.named_parameters():
        if not p.requires_grad or p.grad is None:
            continue
        if lora:
            key = n.replace("modules_to_save.default.", "").replace(".default", "")
            if not key.startswith("base_model.model."):
                key = "base_model.model." + key
        else:
            key = n
        out["grad." + key] = p.grad.detach().clone().contiguous()
    return out


def train_steps(kind, tr, model, trl_pairs, ref_logps):
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=BETAS, eps=EPS)
    losses, norms = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss, _ = trl_loss(kind, tr, model, trl_pairs, ref_logps)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], CLIP)
        opt.step()
        losses.append(loss.item()); norms.append(norm.item())
    return torch.tensor(losses, dtype=torch.float32), torch.tensor(norms, dtype=torch.float32)


def run_set(name, kind, model, tr, trl_pairs, ref_logps, lora, steps, out):
    per = []
    for i, p in enumerate(trl_pairs):
        rl = None if ref_logps is None else (ref_logps[0][i:i + 1], ref_logps[1][i:i + 1])
        with torch.no_grad():
            per.append(trl_loss(kind, tr, model, [p], rl)[0].item())
    model.zero_grad(set_to_none=True)
    loss, metrics = trl_loss(kind, tr, model, trl_pairs, ref_logps)
    loss.backward()
    out[name + ".pair_loss"] = torch.tensor(per, dtype=torch.float32)
    out[name + ".metrics"] = torch.tensor(metrics, dtype=torch.float32)
    for k, v in grads_of(model, lora).items():
        out[name + "." + k] = v.float()
    print(f"{name:16s} loss {metrics[0]:.6f} rewards/acc {metrics[3]:.2f} margins {metrics[4]:.5f} ({len(per)} pairs)")
    if steps:
        l, n = train_steps(kind, tr, model, trl_pairs, ref_logps)
        out[name + ".train_losses"], out[name + ".train_grad_norms"] = l, n
        print(f"{name:16s} 10 steps: loss {l[0]:.6f} -> {l[-1]:.6f}")


def gen_model():
    torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(True)
    from transformers import GPT2LMHeadModel
    base, refm = make_models()
    x, y, doc, pairs, trl_pairs = make_batch()
    out = {"input_ids": x.to(torch.int32), "targets": y.to(torch.int32), "doc_start": doc.to(torch.int32), "pairs": pairs}
    lora_specs = {"lora": (dict(r=4, lora_alpha=8, target_modules="all-linear"), 21),
                  "lora_lnf": (dict(r=2, lora_alpha=4, target_modules=["c_attn"], modules_to_save=["ln_f"]), 22)}
    for kind in ("dpo", "ipo", "orpo", "simpo"):
        m = GPT2LMHeadModel(tiny_config()); m.load_state_dict(base.state_dict()); m.train()
        tr = pref_trainer(kind, m)
        model = tr.model if kind in ("dpo", "ipo") else m
        ref = None
        if kind in ("dpo", "ipo"):
            ref = ref_logps_of(tr, refm, trl_pairs)
            out["full.ref_logps"] = torch.stack(ref, dim=1).float()
        run_set("full." + kind, kind, model, tr, trl_pairs, ref, False, False, out)
        if kind in ("dpo", "ipo"):  # the 10 steps: the reference is the policy before training
            m2 = GPT2LMHeadModel(tiny_config()); m2.load_state_dict(base.state_dict()); m2.train()
            tr2 = pref_trainer(kind, m2)
            ref0 = ref_logps_of(tr2, m2, trl_pairs)
            l, n = train_steps(kind, tr2, tr2.model, trl_pairs, ref0)
        else:
            l, n = train_steps(kind, tr, model, trl_pairs, None)
        out["full." + kind + ".train_losses"], out["full." + kind + ".train_grad_norms"] = l, n
        print(f"full.{kind:11s} 10 steps: loss {l[0]:.6f} -> {l[-1]:.6f}")
        for lname, (spec, seed) in lora_specs.items():
            if lname == "lora_lnf" and kind != "dpo":
                continue
            model, tr = lora_setup(kind, base, spec, seed)
            if kind == "dpo" or lname == "lora":
                d = os.path.join(MODEL_DIR, lname)
                model.save_pretrained(d)
                if os.path.exists(os.path.join(d, "README.md")): os.remove(os.path.join(d, "README.md"))
            run_set(lname + "." + kind, kind, model, tr, trl_pairs, None, True, lname == "lora", out)
    import trl, transformers, peft
    meta = {"format": "pt", "generator": "dev/gen_pref_ref.py model", "trl": trl.__version__, "transformers": transformers.__version__,
            "peft": peft.__version__, "torch": torch.__version__, "beta": "0.1", "orpo_lambda": "0.1", "simpo_gamma": "0.5",
            "steps": str(STEPS), "lr": str(LR), "beta1": str(BETAS[0]), "beta2": str(BETAS[1]), "eps": str(EPS),
            "weight_decay": str(WD), "grad_clip": str(CLIP)}
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(MODEL_DIR, "ref.safetensors"), metadata=meta)
    print("->", MODEL_DIR)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "loss":
        gen_loss()
    elif what == "model":
        gen_model()
    else:
        sys.exit(__doc__)
