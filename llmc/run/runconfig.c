#include "run/runconfig.h"
#include "comm/comm.h"
#include "base/check.h"
#include "model/config.h"
#include "base/json.h"
#include "model/lora.h"
#include "model/prefloss.h"
#include "model/qlora.h"
#include "model/schedule.h"
#include <stdio.h>
#include <stdlib.h>
#include <ctype.h>
#include <string.h>

static const char* const SAVE_FORMATS[] = {"hf", "llmc", "both", "none", NULL};
static const char* const GGUF_TYPES[] = {"none", "f32", "f16", "bf16", "q8_0", NULL};
// in LORA_BIAS_* order
static const char* const LORA_BIAS_NAMES[] = {"none", "all", "lora_only", NULL};
static const char* const RESUME_WORDS[] = {"yes", "auto", NULL};
static const char* const AUTO_WORD[] = {"auto", NULL};
#define RUNCFG_EXIT_HELP "Exit status: 0 when the run finished (or stopped early, or by --stop-after); 1 on an error, or when its last steps " \
    "were not finite (no final model written); 130 / 143 after SIGINT / SIGTERM (a checkpoint is written first, except during start-up)."
static const char* const HINT = "run with --help to see every flag";

const char* runconfig_program(TrainMode mode) { return mode == TRAIN_LORA ? "train_lora" : "train_gpt2"; }

static void flag_defaults(TrainFlags* f, TrainMode mode) {
    memset(f, 0, sizeof(*f));
    f->batch_size = 4; f->seq_len = 256; f->total_batch_tokens = 0; f->steps = 100;
    f->lr = mode == TRAIN_LORA ? 2e-4f : 3e-4f; f->warmup = 0; f->schedule = "cosine";
    f->final_lr_frac = 0.0f; f->cooldown_frac = 0.2f;
    f->weight_decay = mode == TRAIN_LORA ? 0.0f : 0.1f; f->grad_clip = 1.0f;
    f->beta1 = 0.9f; f->beta2 = 0.95f; f->eps = 1e-8f;
    f->eval_every = 0; f->eval_batches = "8"; f->save_every = 0; f->keep_checkpoints = 2;
    f->seed = 1337; f->threads = 0; f->shuffle = 0; f->max_skipped = 10;
    f->loss_scale_init = 65536.0f; f->loss_scale_window = 2000;
    f->save_format = "both"; f->save_gguf = "none"; f->zero = 0; f->deterministic = 1; f->dtype = "auto";
    f->watchdog_timeout = (float)COMM_WATCHDOG_DEFAULT_S;
    f->memory_margin = 0.05f;
    cli_sample_defaults(&f->sample);
    // preference objectives: TRL's defaults (DPOConfig, ORPOConfig, CPOConfig)
    f->objective = "sft"; f->pref_beta = 0.1f; f->label_smoothing = 0.0f; f->orpo_lambda = 0.1f; f->simpo_gamma = 0.5f;
    // LoRA: PEFT's defaults where PEFT has one (dropout 0)
    f->lora_rank = 8; f->lora_alpha = 16.0f; f->lora_dropout = 0.0f; f->lora_targets = "c_attn";
    f->lora_layers = "all"; f->lora_bias = "none"; f->lora_plus_ratio = 1.0f; f->lora_init = "default";
}

// The flag table of a mode, pointing into f: the one list behind the parser, --help and the JSON
// form. Longer than a screen: a table of data, not logic, one line per flag.
static int runconfig_specs(TrainFlags* f, TrainMode mode, ArgSpec* out) {
    const ArgSpec common[] = {
        cli_flag_model(&f->model, "model to start from: llm.c .bin, .safetensors, sharded index, HF model dir; or d6/d12/d24/d36/d48/tiny to train from scratch"),
        {"--train-data", "-i", ARG_STR, &f->train_data, "GLOB", "training token shards (llm.c format; data/prepare makes them)", 1, 0, NULL},
        {"--val-data", "-j", ARG_STR, &f->val_data, "GLOB", "validation token shards", 1, 0, NULL},
        {"--out", "-o", ARG_STR, &f->out_dir, "DIR", "output directory: run_config.json (the settings), log.jsonl, checkpoints, final model; "
         "default: a new out/<program>-<date>-<time> (printed at start); none: write nothing (benchmarks, quick checks)", 1, 0, NULL},
        {"--resume", NULL, ARG_OPT_STR, &f->resume, "auto", "continue the run in --out from its newest complete checkpoint, with the settings recorded in "
         "OUT/run_config.json (flags given override them where that is safe, and are reported); auto: start a new run when there is no "
         "checkpoint (for jobs that may be restarted)", 1, 0, RESUME_WORDS},
        {"--batch-size", "-b", ARG_INT, &f->batch_size, "B", "micro-batch size per rank; auto: the largest that fits the memory available "
         "less --memory-margin (the plan's peak, docs/MEMORY.md) and --memory-budget, and divides each rank's share of --total-batch-tokens (needed with auto), "
         "the rest made up by accumulation; chosen once, recorded for --resume", 1, 65536, AUTO_WORD},
        {"--seq-len", "-t", ARG_INT, &f->seq_len, "T", "sequence length", 1, 1 << 20, NULL},
        {"--total-batch-tokens", "-d", ARG_INT64, &f->total_batch_tokens, "N", "tokens per optimizer step (gradient accumulation); 0 = one micro-batch per rank", 0, 1e15, NULL},
        {"--steps", "-x", ARG_INT, &f->steps, "N", "total optimizer steps of the run", 1, 1e9, NULL},
        {"--epochs", NULL, ARG_FLOAT, &f->epochs, "E", "train for E passes over the training data (fractions allowed) instead of --steps; 0 = use --steps", 0, 1e6, NULL},
        {"--stop-after", NULL, ARG_INT, &f->stop_after, "N", "stop after N steps of this invocation with a checkpoint (for time-limited jobs); 0 = run to --steps", 0, 1e9, NULL},
        {"--lr", "-l", ARG_FLOAT, &f->lr, "LR", "peak learning rate", 0, 10, NULL},
        {"--warmup-steps", "-u", ARG_INT, &f->warmup, "N", "linear warmup steps", 0, 1e9, NULL},
        {"--schedule", "-k", ARG_STR, &f->schedule, "NAME", "learning-rate schedule after warmup", 1, 0, SCHED_NAMES},
        {"--final-lr-frac", "-q", ARG_FLOAT, &f->final_lr_frac, "F", "final learning rate as a fraction of --lr", 0, 1, NULL},
        {"--cooldown-frac", NULL, ARG_FLOAT, &f->cooldown_frac, "F", "wsd: fraction of steps spent decaying", 0, 1, NULL},
        {"--weight-decay", "-c", ARG_FLOAT, &f->weight_decay, "WD", "AdamW decoupled weight decay (2-D tensors only)", 0, 10, NULL},
        {"--grad-clip", NULL, ARG_FLOAT, &f->grad_clip, "G", "clip the global gradient norm to G; 0 = off", 0, 1e9, NULL},
        {"--beta1", NULL, ARG_FLOAT, &f->beta1, "B1", "AdamW beta1", 0, 0.999999, NULL},
        {"--beta2", NULL, ARG_FLOAT, &f->beta2, "B2", "AdamW beta2", 0, 0.999999, NULL},
        {"--eps", NULL, ARG_FLOAT, &f->eps, "E", "AdamW epsilon", 0, 1, NULL},
        {"--eval-every", "-v", ARG_INT, &f->eval_every, "N", "evaluate the validation loss every N steps; 0 = only at the end", 0, 1e9, NULL},
        {"--eval-batches", "-m", ARG_STR, &f->eval_batches, "N|all", "validation batches per evaluation; all = the whole validation split, each batch once", 1, 0, NULL},
        {"--keep-best", NULL, ARG_BOOL, &f->keep_best, NULL, "keep the model of the best validation loss in OUT/best/ (saved like the final model; best.json says the step)", 1, 0, NULL},
        {"--early-stopping-patience", NULL, ARG_INT, &f->early_stopping_patience, "N", "stop (saving as at the end) when N evaluations in a row did not lower the best validation loss by more than --early-stopping-min-delta; 0 = off", 0, 1e9, NULL},
        {"--early-stopping-min-delta", NULL, ARG_FLOAT, &f->early_stopping_min_delta, "D", "the drop of the validation loss that counts as an improvement for early stopping", 0, 1e9, NULL},
        {"--save-every", "-n", ARG_INT, &f->save_every, "N", "write a checkpoint every N steps; 0 = only at the end", 0, 1e9, NULL},
        {"--keep-checkpoints", "-nk", ARG_INT, &f->keep_checkpoints, "N", "keep the newest N complete checkpoints; 0 = keep all", 0, 1e9, NULL},
        {"--save-format", NULL, ARG_STR, &f->save_format, "F", "final model: hf (config.json + model.safetensors), llmc (model.bin), both, none", 1, 0, SAVE_FORMATS},
        {"--save-gguf", NULL, ARG_STR, &f->save_gguf, "TYPE", "also write the final model as GGUF for llama.cpp / Ollama, its matmul weights in TYPE: "
         "OUT/model-TYPE.gguf (train_lora: the adapter as a GGUF LoRA adapter OUT/adapter-TYPE.gguf, and with --merge OUT/merged/model-TYPE.gguf); "
         "none: no GGUF", 1, 0, GGUF_TYPES},
        cli_flag_seed(&f->seed),
        {"--shuffle", NULL, ARG_BOOL, &f->shuffle, NULL, "shuffle shard and batch order every epoch (default: sequential)", 1, 0, NULL},
        cli_flag_threads(&f->threads),
        cli_flag_dtype(&f->dtype),
        {"--loss-scale-init", NULL, ARG_FLOAT, &f->loss_scale_init, "S", "--dtype fp16: the loss scale to start from (torch.amp.GradScaler's init_scale): "
         "it halves, and the step is skipped, when the gradients overflow fp16, and doubles after --loss-scale-window clean steps in a row", 1, 1e9, NULL},
        {"--loss-scale-window", NULL, ARG_INT, &f->loss_scale_window, "N", "--dtype fp16: clean steps in a row that double the loss scale (GradScaler's growth_interval)", 1, 1e9, NULL},
        {"--tensorboard", NULL, ARG_STR, &f->tensorboard, "DIR", "also write the numbers of log.jsonl (loss, learning rate, gradient norm, tokens/s, MFU, "
         "val loss, the preference metrics) to a TensorBoard event file in DIR (rank 0), flushed every step: tensorboard --logdir DIR; --resume continues "
         "the file (docs/TRAINING.md)", 1, 0, NULL},
        {"--profile", NULL, ARG_BOOL, &f->profile, NULL, "time every op and print the step split by op at the end (from the second step on; CPU backend)", 1, 0, NULL},
        {"--watchdog-timeout", NULL, ARG_FLOAT, &f->watchdog_timeout, "SECONDS", "end every rank with a message naming the stuck one when a rank makes no progress (stopped, hung GPU, deadlock) for SECONDS beyond the slowest step seen; 0 = off", 0, 1e6, NULL},
        {"--deterministic", NULL, ARG_INT, &f->deterministic, "0|1", "1: kernels give identical results run to run; 0 allows non-deterministic ones (none today: every kernel of both backends is deterministic; llmc/cuda/README.md)", 0, 1, NULL},
        {"--zero", "-z", ARG_INT, &f->zero, "S", "ZeRO stage across ranks: 0 all-reduce gradients, 1 shard optimizer state, 2 shard gradients too, 3 shard the parameters too (FSDP: one unit per block + embedding/head, gathered when used; docs/ZERO.md)", 0, 3, NULL},
        {"--zero3-keep", NULL, ARG_BOOL, &f->zero3_keep, NULL, "with --zero 3: keep the units forward gathered until backward and the step's other micro-steps (one gather per unit per step instead of two per micro-step; memory of a full replica)", 1, 0, NULL},
        {"--shard-group", NULL, ARG_INT, &f->shard_group, "K", "with --zero 3: hybrid sharding, the parameters sharded within groups of K consecutive ranks (e.g. a node) and replicated across groups, whose gradients are all-reduced once per step; 0 = one group of every rank", 0, 1 << 20, NULL},
        {"--offload-optimizer", NULL, ARG_BOOL, &f->offload_optimizer, NULL, "keep the AdamW state (m, v, fp32 master weights) in pinned host memory and run the update on the CPU: frees 12 bytes per trained parameter of GPU memory for a transfer of the gradients and parameters each step (same results)", 1, 0, NULL},
        {"--memory-budget", NULL, ARG_FLOAT, &f->memory_budget, "MIB", "the most MiB this rank's buffers may take at their largest (the memory report's parameters, gradients, optimizer state and activations, start-up and saving included; --plan shows them): --plan's verdict and what fits, and --batch-size auto / --recompute auto, keep within it; a run over it stops at start-up, before loading anything; 0 = no limit", 0, 1e9, NULL},
        {"--memory-margin", NULL, ARG_FLOAT, &f->memory_margin, "F", "the fraction of the memory available (the GPU's free memory; on the CPU the cgroup limit or MemAvailable, shared by the node's ranks) that --batch-size auto, --recompute auto and --plan's options keep free", 0, 0.9, NULL},
        {"--plan", NULL, ARG_BOOL, &f->plan, NULL, "print the run's memory and time plan and exit, loading no weights (it reads the model's config, the data's headers and loss masks, the vocabulary): per rank and component the bytes each buffer takes, the peak and when it comes, the step's FLOPs and predicted time, and the settings that fit the memory available, and the disk the run writes (docs/MEMORY.md); exit status 0 when the run fits (the memory available and --memory-budget), 3 when it does not, 2 when no figure says", 1, 0, NULL},
        {"--recompute", "-r", ARG_INT, &f->recompute, "K", "activation recompute in backward to save memory: 0 none, 1 GELU, 2 GELU and layernorms; auto: the smallest level at which the micro-batch fits (with --batch-size auto: at which B = 1 does)", 0, 2, AUTO_WORD},
        {"--max-skipped-steps", NULL, ARG_INT, &f->max_skipped, "N", "stop after N consecutive steps with a non-finite loss or gradient", 1, 1e9, NULL},
        {"--sample-every", "-s", ARG_INT, &f->sample_every, "N", "print a sampled completion every N steps and at the end; 0 = only at the end, if --sample-tokens > 0", 0, 1e9, NULL},
        {"--sample-tokens", "-g", ARG_INT, &f->sample_tokens, "K", "tokens per sample; 0 = no sampling (64 when --sample-every is set)", 0, 1 << 20, NULL},
        {"--objective", NULL, ARG_STR, &f->objective, "NAME", "training objective: sft (cross-entropy on the targets) or a preference objective on "
         "data/prepare's preference pairs: dpo, ipo (against a reference model), orpo, simpo (reference-free), as TRL defines them (docs/PREFERENCE.md)", 1, 0, PREF_NAMES},
        {"--beta", NULL, ARG_FLOAT, &f->pref_beta, "B", "dpo, ipo, simpo: the temperature beta of the implicit reward (ipo: tau)", 0, 1e6, NULL},
        {"--label-smoothing", NULL, ARG_FLOAT, &f->label_smoothing, "E", "dpo (robust DPO), simpo: the probability that a pair's preference is flipped", 0, 0.499, NULL},
        {"--orpo-lambda", NULL, ARG_FLOAT, &f->orpo_lambda, "L", "orpo: the weight of the odds-ratio term beside the NLL of the chosen completions", 0, 1e6, NULL},
        {"--simpo-gamma", NULL, ARG_FLOAT, &f->simpo_gamma, "G", "simpo: the target reward margin", -1e6, 1e6, NULL},
        {"--ref-model", NULL, ARG_STR, &f->ref_model, "PATH", "dpo, ipo: the reference model, another checkpoint (any --model form); its log-probabilities "
         "of every pair are computed once before training and kept in --out; default: the model before training (train_gpt2: computed once "
         "the same way; train_lora: the base with the adapters off, at every step)", 1, 0, NULL},
        {"--recompute-reference", NULL, ARG_BOOL, &f->recompute_reference, NULL, "dpo, ipo with a stored reference (train_gpt2, or --ref-model): "
         "compute the reference log-probabilities again from the model the run started from (--model, or --ref-model) instead of reading "
         "OUT/ref_logps_*.bin: how a resume whose files are lost or damaged continues (one forward pass over the data); this invocation only", 1, 0, NULL},
    };
    const ArgSpec lora[] = {
        {"--lora-rank", NULL, ARG_INT, &f->lora_rank, "R", "LoRA rank r; 0 = BitFit (with --lora-bias all): no adapter, only the biases train, "
         "and the output is the whole model (docs/TRAINING.md)", 0, 65536, NULL},
        {"--lora-alpha", NULL, ARG_FLOAT, &f->lora_alpha, "A", "LoRA alpha: the branch is scaled by alpha / r (alpha / sqrt(r) with --rslora)", 0, 1e6, NULL},
        {"--lora-dropout", NULL, ARG_FLOAT, &f->lora_dropout, "P", "dropout on the input of the LoRA branch (PEFT lora_dropout)", 0, 0.999, NULL},
        {"--lora-targets", NULL, ARG_STR, &f->lora_targets, "LIST", "layers to adapt, comma list of c_attn, q, k, v (blocks of c_attn), attn.c_proj, mlp.c_fc, mlp.c_proj, c_proj (both projections), all-linear", 1, 0, NULL},
        {"--lora-layers", NULL, ARG_STR, &f->lora_layers, "LIST", "blocks to adapt: all, or indices and ranges like 0-5,8", 1, 0, NULL},
        {"--rslora", NULL, ARG_BOOL, &f->rslora, NULL, "rank-stabilized LoRA: scaling alpha / sqrt(r)", 1, 0, NULL},
        {"--dora", NULL, ARG_BOOL, &f->dora, NULL, "DoRA (PEFT use_dora): a trained magnitude per output of each adapted layer, which scales "
         "the adapted weight's rows to it (over fp32, bf16 or NF4 bases: QDoRA with --qlora; whole layers, no q/k/v split)", 1, 0, NULL},
        {"--lora-bias", NULL, ARG_STR, &f->lora_bias, "B", "also train base biases (PEFT bias=): all = every bias incl. layernorm biases, lora_only = the biases of the adapted layers", 1, 0, LORA_BIAS_NAMES},
        {"--train-ln-f", NULL, ARG_BOOL, &f->train_ln_f, NULL, "also train the final layernorm (PEFT modules_to_save=[\"ln_f\"])", 1, 0, NULL},
        {"--adapter", NULL, ARG_STR, &f->adapter, "DIR", "start from this PEFT adapter (adapter_config.json + adapter_model.safetensors); its targets, ranks and alphas replace the --lora-* flags", 1, 0, NULL},
        {"--init", NULL, ARG_STR, &f->lora_init, "I", "how new adapters start (PEFT init_lora_weights): default = A kaiming-uniform, B = 0; "
         "gaussian = A ~ N(0, 1/r^2), B = 0; pissa = the top-r singular vectors of each weight (SVD), olora = its QR factors, the base "
         "left the residual W - scaling B A (fp32 or bf16 bases; the saved adapter a plain rank-2r LoRA of the original base)", 1, 0, LORA_INIT_NAMES},
        {"--qlora", NULL, ARG_BOOL, &f->qlora, NULL, "QLoRA: hold the frozen matmul weights as NF4 with double quantization (bitsandbytes-compatible, ~4.13 bits per weight), dequantized layer by layer; implied by a 4-bit transformers + bitsandbytes checkpoint", 1, 0, NULL},
        {"--lora-plus-ratio", NULL, ARG_FLOAT, &f->lora_plus_ratio, "R", "LoRA+ (PEFT create_loraplus_optimizer): lora_B, and every trained bias / layernorm, "
         "learn at R times --lr, lora_A at --lr; the schedule scales both; 1 = plain LoRA (docs/TRAINING.md)", 0, 1e6, NULL},
        {"--merge", NULL, ARG_BOOL, &f->merge, NULL, "also save the base with the adapter merged in: OUT/merged/ (transformers dir) and OUT/merged/model.bin (llm.c), per --save-format", 1, 0, NULL},
    };
    const int nc = (int)(sizeof(common) / sizeof(common[0])), nl = (int)(sizeof(lora) / sizeof(lora[0]));
    int n = 0;
    for (int i = 0; i < nc; i++) out[n++] = common[i];
    cli_sample_flags(&f->sample, out + n);
    n += CLI_SAMPLE_NFLAGS;
    for (int i = 0; mode == TRAIN_LORA && i < nl; i++) out[n++] = lora[i];
    assertCheck(n <= RUNCFG_MAX_FLAGS);
    return n;
}

static int is_string(const ArgSpec* s) { return s->type == ARG_STR || s->type == ARG_OPT_STR; }

// Copy every flag string into one allocation owned by the configuration (argv or a JSON tree may
// go away).
static void runconfig_own_strings(RunConfig* rc) {
    ArgSpec specs[RUNCFG_MAX_FLAGS];
    int n = runconfig_specs(&rc->f, rc->mode, specs);
    size_t total = 1;
    for (int i = 0; i < n; i++)
        if (is_string(&specs[i]) && *(const char**)specs[i].dst) total += strlen(*(const char**)specs[i].dst) + 1;
    char* store = (char*)mallocCheck(total);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const char** p = (const char**)specs[i].dst;
        if (!is_string(&specs[i]) || !*p) continue;
        size_t len = strlen(*p) + 1;
        memcpy(store + off, *p, len);
        *p = store + off;
        off += len;
    }
    free(rc->strings);
    rc->strings = store;
}

int runconfig_bitfit(const RunConfig* rc) { return rc->mode == TRAIN_LORA && rc->f.lora_rank == 0 && !rc->f.adapter; }

// LoRA+ and BitFit (--lora-rank 0): the settings they cannot take (DoRA's: runconfig_check_init). 0, or -1 with err and *hint.
static int runconfig_check_lora_variant(const RunConfig* rc, char* err, size_t cap, const char** hint) {
    const TrainFlags* f = &rc->f;
    if (!(f->lora_plus_ratio > 0.0f)) {
        *hint = "give B's learning rate over A's, e.g. --lora-plus-ratio 16 (the LoRA+ paper's choice); 1 trains plain LoRA";
        snprintf(err, cap, "--lora-plus-ratio %g: the ratio of two learning rates must be positive", f->lora_plus_ratio);
        return -1;
    }
    if (!runconfig_bitfit(rc)) return 0;
    *hint = "BitFit is --lora-rank 0 --lora-bias all; for adapters give --lora-rank 1 or more (docs/TRAINING.md)";
    if (f->dora) {
        snprintf(err, cap, "--dora with --lora-rank 0: BitFit has no adapter whose weight DoRA would decompose");
        return -1;
    }
    if (strcmp(f->lora_bias, "all") != 0) {
        snprintf(err, cap, "--lora-rank 0 makes no adapter: only --lora-bias all (BitFit) gives it something to train (got --lora-bias %s)", f->lora_bias);
        return -1;
    }
    if (f->lora_plus_ratio != 1.0f) {
        snprintf(err, cap, "--lora-plus-ratio %g with --lora-rank 0: there is no lora_B whose learning rate it would scale", f->lora_plus_ratio);
        return -1;
    }
    if (f->merge) {
        snprintf(err, cap, "--merge with --lora-rank 0: there is no adapter to merge; the run's output is the whole model already");
        return -1;
    }
    if (pref_uses_reference(pref_objective_parse(f->objective)) && !f->ref_model) {
        *hint = "give the reference with --ref-model PATH (e.g. the --model itself)";
        snprintf(err, cap, "--objective %s with --lora-rank 0: train_lora's reference is the base with the adapters off, and there is no adapter", f->objective);
        return -1;
    }
    return 0;
}

// The flags' checks that need no model; 0, or -1 with the message in err and a hint in *hint.
static int runconfig_check_flags(const RunConfig* rc, char* err, size_t cap, const char** hint) {
    const TrainFlags* f = &rc->f;
    *hint = HINT;
    if (!f->model) { snprintf(err, cap, "--model is required"); return -1; }
    if (!f->train_data && !f->plan) { snprintf(err, cap, "--train-data is required"); return -1; }
    if (cli_sample_check(&f->sample, err, cap)) return -1;
    const int none = f->out_dir && !strcmp(f->out_dir, "none");
    if (f->resume && (!f->out_dir || none)) { snprintf(err, cap, "--resume needs --out DIR (the directory holding the checkpoints)"); return -1; }
    if (none && f->keep_best) { snprintf(err, cap, "--keep-best needs an --out DIR to keep the model in (not --out none)"); return -1; }
    if (rc->mode == TRAIN_FULL && rc->model_4bit) {
        *hint = "fine-tune it with train_lora (QLoRA), or give train_gpt2 the full-precision model";
        snprintf(err, cap, "--model %s: the linear weights are stored 4-bit (bitsandbytes NF4); training every parameter needs them in full precision", f->model);
        return -1;
    }
    if (none && strcmp(f->save_gguf, "none") != 0) { snprintf(err, cap, "--save-gguf needs an --out DIR to write the GGUF file in (not --out none)"); return -1; }
    if (rc->mode != TRAIN_LORA) return 0;
    if (runconfig_check_lora_variant(rc, err, cap, hint)) return -1;
    if (strcmp(f->save_gguf, "none") != 0 && !f->merge && !runconfig_bitfit(rc) && (strcmp(f->lora_bias, "none") != 0 || f->train_ln_f)) {
        *hint = "add --merge: the merged model is written as GGUF instead (OUT/merged/model-TYPE.gguf)";
        snprintf(err, cap, "--save-gguf: a GGUF LoRA adapter cannot carry the base tensors %s trains", f->train_ln_f ? "--train-ln-f" : "--lora-bias");
        return -1;
    }
    GPT2Config scratch;
    if (gpt2_config_from_descriptor(&scratch, f->model) == 0) {
        *hint = "pass a pretrained checkpoint (llm.c .bin, safetensors or a transformers model dir)";
        snprintf(err, cap, "--model %s: LoRA trains adapters on a pretrained base; a model built from scratch has nothing to adapt", f->model);
        return -1;
    }
    return 0;
}

// The length of the run, evaluation, keep-best and early stopping; derives rc->eval_batches.
static int runconfig_check_eval(RunConfig* rc, char* err, size_t cap, const char** hint) {
    const TrainFlags* f = &rc->f;
    *hint = HINT;
    if (f->epochs > 0 && runconfig_given(rc, "--steps")) { snprintf(err, cap, "--steps and --epochs both given: the run's length is one of them"); return -1; }
    // (with --epochs the steps are known once the data is: the trainer checks the warmup then)
    if (f->epochs == 0 && f->warmup > f->steps) { snprintf(err, cap, "--warmup-steps (%d) is larger than --steps (%d)", f->warmup, f->steps); return -1; }
    char* end = NULL;
    long long n = strtoll(f->eval_batches, &end, 10);
    if (!strcmp(f->eval_batches, "all")) rc->eval_batches = 0;
    else if (end != f->eval_batches && !*end && n >= 1 && n <= 1000000000LL) rc->eval_batches = (int)n;
    else { snprintf(err, cap, "--eval-batches: '%s' is not a count from 1 to 1e9, nor all", f->eval_batches); return -1; }
    if (!f->val_data && (f->keep_best || f->early_stopping_patience > 0)) {
        snprintf(err, cap, "%s needs --val-data (it follows the validation loss)", f->keep_best ? "--keep-best" : "--early-stopping-patience");
        return -1;
    }
    if (f->early_stopping_patience > 0 && f->eval_every == 0) {
        snprintf(err, cap, "--early-stopping-patience needs --eval-every N (without it the only evaluation is at the end)");
        return -1;
    }
    return 0;
}

// The preference flags: the objective's number, and the settings that belong to another objective
// or are out of their range (prefloss.h's rules, as TRL has them).
static int runconfig_check_pref(RunConfig* rc, char* err, size_t cap, const char** hint) {
    const TrainFlags* f = &rc->f;
    rc->objective = pref_objective_parse(f->objective);
    *hint = "run with --help, or see docs/PREFERENCE.md: which settings each objective takes";
    const PrefObjective o = (PrefObjective)rc->objective;
    PrefConfig pc = {o, f->pref_beta, f->label_smoothing, f->orpo_lambda, f->simpo_gamma};
    if (pref_config_error(&pc, err, cap)) return -1;
    if (f->ref_model && !pref_uses_reference(o)) {
        snprintf(err, cap, "--ref-model is the reference of --objective dpo and ipo; %s has none", f->objective);
        return -1;
    }
    if (f->recompute_reference && (!pref_uses_reference(o) || (rc->mode == TRAIN_LORA && !f->ref_model))) {
        snprintf(err, cap, "--recompute-reference is for a stored reference (--objective dpo or ipo with train_gpt2, or with --ref-model); %s",
                 !pref_uses_reference(o) ? "this objective has none" : "this run's is the base with the adapters off, computed at every step");
        return -1;
    }
    static const char* const only[] = {"--beta", "--label-smoothing", "--orpo-lambda", "--simpo-gamma"};
    for (int i = 0; o == PREF_SFT && i < 4; i++)
        if (runconfig_given(rc, only[i])) { snprintf(err, cap, "%s is a setting of a preference objective (--objective dpo, ipo, orpo or simpo)", only[i]); return -1; }
    return 0;
}

// --batch-size auto: the global batch must be given, in whole sequences of every rank (the plan
// picks B among its divisors); the micro-steps are derived once B is chosen.
static int runconfig_check_auto_batch(RunConfig* rc, char* err, size_t cap, const char** hint) {
    const TrainFlags* f = &rc->f;
    const int64_t row = (int64_t)f->seq_len * rc->world;
    *hint = "give the global batch with --total-batch-tokens N (a multiple of seq-len x ranks): auto chooses how much of it each micro-step takes";
    if (f->total_batch_tokens <= 0) { snprintf(err, cap, "--batch-size auto needs --total-batch-tokens"); return -1; }
    if (f->total_batch_tokens % row) {
        snprintf(err, cap, "--total-batch-tokens %lld is not a multiple of --seq-len %d x %d ranks = %lld", (long long)f->total_batch_tokens,
                 f->seq_len, rc->world, (long long)row);
        return -1;
    }
    rc->micro_tokens = 0; rc->accum = 0; // (runconfig_resolve)
    rc->tokens_per_step = f->total_batch_tokens;
    return 0;
}

// Tokens per step -> micro-steps, in 64-bit arithmetic with the limits of runconfig.h.
static int runconfig_derive_batch(RunConfig* rc, char* err, size_t cap, const char** hint) {
    const TrainFlags* f = &rc->f;
    if (f->batch_size == ARG_AUTO) return runconfig_check_auto_batch(rc, err, cap, hint);
    const int64_t bt = (int64_t)f->batch_size * f->seq_len;
    *hint = "lower --batch-size or --seq-len";
    if (bt > RUNCFG_MAX_MICRO_TOKENS) {
        snprintf(err, cap, "--batch-size %d x --seq-len %d = %lld tokens per micro-batch; at most %d are supported",
                 f->batch_size, f->seq_len, (long long)bt, RUNCFG_MAX_MICRO_TOKENS);
        return -1;
    }
    rc->micro_tokens = bt * rc->world;
    rc->tokens_per_step = f->total_batch_tokens ? f->total_batch_tokens : rc->micro_tokens;
    *hint = "make --total-batch-tokens a multiple of batch-size x seq-len x ranks";
    if (rc->tokens_per_step % rc->micro_tokens != 0) {
        snprintf(err, cap, "--total-batch-tokens %lld is not a multiple of %d x %d x %d = %lld", (long long)rc->tokens_per_step,
                 f->batch_size, f->seq_len, rc->world, (long long)rc->micro_tokens);
        return -1;
    }
    const int64_t accum = rc->tokens_per_step / rc->micro_tokens;
    *hint = "lower --total-batch-tokens, or raise --batch-size (or the number of ranks)";
    if (accum > RUNCFG_MAX_ACCUM || accum * bt > RUNCFG_MAX_RANK_STEP_TOKENS) {
        snprintf(err, cap, "--total-batch-tokens %lld needs %lld micro-steps of %lld tokens per optimizer step; at most %d micro-steps "
                 "and %lld tokens per rank and step are supported", (long long)rc->tokens_per_step, (long long)accum,
                 (long long)rc->micro_tokens, RUNCFG_MAX_ACCUM, (long long)RUNCFG_MAX_RANK_STEP_TOKENS);
        return -1;
    }
    rc->accum = (int)accum;
    return 0;
}

// --init: its LORA_INIT_* in rc->lora_init, and what it cannot go with (the base-rewriting
// PiSSA / OLoRA need the base in fp32 or bf16, whole layers, and an output that carries the
// conversion to the original base). 0, or -1 with the message.
static int runconfig_check_init(RunConfig* rc, char* err, size_t cap, const char** hint) {
    const TrainFlags* f = &rc->f;
    rc->lora_init = LORA_INIT_DEFAULT;
    for (int i = 0; LORA_INIT_NAMES[i]; i++) if (!strcmp(f->lora_init, LORA_INIT_NAMES[i])) rc->lora_init = i;
    const char* name = LORA_INIT_NAMES[rc->lora_init];
    *hint = "see docs/TRAINING.md (LoRA initialisations)";
    if (rc->lora_init != LORA_INIT_DEFAULT && f->adapter) {
        snprintf(err, cap, "--init %s initialises new adapters; --adapter %s brings its own values", name, f->adapter);
        return -1;
    }
    if (rc->lora_init != LORA_INIT_DEFAULT && f->lora_rank == 0) {
        snprintf(err, cap, "--init %s initialises adapters; --lora-rank 0 (BitFit) has none", name);
        return -1;
    }
    if (f->dora && !f->adapter) {
        *hint = "see docs/TRAINING.md (DoRA)";
        if (lora_init_rewrites_base(rc->lora_init)) {
            snprintf(err, cap, "--dora with --init %s: the adapter PEFT writes for a rewritten base (a plain LoRA of rank 2r) has no DoRA form", name);
            return -1;
        }
        if (rc->lora_targets & (LORA_T_Q | LORA_T_K | LORA_T_V)) {
            snprintf(err, cap, "--dora decomposes whole layers: use --lora-targets c_attn instead of the q, k or v blocks");
            return -1;
        }
        if (rc->save_gguf && !f->merge) {
            snprintf(err, cap, "--save-gguf: a GGUF LoRA adapter (llama.cpp's) has no DoRA magnitude; add --merge to write the merged model");
            return -1;
        }
    }
    if (!lora_init_rewrites_base(rc->lora_init)) return 0;
    if (rc->qlora) {
        snprintf(err, cap, "--init %s rewrites the base weights in fp32; with --qlora (a 4-bit NF4 base) it is not supported", name);
        return -1;
    }
    if (rc->lora_targets & (LORA_T_Q | LORA_T_K | LORA_T_V)) {
        snprintf(err, cap, "--init %s factors whole layers: use --lora-targets c_attn instead of the q, k or v blocks", name);
        return -1;
    }
    if (rc->save_gguf && !f->merge) {
        snprintf(err, cap, "--save-gguf: a GGUF LoRA adapter of --init %s cannot carry its conversion to the original base; add --merge", name);
        return -1;
    }
    if (pref_uses_reference((PrefObjective)rc->objective) && !f->ref_model) {
        snprintf(err, cap, "--objective %s with --init %s: the reference (the base with the adapters off) would be the residual base, "
                 "not the model the run starts from; give it with --ref-model", f->objective, name);
        return -1;
    }
    return 0;
}

int runconfig_derive(RunConfig* rc, int world, char* err, size_t cap, const char** hint) {
    const TrainFlags* f = &rc->f;
    rc->world = world;
    rc->model_4bit = f->model ? qlora_is_hf4bit(f->model) : 0;
    if (runconfig_check_flags(rc, err, cap, hint) || runconfig_check_eval(rc, err, cap, hint) ||
        runconfig_derive_batch(rc, err, cap, hint) || runconfig_check_pref(rc, err, cap, hint)) return -1;
    rc->resume = !f->resume ? RESUME_NO : !strcmp(f->resume, "auto") ? RESUME_AUTO : RESUME_YES;
    rc->write_outputs = !f->out_dir || strcmp(f->out_dir, "none") != 0;
    rc->sample_tokens = f->sample_every > 0 && f->sample_tokens == 0 ? 64 : f->sample_tokens;
    rc->qlora = rc->mode == TRAIN_LORA && (f->qlora || rc->model_4bit);
    rc->schedule = sched_parse(f->schedule);
    rc->save_hf = !strcmp(f->save_format, "hf") || !strcmp(f->save_format, "both");
    rc->save_llmc = !strcmp(f->save_format, "llmc") || !strcmp(f->save_format, "both");
    rc->save_gguf = strcmp(f->save_gguf, "none") != 0;
    rc->lora_bias = LORA_BIAS_NONE;
    for (int i = 0; LORA_BIAS_NAMES[i]; i++) if (!strcmp(f->lora_bias, LORA_BIAS_NAMES[i])) rc->lora_bias = i;
    rc->lora_targets = 0;
    rc->lora_dropout_given = runconfig_given(rc, "--lora-dropout");
    if (rc->mode == TRAIN_LORA && !f->adapter && lora_parse_targets(f->lora_targets, &rc->lora_targets, err, cap)) {
        *hint = "run with --help to see the LoRA targets";
        return -1;
    }
    return rc->mode == TRAIN_LORA ? runconfig_check_init(rc, err, cap, hint) : 0;
}

void runconfig_resolve(RunConfig* rc, int B, int recompute) {
    if (rc->f.batch_size == ARG_AUTO) rc->f.batch_size = B;
    if (rc->f.recompute == ARG_AUTO) rc->f.recompute = recompute;
    char err[1024];
    const char* hint = NULL;
    if (runconfig_derive(rc, rc->world, err, sizeof(err), &hint) != 0) fatal(hint, "%s", err);
}

void runconfig_defaults(RunConfig* rc, TrainMode mode) {
    free(rc->strings);
    memset(rc, 0, sizeof(*rc));
    rc->mode = mode;
    flag_defaults(&rc->f, mode);
    runconfig_own_strings(rc);
}

void runconfig_set_string(RunConfig* rc, const char** flag, const char* value) {
    *flag = value;
    runconfig_own_strings(rc);
}

int runconfig_flag_table(RunConfig* rc, ArgSpec* out) { return runconfig_specs(&rc->f, rc->mode, out); }

void runconfig_copy(RunConfig* dst, const RunConfig* src) {
    *dst = *src;
    dst->strings = NULL; // the strings still point into src's storage: copy them into dst's own
    runconfig_own_strings(dst);
}

void runconfig_parse_args(RunConfig* rc, int argc, char** argv) {
    ArgSpec specs[RUNCFG_MAX_FLAGS];
    int n = runconfig_specs(&rc->f, rc->mode, specs);
    const char* head = rc->mode == TRAIN_FULL
        ? "usage: train_gpt2 --model PATH|dN --train-data GLOB [options]\n       train_gpt2 --resume --out DIR [options]\n\n"
          "Trains every parameter of a GPT-2 model (fine-tuning, or pretraining from scratch with --model d12).\n" RUNCFG_EXIT_HELP
        : "usage: train_lora --model PATH --train-data GLOB [options]\n       train_lora --resume --out DIR [options]\n\n"
          "Trains LoRA adapters on a frozen GPT-2.\n" RUNCFG_EXIT_HELP;
    args_parse(argc, argv, specs, n, head, rc->given);
    runconfig_own_strings(rc);
}

void runconfig_from_args(RunConfig* rc, int argc, char** argv, TrainMode mode, int world) {
    memset(rc, 0, sizeof(*rc));
    runconfig_defaults(rc, mode);
    runconfig_parse_args(rc, argc, argv);
    char err[1024];
    const char* hint = NULL;
    if (runconfig_derive(rc, world, err, sizeof(err), &hint) != 0) fatal(hint, "%s", err);
}

void runconfig_free(RunConfig* rc) {
    free(rc->strings);
    memset(rc, 0, sizeof(*rc));
}

int runconfig_given(const RunConfig* rc, const char* flag) {
    ArgSpec specs[RUNCFG_MAX_FLAGS];
    TrainFlags scratch; // only the names are looked at
    int n = runconfig_specs(&scratch, rc->mode, specs);
    for (int i = 0; i < n; i++) if (!strcmp(specs[i].name, flag)) return rc->given[i];
    return 0;
}

// ----------------------------------------------------------------------------
// JSON

#define RUNCFG_FORMAT "llmc-ft run config"
#define RUNCFG_VERSION 1

// The derived values written to (and checked when reading) the "derived" object.
typedef struct { const char* key; int64_t value; } Derived;
static int runconfig_derived(const RunConfig* rc, Derived* out) {
    const Derived d[] = {
        {"micro_tokens", rc->micro_tokens}, {"tokens_per_step", rc->tokens_per_step}, {"accum", rc->accum},
        {"sample_tokens", rc->sample_tokens}, {"model_4bit", rc->model_4bit}, {"qlora", rc->qlora},
    };
    const int n = (int)(sizeof(d) / sizeof(d[0]));
    for (int i = 0; i < n; i++) out[i] = d[i];
    return n;
}

char* runconfig_to_json(const RunConfig* rc) {
    ArgSpec specs[RUNCFG_MAX_FLAGS];
    TrainFlags f = rc->f; // the writer only reads through the table
    int n = runconfig_specs(&f, rc->mode, specs);
    JsonWriter w;
    jw_init(&w, 1);
    jw_begin_object(&w);
    jw_key(&w, "format"); jw_string(&w, RUNCFG_FORMAT);
    jw_key(&w, "version"); jw_int(&w, RUNCFG_VERSION);
    jw_key(&w, "program"); jw_string(&w, runconfig_program(rc->mode));
    jw_key(&w, "world"); jw_int(&w, rc->world);
    jw_key(&w, "flags"); jw_begin_object(&w);
    for (int i = 0; i < n; i++) args_write_json(&w, &specs[i]);
    jw_end_object(&w);
    jw_key(&w, "given"); jw_begin_array(&w);
    for (int i = 0; i < n; i++) {
        char key[128];
        args_json_key(&specs[i], key, sizeof(key));
        if (rc->given[i]) jw_string(&w, key);
    }
    jw_end_array(&w);
    Derived d[16];
    int nd = runconfig_derived(rc, d);
    jw_key(&w, "derived"); jw_begin_object(&w);
    for (int i = 0; i < nd; i++) { jw_key(&w, d[i].key); jw_int(&w, d[i].value); }
    jw_end_object(&w);
    if (rc->nbase > 0) {
        jw_key(&w, "base_files"); jw_begin_array(&w);
        for (int i = 0; i < rc->nbase; i++) {
            char hex[16];
            snprintf(hex, sizeof(hex), "%08x", (unsigned)rc->base[i].crc);
            jw_begin_object(&w);
            jw_key(&w, "name"); jw_string(&w, rc->base[i].name);
            jw_key(&w, "bytes"); jw_uint(&w, rc->base[i].bytes);
            jw_key(&w, "crc32c"); jw_string(&w, hex);
            jw_end_object(&w);
        }
        jw_end_array(&w);
    }
    jw_end_object(&w);
    size_t len = w.len;
    char* out = (char*)mallocCheck(len + 1);
    memcpy(out, w.buf, len + 1);
    jw_free(&w);
    return out;
}

static int find_flag(const ArgSpec* specs, int n, const char* key) {
    for (int i = 0; i < n; i++) {
        char k[128];
        args_json_key(&specs[i], k, sizeof(k));
        if (!strcmp(k, key)) return i;
    }
    return -1;
}

// The "flags" and "given" members into rc (defaults for missing flags).
static int runconfig_read_flags(RunConfig* rc, const JsonValue* root, char* err, size_t cap) {
    ArgSpec specs[RUNCFG_MAX_FLAGS];
    int n = runconfig_specs(&rc->f, rc->mode, specs);
    const JsonValue* flags = json_get(root, "flags");
    const JsonValue* given = json_get(root, "given");
    if (!flags || flags->type != JSON_OBJECT) { snprintf(err, cap, "no \"flags\" object"); return -1; }
    for (int i = 0; i < flags->n; i++) {
        int k = find_flag(specs, n, flags->keys[i]);
        if (k < 0) { snprintf(err, cap, "flags: unknown member \"%s\" for %s", flags->keys[i], runconfig_program(rc->mode)); return -1; }
        char e[768];
        if (args_set_json(&specs[k], &flags->items[i], e, sizeof(e))) { snprintf(err, cap, "flags: %s", e); return -1; }
    }
    for (int i = 0; given && i < given->n; i++) {
        const char* key = json_as_string(&given->items[i]);
        int k = key ? find_flag(specs, n, key) : -1;
        if (k < 0) { snprintf(err, cap, "given: element %d is not a flag of %s", i, runconfig_program(rc->mode)); return -1; }
        rc->given[k] = 1;
    }
    return 0;
}

// The optional "base_files" member into rc->base.
static int runconfig_read_base(RunConfig* rc, const JsonValue* root, char* err, size_t cap) {
    const JsonValue* files = json_get(root, "base_files");
    if (!files) return 0;
    if (files->type != JSON_ARRAY || files->n > RUNCFG_MAX_BASE_FILES) {
        snprintf(err, cap, "\"base_files\" must be an array of at most %d files", RUNCFG_MAX_BASE_FILES);
        return -1;
    }
    for (int i = 0; i < files->n; i++) {
        const JsonValue* f = &files->items[i];
        const char* name = json_as_string(json_get(f, "name"));
        const char* hex = json_as_string(json_get(f, "crc32c"));
        RunBaseFile* b = &rc->base[i];
        int hex_ok = hex && strlen(hex) == 8;
        for (int k = 0; hex_ok && k < 8; k++) hex_ok = isxdigit((unsigned char)hex[k]) != 0;
        const unsigned long crc = hex_ok ? strtoul(hex, NULL, 16) : 0;
        if (!name || strlen(name) >= sizeof(b->name) || !json_as_uint64(json_get(f, "bytes"), &b->bytes) || !hex_ok) {
            snprintf(err, cap, "base_files[%d] needs \"name\", \"bytes\" and \"crc32c\" (8 hex digits)", i);
            return -1;
        }
        snprintf(b->name, sizeof(b->name), "%s", name);
        b->crc = (uint32_t)crc;
    }
    rc->nbase = files->n;
    return 0;
}

static int runconfig_read(RunConfig* rc, const JsonValue* root, char* err, size_t cap) {
    const char* format = json_as_string(json_get(root, "format"));
    const char* program = json_as_string(json_get(root, "program"));
    int version = 0, world = 0;
    if (!format || strcmp(format, RUNCFG_FORMAT)) { snprintf(err, cap, "not a run configuration (\"format\" is not \"%s\")", RUNCFG_FORMAT); return -1; }
    if (!json_as_int(json_get(root, "version"), &version) || version != RUNCFG_VERSION) {
        snprintf(err, cap, "\"version\" must be %d", RUNCFG_VERSION);
        return -1;
    }
    if (!program || (strcmp(program, "train_gpt2") && strcmp(program, "train_lora"))) {
        snprintf(err, cap, "\"program\" must be \"train_gpt2\" or \"train_lora\"");
        return -1;
    }
    if (!json_as_int(json_get(root, "world"), &world) || world < 1) { snprintf(err, cap, "\"world\" must be a rank count >= 1"); return -1; }
    rc->mode = !strcmp(program, "train_lora") ? TRAIN_LORA : TRAIN_FULL;
    flag_defaults(&rc->f, rc->mode);
    if (runconfig_read_flags(rc, root, err, cap) || runconfig_read_base(rc, root, err, cap)) return -1;
    runconfig_own_strings(rc);
    const char* hint = NULL;
    if (runconfig_derive(rc, world, err, cap, &hint)) return -1;
    const JsonValue* derived = json_get(root, "derived");
    Derived d[16];
    int nd = runconfig_derived(rc, d);
    for (int i = 0; derived && i < nd; i++) {
        int64_t v;
        const JsonValue* x = json_get(derived, d[i].key);
        if (x && (!json_as_int64(x, &v) || v != d[i].value)) {
            snprintf(err, cap, "derived: \"%s\" is recorded as %s but the flags give %lld", d[i].key,
                     json_as_int64(x, &v) ? "another value" : "a non-integer", (long long)d[i].value);
            return -1;
        }
    }
    return 0;
}

int runconfig_from_json(RunConfig* rc, const char* text, size_t len, const char* source, char* err, size_t cap) {
    memset(rc, 0, sizeof(*rc));
    char e[1024];
    JsonValue* root = json_parse(text, len, e, sizeof(e));
    int rcode = -1;
    if (!root) snprintf(err, cap, "'%s': %s", source, e);
    else if (root->type != JSON_OBJECT) snprintf(err, cap, "'%s': not a JSON object", source);
    else if (runconfig_read(rc, root, e, sizeof(e))) snprintf(err, cap, "'%s': %s", source, e);
    else rcode = 0;
    json_free(root);
    if (rcode) runconfig_free(rc);
    return rcode;
}
