// The optimizer offload (opt_offload, --offload-optimizer) on the CUDA backend: bf16 parameters,
// fp32 master weights. The tiny GPT-2 (test/ref/gpt2_tiny) trained for a few steps with AdamW on
// the device and with the state in pinned host memory and AdamW on the CPU (llmc/adamw_host.c)
// gives the same losses and the same parameters, bit for bit; the bytes moved per step are the
// gradients to the host and the parameters back (2 bytes each per trained element). Runs under
// the CUDA-on-CPU harness in CI and as-is on a GPU (from the repository root).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/check.h"
#include "llmc/model.h"
#include "llmc/optimizer.h"
#include "llmc/ops.h"
#include "llmc/rand.h"
#include "test/test.h"

#define STEPS 4
#define NB 2
#define NT 16

// Trains STEPS steps; losses[STEPS], the final parameters (host fp32, pt.total) and the bytes
// moved by the last step.
static void train(int offload, double* losses, float** params, size_t* n_params, size_t* down, size_t* up, size_t* ntrain) {
    Model mdl;
    ModelSpec spec;
    memset(&spec, 0, sizeof(spec));
    spec.path = "test/ref/gpt2_tiny";
    spec.trainable = GPT2_TRAIN_ALL;
    spec.B = NB; spec.T = NT; spec.T_flag = "T";
    model_assemble(&mdl, &spec);
    GPT2* m = &mdl.gpt;
    TrainSeg* segs = (TrainSeg*)mallocCheck(sizeof(TrainSeg) * (size_t)model_max_segments(&mdl));
    const int nseg = model_segments(&mdl, segs);
    Optimizer o;
    opt_init(&o, segs, nseg, 0, (size_t)-1);
    free(segs);
    if (offload) opt_offload(&o);
    int inputs[NB * NT], targets[NB * NT];
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < NB * NT; i++) {
            inputs[i] = (int)(rand_uniform(5, (uint64_t)s, (uint64_t)i) * m->cfg.vocab_size);
            targets[i] = (int)(rand_uniform(6, (uint64_t)s, (uint64_t)i) * m->cfg.vocab_size);
        }
        gpt2_zero_grads(m);
        long nv = 0;
        losses[s] = gpt2_forward(m, inputs, targets, NB, NT, 1.0f / (NB * NT), &nv) / (double)nv;
        gpt2_backward(m, NULL);
        const double norm = sqrt(opt_grad_sumsq(&o, 0, o.total));
        opt_step(&o, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, opt_clip_scale(norm, 1.0f), 1234u + (uint32_t)s);
    }
    *n_params = m->pt.total;
    *params = (float*)mallocCheck(m->pt.total * sizeof(float));
    gpt2_get_params(m, *params);
    *down = o.moved_down; *up = o.moved_up; *ntrain = o.total;
    opt_free(&o);
    model_free(&mdl);
}

int main(void) {
    ops_init(1);
    double l0[STEPS], l1[STEPS];
    float *p0, *p1;
    size_t n0, n1, d0, u0, d1, u1, nt;
    train(0, l0, &p0, &n0, &d0, &u0, &nt);
    train(1, l1, &p1, &n1, &d1, &u1, &nt);
    for (int s = 0; s < STEPS; s++) {
        TEST_CHECK(l0[s] == l1[s], "step %d: loss %.9g with the offload, %.9g without", s + 1, l1[s], l0[s]);
        printf("step %d: loss %.9f (device AdamW) %.9f (offloaded)\n", s + 1, l0[s], l1[s]);
    }
    size_t bad = 0;
    for (size_t i = 0; i < n0; i++) bad += memcmp(&p0[i], &p1[i], sizeof(float)) != 0;
    TEST_CHECK(n0 == n1 && bad == 0, "%zu of %zu parameters differ after %d steps", bad, n0, STEPS);
    if (!bad) printf("ok   the %zu parameters are identical after %d steps\n", n0, STEPS);
    TEST_CHECK(d0 == 0 && u0 == 0, "the device update moved %zu / %zu bytes", d0, u0);
    TEST_CHECK(d1 == nt * sizeof(floatX) && u1 == nt * sizeof(floatX),
               "offload moved %zu bytes to the host and %zu back per step, want %zu each (%zu trained elements)", d1, u1, nt * sizeof(floatX), nt);
    printf("offload: per step %zu bytes to the host (gradients), %zu back (parameters), %zu trained elements\n", d1, u1, nt);
    free(p0); free(p1);
    return test_finish("test_offload_cuda");
}
