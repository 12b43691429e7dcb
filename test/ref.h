// Reading reference tensors (written by the dev/ generators with transformers, PEFT, ...) in tests.
#ifndef LLMC_TEST_REF_H
#define LLMC_TEST_REF_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "../llmc/base/check.h"
#include "../llmc/base/safetensors.h"
#include "../llmc/model/gpt2.h"
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

// The batch of a reference file: input_ids and targets (B x T, malloc'd); returns the number of
// targets that count (>= 0).
typedef struct { int B, T; int* inputs; int* targets; long valid; } RefBatch;
static inline RefBatch ref_read_batch(StFile* f) {
    RefBatch b;
    const StTensor* ti = st_find(f, "input_ids");
    const StTensor* tt = st_find(f, "targets");
    if (!ti || ti->ndim != 2 || !tt || tt->numel != ti->numel) {
        fprintf(stderr, "%s: input_ids [B, T] and targets of the same size are required\n", f->path);
        exit(1);
    }
    b.B = (int)ti->shape[0]; b.T = (int)ti->shape[1];
    b.inputs = (int*)mallocCheck(ti->numel * sizeof(int));
    b.targets = (int*)mallocCheck(ti->numel * sizeof(int));
    st_read_i32(f, ti, b.inputs);
    st_read_i32(f, tt, b.targets);
    b.valid = 0;
    for (size_t i = 0; i < ti->numel; i++) b.valid += b.targets[i] >= 0;
    return b;
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
