// Reading reference tensors (written by the dev/ generators with transformers, PEFT, ...) in tests.
#ifndef LLMC_TEST_REF_H
#define LLMC_TEST_REF_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "../llmc/check.h"
#include "../llmc/safetensors.h"

// The tensor `name` of a reference file as fp32 (malloc'd; its element count in *n).
static inline float* ref_read(StFile* f, const char* name, size_t* n) {
    const StTensor* t = st_find(f, name);
    if (!t) { fprintf(stderr, "reference tensor %s missing in %s\n", name, f->path); exit(1); }
    float* buf = (float*)mallocCheck(t->numel * sizeof(float));
    st_read_f32(f, t, buf);
    if (n) *n = t->numel;
    return buf;
}

// Largest magnitude, to scale absolute tolerances to the tensor at hand.
static inline double ref_max_abs(const float* x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

#endif // LLMC_TEST_REF_H
