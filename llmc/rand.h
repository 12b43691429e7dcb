// Deterministic random numbers for model initialization (and anything else that needs
// reproducible noise). Counter-based: value i of stream s under seed k is a pure function
// rand_u64(k, s, i), so results do not depend on thread count or on the order in which tensors
// are filled, and any slice of a tensor can be generated independently.
//
// Definition (keep stable: checkpoints built from scratch depend on it):
//   rand_u64(seed, stream, i) = mix(mix(seed ^ mix(stream + G)) + G * (i + 1))
//     with mix = the SplitMix64 finalizer and G = 0x9E3779B97F4A7C15 (SplitMix64's increment);
//   rand_uniform(seed, stream, i) = ((rand_u64 >> 11) + 0.5) * 2^-53, in (0, 1), never 0 or 1;
//   rand_normal(seed, stream, i) = sqrt(-2 ln u1) * cos(2 pi u2), Box-Muller with
//     u1 = rand_uniform(seed, stream, 2i), u2 = rand_uniform(seed, stream, 2i + 1).
#ifndef LLMC_RAND_H
#define LLMC_RAND_H

#include <stdint.h>
#include <math.h>

#define RAND_GOLDEN 0x9E3779B97F4A7C15ull

static inline uint64_t rand_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rand_u64(uint64_t seed, uint64_t stream, uint64_t i) {
    uint64_t key = rand_mix64(seed ^ rand_mix64(stream + RAND_GOLDEN));
    return rand_mix64(key + RAND_GOLDEN * (i + 1));
}

static inline double rand_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
    return ((double)(rand_u64(seed, stream, i) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static inline double rand_normal(uint64_t seed, uint64_t stream, uint64_t i) {
    double u1 = rand_uniform(seed, stream, 2 * i);
    double u2 = rand_uniform(seed, stream, 2 * i + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

#endif // LLMC_RAND_H
