// Dynamic loss scaling (llmc/model/loss_scale.c) against torch.amp.GradScaler: the gradients of
// test/ref/grad_scaler/trajectory.txt (dev/gen_grad_scaler_ref.py) replayed step by step on one
// parameter (SGD, lr 0.5, gradient 0.25 unscaled), and after each step GradScaler's found-inf,
// skip, scale, growth tracker and parameter, all exact: the defaults, a short growth interval
// (skip, backoff, regrowth), growth capped where 2x the scale is inf in fp32, and the default
// interval of 2000 clean steps. Then the collapse rule.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/loss_scale.h"
#include "test/test.h"

#define REF "test/ref/grad_scaler/trajectory.txt"
#define MAX_STEPS 4096

// The planted gradient of each step from a plan's "KIND*COUNT" words; returns the step count
static int parse_plan(char* words, float* grad) {
    int n = 0;
    for (char* w = strtok(words, " \n"); w; w = strtok(NULL, " \n")) {
        char kind[8];
        int count = 0;
        if (sscanf(w, "%7[a-z]*%d", kind, &count) != 2 || count < 1 || n + count > MAX_STEPS) {
            fprintf(stderr, "%s: bad plan word '%s'\n", REF, w);
            exit(1);
        }
        const float g = !strcmp(kind, "inf") ? INFINITY : !strcmp(kind, "nan") ? NAN : 0.25f;
        for (int i = 0; i < count; i++) grad[n++] = g;
    }
    return n;
}

typedef struct { int found, skipped, tracker; float scale, param; } StepState;

// One run as the trainer takes a step: the scaled gradient, the check, the update, the step
static void replay(LossScale* s, const float* grad, int n, StepState* out) {
    float param = 1.0f;
    for (int i = 0; i < n; i++) {
        const float g = grad[i] * s->scale;   // what the scaled backward pass produces
        double norm = fabs((double)g);         // (its norm: inf or NaN when g is)
        const int found = !isfinite(norm);
        float inv = 0.0f;
        const int run = loss_scale_step(s, 0, &norm, &inv);
        if (run) param -= 0.5f * (g * inv);
        out[i] = (StepState){found, !run, s->growth_tracker, s->scale, param};
    }
}

static void test_trajectory(void) {
    FILE* f = fopen(REF, "r");
    if (!f) { fprintf(stderr, "cannot open %s (run from the repository root)\n", REF); exit(1); }
    static float grad[MAX_STEPS];
    static StepState got[MAX_STEPS];
    char line[16384], run[32] = "";
    int n = 0, lines = 0, runs = 0;
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '#') continue;
        char name[32];
        int off = 0;
        if (sscanf(line, "plan %31s %n", name, &off) == 1 && off > 0) {
            double init = 0;
            int interval = 0, used = 0;
            TEST_CHECK(sscanf(line + off, "%lf %d %n", &init, &interval, &used) == 2, "plan line '%s'", line);
            LossScale s;
            loss_scale_init(&s);
            s.scale = (float)init;
            s.growth_interval = interval;
            n = parse_plan(line + off + used, grad);
            replay(&s, grad, n, got);
            snprintf(run, sizeof(run), "%s", name);
            runs++;
            continue;
        }
        int step = 0, found = 0, skipped = 0, tracker = 0;
        double scale = 0, param = 0;
        if (sscanf(line, "%31s %d %d %d %lf %d %lf", name, &step, &found, &skipped, &scale, &tracker, &param) != 7) {
            fprintf(stderr, "%s: bad line '%s'\n", REF, line);
            exit(1);
        }
        TEST_CHECK(!strcmp(name, run) && step >= 1 && step <= n, "%s: step %d of run %s outside its plan", REF, step, name);
        if (strcmp(name, run) || step < 1 || step > n) continue;
        const StepState* g = &got[step - 1];
        TEST_CHECK(g->found == found && g->skipped == skipped && g->tracker == tracker && g->scale == (float)scale &&
                   g->param == (float)param,
                   "run %s step %d: got found %d skipped %d scale %.9g tracker %d param %.9g; GradScaler: %d %d %.9g %d %.9g",
                   name, step, g->found, g->skipped, g->scale, g->tracker, g->param, found, skipped, scale, tracker, param);
        lines++;
    }
    fclose(f);
    TEST_CHECK(runs == 4 && lines >= 35, "%s: %d runs, %d steps read", REF, runs, lines);
    printf("ok   %d steps of %d runs equal GradScaler's\n", lines, runs);
}

// The count of skipped steps, and the collapse: the scale below 1 after 17 overflows in a row
static void test_collapse(void) {
    LossScale s;
    loss_scale_init(&s);
    int i = 0;
    float inv;
    double inf = INFINITY;
    while (!loss_scale_collapsed(&s) && i < 100) { loss_scale_step(&s, 0, &inf, &inv); i++; }
    TEST_CHECK(i == 17 && s.skipped == 17 && s.scale == 0.5f, "collapsed after %d overflows, skipped %ld, scale %g", i, s.skipped, s.scale);
    LossScale t;
    loss_scale_init(&t);
    TEST_CHECK(!loss_scale_collapsed(&t) && t.scale == 65536.0f && t.growth_interval == 2000 && t.skipped == 0,
               "the defaults: scale %g interval %d", t.scale, t.growth_interval);
    printf("ok   collapse after %d overflows in a row\n", i);
}

int main(void) {
    test_trajectory();
    test_collapse();
    return test_finish("test_loss_scale");
}
