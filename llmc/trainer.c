#define _GNU_SOURCE
#include "trainer.h"
#if defined(LLMC_CUDA)
#include "device.h"
#endif
#include "args.h"
#include "check.h"
#include "checkpoint.h"
#include "comm.h"
#include "config.h"
#include "dataloader.h"
#include "fileio.h"
#include "generate.h"
#include "gpt2.h"
#include "lora.h"
#include "model_io.h"
#include "ops.h"
#include "optimizer.h"
#include "qlora.h"
#include "params.h"
#include "sampler.h"
#include "schedule.h"
#include "zero.h"
#include <math.h>
#include <signal.h>
#include <string.h>
#include <time.h>

// ----------------------------------------------------------------------------
// flags

typedef struct {
    const char* model;
    const char* train_data;
    const char* val_data;
    const char* out_dir;
    int resume;
    int batch_size, seq_len;
    long total_batch_tokens;
    int steps, stop_after;
    float lr;
    int warmup;
    const char* schedule;
    float final_lr_frac, cooldown_frac;
    float weight_decay, grad_clip, beta1, beta2, eps;
    int eval_every, eval_batches, save_every, keep_checkpoints;
    int seed, threads, shuffle, max_skipped;
    int zero, recompute, deterministic;
    const char* save_format;
    // ---- LoRA (train_lora only)
    int lora_rank;
    float lora_alpha, lora_dropout;
    const char* lora_targets;
    const char* lora_layers;
    int rslora, merge, train_ln_f;
    const char* adapter;
    const char* lora_bias;
    int qlora;
    // ---- sampling (rank 0 prints a completion during / after training)
    int sample_every, sample_tokens, top_k;
    float temperature;
    const char* prompt;
    const char* vocab;
} TrainArgs;

static const char* const SCHEDULES[] = {"cosine", "linear", "constant", "wsd", NULL};
static const char* const SAVE_FORMATS[] = {"hf", "llmc", "both", "none", NULL};
static const char* const LORA_BIAS[] = {"none", "all", "lora_only", NULL};

static volatile sig_atomic_t g_stop_signal = 0;
static void on_signal(int sig) { g_stop_signal = sig; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_args(TrainArgs* a, int argc, char** argv, TrainMode mode) {
    memset(a, 0, sizeof(*a));
    a->batch_size = 4; a->seq_len = 256; a->total_batch_tokens = 0; a->steps = 100;
    a->lr = mode == TRAIN_LORA ? 2e-4f : 3e-4f; a->warmup = 0; a->schedule = "cosine";
    a->final_lr_frac = 0.0f; a->cooldown_frac = 0.2f;
    a->weight_decay = mode == TRAIN_LORA ? 0.0f : 0.1f; a->grad_clip = 1.0f;
    a->beta1 = 0.9f; a->beta2 = 0.95f; a->eps = 1e-8f;
    a->eval_every = 0; a->eval_batches = 8; a->save_every = 0; a->keep_checkpoints = 2;
    a->seed = 1337; a->threads = 0; a->shuffle = 0; a->max_skipped = 10;
    a->save_format = "both"; a->zero = 0; a->deterministic = 1;
    a->temperature = 1.0f; a->prompt = "<|endoftext|>";
    a->lora_rank = 8; a->lora_alpha = 16.0f; a->lora_dropout = 0.0f; a->lora_targets = "c_attn"; a->lora_layers = "all"; a->lora_bias = "none";
    const ArgSpec common[] = {
        {"--model", "-e", ARG_STR, &a->model, "PATH|dN", "model to start from: llm.c .bin, .safetensors, sharded index, HF model dir; or d6/d12/d24/d36/d48/tiny to train from scratch", 1, 0, NULL},
        {"--train-data", "-i", ARG_STR, &a->train_data, "GLOB", "training token shards (llm.c format; data/prepare makes them)", 1, 0, NULL},
        {"--val-data", "-j", ARG_STR, &a->val_data, "GLOB", "validation token shards", 1, 0, NULL},
        {"--out", "-o", ARG_STR, &a->out_dir, "DIR", "output directory: log.jsonl, checkpoints, final model", 1, 0, NULL},
        {"--resume", NULL, ARG_BOOL, &a->resume, NULL, "continue from the newest complete checkpoint in --out", 1, 0, NULL},
        {"--batch-size", "-b", ARG_INT, &a->batch_size, "B", "micro-batch size per rank", 1, 65536, NULL},
        {"--seq-len", "-t", ARG_INT, &a->seq_len, "T", "sequence length", 1, 1 << 20, NULL},
        {"--total-batch-tokens", "-d", ARG_LONG, &a->total_batch_tokens, "N", "tokens per optimizer step (gradient accumulation); 0 = one micro-batch per rank", 0, 1e15, NULL},
        {"--steps", "-x", ARG_INT, &a->steps, "N", "total optimizer steps of the run", 1, 1e9, NULL},
        {"--stop-after", NULL, ARG_INT, &a->stop_after, "N", "stop after N steps of this invocation with a checkpoint (for time-limited jobs); 0 = run to --steps", 0, 1e9, NULL},
        {"--lr", "-l", ARG_FLOAT, &a->lr, "LR", "peak learning rate", 0, 10, NULL},
        {"--warmup-steps", "-u", ARG_INT, &a->warmup, "N", "linear warmup steps", 0, 1e9, NULL},
        {"--schedule", NULL, ARG_STR, &a->schedule, "NAME", "learning-rate schedule after warmup", 1, 0, SCHEDULES},
        {"--final-lr-frac", "-q", ARG_FLOAT, &a->final_lr_frac, "F", "final learning rate as a fraction of --lr", 0, 1, NULL},
        {"--cooldown-frac", NULL, ARG_FLOAT, &a->cooldown_frac, "F", "wsd: fraction of steps spent decaying", 0, 1, NULL},
        {"--weight-decay", "-c", ARG_FLOAT, &a->weight_decay, "WD", "AdamW decoupled weight decay (2-D tensors only)", 0, 10, NULL},
        {"--grad-clip", NULL, ARG_FLOAT, &a->grad_clip, "G", "clip the global gradient norm to G; 0 = off", 0, 1e9, NULL},
        {"--beta1", NULL, ARG_FLOAT, &a->beta1, "B1", "AdamW beta1", 0, 0.999999, NULL},
        {"--beta2", NULL, ARG_FLOAT, &a->beta2, "B2", "AdamW beta2", 0, 0.999999, NULL},
        {"--eps", NULL, ARG_FLOAT, &a->eps, "E", "AdamW epsilon", 0, 1, NULL},
        {"--eval-every", "-v", ARG_INT, &a->eval_every, "N", "evaluate the validation loss every N steps; 0 = only at the end", 0, 1e9, NULL},
        {"--eval-batches", "-m", ARG_INT, &a->eval_batches, "N", "validation batches per evaluation", 1, 1e9, NULL},
        {"--save-every", "-n", ARG_INT, &a->save_every, "N", "write a checkpoint every N steps; 0 = only at the end", 0, 1e9, NULL},
        {"--keep-checkpoints", NULL, ARG_INT, &a->keep_checkpoints, "N", "keep the newest N complete checkpoints; 0 = keep all", 0, 1e9, NULL},
        {"--save-format", NULL, ARG_STR, &a->save_format, "F", "final model: hf (config.json + model.safetensors), llmc (model.bin), both, none", 1, 0, SAVE_FORMATS},
        {"--seed", NULL, ARG_INT, &a->seed, "S", "random seed (init from scratch, shuffling, dropout)", 0, 2147483647, NULL},
        {"--shuffle", NULL, ARG_BOOL, &a->shuffle, NULL, "shuffle shard and batch order every epoch (default: sequential)", 1, 0, NULL},
        {"--threads", NULL, ARG_INT, &a->threads, "N", "CPU threads; 0 = all cores", 0, 4096, NULL},
        {"--deterministic", NULL, ARG_INT, &a->deterministic, "0|1", "1: kernels give identical results run to run; 0 allows faster non-deterministic ones (CUDA attention backward)", 0, 1, NULL},
        {"--zero", "-z", ARG_INT, &a->zero, "S", "ZeRO stage across ranks: 0 all-reduce gradients, 1 shard optimizer state, 2 shard gradients too", 0, 2, NULL},
        {"--recompute", NULL, ARG_INT, &a->recompute, "K", "activation recompute in backward to save memory: 0 none, 1 GELU, 2 GELU and layernorms", 0, 2, NULL},
        {"--max-skipped-steps", NULL, ARG_INT, &a->max_skipped, "N", "stop after N consecutive steps with a non-finite loss or gradient", 1, 1e9, NULL},
        {"--sample-every", NULL, ARG_INT, &a->sample_every, "N", "print a sampled completion every N steps and at the end; 0 = only at the end, if --sample-tokens > 0", 0, 1e9, NULL},
        {"--sample-tokens", NULL, ARG_INT, &a->sample_tokens, "K", "tokens per sample; 0 = no sampling (64 when --sample-every is set)", 0, 1 << 20, NULL},
        {"--prompt", NULL, ARG_STR, &a->prompt, "TEXT", "prompt of the samples (default <|endoftext|>)", 1, 0, NULL},
        {"--temperature", NULL, ARG_FLOAT, &a->temperature, "T", "sampling temperature; 0 = greedy", 0, 100, NULL},
        {"--top-k", NULL, ARG_INT, &a->top_k, "K", "sample among the K most likely tokens; 0 = all", 0, 1 << 30, NULL},
        {"--vocab", NULL, ARG_STR, &a->vocab, "PATH", "vocabulary for the samples (default: next to --model, else data/gpt2)", 1, 0, NULL},
    };
    // LoRA flags (PEFT defaults where PEFT has one: dropout 0)
    const ArgSpec lora[] = {
        {"--lora-rank", "-r", ARG_INT, &a->lora_rank, "R", "LoRA rank r", 1, 65536, NULL},
        {"--lora-alpha", NULL, ARG_FLOAT, &a->lora_alpha, "A", "LoRA alpha: the branch is scaled by alpha / r (alpha / sqrt(r) with --rslora)", 0, 1e6, NULL},
        {"--lora-dropout", NULL, ARG_FLOAT, &a->lora_dropout, "P", "dropout on the input of the LoRA branch (PEFT lora_dropout)", 0, 0.999, NULL},
        {"--lora-targets", NULL, ARG_STR, &a->lora_targets, "LIST", "layers to adapt, comma list of c_attn, q, k, v (blocks of c_attn), attn.c_proj, mlp.c_fc, mlp.c_proj, c_proj (both projections), all-linear", 1, 0, NULL},
        {"--lora-layers", NULL, ARG_STR, &a->lora_layers, "LIST", "blocks to adapt: all, or indices and ranges like 0-5,8", 1, 0, NULL},
        {"--rslora", NULL, ARG_BOOL, &a->rslora, NULL, "rank-stabilized LoRA: scaling alpha / sqrt(r)", 1, 0, NULL},
        {"--lora-bias", NULL, ARG_STR, &a->lora_bias, "B", "also train base biases (PEFT bias=): all = every bias incl. layernorm biases, lora_only = the biases of the adapted layers", 1, 0, LORA_BIAS},
        {"--train-ln-f", NULL, ARG_BOOL, &a->train_ln_f, NULL, "also train the final layernorm (PEFT modules_to_save=[\"ln_f\"])", 1, 0, NULL},
        {"--adapter", NULL, ARG_STR, &a->adapter, "DIR", "start from this PEFT adapter (adapter_config.json + adapter_model.safetensors); its targets, ranks and alphas replace the --lora-* flags", 1, 0, NULL},
        {"--qlora", NULL, ARG_BOOL, &a->qlora, NULL, "QLoRA: hold the frozen matmul weights as NF4 with double quantization (bitsandbytes-compatible, ~4.13 bits per weight), dequantized layer by layer; implied by a 4-bit transformers + bitsandbytes checkpoint", 1, 0, NULL},
        {"--merge", NULL, ARG_BOOL, &a->merge, NULL, "also save the base with the adapter merged in: OUT/merged/ (transformers dir) and OUT/merged/model.bin (llm.c), per --save-format", 1, 0, NULL},
    };
    const int n_common = (int)(sizeof(common) / sizeof(common[0])), n_lora = mode == TRAIN_LORA ? (int)(sizeof(lora) / sizeof(lora[0])) : 0;
    ArgSpec specs[sizeof(common) / sizeof(common[0]) + sizeof(lora) / sizeof(lora[0])];
    memcpy(specs, common, sizeof(common));
    memcpy(specs + n_common, lora, (size_t)n_lora * sizeof(ArgSpec));
    const char* head = mode == TRAIN_FULL
        ? "usage: train_gpt2 --model PATH|dN --train-data GLOB [options]\n\nTrains every parameter of a GPT-2 model (fine-tuning, or pretraining from scratch with --model d12)."
        : "usage: train_lora --model PATH --train-data GLOB [options]\n\nTrains LoRA adapters on a frozen GPT-2.";
    args_parse(argc, argv, specs, n_common + n_lora, head);
    const char* hint = "run with --help to see every flag";
    if (!a->model) fatal(hint, "--model is required");
    if (!a->train_data) fatal(hint, "--train-data is required");
    if (a->resume && !a->out_dir) fatal(hint, "--resume needs --out DIR (the directory holding the checkpoints)");
    if (a->sample_every > 0 && a->sample_tokens == 0) a->sample_tokens = 64;
    if (a->warmup > a->steps) fatal(hint, "--warmup-steps (%d) is larger than --steps (%d)", a->warmup, a->steps);
    if (mode == TRAIN_FULL && qlora_is_hf4bit(a->model))
        fatal("fine-tune it with train_lora (QLoRA), or give train_gpt2 the full-precision model",
              "--model %s: the linear weights are stored 4-bit (bitsandbytes NF4); training every parameter needs them in full precision",
              a->model);
    if (mode == TRAIN_LORA) {
        if (a->merge && !a->out_dir) fatal(hint, "--merge needs --out DIR (where the merged model is written)");
        if (gpt2_config_from_descriptor(&(GPT2Config){0}, a->model) == 0)
            fatal("pass a pretrained checkpoint (llm.c .bin, safetensors or a transformers model dir)",
                  "--model %s: LoRA trains adapters on a pretrained base; a model built from scratch has nothing to adapt", a->model);
    }
    return 0;
}

// ----------------------------------------------------------------------------
// the run

#if defined(LLMC_CUDA)
#define COMM_FLOATX COMM_BF16
#else
#define COMM_FLOATX COMM_F32
#endif

typedef struct {
    TrainArgs a;
    TrainMode mode;
    int rank, world;
    Comm comm;
    ZeroLayout zl;             // the flat trainable space split over ranks
    floatX* gshard;            // ZeRO-2: this rank's reduced gradients
    GPT2 model;
    LoraModel* lora;           // train_lora: the adapters (model.lora points here)
    Nf4Base* nf4;              // --qlora: the quantized base weights (model.nf4 points here)
    Optimizer opt;
    DataLoader train, val;
    int has_val;
    int accum;                 // micro-steps per optimizer step
    int *inputs, *targets;     // host, accum * B * T
    LRSchedule sched;
    long step;                 // optimizer steps completed
    uint64_t rng;
    long skipped_total;
    FILE* log;
    // sampling (rank 0)
    Tokenizer* tok;
    int* prompt_ids;
    int n_prompt;
    KVCache* kv;
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

// Fill the trainable segments: every trainable tensor of the table, in table order, then the
// LoRA adapters (one segment: all of them are 2-D matrices and decayed, as HF Trainer does).
static int build_segments(Run* r, TrainSeg* segs) {
    GPT2* m = &r->model;
    int n = 0;
    if (r->lora) return lora_segments(r->lora, m, segs); // adapters + the base slices trained with them
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        if (!m->g[i]) continue;
        segs[n].name = m->pt.t[i].name;
        segs[n].p = m->p[i];
        segs[n].g = m->g[i];
        segs[n].n = m->pt.t[i].numel;
        segs[n].weight_decay = m->pt.t[i].weight_decay;
        n++;
    }
    return n;
}


// ----------------------------------------------------------------------------
// distributed: the trainable space is split into contiguous ranges, one per rank (llmc/zero.h).
// A "piece" is the part of one trainable segment inside one rank's range.

typedef void (*PieceFn)(Run* r, const TrainSeg* s, size_t seg_off, size_t n, int owner);

static void for_each_piece(Run* r, PieceFn fn) {
    for (int i = 0; i < r->opt.nseg; i++) {
        const TrainSeg* s = &r->opt.segs[i];
        for (int o = 0; o < r->world; o++) {
            ZeroRange x = zero_intersect(&r->zl, o, s->offset, s->n);
            if (x.begin < x.end) fn(r, s, x.begin - s->offset, x.end - x.begin, o);
        }
    }
}

static void piece_reduce(Run* r, const TrainSeg* s, size_t off, size_t n, int owner) {
    comm_dev_reduce_sum(&r->comm, s->g + off, s->g + off, n, COMM_FLOATX, owner, NULL);
}
// ZeRO-2: reduce to the owner, who adds it to its gradient shard; the source is then emptied.
static void piece_reduce_into_shard(Run* r, const TrainSeg* s, size_t off, size_t n, int owner) {
    comm_dev_reduce_sum(&r->comm, s->g + off, s->g + off, n, COMM_FLOATX, owner, NULL);
    if (owner == r->rank) add_inplace(r->gshard + (s->offset + off - r->opt.begin), s->g + off, n);
}
static void piece_broadcast(Run* r, const TrainSeg* s, size_t off, size_t n, int owner) {
    comm_dev_broadcast(&r->comm, s->p + off, n * sizeof(floatX), owner, NULL);
}

// ZeRO-2 backward hook (full training): a bucket of the model's gradients is complete.
static void zero2_bucket_hook(void* ctx, int bucket) {
    Run* r = (Run*)ctx;
    GPT2* m = &r->model;
    ZeroRange ranges[ZERO_GPT2_MAX_RANGES];
    int nr = zero_gpt2_bucket(&m->pt, bucket, ranges);
    ZeroSegment segs[ZERO_GPT2_MAX_RANGES * 64];
    int ns = zero_segments(&r->zl, ranges, nr, segs, (int)(sizeof(segs) / sizeof(segs[0])));
    assertCheck(ns <= (int)(sizeof(segs) / sizeof(segs[0])));
    floatX* buf = bucket < m->cfg.num_layers ? m->layer_bucket : m->final_bucket;
    size_t nbuf = bucket < m->cfg.num_layers ? m->layer_bucket_n : m->final_bucket_n;
    comm_dev_group_begin(&r->comm);
    for (int k = 0; k < ns; k++)
        comm_dev_reduce_sum(&r->comm, buf + segs[k].bucket_off, buf + segs[k].bucket_off,
                            segs[k].end - segs[k].begin, COMM_FLOATX, segs[k].owner, NULL);
    comm_dev_group_end(&r->comm);
    for (int k = 0; k < ns; k++)
        if (segs[k].owner == r->rank)
            add_inplace(r->gshard + (segs[k].begin - r->opt.begin), buf + segs[k].bucket_off, segs[k].end - segs[k].begin);
    ops_zero(buf, nbuf * sizeof(floatX)); // the next layer accumulates into the same bucket
}

// After the backward passes of a step: make every rank's own range hold the summed gradient.
static void reduce_gradients(Run* r) {
    if (r->world == 1) return;
    if (r->a.zero == 0) {
        for (int i = 0; i < r->opt.nseg; i++)
            comm_dev_allreduce_sum(&r->comm, r->opt.segs[i].g, r->opt.segs[i].n, COMM_FLOATX, NULL);
    } else if (r->a.zero == 1) {
        for_each_piece(r, piece_reduce);
    }
    // ZeRO-2 reduced each micro-step's gradients as they were produced
}

// Global gradient norm, the same on every rank.
static double global_grad_norm(Run* r) {
    double ss;
    if (r->world == 1 || r->a.zero == 0) ss = opt_grad_sumsq(&r->opt, 0, r->opt.total);
    else {
        ss = opt_grad_sumsq(&r->opt, r->opt.begin, r->opt.end);
        comm_allreduce_sum_f64(&r->comm, &ss, 1);
    }
    return sqrt(ss);
}

static double evaluate(Run* r) {
    const int B = r->a.batch_size, T = r->a.seq_len;
    dl_reset(&r->val);
    double sum = 0.0; long cnt = 0;
    if (r->lora) r->lora->train_mode = 0; // no dropout when evaluating
    for (int i = 0; i < r->a.eval_batches; i++) {
        dl_next(&r->val, r->inputs, r->targets);
        long n = 0;
        sum += gpt2_forward(&r->model, r->inputs, r->targets, B, T, 0.0f, &n);
        cnt += n;
    }
    double agg[2] = { sum, (double)cnt };
    comm_allreduce_sum_f64(&r->comm, agg, 2);
    return agg[1] > 0 ? agg[0] / agg[1] : NAN;
}

static void save_checkpoint(Run* r) {
    const char* dir = r->a.out_dir;
    if (!dir) return;
    char path[4200];
    float* host = NULL;
    if (r->rank == 0 && r->lora) {
        // LoRA: the base is frozen and reloaded from --model; only the adapter is saved
        ckpt_path(path, sizeof(path), dir, "adapter", r->step, 0);
        lora_save_tensors(r->lora, &r->model, path);
    } else if (r->rank == 0) {
        host = (float*)mallocCheck(r->model.pt.total * sizeof(float));
        gpt2_get_params(&r->model, host);
        ckpt_path(path, sizeof(path), dir, "model", r->step, 0);
        model_save_llmc(path, &r->model.pt, host, 0);
        free(host);
    }
    StateHeader h;
    memset(&h, 0, sizeof(h));
    h.h[SH_MAGIC] = STATE_MAGIC; h.h[SH_VERSION] = STATE_VERSION;
    h.h[SH_WORLD] = r->world; h.h[SH_RANK] = r->rank; h.h[SH_HAS_MASTER] = r->opt.master != NULL;
    h.h[SH_STEP] = r->step; h.h[SH_OPT_T] = r->opt.t; h.h[SH_RNG] = (int64_t)r->rng;
    DataLoaderState ds = dl_get_state(&r->train);
    h.h[SH_DL_EPOCH] = ds.epoch; h.h[SH_DL_SHARD] = ds.shard_i; h.h[SH_DL_CHUNK] = ds.chunk_i;
    h.h[SH_BEGIN] = (int64_t)r->opt.begin; h.h[SH_END] = (int64_t)r->opt.end; h.h[SH_TOTAL] = (int64_t)r->opt.total;
    h.h[SH_MODE] = r->mode; h.h[SH_B] = r->a.batch_size; h.h[SH_T] = r->a.seq_len; h.h[SH_ACCUM] = r->accum;
    h.h[SH_SKIPPED] = r->skipped_total; h.h[SH_ZERO] = r->a.zero; h.h[SH_SEED] = r->a.seed;
    h.h[SH_TOKENS_PER_STEP] = r->a.total_batch_tokens; h.h[SH_SHUFFLE] = r->a.shuffle;
    size_t n = r->opt.end - r->opt.begin;
    float* mh = (float*)mallocCheck(n * sizeof(float));
    float* vh = (float*)mallocCheck(n * sizeof(float));
    float* mas = r->opt.master ? (float*)mallocCheck(n * sizeof(float)) : NULL;
    ops_to_host(mh, r->opt.m, n * sizeof(float));
    ops_to_host(vh, r->opt.v, n * sizeof(float));
    if (mas) ops_to_host(mas, r->opt.master, n * sizeof(float));
    ckpt_path(path, sizeof(path), dir, "state", r->step, r->rank);
    ckpt_write_state(path, &h, mh, vh, mas);
    free(mh); free(vh); free(mas);
    // the checkpoint is complete only when every rank has written its part: the DONE manifest
    // (sizes and checksums of every file) is written last
    ckpt_commit(&r->comm, dir, r->step, r->lora ? "adapter" : "model");
    if (r->rank == 0) {
        ckpt_prune(dir, r->a.keep_checkpoints);
        printf("checkpoint: step %ld written to %s\n", r->step, dir);
    }
    comm_barrier(&r->comm);
}

static void restore_checkpoint(Run* r, long step) {
    char path[4200];
    StateHeader h0;
    ckpt_check_states(r->a.out_dir, step, &h0); // every rank's header, validated and cross-checked
    ckpt_path(path, sizeof(path), r->a.out_dir, "state", step, 0);
    if (h0.h[SH_STEP] > r->a.steps)
        fatal("raise --steps to continue the run", "the checkpoint in '%s' is at step %lld, beyond --steps %d",
              r->a.out_dir, (long long)h0.h[SH_STEP], r->a.steps);
    const char* hint = "resume with the same model, --batch-size, --seq-len and --total-batch-tokens as the checkpointed run";
    if (h0.h[SH_MODE] != r->mode) fatal(hint, "'%s' was written by %s, not by this program", path, h0.h[SH_MODE] ? "train_lora" : "train_gpt2");
    if (h0.h[SH_B] != r->a.batch_size || h0.h[SH_T] != r->a.seq_len || h0.h[SH_TOKENS_PER_STEP] != r->a.total_batch_tokens)
        fatal(hint, "'%s' was written with batch %lld x %lld and %lld tokens per step; this run has %d x %d and %ld",
              path, (long long)h0.h[SH_B], (long long)h0.h[SH_T], (long long)h0.h[SH_TOKENS_PER_STEP],
              r->a.batch_size, r->a.seq_len, r->a.total_batch_tokens);
    if ((size_t)h0.h[SH_TOTAL] != r->opt.total)
        fatal(hint, "'%s' holds optimizer state for %lld trainable parameters; this run has %zu",
              path, (long long)h0.h[SH_TOTAL], r->opt.total);
    int old_world = (int)h0.h[SH_WORLD];
    // Optimizer state: copy whatever part of every old rank's range overlaps this rank's range.
    // With the same ranks and stage that is exactly this rank's own file; otherwise this
    // re-shards the state (ranks added or lost, or another --zero).
    size_t n = r->opt.end - r->opt.begin, got = 0;
    float* mh = (float*)mallocCheck(n * sizeof(float));
    float* vh = (float*)mallocCheck(n * sizeof(float));
    float* mas = r->opt.master ? (float*)mallocCheck(n * sizeof(float)) : NULL;
    int have_master = 1;
    for (int q = 0; q < old_world && got < n; q++) {
        StateHeader hq;
        ckpt_path(path, sizeof(path), r->a.out_dir, "state", step, q);
        ckpt_read_state_header(path, &hq);
        if (hq.h[SH_WORLD] != old_world || hq.h[SH_RANK] != q || hq.h[SH_STEP] != step)
            fatal("the checkpoint directory mixes files of different runs", "'%s' does not belong to step %ld of a %d-rank run", path, step, old_world);
        have_master &= (int)hq.h[SH_HAS_MASTER];
        got += ckpt_read_state_overlap(path, &hq, r->opt.begin, r->opt.end, mh, vh, hq.h[SH_HAS_MASTER] ? mas : NULL);
        if (r->a.zero == 0 && hq.h[SH_ZERO] == 0) break; // every old rank holds the full state
    }
    if (got != n) fatal("the checkpoint is incomplete", "the state files of step %ld in '%s' cover %zu of this rank's %zu elements",
                        step, r->a.out_dir, got, n);
    ops_to_device(r->opt.m, mh, n * sizeof(float));
    ops_to_device(r->opt.v, vh, n * sizeof(float));
    if (mas && have_master) ops_to_device(r->opt.master, mas, n * sizeof(float));
    free(mh); free(vh); free(mas);
    r->opt.t = (int)h0.h[SH_OPT_T];
    r->step = (long)h0.h[SH_STEP];
    r->rng = (uint64_t)h0.h[SH_RNG];
    r->skipped_total = (long)h0.h[SH_SKIPPED];
    DataLoaderState ds = { h0.h[SH_DL_EPOCH], h0.h[SH_DL_SHARD], h0.h[SH_DL_CHUNK] };
    if (old_world != r->world) {
        // the loader walks chunks of one global micro-batch (ranks x B x T tokens): convert the
        // position to this run's chunk size
        if (h0.h[SH_SHUFFLE] || r->a.shuffle)
            fatal("resume a --shuffle run with the same number of ranks", "the shuffled batch order depends on the number of ranks (%d before, %d now)", old_world, r->world);
        int64_t tokens = ds.chunk_i * (int64_t)old_world * r->a.batch_size * r->a.seq_len;
        int64_t chunk = (int64_t)r->world * r->a.batch_size * r->a.seq_len;
        if (tokens % chunk) fatal("resume with a number of ranks that divides the position", "the data position (%lld tokens into the shard) is not a multiple of %lld",
                                  (long long)tokens, (long long)chunk);
        ds.chunk_i = tokens / chunk;
        say(r, "re-sharded: %d ranks -> %d ranks (ZeRO %lld -> %d)\n", old_world, r->world, (long long)h0.h[SH_ZERO], r->a.zero);
    }
    dl_set_state(&r->train, ds);
}

// The tokenizer next to a saved model or adapter, so the directory loads on its own
// (AutoTokenizer / pipeline). The vocabulary is the one --sample-* would use.
static void save_tokenizer_files(Run* r, const char* dir) {
    char vpath[4200], why[4400];
    if (gen_find_vocab(r->a.vocab, r->a.model, vpath, sizeof(vpath)) != 0)
        snprintf(why, sizeof(why), "no vocabulary found (pass --vocab)");
    else if (model_save_hf_tokenizer(dir, vpath, &r->model.pt.cfg, why, sizeof(why)) == 0) {
        printf("saved: %s/ tokenizer files (vocabulary %s)\n", dir, vpath);
        return;
    }
    printf("note: no tokenizer files in %s: %s\n", dir, why);
}

static void save_final(Run* r) {
    const char* dir = r->a.out_dir;
    char mdir[4200];
    if (!dir || r->rank != 0) return;
    if (r->lora) {
        lora_save_peft(r->lora, &r->model, dir);
        printf("saved: %s/adapter_model.safetensors + adapter_config.json (PEFT)\n", dir);
        save_tokenizer_files(r, dir);
        if (!r->a.merge || !strcmp(r->a.save_format, "none")) return;
        path_join(mdir, sizeof(mdir), dir, "merged");
        mkdir_p(mdir);
        dir = mdir;
    } else if (!strcmp(r->a.save_format, "none")) return;
    float* host = (float*)mallocCheck(r->model.pt.total * sizeof(float));
    gpt2_get_params(&r->model, host);
    if (r->lora) lora_merge(r->lora, &r->model.pt, host); // W += scaling * B A
    // QLoRA: host holds dequant(quant(W)) for the quantized weights (gpt2_get_params), the
    // matrices the adapter was trained against, so that is what the adapter is merged into
    if (r->nf4) printf("merged: adapter merged into dequant(quant(W)) of the NF4 base (the weights it was trained against)\n");
    int hf = !strcmp(r->a.save_format, "hf") || !strcmp(r->a.save_format, "both");
    int llmc = !strcmp(r->a.save_format, "llmc") || !strcmp(r->a.save_format, "both");
    if (hf) {
        model_save_hf(dir, &r->model.pt, host);
        printf("saved: %s/model.safetensors + config.json (transformers)\n", dir);
        save_tokenizer_files(r, dir);
    }
    if (llmc) {
        char path[4200];
        path_join(path, sizeof(path), dir, "model.bin");
        model_save_llmc(path, &r->model.pt, host, 0);
        printf("saved: %s (llm.c)\n", path);
    }
    free(host);
}

// train_lora: the adapters for the frozen base: new (PEFT init) or from --adapter. When resuming,
// the structure comes from the same flags / --adapter and the values from the checkpoint.
static void create_lora(Run* r, const GPT2Config* cfg) {
    TrainArgs* a = &r->a;
    char err[1024];
    if (a->adapter) {
        const char* flags[] = {"--lora-rank", "--lora-alpha", "--lora-targets", "--lora-layers", "--rslora", "--lora-bias", "--train-ln-f"};
        for (int i = 0; i < 7; i++)
            if (args_given(flags[i])) printf("note: %s is ignored: the structure of the adapter in --adapter %s is used\n", flags[i], a->adapter);
        r->lora = lora_load_peft(a->adapter, cfg);
        if (args_given("--lora-dropout")) { // else the adapter's own lora_dropout, as PEFT would continue
            r->lora->dropout = a->lora_dropout;
            r->lora->spec.dropout = a->lora_dropout;
        }
    } else {
        LoraSpec spec;
        memset(&spec, 0, sizeof(spec));
        spec.rank = a->lora_rank; spec.alpha = a->lora_alpha; spec.rslora = a->rslora; spec.dropout = a->lora_dropout;
        spec.bias = !strcmp(a->lora_bias, "all") ? LORA_BIAS_ALL : !strcmp(a->lora_bias, "lora_only") ? LORA_BIAS_LORA_ONLY : LORA_BIAS_NONE;
        spec.train_ln_f = a->train_ln_f;
        if (lora_parse_targets(a->lora_targets, &spec.targets, err, sizeof(err)))
            fatal("run with --help to see the LoRA targets", "%s", err);
        if (lora_parse_layers(a->lora_layers, cfg->num_layers, &spec, err, sizeof(err)))
            fatal("give layer indices of the base model, e.g. --lora-layers 0-5,8", "%s", err);
        r->lora = lora_create(cfg, &spec);
        lora_init_params(r->lora, (uint64_t)a->seed);
    }
    snprintf(r->lora->base_name, sizeof(r->lora->base_name), "%s", a->model);
    r->lora->dropout_seed = (uint64_t)a->seed;
}

// ----------------------------------------------------------------------------
// sampling (--sample-*): rank 0 continues --prompt with the current model. The vocabulary and
// the prompt are checked before training starts, so a bad one fails at once, not hours later.

static void sample_setup(Run* r, const GPT2Config* cfg) {
    TrainArgs* a = &r->a;
    if (a->sample_tokens <= 0 || r->rank != 0) return;
    char vpath[4200];
    if (gen_find_vocab(a->vocab, a->model, vpath, sizeof(vpath)) != 0)
        fatal("pass --vocab DIR (encoder.json + vocab.bpe, vocab.json + merges.txt, or tokenizer.json), or drop --sample-tokens / --sample-every",
              "sampling needs a vocabulary and none was found for --model %s (nor data/gpt2)", a->model);
    r->tok = (Tokenizer*)mallocCheck(sizeof(Tokenizer));
    tok_load(r->tok, vpath);
    gen_encode_prompt(r->tok, a->prompt, cfg->vocab_size, "--prompt", &r->prompt_ids, &r->n_prompt);
    if (r->n_prompt + a->sample_tokens - 1 > cfg->max_seq_len)
        fatal("lower --sample-tokens or shorten --prompt", "the prompt (%d tokens) + --sample-tokens %d exceed the model's %d positions",
              r->n_prompt, a->sample_tokens, cfg->max_seq_len);
}

static void sample_now(Run* r) {
    TrainArgs* a = &r->a;
    if (!r->tok) return;
    if (!r->kv) { // allocated at the first sample, kept for the others
        r->kv = (KVCache*)mallocCheck(sizeof(KVCache));
        kv_init(r->kv, &r->model, 1, r->n_prompt + a->sample_tokens - 1);
    }
    FILE* copy = NULL;
    if (a->out_dir) {
        char path[4200];
        path_join(path, sizeof(path), a->out_dir, "samples.txt");
        copy = fopen(path, "ab"); // a log, appended like log.jsonl (NULL: console only)
        if (copy) fprintf(copy, "step %ld:\n", r->step);
    }
    printf("sample (step %ld):\n", r->step);
    char* text = tok_decode(r->tok, r->prompt_ids, (size_t)r->n_prompt, NULL);
    if (!(r->n_prompt == 1 && r->prompt_ids[0] == r->tok->eot_id)) { fputs(text, stdout); if (copy) fputs(text, copy); }
    free(text);
    SampleParams sp = { a->temperature, a->top_k, (uint64_t)a->seed };
    GenStream gs = { r->tok, stdout, copy, r->tok->eot_id };
    sample_generate(&r->model, r->kv, r->prompt_ids, r->n_prompt, a->sample_tokens, &sp, r->tok->eot_id, NULL, gen_stream_token, &gs);
    printf("\n---\n");
    fflush(stdout);
    if (copy) { fputs("\n\n", copy); fclose(copy); }
}

static void sample_free(Run* r) {
    if (r->kv) { kv_free(r->kv); free(r->kv); }
    if (r->tok) { tok_free(r->tok); free(r->tok); }
    free(r->prompt_ids);
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

int trainer_main(int argc, char** argv, TrainMode mode) {
    Run run;
    memset(&run, 0, sizeof(run));
    Run* r = &run;
    r->mode = mode;
    comm_init(&r->comm, &argc, &argv); // first: MPI may take its own arguments out of argv
    r->rank = r->comm.rank; r->world = r->comm.world;
    parse_args(&r->a, argc, argv, mode);
    TrainArgs* a = &r->a;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
#if defined(LLMC_CUDA)
    device_select(&r->comm); // before ops_init: the backend's handles belong to the current GPU
#endif
    ops_init(a->threads);
    ops_set_deterministic(a->deterministic);
#if defined(LLMC_CUDA)
    device_attach(&r->comm); // NCCL for the device collectives, even with one rank
#endif
    r->rng = (uint64_t)a->seed * 0x9E3779B97F4A7C15ull + 1;

    // ---- model
    long resume_step = -1;
    if (a->out_dir) {
        if (r->rank == 0) mkdir_p(a->out_dir);
        comm_barrier(&r->comm);
        if (a->resume) {
            resume_step = ckpt_find_latest(a->out_dir);
            if (resume_step < 0) fatal("drop --resume to start a new run, or point --out at the run's directory",
                                       "no complete checkpoint (DONE_* marker) in '%s'", a->out_dir);
        } else if (ckpt_find_latest(a->out_dir) >= 0) {
            // never clobber another run's checkpoints and log
            fatal("add --resume to continue that run, or choose another --out",
                  "'%s' holds checkpoints of an earlier run", a->out_dir);
        }
        if (r->rank == 0) ckpt_clean(a->out_dir); // temporaries and orphans of interrupted runs
        if (resume_step >= 0) ckpt_verify(&r->comm, a->out_dir, resume_step); // before anything is read
    }
    GPT2Config cfg;
    ParamTable pt;
    float* host = NULL;
    char src[4200];
    if (resume_step >= 0 && mode == TRAIN_FULL) { // (LoRA resumes from the base in --model + the adapter checkpoint)
        ckpt_path(src, sizeof(src), a->out_dir, "model", resume_step, 0);
        model_load(src, &cfg, &pt, &host);
    } else if (gpt2_config_from_descriptor(&cfg, a->model) == 0) {
        params_build(&pt, &cfg);
        host = (float*)mallocCheck(pt.total * sizeof(float));
        model_init_gpt2(&pt, host, (uint64_t)a->seed);
        snprintf(src, sizeof(src), "%s (GPT-2 init, seed %d)", a->model, a->seed);
    } else if (qlora_is_hf4bit(a->model)) {
        // a transformers + bitsandbytes 4-bit checkpoint: its linear weights stay as stored
        r->nf4 = qlora_load_hf4bit(a->model, &cfg, &pt, &host);
        a->qlora = 1;
        snprintf(src, sizeof(src), "%s (bitsandbytes 4-bit)", a->model);
    } else {
        model_load(a->model, &cfg, &pt, &host);
        snprintf(src, sizeof(src), "%s", a->model);
    }
    if (a->seq_len > cfg.max_seq_len)
        fatal("use a --seq-len no larger than the model's n_positions", "--seq-len %d exceeds the model's maximum sequence length %d",
              a->seq_len, cfg.max_seq_len);
    sample_setup(r, &cfg);
    if (mode == TRAIN_LORA) create_lora(r, &cfg);
    if (a->qlora && !r->nf4) {
        r->nf4 = qlora_quantize(&pt, host);
        qlora_release_host(&pt, host); // the fp32 copies of the quantized weights are not needed any more
    }
    gpt2_init_ex(&r->model, &cfg, mode == TRAIN_LORA ? lora_base_trainable_mask(r->lora) : GPT2_TRAIN_ALL,
                 r->nf4 ? QLORA_MASK : 0u);
    if (r->nf4) qlora_attach(r->nf4, &r->model);
    gpt2_set_params(&r->model, host);
    free(host);
    gpt2_set_recompute(&r->model, a->recompute);
    gpt2_alloc_acts(&r->model, a->batch_size, a->seq_len);
    if (mode == TRAIN_LORA) {
        lora_attach(r->lora, &r->model);
        if (resume_step >= 0) {
            char path[4200];
            ckpt_path(path, sizeof(path), a->out_dir, "adapter", resume_step, 0);
            lora_load_tensors(r->lora, &r->model, path);
        }
    }

    // ---- batch geometry
    long micro = (long)a->batch_size * a->seq_len * r->world;
    if (a->total_batch_tokens == 0) a->total_batch_tokens = micro;
    if (a->total_batch_tokens % micro != 0)
        fatal("make --total-batch-tokens a multiple of batch-size x seq-len x ranks",
              "--total-batch-tokens %ld is not a multiple of %d x %d x %d = %ld",
              a->total_batch_tokens, a->batch_size, a->seq_len, r->world, micro);
    r->accum = (int)(a->total_batch_tokens / micro);
    r->inputs = (int*)mallocCheck((size_t)r->accum * a->batch_size * a->seq_len * sizeof(int));
    r->targets = (int*)mallocCheck((size_t)r->accum * a->batch_size * a->seq_len * sizeof(int));

    // ---- data
    dl_init(&r->train, a->train_data, a->batch_size, a->seq_len, r->rank, r->world, cfg.vocab_size, a->shuffle, (uint64_t)a->seed);
    if (a->val_data) {
        dl_init(&r->val, a->val_data, a->batch_size, a->seq_len, r->rank, r->world, cfg.vocab_size, 0, 0);
        r->has_val = 1;
    }

    // ---- optimizer
    TrainSeg* segs = (TrainSeg*)mallocCheck(sizeof(TrainSeg) * (NUM_PARAM_TENSORS + 1 + (r->lora ? (size_t)r->lora->n_extra : 0)));
    int nseg = build_segments(r, segs);
    size_t ntrain = 0;
    for (int i = 0; i < nseg; i++) ntrain += segs[i].n;
    zero_layout_init(&r->zl, ntrain, r->world, ZERO_ALIGN_DEFAULT);
    if (a->zero >= 1 && r->world > 1) {
        // this rank keeps AdamW state (and master weights) for its own range only
        opt_init(&r->opt, segs, nseg, zero_shard_begin(&r->zl, r->rank), zero_shard_end(&r->zl, r->rank));
    } else {
        opt_init(&r->opt, segs, nseg, 0, (size_t)-1);
    }
    if (a->zero == 2 && r->world > 1) {
        // gradients: only this rank's reduced range persists; backward fills a reusable bucket
        size_t n = r->opt.end - r->opt.begin;
        r->gshard = (floatX*)ops_alloc((n ? n : 1) * sizeof(floatX));
        ops_zero(r->gshard, (n ? n : 1) * sizeof(floatX));
        r->opt.gshard = r->gshard;
        if (mode == TRAIN_FULL) {
            gpt2_use_grad_buckets(&r->model, zero2_bucket_hook, r);
            for (int i = 0; i < r->opt.nseg; i++) r->opt.segs[i].g = NULL; // only gshard holds gradients now
        }
    }
    free(segs);
    r->sched.kind = (SchedKind)sched_parse(a->schedule);
    r->sched.lr = a->lr; r->sched.warmup = a->warmup; r->sched.total = a->steps;
    r->sched.final_frac = a->final_lr_frac; r->sched.cooldown_frac = a->cooldown_frac;

    if (resume_step >= 0) {
        restore_checkpoint(r, resume_step);
        say(r, "resumed: step %ld from %s\n", r->step, a->out_dir);
    }

    // ---- report
    // the vocabulary padding rows of wte are never trained: count what HF would count
    size_t pad_rows = r->model.g[PT_WTE] ? (size_t)(cfg.padded_vocab_size - cfg.vocab_size) * (size_t)cfg.channels : 0;
    size_t trainable = r->opt.total - pad_rows, total_params = params_count_unpadded(&r->model.pt);
    if (r->lora) trainable = r->opt.total - (r->lora->total - r->lora->n_trainable); // without the q/k/v split's structural zeros
    say(r, "backend: %s\n", ops_backend_name());
    say(r, "model: %s | L=%d C=%d NH=%d vocab=%d (padded %d) max_seq_len=%d | %zu parameters\n", src,
           cfg.num_layers, cfg.channels, cfg.num_heads, cfg.vocab_size, cfg.padded_vocab_size, cfg.max_seq_len, total_params);
    if (r->lora) {
        const LoraSpec* ls = &r->lora->spec;
        say(r, "lora: %d adapters | r=%d alpha=%g%s dropout=%g | targets %s | layers %s%s%s%s%s\n", r->lora->n, ls->rank, ls->alpha,
               ls->rslora ? " (rsLoRA)" : "", ls->dropout, a->adapter ? "from the adapter" : a->lora_targets,
               a->adapter ? "from the adapter" : a->lora_layers,
               ls->bias == LORA_BIAS_ALL ? " | biases trained" : ls->bias == LORA_BIAS_LORA_ONLY ? " | biases of adapted layers trained" : "",
               ls->train_ln_f ? " | ln_f trained" : "", a->adapter ? " | initial adapter: " : "", a->adapter ? a->adapter : "");
        say(r, "trainable: %zu parameters (%.4f%% of %zu)\n", trainable, 100.0 * (double)trainable / (double)total_params, total_params);
    } else
        say(r, "trainable: %zu parameters (%.2f%%)\n", trainable, 100.0 * (double)trainable / (double)total_params);
    say(r, "data: %s (%lld tokens, %lld batches/epoch)%s%s\n", a->train_data, (long long)r->train.total_tokens,
           (long long)dl_batches_per_epoch(&r->train), r->has_val ? " | val: " : "", r->has_val ? a->val_data : "");
    say(r, "comm: %s, rank %d of %d\n", comm_impl_name(&r->comm), r->rank, r->world);
    say(r, "batch: %d x %d per rank x %d ranks x %d accumulation = %ld tokens/step\n",
           a->batch_size, a->seq_len, r->world, r->accum, a->total_batch_tokens);
    size_t pb = gpt2_param_bytes(&r->model), gb = gpt2_grad_bytes(&r->model), ob = opt_state_bytes(&r->opt);
    if (r->lora) { pb += r->lora->total * sizeof(floatX); gb += r->lora->total * sizeof(floatX); }
    size_t ab = r->model.act_bytes + r->model.scr_bytes;
    size_t gsb = r->gshard ? (r->opt.end - r->opt.begin) * sizeof(floatX) : 0;
    size_t qb = 0;
    if (r->nf4) {
        // the quantized base: codes + 8-bit absmax + nested scales, and the one dequant buffer
        qb = r->nf4->bytes + r->nf4->scratch_n * sizeof(floatX);
        say(r, "qlora: NF4 base (double quant, blocks of %d) %lld weights in %.3f MiB = %.3f bits/weight (replaces %.1f MiB of %s) "
               "| dequant scratch %.2f MiB | float params %.1f MiB\n",
               NF4_BLOCK, (long long)r->nf4->n_quant, mib(r->nf4->bytes), 8.0 * (double)r->nf4->bytes / (double)r->nf4->n_quant,
               mib(qlora_replaced_numel(&r->model.pt) * sizeof(floatX)), sizeof(floatX) == 4 ? "fp32" : "bf16",
               mib(r->nf4->scratch_n * sizeof(floatX)), mib(gpt2_param_bytes(&r->model)));
    }
    // floatX is 2 bytes on the CUDA backend (bf16 params, grads, activations) and 4 on the CPU;
    // the optimizer state is fp32 m, v and, with bf16 params, an fp32 master copy
    const char* xt = sizeof(floatX) == 2 ? "bf16" : "fp32";
    say(r, "memory (this rank): params %.1f MiB (%s%s) | grads %.1f MiB (%s) | optimizer %.1f MiB (fp32 m, v%s) | "
           "activations %.1f MiB (%s, recompute %d) | total %.1f MiB\n",
           mib(pb + qb), xt, r->nf4 ? ", NF4 base incl." : "", mib(gb + gsb), xt, mib(ob), r->opt.master ? ", master" : "",
           mib(ab), xt, a->recompute, mib(pb + qb + gb + gsb + ob + ab));
    if (r->world > 1) {
        // exact element counts, so tests can check the sharding
        say(r, "zero: stage %d | ranks %d | trainable elements %zu (padded %zu) | optimizer state per rank %zu elements x %d | "
               "gradient elements per rank %zu (+ %zu in buckets)\n",
               a->zero, r->world, r->zl.total, r->zl.padded, r->opt.end - r->opt.begin, r->opt.master ? 3 : 2,
               r->gshard ? r->opt.end - r->opt.begin : r->model.grads_n,
               r->gshard ? r->model.layer_bucket_n + r->model.final_bucket_n : (size_t)0);
    }

    if (a->out_dir && r->rank == 0) {
        char lp[4200];
        path_join(lp, sizeof(lp), a->out_dir, "log.jsonl");
        r->log = fopen(lp, resume_step >= 0 ? "ab" : "wb");
        if (!r->log) fatal("check that --out is writable", "cannot open '%s' for writing", lp);
    }

    // ---- loop
    const int B = a->batch_size, T = a->seq_len;
    const size_t BT = (size_t)B * T;
    long consecutive_bad = 0;
    long steps_this_run = 0;
    int interrupted = 0;
    while (1) {
        int last = r->step >= a->steps;
        if (r->has_val && ((a->eval_every > 0 && r->step % a->eval_every == 0) || last)) {
            double vl = evaluate(r);
            say(r, "step %ld | val loss %.6f\n", r->step, vl);
            run_log_json(r, "{\"step\": %ld, \"val_loss\": %.9g}", r->step, vl);
        }
        if (last) break;
        double t0 = now_s();
        // All micro-batches of the step are read first: the loss is the mean over every target
        // token of the whole accumulation window, so each micro-batch's gradient is scaled by
        // 1 / (valid targets in the window), which must be known before the first backward.
        int64_t valid = 0;
        for (int k = 0; k < r->accum; k++) {
            dl_next(&r->train, r->inputs + k * BT, r->targets + k * BT);
            for (size_t i = 0; i < BT; i++) valid += r->targets[k * BT + i] >= 0;
        }
        comm_allreduce_sum_i64(&r->comm, &valid, 1); // targets of the whole global batch
        gpt2_zero_grads(&r->model);
        if (r->gshard) ops_zero(r->gshard, (r->opt.end - r->opt.begin) * sizeof(floatX));
        double loss_sum = 0.0;
        float dloss = valid > 0 ? 1.0f / (float)valid : 0.0f;
        for (int k = 0; k < r->accum; k++) {
            long n = 0;
            if (r->lora) { // dropout masks: a pure function of (seed, rank, micro-step), so a resumed run draws the same ones
                r->lora->train_mode = 1;
                r->lora->tick = ((uint64_t)r->step * (uint64_t)r->world + (uint64_t)r->rank) * (uint64_t)r->accum + (uint64_t)k;
            }
            loss_sum += gpt2_forward(&r->model, r->inputs + k * BT, r->targets + k * BT, B, T, dloss, &n);
            gpt2_backward(&r->model);
            if (r->gshard && !r->model.grad_hook) {
                // ZeRO-2 without per-layer buckets (adapters): reduce this micro-step's gradients
                // now and empty them, so only the shard accumulates across micro-steps
                for_each_piece(r, piece_reduce_into_shard);
                for (int i = 0; i < r->opt.nseg; i++) ops_zero(r->opt.segs[i].g, r->opt.segs[i].n * sizeof(floatX));
            }
        }
        comm_allreduce_sum_f64(&r->comm, &loss_sum, 1);
        reduce_gradients(r);
        double loss = valid > 0 ? loss_sum / (double)valid : NAN;
        double norm = global_grad_norm(r);
        float lr = sched_lr(&r->sched, (int)r->step);
        float grad_scale = opt_clip_scale(norm, a->grad_clip);
        int bad = !isfinite(loss) || !isfinite(norm);
        if (bad) {
            r->skipped_total++;
            consecutive_bad++;
            say(r, "step %ld: non-finite %s, update skipped (%ld in a row, %ld in total)\n", r->step + 1,
                   !isfinite(loss) ? "loss" : "gradient norm", consecutive_bad, r->skipped_total);
            if (consecutive_bad >= a->max_skipped)
                fatal("lower --lr, raise --warmup-steps or --grad-clip, or check the data",
                      "%ld consecutive steps had a non-finite loss or gradient norm; stopping", consecutive_bad);
        } else {
            consecutive_bad = 0;
            opt_step(&r->opt, lr, a->beta1, a->beta2, a->eps, a->weight_decay, grad_scale,
                     (uint32_t)(a->seed + 7919 * r->step));
            // each owner updated its range: everyone gets the new parameters
            if (r->world > 1 && a->zero >= 1) for_each_piece(r, piece_broadcast);
        }
        r->step++;
        steps_this_run++;
        double ms = (now_s() - t0) * 1000.0;
        double tps = (double)a->total_batch_tokens / (ms / 1000.0);
        say(r, "step %4ld/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s\n",
               r->step, a->steps, loss, lr, norm, ms, tps);
        run_log_json(r, "{\"step\": %ld, \"train_loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"ms\": %.3f, \"tok_per_s\": %.1f%s}",
                     r->step, loss, lr, norm, ms, tps, bad ? ", \"skipped\": true" : "");
        // every rank must stop at the same step: agree on the signal flag
        double sig = (double)g_stop_signal;
        if (r->world > 1) comm_allreduce_max_f64(&r->comm, &sig, 1);
        int stop_now = sig > 0 || (a->stop_after > 0 && steps_this_run >= a->stop_after && r->step < a->steps);
        if (a->sample_every > 0 && r->step % a->sample_every == 0 && r->step < a->steps) sample_now(r);
        if (stop_now || (a->save_every > 0 && r->step % a->save_every == 0 && r->step < a->steps)) save_checkpoint(r);
        if (stop_now) {
            interrupted = 1;
            if (sig > 0) say(r, "interrupted by signal %d at step %ld; resume with --resume\n", (int)sig, r->step);
            else say(r, "stopping after %d steps of this run at step %ld; resume with --resume\n", a->stop_after, r->step);
            break;
        }
    }
    if (!interrupted) {
        sample_now(r);
        save_checkpoint(r);
        save_final(r);
    }

    if (r->log) fclose(r->log);
    sample_free(r);
    free(r->inputs); free(r->targets);
    dl_free(&r->train);
    if (r->has_val) dl_free(&r->val);
    opt_free(&r->opt);
    if (r->gshard) ops_free(r->gshard);
    gpt2_free(&r->model);
    qlora_free(r->nf4);
    lora_free(r->lora);
#if defined(LLMC_CUDA)
    device_detach(&r->comm);
#endif
    comm_finalize(&r->comm);
    return 0;
}
