// The memory plan (llmc/plan/memplan.h) against what the code allocates. Each case builds a model
// the way the trainers do (model_assemble, gradsync_init / gradsync_shard_model, opt_init,
// opt_offload, gradsync_attach), runs one training step and checks, byte for byte, every
// component of the plan made beforehand for the same settings against the objects' own counts
// (gpt2_param_bytes, gpt2_acts_held, opt_state_bytes, fsdp_*_bytes, gradsync_grad_bytes, the NF4
// base, the bf16 base and lm_head, the adapters, the bf16 GEMM scratch of the CPU backend), the footprint
// model_assemble computes before allocating, and the heap's growth over the whole build and step
// (glibc's mallinfo2) against the plan's total without what it counts outside the heap; what a
// checkpoint holds beside training (the staging buffer of the optimizer's range, ZeRO 3's array in
// the state file's layout, rank 0's fp32 copy of the model or the adapter); and --ref-model's
// model (built as preftrain_reference builds it, run forward) against the plan's reference items,
// the CPU's bf16 GEMM scratch after its forward and a step against the plan's.
//   test_memplan               every case on one rank at ZeRO 0 and 3, each in a child process
//                              (the backend's scratch buffers only grow within a process)
//   test_memplan --case K --zero Z   case K under mpirun (test/test_memplan.sh: 2 and 4 ranks,
//                              ZeRO 1-3); each rank checks its own plan
// Also: memplan_max_batch's choice fits and the next size does not (the search), the options
// list, and refusals of what the run would refuse.
#include <malloc.h>
#include <string.h>
#include "plan/memplan.h"
#include "run/checkpoint.h"
#include "run/run_outputs.h"
#include "dist/zero.h"
#include "run/runconfig.h"
#include "model/model.h"
#include "model/params.h"
#include "model/model_io.h"
#include "model/optimizer.h"
#include "dist/gradsync.h"
#include "comm/comm.h"
#include "ops/ops.h"
#include "cpu/ops_cpu.h"
#include "base/check.h"
#include "test.h"
#include "test_child.h"

typedef struct {
    const char* name;
    int L, C, NH, V, maxT;
    int lora, qlora, bias, ln_f;   // lora: 1 LoRA (r = 4), 2 BitFit (r = 0: no adapter, the biases of bias)
    float dropout;
    const char *targets, *layers;
    int B, T, recompute, keep, offload, bf16;
    int dora;                      // the adapters are DoRA
} Case;

static const Case CASES[] = {
    {"full fp32", 3, 64, 4, 1000, 64, 0, 0, 0, 0, 0.0f, NULL, NULL, 2, 32, 0, 0, 0, 0, 0},
    {"full bf16 GEMMs, recompute 2, keep", 3, 64, 4, 1000, 64, 0, 0, 0, 0, 0.0f, NULL, NULL, 3, 16, 2, 1, 0, 1, 0},
    {"full offload, recompute 1", 2, 128, 2, 3000, 32, 0, 0, 0, 0, 0.0f, NULL, NULL, 1, 32, 1, 0, 1, 0, 0},
    {"LoRA all-linear, dropout, biases, ln_f, bf16 base", 3, 64, 4, 1000, 64, 1, 0, 1, 1, 0.1f, "all-linear", NULL, 2, 32, 0, 0, 0, 1, 0},
    {"LoRA c_attn on layers 0,2 fp32", 3, 64, 4, 1000, 64, 1, 0, 0, 0, 0.0f, "c_attn", "0,2", 2, 32, 1, 0, 0, 0, 0},
    {"QLoRA q,v + mlp.c_fc, recompute 1", 3, 128, 4, 700, 64, 1, 1, 0, 0, 0.0f, "q,v,mlp.c_fc", NULL, 2, 32, 1, 0, 0, 0, 0},
    {"QLoRA all-linear bf16 GEMMs, lora_only biases, keep", 2, 128, 2, 700, 64, 1, 1, 2, 0, 0.0f, "all-linear", NULL, 1, 64, 0, 1, 0, 1, 0},
    {"BitFit (rank 0, every bias), ln_f, bf16 base", 3, 64, 4, 1000, 64, 2, 0, 1, 1, 0.0f, "c_attn", NULL, 2, 32, 0, 0, 0, 1, 0},
    {"DoRA all-linear, dropout, fp32", 3, 64, 4, 1000, 64, 1, 0, 0, 0, 0.1f, "all-linear", NULL, 2, 32, 0, 0, 0, 0, 1},
    {"QDoRA c_attn + mlp.c_fc, bf16 GEMMs, recompute 1", 3, 128, 4, 700, 64, 1, 1, 0, 0, 0.0f, "c_attn,mlp.c_fc", NULL, 2, 32, 1, 0, 0, 1, 1},
};
#define NCASES ((int)(sizeof(CASES) / sizeof(CASES[0])))

static GPT2Config case_config(const Case* k) {
    GPT2Config c;
    c.num_layers = k->L; c.channels = k->C; c.num_heads = k->NH; c.vocab_size = k->V; c.max_seq_len = k->maxT;
    c.padded_vocab_size = gpt2_pad_vocab(k->V);
    return c;
}

static void case_lora(const Case* k, const GPT2Config* cfg, LoraSpec* spec) {
    char err[256];
    memset(spec, 0, sizeof(*spec));
    spec->rank = k->lora == 2 ? 0 : 4; spec->alpha = 8.0f; spec->dropout = k->dropout; spec->bias = k->bias; spec->train_ln_f = k->ln_f; spec->dora = k->dora;
    if (lora_parse_targets(k->targets, &spec->targets, err, sizeof(err)) || lora_parse_layers(k->layers ? k->layers : "all", cfg->num_layers, spec, err, sizeof(err)))
        fatal("test case", "%s", err);
}

static int g_group; // --shard-group of the mpirun cases
static void case_spec(const Case* k, int zero, int world, int rank, PlanSpec* s) {
    const GPT2Config cfg = case_config(k);
    memplan_spec_init(s, &cfg);
    s->lora = k->lora != 0; s->qlora = k->qlora; s->bitfit = k->lora == 2;
    if (k->lora) case_lora(k, &cfg, &s->lspec);
    s->B = k->B; s->T = k->T; s->recompute = k->recompute; s->keep = k->keep; s->offload = k->offload;
    s->zero = zero; s->world = world; s->rank = rank; s->shard_group = zero == 3 ? g_group : 0;
    s->source = PLAN_SRC_INIT;
    s->save = 1; // (checkpoints only: no final model formats, no vocabulary)
}

static size_t heap_now(void) {
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}
// mallinfo2 sees glibc's heap only (not a sanitizer's allocator)
static int heap_visible(void) {
    const size_t a = heap_now();
    volatile char* p = (volatile char*)malloc((size_t)8 << 20);
    p[0] = 1;
    const size_t b = heap_now();
    free((void*)p);
    return b >= a + ((size_t)8 << 20);
}

static size_t item(const Plan* p, const char* name) { const PlanItem* it = memplan_item(p, name); return it ? it->bytes : 0; }

typedef struct {
    Model m;
    Comm* comm;
    GradSync gs;
    Optimizer opt;
    ModelFootprint fp;
    int got_fp;
} Built;

static void capture_fp(void* ctx, const ModelFootprint* fp) { Built* b = (Built*)ctx; b->fp = *fp; b->got_fp = 1; }

// As the trainer's build_model and setup_optimizer (llmc/app/trainer.c).
static void build(Built* b, const Case* k, const PlanSpec* s, Comm* comm) {
    memset(b, 0, sizeof(*b));
    b->comm = comm;
    ParamTable pt;
    params_build(&pt, &s->cfg);
    float* host = (float*)mallocCheck(pt.total * sizeof(float));
    model_init_gpt2(&pt, host, 1);
    LoraSource src;
    memset(&src, 0, sizeof(src));
    ModelSpec ms;
    memset(&ms, 0, sizeof(ms));
    ms.cfg = &s->cfg; ms.host = host; ms.seed = 1; ms.qlora = k->qlora;
    ms.base_bf16 = ops_gemm_dtype() == OPS_BF16 && s->zero < 3;
    ms.trainable = k->lora ? 0u : GPT2_TRAIN_ALL;
    ms.recompute = k->recompute; ms.B = k->B; ms.T = k->T; ms.backward = 1;
    ms.before_alloc = capture_fp; ms.before_alloc_ctx = b;
    if (k->lora) { src.spec = s->lspec; src.layers = k->layers; src.seed = 1; ms.lora_src = &src; }
    model_assemble(&b->m, &ms);
    free(host); // (the trainer's own weights are freed inside model_assemble)
    TrainSeg* segs = (TrainSeg*)mallocCheck(sizeof(TrainSeg) * (size_t)model_max_segments(&b->m));
    int nseg = model_segments(&b->m, segs);
    size_t ntrain = 0;
    for (int i = 0; i < nseg; i++) ntrain += segs[i].n;
    gradsync_init(&b->gs, comm, s->zero, ntrain);
    gradsync_shard_model(&b->gs, &b->m.gpt, b->m.nf4, !k->lora, k->keep, s->shard_group);
    if (b->gs.fsdp_on && k->lora) { model_lora_extras_rebind(&b->m); nseg = model_segments(&b->m, segs); }
    if (b->gs.fsdp_on && !k->lora) {
        free(segs);
        segs = (TrainSeg*)mallocCheck(sizeof(TrainSeg) * (size_t)fsdp_max_segments(&b->gs.fsdp));
        nseg = fsdp_segments(&b->gs.fsdp, segs);
        opt_init(&b->opt, segs, nseg, 0, (size_t)-1);
    } else opt_init(&b->opt, segs, nseg, gradsync_range_begin(&b->gs), gradsync_range_end(&b->gs));
    if (k->offload) opt_offload(&b->opt);
    gradsync_attach(&b->gs, &b->opt, k->lora ? NULL : &b->m.gpt);
    free(segs);
}

// One training step, as the trainer's train_step.
static void step(Built* b, const Case* k) {
    const int n = k->B * k->T, V = case_config(k).vocab_size;
    int* in = (int*)mallocCheck((size_t)n * sizeof(int));
    int* tg = (int*)mallocCheck((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) { in[i] = (i * 7 + b->comm->rank) % V; tg[i] = (i * 13 + 1) % V; }
    gpt2_zero_grads(&b->m.gpt);
    gradsync_step_begin(&b->gs);
    linear_set_training(b->m.gpt.lin, 1, 0);
    gpt2_forward_acc(&b->m.gpt, in, tg, NULL, k->B, k->T, 1.0f / (float)n, gradsync_loss_acc(&b->gs));
    gpt2_backward(&b->m.gpt, gradsync_sink(&b->gs));
    gradsync_micro_done(&b->gs);
    gradsync_reduce(&b->gs);
    double loss, norm;
    gradsync_step_stats(&b->gs, &loss, &norm);
    opt_step(&b->opt, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 7);
    gradsync_share_params(&b->gs);
    TEST_CHECK(isfinite(loss) && isfinite(norm), "step: loss %g norm %g", loss, norm);
    free(in); free(tg);
}

static void unbuild(Built* b) {
    gradsync_free(&b->gs);
    opt_free(&b->opt);
    model_free(&b->m);
}

#define EQ(what, plan, code) TEST_CHECK((size_t)(plan) == (size_t)(code), "%s: %s: plan %zu bytes, the code %zu", tag, what, (size_t)(plan), (size_t)(code))

// The plan's components against the built objects' counts.
static void check_components(const char* tag, const Plan* p, const Built* b, const Case* k) {
    const GPT2* g = &b->m.gpt;
    const size_t X = sizeof(floatX);
    const size_t acts = item(p, "activations") + item(p, "logits") + item(p, "backward scratch") + item(p, "batch") +
                        item(p, "attention scratch") + item(p, "adapter scratch");
    EQ("activations, logits, scratch, batch, attention and adapter scratch", acts, gpt2_acts_held(g));
    EQ("dequant buffer", item(p, "dequant buffer"), g->lin->shared.wbuf_n * X);
    EQ("adapters", item(p, "adapters"), b->m.lora ? 2 * b->m.lora->total * X : 0);
    EQ("adapter masks", item(p, "adapter masks"), b->m.lora ? b->m.lora->masks_n * X : 0);
    EQ("DoRA norms", item(p, "DoRA norms"), b->m.lora ? b->m.lora->norms_n * sizeof(float) : 0);
    EQ("bf16 base", item(p, "bf16 base"), b->m.base16 ? qlora_replaced_numel(&g->pt) * 2 : 0);
    EQ("bf16 lm_head", item(p, "bf16 lm_head"), b->m.wte16 ? params_layer_numel(&g->pt, PT_WTE) * 2 : 0);
    EQ(k->offload ? "optimizer state (host)" : "optimizer state", item(p, k->offload ? "optimizer state (host)" : "optimizer state"), opt_state_bytes(&b->opt));
    if (k->offload) EQ("offload staging", item(p, "offload staging"), 2 * (b->opt.end - b->opt.begin) * X);
    if (b->gs.fsdp_on) {
        const Fsdp* f = &b->gs.fsdp;
        EQ("parameter shard", item(p, "parameter shard"), fsdp_shard_bytes(f));
        EQ("gather buffers", item(p, "gather buffers"), fsdp_slot_bytes(f));
        EQ("trained base tensors", item(p, "trained base tensors"), gpt2_resident_bytes(g));
        EQ("parameters (none whole)", item(p, "parameters"), 0);
        EQ("gradient shard and buckets", item(p, "gradient shard") + item(p, "gradient buckets"), gradsync_grad_bytes(&b->gs));
        EQ("NF4 shard", item(p, "NF4 shard"), fsdp_nf4_shard_bytes(f));
        EQ("NF4 gather buffers", item(p, "NF4 gather buffers"), fsdp_nf4_slot_bytes(f));
        EQ("NF4 base (none whole)", item(p, "NF4 base"), 0);
    } else {
        EQ("parameters", item(p, "parameters"), gpt2_param_bytes(g));
        EQ("NF4 base", item(p, "NF4 base"), b->m.nf4 ? b->m.nf4->bytes : 0);
        EQ("gradient shard and buckets", item(p, "gradient shard") + item(p, "gradient buckets"), gradsync_grad_bytes(&b->gs));
    }
    EQ("gradients", item(p, "gradients"), gpt2_grad_bytes(g));
}

// model_assemble's footprint (before anything was allocated) against the plan's record of the
// model before sharding.
static void check_footprint(const char* tag, const Plan* p, const Built* b) {
    TEST_CHECK(b->got_fp, "%s: no footprint", tag);
    EQ("footprint params", p->model.params, b->fp.params);
    EQ("footprint grads", p->model.grads, b->fp.grads);
    EQ("footprint base", p->model.base, b->fp.base);
    EQ("footprint acts", p->model.acts, b->fp.acts);
    EQ("footprint trainable", p->model.trainable, b->fp.trainable);
}

// What the plan counts outside the heap's growth: the process's libraries and MPI's buffers
// (allocated before the build, or not by malloc), OpenBLAS's; the reduce-scatter buffers the
// plan counts as written, (N - 1) / N of what is allocated.
static size_t plan_heap(const Plan* p) {
    size_t n = p->steady[0] + p->steady[1];
    const char* outside[] = {"runtime", "OpenBLAS buffers", "MPI staging", "MPI fragments", "MPI reduce-scatter buffers", "MPI staging (replicas)"};
    for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) n -= item(p, outside[i]);
    const int W = p->spec.shard_group ? p->spec.shard_group : p->spec.world;
    if (W > 1) n += item(p, "MPI reduce-scatter buffers") / (size_t)(W - 1) * (size_t)W;
    if (p->spec.shard_group && p->spec.shard_group != p->spec.world) n += 2 * COMM_MPI_SCRATCH_BYTES; // comm_split's two
    return n;
}

// What a checkpoint holds beside training (llmc/app/trainer_ckpt.c trainer_save_checkpoint): the staging buffer
// of the optimizer's range; at ZeRO 3 of full training one array in the state file's layout (the
// ZeRO-1 range, trainer_ckpt.c state_range); rank 0's fp32 copy of the model (outputs_checkpoint: none
// where the writers read the parameters in place) or of the adapter (peft_save_adapter).
static void check_save(const char* tag, const Plan* p, Built* b, const Case* k) {
    EQ("checkpoint staging", p->save.staging, ckpt_stage_elems(b->opt.end - b->opt.begin) * sizeof(float));
    size_t layout = 0;
    if (b->gs.fsdp_on && !k->lora) {
        const ZeroLayout* z = &b->gs.zl;
        const size_t lo = zero_shard_begin(z, b->comm->rank), hi = zero_shard_end(z, b->comm->rank);
        layout = ((hi < z->total ? hi : z->total) - (lo < z->total ? lo : z->total)) * sizeof(float);
    }
    EQ("the state file's layout (ZeRO 3)", p->save.state_layout, layout);
    gradsync_unshard_model(&b->gs); // (ZeRO 3: rank 0 gathers the model to write it)
    const size_t model = k->lora == 2 ? lora_trainable_numel(b->m.lora) : k->lora ? b->m.lora->total : outputs_params_in_place(&b->m) ? 0 : b->m.gpt.pt.total;
    EQ("the model's copy written by rank 0", p->save.model, b->comm->rank == 0 ? model * sizeof(float) : 0);
    gradsync_reshard_model(&b->gs);
}

static void run_case(int ci, int zero, Comm* comm) {
    const Case* k = &CASES[ci];
    char tag[160];
    snprintf(tag, sizeof(tag), "%s, ZeRO %d%s, rank %d of %d", k->name, zero, g_group && zero == 3 ? " in shard groups" : "", comm->rank, comm->world);
    ops_set_gemm_dtype(k->bf16 ? OPS_BF16 : OPS_F32);
    PlanSpec s;
    case_spec(k, zero, comm->world, comm->rank, &s);
    PlanBackend be;
    memplan_backend_this(&be);
    Plan* p = (Plan*)mallocCheck(sizeof(Plan));
    memplan_make(&s, &be, p);
    const int heap = heap_visible();
    const size_t h0 = heap_now();
    Built* b = (Built*)mallocCheck(sizeof(Built));
    build(b, k, &s, comm);
    step(b, k);
    const size_t grew = heap_now() - h0 - sizeof(Built);
    check_components(tag, p, b, k);
    check_footprint(tag, p, b);
    check_save(tag, p, b, k);
    if (k->bf16) EQ("bf16 GEMM operand scratch", item(p, "GEMM operand scratch"), cpu_ops_gemm_scratch_bytes() + cpu_classifier_scratch_bytes());
    // the heap: within 1% + 1 MiB (the small host structures: views, tables, request lists), and
    // 2 MiB more with bf16 GEMMs (oneDNN's own)
    const size_t want = plan_heap(p);
    const double d = (double)grew - (double)want, tol = 0.01 * (double)want + (k->bf16 ? 3.0 : 1.0) * 1048576.0;
    if (heap) TEST_CHECK(fabs(d) <= tol, "%s: the heap grew by %zu bytes, the plan says %zu", tag, grew, want);
    if (test_failures == 0)
        printf("ok   %s: %d components equal the code's, heap %s%.2f MiB (plan %.2f MiB), peak %.2f MiB while %s\n", tag, p->n,
               heap ? "" : "(not visible) ", (double)grew / 1048576.0, (double)want / 1048576.0, (double)p->peak / 1048576.0, p->peak_at);
    unbuild(b);
    free(b);
    free(p);
}

// ----------------------------------------------------------------------------
// the search and the refusals (no model built)

static void check_search(void) {
    const Case* k = &CASES[0];
    PlanSpec s;
    case_spec(k, 0, 1, 0, &s);
    PlanBackend be;
    memplan_backend_cpu(&be, 0);
    Plan* p = (Plan*)mallocCheck(sizeof(Plan));
    s.B = 5;
    memplan_make(&s, &be, p);
    const size_t limit = p->peak + p->acts_level[0] / 10; // room for B = 5, not 6
    const int B = memplan_max_batch(&s, &be, limit, 0.0, 1024, p);
    PlanSpec t = s;
    t.B = B + 1;
    Plan* q = (Plan*)mallocCheck(sizeof(Plan));
    memplan_make(&t, &be, q);
    TEST_CHECK(B == 5 && p->peak <= limit && q->peak > limit, "max batch %d (peak %zu) within %zu; B + 1 peaks at %zu", B, p->peak, limit, q->peak);
    TEST_CHECK(memplan_max_batch(&s, &be, 1 << 20, 0.0, 1024, p) == 0, "nothing fits in 1 MiB");
    // more recompute fits more; a margin fits less
    PlanOption o[32];
    const int n = memplan_options(&s, &be, limit, 0.0, o, 32);
    TEST_CHECK(n == 3 && o[0].B == 5 && o[1].B >= o[0].B && o[2].B >= o[1].B, "options: %d, B %d %d %d", n, o[0].B, n > 1 ? o[1].B : -1, n > 2 ? o[2].B : -1);
    TEST_CHECK(memplan_max_batch(&s, &be, limit, 0.2, 1024, p) < 5, "a 20%% margin leaves less than B = 5");
    // LoRA with two ranks: LoRA and QLoRA at ZeRO 0-3, recompute 0-2
    case_spec(&CASES[3], 0, 2, 0, &s);
    TEST_CHECK(memplan_options(&s, &be, (size_t)1 << 32, 0.05, o, 32) == 24, "LoRA on 2 ranks: 24 options");
    free(p); free(q);
    printf("ok   the search: B = %d fits %.2f MiB, B = %d does not; more recompute, more room; a margin, less\n", B,
           (double)limit / 1048576.0, B + 1);
}

static void refuse_long_seq(void* arg) {
    (void)arg;
    PlanSpec s;
    case_spec(&CASES[0], 0, 1, 0, &s);
    s.T = 65;
    PlanBackend be;
    memplan_backend_cpu(&be, 0);
    Plan p;
    memplan_make(&s, &be, &p);
}
static void refuse_group(void* arg) {
    (void)arg;
    PlanSpec s;
    case_spec(&CASES[0], 3, 4, 0, &s);
    s.shard_group = 3;
    PlanBackend be;
    memplan_backend_cpu(&be, 0);
    Plan p;
    memplan_make(&s, &be, &p);
}

static void check_refusals(void) {
    struct { TestChildFn fn; const char* want; } r[] = {
        {refuse_long_seq, "--seq-len 65 exceeds the model's maximum sequence length 64"},
        {refuse_group, "--shard-group 3 does not divide the 4 ranks"},
    };
    for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
        char err[4096];
        const int st = test_run_child(r[i].fn, NULL, err, sizeof(err));
        TEST_CHECK(st != 0 && strstr(err, r[i].want), "refusal: status %d, message '%s', want '%s'", st, err, r[i].want);
    }
}

// The spec a trainer's flags give (what --plan and --batch-size auto will plan) and the config read
// from the model without its weights.
static void check_spec_from_run(void) {
    char* argv[] = {"train_lora", "--model", "test/ref/gpt2_tiny", "--train-data", "test/ref/gpt2_tiny/model.safetensors",
                    "--lora-rank", "4", "--lora-alpha", "8", "--lora-targets", "q,v,mlp.c_proj", "--lora-layers", "1",
                    "--lora-bias", "lora_only", "--batch-size", "2", "--seq-len", "16", "--total-batch-tokens", "128", "--zero", "2",
                    "--recompute", "1", "--qlora", "--out", "none"};
    RunConfig rc;
    runconfig_from_args(&rc, (int)(sizeof(argv) / sizeof(argv[0])), argv, TRAIN_LORA, 2);
    GPT2Config cfg;
    PlanSource src;
    memplan_model_config(rc.f.model, &cfg, &src);
    PlanSpec s;
    memplan_spec_from_run(&s, &rc, &cfg, 2, 1);
    TEST_CHECK(src == PLAN_SRC_HF && cfg.num_layers == 2 && cfg.channels == 64 && cfg.num_heads == 4 && cfg.vocab_size == 100,
               "config of test/ref/gpt2_tiny: L %d C %d NH %d V %d", cfg.num_layers, cfg.channels, cfg.num_heads, cfg.vocab_size);
    TEST_CHECK(s.lora && s.qlora && s.lspec.rank == 4 && s.lspec.alpha == 8.0f && s.lspec.targets == (LORA_T_Q | LORA_T_V | LORA_T_FCPROJ) &&
               !s.lspec.layers[0] && s.lspec.layers[1] && s.lspec.bias == LORA_BIAS_LORA_ONLY && s.B == 2 && s.T == 16 && s.accum == 2 &&
               s.zero == 2 && s.world == 2 && s.rank == 1 && s.recompute == 1 && !s.save && s.source == PLAN_SRC_HF,
               "spec from the flags: lora %d qlora %d r %d targets %u layers %d%d bias %d B %d T %d accum %d zero %d save %d",
               s.lora, s.qlora, s.lspec.rank, s.lspec.targets, s.lspec.layers[0], s.lspec.layers[1], s.lspec.bias, s.B, s.T, s.accum,
               s.zero, s.save);
    GPT2Config d;
    memplan_model_config("d24", &d, &src);
    TEST_CHECK(src == PLAN_SRC_INIT && d.channels == 1024 && d.num_heads == 16, "d24");
    runconfig_free(&rc);
    if (test_failures == 0) printf("ok   the spec of train_lora's flags (QLoRA, q,v,mlp.c_proj on layer 1, ZeRO 2, 2 micro-steps) and the config from config.json alone\n");
}

// --ref-model (llmc/run/preftrain.c preftrain_reference): the reference model, one layer more than
// the policy, assembled as the trainer assembles it (weights from memory here), against the
// plan's reference items; its forward, then the policy's step: the CPU's bf16 GEMM scratch (which
// only grows) against the plan's, the slots the fp32 reference grows included; the stored values.
static void child_reference(void* arg) {
    const Case* k = &CASES[*(const int*)arg];
    test_failures = 0;
    char tag[160];
    snprintf(tag, sizeof(tag), "%s, with --ref-model", k->name);
    ops_set_gemm_dtype(k->bf16 ? OPS_BF16 : OPS_F32);
    Comm c;
    comm_init(&c, NULL, NULL);
    PlanSpec s;
    case_spec(k, 0, 1, 0, &s);
    s.ref_stored = s.ref_pass = s.ref_model = 1;
    s.ref_cfg = case_config(k);
    s.ref_cfg.num_layers++;
    s.ref_source = PLAN_SRC_INIT;
    s.pairs = 10;
    PlanBackend be;
    memplan_backend_this(&be);
    Plan* p = (Plan*)mallocCheck(sizeof(Plan));
    memplan_make(&s, &be, p);
    Built* b = (Built*)mallocCheck(sizeof(Built));
    build(b, k, &s, &c);
    ParamTable pt;
    params_build(&pt, &s.ref_cfg);
    float* host = (float*)mallocCheck(pt.total * sizeof(float));
    model_init_gpt2(&pt, host, 2);
    ModelSpec ms;
    memset(&ms, 0, sizeof(ms));
    ms.cfg = &s.ref_cfg; ms.host = host; ms.B = k->B; ms.T = k->T;
    Model ref;
    model_assemble(&ref, &ms);
    free(host);
    EQ("reference parameters", p->ref.params, gpt2_param_bytes(&ref.gpt));
    EQ("reference activations, logits, scratch, batch", p->ref.acts, gpt2_acts_held(&ref.gpt) - ref.gpt.attn_bytes);
    const int n = k->B * k->T;
    int* tok = (int*)mallocCheck((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) tok[i] = (i * 7) % s.ref_cfg.vocab_size;
    long valid = 0;
    gpt2_forward(&ref.gpt, tok, tok, NULL, k->B, k->T, 0.0f, &valid);
    model_free(&ref);
    free(tok);
    step(b, k);
    if (k->bf16) EQ("bf16 GEMM operand scratch", item(p, "GEMM operand scratch"), cpu_ops_gemm_scratch_bytes() + cpu_classifier_scratch_bytes());
    EQ("reference log-probabilities", item(p, "reference log-probabilities"), 10 * 2 * sizeof(double)); // (the counts freed)
    if (test_failures == 0)
        printf("ok   %s: the reference's parameters %.2f MiB, activations %.2f MiB, GEMM scratch as the plan's; peak %.2f MiB while %s\n",
               tag, (double)p->ref.params / 1048576.0, (double)p->ref.acts / 1048576.0, (double)p->peak / 1048576.0, p->peak_at);
    unbuild(b);
    free(b);
    free(p);
    comm_finalize(&c);
    if (test_failures) _exit(1);
}

static void child_case(void* arg) {
    const int* a = (const int*)arg;
    test_failures = 0; // (the parent's count came with the fork)
    Comm c;
    comm_init(&c, NULL, NULL);
    run_case(a[0], a[1], &c);
    comm_finalize(&c);
    if (test_failures) _exit(1);
}

int main(int argc, char** argv) {
    int ci = -1, zero = 0;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--case")) ci = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--zero")) zero = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--shard-group")) g_group = atoi(argv[i + 1]);
    }
    ops_init(1);
    if (ci >= 0) { // one case on every rank of an mpirun
        Comm c;
        comm_init(&c, &argc, &argv);
        if (ci >= NCASES) fatal("give --case 0..N-1", "--case %d: there are %d cases", ci, NCASES);
        run_case(ci, zero, &c);
        comm_finalize(&c);
        return test_failures ? 1 : 0;
    }
    for (int i = 0; i < NCASES; i++)
        for (int z = 0; z <= 3; z += 3) {
            int a[2] = {i, z};
            char err[8192];
            const int st = test_run_child(child_case, a, err, sizeof(err));
            TEST_CHECK(st == 0, "case '%s' at ZeRO %d failed (status %d): %s", CASES[i].name, z, st, err);
        }
    for (int i = 0; i < NCASES; i++) {
        if (i != 0 && i != 3) continue; // (full training in fp32; LoRA with a bf16 base and lm_head)
        char err[8192];
        const int st = test_run_child(child_reference, &i, err, sizeof(err));
        TEST_CHECK(st == 0, "case '%s' with --ref-model failed (status %d): %s", CASES[i].name, st, err);
    }
    check_search();
    check_refusals();
    check_spec_from_run();
    printf("%d checks, %d failed\n", test_checks, test_failures);
    return test_failures ? 1 : 0;
}
