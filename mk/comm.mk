# Communication layer (llmc/comm*.c) and ZeRO sharding: MPI detection, NCCL compile check, tests.
#
# MPI: when `mpicc` (OpenMPI; Debian libopenmpi-dev) is found, every C file is compiled with
# -DLLMC_HAVE_MPI and MPI's include path, and every program links MPI; llmc/comm_mpi.c is then the
# MPI implementation (otherwise it compiles to an empty unit and only the single-process one
# exists). `make NO_MPI=1` builds without MPI even when it is installed (use a separate clone or
# `make clean` first: objects do not track the flag).
MPICC ?= mpicc
ifneq ($(NO_MPI),1)
  HAVE_MPI := $(shell command -v $(MPICC) >/dev/null 2>&1 && $(MPICC) --showme:compile >/dev/null 2>&1 && echo 1)
endif
ifeq ($(HAVE_MPI),1)
  MPI_CFLAGS := $(shell $(MPICC) --showme:compile)
  MPI_LIBS := $(shell $(MPICC) --showme:link)
  CFLAGS += -DLLMC_HAVE_MPI $(MPI_CFLAGS)
  CXXFLAGS += -DLLMC_HAVE_MPI $(MPI_CFLAGS)
  EXTRA_LIBS += $(MPI_LIBS)
endif

# test/test_comm.c is built and run (as one process) by the generic test rules; test_comm.sh runs
# it again under mpirun with 1, 2 and 4 ranks, plus the failure and watchdog tests;
# test_watchdog.sh stops trainer ranks; test_multihost.sh runs across network-namespace hosts.
TEST_SCRIPTS += test/test_comm.sh test/test_watchdog.sh test/test_multihost.sh

# NCCL implementation (CUDA builds). Compile check, usable without a GPU:
#   make comm-nccl-check
# The CUDA build adds $(COMM_NCCL_OBJ) to the objects of its binaries and $(COMM_NCCL_LIBS) (plus
# -lcudart) to their link line, and the trainer calls comm_nccl_attach after cudaSetDevice.
# nccl.h / libnccl.so come with the CUDA toolkit here (/usr/local/cuda/include, lib64).
COMM_NCCL_OBJ := $(BUILD)/llmc/cuda/comm_nccl.o
COMM_NCCL_LIBS := -lnccl
NVCC_COMM_FLAGS ?= -std=c++17 -Werror all-warnings -Xcompiler -Wall,-Wextra -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -Illmc -I.
$(COMM_NCCL_OBJ): llmc/cuda/comm_nccl.cu llmc/comm.h llmc/comm_internal.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_COMM_FLAGS) -c $< -o $@
comm-nccl-check: $(COMM_NCCL_OBJ)
.PHONY: comm-nccl-check
