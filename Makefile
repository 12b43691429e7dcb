# llmc fine-tuning tool. `make` builds train_gpt2 and train_lora for the CPU backend when no GPU
# is present (CUDA when one is); BACKEND=cpu|cuda overrides. `make test` builds and runs the whole
# test suite (plain, then again under ASan+UBSan). Feature areas add their own rules in mk/*.mk.

SHELL := /bin/bash
.DEFAULT_GOAL := all

CC ?= gcc
CXX ?= g++
NVCC ?= nvcc
OPT ?= -O3 -march=native
WARN := -Wall -Wextra -Wno-unused-parameter -Wno-unused-function -Werror=implicit-function-declaration
CFLAGS_BASE := -std=gnu11 $(WARN) -fopenmp -Illmc -I.
CXXFLAGS_BASE := -std=gnu++17 $(filter-out -Werror=implicit-function-declaration,$(WARN)) -fopenmp -Illmc -I.

# ---------------------------------------------------------------------------
# backend selection
HAVE_NVCC := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo 1)
HAVE_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
ifeq ($(BACKEND),)
  ifeq ($(HAVE_NVCC)$(HAVE_GPU),11)
    BACKEND := cuda
  else
    BACKEND := cpu
  endif
endif

# BLAS for the CPU backend (Debian libopenblas-dev). OpenBLAS' serial/pthread flavours both
# work; we drive threading with OpenMP around it.
BLAS_LIBS ?= -lopenblas
LDLIBS_CPU := $(BLAS_LIBS) -lm -lpthread

# Sanitizer build: `make SAN=1 ...` puts everything under build-san/.
ifeq ($(SAN),1)
  BUILD := build-san
  BINDIR := build-san
  OPT := -O1 -g -fno-omit-frame-pointer
  SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined
else
  BUILD := build
  BINDIR := .
  SANFLAGS :=
endif

CFLAGS := $(CFLAGS_BASE) $(OPT) $(SANFLAGS)
CXXFLAGS := $(CXXFLAGS_BASE) $(OPT) $(SANFLAGS)
LDFLAGS := -fopenmp $(SANFLAGS)

# ---------------------------------------------------------------------------
# the shared library: every llmc/*.c plus the CPU backend
LIB_SRCS := $(wildcard llmc/*.c)
CPU_SRCS := $(wildcard llmc/cpu/*.c)
LIB_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRCS))
CPU_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(CPU_SRCS))
EXTRA_LIBS :=

$(BUILD)/%.o: %.c $(wildcard llmc/*.h llmc/cpu/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# The entry files are .cu (one name for both backends); on the CPU backend they are plain C.
$(BUILD)/%.entry.o: %.cu $(wildcard llmc/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -x c -c $< -o $@

# What any program using the library links (recursive: mk/*.mk fragments add to EXTRA_LIBS).
LIB_ALL_OBJS = $(LIB_OBJS) $(CPU_OBJS)
LIB_LINK_FLAGS = $(LDFLAGS) $(LDLIBS_CPU) $(EXTRA_LIBS)

# ---------------------------------------------------------------------------
# tests: each test/test_*.c is a program; mk/*.mk may add more programs and scripts.
# TEST_PROGS: binaries run by test/run_tests.sh; TEST_SCRIPTS: shell tests.
TEST_C_SRCS := $(wildcard test/test_*.c)
TEST_PROGS := $(patsubst test/%.c,$(BUILD)/test/%,$(TEST_C_SRCS))
TEST_SCRIPTS :=
TEST_SAN_SKIP :=

$(BUILD)/test/%: test/%.c $(LIB_OBJS) $(CPU_OBJS) $(wildcard test/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB_OBJS) $(CPU_OBJS) -o $@ $(LDFLAGS) $(LDLIBS_CPU) $(EXTRA_LIBS)

-include $(sort $(wildcard mk/*.mk))

# ---------------------------------------------------------------------------
# binaries
# (the sanitizer build puts its binaries in build-san/ so they never replace the real ones)
ifeq ($(BACKEND),cpu)
$(BINDIR)/train_gpt2 $(BINDIR)/train_lora: $(BINDIR)/%: $(BUILD)/%.entry.o $(LIB_OBJS) $(CPU_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $^ -o $@ $(LDFLAGS) $(LDLIBS_CPU) $(EXTRA_LIBS)
endif
ifneq ($(BINDIR),.)
train_gpt2 train_lora: %: $(BINDIR)/%
endif

BINS := $(BINDIR)/train_gpt2 $(BINDIR)/train_lora $(EXTRA_BINS)
all: $(BINS)

test-build: $(BINS) $(TEST_PROGS)

# `make test`: every CUDA source through nvcc (sm_80 + sm_90, -Werror, no spills), the whole
# suite, the whole suite again under ASan+UBSan, and the CUDA-on-CPU harness programs under TSan.
# Builds use every core (JOBS); the tests themselves run one after another.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test:
	@if [ "$(HAVE_NVCC)" = 1 ]; then $(MAKE) --no-print-directory -j$(JOBS) cuda-check; \
	 else echo "skip: nvcc not found: the CUDA sources were not compiled (install the CUDA toolkit)"; fi
	$(MAKE) --no-print-directory -j$(JOBS) test-build
	$(MAKE) --no-print-directory test-run
	$(MAKE) --no-print-directory -j$(JOBS) SAN=1 test-build
	$(MAKE) --no-print-directory SAN=1 test-run
	$(MAKE) --no-print-directory -j$(JOBS) test-tsan

test-run: test-build
	SAN=$(SAN) BUILD=$(BUILD) BIN_DIR=$(BINDIR) bash test/run_tests.sh $(TEST_PROGS) $(TEST_SCRIPTS)

clean:
	rm -rf build build-san build-tsan train_gpt2 train_lora $(EXTRA_BINS) dev/cuda/build

.PHONY: all test test-run test-build clean
