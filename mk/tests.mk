# The test suite (`make test`) and the build checks in it.
#
#   make test          1. cuda-check: every CUDA source through nvcc for each GPU architecture
#                         (-Werror, ptxas: no spills / local memory in production code)
#                      2. the suite in build/cpu: unit, op, model, training and CLI tests, the
#                         CUDA-on-CPU harness programs (mk/harness.mk)
#                      3. the suite again under ASan+UBSan (build/cpu-san)
#                      4. test-tsan: the harness programs under TSan (build/cpu-tsan)
#                      5. cuda-build-check: `make BACKEND=cuda` in a clean copy of the sources
#                         (all four programs, nothing of the CPU build), then `make gpu-bundle`
#                         there and the ldd rule of its portable programs
#   make test-build / test-run   build / run the suite of the selected CPU tree (SAN=1 for ASan)
#
# TEST_PROGS: programs run without arguments; TEST_SCRIPTS: shell tests (they get BIN_DIR, the
# tree's bin/, BUILD, the tree, and PREPARE_BIN); TEST_EXTRA_BUILD: other things the tests use.
# Builds use every core (JOBS); the tests run one after another.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

ifeq ($(BACKEND),cpu)
TEST_PROGS += $(patsubst test/%.c,$(TREE)/test/%,$(wildcard test/test_*.c))
TEST_SCRIPTS += test/test_train_cli.sh test/test_resume.sh test/test_signals.sh test/test_masked.sh test/test_data_open.sh test/test_run_end.sh test/test_out_dir.sh test/test_save_gguf.sh test/test_bad_input.sh test/test_checkpoint_integrity.sh test/test_train_mpi.sh test/test_comm.sh test/test_watchdog.sh test/test_multihost.sh \
    test/test_lora_cli.sh test/test_pref_train.sh test/test_qlora_cli.sh test/test_generate.sh test/test_prepare.sh \
    test/test_recompute.sh test/test_plot.sh test/check_attention_sass.sh test/test_fa_cycle_model.sh test/lint_launch.sh \
    test/lint_backend.sh test/lint_functions.sh test/lint_layers.sh

$(TREE)/test/%: test/%.c $(LIB) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB) -o $@ $(LDFLAGS) $(HOST_LIBS)
endif

# (test-build and the rule that runs the suite are at the end of the Makefile: they list what
# every fragment added)
export PREPARE_BIN := $(TREE)/bin/prepare

test:
	@if [ "$(HAVE_NVCC)" = 1 ]; then $(MAKE) --no-print-directory -j$(JOBS) cuda-check; \
	 else echo "skip: nvcc not found: the CUDA sources were not compiled (install the CUDA toolkit)"; fi
	$(MAKE) --no-print-directory -j$(JOBS) BACKEND=cpu SAN= test-build
	$(MAKE) --no-print-directory BACKEND=cpu SAN= test-run
	$(MAKE) --no-print-directory -j$(JOBS) BACKEND=cpu SAN=1 test-build
	$(MAKE) --no-print-directory BACKEND=cpu SAN=1 test-run
	$(MAKE) --no-print-directory -j$(JOBS) test-tsan
	@if [ "$(HAVE_NVCC)" = 1 ]; then $(MAKE) --no-print-directory cuda-build-check; \
	 else echo "skip: nvcc not found: the CUDA build was not checked (install the CUDA toolkit)"; fi
.PHONY: test

# ---- the clean-tree CUDA build and the portable bundle (test/check_cuda_build.sh)
cuda-build-check:
	JOBS=$(JOBS) bash test/check_cuda_build.sh
.PHONY: cuda-build-check

# ---- nvcc compile check (no GPU needed); one target per source so -j overlaps them
NVCC_CHECK_DIR := build/nvcc-check
NVCC_CHECK_FLAGS := -std=c++17 -O3 -DLLMC_CUDA -Werror all-warnings $(GENCODE) -I. -Illmc \
    -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-Wno-unused-function
# production code: spills and local-memory use are errors (ptxas), and checked again in the log
NVCC_PROD_FLAGS := -Xptxas -v,-warn-spills,-warn-lmem-usage
NVCC_PROD_SRCS := $(wildcard llmc/cuda/*.cu test/test_gpt2.cu test/test_pack.cu test/test_pref.cu test/cuda/*.cu test/cuda_cpu/*.cu)
NVCC_DEV_SRCS := $(wildcard dev/cuda/*.cu)
NVCC_PROD_OBJS := $(patsubst %.cu,$(NVCC_CHECK_DIR)/%.o,$(NVCC_PROD_SRCS))
NVCC_DEV_OBJS := $(patsubst %.cu,$(NVCC_CHECK_DIR)/%.o,$(NVCC_DEV_SRCS))

$(NVCC_PROD_OBJS): $(NVCC_CHECK_DIR)/%.o: %.cu $(CUDA_HDRS)
	@mkdir -p $(dir $@)
	@echo "nvcc $<"
	@$(NVCC) $(NVCC_CHECK_FLAGS) $(NVCC_PROD_FLAGS) -c $< -o $@ > $@.log 2>&1 || { cat $@.log; rm -f $@; exit 1; }
	@if grep -E '(^|[^0-9])[1-9][0-9]* bytes spill (stores|loads)' $@.log; then \
	    echo "cuda-check: $< spills registers (lines above): a production kernel must not"; rm -f $@; exit 1; fi
$(NVCC_DEV_OBJS): $(NVCC_CHECK_DIR)/%.o: %.cu $(CUDA_HDRS) dev/cuda/common.cuh
	@mkdir -p $(dir $@)
	@echo "nvcc $<"
	@$(NVCC) $(NVCC_CHECK_FLAGS) -c $< -o $@ > $@.log 2>&1 || { cat $@.log; rm -f $@; exit 1; }

ifeq ($(HAVE_NVCC),1)
cuda-check: $(NVCC_PROD_OBJS) $(NVCC_DEV_OBJS)
	@echo "cuda-check: $(words $(NVCC_PROD_SRCS)) production/test and $(words $(NVCC_DEV_SRCS)) dev CUDA sources compile with nvcc -Werror for sm $(CUDA_ARCHS) (ptxas: no spills, no local memory in production code)"
else
cuda-check:
	@echo "cuda-check: nvcc not found (set NVCC= or put the CUDA toolkit on PATH)"; exit 1
endif
.PHONY: cuda-check
