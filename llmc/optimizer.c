#include "optimizer.h"
#include "check.h"
#include <string.h>

void opt_init(Optimizer* o, const TrainSeg* segs, int nseg, size_t begin, size_t end) {
    memset(o, 0, sizeof(*o));
    o->segs = (TrainSeg*)mallocCheck((size_t)nseg * sizeof(TrainSeg));
    o->nseg = nseg;
    size_t off = 0;
    for (int i = 0; i < nseg; i++) {
        o->segs[i] = segs[i];
        o->segs[i].offset = off;
        off += segs[i].n;
    }
    o->total = off;
    if (end > off) end = off;
    assertCheck(begin <= end);
    o->begin = begin; o->end = end;
    size_t n = end - begin;
    o->m = (float*)ops_alloc(n * sizeof(float));
    o->v = (float*)ops_alloc(n * sizeof(float));
    ops_zero(o->m, n * sizeof(float));
    ops_zero(o->v, n * sizeof(float));
    if (!ops_caps().master_weights) return;
    // bf16 parameters: keep fp32 master weights for this rank's range.
    o->master = (float*)ops_alloc(n * sizeof(float));
    for (int i = 0; i < nseg; i++) {
        const TrainSeg* s = &o->segs[i];
        size_t b = s->offset > begin ? s->offset : begin, e = s->offset + s->n < end ? s->offset + s->n : end;
        if (b >= e) continue;
        float* tmp = (float*)mallocCheck((e - b) * sizeof(float));
        ops_download_f32(tmp, s->p + (b - s->offset), e - b);
        ops_to_device(o->master + (b - begin), tmp, (e - b) * sizeof(float));
        free(tmp);
    }
}

void opt_free(Optimizer* o) {
    ops_free(o->m); ops_free(o->v);
    if (o->master) ops_free(o->master);
    free(o->segs);
    memset(o, 0, sizeof(*o));
}

void opt_grad_sumsq_acc(const Optimizer* o, size_t begin, size_t end, double* acc) {
    if (o->gshard) { sum_squares_acc(acc, o->gshard, o->end - o->begin); return; }
    for (int i = 0; i < o->nseg; i++) {
        const TrainSeg* g = &o->segs[i];
        size_t b = g->offset > begin ? g->offset : begin, e = g->offset + g->n < end ? g->offset + g->n : end;
        if (b < e) sum_squares_acc(acc, g->g + (b - g->offset), e - b);
    }
}

double opt_grad_sumsq(const Optimizer* o, size_t begin, size_t end) {
    double* acc = (double*)ops_alloc(sizeof(double));
    ops_zero(acc, sizeof(double));
    opt_grad_sumsq_acc(o, begin, end, acc);
    double s = 0.0;
    ops_to_host(&s, acc, sizeof(double));
    ops_free(acc);
    return s;
}

void opt_step(Optimizer* o, float lr, float beta1, float beta2, float eps, float weight_decay,
              float grad_scale, uint32_t seed) {
    o->t++;
    for (int i = 0; i < o->nseg; i++) {
        const TrainSeg* s = &o->segs[i];
        size_t b = s->offset > o->begin ? s->offset : o->begin;
        size_t e = s->offset + s->n < o->end ? s->offset + s->n : o->end;
        if (b >= e) continue;
        size_t k = b - o->begin;
        const floatX* g = o->gshard ? o->gshard + k : s->g + (b - s->offset);
        adamw_update(s->p + (b - s->offset), o->master ? o->master + k : NULL, g,
                     o->m + k, o->v + k, e - b, lr, beta1, beta2, eps,
                     s->weight_decay ? weight_decay : 0.0f, grad_scale, o->t, seed + (uint32_t)i);
    }
}

size_t opt_state_bytes(const Optimizer* o) {
    size_t n = o->end - o->begin;
    return n * sizeof(float) * (o->master ? 3 : 2);
}

float opt_clip_scale(double norm, float max_norm) {
    if (max_norm <= 0.0f) return 1.0f;
    double coef = (double)max_norm / (norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}
