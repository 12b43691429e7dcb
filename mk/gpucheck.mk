# The GPU check (scripts/gpu_check.sh): the programs it runs that no other fragment builds, and
# its emulated run in `make test`.
#
# LoRA and QLoRA model tests on the CUDA backend: test/test_lora.cu and test/test_qlora.cu include
# the CPU tests' sources (as test/test_gpt2.cu does) with bf16 tolerances. Two builds each:
#   CPU trees:  $(TREE)/test/test_lora_cuda, test_qlora_model_cuda   under the CUDA-on-CPU harness
#               (plain, ASan+UBSan, TSan and the other fiber orders, like test_gpt2_cuda). The
#               QLoRA one is not called test_qlora_cuda: that is the NF4 kernel test of test/cuda/.
#   CUDA tree:  $(TREE)/test/test_lora_gpu, test_qlora_gpu (mk/cuda.mk's rule for test/NAME.cu),
#               test_flash_attention_gpu (test/test_cuda_flash_attention.cpp on the real
#               kernels) and test_ptx_gpu (test/cuda_cpu/test_ptx.cu, the harness' test of the PTX
#               wrappers, on the hardware: whether the emulation's fragment tables are the GPU's),
#               in GPU_TEST_PROGS (the registry's "gpu" rows, mk/tests.mk) and so in
#               `make gpu-bundle`, and test_comm_split_gpu
#               (test/test_comm_split.cu: sub-communicators with NCCL attached; CUDA tree only, the
#               harness has no NCCL).
# The watchdog's NCCL path on one GPU: test/test_nccl_watchdog.cu becomes
# $(TREE)/test/test_nccl_watchdog_gpu (CUDA tree only: the harness has no NCCL), in the bundle,
# run by the check's "watchdog" section. dev/cuda/gpu_info (the check's device and library facts)
# is one of mk/bench.mk's DEV_CUDA_PROGS.
#
# The emulated check: `make gpucheck-emu` gathers harness builds of the same programs under the
# names the bundle uses in $(TREE)/gpucheck-emu/ (links), `make gpu-check-emulated` runs
# scripts/gpu_check.sh --emulated on them, and test/test_gpu_check.sh (in the suite) checks it.

ifeq ($(BACKEND),cpu)
# ---- the model tests under the harness
$(TREE)/test/test_lora_cuda: test/test_lora.cu test/test_lora.c $(CUDA_CPU_RT) $(CUDA_CPU_EMU_LIB) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(CUDA_CPU_EMU_CU) -c $< -o $@.o
	$(CXX) $@.o $(CUDA_CPU_RT) $(CUDA_CPU_EMU_LIB) -o $@ $(LDFLAGS) $(HOST_LIBS)
$(TREE)/test/test_qlora_model_cuda: test/test_qlora.cu test/test_qlora.c $(CUDA_CPU_RT) $(CUDA_CPU_EMU_LIB) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(CUDA_CPU_EMU_CU) -c $< -o $@.o
	$(CXX) $@.o $(CUDA_CPU_RT) $(CUDA_CPU_EMU_LIB) -o $@ $(LDFLAGS) $(HOST_LIBS)

# ---- the emulated check's programs: the entry files, gpu_info and the dev/cuda kernel programs
# compiled for the harness, linked with the emulated backend (and data/prepare, which has no
# backend, for the main job)
GPUCHECK_EMU_DIR := $(TREE)/gpucheck-emu
GPUCHECK_EMU_OBJ := $(TREE)/gpucheck/emu
$(GPUCHECK_EMU_OBJ)/%.o: %.cu $(CUDA_CPU_HDRS) $(wildcard dev/cuda/*.cuh)
	@mkdir -p $(dir $@)
	$(CUDA_CPU_EMU_CU) -c $< -o $@
$(GPUCHECK_EMU_OBJ)/%: $(GPUCHECK_EMU_OBJ)/%.o $(CUDA_CPU_RT) $(CUDA_CPU_EMU_LIB)
	$(CXX) $^ -o $@ $(LDFLAGS) $(HOST_LIBS)
.PRECIOUS: $(GPUCHECK_EMU_OBJ)/%.o

# NAME:PROGRAM pairs: $(GPUCHECK_EMU_DIR)/NAME is a link to PROGRAM
GPUCHECK_EMU_KERNELS := gelu encoder layernorm adamw classifier matmul gpu_info
GPUCHECK_EMU_LINKS := train_gpt2:$(GPUCHECK_EMU_OBJ)/train_gpt2 train_lora:$(GPUCHECK_EMU_OBJ)/train_lora \
    generate:$(GPUCHECK_EMU_OBJ)/generate prepare:$(TREE)/bin/prepare \
    test_cuda_ops_gpu:$(TREE)/test/test_cuda_ops test_flash_attention_gpu:$(TREE)/test/test_cuda_flash_attention \
    test_gpt2_gpu:$(TREE)/test/test_gpt2_cuda test_lora_gpu:$(TREE)/test/test_lora_cuda \
    test_qlora_gpu:$(TREE)/test/test_qlora_model_cuda test_pack_gpu:$(TREE)/test/test_pack_cuda \
    test_ptx_gpu:$(CUDA_CPU_DIR)/test/cuda_cpu/test_ptx bench_ops:$(CUDA_CPU_BENCH_OPS) \
    $(foreach k,$(GPUCHECK_EMU_KERNELS),$(k):$(GPUCHECK_EMU_OBJ)/dev/cuda/$(k))
GPUCHECK_EMU_TARGETS := $(foreach p,$(GPUCHECK_EMU_LINKS),$(word 2,$(subst :, ,$(p))))

gpucheck-emu: $(GPUCHECK_EMU_TARGETS)
	@mkdir -p $(GPUCHECK_EMU_DIR)
	@for p in $(GPUCHECK_EMU_LINKS); do ln -sfn "$(CURDIR)/$${p#*:}" "$(GPUCHECK_EMU_DIR)/$${p%%:*}"; done
	@echo "gpucheck-emu: $(words $(GPUCHECK_EMU_LINKS)) harness programs in $(GPUCHECK_EMU_DIR)"
gpu-check-emulated: gpucheck-emu
	BUILD=$(TREE) bash scripts/gpu_check.sh --emulated --bin $(GPUCHECK_EMU_DIR) --out $(TREE)/gpucheck-emu-report

# what the registry's "harness" rows of this area (mk/tests.mk: the two model tests above,
# test_gpu_check.sh, test_step_syncs.sh, test_device_memory.sh, test_sample_backends.sh) use
ifeq ($(NO_CUDA_HARNESS),1)
else ifeq ($(HAVE_CUDA_HEADERS),1)
TEST_EXTRA_BUILD += $(GPUCHECK_EMU_OBJ)/generate
TEST_EXTRA_BUILD += $(GPUCHECK_EMU_OBJ)/train_gpt2 $(GPUCHECK_EMU_OBJ)/train_lora
# (the emulated check runs in the plain pass only: its programs are the suite's own harness
# programs, which the SAN pass runs under ASan+UBSan anyway)
ifeq ($(SAN),)
TEST_EXTRA_BUILD += gpucheck-emu
endif
endif
else
gpucheck-emu gpu-check-emulated:
	@$(MAKE) --no-print-directory BACKEND=cpu $@
endif
.PHONY: gpucheck-emu gpu-check-emulated

ifeq ($(BACKEND),cuda)
# ---- the GPU builds
# flash attention in depth against the CPU backend: host C++ like test_cuda_ops_gpu
$(TREE)/test/test_flash_attention_gpu: test/test_cuda_flash_attention.cpp $(LIB) $(CPUREF_LIB) test/test.h test/cuda_test.h
	@mkdir -p $(dir $@)
	$(CXX) $(filter-out -Werror%,$(CXXFLAGS)) -isystem $(CUDA_HOME)/include -DLLMC_CUDA -c $< -o $@.o
	$(CXX) $@.o $(CPUREF_LIB) $(LIB) -o $@ $(LDFLAGS) $(PROGRAM_LIBS)
# the PTX wrappers' test (no backend: the library for check.c's cudaCheck)
$(TREE)/test/test_ptx_gpu: test/cuda_cpu/test_ptx.cu $(LIB) $(CUDA_HDRS) test/test.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@.o
	$(CXX) $@.o $(LIB) -o $@ $(LDFLAGS) $(PROGRAM_LIBS)
endif

# ---- `make cuda-check` (nvcc -Werror for every GPU architecture) covers the test sources above, in
# their CUDA configuration
GPUCHECK_NVCC_CHECK := $(NVCC_CHECK_DIR)/test/test_lora.o $(NVCC_CHECK_DIR)/test/test_qlora.o \
    $(NVCC_CHECK_DIR)/test/test_comm_split.o $(NVCC_CHECK_DIR)/test/test_nccl_watchdog.o
$(GPUCHECK_NVCC_CHECK): $(NVCC_CHECK_DIR)/%.o: %.cu test/test_lora.c test/test_qlora.c $(wildcard test/*.h) $(CUDA_HDRS)
	@mkdir -p $(dir $@)
	@echo "nvcc $<"
	@$(NVCC) $(NVCC_CHECK_FLAGS) -DLLMC_CUDA -c $< -o $@ > $@.log 2>&1 || { cat $@.log; rm -f $@; exit 1; }
ifeq ($(HAVE_NVCC),1)
cuda-check: $(GPUCHECK_NVCC_CHECK)
endif
