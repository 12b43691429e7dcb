// ZeRO-3 / FSDP: the model's parameters sharded across ranks in units (llmc/model/gpt2.h
// GPT2Units: one unit per transformer block, plus the embedding/head unit H = wte (tied to
// lm_head), wpe, ln_f). Each unit is a flat buffer (its tensors packed in table order) padded to a
// multiple of world * align and split evenly: rank r keeps piece r of every unit (`piece[u]`
// elements), and the concatenation of its pieces is its parameter shard (pshard) and, for full
// training, its gradient shard (gshard) and the optimizer's range (fsdp_segments). Nothing else of
// the model's parameters stays in memory between uses.
//
// Gather slots hold whole units. By default two slots of the largest block take the blocks in
// turns (the model's prefetch call starts the next block's comm_dev_iallgather into the other
// slot, its need call waits for it), and the head has a slot of its own that also holds this
// rank's piece of the head (gathered in place, once after each update). --zero3-keep: one slot per
// unit, so what forward gathered serves backward and the later micro-steps. Slots are invalidated
// when the optimizer has changed the shards (fsdp_params_changed).
//
// Gradients (full training): backward writes a block's gradients into one of two layer buckets
// (gpt2_grads_layer_bucket); when the block is done its bucket is reduce-scattered in place
// (comm_dev_ireduce_scatter_sum) while backward fills the other, and each piece is added into
// gshard. QLoRA (llmc/dist/fsdp_nf4.c): the NF4 base is sharded in its packed form, as bytes
// gathered (COMM_U8) beside each block's floatX part: a block's gather is two all-gathers.
//
// The memory per rank, the collectives per step (counted in n_gather / n_rs) and why the head
// stays gathered: docs/ZERO.md ("Memory per rank", "Traffic per step", "How stage 3 works here").
#ifndef LLMC_FSDP_H
#define LLMC_FSDP_H

#include <stddef.h>
#include "comm/comm.h"
#include "model/gpt2.h"
#include "model/trainseg.h"
#include "model/qlora.h"
#include "dist/zero.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FSDP_MAX_SLOTS_SHARED 2 // the blocks' slots in reshard mode (the head's own comes after them)

// The NF4 base's bytes (llmc/dist/fsdp_nf4.c); every size in bytes. Unused (base NULL) without one.
typedef struct {
    Nf4Base* base;           // its weights' handles view the slots (nf4_op_view); NULL: no NF4 base
    size_t* n;               // [nunits] real bytes of each unit's images (0 for the head)
    size_t* piece;           // [nunits] bytes of every rank's piece
    size_t* loc;             // [nunits] where this rank's piece starts in shard
    size_t* img;             // [QLORA_NQ * L] where weight q of block l starts in its unit (at q * L + l)
    size_t shard_n, max_unit, total; // this rank's bytes, the largest padded unit, every unit's real bytes
    uint8_t* shard;          // this rank's pieces (backend memory)
    uint8_t** slot;          // [nslots] gather buffers, beside the floatX slots of the same index
    size_t* slot_cap;
    CommRequest* req;        // [nslots] a gather in flight (id < 0: none)
    uint8_t* full;           // rank 0 between fsdp_unshard and fsdp_reshard: every unit's images
} FsdpNf4;

typedef struct {
    Comm* comm;              // the ranks the units are sharded over (all, or this rank's group)
    int rank, world;         // in comm
    Comm* wcomm;             // every rank of the run
    int wrank;               // in wcomm
    Comm* replica;           // hybrid sharding: the ranks holding the same pieces (one per group),
                             // whose gradients are all-reduced once per step; NULL without groups
    GPT2* model;
    int nunits;              // L + 1: blocks 0..L-1, then H
    int keep;                // 1: one slot per unit, kept from forward to backward
    int grads;               // 1: full training, gradients reduce-scattered into gshard
    size_t* unit_n;          // [nunits] real elements of each unit
    size_t* piece;           // [nunits] elements of every rank's piece (unit padded / world)
    size_t* loc;             // [nunits] where this rank's piece starts in gshard (and the optimizer's range)
    size_t* ploc;            // [nunits] where it starts in pshard (units without a slot of their own)
    size_t shard_n;          // sum of the pieces
    size_t pshard_n;         // the pieces kept in pshard: those of the units without a slot of their own
    size_t max_unit;         // largest padded unit (world * piece)
    size_t max_block;        // largest padded block unit: the shared slots' size
    floatX* pshard;          // this rank's parameters, but for the pieces in the units' own slots
                             // (the head's; every unit's with keep): fsdp_piece
    floatX* gshard;          // this rank's summed gradients (grads), else NULL
    // gather slots
    int nslots;
    floatX** slot;
    size_t* slot_cap;        // elements
    int* slot_unit;          // unit held (or being gathered), -1: none
    int* slot_busy;          // between need and release
    int* slot_pending;       // a gather in flight
    long* slot_used;         // last need (LRU among the free slots)
    CommRequest* slot_req;
    int* unit_slot;          // [nunits] slot holding the unit, -1: none
    long tick;
    // gradient buckets
    floatX* lbucket[2];      // layer buckets, max block unit padded (reduce-scattered in place)
    CommRequest lreq[2];
    int lreq_unit[2];        // unit being reduced from lbucket[i], -1: none
    int lcur;                // the bucket backward writes into now
    floatX* hbucket;         // the head's gradients (padded; reduce-scattered in place)
    GPT2GradSink sink;
    GPT2Units units;
    FsdpNf4 nf4;
    // counters since fsdp_counters_reset, and the trace (LLMC_FSDP_TRACE=1: rank 0 prints each
    // micro-step's events: G<u> gather started, W<u> waited / bound, R<u> released, S<u> gradient
    // reduce-scatter started)
    long n_gather, n_rs;
    int trace;
    char* trace_buf;
    size_t trace_len, trace_cap;
} Fsdp;

// Shards model (its full parameters, already loaded, are packed unit by unit, this rank keeps its
// pieces, the full buffer is freed) and installs the units on it. grads: full training (the
// model's gradients then live in the buckets). keep: see above.
// Hybrid sharding: comm is this rank's group, replica the ranks of the other groups holding the
// same pieces (else comm = wcomm, replica NULL). nf4: the model's NF4 base (QLoRA; grads 0), whose
// full tensors are replaced by this rank's byte pieces, or NULL.
void fsdp_init(Fsdp* f, Comm* comm, Comm* wcomm, Comm* replica, GPT2* model, int grads, int keep, Nf4Base* nf4);
// After the step's backward passes (hybrid sharding): sum the gradient pieces over the replicas.
void fsdp_reduce_replicas(Fsdp* f);
void fsdp_free(Fsdp* f);
// The optimizer's segments over this rank's pieces (one per tensor slice a piece meets, with the
// tensor's weight decay flag); segs needs fsdp_max_segments entries.
int fsdp_max_segments(const Fsdp* f);
int fsdp_segments(const Fsdp* f, TrainSeg* segs);
const GPT2GradSink* fsdp_sink(Fsdp* f);
void fsdp_zero_grads(Fsdp* f);
// The optimizer changed the shards: gathered units are stale.
void fsdp_params_changed(Fsdp* f);
// Every rank: rank 0's model gets its full parameters back (saving, sampling) and runs without
// units until fsdp_reshard; the other ranks only take part in the gathers.
void fsdp_unshard(Fsdp* f);
void fsdp_reshard(Fsdp* f);
// Checkpoints hold optimizer state in the ZeRO-1 layout (zl: the flat table space over every rank),
// so that any stage and rank count can resume from them. Collective (host memory): local is an
// array over this rank's optimizer segments (fsdp_segments order), range this rank's part of zl
// (zero_shard_begin .. min(zero_shard_end, total)).
void fsdp_state_to_flat(Fsdp* f, const ZeroLayout* zl, const float* local, float* range);
void fsdp_state_from_flat(Fsdp* f, const ZeroLayout* zl, const float* range, float* local);
// Where this rank's piece of unit u lives: in the unit's own slot (the head; every unit with
// keep), else in pshard.
floatX* fsdp_piece(const Fsdp* f, int u);
// A layout's sizes in elements from the units' real sizes alone (unit_n[nunits], the head last):
// the arithmetic fsdp_init lays the units out with, for a plan made before anything exists
// (llmc/plan/memplan.h). Each unit is padded to a multiple of world * 64 and split in world pieces.
typedef struct {
    size_t shard_n;          // this rank's pieces (the gradient shard, the optimizer's range)
    size_t pshard_n;         // those of them in pshard (not in a unit's own slot)
    size_t max_unit, max_block; // the largest padded unit, block
    size_t slots_n;          // every gather slot
    size_t buckets_n;        // full training: the two layer buckets and the head's
} FsdpSizes;
void fsdp_sizes(const size_t* unit_n, int nunits, int world, int keep, FsdpSizes* out);
// The same for the NF4 bytes of the blocks (unit_bytes[L]: the packed images of each block's
// weights; the head has none): shard_n, max_block (the largest padded block) and slots_n (bytes
// of every NF4 slot) are set.
void fsdp_nf4_sizes(const size_t* unit_bytes, int L, int world, int keep, FsdpSizes* out);
// Bytes: the parameter shard (the pieces outside the units' own slots), the gather slots, the
// gradient shard and buckets; the buckets' elements (the two layer buckets and the head's).
size_t fsdp_shard_bytes(const Fsdp* f);
size_t fsdp_slot_bytes(const Fsdp* f);
size_t fsdp_grad_bytes(const Fsdp* f);
size_t fsdp_bucket_numel(const Fsdp* f);
// The NF4 base's bytes on this rank: its pieces, and its gather slots (0 without one).
size_t fsdp_nf4_shard_bytes(const Fsdp* f);
size_t fsdp_nf4_slot_bytes(const Fsdp* f);
// Prints (rank 0) and clears the trace of the micro-steps since the last call.
void fsdp_trace_flush(Fsdp* f, long step);

// fsdp.c's side of llmc/dist/fsdp_nf4.c (no-ops without an NF4 base): set-up after the slots, the gather
// of unit u into slot s (returns 1 if one was started), its wait, binding the weights, unshard.
void fsdp_nf4_init(Fsdp* f, Nf4Base* base);
void fsdp_nf4_free(Fsdp* f);
int fsdp_nf4_gather(Fsdp* f, int u, int s);
void fsdp_nf4_wait(Fsdp* f, int s);
void fsdp_nf4_bind(Fsdp* f, int u, int s);
void fsdp_nf4_unshard(Fsdp* f);
void fsdp_nf4_reshard(Fsdp* f);

#ifdef __cplusplus
}
#endif
#endif // LLMC_FSDP_H
