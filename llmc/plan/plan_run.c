#include "plan/plan_run.h"
#include "base/check.h"
#include "base/mfu.h"
#include "base/timer.h"
#include "ops/ops.h"
#include "ops/device.h"
#include "text/shard.h"
#include "model/prefloss.h"
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

// ----------------------------------------------------------------------------
// the plan's figures, as the report groups them

typedef struct { size_t g[5]; size_t attn, lora_scratch, runtime; } Groups; // g: PLAN_CAT_*

// The items of training grouped as the memory report lists them (on a GPU the device's only).
static void plan_groups(const Plan* p, Groups* out) {
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < p->n; i++) {
        const PlanItem* it = &p->item[i];
        if (!strcmp(it->name, "runtime")) out->runtime = it->bytes;
        if (p->be.device && it->where != PLAN_BACKEND) continue;
        const int cat = memplan_category(it->name);
        if (!strcmp(it->name, "adapters")) { out->g[PLAN_CAT_PARAMS] += it->bytes / 2; out->g[PLAN_CAT_GRADS] += it->bytes / 2; continue; }
        out->g[cat] += it->bytes;
        if (!strcmp(it->name, "attention scratch")) out->attn = it->bytes;
        if (!strcmp(it->name, "adapter scratch")) out->lora_scratch = it->bytes;
    }
}

static size_t groups_total(const Groups* g) { return g->g[1] + g->g[2] + g->g[3] + g->g[4]; }

// What a plan must fit, in words: the memory available less the margin, and --memory-budget's
// bound on the buffers.
static void limit_text(const RunPlan* rp, double margin, char* out, size_t cap) {
    const size_t budget = rp->plan.spec.budget;
    int k = 0;
    if (rp->avail) k = snprintf(out, cap, "%.1f MiB (%s) less %.0f%% (--memory-margin)", mib(rp->avail), rp->avail_what, 100.0 * margin);
    if (budget) snprintf(out + k, cap - (size_t)k, "%sbuffers of at most --memory-budget %.1f MiB", k ? " with " : "", mib(budget));
}

// A PlanSpec's training as flags ("--qlora --zero 3 --recompute 1 --batch-size 4"), the ones
// that differ from the run's.
static void option_flags(const PlanSpec* run, const PlanOption* o, char* out, size_t cap) {
    int k = snprintf(out, cap, "%s", o->qlora && !run->qlora ? "--qlora " : "");
    if (o->zero != run->zero) k += snprintf(out + k, cap - (size_t)k, "--zero %d ", o->zero);
    if (o->recompute != run->recompute) k += snprintf(out + k, cap - (size_t)k, "--recompute %d ", o->recompute);
    snprintf(out + k, cap - (size_t)k, "--batch-size %d", o->B);
}

// Up to six settings that fit (those closest to the run's first: its own training mode and ZeRO
// stage, then other stages, then QLoRA), as a hint: "--batch-size 4 | --recompute 2 --batch-size 9".
static int plan_fits_text(const RunPlan* rp, double margin, char* out, size_t cap) {
    const PlanSpec* s = &rp->plan.spec;
    PlanOption opt[24];
    const int n = memplan_options(s, &rp->plan.be, rp->avail, margin, opt, 24);
    int shown = 0, k = 0;
    out[0] = '\0';
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < n && shown < 6; i++) {
            const PlanOption* o = &opt[i];
            const int cls = o->qlora != s->qlora ? 2 : o->zero != s->zero ? 1 : 0;
            if (cls != pass || o->B < 1 || (s->qlora && !o->qlora)) continue; // (LoRA takes more than QLoRA)
            char f[128];
            option_flags(s, o, f, sizeof(f));
            k += snprintf(out + k, cap - (size_t)k, "%s%s", shown++ ? " | " : "", f);
            if ((size_t)k >= cap) return shown;
        }
    return shown;
}

// ----------------------------------------------------------------------------
// the backend: its rate, the memory available

// The CPU's GEMM rate, measured: the backend's own matmul_forward in the run's GEMM precision at
// the shape of the model's c_fc over 256 rows (C -> 4C: the step's largest GEMM, 2 x 256 x 4C^2
// FLOPs), the best of repeats for ~0.15 s (a few ms at 124M; 2 MiB + 16 C^2 bytes taken and freed).
static double plan_cpu_gemm_flops(int C) {
    const int N = 256, OC = 4 * C;
    const size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
    floatX* buf = (floatX*)ops_alloc((nin + nw + nout) * sizeof(floatX));
    float* host = (float*)mallocCheck((nin + nw) * sizeof(float));
    for (size_t i = 0; i < nin + nw; i++) host[i] = 0.01f * (float)((i * 7919u) % 200u) - 1.0f;
    ops_upload_f32(buf, host, nin + nw);
    double best = 1e30, spent = 0.0;
    for (int rep = 0; rep < 50 && (rep < 3 || spent < 0.15); rep++) {
        const double t0 = timer_now_s();
        matmul_forward(buf + nin + nw, NULL, buf, buf + nin, NULL, N, C, OC);
        ops_synchronize();
        const double dt = timer_now_s() - t0;
        spent += dt;
        if (rep > 0 && dt < best) best = dt; // the first warms the library and the caches
    }
    free(host);
    ops_free(buf);
    return 2.0 * N * (double)C * OC / best;
}

// The predicted step time's rate: on a GPU its peak (llmc/base/mfu.h) at the share a step reached
// on an H100; on the CPU the GEMM rate measured now at the share a step reached here (memplan.h),
// only for --plan (the one place that prints the time: a run's start-up does not pay for it).
static void plan_rate(PlanBackend* be, int lora, int C, int plan_only) {
    if (be->device) {
        be->flops = mfu_peak_bf16_flops(ops_backend_name(), NULL) * (lora ? MEMPLAN_GPU_MFU_LORA : MEMPLAN_GPU_MFU_FULL);
        return;
    }
    if (!plan_only) return;
    be->gemm_flops = plan_cpu_gemm_flops(C);
    be->flops = be->gemm_flops * (lora ? MEMPLAN_CPU_STEP_OF_GEMM_LORA : MEMPLAN_CPU_STEP_OF_GEMM_FULL);
}

// A GPU's free memory; on the CPU the host's, shared by the ranks of this node.
static void plan_available(RunPlan* rp, const PlanBackend* be, const Comm* comm) {
    rp->avail = memplan_memory_available(be, &rp->avail_what);
    if (be->device) device_memory(&rp->dev_free0, &rp->dev_total);
    else if (comm->local_world > 1) {
        rp->avail /= (size_t)comm->local_world;
        static char what[96];
        snprintf(what, sizeof(what), "%s shared by this node's %d ranks", rp->avail_what, comm->local_world);
        rp->avail_what = what;
    }
}

// ----------------------------------------------------------------------------
// --batch-size auto, --recompute auto

static int largest_divisor(int64_t K, int at_most) {
    for (int d = at_most; d >= 1; d--) if (K % d == 0) return d;
    return 0;
}

// Per recompute level the run may take: the largest B that fits (auto) or the given B when it
// fits, else 0; the minimum over the ranks; auto's B among the divisors of K.
static void auto_levels(const RunPlan* rp, const RunConfig* rc, Comm* comm, const PlanSpec* s0, const PlanBackend* be, int64_t K, int B[3]) {
    const TrainFlags* f = &rc->f;
    const size_t budget = (size_t)((double)rp->avail * (1.0 - f->memory_margin)); // (0: unknown, no bound; the spec's budget still holds)
    int cap = K < 65536 ? (int)K : 65536;
    if ((int64_t)cap * f->seq_len > RUNCFG_MAX_MICRO_TOKENS) cap = RUNCFG_MAX_MICRO_TOKENS / f->seq_len;
    Plan* tmp = (Plan*)mallocCheck(sizeof(Plan));
    double got[3];
    for (int r = 0; r < 3; r++) {
        PlanSpec s = *s0;
        s.recompute = r;
        got[r] = 0.0;
        if (f->recompute != ARG_AUTO && r != f->recompute) continue;
        if (f->batch_size == ARG_AUTO) got[r] = -(double)memplan_max_batch(&s, be, rp->avail, f->memory_margin, cap, tmp);
        else {
            memplan_make(&s, be, tmp);
            got[r] = memplan_fits(tmp, budget) ? -(double)s.B : 0.0;
        }
    }
    free(tmp);
    comm_allreduce_max_f64(comm, got, 3); // (negated: the minimum over the ranks)
    for (int r = 0; r < 3; r++) B[r] = f->batch_size == ARG_AUTO ? largest_divisor(K, (int)-got[r]) : (int)-got[r];
}

// The reason auto gives for its choice: B's peak, and the next size up's (or the level below's).
static void auto_say(const RunPlan* rp, const RunConfig* rc, const PlanSpec* s, const PlanBackend* be, int64_t K, const int B[3], int wasB, int wasR) {
    const TrainFlags* f = &rc->f;
    Plan* tmp = (Plan*)mallocCheck(sizeof(Plan));
    memplan_make(s, be, tmp);
    char limit[256];
    limit_text(rp, f->memory_margin, limit, sizeof(limit));
    printf("auto: fits %s on every rank; this rank peaks at %.1f MiB while %s, its buffers at %.1f MiB\n", limit, mib(tmp->peak),
           tmp->peak_at, mib(tmp->peak_buffers));
    if (wasB == ARG_AUTO) {
        int next = 0;
        for (int d = s->B + 1; d <= K && !next; d++) if (K % d == 0) next = d;
        printf("auto: --batch-size %d: the largest micro-batch that fits and divides the %lld sequences of each rank's step (%d micro-step%s)",
               s->B, (long long)K, rc->accum, rc->accum == 1 ? "" : "s");
        if (next) {
            PlanSpec t = *s;
            t.B = next;
            memplan_make(&t, be, tmp);
            printf("; %d would peak at %.1f MiB", next, mib(tmp->peak));
        }
        printf("\n");
    }
    if (wasR == ARG_AUTO)
        printf("auto: --recompute %d: the smallest level at which %s fits%s\n", s->recompute,
               wasB == ARG_AUTO ? "a micro-batch" : "--batch-size", s->recompute ? " (lower levels do not)" : "");
    (void)B;
    fflush(stdout);
    free(tmp);
}

static void plan_auto(RunPlan* rp, RunConfig* rc, Comm* comm, PlanSpec* s, const PlanBackend* be) {
    const TrainFlags* f = &rc->f;
    const int wasB = f->batch_size, wasR = f->recompute;
    if (!rp->avail && !s->budget)
        fatal("give --batch-size and --recompute as numbers, or a --memory-budget", "%s auto: the memory available is unknown (%s)",
              wasB == ARG_AUTO ? "--batch-size" : "--recompute", rp->avail_what);
    const int64_t K = wasB == ARG_AUTO ? rc->tokens_per_step / ((int64_t)f->seq_len * rc->world) : 0;
    int B[3], r = wasR == ARG_AUTO ? 0 : f->recompute;
    auto_levels(rp, rc, comm, s, be, K, B);
    while (wasR == ARG_AUTO && r < 2 && B[r] < 1) r++;
    if (B[r] < 1) {
        char fits[1024], limit[256];
        rp->plan.spec = *s;
        rp->plan.be = *be;
        const int n = plan_fits_text(rp, f->memory_margin, fits, sizeof(fits));
        limit_text(rp, f->memory_margin, limit, sizeof(limit));
        fatal(n ? fits : "shard over more ranks (--zero 3 under mpirun), --qlora, --offload-optimizer, a shorter --seq-len or a larger --memory-budget",
              "%s auto: %s does not fit %s at %s%s", wasB == ARG_AUTO ? "--batch-size" : "--recompute",
              wasB == ARG_AUTO ? "even a micro-batch of 1" : "the micro-batch", limit,
              wasR == ARG_AUTO ? "any --recompute level" : "this --recompute", n ? "; these settings fit" : "");
    }
    runconfig_resolve(rc, B[r], r);
    s->B = f->batch_size; s->recompute = f->recompute; s->accum = rc->accum;
    if (comm->rank == 0) auto_say(rp, rc, s, be, K, B, wasB, wasR);
}

// ----------------------------------------------------------------------------
// the refusals

static void plan_check(const RunPlan* rp, const RunConfig* rc) {
    const TrainFlags* f = &rc->f;
    const Plan* p = &rp->plan;
    if (f->memory_budget > 0 && mib(p->peak_buffers) > f->memory_budget)
        fatal("raise --memory-budget, or shard more (--zero 3 over more ranks), or lower --batch-size / raise --recompute (--plan shows what each takes)",
              "rank %d needs %.1f MiB (its parameters, gradients, optimizer state and activations at their largest, while %s), more than "
              "--memory-budget %.1f MiB", rp->rank, mib(p->peak_buffers), p->peak_buffers_at, f->memory_budget);
    if (!rp->avail || p->peak <= rp->avail) return;
    if (!p->be.device) { // (the host's free memory moves; the kernel may have more to give back)
        if (rp->rank == 0)
            printf("warning: the plan's peak, %.1f MiB resident while %s, is more than %.1f MiB (%s): the run may be killed for memory "
                   "(--plan shows what fits)\n", mib(p->peak), p->peak_at, mib(rp->avail), rp->avail_what);
        return;
    }
    Groups g;
    plan_groups(p, &g);
    char fits[1024], hint[1200];
    const int n = plan_fits_text(rp, f->memory_margin, fits, sizeof(fits));
    if (n) snprintf(hint, sizeof(hint), "these settings fit (the global batch kept by accumulation; --batch-size auto chooses one; "
                    "--plan prints the whole plan): %s", fits);
    else snprintf(hint, sizeof(hint), "nothing fits this GPU at --seq-len %d: shard over more GPUs (--zero 3 under mpirun), keep the "
                  "optimizer on the host (--offload-optimizer), or a shorter --seq-len", f->seq_len);
    fatal(hint, "rank %d needs %.1f MiB of device memory at its peak, while %s (the memory report's total %.1f MiB: params %.1f, "
          "grads %.1f, optimizer %.1f, activations %.1f MiB at --batch-size %d --seq-len %d --recompute %d; %.1f MiB for workspaces "
          "and libraries; %.1f MiB of staging), but the GPU has %.1f MiB free of %.1f MiB", rp->rank, mib(p->peak), p->peak_at,
          mib(groups_total(&g)), mib(g.g[PLAN_CAT_PARAMS]), mib(g.g[PLAN_CAT_GRADS]), mib(g.g[PLAN_CAT_OPT]), mib(g.g[PLAN_CAT_ACTS]),
          f->batch_size, f->seq_len, f->recompute, mib(g.runtime), mib(g.g[PLAN_CAT_OTHER] - g.runtime), mib(rp->avail), mib(rp->dev_total));
}

// ----------------------------------------------------------------------------
// --plan

// The training data's size from the shards' headers alone (nothing else is read): its tokens,
// files and global batches an epoch (chunks of chunk tokens, as the loader cuts them).
static int plan_data(const char* pattern, int64_t chunk, int64_t* tokens, int64_t* batches) {
    char* pat = strdup(pattern);
    int files = 0;
    *tokens = *batches = 0;
    for (char* save = NULL, *tok = strtok_r(pat, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        glob_t g;
        if (glob(tok, 0, NULL, &g) != 0) { files = -1; break; }
        for (size_t i = 0; i < g.gl_pathc; i++, files++) {
            int32_t h[256];
            const int64_t n = shard_read_header(g.gl_pathv[i], SHARD_MAGIC, SHARD_VERSION, 2, "token shard", h);
            *tokens += n;
            *batches += (n - 1) / chunk;
        }
        globfree(&g);
    }
    free(pat);
    return files;
}

// The data's loss masks as the plan needs them: each masked shard's windows of T tokens with the
// targets each gives (the trained mask bits of its tokens 1..T after the window's start), so that
// the plan knows the most rows a micro-batch of B windows (a loader's chunk: B windows from a
// multiple of B) gives the classifier; and the preference pairs (a chosen record's start each).
typedef struct {
    int T, n, unmasked;          // window length; shards; a shard without a mask (every row a target)
    int64_t* nwin;               // [n] windows of each shard
    int32_t** tgt;               // [n][nwin] targets of each window
    int64_t pairs;
} MaskStats;

static MaskStats g_masks; // (what the plan's target_rows reads: made once, by plan_run_start)

static int masks_target_rows(const void* ctx, int B, int T) {
    const MaskStats* m = (const MaskStats*)ctx;
    if (m->unmasked || T != m->T) return B * T;
    int64_t most = 0;
    for (int f = 0; f < m->n; f++)
        for (int64_t w = 0; w < m->nwin[f]; w += B) {
            int64_t t = 0;
            for (int64_t k = w; k < w + B && k < m->nwin[f]; k++) t += m->tgt[f][k];
            if (t > most) most = t;
        }
    return (int)most;
}

// A file's header (256 int32) and its size; 0 when it cannot be read.
static int header_of(const char* path, int32_t* h, int64_t* bytes) {
    FILE* f = fopen(path, "rb");
    if (!f) return 0;
    const int ok = fread(h, sizeof(int32_t), 256, f) == 256;
    fclose(f);
    *bytes = file_size(path);
    return ok;
}

// One shard's mask: its windows' targets and its pairs. A shard without a mask, or one that cannot
// be read as the loader reads it (it refuses it then, naming what is wrong), counts every row.
static void masks_read(MaskStats* m, const char* shard) {
    int32_t h[256];
    int64_t sb = 0, mb = 0;
    char mp[LLMC_PATH_MAX];
    if (!header_of(shard, h, &sb) || h[0] != SHARD_MAGIC || h[SHARD_HAS_MASK] != 1 || h[2] < 0) { m->unmasked = 1; return; }
    const int64_t ntok = h[2], nwin = (ntok + m->T - 1) / m->T;
    shard_mask_path(mp, sizeof(mp), shard);
    FILE* fp = header_of(mp, h, &mb) && h[0] == MASK_MAGIC && h[2] == ntok && mb == SHARD_HEADER_BYTES + ntok ? fopen(mp, "rb") : NULL;
    if (!fp || fseek(fp, SHARD_HEADER_BYTES, SEEK_SET) != 0) { if (fp) fclose(fp); m->unmasked = 1; return; }
    int64_t* nw = (int64_t*)realloc(m->nwin, (size_t)(m->n + 1) * sizeof(int64_t));
    if (nw) m->nwin = nw;
    int32_t** tg = nw ? (int32_t**)realloc(m->tgt, (size_t)(m->n + 1) * sizeof(int32_t*)) : NULL;
    if (!tg) fatal(NULL, "out of memory reading '%s'", mp);
    m->tgt = tg;
    int32_t* t = (int32_t*)callocCheck((size_t)(nwin ? nwin : 1), sizeof(int32_t));
    m->nwin[m->n] = nwin; m->tgt[m->n++] = t;
    uint8_t* buf = (uint8_t*)mallocCheck((size_t)1 << 20);
    for (int64_t k = 0; k < ntok; k += (int64_t)1 << 20) {
        const size_t want = (size_t)(ntok - k < ((int64_t)1 << 20) ? ntok - k : ((int64_t)1 << 20));
        if (fread(buf, 1, want, fp) != want) { m->unmasked = 1; break; }
        for (size_t j = 0; j < want; j++) {
            const int64_t pos = k + (int64_t)j; // (the target of the input at pos - 1: window (pos - 1) / T)
            if (pos > 0 && (buf[j] & MASK_TRAINED)) t[(pos - 1) / m->T]++;
            m->pairs += (buf[j] & MASK_CHOSEN) != 0;
        }
    }
    fclose(fp);
    free(buf);
}

// The masks of the shards of the training and validation data (comma lists of globs).
static void masks_make(MaskStats* m, const char* train, const char* val, int T) {
    for (int f = 0; f < m->n; f++) free(m->tgt[f]);
    free(m->tgt); free(m->nwin);
    memset(m, 0, sizeof(*m));
    m->T = T;
    const char* sets[2] = { train, val };
    for (int i = 0; i < 2; i++) {
        if (!sets[i]) continue;
        char* pat = strdup(sets[i]);
        for (char* save = NULL, *tok = strtok_r(pat, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            glob_t g;
            if (glob(tok, 0, NULL, &g) != 0) continue;
            for (size_t k = 0; k < g.gl_pathc; k++) masks_read(m, g.gl_pathv[k]);
            globfree(&g);
        }
        free(pat);
    }
}

// The data, the run's length, and its time at the predicted step time; returns the run's steps
// (0: unknown).
static long print_data(const RunPlan* rp, const RunConfig* rc) {
    const TrainFlags* f = &rc->f;
    int64_t tokens = 0, batches = 0;
    const int64_t chunk = (int64_t)rc->world * f->batch_size * f->seq_len;
    const int files = f->train_data ? plan_data(f->train_data, chunk, &tokens, &batches) : 0;
    long steps = f->steps;
    if (f->train_data && files <= 0) printf("data: no files match --train-data %s\n", f->train_data);
    else if (f->train_data) {
        printf("data: %lld tokens in %d file%s: %lld steps of %lld tokens an epoch\n", (long long)tokens, files, files == 1 ? "" : "s",
               (long long)(batches / rc->accum), (long long)rc->tokens_per_step);
        if (f->epochs > 0) steps = (long)((double)f->epochs * (double)batches / (double)rc->accum + 0.999999);
    } else if (f->epochs > 0) steps = 0;
    const int lora = rc->mode == TRAIN_LORA;
    if (steps > 0 && rp->plan.step_s > 0 && rp->plan.be.device)
        printf("time: %ld steps x %.3f s = %.1f h predicted (at %.0f%% of the GPU's peak bf16 FLOP/s, as measured on an H100)\n", steps,
               rp->plan.step_s, (double)steps * rp->plan.step_s / 3600.0, 100.0 * (lora ? MEMPLAN_GPU_MFU_LORA : MEMPLAN_GPU_MFU_FULL));
    else if (steps > 0 && rp->plan.step_s > 0)
        printf("time: %ld steps x %.3f s = %.1f h predicted (%.0f GFLOP/s: %.0f%% of this CPU's GEMM rate measured now, %.0f GFLOP/s, "
               "as a step reached on a 2-core AVX512-BF16 machine)\n", steps, rp->plan.step_s, (double)steps * rp->plan.step_s / 3600.0,
               rp->plan.be.flops / 1e9, 100.0 * (lora ? MEMPLAN_CPU_STEP_OF_GEMM_LORA : MEMPLAN_CPU_STEP_OF_GEMM_FULL),
               rp->plan.be.gemm_flops / 1e9);
    return steps;
}

// The checkpoints this run writes (at every --save-every below its last step, and at the last),
// from its first step on.
static long plan_checkpoints(const RunConfig* rc, long steps, long from) {
    const int every = rc->f.save_every;
    if (steps <= from) return 0;
    return (every > 0 ? (steps - 1) / every - from / every : 0) + 1;
}

// The disk the run writes into --out (memplan_disk): its checkpoints, as many as
// --keep-checkpoints keeps (one more while the next is written and the oldest not yet removed),
// and the final outputs.
static void print_disk(const RunPlan* rp, const RunConfig* rc, long steps) {
    const TrainFlags* f = &rc->f;
    if (!rc->write_outputs) { printf("disk: nothing written (--out none)\n"); return; }
    PlanDisk d;
    memplan_disk(&rp->plan, &d);
    const int lora = rc->mode == TRAIN_LORA && !runconfig_bitfit(rc), keep = f->keep_checkpoints; // (BitFit's model is the output)
    const size_t one = d.ckpt_model + d.ckpt_state, final = d.hf + d.llmc + d.gguf + d.adapter + d.adapter_gguf + d.base;
    const long n = plan_checkpoints(rc, steps, rp->resume_step > 0 ? rp->resume_step : 0);
    const long kept = keep > 0 && n > keep ? keep : n, most = keep > 0 && n > keep ? kept + 1 : n;
    char list[512] = "", count[96] = "";
    const struct { const char* name; size_t bytes; } out[] = {
        {"the adapter", d.adapter}, {"its GGUF", d.adapter_gguf}, {lora ? "merged/model.safetensors" : "model.safetensors", d.hf},
        {lora ? "merged/model.bin" : "model.bin", d.llmc}, {"GGUF", d.gguf}, {"base/", d.base}};
    for (size_t i = 0, k = 0; i < sizeof(out) / sizeof(out[0]); i++)
        if (out[i].bytes) k += (size_t)snprintf(list + k, sizeof(list) - k, "%s%s %.1f MiB", k ? ", " : "", out[i].name, mib(out[i].bytes));
    if (rp->plan.spec.link_llmc)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%smodel.bin: the last checkpoint's model file, a hard link", list[0] ? "; " : "");
    if (steps > 0) snprintf(count, sizeof(count), "%ld written, ", n);
    if (keep) snprintf(count + strlen(count), sizeof(count) - strlen(count), "the newest %d kept", keep);
    else snprintf(count + strlen(count), sizeof(count) - strlen(count), "all kept");
    printf("disk: a checkpoint %.1f MiB (%s %.1f MiB, optimizer state %.1f MiB): %s (--keep-checkpoints %d) | final outputs %.1f MiB (%s)",
           mib(one), lora ? "adapter" : runconfig_bitfit(rc) ? "biases" : "model", mib(d.ckpt_model), mib(d.ckpt_state), count, keep, mib(final), list);
    if (steps > 0) printf(" | --out: about %.1f MiB at the end, %.1f MiB at most\n", mib((size_t)kept * one + final), mib((size_t)most * one + final));
    else printf("\n");
    if (keep != 1 || (!lora && rc->save_hf))
        printf("  (fewer copies: --keep-checkpoints 1 keeps the newest checkpoint only%s)\n",
               !lora && rc->save_hf ? "; --save-format llmc writes no model.safetensors beside the checkpoint's model.bin" : "");
}

// Every rank's peak and buffers at their largest (a plan each: they differ by rank at ZeRO 1-3),
// up to 9 listed.
static void print_ranks(const RunPlan* rp) {
    if (rp->world == 1) return;
    Plan* t = (Plan*)mallocCheck(sizeof(Plan));
    printf("ranks:");
    for (int r = 0; r < rp->world; r++) {
        if (r == 8 && rp->world > 9) { printf(" ...;"); r = rp->world - 1; }
        PlanSpec s = rp->plan.spec;
        s.rank = r;
        memplan_make(&s, &rp->plan.be, t);
        printf(" %d: peak %.1f MiB (%s), buffers %.1f MiB%s", r, mib(t->peak), t->peak_at, mib(t->peak_buffers), r + 1 < rp->world ? ";" : "\n");
    }
    free(t);
}

// What fits the memory available: per training mode, ZeRO stage and recompute level the largest
// micro-batch, its peak.
static void print_options(const RunPlan* rp, const RunConfig* rc) {
    const PlanSpec* s = &rp->plan.spec;
    if (!rp->avail && !s->budget) { printf("fits: the memory available is unknown (%s)\n", rp->avail_what); return; }
    PlanOption o[24];
    char limit[256];
    const int n = memplan_options(s, &rp->plan.be, rp->avail, rc->f.memory_margin, o, 24);
    limit_text(rp, rc->f.memory_margin, limit, sizeof(limit));
    printf("fits %s: the largest micro-batch per rank (its peak, MiB)\n", limit);
    printf("  %-8s %-6s %-20s %-20s %-20s\n", "training", "ZeRO", "recompute 0", "recompute 1", "recompute 2");
    for (int i = 0; i + 2 < n; i += 3) {
        printf("  %-8s %-6d", !o[i].lora ? "full" : o[i].qlora ? "QLoRA" : "LoRA", o[i].zero);
        for (int r = 0; r < 3; r++) {
            char cell[40];
            if (o[i + r].B) snprintf(cell, sizeof(cell), "B %s %d (%.0f)", o[i + r].B == 4096 ? ">=" : "<=", o[i + r].B, mib(o[i + r].peak));
            else snprintf(cell, sizeof(cell), "-");
            printf(" %-20s", cell);
        }
        printf("\n");
    }
}

// This rank's verdict (PLAN_EXIT_*): its peak against the memory available, its buffers against
// --memory-budget.
static int plan_verdict(const RunPlan* rp) {
    const Plan* p = &rp->plan;
    if ((rp->avail && p->peak > rp->avail) || (p->spec.budget && p->peak_buffers > p->spec.budget)) return PLAN_EXIT_DOES_NOT_FIT;
    return rp->avail || p->spec.budget ? PLAN_EXIT_FITS : PLAN_EXIT_UNKNOWN;
}

// The verdict (the worst of the ranks', status), and what to do next.
static void print_verdict(const RunPlan* rp, const RunConfig* rc, int status) {
    const Plan* p = &rp->plan;
    const size_t budget = p->spec.budget;
    const int mine = plan_verdict(rp);
    char room[256] = "";
    if (rp->avail) snprintf(room, sizeof(room), "the peak, %.1f MiB, is %.0f%% of %.1f MiB", mib(p->peak), 100.0 * (double)p->peak / (double)rp->avail, mib(rp->avail));
    if (budget) snprintf(room + strlen(room), sizeof(room) - strlen(room), "%sthe buffers, %.1f MiB, are %.0f%% of --memory-budget %.1f MiB",
                         rp->avail ? "; " : "", mib(p->peak_buffers), 100.0 * (double)p->peak_buffers / (double)budget, mib(budget));
    if (status == PLAN_EXIT_UNKNOWN) {
        printf("verdict: unknown (no figure for the memory available, no --memory-budget); drop --plan to start the run (exit status %d)\n", status);
        return;
    }
    if (status == PLAN_EXIT_FITS) { printf("verdict: fits: %s; drop --plan to start the run\n", room); return; }
    if (mine != PLAN_EXIT_DOES_NOT_FIT) {
        printf("verdict: does not fit: another rank does not (ranks: above); on this rank %s (exit status %d)\n", room, status);
        return;
    }
    char fits[1024];
    const int n = plan_fits_text(rp, rc->f.memory_margin, fits, sizeof(fits));
    printf("verdict: does not fit: %s; %s%s (exit status %d)\n", room, n ? "these fit: " : "nothing at this --seq-len does: shard over more ranks or shorten --seq-len",
           n ? fits : "", status);
}

static void plan_print_all(const RunPlan* rp, const RunConfig* rc, int status) {
    memplan_print(&rp->plan, stdout);
    if (rc->f.adapter)
        printf("  (--adapter %s: its adapters are planned with the --lora-* flags' shape, rank %d on %s, not read from its files)\n",
               rc->f.adapter, rc->f.lora_rank, rc->f.lora_targets);
    if (!rp->plan.be.flops && rp->plan.be.device) printf("  (no figure for this GPU's peak FLOP/s: no predicted step time)\n");
    print_ranks(rp);
    print_disk(rp, rc, print_data(rp, rc));
    print_options(rp, rc);
    print_verdict(rp, rc, status);
    fflush(stdout);
}

// ----------------------------------------------------------------------------

int plan_run_start(RunPlan* rp, RunConfig* rc, Comm* comm, long resume_step) {
    memset(rp, 0, sizeof(*rp));
    rp->rank = comm->rank; rp->world = comm->world;
    GPT2Config cfg;
    PlanSource src;
    PlanSpec s;
    PlanBackend be;
    memplan_model_config(rc->f.model, &cfg, &src);
    memplan_backend_this(&be);
    plan_rate(&be, rc->mode == TRAIN_LORA, cfg.channels, rc->f.plan);
    memplan_spec_from_run(&s, rc, &cfg, comm->world, comm->rank);
    if (resume_step >= 0 && rc->mode == TRAIN_FULL) s.source = PLAN_SRC_BIN; // (the checkpoint's model.bin)
    if (resume_step >= 0) s.ref_pass = 0; // (the stored reference is read back)
    masks_make(&g_masks, rc->f.train_data, rc->f.val_data, rc->f.seq_len);
    s.pairs = g_masks.pairs;
    if (!g_masks.unmasked && g_masks.n && !pref_uses_nll((PrefObjective)rc->objective)) { // (ORPO's NLL targets the chosen prompts too)
        s.target_rows = masks_target_rows;
        s.target_ctx = &g_masks;
    }
    rp->resume_step = resume_step;
    plan_available(rp, &be, comm);
    if (rc->f.batch_size == ARG_AUTO || rc->f.recompute == ARG_AUTO) plan_auto(rp, rc, comm, &s, &be);
    memplan_make(&s, &be, &rp->plan);
    double most[2] = { (double)rp->plan.peak_buffers, (double)plan_verdict(rp) };
    comm_allreduce_max_f64(comm, most, 2);
    rp->buffers_max = (size_t)most[0];
    rp->exit_status = (int)most[1];
    if (rc->f.plan) {
        if (comm->rank == 0) plan_print_all(rp, rc, rp->exit_status);
        return 1;
    }
    plan_check(rp, rc);
    return 0;
}

void plan_run_report(const RunPlan* rp, const RunConfig* rc) {
    if (rp->rank != 0) return;
    const Plan* p = &rp->plan;
    const PlanSpec* s = &p->spec;
    const char* xt = p->be.X == 2 ? "bf16" : "fp32";
    Groups g;
    plan_groups(p, &g);
    char adapters[64] = "";
    if (g.lora_scratch) snprintf(adapters, sizeof(adapters), ", adapter scratch %.2f MiB", mib(g.lora_scratch));
    const int base16 = memplan_item(p, "bf16 base") != NULL;
    printf("memory (this rank): params %.1f MiB (%s%s) | grads %.1f MiB (%s) | optimizer %.1f MiB (fp32 m, v%s) | "
           "activations %.1f MiB (%s, recompute %d, attention scratch %.2f MiB%s incl.) | total %.1f MiB\n",
           mib(g.g[PLAN_CAT_PARAMS]), xt, s->qlora ? ", NF4 base incl." : base16 ? ", bf16 base incl." : "", mib(g.g[PLAN_CAT_GRADS]), xt,
           mib(g.g[PLAN_CAT_OPT]), p->be.master ? ", master" : "", mib(g.g[PLAN_CAT_ACTS]), xt, s->recompute, mib(g.attn), adapters,
           mib(groups_total(&g)));
    printf("memory plan (this rank): peak %.1f MiB %s while %s", mib(p->peak), p->be.device ? "of device memory" : "resident", p->peak_at);
    if (p->be.device) printf(" (%.1f MiB of it for workspaces and libraries; host memory at most %.1f MiB)", mib(g.runtime), mib(p->peak_host));
    printf(" | buffers at most %.1f MiB while %s", mib(p->peak_buffers), p->peak_buffers_at);
    if (rp->world > 1) printf(" (the largest rank's: %.1f MiB)", mib(rp->buffers_max));
    if (rp->avail) printf(" | available %.1f MiB (%s)", mib(rp->avail), rp->avail_what);
    printf("\n");
    (void)rc;
    fflush(stdout);
}

void plan_run_after_step(const RunPlan* rp) {
    if (rp->rank != 0) return;
    const Plan* p = &rp->plan;
    if (p->be.device) {
        size_t fr = 0, total = 0;
        if (!device_memory(&fr, &total)) return;
        Groups g;
        plan_groups(p, &g);
        const size_t used = rp->dev_free0 > fr ? rp->dev_free0 - fr : 0;
        printf("memory after step 1: measured %.1f MiB (device memory taken since start-up, cudaMemGetInfo; %.1f MiB in use of %.1f) | "
               "plan %.1f MiB (its peak so far less the %.1f MiB reserve for workspaces and libraries: %.1f MiB)\n",
               mib(used), mib(total - fr), mib(total), mib(p->peak_first_step - g.runtime), mib(g.runtime), mib(p->peak_first_step));
    } else {
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru) != 0) return;
        printf("memory after step 1: measured %.1f MiB (the peak resident set, getrusage) | plan %.1f MiB (its peak so far)\n",
               (double)ru.ru_maxrss / 1024.0, mib(p->peak_first_step));
    }
    fflush(stdout);
}
