# NF4 quantization (llmc/nf4.c): compiled without floating-point contraction so that every
# multiply and add rounds separately, as in bitsandbytes' CPU path (nf4.c calls fmaf itself
# where bitsandbytes' binary fuses one).
$(BUILD)/llmc/nf4.o: CFLAGS += -ffp-contract=off

# The harness test of the NF4 kernels (test/cuda/test_nf4_cuda.cu) links the harness build of
# llmc/cuda/nf4.cu next to the runtime and the C library (mk/cuda_harness.mk links neither kernel
# sources nor anything else by default).
ifneq ($(CUDA_CPU_DIR),)
$(CUDA_CPU_DIR)/test/cuda/test_nf4_cuda: $(CUDA_CPU_DIR)/test/cuda/test_nf4_cuda.o $(CUDA_CPU_DIR)/llmc/cuda/nf4.o $(CUDA_CPU_RT) $(LIB_ALL_OBJS)
	$(CXX) $^ -o $@ $(LIB_LINK_FLAGS)
endif

# dev benchmark (not a test): make bench-nf4 && ./build/dev/bench_nf4
$(BUILD)/dev/bench_nf4: dev/bench_nf4.c $(LIB_ALL_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB_ALL_OBJS) -o $@ $(LIB_LINK_FLAGS)
bench-nf4: $(BUILD)/dev/bench_nf4
.PHONY: bench-nf4
