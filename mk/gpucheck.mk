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

test-lora-gpu: $(BUILD)/test/test_lora_gpu $(BUILD)/test/test_qlora_gpu
	$(BUILD)/test/test_lora_gpu && $(BUILD)/test/test_qlora_gpu
.PHONY: test-lora-gpu

# `make test` links them too (no GPU needed to link)
ifeq ($(HAVE_NVCC)$(SAN),1)
test-build: $(BUILD)/test/test_lora_gpu $(BUILD)/test/test_qlora_gpu
endif
