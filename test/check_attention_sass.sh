#!/usr/bin/env bash
# Static check of the flash attention kernels' machine code (llmc/cuda/attention.cu), for each GPU
# architecture of the build (CUDA_ARCHS, sm_80 and sm_90): compiled as the build compiles it, then
# disassembled with cuobjdump, every instantiation of the forward, dK/dV (both variants) and dQ
# kernels must
#   - run its products on the tensor cores' documented layouts: HMMA.16816.F32.BF16 (mma.sync
#     m16n8k16 bf16 -> fp32), fed by LDSM (ldmatrix) from shared memory, filled by LDGSTS (cp.async);
#   - touch no local memory: no LDL / STL (a spill, or an array indexed at run time);
# and the table of registers, static shared memory (sm_90 reserves 1 KB a block; the dynamic tiles
# are llmc/cuda/README.md's table) and the blocks an SM can hold by registers (128 threads a
# block, 64 K registers an SM) is printed for the next GPU run to compare with.
# cuobjdump: on PATH, or from PyPI's nvidia-cuda-cuobjdump (.ci/run installs it; the toolkit
# here has none); without it the check is skipped, loudly. Runs once (not in the sanitizer pass).
set -u
cd "$(dirname "$0")/.."
NVCC="${NVCC:-nvcc}"
if [ "${SAN:-}" = "1" ]; then echo "SKIP check_attention_sass under SAN=1 (checked in the plain pass)"; exit 0; fi
if ! command -v "$NVCC" >/dev/null 2>&1; then echo "SKIP check_attention_sass: nvcc not found"; exit 0; fi
CUOBJDUMP="${CUOBJDUMP:-$(command -v cuobjdump || python3 -c '
import glob, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
print(next(iter(sorted(f for d in dirs for f in glob.glob(d + "/nvidia/*/bin/cuobjdump"))), ""))' 2>/dev/null)}"
if [ -z "$CUOBJDUMP" ] || [ ! -x "$CUOBJDUMP" ]; then
  echo "SKIP check_attention_sass: cuobjdump not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm (the SASS of the attention kernels was NOT checked)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for a in ${CUDA_ARCHS:-80 90}; do
  obj="$tmp/attention_sm$a.o"
  if ! "$NVCC" -std=c++17 -O3 -DLLMC_CUDA -I. -Illmc -gencode arch=compute_$a,code=sm_$a -c llmc/cuda/attention.cu -o "$obj" 2>"$tmp/err"; then
    echo "FAIL: nvcc -arch=sm_$a llmc/cuda/attention.cu:"; cat "$tmp/err"; exit 1
  fi
  "$CUOBJDUMP" -sass "$obj" > "$tmp/sass" && "$CUOBJDUMP" -res-usage "$obj" > "$tmp/res" || { echo "FAIL: $CUOBJDUMP on $obj"; exit 1; }
  # per function: instruction counts from the SASS, then resources
  python3 - "$a" "$tmp/sass" "$tmp/res" <<'PY' || fail=1
import re, subprocess, sys
arch, sass, res = sys.argv[1], open(sys.argv[2]).read(), open(sys.argv[3]).read()
counts, name = {}, None
for line in sass.splitlines():
    m = re.search(r"Function : (\S+)", line)
    if m: name = m.group(1); counts[name] = {"HMMA": 0, "LDSM": 0, "LDGSTS": 0, "LOCAL": 0}; continue
    if name is None: continue
    c = counts[name]
    if "HMMA.16816.F32.BF16" in line: c["HMMA"] += 1
    if re.search(r"\bLDSM\.", line): c["LDSM"] += 1
    if re.search(r"\bLDGSTS\.", line): c["LDGSTS"] += 1
    if re.search(r"\b(LDL|STL)(\.|\s)", line): c["LOCAL"] += 1
usage = dict(re.findall(r"Function (\S+):\s*\n\s*(REG:.*)", res))
kinds = ("flash_attention_forward_kernel", "flash_attention_backward_dkv_kernel", "flash_attention_backward_dq_kernel")
bad, n = 0, 0
print(f"sm_{arch}: {'kernel':<56} {'regs':>4} {'blocks/SM':>9} {'static smem':>11} {'HMMA':>5} {'LDSM':>5} {'LDGSTS':>6}")
for fn in sorted(counts):
    if not any(k in fn for k in kinds): continue
    n += 1
    c, u = counts[fn], usage.get(fn, "")
    regs = int(re.search(r"REG:(\d+)", u).group(1)) if "REG:" in u else -1
    shared = re.search(r"SHARED:(\d+)", u).group(1) if "SHARED:" in u else "?"
    local = int(re.search(r"LOCAL:(\d+)", u).group(1)) if "LOCAL:" in u else 0
    blocks = 65536 // (((regs + 7) // 8 * 8) * 128) if regs > 0 else 0
    pretty = subprocess.run(["c++filt", fn], capture_output=True, text=True).stdout.strip().split("(")[0].replace("void ", "")
    ok = c["HMMA"] > 0 and c["LDSM"] > 0 and c["LDGSTS"] > 0 and c["LOCAL"] == 0 and local == 0
    print(f"{'ok  ' if ok else 'FAIL'}   {pretty:<56} {regs:>4} {blocks:>9} {shared:>11} {c['HMMA']:>5} {c['LDSM']:>5} {c['LDGSTS']:>6}"
          + ("" if ok else f"   <- needs HMMA.16816.F32.BF16, LDSM, LDGSTS and no local memory (LDL/STL {c['LOCAL']}, LOCAL {local})"))
    bad += not ok
# forward, dK/dV (deterministic and atomic), dQ for the 8 head sizes 16..128
if n != 32: print(f"FAIL sm_{arch}: expected 32 flash attention kernel instantiations, found {n}"); bad += 1
sys.exit(1 if bad else 0)
PY
done
[ $fail -eq 0 ] && echo "check_attention_sass: every flash attention kernel runs HMMA.16816.F32.BF16 fed by LDSM and LDGSTS, with no local memory, on sm_${CUDA_ARCHS:-80 90}"
exit $fail
