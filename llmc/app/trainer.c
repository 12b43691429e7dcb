#define _GNU_SOURCE
#include "app/trainer.h"
#include "app/trainer_internal.h"
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
#include "model/model.h"
#include "model/model_io.h"
#include "ops/ops.h"
#include "model/optimizer.h"
#include "model/peft_io.h"
#include "model/qlora.h"
#include "run/runlog.h"
#include "run/runlock.h"
#include "run/runrecord.h"
#include "run/runsignal.h"
#include "run/run_outputs.h"
#include "plan/plan_run.h"
#include "run/preftrain.h"
#include "model/sampler.h"
#include "model/schedule.h"
#include "text/textgen.h"
#include <math.h>
#include <signal.h>
#include <string.h>

static const char* const HINT_FLAGS = "run with --help to see every flag";

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
    SampleParams sp = cli_sample_params(&f->sample, f->seed);
    TextStream gs = { r->tok, stdout, copy, r->tok->eot_id };
    linear_set_dora_cache(r->model->lin, 1); // (the weights are fixed while it samples: DoRA's norms once)
    sample_generate(r->model, r->kv, r->prompt_ids, r->n_prompt, r->c->sample_tokens, &sp, r->tok->eot_id, NULL, textgen_stream_token, &gs);
    linear_set_dora_cache(r->model->lin, 0);
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
static void lora_source(Run* r, long resume_step, LoraSource* src, char* values, char* init_values, size_t cap) {
    const RunConfig* c = r->c;
    const TrainFlags* f = &c->f;
    memset(src, 0, sizeof(*src));
    src->adapter = f->adapter;
    if (f->adapter) {
        const char* flags[] = {"--lora-rank", "--lora-alpha", "--lora-targets", "--lora-layers", "--rslora", "--dora", "--lora-bias", "--train-ln-f"};
        for (int i = 0; i < (int)(sizeof(flags) / sizeof(flags[0])); i++)
            if (runconfig_given(c, flags[i])) say(r, "note: %s is ignored: the structure of the adapter in --adapter %s is used\n", flags[i], f->adapter);
    }
    src->spec.rank = f->lora_rank; src->spec.alpha = f->lora_alpha; src->spec.rslora = f->rslora; src->spec.dora = f->dora;
    src->spec.dropout = f->lora_dropout; src->spec.bias = c->lora_bias; src->spec.train_ln_f = f->train_ln_f;
    src->spec.targets = c->lora_targets; src->spec.init = c->lora_init;
    src->layers = f->lora_layers;
    src->dropout_override = c->lora_dropout_given;
    src->seed = (uint64_t)f->seed;
    // (base_model_name_or_path of the saved adapters: outputs_init, once the base directory is known)
    if (resume_step >= 0) {
        ckpt_path(values, cap, f->out_dir, "adapter", resume_step, 0);
        src->values = values;
        // PiSSA / OLoRA: the residual base from the initial adapter the run wrote (outputs_start)
        if (lora_init_rewrites_base(c->lora_init)) src->init_values = outputs_init_path(init_values, cap, c);
    }
}

// The model: --model (or, resuming full training, the checkpoint's model) with its adapters and
// NF4 base, activations for --batch-size x --seq-len.
static void build_model(Run* r, long resume_step) {
    const RunConfig* c = r->c;
    const TrainFlags* f = &c->f;
    char ckpt_model[LLMC_PATH_MAX], ckpt_adapter[LLMC_PATH_MAX], init_adapter[LLMC_PATH_MAX];
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
        lora_source(r, resume_step, &src, ckpt_adapter, init_adapter, sizeof(ckpt_adapter));
        spec.lora_src = &src;
    }
    model_assemble(&r->m, &spec);
    r->model = &r->m.gpt; r->lora = r->m.lora; r->nf4 = r->m.nf4;
    if (r->lora) r->lora->plus_ratio = f->lora_plus_ratio; // (LoRA+: the optimizer's segments, lora_segments)
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
        if (r->start.resume_step < 0) outputs_start(&r->out, &r->m);
    }
    RunLog* l = &r->rl;
    l->steps = r->steps;
    l->steps_per_epoch = (double)dl_batches_per_epoch(&r->train) / (double)c->accum;
    l->tokens_per_step = c->tokens_per_step;
    l->step0 = r->step;
    l->has_val = r->has_val; l->eval_every = c->f.eval_every; // (what a resume's log keeps)
    l->objective = (PrefObjective)c->objective;
    runlog_open(l, c->write_outputs ? c->f.out_dir : NULL, c->f.tensorboard, r->rank, r->start.resume_step);
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
    if (!s->skipped) { r->consecutive_bad = 0; trainer_confirm_checkpoint(r); return; }
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
        if (f->keep_best) { gradsync_unshard_model(&r->gs); trainer_save_best(r); gradsync_reshard_model(&r->gs); }
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
        if (stop || (f->save_every > 0 && r->step % f->save_every == 0 && r->step < r->steps)) *written = trainer_save_checkpoint(r);
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
        trainer_restore_checkpoint(r, r->start.resume_step);
        say(r, "resumed: step %ld from %s\n", r->step, rc.f.out_dir);
        report_changes(r);
    }
    trainer_report_model(r);
    trainer_report_memory(r);
    trainer_setup_mfu(r);
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
        written = trainer_save_checkpoint(r);
        diverged = rc.write_outputs && !written; // (the weights are not finite)
        if (!diverged) trainer_confirm_checkpoint(r); // the finished run's last state is its result
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
