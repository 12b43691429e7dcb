// The preference objectives' model test on the CUDA backend: the same source as the CPU
// backend's test (test_pref.c), with bf16 tolerances (stated there). mk/harness.mk builds it under
// the CUDA-on-CPU harness for CI.
#include "test_pref.c"
