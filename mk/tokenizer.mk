# Tokenizer and data preparation (llmc/tokenizer.c, data/prepare.c).
# utf8proc (Debian libutf8proc-dev) supplies the Unicode categories of the GPT-2 pre-tokenizer.
EXTRA_LIBS += -lutf8proc

# data/prepare: plain builds put it next to its source (data/prepare), sanitizer builds in
# build-san/prepare so they never replace the real one. Tests find it through PREPARE_BIN.
PREPARE_BIN := $(if $(filter .,$(BINDIR)),data/prepare,$(BUILD)/prepare)
export PREPARE_BIN
EXTRA_BINS += $(PREPARE_BIN)

$(PREPARE_BIN): $(BUILD)/data/prepare.o $(LIB_ALL_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $^ -o $@ $(LIB_LINK_FLAGS)

TEST_SCRIPTS += test/test_prepare.sh
# scripts/plot_loss.py (loss curves from log.jsonl as a PNG)
TEST_SCRIPTS += test/test_plot.sh

# tokenizer throughput benchmark (not part of the test suite): make bench-tokenizer
$(BUILD)/dev/bench_tokenizer: dev/bench_tokenizer.c $(LIB_ALL_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB_ALL_OBJS) -o $@ $(LIB_LINK_FLAGS)
bench-tokenizer: $(BUILD)/dev/bench_tokenizer
	$(BUILD)/dev/bench_tokenizer
.PHONY: bench-tokenizer
