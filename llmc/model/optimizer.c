#include "model/optimizer.h"
#include "model/adamw_host.h"
#include "base/check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void opt_init(Optimizer* o, const TrainSeg* segs, int nseg, size_t begin, size_t end) {
    memset(o, 0, sizeof(*o));
    o->segs = (TrainSeg*)mallocCheck((size_t)nseg * sizeof(TrainSeg));
    o->nseg = nseg;
    size_t off = 0;
    for (int i = 0; i < nseg; i++) {
        if (!(segs[i].lr_scale > 0.0f)) fatal("this is a bug in llmc", "optimizer segment %s has learning-rate scale %g", segs[i].name, segs[i].lr_scale);
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
    o->offload_chunk = OPT_OFFLOAD_CHUNK;
    const char* t = getenv("LLMC_OFFLOAD_TRACE");
    if (t && strcmp(t, "1") == 0) {
        o->trace_cap = 4096;
        o->trace = (char*)mallocCheck(o->trace_cap);
    }
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
    free(o->trace);
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

// ---------------------------------------------------------------------------------------------
// offload: the range in pieces, pipelined (opt_offload)

typedef struct {
    int seg;            // segment; -1 before the first piece
    size_t b, e;        // [b, e) in the flat space, inside the segment and this rank's range
} OffPiece;

typedef struct {
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    uint32_t seed;
} AdamwArgs;

// The piece after *p (p->seg = -1: the first): the rest of p's segment, or the next segment's
// part of the range, at most offload_chunk elements. 0 when none is left.
static int offload_next(const Optimizer* o, OffPiece* p) {
    size_t from = p->seg < 0 ? 0 : p->e;
    for (int i = p->seg < 0 ? 0 : p->seg; i < o->nseg; i++, from = 0) {
        const TrainSeg* s = &o->segs[i];
        size_t b = s->offset > o->begin ? s->offset : o->begin, e = s->offset + s->n < o->end ? s->offset + s->n : o->end;
        if (from > b) b = from;
        if (b >= e) continue;
        p->seg = i; p->b = b;
        p->e = e - b > o->offload_chunk ? b + o->offload_chunk : e;
        return 1;
    }
    return 0;
}

// Where the backend's update of segment s starts (its first element in this rank's range): the
// stochastic rounding counts elements from there (adamw_update's element index).
static size_t offload_seg_begin(const Optimizer* o, const TrainSeg* s) { return s->offset > o->begin ? s->offset : o->begin; }

static void offload_trace(Optimizer* o, char what, int k) {
    if (!o->trace) return;
    if (o->trace_len + 24 > o->trace_cap) {
        o->trace_cap *= 2;
        char* grown = (char*)realloc(o->trace, o->trace_cap);
        if (!grown) fatal(NULL, "out of memory for the offload trace (%zu bytes)", o->trace_cap);
        o->trace = grown;
    }
    o->trace_len += (size_t)snprintf(o->trace + o->trace_len, 24, " %c%d", what, k);
}

// Piece k's gradients (and fp32 parameters: without a master copy they are the weights being
// updated) onto the copy stream, to the host; returns the mark that says they have arrived.
static int offload_down(Optimizer* o, const OffPiece* p, int k) {
    const TrainSeg* s = &o->segs[p->seg];
    const size_t n = p->e - p->b, at = (p->b - o->begin) * sizeof(floatX), X = sizeof(floatX);
    const floatX* g = o->gshard ? o->gshard + (p->b - o->begin) : s->g + (p->b - s->offset);
    ops_copy_to_host((char*)o->stage_g + at, g, n * X);
    o->moved_down += n * X;
    if (!o->master) { ops_copy_to_host((char*)o->stage_p + at, s->p + (p->b - s->offset), n * X); o->moved_down += n * X; }
    offload_trace(o, 'D', k);
    return ops_copy_mark();
}

// Piece k on the CPU (its copies have arrived), then its parameters back onto the copy stream.
static void offload_update(Optimizer* o, const OffPiece* p, int k, const AdamwArgs* a) {
    const TrainSeg* s = &o->segs[p->seg];
    const size_t n = p->e - p->b, i = p->b - o->begin, X = sizeof(floatX);
    char* sp = (char*)o->stage_p + i * X;
    adamw_host_update(sp, o->master ? o->master + i : NULL, (char*)o->stage_g + i * X, o->m + i, o->v + i, n, a->lr * s->lr_scale, a->beta1,
                      a->beta2, a->eps, s->weight_decay ? a->weight_decay : 0.0f, a->grad_scale, o->t,
                      a->seed + (uint32_t)p->seg, p->b - offload_seg_begin(o, s), ops_caps().floatx == OPS_BF16);
    offload_trace(o, 'U', k);
    ops_copy_to_device(s->p + (p->b - s->offset), sp, n * X);
    o->moved_up += n * X;
    offload_trace(o, 'u', k);
}

// The copies down run one piece ahead of the updates: piece k + 1's is issued before piece k's
// update starts, so while the CPU updates piece k, piece k + 1 comes down and piece k - 1 goes up
// (one copy stream: they run in issue order). Each piece has its own place in the staging
// buffers, so nothing waits for a buffer to come free.
static void opt_step_offload(Optimizer* o, const AdamwArgs* a) {
    OffPiece ring[3], last = { -1, 0, 0 };
    int mark[3], issued = 0, more = 1;
    o->trace_len = 0;
    ops_copy_begin(); // after backward's gradients
    while (issued < 2 && (more = offload_next(o, &last))) { ring[issued] = last; mark[issued] = offload_down(o, &last, issued); issued++; }
    for (int k = 0; k < issued; k++) {
        ops_copy_wait(mark[k % 3]);
        offload_update(o, &ring[k % 3], k, a);
        if (more && (more = offload_next(o, &last))) { ring[issued % 3] = last; mark[issued % 3] = offload_down(o, &last, issued); issued++; }
    }
    ops_copy_end(); // the next forward reads the parameters
    o->pieces = issued;
    if (o->trace) printf("offload trace step %d:%s\n", o->t, o->trace);
}

void opt_step(Optimizer* o, float lr, float beta1, float beta2, float eps, float weight_decay,
              float grad_scale, uint32_t seed) {
    o->t++;
    o->moved_down = o->moved_up = 0;
    if (o->offload) {
        const AdamwArgs a = { lr, beta1, beta2, eps, weight_decay, grad_scale, seed };
        opt_step_offload(o, &a);
        return;
    }
    for (int i = 0; i < o->nseg; i++) {
        const TrainSeg* s = &o->segs[i];
        size_t b = s->offset > o->begin ? s->offset : o->begin;
        size_t e = s->offset + s->n < o->end ? s->offset + s->n : o->end;
        if (b >= e) continue;
        size_t k = b - o->begin;
        const floatX* g = o->gshard ? o->gshard + k : s->g + (b - s->offset);
        adamw_update(s->p + (b - s->offset), o->master ? o->master + k : NULL, g,
                     o->m + k, o->v + k, e - b, lr * s->lr_scale, beta1, beta2, eps,
                     s->weight_decay ? weight_decay : 0.0f, grad_scale, o->t, seed + (uint32_t)i);
    }
}

size_t opt_state_bytes_for(size_t n, int master) { return n * sizeof(float) * (master ? 3 : 2); }
size_t opt_state_bytes(const Optimizer* o) { return opt_state_bytes_for(o->end - o->begin, o->master != NULL); }

float opt_clip_scale(double norm, float max_norm) {
    if (max_norm <= 0.0f) return 1.0f;
    double coef = (double)max_norm / (norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}
