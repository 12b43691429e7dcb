#!/usr/bin/env bash
# Static check of the flash attention kernels' machine code (llmc/cuda/attention.cu and the
# attention_*.cuh kernels it includes) against a committed budget (test/attention_sass_budget.txt),
# for each GPU architecture of the build (CUDA_ARCHS, sm_80 and sm_90): compiled as the build
# compiles it, disassembled with cuobjdump, every instantiation of the forward, dK/dV and dQ
# kernels (8 head sizes each; the forward at head size 64 also in its other softmax chunking,
# attention_fwd.cuh FA_CH) must
#   - run its products on the tensor cores' documented layouts: HMMA.16816.F32.BF16 (mma.sync
#     m16n8k16 bf16 -> fp32), fed by LDSM (ldmatrix) from shared memory, filled by LDGSTS (cp.async);
#   - touch no local memory: no LDL / STL (a spill, or an array indexed at run time);
#   - stay within its budget line, per iteration of its main loop (the loop holding the most HMMA,
#     innermost on a tie: the forward's and dQ's key tiles, dK/dV's query sub-steps): the HMMA
#     count (the tiling: equal), instructions per HMMA (issue slots), LDSM per HMMA (shared-memory
#     reads), global stores by width (dK/dV's dS: 16-byte), registers, blocks an SM by registers.
# An iteration is counted along its steady-state path through the loop's control flow: the most
# HMMA, then the most LDGSTS (the next tile's copy issued), then the fewest instructions (the
# unmasked branch, the forward's tiles without a rescale of O: attention_softmax.cuh's lazy
# rescaling); a diverged warp's out-of-line shuffle code (BRA.DIV) is not on it.
#   bash test/check_attention_sass.sh                  the check (make test)
#   bash test/check_attention_sass.sh --write-budget   rewrite the budget from the figures of this
#                                                      source and compiler, plus the margins below
# cuobjdump: on PATH, or from PyPI's nvidia-cuda-cuobjdump (.ci/run installs it; the toolkit
# here has none); without it the check is skipped, loudly. Runs once (not in the sanitizer pass).
set -u
cd "$(dirname "$0")/.."
NVCC="${NVCC:-nvcc}"
BUDGET=test/attention_sass_budget.txt
MODE=check
[ "${1:-}" = "--write-budget" ] && MODE=write
if [ "${SAN:-}" = "1" ]; then echo "SKIP check_attention_sass under SAN=1 (checked in the plain pass)"; exit 0; fi
if ! command -v ${NVCC%% *} >/dev/null 2>&1 && ! command -v "$NVCC" >/dev/null 2>&1; then echo "SKIP check_attention_sass: nvcc not found"; exit 0; fi
CUOBJDUMP=$(bash test/find_cuobjdump.sh)
if [ -z "$CUOBJDUMP" ] || [ ! -x "$CUOBJDUMP" ]; then
  echo "SKIP check_attention_sass: cuobjdump not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm (the SASS of the attention kernels was NOT checked)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for a in ${CUDA_ARCHS:-80 90}; do
  obj="$tmp/attention_sm$a.o"
  # shellcheck disable=SC2086
  if ! $NVCC -std=c++17 -O3 -DLLMC_CUDA -I. -Illmc -gencode arch=compute_$a,code=sm_$a -c llmc/cuda/attention.cu -o "$obj" 2>"$tmp/err"; then
    echo "FAIL: nvcc -arch=sm_$a llmc/cuda/attention.cu:"; cat "$tmp/err"; exit 1
  fi
  "$CUOBJDUMP" -sass "$obj" > "$tmp/sm$a.sass" && "$CUOBJDUMP" -res-usage "$obj" > "$tmp/sm$a.res" || { echo "FAIL: $CUOBJDUMP on $obj"; exit 1; }
done
python3 - "$MODE" "$BUDGET" "$tmp" ${CUDA_ARCHS:-80 90} <<'PY'
import math, re, subprocess, sys

mode, budget_path, tmp, archs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
KINDS = ("flash_attention_forward_kernel", "flash_attention_backward_dkv_kernel", "flash_attention_backward_dq_kernel")
LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
# the budget's margins over the figures reached (--write-budget): instructions per HMMA +3%,
# registers +8 (but never fewer blocks an SM); HMMA, LDSM and stores as reached
INSTR_MARGIN, REG_MARGIN = 1.03, 8

def functions(text):
    funcs, name = {}, None
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m: name = m.group(1); funcs[name] = []; continue
        m = LINE.search(line) if name else None
        if m: funcs[name].append((int(m.group(1), 16), (m.group(2) or "").strip(), m.group(3), m.group(4).strip()))
    return funcs

def branch(op): return op.split(".")[0] in ("BRA", "BRX", "JMP", "JMX")
def target(ops):
    h = re.findall(r"0x([0-9a-f]+)", ops)
    return int(h[-1], 16) if h else None

def counters(op):
    """the counters an instruction adds to (None: not issued work, NOP)"""
    base = op.split(".")[0]
    if base == "NOP": return None
    if op.startswith("HMMA"): return ["HMMA"]
    if base in ("LDSM", "LDGSTS", "MUFU", "BAR", "SHFL"): return [base]
    if base in ("STG", "STS", "LDS", "LDG", "RED", "ATOM", "ATOMG"):
        w = next((int(x) for x in ("128", "64") if "." + x in op), 32)
        return [f"{base}.{w}"]
    if base in ("LDL", "STL"): return ["LOCAL"]
    return []

def count(instrs):
    c = {"n": 0}
    for ins in instrs:
        k = counters(ins[2])
        if k is None: continue
        c["n"] += 1
        for x in k: c[x] = c.get(x, 0) + 1
    return c

def main_loop(ins):
    """per-iteration counts of the loop (back edge) with the most HMMA, innermost on a tie"""
    leaders = {ins[0][0]}
    for i, (a, p, op, ops) in enumerate(ins):
        if (branch(op) or op.startswith("EXIT")) and i + 1 < len(ins): leaders.add(ins[i + 1][0])
        if branch(op) and target(ops) is not None: leaders.add(target(ops))
    blocks = []
    for x in ins:
        if x[0] in leaders or not blocks: blocks.append([])
        blocks[-1].append(x)
    start = [b[0][0] for b in blocks]
    idx = {s: i for i, s in enumerate(start)}
    loops = [(target(b[-1][3]), b[-1][0]) for b in blocks
             if branch(b[-1][2]) and target(b[-1][3]) is not None and target(b[-1][3]) <= b[-1][0]]
    best = None
    for t, s in loops:
        h = sum(1 for x in ins if t <= x[0] <= s and x[2].startswith("HMMA"))
        if h and (best is None or (h, t - s) > best[0]): best = ((h, t - s), t, s)
    if best is None: return None
    _, t, s = best
    def key(c): return (c.get("HMMA", 0), c.get("LDGSTS", 0), -c["n"])
    def succ(i):
        a, p, op, ops = blocks[i][-1]
        nxt = start[i + 1] if i + 1 < len(blocks) else None
        if branch(op):
            if ".DIV" in op: return [nxt]   # taken by a diverged warp only (shuffles' slow path)
            cond = p not in ("", "@PT") or re.search(r"\bU?P[0-6]\b", ops.split("0x")[0])
            return [target(ops)] + ([nxt] if cond else [])
        if op.startswith("EXIT"): return [nxt] if p not in ("", "@PT") else []
        return [nxt]
    best_at = {idx[t]: count(blocks[idx[t]])}
    for i in range(idx[t], len(blocks)):
        if start[i] > s: break
        if i not in best_at: continue
        for sa in succ(i):
            if sa is None or not (t < sa <= s) or idx[sa] <= i: continue   # loop exits, back edges
            j, c = idx[sa], dict(best_at[i])
            for k, v in count(blocks[idx[sa]]).items(): c[k] = c.get(k, 0) + v
            if j not in best_at or key(c) > key(best_at[j]): best_at[j] = c
    ends = [i for i in best_at if blocks[i][-1][0] == s]   # the back edge's block; else the last one reached
    return best_at[ends[0] if ends else max(best_at)]

def figures(arch):
    sass, res = open(f"{tmp}/sm{arch}.sass").read(), open(f"{tmp}/sm{arch}.res").read()
    usage = dict(re.findall(r"Function (\S+):\s*\n\s*(REG:.*)", res))
    out = {}
    for fn, ins in functions(sass).items():
        if not any(k in fn for k in KINDS): continue
        pretty = subprocess.run(["c++filt", fn], capture_output=True, text=True).stdout.strip().split("(")[0].replace("void ", "").replace(", ", ",")
        u = usage.get(fn, "")
        regs = int(re.search(r"REG:(\d+)", u).group(1)) if "REG:" in u else 999
        local = int(re.search(r"LOCAL:(\d+)", u).group(1)) if "LOCAL:" in u else 0
        tot, loop = count(ins), main_loop(ins) or {"n": 0}
        h = loop.get("HMMA", 0)
        out[pretty] = {"regs": regs, "blocks": 65536 // (((regs + 7) // 8 * 8) * 128), "hmma": h,
                       "iph": loop["n"] / h if h else 0.0, "lph": loop.get("LDSM", 0) / h if h else 0.0,
                       "stg32": loop.get("STG.32", 0), "stg64": loop.get("STG.64", 0), "stg128": loop.get("STG.128", 0),
                       "local": tot.get("LOCAL", 0) + local, "total": tot}
    return out

def up(x, q): return math.ceil(x / q - 1e-9) * q
FIELDS = ("hmma", "instr/hmma", "ldsm/hmma", "stg.32", "stg.64", "stg.128", "regs", "blocks")

def budget_line(arch, k, f):
    regs = f["regs"] + REG_MARGIN
    while 65536 // (((regs + 7) // 8 * 8) * 128) < f["blocks"]: regs -= 1
    return (f"sm_{arch} {k:<44} hmma={f['hmma']} instr/hmma<={up(f['iph'] * INSTR_MARGIN, 0.01):.2f} "
            f"ldsm/hmma<={up(f['lph'], 0.001):.3f} stg.32<={f['stg32']} stg.64<={f['stg64']} stg.128<={f['stg128']} "
            f"regs<={regs} blocks>={f['blocks']}")

figs = {a: figures(a) for a in archs}
if mode == "write":
    with open(budget_path) as fh: head = [l for l in fh if l.startswith("#")]
    with open(budget_path, "w") as fh:
        fh.writelines(head)
        for a in archs:
            for k in sorted(figs[a]): fh.write(budget_line(a, k, figs[a][k]) + "\n")
    print(f"check_attention_sass: wrote {budget_path}")
    sys.exit(0)

budget = {}
for l in open(budget_path):
    if l.strip() and not l.startswith("#"):
        arch, k, *lim = l.split()
        budget[(arch, k)] = {m.group(1): (m.group(2), float(m.group(3)))
                             for m in (re.match(r"([a-z0-9./]+)(<=|>=|=)([0-9.]+)$", x) for x in lim)}
bad = 0
for a in archs:
    print(f"sm_{a}: {'kernel':<44} {'regs':>4} {'blk':>3} | main loop: {'HMMA':>4} {'instr/HMMA':>10} {'LDSM/HMMA':>9} "
          f"{'STG.32/64/128':>13} | budget")
    n = 0
    for k in sorted(figs[a]):
        f, why = figs[a][k], []
        n += 1
        have = {"hmma": f["hmma"], "instr/hmma": f["iph"], "ldsm/hmma": f["lph"], "stg.32": f["stg32"], "stg.64": f["stg64"],
                "stg.128": f["stg128"], "regs": f["regs"], "blocks": f["blocks"]}
        t = f["total"]
        if not (t.get("HMMA") and t.get("LDSM") and t.get("LDGSTS")): why.append("needs HMMA.16816.F32.BF16, LDSM and LDGSTS")
        if f["local"]: why.append(f"local memory (LDL/STL or LOCAL: {f['local']})")
        lim = budget.get((f"sm_{a}", k))
        if lim is None: why.append(f"no line in {budget_path}")
        else:
            for name in FIELDS:
                if name not in lim: continue
                (op, b), v = lim[name], have[name]
                if (op == "<=" and v > b + 1e-9) or (op == ">=" and v < b - 1e-9) or (op == "=" and abs(v - b) > 1e-9):
                    why.append(f"{name} {v:.3g} (budget {op} {b:g})")
        print(f"{'ok  ' if not why else 'FAIL'}   {k:<44} {f['regs']:>4} {f['blocks']:>3} | {f['hmma']:>14} {f['iph']:>10.2f} "
              f"{f['lph']:>9.3f} {f['stg32']:>5}/{f['stg64']}/{f['stg128']:<5} | " + ("within" if not why else "; ".join(why)))
        bad += bool(why)
    if n != 25: print(f"FAIL sm_{a}: expected 25 flash attention kernel instantiations (3 kernels x 8 head sizes, and the "
                      f"forward's other softmax chunking at head size 64), found {n}"); bad += 1
if bad: print(f"check_attention_sass: {bad} kernel(s) over the budget in {budget_path} or malformed (lines above); "
              "if a change is meant to cost more, say why in the kernels' comments and rerun with --write-budget")
else: print(f"check_attention_sass: every flash attention kernel on sm_{', sm_'.join(archs)} runs HMMA.16816.F32.BF16 fed by LDSM "
            f"and LDGSTS, with no local memory, within {budget_path}")
sys.exit(1 if bad else 0)
PY
