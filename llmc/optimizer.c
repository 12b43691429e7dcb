#include "optimizer.h"
#include "adamw_host.h"
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

// Moves one state array to pinned host memory.
static float* state_to_pinned(float* dev, size_t n) {
    float* h = (float*)ops_alloc_host((n ? n : 1) * sizeof(float));
    ops_to_host(h, dev, n * sizeof(float));
    ops_free(dev);
    return h;
}

void opt_offload(Optimizer* o) {
    const size_t n = o->end - o->begin;
    o->m = state_to_pinned(o->m, n);
    o->v = state_to_pinned(o->v, n);
    if (o->master) o->master = state_to_pinned(o->master, n);
    o->stage_g = ops_alloc_host((n ? n : 1) * sizeof(floatX));
    o->stage_p = ops_alloc_host((n ? n : 1) * sizeof(floatX));
    o->offload = 1;
}

void opt_state_to_host(const Optimizer* o, const float* state, float* host) {
    const size_t bytes = (o->end - o->begin) * sizeof(float);
    if (o->offload) memcpy(host, state, bytes);
    else ops_to_host(host, state, bytes);
}
void opt_state_from_host(const Optimizer* o, float* state, const float* host) {
    const size_t bytes = (o->end - o->begin) * sizeof(float);
    if (o->offload) memcpy(state, host, bytes);
    else ops_to_device(state, host, bytes);
}

void opt_free(Optimizer* o) {
    void (*release)(void*) = o->offload ? ops_free_host : ops_free;
    release(o->m); release(o->v);
    if (o->master) release(o->master);
    if (o->offload) { ops_free_host(o->stage_g); ops_free_host(o->stage_p); }
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

// The offloaded update of one segment's piece [b, e) (k: its place in this rank's range): the
// gradients over, AdamW on the CPU, the parameters back (fp32 parameters are also brought over:
// without a master copy they are the weights being updated).
static void opt_step_host(Optimizer* o, const TrainSeg* s, const floatX* g, size_t b, size_t e, size_t k,
                          float lr, float beta1, float beta2, float eps, float wd, float grad_scale, uint32_t seed) {
    const size_t n = e - b, X = sizeof(floatX);
    floatX* p = s->p + (b - s->offset);
    char* sg = (char*)o->stage_g + k * X;
    char* sp = (char*)o->stage_p + k * X;
    ops_to_host(sg, g, n * X);
    o->moved_down += n * X;
    if (!o->master) { ops_to_host(sp, p, n * X); o->moved_down += n * X; }
    adamw_host_update(sp, o->master ? o->master + k : NULL, sg, o->m + k, o->v + k, n, lr, beta1, beta2, eps, wd,
                      grad_scale, o->t, seed, ops_caps().floatx == OPS_BF16);
    ops_to_device(p, sp, n * X);
    o->moved_up += n * X;
}

void opt_step(Optimizer* o, float lr, float beta1, float beta2, float eps, float weight_decay,
              float grad_scale, uint32_t seed) {
    o->t++;
    o->moved_down = o->moved_up = 0;
    for (int i = 0; i < o->nseg; i++) {
        const TrainSeg* s = &o->segs[i];
        size_t b = s->offset > o->begin ? s->offset : o->begin;
        size_t e = s->offset + s->n < o->end ? s->offset + s->n : o->end;
        if (b >= e) continue;
        size_t k = b - o->begin;
        const floatX* g = o->gshard ? o->gshard + k : s->g + (b - s->offset);
        if (o->offload) {
            opt_step_host(o, s, g, b, e, k, lr, beta1, beta2, eps, s->weight_decay ? weight_decay : 0.0f, grad_scale, seed + (uint32_t)i);
            continue;
        }
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
