// The packed-records test on the CUDA backend: the same source as the CPU backend's test
// (test_pack.c), with bf16 tolerances (stated there). mk/harness.mk builds it under the
// CUDA-on-CPU harness for CI, mk/cuda.mk with nvcc for GPUs (test_pack_gpu: `make BACKEND=cuda
// gpu-tests`).
#include "test_pack.c"
