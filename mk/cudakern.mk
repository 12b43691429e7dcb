# CUDA backend kernels (llmc/cuda/*.cu) under the CUDA-on-CPU harness (mk/cuda_harness.mk): every
# .cu is compiled by g++ with test/cuda_cpu/cuda_cpu.h force-included and -DLLMC_CUDA_EMULATED
# (which routes GEMMs to cblas_sgemm instead of cuBLASLt), then linked with the harness runtime
# into test_cuda_ops, which checks every op against a double-precision reference.
# test/check_cuda_kernels_ran.sh fails if any __global__ in llmc/cuda/*.cu was never launched.
# The harness' orders.sh reruns test_cuda_ops in other fiber orders, test-tsan under TSan.
#
# Symbol clashes: the emulated CUDA ops define the same C symbols as the CPU backend
# (encoder_forward, ...). test_cuda_ops links the CPU backend too, as a reference, from copies of
# llmc/cpu/*.o whose op symbols objcopy renamed to cpu_<name> (the list below = llmc/ops.h);
# the test declares them by including ops.h with those names #defined (see its top).

# (comm_nccl.cu is host code for NCCL, built by mk/comm.mk, not a kernel source)
CUDAKERN_SRCS := $(filter-out llmc/cuda/comm_nccl.cu,$(wildcard llmc/cuda/*.cu))
CUDAKERN_EMU_OBJS := $(patsubst %.cu,$(BUILD)/cuda_cpu/emu/%.o,$(CUDAKERN_SRCS))
CUDAKERN_EMU_CXX = $(CUDA_CPU_CXX) -DLLMC_CUDA -DLLMC_CUDA_EMULATED -x c++ -include test/cuda_cpu/cuda_cpu.h

$(BUILD)/cuda_cpu/emu/%.o: %.cu $(CUDA_CPU_HDRS)
	@mkdir -p $(dir $@)
	$(CUDAKERN_EMU_CXX) -c $< -o $@

CUDAKERN_OPS_SYMS := ops_init ops_backend_name ops_alloc ops_free ops_zero ops_to_device ops_to_host \
    ops_upload_f32 ops_download_f32 ops_synchronize encoder_forward encoder_backward layernorm_forward \
    layernorm_backward fused_residual_layernorm_forward matmul_forward matmul_backward gelu_forward \
    gelu_backward residual_forward add_inplace scale_copy attention_forward attention_backward \
    fused_classifier adamw_update sum_squares sum_f32 dropout_forward mul_inplace \
    nf4_op_upload nf4_op_free nf4_op_bytes nf4_dequantize_op
CUDAKERN_CPUREF_OBJS := $(patsubst $(BUILD)/%,$(BUILD)/cuda_cpu/cpuref/%,$(CPU_OBJS))

$(BUILD)/cuda_cpu/cpuref/syms.txt: mk/cudakern.mk
	@mkdir -p $(dir $@)
	@printf '%s\n' $(foreach s,$(CUDAKERN_OPS_SYMS),"$(s) cpu_$(s)") > $@

$(BUILD)/cuda_cpu/cpuref/%.o: $(BUILD)/%.o $(BUILD)/cuda_cpu/cpuref/syms.txt
	@mkdir -p $(dir $@)
	objcopy --redefine-syms=$(BUILD)/cuda_cpu/cpuref/syms.txt $< $@

$(BUILD)/test/test_cuda_ops: test/test_cuda_ops.cpp $(CUDAKERN_EMU_OBJS) $(CUDA_CPU_RT) $(CUDAKERN_CPUREF_OBJS) \
        $(LIB_OBJS) test/test.h
	@mkdir -p $(dir $@)
	$(CUDAKERN_EMU_CXX) -c $< -o $@.o
	$(CXX) $@.o $(CUDAKERN_EMU_OBJS) $(CUDA_CPU_RT) $(CUDAKERN_CPUREF_OBJS) $(LIB_OBJS) \
	    -o $@ $(LDFLAGS) $(LDLIBS_CPU) $(EXTRA_LIBS)

ifeq ($(NO_CUDA_HARNESS),1)
else ifeq ($(HAVE_CUDA_HEADERS),1)
TEST_PROGS += $(BUILD)/test/test_cuda_ops
TEST_SCRIPTS += test/check_cuda_kernels_ran.sh
endif

# ---------------------------------------------------------------------------------------------
# Production (nvcc) objects of the CUDA backend, for a BACKEND=cuda link: $(CUDA_OPS_OBJS) with
# $(CUDA_LDLIBS). bench-cuda-ops links them into dev/cuda/build/bench_ops (needs a GPU to run).
CUDA_OPS_OBJS := $(patsubst %.cu,$(BUILD)/cuda/%.o,$(CUDAKERN_SRCS))
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -lcublasLt -lcudart
NVCC_OPS_FLAGS := -std=c++17 -O3 -DLLMC_CUDA $(NVCC_ARCHS) -Illmc -I. -Xcompiler -Wall,-Wextra,-Wno-unused-parameter

$(BUILD)/cuda/llmc/cuda/%.o: llmc/cuda/%.cu $(wildcard llmc/cuda/*.cuh) llmc/ops.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_OPS_FLAGS) -c $< -o $@

dev/cuda/build/bench_ops: dev/cuda/bench_ops.cu $(CUDA_OPS_OBJS) $(BUILD)/llmc/check.o $(BUILD)/llmc/fileio.o
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_OPS_FLAGS) $< $(CUDA_OPS_OBJS) $(BUILD)/llmc/check.o $(BUILD)/llmc/fileio.o -o $@ $(CUDA_LDLIBS)

bench-cuda-ops: dev/cuda/build/bench_ops
.PHONY: bench-cuda-ops

# The same op test against the real GPU kernels (nvcc objects + cuBLASLt) for machines with a
# GPU: `make test-cuda-gpu`. Same references, same tolerances (no fast-math in the kernels).
$(BUILD)/test/test_cuda_ops_gpu: test/test_cuda_ops.cpp $(CUDA_OPS_OBJS) $(CUDAKERN_CPUREF_OBJS) $(LIB_OBJS) test/test.h
	@mkdir -p $(dir $@)
	$(CXX) $(filter-out -Werror=%,$(CXXFLAGS)) -isystem $(CUDA_HOME)/include -DLLMC_CUDA -c $< -o $@.o
	$(CXX) $@.o $(CUDA_OPS_OBJS) $(CUDAKERN_CPUREF_OBJS) $(LIB_OBJS) -o $@ $(LDFLAGS) $(CUDA_LDLIBS) $(LDLIBS_CPU) $(EXTRA_LIBS)

test-cuda-gpu: $(BUILD)/test/test_cuda_ops_gpu
	$(BUILD)/test/test_cuda_ops_gpu
.PHONY: test-cuda-gpu
