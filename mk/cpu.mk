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

# ---- the CPU backend as the reference of the CUDA op tests (harness and GPU), in any tree:
# $(CPUREF_LIB) holds the CPU backend compiled for fp32 with every op symbol renamed to cpu_<name>
# (objcopy; the names come from llmc/ops.h through mk/ops_names.sh, which also writes the header
# $(CPUREF_NAMES_H) that declares them for the tests).
CPUREF_DIR := $(TREE)/cpuref
CPUREF_LIB := $(CPUREF_DIR)/libcpuref.a
CPUREF_NAMES_H := $(CPUREF_DIR)/ops_cpu_names.h
CPUREF_OBJS := $(patsubst %.c,$(CPUREF_DIR)/%.o,$(CPU_SRCS))

$(CPUREF_DIR)/syms.txt: llmc/ops.h mk/ops_names.sh
	@mkdir -p $(dir $@)
	@bash mk/ops_names.sh llmc/ops.h --syms > $@.tmp && mv $@.tmp $@
$(CPUREF_NAMES_H): llmc/ops.h mk/ops_names.sh
	@mkdir -p $(dir $@)
	@bash mk/ops_names.sh llmc/ops.h --header > $@.tmp && mv $@.tmp $@
$(CPUREF_DIR)/%.o: %.c $(LIB_HDRS) $(CPUREF_DIR)/syms.txt
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@.raw.o
	objcopy --redefine-syms=$(CPUREF_DIR)/syms.txt $@.raw.o $@
$(CPUREF_LIB): $(CPUREF_OBJS)
	@rm -f $@
	ar rcs $@ $^
