#!/usr/bin/env bash
# The production flash attention kernels run on tensor cores: the PTX nvcc generates from
# llmc/cuda/attention.cu for sm_80 and sm_90 has, in every instantiation of the forward,
# dK/dV (both variants) and dQ kernels, warp-level matrix multiply-accumulate instructions (wmma.mma.sync /
# mma.sync). Skips (passes, with a message) when nvcc is not installed; runs once (not again in
# the sanitizer pass: the PTX does not depend on it).
set -u
cd "$(dirname "$0")/.."
NVCC="${NVCC:-nvcc}"
if ! command -v "$NVCC" >/dev/null 2>&1; then echo "SKIP check_flash_ptx: nvcc not found"; exit 0; fi
if [ "${SAN:-}" = "1" ]; then echo "SKIP check_flash_ptx under SAN=1 (checked in the plain pass)"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for arch in $(printf "sm_%s " ${CUDA_ARCHS:-80 90}); do
  ptx="$tmp/flash_$arch.ptx"
  if ! "$NVCC" -std=c++17 -O3 -DLLMC_CUDA -I. -Illmc -arch=$arch --ptx llmc/cuda/attention.cu -o "$ptx" 2>"$tmp/err"; then
    echo "FAIL: nvcc --ptx -arch=$arch llmc/cuda/attention.cu:"; cat "$tmp/err"; exit 1
  fi
  # per entry point: number of mma instructions
  report=$(awk '/^\.visible \.entry / { name = $3; sub(/\(.*/, "", name); n[name] = 0; order[++k] = name }
                /(wmma\.mma\.sync|[^.]mma\.sync)/ { if (name != "") n[name]++ }
                END { for (i = 1; i <= k; i++) print order[i], n[order[i]] }' "$ptx")
  nk=0
  while read -r name count; do
    case "$name" in
      *flash_attention_forward_kernel*|*flash_attention_backward_dkv_kernel*|*flash_attention_backward_dkv_atomic_kernel*|*flash_attention_backward_dq_kernel*)
        nk=$((nk+1))
        if [ "$count" -gt 0 ]; then echo "ok   $arch $name: $count mma instructions"
        else echo "FAIL $arch $name: no tensor-core mma instruction in its PTX"; fail=1; fi ;;
    esac
  done <<<"$report"
  # forward, dK/dV, dQ for 8 head sizes; the atomic-dQ dK/dV variant for the 4 head sizes <= 64
  if [ $nk -ne 28 ]; then echo "FAIL $arch: expected 28 flash kernel instantiations, found $nk"; fail=1; fi
done
[ $fail -eq 0 ] && echo "check_flash_ptx: every flash attention kernel uses tensor-core mma for sm_80 and sm_90"
exit $fail
