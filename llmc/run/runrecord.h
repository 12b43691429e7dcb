// The run directory's record of its settings, and what a resumed run takes from it.
//
// A run writes its resolved configuration (llmc/run/runconfig.h, JSON) to OUT/run_config.json when it
// starts, atomically, and again when a resumed run changed a setting. `--resume --out OUT` needs
// no other flag: the settings come from that record. A flag given with --resume overrides the
// recorded value where the checkpoint keeps its meaning, and every such change is reported:
//   - schedule (--steps, --epochs, --lr, --warmup-steps, --schedule, ...): allowed; the trainer
//     prints the learning rate the next step gets with the recorded and with the new schedule,
//     so a changed schedule never makes the rate jump unnoticed;
//   - optimizer settings (--weight-decay, --grad-clip, betas, eps, --lora-dropout, ...): allowed;
//   - cadence and outputs (--eval-every, --save-every, sampling, --save-format, --threads, --zero,
//     ...): allowed;
//   - what the checkpoint is a checkpoint of (--model, the data, the batch geometry the data
//     position counts in, --seed / --shuffle, the LoRA structure): refused with the reason.
// --resume, --stop-after and --recompute-reference belong to one invocation and are not taken from
// the record.
// Besides the flags the record holds what a resume must find again: the global batch in tokens
// (total_batch_tokens, filled in from the ranks that started the run when the flag was not
// given), so that a resume on other ranks keeps it by accumulation (a rank count that cannot is
// refused naming those that can); and for train_lora the base model's files (size, CRC-32C),
// compared on resuming (a replaced base is refused naming the file).
// Before anything in --out is read, the job locks it (llmc/run/runlock.h). --plan (which writes
// nothing and reads no weights) takes no lock, verifies no checkpoint and measures no base file.
#ifndef LLMC_RUNRECORD_H
#define LLMC_RUNRECORD_H

#include "comm/comm.h"
#include "run/runconfig.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RUNRECORD_FILE "run_config.json"

typedef enum {
    CHANGE_REFUSED,     // alters what the checkpoint means
    CHANGE_SCHEDULE,    // the learning-rate schedule or the run's length
    CHANGE_OPTIMIZER,   // AdamW / regularisation settings from the next step on
    CHANGE_HARMLESS,    // evaluation, checkpoints, sampling, outputs, resources
    CHANGE_INVOCATION,  // not recorded for the next invocation (--out, --resume, --stop-after)
} ChangeKind;

typedef struct {
    char flag[48];        // "--steps"
    char before[256];     // the recorded value, as text
    char after[256];      // the value of this invocation
    ChangeKind kind;
} RunChange;

typedef struct {
    int n;
    RunChange items[RUNCFG_MAX_FLAGS];
} RunChanges;
// rc to rc->f.out_dir/run_config.json, atomically.
void runrecord_write(const RunConfig* rc);

// What an invocation runs: its configuration and the checkpoint it continues from.
typedef struct {
    long resume_step;     // the checkpoint resumed from; -1: a new run
    int has_rec;          // resumed with a record: rec is it, changes what the command line changed
    RunConfig rec;
    RunChanges changes;
} RunStart;

// The configuration of this invocation into rc (derived for the communicator's ranks): the
// command line; or with --resume and a checkpoint in --out, the run's record with the command
// line over it (fatal when the record belongs to the other trainer or a flag would change what
// the checkpoint means, naming the flag, both values and why). A new run without --out gets
// out/<program>-<date>-<time> (-2, ... when taken), printed by rank 0. --resume with nothing to
// resume is fatal, --resume auto then starts a new run.
void runrecord_start(RunStart* st, RunConfig* rc, Comm* comm, int argc, char** argv, TrainMode mode);
void runrecord_start_free(RunStart* st);

// The files `model` loads its weights from (runconfig.h's RunBaseFile: names relative to its
// directory, size, CRC-32C; up to RUNCFG_MAX_BASE_FILES), as train_lora records its base's: their
// count (0 for a size descriptor such as d12), or -1 with the first missing file's path in missing.
int runrecord_model_files(const char* model, RunBaseFile* out, char* missing, size_t cap);

// How changing a flag (its JSON key, "lora_rank") on resume is treated, and why a refused one is;
// -1 for a key no rule covers (then it is refused).
int runrecord_change_kind(const char* key, ChangeKind* kind, const char** why);

#ifdef __cplusplus
}
#endif
#endif // LLMC_RUNRECORD_H
