#!/usr/bin/env python3
"""How busy the flash attention kernels keep the SMs, by their blocks' start order (issue 30).

A model, not a measurement: the GPU starts blocks in linear order (x fastest) on the first free
slot (132 SMs x the blocks an SM: 2 forward and dK/dV, 4 dQ at HS 64); a block's duration is its
tile count (a masked diagonal tile 1.5 of an unmasked one: 979 against 658 instructions in the
forward's SASS); `--alone S`: a block left alone on its SM runs S times as fast as one of a pair
(latency-bound kernels: 1.3-1.6 is plausible; only the 2-slot kernels). It prints the busy
fraction (work / (slots x span)) of the order before ("head by head": each head's tiles longest
first, heads in turn) and of llmc/cuda/attention.cu's fa_block (rank-major within balanced groups
of at most 64 heads). The GPU run checks it: ncu's sm__cycles_active.avg over elapsed cycles.
  python3 dev/attention_schedule.py [--heads 192] [--T 1024] [--alone 1.0]"""
import argparse


def run(jobs, nsm, per, alone):
    sms, q, t, k = [[] for _ in range(nsm)], list(jobs), 0.0, 0
    while True:
        for s in sms:
            while len(s) < per and k < len(q):
                s.append(q[k])
                k += 1
        if not any(sms):
            return sum(jobs) / (nsm * per) / t
        rate = lambda s: alone if len(s) == 1 and per == 2 else 1.0
        dt = min(w / rate(s) for s in sms for w in s)
        t += dt
        for s in sms:
            r = rate(s)
            s[:] = [w - dt * r for w in s if w - dt * r > 1e-9]


def order(w, heads, group):
    jobs = []
    for g0 in range(0, heads, group):
        for x in w:
            jobs += [x] * min(group, heads - g0)
    return jobs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", type=int, default=192)   # B x NH
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--alone", type=float, default=1.0)
    a = ap.parse_args()
    nb, nq = a.T // 128, a.T // 64
    ng = -(-a.heads // 64)
    group = -(-a.heads // ng)
    kernels = (("forward", [2 * qb + 2 * 1.5 for qb in range(nb - 1, -1, -1)], 2),
               ("dK/dV", [nq - 2 * kb - 1 + 1.5 for kb in range(nb)], 2),
               ("dQ", [qt + 0.5 for qt in range(nq - 1, -1, -1)], 4))
    for name, w, per in kernels:
        before = run(order(w, a.heads, 1), a.sms, per, a.alone)
        after = run(order(w, a.heads, group), a.sms, per, a.alone)
        print(f"{name:8s} busy {before:.3f} head by head, {after:.3f} by groups of {group} heads: x{after / before:.3f}")


if __name__ == "__main__":
    main()
