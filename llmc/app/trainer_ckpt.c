// The trainer's checkpoints (llmc/app/trainer_internal.h): this rank's optimizer state to its state
// file and back (the file's layout: llmc/run/checkpoint.h), the checks before a checkpoint is
// written, the commit protocol around the files (llmc/run/checkpoint_manifest.c), re-sharding on
// resume, and the --keep-best model.
#include "app/trainer_internal.h"
#include "base/check.h"
#include "base/fileio.h"
#include "dist/fsdp.h"
#include "dist/zero.h"
#include "ops/ops.h"
#include "run/checkpoint.h"
#include <math.h>
#include <string.h>

// The part of the flat trainable space this rank's state file holds: the optimizer's range; at
// ZeRO 3 (full training) the ZeRO-1 range, into which the state of the units' pieces is moved, so
// that a checkpoint reads the same whatever the stage that wrote it.
static int state_is_fsdp(const Run* r) { return r->gs.fsdp_on && r->gs.fsdp.gshard; }
static void state_range(const Run* r, size_t* begin, size_t* end, size_t* total) {
    if (!state_is_fsdp(r)) { *begin = r->opt.begin; *end = r->opt.end; *total = r->opt.total; return; }
    const ZeroLayout* z = &r->gs.zl;
    *total = z->total;
    *begin = zero_shard_begin(z, r->rank) < z->total ? zero_shard_begin(z, r->rank) : z->total;
    *end = zero_shard_end(z, r->rank) < z->total ? zero_shard_end(z, r->rank) : z->total;
}
// One optimizer array (backend memory, or host memory with the offload) -> host, in the file's
// layout (collective at ZeRO 3).
static void state_download(Run* r, float* host, const float* state) {
    const size_t n = r->opt.end - r->opt.begin;
    if (!state_is_fsdp(r)) { opt_state_to_host(&r->opt, state, host); return; }
    float* local = (float*)mallocCheck((n ? n : 1) * sizeof(float));
    opt_state_to_host(&r->opt, state, local);
    fsdp_state_to_flat(&r->gs.fsdp, &r->gs.zl, local, host);
    free(local);
}
// ... and back (collective at ZeRO 3).
static void state_upload(Run* r, float* state, const float* host) {
    const size_t n = r->opt.end - r->opt.begin;
    if (!state_is_fsdp(r)) { opt_state_from_host(&r->opt, state, host); return; }
    float* local = (float*)mallocCheck((n ? n : 1) * sizeof(float));
    fsdp_state_from_flat(&r->gs.fsdp, &r->gs.zl, host, local);
    opt_state_from_host(&r->opt, state, local);
    free(local);
}

// The header of this rank's state file.
static void state_header(const Run* r, StateHeader* hp) {
    const TrainFlags* f = &r->c->f;
    int64_t* h = hp->h;
    memset(hp, 0, sizeof(*hp));
    h[SH_MAGIC] = STATE_MAGIC; h[SH_VERSION] = STATE_VERSION;
    h[SH_WORLD] = r->world; h[SH_RANK] = r->rank; h[SH_HAS_MASTER] = r->opt.master != NULL;
    h[SH_STEP] = r->step; h[SH_OPT_T] = r->opt.t;
    DataLoaderState ds = dl_get_state(&r->train);
    h[SH_DL_EPOCH] = ds.epoch; h[SH_DL_SHARD] = ds.shard_i; h[SH_DL_CHUNK] = ds.chunk_i;
    size_t begin, end, total;
    state_range(r, &begin, &end, &total);
    h[SH_BEGIN] = (int64_t)begin; h[SH_END] = (int64_t)end; h[SH_TOTAL] = (int64_t)total;
    h[SH_MODE] = r->c->mode; h[SH_B] = f->batch_size; h[SH_T] = f->seq_len; h[SH_ACCUM] = r->c->accum;
    h[SH_SKIPPED] = r->skipped_total; h[SH_NO_TARGETS] = r->no_target_total; h[SH_ZERO] = f->zero; h[SH_SEED] = f->seed;
    h[SH_TOKENS_PER_STEP] = r->c->tokens_per_step; h[SH_SHUFFLE] = f->shuffle;
    // the evaluation at this step (if it ran already, at the end) is run again on resuming
    const ValTrack* v = r->has_last_val && r->vtrack_pre_step == r->step ? &r->vtrack_pre : &r->vtrack;
    h[SH_VAL_TRACKED] = v->has_best; h[SH_BEST_STEP] = v->best_step; h[SH_EVALS_SINCE_BEST] = v->since_improved;
    memcpy(&h[SH_BEST_VAL_BITS], &v->best, sizeof(double));
    if (r->fp16) { // the loss scale as the next step uses it
        uint32_t bits;
        memcpy(&bits, &r->ls.scale, sizeof(bits));
        h[SH_LOSS_SCALE_BITS] = bits;
        h[SH_SCALE_GROWTH] = r->ls.growth_tracker;
    }
}

static int all_finite(const float* x, size_t n) {
    for (size_t i = 0; i < n; i++) if (!isfinite(x[i])) return 0;
    return 1;
}

// Whether this rank's range of the trainable parameters is finite (read to the host in pieces of
// at most `piece` elements through stage).
static int params_finite(const Run* r, float* stage, size_t piece) {
    const Optimizer* o = &r->opt;
    int ok = 1;
    for (int i = 0; i < o->nseg && ok; i++) {
        const TrainSeg* sg = &o->segs[i];
        const size_t b = sg->offset > o->begin ? sg->offset : o->begin, e = sg->offset + sg->n < o->end ? sg->offset + sg->n : o->end;
        for (size_t k = b; k < e && ok; k += piece) {
            const size_t n = e - k < piece ? e - k : piece;
            ops_download_f32(stage, sg->p + (k - sg->offset), n);
            ok = all_finite(stage, n);
        }
    }
    return ok;
}

// Elements [off, off + n) of one optimizer array of this rank (backend memory, or host memory
// with the offload) -> host.
static void state_piece_to_host(const Run* r, const float* state, size_t off, size_t n, float* host) {
    if (r->opt.offload) memcpy(host, state + off, n * sizeof(float));
    else ops_to_host(host, state + off, n * sizeof(float));
}

// The staging buffer of a checkpoint: every piece of this rank's state and parameters on its way
// to a check or to the state file passes through it (ckpt_stage_elems of the optimizer's range).
static float* state_stage_alloc(const Run* r) {
    const size_t n = ckpt_stage_elems(r->opt.end - r->opt.begin);
    return (float*)mallocCheck((n ? n : 1) * sizeof(float));
}

// Whether every optimizer value and trainable parameter of every rank is finite (collective),
// read piece by piece through stage.
static int state_finite(Run* r, float* stage) {
    const size_t n = r->opt.end - r->opt.begin, piece = ckpt_stage_elems(n);
    const float* arrays[3] = { r->opt.m, r->opt.v, r->opt.master };
    int ok = piece == 0 || params_finite(r, stage, piece);
    for (int k = 0; k < 3 && ok; k++)
        for (size_t off = 0; arrays[k] && off < n && ok; off += piece) {
            const size_t len = n - off < piece ? n - off : piece;
            state_piece_to_host(r, arrays[k], off, len, stage);
            ok = all_finite(stage, len);
        }
    double bad = !ok;
    comm_allreduce_max_f64(&r->comm, &bad, 1);
    return bad == 0.0;
}

// This rank's state file, m, v (and the master weights) piece by piece through stage; at ZeRO 3
// (full training) each array in turn moved into the file's layout first (collective).
static void state_write(Run* r, const char* path, float* stage) {
    StateHeader h;
    state_header(r, &h);
    CkptStateWriter w;
    ckpt_state_begin(&w, path, &h);
    const float* arrays[3] = { r->opt.m, r->opt.v, r->opt.master };
    const size_t piece = ckpt_stage_elems(w.n);
    float* flat = state_is_fsdp(r) ? (float*)mallocCheck((w.n ? w.n : 1) * sizeof(float)) : NULL;
    for (int k = 0; k < w.arrays; k++) {
        if (flat) { state_download(r, flat, arrays[k]); ckpt_state_put(&w, flat, w.n); continue; }
        for (size_t off = 0; off < w.n; off += piece) {
            const size_t len = w.n - off < piece ? w.n - off : piece;
            state_piece_to_host(r, arrays[k], off, len, stage);
            ckpt_state_put(&w, stage, len);
        }
    }
    free(flat);
    ckpt_state_end(&w);
}

// Whether the state of this step may become a checkpoint (every rank gets the same answer): only
// after a finite step (skipped steps leave the weights as they were, but a run of them says the
// weights went bad), and only when every weight and optimizer value is finite. The checkpoint of
// the step this invocation resumed from is there already.
static int checkpoint_due(Run* r, float* stage) {
    r->state_nonfinite = 0;
    if (r->step == r->start.resume_step) return 0;
    if (r->consecutive_bad > 0) {
        say(r, "checkpoint: step %ld not written: the last %ld step%s had a non-finite loss or gradient norm\n",
            r->step, r->consecutive_bad, r->consecutive_bad == 1 ? "" : "s");
        return 0;
    }
    if (state_finite(r, stage)) return 1;
    r->state_nonfinite = 1;
    say(r, "checkpoint: step %ld not written: the weights or the optimizer state hold non-finite values\n", r->step);
    return 0;
}

// A checkpoint of this step, when checkpoint_due allows it: rank 0's PENDING marker first (the
// protocol's record of what is in flight), then the model or adapter, every rank's state file,
// the DONE manifest (written last: the checkpoint is complete only when every rank has written
// its part), the marker removed, and pruning, which keeps the newest checkpoint known good.
// Returns whether this step has a checkpoint.
int trainer_save_checkpoint(Run* r) {
    const TrainFlags* f = &r->c->f;
    if (!r->c->write_outputs) return 0;
    float* stage = state_stage_alloc(r);
    if (!checkpoint_due(r, stage)) { free(stage); return r->step == r->start.resume_step; }
    if (r->rank == 0) ckpt_pending_begin(f->out_dir, r->step);
    comm_barrier(&r->comm); // no rank writes a file of the step before the marker exists
    char path[LLMC_PATH_MAX];
    gradsync_unshard_model(&r->gs); // ZeRO 3: rank 0 gathers the whole model
    outputs_checkpoint(&r->out, &r->m, r->step); // rank 0: the model, or the adapter as a PEFT directory
    gradsync_reshard_model(&r->gs);
    ckpt_path(path, sizeof(path), f->out_dir, "state", r->step, r->rank);
    state_write(r, path, stage);
    free(stage);
    ckpt_commit(&r->comm, f->out_dir, r->step, r->lora ? "adapter" : "model");
    if (r->ckpt_last >= 0 && r->ckpt_last_good) r->ckpt_good = r->ckpt_last;
    r->ckpt_last = r->step; r->ckpt_last_here = 1; r->ckpt_last_good = 0;
    if (r->rank == 0) {
        ckpt_pending_end(f->out_dir, r->step);
        ckpt_prune(f->out_dir, f->keep_checkpoints, r->ckpt_good);
        printf("checkpoint: step %ld written to %s\n", r->step, f->out_dir);
    }
    comm_barrier(&r->comm);
    return 1;
}

// A finite step after the newest checkpoint shows its weights are good: pruning may now take the
// one kept because it was the newest good one.
void trainer_confirm_checkpoint(Run* r) {
    if (r->ckpt_last < 0 || r->ckpt_last_good) return;
    r->ckpt_last_good = 1;
    r->ckpt_good = r->ckpt_last;
    if (r->rank == 0 && r->c->write_outputs) ckpt_prune(r->c->f.out_dir, r->c->f.keep_checkpoints, r->ckpt_good);
}

// The header of rank 0's state file must describe this run's batch geometry and trainable space.
static void check_state_matches(Run* r, const char* path, const StateHeader* h0) {
    const TrainFlags* f = &r->c->f;
    const char* hint = "resume with the same model, --batch-size, --seq-len and --total-batch-tokens as the checkpointed run";
    if (h0->h[SH_MODE] != r->c->mode) fatal(hint, "'%s' was written by %s, not by this program", path, h0->h[SH_MODE] ? "train_lora" : "train_gpt2");
    char exact[256];
    snprintf(exact, sizeof(exact), "resume with --batch-size %lld --seq-len %lld --total-batch-tokens %lld (the checkpoint's batch; "
             "any number of ranks that divides it)", (long long)h0->h[SH_B], (long long)h0->h[SH_T], (long long)h0->h[SH_TOKENS_PER_STEP]);
    if (h0->h[SH_B] != f->batch_size || h0->h[SH_T] != f->seq_len || h0->h[SH_TOKENS_PER_STEP] != r->c->tokens_per_step)
        fatal(exact, "'%s' was written with batch %lld x %lld and %lld tokens per step; this run has %d x %d and %lld",
              path, (long long)h0->h[SH_B], (long long)h0->h[SH_T], (long long)h0->h[SH_TOKENS_PER_STEP],
              f->batch_size, f->seq_len, (long long)r->c->tokens_per_step);
    size_t begin, end, total;
    state_range(r, &begin, &end, &total);
    if ((size_t)h0->h[SH_TOTAL] != total)
        fatal(hint, "'%s' holds optimizer state for %lld trainable parameters; this run has %zu",
              path, (long long)h0->h[SH_TOTAL], total);
    if (h0->h[SH_STEP] > r->steps)
        fatal("give a --steps (or --epochs) beyond the checkpoint's step to continue the run", "the checkpoint in '%s' is at step %lld, beyond the run's %d steps",
              f->out_dir, (long long)h0->h[SH_STEP], r->steps);
}

// Optimizer state, re-sharded by zero_reshard_plan when the ranks or the stage changed: the old
// run's ranges are the shards of its layout (one shard holding everything when it was not
// sharded), this rank's range is its shard of this run's layout, and each copy of the plan reads
// exactly its part of one old rank's file.
static void restore_optimizer(Run* r, long step, const StateHeader* h0) {
    const char* dir = r->c->f.out_dir;
    const int old_world = (int)h0->h[SH_WORLD], old_sharded = h0->h[SH_ZERO] >= 1 && old_world > 1;
    size_t begin, end, total;
    state_range(r, &begin, &end, &total);
    const int sharded = r->gs.sharded || state_is_fsdp(r); // (ZeRO 3 reads the ZeRO-1 range)
    ZeroLayout from, to;
    zero_layout_init(&from, total, old_sharded ? old_world : 1, ZERO_ALIGN_DEFAULT);
    zero_layout_init(&to, total, sharded ? r->world : 1, ZERO_ALIGN_DEFAULT);
    ZeroCopy* plan = (ZeroCopy*)mallocCheck((size_t)from.world * sizeof(ZeroCopy));
    const int ncopy = zero_reshard_plan(&from, &to, sharded ? r->rank : 0, plan, from.world);
    const size_t n = end - begin;
    float* mh = (float*)mallocCheck(n * sizeof(float));
    float* vh = (float*)mallocCheck(n * sizeof(float));
    float* mas = r->opt.master ? (float*)mallocCheck(n * sizeof(float)) : NULL;
    int have_master = 1;
    for (int k = 0; k < ncopy; k++) {
        const ZeroCopy* cp = &plan[k];
        char path[LLMC_PATH_MAX];
        StateHeader hq;
        ckpt_path(path, sizeof(path), dir, "state", step, cp->src_rank);
        ckpt_read_state_header(path, &hq);
        if (hq.h[SH_WORLD] != old_world || hq.h[SH_RANK] != cp->src_rank || hq.h[SH_STEP] != step)
            fatal("the checkpoint directory mixes files of different runs", "'%s' does not belong to step %ld of a %d-rank run", path, step, old_world);
        have_master &= (int)hq.h[SH_HAS_MASTER];
        const size_t b = zero_shard_begin(&from, cp->src_rank) + cp->src_off;
        size_t got = ckpt_read_state_overlap(path, &hq, b, b + cp->n, mh + cp->dst_off, vh + cp->dst_off,
                                             hq.h[SH_HAS_MASTER] && mas ? mas + cp->dst_off : NULL);
        if (got != cp->n) fatal("the checkpoint is incomplete", "'%s' holds %zu of the %zu elements of optimizer state this rank needs from it",
                                path, got, cp->n);
    }
    state_upload(r, r->opt.m, mh);
    state_upload(r, r->opt.v, vh);
    if (mas && have_master) state_upload(r, r->opt.master, mas);
    free(mh); free(vh); free(mas); free(plan);
}

// The data position: the loader walks chunks of one global micro-batch (ranks x B x T tokens), so
// a checkpoint of another rank count is converted to this run's chunk size.
static void restore_data_position(Run* r, const StateHeader* h0) {
    const TrainFlags* f = &r->c->f;
    const int old_world = (int)h0->h[SH_WORLD];
    DataLoaderState ds = { h0->h[SH_DL_EPOCH], h0->h[SH_DL_SHARD], h0->h[SH_DL_CHUNK] };
    if (old_world != r->world) {
        if (h0->h[SH_SHUFFLE] || f->shuffle)
            fatal("resume a --shuffle run with the same number of ranks", "the shuffled batch order depends on the number of ranks (%d before, %d now)", old_world, r->world);
        int64_t tokens = ds.chunk_i * (int64_t)old_world * f->batch_size * f->seq_len;
        int64_t chunk = (int64_t)r->world * f->batch_size * f->seq_len;
        if (tokens % chunk) fatal("resume with a number of ranks that divides the position", "the data position (%lld tokens into the shard) is not a multiple of %lld",
                                  (long long)tokens, (long long)chunk);
        ds.chunk_i = tokens / chunk;
        say(r, "re-sharded: %d ranks -> %d ranks (ZeRO %lld -> %d)\n", old_world, r->world, (long long)h0->h[SH_ZERO], f->zero);
    }
    dl_set_state(&r->train, ds);
}

void trainer_restore_checkpoint(Run* r, long step) {
    char path[LLMC_PATH_MAX];
    StateHeader h0;
    ckpt_check_states(r->c->f.out_dir, step, &h0); // every rank's header, validated and cross-checked
    ckpt_path(path, sizeof(path), r->c->f.out_dir, "state", step, 0);
    check_state_matches(r, path, &h0);
    restore_optimizer(r, step, &h0);
    r->opt.t = (int)h0.h[SH_OPT_T];
    r->step = (long)h0.h[SH_STEP];
    r->skipped_total = (long)h0.h[SH_SKIPPED];
    r->no_target_total = (long)h0.h[SH_NO_TARGETS];
    if (r->fp16 && h0.h[SH_LOSS_SCALE_BITS]) { // (a checkpoint of another --dtype: the scale starts at --loss-scale-init)
        const uint32_t bits = (uint32_t)h0.h[SH_LOSS_SCALE_BITS];
        memcpy(&r->ls.scale, &bits, sizeof(bits));
        r->ls.growth_tracker = (int)h0.h[SH_SCALE_GROWTH];
    }
    if (h0.h[SH_VAL_TRACKED]) {
        r->vtrack.has_best = 1; r->vtrack.best_step = (long)h0.h[SH_BEST_STEP]; r->vtrack.since_improved = (long)h0.h[SH_EVALS_SINCE_BEST];
        memcpy(&r->vtrack.best, &h0.h[SH_BEST_VAL_BITS], sizeof(double));
    }
    restore_data_position(r, &h0);
}

// --keep-best: the model of the best validation loss so far, saved like the final model into
// OUT/best/, and OUT/best/best.json (step, val loss) written last: like a checkpoint's DONE
// marker, it is removed before the files are replaced, so best/ with best.json is one whole model.
void trainer_save_best(Run* r) {
    if (r->rank != 0) return;
    char dir[LLMC_PATH_MAX], marker[LLMC_PATH_MAX];
    path_join(dir, sizeof(dir), r->c->f.out_dir, "best");
    path_join(marker, sizeof(marker), dir, "best.json");
    mkdir_p(dir);
    if (file_exists(marker) && remove(marker) != 0) fatal("check the permissions of --out", "cannot remove '%s'", marker);
    printf("best: val loss %.6f at step %ld (the best so far) -> %s/\n", r->vtrack.best, r->vtrack.best_step, dir);
    outputs_save(&r->out, &r->m, dir);
    char text[256];
    snprintf(text, sizeof(text), "{\"step\": %ld, \"val_loss\": %.9g, \"val_ppl\": %.9g}\n", r->vtrack.best_step, r->vtrack.best, exp(r->vtrack.best));
    atomic_write_file(marker, text, strlen(text));
}
