// GPU selection and device collectives of the CUDA backend (implemented in llmc/cuda/device.cu;
// the CPU backend has no such step and does not call these). One process per GPU: rank r of a
// node uses GPU local_rank, and NCCL moves the device buffers between ranks (llmc/comm/comm.h).
#ifndef LLMC_DEVICE_H
#define LLMC_DEVICE_H

#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

// cudaSetDevice(c->local_rank): call before ops_init (the backend's streams and cuBLASLt handle
// belong to the current device). Fatal, with a hint, when the node has fewer GPUs than ranks.
void device_select(const Comm* c);
// comm_nccl_attach(c) (every rank, even a single one, so device collectives are NCCL calls on
// device memory). device_detach before comm_finalize. No-ops in the CUDA-on-CPU harness build,
// whose device memory is host memory (the host collectives serve it).
void device_attach(Comm* c);
void device_detach(Comm* c);
// The current GPU's free and total memory in bytes (cudaMemGetInfo; under the CUDA-on-CPU harness
// its fake device, CUDA_CPU_MEM_BYTES): returns 1. Returns 0 on the CPU backend, whose memory is
// the host's and is not checked ahead.
int device_memory(size_t* free_bytes, size_t* total_bytes);

#ifdef __cplusplus
}
#endif
#endif // LLMC_DEVICE_H
