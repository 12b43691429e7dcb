#!/usr/bin/env python3
"""A cycle model of the flash attention kernels' main loops on one Hopper SM, from their SASS.

What it answers: how many cycles a warp's loop iteration (the forward's key tile, the dK/dV
kernel's query tile) takes when N warps share a sub-partition (SMSP), how busy that keeps the
tensor pipe, and what that makes of the kernel at the GPT-2 shape; so that changed kernels
(llmc/cuda/attention.cu and the attention_*.cuh it includes) can be judged without a GPU. It is a
model: the figures below say how far it was checked against the one H200 run there is
(2026-11-28), and what it could not decide.

  python3 dev/fa_cycle_model.py [--tree DIR | --cubin X.o | --sass X.sass] [--kernel NAME]
        [--warps 2|3] [--phase inphase|half|free|noisy|all] [--estimate forward|dkv] [--set k=v]
  python3 dev/fa_cycle_model.py --calibrate [--sweep]      the tables below (~2 / ~20 minutes)
--tree compiles DIR/llmc/cuda/attention.cu for sm_90 with test/check_attention_sass.sh's flags
(default: this tree) and reads it with cuobjdump (PATH, or PyPI's nvidia-cuda-cuobjdump, as the
script finds it); --kernel takes a mangled or demangled name ('flash_attention_forward_kernel<64, 2>').
test/test_fa_cycle_model.sh checks what it reads from the SASS.

## The model

Input. cuobjdump -sass prints each 128-bit instruction as two 64-bit words; the second holds the
control bits Volta through Hopper share (Jia et al., "Dissecting the NVIDIA Volta GPU Architecture
via Microbenchmarking", 2018, sec. 2.1): stall count (4 bits), yield, write barrier, read barrier
(3 bits each, 7 = none), wait mask (6), reuse (4). Decoded so, 56 of the 64 scoreboard waits of
the forward's loop follow an instruction that set that barrier on registers the waiting one reads
(barrier_deps; the others guard memory or in-order completion): the layout holds on sm_90.
Operands: R, UR, P, UP by index, with ranges by opcode (HMMA.16816.F32: D 4, A 4, B 2, C 4, C = RZ
read as nothing; LDSM .x2/.x4: 2/4; 64/128-bit loads and stores, IMAD.WIDE's D and C, Rn.64 and
desc[URn] addresses: pairs; SHFL's and SETP's predicate D).
The loop: test/check_attention_sass.sh's rule (the back edge whose loop holds the most HMMA,
innermost on a tie); the path through it: most HMMA, then the next tile's copy issued, then the
block barrier (taken on every tile but a block's first), then the fewest instructions (unmasked,
no rescale block); --path masked takes the most instructions. --inner-trips K models the loop
around it with the main loop run K times inside (dK/dV at HS 64: a query tile = 2 sub-steps).

Issue (--deps ctrl, the default): per warp, in order, the next instruction no sooner than the
previous one's stall count (ptxas's own fixed latencies: HMMA to its dependent 24 cycles, FP32 4,
as read from these loops' stall counts), and only once the barriers in its wait mask are clear.
A barrier is a counter: set at issue, cleared when the result is written (write barrier) or the
sources read (read barrier), after the variable latencies below. DEPBAR.LE SBn, k waits for the
counter; LDGDEPBAR's group lands `cpasync` cycles after it issues (one tile ahead: never waited on
in these loops). BAR.SYNC waits for the block's 4 warps, one on each sub-partition: the whole SM
is simulated (4 sub-partitions x N warps, warp i of every block on sub-partition i).
--deps reg instead: register dependencies with Machine.fixed latencies, stall counts ignored.
Per sub-partition: one instruction a cycle, loose round robin among the ready warps (--set
scheduler=gto: greedy then oldest); a pipe that is busy holds the dispatch (ncu: math pipe
throttle); MIO work (MUFU, shared memory, shuffles) queues (16 deep) and does not hold it.

Machine (cycles; --set NAME=VALUE changes any; sources):
  tensor 8 a HMMA.16816 (pipe occupancy, a sub-partition): mma.sync at half of wgmma's dense rate
    (989 TFLOP/s = 4096 FLOP/clk/SM: an m16n8k16 every 4 cycles a sub-partition). Not pinned by
    the calibration: ncu's tensor activity needs 8 if ncu ran at 1.755 GHz, ~7.3 at 1.59.
  fma 1 (32 FP32 lanes a sub-partition), alu 2, imad 2 (16 INT32 lanes): H100 whitepaper (128
    FP32, 64 INT32 cores an SM). FMNMX, FSEL, FSETP, F2FP counted as ALU (an assumption).
  xu 8 a MUFU (16 results/clk/SM): CUDA C++ Programming Guide's throughput table, and FlashAttention-3
    (Shah et al. 2024): an H100 SXM5 has 3.9 TFLOP/s of special functions against 989 of matmul.
  shared-memory data path: 1 wavefront a cycle an SM (128 B), LDSM.x4 and 128-bit LDS/STS/LDGSTS 4,
    SHFL 1.
  latencies (variable, from the start of execution): ldsm 33, lds 30, shfl 24, mufu 20, const 20,
    bar 20, cpasync 700. Assumed, of the order published for Hopper / Ampere shared memory (~30,
    Luo et al., "Benchmarking and Dissecting the Nvidia Hopper GPU Architecture", 2024) and MUFU /
    SHFL (~20-25, the Ampere and Turing dissections); not re-measured. The sweep below moves each
    by -40% / +40%: either kernel by under 2% in phase, under 5% free.
  jitter: up to this many cycles added at random to each variable latency (0; 20 in 'free', 60 in
    'noisy'): the noise that lets the warps' phases drift as on a real SM.
  Off by default, two front-end costs the issue model lacks (Huerta et al., "Analyzing Modern
  NVIDIA GPU cores", 2025, describe both on Ampere: a per-sub-core L0 instruction cache with a
  stream-buffer prefetcher, and a register file with few read ports behind an operand reuse cache):
  icache_kb / icache_miss / icache_prefetch (an LRU L0 of that size, a miss holding the warp; the
  forward's steady path is 10.6 KB of code, dK/dV's ~9.8 KB distinct), rf_ports (registers read
  a cycle; .reuse operands free when the same warp issues next). Their sizes on Hopper are not
  published: FETCH below is the setting that fits, not a measurement.
  guarded_ldg_off 1: a global load under a guard is taken as off (the loops' only ones read
  doc_start, absent in ordinary runs).

Phase cases (--phase): a sub-partition's 2 warps belong to 2 blocks, each held together by its own
barrier, so their relative phase is free. inphase (a): the blocks' barriers made one, every
warp of the SM meets at each BAR.SYNC: both warps in the products together, in the softmax
together. half (b): started half an iteration apart, no noise (the half offset holds).
free (c): random start, jitter 20: the phase the dynamics settle on. noisy: the same, jitter 60.

Kernel (--estimate): B16 NH12 T --T, causal, HS 64: each block's tiles (a forward block: 2 qb
unmasked key tiles + 2 at the masked path's cost), started head by head (as measured; --group 64:
fa_block's order) on 132 SMs x N slots by dev/attention_schedule.py's greedy rule, a block alone
on its SM at the alone speed; TFLOP/s over the visible pairs at --clock; ncu's tensor activity =
HMMA x 8 / (SM-active cycles x 4). Not modelled: L1/L2 (copies land a tile ahead), register
banks beyond rf_ports, and the blocks' prologue and epilogue (Q copy, O and lse stores): by ncu's
instruction count (6.00 a HMMA against the loop's 5.19 unmasked / 7.64 masked) ~8% of the
forward's instructions, so ~7-10% of its time.

## Calibration (--calibrate --sweep, the SASS of 14ed499 = the kernels measured; nvcc 13.0)

Measured (dev/reports/gpu_2026-11-28_h200, B16 NH12 T1024): forward 208.7 TFLOP/s (attention_bench),
ncu 160.3 us, tensor pipe 39.85% of active cycles; dK/dV ncu 334.2 us, tensor 38.32%. ncu locks the
clock and its value was not recorded, so ncu's tensor activity (HMMA x occupancy / active cycles)
is the clock-free comparison. Model: cycles of a warp's iteration at 2 warps a sub-partition ->
forward TFLOP/s at 1.98 GHz or dK/dV us at 1.755 GHz, tensor activity; free / noisy: the phase
reached (0 = in phase, 0.5 = half apart).

  forward key tile (alone 2294 cycles: copy+barrier 365, QK^T 504, softmax 878, PV 504)
                   inphase (a)       | half (b)          | free (c)                 | noisy
    default        4011 207 TF 45.6% | 2875 289 TF 63.5% | 2994 278 TF 60.9% (0.18) | 3998 210 TF 48.3% (0.04)
    tensor 7 / 6   inphase 220 / 230 TF 42.4 / 38.9% | free 287 / 280 TF 56.1 / 46.1%
    mufu, ldsm, shfl -40% / +40%, bar 60: inphase 205-208 TF | free 269-283 TF | noisy 206-228 TF,
                   locked (<= 0.09)
    mio_depth=4    200 TF 44.1% | 279 TF | 223 TF 51.3% (locked: 0.05) | 202 TF (0.04)
    scheduler=gto  218 TF 47.9% | 240 TF | 249 TF (0.49) | 245 TF (0.38)
    xu=4 (2x MUFU) 215 TF | 290 TF | 288 TF (0.21) | 230 TF (0.07)
    rf_ports=2     201 TF 45.3% | | 230 TF 50.5% (0.09) |
    fetch (8 KB L0, 30-cycle misses, 2 lines prefetched): inphase, free, noisy 4701-4905 cycles,
                   162-169 TF, 36.6-38.0%: free locks in phase (0.00); half (held) 3418, 208 TF, 46.6%
  dK/dV query tile (alone 4194 cycles)
    default        6837 239 us 53.6% | 5941 209 us 61.2% | 5966 210 us 60.8% (0.26) | 6838 238 us 53.7% (0.18)
    tensor 7 / 6   229 / 218 us 49.0 / 44.0% | | 195 / 189 us 57.3 / 51.6% |
    every latency, MIO, scheduler, xu, rf_ports variant within 5% of the default row
    fetch (8 KB L0) 7955 290 us 45.2% | 6590 242 us 53.9% | 7510 274 us 47.7% (0.15) | 7881 288 us 45.5% (0.16)
                   (40-cycle misses, 1 line prefetched: free 318 us, 40.5%)

Reading. (1) Without a front-end cost the model is too fast for both kernels when their warps run
free: the forward by 1.5x in tensor activity (60.9% against 39.85%), dK/dV by 1.6x (60.8% against
38.32%, 210 us against 334 us at 1.755 GHz). (2) For the forward, holding a sub-partition's two
warps in phase closes most of it: 4011 cycles, 207 TFLOP/s at 1.98 GHz against 208.7 measured, 45.6%
tensor against 39.85 (~42% with the prologue and epilogue the loop model leaves out): the lead's
in-phase hypothesis is sufficient for the forward, and it costs 34-39% (4011 against 2875-2994). The
model's warps lock in phase by themselves with 60 cycles of latency noise or a 4-deep MIO queue,
drift ~0.2 apart with 20 cycles of noise. (3) It does not explain dK/dV: in phase dK/dV is still 239
us and 53.6% against 334 us and 38.3%. Something the issue model lacks costs dK/dV ~1.4-1.6x. (4)
One front-end cost fits both kernels without any phase assumption: an L0 instruction cache smaller
than the loops' ~10 KB of code (8 KB, 30-cycle misses): forward 36.6-38.0% (39.85 measured; its
warps then lock in phase by themselves: the one behind hits the lines the other fetched), dK/dV
40.5-47.7% (38.32). Fewer register read ports does not (dK/dV stays at 58%). Neither is established;
the next run's warp states decide: the model prints, per case, the shares of its warp states under
ncu's names (no_instruction, wait, short_scoreboard, math_pipe_throttle, mio_throttle, barrier,
not_selected). In phase the forward's warps wait on the tensor pipe (math_pipe_throttle) ~24% and
scoreboards ~17%; fetch-bound, on no_instruction ~16%. Under either, the forward's two warps end up
in phase; the difference is what holds them there. (5) Sensitivity: every latency variant moves
either kernel by under 3% in phase, 5% free; the tensor occupancy and the scheduler (GTO) by 5-10%;
the phase and the front end by 30-60%.

What raises the forward's tensor activity, by the model (2 warps a sub-partition unless said):
- The lazy-rescale / 32-key-chunk forward of 7c83201 (<64,1> and <64,2>: 64 MUFU instead of 68, 579
  / 601 instructions against 664, alone 1846 / 1924 cycles against 2294): in phase 2970-3077 cycles,
  256-263 TFLOP/s against 207 (249-271 over the latency variants); fetch-bound (8 KB L0) 206 / 194
  against 169 (x1.22 / x1.15); free 321 / 302. Expect x1.15-1.25 on the measured 208.7.
- Fewer instructions in the loop in general: both hypotheses reward them (in phase: the softmax's
  length; fetch-bound: the code's size), and code size above ~8-10 KB a loop is the risk.
- Keeping the two warps out of phase: 2875-2994 cycles (+34-39% over in phase), if phase locking is
  the cause. Two blocks cannot be ordered against each other; one block of 8 warps (256 threads:
  237 registers still fit) whose two 4-warp groups take turns through named barriers
  (bar.sync 1 / 2, 256), FlashAttention-3's ping-pong done with mma.sync, can.
- Moving part of the exp2 to the FMA pipe (a polynomial): xu=4 above, in phase 215, free 288.
- 3 warps a sub-partition (12 an SM, <= 168 registers): in phase 5597 cycles a warp's tile (1866 a
  sub-partition's, against 2006 with 2 warps: +7%), and a third block per SM makes the tail worse
  (busy 0.77 head by head): 193 TFLOP/s; free 3735 (291). Not worth the registers by itself.
- Interleaving the two m16 tiles' phases inside a warp (QK^T of mt 1 under the softmax of mt 0)
  makes each warp overlap itself, which is what the half case buys across warps; the model needs
  its SASS to say more (and it adds code).
"""
import argparse
import glob
import os
import random
import re
import site
import subprocess
import sys
import tempfile

# ---------------------------------------------------------------------------------------------
# SASS: instructions, control codes, registers

LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);\s*/\*\s*0x([0-9a-f]{16})\s*\*/")
HI = re.compile(r"^\s*/\*\s*0x([0-9a-f]{16})\s*\*/")


class Ins:
    """One SASS instruction: address, guard, opcode, operand text, control code, registers."""
    __slots__ = ("addr", "guard", "op", "ops", "stall", "yld", "wbar", "rbar", "wait", "reuse",
                 "dst", "src", "pipe", "idx", "slots")

    def __init__(self, addr, guard, op, ops, hi):
        self.addr, self.guard, self.op, self.ops = addr, guard, op, ops
        # Volta..Hopper control bits, in the high 64-bit word of the 128-bit instruction
        # (bits 105-125 of the instruction): stall 4, yield 1, write barrier 3, read barrier 3,
        # wait mask 6, operand reuse 4 (Jia et al., "Dissecting the NVIDIA Volta GPU
        # Architecture via Microbenchmarking", 2018, section 2.1; barrier 7 = none).
        self.stall = (hi >> 41) & 15
        self.yld = (hi >> 45) & 1
        wb, rb = (hi >> 46) & 7, (hi >> 49) & 7
        self.wbar = None if wb == 7 else wb
        self.rbar = None if rb == 7 else rb
        self.wait = (hi >> 52) & 63
        self.reuse = (hi >> 58) & 15
        self.dst, self.src = operands(op, ops, guard)
        self.slots = read_slots(op, ops)
        self.pipe = None
        self.idx = 0

    def __repr__(self):
        return f"{self.addr:05x} {self.guard} {self.op} {self.ops}"


def parse_functions(text):
    """{function name: [Ins]} from `cuobjdump -sass` output (which prints each instruction's
    two 64-bit words: the second holds the control code)."""
    funcs, name, lines = {}, None, text.splitlines()
    for i, line in enumerate(lines):
        m = re.search(r"Function : (\S+)", line)
        if m:
            name = m.group(1)
            funcs[name] = []
            continue
        m = LINE.search(line) if name else None
        if not m:
            continue
        h = HI.match(lines[i + 1]) if i + 1 < len(lines) else None
        if not h:
            raise SystemExit(f"fa_cycle_model: no control word after {line.strip()[:60]} (not cuobjdump -sass output?)")
        funcs[name].append(Ins(int(m.group(1), 16), (m.group(2) or "").strip(), m.group(3),
                               m.group(4).strip(), int(h.group(1), 16)))
    return funcs


REG = re.compile(r"(?<![A-Za-z0-9_])(-|!|\|)?(U?R)(\d+|Z)(\.[A-Z0-9_]+)*")
PRED = re.compile(r"^(!)?(U?P)([0-6T])$")


def width_of(op, k):
    """registers covered by the k-th register operand of opcode `op` (0 = the first)"""
    base = op.split(".")[0]
    mods = op.split(".")[1:]
    if base == "HMMA":
        f16acc = "F16" in mods[1:2]                    # HMMA.16816.F16: fp16 accumulators (2 regs)
        shape = mods[0] if mods else "16816"
        a = 4 if shape == "16816" else 2
        b = 2 if shape == "16816" else 1
        return [2 if f16acc else 4, a, b, 2 if f16acc else 4][k] if k < 4 else 1
    if base == "LDSM":
        n = mods[-1] if mods and mods[-1] in ("2", "4") else "1"
        return int(n) if k == 0 else 1
    if base in ("LDS", "LDG", "LD", "LDL", "LDC", "ULDC", "LDSM", "ATOMS", "ATOMG", "ATOM"):
        return _mem_width(mods) if k == 0 else 1
    if base in ("STS", "STG", "ST", "STL"):
        return _mem_width(mods) if k == 0 else 1       # k counts value registers only (see below)
    if base in ("IMAD", "UIMAD") and "WIDE" in mods:
        return 2 if k in (0, 3) else 1
    if base == "CS2R" and "32" not in mods:
        return 2 if k == 0 else 1
    if base in ("MOV", "UMOV", "IADD", "DADD", "DMUL", "DFMA", "SEL") and "64" in mods:
        return 2
    return 1


def _mem_width(mods):
    for w, n in (("128", 4), ("64", 2)):
        if w in mods:
            return n
    return 1


NO_DST = {"ST", "STS", "STG", "STL", "RED", "REDG", "LDGSTS", "BAR", "BRA", "BRX", "JMP", "JMX", "EXIT",
          "DEPBAR", "WARPSYNC", "BSSY", "BSYNC", "NOP", "LDGDEPBAR", "CCTL", "MEMBAR", "ERRBAR", "FENCE",
          "YIELD", "CALL", "RET", "BPT", "KILL", "NANOSLEEP", "ARRIVES", "SYNCS", "UTMALDG", "UTMASTG",
          "BMOV", "WARPGROUP", "ELECT"}
TWO_DST = {"SHFL", "ISETP", "FSETP", "DSETP", "HSETP2", "PLOP3", "VOTE", "UISETP", "UPLOP3", "VOTEU", "FCHK"}


def _regs(tok, width):
    """[(file, index)] named by one operand token (RZ, PT, immediates: none)"""
    out = []
    if "[" in tok:                                    # memory: its address registers are sources
        for m in re.finditer(r"(U?R)(\d+)(\.64)?", tok):
            n = 2 if m.group(3) or tok[max(0, m.start() - 5):m.start()] == "desc[" else 1
            out += [(m.group(1), int(m.group(2)) + i) for i in range(n)]
        return out
    t = tok.strip().lstrip("-!|~")
    if t == "PR":
        return [("P", i) for i in range(7)]
    m = PRED.match(tok.strip())
    if m:
        return [] if m.group(3) == "T" else [(m.group(2), int(m.group(3)))]
    m = re.match(r"(U?R)(\d+)", t)
    if m:
        return [(m.group(1), int(m.group(2)) + i) for i in range(width)]
    return []


def read_slots(op, ops):
    """[(slot, first register, registers)] of the vector registers an instruction reads from the
    register file, by source operand slot (a = 0, b = 1, c = 2: the reuse bits' order)"""
    base = op.split(".")[0]
    if base in NO_DST or base in ("LDSM", "LDS", "LDG", "LDC", "S2R", "CS2R"):
        return []
    toks = [re.sub(r"\.reuse", "", t.strip()) for t in ops.split(",")] if ops.strip() else []
    ndst = 2 if base in TWO_DST else 1
    out = []
    for k, t in enumerate(toks[ndst:]):
        m = re.match(r"^[-|!~]?R(\d+)", t)
        if m:
            out.append((k, int(m.group(1)), width_of(op, k + 1)))
    return out


def operands(op, ops, guard):
    """(destination registers, source registers) of one instruction: R, UR, P, UP by index;
    register ranges by opcode (HMMA.16816.F32: D 4, A 4, B 2, C 4; LDSM .x4: 4; 64/128-bit
    loads and stores: 2/4; IMAD.WIDE: 64-bit D and C; addresses Rn.64 and desc[URn]: pairs)."""
    base = op.split(".")[0]
    toks = [t.strip() for t in ops.split(",")] if ops.strip() else []
    toks = [re.sub(r"\.reuse", "", t) for t in toks]
    dst, src = [], []
    if guard:
        src += _regs(guard.lstrip("@"), 1)
    if base in NO_DST:
        if base in ("STS", "STG", "ST", "STL"):        # [address], value
            for k, t in enumerate(toks):
                src += _regs(t, width_of(op, 0) if "[" not in t else 1)
        else:
            for t in toks:
                src += _regs(t, 1)
        return dst, src
    ndst = 2 if base in TWO_DST else 1
    if base not in TWO_DST:                           # carry-out predicates right after D
        while ndst < len(toks) and ndst < 3 and PRED.match(toks[ndst]) and not toks[ndst].startswith("!"):
            ndst += 1
    for k, t in enumerate(toks):
        w = width_of(op, k)
        (dst if k < ndst else src).extend(_regs(t, w))
    if base in ("HMMA", "IMMA", "DMMA", "HGMMA") and len(toks) == 4 and toks[3] == "RZ":
        pass                                          # C = RZ: zero accumulator, nothing read
    return dst, src


def barrier_deps(path):
    """[(consumer, producer, barrier, registers)]: for each instruction of the (cyclic) path that
    waits on a scoreboard, the latest instruction before it that set that barrier and the
    registers they share (RAW through the write barrier, WAR through the read barrier; empty
    when the wait guards something the registers do not show, e.g. memory, or an older
    instruction completing in order before the producer)"""
    out, n = [], len(path)
    for i, x in enumerate(path):
        for b in range(6):
            if not x.wait >> b & 1:
                continue
            for k in range(1, n + 1):
                y = path[(i - k) % n]
                if y.wbar == b or y.rbar == b:
                    regs = set(y.dst) & set(x.src) if y.wbar == b else set(y.src) & set(x.dst)
                    out.append((x, y, b, sorted(regs)))
                    break
    return out


# ---------------------------------------------------------------------------------------------
# the main loop and one path through it (test/check_attention_sass.sh's rule)

def _branch(op):
    return op.split(".")[0] in ("BRA", "BRX", "JMP", "JMX")


def _target(ops):
    h = re.findall(r"0x([0-9a-f]+)", ops)
    return int(h[-1], 16) if h else None


def _blocks(ins):
    leaders = {ins[0].addr}
    for i, x in enumerate(ins):
        if (_branch(x.op) or x.op.startswith("EXIT")) and i + 1 < len(ins):
            leaders.add(ins[i + 1].addr)
        if _branch(x.op) and _target(x.ops) is not None:
            leaders.add(_target(x.ops))
    blocks = []
    for x in ins:
        if x.addr in leaders or not blocks:
            blocks.append([])
        blocks[-1].append(x)
    return blocks


def _succ(blocks, start, i):
    last = blocks[i][-1]
    nxt = start[i + 1] if i + 1 < len(blocks) else None
    if _branch(last.op):
        if ".DIV" in last.op:
            return [nxt]                               # taken by a diverged warp only
        cond = last.guard not in ("", "@PT") or re.search(r"\bU?P[0-6]\b", last.ops.split("0x")[0])
        return [_target(last.ops)] + ([nxt] if cond else [])
    if last.op.startswith("EXIT"):
        return [nxt] if last.guard not in ("", "@PT") else []
    return [nxt]


PATHS = {  # the path's order of preference: (HMMA, LDGSTS, BAR, LDG, instructions) with these signs
    "steady": (1, 1, 1, -1, -1),   # most HMMA, next tile's copy issued, the block barrier (every
                                   # tile but a block's first), unmasked (fewest instructions)
    "masked": (1, 1, 1, -1, 1),    # most HMMA, copy, barrier, the masked branch (most instructions),
                                   # not the record starts' (doc_start: global loads)
    "last": (1, -1, 1, -1, -1),    # most HMMA, no copy (a block's last tile), barrier, unmasked
}


def _loops(ins, blocks):
    """(head, back edge) address pairs of every loop, with the HMMA each holds"""
    out = []
    for b in blocks:
        last = b[-1]
        t = _target(last.ops) if _branch(last.op) else None
        if t is not None and t <= last.addr:
            out.append((t, last.addr, sum(1 for x in ins if t <= x.addr <= last.addr and x.op.startswith("HMMA"))))
    return out


def _best_path(blocks, t, s, which):
    """the preferred path (PATHS[which]) from the block at t to the back edge at s, forward
    edges only (inner loops' back edges are not taken: their bodies appear once)"""
    start = [b[0].addr for b in blocks]
    idx = {a: i for i, a in enumerate(start)}
    sign = PATHS[which]

    def key(p):
        c = [sum(1 for x in p if x.op.startswith(o)) for o in ("HMMA", "LDGSTS", "BAR")]
        c.append(sum(1 for x in p if x.op.split(".")[0] == "LDG"))
        c.append(sum(1 for x in p if not x.op.startswith("NOP")))
        return tuple(a * b for a, b in zip(sign, c))

    best_at = {idx[t]: list(blocks[idx[t]])}
    for i in range(idx[t], len(blocks)):
        if start[i] > s:
            break
        if i not in best_at:
            continue
        for sa in _succ(blocks, start, i):
            if sa is None or not (t < sa <= s) or idx[sa] <= i:
                continue
            j, p = idx[sa], best_at[i] + blocks[idx[sa]]
            if j not in best_at or key(p) > key(best_at[j]):
                best_at[j] = p
    ends = [i for i in best_at if blocks[i][-1].addr == s]
    return best_at[ends[0] if ends else max(best_at)]


def main_loop_path(ins, which="steady", inner_trips=0):
    """the instructions, in order, of one iteration of the loop (back edge) holding the most HMMA
    (innermost on a tie), along the path `which` (PATHS); None if no loop holds an HMMA.
    inner_trips > 0: one iteration of the loop around that one instead, the main loop's body
    repeated inner_trips times inside it (the dK/dV kernel's query tile: its sub-steps)."""
    blocks = _blocks(ins)
    loops = [lp for lp in _loops(ins, blocks) if lp[2]]
    if not loops:
        return None
    t, s, _ = max(loops, key=lambda lp: (lp[2], lp[0] - lp[1]))
    if not inner_trips:
        return _best_path(blocks, t, s, which)
    outer = [lp for lp in _loops(ins, blocks) if lp[0] <= t and s <= lp[1] and (lp[0], lp[1]) != (t, s)]
    if not outer:
        raise SystemExit("fa_cycle_model: --inner-trips: the main loop has no loop around it")
    t2, s2, _ = min(outer, key=lambda lp: lp[1] - lp[0])
    path = _best_path(blocks, t2, s2, which)
    a = next(i for i, x in enumerate(path) if x.addr == t)
    b = next(i for i, x in enumerate(path) if x.addr == s)
    return path[:a] + path[a:b + 1] * inner_trips + path[b + 1:]


# ---------------------------------------------------------------------------------------------
# the machine: pipes, occupancies, latencies (sources in the module docstring)

FMA = {"FFMA", "FADD", "FMUL", "FFMA32I", "FADD32I", "FMUL32I", "HFMA2", "HADD2", "HMUL2", "FSWZADD"}
IMAD = {"IMAD", "IMUL", "IDP", "IMAD32I", "IMUL32I"}
XU = {"MUFU", "I2F", "F2I", "F2F", "FRND", "POPC", "FLO", "BREV", "I2FP", "F2IP"}
SMEM = {"LDSM", "LDS", "STS", "SHFL", "ATOMS", "LDGSTS", "STSM"}
LSU = {"LDG", "STG", "LD", "ST", "LDL", "STL", "RED", "REDG", "ATOMG", "ATOM", "CCTL"}
CBU = {"BRA", "BRX", "JMP", "JMX", "BSSY", "BSYNC", "WARPSYNC", "EXIT", "CALL", "RET", "NOP", "BPT",
       "YIELD", "KILL", "BAR", "DEPBAR", "LDGDEPBAR", "MEMBAR", "ERRBAR", "FENCE", "NANOSLEEP"}
CONST = {"LDC", "S2R", "CS2R", "S2UR", "R2UR", "ULDC", "B2R", "R2B"}


def pipe_of(op):
    base = op.split(".")[0]
    if base in ("HMMA", "IMMA", "DMMA", "BMMA"):
        return "tensor"
    if base in FMA or (base == "HFMA2" and ".MMA" in op):
        return "fma"
    if base in IMAD:
        return "imad"
    if base in XU:
        return "xu"
    if base in SMEM:
        return "smem"
    if base in LSU:
        return "lsu"
    if base in CBU:
        return "cbu"
    if base in CONST:
        return "const"
    if base.startswith("U"):
        return "uniform"
    return "alu"        # IADD3 LOP3 ISETP SHF LEA SEL FSEL FMNMX FSETP PRMT MOV VIADD P2R F2FP ...


class Machine:
    """Everything the model assumes of one SM, in one place (--set NAME=VALUE changes any)."""

    def __init__(self):
        # cycles a warp instruction occupies its pipe in one sub-partition (32 lanes = 1 cycle)
        self.occ = {"fma": 1, "alu": 2, "imad": 2, "tensor": 8, "xu": 8, "cbu": 1, "const": 1,
                    "uniform": 1, "lsu": 1, "smem": 1}
        self.hmma_1688 = 0.5          # an m16n8k8 HMMA: this share of an m16n8k16's pipe time
        # variable-latency results (cycles from the start of execution to the register write)
        self.lat = {"ldsm": 33, "lds": 30, "shfl": 24, "mufu": 20, "ldg": 500, "const": 20,
                    "lsu_read": 6, "smem_read": 4, "bar": 20, "cpasync": 700, "sts": 20}
        # fixed latencies for --deps reg (ctrl mode uses the compiler's stall counts instead)
        self.fixed = {"fma": 4, "alu": 4, "imad": 4, "tensor": 24, "cbu": 1, "uniform": 2, "const": 20}
        self.smem_per_cycle = 1.0     # shared-memory wavefronts an SM serves a cycle (128 B)
        self.mio_depth = 16           # MIO queue entries a sub-partition holds before issue stalls
        self.scheduler = "lrr"        # lrr: loose round robin; gto: greedy then oldest
        # instruction fetch: an L0 instruction cache a sub-partition (0 KB: not modelled), 128-byte
        # lines, LRU; a miss holds the warp `icache_miss` cycles; `icache_prefetch` lines after a
        # missed one come with it (sequential code)
        self.icache_kb = 0.0
        self.icache_miss = 20
        self.icache_prefetch = 1
        # register-file reads: vector registers a sub-partition reads a cycle for the instructions
        # it issues (0: not modelled); an operand the same warp's previous instruction marked
        # .reuse comes from the operand reuse cache if no other warp issued in between
        self.rf_ports = 0
        self.guarded_ldg_off = 1      # a global load under a guard predicate is off (its barrier
                                      # clears at `const`): in these loops the only such loads
                                      # read doc_start, which ordinary (unpacked) runs do not pass
        self.lock = 0                 # 1: the blocks' barriers are one (every warp of the SM meets
                                      # at each BAR.SYNC): the blocks held in phase, case (a)
        self.jitter = 0               # up to this many cycles added at random to each variable
        self.seed = 1                 # latency (memory, shared memory, MUFU): noise that lets
                                      # the warps' phases drift as on a real SM

    def set(self, kv):
        k, v = kv.split("=", 1)
        v = float(v) if re.match(r"^[0-9.]+$", v) else v
        for table in (self.occ, self.lat, self.fixed):
            if k in table:
                table[k] = v
                return
        for prefix, table in (("occ.", self.occ), ("lat.", self.lat), ("fixed.", self.fixed)):
            if k.startswith(prefix) and k[len(prefix):] in table:
                table[k[len(prefix):]] = v
                return
        if hasattr(self, k):
            setattr(self, k, type(getattr(self, k))(v))
            return
        raise SystemExit(f"fa_cycle_model: --set {kv}: no parameter '{k}' (see Machine in {__file__})")


def wavefronts(x):
    """shared-memory wavefronts (128-byte cycles of the SM's data path) of one warp instruction"""
    base, mods = x.op.split(".")[0], x.op.split(".")[1:]
    if base == "LDSM" or base == "STSM":
        return int(mods[-1]) if mods and mods[-1] in ("2", "4") else 1
    if base in ("LDS", "STS", "LDGSTS", "ATOMS"):
        return 4 if "128" in mods else 2 if "64" in mods else 1
    return 1


def var_latency(x, m):
    """the result latency of a variable-latency (scoreboarded) instruction, from its start"""
    base = x.op.split(".")[0]
    if base == "LDSM":
        return m.lat["ldsm"]
    if base in ("LDS", "ATOMS"):
        return m.lat["lds"]
    if base == "SHFL":
        return m.lat["shfl"]
    if base in XU:
        return m.lat["mufu"]
    if base in ("LDG", "LD", "LDL", "ATOMG", "ATOM"):
        return m.lat["const"] if base == "LDG" and x.guard and m.guarded_ldg_off else m.lat["ldg"]
    if base in CONST:
        return m.lat["const"]
    if base in ("STS", "STG", "ST", "STL", "LDGSTS", "RED", "REDG"):
        return m.lat["sts"]
    return m.lat["const"]


# ---------------------------------------------------------------------------------------------
# the simulation: one SM, 4 sub-partitions, `warps` warps each (warp i of block b on sub-partition
# i: a block's 4 warps meet at BAR.SYNC), every warp running the same loop path

QUEUED = {"xu", "smem", "lsu"}      # through the MIO / LSU queues: issue does not wait for the unit
REASONS = ("issued", "no_instruction", "stall_count", "scoreboard", "register", "tensor_busy", "pipe_busy",
           "register_read", "mio_full", "barrier", "depbar", "other_warp")


class Warp:
    def __init__(self, wid, block, smsp, start):
        self.wid, self.block, self.smsp = wid, block, smsp
        self.pc, self.ready, self.at_bar = 0, start, False
        self.sb = [0] * 6
        self.rel = []                 # (cycle, scoreboard) releases pending
        self.regs = {}                # register -> cycle its value is ready (--deps reg)
        self.heads = []               # cycle each iteration's first instruction issued
        self.why = dict.fromkeys(REASONS, 0)


def _depbar(x):
    m = re.match(r"SB(\d)\s*,\s*(0x[0-9a-f]+|\d+)", x.ops)
    return (int(m.group(1)), int(m.group(2), 0)) if m else (0, 0)


class SM:
    def __init__(self, path, m, warps, deps, offsets):
        self.path, self.m, self.deps = path, m, deps
        for i, x in enumerate(path):
            x.pipe, x.idx = ("cbu" if x.guard == "@!PT" else pipe_of(x.op)), i
        self.w = [Warp(b * 4 + s, b, s, offsets[b]) for b in range(warps) for s in range(4)]
        self.by_smsp = [[w for w in self.w if w.smsp == s] for s in range(4)]
        self.free = [dict.fromkeys(m.occ, 0.0) for _ in range(4)]   # blocking pipes / xu unit
        self.smem_free = 0.0
        self.mio = [[] for _ in range(4)]      # start cycles of queued ops (MIO occupancy)
        self.arrived = {}
        self.last = [None] * 4
        self.rng = random.Random(m.seed)
        self.icache = [{} for _ in range(4)]      # line -> last use (LRU) / arrival cycle
        self.rf_free = [0] * 4
        self.prev = [None] * 4                    # (warp, instruction) last issued
        self.lines = int(m.icache_kb * 1024 / 128)
        self.trace = []               # (cycle, warp, path index) of every issue
        self.tensor_busy = [[] for _ in range(4)]    # (issue cycle, occupancy) of each HMMA
        self.xu_busy = [[] for _ in range(4)]

    def fetch(self, s, addr, t):
        """is the instruction at addr in sub-partition s's L0 cache at cycle t (a miss starts the
        fetch of its line and the next icache_prefetch lines)"""
        if not self.lines:
            return True
        c, line = self.icache[s], addr // 128
        if line in c:
            if c[line] > t:
                return False                      # on its way
            c[line] = t
            return True
        for k in range(int(self.m.icache_prefetch) + 1):
            c[line + k] = t + self.m.icache_miss
        while len(c) > self.lines:
            del c[min(c, key=c.get)]
        return False

    def blocked(self, w, t):
        """why warp w cannot issue its next instruction at cycle t (None: it can)"""
        if w.at_bar:
            return "barrier"
        if w.ready > t:
            return "stall_count"
        x = self.path[w.pc]
        if not self.fetch(w.smsp, x.addr, t):
            return "no_instruction"
        base = x.op.split(".")[0]
        if self.deps == "ctrl" and any(w.sb[b] for b in range(6) if x.wait >> b & 1):
            return "scoreboard"
        if base == "DEPBAR":
            b, n = _depbar(x)
            if w.sb[b] > n:
                return "depbar"
        if self.deps == "reg" and any(w.regs.get(r, 0) > t for r in x.src):
            return "register"
        if x.pipe in QUEUED:
            q = self.mio[w.smsp]
            while q and q[0] <= t:
                q.pop(0)
            if len(q) >= self.m.mio_depth:
                return "mio_full"
        elif self.free[w.smsp][x.pipe] > t:
            return "pipe_busy" if x.pipe != "tensor" else "tensor_busy"
        if self.m.rf_ports and self.rf_free[w.smsp] > t:
            return "register_read"
        return None

    def reads(self, w, x):
        """cycles of register-file reads instruction x of warp w needs"""
        prev = self.prev[w.smsp]
        n = 0
        for k, r, cnt in x.slots:
            if prev and prev[0] is w and prev[1].reuse >> k & 1 and any(
                    kk == k and rr == r for kk, rr, _ in prev[1].slots):
                continue
            n += cnt
        return -(-n // int(self.m.rf_ports))

    def occupancy(self, x):
        o = self.m.occ[x.pipe]
        if x.pipe == "tensor" and (".1688" in x.op or ".884" in x.op):
            o *= self.m.hmma_1688
        return o

    def issue(self, w, t):
        x, m, s = self.path[w.pc], self.m, w.smsp
        base = x.op.split(".")[0]
        if w.pc == 0:
            w.heads.append(t)
        self.trace.append((t, w.wid, w.pc))
        if self.m.rf_ports:
            self.rf_free[s] = t + max(1, self.reads(w, x))
        self.prev[s] = (w, x)
        w.ready = t + (max(1, x.stall) if self.deps == "ctrl" else 1)
        occ = self.occupancy(x)
        if x.pipe in QUEUED:
            if x.pipe == "xu":
                start = max(t + 1, self.free[s]["xu"])
                self.free[s]["xu"] = start + occ
                self.xu_busy[s].append((start, occ))
            elif x.pipe == "smem":
                start = max(t + 1, self.smem_free)
                self.smem_free = start + wavefronts(x) / m.smem_per_cycle
            else:
                start = t + 1
            self.mio[s].append(start)
            self.mio[s].sort()
            done = start + var_latency(x, m) + (self.rng.randint(0, int(m.jitter)) if m.jitter else 0)
            read = start + (m.lat["lsu_read"] if x.pipe == "lsu" else m.lat["smem_read"])
        else:
            self.free[s][x.pipe] = t + occ
            if x.pipe == "tensor":
                self.tensor_busy[s].append((t, occ))
            done = t + (var_latency(x, m) if x.wbar is not None and x.pipe == "const" else m.fixed.get(x.pipe, 4))
            read = t + 2
        if base == "LDGDEPBAR":
            done = t + m.lat["cpasync"]
        if x.wbar is not None:
            w.sb[x.wbar] += 1
            w.rel.append((done, x.wbar))
        if x.rbar is not None:
            w.sb[x.rbar] += 1
            w.rel.append((read, x.rbar))
        for r in x.dst:
            w.regs[r] = done
        if base == "BAR":
            self.barrier(w, t)
        w.pc = (w.pc + 1) % len(self.path)

    def barrier(self, w, t):
        w.at_bar = True
        key = 0 if self.m.lock else w.block
        group = [v for v in self.w if self.m.lock or v.block == w.block]
        self.arrived[key] = self.arrived.get(key, 0) + 1
        if self.arrived[key] == len(group):
            self.arrived[key] = 0
            for v in group:
                v.at_bar = False
                v.ready = max(v.ready, t + self.m.lat["bar"])

    def release(self, t):
        for w in self.w:
            if w.rel:
                keep = []
                for c, b in w.rel:
                    if c <= t:
                        w.sb[b] -= 1
                    else:
                        keep.append((c, b))
                w.rel = keep

    def pick(self, s, t):
        """the warp sub-partition s issues from at cycle t (None: none can), and tally why the
        others wait"""
        ws = self.by_smsp[s]
        order = ws
        if self.m.scheduler == "lrr" and self.last[s] is not None:
            k = ws.index(self.last[s])
            order = ws[k + 1:] + ws[:k + 1]
        elif self.m.scheduler == "gto" and self.last[s] is not None:
            order = [self.last[s]] + [v for v in ws if v is not self.last[s]]
        chosen = None
        for w in order:
            why = self.blocked(w, t)
            if why is None and chosen is None:
                chosen = w
                why = "issued"
            elif why is None:
                why = "other_warp"
            w.why[why] += 1
        return chosen


def simulate(path, m, warps, deps="ctrl", offsets=None, iters=20, warm=6):
    """run `iters` iterations of every warp; figures over the iterations after `warm`"""
    offsets = offsets or [0] * warps
    sm = SM(path, m, warps, deps, offsets)
    t, reset = 0, False
    while min(len(w.heads) for w in sm.w) <= iters:
        if not reset and min(len(w.heads) for w in sm.w) > warm:
            for w in sm.w:
                w.why = dict.fromkeys(REASONS, 0)
            reset, t_reset = True, t
        sm.release(t)
        for s in range(4):
            w = sm.pick(s, t)
            if w is not None:
                sm.issue(w, t)
                sm.last[s] = w
        t += 1
        if t > 10 ** 7:
            raise SystemExit("fa_cycle_model: the simulation did not finish (a barrier or scoreboard never clears?)")
    r = figures(sm, path, warps, warm, t_reset, t)
    r["segments"] = segments(sm, path, warm)
    return r


def segments(sm, path, warm):
    """mean cycles a warp spends from its iteration's start to the first HMMA (copy, barrier),
    in its first HMMA run (S = Q K^T), to the next HMMA (softmax), in the last run (O += P V),
    and after it: the phases of one key tile, as the issue times show them"""
    h = [i for i, x in enumerate(path) if x.pipe == "tensor"]
    gaps = [i for i in range(1, len(h)) if h[i] - h[i - 1] > 40]
    if len(gaps) != 1:
        return None                   # not two runs of HMMA with a softmax between them
    cut = h[gaps[0]]
    mark = [h[0], [i for i in h if i < cut][-1], cut, h[-1]]
    acc, n = [0.0] * 5, 0
    for w in sm.w:
        t = {}
        for c, wid, i in sm.trace:
            if wid == w.wid:
                t.setdefault(i, []).append(c)
        for k in range(warm, len(w.heads) - 1):
            pts = [w.heads[k]] + [t[i][k] for i in mark] + [w.heads[k + 1]]
            for j in range(5):
                acc[j] += pts[j + 1] - pts[j]
            n += 1
    return dict(zip(("copy+bar", "QK^T", "softmax", "PV", "tail"), (a / max(1, n) for a in acc)))


def _busy(events, t0, t1):
    return sum(min(c + o, t1) - max(c, t0) for c, o in events if c + o > t0 and c < t1) / (t1 - t0)


def figures(sm, path, warps, warm, t_reset, t_end):
    per_warp = [(w.heads[-1] - w.heads[warm]) / (len(w.heads) - 1 - warm) for w in sm.w]
    cyc = sum(per_warp) / len(per_warp)
    t0, t1 = max(w.heads[warm] for w in sm.w), min(w.heads[-1] for w in sm.w)
    hmma = sum(1 for x in path if x.pipe == "tensor")
    why = dict.fromkeys(REASONS, 0)
    for w in sm.w:
        for k, v in w.why.items():
            why[k] += v
    total = sum(why.values())
    phases = []
    for s in range(4):
        ws = sorted(sm.by_smsp[s], key=lambda v: v.block)
        for b in ws[1:]:
            for h in ws[0].heads[warm:]:
                prev = [x for x in b.heads if x <= h]
                if prev:
                    p = ((h - prev[-1]) / cyc) % 1.0
                    phases.append(min(p, 1 - p))
    return {
        "cycles": cyc, "spread": (max(per_warp) - min(per_warp)),
        "tensor": sum(_busy(sm.tensor_busy[s], t0, t1) for s in range(4)) / 4,
        "xu": sum(_busy(sm.xu_busy[s], t0, t1) for s in range(4)) / 4,
        "hmma": hmma, "warps": warps, "instr": len(path),
        "ipc": why["issued"] / max(1, (t_end - t_reset)) / 4,
        "why": {k: v / max(1, total) for k, v in why.items()},
        # the other warps' iteration starts, as a share of an iteration from the first warp's
        # (0: in phase, 0.5: half an iteration apart), median and 10-90% range
        "phase": _pct(phases, .5), "phase_lo": _pct(phases, .1), "phase_hi": _pct(phases, .9),
    }


def _pct(xs, q):
    return sorted(xs)[min(len(xs) - 1, int(len(xs) * q))] if xs else None




# ---------------------------------------------------------------------------------------------
# the phase cases: how the blocks sharing an SM stand to each other (each block's 4 warps are
# held together by its BAR.SYNC; blocks are independent)

SCENARIOS = {
    # (a) in phase: every warp of the SM meets at each BAR.SYNC (as if the blocks' barriers were
    #     one), so a sub-partition's warps run the same phase of the tile at the same time
    "inphase": ("aligned", ["lock=1", "jitter=20"]),
    # (b) half an iteration apart from the start, nothing holding them there, no noise
    "half": ("half", []),
    # (c) free running: random start, variable latencies jittered by up to 20 cycles; the
    #     phase is what the dynamics make of it
    "free": ("random", ["jitter=20"]),
    # (c') the same with 60 cycles of jitter (the noise at which the model's warps lock in phase)
    "noisy": ("random", ["jitter=60"]),
}


def offsets_for(mode, warps, period, seed):
    if mode == "aligned":
        return [0] * warps
    if mode == "half":
        return [round(b * period / warps) for b in range(warps)]
    rng = random.Random(seed)
    return [0] + [rng.randrange(int(period)) for _ in range(warps - 1)]


def machine(sets):
    m = Machine()
    for kv in sets:
        m.set(kv)
    return m


def evaluate(steady, masked, sets, scenario, warps=2, seeds=3, iters=24, warm=8, deps="ctrl"):
    """the cycles of a warp's iteration: alone, at `warps` a sub-partition in `scenario` on the
    steady path (and the masked path, if given), averaged over seeds where the start is random;
    the result of the steady runs' first seed for the rest of the figures"""
    mode, extra = SCENARIOS[scenario]
    user_jitter = any(kv.startswith("jitter=") for kv in sets)
    full = (extra if not user_jitter else [kv for kv in extra if not kv.startswith("jitter=")]) + list(sets)
    alone = simulate(steady, machine(sets), 1, deps, iters=8, warm=3)
    runs, mruns = [], []
    for seed in range(1, (seeds if mode == "random" else 1) + 1):
        m = machine(full + [f"seed={seed}"])
        off = offsets_for(mode, warps, alone["cycles"], seed)
        runs.append(simulate(steady, m, warps, deps, off, iters, warm))
        if masked is not None:
            mruns.append(simulate(masked, m, warps, deps, off, max(12, iters // 2), min(warm, 4))["cycles"])
    r = dict(runs[0])
    r["cycles"] = sum(x["cycles"] for x in runs) / len(runs)
    r["cycles_range"] = (min(x["cycles"] for x in runs), max(x["cycles"] for x in runs))
    r["phase"] = sum(x["phase"] for x in runs) / len(runs) if runs[0]["phase"] is not None else None
    r["masked"] = sum(mruns) / len(mruns) if mruns else r["cycles"]
    r["alone"] = alone["cycles"]
    r["alone_run"] = alone
    r["occ_tensor"] = machine(full).occ["tensor"]
    return r


# ---------------------------------------------------------------------------------------------
# from cycles a tile to the kernel: the attention shape's tiles, the blocks' start order, a clock

def schedule(jobs, nsm, per, alone):
    """dev/attention_schedule.py's greedy start order (blocks in order on the first free slot),
    returning (busy: work / (slots x span), active: share of the span an SM holds a block).
    Job lengths are in full-SM time; a block alone on a 2-slot SM runs `alone` times as fast."""
    sms, k, t, act = [[] for _ in range(nsm)], 0, 0.0, 0.0
    while True:
        for s in sms:
            while len(s) < per and k < len(jobs):
                s.append(jobs[k])
                k += 1
        if not any(sms):
            return sum(jobs) / (nsm * per) / t, act / (nsm * t)
        rate = [alone if len(s) == 1 and per == 2 else 1.0 for s in sms]
        dt = min(w / r for s, r in zip(sms, rate) for w in s)
        t += dt
        act += dt * sum(1 for s in sms if s)
        for s, r in zip(sms, rate):
            s[:] = [w - dt * r for w in s if w - dt * r > 1e-9]


def kernel_estimate(kind, r, warps=2, heads=192, T=1024, clock=1.98e9, group=1, hmma_total=None):
    """the kernel at B x NH = heads, causal, HS 64, from evaluate()'s cycles of a warp's tile
    (r["cycles"] unmasked, r["masked"], r["alone"]) with `warps` blocks an SM: TFLOP/s over the
    visible pairs at `clock`, the SMs' busy and active shares, ncu's tensor-pipe activity.
    Blocks start head by head (group 1: the order measured on 2026-11-28) or in groups of heads
    (fa_block: 64). A block's length: its unmasked tiles, plus its masked (diagonal) ones at
    r["masked"] (a warp does one; the block barrier makes the iteration cost the masked one)."""
    c, ratio = r["cycles"], r["masked"] / r["cycles"]
    if kind == "forward":          # 128-query blocks: 2 qb unmasked key tiles + 2 masked
        nb = T // 128
        w = [2 * qb + 2 * ratio for qb in range(nb - 1, -1, -1)]
        hmma_total = hmma_total or heads * sum(8 * qb + 6 for qb in range(nb)) * 128
        flop = 4 * heads * 64 * T * (T + 1) / 2
    else:                          # dK/dV: 128-key blocks, 64-query tiles from the diagonal
        nb, nq = T // 128, T // 64
        w = [nq - 2 * kb - 1 + ratio for kb in range(nb)]
        hmma_total = hmma_total or heads * sum(4 * (nq - 2 * kb) * 256 for kb in range(nb))
        flop = 8 * heads * 64 * T * (T + 1) / 2      # dK/dV's four products of the backward's five
    jobs = []
    for g0 in range(0, heads, group):
        for x in w:
            jobs += [x] * min(group, heads - g0)
    busy, active = schedule(jobs, 132, warps, c / r["alone"])
    span = c * sum(jobs) / (132 * warps * busy)
    return {"tflops": flop / (span / clock) / 1e12, "busy": busy, "active": active, "span_cycles": span,
            "us": span / clock * 1e6, "tensor_ncu": hmma_total * r["occ_tensor"] / (132 * 4 * active * span)}


# ---------------------------------------------------------------------------------------------
# calibration against the H200 run of 2026-11-28 (dev/reports/gpu_2026-11-28_h200: attention_bench
# and ncu_attention_b16_t1024.csv.gz; B 16, NH 12, T 1024, HS 64, causal; the kernels of 14ed499)

MEASURED = {
    "forward": {"tflops": 208.7, "tensor": 0.3985, "us_ncu": 160.3, "hmma": 6684672},
    "dkv": {"tensor": 0.3832, "us_ncu": 334.2, "hmma": 13369344},
}
FETCH = ["icache_kb=8", "icache_miss=30", "icache_prefetch=2"]     # the instruction-fetch hypothesis
SWEEP = [[], ["tensor=7"], ["tensor=6"], ["mufu=14"], ["mufu=30"], ["ldsm=25"], ["ldsm=45"], ["shfl=16"],
         ["shfl=32"], ["bar=60"], ["mio_depth=4"], ["scheduler=gto"], ["xu=4"], ["rf_ports=2"], FETCH]
KERNELS = {"forward": ("flash_attention_forward_kernel<64>", 0), "dkv": ("flash_attention_backward_dkv_kernel<64>", 2)}


def calibrate(funcs, args):
    cols = ("inphase", "half", "free", "noisy")
    for kind in ("forward", "dkv"):
        name, trips = KERNELS[kind]
        fn, _ = pick_kernel(funcs, name)
        steady, masked = (main_loop_path(funcs[fn], w, trips) for w in ("steady", "masked"))
        meas = MEASURED[kind]
        print(f"\n{name}, {'key tile' if kind == 'forward' else 'query tile (2 sub-steps)'}: cycles of a warp's "
              f"iteration at 2 warps a sub-partition -> the kernel at B16 NH12 T1024, blocks head by head: "
              + ("TFLOP/s at 1.98 GHz" if kind == "forward" else "us at 1.755 GHz") + ", ncu's tensor activity")
        print("  measured: " + (f"{meas['tflops']} TFLOP/s, " if "tflops" in meas else "") +
              f"ncu {meas['us_ncu']} us (clock locked, value not recorded), tensor {meas['tensor']:.2%}")
        print(f"  {'setting':<14} {'alone':>5} | " + " | ".join(f"{c:^24}" for c in cols))
        for sets in (SWEEP if args.sweep else [SWEEP[0], FETCH]):
            cells = []
            for sc in cols:
                r = evaluate(steady, masked, sets, sc, 2, args.seeds, args.iters, args.warm)
                e = kernel_estimate(kind, r, hmma_total=meas["hmma"], clock=1.98e9 if kind == "forward" else 1.755e9)
                perf = f"{e['tflops']:3.0f}TF" if kind == "forward" else f"{e['us']:3.0f}us"
                ph = "" if sc in ("inphase", "half") else f" {r['phase']:.2f}"
                cells.append(f"{r['cycles']:5.0f} {perf} {e['tensor_ncu']:5.1%}{ph}")
            label = "fetch (8 KB L0)" if sets == FETCH else " ".join(sets) or "default"
            print(f"  {label:<14} {r['alone']:5.0f} | " + " | ".join(f"{c:<24}" for c in cells))
            sys.stdout.flush()
    return 0


# ---------------------------------------------------------------------------------------------
# getting the SASS: a cuobjdump listing, an object / cubin, or attention.cu of a source tree
# compiled the way test/check_attention_sass.sh compiles it

def find_cuobjdump():
    if os.environ.get("CUOBJDUMP"):
        return os.environ["CUOBJDUMP"]
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d and os.access(os.path.join(d, "cuobjdump"), os.X_OK):
            return os.path.join(d, "cuobjdump")
    dirs = site.getsitepackages() + [site.getusersitepackages()]
    found = sorted(f for d in dirs for f in glob.glob(d + "/nvidia/*/bin/cuobjdump"))
    if not found:
        raise SystemExit("fa_cycle_model: cuobjdump not found: pip install nvidia-cuda-cuobjdump (or set CUOBJDUMP)")
    return found[0]


def sass_of(args):
    """the `cuobjdump -sass` text of --sass, --cubin or --tree (default: this tree)"""
    if args.sass:
        if not os.path.isfile(args.sass):
            raise SystemExit(f"fa_cycle_model: --sass {args.sass}: no such file")
        return open(args.sass).read()
    with tempfile.TemporaryDirectory(prefix="fa_cycle_model.") as tmp:
        obj = args.cubin
        if not obj:
            tree = args.tree or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
            if not os.path.isfile(os.path.join(tree, "llmc/cuda/attention.cu")):
                raise SystemExit(f"fa_cycle_model: --tree {tree}: no llmc/cuda/attention.cu there")
            obj = os.path.join(tmp, f"attention_sm{args.arch}.o")
            cmd = os.environ.get("NVCC", "nvcc").split() + [
                "-std=c++17", "-O3", "-DLLMC_CUDA", "-I.", "-Illmc", "-gencode",
                f"arch=compute_{args.arch},code=sm_{args.arch}", "-c", "llmc/cuda/attention.cu", "-o", obj]
            r = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
            if r.returncode:
                raise SystemExit(f"fa_cycle_model: nvcc in {tree} failed:\n{r.stderr}")
        elif not os.path.isfile(obj):
            raise SystemExit(f"fa_cycle_model: --cubin {obj}: no such file")
        r = subprocess.run([find_cuobjdump(), "-sass", obj], capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"fa_cycle_model: cuobjdump -sass {obj} failed:\n{r.stderr}")
        return r.stdout


def demangle(names):
    try:
        r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
        out = r.stdout.splitlines() if r.returncode == 0 else names
    except OSError:
        out = names
    return {n: d.split("(")[0].replace("void ", "") for n, d in zip(names, out)}


def pick_kernel(funcs, name):
    """the one function `name` names: mangled, demangled (flash_attention_forward_kernel<64, 2>),
    or a unique part of either"""
    pretty = demangle(list(funcs))
    hits = [n for n in funcs if name in (n, pretty[n])] or [n for n in funcs if name in pretty[n] or name in n]
    if len(hits) != 1:
        listing = "\n  ".join(sorted(pretty.values()))
        raise SystemExit(f"fa_cycle_model: --kernel {name!r} names {len(hits)} functions; the listing has:\n  {listing}")
    return hits[0], pretty[hits[0]]


# ---------------------------------------------------------------------------------------------
# the command line

NCU = {"no_instruction": "no_instruction", "register_read": "dispatch_stall", "stall_count": "wait", "scoreboard": "short/long_scoreboard", "register": "(reg mode)",
       "tensor_busy": "math_pipe_throttle", "pipe_busy": "math_pipe_throttle", "mio_full": "mio_throttle",
       "barrier": "barrier", "depbar": "long_scoreboard", "other_warp": "not_selected", "issued": "selected"}


def report(tag, r):
    why = " ".join(f"{k}={v:.2f}" for k, v in r["why"].items() if v >= 0.005)
    ph = "" if r.get("phase") is None else f"  phase {r['phase']:.2f}"
    rng = r.get("cycles_range", (0, 0))
    spread = f" ({rng[0]:.0f}-{rng[1]:.0f})" if rng[1] - rng[0] > 1 else ""
    print(f"{tag:<22} {r['cycles']:6.0f}{spread} cycles a warp's iteration, tensor {r['tensor']:5.1%}, xu {r['xu']:5.1%},"
          f" IPC {r['ipc']:.2f} a sub-partition{ph}")
    print(f"{'':<22} warp states (ncu names: {', '.join(sorted(set(NCU[k] for k, v in r['why'].items() if v >= .005)))}):"
          f" {why}")
    if r.get("segments"):
        print(f"{'':<22} a warp's iteration: " + ", ".join(f"{k} {v:.0f}" for k, v in r["segments"].items()))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=USAGE)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--sass", help="a `cuobjdump -sass` listing")
    src.add_argument("--cubin", help="an object or cubin with sm_XX code (cuobjdump reads it)")
    src.add_argument("--tree", help="a source tree (default: this one): its llmc/cuda/attention.cu compiled "
                     "as test/check_attention_sass.sh compiles it")
    ap.add_argument("--arch", default="90", help="with --tree: the sm_ architecture (default 90)")
    ap.add_argument("--kernel", default="flash_attention_forward_kernel<64>", help="mangled or demangled name")
    ap.add_argument("--path", default="steady", choices=list(PATHS), help="the path through the loop")
    ap.add_argument("--inner-trips", type=int, default=0, help="model the loop around the main loop, the main "
                    "loop run this many times inside it (dK/dV at HS 64: 2 sub-steps a query tile)")
    ap.add_argument("--warps", type=int, default=2, help="warps a sub-partition = blocks an SM (2: 8 warps; 3: 12)")
    ap.add_argument("--phase", default="all", choices=list(SCENARIOS) + ["all"])
    ap.add_argument("--seeds", type=int, default=3, help="random starts averaged (free, noisy)")
    ap.add_argument("--deps", default="ctrl", choices=("ctrl", "reg"), help="ctrl: the compiler's stall counts and "
                    "scoreboards (default); reg: register dependencies and Machine.fixed only")
    ap.add_argument("--iters", type=int, default=24)
    ap.add_argument("--warm", type=int, default=8)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="change a Machine parameter")
    ap.add_argument("--estimate", choices=("forward", "dkv"), help="the kernel at B16 NH12 --T from the steady and "
                    "masked paths: TFLOP/s at --clock, ncu's tensor activity")
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--clock", type=float, default=1.98, help="GHz (default 1.98: attention_bench's boost clock)")
    ap.add_argument("--group", type=int, default=1, help="--estimate: heads started together (1: the measured "
                    "order; 64: fa_block's)")
    ap.add_argument("--dump", action="store_true", help="print the path's instructions with their control codes")
    ap.add_argument("--calibrate", action="store_true", help="the calibration against the 2026-11-28 H200 run")
    ap.add_argument("--sweep", action="store_true", help="--calibrate: also each latency / pipe variant")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    funcs = parse_functions(sass_of(args))
    if args.calibrate:
        return calibrate(funcs, args)
    fn, pretty = pick_kernel(funcs, args.kernel)
    path = main_loop_path(funcs[fn], args.path, args.inner_trips)
    if path is None:
        raise SystemExit(f"fa_cycle_model: {pretty}: no loop holds an HMMA")
    machine(args.set)                  # a bad --set fails here, before any run
    if args.dump:
        for x in path:
            print(f"{x.addr:05x} st={x.stall:2d} wb={'-' if x.wbar is None else x.wbar} "
                  f"rb={'-' if x.rbar is None else x.rbar} wait={x.wait:06b} {x.guard} {x.op} {x.ops}")
    counts = {o: sum(1 for x in path if x.op.startswith(o)) for o in ("HMMA", "LDSM", "MUFU", "SHFL", "LDGSTS", "BAR")}
    print(f"{pretty}: {args.path} path of the main loop{' (x%d inner)' % args.inner_trips if args.inner_trips else ''}: "
          f"{len(path)} instructions, " + ", ".join(f"{v} {k}" for k, v in counts.items()) +
          f", {sum(max(1, x.stall) for x in path)} cycles of stall counts")
    masked = main_loop_path(funcs[fn], "masked", args.inner_trips) if args.estimate else None
    first = True
    for sc in (list(SCENARIOS) if args.phase == "all" else [args.phase]):
        r = evaluate(path, masked, args.set, sc, args.warps, args.seeds, args.iters, args.warm, args.deps)
        if first:
            report("1 warp (alone)", r["alone_run"])
            first = False
        report(f"{args.warps} warps, {sc}", r)
        if args.estimate:
            e = kernel_estimate(args.estimate, r, args.warps, T=args.T, clock=args.clock * 1e9, group=args.group)
            print(f"{'':<22} kernel: masked tiles {r['masked']:.0f} cycles; {e['tflops']:.0f} TFLOP/s at {args.clock} "
                  f"GHz ({e['us']:.1f} us), busy {e['busy']:.2f}, ncu tensor activity {e['tensor_ncu']:.1%}")
    return 0


USAGE = """examples:
  python3 dev/fa_cycle_model.py                          this tree's forward<64>, 2 warps, every phase case
  python3 dev/fa_cycle_model.py --tree ../wt-x --kernel 'flash_attention_forward_kernel<64, 2>' --estimate forward
  python3 dev/fa_cycle_model.py --sass a.sass --kernel flash_attention_backward_dkv_kernel<64> --inner-trips 2
  python3 dev/fa_cycle_model.py --warps 3 --phase free    the what-if of 12 warps an SM
  python3 dev/fa_cycle_model.py --set mufu=30 --set tensor=7 --phase inphase
  python3 dev/fa_cycle_model.py --calibrate [--sweep]     the tables of the docstring"""

if __name__ == "__main__":
    sys.exit(main())
