# CUDA backend build of the whole tool (issue: CUDA backend in bf16, every kernel executed in CI).
#
# The shared C (llmc/*.c) of a CUDA build is compiled as C with -DLLMC_CUDA: llmc/ops.h then gives
# C an opaque 2-byte floatX (the C code only moves pointers; C++ sees __nv_bfloat16). Those
# objects go to $(BUILD)/cudac/ and serve two links:
# - `make BACKEND=cuda`: train_gpt2 / train_lora from the entry files compiled by nvcc, the nvcc
#   objects of llmc/cuda/*.cu (mk/cudakern.mk) and comm_nccl.cu (mk/comm.mk), cuBLASLt, cudart,
#   NCCL, MPI. `make cuda-build-check` (run by `make test`) links them here: no GPU is needed to
#   link (libcuda is not linked at all: the runtime loads the driver when it runs).
# - test/test_gpt2.cu under the CUDA-on-CPU harness (the emulated kernels of mk/cudakern.mk):
#   the whole GPT-2 forward/backward/AdamW of the CUDA backend against transformers' reference.
#   `make test-gpt2-gpu` builds the same test with nvcc for a machine with a GPU.

CUDAC_OBJS := $(patsubst %.c,$(BUILD)/cudac/%.o,$(LIB_SRCS))
$(BUILD)/cudac/%.o: %.c $(wildcard llmc/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DLLMC_CUDA -c $< -o $@

# ---- the model test under the harness
$(BUILD)/test/test_gpt2_cuda: test/test_gpt2.cu test/test_gpt2.c $(CUDAKERN_EMU_OBJS) $(CUDA_CPU_RT) $(CUDAC_OBJS) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(CUDAKERN_EMU_CXX) -c $< -o $@.o
	$(CXX) $@.o $(CUDAKERN_EMU_OBJS) $(CUDA_CPU_RT) $(CUDAC_OBJS) -o $@ $(LDFLAGS) $(LDLIBS_CPU) $(EXTRA_LIBS)

ifeq ($(NO_CUDA_HARNESS),1)
else ifeq ($(HAVE_CUDA_HEADERS),1)
TEST_PROGS += $(BUILD)/test/test_gpt2_cuda
endif

# ---- real CUDA link (nvcc objects)
CUDA_BIN_DIR := $(BUILD)/cudabin
CUDA_ALL_OBJS = $(CUDAC_OBJS) $(CUDA_OPS_OBJS) $(BUILD)/cuda/llmc/cuda/device.o $(COMM_NCCL_OBJ)
# ($(LDFLAGS): OpenMP of the shared C, and the sanitizers of a SAN=1 build)
CUDA_LINK_LIBS = $(LDFLAGS) $(CUDA_LDLIBS) $(COMM_NCCL_LIBS) $(EXTRA_LIBS) -lm -lpthread
NVCC_ENTRY_FLAGS := -std=c++17 -O3 -DLLMC_CUDA $(NVCC_ARCHS) -Illmc -I. -Xcompiler -Wall,-Wextra,-Wno-unused-parameter

$(BUILD)/cuda/%.entry.o: %.cu $(wildcard llmc/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_ENTRY_FLAGS) $(if $(filter 1,$(HAVE_MPI)),-DLLMC_HAVE_MPI $(MPI_CFLAGS)) -c $< -o $@

$(CUDA_BIN_DIR)/train_gpt2 $(CUDA_BIN_DIR)/train_lora: $(CUDA_BIN_DIR)/%: $(BUILD)/cuda/%.entry.o $(CUDA_ALL_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $^ -o $@ $(CUDA_LINK_LIBS)

ifeq ($(BACKEND),cuda)
$(BINDIR)/train_gpt2 $(BINDIR)/train_lora: $(BINDIR)/%: $(CUDA_BIN_DIR)/%
	cp $< $@
endif

$(BUILD)/test/test_gpt2_gpu: test/test_gpt2.cu test/test_gpt2.c $(CUDA_ALL_OBJS) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_ENTRY_FLAGS) -c $< -o $@.o
	$(CXX) $@.o $(CUDA_ALL_OBJS) -o $@ $(CUDA_LINK_LIBS)
test-gpt2-gpu: $(BUILD)/test/test_gpt2_gpu
	$(BUILD)/test/test_gpt2_gpu
.PHONY: test-gpt2-gpu

# link check, no GPU needed: `make test` runs it when nvcc is found
# (also the GPU op test and the op benchmark of mk/cudakern.mk)
cuda-build-check: $(CUDA_BIN_DIR)/train_gpt2 $(CUDA_BIN_DIR)/train_lora $(BUILD)/test/test_gpt2_gpu \
        $(BUILD)/test/test_cuda_ops_gpu dev/cuda/build/bench_ops
	@for b in $^; do nm -u $$b | grep -q cublasLtMatmul || { echo "cuda-build-check: $$b does not use cuBLASLt"; exit 1; }; done
	@echo "cuda-build-check: train_gpt2, train_lora, test_gpt2_gpu, test_cuda_ops_gpu and bench_ops compile and link for the CUDA backend (cuBLASLt, cudart, NCCL, MPI)"
.PHONY: cuda-build-check

# `make test` (plain pass) links the CUDA binaries when nvcc is found
ifeq ($(HAVE_NVCC)$(SAN),1)
test-build: cuda-build-check
endif
TEST_SCRIPTS += test/test_recompute.sh
