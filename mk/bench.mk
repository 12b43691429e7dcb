# Benchmarks and measuring tools (not tests: timings never gate CI; `make test` compiles the CUDA
# ones with nvcc and runs bench_ops under the harness at a small size, see mk/harness.mk).
#
#   make bench-cpu     dev/bench_*.c against the CPU backend -> build/cpu/dev/ (bench_gemm,
#                      bench_ops, bench_nf4, bench_sampling, bench_tokenizer; usage at each top)
#   make bench-cuda    dev/cuda/*.cu against the CUDA backend -> build/cuda/dev/cuda/: one
#                      program per kernel (CPU reference, kernel versions, check, cudaEvent
#                      timing; exit status 1 on a mismatch), bench_ops (every op at GPT-2 124M
#                      shapes) and attention_bench (naive / cuBLAS / flash). They need a GPU to
#                      run; `make gpu-bundle` packs them with everything else a GPU machine needs.

ifeq ($(BACKEND),cpu)
CPU_BENCHES := $(patsubst dev/%.c,$(TREE)/dev/%,$(wildcard dev/bench_*.c))
$(TREE)/dev/%: dev/%.c $(LIB) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB) -o $@ $(LDFLAGS) $(HOST_LIBS)
bench-cpu: $(CPU_BENCHES)
else
bench-cpu:
	@$(MAKE) --no-print-directory BACKEND=cpu bench-cpu
endif

ifeq ($(BACKEND),cuda)
DEV_CUDA_PROGS := $(patsubst dev/%.cu,$(TREE)/dev/%,$(wildcard dev/cuda/*.cu))
# attention_bench compares with a cuBLAS (not Lt) batched GEMM
$(TREE)/dev/cuda/attention_bench: DEV_CUDA_LIBS := -lcublas
$(TREE)/dev/cuda/%: dev/cuda/%.cu dev/cuda/common.cuh $(LIB) $(CUDA_HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@.o
	$(CXX) $@.o $(LIB) -o $@ $(LDFLAGS) $(PROGRAM_LIBS) $(DEV_CUDA_LIBS)
bench-cuda: $(DEV_CUDA_PROGS)
else
bench-cuda:
	@$(MAKE) --no-print-directory BACKEND=cuda bench-cuda
endif
.PHONY: bench-cpu bench-cuda
