#include "dist/fsdp.h"
#include "base/check.h"
#include "dist/zero.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The collectives move the parameters' own dtype: bf16 on the CUDA backend, fp32 on the CPU.
#define FSDP_DTYPE (sizeof(floatX) == 2 ? COMM_BF16 : COMM_F32)

static int fsdp_head(const Fsdp* f) { return f->nunits - 1; }

// The slot a unit has to itself (-1: none, it takes turns in the shared ones): the head's is the
// last slot, and with keep every unit's is its own index (the head's then too).
static int home_slot(const Fsdp* f, int u) { return f->keep ? u : u == fsdp_head(f) ? f->nslots - 1 : -1; }

floatX* fsdp_piece(const Fsdp* f, int u) {
    const int s = home_slot(f, u);
    return s >= 0 ? f->slot[s] + (size_t)f->rank * f->piece[u] : f->pshard + f->ploc[u];
}

// A unit padded to a multiple of world * 64 elements (or bytes), so that every piece is aligned.
static size_t pad_unit(size_t n, int world, size_t align) {
    const size_t unit = (size_t)world * align;
    return (n + unit - 1) / unit * unit;
}

void fsdp_sizes(const size_t* unit_n, int nunits, int world, int keep, FsdpSizes* o) {
    memset(o, 0, sizeof(*o));
    const int h = nunits - 1;
    size_t all = 0;
    for (int u = 0; u < nunits; u++) {
        const size_t padded = pad_unit(unit_n[u], world, ZERO_ALIGN_DEFAULT);
        o->shard_n += padded / (size_t)world;
        if (!keep && u != h) o->pshard_n += padded / (size_t)world;
        if (padded > o->max_unit) o->max_unit = padded;
        if (u < h && padded > o->max_block) o->max_block = padded;
        all += padded;
    }
    const size_t head = pad_unit(unit_n[h], world, ZERO_ALIGN_DEFAULT);
    o->slots_n = keep ? all : FSDP_MAX_SLOTS_SHARED * o->max_block + head;
    o->buckets_n = 2 * o->max_block + head;
}

static void trace_event(Fsdp* f, char what, int unit) {
    if (!f->trace) return;
    if (f->trace_len + 16 > f->trace_cap) {
        f->trace_cap = f->trace_cap ? 2 * f->trace_cap : 4096;
        char* grown = (char*)realloc(f->trace_buf, f->trace_cap);
        if (!grown) fatal(NULL, "out of memory for the FSDP trace (%zu bytes)", f->trace_cap);
        f->trace_buf = grown;
    }
    if (unit == fsdp_head(f)) f->trace_len += (size_t)snprintf(f->trace_buf + f->trace_len, 16, " %cH", what);
    else f->trace_len += (size_t)snprintf(f->trace_buf + f->trace_len, 16, " %c%d", what, unit);
}

// ----------------------------------------------------------------------------
// gather slots

static void start_gather(Fsdp* f, int u, int s) {
    if (f->slot_unit[s] >= 0) f->unit_slot[f->slot_unit[s]] = -1; // evict
    f->slot_unit[s] = u;
    f->unit_slot[u] = s;
    // (in place when the slot is the unit's own: its block `rank` is this rank's piece)
    f->slot_req[s] = comm_dev_iallgather(f->comm, fsdp_piece(f, u), f->slot[s], f->piece[u], FSDP_DTYPE, NULL);
    f->slot_pending[s] = 1;
    f->n_gather += 1 + fsdp_nf4_gather(f, u, s);
    trace_event(f, 'G', u);
}

// A slot for unit u: its own (the head's; every unit's with --zero3-keep), else the least recently
// used shared one that is neither computing nor being gathered into; -1 when there is none.
static int free_slot(const Fsdp* f, int u) {
    if (home_slot(f, u) >= 0) return home_slot(f, u);
    int best = -1;
    for (int s = 0; s < FSDP_MAX_SLOTS_SHARED; s++)
        if (!f->slot_busy[s] && !f->slot_pending[s] && (best < 0 || f->slot_used[s] < f->slot_used[best])) best = s;
    return best;
}

static void unit_prefetch(void* ctx, int u) {
    Fsdp* f = (Fsdp*)ctx;
    if (f->unit_slot[u] >= 0) return; // there, or on its way
    const int s = free_slot(f, u);
    if (s >= 0) start_gather(f, u, s);
}

static void unit_need(void* ctx, int u) {
    Fsdp* f = (Fsdp*)ctx;
    int s = f->unit_slot[u];
    if (s < 0) {
        s = free_slot(f, u);
        if (s < 0) fatal("this is a bug in llmc", "FSDP: no free gather buffer for unit %d", u);
        start_gather(f, u, s);
    }
    if (f->slot_pending[s]) {
        comm_wait(f->comm, &f->slot_req[s]);
        fsdp_nf4_wait(f, s);
        f->slot_pending[s] = 0;
        trace_event(f, 'W', u);
    }
    f->slot_busy[s] = 1;
    f->slot_used[s] = ++f->tick;
    gpt2_bind_unit(f->model, u, f->slot[s]);
    fsdp_nf4_bind(f, u, s);
}

static void unit_release(void* ctx, int u) {
    Fsdp* f = (Fsdp*)ctx;
    const int s = f->unit_slot[u];
    if (s >= 0) f->slot_busy[s] = 0;
    trace_event(f, 'R', u);
}

static void slots_invalidate(Fsdp* f) {
    for (int s = 0; s < f->nslots; s++) {
        if (f->slot_pending[s]) { comm_wait(f->comm, &f->slot_req[s]); fsdp_nf4_wait(f, s); f->slot_pending[s] = 0; }
        f->slot_unit[s] = -1; f->slot_busy[s] = 0;
    }
    for (int u = 0; u < f->nunits; u++) f->unit_slot[u] = -1;
}

// ----------------------------------------------------------------------------
// gradients

// The reduce-scatter of layer bucket k is complete: add this rank's piece (the bucket's block
// `rank`: in place), empty the bucket.
static void layer_finish(Fsdp* f, int k) {
    const int u = f->lreq_unit[k];
    if (u < 0) return;
    comm_wait(f->comm, &f->lreq[k]);
    add_inplace(f->gshard + f->loc[u], f->lbucket[k] + (size_t)f->rank * f->piece[u], f->piece[u]);
    ops_zero(f->lbucket[k], f->piece[u] * (size_t)f->world * sizeof(floatX));
    f->lreq_unit[k] = -1;
}

static void fsdp_bucket_done(void* ctx, int bucket) {
    Fsdp* f = (Fsdp*)ctx;
    const int L = f->nunits - 1;
    if (bucket < L) {
        const int u = L - 1 - bucket, k = f->lcur;
        f->lreq[k] = comm_dev_ireduce_scatter_sum(f->comm, f->lbucket[k], f->lbucket[k] + (size_t)f->rank * f->piece[u],
                                                  f->piece[u], FSDP_DTYPE, NULL);
        f->lreq_unit[k] = u;
        f->n_rs++;
        trace_event(f, 'S', u);
        // the next block writes into the other bucket, once its last reduce-scatter is done
        f->lcur ^= 1;
        layer_finish(f, f->lcur);
        gpt2_grads_layer_bucket(f->model, f->lbucket[f->lcur]);
        return;
    }
    layer_finish(f, 0);
    layer_finish(f, 1);
    const int h = fsdp_head(f);
    floatX* mine = f->hbucket + (size_t)f->rank * f->piece[h];
    CommRequest r = comm_dev_ireduce_scatter_sum(f->comm, f->hbucket, mine, f->piece[h], FSDP_DTYPE, NULL);
    f->n_rs++;
    trace_event(f, 'S', h);
    comm_wait(f->comm, &r);
    add_inplace(f->gshard + f->loc[h], mine, f->piece[h]);
    ops_zero(f->hbucket, f->piece[h] * (size_t)f->world * sizeof(floatX));
}

// ----------------------------------------------------------------------------
// set-up

static void* zalloc(size_t elems) {
    void* p = ops_alloc((elems ? elems : 1) * sizeof(floatX));
    ops_zero(p, (elems ? elems : 1) * sizeof(floatX));
    return p;
}

static void fsdp_layout(Fsdp* f) {
    const GPT2* m = f->model;
    f->nunits = m->cfg.num_layers + 1;
    f->unit_n = (size_t*)mallocCheck((size_t)f->nunits * sizeof(size_t));
    f->piece = (size_t*)mallocCheck((size_t)f->nunits * sizeof(size_t));
    f->loc = (size_t*)mallocCheck((size_t)f->nunits * sizeof(size_t));
    f->ploc = (size_t*)mallocCheck((size_t)f->nunits * sizeof(size_t));
    f->shard_n = f->pshard_n = f->max_unit = f->max_block = 0;
    for (int u = 0; u < f->nunits; u++) f->unit_n[u] = gpt2_unit_numel(m, u);
    for (int u = 0; u < f->nunits; u++) {
        const size_t padded = pad_unit(f->unit_n[u], f->world, ZERO_ALIGN_DEFAULT);
        f->piece[u] = padded / (size_t)f->world;
        f->loc[u] = f->shard_n;
        f->shard_n += f->piece[u];
        f->ploc[u] = f->pshard_n;
        if (!f->keep && u != fsdp_head(f)) f->pshard_n += f->piece[u]; // (the others live in their slot)
        if (padded > f->max_unit) f->max_unit = padded;
        if (u != fsdp_head(f) && padded > f->max_block) f->max_block = padded;
    }
}

static void fsdp_alloc_slots(Fsdp* f) {
    f->nslots = f->keep ? f->nunits : FSDP_MAX_SLOTS_SHARED + 1;
    f->slot = (floatX**)callocCheck((size_t)f->nslots, sizeof(floatX*));
    f->slot_cap = (size_t*)callocCheck((size_t)f->nslots, sizeof(size_t));
    f->slot_unit = (int*)mallocCheck((size_t)f->nslots * sizeof(int));
    f->slot_busy = (int*)callocCheck((size_t)f->nslots, sizeof(int));
    f->slot_pending = (int*)callocCheck((size_t)f->nslots, sizeof(int));
    f->slot_used = (long*)callocCheck((size_t)f->nslots, sizeof(long));
    f->slot_req = (CommRequest*)callocCheck((size_t)f->nslots, sizeof(CommRequest));
    f->unit_slot = (int*)mallocCheck((size_t)f->nunits * sizeof(int));
    const int h = fsdp_head(f);
    for (int s = 0; s < f->nslots; s++) {
        f->slot_cap[s] = f->keep ? f->piece[s] * (size_t)f->world : s == f->nslots - 1 ? f->piece[h] * (size_t)f->world : f->max_block;
        f->slot[s] = (floatX*)zalloc(f->slot_cap[s]);
        f->slot_unit[s] = -1;
    }
    for (int u = 0; u < f->nunits; u++) f->unit_slot[u] = -1;
}

// The full parameters (bound on the model now) -> this rank's pieces: a unit with a slot of its
// own is packed there whole (its piece is the slot's block `rank`; the rest is gathered again
// before use), the others through slot 0 (a shared slot: every block fits), their piece copied
// into pshard.
static void fsdp_take_shard(Fsdp* f) {
    f->pshard = (floatX*)zalloc(f->pshard_n);
    for (int u = 0; u < f->nunits; u++) {
        const int own = home_slot(f, u);
        floatX* buf = f->slot[own >= 0 ? own : 0];
        ops_zero(buf, f->piece[u] * (size_t)f->world * sizeof(floatX));
        gpt2_unit_pack(f->model, u, buf);
        if (own < 0) scale_copy(f->pshard + f->ploc[u], buf + (size_t)f->rank * f->piece[u], 1.0f, f->piece[u]);
    }
}

static void fsdp_alloc_grads(Fsdp* f) {
    const int h = fsdp_head(f);
    f->gshard = (floatX*)zalloc(f->shard_n);
    for (int k = 0; k < 2; k++) {
        f->lbucket[k] = (floatX*)zalloc(f->max_block);
        f->lreq_unit[k] = -1;
    }
    f->hbucket = (floatX*)zalloc(f->piece[h] * (size_t)f->world);
    gpt2_grads_into_buckets(f->model, f->lbucket[0], f->hbucket);
    f->lcur = 0;
    f->sink.bucket_done = fsdp_bucket_done;
    f->sink.ctx = f;
}

void fsdp_init(Fsdp* f, Comm* comm, Comm* wcomm, Comm* replica, GPT2* model, int grads, int keep, Nf4Base* nf4) {
    memset(f, 0, sizeof(*f));
    f->comm = comm; f->rank = comm->rank; f->world = comm->world;
    f->wcomm = wcomm; f->wrank = wcomm->rank; f->replica = replica;
    f->model = model; f->keep = keep; f->grads = grads;
    const char* tr = getenv("LLMC_FSDP_TRACE");
    f->trace = tr && *tr && strcmp(tr, "0") != 0;
    // LoRA: the base tensors it trains (biases, ln_f) stay whole on every rank, outside the units;
    // their gradients are the adapters' kind (gradsync), not the units'
    if (!grads) gpt2_set_resident(model, model->trainable);
    fsdp_layout(f);
    fsdp_alloc_slots(f);
    fsdp_take_shard(f);
    fsdp_nf4_init(f, nf4);
    if (grads) fsdp_alloc_grads(f);
    gpt2_params_drop(model);
    f->units.need = unit_need; f->units.prefetch = unit_prefetch; f->units.release = unit_release; f->units.ctx = f;
    gpt2_set_units(model, &f->units);
}

void fsdp_free(Fsdp* f) {
    if (!f->unit_n) return;
    slots_invalidate(f);
    fsdp_nf4_free(f);
    for (int s = 0; s < f->nslots; s++) ops_free(f->slot[s]);
    ops_free(f->pshard);
    if (f->gshard) {
        ops_free(f->gshard); ops_free(f->hbucket);
        for (int k = 0; k < 2; k++) ops_free(f->lbucket[k]);
    }
    free(f->slot); free(f->slot_cap); free(f->slot_unit); free(f->slot_busy); free(f->slot_pending);
    free(f->slot_used); free(f->slot_req); free(f->unit_slot);
    free(f->unit_n); free(f->piece); free(f->loc); free(f->ploc); free(f->trace_buf);
    memset(f, 0, sizeof(*f));
}

// ----------------------------------------------------------------------------
// the optimizer's view, steps, saving

int fsdp_max_segments(const Fsdp* f) { return f->nunits * NUM_PARAM_TENSORS; }

int fsdp_segments(const Fsdp* f, TrainSeg* segs) {
    int n = 0;
    const size_t* pc = f->piece;
    for (int u = 0; u < f->nunits; u++) {
        GPT2UnitTensor t[NUM_PARAM_TENSORS];
        const int nt = gpt2_unit_tensors(f->model, u, t);
        const size_t pb = (size_t)f->rank * pc[u], pe = pb + pc[u];
        for (int k = 0; k < nt; k++) {
            const size_t b = t[k].off > pb ? t[k].off : pb, e = t[k].off + t[k].n < pe ? t[k].off + t[k].n : pe;
            if (b >= e) continue;
            const ParamInfo* pi = &f->model->pt.t[t[k].id];
            segs[n].name = pi->name;
            segs[n].p = fsdp_piece(f, u) + (b - pb);
            segs[n].g = f->gshard ? f->gshard + f->loc[u] + (b - pb) : NULL;
            segs[n].n = e - b;
            segs[n].weight_decay = pi->weight_decay;
            segs[n].lr_scale = 1.0f;
            segs[n].offset = 0;
            n++;
        }
    }
    return n;
}

const GPT2GradSink* fsdp_sink(Fsdp* f) { return f->gshard ? &f->sink : NULL; }

void fsdp_zero_grads(Fsdp* f) {
    if (f->gshard) ops_zero(f->gshard, f->shard_n * sizeof(floatX));
}

void fsdp_params_changed(Fsdp* f) { slots_invalidate(f); }

void fsdp_reduce_replicas(Fsdp* f) {
    if (f->replica && f->replica->world > 1 && f->gshard)
        comm_dev_allreduce_sum(f->replica, f->gshard, f->shard_n, FSDP_DTYPE, NULL);
}

void fsdp_unshard(Fsdp* f) {
    slots_invalidate(f);
    GPT2* m = f->model;
    if (f->rank == 0) { gpt2_set_units(m, NULL); gpt2_params_full(m); }
    for (int u = 0; u < f->nunits; u++) {
        floatX* buf = f->slot[home_slot(f, u) >= 0 ? home_slot(f, u) : 0];
        CommRequest r = comm_dev_iallgather(f->comm, fsdp_piece(f, u), buf, f->piece[u], FSDP_DTYPE, NULL);
        comm_wait(f->comm, &r);
        if (f->rank != 0) continue;
        GPT2UnitTensor t[NUM_PARAM_TENSORS];
        const int nt = gpt2_unit_tensors(m, u, t);
        for (int k = 0; k < nt; k++)
            scale_copy(gpt2_param_slice(m, t[k].id, u < fsdp_head(f) ? u : -1), buf + t[k].off, 1.0f, t[k].n);
    }
    fsdp_nf4_unshard(f);
}

void fsdp_reshard(Fsdp* f) {
    fsdp_nf4_reshard(f);
    if (f->rank == 0) { gpt2_params_drop(f->model); gpt2_set_units(f->model, &f->units); }
}

size_t fsdp_shard_bytes(const Fsdp* f) { return f->pshard_n * sizeof(floatX); }
size_t fsdp_slot_bytes(const Fsdp* f) {
    size_t n = 0;
    for (int s = 0; s < f->nslots; s++) n += f->slot_cap[s];
    return n * sizeof(floatX);
}
size_t fsdp_bucket_numel(const Fsdp* f) {
    if (!f->gshard) return 0;
    return 2 * f->max_block + f->piece[fsdp_head(f)] * (size_t)f->world; // the buckets (reduce-scattered in place)
}
size_t fsdp_grad_bytes(const Fsdp* f) {
    return f->gshard ? (f->shard_n + fsdp_bucket_numel(f)) * sizeof(floatX) : 0;
}

void fsdp_trace_flush(Fsdp* f, long step) {
    if (f->rank == 0 && f->trace) {
        printf("fsdp: step %ld: %ld all-gathers, %ld reduce-scatters%s%.*s\n", step, f->n_gather, f->n_rs,
               f->trace ? " | trace:" : "", (int)f->trace_len, f->trace_buf ? f->trace_buf : "");
        fflush(stdout);
    }
    f->n_gather = f->n_rs = 0;
    f->trace_len = 0;
}

// ----------------------------------------------------------------------------
// optimizer state <-> the ZeRO-1 layout

// Real elements of this rank's piece of unit u, and where they start in the optimizer's arrays.
static size_t piece_real(const Fsdp* f, int u) {
    const size_t pb = (size_t)f->rank * f->piece[u];
    return f->unit_n[u] > pb ? (f->unit_n[u] - pb < f->piece[u] ? f->unit_n[u] - pb : f->piece[u]) : 0;
}
static size_t piece_opt_offset(const Fsdp* f, int u) {
    size_t off = 0;
    for (int v = 0; v < u; v++) off += piece_real(f, v);
    return off;
}

// Calls fn for each part of unit u inside this rank's ZeRO-1 range: packed offset, range offset, n.
typedef void (*FlatFn)(float* unit, float* range, size_t packed, size_t at, size_t n);
static void for_flat_parts(const Fsdp* f, const ZeroLayout* zl, int u, float* unit, float* range, FlatFn fn) {
    const size_t rb = zero_shard_begin(zl, f->wrank), re = zero_shard_end(zl, f->wrank);
    GPT2UnitTensor t[NUM_PARAM_TENSORS];
    const int nt = gpt2_unit_tensors(f->model, u, t);
    for (int k = 0; k < nt; k++) {
        const ParamInfo* pi = &f->model->pt.t[t[k].id];
        const size_t fo = pi->offset + (pi->per_layer ? (size_t)u * params_layer_numel(&f->model->pt, t[k].id) : 0);
        const size_t b = fo > rb ? fo : rb, e = fo + t[k].n < re ? fo + t[k].n : re;
        if (b < e) fn(unit, range, t[k].off + (b - fo), b - rb, e - b);
    }
}
static void part_to_range(float* unit, float* range, size_t packed, size_t at, size_t n) { memcpy(range + at, unit + packed, n * sizeof(float)); }
static void part_to_unit(float* unit, float* range, size_t packed, size_t at, size_t n) { memcpy(unit + packed, range + at, n * sizeof(float)); }

void fsdp_state_to_flat(Fsdp* f, const ZeroLayout* zl, const float* local, float* range) {
    float* unit = (float*)mallocCheck(f->max_unit * sizeof(float));
    float* mine = (float*)mallocCheck(f->max_unit * sizeof(float));
    for (int u = 0; u < f->nunits; u++) { // every rank's piece of the unit, then this rank's parts
        const size_t real = piece_real(f, u);
        memset(mine, 0, f->piece[u] * sizeof(float));
        memcpy(mine, local + piece_opt_offset(f, u), real * sizeof(float));
        comm_allgather_f32(f->comm, mine, unit, f->piece[u]);
        for_flat_parts(f, zl, u, unit, range, part_to_range);
    }
    free(unit); free(mine);
}

void fsdp_state_from_flat(Fsdp* f, const ZeroLayout* zl, const float* range, float* local) {
    float* unit = (float*)mallocCheck(f->max_unit * sizeof(float));
    for (int u = 0; u < f->nunits; u++) { // the ranges of every rank are disjoint: the sum puts each value in place
        memset(unit, 0, f->max_unit * sizeof(float));
        for_flat_parts(f, zl, u, unit, (float*)range, part_to_unit);
        comm_allreduce_sum_f32(f->wcomm, unit, f->piece[u] * (size_t)f->world);
        memcpy(local + piece_opt_offset(f, u), unit + (size_t)f->rank * f->piece[u], piece_real(f, u) * sizeof(float));
    }
    free(unit);
}
