#!/usr/bin/env python3
"""Read Nsight Compute CSV output (`ncu --csv --metrics ...`) of a training run or a kernel
program, and print what the GPU check's report shows (scripts/gpu_check.sh, kernels section).

  ncu_step.py times CSV [--step N]
      CSV of `--metrics gpu__time_duration.sum` over a whole run of a few steps (ours or llm.c's
      train_gpt2cu). The steps are told apart by the optimizer's kernels (names with "adamw"),
      which end every step: step N is every kernel after the end of the optimizer's run N-1 up to
      the end of run N (default: the last one, the first being the warm-up). Prints the
      step's kernel time split into attention forward, attention backward, GEMMs (cuBLAS /
      cuBLASLt / cuDNN matmul kernels) and the rest, then its heaviest kernels.
  ncu_step.py metrics CSV
      CSV of any metrics over a few kernels (e.g. the attention kernels of attention_bench): one
      line per kernel name and metric, the mean over its launches.

Lines it prints (parsed by scripts/gpu_report.py):
  step   N of M | K kernels | total X ms | attention forward X ms | attention backward X ms | gemm X ms | other X ms
  kernel NAME | launches | X ms | P %
  metric KERNEL | METRIC | VALUE UNIT | launches
"""
import csv
import io
import re
import sys

# kernel name -> the part of the step it belongs to (first match wins)
GROUPS = [
    ("attention backward", re.compile(r"attention_backward|attention_bwd|flash_bwd|sdpa.*bprop|cudnn::matmul_dq|dot_do_o", re.I)),
    ("attention forward", re.compile(r"attention_forward|attention_fwd|flash_fwd|sdpa.*fprop", re.I)),
    ("gemm", re.compile(r"nvjet|gemm|xmma|cutlass|splitKreduce|cublas|^sm[0-9]+_", re.I)),
]
OPTIMIZER = re.compile(r"adamw", re.I)
UNIT_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}


def read_rows(path):
    """The CSV's rows as dicts: from its header line on, without the lines around them that are not
    CSV (ncu's ==PROF== / ==WARNING== lines, the program's output when it shares the file)."""
    with open(path, newline="", errors="replace") as f:
        lines = f.readlines()
    head = next((i for i, l in enumerate(lines) if l.startswith('"ID",')), len(lines))
    body = [l for l in lines[head:] if l.startswith('"')]
    rows = list(csv.DictReader(io.StringIO("".join(body))))
    if not rows or "Kernel Name" not in rows[0]:
        raise SystemExit(f"ncu_step.py: {path}: no kernel rows (is it `ncu --csv` output?)")
    return rows


def number(s):
    return float(s.replace(",", "")) if s not in ("", "n/a") else float("nan")


def short_name(name):
    """A kernel's name without its parameter list (templates kept)."""
    n = name.strip()
    if n.startswith("void "):
        n = n[5:]
    depth = 0
    for i, c in enumerate(n):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            return n[:i]
    return n


def group_of(name):
    for g, rx in GROUPS:
        if rx.search(name):
            return g
    return "other"


def kernel_times(rows):
    """[(short name, ns)] in launch order."""
    out = []
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = UNIT_NS.get(r.get("Metric Unit", "ns").strip().lower())
        if unit is None:
            raise SystemExit(f"ncu_step.py: unknown time unit {r.get('Metric Unit')!r}")
        out.append((short_name(r["Kernel Name"]), number(r["Metric Value"]) * unit))
    return out


def steps_of(times):
    """Index ranges [begin, end) of each step: it ends with the last kernel of an optimizer run (a
    run may interleave a few other kernels: llm.c casts each tensor's master weights between its
    AdamW launches)."""
    opt = [i for i, (name, _) in enumerate(times) if OPTIMIZER.search(name)]
    ends = []
    for k, i in enumerate(opt):
        if k + 1 == len(opt) or opt[k + 1] - i > 3:
            ends.append(i + 1)
    return [(0 if k == 0 else ends[k - 1], e) for k, e in enumerate(ends)]


def print_times(path, step):
    times = kernel_times(read_rows(path))
    steps = steps_of(times)
    if not steps:
        raise SystemExit(f"ncu_step.py: {path}: no optimizer kernel (adamw): cannot tell the steps apart")
    n = step if step else len(steps)
    if not 1 <= n <= len(steps):
        raise SystemExit(f"ncu_step.py: {path}: --step {n}, but the run has {len(steps)} steps")
    b, e = steps[n - 1]
    part = times[b:e]
    total = sum(t for _, t in part)
    by_group = {g: 0.0 for g, _ in GROUPS}
    by_group["other"] = 0.0
    by_kernel = {}
    for name, t in part:
        by_group[group_of(name)] += t
        c, s = by_kernel.get(name, (0, 0.0))
        by_kernel[name] = (c + 1, s + t)
    print(f"step   {n} of {len(steps)} | {len(part)} kernels | total {total / 1e6:.2f} ms | "
          + " | ".join(f"{g} {by_group[g] / 1e6:.2f} ms" for g in ("attention forward", "attention backward", "gemm", "other")))
    for name, (c, s) in sorted(by_kernel.items(), key=lambda kv: -kv[1][1])[:15]:
        print(f"kernel {name[:90]} | {c} | {s / 1e6:.3f} ms | {100 * s / total:.1f} %")


def print_metrics(path):
    acc = {}
    for r in read_rows(path):
        key = (short_name(r["Kernel Name"]), r["Metric Name"], r.get("Metric Unit", ""))
        v = number(r["Metric Value"])
        s, c = acc.get(key, (0.0, 0))
        acc[key] = (s + v, c + 1)
    for (k, m, u), (s, c) in sorted(acc.items()):
        print(f"metric {k[:90]} | {m} | {s / c:.4g} {u} | {c}")


def main(argv):
    if len(argv) < 3 or argv[1] not in ("times", "metrics"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[1] == "times":
        step = 0
        if len(argv) == 5 and argv[3] == "--step":
            step = int(argv[4])
        elif len(argv) != 3:
            print(__doc__, file=sys.stderr)
            return 2
        print_times(argv[2], step)
    else:
        print_metrics(argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
