// Gradient synchronisation across ranks: after the backward passes of a step, the range of the
// flat trainable space that this rank's optimizer updates must hold the gradient summed over every
// rank; after the update, every rank needs the new parameters. The arithmetic of who owns what is
// llmc/dist/zero.h, the data moves through llmc/comm/comm.h (device collectives, in the
// parameters' dtype). What each ZeRO stage moves and keeps: docs/ZERO.md.
//
// At ZeRO 2, full training hands gpt2_backward a sink (gradsync_sink) that reduces each layer's
// bucket as soon as that layer is done, the model's gradients living in two one-layer buckets
// owned here; adapters are reduced after each micro-step instead. At ZeRO 3 (llmc/dist/fsdp.h)
// the optimizer updates this rank's pieces of the units (its segments are fsdp_segments);
// adapters are trained as at ZeRO 2 over the frozen sharded base, and the base tensors LoRA trains
// (biases, ln_f) stay whole on every rank and are trained with the adapters. The global gradient
// norm at stage 3 with --shard-group sums over all ranks and divides by the number of groups (each
// group covers the gradient once).
//
// The step's loss and gradient norm stay on the device until gradsync_step_stats reads both at
// once: the only time a step waits for the device before its update.
//
// One step:  gradsync_step_begin; per micro-step: gpt2_forward_acc(.., gradsync_loss_acc(gs)),
//            gpt2_backward(m, gradsync_sink(gs)), gradsync_micro_done; then gradsync_reduce,
//            gradsync_step_stats, opt_step, gradsync_share_params.
#ifndef LLMC_GRADSYNC_H
#define LLMC_GRADSYNC_H

#include <stddef.h>
#include "comm/comm.h"
#include "model/gpt2.h"
#include "dist/fsdp.h"
#include "model/optimizer.h"
#include "dist/zero.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    Comm* comm;
    int rank, world, zero;
    int sharded;               // zero >= 1 on more than one rank: each rank updates its shard only
    ZeroLayout zl;             // the flat trainable space split over the ranks
    Optimizer* opt;            // its segments are the trainable space (gradsync_attach)
    floatX* gshard;            // ZeRO-2: this rank's reduced gradients for [opt->begin, opt->end)
    GPT2* model;               // ZeRO-2 full training: the model whose gradients live in the buckets
    floatX* layer_bucket;      //   one layer's per-layer gradients, packed (gpt2_grads_into_buckets)
    floatX* final_bucket;      //   wte, wpe, ln_f gradients, packed
    size_t layer_bucket_n, final_bucket_n;
    GPT2GradSink sink;
    double* stats;             // backend memory: [0] this rank's loss sum, [1] its gradient sum of squares
    int fsdp_on;               // ZeRO 3: the model's parameters are sharded by fsdp
    Fsdp fsdp;
    int groups;                // hybrid sharding: groups of ranks (1: shard over every rank)
    Comm group, replica;       //   this rank's group, and the ranks with its rank in theirs
} GradSync;

// The layout of `ntrain` trainable elements over the communicator's ranks at ZeRO stage `zero`.
void gradsync_init(GradSync* gs, Comm* comm, int zero, size_t ntrain);
// ZeRO 3, before opt_init: shard the model's parameters (full: with its gradients; the optimizer's
// segments are then fsdp_segments(&gs->fsdp), over the range [0, all)), and its NF4 base (QLoRA;
// NULL: none) in its packed form. keep: --zero3-keep.
// group: hybrid sharding over groups of that many consecutive ranks (replicated across groups);
// 0 = every rank in one group. It must divide the number of ranks (fatal otherwise). Nothing at
// other stages.
void gradsync_shard_model(GradSync* gs, GPT2* model, Nf4Base* nf4, int full, int keep, int group);
// ZeRO 3, every rank: rank 0's model holds its full parameters (saving, sampling) until
// gradsync_reshard_model. No-ops at other stages.
void gradsync_unshard_model(GradSync* gs);
void gradsync_reshard_model(GradSync* gs);
// The part of the flat trainable space this rank's optimizer keeps state for and updates.
size_t gradsync_range_begin(const GradSync* gs);
size_t gradsync_range_end(const GradSync* gs);
// After opt_init over that range. ZeRO-2: allocates the gradient shard (opt->gshard); with a
// full-training model, also moves its gradients into the reduce buckets (the optimizer then reads
// gradients from the shard only). model: NULL for adapters.
void gradsync_attach(GradSync* gs, Optimizer* opt, GPT2* model);
void gradsync_free(GradSync* gs);

// The sink to pass to gpt2_backward (NULL when gradients are not reduced during backward).
const GPT2GradSink* gradsync_sink(GradSync* gs);
void gradsync_step_begin(GradSync* gs);
void gradsync_micro_done(GradSync* gs);
void gradsync_reduce(GradSync* gs);
// Where the forward passes of this step add their loss sums (backend memory, zeroed by
// gradsync_step_begin).
double* gradsync_loss_acc(GradSync* gs);
// After gradsync_reduce: the loss sum over every rank's micro-batches and the global gradient norm
// (the same on every rank), computed on the device and read back in one copy.
void gradsync_step_stats(GradSync* gs, double* loss_sum, double* norm);
void gradsync_share_params(GradSync* gs);

// Gradient memory held here (shard and buckets) and the bucket elements, for the report.
size_t gradsync_grad_bytes(const GradSync* gs);
size_t gradsync_bucket_numel(const GradSync* gs);
// ZeRO 2 (full training): the elements of bucket b's buffer (zero_gpt2_bucket: 0 = a layer's,
// L = the embedding / head's), from the table alone (a plan's, llmc/plan/memplan.h).
size_t gradsync_zero2_bucket_numel(const ParamTable* pt, int bucket);

#ifdef __cplusplus
}
#endif
#endif // LLMC_GRADSYNC_H
