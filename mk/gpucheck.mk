# The GPU check (scripts/gpu_check.sh) and what it runs that no other fragment builds.
#
# LoRA and QLoRA model tests on the CUDA backend: test/test_lora.cu and test/test_qlora.cu include
# the CPU tests' sources (as test/test_gpt2.cu does) with bf16 tolerances. Two builds each:
#   $(BUILD)/test/test_lora_cuda, test_qlora_model_cuda   under the CUDA-on-CPU harness (CI: plain,
#       ASan+UBSan, TSan and the other fiber orders, like test_gpt2_cuda). The QLoRA one is not
#       called test_qlora_cuda: that is the NF4 kernel test of test/cuda/.
#   $(BUILD)/test/test_lora_gpu, test_qlora_gpu          nvcc objects + cuBLASLt, for a GPU.
#
# The emulated GPU check (`make gpu-check-emulated`, part of `make test` through
# test/test_gpu_check.sh): scripts/gpu_check.sh --emulated runs the same sections as on a GPU
# against harness builds of the same programs, gathered under the names the GPU bundle uses in
# $(GPUCHECK_EMU_DIR).

# ---- the model tests under the harness
$(BUILD)/test/test_lora_cuda: test/test_lora.cu test/test_lora.c $(CUDAKERN_EMU_OBJS) $(CUDA_CPU_RT) $(CUDAC_OBJS) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(CUDAKERN_EMU_CXX) -c $< -o $@.o
	$(CXX) $@.o $(CUDAKERN_EMU_OBJS) $(CUDA_CPU_RT) $(CUDAC_OBJS) -o $@ $(LDFLAGS) $(LDLIBS_CPU) $(EXTRA_LIBS)

$(BUILD)/test/test_qlora_model_cuda: test/test_qlora.cu test/test_qlora.c $(CUDAKERN_EMU_OBJS) $(CUDA_CPU_RT) $(CUDAC_OBJS) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(CUDAKERN_EMU_CXX) -c $< -o $@.o
	$(CXX) $@.o $(CUDAKERN_EMU_OBJS) $(CUDA_CPU_RT) $(CUDAC_OBJS) -o $@ $(LDFLAGS) $(LDLIBS_CPU) $(EXTRA_LIBS)

ifeq ($(NO_CUDA_HARNESS),1)
else ifeq ($(HAVE_CUDA_HEADERS),1)
TEST_PROGS += $(BUILD)/test/test_lora_cuda $(BUILD)/test/test_qlora_model_cuda
endif

# ---- the same tests with nvcc, for a GPU
$(BUILD)/test/test_lora_gpu: test/test_lora.cu test/test_lora.c $(CUDA_ALL_OBJS) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_ENTRY_FLAGS) -c $< -o $@.o
	$(CXX) $@.o $(CUDA_ALL_OBJS) -o $@ $(CUDA_LINK_LIBS)

$(BUILD)/test/test_qlora_gpu: test/test_qlora.cu test/test_qlora.c $(CUDA_ALL_OBJS) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_ENTRY_FLAGS) -c $< -o $@.o
	$(CXX) $@.o $(CUDA_ALL_OBJS) -o $@ $(CUDA_LINK_LIBS)

# `make cuda-check` (nvcc -Werror for sm_80 + sm_90) covers them too, as the CUDA build compiles them
GPUCHECK_NVCC_CHECK := $(NVCC_CHECK_DIR)/test/test_lora.o $(NVCC_CHECK_DIR)/test/test_qlora.o
$(GPUCHECK_NVCC_CHECK): $(NVCC_CHECK_DIR)/%.o: %.cu test/test_lora.c test/test_qlora.c $(wildcard test/*.h llmc/*.h)
	@mkdir -p $(dir $@)
	@echo "nvcc $<"
	@$(NVCC) $(NVCC_CHECK_FLAGS) -DLLMC_CUDA -c $< -o $@ > $@.log 2>&1 || { cat $@.log; rm -f $@; exit 1; }
cuda-check: $(GPUCHECK_NVCC_CHECK)

test-lora-gpu: $(BUILD)/test/test_lora_gpu $(BUILD)/test/test_qlora_gpu
	$(BUILD)/test/test_lora_gpu && $(BUILD)/test/test_qlora_gpu
.PHONY: test-lora-gpu

# `make test` links them too (no GPU needed to link)
ifeq ($(HAVE_NVCC)$(SAN),1)
test-build: $(BUILD)/test/test_lora_gpu $(BUILD)/test/test_qlora_gpu
endif

# ---- GPU builds of the other test programs the check runs (nvcc objects, cuBLASLt)
# flash attention vs the CPU backend: host C++ like test_cuda_ops_gpu
$(BUILD)/test/test_flash_attention_gpu: test/test_cuda_flash_attention.cpp $(CUDA_OPS_OBJS) $(CUDAKERN_CPUREF_OBJS) $(LIB_OBJS) test/test.h
	@mkdir -p $(dir $@)
	$(CXX) $(filter-out -Werror=%,$(CXXFLAGS)) -isystem $(CUDA_HOME)/include -DLLMC_CUDA -c $< -o $@.o
	$(CXX) $@.o $(CUDA_OPS_OBJS) $(CUDAKERN_CPUREF_OBJS) $(LIB_OBJS) -o $@ $(LDFLAGS) $(CUDA_LDLIBS) $(LDLIBS_CPU) $(EXTRA_LIBS)

# the kernel tests of test/cuda/ (written to run as-is on a GPU), compiled and linked as their
# harness builds are (no -DLLMC_CUDA: the CPU backend is their reference; mk/nf4.mk, mk/qlora.mk,
# mk/sampling.mk) with the nvcc objects in place of the harness' ones
GPUCHECK_KTEST = $(NVCC) $(filter-out -DLLMC_CUDA,$(NVCC_OPS_FLAGS)) -c $< -o $@.o && \
    $(CXX) $@.o $(filter-out $<,$^) -o $@ $(LDFLAGS) $(CUDA_LDLIBS) $(LDLIBS_CPU) $(EXTRA_LIBS)
$(BUILD)/test/test_nf4_gpu: test/cuda/test_nf4_cuda.cu $(BUILD)/cuda/llmc/cuda/nf4.o $(LIB_ALL_OBJS)
	@mkdir -p $(dir $@)
	$(GPUCHECK_KTEST)
$(BUILD)/test/test_nf4_ops_gpu: test/cuda/test_qlora_cuda.cu $(BUILD)/cuda/llmc/cuda/nf4.o $(BUILD)/cuda/llmc/cuda/nf4_ops.o \
        $(filter-out $(BUILD)/llmc/cpu/nf4_ops_cpu.o,$(LIB_ALL_OBJS))
	@mkdir -p $(dir $@)
	$(GPUCHECK_KTEST)
# (its kernels without the ops.h entry point, which the CPU backend provides here, as in the harness build)
$(BUILD)/gpucheck/attention_kv.o: llmc/cuda/attention_kv.cu $(wildcard llmc/cuda/*.cuh)
	@mkdir -p $(dir $@)
	$(NVCC) $(filter-out -DLLMC_CUDA,$(NVCC_OPS_FLAGS)) -c $< -o $@
$(BUILD)/test/test_attention_kv_gpu: test/cuda/test_attention_kv_cuda.cu $(BUILD)/gpucheck/attention_kv.o $(LIB_ALL_OBJS)
	@mkdir -p $(dir $@)
	$(GPUCHECK_KTEST)

# the device / library facts of the check's env section
$(BUILD)/gpucheck/gpu_info: dev/cuda/gpu_info.cu llmc/mfu.c llmc/mfu.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_OPS_FLAGS) dev/cuda/gpu_info.cu llmc/mfu.c -o $@ $(CUDA_LDLIBS) -lnccl

# every GPU program of the check besides the ones other fragments build
GPUCHECK_GPU_PROGS := $(BUILD)/test/test_lora_gpu $(BUILD)/test/test_qlora_gpu $(BUILD)/test/test_flash_attention_gpu \
    $(BUILD)/test/test_nf4_gpu $(BUILD)/test/test_nf4_ops_gpu $(BUILD)/test/test_attention_kv_gpu $(BUILD)/gpucheck/gpu_info

# ---- the emulated check: harness builds under the GPU programs' names
GPUCHECK_EMU_DIR := $(BUILD)/gpucheck-emu
GPUCHECK_EMU_OBJ := $(BUILD)/gpucheck/emu
# entry files, gpu_info and the dev/cuda programs compiled for the harness
$(GPUCHECK_EMU_OBJ)/%.o: %.cu $(CUDA_CPU_HDRS) $(wildcard dev/cuda/*.cuh)
	@mkdir -p $(dir $@)
	$(CUDAKERN_EMU_CXX) -c $< -o $@
GPUCHECK_EMU_LINK = $(CXX) $^ -o $@ $(LDFLAGS) $(LDLIBS_CPU) $(EXTRA_LIBS)
$(GPUCHECK_EMU_OBJ)/train_gpt2 $(GPUCHECK_EMU_OBJ)/train_lora: %: %.o $(CUDAKERN_EMU_OBJS) $(CUDA_CPU_RT) $(CUDAC_OBJS)
	$(GPUCHECK_EMU_LINK)
$(GPUCHECK_EMU_OBJ)/dev/cuda/%: $(GPUCHECK_EMU_OBJ)/dev/cuda/%.o $(CUDAKERN_EMU_OBJS) $(CUDA_CPU_RT) $(CUDAC_OBJS)
	$(GPUCHECK_EMU_LINK)
.PRECIOUS: $(GPUCHECK_EMU_OBJ)/%.o

# NAME:PROGRAM pairs: $(GPUCHECK_EMU_DIR)/NAME is a link to PROGRAM
GPUCHECK_EMU_KERNELS := gelu encoder layernorm adamw classifier matmul bench_ops gpu_info
GPUCHECK_EMU_LINKS := train_gpt2:$(GPUCHECK_EMU_OBJ)/train_gpt2 train_lora:$(GPUCHECK_EMU_OBJ)/train_lora \
    test_cuda_ops_gpu:$(BUILD)/test/test_cuda_ops test_gpt2_gpu:$(BUILD)/test/test_gpt2_cuda \
    test_lora_gpu:$(BUILD)/test/test_lora_cuda test_qlora_gpu:$(BUILD)/test/test_qlora_model_cuda \
    test_flash_attention_gpu:$(BUILD)/test/test_cuda_flash_attention test_nf4_gpu:$(CUDA_CPU_DIR)/test/cuda/test_nf4_cuda \
    test_nf4_ops_gpu:$(CUDA_CPU_DIR)/test/cuda/test_qlora_cuda test_attention_kv_gpu:$(CUDA_CPU_DIR)/test/cuda/test_attention_kv_cuda \
    $(foreach k,$(GPUCHECK_EMU_KERNELS),$(k):$(GPUCHECK_EMU_OBJ)/dev/cuda/$(k))
GPUCHECK_EMU_TARGETS := $(foreach p,$(GPUCHECK_EMU_LINKS),$(word 2,$(subst :, ,$(p))))

gpucheck-emu: $(GPUCHECK_EMU_TARGETS)
	@mkdir -p $(GPUCHECK_EMU_DIR)
	@for p in $(GPUCHECK_EMU_LINKS); do ln -sfn "$(CURDIR)/$${p#*:}" "$(GPUCHECK_EMU_DIR)/$${p%%:*}"; done
	@echo "gpucheck-emu: $(words $(GPUCHECK_EMU_LINKS)) harness programs in $(GPUCHECK_EMU_DIR)"
gpu-check-emulated: gpucheck-emu
	BUILD=$(BUILD) bash scripts/gpu_check.sh --emulated --bin $(GPUCHECK_EMU_DIR) --out $(BUILD)/gpucheck-emu-report
.PHONY: gpucheck-emu gpu-check-emulated

# `make test`: the emulated check end to end (plain pass; the SAN pass skips it)
ifeq ($(NO_CUDA_HARNESS),1)
else ifeq ($(HAVE_CUDA_HEADERS),1)
TEST_SCRIPTS += test/test_gpu_check.sh
ifeq ($(SAN),)
test-build: gpucheck-emu
endif
endif
