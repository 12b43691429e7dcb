// Vectorisable exp and GELU for the CPU backend's hot loops (softmax in attention and the
// classifier, GELU). libm's expf/tanhf are scalar calls that stop GCC from vectorising a loop
// (libmvec is only used under -ffast-math), and they dominate the classifier and GELU time.
// These are branch-free straight-line code, so `#pragma omp simd` loops calling them compile to
// AVX-512/AVX2/NEON. Accuracy: vm_expf within ~2 ulp of expf over its range.
#ifndef LLMC_CPU_VECMATH_H
#define LLMC_CPU_VECMATH_H

#include <stdint.h>
#include <string.h>

// exp(x) for any float x: 0 below -87.3 (where expf goes subnormal), exp(88) = 1.65e38
// above 88. Range reduction x = n ln2 + r, |r| <= ln2/2, then a degree-7 polynomial for e^r (the
// classic Cephes coefficients) and 2^n built directly in the exponent bits.
static inline float vm_expf(float x) {
    const float lo = -87.3f, hi = 88.0f;   // keeps 2^n a normal float
    float xc = x > hi ? hi : x;
    xc = xc >= lo ? xc : lo;   // NaN -> lo, so the integer conversion below never sees a NaN
    // round-to-nearest via the 1.5*2^23 trick (exact without -ffast-math reassociation)
    const float shifter = 12582912.0f;
    float n = (xc * 1.44269504088896341f + shifter) - shifter;
    float r = xc - n * 0.693359375f;      // ln2 split in a high part exact in float ...
    r = r - n * -2.12194440e-4f;          // ... and the low remainder
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;   // n in [-126, 127]: a normal 2^n
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    y = y * scale;
    y = x < lo ? 0.0f : y;
    return x == x ? y : x;   // NaN in, NaN out
}

#define VM_GELU_SCALE 0.7978845608028654f   // sqrt(2/pi)
#define VM_GELU_K 0.044715f

// GELU, tanh approximation ("gelu_new"): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// Written through the identity 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)), which
// has no cancellation for negative x (1 + tanh(u) -> 0 would lose all relative precision).
static inline float vm_gelu(float x) {
    float u = VM_GELU_SCALE * (x + VM_GELU_K * x * x * x);
    return x / (1.0f + vm_expf(-2.0f * u));
}

// d gelu(x) / dx = s + 2 x s (1 - s) u'(x), s = sigmoid(2u), with s (1 - s) = E / (1 + E)^2,
// E = exp(-2u) (again no 1 - s cancellation).
static inline float vm_gelu_grad(float x) {
    float x2 = x * x;
    float u = VM_GELU_SCALE * (x + VM_GELU_K * x2 * x);
    float E = vm_expf(-2.0f * u);
    float s = 1.0f / (1.0f + E);
    float ds = E * s * s;   // 0 when E overflows to huge: the limit is 0 as well
    return s + 2.0f * x * ds * VM_GELU_SCALE * (1.0f + 3.0f * VM_GELU_K * x2);
}

#endif // LLMC_CPU_VECMATH_H
