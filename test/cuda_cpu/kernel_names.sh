# Sourced: the kernel names of llmc/cuda and those a harness run launched.
# kernels_defined: every __global__ in llmc/cuda/*.cu and *.cuh, one a line, sorted (a kernel's
# name is the identifier before its parameter list, __launch_bounds__(...) set aside).
kernels_defined() {
  sed -E 's/__launch_bounds__\([^)]*\)//g' llmc/cuda/*.cu llmc/cuda/*.cuh | grep -o '__global__[^(]*(' \
    | sed -E 's/.*[[:space:]]([A-Za-z_][A-Za-z0-9_]*)[[:space:]]*\($/\1/' | sort -u
}
# kernels_launched FILE...: the kernels named in the harness' launch log (CUDA_CPU_VERBOSE=1:
# "cuda_cpu: launch NAME <<<...>>>") or in "ran kernel: NAME" lines, one a line, sorted
kernels_launched() {
  sed -n -e 's/^cuda_cpu: launch \([A-Za-z_][A-Za-z0-9_]*\).*/\1/p' -e 's/^ran kernel: \([A-Za-z_][A-Za-z0-9_]*\).*/\1/p' "$@" | sort -u
}
