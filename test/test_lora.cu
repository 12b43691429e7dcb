// The LoRA test on the CUDA backend: the same source as the CPU backend's test (test_lora.c),
// with bf16 tolerances (stated there). mk/gpucheck.mk builds it under the CUDA-on-CPU harness for
// CI (test_lora_cuda) and with nvcc for GPUs (test_lora_gpu).
#include "test_lora.c"
