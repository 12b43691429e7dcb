#!/usr/bin/env bash
# Includes flow down the library's layers (docs/ARCHITECTURE.md, "The folders"):
#   - llmc/ has a folder per layer; LLMC_LAYERS in mk/config.mk lists them lowest first, and a
#     file may include headers of its own layer or a lower one, never a higher one;
#   - every include of a library header is written from llmc/ ("model/gpt2.h"), so a reader sees
#     the layer at each include: no bare "gpt2.h", no "../x.h";
#   - the backends (llmc/cpu, llmc/cuda) may include their own files and ops/, base/, comm/ only.
# Each violation is printed as file:line: text. The lint first checks itself on a copy of llmc/
# with planted violations (each must be reported), then checks the tree.
set -u
cd "$(dirname "$0")/.."

layers=$(sed -n 's/^LLMC_LAYERS := //p' mk/config.mk)
[ -n "$layers" ] || { echo "FAIL: no 'LLMC_LAYERS := ...' line in mk/config.mk"; exit 1; }

# prints every violation under the llmc/ folder $1
scan() {
  python3 - "$1" $layers <<'PY'
import os, re, sys
root, layers = sys.argv[1], sys.argv[2:]
rank = {l: i for i, l in enumerate(layers)}
backend_may = {"cpu": {"ops", "base", "comm", "cpu"}, "cuda": {"ops", "base", "comm", "cuda"}}
inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
folders = [d for d in sorted(os.listdir(root)) if os.path.isdir(os.path.join(root, d))]
for d in folders:
    if d not in rank and d not in backend_may:
        print(f"{root}/{d}/: a folder that is neither a layer (LLMC_LAYERS) nor a backend")
for l in layers:
    if not os.path.isdir(os.path.join(root, l)):
        print(f"{root}/{l}/: LLMC_LAYERS names it but it does not exist")
n_files = 0
for d in folders:
    for dirpath, _, names in os.walk(os.path.join(root, d)):
        for name in sorted(names):
            if not re.search(r"\.(c|h|cu|cuh|cpp)$", name):
                continue
            path = os.path.join(dirpath, name)
            n_files += 1
            for no, line in enumerate(open(path, errors="replace"), 1):
                m = inc.match(line)
                if not m:
                    continue
                target = m.group(1)
                where = f"{path}:{no}: {line.strip()}"
                head = target.split("/")[0] if "/" in target else None
                if d in backend_may:
                    if head is None:
                        if not os.path.exists(os.path.join(dirpath, target)):
                            print(f"{where}  (not a file of {d}/: write the include from llmc/)")
                    elif head not in backend_may[d]:
                        print(f"{where}  (the {d} backend may include only {', '.join(sorted(backend_may[d]))})")
                    continue
                if head is None or target.startswith(".."):
                    print(f"{where}  (write library includes from llmc/, e.g. \"{d}/{os.path.basename(target)}\")")
                elif head in rank and rank[head] > rank[d]:
                    print(f"{where}  ({d}/ is below {head}/: an include may not point up)")
                elif head in backend_may:
                    print(f"{where}  (shared code includes no backend header: ops/ is the seam)")
if n_files < 50:
    print(f"{root}: only {n_files} source files found (the folders moved?)")
PY
}

# self-test: a copy with an upward include, a bare include, a backend including a model header
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp -r llmc "$tmp/llmc"
low=${layers%% *}; high=${layers##* }
first_low=$(ls "$tmp/llmc/$low"/*.c | head -1)
first_high_h=$(cd llmc && ls "$high"/*.h | head -1)
printf '#include "%s"\n' "$first_high_h" >> "$first_low"
printf '#include "check.h"\n' >> "$tmp/llmc/$high/$(ls "$tmp/llmc/$high" | grep '\.c$' | head -1)"
printf '#include "model/gpt2.h"\n' >> "$tmp/llmc/cpu/backend.c"
self=$(scan "$tmp/llmc")
want=("$(basename "$first_low"):[0-9]*: #include \"$first_high_h\"" '#include "check.h"' 'cpu/backend.c:[0-9]*: #include "model/gpt2.h"')
for w in "${want[@]}"; do
  grep -q "$w" <<<"$self" || { echo "lint_layers self-test failed: '$w' not reported; got:"; echo "$self"; exit 1; }
done
[ "$(grep -c . <<<"$self")" -eq 3 ] || { echo "lint_layers self-test failed: expected 3 findings, got:"; echo "$self"; exit 1; }

hits=$(scan llmc)
if [ -n "$hits" ]; then
  echo "FAIL: includes against the layers (lowest first: $layers):"
  echo "$hits"
  exit 1
fi
echo "lint_layers: includes flow down $layers; the backends include only ops/, base/, comm/ and their own (self-test: 3 planted violations reported)"
