// The QLoRA test on the CUDA backend: the same source as the CPU backend's test (test_qlora.c),
// with bf16 tolerances (stated there). mk/gpucheck.mk builds it under the CUDA-on-CPU harness for
// CI (test_qlora_model_cuda: test_qlora_cuda is the NF4 kernel test of test/cuda/) and with nvcc
// for GPUs (test_qlora_gpu).
#include "test_qlora.c"
