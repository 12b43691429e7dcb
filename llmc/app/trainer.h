// The one training loop, shared by train_gpt2 (every parameter) and train_lora (adapters on a
// frozen base): run configuration (llmc/run/runconfig.h) -> model -> data -> optimizer -> steps (grad
// accumulation, clipping, AdamW, eval, logging, checkpoints) -> final save.
#ifndef LLMC_TRAINER_H
#define LLMC_TRAINER_H

#include "run/runconfig.h"

#ifdef __cplusplus
extern "C" {
#endif

// Entry point of both binaries. Returns the process exit code.
int trainer_main(int argc, char** argv, TrainMode mode);

#ifdef __cplusplus
}
#endif
#endif // LLMC_TRAINER_H
