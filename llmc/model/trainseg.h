// One trainable tensor as the optimizer and the gradient sync see it: a segment of the flat
// trainable space. Its own header so that what lists segments (lora.h, model.h, fsdp.h) need
// not see the optimizer, and the optimizer need not see what lists them.
#ifndef LLMC_TRAINSEG_H
#define LLMC_TRAINSEG_H

#include <stddef.h>
#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char* name;
    floatX* p;          // parameters (backend memory)
    floatX* g;          // gradients (backend memory)
    size_t n;
    int weight_decay;   // 1: decayed (2-D tensors)
    float lr_scale;     // the segment's learning rate is the schedule's times this (1; LoRA+: B's ratio)
    size_t offset;      // position in the flat trainable space
} TrainSeg;

#ifdef __cplusplus
}
#endif
#endif // LLMC_TRAINSEG_H
