// CPU backend: the per-op time tally (llmc/cpu/profile.h) and its table.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu/profile.h"
#include "cpu/ops_cpu.h"

#define PROF_MAX 64   // distinct (op, shape) entries: a GPT-2 step has ~30

typedef struct { const char* op; int C, OC; long calls; double s; } ProfEntry;
static ProfEntry prof[PROF_MAX];
static int n_prof;
int cpu_prof_on;

void cpu_prof_add(const char* op, int C, int OC, double seconds) {
    for (int i = 0; i < n_prof; i++)
        if (strcmp(prof[i].op, op) == 0 && prof[i].C == C && prof[i].OC == OC) { prof[i].calls++; prof[i].s += seconds; return; }
    if (n_prof == PROF_MAX) return; // more shapes than a step has (generation): the rest go untimed
    prof[n_prof++] = (ProfEntry){op, C, OC, 1, seconds};
}

void cpu_ops_profile(int on) {
    cpu_prof_on = on;
    n_prof = 0;
}

static int by_time(const void* a, const void* b) {
    double x = ((const ProfEntry*)a)->s, y = ((const ProfEntry*)b)->s;
    return x < y ? 1 : x > y ? -1 : 0;
}

void cpu_ops_profile_print(long steps) {
    if (steps < 1) steps = 1;
    double total = 0;
    for (int i = 0; i < n_prof; i++) total += prof[i].s;
    qsort(prof, (size_t)n_prof, sizeof(prof[0]), by_time);
    printf("profile: time per step by op over %ld step%s (%s GEMMs)\n", steps, steps == 1 ? "" : "s",
           cpu_ops_gemm_dtype() == OPS_BF16 ? "bf16" : cpu_ops_gemm_dtype() == OPS_F16 ? "fp16" : "fp32");
    printf("  %-38s %10s %9s %7s\n", "op", "ms/step", "calls", "share");
    for (int i = 0; i < n_prof; i++) {
        char name[64];
        if (prof[i].OC) snprintf(name, sizeof(name), "%s %d->%d", prof[i].op, prof[i].C, prof[i].OC);
        else snprintf(name, sizeof(name), "%s", prof[i].op);
        printf("  %-38s %10.1f %9.1f %6.1f%%\n", name, prof[i].s * 1e3 / (double)steps,
               (double)prof[i].calls / (double)steps, total > 0 ? 100.0 * prof[i].s / total : 0.0);
    }
    printf("  %-38s %10.1f\n", "all ops", total * 1e3 / (double)steps);
}
