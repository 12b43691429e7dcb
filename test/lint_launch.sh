#!/usr/bin/env bash
# Kernels are launched only through LAUNCH() (llmc/cuda/launch.cuh): g++ cannot parse the
# triple-chevron syntax, so a raw launch anywhere else would bypass the CUDA-on-CPU harness and
# leave that kernel untested in CI. Fails on any '<<<' in a C/C++/CUDA source outside launch.cuh.
set -u
cd "$(dirname "$0")/.."

# prints file:line:text of every raw launch under directory $1
scan() {
  (cd "$1" && find . \( -path ./.git -o -path './build*' -o -path ./dev/cuda/build \) -prune -o \
     -type f \( -name '*.cu' -o -name '*.cuh' -o -name '*.h' -o -name '*.hpp' -o -name '*.c' -o -name '*.cpp' \) \
     ! -path ./llmc/cuda/launch.cuh -print0 | xargs -0 -r grep -H -n -F '<<<' --)
}

# the scanner must find a planted raw launch (and not the one in launch.cuh)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/llmc/cuda" "$tmp/sub"
printf 'void f() { k<<<1, 32>>>(); }\n' > "$tmp/sub/bad.cu"
cp llmc/cuda/launch.cuh "$tmp/llmc/cuda/launch.cuh"
self=$(scan "$tmp")
if [ "$(echo "$self" | grep -c .)" -ne 1 ] || ! grep -q 'sub/bad.cu:1:' <<<"$self"; then
  echo "lint_launch self-test failed: expected exactly sub/bad.cu:1, got: $self"; exit 1
fi

hits=$(scan .)
if [ -n "$hits" ]; then
  echo "raw kernel launches found; use LAUNCH(kernel, grid, block, smem, stream, args...) from llmc/cuda/launch.cuh:"
  echo "$hits"
  exit 1
fi
if ! grep -F '<<<' llmc/cuda/launch.cuh | grep -q 'launch'; then
  echo "llmc/cuda/launch.cuh: the chevron line must be the LAUNCH macro definition and say 'launch'"; exit 1
fi
echo "lint_launch: no raw kernel launches outside llmc/cuda/launch.cuh"
