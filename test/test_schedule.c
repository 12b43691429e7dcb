// Learning-rate schedules at the points their definitions pin down: linear warmup from lr/warmup
// to lr (llm.c's convention), cosine halfway between lr and the floor at mid-decay, linear decay,
// wsd flat until the cooldown and linear to the floor after it.
#include "test.h"
#include "../llmc/model/schedule.h"

static void near(const char* what, float got, double want) {
    TEST_CHECK(fabs(got - want) <= 1e-6 * fabs(want) + 1e-12, "%s: %.9g, want %.9g", what, got, want);
}

int main(void) {
    LRSchedule s = { SCHED_COSINE, 1e-3f, 10, 110, 0.1f, 0.2f };
    near("warmup first", sched_lr(&s, 0), 1e-4);
    near("warmup last", sched_lr(&s, 9), 1e-3);
    near("cosine start", sched_lr(&s, 10), 1e-3);
    near("cosine middle", sched_lr(&s, 60), (1e-3 + 1e-4) / 2);
    near("cosine end", sched_lr(&s, 110), 1e-4);
    near("cosine quarter", sched_lr(&s, 35), 1e-4 + 0.5 * (1 + cos(M_PI * 0.25)) * 9e-4);
    s.kind = SCHED_LINEAR;
    near("linear middle", sched_lr(&s, 60), 5.5e-4);
    near("linear end", sched_lr(&s, 110), 1e-4);
    s.kind = SCHED_CONSTANT;
    near("constant", sched_lr(&s, 100), 1e-3);
    s.kind = SCHED_WSD; // cooldown over the last 20% of 110 steps = 22 steps, from step 88
    near("wsd stable", sched_lr(&s, 87), 1e-3);
    near("wsd cooldown start", sched_lr(&s, 88), 1e-3);
    near("wsd cooldown middle", sched_lr(&s, 99), 5.5e-4);
    near("wsd end", sched_lr(&s, 110), 1e-4);
    TEST_CHECK(sched_parse("wsd") == SCHED_WSD && sched_parse("cosine") == SCHED_COSINE && sched_parse("step") == -1, "names");
    for (int k = 0; k < 4; k++) TEST_CHECK(sched_parse(sched_name((SchedKind)k)) == k, "name round trip %d", k);
    return test_finish("test_schedule");
}
