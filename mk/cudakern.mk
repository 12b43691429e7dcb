# CUDA backend kernels (llmc/cuda/*.cu) under the CUDA-on-CPU harness (mk/cuda_harness.mk): every
# .cu is compiled by g++ with test/cuda_cpu/cuda_cpu.h force-included and -DLLMC_CUDA_EMULATED
# (which routes GEMMs to cblas_sgemm instead of cuBLASLt), then linked with the harness runtime
# into test_cuda_ops, which checks every op against a double-precision reference.
# test/check_cuda_kernels_ran.sh fails if any __global__ in llmc/cuda/*.cu was never launched.
# The harness' orders.sh reruns test_cuda_ops in other fiber orders, test-tsan under TSan.
#
# Symbol clashes: the emulated CUDA ops define the same C symbols as the CPU backend
# (encoder_forward, ...), so test_cuda_ops links the emulated CUDA objects plus only the
# backend-free llmc/check.o and llmc/fileio.o, never llmc/cpu/*.o; its references are
# double-precision loops written in the test from the definitions in llmc/ops.h.

CUDAKERN_SRCS := $(wildcard llmc/cuda/*.cu)
CUDAKERN_EMU_OBJS := $(patsubst %.cu,$(BUILD)/cuda_cpu/emu/%.o,$(CUDAKERN_SRCS))
CUDAKERN_EMU_CXX = $(CUDA_CPU_CXX) -DLLMC_CUDA -DLLMC_CUDA_EMULATED -x c++ -include test/cuda_cpu/cuda_cpu.h

$(BUILD)/cuda_cpu/emu/%.o: %.cu $(CUDA_CPU_HDRS)
	@mkdir -p $(dir $@)
	$(CUDAKERN_EMU_CXX) -c $< -o $@

$(BUILD)/test/test_cuda_ops: test/test_cuda_ops.cpp $(CUDAKERN_EMU_OBJS) $(CUDA_CPU_RT) \
        $(BUILD)/llmc/check.o $(BUILD)/llmc/fileio.o test/test.h
	@mkdir -p $(dir $@)
	$(CUDAKERN_EMU_CXX) -c $< -o $@.o
	$(CXX) $@.o $(CUDAKERN_EMU_OBJS) $(CUDA_CPU_RT) $(BUILD)/llmc/check.o $(BUILD)/llmc/fileio.o \
	    -o $@ $(LDFLAGS) $(BLAS_LIBS) -lm -lpthread

ifeq ($(NO_CUDA_HARNESS),1)
else ifeq ($(HAVE_CUDA_HEADERS),1)
TEST_PROGS += $(BUILD)/test/test_cuda_ops
TEST_SCRIPTS += test/check_cuda_kernels_ran.sh
endif
