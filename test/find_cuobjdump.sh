#!/usr/bin/env bash
# Prints the path of cuobjdump: $CUOBJDUMP, the one on PATH, or PyPI's nvidia-cuda-cuobjdump
# (.ci/run installs it; the toolkit on the CI machine has none); nothing when there is none.
if [ -n "${CUOBJDUMP:-}" ]; then echo "$CUOBJDUMP"; exit 0; fi
command -v cuobjdump && exit 0
python3 -c '
import glob, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
print(next(iter(sorted(f for d in dirs for f in glob.glob(d + "/nvidia/*/bin/cuobjdump"))), ""))' 2>/dev/null
