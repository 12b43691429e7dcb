// CPU backend: the per-op time tally behind --profile (ops_profile in llmc/ops/ops.h). dispatch.c
// times each op call it forwards while the tally is on; the CPU ops are synchronous, so a call's
// wall time is the op's time. Matmuls are kept apart by shape (C -> OC), the rest by name.
#ifndef LLMC_CPU_PROFILE_H
#define LLMC_CPU_PROFILE_H

#include "base/timer.h"

#ifdef __cplusplus
extern "C" {
#endif

extern int cpu_prof_on;
void cpu_prof_add(const char* op, int C, int OC, double seconds);
void cpu_ops_profile(int on);
void cpu_ops_profile_print(long steps);

// Run stmt, timed under op (and shape C -> OC; 0, 0 for other ops) while the tally is on.
#define CPU_PROF(op, C, OC, stmt) do { \
        if (!cpu_prof_on) { stmt; break; } \
        double t0_ = timer_now_s(); stmt; cpu_prof_add(op, C, OC, timer_now_s() - t0_); } while (0)

#ifdef __cplusplus
}
#endif
#endif // LLMC_CPU_PROFILE_H
