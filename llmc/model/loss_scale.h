// Dynamic loss scaling for fp16 training, with torch.amp.GradScaler's rules and defaults: the loss
// is multiplied by `scale` before the backward pass (so small gradients survive fp16's range), the
// gradients are multiplied by 1 / scale before the optimizer step, and after each step's gradients
// are known:
// - any inf or NaN among them: the optimizer step is skipped and the scale halved;
// - otherwise, after growth_interval such steps in a row, the scale doubles (unless that is inf in
//   fp32: then it stays), and the count starts over.
// Defaults: scale 2^16, growth_interval 2000, growth 2, backoff 0.5. test/test_loss_scale.c replays
// GradScaler's own trajectory (test/ref/grad_scaler/trajectory.txt, dev/gen_grad_scaler_ref.py).
#ifndef LLMC_MODEL_LOSS_SCALE_H
#define LLMC_MODEL_LOSS_SCALE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float scale;          // what the loss is multiplied by (fp32, as GradScaler's scale tensor)
    int growth_tracker;   // steps without inf/NaN in a row since the scale last changed
    int growth_interval;  // that many of them double the scale
    float growth, backoff;
    long skipped;         // optimizer steps skipped so far
} LossScale;

void loss_scale_init(LossScale* s);
// The end of a step's backward under loss scaling, as the trainer takes it: *norm is the scaled
// gradients' norm (inf or NaN when one of them is), loss_bad says the loss was not finite.
// Returns 1 when the optimizer step runs, with *norm unscaled and *unscale the factor the update
// multiplies the gradients by (1 / the scale the step ran with); 0 when it is skipped. Updates
// the scale either way.
int loss_scale_step(LossScale* s, int loss_bad, double* norm, float* unscale);
// Whether the scale has collapsed (below 1: every step overflows even unscaled): the run stops.
int loss_scale_collapsed(const LossScale* s);

#ifdef __cplusplus
}
#endif
#endif // LLMC_MODEL_LOSS_SCALE_H
