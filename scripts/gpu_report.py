#!/usr/bin/env python3
"""The report of scripts/gpu_check.sh: reads DIR/results.jsonl (one record per item, the last one
of a key wins) and the logs it names, writes DIR/report.md and DIR/report.json. Python standard
library only (CI has no ML stack).

  python3 scripts/gpu_report.py DIR
  python3 scripts/gpu_report.py --sanitizer-verdict TOOL SANITIZER_LOG PROGRAM_EXIT_STATUS

Exit status: 0 when no item failed or timed out, 1 when one did, 2 when DIR has no results. The
second form judges one compute-sanitizer run (scripts/gpu_sanitize.sh): exit 0 when it passes.
"""
import json, os, re, statistics, sys

SECTIONS = [("env", "Environment"), ("tests", "GPU test programs"), ("watchdog", "Watchdog, NCCL path (one GPU)"),
            ("train", "Training throughput (llmc-ft)"),
            ("torch", "PyTorch on the same device"), ("kernels", "Kernel programs (dev/cuda)"),
            ("sanitize", "compute-sanitizer")]


def read(path, limit=None):
    try:
        with open(path, errors="replace") as f:
            return f.read() if limit is None else f.read(limit)
    except OSError:
        return ""


def load_results(d):
    recs = {}
    for line in read(os.path.join(d, "results.jsonl")).splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        recs[r["key"]] = r   # the last record of a key wins (a rerun replaces a budget skip)
    return recs


def logtext(d, r):
    return read(os.path.join(d, r["log"])) if r.get("log") else ""


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
def parse_env(d, recs):
    env = {}
    gi = recs.get("env/gpu_info")
    if gi:
        for line in logtext(d, gi).splitlines():
            if "=" in line and not line.startswith("$"):
                k, v = line.split("=", 1)
                env[k.strip()] = v.strip()
    smi = recs.get("env/nvidia_smi")
    if smi:
        lines = [l for l in logtext(d, smi).splitlines() if l and not l.startswith("$")]
        if len(lines) >= 2 and "," in lines[1]:
            keys = [k.strip() for k in lines[0].split(",")]
            vals = [v.strip() for v in lines[1].split(",")]
            env["nvidia_smi"] = dict(zip(keys, vals))
        m = re.search(r"CUDA Version:\s*([0-9.]+)", logtext(d, smi))
        if m:
            env["driver_cuda_version"] = m.group(1)
    libs = recs.get("env/libraries")
    if libs:
        env["libraries"] = {}
        for line in logtext(d, libs).splitlines():
            m = re.match(r"^(lib\S+\.so\.\d+) (.+)$", line)
            if m:
                env["libraries"][m.group(1)] = m.group(2)
    t = recs.get("env/torch")
    if t:
        env["torch"] = ", ".join(l for l in logtext(d, t).splitlines() if re.match(r"^(torch|transformers|peft) ", l))[:300]
    h = recs.get("env/host")
    if h:
        env["host"] = ", ".join(l for l in logtext(d, h).splitlines()[1:] if l)[:400]
    return env


def test_summary(text):
    """The line a test program ends with, and its first failures."""
    lines = text.splitlines()
    fails = [l for l in lines if l.startswith("FAIL")][:3]
    last = next((l for l in reversed(lines) if re.search(r"checks (passed|FAILED)|all .* passed|passed|failed", l)), "")
    return (last or (lines[-1] if lines else "")).strip()[:200], fails


STEP_RE = re.compile(r"^step +(\d+)/(\d+) \| loss ([-0-9.naninf]+) \| lr \S+ \| norm ([-0-9.naninf]+) \| ([0-9.]+) ms \| ([0-9.]+) tok/s"
                     r"(?: \| ([0-9.]+) TFLOP/s(?: \| MFU ([0-9.]+%))?)?")


def parse_train_log(text, warmup):
    steps = []
    for line in text.splitlines():
        m = STEP_RE.match(line)
        if m:
            steps.append({"step": int(m.group(1)), "loss": num(m.group(3)), "norm": num(m.group(4)), "ms": float(m.group(5)),
                          "tok_per_s": float(m.group(6)), "tflops": num(m.group(7)),
                          "mfu": num(m.group(8)[:-1]) / 100 if m.group(8) and m.group(8) != "n/a" else None})
    out = {"steps": len(steps)}
    timed = steps[warmup:] if len(steps) > warmup else steps
    if timed:
        out["ms_per_step"] = round(statistics.median(s["ms"] for s in timed), 3)
        out["tok_per_s"] = round(statistics.median(s["tok_per_s"] for s in timed), 1)
        tf = [s["tflops"] for s in timed if s["tflops"] is not None]
        out["tflops"] = round(statistics.median(tf), 2) if tf else None
        mf = [s["mfu"] for s in timed if s["mfu"] is not None]
        out["mfu"] = round(statistics.median(mf), 4) if mf else None
        out["loss_first"], out["loss_last"] = steps[0]["loss"], steps[-1]["loss"]
    m = re.search(r"memory \(this rank\):.*\| total ([0-9.]+) MiB", text)
    out["trainer_mib"] = float(m.group(1)) if m else None
    # the memory plan (llmc/plan/plan_run.h): its peak, and after step 1 what the run took beside it
    m = re.search(r"^memory plan \(this rank\): peak ([0-9.]+) MiB", text, re.M)
    out["plan_peak_mib"] = float(m.group(1)) if m else None
    m = re.search(r"^memory after step 1: measured ([0-9.]+) MiB .*\| plan ([0-9.]+) MiB", text, re.M)
    out["step1_taken_mib"], out["step1_plan_mib"] = (float(m.group(1)), float(m.group(2))) if m else (None, None)
    m = re.search(r"^auto: --batch-size (\d+):", text, re.M)
    out["auto_batch"] = int(m.group(1)) if m else None
    m = re.search(r"^backend: (.*)$", text, re.M)
    out["backend"] = m.group(1) if m else None
    m = re.search(r"^model: (\S+) .*\| (\d+) parameters", text, re.M)
    out["model"], out["n_params"] = (m.group(1), int(m.group(2))) if m else (None, None)
    return out


PACK_KINDS = (("packed", "packed (--pack T)"), ("windows", "one record a window (--record-windows T)"),
              ("stream", "token stream"))


def parse_pack(d, r, warm):
    """A pack run (train/pack_KIND): its step times against the targets each step trained (the
    check's "pack_trained" line, from the shard's mask), B and T from its command line."""
    text = logtext(d, r)
    row = {"kind": r["item"][len("pack_"):], "status": r["status"], "reason": r["reason"]}
    row.update(parse_train_log(text, warm))
    row["device_peak_mib"] = peak_mem(d, r["item"])
    m = re.search(r"--batch-size (\d+) .*--seq-len (\d+)", text)
    row["batch"], row["seq_len"] = (int(m.group(1)), int(m.group(2))) if m else (None, None)
    m = re.search(r"^pack_trained ([\d ]+)$", text, re.M)
    trained = [int(x) for x in m.group(1).split()] if m else []
    ms = [float(x.group(5)) for x in (STEP_RE.match(l) for l in text.splitlines()) if x]
    pairs = list(zip(trained, ms))[warm:]
    if pairs and row["batch"]:
        row["trained_tok_per_s"] = round(statistics.median(t / (m_ / 1000.0) for t, m_ in pairs), 1)
        row["trained_per_slot"] = round(sum(t for t, _ in pairs) / (len(pairs) * row["batch"] * row["seq_len"]), 4)
    return row


PREF_KINDS = (("lora", "DPO, LoRA r=8 on c_attn"), ("full", "DPO, every parameter"))
PREF_STEP_TAIL = re.compile(r"\| acc ([0-9.naninf]+) \| margin ([-0-9.eE+naninf]+)$")


def parse_pref(d, r, warm):
    """A DPO run (train/pref_KIND): its step times against the pairs each step trained (the check's
    "pref_pairs" line, from the shard's mask), the last step's reward accuracy and margin, how
    long the reference's log-probabilities took where they were computed before training."""
    text = logtext(d, r)
    row = {"kind": r["item"][len("pref_"):], "status": r["status"], "reason": r["reason"]}
    row.update(parse_train_log(text, warm))
    row["device_peak_mib"] = peak_mem(d, r["item"])
    m = re.search(r"--batch-size (\d+) .*--seq-len (\d+)", text)
    row["batch"], row["seq_len"] = (int(m.group(1)), int(m.group(2))) if m else (None, None)
    m = re.search(r"^pref_pairs ([\d ]+)$", text, re.M)
    pairs = [int(x) for x in m.group(1).split()] if m else []
    steps = [(float(x.group(5)), PREF_STEP_TAIL.search(l)) for l in text.splitlines() for x in [STEP_RE.match(l)] if x]
    timed = list(zip(pairs, [ms for ms, _ in steps]))[warm:]
    if timed:
        row["pairs_per_step"] = round(statistics.mean(p for p, _ in timed), 2)
        row["pairs_per_s"] = round(statistics.median(p / (ms / 1000.0) for p, ms in timed), 1)
    last = steps[-1][1] if steps and steps[-1][1] else None
    row["acc_last"], row["margin_last"] = (num(last.group(1)), num(last.group(2))) if last else (None, None)
    m = re.search(r"^reference: log-probabilities computed in ([0-9.]+) s", text, re.M)
    row["reference_s"] = float(m.group(1)) if m else None
    return row


def peak_mem(d, item):
    """The device memory used at most during a run minus before it (nvidia-smi, MiB)."""
    base = [num(x) for x in read(os.path.join(d, "logs/train", item + ".mem.base")).split()]
    vals = [num(x) for x in read(os.path.join(d, "logs/train", item + ".mem")).split()]
    vals = [v for v in vals if v is not None]
    base = [v for v in base if v is not None]
    if not vals:
        return None
    return max(vals) - (base[0] if base else 0.0)


def parse_quickstart(text):
    """The main job's log (scripts/lora_tiny.sh): both validation losses, both samples, its time."""
    q = {}
    m = re.search(r"base model:\s+([-0-9.]+)", text)
    q["loss_before"] = num(m.group(1)) if m else None
    m = re.search(r"after LoRA \((\d+) steps\):\s+([-0-9.]+)", text)
    q["lora_steps"], q["loss_after"] = (int(m.group(1)), num(m.group(2))) if m else (None, None)
    m = re.search(r"^time: (\d+) s", text, re.M)
    q["seconds"] = int(m.group(1)) if m else None
    for key, head in (("sample_base", "== sample of the base model"), ("sample_lora", "== sample of the fine-tuned model")):
        i = text.find(head)
        if i < 0:
            q[key] = None
            continue
        body = text[text.index("\n", i) + 1:]
        end = min([j for j in (body.find("\n== "), body.find("\nvalidation loss on")) if j >= 0] or [len(body)])
        q[key] = body[:end].strip("\n")
    return q


def parse_kernels(text):
    checks, times, shape = [], [], ""
    for line in text.splitlines():
        f = [x.strip() for x in line.split(" | ")]
        if line.startswith("prog ") and len(f) >= 3:
            shape = f[2]
        elif line.startswith("check ") and len(f) >= 5:
            checks.append({"prog": f[0][6:].strip(), "what": f[1], "err": num(f[2].split()[-1]), "tol": num(f[3].split()[-1]),
                           "ok": f[4] == "ok"})
        elif line.startswith("time ") and len(f) >= 5:
            times.append({"prog": f[0][5:].strip(), "what": f[1], "ms": num(f[2].split()[0]), "gbps": num(f[3].split()[0]),
                          "tflops": num(f[4].split()[0]), "shape": shape})
    return checks, times


STEP_LINE = re.compile(r"^step\s+(\d+) of (\d+) \| (\d+) kernels \| total ([0-9.]+) ms \| attention forward ([0-9.]+) ms \| "
                       r"attention backward ([0-9.]+) ms \| gemm ([0-9.]+) ms \| other ([0-9.]+) ms$")


def parse_ncu(text):
    """What scripts/ncu_step.py printed: the step's split and heaviest kernels (times), or one row
    per kernel and metric (metrics)."""
    out = {"step": None, "kernels": [], "metrics": [], "figures": {}, "stalls": {}, "unknown_metrics": []}
    for line in text.splitlines():
        m = STEP_LINE.match(line)
        f = [x.strip() for x in line.split(" | ")]
        if m:
            v = [float(x) for x in m.groups()]
            out["step"] = dict(zip(["step", "steps", "launches", "total_ms", "attn_fwd_ms", "attn_bwd_ms", "gemm_ms", "other_ms"], v))
        # (the program's own "kernel NAME regs .. | local .. | .." resource lines are in the same log)
        elif line.startswith("kernel ") and len(f) == 4 and f[1].isdigit():
            out["kernels"].append({"name": f[0][7:], "launches": int(f[1]), "ms": num(f[2].split()[0]), "pct": num(f[3].split()[0])})
        elif line.startswith("metric ") and len(f) == 4 and f[3].isdigit():
            out["metrics"].append({"kernel": f[0][7:], "metric": f[1], "value": f[2], "launches": int(f[3])})
        elif line.startswith("figure ") and len(f) == 3:
            out["figures"].setdefault(f[0][7:], {})[f[1]] = num(f[2])
        elif line.startswith("stall ") and len(f) == 4:
            out["stalls"].setdefault(f[0][6:].strip(), []).append({"reason": f[1], "value": num(f[2]), "share": num(f[3].split()[0])})
        elif line.startswith("ncu_unknown_metrics "):
            out["unknown_metrics"] = line.split()[1].split(",")
        elif line.startswith("NVIDIA (R) Nsight Compute") or re.match(r"^Version \d", line):
            out["ncu_version"] = (out.get("ncu_version", "") + " " + line.strip()).strip()
    return out


def parse_ncu_source(text):
    """What ncu_step.py source printed for one kernel: its totals, the instructions with the most
    excessive shared wavefronts, the excess by opcode, the instructions with the most stall samples."""
    out = {"kernel": None, "excess": [], "opcodes": [], "stalls": []}
    val = lambda x: num(x.split()[-1])
    for line in text.splitlines():
        f = [x.strip() for x in line.split(" | ")]
        if line.startswith("source ") and len(f) == 7:
            out["kernel"] = f[0][7:]
            for k, x in zip(("instructions", "executed", "wavefronts", "ideal", "excessive", "samples"), f[1:]):
                out[k] = val(x)
        elif line.startswith("sass_excess ") and len(f) == 8:
            out["excess"].append({"address": f[1], "opcode": f[2], "excessive": val(f[3]), "wavefronts": val(f[4]),
                                  "ideal": val(f[5]), "executed": val(f[6]), "share": num(f[7].split()[0])})
        elif line.startswith("opcode_excess ") and len(f) == 6:
            out["opcodes"].append({"opcode": f[1], "instructions": val(f[2]), "excessive": val(f[3]), "wavefronts": val(f[4]),
                                   "share": num(f[5].split()[0])})
        elif line.startswith("sass_stall ") and len(f) == 6:
            out["stalls"].append({"address": f[1], "opcode": f[2], "samples": val(f[3]), "share": num(f[4].split()[0]),
                                  "reasons": f[5]})
    return out if out["kernel"] else None


def attention_rows(rep):
    """One row per T: our flash forward and backward (attention_bench at B=16, NH=12, HS=64) beside
    SDPA's flash and cuDNN backends at the same shapes (the torch section), TFLOP/s."""
    rows = {}
    for t in rep["kernel_times"]:
        m = re.match(r"^attention_bench_t(\d+)$", t.get("item", ""))
        if not m or t["tflops"] is None:
            continue
        row = rows.setdefault(int(m.group(1)), {})
        # the forward's other softmax chunking (attention_fwd.cuh FA_CH: the A/B a GPU run decides)
        if t["what"].startswith("forward flash, ") and "softmax step" in t["what"]:
            row["ours_fwd_1step"] = t["tflops"]
        elif t["what"].startswith("forward flash") and "ours_fwd" not in row:
            row["ours_fwd"], row["ours_fwd_what"] = t["tflops"], t["what"]
        # the deterministic backward (the default) when the program times both modes
        if t["what"].startswith("backward flash") and ("ours_bwd" not in row or "deterministic" in t["what"]):
            row["ours_bwd"], row["ours_bwd_what"] = t["tflops"], t["what"]
    for a in rep.get("torch_attention", []):
        row = rows.setdefault(a["T"], {})
        row[a["backend"]] = a
    return [dict(T=T, **rows[T]) for T in sorted(rows)]


def sanitizer_errors(text):
    m = re.search(r"ERROR SUMMARY: (\d+) error", text)
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------------------------------------
# compute-sanitizer's reports, sorted by whose kernel they are in (scripts/gpu_sanitize.sh)

# Kernels of cuBLAS / cuBLASLt (nvjet, CUTLASS, xmma generations, split-K reduction) and NCCL: a
# hazard inside one of them is the library's, not ours. Our kernels are named after their op
# (llmc/cuda/*.cu: *_kernel), none with these prefixes.
LIBRARY_KERNEL = re.compile(r"^(nvjet_|cutlass|cublas|ncclKernel|ncclDevKernel|sm\d+_xmma|xmma|ampere_|hopper_|splitKreduce)")
LIBRARY_MODULE = re.compile(r"\blib(cublas|cublasLt|nccl)\.so")
SAN_NOISE = re.compile(r"^(COMPUTE-SANITIZER|ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY|Target application returned|"
                       r"Error: process didn't terminate|This may be caused)")


def san_records(text):
    """The reports of a compute-sanitizer log: (first line, [continuation lines]). Robust to the
    program's output interleaved with them (a '=========' that does not start its line starts one)."""
    recs = []
    for raw in text.splitlines():
        parts = raw.split("=========")
        for frag in parts[1:]:
            if not frag.strip():
                continue
            if frag.startswith("     ") or frag.startswith("\t"):
                if recs:
                    recs[-1][1].append(frag.strip())
            else:
                recs.append((frag.strip(), []))
    return [r for r in recs if not SAN_NOISE.match(r[0])]


def san_kernel_name(s):
    s = re.sub(r"^void ", "", s.strip())
    return re.split(r"[(<]", s, 1)[0].strip() or s


def san_classify(head, lines):
    """(whose, name, weight, severity) of one report: whose is 'library' or 'ours'."""
    text = "\n".join([head] + lines)
    kernels = [san_kernel_name(k) for k in re.findall(r"access at (.+?)\+0x[0-9a-f]+", text)]
    for l in [head] + lines:
        m = re.match(r"^at (?:0x[0-9a-f]+ in )?(.+?)(?:\+0x[0-9a-f]+)?$", l)
        if m and not kernels:
            kernels.append(san_kernel_name(m.group(1)))
    m = re.search(r"\[(\d+) hazards?\]", text)
    weight = int(m.group(1)) if m else 1
    severity = "warning" if head.startswith("Warning") else "error"
    if kernels:
        ours = [k for k in kernels if not LIBRARY_KERNEL.match(k)]
        return ("ours", ours[0], weight, severity) if ours else ("library", kernels[0], weight, severity)
    # no kernel: an API error, a leak, a host access: whose host frame comes first
    frames = [l for l in lines if l.startswith("Host Frame:")]
    m = re.search(r"on CUDA API call to (\w+)", head)
    name = "API error in %s" % m.group(1) if m else "leak" if head.startswith("Leaked") else head[:60]
    first = next((f for f in frames if "libcuda.so" not in f and "libcudart" not in f), "")
    return ("library" if LIBRARY_MODULE.search(first) else "ours", name, weight, severity)


def sanitizer_verdict(tool, text, rc):
    """Pass / fail of one sanitizer item from its log and the program's exit status."""
    found = {"ours": {}, "library": {}, "warnings": {}}
    n_err = 0
    for head, lines in san_records(text):
        whose, name, weight, sev = san_classify(head, lines)
        bucket = found["warnings"] if sev == "warning" else found[whose]
        bucket[name] = bucket.get(name, 0) + weight
        n_err += sev == "error"
    total = sanitizer_errors(text)
    m = re.search(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?", text)
    if m:
        total = int(m.group(1))
    v = {"tool": tool, "rc": rc, "errors": total, "printed": n_err, "ours": found["ours"], "library": found["library"],
         "warnings": found["warnings"]}
    listing = lambda d: ", ".join("%s (%d)" % kv for kv in sorted(d.items(), key=lambda kv: -kv[1]))
    why = []
    if rc != 0:
        why.append("the program exited %d under the sanitizer" % rc)
    if total is None:
        why.append("no summary from the sanitizer (it did not finish)")
    if found["ours"]:
        why.append("%d in our code: %s" % (sum(found["ours"].values()), listing(found["ours"])))
    if total is not None and total > n_err:
        why.append("%d reports beyond the print limit, whose is unknown" % (total - n_err))
    v["status"] = "fail" if why else "pass"
    v["reason"] = "; ".join(why) if why else ("library findings only: " + listing(found["library"]) if found["library"] else "")
    return v


def sanitizer_main(tool, path, rc):
    v = sanitizer_verdict(tool, read(path), int(rc))
    for whose in ("ours", "library", "warnings"):
        for k, n in sorted(v[whose].items()):
            print("%-8s %-9s %s: %d" % ("finding" if whose != "warnings" else "warning", whose, k, n))
    print(("FAIL %s: " % tool + v["reason"]) if v["status"] == "fail" else ("ok   %s: %s" % (tool, v["reason"] or "clean")))
    print("sanitizer_verdict " + json.dumps(v, sort_keys=True))
    return 0 if v["status"] == "pass" else 1


# ---------------------------------------------------------------------------------------------
def build(d):
    recs = load_results(d)
    runs = [json.loads(l) for l in read(os.path.join(d, "runs.jsonl")).splitlines() if l.strip()]
    mode = runs[-1]["mode"] if runs else "?"
    rep = {"mode": mode, "runs": runs, "summary": {}, "items": {}}
    for key, r in recs.items():
        rep["items"][key] = {k: r.get(k) for k in ("section", "item", "status", "reason", "seconds", "log")}
    for sec, _ in SECTIONS:
        rs = [r for r in recs.values() if r["section"] == sec]
        c = {"pass": 0, "fail": 0, "timeout": 0, "skip": 0}
        for r in rs:
            c[r["status"]] = c.get(r["status"], 0) + 1
        c["seconds"] = round(sum(float(r.get("seconds") or 0) for r in rs), 1)
        rep["summary"][sec] = c
    env = parse_env(d, recs)
    rep["env"] = env
    peak_tf = num(env.get("peak_bf16_tflops"))
    peak_bw = num(env.get("peak_mem_gbps"))

    # tests
    rep["tests"] = []
    for key, r in sorted(recs.items()):
        if r["section"] != "tests":
            continue
        last, fails = test_summary(logtext(d, r))
        rep["tests"].append({"program": r["item"], "status": r["status"], "reason": r["reason"], "seconds": r["seconds"],
                             "summary": last, "failures": fails})

    qs = recs.get("tests/quickstart")
    rep["quickstart"] = parse_quickstart(logtext(d, qs)) if qs else None
    for t in rep["tests"]:
        if t["program"] == "quickstart" and rep["quickstart"] and rep["quickstart"].get("loss_after") is not None:
            q = rep["quickstart"]
            t["summary"] = "validation loss on the target %.4f -> %.4f in %s s" % (q["loss_before"], q["loss_after"], q.get("seconds", "?"))

    # watchdog: one item per case of test_nccl_watchdog_gpu; its "ok" line says how the case ended
    rep["watchdog"] = []
    for key, r in sorted(recs.items()):
        if r["section"] != "watchdog":
            continue
        last, fails = test_summary(logtext(d, r))
        ok = next((l.strip()[5:] for l in logtext(d, r).splitlines() if l.startswith("ok   ")), "")
        rep["watchdog"].append({"case": r["item"], "status": r["status"], "reason": r["reason"], "seconds": r["seconds"],
                                "summary": ok or last, "failures": fails})
    rep["watchdog"].sort(key=lambda t: {"init": 0, "stuck": 1, "healthy": 2}.get(t["case"], 9))

    # training
    warm = 2
    rep["train"] = []
    for key, r in recs.items():
        if r["section"] != "train" or not re.match(r"^(full|lora|qlora|xl)_b\d+$", r["item"]):
            continue
        mode_, b = r["item"].split("_b")
        row = {"mode": mode_, "batch": int(b), "status": r["status"], "reason": r["reason"]}
        row.update(parse_train_log(logtext(d, r), warm))
        row["device_peak_mib"] = peak_mem(d, r["item"])
        det = recs.get("train/%s_determinism" % mode_)
        if det and recs.get("train/%s_b%s_repeat" % (mode_, b)):
            row["deterministic"] = det["status"]
        rep["train"].append(row)
    rep["auto"] = []
    for key, r in recs.items():
        if r["section"] == "train" and r["item"].startswith("auto_"):
            row = {"model": r["item"][len("auto_"):], "status": r["status"], "reason": r["reason"]}
            row.update(parse_train_log(logtext(d, r), 0))
            row["device_peak_mib"] = peak_mem(d, r["item"])
            rep["auto"].append(row)
    order = {"full": 0, "compiled": 0.5, "lora": 1, "qlora": 2, "xl": 3}
    rep["train"].sort(key=lambda x: (order[x["mode"]], x["batch"]))
    rep["determinism"] = [{"mode": r["item"].split("_")[0], "status": r["status"], "reason": r["reason"]}
                          for r in recs.values() if r["section"] == "train" and r["item"].endswith("_determinism")]
    kinds = [k for k, _ in PACK_KINDS]
    rep["pack"] = sorted((parse_pack(d, r, warm) for r in recs.values()
                          if r["section"] == "train" and r["item"] in ["pack_" + k for k in kinds]),
                         key=lambda x: kinds.index(x["kind"]))
    pd = recs.get("train/pack_data")
    rep["pack_data"] = [l for l in logtext(d, pd).splitlines() if l.startswith("pack: ")] if pd else []
    kinds = [k for k, _ in PREF_KINDS]
    rep["pref"] = sorted((parse_pref(d, r, warm) for r in recs.values() if r["section"] == "train" and r["item"] in ["pref_" + k for k in kinds]),
                         key=lambda x: kinds.index(x["kind"]))
    pd = recs.get("train/pref_data")
    rep["pref_data"] = [l for l in logtext(d, pd).splitlines() if l.startswith("pack: ")] if pd else []

    # torch
    rep["torch"], rep["torch_attention"] = [], []
    for key, r in recs.items():
        if r["section"] != "torch":
            continue
        for line in logtext(d, r).splitlines():
            if line.startswith("torch_result "):
                try:
                    rep["torch"].append(json.loads(line[len("torch_result "):]))
                except ValueError:
                    pass
            elif line.startswith("torch_attention "):
                try:
                    rep["torch_attention"].append(json.loads(line[len("torch_attention "):]))
                except ValueError:
                    pass
            elif line.startswith("torch_info "):
                try:
                    rep["torch_info"] = json.loads(line[len("torch_info "):])
                except ValueError:
                    pass
    rep["torch"].sort(key=lambda x: (order.get(x["mode"], 9), x["batch"]))

    # kernels
    rep["kernel_checks"], rep["kernel_times"] = [], []
    for key, r in sorted(recs.items()):
        if r["section"] != "kernels":
            continue
        c, t = parse_kernels(logtext(d, r))
        for x in c + t:
            x["item"] = r["item"]
        rep["kernel_checks"] += c
        for x in t:
            x["pct_peak_bw"] = round(100 * x["gbps"] / peak_bw, 1) if x["gbps"] and peak_bw else None
            x["pct_peak_tflops"] = round(100 * x["tflops"] / peak_tf, 1) if x["tflops"] and peak_tf else None
        rep["kernel_times"] += t
        if r["item"] in ("ncu_step", "ncu_attention") and r["status"] == "pass":
            rep[r["item"]] = parse_ncu(logtext(d, r))
        if r["item"].startswith("ncu_source_") and r["status"] == "pass":
            src = parse_ncu_source(logtext(d, r))
            if src:
                rep.setdefault("ncu_source", []).append(dict(src, item=r["item"]))
    rep["attention"] = attention_rows(rep)

    # sanitizers
    rep["sanitize"] = []
    for key, r in sorted(recs.items()):
        if r["section"] != "sanitize":
            continue
        tool, prog = r["item"].split("_", 1)
        text = logtext(d, r)
        verdict = next((json.loads(l[len("sanitizer_verdict "):]) for l in reversed(text.splitlines())
                        if l.startswith("sanitizer_verdict ")), None)
        rep["sanitize"].append({"tool": tool, "program": prog, "status": r["status"], "reason": r["reason"],
                                "errors": sanitizer_errors(text), "seconds": r["seconds"], "verdict": verdict})
    return rep


# ---------------------------------------------------------------------------------------------
def fmt(v, spec="%.1f", none="-"):
    return none if v is None else spec % v


def status_cell(r):
    s, why = r["status"], r.get("reason") or ""
    if why.startswith("skipped: "):
        why = why[len("skipped: "):]
    return s if not why else "%s: %s" % (s, why)

def result_table(L, rows, key, last):
    """A table of programs or cases: name, result, seconds, and the summary with any failures."""
    L.append("| %s | result | seconds | %s |" % (key, last))
    L.append("|---|---|---|---|")
    for t in rows:
        s = t["summary"] + ("; " + "; ".join(t["failures"]) if t["failures"] else "")
        L.append("| %s | %s | %s | %s |" % (t[key], status_cell(t), t["seconds"], s.replace("|", "/")))
    L.append("")


def attention_table(L, rep):
    rows = rep.get("attention") or []
    if not rows:
        return
    L.append("### Attention: ours beside PyTorch's kernels")
    L.append("")
    L.append("Causal, B=16, NH=12, HS=64, bf16, TFLOP/s counting the T (T + 1) / 2 visible pairs (4 HS FLOPs each forward,"
             " 10 backward): ours from dev/cuda/attention_bench (the deterministic backward), PyTorch's"
             " scaled_dot_product_attention forced to its flash and to its cuDNN backend (dev/bench_torch_gpu.py --attention).")
    L.append("")
    L.append("| T | ours forward | ours backward | SDPA flash forward | SDPA flash backward | SDPA cuDNN forward | SDPA cuDNN backward |"
             " ours forward, the other softmax chunking (A/B) |")
    L.append("|---|---|---|---|---|---|---|---|")

    def torch_cells(a):
        if not a:
            return ["-", "-"]
        if "error" in a:
            return [a["error"].replace("|", "/")[:80], ""]
        return [fmt(a.get("fwd_tflops"), "%.1f"), fmt(a.get("bwd_tflops"), "%.1f")]
    for r in rows:
        cells = [fmt(r.get("ours_fwd"), "%.1f"), fmt(r.get("ours_bwd"), "%.1f")] + torch_cells(r.get("flash")) + torch_cells(r.get("cudnn"))
        cells.append(fmt(r.get("ours_fwd_1step"), "%.1f"))
        L.append("| %d | %s |" % (r["T"], " | ".join(cells)))
    L.append("")


def ncu_tables(L, rep):
    s = (rep.get("ncu_step") or {}).get("step")
    if s:
        L.append("### Kernel time of one training step (Nsight Compute)")
        L.append("")
        L.append("train_gpt2, GPT-2 124M, B=16, T=1024, step %d of %d: every kernel's gpu__time_duration (ncu serialises the"
                 " kernels and flushes the caches between them, so the sum runs above the step's wall time). The first H100"
                 " run: 62.8 ms, attention 7.7 forward + 25.5 backward; llm.c with cuDNN 35.8 ms, attention 1.2 + 4.4." % (s["step"], s["steps"]))
        L.append("")
        L.append("| kernels | total ms | attention forward | attention backward | GEMM | other |")
        L.append("|---|---|---|---|---|---|")
        L.append("| %d | %.2f | %.2f | %.2f | %.2f | %.2f |" % (s["launches"], s["total_ms"], s["attn_fwd_ms"], s["attn_bwd_ms"],
                                                          s["gemm_ms"], s["other_ms"]))
        L.append("")
        L.append("| kernel | launches | ms | % of the step |")
        L.append("|---|---|---|---|")
        for k in rep["ncu_step"]["kernels"]:
            L.append("| %s | %d | %s | %s |" % (k["name"], k["launches"], fmt(k["ms"], "%.3f"), fmt(k["pct"])))
        L.append("")
    na = rep.get("ncu_attention") or {}
    ms = na.get("metrics") or []
    if ms:
        L.append("### The attention kernels under Nsight Compute")
        L.append("")
        L.append("attention_bench at B=16, T=1024, NH=12, HS=64: each metric's mean over the profiled launches%s." % (
            " (%s)" % na["ncu_version"] if na.get("ncu_version") else ""))
        L.append("")
        ncu_figure_tables(L, na)
        L.append("| kernel | metric | value | launches |")
        L.append("|---|---|---|---|")
        for m in ms:
            L.append("| %s | %s | %s | %d |" % (m["kernel"], m["metric"], m["value"], m["launches"]))
        L.append("")
        if na.get("unknown_metrics"):
            L.append("Not listed by this ncu (left out): " + ", ".join(na["unknown_metrics"]) + ".")
            L.append("")
    for src in rep.get("ncu_source") or []:
        ncu_source_table(L, src)


# the figures ncu_step.py derives, in the report's two tables: (name, column title, format)
NCU_ISSUE_COLS = [("time_us", "µs", "%.1f"), ("active_over_elapsed", "SM active / elapsed", "%.3f"),
                  ("issue_active_pct", "issue slots used", "%.1f%%"), ("warp_cycles_per_issue", "warp cycles per issued instruction", "%.2f"),
                  ("eligible_warps_per_cycle", "eligible warps per cycle", "%.2f"), ("inst_per_hmma", "instructions / HMMA", "%.2f"),
                  ("ldsm_per_hmma", "LDSM / HMMA", "%.3f"), ("xu_per_hmma", "MUFU (XU) / HMMA", "%.3f"),
                  ("shared_wavefronts_per_hmma", "shared wavefronts / HMMA", "%.2f"), ("ld_conflicts_per_hmma", "load bank conflicts / HMMA", "%.3f"),
                  ("l2_hit_pct", "L2 hit", "%.1f%%"), ("dram_mb", "DRAM MB", "%.1f")]
NCU_PIPE_COLS = [("tensor_pct", "tensor (HMMA)", "%.1f%%"), ("xu_pct", "XU (MUFU)", "%.1f%%"), ("fma_pct", "FMA", "%.1f%%"),
                 ("alu_pct", "ALU", "%.1f%%"), ("lsu_pct", "LSU", "%.1f%%"), ("shared_pct", "shared wavefronts", "%.1f%%")]


def ncu_figure_tables(L, na):
    """Per kernel: where its time goes (the tail, issue, counts per HMMA), its pipes, its warp states."""
    figs, stalls = na.get("figures") or {}, na.get("stalls") or {}
    if figs:
        for cols, title in ((NCU_ISSUE_COLS, "Time, the tail (SM cycles active / elapsed), issue and counts per HMMA instruction:"),
                            (NCU_PIPE_COLS, "Pipe activity, % of peak over the SMs' active cycles (shared wavefronts: over the"
                                            " kernel's time):")):
            cols = [c for c in cols if any(c[0] in f for f in figs.values())]
            if not cols:
                continue
            L.append(title)
            L.append("")
            L.append("| kernel | " + " | ".join(t for _, t, _ in cols) + " |")
            L.append("|---|" + "---|" * len(cols))
            for k in sorted(k for k in figs if any(n in figs[k] for n, _, _ in cols)):
                L.append("| %s | %s |" % (k, " | ".join(fmt(figs[k].get(n), f) for n, _, f in cols)))
            L.append("")
    if stalls:
        L.append("Warp states (WarpStateStats): warps per issued instruction in each state, and its share of all; the six largest:")
        L.append("")
        L.append("| kernel | warp states |")
        L.append("|---|---|")
        for k in sorted(stalls):
            L.append("| %s | %s |" % (k, ", ".join("%s %.2f (%.0f%%)" % (x["reason"], x["value"], x["share"]) for x in stalls[k][:6])))
        L.append("")


def ncu_source_table(L, src):
    """One kernel's SourceCounters: the SASS instructions with excessive shared wavefronts, and
    where the warps' stall samples fall."""
    L.append("### %s per SASS instruction (Nsight Compute SourceCounters, one launch)" % src["kernel"])
    L.append("")
    w, e = src.get("wavefronts") or 0, src.get("excessive") or 0
    L.append("%d instructions; shared-memory wavefronts %.0f, ideal %.0f, excessive %.0f (%.1f%%); %.0f warp stall samples."
             " The report: logs/kernels/%s.ncu-rep (`ncu -i`)." % (src.get("instructions") or 0, w, src.get("ideal") or 0, e,
                                                                   100.0 * e / w if w else 0.0, src.get("samples") or 0, src["item"]))
    L.append("")
    if src["excess"]:
        L.append("| address | opcode | excessive wavefronts | wavefronts | ideal | executed | share of the excess |")
        L.append("|---|---|---|---|---|---|---|")
        for x in src["excess"]:
            L.append("| %s | %s | %.0f | %.0f | %.0f | %.0f | %.1f%% |" % (x["address"], x["opcode"], x["excessive"], x["wavefronts"],
                                                                       x["ideal"], x["executed"], x["share"]))
        L.append("")
    if src["opcodes"]:
        L.append("Excess by opcode: " + ", ".join("%s %.1f%% (%d instructions, %.0f of %.0f wavefronts)" % (
            o["opcode"], o["share"], o["instructions"], o["excessive"], o["wavefronts"]) for o in src["opcodes"]) + ".")
        L.append("")
    if src["stalls"]:
        L.append("| address | opcode | stall samples | share | main reasons |")
        L.append("|---|---|---|---|---|")
        for x in src["stalls"]:
            L.append("| %s | %s | %.0f | %.1f%% | %s |" % (x["address"], x["opcode"], x["samples"], x["share"], x["reasons"]))
        L.append("")


def quickstart_block(L, q):
    """The main job on these programs: what a person running `make quickstart` reads."""
    if not q:
        return
    L.append("The main job (quickstart: `BIN_DIR=<these programs> scripts/lora_tiny.sh`): validation loss on the"
             " fine-tuning target %s (base model) -> %s (after %s LoRA steps), %s s in all."
             % (fmt(q.get("loss_before"), "%.4f"), fmt(q.get("loss_after"), "%.4f"), q.get("lora_steps") or "?",
                q.get("seconds") if q.get("seconds") is not None else "?"))
    for key, title in (("sample_base", "base model"), ("sample_lora", "fine-tuned model, same prompt and seed")):
        if q.get(key) is not None:
            L.append("")
            L.append("Sample of the %s:" % title)
            L.append("")
            L.append("```")
            L.append(q[key].replace("```", "` ` `"))
            L.append("```")
    L.append("")


def markdown(rep):
    L = []
    env = rep["env"]
    L.append("# llmc-ft GPU check (%s mode)" % rep["mode"])
    L.append("")
    if rep["runs"]:
        L.append("Runs: " + "; ".join("%s on %s (budget %ss, sections %s)" % (r["started"], r["host"], r["budget_s"], r["sections"])
                                      for r in rep["runs"]))
        L.append("")
    L.append("| section | pass | fail | timeout | skip | seconds |")
    L.append("|---|---|---|---|---|---|")
    for sec, title in SECTIONS:
        c = rep["summary"][sec]
        L.append("| %s | %d | %d | %d | %d | %.0f |" % (sec, c["pass"], c["fail"], c["timeout"], c["skip"], c["seconds"]))
    L.append("")

    L.append("## Environment")
    L.append("")
    rows = [("device", env.get("device")), ("compute capability", env.get("compute_capability")), ("SMs", env.get("sms")),
            ("memory", env.get("memory_gib") and env.get("memory_gib") + " GiB"),
            ("peak bf16 tensor FLOP/s", "%s TFLOP/s (%s)" % (env["peak_bf16_tflops"], env.get("peak_model")) if num(env.get("peak_bf16_tflops"))
             else "n/a (%s)" % ("the device is not in llmc/base/mfu.c's table" if env.get("device") else "no gpu_info")),
            ("peak memory bandwidth", env["peak_mem_gbps"] + " GB/s" if num(env.get("peak_mem_gbps")) else "n/a"),
            ("CUDA runtime / driver", "%s / %s" % (env.get("runtime", "-"), env.get("driver", "-"))),
            ("cuBLASLt", env.get("cublaslt")), ("NCCL", env.get("nccl")),
            ("driver (nvidia-smi)", (env.get("nvidia_smi") or {}).get("driver_version")),
            ("driver's CUDA version", env.get("driver_cuda_version")), ("PyTorch", env.get("torch")), ("host", env.get("host"))]
    L.append("| | |")
    L.append("|---|---|")
    for k, v in rows:
        L.append("| %s | %s |" % (k, v if v else "-"))
    for so, path in sorted((env.get("libraries") or {}).items()):
        L.append("| %s | %s |" % (so, path))
    for key, it in sorted(rep["items"].items()):
        if it["section"] == "env" and it["status"] != "pass":
            L.append("| %s | %s |" % (it["item"], status_cell(it)))
    L.append("")

    L.append("## GPU test programs")
    L.append("")
    result_table(L, rep["tests"], "program", "summary")
    quickstart_block(L, rep.get("quickstart"))

    L.append("## Watchdog, NCCL path (one GPU)")
    L.append("")
    L.append("test_nccl_watchdog_gpu, one child process per case: init (a 2-rank communicator whose second rank never joins),"
             " stuck (a kernel that hangs before an all-reduce), healthy (slow kernels under the limit: no verdict).")
    L.append("")
    result_table(L, rep["watchdog"], "case", "how it ended")

    L.append("## Training throughput")
    L.append("")
    L.append("GPT-2 124M shapes (emulated: the tiny test model), r=8 on c_attn for LoRA / QLoRA, and one GPT-2 XL (d48) full"
             " run (emulated: the `tiny` descriptor); median over the steps after two"
             " warm-up steps. TFLOP/s and MFU count model FLOPs (llmc/base/mfu.h: 6N + 6LCT per token, 4N for a frozen base)."
             " Device peak: nvidia-smi's memory.used during the run minus before it (CUDA context and workspaces included);"
             " trainer: the memory the trainer's own report lists.")
    L.append("")
    L.append("| run | B | result | ms/step | tokens/s | TFLOP/s | MFU | device peak MiB | trainer MiB | identical rerun |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in rep["train"]:
        size = lambda n: "%.2fB" % (n / 1e9) if n >= 1e9 else "%.1fM" % (n / 1e6)
        run = "full, %s (%s parameters)" % (r.get("model"), size(r["n_params"])) if r["mode"] == "xl" and r.get("n_params") else r["mode"]
        L.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            run, r["batch"], status_cell(r), fmt(r.get("ms_per_step")), fmt(r.get("tok_per_s"), "%.0f"),
            fmt(r.get("tflops"), "%.1f"), fmt(r.get("mfu") and 100 * r["mfu"], "%.1f%%"), fmt(r.get("device_peak_mib"), "%.0f"),
            fmt(r.get("trainer_mib"), "%.0f"), r.get("deterministic", "")))
    L.append("")
    for x in rep["determinism"]:
        L.append("- determinism, %s: %s" % (x["mode"], status_cell(x)))
    for key, it in sorted(rep["items"].items()):
        if it["section"] == "train" and not re.match(r"^((full|lora|qlora|xl)_(b\d+(_repeat)?|determinism)|pack_(data|packed|windows|stream)|pref_(data|lora|full)|auto_\w+)$",
                                                     it["item"]):
            L.append("- %s: %s" % (it["item"], status_cell(it)))
    L.append("")
    pack_table(L, rep)
    pref_table(L, rep)
    plan_table(L, rep)

    L.append("## PyTorch on the same device")
    L.append("")
    ti = rep.get("torch_info")
    if ti:
        L.append("torch %s (CUDA %s), transformers %s, peft %s on %s. full / lora: transformers' GPT2LMHeadModel, eager, fp32 weights,"
                 " bf16 autocast, SDPA attention; LoRA by PEFT. compiled: PyTorch's strongest setting for the same model, a"
                 " nanoGPT-style GPT-2 under torch.compile with fused AdamW, bf16 autocast, SDPA (its speed-up column compares with"
                 " our full run). No QLoRA row: bitsandbytes is not installed on the GPU machines." % (
                     ti.get("torch"), ti.get("cuda"), ti.get("transformers"), ti.get("peft"), ti.get("device_name")))
        L.append("")
    ours = {(r["mode"], r["batch"]): r for r in rep["train"]}
    L.append("| run | B | ms/step | tokens/s | TFLOP/s | MFU | peak allocated / reserved MiB | llmc-ft speed-up |")
    L.append("|---|---|---|---|---|---|---|---|")
    for r in rep["torch"]:
        if "error" in r:
            L.append("| %s | %d | %s | | | | | |" % (r["mode"], r["batch"], r["error"].replace("|", "/")))
            continue
        o = ours.get(("full" if r["mode"] == "compiled" else r["mode"], r["batch"]))
        sp = "%.2fx" % (r["ms_per_step"] / o["ms_per_step"]) if o and o.get("ms_per_step") else "-"
        L.append("| %s | %d | %.1f | %.0f | %.1f | %s | %s / %s | %s |" % (
            r["mode"], r["batch"], r["ms_per_step"], r["tok_per_s"], r["tflops"], fmt(r.get("mfu") and 100 * r["mfu"], "%.1f%%"),
            fmt(r.get("peak_alloc_mib"), "%.0f"), fmt(r.get("peak_reserved_mib"), "%.0f"), sp))
    for key, it in sorted(rep["items"].items()):
        if it["section"] == "torch" and it["status"] != "pass":
            L.append("")
            L.append("- %s: %s" % (it["item"], status_cell(it)))
    L.append("")

    L.append("## Kernel programs (dev/cuda)")
    L.append("")
    L.append("| program | result | seconds | checks |")
    L.append("|---|---|---|---|")
    for key, it in sorted(rep["items"].items()):
        if it["section"] != "kernels":
            continue
        cs = [c for c in rep["kernel_checks"] if c["item"] == it["item"]]
        bad = [c["what"] for c in cs if not c["ok"]]
        L.append("| %s | %s | %s | %d checks%s |" % (it["item"], status_cell(it), it["seconds"], len(cs),
                                                    ", MISMATCH: " + ", ".join(bad) if bad else ", all within tolerance" if cs else ""))
    L.append("")
    L.append("| program | shape | op | ms | GB/s | % peak BW | TFLOP/s | % peak bf16 |")
    L.append("|---|---|---|---|---|---|---|---|")
    for t in rep["kernel_times"]:
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (t["prog"], t.get("shape", ""), t["what"], fmt(t["ms"], "%.4f"), fmt(t["gbps"]),
                                                               fmt(t["pct_peak_bw"]), fmt(t["tflops"], "%.2f"), fmt(t["pct_peak_tflops"])))
    L.append("")
    attention_table(L, rep)
    ncu_tables(L, rep)

    L.append("## compute-sanitizer")
    L.append("")
    tools = ["memcheck", "racecheck", "synccheck", "initcheck"]
    progs = sorted({s["program"] for s in rep["sanitize"]})
    cell = {(s["tool"], s["program"]): s for s in rep["sanitize"]}
    L.append("| program | " + " | ".join(tools) + " |")
    L.append("|---|" + "---|" * len(tools))
    for p in progs:
        cells = []
        for t in tools:
            s = cell.get((t, p))
            if not s:
                cells.append("")
            elif s["status"] == "skip":
                cells.append("skip")
            else:
                cells.append(sanitize_cell(s))
        L.append("| %s | %s |" % (p, " | ".join(cells)))
    reasons = sorted({s["reason"] for s in rep["sanitize"] if s["status"] == "skip"})
    if reasons:
        L.append("")
        L.append("Skipped: " + "; ".join(x.replace("skipped: ", "", 1) for x in reasons))
    sanitize_findings(L, rep["sanitize"])
    L.append("")
    return "\n".join(L)


def plan_table(L, rep):
    """The memory plan against the device (issue 31): per run the plan's peak and what was measured."""
    rows = [(r["mode"] if r["mode"] != "xl" else "full, " + (r.get("model") or "xl"), r) for r in rep["train"]]
    rows += [("full, %s, --batch-size auto" % r["model"], r) for r in rep.get("auto", [])]
    rows = [(n, r) for n, r in rows if r.get("plan_peak_mib") is not None or r["status"] != "pass" and n.endswith("auto")]
    if not rows:
        return
    L.append("### Device memory: the plan against the device")
    L.append("")
    L.append("The trainers' plan (llmc/plan/memplan.c, printed at start-up): its peak (the buffers + the reserve for cuBLASLt, NCCL and"
             " small scratch); after the first step the device memory the run took since start-up (cudaMemGetInfo) against the plan's"
             " buffers; nvidia-smi's peak (the CUDA context included). The auto runs' B is the plan's largest that fits less 5%.")
    L.append("")
    L.append("| run | B | result | plan peak MiB | device peak MiB | taken by step 1 MiB | plan buffers MiB | taken - plan |")
    L.append("|---|---|---|---|---|---|---|---|")
    for name, r in rows:
        t, p = r.get("step1_taken_mib"), r.get("step1_plan_mib")
        diff = "%+.1f%%" % (100.0 * (t - p) / p) if t is not None and p else "-"
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, r.get("batch") or r.get("auto_batch") or "", status_cell(r), fmt(r.get("plan_peak_mib"), "%.0f"),
            fmt(r.get("device_peak_mib"), "%.0f"), fmt(t, "%.1f"), fmt(p, "%.1f"), diff))
    L.append("")


def prepare_lines(L, rep, key, what):
    """What data/prepare said for a section's data item train/KEY (or why the item failed), then a blank line."""
    for line in rep.get(key, []):
        L.append("- data/prepare: " + line[len("pack: "):])
    pd = rep["items"].get("train/" + key)
    if pd and pd["status"] != "pass":
        L.append("- %s: %s" % (what, status_cell(pd)))
    if rep.get(key) or (pd and pd["status"] != "pass"):
        L.append("")


def pack_table(L, rep):
    """Packed fine-tuning against one record a window and a token stream (issue 24)."""
    if not rep.get("pack"):
        return
    L.append("### Packed fine-tuning")
    L.append("")
    L.append("The same chat records (dev/pack_data.py: each speech of tinyshakespeare as the reply to the one before, ~100-300"
             " tokens) prepared three ways, LoRA r=8 on c_attn; trained tokens/s: the targets the loss masks train in each"
             " timed step over its time (median); tokens/s counts every position of the window.")
    L.append("")
    prepare_lines(L, rep, "pack_data", "preparing the records")
    L.append("| data | B | T | result | ms/step | tokens/s | trained tokens/s | trained per window slot | device peak MiB | trainer MiB |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")
    names = dict(PACK_KINDS)
    for r in rep["pack"]:
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            names.get(r["kind"], r["kind"]), r.get("batch") or "", r.get("seq_len") or "", status_cell(r), fmt(r.get("ms_per_step")),
            fmt(r.get("tok_per_s"), "%.0f"), fmt(r.get("trained_tok_per_s"), "%.0f"), fmt(r.get("trained_per_slot"), "%.3f"),
            fmt(r.get("device_peak_mib"), "%.0f"), fmt(r.get("trainer_mib"), "%.0f")))
    by = {r["kind"]: r for r in rep["pack"]}
    p, w = by.get("packed", {}).get("trained_tok_per_s"), by.get("windows", {}).get("trained_tok_per_s")
    if p and w:
        L.append("")
        L.append("Packed / one record a window, trained tokens/s: %.2fx." % (p / w))
    L.append("")


def pref_table(L, rep):
    """Preference tuning's throughput: tokens/s and pairs/s of DPO with LoRA and of full DPO."""
    if not rep.get("pref"):
        return
    L.append("### Preference tuning (DPO)")
    L.append("")
    L.append("Pairs from tinyshakespeare (dev/pack_data.py pairs: a speech and the one before it as the prompt, the speech on"
             " one line chosen, in the play's layout rejected) packed whole into the windows; GPT-2 124M (emulated: `tiny`)."
             " LoRA's reference is the base with the adapters off (one more forward a step, in its time); full fine-tuning's"
             " reference log-probabilities are computed once before training (not in the step times). pairs/s: the pairs each"
             " timed step trained (the shard's mask) over its time, median; tokens/s counts every position of the windows.")
    L.append("")
    prepare_lines(L, rep, "pref_data", "preparing the pairs")
    L.append("| run | B | T | result | ms/step | tokens/s | pairs/step | pairs/s | TFLOP/s | MFU | reference | acc / margin, last step |"
             " device peak MiB | trainer MiB |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    names = dict(PREF_KINDS)
    for r in rep["pref"]:
        ref = ("precomputed in %.1f s" % r["reference_s"] if r.get("reference_s") is not None
               else "adapters off" if r["kind"] == "lora" else "-")
        acc = "%.2f / %.4f" % (r["acc_last"], r["margin_last"]) if r.get("acc_last") is not None else "-"
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            names.get(r["kind"], r["kind"]), r.get("batch") or "", r.get("seq_len") or "", status_cell(r), fmt(r.get("ms_per_step")),
            fmt(r.get("tok_per_s"), "%.0f"), fmt(r.get("pairs_per_step"), "%.1f"), fmt(r.get("pairs_per_s"), "%.1f"),
            fmt(r.get("tflops"), "%.1f"), fmt(r.get("mfu") and 100 * r["mfu"], "%.1f%%"), ref, acc,
            fmt(r.get("device_peak_mib"), "%.0f"), fmt(r.get("trainer_mib"), "%.0f")))
    L.append("")


def sanitize_cell(s):
    v = s.get("verdict")
    if not v:
        return "%s%s" % (s["status"], " (%d errors)" % s["errors"] if s["errors"] else "")
    n_ours, n_lib = sum(v["ours"].values()), sum(v["library"].values())
    notes = (["%d ours" % n_ours] if n_ours else []) + (["%d in libraries" % n_lib] if n_lib else [])
    return s["status"] + (" (%s)" % ", ".join(notes) if notes else "")


def sanitize_findings(L, items):
    """Each finding by kernel: ours (they fail their item) and the libraries' (listed only)."""
    for whose, title in (("ours", "Findings in our code (each fails its item)"),
                         ("library", "Library findings (inside cuBLAS / cuBLASLt / NCCL kernels: listed, not failing)")):
        rows = [(s["tool"], s["program"], k, n) for s in items if s.get("verdict") for k, n in sorted(s["verdict"][whose].items())]
        if rows:
            L.append("")
            L.append(title + ":")
            L.append("")
            for tool, prog, k, n in rows:
                L.append("- %s, %s: `%s` (%d %s)" % (tool, prog, k, n, "hazards" if tool == "racecheck" else "reports"))
    failed = [s for s in items if s["status"] in ("fail", "timeout") and s.get("reason")]
    if failed:
        L.append("")
        L.append("Failed items:")
        L.append("")
    for s in failed:
        L.append("- %s, %s: %s" % (s["tool"], s["program"], status_cell(s)))


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--sanitizer-verdict":
        return sanitizer_main(*sys.argv[2:])
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    d = sys.argv[1]
    if not os.path.isfile(os.path.join(d, "results.jsonl")):
        print("error: gpu_report.py: %s has no results.jsonl (run scripts/gpu_check.sh --out %s first)" % (d, d), file=sys.stderr)
        return 2
    rep = build(d)
    for name, text in (("report.json", json.dumps(rep, indent=1, sort_keys=True) + "\n"), ("report.md", markdown(rep) + "\n")):
        tmp = os.path.join(d, name + ".tmp")
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(d, name))
    c = rep["summary"]
    print("report: %s/report.md (%s)" % (d, ", ".join("%s %d/%d/%d/%d" % (s, c[s]["pass"], c[s]["fail"], c[s]["timeout"], c[s]["skip"])
                                                      for s, _ in SECTIONS)) + " [pass/fail/timeout/skip]")
    return 1 if any(c[s]["fail"] or c[s]["timeout"] for s, _ in SECTIONS) else 0


if __name__ == "__main__":
    sys.exit(main())
