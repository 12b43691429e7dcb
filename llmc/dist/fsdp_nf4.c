// ZeRO 3 with an NF4 base (QLoRA, llmc/dist/fsdp.h): each block unit's frozen linear weights sharded in
// their packed form. A block's bytes are the packed images (llmc/ops/nf4.h, nf4_image_layout) of its
// four NF4 weights back to back; like the floatX part of the unit they are padded to a multiple of
// world * FSDP_NF4_ALIGN bytes and split evenly, rank r keeping piece r. A gather (COMM_U8) goes
// into the byte slot of the same index as the unit's floatX slot, started and waited for with it;
// binding the unit points the four weights' backend handles (nf4_op_view) at their images in the
// slot. The head unit has no NF4 bytes. The full images exist nowhere after fsdp_init, except on
// rank 0 between fsdp_unshard and fsdp_reshard (saving the merged model, sampling).
#include "dist/fsdp.h"
#include "base/check.h"
#include <stdlib.h>
#include <string.h>

#define FSDP_NF4_ALIGN 64 // bytes: pieces (and so every rank's images in a slot) stay 16-byte aligned

static int nf4_blocks(const Fsdp* f) { return f->nunits - 1; }

void fsdp_nf4_sizes(const size_t* unit_bytes, int L, int world, int keep, FsdpSizes* o) {
    memset(o, 0, sizeof(*o));
    const size_t unit = (size_t)world * FSDP_NF4_ALIGN;
    size_t all = 0;
    for (int u = 0; u < L; u++) {
        const size_t padded = (unit_bytes[u] + unit - 1) / unit * unit;
        o->shard_n += padded / (size_t)world;
        if (padded > o->max_block) o->max_block = padded;
        all += padded;
    }
    o->max_unit = o->max_block;
    o->pshard_n = o->shard_n;
    o->slots_n = keep ? all : FSDP_MAX_SLOTS_SHARED * o->max_block; // (the head's slot holds no NF4 bytes)
}

static void nf4_layout(Fsdp* f) {
    FsdpNf4* z = &f->nf4;
    const int L = nf4_blocks(f);
    z->n = (size_t*)callocCheck((size_t)f->nunits, sizeof(size_t));
    z->piece = (size_t*)callocCheck((size_t)f->nunits, sizeof(size_t));
    z->loc = (size_t*)callocCheck((size_t)f->nunits, sizeof(size_t));
    z->img = (size_t*)callocCheck((size_t)QLORA_NQ * L, sizeof(size_t));
    const size_t unit = (size_t)f->world * FSDP_NF4_ALIGN;
    for (int u = 0; u < L; u++) {
        for (int q = 0; q < QLORA_NQ; q++) {
            NF4Image img;
            nf4_image_layout(&z->base->t[q * L + u], &img);
            z->img[q * L + u] = z->n[u];
            z->n[u] += img.bytes; // (a multiple of 16: the next image starts aligned)
        }
        const size_t padded = (z->n[u] + unit - 1) / unit * unit;
        z->piece[u] = padded / (size_t)f->world;
        z->loc[u] = z->shard_n;
        z->shard_n += z->piece[u];
        z->total += z->n[u];
        if (padded > z->max_unit) z->max_unit = padded;
    }
}

// This rank's pieces, from the images packed on the host one unit at a time.
static void nf4_take_shard(Fsdp* f) {
    FsdpNf4* z = &f->nf4;
    const int L = nf4_blocks(f);
    z->shard = (uint8_t*)ops_alloc(z->shard_n ? z->shard_n : 1);
    uint8_t* tmp = (uint8_t*)mallocCheck(z->max_unit ? z->max_unit : 1);
    for (int u = 0; u < L; u++) {
        memset(tmp, 0, z->piece[u] * (size_t)f->world);
        for (int q = 0; q < QLORA_NQ; q++) nf4_image_pack(&z->base->t[q * L + u], tmp + z->img[q * L + u]);
        ops_to_device(z->shard + z->loc[u], tmp + (size_t)f->rank * z->piece[u], z->piece[u]);
    }
    free(tmp);
}

// The full tensors go: each weight keeps its description and gets a handle that views a slot.
static void nf4_drop_full(Fsdp* f) {
    Nf4Base* b = f->nf4.base;
    for (int q = 0; q < QLORA_NQ; q++)
        for (int l = 0; l < b->L; l++) {
            const int i = q * b->L + l;
            nf4_op_free(b->dev[i]);
            nf4_strip(&b->t[i]);
            b->dev[i] = nf4_op_view(&b->t[i]);
            linear_use_nf4(linear_at(f->model->lin, l, q), &b->t[i], b->dev[i]);
        }
}

void fsdp_nf4_init(Fsdp* f, Nf4Base* base) {
    FsdpNf4* z = &f->nf4;
    memset(z, 0, sizeof(*z));
    if (!base) return;
    if (base->L != nf4_blocks(f)) fatal("this is a bug in llmc", "fsdp: the NF4 base has %d layers, the model %d", base->L, nf4_blocks(f));
    z->base = base;
    nf4_layout(f);
    nf4_take_shard(f);
    nf4_drop_full(f);
    z->slot = (uint8_t**)callocCheck((size_t)f->nslots, sizeof(uint8_t*));
    z->slot_cap = (size_t*)callocCheck((size_t)f->nslots, sizeof(size_t));
    z->req = (CommRequest*)callocCheck((size_t)f->nslots, sizeof(CommRequest));
    for (int s = 0; s < f->nslots; s++) {
        // the head (the last slot in reshard mode, piece 0 with keep) has no NF4 bytes
        z->slot_cap[s] = f->keep ? z->piece[s] * (size_t)f->world : s < FSDP_MAX_SLOTS_SHARED ? z->max_unit : 0;
        z->slot[s] = (uint8_t*)ops_alloc(z->slot_cap[s] ? z->slot_cap[s] : 1);
        z->req[s].id = -1;
    }
}

void fsdp_nf4_free(Fsdp* f) {
    FsdpNf4* z = &f->nf4;
    if (!z->base) return;
    for (int s = 0; s < f->nslots; s++) { comm_wait(f->comm, &z->req[s]); ops_free(z->slot[s]); }
    ops_free(z->shard);
    if (z->full) ops_free(z->full);
    free(z->slot); free(z->slot_cap); free(z->req);
    free(z->n); free(z->piece); free(z->loc); free(z->img);
    memset(z, 0, sizeof(*z));
}

int fsdp_nf4_gather(Fsdp* f, int u, int s) {
    FsdpNf4* z = &f->nf4;
    if (!z->base || !z->n[u]) return 0;
    z->req[s] = comm_dev_iallgather(f->comm, z->shard + z->loc[u], z->slot[s], z->piece[u], COMM_U8, NULL);
    return 1;
}

void fsdp_nf4_wait(Fsdp* f, int s) {
    if (f->nf4.base) comm_wait(f->comm, &f->nf4.req[s]);
}

// Point block u's four handles at their images in buf (a slot, or the full images).
static void nf4_bind(Fsdp* f, int u, const uint8_t* buf) {
    const FsdpNf4* z = &f->nf4;
    const int L = nf4_blocks(f);
    for (int q = 0; q < QLORA_NQ; q++) nf4_op_bind(z->base->dev[q * L + u], buf + z->img[q * L + u]);
}

void fsdp_nf4_bind(Fsdp* f, int u, int s) {
    if (f->nf4.base && f->nf4.n[u]) nf4_bind(f, u, f->nf4.slot[s]);
}

// Every rank: rank 0's weights get their full images (backend memory, bound) and, on the host,
// their arrays (gpt2_get_params reads them: the merged model); the others only take part.
void fsdp_nf4_unshard(Fsdp* f) {
    FsdpNf4* z = &f->nf4;
    if (!z->base) return;
    const int L = nf4_blocks(f);
    size_t full_n = 0;
    for (int u = 0; u < L; u++) full_n += z->piece[u] * (size_t)f->world;
    uint8_t* host = NULL;
    if (f->rank == 0) { z->full = (uint8_t*)ops_alloc(full_n ? full_n : 1); host = (uint8_t*)mallocCheck(z->max_unit ? z->max_unit : 1); }
    size_t at = 0;
    for (int u = 0; u < L; u++) {
        uint8_t* buf = f->rank == 0 ? z->full + at : z->slot[f->keep ? u : 0];
        comm_dev_allgather(f->comm, z->shard + z->loc[u], buf, z->piece[u], COMM_U8, NULL);
        at += z->piece[u] * (size_t)f->world;
        if (f->rank != 0) continue;
        nf4_bind(f, u, buf);
        ops_to_host(host, buf, z->n[u]);
        for (int q = 0; q < QLORA_NQ; q++) nf4_image_unpack(&z->base->t[q * L + u], host + z->img[q * L + u]);
    }
    free(host);
}

void fsdp_nf4_reshard(Fsdp* f) {
    FsdpNf4* z = &f->nf4;
    if (!z->base || f->rank != 0) return;
    for (int i = 0; i < QLORA_NQ * z->base->L; i++) nf4_strip(&z->base->t[i]);
    ops_free(z->full);
    z->full = NULL; // the handles are bound again by the units' next gathers
}

size_t fsdp_nf4_shard_bytes(const Fsdp* f) { return f->nf4.shard_n; }
size_t fsdp_nf4_slot_bytes(const Fsdp* f) {
    size_t n = 0;
    for (int s = 0; f->nf4.base && s < f->nslots; s++) n += f->nf4.slot_cap[s];
    return n;
}
