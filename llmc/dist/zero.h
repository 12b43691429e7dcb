// ZeRO sharding arithmetic (docs/ARCHITECTURE.md, "Ranks"): which rank owns which part of the flat
// parameter space, how a shard meets each tensor, how a layer's gradients map to reduce calls,
// and how optimizer state written by N ranks is re-sliced for M ranks. Pure functions, no I/O,
// no communication (llmc/comm/comm.h moves the data).
//
// Layout. The trainable parameters are one flat buffer of `total` elements (llmc/model/params.h
// order), padded with zeros to `padded` = total rounded up to a multiple of world*align, so every
// rank's shard is the same size (`shard` = padded / world, a multiple of align) and starts on an
// aligned element: rank r owns flat elements [r*shard, (r+1)*shard). Buffers that take part in a
// reduce-scatter / all-gather have `padded` elements; the padding stays zero (its gradient is
// zero, so AdamW leaves it zero too; the optimizer may skip it, since no tensor covers it).
//
// Stages: 0 all-reduces the gradients and every rank updates everything; 1 keeps AdamW's state
// for the own shard only (reduce-scatter the gradients in place, update the shard tensor by
// tensor with zero_intersect, all-gather the parameters: the traffic of stage 0); 2 reduces the
// gradients bucket by bucket as backward produces them, each bucket's segments to their owners
// (zero_segments; a layer's weight gradients go to a packed bucket, ZeroSegment.bucket_off), so a
// rank keeps only its own gradient shard. The gradient norm: stage 0 computes it locally, stages
// 1/2 all-reduce one partial sum of squares. Stage 3 (llmc/dist/fsdp.h) shards the parameters
// too. What each stage keeps and moves every step: docs/ZERO.md.
#ifndef LLMC_ZERO_H
#define LLMC_ZERO_H

#include <stddef.h>
#include "model/params.h"

#ifdef __cplusplus
extern "C" {
#endif

// Default alignment of shard boundaries in elements: 64 elements keep every shard start aligned
// to 128 bytes in bf16 and 256 bytes in fp32 (vector loads, NCCL's preferred alignment).
#define ZERO_ALIGN_DEFAULT 64

typedef struct {
    size_t total;  // elements actually used (the flat parameter count)
    size_t padded; // total rounded up to a multiple of world*align
    size_t shard;  // padded / world; a multiple of align
    size_t align;  // shard alignment in elements
    int world;     // number of ranks
} ZeroLayout;

// A half-open range [begin, end) of flat element indices.
typedef struct { size_t begin, end; } ZeroRange;

// A piece of a gradient bucket owned by one rank: flat [begin, end), its position in the packed
// bucket buffer (the bucket's ranges laid out back to back in the order given), and the owner.
typedef struct { size_t begin, end; size_t bucket_off; int owner; } ZeroSegment;

// One copy of a re-sharding plan: n elements from old rank src_rank's shard at src_off to the
// new shard at dst_off (offsets local to the shards).
typedef struct { int src_rank; size_t src_off; size_t dst_off; size_t n; } ZeroCopy;

// world >= 1, align >= 1 (fatal otherwise).
void zero_layout_init(ZeroLayout* z, size_t total, int world, size_t align);

static inline size_t zero_shard_begin(const ZeroLayout* z, int rank) { return (size_t)rank * z->shard; }
static inline size_t zero_shard_end(const ZeroLayout* z, int rank) { return (size_t)(rank + 1) * z->shard; }
// Rank owning flat element i (i < padded).
int zero_owner(const ZeroLayout* z, size_t i);

// Elements of AdamW state (m, v, master: each) and of gradient storage a rank keeps at a stage
// (stage 2 needs in addition one bucket buffer, see zero_gpt2_max_bucket).
static inline size_t zero_state_elems(const ZeroLayout* z, int stage) { return stage >= 1 ? z->shard : z->padded; }
static inline size_t zero_grad_elems(const ZeroLayout* z, int stage) { return stage >= 2 ? z->shard : z->padded; }

// The part of the tensor [offset, offset+numel) inside rank's shard, in flat indices; empty
// (begin == end) when they do not meet. Local index in the shard = flat - zero_shard_begin.
// Use it to run AdamW per tensor (weight decay or not) on the own shard:
//   for each tensor t: ZeroRange r = zero_intersect(z, rank, t.offset, t.numel);
//       update local [r.begin - zero_shard_begin(z, rank), r.end - zero_shard_begin(z, rank))
ZeroRange zero_intersect(const ZeroLayout* z, int rank, size_t offset, size_t numel);

// Split flat ranges (any order, non-overlapping, inside [0, padded)) at shard boundaries into
// per-owner segments, in the order given; consecutive pieces with the same owner that are
// adjacent in flat space are merged. Writes at most cap segments and returns how many there are
// (out = NULL, cap = 0 just counts; zero_segments_max bounds it). Each returned segment is one
// reduce call: comm_reduce_sum_f32(c, buf + s.begin, buf + s.begin, s.end - s.begin, s.owner) on a
// full gradient buffer, or on a packed bucket buffer at buf + s.bucket_off.
int zero_segments(const ZeroLayout* z, const ZeroRange* ranges, int nranges, ZeroSegment* out, int cap);
static inline int zero_segments_max(const ZeroLayout* z, int nranges) { return nranges * z->world; }

// GPT-2 gradient buckets in the order backward completes them: bucket b in [0, L) holds the
// per-layer tensors of layer L-1-b (ready when that block's backward is done); bucket L holds
// wte, wpe, lnfw, lnfb (ready when backward is done: wte gets gradients both from the classifier,
// first, and from the encoder, last). Writes the bucket's flat ranges (at most
// ZERO_GPT2_MAX_RANGES) and returns how many.
#define ZERO_GPT2_MAX_RANGES 12
static inline int zero_gpt2_num_buckets(const ParamTable* pt) { return pt->cfg.num_layers + 1; }
int zero_gpt2_bucket(const ParamTable* pt, int bucket, ZeroRange* out);
// Largest bucket in elements (size of the packed bucket buffer for stage 2).
size_t zero_gpt2_max_bucket(const ParamTable* pt);

// Re-sharding (resume with a different number of ranks). Both layouts must describe the same
// total (fatal otherwise, naming the two counts). Plan: the copies that build new rank to_rank's
// shard from the old shards; at most from->world copies (cap >= from->world). Elements of the new
// shard that no copy covers are padding and must be zero. Read only the old files' byte ranges
// the plan names.
int zero_reshard_plan(const ZeroLayout* from, const ZeroLayout* to, int to_rank, ZeroCopy* out, int cap);
// src[r] = old rank r's shard (from->shard floats); dst = new shard (to->shard floats).
void zero_reshard_f32(const ZeroLayout* from, const float* const* src, const ZeroLayout* to, int to_rank, float* dst);
// shards[r] (z->shard floats each) -> full (z->total floats).
void zero_gather_f32(const ZeroLayout* z, const float* const* shards, float* full);
// full (z->total floats) -> rank's shard (z->shard floats), padding zero-filled.
void zero_slice_f32(const ZeroLayout* z, int rank, const float* full, float* shard);

#ifdef __cplusplus
}
#endif
#endif // LLMC_ZERO_H
