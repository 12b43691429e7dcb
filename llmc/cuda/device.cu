// GPU selection and NCCL attachment (llmc/ops/device.h).
#include "common.cuh"
#include "ops/device.h"
#include "ops_cuda.h"

extern "C" void cuda_device_select(const Comm* c) {
#ifdef LLMC_CUDA_EMULATED
    (void)c;
#else
    const int ndev = ops_device_count();
    if (c->local_rank >= ndev)
        fatal("start at most one rank per GPU (mpirun -np <number of GPUs per node>), or limit the visible GPUs with CUDA_VISIBLE_DEVICES",
              "rank %d is local rank %d of its node, which has only %d GPU(s)", c->rank, c->local_rank, ndev);
    cudaCheck(cudaSetDevice(c->local_rank));
#endif
}

extern "C" void cuda_device_attach(Comm* c) {
#ifdef LLMC_CUDA_EMULATED
    (void)c;
#else
    comm_nccl_attach(c);
#endif
}

extern "C" void cuda_device_detach(Comm* c) {
#ifdef LLMC_CUDA_EMULATED
    (void)c;
#else
    comm_nccl_detach(c);
#endif
}

extern "C" int cuda_device_memory(size_t* free_bytes, size_t* total_bytes) {
    cudaCheck(cudaMemGetInfo(free_bytes, total_bytes));
    return 1;
}
