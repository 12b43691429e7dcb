#!/usr/bin/env bash
# The backend seam (llmc/ops/ops.h) holds without build tricks:
#   1. no backend #if in shared code: the library's layer folders (llmc/<layer>/*.c, *.h), the
#      entry files, data/*.c, test/*.c and test/*.h name LLMC_CUDA nowhere but in ops.h's floatX
#      typedef (backend capabilities are asked at run time: ops_caps(), llmc/ops/device.h);
#   2. each backend's dispatch object (llmc/cpu/dispatch.c, llmc/cuda/dispatch.cu, the latter as
#      the harness builds it) defines exactly the functions llmc/ops/ops.h and llmc/ops/device.h declare;
#   3. no other object of either backend defines any of those names, and every global function
#      of the CPU backend's objects is cpu_-prefixed: the implementations can share one program
#      (the CUDA op tests) with nothing renamed.
set -u
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build/cpu}"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# ---- 1
# (a pattern that matches no file fails the lint: a moved or renamed folder must not make it pass)
layers=$(sed -n 's/^LLMC_LAYERS := //p' mk/config.mk)
[ -n "$layers" ] || { echo "FAIL: no LLMC_LAYERS line in mk/config.mk"; exit 1; }
shared=()
for pat in $(printf 'llmc/%s/*.[ch] ' $layers) './*.cu' 'data/*.c' 'test/*.c' 'test/*.h'; do
  m=(); for f in $pat; do [ -e "$f" ] && m+=("$f"); done
  [ ${#m[@]} -gt 0 ] || { echo "FAIL: $pat matches no file (a folder moved? update this lint)"; exit 1; }
  shared+=("${m[@]}")
done
hits=$(grep -nE '^[[:space:]]*#[[:space:]]*(if|ifdef|ifndef|elif).*LLMC_CUDA' "${shared[@]}" | grep -v '^llmc/ops/ops\.h:')
[ -z "$hits" ] || bad "backend #if outside llmc/cpu, llmc/cuda and the build:"$'\n'"$hits"
n_ops=$(grep -cE '^[[:space:]]*#[[:space:]]*(if|elif).*LLMC_CUDA' llmc/ops/ops.h)
[ "$n_ops" -eq 2 ] || bad "llmc/ops/ops.h: expected only the floatX typedef's #if/#elif on LLMC_CUDA, found $n_ops"
[ $fail -eq 0 ] && echo "ok   no backend #if in shared code (ops.h: the floatX typedef only)"

# ---- 2, 3
# the functions the two headers declare: "<type> name(" at the start of a line, not typedefs
declared=$(sed -E -n '/^(typedef|#|\/\/|static|extern)/d; s/^[A-Za-z_][A-Za-z0-9_ ]*[ *]+([A-Za-z_][A-Za-z0-9_]*)\(.*/\1/p' \
             llmc/ops/ops.h llmc/ops/device.h | sort -u)
[ "$(wc -l <<<"$declared")" -ge 30 ] || bad "found only $(wc -l <<<"$declared") declarations in llmc/ops/ops.h + llmc/ops/device.h"
defined() { nm --defined-only -g "$1" 2>/dev/null | awk '$2 ~ /^[TW]$/ {print $3}' | sort -u; }

check_backend() {   # objects-dir sources-dir source-suffix label prefix-rule
  local dir=$1 src=$2 suffix=$3 label=$4 prefix=$5
  local dispatch="$dir/dispatch.o"
  [ -f "$dispatch" ] || { bad "$label: $dispatch not built"; return; }
  local d; d=$(defined "$dispatch")
  local missing extra
  missing=$(comm -23 <(echo "$declared") <(echo "$d") | tr '\n' ' ')
  extra=$(comm -13 <(echo "$declared") <(echo "$d") | tr '\n' ' ')
  [ -z "$missing" ] || bad "$label dispatch does not define: $missing"
  [ -z "$extra" ] || bad "$label dispatch defines more than the interface: $extra"
  local o n=0
  for o in "$dir"/*.o; do
    [ "$o" = "$dispatch" ] && continue
    [ -f "$src/$(basename "$o" .o)$suffix" ] || continue   # left over from a renamed source
    n=$((n+1))
    local syms clash
    syms=$(defined "$o")
    clash=$(comm -12 <(echo "$declared") <(echo "$syms") | tr '\n' ' ')
    [ -z "$clash" ] || bad "$label: $(basename "$o") defines interface names (only dispatch may): $clash"
    if [ -n "$prefix" ]; then
      local unprefixed; unprefixed=$(grep -v "^$prefix" <<<"$syms" | grep . | tr '\n' ' ')
      [ -z "$unprefixed" ] || bad "$label: $(basename "$o") defines global functions without the $prefix prefix: $unprefixed"
    fi
  done
  [ $n -gt 5 ] || bad "$label: only $n objects besides dispatch.o in $dir"
  echo "ok   $label: dispatch.o defines the $(wc -l <<<"$declared") interface functions, $n other objects none of them"
}
check_backend "$BUILD/obj/llmc/cpu" llmc/cpu .c "cpu" "cpu_"
if [ -d "$BUILD/cuda_cpu/emu/llmc/cuda" ]; then
  check_backend "$BUILD/cuda_cpu/emu/llmc/cuda" llmc/cuda .cu "cuda (harness build)" ""
else
  echo "skip: no harness build of the CUDA backend in $BUILD"
fi
[ $fail -eq 0 ] && echo "lint_backend: the backend seam holds"
exit $fail
