// AdamW on the host, for the optimizer offload (--offload-optimizer, llmc/model/optimizer.h): the state
// (m, v and the fp32 master weights) stays in host memory and the update runs on the CPU cores
// (OpenMP threads, a loop the compiler vectorizes), with the arithmetic of the backend's own
// update, so that offloading changes where the update runs, not its result:
//   bf16 parameters (CUDA): as llmc/cuda/adamw.cu: bias corrections 1 - powf(beta, t) in fp32,
//     the master weight updated and written back to the bf16 parameter with the stochastic
//     rounding of the kernel (llmc/base/sround.h: the same hash of (seed, element index));
//   fp32 parameters (CPU): as llmc/cpu/adamw.c: bias corrections from pow in double, the parameter
//     itself updated, nothing rounded.
#ifndef LLMC_ADAMW_HOST_H
#define LLMC_ADAMW_HOST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// params / grads: n host elements of the backend's floatX (bf16 = 1: 16-bit patterns, master
// required; 0: fp32, master NULL). Element i of the call draws its rounding from (seed, idx0 + i):
// idx0 = 0 for the elements of one backend update call, its offset there for a piece of them.
void adamw_host_update(void* params, float* master, const void* grads, float* m, float* v, size_t n,
                       float lr, float beta1, float beta2, float eps, float weight_decay,
                       float grad_scale, int t, uint32_t seed, size_t idx0, int bf16);

#ifdef __cplusplus
}
#endif
#endif // LLMC_ADAMW_HOST_H
