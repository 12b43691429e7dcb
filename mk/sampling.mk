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
