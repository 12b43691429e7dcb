# llmc fine-tuning tool.
#
#   make                     train_gpt2, train_lora, generate, data/prepare for the CPU backend
#                            when no GPU is present (CUDA when one is); BACKEND=cpu|cuda overrides
#   make test                the whole test suite (mk/tests.mk says what it holds)
#   make test T=NAME         one test of it (e.g. T=test_ops, T=test_resume.sh; SAN=1 for ASan)
#   make gpu-bundle          build/gpu-bundle/: portable CUDA programs, GPU tests and benchmarks
#                            for a bare GPU machine (mk/cuda.mk)
#   make bench-cpu / bench-cuda   benchmark programs (mk/bench.mk)
#   make clean               removes every build tree and the programs
# Options: BACKEND, ARCH (native or a -march target such as x86-64-v3, for binaries that
# travel), SAN=1 (ASan+UBSan), NO_MPI=1. Each configuration builds in a tree of its own under
# build/ (mk/config.mk); ./train_gpt2 etc. are copies of the selected tree's programs.
#
# Fragments, by concern:
#   mk/config.mk     options -> build tree; compilers, flags, GPU architectures, libraries
#   mk/cpu.mk        the CPU backend (and the CPU backend as reference for the CUDA op tests)
#   mk/cuda.mk       the CUDA backend (nvcc), the GPU test programs, the GPU bundle
#   mk/programs.mk   the tree's library and the four programs, for either backend
#   mk/harness.mk    the CUDA-on-CPU harness: the CUDA kernels run in CI, TSan
#   mk/tests.mk      the test suite and the build checks (nvcc -Werror, clean-tree CUDA build)
#   mk/bench.mk      benchmarks (CPU and dev/cuda)
# Any other mk/*.mk is included after these (a new area adds its rules there, and appends what
# its tests use to TEST_EXTRA_BUILD); its tests are rows of the test registry in mk/tests.mk. The
# aggregate targets below come last so that they see every addition.

SHELL := /bin/bash
.DEFAULT_GOAL := all

MK_CORE := mk/config.mk mk/cpu.mk mk/cuda.mk mk/programs.mk mk/harness.mk mk/tests.mk mk/bench.mk
include $(MK_CORE)
include $(filter-out $(MK_CORE),$(sort $(wildcard mk/*.mk)))

# ---------------------------------------------------------------------------------------------
# aggregate targets

all: $(PROGRAMS) $(if $(SAN),,$(ROOT_PROGRAMS))

ifeq ($(BACKEND),cpu)
test-build: test-registry-check $(PROGRAMS) $(TEST_PROGS) $(TEST_EXTRA_BUILD)
test-run: test-build
	$(TEST_RUN) $(TEST_PROGS) $(TEST_SCRIPTS)
else
test-build test-run:
	@echo "the test suite runs in the CPU trees (the CUDA kernels run there under the harness): use 'make test', or BACKEND=cpu; on a GPU: make BACKEND=cuda gpu-tests"; exit 1
endif

ifeq ($(BACKEND),cuda)
gpu-tests: $(GPU_TEST_PROGS)
	@for t in $(GPU_TEST_PROGS); do echo "== $$t"; $$t || exit 1; done

# the bundle: a copy of everything the GPU check runs, its manifest, and the same packed into one
# file for the trip. The programs share most of their bytes (the kernels' code, ~30 MiB in each of
# a dozen), so xz's dictionary spans several of them: 192 MiB at preset 3, on every core in blocks
# of 176 MiB, packs 337 MiB into ~10.5 MiB in ~20 s on 2 cores (the default 8 MiB dictionary sees
# no program twice: 32 MiB in 60 s). Unpacking needs the dictionary's 192 MiB of memory.
gpu-bundle-files: $(PROGRAMS) $(GPU_TEST_PROGS) $(DEV_CUDA_PROGS)
	@[ "$(PORTABLE)$(NO_MPI)" = 11 ] || { echo "gpu-bundle-files is the inside of 'make gpu-bundle' (portable, MPI-free programs only)"; exit 1; }
	@rm -rf $(GPU_BUNDLE) $(GPU_BUNDLE).tar.xz $(GPU_BUNDLE).tar.xz.tmp && mkdir -p $(GPU_BUNDLE)
	@cp $^ $(GPU_BUNDLE)/
	@{ echo "llmc-ft GPU bundle from $(TREE) (ARCH=$(ARCH), NO_MPI=$(NO_MPI), sm $(CUDA_ARCHS)), $$(git describe --always --dirty 2>/dev/null || echo 'no git')"; \
	   echo "Run from the repository root (the tests read test/ref/, the programs data/gpt2/), with the"; \
	   echo "directories of libcudart.so.13, libcublasLt.so.13 and libnccl.so.2 (pip: nvidia-cuda-runtime,"; \
	   echo "nvidia-cublas, nvidia-nccl-cu13) on LD_LIBRARY_PATH."; \
	   (cd $(GPU_BUNDLE) && for f in $(notdir $^); do printf '%10d %s\n' $$(stat -c %s $$f) $$f; done); } > $(GPU_BUNDLE)/MANIFEST
	@tar -I 'xz -T0 --block-size=176MiB --lzma2=preset=3,dict=192MiB' -cf $(GPU_BUNDLE).tar.xz.tmp $(GPU_BUNDLE) && mv $(GPU_BUNDLE).tar.xz.tmp $(GPU_BUNDLE).tar.xz
	@echo "gpu-bundle: $(GPU_BUNDLE)/ ($$(du -sh $(GPU_BUNDLE) | cut -f1)), packed $(GPU_BUNDLE).tar.xz ($$(du -h $(GPU_BUNDLE).tar.xz | cut -f1)): $(notdir $^)"
else
gpu-tests:
	@$(MAKE) --no-print-directory BACKEND=cuda gpu-tests
endif
.PHONY: all test-build test-run gpu-tests gpu-bundle-files

clean:
	rm -rf build train_gpt2 train_lora generate convert data/prepare
	@# trees of the earlier layout
	rm -rf build-san build-tsan dev/cuda/build
.PHONY: clean
