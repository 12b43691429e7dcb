#define _GNU_SOURCE
#include "run/trainer.h"
#include "base/check.h"
#include "base/timer.h"
#include "run/checkpoint.h"
#include "comm/comm.h"
#include "model/config.h"
#include "run/dataloader.h"
#include "ops/device.h"
#include "base/fileio.h"
#include "model/gpt2.h"
#include "dist/gradsync.h"
#include "model/lora.h"
#include "model/loss_scale.h"
#include "base/mfu.h"
#include "model/model.h"
#include "model/model_io.h"
#include "ops/ops.h"
#include "model/optimizer.h"
#include "model/peft_io.h"
#include "model/qlora.h"
#include "model/params.h"
#include "run/runlog.h"
#include "run/runlock.h"
#include "run/runrecord.h"
#include "run/runsignal.h"
#include "run/run_outputs.h"
#include "run/plan_run.h"
#include "run/preftrain.h"
#include "model/sampler.h"
#include "model/schedule.h"
#include "text/textgen.h"
#include "dist/zero.h"
#include <math.h>
#include <signal.h>
#include <string.h>

// The validation loss across evaluations: the best one (--keep-best) and the evaluations since
// it last improved by more than --early-stopping-min-delta (early stopping).
typedef struct {
    int has_best;
    double best;
    long best_step;
    long since_improved;
} ValTrack;

typedef struct {
    const RunConfig* c;        // the validated configuration (read-only)
    int rank, world;
    Comm comm;
    GradSync gs;               // gradients across ranks (ZeRO stages)
    Model m;                   // the model with its adapters (train_lora) and NF4 base (QLoRA)
    GPT2* model;               // &m.gpt
    LoraModel* lora;           // m.lora
    Nf4Base* nf4;              // m.nf4
    Optimizer opt;
    DataLoader train, val;
    int has_val;
    int64_t eval_batches;      // validation batches per evaluation (global batches of the split)
    int *inputs, *targets;     // host, accum * B * T
    int* docs;                 // host, accum * B * T: record starts of packed data (NULL: none packed)
    LRSchedule sched;
    long step;                 // optimizer steps completed
    long skipped_total;        // steps skipped for a non-finite loss or gradient (whole run)
    long no_target_total;      // steps without a target (whole run)
    long consecutive_bad;      // ... in a row, up to now
    long ckpt_last;            // the newest checkpoint: written by this invocation or resumed from; -1
    int ckpt_last_here;        // ... written by this invocation
    int ckpt_last_good;        // ... and a finite step came after it (its weights give finite steps)
    int state_nonfinite;       // the last checkpoint was refused: a weight or optimizer value is not finite
    long ckpt_good;            // the newest checkpoint known good; -1 (pruning never removes it)
    long steps_this_run;       // steps of this invocation (--stop-after)
    int steps;                 // the run's length: --steps, or --epochs over the training data
    RunStart start;            // the checkpoint this invocation resumes from, the record, changes
    RunLog rl;                 // console lines, log.jsonl, the summary
    ValTrack vtrack;           // the best validation loss so far (kept in checkpoints) ...
    ValTrack vtrack_pre;       // ... and as it was before the evaluation at step vtrack_pre_step
    long vtrack_pre_step;
    double last_val;           // the last evaluation (has_last_val)
    long last_val_step;
    int has_last_val;
    int early_stopped;
    RunOutputs out;            // what the run writes for people and tools (llmc/run/run_outputs.h)
    RunPlan plan;              // the run's memory and time plan (llmc/run/plan_run.h)
    int pref_on;               // a preference objective (--objective dpo|ipo|orpo|simpo) ...
    PrefTrain pref;            // ... its buffers and reference (llmc/run/preftrain.h)
    PrefMeans pref_step, pref_val; // the last step's and evaluation's metrics
    // sampling (rank 0)
    Tokenizer* tok;
    int* prompt_ids;
    int n_prompt;
    KVCache* kv;
    char dtype_desc[160];      // --dtype as applied, for the banner
    int fp16;                  // --dtype fp16: the loss is scaled (ls), overflowing steps skipped
    LossScale ls;
    int scale_collapsed;       // the run stops: the loss scale fell below 1
} Run;

static const char* const HINT_FLAGS = "run with --help to see every flag";

// Console output comes from rank 0 only.
#define say(r, ...) do { if ((r)->rank == 0) { printf(__VA_ARGS__); fflush(stdout); } } while (0)

// ----------------------------------------------------------------------------
// checkpoints

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
static int save_checkpoint(Run* r) {
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
static void confirm_checkpoint(Run* r) {
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

static void restore_checkpoint(Run* r, long step) {
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
    if (r->fp16 && h0.h[SH_LOSS_SCALE_BITS]) { // (a checkpoint of another --dtype: the scale starts at its default)
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
static void save_best(Run* r) {
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

// ----------------------------------------------------------------------------
// sampling (--sample-*): rank 0 continues --prompt with the current model. The vocabulary and
// the prompt are checked before training starts, so a bad one fails at once, not hours later.

static void sample_generate_now(Run* r);

static void sample_setup(Run* r) {
    const TrainFlags* f = &r->c->f;
    const GPT2Config* cfg = &r->model->cfg;
    if (r->c->sample_tokens <= 0 || r->rank != 0) return;
    char vpath[LLMC_PATH_MAX];
    if (textgen_find_vocab(f->sample.vocab, f->model, vpath, sizeof(vpath)) != 0)
        fatal("pass --vocab DIR (encoder.json + vocab.bpe, vocab.json + merges.txt, or tokenizer.json), or drop --sample-tokens / --sample-every",
              "sampling needs a vocabulary and none was found for --model %s (nor data/gpt2)", f->model);
    r->tok = (Tokenizer*)mallocCheck(sizeof(Tokenizer));
    tok_load(r->tok, vpath);
    textgen_encode_prompt(r->tok, f->sample.prompt, cfg->vocab_size, cfg->max_seq_len, r->c->sample_tokens, "--sample-tokens",
                          &r->prompt_ids, &r->n_prompt);
}

static void sample_now(Run* r) {
    if (r->c->sample_tokens <= 0) return;
    gradsync_unshard_model(&r->gs); // ZeRO 3 (every rank): rank 0 samples with the whole model
    if (r->tok) sample_generate_now(r);
    gradsync_reshard_model(&r->gs);
}

static void sample_generate_now(Run* r) {
    const TrainFlags* f = &r->c->f;
    if (!r->kv) { // allocated at the first sample, kept for the others
        r->kv = (KVCache*)mallocCheck(sizeof(KVCache));
        kv_init(r->kv, r->model, 1, r->n_prompt + r->c->sample_tokens - 1);
    }
    FILE* copy = NULL;
    if (r->c->write_outputs) {
        char path[LLMC_PATH_MAX];
        path_join(path, sizeof(path), f->out_dir, "samples.txt");
        copy = fopen(path, "ab"); // a log, appended like log.jsonl (NULL: console only)
        if (copy) fprintf(copy, "step %ld:\n", r->step);
    }
    printf("sample (step %ld):\n", r->step);
    textgen_echo_prompt(r->tok, r->prompt_ids, r->n_prompt, stdout, copy);
    SampleParams sp = { f->sample.temperature, f->sample.top_k, (uint64_t)f->seed };
    TextStream gs = { r->tok, stdout, copy, r->tok->eot_id };
    sample_generate(r->model, r->kv, r->prompt_ids, r->n_prompt, r->c->sample_tokens, &sp, r->tok->eot_id, NULL, textgen_stream_token, &gs);
    printf("\n---\n");
    fflush(stdout);
    if (copy) { fputs("\n\n", copy); fclose(copy); }
}

static void sample_free(Run* r) {
    if (r->kv) { kv_free(r->kv); free(r->kv); }
    if (r->tok) { tok_free(r->tok); free(r->tok); }
    free(r->prompt_ids);
}

// ----------------------------------------------------------------------------
// the model

// train_lora: the adapters for the frozen base: new (PEFT init) or from --adapter. When resuming,
// the structure comes from the same flags / --adapter and the values from the checkpoint.
static void lora_source(Run* r, long resume_step, LoraSource* src, char* values, size_t cap) {
    const RunConfig* c = r->c;
    const TrainFlags* f = &c->f;
    memset(src, 0, sizeof(*src));
    src->adapter = f->adapter;
    if (f->adapter) {
        const char* flags[] = {"--lora-rank", "--lora-alpha", "--lora-targets", "--lora-layers", "--rslora", "--lora-bias", "--train-ln-f"};
        for (int i = 0; i < 7; i++)
            if (runconfig_given(c, flags[i])) say(r, "note: %s is ignored: the structure of the adapter in --adapter %s is used\n", flags[i], f->adapter);
    }
    src->spec.rank = f->lora_rank; src->spec.alpha = f->lora_alpha; src->spec.rslora = f->rslora;
    src->spec.dropout = f->lora_dropout; src->spec.bias = c->lora_bias; src->spec.train_ln_f = f->train_ln_f;
    src->spec.targets = c->lora_targets;
    src->layers = f->lora_layers;
    src->dropout_override = c->lora_dropout_given;
    src->seed = (uint64_t)f->seed;
    // (base_model_name_or_path of the saved adapters: outputs_init, once the base directory is known)
    if (resume_step >= 0) {
        ckpt_path(values, cap, f->out_dir, "adapter", resume_step, 0);
        src->values = values;
    }
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

// The model: --model (or, resuming full training, the checkpoint's model) with its adapters and
// NF4 base, activations for --batch-size x --seq-len.
static void build_model(Run* r, long resume_step) {
    const RunConfig* c = r->c;
    const TrainFlags* f = &c->f;
    char ckpt_model[LLMC_PATH_MAX], ckpt_adapter[LLMC_PATH_MAX];
    LoraSource src;
    ModelSpec spec;
    memset(&spec, 0, sizeof(spec));
    spec.path = f->model;
    if (resume_step >= 0 && c->mode == TRAIN_FULL) { // (LoRA resumes from the base in --model + the adapter checkpoint)
        ckpt_path(ckpt_model, sizeof(ckpt_model), f->out_dir, "model", resume_step, 0);
        spec.path = ckpt_model;
    }
    spec.seed = (uint64_t)f->seed;
    spec.qlora = c->qlora;
    // bf16 GEMMs hold LoRA's frozen base in bf16, outside the FSDP units: at --zero 3 it stays in
    // the units (fp32, sharded, rounded to bf16 per GEMM), or every rank would hold all of it
    spec.base_bf16 = ops_gemm_dtype() == OPS_BF16 && f->zero < 3;
    spec.trainable = c->mode == TRAIN_FULL ? GPT2_TRAIN_ALL : 0u;
    spec.recompute = f->recompute;
    spec.B = f->batch_size; spec.T = f->seq_len; spec.T_flag = "--seq-len";
    spec.backward = 1;
    if (c->mode == TRAIN_LORA) {
        lora_source(r, resume_step, &src, ckpt_adapter, sizeof(ckpt_adapter));
        spec.lora_src = &src;
    }
    model_assemble(&r->m, &spec);
    r->model = &r->m.gpt; r->lora = r->m.lora; r->nf4 = r->m.nf4;
    outputs_init(&r->out, c, &r->m, r->rank);
    sample_setup(r);
}

// ----------------------------------------------------------------------------
// set-up: the run directory, the run's length, data, optimizer

// --out (locked by runrecord_start) of a new run must not hold another run's checkpoints (a record
// alone, of a run stopped before its first checkpoint, is replaced), nor may the run write over
// its --model or --adapter there (outputs_check_inputs: the checkpoints' steps once the run's
// length is known). What interrupted saves left there is removed.
static void check_out_dir(Run* r) {
    const TrainFlags* f = &r->c->f;
    if (!r->c->write_outputs) return;
    if (r->rank == 0) outputs_check_inputs(r->c, 0, -1);
    if (r->start.resume_step < 0 && ckpt_find_latest(f->out_dir) >= 0) // never clobber another run's checkpoints and log
        fatal("add --resume to continue that run, or choose another --out", "'%s' holds checkpoints of an earlier run", f->out_dir);
    if (r->rank == 0 && dir_exists(f->out_dir)) ckpt_clean(f->out_dir); // what interrupted saves and pruning left
    comm_barrier(&r->comm);
}

// After startup, the first writes: the directory, the record of the settings, the log.
static void open_out_dir(Run* r) {
    const RunConfig* c = r->c;
    runlock_started(); // (from here on --out stays, whatever happens)
    if (r->rank == 0 && c->write_outputs) {
        mkdir_p(c->f.out_dir);
        if (r->start.resume_step < 0 || !r->start.has_rec || r->start.changes.n > 0 || r->start.rec.world != r->world) runrecord_write(c);
    }
    RunLog* l = &r->rl;
    l->steps = r->steps;
    l->steps_per_epoch = (double)dl_batches_per_epoch(&r->train) / (double)c->accum;
    l->tokens_per_step = c->tokens_per_step;
    l->step0 = r->step;
    l->has_val = r->has_val; l->eval_every = c->f.eval_every; // (what a resume's log keeps)
    l->objective = (PrefObjective)c->objective;
    runlog_open(l, c->write_outputs ? c->f.out_dir : NULL, r->rank, r->start.resume_step);
    comm_barrier(&r->comm);
}

// The reference of DPO / IPO stored before training (read back, or computed and written now that
// --out exists), and the objective's line of the start-up report.
static void start_pref(Run* r) {
    const RunConfig* c = r->c;
    comm_watchdog_op_unbounded(&r->comm, "reference log-probabilities");
    const double t0 = timer_now_s();
    const int computed = preftrain_reference(&r->pref, c, &r->m, &r->train, r->has_val ? &r->val : NULL, &r->comm,
                                             c->write_outputs ? c->f.out_dir : NULL, r->start.resume_step >= 0);
    char line[1024];
    preftrain_describe(&r->pref, c, line, sizeof(line));
    say(r, "objective: %s\n", line);
    if (r->pref.ref == PREF_REF_STORED)
        say(r, "reference: %s in %.1f s\n", computed ? "log-probabilities computed" : "log-probabilities read back from --out", timer_now_s() - t0);
}

// The run's length in optimizer steps: --steps, or --epochs passes over the training data
// (rounded up to whole steps).
static int run_length(const RunConfig* c, int64_t batches_per_epoch) {
    const TrainFlags* f = &c->f;
    if (f->epochs <= 0) return f->steps;
    const double steps = ceil((double)f->epochs * (double)batches_per_epoch / (double)c->accum - 1e-6);
    if (steps > 1e9) fatal("lower --epochs", "--epochs %g is %.0f steps of %d micro-batches; at most 1e9 are supported", f->epochs, steps, c->accum);
    const int n = steps < 1 ? 1 : (int)steps;
    if (f->warmup > n) fatal(HINT_FLAGS, "--warmup-steps (%d) is larger than the %d steps of --epochs %g", f->warmup, n, f->epochs);
    return n;
}

static void schedule_of(LRSchedule* s, const RunConfig* c, int steps) {
    const TrainFlags* f = &c->f;
    s->kind = (SchedKind)c->schedule;
    s->lr = f->lr; s->warmup = f->warmup; s->total = steps;
    s->final_frac = f->final_lr_frac; s->cooldown_frac = f->cooldown_frac;
}

// Packed records (data/prepare --pack) need attention that keeps them apart: refused, naming the
// data, where the backend has none.
static void check_packed(Run* r, const DataLoader* dl, const char* what) {
    if (!dl->packed || ops_caps().doc_attention) return;
    fatal("train packed data with the CPU build, or prepare it with --record-windows instead of --pack",
          "'%s' holds packed records (data/prepare --pack), but the attention of this build's backend (%s) does not keep records apart",
          what, ops_backend_name());
}

// A preference objective on pairs (llmc/run/preftrain.h); pairs need one (dl_next would refuse
// them at the first step: here it is said before anything runs).
static void setup_pref(Run* r) {
    const RunConfig* c = r->c;
    const int pairs = r->train.pairs || (r->has_val && r->val.pairs);
    if (c->objective == PREF_SFT && pairs)
        fatal("train preference pairs with --objective dpo, ipo, orpo or simpo (docs/PREFERENCE.md), or prepare {\"prompt\", \"completion\"} "
              "records for supervised fine-tuning", "%s '%s' holds preference pairs: supervised fine-tuning (--objective sft) would train the "
              "rejected completions too", r->train.pairs ? "--train-data" : "--val-data", r->train.pairs ? c->f.train_data : c->f.val_data);
    if (c->objective == PREF_SFT) return;
    preftrain_init(&r->pref, c, &r->train, r->has_val ? &r->val : NULL, c->f.batch_size, c->f.seq_len, c->accum);
    r->pref_on = 1;
}

static void setup_data(Run* r) {
    const RunConfig* c = r->c;
    const TrainFlags* f = &c->f;
    const size_t n = (size_t)c->accum * f->batch_size * f->seq_len; // bounded by RUNCFG_MAX_RANK_STEP_TOKENS
    r->inputs = (int*)mallocCheck(n * sizeof(int));
    r->targets = (int*)mallocCheck(n * sizeof(int));
    const int V = r->model->cfg.vocab_size;
    dl_init(&r->train, f->train_data, f->batch_size, f->seq_len, r->rank, r->world, V, f->shuffle, (uint64_t)f->seed);
    if (f->val_data) {
        dl_init_eval(&r->val, f->val_data, f->batch_size, f->seq_len, r->rank, r->world, V);
        r->has_val = 1;
        // each evaluation reads every batch at most once: a split smaller than --eval-batches is
        // read whole, with a warning, rather than counting some batches twice
        const int64_t split = dl_batches_per_epoch(&r->val);
        r->eval_batches = c->eval_batches == 0 ? split : c->eval_batches;
        if (r->eval_batches > split) {
            say(r, "warning: --eval-batches %d is more than the %lld batches of the validation split (%s): each evaluation reads the whole split once\n",
                c->eval_batches, (long long)split, f->val_data);
            r->eval_batches = split;
        }
    }
    r->steps = run_length(c, dl_batches_per_epoch(&r->train));
    check_packed(r, &r->train, f->train_data);
    if (r->has_val) check_packed(r, &r->val, f->val_data);
    if (r->train.packed || (r->has_val && r->val.packed) || r->train.pairs) r->docs = (int*)mallocCheck(n * sizeof(int));
    setup_pref(r);
}

// The ZeRO-3 flags at another stage: a note, not an error (a run resumed at another stage carries
// them from its record).
static void note_zero3_flags(Run* r) {
    const TrainFlags* f = &r->c->f;
    if (f->zero == 3) return;
    if (f->zero3_keep) say(r, "note: --zero3-keep is ignored at --zero %d\n", f->zero);
    if (f->shard_group) say(r, "note: --shard-group is ignored at --zero %d\n", f->zero);
}

static void setup_optimizer(Run* r) {
    const RunConfig* c = r->c;
    const TrainFlags* f = &c->f;
    note_zero3_flags(r);
    TrainSeg* segs = (TrainSeg*)mallocCheck(sizeof(TrainSeg) * (size_t)model_max_segments(&r->m));
    int nseg = model_segments(&r->m, segs);
    size_t ntrain = 0;
    for (int i = 0; i < nseg; i++) ntrain += segs[i].n;
    // with ZeRO >= 1 this rank keeps AdamW state (and master weights) for its own range only
    gradsync_init(&r->gs, &r->comm, f->zero, ntrain);
    gradsync_shard_model(&r->gs, r->model, r->nf4, c->mode == TRAIN_FULL, f->zero3_keep, f->shard_group); // ZeRO 3
    if (r->gs.fsdp_on && c->mode == TRAIN_LORA) { // trained base tensors moved out of the units
        model_lora_extras_rebind(&r->m);
        nseg = model_segments(&r->m, segs);
    }
    if (r->gs.fsdp_on && c->mode == TRAIN_FULL) { // the optimizer updates this rank's pieces of the units
        free(segs);
        segs = (TrainSeg*)mallocCheck(sizeof(TrainSeg) * (size_t)fsdp_max_segments(&r->gs.fsdp));
        nseg = fsdp_segments(&r->gs.fsdp, segs);
        opt_init(&r->opt, segs, nseg, 0, (size_t)-1);
    } else
        opt_init(&r->opt, segs, nseg, gradsync_range_begin(&r->gs), gradsync_range_end(&r->gs));
    if (f->offload_optimizer) opt_offload(&r->opt); // AdamW state in pinned host memory, the update on the CPU
    gradsync_attach(&r->gs, &r->opt, c->mode == TRAIN_FULL ? r->model : NULL);
    free(segs);
    schedule_of(&r->sched, c, r->steps);
}

// What this invocation changed in the recorded settings; for a changed schedule, the learning
// rate of the next step with the recorded and with the new one, so that no jump goes unnoticed.
static void report_changes(Run* r) {
    const RunChanges* ch = &r->start.changes;
    int schedule = 0;
    for (int i = 0; i < ch->n; i++) {
        const RunChange* c = &ch->items[i];
        say(r, "resume: %s %s (recorded: %s)%s\n", c->flag, c->after, c->before,
            c->kind == CHANGE_OPTIMIZER ? ": applies from the next step on" : "");
        schedule |= c->kind == CHANGE_SCHEDULE;
    }
    if (!schedule || !r->start.has_rec) return;
    LRSchedule was;
    schedule_of(&was, &r->start.rec, run_length(&r->start.rec, dl_batches_per_epoch(&r->train)));
    const float a = sched_lr(&was, (int)r->step), b = sched_lr(&r->sched, (int)r->step);
    say(r, "resume: the schedule changed: the learning rate of step %ld is %.4e (with the recorded settings: %.4e%s); the run ends at step %d (recorded: %d)\n",
        r->step + 1, b, a, a == b ? ", the same" : "", r->steps, was.total);
}

// ----------------------------------------------------------------------------
// the report printed before training

static void report_model(Run* r) {
    const TrainFlags* f = &r->c->f;
    const GPT2Config* cfg = &r->model->cfg;
    // the vocabulary padding rows of wte are never trained: count what HF would count
    size_t pad_rows = r->model->g[PT_WTE] ? (size_t)(cfg->padded_vocab_size - cfg->vocab_size) * (size_t)cfg->channels : 0;
    size_t trainable = r->opt.total - pad_rows, total_params = params_count_unpadded(&r->model->pt);
    if (r->lora) trainable = r->opt.total - (r->lora->total - r->lora->n_trainable); // without the q/k/v split's structural zeros
    say(r, "backend: %s\n", ops_backend_name());
    say(r, "dtype: %s\n", r->dtype_desc);
    say(r, "model: %s | L=%d C=%d NH=%d vocab=%d (padded %d) max_seq_len=%d | %zu parameters\n", r->m.source,
           cfg->num_layers, cfg->channels, cfg->num_heads, cfg->vocab_size, cfg->padded_vocab_size, cfg->max_seq_len, total_params);
    if (r->lora) {
        char what[1024];
        lora_describe(r->lora, what, sizeof(what));
        say(r, "lora: %d adapters | %s%s%s\n", r->lora->n, what, f->adapter ? " | initial adapter: " : "", f->adapter ? f->adapter : "");
        say(r, "trainable: %zu parameters (%.4f%% of %zu)\n", trainable, 100.0 * (double)trainable / (double)total_params, total_params);
    } else
        say(r, "trainable: %zu parameters (%.2f%%)\n", trainable, 100.0 * (double)trainable / (double)total_params);
    char data[2 * LLMC_PATH_MAX];
    dl_describe(&r->train, r->has_val ? &r->val : NULL, data, sizeof(data));
    say(r, "data: %s\n", data);
    say(r, "comm: %s, rank %d of %d\n", comm_impl_name(&r->comm), r->rank, r->world);
    say(r, "batch: %d x %d per rank x %d ranks x %d accumulation = %lld tokens/step\n",
           f->batch_size, f->seq_len, r->world, r->c->accum, (long long)r->c->tokens_per_step);
}

// The model FLOPs of a step on this rank and the device's peak bf16 FLOP/s, for the step line
// (llmc/run/runlog.h: TFLOP/s and MFU).
static void setup_mfu(Run* r) {
    const GPT2Config* cfg = &r->model->cfg;
    const double per_token = mfu_flops_per_token(params_count_unpadded(&r->model->pt), r->lora != NULL,
                                                 r->lora ? r->lora->n_trainable : 0, cfg->num_layers, cfg->channels, r->c->f.seq_len);
    RunLog* l = &r->rl;
    l->step_flops = per_token * (double)r->c->tokens_per_step / (double)r->world;
    const char* model = NULL;
    l->peak_flops = mfu_peak_bf16_flops(ops_backend_name(), &model);
    if (l->peak_flops > 0)
        say(r, "mfu: %.3g TFLOP per step per rank, peak %.1f TFLOP/s bf16 (%s)\n", l->step_flops / 1e12, l->peak_flops / 1e12, model);
}

// Stage 3's sharding in exact element counts, so tests can check it: params per rank = the pieces
// (total / ranks + padding) plus the gather buffers (two units, or every unit with keep).
static void report_zero3(Run* r) {
    const Fsdp* z = &r->gs.fsdp;
    size_t units_total = 0;
    for (int u = 0; u < z->nunits; u++) units_total += z->unit_n[u];
    say(r, "zero3: units %d | parameter elements %zu | sharded over %d ranks x %d groups | per rank: parameter shard %zu elements, "
           "gather buffers %d x up to %zu elements (%zu in all)%s | gradient shard %zu elements | largest unit %zu elements\n",
        z->nunits, units_total, z->world, r->gs.groups, z->shard_n, z->nslots, z->max_unit, fsdp_slot_bytes(z) / sizeof(floatX),
        z->keep ? " (--zero3-keep)" : "", z->gshard ? z->shard_n : 0, z->max_unit);
    if (z->nf4.base) // bytes, the same way: the packed images (codes, scales, code maps, aligned)
        say(r, "zero3: NF4 base %zu bytes in packed images | per rank: NF4 shard %zu bytes, NF4 gather buffers %d x up to %zu bytes (%zu in all)\n",
            z->nf4.total, z->nf4.shard_n, z->nslots, z->nf4.max_unit, fsdp_nf4_slot_bytes(z));
}

// The memory report: the NF4 base and the optimizer offload from the objects, the memory by
// component from the plan (llmc/run/plan_run.h: the same accounting as the refusal), and the
// sharding in exact element counts.
static void report_memory(Run* r) {
    const TrainFlags* f = &r->c->f;
    if (r->nf4) { // the quantized base: codes + 8-bit absmax + nested scales, and the one dequant buffer
        say(r, "qlora: NF4 base (double quant, blocks of %d) %lld weights in %.3f MiB = %.3f bits/weight (replaces %.1f MiB of %s) "
               "| dequant scratch %.2f MiB | float params %.1f MiB\n",
               NF4_BLOCK, (long long)r->nf4->n_quant, mib(r->nf4->bytes), 8.0 * (double)r->nf4->bytes / (double)r->nf4->n_quant,
               mib(qlora_replaced_numel(&r->model->pt) * sizeof(floatX)), sizeof(floatX) == 4 ? "fp32" : "bf16",
               mib(r->model->lin->shared.wbuf_n * sizeof(floatX)), mib(gpt2_param_bytes(r->model)));
    }
    if (r->opt.offload) { // not in the backend's memory
        const size_t n = r->opt.end - r->opt.begin;
        say(r, "optimizer offload: fp32 m, v%s of %zu elements in pinned host memory (%.1f MiB), AdamW on the CPU; "
               "per step %.1f MiB to the host (gradients%s), %.1f MiB back (parameters)\n",
            r->opt.master ? ", master" : "", n, mib(opt_state_bytes(&r->opt)), mib(n * sizeof(floatX) * (r->opt.master ? 1 : 2)),
            r->opt.master ? "" : " and parameters", mib(n * sizeof(floatX)));
    }
    plan_run_report(&r->plan, r->c);
    if (r->gs.fsdp_on) report_zero3(r);
    if (r->world > 1) {
        // exact element counts, so tests can check the sharding
        say(r, "zero: stage %d | ranks %d | trainable elements %zu (padded %zu) | optimizer state per rank %zu elements x %d | "
               "gradient elements per rank %zu (+ %zu in buckets)\n",
               f->zero, r->world, r->gs.zl.total, r->gs.zl.padded, r->opt.end - r->opt.begin, r->opt.master ? 3 : 2,
               r->gs.fsdp_on && r->gs.fsdp.gshard ? r->gs.fsdp.shard_n : r->gs.gshard ? r->opt.end - r->opt.begin : r->model->grads_n,
               gradsync_bucket_numel(&r->gs));
    }
}

// ----------------------------------------------------------------------------
// the loop

static double evaluate(Run* r) {
    const int B = r->c->f.batch_size, T = r->c->f.seq_len;
    if (r->pref_on) return preftrain_eval(&r->pref, &r->m, &r->val, r->eval_batches, r->inputs, r->targets, r->docs, &r->comm, &r->pref_val);
    dl_reset(&r->val);
    double sum = 0.0; long cnt = 0;
    linear_set_training(r->model->lin, 0, 0); // no dropout when evaluating
    for (int64_t i = 0; i < r->eval_batches; i++) {
        int* docs = r->val.packed ? r->docs : NULL; // (each record's loss as if it were evaluated alone)
        dl_next(&r->val, r->inputs, r->targets, docs);
        long n = 0;
        sum += gpt2_forward(r->model, r->inputs, r->targets, docs, B, T, 0.0f, &n);
        cnt += n;
    }
    double agg[2] = { sum, (double)cnt };
    comm_allreduce_sum_f64(&r->comm, agg, 2);
    return agg[1] > 0 ? agg[0] / agg[1] : NAN;
}

// Every micro-batch of the step is read first: the loss is the mean over every target token of
// the whole accumulation window, so each micro-batch's gradient is scaled by 1 / (valid targets
// in the window), which must be known before the first backward. Returns that global count.
static int64_t read_step_batches(Run* r) {
    const size_t BT = (size_t)r->c->f.batch_size * r->c->f.seq_len;
    int64_t valid = 0;
    for (int k = 0; k < r->c->accum; k++) {
        dl_next(&r->train, r->inputs + k * BT, r->targets + k * BT, r->train.packed ? r->docs + k * BT : NULL);
        for (size_t i = 0; i < BT; i++) valid += r->targets[k * BT + i] >= 0;
    }
    comm_allreduce_sum_i64(&r->comm, &valid, 1); // targets of the whole global batch
    return valid;
}

// The dropout masks of micro-step k: a pure function of (seed, rank, micro-step), so a resumed run
// draws the same ones.
static uint64_t dropout_tick(const Run* r, int k) {
    return ((uint64_t)r->step * (uint64_t)r->world + (uint64_t)r->rank) * (uint64_t)r->c->accum + (uint64_t)k;
}

// The end of a step whose gradients are reduced and whose loss is known (s->loss): the gradient
// norm, and the AdamW update unless the loss or the norm is not finite.
// With --dtype fp16 the gradients are the loss scale's multiple: the norm is divided by it, the
// update multiplies them by its inverse (and the clip), and a step with an inf or NaN skips the
// update and halves the scale (llmc/model/loss_scale.h: torch.amp.GradScaler's rules).
static void finish_step(Run* r, StepResult* s) {
    const TrainFlags* f = &r->c->f;
    s->skipped = !isfinite(s->loss) || !isfinite(s->norm);
    float unscale = 1.0f;
    if (r->fp16) {
        s->loss_scale = r->ls.scale;
        s->overflow = !loss_scale_step(&r->ls, !isfinite(s->loss), &s->norm, &unscale) && isfinite(s->loss);
        s->skipped_total = r->skipped_total + s->skipped;
    }
    if (s->skipped) return;
    opt_step(&r->opt, s->lr, f->beta1, f->beta2, f->eps, f->weight_decay, opt_clip_scale(s->norm, f->grad_clip) * unscale,
             (uint32_t)(f->seed + 7919 * r->step));
    gradsync_share_params(&r->gs);
}

// Forward and backward of every micro-batch, gradient reduction, clipping, and the AdamW update
// unless the loss or the gradient is not finite. A micro-batch whose targets are all masked adds
// nothing to the loss or the gradient (its rows of dlogits are zero) and nothing to the count
// the loss is divided by; a step with no target at all in the global batch has nothing to learn
// from: no forward, no update (it is no divergence either).
static StepResult train_step(Run* r) {
    const RunConfig* c = r->c;
    const TrainFlags* f = &c->f;
    const int B = f->batch_size, T = f->seq_len;
    const size_t BT = (size_t)B * T;
    const int64_t valid = read_step_batches(r);
    StepResult s = {0.0, 0.0, sched_lr(&r->sched, (int)r->step), 0, 0, NULL, 0.0f, 0, 0};
    if (valid == 0) { s.no_targets = 1; return s; } // (valid is global: every rank returns here)
    gpt2_zero_grads(r->model);
    gradsync_step_begin(&r->gs);
    const float dloss = (r->fp16 ? r->ls.scale : 1.0f) / (float)valid; // (fp16: the scaled loss's gradient)
    for (int k = 0; k < c->accum; k++) {
        linear_set_training(r->model->lin, 1, dropout_tick(r, k));
        gpt2_forward_acc(r->model, r->inputs + k * BT, r->targets + k * BT, r->train.packed ? r->docs + k * BT : NULL, B, T, dloss,
                         gradsync_loss_acc(&r->gs));
        gpt2_backward(r->model, gradsync_sink(&r->gs));
        gradsync_micro_done(&r->gs);
    }
    gradsync_reduce(&r->gs);
    double loss_sum; // the step's one read of the device: loss and gradient norm together
    gradsync_step_stats(&r->gs, &loss_sum, &s.norm);
    s.loss = loss_sum / (double)valid;
    finish_step(r, &s);
    return s;
}

// The same for a preference objective (llmc/run/preftrain.h): the pairs of every micro-batch are
// read first (the loss is their mean over the global batch); each micro-step runs the reference's
// forward (or looks its values up), the policy's, and the backward of the pairs' terms; the loss
// and TRL's metrics are summed on the host and across ranks.
static StepResult pref_train_step(Run* r) {
    const size_t BT = (size_t)r->c->f.batch_size * r->c->f.seq_len;
    StepResult s = {0.0, 0.0, sched_lr(&r->sched, (int)r->step), 0, 0, NULL, 0.0f, 0, 0};
    if (preftrain_read(&r->pref, &r->train, r->inputs, r->targets, r->docs, &r->comm) == 0) { s.no_targets = 1; return s; }
    if (r->fp16) { r->pref.pair_scale *= r->ls.scale; r->pref.nll_scale *= r->ls.scale; } // (the scaled loss's gradient)
    gpt2_zero_grads(r->model);
    gradsync_step_begin(&r->gs);
    PrefMetrics acc;
    memset(&acc, 0, sizeof(acc));
    for (int k = 0; k < r->c->accum; k++) {
        preftrain_micro(&r->pref, &r->m, k, r->inputs + k * BT, r->targets + k * BT, r->docs + k * BT, 0, 1, dropout_tick(r, k),
                        gradsync_sink(&r->gs), &acc);
        gradsync_micro_done(&r->gs);
    }
    gradsync_reduce(&r->gs);
    double unused; // (the device's loss accumulator: the cross-entropy's, untouched here)
    gradsync_step_stats(&r->gs, &unused, &s.norm);
    preftrain_reduce(&r->pref, &acc, &r->comm, &r->pref_step);
    s.loss = r->pref_step.loss;
    s.pref = &r->pref_step;
    finish_step(r, &s);
    return s;
}

// Count a skipped step (too many in a row stop the run: train_loop), or note a finite one.
static void note_skipped(Run* r, const StepResult* s) {
    if (s->no_targets) { r->no_target_total++; return; } // neither a divergence nor a sign of recovery
    if (!s->skipped) { r->consecutive_bad = 0; confirm_checkpoint(r); return; }
    r->skipped_total++;
    if (s->overflow) { // fp16: an overflow of the scaled gradients, not a divergence
        say(r, "step %ld: the gradients overflow fp16 at loss scale %g: update skipped, the scale halved to %g (%ld skipped in total)\n",
            r->step + 1, s->loss_scale, r->ls.scale, r->skipped_total);
        return;
    }
    r->consecutive_bad++;
    say(r, "step %ld: non-finite %s, update skipped (%ld in a row, %ld in total)\n", r->step + 1,
           !isfinite(s->loss) ? "loss" : "gradient norm", r->consecutive_bad, r->skipped_total);
}

// An evaluation: logged, and followed across evaluations: a new best is saved (--keep-best), and
// --early-stopping-patience evaluations in a row without an improvement by more than the
// min-delta end the run. Every rank takes the same decisions (the loss is reduced across them).
static void eval_and_track(Run* r) {
    const TrainFlags* f = &r->c->f;
    const double vl = evaluate(r);
    runlog_eval(&r->rl, r->step, vl, r->pref_on ? &r->pref_val : NULL);
    r->last_val = vl; r->last_val_step = r->step; r->has_last_val = 1;
    r->vtrack_pre = r->vtrack; r->vtrack_pre_step = r->step; // what a checkpoint of this step records
    ValTrack* v = &r->vtrack;
    const int improved = isfinite(vl) && (!v->has_best || vl < v->best - f->early_stopping_min_delta);
    v->since_improved = improved ? 0 : v->since_improved + 1;
    if (isfinite(vl) && (!v->has_best || vl < v->best)) {
        v->has_best = 1; v->best = vl; v->best_step = r->step;
        if (f->keep_best) { gradsync_unshard_model(&r->gs); save_best(r); gradsync_reshard_model(&r->gs); }
    }
    if (f->early_stopping_patience > 0 && v->since_improved >= f->early_stopping_patience) {
        r->early_stopped = 1;
        say(r, "early stopping: %ld evaluations in a row did not improve on the best val loss %.6f (step %ld) by more than %g\n",
            v->since_improved, v->best, v->best_step, f->early_stopping_min_delta);
    }
}

#define STOP_AFTER (-1)      // --stop-after: this invocation's steps are done
#define STOP_DIVERGED (-2)   // --max-skipped-steps non-finite steps in a row, or fp16's loss scale collapsed

// Whether this run stops now: the signal number (every rank must stop at the same step, so they
// agree on the flag), STOP_DIVERGED, STOP_AFTER, or 0 to go on. Every rank sees the same losses.
static int stop_reason(Run* r) {
    const TrainFlags* f = &r->c->f;
    double sig = (double)runsignal_pending();
    if (r->world > 1) comm_allreduce_max_f64(&r->comm, &sig, 1);
    if (sig > 0) return (int)sig;
    if (r->consecutive_bad >= f->max_skipped) return STOP_DIVERGED;
    if (r->fp16 && loss_scale_collapsed(&r->ls)) { r->scale_collapsed = 1; return STOP_DIVERGED; }
    return f->stop_after > 0 && r->steps_this_run >= f->stop_after && r->step < r->steps ? STOP_AFTER : 0;
}

// The line that says how a stopped run can go on.
static void announce_stop(Run* r, int stop, int written) {
    const TrainFlags* f = &r->c->f;
    char what[96];
    if (stop > 0) snprintf(what, sizeof(what), "interrupted by %s", runsignal_name(stop));
    else snprintf(what, sizeof(what), "stopping after %d steps of this run", f->stop_after);
    if (!r->c->write_outputs) say(r, "%s at step %ld (--out none: no checkpoint)\n", what, r->step);
    else if (written) say(r, "%s at step %ld: checkpoint written; continue with --resume --out %s\n", what, r->step, f->out_dir);
    else if (r->ckpt_last >= 0)
        say(r, "%s at step %ld: no checkpoint of this step (see above); the newest is step %ld: continue with --resume --out %s\n",
            what, r->step, r->ckpt_last, f->out_dir);
    else say(r, "%s at step %ld: no checkpoint of this step (see above), and none earlier\n", what, r->step);
}

// Train to the run's length (or until stopped). Returns 0 at the end of the run, else what
// stopped it (stop_reason), after writing a checkpoint when the state allows one (*written).
static int train_loop(Run* r, int* written) {
    const TrainFlags* f = &r->c->f;
    comm_watchdog_step(&r->comm); // training starts: the watchdog measures steps from here
    for (;;) {
        const int last = r->step >= r->steps;
        if (r->has_val && ((f->eval_every > 0 && r->step % f->eval_every == 0) || last)) {
            comm_watchdog_op_unbounded(&r->comm, "eval at step %ld", r->step);
            eval_and_track(r);
        }
        if (last || r->early_stopped) return 0;
        // --profile: the tally starts after this run's first step (it warms up), or with a lone step
        if (f->profile && (r->steps_this_run == 1 || (r->steps_this_run == 0 && r->steps - r->step == 1))) ops_profile(1);
        double t0 = timer_now_s();
        comm_watchdog_op(&r->comm, "step %ld", r->step + 1);
        StepResult s = r->pref_on ? pref_train_step(r) : train_step(r);
        // the step ends when the device has finished its work (the optimizer's kernels are
        // asynchronous on CUDA): the time is everything the user waits for
        ops_synchronize();
        const double seconds = timer_now_s() - t0;
        note_skipped(r, &s);
        if (r->gs.fsdp_on) fsdp_trace_flush(&r->gs.fsdp, r->step + 1);
        r->step++;
        r->steps_this_run++;
        runlog_step(&r->rl, r->step, &s, seconds);
        if (r->steps_this_run == 1) plan_run_after_step(&r->plan); // (every buffer has been written)
        const int stop = stop_reason(r);
        if (stop == STOP_DIVERGED) return stop; // (no checkpoint: the state is not finite)
        comm_watchdog_op_unbounded(&r->comm, "sample / checkpoint after step %ld", r->step);
        if (f->sample_every > 0 && r->step % f->sample_every == 0 && r->step < r->steps) sample_now(r);
        if (stop || (f->save_every > 0 && r->step % f->save_every == 0 && r->step < r->steps)) *written = save_checkpoint(r);
        comm_watchdog_step(&r->comm);
        if (!stop) continue;
        announce_stop(r, stop, *written);
        return stop;
    }
}

// The end of a run whose last steps (or whose weights) were not finite: no final model; a
// checkpoint this invocation wrote after which no step was finite is removed (resuming from it
// would only repeat those steps); the error names the checkpoint to continue from, and how.
static void end_diverged(Run* r) {
    const TrainFlags* f = &r->c->f;
    long removed = -1;
    if (r->c->write_outputs && r->ckpt_last >= 0 && !r->ckpt_last_good && r->ckpt_last_here) {
        removed = r->ckpt_last;
        if (r->rank == 0) ckpt_remove(f->out_dir, removed);
        comm_barrier(&r->comm);
    }
    if (r->rank != 0) return;
    if (removed >= 0)
        printf("checkpoint: step %ld removed: no step after it (%ld to %ld) had a finite loss and gradient norm, so resuming from it would repeat them\n",
               removed, removed + 1, r->step);
    const long good = r->c->write_outputs ? ckpt_find_latest(f->out_dir) : -1;
    char why[160], next[3 * LLMC_PATH_MAX];
    if (r->state_nonfinite) snprintf(why, sizeof(why), "the weights or the optimizer state hold non-finite values after step %ld", r->step);
    else if (r->scale_collapsed)
        snprintf(why, sizeof(why), "the fp16 loss scale collapsed to %g at step %ld: the gradients overflow fp16 even unscaled", r->ls.scale, r->step);
    else snprintf(why, sizeof(why), "the last %ld steps had a non-finite loss or gradient norm (no update since step %ld)",
                  r->consecutive_bad, r->step - r->consecutive_bad);
    const char* cure = r->scale_collapsed ? "--dtype bf16 or fp32, or a lower --lr" : "a lower --lr (or more --warmup-steps, a --grad-clip), or check the data";
    if (r->pref_on && preftrain_nonfinite_reference(&r->pref, r->c, next, sizeof(next))) {} // (the reference is the cause: it says what helps)
    else if (!r->c->write_outputs) snprintf(next, sizeof(next), "--out none: no checkpoint; start again with %s", cure);
    else if (good < 0) snprintf(next, sizeof(next), "there is no checkpoint to continue from: start again with %s", cure);
    else if (good == r->ckpt_last && !r->ckpt_last_good && !r->ckpt_last_here)
        snprintf(next, sizeof(next), "the newest checkpoint is step %ld, where this run started, and no step after it was finite: resuming from it "
                 "repeats them; to continue from the one before it, remove '%s/DONE_%08ld' and resume with %s", good, f->out_dir, good, cure);
    else snprintf(next, sizeof(next), "the newest good checkpoint is step %ld: continue from it with `%s --resume --out %s` and %s",
                  good, runconfig_program(r->c->mode), f->out_dir, cure);
    fflush(stdout);
    fprintf(stderr, "error: %s: the final model was not written; %s\n", why, next);
}

// The end of the run: how it ended, the validation losses, where the outputs are; and for a run
// whose last steps were not finite, the error (end_diverged).
static void summarize(Run* r, int stop, int diverged, int written) {
    const TrainFlags* f = &r->c->f;
    char ending[192], best_dir[LLMC_PATH_MAX];
    const char* ckpt = !r->c->write_outputs ? "" : written ? " (checkpoint written)" : " (no checkpoint of this step)";
    if (diverged) end_diverged(r);
    if (stop > 0) snprintf(ending, sizeof(ending), "interrupted by %s%s", runsignal_name(stop), ckpt);
    else if (diverged && r->state_nonfinite) snprintf(ending, sizeof(ending), "failed: the weights are not finite");
    else if (diverged && r->scale_collapsed) snprintf(ending, sizeof(ending), "failed: the fp16 loss scale collapsed");
    else if (diverged) snprintf(ending, sizeof(ending), "failed: the last %ld steps were not finite", r->consecutive_bad);
    else if (stop == STOP_AFTER) snprintf(ending, sizeof(ending), "stopped by --stop-after %d%s", f->stop_after, ckpt);
    else if (r->early_stopped) snprintf(ending, sizeof(ending), "stopped early (no improvement of the val loss in %d evaluations)", f->early_stopping_patience);
    else snprintf(ending, sizeof(ending), "finished");
    path_join(best_dir, sizeof(best_dir), f->out_dir, "best");
    RunSummary s = {r->step, ending, r->has_last_val, r->last_val, r->last_val_step, r->vtrack.best, r->vtrack.best_step,
                    r->c->write_outputs ? f->out_dir : NULL,
                    !stop && !diverged, f->keep_best && r->vtrack.has_best ? best_dir : NULL};
    runlog_summary(&r->rl, &s);
}

// ----------------------------------------------------------------------------

static void start_backend(Run* r) {
    device_select(&r->comm); // before ops_init: the backend's handles belong to the current GPU
    ops_init(r->c->f.threads);
    ops_set_deterministic(r->c->f.deterministic);
    cli_apply_dtype(r->c->f.dtype, r->dtype_desc, sizeof(r->dtype_desc));
    r->fp16 = ops_gemm_dtype() == OPS_F16;
    loss_scale_init(&r->ls);
    r->ls.scale = r->c->f.loss_scale_init;
    r->ls.growth_interval = r->c->f.loss_scale_window;
}

static void run_free(Run* r) {
    runlog_close(&r->rl);
    sample_free(r);
    free(r->inputs); free(r->targets); free(r->docs);
    dl_free(&r->train);
    if (r->has_val) dl_free(&r->val);
    opt_free(&r->opt);
    if (r->pref_on) preftrain_free(&r->pref);
    gradsync_free(&r->gs);
    model_free(&r->m);
    device_detach(&r->comm);
}

int trainer_main(int argc, char** argv, TrainMode mode) {
    Run run;
    memset(&run, 0, sizeof(run));
    Run* r = &run;
    comm_init(&r->comm, &argc, &argv); // first: MPI may take its own arguments out of argv
    r->rank = r->comm.rank; r->world = r->comm.world;
    runsignal_startup(); // until the first write, a signal ends the process at once
    RunConfig rc;
    memset(&rc, 0, sizeof(rc));
    runrecord_start(&r->start, &rc, &r->comm, argc, argv, mode);
    r->c = &rc;
    comm_watchdog_start(&r->comm, rc.f.watchdog_timeout); // every rank; before NCCL's init, which it covers
    comm_watchdog_op_unbounded(&r->comm, "startup");
    start_backend(r);
    if (plan_run_start(&r->plan, &rc, &r->comm, r->start.resume_step)) { // --plan: printed
        comm_finalize(&r->comm);
        runconfig_free(&rc);
        runrecord_start_free(&r->start);
        return r->plan.exit_status;
    }
    device_attach(&r->comm); // CUDA: NCCL for the device collectives, even with one rank
    check_out_dir(r);
    build_model(r, r->start.resume_step);
    setup_data(r);
    if (r->rank == 0) outputs_check_inputs(&rc, r->start.resume_step < 0 ? 0 : r->start.resume_step, r->steps);
    setup_optimizer(r);
    r->ckpt_last = r->start.resume_step; // (not yet known good: a finite step after it says so)
    r->ckpt_good = -1;
    if (r->start.resume_step >= 0) {
        restore_checkpoint(r, r->start.resume_step);
        say(r, "resumed: step %ld from %s\n", r->step, rc.f.out_dir);
        report_changes(r);
    }
    report_model(r);
    report_memory(r);
    setup_mfu(r);
    runsignal_deferred(r->world > 1); // from the first write on, they stop the loop with a checkpoint
    open_out_dir(r);
    if (r->pref_on) start_pref(r);
    int written = 0;
    const int stop = train_loop(r, &written);
    if (rc.f.profile && r->rank == 0) ops_profile_print(r->steps_this_run > 1 ? r->steps_this_run - 1 : 1);
    ops_profile(0);
    comm_watchdog_op_unbounded(&r->comm, "final sample and save");
    // a run whose last steps (or weights) were not finite keeps its last good checkpoint and
    // writes no model
    int diverged = stop == STOP_DIVERGED || (stop <= 0 && r->consecutive_bad > 0) || (stop == STOP_AFTER && rc.write_outputs && !written);
    if (!stop && !diverged) {
        sample_now(r);
        written = save_checkpoint(r);
        diverged = rc.write_outputs && !written; // (the weights are not finite)
        if (!diverged) confirm_checkpoint(r);    // the finished run's last state is its result
    }
    if (!stop && !diverged && rc.write_outputs) { // (ZeRO 3 gathers the model only to write it)
        gradsync_unshard_model(&r->gs);
        r->out.ckpt_step = r->step; // (the checkpoint of this step: model.bin is its model file)
        outputs_save(&r->out, &r->m, rc.f.out_dir); // the final model
        gradsync_reshard_model(&r->gs);
    }
    summarize(r, stop, diverged, written);
    runlock_release();
    run_free(r);
    comm_finalize(&r->comm);
    runconfig_free(&rc);
    runrecord_start_free(&r->start);
    return stop > 0 ? runsignal_exit(stop) : diverged ? 1 : 0;
}
