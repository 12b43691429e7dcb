// Reading reference tensors (written by the dev/ generators with transformers, PEFT, ...) in tests.
#ifndef LLMC_TEST_REF_H
#define LLMC_TEST_REF_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "../llmc/check.h"
#include "../llmc/safetensors.h"
#include "../llmc/gpt2.h"
#include <string.h>

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

// Logits of the model's last forward (N rows), without the vocabulary padding (malloc'd).
static inline float* ref_logits_unpadded(GPT2* m, int N) {
    const int V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size;
    float* lp = (float*)mallocCheck((size_t)N * Vp * sizeof(float));
    float* out = (float*)mallocCheck((size_t)N * V * sizeof(float));
    ops_download_f32(lp, m->acts.logits, (size_t)N * Vp);
    for (int i = 0; i < N; i++) memcpy(out + (size_t)i * V, lp + (size_t)i * Vp, V * sizeof(float));
    free(lp);
    return out;
}

#endif // LLMC_TEST_REF_H
