#!/usr/bin/env bash
# Added to the suite when the CUDA toolkit headers are missing: the CUDA kernels could not be
# built and run on the CPU harness, which must not pass silently.
echo "CUDA toolkit headers (cuda_runtime.h, cuda_bf16.h) not found under \${CUDA_HOME:-/usr/local/cuda}/include:"
echo "the CUDA kernels were NOT run on the CUDA-on-CPU harness. Install the CUDA toolkit (headers"
echo "suffice) or set CUDA_HOME; make NO_CUDA_HARNESS=1 test skips them on purpose."
exit 1
