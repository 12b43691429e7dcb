#!/usr/bin/env bash
# dev/fa_cycle_model.py, the cycle model of the attention kernels' main loops: what it reads from
# the SASS, checked on a committed listing (test/ref/fa_cycle_model/loop_sm90.sass: instructions
# and control words of cuobjdump's listing of flash_attention_forward_kernel<64>, nvcc 13.0,
# sm_90, renumbered into one small loop with a skippable barrier, a masked block and a diverged
# shuffle's branch). No timing is asserted: the figures are the model's, checked against a GPU.
#   1. control words: stall counts and scoreboards decoded as the text's operands need them (the
#      HMMA that reads the LDSM's registers waits on the barrier that LDSM sets);
#   2. register ranges: HMMA.16816.F32 (D 4, A 4, B 2, C = RZ nothing), LDSM .x4, IMAD.WIDE,
#      LDGSTS's 64-bit address and descriptor, SHFL's predicate destination, guards;
#   3. the loop path: the steady path takes the barrier and skips the masked block, the masked
#      path takes both, the diverged branch is never taken;
#   4. the simulation runs the loop (every warp completes its iterations) and the command line
#      prints its figures; bad input gets one message and a non-zero exit;
#   5. with nvcc and cuobjdump (plain pass only): this tree's forward<64> and dK/dV<64> paths hold the counts
#      test/check_attention_sass.sh budgets (128 HMMA, 32 / 48 LDSM), plus the barrier.
source "$(dirname "$0")/lib.sh"
MODEL=dev/fa_cycle_model.py
SNIP=test/ref/fa_cycle_model/loop_sm90.sass

out=$(python3 - "$MODEL" "$SNIP" 2>&1 <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("m", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
funcs = m.parse_functions(open(sys.argv[2]).read())
fails = []
def check(what, got, want):
    if got != want:
        fails.append(f"{what}: got {got!r}, want {want!r}")
ins = funcs.get("_Z4snipv", [])
check("instructions parsed", len(ins), 22)
at = {x.addr: x for x in ins}
R = lambda a, b: [("R", i) for i in range(a, b + 1)]
# 1. control words
ldsm, hmma, shfl = at[0x90], at[0xa0], at[0x100]
check("LDSM write barrier, stall", (ldsm.wbar, ldsm.stall), (1, 4))
check("HMMA waits on barrier 1", hmma.wait >> 1 & 1, 1)
check("LDGDEPBAR sets barrier 0", at[0x80].wbar, 0)
check("LDGSTS read barrier (its address registers)", at[0x70].rbar, 1)
check("SHFL write barrier", shfl.wbar, 1)
check("BAR.SYNC no barriers", (at[0x50].wbar, at[0x50].rbar, at[0x50].wait), (None, None, 0))
# 2. registers
check("HMMA dst", hmma.dst, R(168, 171))
check("HMMA src (C = RZ)", hmma.src, R(20, 23) + R(144, 145))
check("LDSM.x4 dst / src", (ldsm.dst, ldsm.src), (R(144, 147), [("R", 172)]))
check("IMAD.WIDE dst / src", (at[0x120].dst, at[0x120].src), (R(120, 121), [("R", 232)] + R(120, 121)))
check("LDGSTS src", at[0x70].src, [("R", 0), ("UR", 6), ("UR", 7), ("R", 16), ("R", 17)])
check("SHFL dst / src", (shfl.dst, shfl.src), ([("R", 18)], [("R", 176)]))
check("ISETP dst", at[0x10].dst, [("P", 0)])
check("guarded BRA reads P0", at[0xb0].src, [("P", 0)])
check("FSEL reads its predicate", at[0xc0].src, [("R", 170), ("P", 0)])
steady = m.main_loop_path(ins, "steady")
deps = [(x.addr, y.addr, b, r) for x, y, b, r in m.barrier_deps(steady)]
check("HMMA <- LDSM through barrier 1, on R144-R145", [d for d in deps if d[0] == 0xa0], [(0xa0, 0x90, 1, R(144, 145))])
# 3. paths
addrs = lambda p: [x.addr for x in p]
check("steady path", addrs(steady), [0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xe0, 0xf0,
                                     0x100, 0x110, 0x120, 0x130])
check("masked path takes the masked block", [a for a in addrs(m.main_loop_path(ins, "masked")) if a in (0xc0, 0xd0)],
      [0xc0, 0xd0])
# 4. the simulation completes every warp's iterations, in every phase case
for sc in m.SCENARIOS:
    r = m.evaluate(steady, None, [], sc, warps=2, seeds=1, iters=4, warm=1)
    if not (r["cycles"] > 0 and 0 < r["tensor"] < 1 and abs(sum(r["why"].values()) - 1) < 1e-6):
        fails.append(f"simulation {sc}: {r['cycles']} cycles, tensor {r['tensor']}, warp states {r['why']}")
print("\n".join(fails) if fails else "OK")
PY
)
[ "$out" = OK ] && ok "the snippet's control words, register ranges, barrier dependency, loop paths and simulation" \
  || bad "fa_cycle_model on $SNIP: $out"

# 4. the command line
run=$(python3 "$MODEL" --sass "$SNIP" --kernel _Z4snipv --phase half --iters 4 --warm 1 2>&1)
grep -q "steady path of the main loop: 17 instructions, 1 HMMA, 1 LDSM" <<<"$run" && grep -q "2 warps, half .* cycles a warp's iteration" <<<"$run" \
  && ok "the command line prints the path and the 2-warp figures" || bad "command line: $run"
fails_with() {
  local what="$1" want="$2"; shift 2
  local o; o=$(python3 "$MODEL" "$@" 2>&1); local rc=$?
  [ $rc -ne 0 ] && grep -qF -- "$want" <<<"$o" && ok "$what -> $(head -1 <<<"$o")" || bad "$what (rc $rc): $o"
}
fails_with "missing listing" "no such file" --sass "$TMP/nope.sass"
fails_with "unknown kernel" "names 0 functions" --sass "$SNIP" --kernel no_such_kernel
fails_with "unknown parameter" "no parameter 'bogus'" --sass "$SNIP" --kernel _Z4snipv --set bogus=1
printf 'not a listing\n' > "$TMP/x.sass"
fails_with "a file without SASS" "names 0 functions" --sass "$TMP/x.sass"

# 5. the tree's kernels (once: not in the sanitizer pass, like check_attention_sass.sh)
if [ "${SAN:-}" = "1" ]; then
  echo "skip under SAN=1: the tree's own kernels (read in the plain pass)"
elif command -v "${NVCC:-nvcc}" >/dev/null 2>&1 && python3 -c "import sys; sys.path.insert(0, 'dev'); import fa_cycle_model as m; m.find_cuobjdump()" >/dev/null 2>&1; then
  tree=$(python3 - "$MODEL" 2>&1 <<'PY'
import importlib.util, sys, argparse
spec = importlib.util.spec_from_file_location("m", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
funcs = m.parse_functions(m.sass_of(argparse.Namespace(sass=None, cubin=None, tree=".", arch="90")))
for name, trips, ldsm in (("flash_attention_forward_kernel<64, 1>", 0, 32), ("flash_attention_backward_dkv_kernel<64>", 2, 96)):
    fn, _ = m.pick_kernel(funcs, name)
    p = m.main_loop_path(funcs[fn], "steady", trips)
    got = tuple(sum(1 for x in p if x.op.startswith(o)) for o in ("HMMA", "LDSM", "BAR"))
    want = (128 * max(1, trips), ldsm, 1)
    if got != want:
        print(f"{name}: steady path holds {got} HMMA, LDSM, BAR; want {want}")
print("OK")
PY
)
  [ "$(tail -1 <<<"$tree")" = OK ] && [ "$(wc -l <<<"$tree")" = 1 ] && ok "this tree's forward<64> and dK/dV<64> paths (sm_90): the budgeted HMMA and LDSM, one barrier" \
    || bad "this tree's kernels: $tree"
else
  echo "skip: nvcc or cuobjdump not found: the tree's own kernels were not read (pip install nvidia-cuda-cuobjdump)"
fi
echo "$checks checks, $fails failed"
[ $fails -eq 0 ]
