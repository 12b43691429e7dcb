# Build configuration: the options a user sets, the build tree they select, the compilers and
# their flags, the GPU architectures (the only place that names them) and the libraries.
#
# Options (each one changes objects, so each one is part of the tree's name and no two
# configurations ever share an object or a binary):
#   BACKEND=cpu|cuda   default: cuda where nvcc and a GPU are present, else cpu
#   ARCH=native        host CPU code for this machine (-march=native); any other value is a
#                      -march target for binaries that travel (e.g. ARCH=x86-64-v3), which also
#                      links OpenBLAS, libgomp and utf8proc statically
#   SAN=1              ASan+UBSan;  SAN=thread: TSan (used by `make test-tsan`)
#   NO_MPI=1           build without MPI even where mpicc is installed
# Tree: build/<backend>[-<arch>][-nompi][-san|-tsan], e.g. build/cpu, build/cpu-san,
# build/cuda-x86-64-v3-nompi. Everything a configuration builds lives under its tree.

CC ?= gcc
CXX ?= g++
NVCC ?= nvcc
CUDA_HOME ?= /usr/local/cuda
MPICC ?= mpicc

HAVE_NVCC := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo 1)
HAVE_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
ifeq ($(BACKEND),)
  BACKEND := $(if $(filter 11,$(HAVE_NVCC)$(HAVE_GPU)),cuda,cpu)
endif
ifeq ($(filter cpu cuda,$(BACKEND)),)
  $(error BACKEND=$(BACKEND): use BACKEND=cpu or BACKEND=cuda)
endif
ARCH ?= native
ifeq ($(filter-out 1 thread,$(SAN)),)
else
  $(error SAN=$(SAN): use SAN=1 (ASan+UBSan) or SAN=thread (TSan))
endif
PORTABLE := $(if $(filter native,$(ARCH)),,1)

# The GPU architectures every CUDA object is compiled for: SASS for each (sm_80 = A100, and by
# binary compatibility within Ampere/Ada the RTX 30 / A10 (sm_86) and RTX 40 / L4 (sm_89); sm_90 =
# H100/H200), and PTX of the newest, which the driver compiles at load time on GPUs newer than
# every SASS here (Blackwell: B200 sm_100, RTX 50 sm_120). docs/BUILD.md says why not more SASS.
CUDA_ARCHS := 80 90
GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
    -gencode arch=compute_$(lastword $(CUDA_ARCHS)),code=compute_$(lastword $(CUDA_ARCHS))
export CUDA_ARCHS

TREE := build/$(BACKEND)$(if $(PORTABLE),-$(ARCH))$(if $(filter 1,$(NO_MPI)),-nompi)$(if $(filter 1,$(SAN)),-san)$(if $(filter thread,$(SAN)),-tsan)
# the tree's library (mk/programs.mk)
LIB := $(TREE)/libllmc.a
# The shared library's folders, by layer, lowest first (docs/ARCHITECTURE.md; test/lint_layers.sh
# holds includes to this order); llmc/cpu and llmc/cuda are the backends.
LLMC_LAYERS := base text comm ops model dist run plan app
LLMC_DIRS := $(addprefix llmc/,$(LLMC_LAYERS))
export LLMC_LAYERS
# headers the objects depend on (coarsely: any change rebuilds every object of that kind)
LIB_HDRS := $(wildcard $(addsuffix /*.h,$(LLMC_DIRS)) llmc/cpu/*.h)
CUDA_HDRS := $(wildcard $(addsuffix /*.h,$(LLMC_DIRS)) llmc/cuda/*.cuh llmc/cuda/*.h)

# ---------------------------------------------------------------------------------------------
# flags
ifeq ($(SAN),1)
  OPT ?= -O1 -g -fno-omit-frame-pointer
  SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined
else ifeq ($(SAN),thread)
  OPT ?= -O1 -g -fno-omit-frame-pointer
  SANFLAGS := -fsanitize=thread
else
  OPT ?= -O3 -march=$(ARCH)
  SANFLAGS :=
endif
WARN := -Wall -Wextra -Wno-unused-parameter -Wno-unused-function
CFLAGS := -std=gnu11 $(WARN) -Werror=implicit-function-declaration -fopenmp -Illmc -I. $(OPT) $(SANFLAGS)
CXXFLAGS := -std=gnu++17 $(WARN) -fopenmp -Illmc -I. $(OPT) $(SANFLAGS)
NVCC_FLAGS := -std=c++17 -O3 -DLLMC_CUDA $(GENCODE) -Illmc -I. -Xcompiler -Wall,-Wextra,-Wno-unused-parameter

# ---------------------------------------------------------------------------------------------
# libraries
#
# MPI: with mpicc (OpenMPI; Debian libopenmpi-dev) every file is compiled with -DLLMC_HAVE_MPI and
# MPI's include path and every program links MPI; llmc/comm/comm_mpi.c is then the MPI implementation
# (otherwise an empty unit, and only the single-process one exists).
ifneq ($(NO_MPI),1)
  HAVE_MPI := $(shell command -v $(MPICC) >/dev/null 2>&1 && $(MPICC) --showme:compile >/dev/null 2>&1 && echo 1)
endif
ifeq ($(HAVE_MPI),1)
  MPI_CFLAGS := -DLLMC_HAVE_MPI $(shell $(MPICC) --showme:compile)
  MPI_LIBS := $(shell $(MPICC) --showme:link)
  CFLAGS += $(MPI_CFLAGS)
  CXXFLAGS += $(MPI_CFLAGS)
endif

# OpenBLAS (CPU backend GEMMs; the harness' emulated GEMMs), utf8proc (the tokenizer's Unicode
# categories; Debian libutf8proc-dev ships the .a, so it is always linked statically) and OpenMP.
# A portable build links OpenBLAS and libgomp statically too: the machines its binaries go to
# need not have them (Debian's libopenblas.a is a DYNAMIC_ARCH build: it picks its kernels at
# run time, so it travels), with the Fortran runtime its LAPACK needs (the PiSSA / OLoRA
# factorisations, llmc/model/lora_init.c: libgfortran.a and libquadmath.a of gfortran).
ifeq ($(PORTABLE),1)
  HOST_LIBS := -Wl,-Bstatic -lopenblas -lgfortran -lquadmath -lutf8proc -lgomp -Wl,-Bdynamic -lm -lpthread -ldl
  LDFLAGS := $(SANFLAGS)
else
  HOST_LIBS := -lopenblas -l:libutf8proc.a -lm -lpthread
  LDFLAGS := -fopenmp $(SANFLAGS)
endif
# oneDNN: the CPU backend's bf16 GEMMs (llmc/cpu/gemm.c; Debian libdnnl-dev ships no static
# library). --as-needed records it only in programs that call it (not the CUDA programs, whose
# GPU machines lack it).
HOST_LIBS += -Wl,--as-needed -ldnnl -Wl,--no-as-needed $(MPI_LIBS)

# CUDA runtime libraries of a CUDA build (libcuda, the driver, is loaded by the runtime when it
# runs: no GPU or driver is needed to link).
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcublasLt -lcudart -lnccl
HAVE_CUDA_HEADERS := $(shell test -f $(CUDA_HOME)/include/cuda_runtime.h && test -f $(CUDA_HOME)/include/cuda_bf16.h && echo 1)
