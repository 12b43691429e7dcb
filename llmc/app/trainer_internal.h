// The training run's state, shared by the files of the trainer: llmc/app/trainer.c (set-up, the
// loop, the end of the run), llmc/app/trainer_ckpt.c (checkpoints: saving and restoring the
// training state, --keep-best) and llmc/app/trainer_report.c (the report printed before training).
// The programs include llmc/app/trainer.h only.
#ifndef LLMC_TRAINER_INTERNAL_H
#define LLMC_TRAINER_INTERNAL_H

#include "run/runconfig.h"
#include "comm/comm.h"
#include "dist/gradsync.h"
#include "model/loss_scale.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "model/sampler.h"
#include "model/schedule.h"
#include "run/dataloader.h"
#include "plan/plan_run.h"
#include "run/preftrain.h"
#include "run/run_outputs.h"
#include "run/runlog.h"
#include "run/runrecord.h"
#include "text/tokenizer.h"
#include <stdio.h>

// The validation loss across evaluations: the best one (--keep-best) and the evaluations since
// it last improved by more than --early-stopping-min-delta (early stopping).
typedef struct {
    int has_best;
    double best;
    long best_step;
    long since_improved;
} ValTrack;

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
    int64_t eval_batches;      // validation batches per evaluation (global batches of the split)
    int *inputs, *targets;     // host, accum * B * T
    int* docs;                 // host, accum * B * T: record starts of packed data (NULL: none packed)
    LRSchedule sched;
    long step;                 // optimizer steps completed
    long skipped_total;        // steps skipped for a non-finite loss or gradient (whole run)
    long no_target_total;      // steps without a target (whole run)
    long consecutive_bad;      // ... in a row, up to now
    long ckpt_last;            // the newest checkpoint: written by this invocation or resumed from; -1
    int ckpt_last_here;        // ... written by this invocation
    int ckpt_last_good;        // ... and a finite step came after it (its weights give finite steps)
    int state_nonfinite;       // the last checkpoint was refused: a weight or optimizer value is not finite
    long ckpt_good;            // the newest checkpoint known good; -1 (pruning never removes it)
    long steps_this_run;       // steps of this invocation (--stop-after)
    int steps;                 // the run's length: --steps, or --epochs over the training data
    RunStart start;            // the checkpoint this invocation resumes from, the record, changes
    RunLog rl;                 // console lines, log.jsonl, the summary
    ValTrack vtrack;           // the best validation loss so far (kept in checkpoints) ...
    ValTrack vtrack_pre;       // ... and as it was before the evaluation at step vtrack_pre_step
    long vtrack_pre_step;
    double last_val;           // the last evaluation (has_last_val)
    long last_val_step;
    int has_last_val;
    int early_stopped;
    RunOutputs out;            // what the run writes for people and tools (llmc/run/run_outputs.h)
    RunPlan plan;              // the run's memory and time plan (llmc/plan/plan_run.h)
    int pref_on;               // a preference objective (--objective dpo|ipo|orpo|simpo) ...
    PrefTrain pref;            // ... its buffers and reference (llmc/run/preftrain.h)
    PrefMeans pref_step, pref_val; // the last step's and evaluation's metrics
    // sampling (rank 0)
    Tokenizer* tok;
    int* prompt_ids;
    int n_prompt;
    KVCache* kv;
    char dtype_desc[160];      // --dtype as applied, for the banner
    int fp16;                  // --dtype fp16: the loss is scaled (ls), overflowing steps skipped
    LossScale ls;
    int scale_collapsed;       // the run stops: the loss scale fell below 1
} Run;

// Console output comes from rank 0 only.
#define say(r, ...) do { if ((r)->rank == 0) { printf(__VA_ARGS__); fflush(stdout); } } while (0)

// ---- checkpoints (llmc/app/trainer_ckpt.c)

// A checkpoint of this step, when the state allows one. Returns whether this step has a checkpoint.
int trainer_save_checkpoint(Run* r);
// A finite step after the newest checkpoint: its weights are good.
void trainer_confirm_checkpoint(Run* r);
// The training state of the checkpoint of `step` in --out: optimizer, step, counters, data position.
void trainer_restore_checkpoint(Run* r, long step);
// --keep-best: the model of the best validation loss so far into OUT/best/ (rank 0).
void trainer_save_best(Run* r);

// ---- the report printed before training (llmc/app/trainer_report.c)

// The backend, dtype, model, adapters, trainable parameters, data, ranks and batch.
void trainer_report_model(Run* r);
// The MFU inputs of the step line (r->rl), and their line.
void trainer_setup_mfu(Run* r);
// The memory: NF4 base, optimizer offload, the plan's components, the sharding.
void trainer_report_memory(Run* r);

#endif // LLMC_TRAINER_INTERNAL_H
