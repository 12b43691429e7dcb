# Sampling (llmc/sampler.c, llmc/generate.c): the `generate` binary and its end-to-end test.
# Built like train_gpt2: a thin entry file (generate.cu, plain C on the CPU backend) linked
# with the whole library; under SAN=1 the binary goes to build-san/.
ifeq ($(BACKEND),cpu)
$(BINDIR)/generate: $(BUILD)/generate.entry.o $(LIB_ALL_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $^ -o $@ $(LIB_LINK_FLAGS)
endif
ifneq ($(BINDIR),.)
generate: $(BINDIR)/generate
.PHONY: generate
endif
EXTRA_BINS += $(BINDIR)/generate
TEST_SCRIPTS += test/test_generate.sh

# The harness test of the key/value-cache attention kernels (test/cuda/test_attention_kv_cuda.cu)
# links the harness build of llmc/cuda/attention_kv.cu (as mk/nf4.mk does for the NF4 kernels).
ifneq ($(CUDA_CPU_DIR),)
$(CUDA_CPU_DIR)/test/cuda/test_attention_kv_cuda: $(CUDA_CPU_DIR)/test/cuda/test_attention_kv_cuda.o $(CUDA_CPU_DIR)/llmc/cuda/attention_kv.o $(CUDA_CPU_RT) $(LIB_ALL_OBJS)
	$(CXX) $^ -o $@ $(LIB_LINK_FLAGS)
endif

# dev benchmark (not a test): make bench-sampling && ./build/dev/bench_sampling [prompt] [new] [threads]
$(BUILD)/dev/bench_sampling: dev/bench_sampling.c $(LIB_ALL_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB_ALL_OBJS) -o $@ $(LIB_LINK_FLAGS)
bench-sampling: $(BUILD)/dev/bench_sampling
.PHONY: bench-sampling
