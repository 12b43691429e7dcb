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


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "loss":
        gen_loss()
    elif what == "model":
        gen_model()
    else:
        sys.exit(__doc__)
