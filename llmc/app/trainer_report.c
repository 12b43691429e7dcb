// The report the trainer prints before training (llmc/app/trainer_internal.h), from rank 0: what
// runs (backend, dtype, model, adapters, data, ranks, batch), the MFU's inputs, and the memory.
#include "app/trainer_internal.h"
#include "base/mfu.h"
#include "dist/fsdp.h"
#include "model/gpt2.h"
#include "model/lora.h"
#include "model/params.h"
#include "model/qlora.h"
#include "ops/ops.h"

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

void trainer_report_model(Run* r) {
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
void trainer_setup_mfu(Run* r) {
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
// component from the plan (llmc/plan/plan_run.h: the same accounting as the refusal), and the
// sharding in exact element counts.
void trainer_report_memory(Run* r) {
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
