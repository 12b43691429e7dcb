// The model test on the CUDA backend: the same source as the CPU backend's test (test_gpt2.c),
// with bf16 tolerances (stated there). mk/cudamodel.mk builds it under the CUDA-on-CPU harness
// for CI and with nvcc for GPUs (`make test-gpt2-gpu`).
#include "test_gpt2.c"
