# Flash attention of the CUDA backend (llmc/cuda/flash_attention.cu).
#
#   test_cuda_flash_attention   the kernels under the CUDA-on-CPU harness against the CPU backend's
#                               attention (llmc/cpu/attention_cpu.c, linked with its op symbols
#                               renamed to cpu_* like test_cuda_ops, mk/cudakern.mk); rerun in
#                               other fiber orders by orders.sh and under TSan by test-tsan (its
#                               name contains "cuda").
#   test/check_flash_ptx.sh     the PTX of the production kernels (sm_80, sm_90) contains
#                               tensor-core mma instructions (skips when nvcc is absent).
#   make flash-bench            dev/cuda/attention_bench.cu (naive / cuBLAS + softmax / flash,
#                               timings and TFLOP/s on a GPU); `make cuda-check` compiles it.

FLASH_TEST_LINK = $(CUDA_CPU_RT) $(CUDAKERN_CPUREF_OBJS) $(LIB_OBJS) $(LDFLAGS) $(LDLIBS_CPU) $(EXTRA_LIBS)

$(BUILD)/test/test_cuda_flash_attention: test/test_cuda_flash_attention.cpp $(CUDAKERN_EMU_OBJS) $(CUDA_CPU_RT) \
        $(CUDAKERN_CPUREF_OBJS) $(LIB_OBJS) test/test.h
	@mkdir -p $(dir $@)
	$(CUDAKERN_EMU_CXX) -c $< -o $@.o
	$(CXX) $@.o $(CUDAKERN_EMU_OBJS) $(FLASH_TEST_LINK) -o $@

ifeq ($(NO_CUDA_HARNESS),1)
else ifeq ($(HAVE_CUDA_HEADERS),1)
TEST_PROGS += $(BUILD)/test/test_cuda_flash_attention
endif
TEST_SCRIPTS += test/check_flash_ptx.sh

# benchmark on a GPU (not run in CI: there is none)
FLASH_BENCH := dev/cuda/build/attention_bench
$(FLASH_BENCH): dev/cuda/attention_bench.cu llmc/cuda/flash_attention.cu llmc/cuda/attention.cu $(wildcard llmc/cuda/*.cuh) llmc/ops.h
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -O3 -DLLMC_CUDA -I. -Illmc -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	    $< llmc/check.c llmc/fileio.c -o $@ -lcublas
flash-bench: $(FLASH_BENCH)

.PHONY: flash-bench

# ---------------------------------------------------------------------------------------------
# Mutation check (make test-tsan): flash_attention.cu with one barrier deleted (lines marked
# "(MUTATION-TARGET <name>)") must be reported as a data race by TSan in every order tried:
#   fwd-syncthreads  the barrier after the K/V tile loads of the forward kernel
#   dkv-syncthreads  the barrier after the query tile loads of the dK/dV kernel
# (The kernels' __syncwarps between lanes' plain shared-memory accesses and wmma loads/stores are
# not mutated: the harness models wmma load/store as warp barriers that order memory, so it
# cannot see them missing.)
FLASH_MUTANTS := fwd-syncthreads dkv-syncthreads
FLASH_MUT_DIR := $(BUILD)/flash/mutants
FLASH_EMU_OTHERS = $(filter-out %/flash_attention.o,$(CUDAKERN_EMU_OBJS))

$(FLASH_MUT_DIR)/flash_attention_%.cu: llmc/cuda/flash_attention.cu
	@mkdir -p $(dir $@)
	@test $$(grep -c '(MUTATION-TARGET $*)' $<) -eq 1 || { echo "expected one line marked (MUTATION-TARGET $*) in $<"; exit 1; }
	sed '/(MUTATION-TARGET $*)/d' $< > $@

$(FLASH_MUT_DIR)/flash_attention_%.o: $(FLASH_MUT_DIR)/flash_attention_%.cu $(CUDA_CPU_HDRS)
	$(CUDAKERN_EMU_CXX) -c $< -o $@

# the test's object comes from the intact test program's rule
$(FLASH_MUT_DIR)/test_flash_%: $(FLASH_MUT_DIR)/flash_attention_%.o $(BUILD)/test/test_cuda_flash_attention
	$(CXX) $(BUILD)/test/test_cuda_flash_attention.o $(FLASH_EMU_OTHERS) $< $(FLASH_TEST_LINK) -o $@

.PRECIOUS: $(FLASH_MUT_DIR)/flash_attention_%.cu $(FLASH_MUT_DIR)/flash_attention_%.o

test-tsan: flash-tsan-mutants
flash-tsan-mutants:
	@$(MAKE) --no-print-directory $(CUDA_CPU_TSAN_VARS) $(patsubst %,build-tsan/flash/mutants/test_flash_%,$(FLASH_MUTANTS))
	BUILD=build-tsan bash test/check_flash_mutants.sh $(FLASH_MUTANTS)

.PHONY: flash-tsan-mutants
