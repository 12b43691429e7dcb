// Stochastic rounding fp32 -> bf16, deterministic given (seed, element index): the AdamW update of
// bf16 parameters writes its fp32 result through it, on the GPU (llmc/cuda/adamw.cu) and on the
// host for the optimizer offload (llmc/model/adamw_host.c). One definition for both, so that offloading
// the update changes where it runs, not a bit of its result. Header-only: C, C++, nvcc (host and
// device) and the CUDA-on-CPU harness.
//
//   sround_hash(seed, idx)   32 well-mixed random bits for element idx (a murmur-style finalizer
//                            of seed and both halves of idx)
//   sround_bf16(x, rnd)      the bf16 bit pattern of x rounded up with probability equal to the
//                            discarded fraction (16 random bits added below the bf16 mantissa,
//                            then truncated), so the expected value is x and small updates are
//                            not lost; Inf stays Inf, NaN stays NaN (quieted, as bf16_from_f32)
#ifndef LLMC_SROUND_H
#define LLMC_SROUND_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SROUND_HD __host__ __device__
#else
#define SROUND_HD   // plain C / C++, and the harness (which defines __host__ __device__ away)
#endif

SROUND_HD static inline uint32_t sround_hash(uint32_t seed, uint64_t idx) {
    uint32_t h = seed * 0x9E3779B1u ^ (uint32_t)idx ^ ((uint32_t)(idx >> 32) * 0x85EBCA77u);
    h ^= h >> 16; h *= 0x7FEB352Du;
    h ^= h >> 15; h *= 0x846CA68Bu;
    h ^= h >> 16;
    return h;
}

SROUND_HD static inline uint16_t sround_bf16(float x, uint32_t rnd) {
#ifdef __CUDA_ARCH__
    uint32_t u = __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
#endif
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u); // NaN: kept, quieted
    if ((u & 0x7F800000u) == 0x7F800000u) return (uint16_t)(u >> 16);            // Inf: exact
    // a finite value cannot carry out of 32 bits; past the largest finite it carries into Inf
    return (uint16_t)((u + (rnd & 0xFFFFu)) >> 16);
}

#endif // LLMC_SROUND_H
