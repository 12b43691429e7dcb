// The memory and time plan of a training run (llmc/plan/memplan.h), from its flags, without
// loading or allocating anything; with --fit, what fits a memory limit. Used by
// dev/bench_plan.sh (plan vs measured peak RSS) and for docs/MEMORY.md's table. Not a test.
//   make bench-cpu && build/cpu/dev/bench_plan --model d12 --batch-size 4 --seq-len 1024
//   build/cpu/dev/bench_plan --model d48 --lora --qlora --backend cuda --gpu-gib 24 --fit
// Flags as the trainers' (--model dN | HF directory or config.json, --batch-size, --seq-len,
// --total-batch-tokens, --recompute, --zero, --zero3-keep, --shard-group, --offload-optimizer,
// --lora-rank, --lora-alpha, --lora-targets, --lora-layers, --lora-dropout, --lora-bias,
// --train-ln-f, --qlora, --dtype fp32|bf16) and: --lora (train_lora; implied by --qlora and the
// --lora-* flags), --world N, --rank R, --backend cpu|cuda, --gpu-gib G (the GPU's memory),
// --source init|bin|hf (where the weights come from), --flops F (measured model FLOP/s: a
// predicted step time), --fit [--limit-gib G] [--margin M], --peak (print the peak's bytes only),
// --max-batch (print the largest micro-batch within the limit less the margin, and its peak),
// --save (the run writes its model and checkpoints: not --out none).
#include "plan/memplan.h"
#include "model/model_io.h"
#include "base/check.h"
#include "base/fileio.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PlanSpec s;
    PlanBackend b;
    const char *backend, *dtype, *targets, *layers;
    double gpu_gib, limit_gib, margin, flops;
    long long total_tokens;
    int fit, peak_only, max_batch;
} Args;

static int flag(const char* a, const char* name) { return strcmp(a, name) == 0; }

static void parse(Args* a, int argc, char** argv) {
    const char* model = "d12";
    for (int i = 1; i < argc; i++) { // the model first: the spec's defaults follow from it
        if (flag(argv[i], "--model") && i + 1 < argc) model = argv[i + 1];
    }
    GPT2Config cfg;
    PlanSource src;
    memplan_model_config(model, &cfg, &src);
    memplan_spec_init(&a->s, &cfg);
    a->s.source = src;
    a->s.lspec.rank = 8; a->s.lspec.alpha = 16.0f;
    a->backend = "cpu"; a->dtype = "bf16"; a->targets = "c_attn"; a->layers = "all";
    a->gpu_gib = 80.0; a->margin = 0.05;
    PlanSpec* s = &a->s;
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : "";
        int used = 1;
        if (flag(f, "--model")) ;
        else if (flag(f, "--batch-size")) s->B = atoi(v);
        else if (flag(f, "--seq-len")) s->T = atoi(v);
        else if (flag(f, "--total-batch-tokens")) a->total_tokens = atoll(v);
        else if (flag(f, "--recompute")) s->recompute = atoi(v);
        else if (flag(f, "--zero")) s->zero = atoi(v);
        else if (flag(f, "--world")) s->world = atoi(v);
        else if (flag(f, "--rank")) s->rank = atoi(v);
        else if (flag(f, "--shard-group")) s->shard_group = atoi(v);
        else if (flag(f, "--lora-rank")) { s->lspec.rank = atoi(v); s->lora = 1; }
        else if (flag(f, "--lora-alpha")) { s->lspec.alpha = (float)atof(v); s->lora = 1; }
        else if (flag(f, "--lora-dropout")) { s->lspec.dropout = (float)atof(v); s->lora = 1; }
        else if (flag(f, "--lora-targets")) { a->targets = v; s->lora = 1; }
        else if (flag(f, "--lora-layers")) { a->layers = v; s->lora = 1; }
        else if (flag(f, "--lora-bias")) { s->lspec.bias = flag(v, "all") ? LORA_BIAS_ALL : flag(v, "lora_only") ? LORA_BIAS_LORA_ONLY : LORA_BIAS_NONE; s->lora = 1; }
        else if (flag(f, "--dtype")) a->dtype = v;
        else if (flag(f, "--backend")) a->backend = v;
        else if (flag(f, "--gpu-gib")) a->gpu_gib = atof(v);
        else if (flag(f, "--limit-gib")) a->limit_gib = atof(v);
        else if (flag(f, "--margin")) a->margin = atof(v);
        else if (flag(f, "--flops")) a->flops = atof(v);
        else if (flag(f, "--source")) s->source = flag(v, "init") ? PLAN_SRC_INIT : flag(v, "bin") ? PLAN_SRC_BIN : PLAN_SRC_HF;
        else {
            used = 0;
            if (flag(f, "--zero3-keep")) s->keep = 1;
            else if (flag(f, "--offload-optimizer")) s->offload = 1;
            else if (flag(f, "--train-ln-f")) { s->lspec.train_ln_f = 1; s->lora = 1; }
            else if (flag(f, "--qlora")) { s->qlora = 1; s->lora = 1; }
            else if (flag(f, "--lora")) s->lora = 1;
            else if (flag(f, "--fit")) a->fit = 1;
            else if (flag(f, "--peak")) a->peak_only = 1;
            else if (flag(f, "--max-batch")) a->max_batch = 1;
            else if (flag(f, "--save")) s->save = 1;
            else fatal("see the comment at the top of dev/bench_plan.c", "unknown flag '%s'", f);
        }
        i += used;
    }
}

static void finish(Args* a) {
    PlanSpec* s = &a->s;
    char err[256];
    if (s->lora) {
        if (lora_parse_targets(a->targets, &s->lspec.targets, err, sizeof(err))) fatal("--lora-targets", "%s", err);
        if (lora_parse_layers(a->layers, s->cfg.num_layers, &s->lspec, err, sizeof(err))) fatal("--lora-layers", "%s", err);
    }
    if (a->total_tokens > 0) {
        const long long per = (long long)s->B * s->T * s->world;
        if (a->total_tokens % per) fatal("--total-batch-tokens", "%lld is not a multiple of B x T x ranks = %lld", a->total_tokens, per);
        s->accum = (int)(a->total_tokens / per);
    }
    if (flag(a->backend, "cuda")) memplan_backend_cuda(&a->b, (size_t)(a->gpu_gib * 1073741824.0));
    else memplan_backend_cpu(&a->b, flag(a->dtype, "bf16"));
    a->b.flops = a->flops;
}

static size_t limit_of(Args* a, const char** what) {
    *what = "--limit-gib";
    size_t limit = (size_t)(a->limit_gib * 1073741824.0);
    if (!limit) limit = a->b.device ? (size_t)(a->gpu_gib * 1073741824.0) : memplan_memory_available(&a->b, what);
    if (!limit) fatal("give --limit-gib", "the memory available here is unknown");
    if (a->b.device && !a->limit_gib) *what = "--gpu-gib";
    return limit;
}

static void fit(Args* a) {
    const char* what;
    const size_t limit = limit_of(a, &what);
    PlanOption o[32];
    const int n = memplan_options(&a->s, &a->b, limit, a->margin, o, 32);
    printf("fits in %.1f GiB (%s) less %.0f%%: largest micro-batch per setting\n", (double)limit / 1073741824.0, what, 100.0 * a->margin);
    for (int i = 0; i < n; i++)
        printf("  %-6s ZeRO %d recompute %d: %s%d (peak %.1f GiB)\n", !o[i].lora ? "full" : o[i].qlora ? "QLoRA" : "LoRA", o[i].zero,
               o[i].recompute, o[i].B ? "B = " : "does not fit ", o[i].B, (double)o[i].peak / 1073741824.0);
}

int main(int argc, char** argv) {
    Args* a = (Args*)calloc(1, sizeof(Args));
    Plan* p = (Plan*)calloc(1, sizeof(Plan));
    if (!a || !p) { fprintf(stderr, "out of memory\n"); return 1; }
    parse(a, argc, argv);
    finish(a);
    if (a->max_batch) {
        const char* what;
        const int B = memplan_max_batch(&a->s, &a->b, limit_of(a, &what), a->margin, 4096, p);
        printf("%d %zu\n", B, B ? p->peak : 0);
        free(p); free(a);
        return 0;
    }
    memplan_make(&a->s, &a->b, p);
    if (a->peak_only) printf("%zu\n", p->peak);
    else memplan_print(p, stdout);
    if (a->fit) fit(a);
    free(p); free(a);
    return 0;
}
