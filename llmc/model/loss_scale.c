// Dynamic loss scaling (llmc/model/loss_scale.h): GradScaler's update rule, in fp32.
#include <math.h>
#include "model/loss_scale.h"

void loss_scale_init(LossScale* s) {
    s->scale = 65536.0f;
    s->growth_tracker = 0;
    s->growth_interval = 2000;
    s->growth = 2.0f;
    s->backoff = 0.5f;
    s->skipped = 0;
}

// GradScaler computes the reciprocal in double and rounds it to fp32
static float loss_scale_inv(const LossScale* s) { return (float)(1.0 / (double)s->scale); }

// After a step's gradients (found_inf: any is inf or NaN): 1 when the optimizer step runs
static int loss_scale_update(LossScale* s, int found_inf) {
    if (found_inf) {
        s->scale *= s->backoff;
        s->growth_tracker = 0;
        s->skipped++;
        return 0;
    }
    if (++s->growth_tracker >= s->growth_interval) { // (>=: a resumed run may have a shorter interval)
        const float grown = s->scale * s->growth;
        if (isfinite(grown)) s->scale = grown;
        s->growth_tracker = 0;
    }
    return 1;
}

int loss_scale_step(LossScale* s, int loss_bad, double* norm, float* unscale) {
    *unscale = loss_scale_inv(s);
    if (isfinite(*norm)) *norm *= *unscale;
    return loss_scale_update(s, loss_bad || !isfinite(*norm));
}

int loss_scale_collapsed(const LossScale* s) { return s->scale < 1.0f; }
