#include "plan/memplan.h"
#include "model/prefmodel.h"
#include "base/check.h"
#include "base/mfu.h"
#include "model/gpt2.h"
#include "model/params.h"
#include "model/qlora.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "dist/zero.h"
#include "dist/fsdp.h"
#include "dist/gradsync.h"
#include "comm/comm.h"
#include "ops/ops.h"
#include "ops/device.h"
#include "ops/nf4.h"
#include "ops/sizes.h"
#include "model/model_io.h"
#include "model/gguf_io.h"
#include "base/fileio.h"
#include "base/safetensors.h"
#include "base/gguf.h"
#include "model/gguf_io.h"
#include "run/checkpoint.h"
#include "text/textgen.h"
#include "text/vocab.h"
#include "model/convert.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

// ----------------------------------------------------------------------------
// backends

void memplan_backend_cpu(PlanBackend* b, int bf16_gemm) {
    memset(b, 0, sizeof(*b));
    b->name = "cpu";
    b->X = sizeof(float);
    b->bf16_gemm = bf16_gemm;
    b->runtime = MEMPLAN_CPU_RUNTIME;
    b->blas = bf16_gemm ? 0 : MEMPLAN_CPU_BLAS;
    b->runtime_mpi = MEMPLAN_CPU_RUNTIME_MPI;
}

void memplan_backend_cuda(PlanBackend* b, size_t total) {
    memset(b, 0, sizeof(*b));
    b->name = "cuda";
    b->device = 1;
    b->X = 2;
    b->master = 1;
    b->bf16_gemm = 1;
    // the reserve for what the plan does not list: cuBLASLt's workspace and the kernels it loads,
    // NCCL's buffers, the ops' small scratch (the encoder's buckets, column sums, the norm's
    // reduction) and the sampler's cache (what an H100 holds beyond the plan: docs/MEMORY.md).
    const size_t cap = (size_t)512 << 20;
    b->runtime = total / 16 < cap ? total / 16 : cap;
}

void memplan_backend_this(PlanBackend* b) {
    const OpsCaps c = ops_caps();
    size_t avail = 0, total = 0;
    if (device_memory(&avail, &total)) memplan_backend_cuda(b, total);
    else {
        memplan_backend_cpu(b, ops_gemm_dtype() != OPS_F32);
        b->f16_gemm = ops_gemm_dtype() == OPS_F16;
    }
    b->X = c.floatx_bytes;
    b->master = c.master_weights;
    b->gemm_widen = c.gemm_widen_bytes;
}

void memplan_spec_init(PlanSpec* s, const GPT2Config* cfg) {
    memset(s, 0, sizeof(*s));
    s->cfg = *cfg;
    s->B = 4;
    s->T = cfg->max_seq_len < 1024 ? cfg->max_seq_len : 1024;
    s->accum = 1;
    s->world = 1;
    s->source = PLAN_SRC_HF;
}

static int ends_with(const char* s, const char* suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

// An llm.c checkpoint's header (llmc/model/model_io.c load_llmc: magic, version, then maxT, V, L,
// NH, C, Vp).
static void bin_config(const char* path, GPT2Config* cfg) {
    int32_t h[256];
    FILE* f = fopenCheck(path, "rb");
    freadCheck(h, sizeof(int32_t), 256, f, path);
    fclose(f);
    if (h[0] != LLMC_MODEL_MAGIC || (h[1] != 3 && h[1] != 5))
        fatal("pass an llm.c model checkpoint (.bin), a Hugging Face directory or dN", "'%s': not an llm.c model checkpoint (magic %d, version %d)",
              path, h[0], h[1]);
    cfg->max_seq_len = h[2]; cfg->vocab_size = h[3]; cfg->num_layers = h[4]; cfg->num_heads = h[5]; cfg->channels = h[6];
    cfg->padded_vocab_size = h[7];
    gpt2_config_validate(cfg, path);
}

void memplan_model_config(const char* model, GPT2Config* cfg, PlanSource* source) {
    char path[LLMC_PATH_MAX], dir[LLMC_PATH_MAX];
    if (gpt2_config_from_descriptor(cfg, model) == 0) { *source = PLAN_SRC_INIT; return; }
    if (!dir_exists(model) && !file_exists(model)) fatal("check the path of the model", "model '%s' does not exist", model);
    if (!dir_exists(model) && gguf_is_gguf(model)) { *source = PLAN_SRC_GGUF; gguf_read_gpt2_config(model, cfg); return; } // (its metadata)
    if (ends_with(model, ".bin")) { *source = PLAN_SRC_BIN; bin_config(model, cfg); return; }
    *source = PLAN_SRC_HF;
    snprintf(dir, sizeof(dir), "%s", model);
    if (!dir_exists(model)) { // a file: its directory
        char* slash = strrchr(dir, '/');
        if (slash) *slash = '\0'; else snprintf(dir, sizeof(dir), ".");
    }
    if (ends_with(model, "config.json") && !ends_with(model, ".index.json")) snprintf(path, sizeof(path), "%s", model);
    else path_join(path, sizeof(path), dir, "config.json");
    if (!file_exists(path))
        fatal("pass a Hugging Face model directory (config.json + model.safetensors), a .safetensors file with its config.json beside it, "
              "or an llm.c .bin", "model '%s': no %s (the model's shape is read from it before anything else)", model, path);
    model_read_hf_config(path, cfg);
}

// The tokens of a vocab.json / encoder.json (an object of token: id; the tokenizer's vocab_size is
// the largest id + 1), read without building the tokenizer; -1 when the file does not read so.
static int plan_vocab_tokens(const char* path) {
    size_t n = 0;
    FILE* f = fopen(path, "rb");
    if (!f) return -1;
    fclose(f);
    char* text = read_file_all(path, &n);
    long most = -1;
    int depth = 0, ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        const char c = text[i];
        if (c == '"') { // a string: to its closing quote
            for (i++; i < n && text[i] != '"'; i++) if (text[i] == '\\') i++;
        } else if (c == '{') depth++;
        else if (c == '}') depth--;
        else if (c == ':' && depth == 1) {
            char* end;
            const long id = strtol(text + i + 1, &end, 10);
            ok = end != text + i + 1 && id >= 0 && id < (1L << 30);
            if (ok && id > most) most = id;
        }
    }
    free(text);
    return ok && depth == 0 && most >= 0 ? (int)(most + 1) : -1;
}

// The vocabulary a run that writes finds for its model directories, as outputs_init finds it
// (--vocab, next to --model, or the bundled one; only of the model's size), and the bytes of its
// tokenizer files.
static void plan_vocab(PlanSpec* s, const TrainFlags* f) {
    char vocab[LLMC_PATH_MAX], why[LLMC_PATH_MAX + 200];
    VocabFiles vf;
    s->vocab = 0; s->vocab_bytes = 0;
    if (!s->save || s->rank != 0 || textgen_find_vocab(f->sample.vocab, f->model, vocab, sizeof(vocab)) != 0) return; // (rank 0 writes)
    if (vocab_files(vocab, &vf) != 0) return;
    const int V = vf.tokenizer_json[0] ? -1 : plan_vocab_tokens(vf.vocab); // (else the tokenizer is loaded to count them)
    if (V >= 0 ? V != s->cfg.vocab_size : convert_vocab_fits(vocab, &s->cfg, why, sizeof(why)) != 0) return;
    s->vocab = 1;
    const char* files[3] = { vf.vocab, vf.merges, vf.tokenizer_json };
    s->vocab_bytes = 512; // (tokenizer_config.json, special_tokens_map.json)
    for (int i = 0; i < 3; i++) if (files[i][0] && file_size(files[i]) > 0) s->vocab_bytes += (size_t)file_size(files[i]);
}

void memplan_spec_from_run(PlanSpec* s, const RunConfig* rc, const GPT2Config* cfg, int world, int rank) {
    const TrainFlags* f = &rc->f;
    memplan_spec_init(s, cfg);
    s->lora = rc->mode == TRAIN_LORA;
    s->qlora = rc->qlora;
    if (s->lora) {
        LoraSpec* l = &s->lspec;
        l->rank = f->lora_rank; l->alpha = f->lora_alpha; l->rslora = f->rslora; l->dora = f->dora; l->dropout = f->lora_dropout;
        l->bias = rc->lora_bias; l->train_ln_f = f->train_ln_f; l->targets = rc->lora_targets;
        char err[512];
        // (with --adapter the flags' targets are not parsed for the run: the plan parses them)
        if (!l->targets && lora_parse_targets(f->lora_targets, &l->targets, err, sizeof(err)))
            fatal("run with --help to see the LoRA targets", "%s", err);
        if (lora_parse_layers(f->lora_layers ? f->lora_layers : "all", cfg->num_layers, l, err, sizeof(err)))
            fatal("give layer indices of the base model, e.g. --lora-layers 0-5,8", "%s", err);
    }
    s->B = f->batch_size == ARG_AUTO ? 1 : f->batch_size; s->T = f->seq_len;
    s->recompute = f->recompute == ARG_AUTO ? 0 : f->recompute;
    s->accum = rc->accum > 0 ? rc->accum : 1;
    s->zero = f->zero; s->world = world; s->rank = rank;
    s->keep = f->zero3_keep; s->shard_group = f->shard_group; s->offload = f->offload_optimizer;
    s->save = rc->write_outputs;
    s->sample = rc->sample_tokens > 0;
    s->pref = rc->objective != PREF_SFT;
    PlanSource src;
    GPT2Config ignored;
    memplan_model_config(f->model, &ignored, &src);
    s->source = src;
    s->budget = (size_t)((double)f->memory_budget * 1048576.0);
    GgmlType gt;
    s->save_hf = rc->save_hf; s->save_llmc = rc->save_llmc; s->merge = f->merge; s->keep_best = f->keep_best;
    s->bitfit = runconfig_bitfit(rc);
    s->save_gguf = rc->save_gguf && gguf_parse_type(f->save_gguf, &gt) == 0 ? (int)gt + 1 : 0;
    plan_vocab(s, f); // (after s->rank, s->save)
    s->link_llmc = !s->lora && s->save_llmc;
    s->ref_stored = pref_uses_reference((PrefObjective)rc->objective) && (!s->lora || f->ref_model);
    s->ref_pass = s->ref_stored;
    s->ref_model = s->ref_stored && f->ref_model;
    if (s->ref_model) memplan_model_config(f->ref_model, &s->ref_cfg, &s->ref_source);
}

// ----------------------------------------------------------------------------
// the ledger: the run's allocations and frees in the order the trainer makes them

#define LEDGER_MAX 96
typedef struct {
    const char* name;
    size_t bytes;
    size_t unwritten;           // of them never written (on the CPU not resident)
    int where, live, touched;
    char what[96];
} Entry;

typedef struct {
    Entry e[LEDGER_MAX];
    int n;
    int device;                 // backend memory on a GPU: counts from the allocation
    const char* phase;
    size_t peak, peak_host, peak_buffers;
    const char* peak_at;
    const char* peak_buffers_at;
    size_t slot[4];             // the CPU's bf16 GEMM scratch slots (cpu_gemm_slots) grown so far
} Ledger;

static int counts(const Ledger* l, const Entry* e) { return e->live && (e->touched || (l->device && e->where == PLAN_BACKEND)); }

// What an entry holds: on a GPU what it allocated; on the CPU what is written of it.
static size_t held(const Ledger* l, const Entry* e) { return l->device ? e->bytes : e->bytes - e->unwritten; }

static void led_update(Ledger* l) {
    size_t cur[2] = {0, 0};
    for (int i = 0; i < l->n; i++)
        if (counts(l, &l->e[i])) cur[l->e[i].where] += held(l, &l->e[i]);
    const size_t now = l->device ? cur[PLAN_BACKEND] : cur[PLAN_HOST] + cur[PLAN_BACKEND];
    // (a tie with training is named training: on a GPU what the step uses was allocated before it)
    const int training = !strcmp(l->phase, "training");
    if (now > l->peak || (now == l->peak && training)) { l->peak = now; l->peak_at = l->phase; }
    if (cur[PLAN_HOST] > l->peak_host) l->peak_host = cur[PLAN_HOST];
    size_t buffers = 0; // the memory report's components (on a GPU those in its memory)
    for (int i = 0; i < l->n; i++)
        if (counts(l, &l->e[i]) && memplan_category(l->e[i].name) != PLAN_CAT_OTHER && (!l->device || l->e[i].where == PLAN_BACKEND))
            buffers += l->e[i].bytes;
    if (buffers > l->peak_buffers || (buffers == l->peak_buffers && training)) { l->peak_buffers = buffers; l->peak_buffers_at = l->phase; }
}

int memplan_category(const char* name) {
    static const struct { const char* name; int cat; } T[] = {
        {"parameters", PLAN_CAT_PARAMS}, {"adapters", PLAN_CAT_PARAMS}, {"adapter masks", PLAN_CAT_PARAMS},
        {"NF4 base", PLAN_CAT_PARAMS}, {"NF4 base (device)", PLAN_CAT_PARAMS}, {"bf16 base", PLAN_CAT_PARAMS},
        {"bf16 lm_head", PLAN_CAT_PARAMS}, {"dequant buffer", PLAN_CAT_PARAMS}, {"trained base tensors", PLAN_CAT_PARAMS}, {"gather buffers", PLAN_CAT_PARAMS},
        {"parameter shard", PLAN_CAT_PARAMS}, {"NF4 shard", PLAN_CAT_PARAMS}, {"NF4 gather buffers", PLAN_CAT_PARAMS},
        {"model gathered on rank 0", PLAN_CAT_PARAMS}, {"NF4 images gathered on rank 0", PLAN_CAT_PARAMS},
        {"gradients", PLAN_CAT_GRADS}, {"gradient shard", PLAN_CAT_GRADS}, {"gradient buckets", PLAN_CAT_GRADS},
        {"optimizer state", PLAN_CAT_OPT},
        {"activations", PLAN_CAT_ACTS}, {"logits", PLAN_CAT_ACTS}, {"backward scratch", PLAN_CAT_ACTS}, {"batch", PLAN_CAT_ACTS},
        {"attention scratch", PLAN_CAT_ACTS}, {"adapter scratch", PLAN_CAT_ACTS},
    };
    for (size_t i = 0; i < sizeof(T) / sizeof(T[0]); i++) if (!strcmp(T[i].name, name)) return T[i].cat;
    return PLAN_CAT_OTHER;
}

// An allocation of bytes (written at once unless lazy: then from the first step on).
static void led_add(Ledger* l, int where, const char* name, size_t bytes, int lazy, const char* fmt, ...) {
    if (l->n == LEDGER_MAX) fatal("this is a bug in llmc", "memplan: more than %d buffers", LEDGER_MAX);
    Entry* e = &l->e[l->n++];
    memset(e, 0, sizeof(*e));
    e->name = name; e->bytes = bytes; e->where = where; e->live = 1; e->touched = !lazy;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->what, sizeof(e->what), fmt, ap);
    va_end(ap);
    led_update(l);
}

static void led_free(Ledger* l, const char* name) {
    for (int i = 0; i < l->n; i++)
        if (l->e[i].live && strcmp(l->e[i].name, name) == 0) { l->e[i].live = 0; return; }
    fatal("this is a bug in llmc", "memplan: no buffer '%s' to free", name);
}

// Drops a live buffer that the next led_add replaces with its grown size (a backend's scratch that
// only grows); nothing when there is none.
static void led_remove(Ledger* l, const char* name) {
    for (int i = 0; i < l->n; i++)
        if (l->e[i].live && strcmp(l->e[i].name, name) == 0) { l->e[i].live = 0; return; }
}

static void led_shrink(Ledger* l, const char* name, size_t by) {
    for (int i = 0; i < l->n; i++)
        if (l->e[i].live && strcmp(l->e[i].name, name) == 0) { l->e[i].bytes -= by < l->e[i].bytes ? by : l->e[i].bytes; return; }
}

// The first training step writes every buffer allocated without being written.
static void led_first_step(Ledger* l) {
    for (int i = 0; i < l->n; i++) l->e[i].touched = 1;
    led_update(l);
}

// ----------------------------------------------------------------------------
// what the run is made of (the shapes behind every buffer)

typedef struct {
    ParamTable pt;
    LoraModel* lm;              // the adapters' layout (no memory), or NULL
    unsigned trainable, skip;   // gpt2_init's masks
    int base16;                 // LoRA's frozen linear weights held in bf16 (CPU, bf16 GEMMs, ZeRO 0-2)
    int wte16;                  // a frozen wte held in bf16 too, for the lm_head (the same, QLoRA too)
    size_t params_n, grads_n;   // gpt2_count
    size_t ntrain;              // the flat trainable space (model_segments / lora_segments)
    size_t opt_n;               // elements of this rank's optimizer range
    size_t state_n;             // ... and of its state file (ZeRO 3 of full training: the ZeRO-1 range)
    size_t nf4_host, nf4_image; // the NF4 base: host arrays (nf4_bytes), packed images (the GPU's copy)
    size_t wmax;                // the largest quantized matrix (the dequant buffer)
    int fsdp, groups, shard_world;
    FsdpSizes fz, fz4;          // ZeRO 3's layout (floatX elements), its NF4 bytes
    size_t *unit_n, *unit_b;    // [L + 1] real elements of each unit, [L] NF4 bytes of each block
    size_t head_padded;         // the head unit padded (the last one)
} Shape;

// ZeRO 3: the units (gpt2_unit_numel_for: the tensors not held apart nor kept whole), their
// layout over the shard group (fsdp_sizes), the NF4 bytes of each block (its four images).
static void shape_units(Shape* h, const PlanSpec* s, const PlanBackend* b) {
    const int L = s->cfg.num_layers;
    const unsigned resident = s->lora ? h->trainable : 0u;
    h->unit_n = (size_t*)callocCheck((size_t)L + 1, sizeof(size_t));
    h->unit_b = (size_t*)callocCheck((size_t)L + 1, sizeof(size_t));
    for (int u = 0; u <= L; u++) h->unit_n[u] = gpt2_unit_numel_for(&h->pt, h->skip, resident, u);
    fsdp_sizes(h->unit_n, L + 1, h->shard_world, s->keep, &h->fz);
    FsdpSizes head;
    fsdp_sizes(h->unit_n + L, 1, h->shard_world, 1, &head);
    h->head_padded = head.max_unit;
    if (!s->qlora) return;
    for (int u = 0; u < L; u++)
        for (int q = 0; q < QLORA_NQ; q++) h->unit_b[u] += nf4_image_bytes_for((int64_t)params_layer_numel(&h->pt, linear_weight_id(q)), 1);
    fsdp_nf4_sizes(h->unit_b, L, h->shard_world, s->keep, &h->fz4);
    (void)b;
}

// The elements of this rank's pieces that hold parameters (fsdp_segments: the optimizer's range at
// ZeRO 3 of full training).
static size_t zero3_real(const Shape* h, const PlanSpec* s) {
    const int L = s->cfg.num_layers, r = s->rank % h->shard_world;
    size_t n = 0;
    for (int u = 0; u <= L; u++) {
        const size_t unit = (size_t)h->shard_world * ZERO_ALIGN_DEFAULT;
        const size_t piece = (h->unit_n[u] + unit - 1) / unit * unit / (size_t)h->shard_world, pb = (size_t)r * piece;
        if (h->unit_n[u] > pb) n += h->unit_n[u] - pb < piece ? h->unit_n[u] - pb : piece;
    }
    return n;
}

static void shape_nf4(Shape* h) {
    const int L = h->pt.cfg.num_layers;
    for (int q = 0; q < QLORA_NQ; q++) {
        const int64_t n = (int64_t)params_layer_numel(&h->pt, linear_weight_id(q));
        h->nf4_host += (size_t)L * nf4_bytes_for(n, 1);
        h->nf4_image += (size_t)L * nf4_image_bytes_for(n, 1);
        if ((size_t)n > h->wmax) h->wmax = (size_t)n;
    }
}

static void shape_build(Shape* h, const PlanSpec* s, const PlanBackend* b) {
    memset(h, 0, sizeof(*h));
    gpt2_config_validate(&s->cfg, "the planned model");
    params_build(&h->pt, &s->cfg);
    if (s->lora) h->lm = lora_layout(&s->cfg, &s->lspec);
    h->trainable = (s->lora ? 0u : GPT2_TRAIN_ALL) | (h->lm ? lora_base_trainable_mask(h->lm) : 0u);
    h->base16 = s->lora && b->bf16_gemm && !b->f16_gemm && b->X == sizeof(float) && s->zero < 3 && !s->qlora && !(h->trainable & QLORA_MASK);
    h->skip = s->qlora || h->base16 ? QLORA_MASK : 0u;
    h->wte16 = b->bf16_gemm && !b->f16_gemm && b->X == sizeof(float) && s->zero < 3 && !(h->trainable & (1u << PT_WTE));
    gpt2_count(&h->pt, h->trainable, h->skip, &h->params_n, &h->grads_n);
    h->ntrain = h->lm ? lora_trainable_numel(h->lm) : h->grads_n;
    if (s->qlora) shape_nf4(h);
    h->fsdp = s->zero == 3;
    h->groups = 1;
    h->shard_world = s->world;
    if (h->fsdp && s->shard_group > 0 && s->shard_group != s->world) {
        if (s->world % s->shard_group)
            fatal("give a --shard-group that divides the number of ranks", "--shard-group %d does not divide the %d ranks", s->shard_group, s->world);
        h->groups = s->world / s->shard_group;
        h->shard_world = s->shard_group;
    }
    if (h->fsdp) shape_units(h, s, b);
    ZeroLayout zl;
    zero_layout_init(&zl, h->ntrain, s->world, ZERO_ALIGN_DEFAULT);
    const int sharded = s->zero >= 1 && s->world > 1;
    size_t begin = sharded ? zero_shard_begin(&zl, s->rank) : 0, end = sharded ? zero_shard_end(&zl, s->rank) : h->ntrain;
    if (end > h->ntrain) end = h->ntrain;
    h->opt_n = h->state_n = end > begin ? end - begin : 0;
    if (h->fsdp && !s->lora) h->opt_n = zero3_real(h, s);
}

static void shape_free(Shape* h) {
    lora_free(h->lm);
    free(h->unit_n);
    free(h->unit_b);
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

// Of the classifier's rows (its block of the CPU, or every row on a GPU), those it writes in a
// micro-batch: the rows with a target (the others are skipped: gpt2_head).
static size_t cls_written(const PlanSpec* s, size_t rows) {
    if (!s->target_rows) return rows;
    const int t = s->target_rows(s->target_ctx, s->B, s->T);
    return t >= 0 && (size_t)t < rows ? (size_t)t : rows;
}

// The logits (rows x Vp), of which the rows without a target are never written.
static void led_logits(Ledger* l, const PlanSpec* s, const GPT2Config* c, const char* name, size_t bytes, size_t rows, size_t X, int lazy) {
    led_add(l, PLAN_BACKEND, name, bytes, lazy, "the classifier's %zu rows x %d", rows, c->padded_vocab_size);
    l->e[l->n - 1].unwritten = (rows - cls_written(s, rows)) * (size_t)c->padded_vocab_size * X;
    led_update(l);
}

// ----------------------------------------------------------------------------
// the replay: the trainer's start-up (llmc/app/trainer.c), call by call

// model_assemble's first steps (llmc/model/model.c): the fp32 weights in host memory (model_load,
// model_init_gpt2), the adapters (lora_create), the NF4 base (qlora_quantize, then
// qlora_release_host gives back the pages of the quantized tensors).
static void plan_load(Ledger* l, const Shape* h, const PlanSpec* s, const PlanBackend* b) {
    const size_t C = (size_t)s->cfg.channels;
    l->phase = "reading the weights";
    static const char* src[] = {"initialized (dN)", "read from an llm.c .bin", "read from safetensors", "read from GGUF"};
    led_add(l, PLAN_HOST, "weights being loaded", h->pt.total * sizeof(float), 0, "fp32, %s", src[s->source]);
    if (s->source == PLAN_SRC_HF) { // a Conv1D weight read before its transpose (model_io.c hf_read_params)
        led_add(l, PLAN_HOST, "transpose buffer", 4 * C * C * sizeof(float), 0, "the largest HF Conv1D weight");
        led_free(l, "transpose buffer");
    }
    if (h->lm && h->lm->n) { // (BitFit: none)
        led_add(l, PLAN_BACKEND, "adapters", 2 * h->lm->total * b->X, 0, "LoRA A, B%s and their gradients: 2 x %zu", h->lm->spec.dora ? ", DoRA's magnitudes" : "", h->lm->total);
        if (h->lm->masks_n) led_add(l, PLAN_BACKEND, "adapter masks", h->lm->masks_n * b->X, 0, "q/k/v split: B's structural zeros");
        if (h->lm->norms_n) led_add(l, PLAN_BACKEND, "DoRA norms", h->lm->norms_n * sizeof(float), 0, "fp32, one per output of each adapted layer");
    }
    if (!s->qlora) return;
    led_add(l, PLAN_HOST, "NF4 base", h->nf4_host, 0, "codes, 8-bit scales, nested scales (double quantization)");
    const size_t page = 4096; // whole pages of the quantized tensors go back (each tensor holds every layer)
    for (int q = 0; q < QLORA_NQ; q++) {
        const size_t bytes = h->pt.t[linear_weight_id(q)].numel * sizeof(float);
        led_shrink(l, "weights being loaded", bytes > page ? bytes / page * page - page : 0);
    }
    led_update(l);
}

// The activations (gpt2_alloc_acts) and what linear_set_alloc and attention_reserve add: written
// by the first step.
static void plan_acts(Ledger* l, const Shape* h, const PlanSpec* s, const PlanBackend* b) {
    const GPT2Config* cfg = &s->cfg;
    const int BT = s->B * s->T;
    size_t a[GPT2_NACTS], sc[GPT2_NSCR];
    const size_t rows = b->device ? (size_t)BT : (size_t)(BT < OPS_CPU_CLS_ROWS ? BT : OPS_CPU_CLS_ROWS);
    gpt2_act_sizes(cfg, s->B, s->T, s->recompute, b->X, rows, a, sc);
    const size_t logits = (a[19] + 255) & ~(size_t)255;
    led_add(l, PLAN_BACKEND, "activations", gpt2_carved_bytes(a, GPT2_NACTS) - logits, 1, "kept for backward, recompute %d", s->recompute);
    led_logits(l, s, cfg, "logits", logits, rows, b->X, 1);
    led_add(l, PLAN_BACKEND, "backward scratch", gpt2_carved_bytes(sc, GPT2_NSCR), 1, "one layer's activation gradients");
    led_add(l, PLAN_BACKEND, "batch", gpt2_batch_bytes(s->B, s->T), 1, "tokens, targets, record starts, positions, the classifier's rows and targets");
    led_add(l, PLAN_HOST, "batch (host)", 3 * (size_t)BT * sizeof(int) + 2 * (size_t)s->accum * BT * sizeof(int), 1,
            "the step's tokens and targets, losses, positions");
    const size_t att = b->device ? ops_cuda_attention_backward_bytes(s->B, s->T, cfg->channels, cfg->num_heads, OPS_CUDA_FA_DS_MAX_BYTES)
                                 : ops_cpu_attention_scratch_bytes(s->B, s->T, cfg->channels);
    led_add(l, PLAN_BACKEND, "attention scratch", att, 1, b->device ? "the backward's row terms and dS tiles" : "K transposed");
    if (s->qlora) led_add(l, PLAN_BACKEND, "dequant buffer", h->wmax * b->X, 1, "the largest NF4 matrix, decoded");
    if (h->lm && h->lm->n) led_add(l, PLAN_BACKEND, "adapter scratch", lora_scratch_numel(h->lm, (size_t)BT) * b->X, 1, "h, dh%s%s", s->lspec.dropout > 0 ? ", dropped input" : "", s->lspec.dora ? ", DoRA's output and its gradient" : "");
}

// The rest of model_assemble: gpt2_init (parameters, gradients), the NF4 base's backend copy
// (qlora_upload) or the bf16 base (model_bind_bf16), the weights' host copy freed, the bf16
// lm_head (model_bind_wte16), the activations.
static void plan_model(Ledger* l, const Shape* h, const PlanSpec* s, const PlanBackend* b) {
    l->phase = "building the model";
    const char* xt = b->X == 2 ? "bf16" : "fp32";
    led_add(l, PLAN_BACKEND, "parameters", h->params_n * b->X, 0, "%s, %zu%s", xt, h->params_n, h->skip ? " (the linear weights held apart)" : "");
    if (h->grads_n) led_add(l, PLAN_BACKEND, "gradients", h->grads_n * b->X, 0, "%s, %zu", xt, h->grads_n);
    if (s->qlora && b->device) led_add(l, PLAN_BACKEND, "NF4 base (device)", h->nf4_image, 0, "packed images");
    if (h->base16) {
        led_add(l, PLAN_BACKEND, "bf16 base", qlora_replaced_numel(&h->pt) * 2, 0, "the frozen linear weights in bf16");
        led_add(l, PLAN_HOST, "bf16 staging", model_bf16_stage(&h->pt) * 2, 0, "one layer's weight");
        led_free(l, "bf16 staging");
    }
    if (b->device && b->X == 2) { // the fp32 -> bf16 uploads' chunk (gpt2_set_params per tensor, lora_set_params)
        size_t most = h->lm ? (h->lm->total > h->lm->masks_n ? h->lm->total : h->lm->masks_n) : 0;
        for (int i = 0; i < NUM_PARAM_TENSORS; i++)
            if (!(h->skip & (1u << i)) && h->pt.t[i].numel > most) most = h->pt.t[i].numel;
        led_add(l, PLAN_BACKEND, "cast scratch", (most < OPS_CUDA_CAST_CHUNK ? most : OPS_CUDA_CAST_CHUNK) * sizeof(float), 0,
                "fp32 staging of the bf16 uploads (llmc/cuda/backend.cu)");
    }
    led_free(l, "weights being loaded");
    if (h->wte16) { // (from the model's fp32 wte, after the host weights are freed)
        led_add(l, PLAN_BACKEND, "bf16 lm_head", params_layer_numel(&h->pt, PT_WTE) * 2, 0, "the frozen wte in bf16");
        led_add(l, PLAN_HOST, "lm_head staging", (size_t)GPT2_WTE16_ROWS * s->cfg.channels * 6, 0, "rows of wte, fp32 and bf16");
        led_free(l, "lm_head staging");
    }
    plan_acts(l, h, s, b);
}

// ZeRO 3 (fsdp_init, llmc/dist/fsdp.c and fsdp_nf4.c): LoRA's trained base tensors kept whole, the
// gather buffers, the parameter shard, the NF4 shard, the gradient shard and buckets; the full
// parameters and gradients freed.
static void plan_zero3(Ledger* l, const Shape* h, const PlanSpec* s, const PlanBackend* b) {
    l->phase = "sharding the model";
    const FsdpSizes* z = &h->fz;
    if (s->lora && h->trainable) {
        size_t n = 0;
        for (int i = 0; i < NUM_PARAM_TENSORS; i++) if (h->trainable & (1u << i)) n += h->pt.t[i].numel;
        led_add(l, PLAN_BACKEND, "trained base tensors", n * b->X, 0, "whole on every rank, outside the units");
    }
    led_add(l, PLAN_BACKEND, "gather buffers", z->slots_n * b->X, 0, s->keep ? "one per unit (--zero3-keep), each holding this rank's piece"
                                                                              : "two blocks, the head (holding this rank's piece of it)");
    led_add(l, PLAN_BACKEND, "parameter shard", z->pshard_n * b->X, 0, "this rank's pieces of the blocks");
    if (s->qlora) {
        const FsdpSizes* q = &h->fz4;
        led_add(l, PLAN_BACKEND, "NF4 shard", q->shard_n, 0, "this rank's pieces of the blocks' images");
        led_add(l, PLAN_HOST, "NF4 staging", q->max_block, 0, "one block's images");
        led_free(l, "NF4 staging");
        led_free(l, "NF4 base");
        if (b->device) led_free(l, "NF4 base (device)");
        led_add(l, PLAN_BACKEND, "NF4 gather buffers", q->slots_n, 1, "two blocks' images");
    }
    if (!s->lora) {
        led_add(l, PLAN_BACKEND, "gradient shard", z->shard_n * b->X, 0, "this rank's pieces");
        led_add(l, PLAN_BACKEND, "gradient buckets", z->buckets_n * b->X, 0, "two blocks', the head's");
        led_free(l, "gradients");
    }
    led_free(l, "parameters");
}

// setup_optimizer: ZeRO 3's sharding, AdamW's state (opt_init; opt_offload moves it to the host),
// ZeRO 2's gradient shard and buckets (gradsync_attach).
static void plan_optimizer(Ledger* l, const Shape* h, const PlanSpec* s, const PlanBackend* b) {
    if (h->fsdp) plan_zero3(l, h, s, b);
    l->phase = "setting up the optimizer";
    const size_t st = opt_state_bytes_for(h->opt_n, b->master);
    led_add(l, PLAN_BACKEND, "optimizer state", st, 0, "fp32 m, v%s of %zu elements", b->master ? ", master" : "", h->opt_n);
    if (s->offload) {
        led_add(l, PLAN_HOST, "optimizer state (host)", st, 0, "pinned: --offload-optimizer");
        led_free(l, "optimizer state");
        led_add(l, PLAN_HOST, "offload staging", 2 * h->opt_n * b->X, 1, "gradients and parameters on their way");
    }
    if (s->zero < 2 || s->world == 1 || (h->fsdp && !s->lora)) return;
    led_add(l, PLAN_BACKEND, "gradient shard", h->opt_n * b->X, 0, "this rank's reduced range");
    if (s->lora) return;
    const size_t n = gradsync_zero2_bucket_numel(&h->pt, 0) + gradsync_zero2_bucket_numel(&h->pt, s->cfg.num_layers);
    led_add(l, PLAN_BACKEND, "gradient buckets", n * b->X, 0, "a layer's, the embedding / head's");
    led_free(l, "gradients");
}

// In fp16 the lm_head's weight is rounded into slot 1 per block, not held in slot 3 (llmc/cpu/classifier.c)
static void f16_slots(const PlanBackend* b, size_t lm_head, size_t slot[4]) {
    if (!b->f16_gemm) return;
    if (lm_head > slot[1]) slot[1] = lm_head;
    slot[3] = 0;
}

// The largest operand each bf16 GEMM scratch slot of the CPU backend grows to (llmc/cpu/matmul.c:
// 0 the activation or output gradient, 1 the weight when it is held in fp32, 2 the input of a
// weight gradient; 3 llmc/cpu/classifier.c's lm_head in bf16 unless the model holds it), in
// elements, over one training step.
static void cpu_gemm_slots(const Shape* h, const PlanSpec* s, const PlanBackend* b, size_t slot[4]) {
    const size_t N = (size_t)s->B * s->T, C = (size_t)s->cfg.channels, Vp = (size_t)s->cfg.padded_vocab_size;
    const size_t rows = cls_written(s, N < OPS_CPU_CLS_ROWS ? N : OPS_CPU_CLS_ROWS);
    slot[0] = N * 4 * C > rows * Vp ? N * 4 * C : rows * Vp; // mlp.c_proj's input / mlp.c_fc's dout; the dlogits
    slot[1] = h->base16 ? 0 : 4 * C * C;
    slot[2] = s->lora ? 0 : (N * 4 * C > rows * C ? N * 4 * C : rows * C);
    for (int i = 0; h->lm && i < h->lm->n; i++) {
        const LoraAdapter* a = &h->lm->ad[i];
        const size_t w = (size_t)a->rank * (size_t)(a->in > a->out ? a->in : a->out);
        if (w > slot[1]) slot[1] = w;
        if (N * (size_t)a->in > slot[2]) slot[2] = N * (size_t)a->in;
    }
    slot[3] = h->wte16 ? 0 : Vp * C;
    f16_slots(b, Vp * C, slot);
}

static size_t slots_bytes(const size_t slot[4]) { return (slot[0] + slot[1] + slot[2] + slot[3]) * sizeof(uint16_t); }

// The fp32 panels of widened 16-bit GEMMs (fp16, or bf16 without oneDNN's matmul): written at
// the first such GEMM, kept (one buffer: a later call replaces the entry)
static void led_widen(Ledger* l, const PlanBackend* b) {
    if (!b->gemm_widen) return;
    led_remove(l, "GEMM widening panels");
    led_add(l, PLAN_BACKEND, "GEMM widening panels", b->gemm_widen, 0, "fp32 copies of 16-bit operands (llmc/cpu/gemm.c)");
}

// Sets a live buffer (a backend's scratch that only grows) to at least bytes, written now.
static void led_grow(Ledger* l, const char* name, size_t bytes) {
    for (int i = 0; i < l->n; i++)
        if (l->e[i].live && strcmp(l->e[i].name, name) == 0) {
            if (bytes > l->e[i].bytes) l->e[i].bytes = bytes;
            l->e[i].touched = 1;
            led_update(l);
            return;
        }
}

// The reference model of --ref-model (llmc/run/preftrain.c preftrain_reference), assembled as
// model_assemble makes a model for inference (its weights read in fp32 first, every parameter, no
// gradients, activations for a forward pass at B x T), which scores every pair once before
// training and is freed. Its forward writes its activations, logits and batch (its backward
// scratch stays unwritten), grows the backend's scratch that only grows (the attention's K^T,
// the CPU's bf16 GEMM operands: its weights are held in fp32; a GPU's fp32 staging of the
// uploads) and the pair buffers of the policy it scores for.
static void plan_ref_model(Ledger* l, const PlanSpec* s, const PlanBackend* b) {
    const GPT2Config* c = &s->ref_cfg;
    ParamTable pt;
    params_build(&pt, c);
    size_t pn = 0, gn = 0;
    gpt2_count(&pt, 0u, 0u, &pn, &gn);
    const size_t C = (size_t)c->channels, N = (size_t)s->B * s->T;
    l->phase = "loading the reference model";
    led_add(l, PLAN_HOST, "reference weights being loaded", pt.total * sizeof(float), 0, "fp32 (--ref-model)");
    if (s->ref_source == PLAN_SRC_HF) {
        led_add(l, PLAN_HOST, "reference transpose buffer", 4 * C * C * sizeof(float), 0, "the largest HF Conv1D weight");
        led_free(l, "reference transpose buffer");
    }
    led_add(l, PLAN_BACKEND, "reference parameters", pn * b->X, 0, "%zu, every tensor", pn);
    size_t most = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) if (pt.t[i].numel > most) most = pt.t[i].numel;
    if (b->device && b->X == 2) led_grow(l, "cast scratch", (most < OPS_CUDA_CAST_CHUNK ? most : OPS_CUDA_CAST_CHUNK) * sizeof(float));
    led_free(l, "reference weights being loaded");
    l->phase = "scoring the pairs with the reference model";
    size_t a[GPT2_NACTS], sc[GPT2_NSCR];
    const size_t rows = b->device ? N : (N < OPS_CPU_CLS_ROWS ? N : OPS_CPU_CLS_ROWS);
    gpt2_act_sizes(c, s->B, s->T, 0, b->X, rows, a, sc);
    const size_t logits = (a[19] + 255) & ~(size_t)255;
    led_add(l, PLAN_BACKEND, "reference activations", gpt2_carved_bytes(a, GPT2_NACTS) - logits, 0, "its forward's");
    led_logits(l, s, c, "reference logits", logits, rows, b->X, 0);
    led_add(l, PLAN_BACKEND, "reference backward scratch", gpt2_carved_bytes(sc, GPT2_NSCR), 1, "allocated, not written on the CPU");
    led_add(l, PLAN_BACKEND, "reference batch", gpt2_batch_bytes(s->B, s->T), 0, "tokens, positions, rows");
    led_add(l, PLAN_HOST, "reference batch (host)", 8 * N * sizeof(int), 0, "its host copies, the pass's tokens and targets");
    if (!b->device) led_grow(l, "attention scratch", ops_cpu_attention_scratch_bytes(s->B, s->T, c->channels));
    led_grow(l, "preference pairs", 0);
    if (!b->device && b->bf16_gemm) {
        const size_t Vp = (size_t)c->padded_vocab_size;
        size_t slot[4] = {N * 4 * C, 4 * C * C, 0, Vp * C};
        f16_slots(b, Vp * C, slot);
        for (int i = 0; i < 4; i++) if (slot[i] > l->slot[i]) l->slot[i] = slot[i];
        led_remove(l, "GEMM operand scratch");
        led_add(l, PLAN_BACKEND, "GEMM operand scratch", slots_bytes(l->slot), 0, "bf16 copies (llmc/cpu/matmul.c, classifier.c)");
        led_widen(l, b);
    }
}

// The stored reference of DPO and IPO: every pair's log-probabilities (2 doubles a pair), held
// to the end of the run: computed (reflogps_compute: with the count that checks each pair was
// scored once, 3 doubles a pair while it scores, the counts freed after) with the policy before
// its first step (train_gpt2) or with --ref-model's model, or read back on resume.
static void plan_reference(Ledger* l, const PlanSpec* s, const PlanBackend* b) {
    if (!s->ref_stored) return;
    if (s->ref_pass && s->ref_model) plan_ref_model(l, s, b);
    const size_t counts = s->ref_pass ? (size_t)s->pairs * sizeof(double) : 0;
    led_add(l, PLAN_HOST, "reference log-probabilities", (size_t)s->pairs * 2 * sizeof(double) + counts, 0,
            "%lld pairs", (long long)s->pairs);
    if (s->ref_pass && s->ref_model) {
        const char* ref[] = {"reference parameters", "reference activations", "reference logits", "reference backward scratch",
                             "reference batch", "reference batch (host)"};
        for (size_t i = 0; i < sizeof(ref) / sizeof(ref[0]); i++) led_free(l, ref[i]);
    }
    led_shrink(l, "reference log-probabilities", counts);
}

// The first step: every buffer written; the backend's scratch and the collectives' buffers grow.
static void plan_first_step(Ledger* l, const Shape* h, const PlanSpec* s, const PlanBackend* b) {
    l->phase = "training";
    if (!b->device && b->bf16_gemm) { // (the slots only grow: a reference model's forward may have grown them first)
        size_t slot[4];
        cpu_gemm_slots(h, s, b, slot);
        for (int i = 0; i < 4; i++) if (l->slot[i] > slot[i]) slot[i] = l->slot[i];
        led_remove(l, "GEMM operand scratch");
        led_add(l, PLAN_BACKEND, "GEMM operand scratch", slots_bytes(slot), 1, "bf16 copies (llmc/cpu/matmul.c, classifier.c)");
        led_widen(l, b);
        if (b->f16_gemm) { // the largest accumulating product: a weight gradient, the lm_head's, a LoRA branch
            const size_t C = (size_t)s->cfg.channels, N = (size_t)s->B * s->T, Vp = (size_t)s->cfg.padded_vocab_size;
            size_t most = 4 * C * C > N * 4 * C ? 4 * C * C : N * 4 * C;
            if (!s->lora && Vp * C > most) most = Vp * C;
            led_add(l, PLAN_BACKEND, "fp16 product scratch", most * sizeof(float), 0, "an accumulating GEMM's product rounded to fp16 (llmc/cpu/gemm.c)");
        }
    }
    if (b->blas && !s->lora) {
        const size_t N = (size_t)s->B * s->T, rows = cls_written(s, N < OPS_CPU_CLS_ROWS ? N : OPS_CPU_CLS_ROWS);
        led_add(l, PLAN_HOST, "OpenBLAS buffers", rows * MEMPLAN_CPU_BLAS_ROW < b->blas ? rows * MEMPLAN_CPU_BLAS_ROW : b->blas, 1,
                "fp32 weight gradients' GEMMs (measured)");
    }
    if (!b->device && s->world > 1) {
        // the blocking collectives' scratch, as far as the largest message writes it: the
        // trainable space's reductions; at ZeRO 3 in shard groups the replicas' all-reduce of
        // the gradient shard (the groups' own scratch stays unwritten)
        const size_t scratch = COMM_MPI_SCRATCH_BYTES, data = h->fsdp ? 0 : h->ntrain * b->X;
        if (data) led_add(l, PLAN_HOST, "MPI staging", data < scratch ? data : scratch, 1, "the blocking collectives' buffer");
        const size_t rep = h->fsdp && h->groups > 1 && !s->lora ? h->fz.shard_n * b->X : 0;
        if (rep) led_add(l, PLAN_HOST, "MPI staging (replicas)", rep < scratch ? rep : scratch, 1, "the replicas' all-reduce");
        if (h->fsdp) led_add(l, PLAN_HOST, "MPI fragments", MEMPLAN_CPU_MPI_FRAGMENTS * (size_t)(s->world - 1), 1,
                             "OpenMPI's shared-memory fragments of the non-blocking gathers (measured)");
        if (h->fsdp && !s->lora) {
            // a non-blocking reduce-scatter's receive buffer (llmc/comm/comm_mpi.c): ranks x piece,
            // its request slot's, of which the other ranks' pieces are written; the slots end up
            // holding the head's (the last reduce-scatter of backward takes the first slot) and two
            // blocks'
            const size_t n = (h->head_padded + 2 * h->fz.max_block) / (size_t)h->shard_world * (size_t)(h->shard_world - 1);
            led_add(l, PLAN_HOST, "MPI reduce-scatter buffers", n * b->X, 1, "the other ranks' pieces of the head and two blocks");
        }
    }
    led_first_step(l);
}

// At ZeRO 3 rank 0 gathers the whole model (fsdp_unshard: the parameters, the NF4 images and
// their host arrays) to save it or sample with it, and frees it after (on 0).
static void plan_gather(Ledger* l, const Shape* h, const PlanSpec* s, const PlanBackend* b, int on) {
    if (!h->fsdp || s->rank != 0) return;
    if (!on) {
        led_free(l, "model gathered on rank 0");
        if (s->qlora) { led_free(l, "NF4 images gathered on rank 0"); led_free(l, "NF4 arrays on rank 0"); }
        return;
    }
    led_add(l, PLAN_BACKEND, "model gathered on rank 0", h->params_n * b->X, 0, "to be saved");
    if (!s->qlora) return;
    size_t full = 0;
    for (int u = 0; u < s->cfg.num_layers; u++)
        full += (h->unit_b[u] + (size_t)h->shard_world * 64 - 1) / ((size_t)h->shard_world * 64) * ((size_t)h->shard_world * 64);
    led_add(l, PLAN_BACKEND, "NF4 images gathered on rank 0", full, 0, "to be saved");
    led_add(l, PLAN_HOST, "NF4 arrays on rank 0", h->nf4_host, 0, "unpacked");
}

// Whether the writers read train_gpt2's model where it is (run_outputs.c outputs_params: the CPU
// backend's fp32 parameters, whole and in place) rather than from a host copy.
static int in_place(const PlanSpec* s, const PlanBackend* b) { return !s->lora && !b->device && b->X == sizeof(float); }

// A writer's buffer beside the model's host copy, held while it writes.
static void led_while(Ledger* l, const char* name, size_t bytes, const char* what) {
    led_add(l, PLAN_HOST, name, bytes, 0, "%s", what);
    led_free(l, name);
}

// The tokenizer files of a model directory (model_save_hf_tokenizer: the vocabulary loaded to
// check it); model.safetensors (model_save_safetensors: the Conv1D weights transposed a chunk at a
// time); model.bin from the host copy itself; GGUF (gguf_save_gpt2: its tokenizer tables).
static void plan_writers(Ledger* l, const Shape* h, const PlanSpec* s, int hf, int gguf) {
    const size_t V = (size_t)s->cfg.vocab_size;
    if (hf && s->vocab) led_while(l, "tokenizer being written", V * MEMPLAN_TOKENIZER_PER_TOKEN, "the vocabulary loaded (measured)");
    size_t most = 0;
    for (int i = 0; hf && i < NUM_PARAM_TENSORS; i++)
        if (h->pt.t[i].hf_transposed && params_layer_numel(&h->pt, (ParamId)i) > most) most = params_layer_numel(&h->pt, (ParamId)i);
    if (most) led_while(l, "safetensors chunk", (most < ST_CHUNK_ELEMS ? most : ST_CHUNK_ELEMS) * sizeof(float), "a transposed piece");
    if (gguf) led_while(l, "GGUF tokenizer", V * MEMPLAN_GGUF_VOCAB_PER_TOKEN, "the tokenizer's tables (measured)");
}

// The adapter's files (peft_save_adapter: its tensors in fp32 on the host; the tokenizer files).
static void plan_adapter(Ledger* l, const Shape* h, const PlanSpec* s) {
    if (s->bitfit) { // (a BitFit checkpoint: peft_save_tensors, the biases in fp32)
        led_add(l, PLAN_HOST, "biases being written", lora_trainable_numel(h->lm) * sizeof(float), 0, "fp32");
        led_free(l, "biases being written");
        return;
    }
    led_add(l, PLAN_HOST, "adapter being written", h->lm->total * sizeof(float), 0, "fp32");
    if (s->vocab) led_while(l, "tokenizer being written", (size_t)s->cfg.vocab_size * MEMPLAN_TOKENIZER_PER_TOKEN, "the vocabulary loaded (measured)");
    led_free(l, "adapter being written");
}

// A checkpoint (trainer_ckpt.c trainer_save_checkpoint, at --save-every and at the end): every rank checks
// and writes its state through one staging buffer; rank 0 writes the model (train_gpt2: from its
// parameters on the CPU, else from a host copy in fp32) or the adapter; at ZeRO 3 (full training) every rank moves each optimizer
// array in turn into the file's layout (fsdp_state_to_flat: the array, its ZeRO-1 range, a unit
// and this rank's piece of it).
static void plan_checkpoint(Ledger* l, const Shape* h, const PlanSpec* s, const PlanBackend* b) {
    l->phase = "saving a checkpoint";
    led_add(l, PLAN_HOST, "checkpoint staging", ckpt_stage_elems(h->opt_n) * sizeof(float), 0, "pieces of the state on their way");
    plan_gather(l, h, s, b, 1);
    if (s->rank == 0 && s->lora) plan_adapter(l, h, s);
    if (s->rank == 0 && !s->lora && !in_place(s, b)) led_while(l, "model being written", h->pt.total * sizeof(float), "fp32");
    plan_gather(l, h, s, b, 0);
    if (h->fsdp && !s->lora) {
        led_add(l, PLAN_HOST, "optimizer state in the file's layout", h->state_n * sizeof(float), 0, "one array");
        const size_t unit = h->fz.max_unit + h->fz.max_unit / (size_t)h->shard_world;
        led_while(l, "optimizer state being moved", (h->opt_n + unit) * sizeof(float), "the array, a unit and its piece");
        led_free(l, "optimizer state in the file's layout");
    }
    led_free(l, "checkpoint staging");
}

// The final outputs (outputs_save, rank 0; --keep-best writes the same into best/): the model in
// fp32 on the host (in place on the CPU) and its writers (model.bin as the last checkpoint's file
// needs neither), or
// the adapter, its GGUF (the adapter's tensors again) and with --merge the merged model: the base
// read again in fp32 from --model (through a transpose buffer from safetensors) and the saved
// adapter read back into it (llmc/run/run_outputs.c outputs_merged: its parameters, gradients and
// masks as train_lora holds them, the reader's host copy and the merge's).
static void plan_merge_input(Ledger* l, const Shape* h, const PlanSpec* s) {
    const size_t C = (size_t)s->cfg.channels, n = h->lm->total + h->lm->masks_n;
    if (s->source == PLAN_SRC_HF) led_while(l, "transpose buffer", 4 * C * C * sizeof(float), "the base read again: its largest Conv1D weight");
    if (s->bitfit) return; // (outputs_bitfit: no adapter to read back, the biases go in from the model)
    led_while(l, "adapter read back", (2 * n + 2 * h->lm->total) * sizeof(float), "parameters, gradients, masks, two host copies");
}

static void plan_outputs(Ledger* l, const Shape* h, const PlanSpec* s, const PlanBackend* b) {
    l->phase = "saving the model";
    plan_gather(l, h, s, b, 1);
    const int model = s->save_hf || s->save_gguf || (s->save_llmc && (!s->link_llmc || s->keep_best));
    if (s->rank == 0 && s->lora && !s->bitfit) {
        plan_adapter(l, h, s);
        if (s->save_gguf && !h->lm->n_extra) led_while(l, "adapter being written", h->lm->total * sizeof(float), "fp32, for GGUF");
    }
    if (s->rank == 0 && (!s->lora || s->merge || s->bitfit) && model) {
        const int copy = s->lora || !in_place(s, b);
        if (copy) led_add(l, PLAN_HOST, "model being written", h->pt.total * sizeof(float), 0, "fp32");
        if (s->lora && !s->qlora) plan_merge_input(l, h, s);
        if (s->lora && s->qlora && !s->bitfit) led_while(l, "adapter being merged", h->lm->total * sizeof(float), "fp32");
        plan_writers(l, h, s, s->save_hf, s->save_gguf);
        if (copy) led_free(l, "model being written");
    }
    plan_gather(l, h, s, b, 0);
}

// The end of the run: the checkpoints and the final outputs of a run that writes, or at ZeRO 3
// rank 0's gather of the model to sample with it (a run that does neither gathers nothing).
static void plan_save(Ledger* l, const Shape* h, const PlanSpec* s, const PlanBackend* b) {
    if (s->save) {
        plan_checkpoint(l, h, s, b);
        plan_outputs(l, h, s, b);
        return;
    }
    if (!s->sample) return;
    l->phase = "sampling";
    plan_gather(l, h, s, b, 1);
    plan_gather(l, h, s, b, 0);
}

// ----------------------------------------------------------------------------
// FLOPs, traffic, time

// Bytes this rank sends per optimizer step (docs/ZERO.md's traffic table; a ring collective sends
// (N - 1) / N of its data per pass): 0-2 the trainable space's all-reduce (a reduce-scatter and an
// all-gather); 3 the blocks gathered in forward and backward of every micro-step, the head once,
// the gradients reduce-scattered every micro-step (a frozen base: the adapters as at 2).
static double plan_comm(const Shape* h, const PlanSpec* s, const PlanBackend* b) {
    if (s->world == 1) return 0.0;
    const double f = (double)(h->shard_world - 1) / (double)h->shard_world, X = (double)b->X;
    double bytes = 2.0 * (double)h->ntrain * X * (double)(s->world - 1) / (double)s->world;
    if (!h->fsdp) return bytes;
    size_t all = 0;
    for (int u = 0; u <= s->cfg.num_layers; u++) all += h->unit_n[u];
    const double head = (double)h->unit_n[s->cfg.num_layers], blocks = (double)all - head;
    const double gathers = s->keep ? (double)all : (double)s->accum * 2.0 * blocks + head;
    if (s->lora) return bytes + (s->keep ? 0.0 : f * X * (double)s->accum * 2.0 * blocks);
    return f * X * (gathers + (double)s->accum * (double)all);
}

static void plan_time(Plan* p, const Shape* h, const PlanSpec* s, const PlanBackend* b) {
    const double per_token = mfu_flops_per_token(params_count_unpadded(&h->pt), s->lora, h->lm ? h->lm->n_trainable : 0,
                                                 s->cfg.num_layers, s->cfg.channels, s->T);
    p->flops = per_token * (double)s->B * (double)s->T * (double)s->accum;
    p->comm_bytes = plan_comm(h, s, b);
    if (b->flops > 0) p->step_s = p->flops / b->flops + (b->link > 0 ? p->comm_bytes / b->link : 0.0);
}

// Activations with their scratch at each recompute level, and what of it is kept per layer.
static void plan_acts_levels(Plan* p, const PlanSpec* s, const PlanBackend* b) {
    const int BT = s->B * s->T;
    const size_t rows = b->device ? (size_t)BT : (size_t)(BT < OPS_CPU_CLS_ROWS ? BT : OPS_CPU_CLS_ROWS);
    for (int r = 0; r < 3; r++) {
        size_t a[GPT2_NACTS], sc[GPT2_NSCR], a1[GPT2_NACTS];
        GPT2Config one = s->cfg;
        gpt2_act_sizes(&s->cfg, s->B, s->T, r, b->X, rows, a, sc);
        one.num_layers = 1; // (with one layer, what every layer costs is what the kept buffers cost once)
        gpt2_act_sizes(&one, s->B, s->T, r, b->X, rows, a1, sc);
        p->acts_level[r] = gpt2_carved_bytes(a, GPT2_NACTS) + gpt2_carved_bytes(sc, GPT2_NSCR);
        const size_t all = gpt2_carved_bytes(a, GPT2_NACTS), once = gpt2_carved_bytes(a1, GPT2_NACTS);
        p->acts_layer[r] = s->cfg.num_layers > 1 ? (all - once) / (size_t)(s->cfg.num_layers - 1) : once;
    }
}

// ----------------------------------------------------------------------------
// the plan

static void plan_checks(const PlanSpec* s) {
    if (s->B < 1 || s->T < 1 || s->accum < 1 || s->world < 1 || s->rank < 0 || s->rank >= s->world)
        fatal("this is a bug in llmc", "memplan: B %d, T %d, accum %d, rank %d of %d", s->B, s->T, s->accum, s->rank, s->world);
    if (s->T > s->cfg.max_seq_len)
        fatal("use a --seq-len no larger than the model's n_positions", "--seq-len %d exceeds the model's maximum sequence length %d",
              s->T, s->cfg.max_seq_len);
    if (s->recompute < 0 || s->recompute > 2 || s->zero < 0 || s->zero > 3)
        fatal("use --recompute 0..2 and --zero 0..3", "recompute %d, zero %d", s->recompute, s->zero);
    if (s->qlora && !s->lora) fatal("this is a bug in llmc", "memplan: QLoRA without LoRA");
}

// An entry's bytes, freed or not (the first of that name); 0 when there is none.
static size_t led_bytes(const Ledger* l, const char* name) {
    for (int i = 0; i < l->n; i++) if (strcmp(l->e[i].name, name) == 0) return l->e[i].bytes;
    return 0;
}

// The model as model_assemble's footprint counts it, before sharding (llmc/model/model.c
// model_footprint): floatX parameters and gradients with the adapters', the NF4 base (its host
// bytes) with the dequant buffer or the bf16 base, the bf16 lm_head, the activations with their
// scratch.
static void plan_record_model(Plan* p, const Ledger* l, const Shape* h) {
    const size_t half = led_bytes(l, "adapters") / 2;
    p->model.params = led_bytes(l, "parameters") + half;
    p->model.grads = led_bytes(l, "gradients") + half;
    p->model.base = h->nf4_host + led_bytes(l, "dequant buffer") + led_bytes(l, "bf16 base") + led_bytes(l, "bf16 lm_head");
    const char* acts[] = {"activations", "logits", "backward scratch", "batch", "attention scratch", "adapter scratch"};
    for (size_t i = 0; i < sizeof(acts) / sizeof(acts[0]); i++) p->model.acts += led_bytes(l, acts[i]);
    p->model.trainable = h->ntrain;
    p->save.staging = led_bytes(l, "checkpoint staging");
    p->save.state_layout = led_bytes(l, "optimizer state in the file's layout");
    p->save.model = led_bytes(l, "biases being written") + led_bytes(l, h->lm ? "adapter being written" : "model being written"); // (BitFit: the first)
    p->ref.params = led_bytes(l, "reference parameters");
    const char* ref[] = {"reference activations", "reference logits", "reference backward scratch", "reference batch"};
    for (size_t i = 0; i < sizeof(ref) / sizeof(ref[0]); i++) p->ref.acts += led_bytes(l, ref[i]);
}

void memplan_make(const PlanSpec* s, const PlanBackend* b, Plan* p) {
    plan_checks(s);
    memset(p, 0, sizeof(*p));
    p->spec = *s;
    p->be = *b;
    Shape h;
    shape_build(&h, s, b);
    Ledger* l = (Ledger*)callocCheck(1, sizeof(Ledger));
    l->device = b->device;
    l->phase = "starting";
    const size_t rt = b->runtime + (s->world > 1 ? b->runtime_mpi * (size_t)s->world : 0);
    if (rt) led_add(l, b->device ? PLAN_BACKEND : PLAN_HOST, "runtime", rt, 0, b->device ? "cuBLASLt, NCCL, the ops' small scratch (a reserve)"
                                                                                  : "libraries, threads%s", s->world > 1 ? ", MPI" : "");
    plan_load(l, &h, s, b);
    plan_model(l, &h, s, b);
    if (s->pref) led_add(l, PLAN_BACKEND, "preference pairs", pref_work_bytes(s->B, s->T), 1, "a micro-batch's pair ranges, sums, row weights (llmc/run/preftrain.h)");
    plan_optimizer(l, &h, s, b);
    plan_reference(l, s, b);
    plan_first_step(l, &h, s, b);
    p->peak_first_step = l->peak;
    const int steady = l->n;
    plan_save(l, &h, s, b);
    for (int i = 0; i < steady && p->n < MEMPLAN_MAX_ITEMS; i++) {
        const Entry* e = &l->e[i];
        if (!e->live) continue;
        PlanItem* it = &p->item[p->n++];
        it->name = e->name; it->bytes = e->bytes; it->where = e->where;
        memcpy(it->what, e->what, sizeof(it->what));
        p->steady[e->where] += e->bytes;
    }
    plan_record_model(p, l, &h);
    p->peak = l->peak; p->peak_host = l->peak_host; p->peak_at = l->peak_at;
    p->peak_buffers = l->peak_buffers;
    p->peak_buffers_at = l->peak_buffers_at ? l->peak_buffers_at : "starting";
    plan_acts_levels(p, s, b);
    plan_time(p, &h, s, b);
    free(l);
    shape_free(&h);
}

const PlanItem* memplan_item(const Plan* p, const char* name) {
    for (int i = 0; i < p->n; i++) if (strcmp(p->item[i].name, name) == 0) return &p->item[i];
    return NULL;
}

void memplan_print(const Plan* p, FILE* out) {
    const PlanSpec* s = &p->spec;
    const PlanBackend* b = &p->be;
    const char* mode = !s->lora ? "every parameter trained" : s->qlora ? "QLoRA" : "LoRA";
    fprintf(out, "plan: rank %d of %d | %s (%s%s) | L=%d C=%d NH=%d vocab=%d | %s | ZeRO %d%s | B=%d T=%d x %d micro-steps | recompute %d\n",
            s->rank, s->world, b->name, b->X == 2 ? "bf16" : "fp32", !b->device && b->bf16_gemm ? ", bf16 GEMMs" : "", s->cfg.num_layers,
            s->cfg.channels, s->cfg.num_heads, s->cfg.vocab_size, mode, s->zero, s->keep && s->zero == 3 ? " keep" : "", s->B, s->T,
            s->accum, s->recompute);
    for (int i = 0; i < p->n; i++)
        fprintf(out, "  %-28s %10.1f MiB  %-7s %s\n", p->item[i].name, mib(p->item[i].bytes),
                p->item[i].where == PLAN_HOST ? "host" : b->device ? "device" : "host", p->item[i].what);
    fprintf(out, "  training: %.1f MiB%s", mib(p->steady[0] + p->steady[1]), b->device ? "" : " (resident)");
    if (b->device) fprintf(out, " = device %.1f MiB + host %.1f MiB", mib(p->steady[1]), mib(p->steady[0]));
    fprintf(out, " | peak %.1f MiB %s while %s", mib(p->peak), b->device ? "of device memory" : "resident", p->peak_at);
    if (b->device) fprintf(out, ", host memory at most %.1f MiB", mib(p->peak_host));
    fprintf(out, " | the run's buffers at most %.1f MiB (%s)", mib(p->peak_buffers), p->peak_buffers_at);
    fprintf(out, "\n  activations with their scratch by recompute level: 0: %.1f MiB (%.2f a layer), 1: %.1f (%.2f), 2: %.1f (%.2f)\n",
            mib(p->acts_level[0]), mib(p->acts_layer[0]), mib(p->acts_level[1]), mib(p->acts_layer[1]), mib(p->acts_level[2]), mib(p->acts_layer[2]));
    fprintf(out, "  step: %.3g TFLOP on this rank, %.1f MiB sent to the other ranks", p->flops / 1e12, p->comm_bytes / 1048576.0);
    if (p->step_s > 0) fprintf(out, " | predicted %.3f s a step at %.3g TFLOP/s", p->step_s, b->flops / 1e12);
    fprintf(out, "\n");
}

// ----------------------------------------------------------------------------
// the disk

// A model.safetensors (model_save_safetensors: every tensor in fp32, wte's real rows; about 104
// bytes of header a tensor) and a GGUF file of type (gguf_save_gpt2: the weights in it, Q8_0 rows
// that do not divide into blocks in F16, wpe and the 1-D tensors in F32, each aligned; the
// tokenizer's strings about as large as its files).
static size_t disk_hf(const ParamTable* pt) {
    const int L = pt->cfg.num_layers;
    size_t tensors = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) tensors += pt->t[i].per_layer ? (size_t)L : 1;
    return 8 + 48 + 104 * tensors + params_count_unpadded(pt) * sizeof(float);
}
static size_t disk_gguf_tensor(uint32_t type, uint64_t rows, uint64_t cols) {
    if (type == GGML_TYPE_Q8_0 && cols % GGUF_QK8_0) type = GGML_TYPE_F16;
    return (size_t)(gguf_row_bytes(type, cols) * rows + 31) / 32 * 32 + 96;
}
static size_t disk_gguf(const ParamTable* pt, int type, size_t vocab_bytes) {
    size_t n = 4096 + vocab_bytes;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        const ParamInfo* t = &pt->t[i];
        const uint64_t rows = i == PT_WTE ? (uint64_t)pt->cfg.vocab_size : (uint64_t)t->rows, cols = (uint64_t)t->cols;
        const size_t one = t->ndim == 1 ? (t->rows * t->cols * sizeof(float) + 31) / 32 * 32 + 96
                                        : disk_gguf_tensor(i == PT_WPE ? GGML_TYPE_F32 : (uint32_t)type, rows, cols);
        n += (t->per_layer ? (size_t)pt->cfg.num_layers : 1) * one;
    }
    return n;
}

void memplan_disk(const Plan* p, PlanDisk* d) {
    const PlanSpec* s = &p->spec;
    memset(d, 0, sizeof(*d));
    if (!s->save) return;
    Shape h;
    shape_build(&h, s, &p->be);
    const size_t arrays = p->be.master ? 3 : 2, headers = 1024 * (size_t)s->world;
    const int sharded = s->zero >= 1 && s->world > 1;
    d->ckpt_state = headers + h.ntrain * sizeof(float) * arrays * (sharded ? 1 : (size_t)s->world);
    const size_t model_bin = 1024 + h.pt.total * sizeof(float);
    const size_t model_hf = disk_hf(&h.pt) + s->vocab_bytes;
    const size_t model_gguf = s->save_gguf ? disk_gguf(&h.pt, s->save_gguf - 1, s->vocab_bytes) : 0;
    if (h.lm) {
        const size_t adapter = 8 + 48 + 2 * 104 * (size_t)h.lm->n + h.lm->total * sizeof(float) + s->vocab_bytes;
        d->ckpt_model = d->adapter = adapter;
        for (int i = 0; s->save_gguf && !h.lm->n_extra && i < h.lm->n; i++) { // (gguf_save_lora: A r x in, B out x r)
            const LoraAdapter* a = &h.lm->ad[i];
            d->adapter_gguf += disk_gguf_tensor((uint32_t)s->save_gguf - 1, (uint64_t)a->rank, (uint64_t)a->in) +
                               disk_gguf_tensor((uint32_t)s->save_gguf - 1, (uint64_t)a->out, (uint64_t)a->rank);
        }
        if (d->adapter_gguf) d->adapter_gguf += 4096;
        if (s->bitfit) { // (no adapter: the checkpoints hold the biases, the output is the model)
            d->adapter = 0;
            d->ckpt_model = 8 + 48 + 104 * (size_t)h.lm->n_extra + lora_trainable_numel(h.lm) * sizeof(float);
        }
        if (s->merge || s->bitfit) { d->hf = s->save_hf ? model_hf : 0; d->llmc = s->save_llmc ? model_bin : 0; d->gguf = model_gguf; }
        if (s->source != PLAN_SRC_HF && !s->bitfit) d->base = disk_hf(&h.pt) + s->vocab_bytes;
    } else {
        d->ckpt_model = model_bin;
        d->hf = s->save_hf ? model_hf : 0;
        d->llmc = s->save_llmc && !s->link_llmc ? model_bin : 0;
        d->gguf = model_gguf;
    }
    shape_free(&h);
}

// ----------------------------------------------------------------------------
// what fits

int memplan_fits(const Plan* p, size_t limit) {
    return (!limit || p->peak <= limit) && (!p->spec.budget || p->peak_buffers <= p->spec.budget);
}

static int plan_fits(const PlanSpec* s, const PlanBackend* b, size_t budget, Plan* p) {
    memplan_make(s, b, p);
    return memplan_fits(p, budget);
}

int memplan_max_batch(const PlanSpec* s, const PlanBackend* b, size_t limit, double margin, int max_B, Plan* p) {
    const size_t budget = (size_t)((double)limit * (1.0 - margin));
    if (limit && !budget) return 0;
    PlanSpec t = *s;
    Plan* tmp = (Plan*)mallocCheck(sizeof(Plan));
    t.B = 1;
    int lo = 0, hi = 0;
    while (t.B <= max_B && plan_fits(&t, b, budget, tmp)) { lo = t.B; t.B *= 2; } // (the peak grows with B)
    hi = t.B <= max_B ? t.B : max_B + 1;
    while (hi - lo > 1) {
        t.B = lo + (hi - lo) / 2;
        if (plan_fits(&t, b, budget, tmp)) lo = t.B; else hi = t.B;
    }
    if (lo > 0) { t.B = lo; memplan_make(&t, b, p); }
    free(tmp);
    return lo;
}

int memplan_options(const PlanSpec* s, const PlanBackend* b, size_t limit, double margin, PlanOption* out, int cap) {
    int n = 0;
    const int modes = s->lora ? 2 : 1, zmax = s->world > 1 ? 3 : 0;
    Plan* p = (Plan*)mallocCheck(sizeof(Plan));
    for (int m = 0; m < modes; m++)
        for (int z = 0; z <= zmax; z++)
            for (int r = 0; r <= 2 && n < cap; r++) {
                PlanSpec t = *s;
                t.qlora = s->lora && m == 1;
                t.zero = z; t.recompute = r;
                const int B = memplan_max_batch(&t, b, limit, margin, 4096, p);
                PlanOption o = { t.lora, t.qlora, z, r, B, B ? p->peak : 0 };
                out[n++] = o;
            }
    free(p);
    return n;
}

// The first number after key in a /proc-style file ("MemAvailable:" in kB), or the whole file as
// a number (a cgroup limit; "max" is no limit): 0 when there is none.
static size_t read_bytes(const char* path, const char* key, size_t unit) {
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    size_t v = 0;
    while (fgets(line, sizeof(line), f)) {
        const char* at = key ? strstr(line, key) : line;
        if (!at) continue;
        at += key ? strlen(key) : 0;
        char* end;
        unsigned long long x = strtoull(at, &end, 10);
        if (end != at) v = (size_t)x * unit;
        break;
    }
    fclose(f);
    return v;
}

size_t memplan_memory_available(const PlanBackend* b, const char** what) {
    size_t avail = 0, total = 0;
    if (b->device) {
        *what = "the GPU's free memory";
        return device_memory(&avail, &total) ? avail : 0;
    }
    const size_t mem = read_bytes("/proc/meminfo", "MemAvailable:", 1024);
    size_t cg = read_bytes("/sys/fs/cgroup/memory.max", NULL, 1);           // cgroup v2
    if (!cg) cg = read_bytes("/sys/fs/cgroup/memory/memory.limit_in_bytes", NULL, 1); // v1
    if (cg && cg < ((size_t)1 << 60) && (!mem || cg < mem)) { *what = "the cgroup's memory limit"; return cg; }
    *what = mem ? "MemAvailable" : "unknown";
    return mem;
}
