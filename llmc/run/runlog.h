// What a training run reports: a console line and a log.jsonl object per step and per
// evaluation, and a summary at the end. Rank 0 writes; on the other ranks every call does nothing.
//
// OUT/log.jsonl, one object per line (non-finite numbers are written as null):
//   {"step": 12, "train_loss": 3.95, "lr": 0.0004, "grad_norm": 0.87, "epoch": 0.26,
//    "ms": 35.3, "tok_per_s": 3631.0, "tflops": 0.1, "mfu": 0.0012, "elapsed_s": 4.2}
//                                  (tflops: model TFLOP/s per rank; mfu: its fraction of the
//                                  device's peak, null when the peak is unknown)
//   ... "skipped": true            the loss or the gradient was not finite: no update
//   {"step": 12, "no_targets": true, "lr": ..., "epoch": ..., ...}
//                                  every target of the step was masked: no update
//   {"step": 12, "val_loss": 4.84, "val_ppl": 126.5}
// With a preference objective (--objective dpo|ipo|orpo|simpo; llmc/model/prefloss.h) the step's
// object adds TRL's metrics of the step's pairs under TRL's names, "rewards/chosen",
// "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected"
// (orpo also "nll_loss", "log_odds_ratio", "log_odds_chosen"), and an evaluation's object has
// "val_loss" (the objective's loss on the held-out pairs) and the same metrics prefixed "val_"
// ("val_rewards/accuracies"), without a perplexity.
// elapsed_s counts from the start of this invocation's training. A line that cannot be written
// (a full disk, a file system gone read-only) stops the run with an error naming log.jsonl and
// the reason: a log with holes would pass for a complete one. A run resumed from the
// checkpoint of step S keeps the lines logged up to that checkpoint and drops those a crash left
// after it, and the evaluation at S where the resumed run evaluates at S again (those steps are
// trained, evaluated and logged again); a line says what was dropped and what of it runs again.
// With --tensorboard DIR each line of log.jsonl is also an event of TensorBoard scalars (its
// numbers that are not null, tagged as HF Trainer tags them: docs/TRAINING.md) in the run's event
// file (llmc/run/tfevents.h), flushed with the line and cut back the same way on resume.
#ifndef LLMC_RUNLOG_H
#define LLMC_RUNLOG_H

#include <stdint.h>
#include <stdio.h>
#include "base/fileio.h"
#include "model/prefloss.h"
#include "run/tfevents.h"

#ifdef __cplusplus
extern "C" {
#endif

// One optimizer step as the trainer saw it.
typedef struct {
    double loss, norm;
    float lr;
    int skipped;        // non-finite loss or gradient: no update
    int no_targets;     // every target of the step masked: no update (loss and norm 0)
    const PrefMeans* pref; // a preference objective's metrics of the step (NULL: cross-entropy)
    float loss_scale;   // --dtype fp16: the loss scale the step ran with (0: none)
    int overflow;       // ... and its gradients overflowed: skipped, the scale halved
    long skipped_total; // ... steps skipped so far, this one included
} StepResult;

typedef struct {
    FILE* fp;                 // OUT/log.jsonl (rank 0), else NULL
    char path[LLMC_PATH_MAX];
    int console;              // rank 0
    int steps;                // the run's length
    double steps_per_epoch;   // optimizer steps per pass over the training data
    int64_t tokens_per_step;
    double step_flops;        // model FLOPs of one step on this rank (llmc/base/mfu.h) ...
    double peak_flops;        // ... and the device's peak bf16 FLOP/s; 0: unknown, MFU "n/a"
    double t0;                // start of this invocation's training (timer_now_s)
    long step0;               // the step it started from
    int has_val, eval_every;  // the run's evaluations: --val-data given, every eval_every steps (0: at the end only)
    PrefObjective objective;  // PREF_SFT: losses are cross-entropies (with a perplexity)
    TfWriter tb;              // --tensorboard (rank 0): the run's event file; tb.fp NULL: none
} RunLog;

// What the summary at the end says.
typedef struct {
    long step;                // steps done
    const char* ending;       // "finished", "stopped early: ...", ...
    int has_val;              // an evaluation happened
    double final_val;         // the last evaluation ...
    long final_val_step;
    double best_val;          // ... and the best one
    long best_step;
    const char* out_dir;      // NULL: --out none
    int final_written;        // the final model is in out_dir
    const char* best_dir;     // NULL: none written
} RunSummary;

// Opens dir/log.jsonl for the run: a new one, or after resume_step >= 0 the existing one cut back
// to what was logged up to that checkpoint (rewritten atomically when a crash left more). dir
// NULL (--out none): the console only. tb_dir (--tensorboard; NULL: none): the run's event file
// there, new, or after resume_step >= 0 the newest one there cut back the same way.
void runlog_open(RunLog* l, const char* dir, const char* tb_dir, int rank, long resume_step);
void runlog_step(RunLog* l, long step, const StepResult* s, double seconds);
// pref: a preference objective's metrics on the held-out pairs (NULL: cross-entropy).
void runlog_eval(RunLog* l, long step, double val_loss, const PrefMeans* pref);
void runlog_summary(const RunLog* l, const RunSummary* s);
void runlog_close(RunLog* l);

#ifdef __cplusplus
}
#endif
#endif // LLMC_RUNLOG_H
