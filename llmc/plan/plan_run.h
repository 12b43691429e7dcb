// The trainers' plan step (docs/MEMORY.md): right after the backend starts, before anything is
// loaded, this rank's memory and time plan (llmc/plan/memplan.h) made from the run's flags and the
// model's config. It chooses --batch-size auto and --recompute auto (the same on every rank: what
// fits the tightest one), prints the plan and ends the run with --plan, and refuses a run whose
// planned peak exceeds the GPU's free memory or whose buffers exceed --memory-budget, naming the
// peak, when it comes and the settings that fit. One accounting: the same plan is the start-up
// memory report (plan_run_report), and after the first step it is set beside what the process
// measured (plan_run_after_step: cudaMemGetInfo on a GPU, the peak resident set on the CPU).
#ifndef LLMC_PLAN_RUN_H
#define LLMC_PLAN_RUN_H

#include <stddef.h>
#include "comm/comm.h"
#include "plan/memplan.h"
#include "run/runconfig.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    Plan plan;              // this rank's plan of the run as configured (auto resolved)
    size_t avail;           // the memory this rank may take (0: unknown): a GPU's free memory, or the
    const char* avail_what; // host's (the cgroup limit or MemAvailable) shared by the node's ranks
    size_t dev_free0;       // a GPU's free memory when the plan was made (before the model)
    size_t dev_total;
    size_t buffers_max;     // the largest plan.peak_buffers of the ranks
    int rank, world;
    long resume_step;       // the checkpoint the run resumes from (-1: none)
    int exit_status;        // --plan's: PLAN_EXIT_* of the ranks' verdicts, the worst
} RunPlan;

// --plan's exit status, for scripts: the run fits (the memory available, and --memory-budget when
// given, on every rank); no figure says (the memory available is unknown and no --memory-budget
// is given); it does not fit (on some rank). An error (a bad flag, an unreadable model) exits 1,
// as always.
#define PLAN_EXIT_FITS 0
#define PLAN_EXIT_UNKNOWN 2
#define PLAN_EXIT_DOES_NOT_FIT 3

// The plan of this rank's run; rc's --batch-size auto / --recompute auto are resolved in it
// (runconfig_resolve), collectively. resume_step: the checkpoint the run resumes from (-1: none).
// Returns 1 when the run ends here (--plan: the plan printed by rank 0; the process then exits
// with rp->exit_status). Fatal, before anything is loaded, when a GPU's free memory or
// --memory-budget is too small for the run.
int plan_run_start(RunPlan* rp, RunConfig* rc, Comm* comm, long resume_step);
// The start-up memory report (rank 0): the plan's components as params, grads, optimizer and
// activations ("memory (this rank): ... | total X MiB"), then the peak and the memory available.
void plan_run_report(const RunPlan* rp, const RunConfig* rc);
// After the first step of an invocation (rank 0): what the process holds, measured, beside the
// plan ("memory after step 1: measured X MiB (how) | plan Y MiB (what)").
void plan_run_after_step(const RunPlan* rp);

#ifdef __cplusplus
}
#endif
#endif // LLMC_PLAN_RUN_H
