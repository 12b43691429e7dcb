#define _GNU_SOURCE
#include "trainer.h"
#include "check.h"
#include "timer.h"
#include "checkpoint.h"
#include "comm.h"
#include "config.h"
#include "dataloader.h"
#include "device.h"
#include "fileio.h"
#include "gpt2.h"
#include "gradsync.h"
#include "lora.h"
#include "mfu.h"
#include "model.h"
#include "model_io.h"
#include "ops.h"
#include "optimizer.h"
#include "peft_io.h"
#include "qlora.h"
#include "params.h"
#include "sampler.h"
#include "schedule.h"
#include "textgen.h"
#include "zero.h"
#include <math.h>
#include <signal.h>
#include <string.h>

static volatile sig_atomic_t g_stop_signal = 0;
static void on_signal(int sig) { g_stop_signal = sig; }

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
    int *inputs, *targets;     // host, accum * B * T
    LRSchedule sched;
    long step;                 // optimizer steps completed
    long skipped_total;        // steps skipped for a non-finite loss or gradient (whole run)
    long consecutive_bad;      // ... in a row, up to now
    long steps_this_run;       // steps of this invocation (--stop-after)
    FILE* log;
    // sampling (rank 0)
    Tokenizer* tok;
    int* prompt_ids;
    int n_prompt;
    KVCache* kv;
    // model FLOPs utilization (llmc/mfu.h): FLOPs of one step on this rank, the device's peak
    double step_flops, peak_flops; // peak 0: unknown (CPU, unlisted GPU), MFU "n/a"
    char dtype_desc[160];      // --dtype as applied, for the banner
} Run;

// Console output comes from rank 0 only.
#define say(r, ...) do { if ((r)->rank == 0) { printf(__VA_ARGS__); fflush(stdout); } } while (0)

static void run_log_json(Run* r, const char* fmt, ...) {
    if (!r->log) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(r->log, fmt, ap);
    va_end(ap);
    fputc('\n', r->log);
    fflush(r->log);
}

// ----------------------------------------------------------------------------
// checkpoints

static void save_checkpoint(Run* r) {
    const TrainFlags* f = &r->c->f;
    if (!f->out_dir) return;
    char path[LLMC_PATH_MAX];
    if (r->rank == 0 && r->lora) {
        // LoRA: the base is frozen and reloaded from --model; only the adapter is saved
        ckpt_path(path, sizeof(path), f->out_dir, "adapter", r->step, 0);
        peft_save_tensors(r->lora, path);
    } else if (r->rank == 0) {
        float* host = (float*)mallocCheck(r->model->pt.total * sizeof(float));
        gpt2_get_params(r->model, host);
        ckpt_path(path, sizeof(path), f->out_dir, "model", r->step, 0);
        model_save_llmc(path, &r->model->pt, host, 0);
        free(host);
    }
    StateHeader h;
    memset(&h, 0, sizeof(h));
    h.h[SH_MAGIC] = STATE_MAGIC; h.h[SH_VERSION] = STATE_VERSION;
    h.h[SH_WORLD] = r->world; h.h[SH_RANK] = r->rank; h.h[SH_HAS_MASTER] = r->opt.master != NULL;
    h.h[SH_STEP] = r->step; h.h[SH_OPT_T] = r->opt.t;
    DataLoaderState ds = dl_get_state(&r->train);
    h.h[SH_DL_EPOCH] = ds.epoch; h.h[SH_DL_SHARD] = ds.shard_i; h.h[SH_DL_CHUNK] = ds.chunk_i;
    h.h[SH_BEGIN] = (int64_t)r->opt.begin; h.h[SH_END] = (int64_t)r->opt.end; h.h[SH_TOTAL] = (int64_t)r->opt.total;
    h.h[SH_MODE] = r->c->mode; h.h[SH_B] = f->batch_size; h.h[SH_T] = f->seq_len; h.h[SH_ACCUM] = r->c->accum;
    h.h[SH_SKIPPED] = r->skipped_total; h.h[SH_ZERO] = f->zero; h.h[SH_SEED] = f->seed;
    h.h[SH_TOKENS_PER_STEP] = r->c->tokens_per_step; h.h[SH_SHUFFLE] = f->shuffle;
    size_t n = r->opt.end - r->opt.begin;
    float* mh = (float*)mallocCheck(n * sizeof(float));
    float* vh = (float*)mallocCheck(n * sizeof(float));
    float* mas = r->opt.master ? (float*)mallocCheck(n * sizeof(float)) : NULL;
    ops_to_host(mh, r->opt.m, n * sizeof(float));
    ops_to_host(vh, r->opt.v, n * sizeof(float));
    if (mas) ops_to_host(mas, r->opt.master, n * sizeof(float));
    ckpt_path(path, sizeof(path), f->out_dir, "state", r->step, r->rank);
    ckpt_write_state(path, &h, mh, vh, mas);
    free(mh); free(vh); free(mas);
    // the checkpoint is complete only when every rank has written its part: the DONE manifest
    // (sizes and checksums of every file) is written last
    ckpt_commit(&r->comm, f->out_dir, r->step, r->lora ? "adapter" : "model");
    if (r->rank == 0) {
        ckpt_prune(f->out_dir, f->keep_checkpoints);
        printf("checkpoint: step %ld written to %s\n", r->step, f->out_dir);
    }
    comm_barrier(&r->comm);
}

// The header of rank 0's state file must describe this run's batch geometry and trainable space.
static void check_state_matches(Run* r, const char* path, const StateHeader* h0) {
    const TrainFlags* f = &r->c->f;
    const char* hint = "resume with the same model, --batch-size, --seq-len and --total-batch-tokens as the checkpointed run";
    if (h0->h[SH_MODE] != r->c->mode) fatal(hint, "'%s' was written by %s, not by this program", path, h0->h[SH_MODE] ? "train_lora" : "train_gpt2");
    if (h0->h[SH_B] != f->batch_size || h0->h[SH_T] != f->seq_len || h0->h[SH_TOKENS_PER_STEP] != r->c->tokens_per_step)
        fatal(hint, "'%s' was written with batch %lld x %lld and %lld tokens per step; this run has %d x %d and %lld",
              path, (long long)h0->h[SH_B], (long long)h0->h[SH_T], (long long)h0->h[SH_TOKENS_PER_STEP],
              f->batch_size, f->seq_len, (long long)r->c->tokens_per_step);
    if ((size_t)h0->h[SH_TOTAL] != r->opt.total)
        fatal(hint, "'%s' holds optimizer state for %lld trainable parameters; this run has %zu",
              path, (long long)h0->h[SH_TOTAL], r->opt.total);
    if (h0->h[SH_STEP] > f->steps)
        fatal("raise --steps to continue the run", "the checkpoint in '%s' is at step %lld, beyond --steps %d",
              f->out_dir, (long long)h0->h[SH_STEP], f->steps);
}

// Optimizer state, re-sharded by zero_reshard_plan when the ranks or the stage changed: the old
// run's ranges are the shards of its layout (one shard holding everything when it was not
// sharded), this rank's range is its shard of this run's layout, and each copy of the plan reads
// exactly its part of one old rank's file.
static void restore_optimizer(Run* r, long step, const StateHeader* h0) {
    const char* dir = r->c->f.out_dir;
    const int old_world = (int)h0->h[SH_WORLD], old_sharded = h0->h[SH_ZERO] >= 1 && old_world > 1;
    ZeroLayout from, to;
    zero_layout_init(&from, r->opt.total, old_sharded ? old_world : 1, ZERO_ALIGN_DEFAULT);
    zero_layout_init(&to, r->opt.total, r->gs.sharded ? r->world : 1, ZERO_ALIGN_DEFAULT);
    ZeroCopy* plan = (ZeroCopy*)mallocCheck((size_t)from.world * sizeof(ZeroCopy));
    const int ncopy = zero_reshard_plan(&from, &to, r->gs.sharded ? r->rank : 0, plan, from.world);
    const size_t n = r->opt.end - r->opt.begin;
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
    ops_to_device(r->opt.m, mh, n * sizeof(float));
    ops_to_device(r->opt.v, vh, n * sizeof(float));
    if (mas && have_master) ops_to_device(r->opt.master, mas, n * sizeof(float));
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
    restore_data_position(r, &h0);
}

// The tokenizer next to a saved model or adapter, so the directory loads on its own
// (AutoTokenizer / pipeline). The vocabulary is the one --sample-* would use.
static void save_tokenizer_files(Run* r, const char* dir) {
    const TrainFlags* f = &r->c->f;
    char vpath[LLMC_PATH_MAX], why[LLMC_PATH_MAX + 200];
    if (textgen_find_vocab(f->sample.vocab, f->model, vpath, sizeof(vpath)) != 0)
        snprintf(why, sizeof(why), "no vocabulary found (pass --vocab)");
    else if (model_save_hf_tokenizer(dir, vpath, &r->model->pt.cfg, why, sizeof(why)) == 0) {
        printf("saved: %s/ tokenizer files (vocabulary %s)\n", dir, vpath);
        return;
    }
    printf("note: no tokenizer files in %s: %s\n", dir, why);
}

// The final model: the PEFT adapter (and with --merge the merged model) or the trained model, in
// the formats of --save-format, each directory with the tokenizer files.
static void save_final(Run* r) {
    const TrainFlags* f = &r->c->f;
    const char* dir = f->out_dir;
    char mdir[LLMC_PATH_MAX];
    if (!dir || r->rank != 0) return;
    if (r->lora) {
        peft_save_adapter(r->lora, dir);
        printf("saved: %s/adapter_model.safetensors + adapter_config.json (PEFT)\n", dir);
        save_tokenizer_files(r, dir);
        if (!f->merge || !(r->c->save_hf || r->c->save_llmc)) return;
        path_join(mdir, sizeof(mdir), dir, "merged");
        mkdir_p(mdir);
        dir = mdir;
    } else if (!(r->c->save_hf || r->c->save_llmc)) return;
    float* host = (float*)mallocCheck(r->model->pt.total * sizeof(float));
    gpt2_get_params(r->model, host);
    if (r->lora) lora_merge(r->lora, &r->model->pt, host); // W += scaling * B A
    // QLoRA: host holds dequant(quant(W)) for the quantized weights (gpt2_get_params), the
    // matrices the adapter was trained against, so that is what the adapter is merged into
    if (r->nf4) printf("merged: adapter merged into dequant(quant(W)) of the NF4 base (the weights it was trained against)\n");
    if (r->c->save_hf) {
        model_save_hf(dir, &r->model->pt, host);
        printf("saved: %s/model.safetensors + config.json (transformers)\n", dir);
        save_tokenizer_files(r, dir);
    }
    if (r->c->save_llmc) {
        char path[LLMC_PATH_MAX];
        path_join(path, sizeof(path), dir, "model.bin");
        model_save_llmc(path, &r->model->pt, host, 0);
        printf("saved: %s (llm.c)\n", path);
    }
    free(host);
}

// ----------------------------------------------------------------------------
// sampling (--sample-*): rank 0 continues --prompt with the current model. The vocabulary and
// the prompt are checked before training starts, so a bad one fails at once, not hours later.

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
    const TrainFlags* f = &r->c->f;
    if (!r->tok) return;
    if (!r->kv) { // allocated at the first sample, kept for the others
        r->kv = (KVCache*)mallocCheck(sizeof(KVCache));
        kv_init(r->kv, r->model, 1, r->n_prompt + r->c->sample_tokens - 1);
    }
    FILE* copy = NULL;
    if (f->out_dir) {
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
    src->base_name = f->model;
    if (resume_step >= 0) {
        ckpt_path(values, cap, f->out_dir, "adapter", resume_step, 0);
        src->values = values;
    }
}

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
    spec.base_bf16 = ops_gemm_dtype() == OPS_BF16;
    spec.trainable = c->mode == TRAIN_FULL ? GPT2_TRAIN_ALL : 0u;
    spec.recompute = f->recompute;
    spec.B = f->batch_size; spec.T = f->seq_len; spec.T_flag = "--seq-len";
    if (c->mode == TRAIN_LORA) {
        lora_source(r, resume_step, &src, ckpt_adapter, sizeof(ckpt_adapter));
        spec.lora_src = &src;
    }
    model_assemble(&r->m, &spec);
    r->model = &r->m.gpt; r->lora = r->m.lora; r->nf4 = r->m.nf4;
    sample_setup(r);
}

// ----------------------------------------------------------------------------
// set-up

// --out: create it; the newest complete checkpoint to resume from (-1: a new run).
static long prepare_out_dir(Run* r) {
    const TrainFlags* f = &r->c->f;
    if (!f->out_dir) return -1;
    if (r->rank == 0) mkdir_p(f->out_dir);
    comm_barrier(&r->comm);
    long latest = ckpt_find_latest(f->out_dir);
    if (f->resume && latest < 0)
        fatal("drop --resume to start a new run, or point --out at the run's directory",
              "no complete checkpoint (DONE_* marker) in '%s'", f->out_dir);
    if (!f->resume && latest >= 0) // never clobber another run's checkpoints and log
        fatal("add --resume to continue that run, or choose another --out", "'%s' holds checkpoints of an earlier run", f->out_dir);
    if (r->rank == 0) ckpt_clean(f->out_dir); // temporaries and orphans of interrupted runs
    if (f->resume) ckpt_verify(&r->comm, f->out_dir, latest); // every file against the manifest, before anything is read
    return f->resume ? latest : -1;
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
        dl_init(&r->val, f->val_data, f->batch_size, f->seq_len, r->rank, r->world, V, 0, 0);
        r->has_val = 1;
    }
}

static void setup_optimizer(Run* r) {
    const RunConfig* c = r->c;
    const TrainFlags* f = &c->f;
    TrainSeg* segs = (TrainSeg*)mallocCheck(sizeof(TrainSeg) * (size_t)model_max_segments(&r->m));
    int nseg = model_segments(&r->m, segs);
    size_t ntrain = 0;
    for (int i = 0; i < nseg; i++) ntrain += segs[i].n;
    // with ZeRO >= 1 this rank keeps AdamW state (and master weights) for its own range only
    gradsync_init(&r->gs, &r->comm, f->zero, ntrain);
    opt_init(&r->opt, segs, nseg, gradsync_range_begin(&r->gs), gradsync_range_end(&r->gs));
    gradsync_attach(&r->gs, &r->opt, c->mode == TRAIN_FULL ? r->model : NULL);
    free(segs);
    r->sched.kind = (SchedKind)c->schedule;
    r->sched.lr = f->lr; r->sched.warmup = f->warmup; r->sched.total = f->steps;
    r->sched.final_frac = f->final_lr_frac; r->sched.cooldown_frac = f->cooldown_frac;
}

static void open_log(Run* r, int resumed) {
    const TrainFlags* f = &r->c->f;
    if (!f->out_dir || r->rank != 0) return;
    char lp[LLMC_PATH_MAX];
    path_join(lp, sizeof(lp), f->out_dir, "log.jsonl");
    r->log = fopen(lp, resumed ? "ab" : "wb");
    if (!r->log) fatal("check that --out is writable", "cannot open '%s' for writing", lp);
}

// ----------------------------------------------------------------------------
// the report printed before training

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

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
    say(r, "data: %s (%lld tokens, %lld batches/epoch)%s%s\n", f->train_data, (long long)r->train.total_tokens,
           (long long)dl_batches_per_epoch(&r->train), r->has_val ? " | val: " : "", r->has_val ? f->val_data : "");
    say(r, "comm: %s, rank %d of %d\n", comm_impl_name(&r->comm), r->rank, r->world);
    say(r, "batch: %d x %d per rank x %d ranks x %d accumulation = %lld tokens/step\n",
           f->batch_size, f->seq_len, r->world, r->c->accum, (long long)r->c->tokens_per_step);
}

// The model FLOPs of a step on this rank and the device's peak bf16 FLOP/s, for the step line.
static void setup_mfu(Run* r) {
    const GPT2Config* cfg = &r->model->cfg;
    const double per_token = mfu_flops_per_token(params_count_unpadded(&r->model->pt), r->lora != NULL,
                                                 r->lora ? r->lora->n_trainable : 0, cfg->num_layers, cfg->channels, r->c->f.seq_len);
    r->step_flops = per_token * (double)r->c->tokens_per_step / (double)r->world;
    const char* model = NULL;
    r->peak_flops = mfu_peak_bf16_flops(ops_backend_name(), &model);
    if (r->peak_flops > 0)
        say(r, "mfu: %.3g TFLOP per step per rank, peak %.1f TFLOP/s bf16 (%s)\n", r->step_flops / 1e12, r->peak_flops / 1e12, model);
}

static void report_memory(Run* r) {
    const TrainFlags* f = &r->c->f;
    size_t pb = gpt2_param_bytes(r->model), gb = gpt2_grad_bytes(r->model), ob = opt_state_bytes(&r->opt);
    if (r->lora) { pb += r->lora->total * sizeof(floatX); gb += r->lora->total * sizeof(floatX); }
    size_t ab = r->model->act_bytes + r->model->scr_bytes;
    size_t gsb = gradsync_grad_bytes(&r->gs);
    size_t qb = 0;
    if (r->nf4) {
        // the quantized base: codes + 8-bit absmax + nested scales, and the one dequant buffer
        const size_t wbuf = r->model->lin->shared.wbuf_n * sizeof(floatX);
        qb = r->nf4->bytes + wbuf;
        say(r, "qlora: NF4 base (double quant, blocks of %d) %lld weights in %.3f MiB = %.3f bits/weight (replaces %.1f MiB of %s) "
               "| dequant scratch %.2f MiB | float params %.1f MiB\n",
               NF4_BLOCK, (long long)r->nf4->n_quant, mib(r->nf4->bytes), 8.0 * (double)r->nf4->bytes / (double)r->nf4->n_quant,
               mib(qlora_replaced_numel(&r->model->pt) * sizeof(floatX)), sizeof(floatX) == 4 ? "fp32" : "bf16",
               mib(wbuf), mib(gpt2_param_bytes(r->model)));
    }
    // floatX is 2 bytes on the CUDA backend (bf16 params, grads, activations) and 4 on the CPU;
    // the optimizer state is fp32 m, v and, with bf16 params, an fp32 master copy
    const char* xt = sizeof(floatX) == 2 ? "bf16" : "fp32";
    say(r, "memory (this rank): params %.1f MiB (%s%s) | grads %.1f MiB (%s) | optimizer %.1f MiB (fp32 m, v%s) | "
           "activations %.1f MiB (%s, recompute %d) | total %.1f MiB\n",
           mib(pb + qb), xt, r->nf4 ? ", NF4 base incl." : "", mib(gb + gsb), xt, mib(ob), r->opt.master ? ", master" : "",
           mib(ab), xt, f->recompute, mib(pb + qb + gb + gsb + ob + ab));
    if (r->world > 1) {
        // exact element counts, so tests can check the sharding
        say(r, "zero: stage %d | ranks %d | trainable elements %zu (padded %zu) | optimizer state per rank %zu elements x %d | "
               "gradient elements per rank %zu (+ %zu in buckets)\n",
               f->zero, r->world, r->gs.zl.total, r->gs.zl.padded, r->opt.end - r->opt.begin, r->opt.master ? 3 : 2,
               r->gs.gshard ? r->opt.end - r->opt.begin : r->model->grads_n, gradsync_bucket_numel(&r->gs));
    }
}

// ----------------------------------------------------------------------------
// the loop

static double evaluate(Run* r) {
    const int B = r->c->f.batch_size, T = r->c->f.seq_len;
    dl_reset(&r->val);
    double sum = 0.0; long cnt = 0;
    linear_set_training(r->model->lin, 0, 0); // no dropout when evaluating
    for (int i = 0; i < r->c->f.eval_batches; i++) {
        dl_next(&r->val, r->inputs, r->targets);
        long n = 0;
        sum += gpt2_forward(r->model, r->inputs, r->targets, B, T, 0.0f, &n);
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
        dl_next(&r->train, r->inputs + k * BT, r->targets + k * BT);
        for (size_t i = 0; i < BT; i++) valid += r->targets[k * BT + i] >= 0;
    }
    comm_allreduce_sum_i64(&r->comm, &valid, 1); // targets of the whole global batch
    return valid;
}

typedef struct { double loss, norm; float lr; int skipped; } StepResult;

// Forward and backward of every micro-batch, gradient reduction, clipping, and the AdamW update
// unless the loss or the gradient is not finite.
static StepResult train_step(Run* r) {
    const RunConfig* c = r->c;
    const TrainFlags* f = &c->f;
    const int B = f->batch_size, T = f->seq_len;
    const size_t BT = (size_t)B * T;
    const int64_t valid = read_step_batches(r);
    gpt2_zero_grads(r->model);
    gradsync_step_begin(&r->gs);
    double loss_sum = 0.0;
    float dloss = valid > 0 ? 1.0f / (float)valid : 0.0f;
    for (int k = 0; k < c->accum; k++) {
        long n = 0;
        // dropout masks: a pure function of (seed, rank, micro-step), so a resumed run draws the same ones
        linear_set_training(r->model->lin, 1, ((uint64_t)r->step * (uint64_t)r->world + (uint64_t)r->rank) * (uint64_t)c->accum + (uint64_t)k);
        loss_sum += gpt2_forward(r->model, r->inputs + k * BT, r->targets + k * BT, B, T, dloss, &n);
        gpt2_backward(r->model, gradsync_sink(&r->gs));
        gradsync_micro_done(&r->gs);
    }
    comm_allreduce_sum_f64(&r->comm, &loss_sum, 1);
    gradsync_reduce(&r->gs);
    StepResult s;
    s.loss = valid > 0 ? loss_sum / (double)valid : NAN;
    s.norm = gradsync_grad_norm(&r->gs);
    s.lr = sched_lr(&r->sched, (int)r->step);
    s.skipped = !isfinite(s.loss) || !isfinite(s.norm);
    if (s.skipped) return s;
    opt_step(&r->opt, s.lr, f->beta1, f->beta2, f->eps, f->weight_decay, opt_clip_scale(s.norm, f->grad_clip),
             (uint32_t)(f->seed + 7919 * r->step));
    gradsync_share_params(&r->gs);
    return s;
}

// Count a skipped step; too many in a row stop the run.
static void note_skipped(Run* r, const StepResult* s) {
    if (!s->skipped) { r->consecutive_bad = 0; return; }
    r->skipped_total++;
    r->consecutive_bad++;
    say(r, "step %ld: non-finite %s, update skipped (%ld in a row, %ld in total)\n", r->step + 1,
           !isfinite(s->loss) ? "loss" : "gradient norm", r->consecutive_bad, r->skipped_total);
    if (r->consecutive_bad >= r->c->f.max_skipped)
        fatal("lower --lr, raise --warmup-steps or --grad-clip, or check the data",
              "%ld consecutive steps had a non-finite loss or gradient norm; stopping", r->consecutive_bad);
}

static void log_step(Run* r, const StepResult* s, double seconds) {
    double ms = seconds * 1000.0;
    double tps = (double)r->c->tokens_per_step / seconds;
    double tflops = r->step_flops / seconds / 1e12;
    char mfu[32] = "n/a", mfu_json[32] = "null";
    if (r->peak_flops > 0) {
        snprintf(mfu, sizeof(mfu), "%.1f%%", 100.0 * tflops * 1e12 / r->peak_flops);
        snprintf(mfu_json, sizeof(mfu_json), "%.4f", tflops * 1e12 / r->peak_flops);
    }
    say(r, "step %4ld/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | %.1f TFLOP/s | MFU %s\n",
           r->step, r->c->f.steps, s->loss, s->lr, s->norm, ms, tps, tflops, mfu);
    run_log_json(r, "{\"step\": %ld, \"train_loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"ms\": %.3f, \"tok_per_s\": %.1f, "
                    "\"tflops\": %.3f, \"mfu\": %s%s}",
                 r->step, s->loss, s->lr, s->norm, ms, tps, tflops, mfu_json, s->skipped ? ", \"skipped\": true" : "");
}

static void eval_and_log(Run* r) {
    double vl = evaluate(r);
    say(r, "step %ld | val loss %.6f\n", r->step, vl);
    run_log_json(r, "{\"step\": %ld, \"val_loss\": %.9g}", r->step, vl);
}

// Whether this run stops now with a checkpoint: the signal number (every rank must stop at the
// same step, so they agree on the flag), -1 at the end of --stop-after, 0 to go on.
static int stop_reason(Run* r) {
    const TrainFlags* f = &r->c->f;
    double sig = (double)g_stop_signal;
    if (r->world > 1) comm_allreduce_max_f64(&r->comm, &sig, 1);
    if (sig > 0) return (int)sig;
    return f->stop_after > 0 && r->steps_this_run >= f->stop_after && r->step < f->steps ? -1 : 0;
}

// Train to --steps (or until stopped). Returns 1 when stopped early (a checkpoint was written).
static int train_loop(Run* r) {
    const TrainFlags* f = &r->c->f;
    comm_watchdog_step(&r->comm); // training starts: the watchdog measures steps from here
    for (;;) {
        const int last = r->step >= f->steps;
        if (r->has_val && ((f->eval_every > 0 && r->step % f->eval_every == 0) || last)) {
            comm_watchdog_op_unbounded(&r->comm, "eval at step %ld", r->step);
            eval_and_log(r);
        }
        if (last) return 0;
        // --profile: the tally starts after this run's first step (it warms up), or with a lone step
        if (f->profile && (r->steps_this_run == 1 || (r->steps_this_run == 0 && f->steps - r->step == 1))) ops_profile(1);
        double t0 = timer_now_s();
        comm_watchdog_op(&r->comm, "step %ld", r->step + 1);
        StepResult s = train_step(r);
        // the step ends when the device has finished its work (the optimizer's kernels are
        // asynchronous on CUDA): the time is everything the user waits for
        ops_synchronize();
        const double seconds = timer_now_s() - t0;
        note_skipped(r, &s);
        r->step++;
        r->steps_this_run++;
        log_step(r, &s, seconds);
        const int stop = stop_reason(r);
        comm_watchdog_op_unbounded(&r->comm, "sample / checkpoint after step %ld", r->step);
        if (f->sample_every > 0 && r->step % f->sample_every == 0 && r->step < f->steps) sample_now(r);
        if (stop || (f->save_every > 0 && r->step % f->save_every == 0 && r->step < f->steps)) save_checkpoint(r);
        comm_watchdog_step(&r->comm);
        if (stop > 0) say(r, "interrupted by signal %d at step %ld; resume with --resume\n", stop, r->step);
        if (stop < 0) say(r, "stopping after %d steps of this run at step %ld; resume with --resume\n", f->stop_after, r->step);
        if (stop) return 1;
    }
}

// ----------------------------------------------------------------------------

static void start_backend(Run* r) {
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    device_select(&r->comm); // before ops_init: the backend's handles belong to the current GPU
    ops_init(r->c->f.threads);
    ops_set_deterministic(r->c->f.deterministic);
    cli_apply_dtype(r->c->f.dtype, r->dtype_desc, sizeof(r->dtype_desc));
    device_attach(&r->comm); // CUDA: NCCL for the device collectives, even with one rank
}

static void run_free(Run* r) {
    if (r->log) fclose(r->log);
    sample_free(r);
    free(r->inputs); free(r->targets);
    dl_free(&r->train);
    if (r->has_val) dl_free(&r->val);
    opt_free(&r->opt);
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
    RunConfig rc;
    runconfig_from_args(&rc, argc, argv, mode, r->world);
    r->c = &rc;
    comm_watchdog_start(&r->comm, rc.f.watchdog_timeout); // every rank; before NCCL's init, which it covers
    comm_watchdog_op_unbounded(&r->comm, "startup");
    start_backend(r);
    const long resume_step = prepare_out_dir(r);
    build_model(r, resume_step);
    setup_data(r);
    setup_optimizer(r);
    if (resume_step >= 0) {
        restore_checkpoint(r, resume_step);
        say(r, "resumed: step %ld from %s\n", r->step, rc.f.out_dir);
    }
    report_model(r);
    report_memory(r);
    setup_mfu(r);
    open_log(r, resume_step >= 0);
    const int stopped = train_loop(r);
    if (rc.f.profile && r->rank == 0) ops_profile_print(r->steps_this_run > 1 ? r->steps_this_run - 1 : 1);
    ops_profile(0);
    comm_watchdog_op_unbounded(&r->comm, "final sample and save");
    if (!stopped) {
        sample_now(r);
        save_checkpoint(r);
        save_final(r);
    }
    run_free(r);
    comm_finalize(&r->comm);
    runconfig_free(&rc);
    return 0;
}
