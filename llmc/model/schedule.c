#include "model/schedule.h"
#include <math.h>
#include <string.h>

const char* const SCHED_NAMES[] = {"cosine", "linear", "constant", "wsd", NULL};

int sched_parse(const char* name) {
    for (int i = 0; SCHED_NAMES[i]; i++) if (strcmp(name, SCHED_NAMES[i]) == 0) return i;
    return -1;
}
const char* sched_name(SchedKind k) { return SCHED_NAMES[k]; }

float sched_lr(const LRSchedule* s, int step) {
    const double lr = s->lr, lr_min = s->lr * s->final_frac;
    if (step < s->warmup) return (float)(lr * (step + 1) / s->warmup);
    if (s->kind == SCHED_CONSTANT) return (float)lr;
    int span = s->total - s->warmup;
    double ratio = span > 0 ? (double)(step - s->warmup) / span : 1.0;
    if (ratio > 1.0) ratio = 1.0;
    switch (s->kind) {
    case SCHED_COSINE:
        return (float)(lr_min + 0.5 * (1.0 + cos(M_PI * ratio)) * (lr - lr_min));
    case SCHED_LINEAR:
        return (float)(lr - (lr - lr_min) * ratio);
    case SCHED_WSD: {
        int cool = (int)lround(s->cooldown_frac * s->total);
        int cool_start = s->total - cool;
        if (step < cool_start || cool <= 0) return (float)lr;
        double r = (double)(step - cool_start) / cool;
        if (r > 1.0) r = 1.0;
        return (float)(lr - (lr - lr_min) * r);
    }
    default:
        return (float)lr;
    }
}
