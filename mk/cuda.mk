# CUDA backend build (llmc/cuda/*.cu by nvcc: bf16 storage, cuBLASLt, our kernels, NCCL): what
# BACKEND=cuda puts into the tree's library (mk/programs.mk), its entry files and link line, the
# GPU test programs, and the bundle of everything a bare GPU machine needs.
#
#   make BACKEND=cuda          train_gpt2, train_lora, generate, data/prepare for NVIDIA GPUs;
#                              no GPU or driver is needed to build (libcuda is loaded at run time)
#   make BACKEND=cuda gpu-tests   $(GPU_TEST_PROGS): the tests that compare the real kernels with
#                              the CPU backend / the transformers references, on a GPU
#   make gpu-bundle            build/gpu-bundle/ and build/gpu-bundle.tar.xz (what travels): a
#                              portable (ARCH=$(PORTABLE_ARCH)), MPI-free build of the programs,
#                              the GPU tests and the dev/cuda benchmarks, needing only glibc,
#                              libstdc++, libcudart, libcublasLt and libnccl (the GPU tests and
#                              benchmarks link OpenBLAS, libgomp and utf8proc statically)
#
# GPU_TEST_PROGS is the list of GPU test programs (paths in the CUDA tree): the test registry's
# "gpu" rows (mk/tests.mk). test/NAME.cu becomes $(TREE)/test/NAME_gpu by the rule below (nvcc,
# linked with the library and the CPU backend as reference), unless a fragment gives its own rule.
CUDA_SRCS := $(wildcard llmc/cuda/*.cu)
PORTABLE_ARCH ?= x86-64-v3
GPU_BUNDLE := build/gpu-bundle

ifeq ($(BACKEND),cuda)
# The shared C of a CUDA build is compiled as C with -DLLMC_CUDA: llmc/ops/ops.h then gives C an
# opaque 2-byte floatX (the C code only moves pointers, so arithmetic on elements cannot compile).
BACKEND_CFLAGS := -DLLMC_CUDA
BACKEND_OBJS := $(patsubst %.cu,$(TREE)/obj/%.o,$(CUDA_SRCS))

$(TREE)/obj/%.o: %.cu $(CUDA_HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(MPI_CFLAGS) -c $< -o $@
$(TREE)/obj/%.entry.o: %.cu $(CUDA_HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(MPI_CFLAGS) -c $< -o $@

ENTRY_LINK = $(CXX)
PROGRAM_LIBS = $(CUDA_LIBS) $(HOST_LIBS)

# ---- GPU test programs
$(TREE)/test/%_gpu: test/%.cu $(LIB) $(CPUREF_LIB) $(wildcard test/*.h test/*.c)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@.o
	$(CXX) $@.o $(CPUREF_LIB) $(LIB) -o $@ $(LDFLAGS) $(PROGRAM_LIBS)

# the op test is C++ host code calling both backends (same source as the harness' test_cuda_ops)
$(TREE)/test/test_cuda_ops_gpu: test/test_cuda_ops.cpp $(LIB) $(CPUREF_LIB) test/test.h test/cuda_test.h test/ref_ops.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -isystem $(CUDA_HOME)/include -DLLMC_CUDA -c $< -o $@.o
	$(CXX) $@.o $(CPUREF_LIB) $(LIB) -o $@ $(LDFLAGS) $(PROGRAM_LIBS)

# (the aggregate targets gpu-tests and gpu-bundle-files are at the end of the Makefile: they
# list what every fragment added)
endif

gpu-bundle:
	@$(MAKE) --no-print-directory BACKEND=cuda ARCH=$(PORTABLE_ARCH) NO_MPI=1 SAN= gpu-bundle-files
.PHONY: gpu-bundle

# the architectures of mk/config.mk, for test/check_cuda_build.sh
print-cuda-archs:
	@echo $(CUDA_ARCHS)
.PHONY: print-cuda-archs
