// Learning-rate schedules, each with a linear warmup: cosine, linear, constant, wsd
// (warmup-stable-decay: constant, then a linear cooldown over the last `cooldown_frac` of steps).
#ifndef LLMC_SCHEDULE_H
#define LLMC_SCHEDULE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SCHED_COSINE = 0, SCHED_LINEAR, SCHED_CONSTANT, SCHED_WSD } SchedKind;

typedef struct {
    SchedKind kind;
    float lr;             // peak learning rate
    int warmup;           // warmup steps (linear from lr/warmup to lr)
    int total;            // total steps of the run
    float final_frac;     // final lr = lr * final_frac (cosine, linear, wsd)
    float cooldown_frac;  // wsd: fraction of steps spent decaying
} LRSchedule;

// The schedule names in SchedKind order, NULL-terminated (the --schedule choices).
extern const char* const SCHED_NAMES[];
// Parse "cosine" | "linear" | "constant" | "wsd"; -1 if unknown.
int sched_parse(const char* name);
const char* sched_name(SchedKind k);
// Learning rate of step `step` (0-based).
float sched_lr(const LRSchedule* s, int step);

#ifdef __cplusplus
}
#endif
#endif // LLMC_SCHEDULE_H
