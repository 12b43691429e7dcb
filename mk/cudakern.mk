# CUDA backend kernels (llmc/cuda/*.cu) under the CUDA-on-CPU harness: every .cu is compiled by
# g++ with test/cuda_cpu/cuda_cpu.h force-included (-DLLMC_CUDA_EMULATED routes GEMMs to
# cblas_sgemm), linked with the harness runtime into test_cuda_ops, which checks every op against
# a double-precision reference. check_cuda_kernels_ran.sh then fails if any __global__ in
# llmc/cuda/*.cu was never launched.
#
# Symbol clashes: the emulated CUDA ops define the same C symbols as the CPU backend
# (encoder_forward, ...), so test_cuda_ops links only the emulated CUDA objects plus
# llmc/check.o and llmc/fileio.o, never llmc/cpu/*.o: its references are written in the test.

CUDA_HOME ?= /usr/local/cuda
# (comm_nccl.cu is host code for NCCL, built by mk/comm.mk, not a kernel source)
CUDAKERN_SRCS := $(filter-out llmc/cuda/comm_nccl.cu,$(wildcard llmc/cuda/*.cu))
CUDAKERN_EMU_OBJS := $(patsubst %.cu,$(BUILD)/emu/%.o,$(CUDAKERN_SRCS))
CUDAKERN_EMU_FLAGS := -std=gnu++17 $(filter-out -Werror=%,$(WARN)) -Wno-class-memaccess -Illmc -I. $(OPT) $(SANFLAGS) \
    -include test/cuda_cpu/cuda_cpu.h -isystem $(CUDA_HOME)/include -DLLMC_CUDA -DLLMC_CUDA_EMULATED
CUDAKERN_RT_OBJ := $(BUILD)/emu/test/cuda_cpu/cuda_cpu.o

$(BUILD)/emu/llmc/cuda/%.o: llmc/cuda/%.cu $(wildcard llmc/cuda/*.cuh) llmc/ops.h test/cuda_cpu/cuda_cpu.h
	@mkdir -p $(dir $@)
	$(CXX) $(CUDAKERN_EMU_FLAGS) -x c++ -c $< -o $@

$(CUDAKERN_RT_OBJ): test/cuda_cpu/cuda_cpu.cpp test/cuda_cpu/cuda_cpu.h
	@mkdir -p $(dir $@)
	$(CXX) -std=gnu++17 $(filter-out -Werror=%,$(WARN)) $(OPT) $(SANFLAGS) -isystem $(CUDA_HOME)/include -c $< -o $@

$(BUILD)/test/test_cuda_ops: test/test_cuda_ops.cpp $(CUDAKERN_EMU_OBJS) $(CUDAKERN_RT_OBJ) \
        $(BUILD)/llmc/check.o $(BUILD)/llmc/fileio.o test/test.h
	@mkdir -p $(dir $@)
	$(CXX) $(CUDAKERN_EMU_FLAGS) -x c++ -c $< -o $@.o
	$(CXX) $@.o $(CUDAKERN_EMU_OBJS) $(CUDAKERN_RT_OBJ) $(BUILD)/llmc/check.o $(BUILD)/llmc/fileio.o \
	    -o $@ $(LDFLAGS) $(BLAS_LIBS) -lm -lpthread

# (only once the harness, test/cuda_cpu/, is in the tree)
ifneq ($(wildcard test/cuda_cpu/cuda_cpu.cpp),)
TEST_PROGS += $(BUILD)/test/test_cuda_ops
TEST_SCRIPTS += test/check_cuda_kernels_ran.sh
endif
