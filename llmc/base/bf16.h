// fp32 <-> bf16 and fp16 <-> fp32 conversions on raw 16-bit patterns, for file I/O on the host
// (safetensors BF16/F16 tensors, llm.c v5 checkpoints). Header-only, C and C++.
// bf16 is the top half of an fp32; rounding is to nearest, ties to even (what PyTorch's
// tensor.to(torch.bfloat16) does), and NaNs stay NaN (quieted) instead of rounding to Inf.
#ifndef LLMC_BF16_H
#define LLMC_BF16_H

#include <stdint.h>
#include <string.h>

// an fp32 as its bit pattern and back
static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}
static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline float bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

static inline uint16_t bf16_from_f32(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u); // NaN: keep sign, quiet it
    // adding 0x7FFF plus the lowest kept bit rounds half-way cases to the even neighbour;
    // overflow past the largest finite value correctly carries into Inf
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// IEEE half (1 sign, 5 exponent, 10 mantissa bits) to fp32; exact for every input.
static inline float fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;
    uint32_t u;
    if (exp == 0x1F) {
        u = sign | 0x7F800000u | (man << 13);            // Inf / NaN (payload kept)
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (man << 13);   // normal: rebias 15 -> 127
    } else if (man == 0) {
        u = sign;                                        // +-0
    } else {
        // subnormal: value = man * 2^-24; normalize the mantissa
        int e = -1;
        do { man <<= 1; e++; } while ((man & 0x400u) == 0);
        man &= 0x3FFu;
        u = sign | ((uint32_t)(112 - e) << 23) | (man << 13);
    }
    return f32_from_bits(u);
}

// fp32 to IEEE half, round to nearest even, overflow to Inf, NaN kept NaN.
static inline uint16_t fp16_from_f32(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);   // rounds to >= 65520: Inf
    if (a >= 0x38800000u) {                                     // normal half (>= 2^-14)
        uint32_t r = a - 0x38000000u;                           // rebias 127 -> 15 (in place)
        r += 0xFFFu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a < 0x33000000u) return sign;                           // < 2^-25: rounds to zero
    // subnormal half: shift the full mantissa (with implicit bit) right, round to nearest even
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126u - e;                                  // 14..24
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

#endif // LLMC_BF16_H
