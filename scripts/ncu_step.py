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
      line per kernel name and metric, the mean over its launches; then, per kernel, the figures
      derived from those means that the CSV has the metrics of (FIGURES: the share of the
      kernel's time its SMs were busy, the pipes' activity, counts per HMMA instruction) and the
      warp-state breakdown: each stall reason's warps per issued instruction
      (smsp__average_warps_issue_stalled_REASON_per_issue_active.ratio, Nsight Compute's
      WarpStateStats section) and its share of all the reasons'.
  ncu_step.py source CSV [--top N]
      CSV of a kernel's source page (`ncu -i REPORT --page source --csv --print-source sass` of a
      report with the SourceCounters section): one row per SASS instruction. Prints per kernel
      the shared-memory wavefronts against the ideal, the N instructions (default 12) with the
      most excessive shared wavefronts (bank conflicts; "L1 Wavefronts Shared Excessive") with
      their opcode, the excess by opcode, and the N where the warps' stall samples fall most with
      their main reasons.

Lines it prints (parsed by scripts/gpu_report.py):
  step   N of M | K kernels | total X ms | attention forward X ms | attention backward X ms | gemm X ms | other X ms
  kernel NAME | launches | X ms | P %
  metric KERNEL | METRIC | VALUE UNIT | launches
  figure KERNEL | NAME | VALUE
  stall  KERNEL | REASON | WARPS PER ISSUED INSTRUCTION | SHARE %
  source KERNEL | instructions N | executed X | shared wavefronts W | ideal I | excessive E | stall samples S
  sass_excess KERNEL | ADDRESS | OPCODE | excessive E | wavefronts W | ideal I | executed X | P %
  opcode_excess KERNEL | OPCODE | instructions N | excessive E | wavefronts W | P %
  sass_stall KERNEL | ADDRESS | OPCODE | samples S | P % | REASON P %, REASON P %, ...
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
UNIT_BYTES = {"byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12}


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


HMMA = "smsp__inst_executed_pipe_tensor_op_hmma.sum"
# (name, how it is computed from the kernel's means, what it is): printed when the CSV has its metrics
FIGURES = [
    ("time_us", ("time", "gpu__time_duration.sum"), "kernel time, microseconds"),
    # the tail model: sm__cycles_elapsed counts every SM's cycles from the kernel's start to its end
    # (one clock: the same on every SM, so .avg = .max), sm__cycles_active those with a block
    # resident; the ratio of the averages is the mean SM's busy share of the kernel's time
    ("active_over_elapsed", ("ratio", "sm__cycles_active.avg", "sm__cycles_elapsed.avg"), "SM cycles active / elapsed"),
    ("issue_active_pct", ("value", "smsp__issue_active.avg.pct_of_peak_sustained_active"), "issue slots used, %"),
    ("warp_cycles_per_issue", ("value", "smsp__average_warp_latency_per_inst_issued.ratio"), "warp cycles per issued instruction"),
    ("eligible_warps_per_cycle", ("value", "smsp__warps_eligible.avg.per_cycle_active"), "eligible warps per scheduler and cycle"),
    ("tensor_pct", ("value", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"), "tensor pipe (HMMA), %"),
    ("xu_pct", ("value", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"), "XU pipe (MUFU), %"),
    ("fma_pct", ("value", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"), "FMA pipe, %"),
    ("alu_pct", ("value", "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active"), "ALU pipe, %"),
    ("lsu_pct", ("value", "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active"), "LSU pipe, %"),
    ("shared_pct", ("value", "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed"),
     "shared-memory wavefronts, % of peak"),
    ("inst_per_hmma", ("ratio", "smsp__inst_executed.sum", HMMA), "instructions per HMMA"),
    ("ldsm_per_hmma", ("ratio", "smsp__inst_executed_op_ldsm.sum", HMMA), "LDSM per HMMA"),
    ("xu_per_hmma", ("ratio", "sm__inst_executed_pipe_xu.sum", HMMA), "XU (MUFU) instructions per HMMA"),
    ("shared_wavefronts_per_hmma", ("ratio", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", HMMA), "shared wavefronts per HMMA"),
    ("ld_conflicts_per_hmma", ("ratio", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", HMMA), "shared-load bank conflicts per HMMA"),
    ("l2_hit_pct", ("value", "lts__t_sector_hit_rate.pct"), "L2 sector hit rate, %"),
    ("dram_mb", ("bytes", "dram__bytes.sum"), "DRAM traffic, MB"),
]
STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio$")


def kernel_means(rows):
    """{kernel: {metric: (mean, unit, launches)}} over the CSV's launches of each kernel."""
    acc = {}
    for r in rows:
        k = acc.setdefault(short_name(r["Kernel Name"]), {})
        s, c, _ = k.get(r["Metric Name"], (0.0, 0, ""))
        k[r["Metric Name"]] = (s + number(r["Metric Value"]), c + 1, r.get("Metric Unit", "").strip())
    return {k: {m: (s / c, u, c) for m, (s, c, u) in ms.items()} for k, ms in acc.items()}


def figure(ms, how):
    """One FIGURES value from a kernel's means, or None when a metric is missing (or 0 below)."""
    def scaled(name, table, div):
        if name not in ms:
            return None
        v, unit, _ = ms[name]
        f = table.get(unit.lower())
        if f is None:
            raise SystemExit(f"ncu_step.py: {name}: unknown unit {unit!r}")
        return v * f / div
    if how[0] == "value":
        return ms[how[1]][0] if how[1] in ms else None
    if how[0] == "time":
        return scaled(how[1], UNIT_NS, 1e3)
    if how[0] == "bytes":
        return scaled(how[1], UNIT_BYTES, 1e6)
    a, b = ms.get(how[1]), ms.get(how[2])
    return a[0] / b[0] if a and b and b[0] else None


def print_metrics(path):
    means = kernel_means(read_rows(path))
    for k in sorted(means):
        for m, (v, u, c) in sorted(means[k].items()):
            print(f"metric {k[:90]} | {m} | {v:.4g} {u} | {c}")
    for k in sorted(means):
        for name, how, _ in FIGURES:
            v = figure(means[k], how)
            if v is not None:
                print(f"figure {k[:90]} | {name} | {v:.4g}")
        stalls = [(STALL.match(m).group(1), v) for m, (v, _, _) in means[k].items() if STALL.match(m)]
        total = sum(v for _, v in stalls)
        for reason, v in sorted(stalls, key=lambda rv: (-rv[1], rv[0])):
            print(f"stall  {k[:90]} | {reason} | {v:.4g} | {100 * v / total if total else 0:.1f} %")


def source_tables(path):
    """[(kernel, header, rows)] of a source-page CSV: a "Kernel Name" row names the kernel of the
    table that follows (the header row has "Address" and "Source"; then one row per SASS
    instruction, its address in hex); ncu's ==PROF== / ==WARNING== lines are left out."""
    with open(path, newline="", errors="replace") as f:
        lines = [l for l in f if not l.startswith("==")]
    tables, kernel, header = [], "", None
    for row in csv.reader(lines):
        if not row:
            continue
        if row[0] == "Kernel Name" and len(row) > 1:
            kernel, header = short_name(row[1]), None
        elif "Source" in row and any(c.endswith("Address") for c in row):
            header = row
            tables.append((kernel, header, []))
        elif header is not None and len(row) >= len(header):
            tables[-1][2].append(row)
    tables = [t for t in tables if t[2]]
    if not tables:
        raise SystemExit(f"ncu_step.py: {path}: no SASS rows (is it `ncu -i REPORT --page source --csv` output?)")
    return tables


def opcode(sass):
    """The opcode of a SASS line with its modifiers ("LDS.64", "LDSM.16.MT88.4"), without its predicate."""
    words = sass.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else "?"


def count(v):
    """A source-page cell as a number: thousands separators allowed, "-" or empty (n/a) is 0."""
    v = v.strip().replace(",", "")
    return 0.0 if v in ("", "-", "n/a") else float(v)


def sass_rows(header, rows):
    """The instructions of one source table: address, opcode and the counts the report uses."""
    col = {}
    for i, c in enumerate(header):
        col.setdefault(c, i)   # (the first of a repeated name: "Instructions Executed" appears twice)
    get = lambda r, c: count(r[col[c]]) if c in col else 0.0
    samp = next((c for c in header if c.startswith("Warp Stall Sampling (All")), None)
    addr = next(c for c in header if c.endswith("Address"))
    stalls = [c for c in header if c.startswith("stall_") and "Not Issued" not in c]
    out = []
    for r in rows:
        w, ideal = get(r, "L1 Wavefronts Shared"), get(r, "L1 Wavefronts Shared Ideal")
        exc = get(r, "L1 Wavefronts Shared Excessive") if "L1 Wavefronts Shared Excessive" in col else max(w - ideal, 0.0)
        out.append({"addr": r[col[addr]].strip(), "op": opcode(r[col["Source"]]), "exec": get(r, "Instructions Executed"),
                    "w": w, "ideal": ideal, "exc": exc, "samp": get(r, samp) if samp else 0.0,
                    "stalls": {c: get(r, c) for c in stalls}})
    return out


def print_source(path, top):
    for kernel, header, rows in source_tables(path):
        ins = sass_rows(header, rows)
        tot = {k: sum(i[k] for i in ins) for k in ("exec", "w", "ideal", "exc", "samp")}
        name = kernel[:90] or "?"
        print(f"source {name} | instructions {len(ins)} | executed {tot['exec']:.0f} | shared wavefronts {tot['w']:.0f} | "
              f"ideal {tot['ideal']:.0f} | excessive {tot['exc']:.0f} | stall samples {tot['samp']:.0f}")
        for i in sorted((i for i in ins if i["exc"] > 0), key=lambda i: -i["exc"])[:top]:
            print(f"sass_excess {name} | {i['addr']} | {i['op']} | excessive {i['exc']:.0f} | wavefronts {i['w']:.0f} | "
                  f"ideal {i['ideal']:.0f} | executed {i['exec']:.0f} | {100 * i['exc'] / tot['exc']:.1f} %")
        by_op = {}
        for i in ins:
            if i["w"] > 0 or i["exc"] > 0:
                n, e, w = by_op.get(i["op"], (0, 0.0, 0.0))
                by_op[i["op"]] = (n + 1, e + i["exc"], w + i["w"])
        for op, (n, e, w) in sorted(by_op.items(), key=lambda kv: (-kv[1][1], -kv[1][2], kv[0])):
            print(f"opcode_excess {name} | {op} | instructions {n} | excessive {e:.0f} | wavefronts {w:.0f} | "
                  f"{100 * e / tot['exc'] if tot['exc'] else 0:.1f} %")
        for i in sorted((i for i in ins if i["samp"] > 0), key=lambda i: -i["samp"])[:top]:
            reasons = sorted(((v, c) for c, v in i["stalls"].items() if v > 0), key=lambda vc: (-vc[0], vc[1]))[:3]
            print(f"sass_stall {name} | {i['addr']} | {i['op']} | samples {i['samp']:.0f} | {100 * i['samp'] / tot['samp']:.1f} % | "
                  + ", ".join(f"{c} {100 * v / i['samp']:.0f} %" for v, c in reasons))


USAGE_ARGS = {"times": (3, 5), "metrics": (3, 3), "source": (3, 5)}


def main(argv):
    if len(argv) < 3 or argv[1] not in USAGE_ARGS or len(argv) not in USAGE_ARGS[argv[1]] \
            or (len(argv) == 5 and argv[3] != ("--step" if argv[1] == "times" else "--top")):
        print(__doc__, file=sys.stderr)
        return 2
    n = int(argv[4]) if len(argv) == 5 else 0
    if argv[1] == "times":
        print_times(argv[2], n)
    elif argv[1] == "metrics":
        print_metrics(argv[2])
    else:
        print_source(argv[2], n or 12)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
