// The run configuration of the trainers: every flag, validated, and the values derived from them
// (micro-steps of gradient accumulation, tokens per step, sampling length, QLoRA implied by a 4-bit
// checkpoint, ...). Built once at start-up, parse -> validate -> derive, and read-only afterwards:
// the trainer takes a const RunConfig and never rewrites a flag. The flags keep what was given
// (with the defaults filled in); anything computed from them lives in the derived fields. Two
// flags may be given as `auto` (ARG_AUTO): --batch-size and --recompute; the trainer's plan step
// (llmc/plan/plan_run.h) replaces the word by the value it chose (runconfig_resolve) before the
// configuration becomes read-only, so the run's record holds what the run used.
//
// Sizes and counts are 64-bit with explicit ranges (RUNCFG_MAX_*), so no combination of flags
// wraps: a total batch that would need more micro-steps than RUNCFG_MAX_ACCUM is refused with a
// message naming --total-batch-tokens instead of training nothing.
//
// The configuration converts to JSON and back (runconfig_to_json / runconfig_from_json):
//   {"format": "llmc-ft run config", "version": 1, "program": "train_lora", "world": 2,
//    "flags": {"model": "gpt2", "batch_size": 4, ..., "vocab": null},
//    "given": ["model", "train_data", ...],            // flags that were on the command line
//    "derived": {"tokens_per_step": 8192, "accum": 4, ...},
//    "base_files": [{"name": "model.safetensors", "bytes": 497774208, "crc32c": "1a2b3c4d"}, ...]}
//                                                      // train_lora: the base model's files
// Flag members are named like the flags ("--total-batch-tokens" -> "total_batch_tokens"); reading
// applies the command line's checks to every value and derives again, and the "derived" members
// must then agree with what was written.
#ifndef LLMC_RUNCONFIG_H
#define LLMC_RUNCONFIG_H

#include <stdint.h>
#include "run/cli.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TRAIN_FULL = 0, TRAIN_LORA = 1 } TrainMode;
// --resume: not given, "--resume" (a checkpoint must be there), "--resume auto" (a new run when
// there is none).
typedef enum { RESUME_NO = 0, RESUME_YES = 1, RESUME_AUTO = 2 } ResumeKind;

#define RUNCFG_MAX_FLAGS 96
// Micro-steps of gradient accumulation per optimizer step, and the tokens of one rank's
// micro-batch (B x T): beyond these the host batch buffers or the int row counts of the ops
// would not fit.
#define RUNCFG_MAX_ACCUM (1 << 20)
#define RUNCFG_MAX_MICRO_TOKENS (1 << 24)
// Tokens one rank reads per optimizer step (accum x B x T), held in host memory (8 bytes each).
#define RUNCFG_MAX_RANK_STEP_TOKENS ((int64_t)1 << 31)
// Files of a LoRA run's base model recorded with it (run_config.json "base_files").
#define RUNCFG_MAX_BASE_FILES 16

// Every flag of train_gpt2 / train_lora, as given (defaults filled in). Strings are owned by the
// RunConfig; NULL = not given.
typedef struct {
    const char* model;
    const char* train_data;
    const char* val_data;
    const char* out_dir;         // NULL until given or defaulted (runconfig_set_default_out)
    const char* resume;          // NULL, "yes" or "auto" (RunConfig.resume)
    int batch_size, seq_len;
    int64_t total_batch_tokens;  // 0 = one micro-batch per rank (see RunConfig.tokens_per_step)
    int steps, stop_after;
    float epochs;                // > 0: passes over the training data instead of --steps
    float lr;
    int warmup;
    const char* schedule;
    float final_lr_frac, cooldown_frac;
    float weight_decay, grad_clip, beta1, beta2, eps;
    int eval_every, save_every, keep_checkpoints;
    const char* eval_batches;    // a count or "all" (RunConfig.eval_batches)
    int keep_best;               // OUT/best/: the model of the best validation loss
    int early_stopping_patience; // evaluations without improvement before stopping; 0 = off
    float early_stopping_min_delta;
    int seed, threads, shuffle, max_skipped;
    int zero, recompute, deterministic;
    int profile;                 // --profile: the step split by op at the end
    const char* tensorboard;     // --tensorboard DIR: TensorBoard event files there (NULL: none)
    const char* dtype;           // --dtype fp32|bf16|fp16|auto (resolved by cli_apply_dtype at start-up)
    float loss_scale_init;       // --dtype fp16: the first loss scale (GradScaler's init_scale)
    int loss_scale_window;       // ... clean steps that double it (GradScaler's growth_interval)
    int zero3_keep;              // --zero 3: keep gathered units from forward to backward
    int shard_group;             // --zero 3: shard within groups of this many ranks; 0 = all
    float memory_budget;         // MiB per rank the plan's peak must fit in; 0 = none
    float memory_margin;         // the fraction of the memory available auto sizes keep free
    int plan;                    // --plan: print the run's plan and exit
    int offload_optimizer;       // AdamW state in pinned host memory, the update on the CPU
    float watchdog_timeout;      // seconds beyond the slowest step (llmc/comm/comm.h); 0 = off
    const char* save_format;
    const char* save_gguf;       // --save-gguf TYPE (none: no GGUF)
    // sampling (rank 0 prints a completion during / after training)
    int sample_every, sample_tokens;
    SampleFlags sample;
    // preference objectives (llmc/model/prefloss.h; sft: the cross-entropy of supervised training)
    const char* objective;       // --objective sft|dpo|ipo|orpo|simpo
    float pref_beta;             // --beta
    float label_smoothing, orpo_lambda, simpo_gamma;
    const char* ref_model;       // --ref-model: DPO / IPO's reference, another model (NULL: see llmc/run/preftrain.h)
    int recompute_reference;     // --recompute-reference: the stored reference computed again (this invocation)
    // LoRA (train_lora only)
    int lora_rank;
    float lora_alpha, lora_dropout;
    const char* lora_targets;
    const char* lora_layers;
    int rslora, dora, merge, train_ln_f;
    const char* adapter;
    const char* lora_bias;
    int qlora;
    const char* lora_init;       // --init default|gaussian|pissa|olora
    float lora_plus_ratio;       // --lora-plus-ratio: LoRA+, B's learning rate over A's (1: off)
} TrainFlags;

// One file of the base model as it was when the run started: the adapter in a LoRA checkpoint is
// an adapter of exactly these weights (llmc/run/runrecord.h checks them on resuming).
typedef struct {
    char name[256];              // relative to the directory of --model ("model.safetensors")
    uint64_t bytes;
    uint32_t crc;                // CRC-32C of the whole file
} RunBaseFile;

typedef struct {
    TrainMode mode;
    TrainFlags f;                // the flags (read-only after runconfig_from_args)
    unsigned char given[RUNCFG_MAX_FLAGS]; // by flag table index: 1 = on the command line
    int world;                   // ranks the configuration was derived for
    // ---- derived
    ResumeKind resume;           // --resume
    int write_outputs;           // 0 with --out none: no record, log, checkpoint or model
    int eval_batches;            // validation batches per evaluation; 0 = the whole split
    int64_t micro_tokens;        // batch_size x seq_len x world: one micro-step of every rank
    int64_t tokens_per_step;     // --total-batch-tokens, or micro_tokens when it is 0
    int accum;                   // micro-steps per optimizer step
    int sample_tokens;           // tokens per sample: --sample-tokens, 64 if only --sample-every
                                 // is given; 0 = no sampling
    int model_4bit;              // --model is a transformers + bitsandbytes 4-bit checkpoint
    int qlora;                   // NF4 base weights: --qlora or a 4-bit checkpoint
    int schedule;                // SchedKind of --schedule
    int lora_bias;               // LORA_BIAS_* of --lora-bias
    int lora_init;               // LORA_INIT_* of --init
    unsigned lora_targets;       // LORA_T_* of --lora-targets
    int lora_dropout_given;      // --lora-dropout replaces the --adapter's own lora_dropout
    int save_hf, save_llmc;      // --save-format
    int save_gguf;               // --save-gguf other than none
    int objective;               // PrefObjective of --objective (PREF_SFT: supervised)
    // ---- recorded with the run (not derived from the flags): train_lora's base files
    int nbase;
    RunBaseFile base[RUNCFG_MAX_BASE_FILES];
    char* strings;               // storage of the flag strings
} RunConfig;

// Parse argv for mode, validate and derive for `world` ranks: runconfig_defaults, then
// runconfig_parse_args, then runconfig_derive. Fatal with a message naming the flag on anything
// wrong; --help prints the flags and exits 0.
void runconfig_from_args(RunConfig* rc, int argc, char** argv, TrainMode mode, int world);
void runconfig_free(RunConfig* rc);

// The steps, for callers that start from a recorded configuration (runconfig_from_json) and let
// the command line override it: every flag at its default (rc must be zeroed or hold a
// configuration); the command line's flags over what rc holds (given[] then marks exactly
// those); the checks and derived values for `world` ranks (0, or -1 with the message in err and
// a hint in *hint).
void runconfig_defaults(RunConfig* rc, TrainMode mode);
void runconfig_parse_args(RunConfig* rc, int argc, char** argv);
// Before runconfig_derive: set a string flag (a member of rc->f) to a copy of value; e.g. the
// output directory when --out was not given, or a path made absolute.
void runconfig_set_string(RunConfig* rc, const char** flag, const char* value);
int runconfig_derive(RunConfig* rc, int world, char* err, size_t errcap, const char** hint);
// --batch-size auto / --recompute auto resolved to B and recompute (the values the plan chose; a
// flag given as a number keeps it), and the derived values (accumulation) made again. Fatal
// with the message of the flags on a value they refuse.
void runconfig_resolve(RunConfig* rc, int B, int recompute);
// Whether a flag ("--lora-rank") was given on the command line.
int runconfig_given(const RunConfig* rc, const char* flag);
const char* runconfig_program(TrainMode mode); // "train_gpt2" / "train_lora"
// train_lora --lora-rank 0 (without --adapter): BitFit, no adapter, only the biases train.
int runconfig_bitfit(const RunConfig* rc);
// The flag table of rc's mode, pointing into rc->f (at most RUNCFG_MAX_FLAGS entries; returns
// the count). The order is that of rc->given.
int runconfig_flag_table(RunConfig* rc, ArgSpec* out);
// A deep copy (the strings too); free both.
void runconfig_copy(RunConfig* dst, const RunConfig* src);

// JSON text of the configuration (malloc'd, NUL-terminated; pretty-printed).
char* runconfig_to_json(const RunConfig* rc);
// Read a configuration written by runconfig_to_json. `source` names it in messages (a path).
// Returns 0, or -1 with the reason in err (nothing to free then).
int runconfig_from_json(RunConfig* rc, const char* text, size_t len, const char* source, char* err, size_t errcap);

#ifdef __cplusplus
}
#endif
#endif // LLMC_RUNCONFIG_H
