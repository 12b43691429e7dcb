"""Writes test/ref/grad_scaler/trajectory.txt: torch.amp.GradScaler's decisions step by step.

Runs of one parameter under torch.amp.GradScaler("cpu"), with gradients planted per step (a
finite value, inf or NaN). Each run opens with
    plan NAME init_scale growth_interval KIND*COUNT ...
(the planted gradient of every step, in order), then one line per step after scaler.update():
    run step found_inf skipped scale growth_tracker param
run "default": the defaults (init 2^16, x2 after 2000 clean steps, x0.5 on inf/NaN), a few
overflows; run "interval3": growth_interval=3 (skip, backoff, regrowth after 3 clean steps);
run "ceiling": init_scale=2^127, growth_interval=1 (a growth to 2^128 is inf in fp32: the scale
stays, the tracker restarts); run "long": the default interval, 2001 clean steps (steps 1998-2004
written). param: the parameter after the step, SGD lr 0.5 on the unscaled gradient 0.25. test/test_loss_scale.c replays the same gradients.
Usage: python dev/gen_grad_scaler_ref.py > test/ref/grad_scaler/trajectory.txt
"""
import math
import torch

RUNS = {
    "default": (dict(), ["ok"] * 3 + ["inf"] + ["ok"] * 2 + ["nan", "inf"] + ["ok"] * 3),
    "interval3": (dict(growth_interval=3), ["ok", "inf", "ok", "ok", "ok", "ok", "nan", "ok", "ok", "ok", "ok", "ok", "ok", "inf", "inf", "ok"]),
    "ceiling": (dict(init_scale=2.0**127, growth_interval=1), ["ok", "ok", "inf", "ok", "ok"]),
    "long": (dict(), ["ok"] * 2001 + ["inf"] + ["ok"] * 2),
}
SHOWN = {"long": range(1998, 2005)}  # the steps of a run that are written (all where not named)


def grad(kind):
    return {"ok": 0.25, "inf": math.inf, "nan": math.nan}[kind]


def main():
    print("# run step found_inf skipped scale growth_tracker param (torch %s GradScaler)" % torch.__version__)
    for name, (kw, plan) in RUNS.items():
        rle = []
        for kind in plan:
            if rle and rle[-1][0] == kind: rle[-1][1] += 1
            else: rle.append([kind, 1])
        print("plan", name, repr(kw.get("init_scale", 2.0**16)), kw.get("growth_interval", 2000),
              " ".join("%s*%d" % (k, n) for k, n in rle))
        p = torch.nn.Parameter(torch.ones(1))
        opt = torch.optim.SGD([p], lr=0.5)
        scaler = torch.amp.GradScaler("cpu", **kw)
        for step, kind in enumerate(plan, 1):
            opt.zero_grad()
            loss = (p * 1.0).sum()
            scaler.scale(loss).backward()
            # the planted gradient, as the scaled backward would produce it
            p.grad.fill_(grad(kind) * scaler.get_scale())
            before = p.detach().clone()
            scaler.step(opt)
            found = int(sum(v.item() for v in scaler._found_inf_per_device(opt).values()))
            scaler.update()
            skipped = int(torch.equal(before, p.detach()))
            if name not in SHOWN or step in SHOWN[name]:
                print(name, step, found, skipped, repr(scaler.get_scale()), scaler._get_growth_tracker(), repr(p.item()))


if __name__ == "__main__":
    main()
