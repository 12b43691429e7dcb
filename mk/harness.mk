# CUDA-on-CPU harness (test code, test/cuda_cpu/README.md): every CUDA kernel runs in CI on the
# CPU, compiled by g++ with test/cuda_cpu/cuda_cpu.h force-included, in the CPU trees
# (build/cpu, build/cpu-san, build/cpu-tsan) under $(CUDA_CPU_DIR).
#
#   $(CUDA_CPU_RT)        the harness runtime
#   $(CUDA_CPU_EMU_LIB)   the CUDA backend under the harness: llmc/cuda/*.cu with
#                         -DLLMC_CUDA_EMULATED (GEMMs on cblas_sgemm, no NCCL) and the shared C
#                         compiled with -DLLMC_CUDA (bf16 floatX), as BACKEND=cuda has it
#   test programs         test/cuda_cpu/test_*.cu (the harness' own), test/cuda/test_*.cu,
#                         test_cuda_ops and test_cuda_flash_attention (every op against the CPU
#                         backend's implementation, $(CPUREF_LIB)), test_gpt2_cuda (the GPT-2
#                         model test on the CUDA kernels), test_pack_cuda (packed records on the
#                         CUDA kernels), test_pref_cuda (the preference objectives on the CUDA
#                         kernels), bench_ops at a small size; their rows in the test
#                         registry (mk/tests.mk) are "harness"
#   make test             also: orders.sh reruns every harness program's quick set in reverse and
#                         random fiber order (every kernel launched), mutation.sh (a barrier-less mutant is caught), faults.sh
#                         (faulty kernels are caught), check_cuda_kernels_ran.sh (every __global__
#                         was launched); under SAN=1 all of it again with ASan+UBSan, but the
#                         other orders (each program's forward run is its ASan test)
#   make test-tsan        the harness programs' quick sets with -fsanitize=thread (build/cpu-tsan),
#                         2 OS threads taking blocks, the day's random order: no report allowed,
#                         every kernel launched; the mutants (harness self-tests, flash attention)
#                         must be reported
#   make cuda-cpu-bench   fiber switch cost
# NO_CUDA_HARNESS=1 skips the harness (a missing toolkit otherwise fails the suite, loudly).

CUDA_CPU_DIR := $(TREE)/cuda_cpu
CUDA_CPU_HDRS := test/cuda_cpu/cuda_cpu.h test/cuda_cpu/cuda_cpu_wmma.h test/cuda_cpu/cuda_cpu_ptx.h $(CUDA_HDRS)
CUDA_CPU_CXX = $(CXX) $(CXXFLAGS) -isystem $(CUDA_HOME)/include
CUDA_CPU_CU = $(CUDA_CPU_CXX) -x c++ -include test/cuda_cpu/cuda_cpu.h -DLLMC_CUDA
CUDA_CPU_EMU_CU = $(CUDA_CPU_CU) -DLLMC_CUDA_EMULATED
CUDA_CPU_RT := $(CUDA_CPU_DIR)/runtime.o

ifeq ($(BACKEND),cpu)
$(CUDA_CPU_RT): test/cuda_cpu/cuda_cpu.cpp test/cuda_cpu/cuda_cpu.h test/cuda_cpu/cuda_cpu_wmma.h test/cuda_cpu/cuda_cpu_ptx.h
	@mkdir -p $(dir $@)
	$(CUDA_CPU_CXX) -c $< -o $@

# any .cu compiled for the harness as it is (kernels, tests)
$(CUDA_CPU_DIR)/%.o: %.cu $(CUDA_CPU_HDRS)
	@mkdir -p $(dir $@)
	$(CUDA_CPU_CU) -c $< -o $@

# ---- the emulated CUDA backend and its copy of the shared C
# (comm_nccl.cu is NCCL host code: the harness' device memory is host memory, and the host
# collectives serve it)
CUDA_CPU_EMU_SRCS := $(filter-out llmc/cuda/comm_nccl.cu,$(CUDA_SRCS))
CUDA_CPU_EMU_OBJS := $(patsubst %.cu,$(CUDA_CPU_DIR)/emu/%.o,$(CUDA_CPU_EMU_SRCS))
CUDA_CPU_CUDAC_OBJS := $(patsubst %.c,$(CUDA_CPU_DIR)/cudac/%.o,$(LIB_SRCS))
CUDA_CPU_EMU_LIB := $(CUDA_CPU_DIR)/libllmc_emu.a

$(CUDA_CPU_DIR)/emu/%.o: %.cu $(CUDA_CPU_HDRS)
	@mkdir -p $(dir $@)
	$(CUDA_CPU_EMU_CU) -c $< -o $@
$(CUDA_CPU_DIR)/cudac/%.o: %.c $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DLLMC_CUDA -c $< -o $@
$(CUDA_CPU_DIR)/cudac/llmc/ops/nf4.o: CFLAGS += $(NF4_CFLAGS)
$(CUDA_CPU_EMU_LIB): $(CUDA_CPU_CUDAC_OBJS) $(CUDA_CPU_EMU_OBJS)
	@rm -f $@
	ar rcs $@ $^

# ---- test programs
# the harness' own tests (runtime + the C library for check.c)
CUDA_CPU_TESTS := $(patsubst %.cu,$(CUDA_CPU_DIR)/%,$(wildcard test/cuda_cpu/test_*.cu test/cuda/test_*.cu))
$(CUDA_CPU_DIR)/test/cuda_cpu/%: $(CUDA_CPU_DIR)/test/cuda_cpu/%.o $(CUDA_CPU_RT) $(LIB)
	$(CXX) $< $(CUDA_CPU_RT) $(LIB) -o $@ $(LDFLAGS) $(HOST_LIBS)

# Tests of the CUDA backend: the emulated backend (neutral names mean CUDA there) and the CPU
# backend's implementation as the reference (cpu_* names). test/cuda/test_*.cu test kernels
# through their own interfaces; test_cuda_ops / test_cuda_flash_attention compare every op with
# the CPU backend's.
$(CUDA_CPU_DIR)/test/cuda/%: $(CUDA_CPU_DIR)/test/cuda/%.o $(CUDA_CPU_RT) $(CPUREF_LIB) $(CUDA_CPU_EMU_LIB)
	$(CXX) $< $(CUDA_CPU_RT) $(CPUREF_LIB) $(CUDA_CPU_EMU_LIB) -o $@ $(LDFLAGS) $(HOST_LIBS)
CUDA_CPU_OP_TESTS := $(TREE)/test/test_cuda_ops $(TREE)/test/test_cuda_flash_attention
$(CUDA_CPU_OP_TESTS): $(TREE)/test/%: test/%.cpp $(CUDA_CPU_RT) $(CUDA_CPU_EMU_LIB) $(CPUREF_LIB) test/test.h test/cuda_test.h test/ref_ops.h
	@mkdir -p $(dir $@)
	$(CUDA_CPU_EMU_CU) -c $< -o $@.o
	$(CXX) $@.o $(CUDA_CPU_RT) $(CPUREF_LIB) $(CUDA_CPU_EMU_LIB) -o $@ $(LDFLAGS) $(HOST_LIBS)

# the GPT-2 model test (test/test_gpt2.cu) on the CUDA kernels, against transformers' reference
$(TREE)/test/test_gpt2_cuda: test/test_gpt2.cu test/test_gpt2.c $(CUDA_CPU_RT) $(CUDA_CPU_EMU_LIB) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(CUDA_CPU_EMU_CU) -c $< -o $@.o
	$(CXX) $@.o $(CUDA_CPU_RT) $(CUDA_CPU_EMU_LIB) -o $@ $(LDFLAGS) $(HOST_LIBS)

# packed records (test/test_pack.cu) on the CUDA kernels, against transformers' reference
$(TREE)/test/test_pack_cuda: test/test_pack.cu test/test_pack.c $(CUDA_CPU_RT) $(CUDA_CPU_EMU_LIB) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(CUDA_CPU_EMU_CU) -c $< -o $@.o
	$(CXX) $@.o $(CUDA_CPU_RT) $(CUDA_CPU_EMU_LIB) -o $@ $(LDFLAGS) $(HOST_LIBS)

# the preference objectives (test/test_pref.cu) on the CUDA kernels, against TRL's reference
$(TREE)/test/test_pref_cuda: test/test_pref.cu test/test_pref.c $(CUDA_CPU_RT) $(CUDA_CPU_EMU_LIB) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(CUDA_CPU_EMU_CU) -c $< -o $@.o
	$(CXX) $@.o $(CUDA_CPU_RT) $(CUDA_CPU_EMU_LIB) -o $@ $(LDFLAGS) $(HOST_LIBS)

# dev/cuda/bench_ops at a small size (test/test_bench_ops.sh): the benchmark's own code under the
# harness and ASan, so that it is known to be correct before it meets a GPU
CUDA_CPU_BENCH_OPS := $(CUDA_CPU_DIR)/dev/cuda/bench_ops
$(CUDA_CPU_BENCH_OPS): dev/cuda/bench_ops.cu $(CUDA_CPU_RT) $(CUDA_CPU_EMU_LIB) $(CUDA_CPU_HDRS)
	@mkdir -p $(dir $@)
	$(CUDA_CPU_EMU_CU) -c $< -o $@.o
	$(CXX) $@.o $(CUDA_CPU_RT) $(CUDA_CPU_EMU_LIB) -o $@ $(LDFLAGS) $(HOST_LIBS)

# ---- mutants and faulty kernels
# the harness self-tests with the one barrier marked MUTATION-TARGET deleted
CUDA_CPU_MUTANTS := $(CUDA_CPU_DIR)/mutation/test_harness_kernels_nosync $(CUDA_CPU_DIR)/mutation/test_harness_wmma_nosync
# faulty kernels that faults.sh expects the harness / ASan / TSan to catch
CUDA_CPU_FAULTS := $(CUDA_CPU_DIR)/test/cuda_cpu/harness_faults

$(CUDA_CPU_DIR)/mutation/%_nosync.cu: test/cuda_cpu/%.cu
	@mkdir -p $(dir $@)
	@test $$(grep -c '__syncthreads();.*MUTATION-TARGET' $<) -eq 1 || { echo "expected exactly one '__syncthreads(); // MUTATION-TARGET' line in $<"; exit 1; }
	sed '/__syncthreads();.*MUTATION-TARGET/d' $< > $@
$(CUDA_CPU_DIR)/mutation/%.o: $(CUDA_CPU_DIR)/mutation/%.cu $(CUDA_CPU_HDRS)
	$(CUDA_CPU_CU) -c $< -o $@
$(CUDA_CPU_DIR)/mutation/%: $(CUDA_CPU_DIR)/mutation/%.o $(CUDA_CPU_RT) $(LIB)
	$(CXX) $< $(CUDA_CPU_RT) $(LIB) -o $@ $(LDFLAGS) $(HOST_LIBS)

# Flash attention mutants (make test-tsan): the flash attention kernels (llmc/cuda/attention.cu
# and the attention_*.cuh it includes) with one barrier deleted (lines marked
# "(MUTATION-TARGET <name>)") must be reported as a data race by TSan in every order tried:
#   fwd-syncthreads      the forward's barrier after each K/V tile's cp.async wait
#   dkv-syncthreads      the dK/dV kernel's barrier after each query tile's cp.async wait
#   dkv-ds-syncwarp      the dK/dV kernel's __syncwarp between a warp's dS^T stores into its
#                        staging tile and its lanes' 16-byte loads of one another's words
#   dq-syncthreads       the dQ kernel's barrier after each dS / K tile's cp.async wait
# (The harness performs a cp.async copy at the issuing thread's wait, so without the barrier the
# copy's shared-memory write races with other warps' ldmatrix of it, and the next copy into a
# stage with the reads of the previous tile; the staging's 4-byte stores race with the other
# lanes' 16-byte loads.) A mutant's folder holds the file with the marked line, less that line,
# at its path under llmc/, and attention.cu as cuda/attention.cu; -iquote puts the folder before
# llmc/ for every "cuda/..." include, so that attention.cu compiles with the mutated file in place
# of the original. The mutant object goes before the library on the link line, so the
# archive's intact attention.o is never pulled.
FLASH_MUTANTS := fwd-syncthreads dkv-syncthreads dkv-ds-syncwarp dq-syncthreads
FLASH_MUT_DIR := $(TREE)/flash/mutants
FLASH_SRCS := llmc/cuda/attention.cu $(wildcard llmc/cuda/attention_*.cuh)
$(FLASH_MUT_DIR)/%/cuda/attention.cu: $(FLASH_SRCS)
	@f=$$(grep -l '(MUTATION-TARGET $*)' $(FLASH_SRCS)); \
	 [ $$(echo $$f | wc -w) -eq 1 ] && [ $$(grep -c '(MUTATION-TARGET $*)' $$f) -eq 1 ] || \
	     { echo "expected one line marked (MUTATION-TARGET $*) in $(FLASH_SRCS)"; exit 1; }; \
	 rm -rf $(FLASH_MUT_DIR)/$* && mkdir -p $(dir $@) && sed '/(MUTATION-TARGET $*)/d' $$f > $(FLASH_MUT_DIR)/$*/$${f#llmc/} && \
	 { [ $$f = llmc/cuda/attention.cu ] || cp llmc/cuda/attention.cu $@; }
$(FLASH_MUT_DIR)/flash_attention_%.o: $(FLASH_MUT_DIR)/%/cuda/attention.cu $(CUDA_CPU_HDRS)
	$(CUDA_CPU_EMU_CU) -iquote $(FLASH_MUT_DIR)/$* -c $< -o $@
$(FLASH_MUT_DIR)/test_flash_%: $(FLASH_MUT_DIR)/flash_attention_%.o $(TREE)/test/test_cuda_flash_attention
	$(CXX) $(TREE)/test/test_cuda_flash_attention.o $< $(CUDA_CPU_RT) $(CPUREF_LIB) $(CUDA_CPU_EMU_LIB) -o $@ $(LDFLAGS) $(HOST_LIBS)

.PRECIOUS: $(CUDA_CPU_DIR)/%.o $(CUDA_CPU_DIR)/mutation/%_nosync.cu $(CUDA_CPU_DIR)/mutation/%.o \
    $(FLASH_MUT_DIR)/%/cuda/attention.cu $(FLASH_MUT_DIR)/flash_attention_%.o

# ---- what the suite gets
ifeq ($(NO_CUDA_HARNESS),1)
# explicitly skipped
else ifeq ($(HAVE_CUDA_HEADERS),1)
# (the tests are the registry's "harness" rows, mk/tests.mk; without the toolkit's headers its
# "noharness" row says so loudly, a failing test, unless NO_CUDA_HARNESS=1 asks to skip)
TEST_EXTRA_BUILD += $(CUDA_CPU_MUTANTS) $(CUDA_CPU_FAULTS) $(CUDA_CPU_BENCH_OPS) $(CUDA_CPU_DIR)/tests.list
endif

# All test programs of this build (the test registry's, mk/tests.mk), for orders.sh, which reruns
# those that contain the harness runtime.
$(CUDA_CPU_DIR)/tests.list: FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' $(TEST_PROGS) > $@.tmp && mv $@.tmp $@
endif # BACKEND=cpu

# ---- TSan: a recursive make in build/cpu-tsan. OpenMP is not TSan-instrumented: the runs use
# one OpenMP thread. The programs, of TEST_PROGS (the test registry, mk/tests.mk, included after
# this file: the list is expanded in the recipe): the harness programs and every test program
# whose name contains "cuda".
CUDA_CPU_TSAN_PROGS = $(sort $(filter $(CUDA_CPU_DIR)/%,$(TEST_PROGS)) \
    $(foreach p,$(TEST_PROGS),$(if $(findstring cuda,$(notdir $(p))),$(p))))
test-tsan:
	@$(MAKE) --no-print-directory BACKEND=cpu SAN=thread cuda-cpu-tsan-run
cuda-cpu-tsan-run:
	@$(MAKE) --no-print-directory $(CUDA_CPU_TSAN_PROGS) $(CUDA_CPU_MUTANTS) $(CUDA_CPU_FAULTS) \
	    $(patsubst %,$(FLASH_MUT_DIR)/test_flash_%,$(FLASH_MUTANTS))
	BUILD=$(TREE) bash test/cuda_cpu/tsan.sh $(CUDA_CPU_TSAN_PROGS)
	BUILD=$(TREE) bash test/check_flash_mutants.sh $(FLASH_MUTANTS)
.PHONY: test-tsan cuda-cpu-tsan-run

# fiber switch cost (not a test)
cuda-cpu-bench: $(CUDA_CPU_DIR)/test/cuda_cpu/bench_switch
	$< && CUDA_CPU_UCONTEXT=1 $<
.PHONY: cuda-cpu-bench
