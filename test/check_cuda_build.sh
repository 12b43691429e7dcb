#!/usr/bin/env bash
# The CUDA build from a clean tree (make test, mk/tests.mk: cuda-build-check). A copy of the
# sources (what git tracks plus untracked files it does not ignore) goes to a directory of its
# own with no build in it; there
#   1. `make BACKEND=cuda` must build all four programs, and nothing of the CPU build (build/
#      holds only the CUDA tree, so no CPU object or binary stood in for a CUDA one);
#   2. `make gpu-bundle` must pack the portable, MPI-free programs, GPU tests and dev/cuda
#      benchmarks, and ldd of each may name nothing a bare GPU machine lacks: glibc's libraries,
#      libstdc++, libgcc_s, and the CUDA runtime, cuBLASLt and NCCL (attention_bench also cuBLAS);
#   3. cuobjdump lists SASS of every CUDA_ARCHS architecture (mk/config.mk) in the bundle's
#      train_gpt2 and PTX of the newest alone (what the driver compiles on a newer GPU).
# The programs in this tree (./train_gpt2 ...) must be untouched. Needs nvcc; no GPU.
set -u
cd "$(dirname "$0")/.."
JOBS="${JOBS:-2}"
dest=build/cuda-clean-check
fail=0
bad() { echo "FAIL: $*"; fail=1; }

rm -rf "$dest" && mkdir -p "$dest/src"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -f "$f" ] && printf '%s\0' "$f"; done | tar --null -T - -cf - | tar -xf - -C "$dest/src"
else
  tar --exclude=./build --exclude=./.git -cf - . | tar -xf - -C "$dest/src"
  rm -f "$dest/src"/{train_gpt2,train_lora,generate,data/prepare}
fi
[ -f "$dest/src/Makefile" ] || { echo "FAIL: could not copy the sources to $dest/src"; exit 1; }

root_progs="train_gpt2 train_lora generate data/prepare"
stamp() { for p in $root_progs; do [ -e "$p" ] && stat -c '%n %s %Y' "$p" || echo "$p absent"; done; }
before=$(stamp)

# a make of its own: nothing of the calling make (jobs, variables) leaks in
submake() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u PREPARE_BIN make -C "$dest/src" --no-print-directory -j"$JOBS" "$@"; }

start=$(date +%s)
if submake BACKEND=cuda > "$dest/make-cuda.log" 2>&1; then
  echo "ok   make BACKEND=cuda in a clean tree ($(( $(date +%s) - start ))s)"
else
  tail -n 30 "$dest/make-cuda.log"; bad "make BACKEND=cuda failed in a clean tree (log: $dest/make-cuda.log)"
fi
for p in $root_progs; do
  if [ -x "$dest/src/$p" ]; then echo "ok   $p built"; else bad "make BACKEND=cuda did not build $p"; fi
done
for p in train_gpt2 train_lora generate; do
  [ -x "$dest/src/$p" ] && { nm -u "$dest/src/$p" | grep -q cudaLaunchKernel || bad "$p is not the CUDA build (no cudaLaunchKernel)"; }
done
trees=$(ls "$dest/src/build" 2>/dev/null | tr '\n' ' ')
[ "$trees" = "cuda " ] && echo "ok   build/ holds only the CUDA tree" || bad "build/ of the clean tree holds '$trees', expected only 'cuda'"

start=$(date +%s)
if submake gpu-bundle > "$dest/make-bundle.log" 2>&1; then
  echo "ok   make gpu-bundle ($(( $(date +%s) - start ))s): $(tail -n 1 "$dest/make-bundle.log")"
else
  tail -n 30 "$dest/make-bundle.log"; bad "make gpu-bundle failed (log: $dest/make-bundle.log)"
fi
bundle="$dest/src/build/gpu-bundle"
for p in train_gpt2 train_lora generate prepare test_gpt2_gpu test_cuda_ops_gpu test_comm_split_gpu test_nccl_watchdog_gpu bench_ops attention_bench; do
  [ -x "$bundle/$p" ] || bad "the bundle lacks $p"
done
allowed='linux-vdso|ld-linux-x86-64|libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libcudart|libcublasLt|libnccl'
for p in "$bundle"/*; do
  [ -x "$p" ] && [ -f "$p" ] || continue
  extra=$allowed; [ "$(basename "$p")" = attention_bench ] && extra="$allowed|libcublas"
  libs=$(ldd "$p" | awk '{print $1}' | sed 's/\.so.*//; s|.*/||')
  unexpected=$(grep -vxE "($extra)" <<<"$libs" | tr '\n' ' ')
  [ -z "$unexpected" ] || bad "ldd $(basename "$p") lists libraries a bare GPU machine lacks: $unexpected"
done
echo "ldd of the portable CUDA train_gpt2:"; ldd "$bundle/train_gpt2" | sed 's/ (0x[0-9a-f]*)//; s/^/      /'
if [ -f "$bundle.tar.xz" ]; then
  kib=$(( $(stat -c %s "$bundle.tar.xz") / 1024 ))
  echo "bundle: $(du -sh "$bundle" | cut -f1) in $(ls "$bundle" | wc -l) files, $kib KiB packed ($bundle.tar.xz)"
  # carry takes 64 MiB in all, and shares it with a llm.c build and a report; ~10.5 MiB today
  [ $kib -lt 20480 ] || bad "the packed bundle is $kib KiB: over 20 MiB (see the gpu-bundle-files rule in Makefile)"
else
  bad "no $bundle.tar.xz"
fi

cuobjdump=$(bash test/find_cuobjdump.sh)
archs=$(env -u MAKEFLAGS make -s -C "$dest/src" --no-print-directory print-cuda-archs 2>/dev/null)
if [ -z "$cuobjdump" ] || [ ! -x "$cuobjdump" ]; then
  echo "SKIP the architectures of the bundle: cuobjdump not found (pip install nvidia-cuda-cuobjdump)"
elif [ -x "$bundle/train_gpt2" ] && [ -n "$archs" ]; then
  sass=$("$cuobjdump" --list-elf "$bundle/train_gpt2" | grep -o 'sm_[0-9]*' | sort -u | tr '\n' ' ')
  ptx=$("$cuobjdump" --list-ptx "$bundle/train_gpt2" | grep -o 'sm_[0-9]*' | sort -u | tr '\n' ' ')
  want_sass=$(for a in $archs; do printf 'sm_%s ' "$a"; done)
  newest=${archs##* }
  [ "$sass" = "$want_sass" ] && [ "$ptx" = "sm_$newest " ] \
    && echo "ok   the bundle's train_gpt2 holds SASS for $sass and PTX for compute_$newest only" \
    || bad "the bundle's train_gpt2 holds SASS '$sass' and PTX '$ptx'; want SASS '$want_sass' and PTX of compute_$newest"
fi

after=$(stamp)
[ "$before" = "$after" ] && echo "ok   the programs of this tree were not touched" || bad "the programs of this tree changed: $before -> $after"
[ $fail -eq 0 ] && echo "check_cuda_build: the CUDA build works from a clean tree and the bundle travels"
exit $fail
