// The optimizer offload (opt_offload, --offload-optimizer) on the CUDA backend: bf16 parameters,
// fp32 master weights. The tiny GPT-2 (test/ref/gpt2_tiny) trained for a few steps with AdamW on
// the device and with the state in pinned host memory and AdamW on the CPU (llmc/model/adamw_host.c)
// gives the same losses and the same parameters, bit for bit; the bytes moved per step are the
// gradients to the host and the parameters back (2 bytes each per trained element). The offload
// runs twice: with the default pieces (one per tensor here) and with pieces of 1000 elements, which
// cut tensors apart: the stochastic rounding must still count elements as the kernel does. Runs under
// the CUDA-on-CPU harness in CI and as-is on a GPU (from the repository root).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/check.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "ops/ops.h"
#include "base/rand.h"
#include "test/test.h"

#define STEPS 4
#define NB 2
#define NT 16

// Trains STEPS steps (offload: with pieces of at most `offload` elements; 0: AdamW on the device);
// losses[STEPS], the final parameters (host fp32, pt.total), the bytes moved by the last step and
// its pieces.
static void train(size_t offload, double* losses, float** params, size_t* n_params, size_t* down, size_t* up, size_t* ntrain,
                  int* pieces) {
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
    if (offload) { opt_offload(&o); o.offload_chunk = offload; }
    int inputs[NB * NT], targets[NB * NT];
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < NB * NT; i++) {
            inputs[i] = (int)(rand_uniform(5, (uint64_t)s, (uint64_t)i) * m->cfg.vocab_size);
            targets[i] = (int)(rand_uniform(6, (uint64_t)s, (uint64_t)i) * m->cfg.vocab_size);
        }
        gpt2_zero_grads(m);
        long nv = 0;
        losses[s] = gpt2_forward(m, inputs, targets, NULL, NB, NT, 1.0f / (NB * NT), &nv) / (double)nv;
        gpt2_backward(m, NULL);
        const double norm = sqrt(opt_grad_sumsq(&o, 0, o.total));
        opt_step(&o, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, opt_clip_scale(norm, 1.0f), 1234u + (uint32_t)s);
    }
    *n_params = m->pt.total;
    *params = (float*)mallocCheck(m->pt.total * sizeof(float));
    gpt2_get_params(m, *params);
    *down = o.moved_down; *up = o.moved_up; *ntrain = o.total; *pieces = o.pieces;
    opt_free(&o);
    model_free(&mdl);
}

static int check_run(const char* name, size_t chunk, const double* l0, const float* p0, size_t n0, int* pieces) {
    double l1[STEPS];
    float* p1;
    size_t n1, d1, u1, nt;
    train(chunk, l1, &p1, &n1, &d1, &u1, &nt, pieces);
    for (int s = 0; s < STEPS; s++) {
        TEST_CHECK(l0[s] == l1[s], "%s, step %d: loss %.9g with the offload, %.9g without", name, s + 1, l1[s], l0[s]);
        printf("%s, step %d: loss %.9f (device AdamW) %.9f (offloaded)\n", name, s + 1, l0[s], l1[s]);
    }
    size_t bad = 0;
    for (size_t i = 0; i < n0; i++) bad += memcmp(&p0[i], &p1[i], sizeof(float)) != 0;
    TEST_CHECK(n0 == n1 && bad == 0, "%s: %zu of %zu parameters differ after %d steps", name, bad, n0, STEPS);
    if (!bad) printf("ok   %s: the %zu parameters are identical after %d steps (%d pieces per step)\n", name, n0, STEPS, *pieces);
    TEST_CHECK(d1 == nt * sizeof(floatX) && u1 == nt * sizeof(floatX),
               "%s: offload moved %zu bytes to the host and %zu back per step, want %zu each (%zu trained elements)", name, d1, u1,
               nt * sizeof(floatX), nt);
    printf("%s: per step %zu bytes to the host (gradients), %zu back (parameters), %zu trained elements\n", name, d1, u1, nt);
    free(p1);
    return (int)nt;
}

int main(void) {
    ops_init(1);
    double l0[STEPS];
    float* p0;
    size_t n0, d0, u0, nt;
    int pieces0, pieces_big, pieces_small;
    train(0, l0, &p0, &n0, &d0, &u0, &nt, &pieces0);
    TEST_CHECK(d0 == 0 && u0 == 0, "the device update moved %zu / %zu bytes", d0, u0);
    check_run("offload", OPT_OFFLOAD_CHUNK, l0, p0, n0, &pieces_big);
    check_run("offload in pieces of 1000", 1000, l0, p0, n0, &pieces_small);
    TEST_CHECK(pieces_small >= (int)(nt / 1000) && pieces_small > pieces_big, "pieces of 1000: %d per step for %zu elements (%d with the default)",
               pieces_small, nt, pieces_big);
    free(p0);
    return test_finish("test_offload_cuda");
}
