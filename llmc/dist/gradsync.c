#include "dist/gradsync.h"
#include "base/check.h"
#include <math.h>
#include <string.h>

// The collectives move the parameters' own dtype: bf16 on the CUDA backend, fp32 on the CPU.
#define GS_DTYPE (sizeof(floatX) == 2 ? COMM_BF16 : COMM_F32)

void gradsync_init(GradSync* gs, Comm* comm, int zero, size_t ntrain) {
    memset(gs, 0, sizeof(*gs));
    gs->comm = comm;
    gs->rank = comm->rank;
    gs->world = comm->world;
    gs->zero = zero;
    gs->sharded = zero >= 1 && comm->world > 1;
    zero_layout_init(&gs->zl, ntrain, comm->world, ZERO_ALIGN_DEFAULT);
    gs->stats = (double*)ops_alloc(2 * sizeof(double));
    ops_zero(gs->stats, 2 * sizeof(double));
}

void gradsync_shard_model(GradSync* gs, GPT2* model, Nf4Base* nf4, int full, int keep, int group) {
    if (gs->zero != 3) return;
    Comm* shard = gs->comm;
    Comm* replica = NULL;
    gs->groups = 1;
    if (group > 0 && group != gs->world) {
        if (gs->world % group)
            fatal("give a --shard-group that divides the number of ranks", "--shard-group %d does not divide the %d ranks", group, gs->world);
        gs->groups = gs->world / group;
        comm_split(gs->comm, gs->rank / group, gs->rank, &gs->group);   // consecutive ranks: a node
        comm_split(gs->comm, gs->rank % group, gs->rank, &gs->replica); // one rank of every group
        shard = &gs->group; replica = &gs->replica;
    }
    fsdp_init(&gs->fsdp, shard, gs->comm, replica, model, full, keep, nf4);
    gs->fsdp_on = 1;
}

void gradsync_unshard_model(GradSync* gs) { if (gs->fsdp_on) fsdp_unshard(&gs->fsdp); }
void gradsync_reshard_model(GradSync* gs) { if (gs->fsdp_on) fsdp_reshard(&gs->fsdp); }

size_t gradsync_range_begin(const GradSync* gs) { return gs->sharded ? zero_shard_begin(&gs->zl, gs->rank) : 0; }
size_t gradsync_range_end(const GradSync* gs) { return gs->sharded ? zero_shard_end(&gs->zl, gs->rank) : (size_t)-1; }

// ZeRO-2 sink (full training): a bucket of the model's gradients is complete. Reduce each of its
// pieces to the owning rank, who adds it to its gradient shard, then empty the bucket for the next
// layer.
static void gradsync_bucket_done(void* ctx, int bucket) {
    GradSync* gs = (GradSync*)ctx;
    const ParamTable* pt = &gs->model->pt;
    ZeroRange ranges[ZERO_GPT2_MAX_RANGES];
    int nr = zero_gpt2_bucket(pt, bucket, ranges);
    ZeroSegment segs[ZERO_GPT2_MAX_RANGES * 64];
    int ns = zero_segments(&gs->zl, ranges, nr, segs, (int)(sizeof(segs) / sizeof(segs[0])));
    assertCheck(ns <= (int)(sizeof(segs) / sizeof(segs[0])));
    const int last = bucket == pt->cfg.num_layers;
    floatX* buf = last ? gs->final_bucket : gs->layer_bucket;
    comm_dev_group_begin(gs->comm);
    for (int k = 0; k < ns; k++)
        comm_dev_reduce_sum(gs->comm, buf + segs[k].bucket_off, buf + segs[k].bucket_off,
                            segs[k].end - segs[k].begin, GS_DTYPE, segs[k].owner, NULL);
    comm_dev_group_end(gs->comm);
    for (int k = 0; k < ns; k++)
        if (segs[k].owner == gs->rank)
            add_inplace(gs->gshard + (segs[k].begin - gs->opt->begin), buf + segs[k].bucket_off, segs[k].end - segs[k].begin);
    ops_zero(buf, (last ? gs->final_bucket_n : gs->layer_bucket_n) * sizeof(floatX));
}

// Sum of a bucket's ranges (zero_gpt2_bucket): the bucket buffer's size.
size_t gradsync_zero2_bucket_numel(const ParamTable* pt, int bucket) {
    ZeroRange r[ZERO_GPT2_MAX_RANGES];
    int n = zero_gpt2_bucket(pt, bucket, r);
    size_t s = 0;
    for (int k = 0; k < n; k++) s += r[k].end - r[k].begin;
    return s;
}

void gradsync_attach(GradSync* gs, Optimizer* opt, GPT2* model) {
    gs->opt = opt;
    if (gs->fsdp_on && gs->fsdp.gshard) return; // full training at ZeRO 3: fsdp reduces the gradients
    if (gs->zero < 2 || gs->world == 1) return;
    // gradients: only this rank's reduced range persists
    size_t n = opt->end - opt->begin;
    gs->gshard = (floatX*)ops_alloc((n ? n : 1) * sizeof(floatX));
    ops_zero(gs->gshard, (n ? n : 1) * sizeof(floatX));
    opt->gshard = gs->gshard;
    if (!model) return; // adapters: reduced after each micro-step (gradsync_micro_done)
    // full training: backward fills one reusable bucket per layer (and one for the rest)
    gs->model = model;
    gs->layer_bucket_n = gradsync_zero2_bucket_numel(&model->pt, 0);
    gs->final_bucket_n = gradsync_zero2_bucket_numel(&model->pt, model->cfg.num_layers);
    gs->layer_bucket = (floatX*)ops_alloc(gs->layer_bucket_n * sizeof(floatX));
    gs->final_bucket = (floatX*)ops_alloc(gs->final_bucket_n * sizeof(floatX));
    ops_zero(gs->layer_bucket, gs->layer_bucket_n * sizeof(floatX));
    ops_zero(gs->final_bucket, gs->final_bucket_n * sizeof(floatX));
    gpt2_grads_into_buckets(model, gs->layer_bucket, gs->final_bucket);
    for (int i = 0; i < opt->nseg; i++) opt->segs[i].g = NULL; // only gshard holds gradients now
    gs->sink.bucket_done = gradsync_bucket_done;
    gs->sink.ctx = gs;
}

void gradsync_free(GradSync* gs) {
    if (gs->fsdp_on) fsdp_free(&gs->fsdp);
    if (gs->groups > 1) { comm_split_free(&gs->group); comm_split_free(&gs->replica); }
    if (gs->gshard) ops_free(gs->gshard);
    if (gs->layer_bucket) { ops_free(gs->layer_bucket); ops_free(gs->final_bucket); }
    if (gs->stats) ops_free(gs->stats);
    memset(gs, 0, sizeof(*gs));
}

const GPT2GradSink* gradsync_sink(GradSync* gs) {
    if (gs->fsdp_on && gs->fsdp.gshard) return fsdp_sink(&gs->fsdp);
    return gs->sink.bucket_done ? &gs->sink : NULL;
}

void gradsync_step_begin(GradSync* gs) {
    ops_zero(gs->stats, 2 * sizeof(double));
    if (gs->fsdp_on) fsdp_zero_grads(&gs->fsdp);
    if (gs->gshard) ops_zero(gs->gshard, (gs->opt->end - gs->opt->begin) * sizeof(floatX));
}

// A "piece": the part of one trainable segment inside one rank's range.
typedef void (*PieceFn)(GradSync* gs, const TrainSeg* s, size_t seg_off, size_t n, int owner);

static void for_each_piece(GradSync* gs, PieceFn fn) {
    for (int i = 0; i < gs->opt->nseg; i++) {
        const TrainSeg* s = &gs->opt->segs[i];
        for (int o = 0; o < gs->world; o++) {
            ZeroRange x = zero_intersect(&gs->zl, o, s->offset, s->n);
            if (x.begin < x.end) fn(gs, s, x.begin - s->offset, x.end - x.begin, o);
        }
    }
}

static void piece_reduce(GradSync* gs, const TrainSeg* s, size_t off, size_t n, int owner) {
    comm_dev_reduce_sum(gs->comm, s->g + off, s->g + off, n, GS_DTYPE, owner, NULL);
}
// ZeRO-2: reduce to the owner, who adds it to its gradient shard.
static void piece_reduce_into_shard(GradSync* gs, const TrainSeg* s, size_t off, size_t n, int owner) {
    comm_dev_reduce_sum(gs->comm, s->g + off, s->g + off, n, GS_DTYPE, owner, NULL);
    if (owner == gs->rank) add_inplace(gs->gshard + (s->offset + off - gs->opt->begin), s->g + off, n);
}
static void piece_broadcast(GradSync* gs, const TrainSeg* s, size_t off, size_t n, int owner) {
    comm_dev_broadcast(gs->comm, s->p + off, n * sizeof(floatX), owner, NULL);
}

void gradsync_micro_done(GradSync* gs) {
    if (!gs->gshard || gs->model) return;
    // ZeRO-2 without per-layer buckets (adapters): reduce this micro-step's gradients now and
    // empty them, so only the shard accumulates across micro-steps
    for_each_piece(gs, piece_reduce_into_shard);
    for (int i = 0; i < gs->opt->nseg; i++) ops_zero(gs->opt->segs[i].g, gs->opt->segs[i].n * sizeof(floatX));
}

void gradsync_reduce(GradSync* gs) {
    if (gs->world == 1) return;
    if (gs->zero == 0) {
        for (int i = 0; i < gs->opt->nseg; i++)
            comm_dev_allreduce_sum(gs->comm, gs->opt->segs[i].g, gs->opt->segs[i].n, GS_DTYPE, NULL);
    } else if (gs->zero == 1) {
        for_each_piece(gs, piece_reduce);
    }
    // ZeRO-2 reduced each micro-step's gradients as they were produced; ZeRO-3 too, within the
    // group: the groups' sums are added up here
    if (gs->fsdp_on) fsdp_reduce_replicas(&gs->fsdp);
}

double* gradsync_loss_acc(GradSync* gs) { return gs->stats; }

void gradsync_step_stats(GradSync* gs, double* loss_sum, double* norm) {
    const Optimizer* o = gs->opt;
    // sharded: each rank's sum of squares covers its own shard; otherwise every rank holds all of it
    if (gs->sharded) opt_grad_sumsq_acc(o, o->begin, o->end, gs->stats + 1);
    else opt_grad_sumsq_acc(o, 0, o->total, gs->stats + 1);
    double st[2];
    ops_to_host(st, gs->stats, sizeof(st));
    comm_allreduce_sum_f64(gs->comm, st, gs->sharded ? 2 : 1); // the losses always, the norm's shards
    // ZeRO-3 full training with shard groups: every group's pieces cover the whole gradient once,
    // so the sum over all ranks counted it once per group
    if (gs->sharded && gs->fsdp_on && gs->fsdp.gshard && gs->groups > 1) st[1] /= (double)gs->groups;
    *loss_sum = st[0];
    *norm = sqrt(st[1]);
}

void gradsync_share_params(GradSync* gs) {
    // ZeRO 3 full training: the next gathers read the updated pieces (the gathered copies are stale)
    if (gs->fsdp_on && gs->fsdp.gshard) { fsdp_params_changed(&gs->fsdp); return; }
    // each owner updated its range: everyone gets the new parameters
    if (gs->sharded) for_each_piece(gs, piece_broadcast);
}

size_t gradsync_grad_bytes(const GradSync* gs) {
    size_t shard = gs->gshard ? gs->opt->end - gs->opt->begin : 0;
    return (shard + gs->layer_bucket_n + gs->final_bucket_n) * sizeof(floatX) + (gs->fsdp_on ? fsdp_grad_bytes(&gs->fsdp) : 0);
}

size_t gradsync_bucket_numel(const GradSync* gs) {
    return gs->layer_bucket_n + gs->final_bucket_n + (gs->fsdp_on ? fsdp_bucket_numel(&gs->fsdp) : 0);
}
