# Fuzzing every parser of the files the tool reads (test/fuzz/README.md): libFuzzer harnesses
# test/fuzz/fuzz_NAME.c with ASan + UBSan, built with clang into build/fuzz/ (the library is
# compiled once more there, with clang's coverage instrumentation). Seed corpora:
# test/fuzz/corpus/NAME/.
#   make fuzz-build                          build the harnesses (part of the test build when
#                                            clang and its libFuzzer runtime are installed)
#   make test                                runs each harness a few seconds (test/test_fuzz.sh)
#   make fuzz-long FUZZ_RUNS=10000000        runs each harness, one after the other, for that
#                                            many inputs (test/fuzz/run.sh; corpus kept in
#                                            build/fuzz/corpus/, findings in build/fuzz/artifacts/)
#   make fuzz-long FUZZ_TARGETS=json         ... only some of them
#   make fuzz-long FUZZ_MAX_SECONDS=600      ... each for at most that long
FUZZ_CC ?= clang
FUZZ_DIR := build/fuzz
FUZZ_NAMES := json safetensors gguf model hf_config shard state peft vocab tokenizer tfevents
FUZZ_TARGETS ?= $(FUZZ_NAMES)
FUZZ_RUNS ?= 10000000
FUZZ_MAX_SECONDS ?= 0
HAVE_FUZZ := $(shell command -v $(FUZZ_CC) >/dev/null 2>&1 && \
    test -f "$$($(FUZZ_CC) -print-resource-dir 2>/dev/null)/lib/linux/libclang_rt.fuzzer-x86_64.a" && echo 1)

FUZZ_CFLAGS := -std=gnu11 -g -O1 -fno-omit-frame-pointer -march=native -fopenmp -Illmc -I. -Itest/fuzz \
    -Wall -Wextra -Wno-unused-parameter -Wno-unused-function -Wno-pass-failed \
    -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_LIBS := -lopenblas -ldnnl -l:libutf8proc.a -lm -lpthread
FUZZ_LIB_OBJS := $(patsubst %.c,$(FUZZ_DIR)/%.o,$(LIB_SRCS) $(CPU_SRCS))
FUZZ_BINS := $(patsubst %,$(FUZZ_DIR)/fuzz_%,$(FUZZ_NAMES))

$(FUZZ_DIR)/llmc/%.o: llmc/%.c $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/fuzz_%: test/fuzz/fuzz_%.c test/fuzz/fuzz.h $(FUZZ_LIB_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_LIB_OBJS) -o $@ $(FUZZ_LIBS)

fuzz-build: $(FUZZ_LIB_OBJS) $(FUZZ_BINS) # (the objects named here so make keeps them)

fuzz-long: fuzz-build
	@for t in $(FUZZ_TARGETS); do bash test/fuzz/run.sh $$t --runs $(FUZZ_RUNS) --max-seconds $(FUZZ_MAX_SECONDS) || exit 1; done

ifeq ($(HAVE_FUZZ),1)
TEST_EXTRA_BUILD += fuzz-build
endif

.PHONY: fuzz-build fuzz-long
