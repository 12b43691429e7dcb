# CUDA-on-CPU harness (test code): every CUDA kernel runs in CI on the CPU, compiled by g++ with
# test/cuda_cpu/cuda_cpu.h force-included; plus the nvcc compile check and the launch lint.
# test/cuda_cpu/README.md describes the harness.
#
# Targets:
#   make test              runs the harness tests (forward fiber order), then
#                          test/cuda_cpu/orders.sh reruns each in reverse and random order,
#                          test/cuda_cpu/mutation.sh checks that a barrier-less mutant is caught,
#                          test/cuda_cpu/faults.sh that faulty kernels are caught,
#                          test/lint_launch.sh forbids raw kernel launches outside launch.cuh;
#                          under SAN=1 all of it again with ASan+UBSan.
#   make test-tsan         harness tests built with -fsanitize=thread in build-tsan/, run with 2 OS
#                          threads taking blocks in forward and random order: no report allowed;
#                          the mutants must be reported as data races in every order.
#   make cuda-check        nvcc -Werror for sm_80 + sm_90 of every CUDA source (compile only),
#                          ptxas spills / local memory in production kernels fail it.
#
# Variables other fragments use: CUDA_CPU_CXX (compile line for .cu under the harness, add
# -x c++ -include test/cuda_cpu/cuda_cpu.h), CUDA_CPU_RT (runtime object), CUDA_CPU_HDRS,
# HAVE_CUDA_HEADERS, NO_CUDA_HARNESS=1 (skip), CUDA_CPU_HARNESS_PROGS (extra programs for TSan).
#
# Harness test programs here: test/cuda_cpu/test_*.cu and test/cuda/test_*.cu, each linked with
# the runtime and the C library (llmc/*.c); they go into TEST_PROGS. Harness programs built by
# other fragments (e.g. the CUDA backend's op test) are picked up by orders.sh automatically (it
# reruns every program of TEST_PROGS that contains the harness runtime) and by test-tsan when
# their name contains "cuda" or they are listed in CUDA_CPU_HARNESS_PROGS.

CUDA_HOME ?= /usr/local/cuda
CUDA_CPU_INC := $(CUDA_HOME)/include
HAVE_CUDA_HEADERS := $(shell test -f $(CUDA_CPU_INC)/cuda_runtime.h && test -f $(CUDA_CPU_INC)/cuda_bf16.h && echo 1)

CUDA_CPU_DIR := $(BUILD)/cuda_cpu
CUDA_CPU_HDRS := test/cuda_cpu/cuda_cpu.h test/cuda_cpu/cuda_cpu_wmma.h $(wildcard llmc/cuda/*.cuh llmc/cuda/*.h llmc/*.h)
# (the C-only -Werror=implicit-function-declaration of WARN would make g++ warn on every file)
CUDA_CPU_CXX = $(CXX) $(filter-out -Werror=implicit-function-declaration,$(CXXFLAGS)) -isystem $(CUDA_CPU_INC)
CUDA_CPU_RT := $(CUDA_CPU_DIR)/runtime.o
CUDA_CPU_TEST_SRCS := $(wildcard test/cuda_cpu/test_*.cu test/cuda/test_*.cu)
CUDA_CPU_TESTS := $(patsubst %.cu,$(CUDA_CPU_DIR)/%,$(CUDA_CPU_TEST_SRCS))
# the mutants: the self-tests with the one barrier marked MUTATION-TARGET deleted
CUDA_CPU_MUTANT := $(CUDA_CPU_DIR)/mutation/test_harness_kernels_nosync $(CUDA_CPU_DIR)/mutation/test_harness_wmma_nosync
# faulty kernels that faults.sh expects the harness / ASan / TSan to catch
CUDA_CPU_FAULTS := $(CUDA_CPU_DIR)/test/cuda_cpu/harness_faults

$(CUDA_CPU_RT): test/cuda_cpu/cuda_cpu.cpp test/cuda_cpu/cuda_cpu.h test/cuda_cpu/cuda_cpu_wmma.h
	@mkdir -p $(dir $@)
	$(CUDA_CPU_CXX) -c $< -o $@

# any .cu compiled for the harness (kernels, tests)
$(CUDA_CPU_DIR)/%.o: %.cu $(CUDA_CPU_HDRS)
	@mkdir -p $(dir $@)
	$(CUDA_CPU_CXX) -x c++ -include test/cuda_cpu/cuda_cpu.h -c $< -o $@

$(CUDA_CPU_DIR)/mutation/%_nosync.cu: test/cuda_cpu/%.cu
	@mkdir -p $(dir $@)
	@test $$(grep -c '__syncthreads();.*MUTATION-TARGET' $<) -eq 1 || { echo "expected exactly one '__syncthreads(); // MUTATION-TARGET' line in $<"; exit 1; }
	sed '/__syncthreads();.*MUTATION-TARGET/d' $< > $@

$(CUDA_CPU_DIR)/mutation/%.o: $(CUDA_CPU_DIR)/mutation/%.cu $(CUDA_CPU_HDRS)
	$(CUDA_CPU_CXX) -x c++ -include test/cuda_cpu/cuda_cpu.h -c $< -o $@

# a harness test program: its object + runtime + the C library
# (the whole library links: it needs the CPU backend and the libraries other fragments add)
$(CUDA_CPU_DIR)/%: $(CUDA_CPU_DIR)/%.o $(CUDA_CPU_RT) $(LIB_ALL_OBJS)
	$(CXX) $< $(CUDA_CPU_RT) $(LIB_ALL_OBJS) -o $@ $(LIB_LINK_FLAGS)

.PRECIOUS: $(CUDA_CPU_DIR)/%.o $(CUDA_CPU_MUTANT:=.o) $(CUDA_CPU_MUTANT:=.cu) $(CUDA_CPU_FAULTS).o $(CUDA_CPU_TESTS:=.o)

ifeq ($(NO_CUDA_HARNESS),1)
# explicitly skipped
else ifeq ($(HAVE_CUDA_HEADERS),1)
TEST_PROGS += $(CUDA_CPU_TESTS)
TEST_SCRIPTS += test/cuda_cpu/orders.sh test/cuda_cpu/mutation.sh test/cuda_cpu/faults.sh
test-build: $(CUDA_CPU_MUTANT) $(CUDA_CPU_FAULTS) $(CUDA_CPU_DIR)/tests.list
else
# no toolkit headers: say so loudly (a failing test), unless NO_CUDA_HARNESS=1 asks to skip
TEST_SCRIPTS += test/cuda_cpu/no_toolkit.sh
endif

# All test programs of this build, for orders.sh, which reruns those that contain the harness
# runtime (expanded when the recipe runs: programs other mk/*.mk fragments add are included).
$(CUDA_CPU_DIR)/tests.list: cuda-cpu-force
	@mkdir -p $(dir $@)
	@printf '%s\n' $(TEST_PROGS) > $@.tmp && mv $@.tmp $@
cuda-cpu-force:
TEST_SCRIPTS += test/lint_launch.sh

# ---------------------------------------------------------------------------------------------
# TSan pass: a separate build tree (build-tsan/) and a recursive make with thread-sanitizer flags.
# OpenMP is not TSan-instrumented: the runs use one OpenMP thread.
CUDA_CPU_TSAN_VARS := BUILD=build-tsan BINDIR=build-tsan SAN= OPT="-O1 -g -fno-omit-frame-pointer" \
    SANFLAGS="-fsanitize=thread"

test-tsan:
	@$(MAKE) --no-print-directory $(CUDA_CPU_TSAN_VARS) cuda-cpu-tsan-run

# internal: runs inside the recursive make with BUILD=build-tsan. The program list is expanded in
# the recipe, after every mk/*.mk had its say in TEST_PROGS / CUDA_CPU_HARNESS_PROGS.
CUDA_CPU_TSAN_PROGS = $(sort $(filter $(CUDA_CPU_DIR)/%,$(TEST_PROGS)) $(CUDA_CPU_HARNESS_PROGS) \
    $(foreach p,$(TEST_PROGS),$(if $(findstring cuda,$(notdir $(p))),$(p))))
cuda-cpu-tsan-run:
	@$(MAKE) --no-print-directory $(CUDA_CPU_TSAN_VARS) $(CUDA_CPU_TSAN_PROGS) $(CUDA_CPU_MUTANT) $(CUDA_CPU_FAULTS)
	BUILD=$(BUILD) bash test/cuda_cpu/tsan.sh $(CUDA_CPU_TSAN_PROGS)

# ---------------------------------------------------------------------------------------------
# nvcc compile check (no GPU needed). One target per source so `make -j2 cuda-check` overlaps them.
NVCC_ARCHS := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
NVCC_CHECK_FLAGS := -std=c++17 -O3 -Werror all-warnings $(NVCC_ARCHS) -I. -Illmc \
    -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-Wno-unused-function
# production code: spills and local-memory use are errors (ptxas), and checked again in the log
NVCC_PROD_FLAGS := -Xptxas -v,-warn-spills,-warn-lmem-usage
NVCC_PROD_SRCS := $(wildcard llmc/cuda/*.cu test/test_gpt2.cu test/cuda/*.cu test/cuda_cpu/*.cu)
NVCC_DEV_SRCS := $(wildcard dev/cuda/*.cu)
NVCC_CHECK_DIR := build/nvcc
NVCC_PROD_OBJS := $(patsubst %.cu,$(NVCC_CHECK_DIR)/%.o,$(NVCC_PROD_SRCS))
NVCC_DEV_OBJS := $(patsubst %.cu,$(NVCC_CHECK_DIR)/dev-%.o,$(NVCC_DEV_SRCS))

$(NVCC_PROD_OBJS): $(NVCC_CHECK_DIR)/%.o: %.cu $(wildcard llmc/cuda/*.cuh llmc/*.h)
	@mkdir -p $(dir $@)
	@echo "nvcc $<"
	@$(NVCC) $(NVCC_CHECK_FLAGS) $(NVCC_PROD_FLAGS) -c $< -o $@ > $@.log 2>&1 || { cat $@.log; rm -f $@; exit 1; }
	@if grep -E '(^|[^0-9])[1-9][0-9]* bytes spill (stores|loads)' $@.log; then \
	    echo "cuda-check: $< spills registers (lines above): a production kernel must not"; rm -f $@; exit 1; fi

$(NVCC_DEV_OBJS): $(NVCC_CHECK_DIR)/dev-%.o: %.cu $(wildcard llmc/cuda/*.cuh llmc/*.h)
	@mkdir -p $(dir $@)
	@echo "nvcc $<"
	@$(NVCC) $(NVCC_CHECK_FLAGS) -c $< -o $@ > $@.log 2>&1 || { cat $@.log; rm -f $@; exit 1; }

ifeq ($(HAVE_NVCC),1)
cuda-check: $(NVCC_PROD_OBJS) $(NVCC_DEV_OBJS)
	@$(if $(strip $(NVCC_PROD_SRCS) $(NVCC_DEV_SRCS)),echo "cuda-check: $(words $(NVCC_PROD_SRCS)) production/test and $(words $(NVCC_DEV_SRCS)) dev CUDA sources compile with nvcc -Werror for sm_80 and sm_90 (ptxas: no spills, no local memory in production code)",echo "cuda-check: no CUDA sources found: nothing to compile")
	@$(if $(wildcard llmc/cuda/*.cu),true,echo "cuda-check: note: no llmc/cuda/*.cu kernel sources yet: nothing of the production backend to compile")
else
cuda-check:
	@echo "cuda-check: nvcc not found (set NVCC= or put the CUDA toolkit on PATH)"; exit 1
endif

.PHONY: test-tsan cuda-cpu-tsan-run cuda-check cuda-cpu-force

clean: cuda-cpu-clean
cuda-cpu-clean:
	rm -rf build-tsan
.PHONY: cuda-cpu-clean

# fiber switch cost (not a test): make cuda-cpu-bench
cuda-cpu-bench: $(CUDA_CPU_DIR)/test/cuda_cpu/bench_switch
	$< && CUDA_CPU_UCONTEXT=1 $<
.PHONY: cuda-cpu-bench
