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
#   make test-list     the tests of the selected tree, in the order the suite runs them
#   make test T=NAME   one test of the suite in build/cpu (build/cpu-san with SAN=1), NAME as
#                      run_tests.sh prints it (test_ops, test_resume.sh, orders.sh) or its path:
#                      builds what it needs (a program: itself; a script: the suite's build, as
#                      scripts use the programs, test programs and extra builds) and runs it
#                      through test/run_tests.sh, as the suite does
#
# TEST_PROGS: programs run without arguments; TEST_SCRIPTS: shell tests (they get BIN_DIR, the
# tree's bin/, BUILD, the tree, and PREPARE_BIN); TEST_EXTRA_BUILD: other things the tests use;
# GPU_TEST_PROGS: the GPU test programs of the CUDA tree. The first two and the last come from
# the registry below, and only from there.
# Builds use every core (JOBS); the tests run one after another.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

# ---- The test registry: every test, once, in the order the suite runs it (the programs, then
# the scripts). A row is WHEN:TEST.
#   TEST   a program, by its path in the tree, or a script (test/....sh, run by bash)
#   WHEN   the builds that have it:
#            cpu        every CPU tree (build/cpu, build/cpu-san)
#            harness    the CPU trees with the CUDA-on-CPU harness (mk/harness.mk): the toolkit's
#                       headers are installed and NO_CUDA_HARNESS=1 is not given
#            noharness  the CPU trees without the toolkit's headers (a test that fails, saying so)
#            gpu        the CUDA tree: the GPU test programs (make gpu-tests, make gpu-bundle)
# The rules that build a program stay in its area's fragment; its row is what makes it a test.
# test-build fails for a test source that has no row (test-registry-check).

# the harness' own tests, the CUDA kernels through their own interfaces, every CUDA op against the
# CPU backend, the model, packed-record and preference tests on the CUDA kernels (mk/harness.mk)
TEST_REGISTRY := \
    harness:$(CUDA_CPU_DIR)/test/cuda_cpu/test_harness_kernels harness:$(CUDA_CPU_DIR)/test/cuda_cpu/test_harness_wmma \
    harness:$(CUDA_CPU_DIR)/test/cuda_cpu/test_ptx harness:$(CUDA_CPU_DIR)/test/cuda_cpu/test_wmma \
    harness:$(CUDA_CPU_DIR)/test/cuda/test_attention_kv_cuda harness:$(CUDA_CPU_DIR)/test/cuda/test_nf4_cuda \
    harness:$(CUDA_CPU_DIR)/test/cuda/test_offload_cuda harness:$(CUDA_CPU_DIR)/test/cuda/test_qlora_cuda \
    harness:$(TREE)/test/test_cuda_ops harness:$(TREE)/test/test_cuda_flash_attention \
    harness:$(TREE)/test/test_gpt2_cuda harness:$(TREE)/test/test_pack_cuda harness:$(TREE)/test/test_pref_cuda
# the C tests: test/test_NAME.c -> $(TREE)/test/test_NAME, linked with the library (rule below)
TEST_REGISTRY += \
    cpu:$(TREE)/test/test_chat cpu:$(TREE)/test/test_check cpu:$(TREE)/test/test_checkpoint \
    cpu:$(TREE)/test/test_comm cpu:$(TREE)/test/test_convert cpu:$(TREE)/test/test_dataloader \
    cpu:$(TREE)/test/test_gguf cpu:$(TREE)/test/test_gpt2 cpu:$(TREE)/test/test_gpt2_sizes \
    cpu:$(TREE)/test/test_json cpu:$(TREE)/test/test_lora cpu:$(TREE)/test/test_lora_init cpu:$(TREE)/test/test_loraplus cpu:$(TREE)/test/test_lora_mix cpu:$(TREE)/test/test_loss_scale \
    cpu:$(TREE)/test/test_memplan cpu:$(TREE)/test/test_mfu cpu:$(TREE)/test/test_model_io \
    cpu:$(TREE)/test/test_nf4 cpu:$(TREE)/test/test_ops cpu:$(TREE)/test/test_pack \
    cpu:$(TREE)/test/test_pref cpu:$(TREE)/test/test_prefloss cpu:$(TREE)/test/test_qlora \
    cpu:$(TREE)/test/test_recompute cpu:$(TREE)/test/test_runconfig cpu:$(TREE)/test/test_safetensors \
    cpu:$(TREE)/test/test_sampling cpu:$(TREE)/test/test_schedule cpu:$(TREE)/test/test_scorer cpu:$(TREE)/test/test_tfevents cpu:$(TREE)/test/test_tokenizer \
    cpu:$(TREE)/test/test_watchdog_exit cpu:$(TREE)/test/test_zero
# the LoRA and QLoRA model tests on the CUDA kernels (mk/gpucheck.mk)
TEST_REGISTRY += harness:$(TREE)/test/test_lora_cuda harness:$(TREE)/test/test_qlora_model_cuda

# the bf16 mode's model tests (the model test programs with their "bf16" argument; mk/cpu.mk)
TEST_REGISTRY += cpu:test/test_cpu_bf16.sh
# the harness: other fiber orders, a barrier-less mutant caught, faulty kernels caught, every
# __global__ launched, dev/cuda/bench_ops at a small size (mk/harness.mk); no toolkit: say so
TEST_REGISTRY += \
    harness:test/cuda_cpu/orders.sh harness:test/cuda_cpu/mutation.sh harness:test/cuda_cpu/faults.sh \
    harness:test/check_cuda_kernels_ran.sh harness:test/test_bench_ops.sh noharness:test/cuda_cpu/no_toolkit.sh
# the trainers, their adapters and the other programs from the command line
TEST_REGISTRY += \
    cpu:test/test_train_cli.sh cpu:test/test_resume.sh cpu:test/test_signals.sh cpu:test/test_masked.sh \
    cpu:test/test_data_open.sh cpu:test/test_run_end.sh cpu:test/test_fp16_train.sh cpu:test/test_out_dir.sh cpu:test/test_save_gguf.sh \
    cpu:test/test_bad_input.sh cpu:test/test_checkpoint_integrity.sh cpu:test/test_train_mpi.sh \
    cpu:test/test_comm.sh cpu:test/test_watchdog.sh cpu:test/test_multihost.sh \
    cpu:test/test_lora_cli.sh cpu:test/test_lora_init.sh cpu:test/test_loraplus_cli.sh cpu:test/test_dora_cli.sh cpu:test/test_generate_adapters.sh cpu:test/test_loraplus_mpi.sh cpu:test/test_pref_train.sh \
    cpu:test/test_qlora_cli.sh cpu:test/test_generate.sh cpu:test/test_generate_q8.sh cpu:test/test_score.sh cpu:test/test_generate_batch.sh \
    cpu:test/test_prepare.sh cpu:test/test_recompute.sh cpu:test/test_plot.sh cpu:test/test_tensorboard.sh
# the flash attention kernels' SASS and cycle model; the lints of the code, and of the documents
# in docs/ against the code (lint_docs.sh: every trainer flag in docs/ARCHITECTURE.md's table, the
# files and functions it names, the file map; it needs the trainers for their --help)
TEST_REGISTRY += \
    cpu:test/check_attention_sass.sh cpu:test/test_fa_cycle_model.sh cpu:test/lint_launch.sh \
    cpu:test/lint_backend.sh cpu:test/lint_functions.sh cpu:test/lint_layers.sh cpu:test/lint_docs.sh
# every parser of the files the tool reads, a few seconds each (mk/fuzz.mk)
TEST_REGISTRY += cpu:test/test_fuzz.sh
# the GPU check's emulated run; host stalls of one training step; out of device memory refused at
# start-up on a small fake device; greedy sampling with an adapter, CUDA path against CPU path
# (harness builds of the programs, mk/gpucheck.mk)
TEST_REGISTRY += \
    harness:test/test_gpu_check.sh harness:test/test_step_syncs.sh harness:test/test_loraplus_cuda.sh harness:test/test_device_memory.sh \
    harness:test/test_sample_backends.sh harness:test/test_generate_batch_cuda.sh
# the memory plan (llmc/run/memplan.c) over several ranks (its one-rank cases are test_memplan),
# the trainers' plan step (--plan, --batch-size auto, resume)
TEST_REGISTRY += cpu:test/test_memplan.sh cpu:test/test_plan_cli.sh
# convert's round trips, what the trainers write (PEFT / transformers directories that load on
# their own), the main job shortened, the DPO example
TEST_REGISTRY += cpu:test/test_convert.sh cpu:test/test_outputs.sh cpu:test/test_quickstart.sh cpu:test/test_pref_example.sh
# ZeRO-3 / FSDP (llmc/dist/fsdp.c)
TEST_REGISTRY += cpu:test/test_zero3.sh

# the GPU test programs: test/NAME.cu -> $(TREE)/test/NAME_gpu (mk/cuda.mk), and those with rules
# of their own (mk/cuda.mk, mk/gpucheck.mk)
TEST_REGISTRY += \
    gpu:$(TREE)/test/test_gpt2_gpu gpu:$(TREE)/test/test_cuda_ops_gpu gpu:$(TREE)/test/test_pack_gpu \
    gpu:$(TREE)/test/test_pref_gpu gpu:$(TREE)/test/test_lora_gpu gpu:$(TREE)/test/test_qlora_gpu \
    gpu:$(TREE)/test/test_flash_attention_gpu gpu:$(TREE)/test/test_ptx_gpu gpu:$(TREE)/test/test_comm_split_gpu \
    gpu:$(TREE)/test/test_nccl_watchdog_gpu

# the tests of the rows whose WHEN is one of $(1), in the registry's order
test_registry_rows = $(strip $(foreach r,$(TEST_REGISTRY),$(if $(filter $(addsuffix :%,$(1)),$(r)),$(word 2,$(subst :, ,$(r))))))

ifeq ($(BACKEND),cpu)
TEST_WHEN := cpu
ifeq ($(NO_CUDA_HARNESS),1)
# explicitly skipped
else ifeq ($(HAVE_CUDA_HEADERS),1)
TEST_WHEN += harness
else
TEST_WHEN += noharness
endif
TEST_PROGS := $(filter-out %.sh,$(call test_registry_rows,$(TEST_WHEN)))
TEST_SCRIPTS := $(filter %.sh,$(call test_registry_rows,$(TEST_WHEN)))

$(TREE)/test/%: test/%.c $(LIB) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB) -o $@ $(LDFLAGS) $(HOST_LIBS)
endif
ifeq ($(BACKEND),cuda)
GPU_TEST_PROGS := $(call test_registry_rows,gpu)
endif

# Every test source has a row (by the name its program or script has in the registry): a C test,
# a harness test, a GPU test (test/NAME.cu -> NAME_gpu), a test or lint script.
TEST_REGISTRY_NAMES := $(foreach r,$(TEST_REGISTRY),$(notdir $(word 2,$(subst :, ,$(r)))))
TEST_SOURCE_NAMES := $(basename $(notdir $(wildcard test/test_*.c test/cuda_cpu/test_*.cu test/cuda/test_*.cu))) \
    $(patsubst %,%_gpu,$(basename $(notdir $(wildcard test/test_*.cu)))) $(notdir $(wildcard test/test_*.sh test/lint_*.sh))
test-registry-check:
	@missing="$(filter-out $(TEST_REGISTRY_NAMES),$(TEST_SOURCE_NAMES))"; [ -z "$$missing" ] || \
	    { echo "test registry (mk/tests.mk): no row for $$missing (a test the suite would never run)"; exit 1; }
.PHONY: test-registry-check

# the tests of this tree, one a line (the CUDA tree: its GPU test programs)
test-list:
	@printf '%s\n' $(TEST_PROGS) $(TEST_SCRIPTS) $(GPU_TEST_PROGS)
.PHONY: test-list

# (test-build and the rule that runs the suite are at the end of the Makefile, after every
# fragment's TEST_EXTRA_BUILD)
export PREPARE_BIN := $(TREE)/bin/prepare
# how the suite runs tests, and `make test T=NAME` one of them
TEST_RUN = SAN=$(SAN) BUILD=$(TREE) BIN_DIR=$(TREE)/bin bash test/run_tests.sh

ifneq ($(T),)
test:
	@$(MAKE) --no-print-directory BACKEND=cpu test-one
else
# each stage's start is printed with the seconds since the first (CI's time limit is the sum)
test_stage = @echo "== make test: $(1), at $$(( $$(date +%s) - $(TEST_T0) )) s"
TEST_T0 := $(if $(filter test,$(MAKECMDGOALS)),$(shell date +%s))
test:
	$(call test_stage,nvcc compile check)
	@if [ "$(HAVE_NVCC)" = 1 ]; then $(MAKE) --no-print-directory -j$(JOBS) cuda-check; \
	 else echo "skip: nvcc not found: the CUDA sources were not compiled (install the CUDA toolkit)"; fi
	$(call test_stage,plain build)
	$(MAKE) --no-print-directory -j$(JOBS) BACKEND=cpu SAN= test-build
	$(call test_stage,plain tests)
	$(MAKE) --no-print-directory BACKEND=cpu SAN= test-run
	$(call test_stage,ASan+UBSan build)
	$(MAKE) --no-print-directory -j$(JOBS) BACKEND=cpu SAN=1 test-build
	$(call test_stage,ASan+UBSan tests)
	$(MAKE) --no-print-directory BACKEND=cpu SAN=1 test-run
	$(call test_stage,TSan build and tests)
	$(MAKE) --no-print-directory -j$(JOBS) test-tsan
	$(call test_stage,clean-tree CUDA build and bundle)
	@if [ "$(HAVE_NVCC)" = 1 ]; then $(MAKE) --no-print-directory cuda-build-check; \
	 else echo "skip: nvcc not found: the CUDA build was not checked (install the CUDA toolkit)"; fi
	$(call test_stage,done)
endif
.PHONY: test

# ---- one test (make test T=NAME): the tests of this tree whose name (as run_tests.sh prints it)
# or path is T. A program needs itself; a script, the suite's build (the programs, the test
# programs and TEST_EXTRA_BUILD: scripts use any of them).
TEST_ONE = $(strip $(foreach t,$(TEST_PROGS) $(TEST_SCRIPTS),$(if $(filter $(T),$(t) $(notdir $(t))),$(t))))
ifeq ($(BACKEND),cpu)
test-one:
	@[ -n "$(TEST_ONE)" ] || { echo "make test T=$(T): no such test in $(TREE); its tests (make test-list):"; \
	    echo $(notdir $(TEST_PROGS) $(TEST_SCRIPTS)) | fold -s -w 96 | sed 's/^/  /'; exit 1; }
	@$(MAKE) --no-print-directory -j$(JOBS) $(if $(filter %.sh,$(TEST_ONE)),test-build,$(TEST_ONE))
	$(TEST_RUN) $(TEST_ONE)
else
test-one:
	@$(MAKE) --no-print-directory BACKEND=cpu test-one
endif
.PHONY: test-one

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
