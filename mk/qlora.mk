# QLoRA (llmc/qlora.c, llmc/cpu/nf4_ops_cpu.c; test/test_qlora.c is picked up automatically).
TEST_SCRIPTS += test/test_qlora_cli.sh

# dev benchmark (not a test): peak memory and step time of --qlora vs plain LoRA at GPT-2 124M
# shapes on the CPU backend: bash dev/bench_qlora.sh

# The CUDA backend's NF4 ops (llmc/cuda/nf4_ops.cu) under the CUDA-on-CPU harness: linked with the
# harness builds of nf4.cu and nf4_ops.cu in place of the CPU backend's nf4_ops_cpu.o (same symbols).
ifneq ($(CUDA_CPU_DIR),)
$(CUDA_CPU_DIR)/test/cuda/test_qlora_cuda: $(CUDA_CPU_DIR)/test/cuda/test_qlora_cuda.o $(CUDA_CPU_DIR)/llmc/cuda/nf4.o $(CUDA_CPU_DIR)/llmc/cuda/nf4_ops.o $(CUDA_CPU_RT) $(filter-out $(BUILD)/llmc/cpu/nf4_ops_cpu.o,$(LIB_ALL_OBJS))
	$(CXX) $^ -o $@ $(LIB_LINK_FLAGS)
endif
