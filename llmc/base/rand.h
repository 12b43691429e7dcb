// Deterministic random numbers for model initialization (and anything else that needs
// reproducible noise). Counter-based: value i of stream s under seed k is a pure function
// rand_u64(k, s, i), so results do not depend on thread count or on the order in which tensors
// are filled, and any slice of a tensor can be generated independently.
//
// Definition (keep stable: checkpoints built from scratch depend on it):
//   rand_u64(seed, stream, i) = mix(mix(seed ^ mix(stream + G)) + G * (i + 1))
//     with mix = the SplitMix64 finalizer and G = 0x9E3779B97F4A7C15 (SplitMix64's increment);
//   rand_uniform(seed, stream, i) = ((rand_u64 >> 11) + 0.5) * 2^-53, in (0, 1), never 0 or 1;
//   rand_normal(seed, stream, i): Box-Muller on the pair j = i / 2 with
//     u1 = rand_uniform(seed, stream, 2j), u2 = rand_uniform(seed, stream, 2j + 1),
//     r = sqrt(-2 ln u1); element 2j is r cos(2 pi u2), element 2j + 1 is r sin(2 pi u2).
//     rand_normal_pair computes both at once (what bulk fills use).
#ifndef LLMC_RAND_H
#define LLMC_RAND_H

#include <stdint.h>
#include <math.h>

#define RAND_GOLDEN 0x9E3779B97F4A7C15ull

// Usable from CUDA kernels too (the same numbers on every backend: dropout masks must agree).
#if defined(__CUDACC__)
#define RAND_HD __host__ __device__
#else
#define RAND_HD
#endif

RAND_HD static inline uint64_t rand_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

RAND_HD static inline uint64_t rand_u64(uint64_t seed, uint64_t stream, uint64_t i) {
    uint64_t key = rand_mix64(seed ^ rand_mix64(stream + RAND_GOLDEN));
    return rand_mix64(key + RAND_GOLDEN * (i + 1));
}

RAND_HD static inline double rand_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
    return ((double)(rand_u64(seed, stream, i) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

RAND_HD static inline void rand_normal_pair(uint64_t seed, uint64_t stream, uint64_t j, double* even, double* odd) {
    double u1 = rand_uniform(seed, stream, 2 * j);
    double u2 = rand_uniform(seed, stream, 2 * j + 1);
    double r = sqrt(-2.0 * log(u1));
    double a = 6.283185307179586476925 * u2;
    *even = r * cos(a);
    *odd = r * sin(a);
}

RAND_HD static inline double rand_normal(uint64_t seed, uint64_t stream, uint64_t i) {
    double e, o;
    rand_normal_pair(seed, stream, i >> 1, &e, &o);
    return (i & 1) ? o : e;
}

#endif // LLMC_RAND_H
