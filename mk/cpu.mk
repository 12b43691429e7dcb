# CPU backend build (llmc/cpu/*.c: fp32, OpenMP, OpenBLAS GEMMs): what BACKEND=cpu puts into the
# tree's library (mk/programs.mk), how its entry files compile and how its programs link.
CPU_SRCS := $(wildcard llmc/cpu/*.c)

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

# ---- the CPU backend's implementation as a library of its own: every object but dispatch.o, so
# only cpu_* names (llmc/cpu/ops_cpu.h). The CUDA op tests link it as their reference next to the
# CUDA backend (harness and GPU), in whichever tree they are built.
CPUREF_LIB := $(TREE)/libcpu_ops.a
CPUREF_OBJS := $(patsubst %.c,$(TREE)/obj/%.o,$(filter-out llmc/cpu/dispatch.c,$(CPU_SRCS)))
$(CPUREF_LIB): $(CPUREF_OBJS)
	@rm -f $@
	ar rcs $@ $^
