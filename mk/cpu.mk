# CPU backend build (llmc/cpu/*.c: fp32, OpenMP, OpenBLAS GEMMs, oneDNN for bf16 GEMMs): what
# BACKEND=cpu puts into the tree's library (mk/programs.mk), how its entry files compile and how
# its programs link (oneDNN: HOST_LIBS, mk/config.mk).
CPU_SRCS := $(filter-out llmc/cpu/gemm_refonly.c,$(wildcard llmc/cpu/*.c))

ifeq ($(BACKEND),cpu)
BACKEND_CFLAGS :=
BACKEND_OBJS := $(patsubst %.c,$(TREE)/obj/%.o,$(CPU_SRCS))

# The entry files are .cu (one name for both backends); on the CPU backend they are plain C.
$(TREE)/obj/%.entry.o: %.cu $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -x c -c $< -o $@

ENTRY_LINK = $(CC)
PROGRAM_LIBS = $(HOST_LIBS)
endif

# AdamW's loop calls sqrtf: without -fno-math-errno GCC keeps a branch to set errno for negative
# arguments and cannot vectorise the loop (measured: 200 ms -> 75 ms for 124M parameters). The
# file never reads errno. (Every tree that compiles the CPU ops: the CPU trees and the CUDA
# trees' reference library.)
$(TREE)/obj/llmc/cpu/adamw.o: CFLAGS += -fno-math-errno

# ---- the CPU backend's implementation as a library of its own: every object but dispatch.o, so
# only cpu_* names (llmc/cpu/ops_cpu.h). The CUDA op tests link it as their reference next to the
# CUDA backend (harness and GPU), in whichever tree they are built. It goes to GPU machines, which
# have no oneDNN: gemm_refonly.o stands in for gemm.o (the tests compare fp32 CPU ops only).
CPUREF_LIB := $(TREE)/libcpu_ops.a
CPUREF_OBJS := $(patsubst %.c,$(TREE)/obj/%.o,$(filter-out llmc/cpu/dispatch.c llmc/cpu/gemm.c,$(CPU_SRCS)) llmc/cpu/gemm_refonly.c)
$(CPUREF_LIB): $(CPUREF_OBJS)
	@rm -f $@
	ar rcs $@ $^
